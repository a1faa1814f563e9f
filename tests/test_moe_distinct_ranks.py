"""DeepEP and HybridEP send a token once per destination GPU, not once per expert (parcalc.core.timing.moe, issues #31/#32).

DeepEP's get_dispatch_layout (deepseek-ai/DeepEP @dd758caf csrc/kernels/legacy/layout.cu) sets is_token_in_rank[t][r] when
any of token t's top-k experts lives on rank r (`is_in_rank[rank_idx]++`, then `is_in_rank[j] > 0`) and counts
num_tokens_per_rank from those bits; the kernels send a token where the bit is set, once. HybridEP's dispatch unicasts a
token once to each GPU of the node that needs it (NVIDIA's hybrid-ep code, shifangx/DeepEP @c9f647dd
csrc/kernels/hybrid_ep_backend.cuh S2G_warp_group_device_function). So a token moves D copies, D the distinct ranks among its
top-k: D = R (1 - C(E - E/R, k) / C(E, k)) for R ranks of E/R experts each under uniform routing, and over the M chosen nodes'
experts under node-limited routing. Megatron's all-to-all dispatcher permutes per expert before its all-to-all and sends k.
"""

from __future__ import annotations

import itertools
import sys
from math import comb
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from parcalc.core.choices import Collective
from parcalc.core.timing.moe import ExpertShard, exchange_time, ranks_per_token, remote_nodes_per_token, routed_tokens
from parcalc.core.timing.network import collective_time, placement


def _layout_ranks(top_idx: torch.Tensor, experts: int, ranks: int) -> float:
    """DeepEP's get_dispatch_layout on the CPU: is_token_in_rank from each token's top-k, then the mean of its row sums
    (num_tokens_per_rank summed, over the tokens)."""
    rank_of = top_idx // (experts // ranks)
    is_token_in_rank = torch.zeros(top_idx.shape[0], ranks, dtype=torch.bool).scatter_(1, rank_of, True)
    return is_token_in_rank.sum(dim=1).double().mean().item()


@pytest.mark.parametrize(("experts", "top_k", "ranks"), [(128, 8, 8), (256, 8, 64), (128, 8, 32), (64, 6, 8)])
def test_distinct_ranks_match_random_top_k_routing(experts: int, top_k: int, ranks: int) -> None:
    """Monte Carlo of uniform routing: torch.topk of i.i.d. router scores (each k-subset equally likely), counted as DeepEP's
    layout kernel counts; 200,000 tokens put the mean within about 0.01 of its expectation (its standard deviation is < 1)."""
    gen = torch.Generator().manual_seed(experts * 1000 + ranks)
    scores = torch.rand(200_000, experts, generator=gen)
    measured = _layout_ranks(scores.topk(top_k, dim=1).indices, experts, ranks)
    assert ranks_per_token(experts, top_k, ranks, 1, None) == pytest.approx(measured, abs=0.015)
    assert measured < top_k  # fewer copies than the all-to-all's k


def test_distinct_ranks_exact_small_case() -> None:
    """Every 3-subset of 12 experts on 4 ranks of 3, enumerated: E[distinct ranks] = 4 (1 - C(9, 3)/C(12, 3)) = 4 x 136/220."""
    subsets = list(itertools.combinations(range(12), 3))
    exact = sum(len({e // 3 for e in s}) for s in subsets) / len(subsets)
    assert exact == pytest.approx(4 * (1 - comb(9, 3) / comb(12, 3)))
    assert ranks_per_token(12, 3, 4, 1, None) == pytest.approx(exact)


def test_distinct_ranks_node_limited_enumerated() -> None:
    """Node-limited routing (DeepSeek-V3 sec. 2.1.2): 3 nodes of 2 ranks of 4 experts (E 24, R 6), top-3 within M = 2 nodes:
    every choice of 2 nodes and of 3 of their 16 experts, enumerated; D = M g (1 - C(E' - E/R, k)/C(E', k)), E' = 16."""
    per_rank, g, nodes, m, k = 4, 2, 3, 2, 3
    total, count = 0, 0
    for chosen in itertools.combinations(range(nodes), m):
        pool = [e for n in chosen for e in range(n * g * per_rank, (n + 1) * g * per_rank)]
        for s in itertools.combinations(pool, k):
            total += len({e // per_rank for e in s})
            count += 1
    exact = total / count
    assert exact == pytest.approx(m * g * (1 - comb(16 - 4, 3) / comb(16, 3)))
    assert ranks_per_token(24, 3, 6, 3, 2) == pytest.approx(exact)
    assert ranks_per_token(24, 3, 6, 3, None) > exact  # the limit concentrates the top-k on fewer ranks


def test_remote_nodes_unchanged_by_the_refactor() -> None:
    """remote_nodes_per_token now shares distinct_holders: DeepSeek-V3's 256 experts, top-8, 8 nodes: 8 (1 - C(224, 8)/C(256, 8))
    x 7/8 (tests/test_step_time_modern.py holds the same values)."""
    assert remote_nodes_per_token(256, 8, 8, None) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)) * 7 / 8)
    assert remote_nodes_per_token(256, 8, 8, 4) == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)) * 7 / 8)


def test_mi355x_row_exchange_by_hand() -> None:
    """The Primus MI355X Qwen3-30B-A3B row (tests/published_blackwell_amd_runs.py: EP 8 on one node, micro-batch 8 x 4096, TP 1,
    hidden 2048, BF16 dispatch): T = 32,768 tokens a rank; uniform routing of top-8 over 128 experts on 8 ranks reaches
    D = 8 (1 - C(112, 8)/C(128, 8)) = 5.339 ranks, so DeepEP's intranode dispatch is an all-to-all of T D m a rank, m = the row
    (h 2 = 4,096 B) + its int source index (4 B) + k = 8 int64 top-k indices and fp32 weights (96 B) = 4,196 B (DeepEP
    @dd758caf intranode.cu dispatch 377-393; Primus-Turbo @a6a16cdc intranode.cu 331-349, int64 topk_idx): 734.1 MB (716.7 MB
    of rows; 7/8 leaving the GPU: 642.4 MB), where the all-to-all dispatcher's is T k h 2 = 1,073.7 MB (939.5 MB leaving).
    HybridEP's message on one node of 8: the row + the node's 128 experts' fp32 probabilities, 4,608 B: 806.2 MB."""
    from test_published_blackwell_amd import RUNS, fit_inputs

    run = next(r for r in RUNS if r.key == "primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline")
    model, config, training, cluster = fit_inputs(run)
    tokens = routed_tokens(config.micro_batch, training.seq_len, 1, False)
    assert (tokens, model.hidden, model.moe.experts, model.moe.top_k) == (32768, 2048, 128, 8)
    d = 8 * (1 - comb(112, 8) / comb(128, 8))
    assert d == pytest.approx(5.3394, abs=1e-4)
    assert ranks_per_token(128, 8, 8, 1, None) == pytest.approx(d)
    group = placement(8, 1, cluster.gpus_per_node)
    assert (group.size, group.nodes) == (8, 1)
    assert 32768 * d * 2048 * 2 == pytest.approx(716.7e6, rel=1e-3)  # the rows alone
    deep_bytes = 32768 * d * (2048 * 2 + 4 + 8 * (8 + 4))
    assert deep_bytes == pytest.approx(734.1e6, rel=1e-3)
    assert deep_bytes * 7 / 8 == pytest.approx(642.4e6, rel=1e-3)
    deep = exchange_time(model, tokens, 2.0, ExpertShard(ep=8, dispatcher="deepep"), cluster.fabric, group)
    assert deep == pytest.approx(collective_time(Collective.ALL_TO_ALL, deep_bytes, group, cluster.fabric).time)
    hybrid = exchange_time(model, tokens, 2.0, ExpertShard(ep=8, dispatcher="hybridep"), cluster.fabric, group)
    hybrid_bytes = 32768 * d * (2048 * 2 + 128 * 4)
    assert hybrid_bytes == pytest.approx(806.2e6, rel=1e-3)
    assert hybrid == pytest.approx(collective_time(Collective.ALL_TO_ALL, hybrid_bytes, group, cluster.fabric).time)
    alltoall = exchange_time(model, tokens, 2.0, ExpertShard(ep=8, dispatcher="alltoall"), cluster.fabric, group)
    assert alltoall == pytest.approx(collective_time(Collective.ALL_TO_ALL, 32768 * 8 * 2048 * 2, group, cluster.fabric).time)
    assert deep / alltoall == pytest.approx(d / 8 * 4196 / 4096, rel=0.01)  # bandwidth-bound: the latency is microseconds of milliseconds


def test_gb200_row_dispatch_bytes_by_hand() -> None:
    """The GB200 Qwen3-30B-A3B MXFP8 row (tests/published_blackwell_amd_runs.py: HybridEP, EP 8 in one NVLink domain, MBS 4 x
    4096, BF16 dispatch: HybridEP refuses FP8, Megatron-LM fused_a2a.py): T = 16,384 tokens a rank, D = 5.339 ranks, each copy
    the 4,096 B row and the fp32 probabilities of the node's 16 x 8 = 128 experts (512 B; shifangx/DeepEP @c9f647dd
    hybrid_ep_backend.cuh, intra_node_prob_buffer[NUM_OF_EXPERTS_PER_RANK * NUM_OF_RANKS_PER_NODE]): T D 4,608 B = 403.1 MB a
    dispatch (358.3 MB of rows). The forward combine and the combine's gradient carry the rows alone, the dispatch's gradient
    the rows and the probabilities' gradients (combine_with_unpermute(probs=grad_probs))."""
    from test_published_blackwell_amd import RUNS, fit_inputs

    from parcalc.core.timing.moe import layer_exchange

    run = next(r for r in RUNS if r.key == "mb2511-gb200-qwen3-30b-a3b-8gpu-mxfp8")
    model, config, training, cluster = fit_inputs(run)
    tokens = routed_tokens(config.micro_batch, training.seq_len, 1, False)
    experts = config.experts()
    assert (tokens, experts.dispatcher, experts.ep) == (16384, "hybridep", 8)
    group = placement(8, 1, cluster.gpus_per_node)
    assert (group.size, group.nodes) == (8, 1)
    d = 8 * (1 - comb(112, 8) / comb(128, 8))
    assert 16384 * d * 4096 == pytest.approx(358.3e6, rel=1e-3)
    exchange = layer_exchange(model, tokens, 2.0, False, experts, cluster.fabric, cluster.gpus_per_node)
    assert exchange.dispatch_bytes == pytest.approx(16384 * d * 4608)
    assert exchange.dispatch_bytes == pytest.approx(403.1e6, rel=1e-3)

    def a2a(message: float) -> float:
        return collective_time(Collective.ALL_TO_ALL, 16384 * d * message, group, cluster.fabric).time

    assert exchange.forward == pytest.approx(a2a(4608) + a2a(4096))  # dispatch with probabilities, combine without
    assert exchange.backward == pytest.approx(a2a(4096) + a2a(4608))  # the combine's gradient, the dispatch's with them


def test_messages_by_exchange() -> None:
    """message_bytes for each of a layer's four exchanges, written out from the kernels (parcalc.core.timing.moe, "Messages";
    Qwen3-30B-A3B: h 2048, k 8, 128 experts; a BF16 row of 4,096 B). DeepEP intranode (intranode.cu @dd758caf): + 4 B source
    index always, + 8 x (8 B int64 index + 4 B weight) in the forward dispatch, + 8 x 4 B weight gradients in the dispatch's
    gradient (a combine with topk_weights); the combine and the combine's gradient (a cached dispatch: no top-k) the index
    alone. DeepEP internode (EP 16 on two nodes of 8): align16(row + 8 B SourceMeta + 8 x (4 + 4) B) = 4,176, align16(row + 8)
    = 4,112, align16(row + 8 + 32) = 4,144. HybridEP: + the node's experts' fp32 probabilities in the dispatch and its
    gradient (8 GPUs: 128 x 4 = 512 B; two nodes of 8 of EP 16: 8 x 8 x 4 = 256 B). The all-to-all dispatcher: the row."""
    from parcalc.core.timing.moe import EXCHANGES, message_bytes
    from parcalc.core.timing.network import Placement
    from parcalc.presets import load_model

    model = load_model("qwen3-30b-a3b", ())
    one, two = Placement(8, 8), Placement(16, 8)
    expected = {
        ("deepep", one): (4196, 4100, 4100, 4132),
        ("deepep", two): (4176, 4112, 4112, 4144),
        ("hybridep", one): (4608, 4096, 4096, 4608),
        ("hybridep", two): (4352, 4096, 4096, 4352),
        ("alltoall", one): (4096, 4096, 4096, 4096),
    }
    for (dispatcher, group), want in expected.items():
        got = tuple(message_bytes(model, 4096.0, dispatcher, exchange, group) for exchange in EXCHANGES)
        assert got == want, (dispatcher, group)
    assert message_bytes(model, 2048 * (1 + 4 / 128), "deepep", "dispatch", two) == 2192  # FP8: align16(2,112 + 8 + 64 = 2,184)


def test_internode_nvlink_share_is_distinct_ranks() -> None:
    """Across nodes the network still carries one copy per remote node (T n_remote h) and NVLink the distinct ranks less the
    rail peer's own, T D h (g - 1)/g: DeepSeek-V3's EP 64 on 8-GPU nodes, 256 experts, top-8, M = 4 nodes; checked against
    node_forwarded_exchange with the bytes written out by hand."""
    from parcalc.core.fit import Cluster
    from parcalc.core.timing.network import node_forwarded_exchange
    from parcalc.presets import load_gpu, load_link, load_model

    model = load_model("deepseek-v3", ())
    gpu = load_gpu("h100-sxm5", ())
    cluster = Cluster(512, 8, gpu.dtypes["bf16"].dense_peak.value, gpu.memory_capacity.value, load_link("nvlink4", ()),
                      load_link("ib-ndr", ()), gpu=gpu)  # fmt: skip
    group = placement(64, 1, 8)
    assert (group.size, group.per_node, group.nodes) == (64, 8, 8)
    tokens, h = 4096, 7168
    assert model.hidden == h
    d = 4 * 8 * (1 - comb(128 - 4, 8) / comb(128, 8))  # M g (1 - C(E' - E/R, k)/C(E', k)), E' = 4 x 32 = 128
    remote = 4 * (1 - comb(96, 8) / comb(128, 8)) * 7 / 8
    got = exchange_time(model, tokens, 2.0, ExpertShard(ep=64, dispatcher="deepep", max_nodes_per_token=4), cluster.fabric, group)
    message = 14_416  # DeepEP internode: align16(h 2 + 8 B SourceMeta + 8 x (4 B index + 4 B weight)) = align16(14,408)
    assert message == -(-(h * 2 + 8 + 8 * 8) // 16) * 16
    want = node_forwarded_exchange(tokens * remote * message, tokens * d * message * 7 / 8, cluster.fabric)
    assert got == pytest.approx(want)
    assert d == pytest.approx(7.36, abs=0.01)  # of the k = 8 copies the old account forwarded


def _primus_even_token_indices(tokens: int, top_k: int, experts: int) -> torch.Tensor:
    """Primus's 'even' force-balanced routing, copied from AMD-AGI/Primus @fd1eeabb
    primus/backends/megatron/core/extensions/primus_turbo.py (PrimusTurboDeepEPTokenDispatcher.dispatch_preprocess, with
    moe_router_force_load_balancing_type == "even"): `torch.arange(num_tokens * self.config.moe_router_topk).view(num_tokens,
    self.config.moe_router_topk) % self.config.num_moe_experts`, handed to DeepEP's _pre_dispatch as the token indices."""
    return torch.arange(tokens * top_k).view(tokens, top_k) % experts


@pytest.mark.parametrize(("experts", "top_k", "ranks", "expected"), [
    (128, 8, 8, 1.0),  # Qwen3-30B-A3B on 8 MI355X (the Primus rows): 8 consecutive experts from a multiple of 8, in one rank's 16
    (256, 8, 64, 2.0),  # DeepSeek-V3's 256 on EP 64: 4 a rank, a token's 8 on 2 ranks
    (64, 6, 8, 1.5),  # starts 0, 6, 12, ... mod 64 (period 32): 16 of 32 tokens straddle two ranks of 8
    (160, 8, 32, 2.4),  # 5 experts a rank: a start 0, 3, 1, 4, 2 into its rank (period 20), so 2, 3, 2, 3, 2 ranks
])  # fmt: skip
def test_round_robin_distinct_ranks_match_primus_token_indices(experts: int, top_k: int, ranks: int, expected: float) -> None:
    """D under round-robin routing against Primus's own token_indices formula for a micro-batch of 32,768 tokens (the MI355X
    rows' b s), counted as DeepEP's get_dispatch_layout counts (is_token_in_rank, _layout_ranks): the period enumeration in
    parcalc.core.timing.moe.round_robin_holders gives the same mean; the expected values are counted by hand above."""
    from parcalc.core.timing.moe import round_robin_holders

    measured = _layout_ranks(_primus_even_token_indices(32768, top_k, experts), experts, ranks)
    got = ranks_per_token(experts, top_k, ranks, 1, None, "round-robin")
    assert got == pytest.approx(expected)
    assert got == pytest.approx(measured, abs=2e-4)  # 32,768 tokens are whole periods but for (160, 8): 8 tokens over
    assert round_robin_holders(experts, top_k, experts // ranks) == got
    assert got < ranks_per_token(experts, top_k, ranks, 1, None)  # fewer copies than uniform routing's


def test_round_robin_remote_nodes_by_sender() -> None:
    """Across nodes: every rank runs the same token indices, so a sender on node n sends token t to the nodes of its
    experts but its own. 60 experts, top-8, 6 ranks of 10 on 3 nodes of 20 (a token straddles two nodes when its
    8 start at 16, 36 or 56 mod 60: 3 of the period's 15 tokens): counted for senders on every node, the mean remote
    nodes is (1 + 3/15) x 2/3 = 0.8, what remote_nodes_per_token gives; and 256 experts on 8 nodes of 32 (DeepSeek-V3's EP 64)
    put each token's 8 on one node, 7/8 of them another's."""
    indices = _primus_even_token_indices(15 * 1000, 8, 60)
    node_of = indices // 20
    remote = [sum(len(set(row.tolist()) - {sender}) for row in node_of) / len(node_of) for sender in range(3)]
    assert sum(remote) / 3 == pytest.approx(0.8)
    assert remote_nodes_per_token(60, 8, 3, None, "round-robin") == pytest.approx(0.8)
    assert remote_nodes_per_token(256, 8, 8, None, "round-robin") == pytest.approx(7 / 8)
    assert remote_nodes_per_token(256, 8, 8, None) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)) * 7 / 8)  # uniform: 5.25


def test_mi355x_row_round_robin_exchange_by_hand() -> None:
    """The Primus MI355X rows ran the 'even' routing (tests/published_blackwell_amd_runs.py routing="round-robin"): every token
    to one rank, so DeepEP's intranode dispatch is an all-to-all of T x 1 x h x 2 B = 32,768 x 2,048 x 2 = 134.2 MB a rank
    (7/8 of it, 117.4 MB, leaving the GPU), 1/5.339 of uniform routing's 716.7 MB; the all-to-all dispatcher still sends k
    copies a token (1,073.7 MB) whatever the routing."""
    from test_published_blackwell_amd import RUNS, fit_inputs

    run = next(r for r in RUNS if r.key == "primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline")
    model, config, training, cluster = fit_inputs(run)
    assert config.experts().routing == "round-robin"
    tokens = routed_tokens(config.micro_batch, training.seq_len, 1, False)
    group = placement(8, 1, cluster.gpus_per_node)
    one_rank = 32768 * 1 * 2048 * 2
    assert one_rank == pytest.approx(134.2e6, rel=1e-3)
    assert one_rank * 7 / 8 == pytest.approx(117.4e6, rel=1e-3)
    # the dispatch's message: the row, DeepEP's 4 B source index, k x (8 B top-k index + 4 B weight) (message_bytes)
    dispatch = 32768 * 1 * (2048 * 2 + 4 + 8 * 12)
    even = exchange_time(model, tokens, 2.0, ExpertShard(ep=8, dispatcher="deepep", routing="round-robin"), cluster.fabric, group)
    assert even == pytest.approx(collective_time(Collective.ALL_TO_ALL, dispatch, group, cluster.fabric).time)
    uniform = exchange_time(model, tokens, 2.0, ExpertShard(ep=8, dispatcher="deepep"), cluster.fabric, group)
    # 1/5.339 of the bytes; the all-to-all's fixed latency (~17 us of 0.37 ms) keeps the ratio a little above it
    assert even / uniform == pytest.approx(1 / 5.3394, rel=0.06)
    assert even > uniform / 5.3394
    alltoall = [exchange_time(model, tokens, 2.0, ExpertShard(ep=8, routing=r), cluster.fabric, group) for r in ("uniform", "round-robin")]
    assert alltoall[0] == alltoall[1]


@pytest.mark.parametrize(("shard", "message"), [
    (ExpertShard(ep=8, dispatcher="deepep", routing="even"), "--moe-routing: one of uniform, round-robin"),
    (ExpertShard(ep=8, dispatcher="deepep", routing="round-robin", max_nodes_per_token=1), "node limit applies to --moe-routing uniform"),
    (ExpertShard(ep=8, dispatcher="deepep", routing="round-robin", imbalance=1.2), "busiest rank's share is 1, not 1.2"),
])  # fmt: skip
def test_round_robin_refuses_what_it_sets_itself(shard: ExpertShard, message: str) -> None:
    """Round-robin routing fixes each token's experts: no node limit, every expert the same tokens (rho = 1)."""
    from parcalc.core.timing.moe import check_routing
    from parcalc.errors import InputError
    from parcalc.presets import load_model

    with pytest.raises(InputError, match=message):
        check_routing(load_model("qwen3-30b-a3b", ()), shard, 1)
