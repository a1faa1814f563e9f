"""What an MoE dispatcher sends under FP8 and the SMs its kernels hold, by the stack that runs it (parcalc.core.timing.moe).

- Megatron-Core hands DeepEP the BF16 hidden states whatever the FP8 recipe (megatron/core/transformer/moe/fused_a2a.py
  FusedDispatch: `buffer.dispatch(x, ...)`; token_dispatcher.py `fused_dispatch(hidden_states, ...)`, core_v0.13.0 to
  @2edffadb), and HybridEP refuses FP8 ('HybridEP dispatcher does not support fp8 dispatch now'): the megatron profile's
  fp8_dispatch is false. DeepSeek-V3's own stack dispatched FP8 with one fp32 scale per 128 values (sec. 3.3.2; DeepEP README).
- SMs a dispatch or combine holds while it hides under compute: DeepEP 20 (Megatron-Core's moe_deepep_num_sms default),
  HybridEP 32 (Megatron-Bridge's performance recipes' moe_hybridep_num_sms), NCCL's all-to-all one CTA per p2p channel, 32 on
  an 8 x H100 node (its NCCL init line: '32 p2p channels'; NCCL src/graph/paths.cc: the 24 collective channels rounded up to
  a power of two).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from math import comb
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import modern_cases

from parcalc.core.fit import estimate
from parcalc.core.timing.moe import (
    COMM_SMS,
    COMM_SMS_SOURCE,
    DISPATCHERS,
    FP8_DISPATCH_BYTES,
    ExchangeTimes,
    exposed_per_layer,
    layer_exchange,
    remote_nodes_per_token,
    routed_tokens,
)
from parcalc.presets import load_framework, load_gpu

DSV3 = "mcore-moe-deepseek-v3-1024xh100-fp8blk"  # DeepEP, FP8 blockwise, EP 64 over 8 nodes (tests/modern_cases.py)


def _case(key: str) -> modern_cases.Case:
    return next(c for c in modern_cases.CASES + modern_cases.KNOWN_GAPS if c.key == key)


def test_megatron_dispatches_bf16_under_fp8() -> None:
    framework = load_framework("megatron", ())
    assert framework.fp8_dispatch is False
    assert "fused_a2a.py" in framework.source("fp8_dispatch")
    assert load_framework("torchtitan", ()).fp8_dispatch is True  # the default: DeepEP's FP8 dispatch where a stack uses it


def test_fp8_dispatch_sends_one_byte_and_a_scale_per_128() -> None:
    """dispatch_bytes = T D m, m the internode message of a row of h x (2 in BF16, 1 + 4/128 in FP8): DeepSeek-V3 (h 7168,
    top 8) at T = 2048 tokens a rank; DeepEP sends a token once per destination rank, D = M g (1 - C(E' - E/R, k)/C(E', k))
    = 32 (1 - C(124, 8)/C(128, 8)) = 7.359 distinct ranks of its top-8 within M = 4 nodes of 8 GPUs (E' = 128 experts, 4 a
    rank; tests/test_moe_distinct_ranks.py). DeepEP @dd758caf internode.cu get_num_bytes_per_token: align_up(row + 8 B
    SourceMeta + k int32 indices + k fp32 weights, 16): BF16 align16(14,336 + 8 + 64) = 14,416 B, FP8 align16(7,392 + 72) =
    7,472 B."""
    model, config, training, cluster = modern_cases.inputs(_case(DSV3))
    layout = config.layout
    tokens = routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel)
    assert tokens == 2048
    experts = config.experts()
    bf16 = layer_exchange(model, tokens, 2.0, False, experts, cluster.fabric, cluster.gpus_per_node)
    fp8 = layer_exchange(model, tokens, 2.0, True, experts, cluster.fabric, cluster.gpus_per_node)
    d = 32 * (1 - comb(124, 8) / comb(128, 8))
    assert d == pytest.approx(7.359, abs=1e-3)
    assert bf16.dispatch_bytes == pytest.approx(2048 * d * 14_416)
    assert fp8.dispatch_bytes == pytest.approx(2048 * d * 7_472)
    assert pytest.approx(1.03125) == FP8_DISPATCH_BYTES
    assert fp8.backward == bf16.backward  # the gradients go back in BF16 either way
    assert fp8.forward < bf16.forward  # only the dispatch is smaller


def test_megatron_rows_pay_the_bf16_dispatch() -> None:
    """DeepSeek-V3 on 1,024 H100 under Megatron (fp8_dispatch false) exchanges more than the same run on a stack that
    dispatches FP8: t_ep 1.45 s against 1.28 s, the step 21.28 s against 21.11 s (the row's +10.0 % -> +9.0 %)."""
    model, config, training, cluster = modern_cases.inputs(_case(DSV3))
    megatron = estimate(model, config, training, cluster)
    fp8_stack = estimate(model, config, training, replace(cluster, framework=replace(cluster.framework, fp8_dispatch=True)))
    assert megatron.ep_comm is not None and fp8_stack.ep_comm is not None
    assert megatron.ep_comm.value > fp8_stack.ep_comm.value * 1.05
    assert megatron.step.value > fp8_stack.step.value


def test_alltoall_sms_are_nccls_p2p_channels_on_an_h100_node() -> None:
    """NCCL's p2pnChannels = pow2Up(min(coll channels, NCCL_MAX_P2P_NCHANNELS)) (src/graph/paths.cc): the 24 collective
    channels of an 8 x H100 node (presets/gpus/h200.yaml nccl_channels, NCCL's init line there) -> 32, which the same
    init line prints ('32 p2p channels')."""
    gpu = load_gpu("h200", ())
    assert gpu.nccl_channels is not None and gpu.nccl_channels.value == 24
    pow2_up = 1 << (int(gpu.nccl_channels.value) - 1).bit_length()
    assert COMM_SMS["alltoall"] == pow2_up == 32
    assert "32 p2p channels" in COMM_SMS_SOURCE["alltoall"]


@pytest.mark.parametrize(("dispatcher", "sms", "where"), [
    ("deepep", 20, "moe_deepep_num_sms: int = 20"),  # Megatron-LM @2edffadb transformer_config.py
    ("hybridep", 32, "moe_hybridep_num_sms = 32"),  # Megatron-Bridge scripts/performance/utils/overrides.py @v0.4.2
    ("alltoall", 32, "p2p channels"),
])  # fmt: skip
def test_hidden_exchange_slows_the_compute_by_its_dispatchers_sms(dispatcher: str, sms: int, where: str) -> None:
    """Fully hidden under 1F1B (1 ms dispatch + combine each way under 10 ms of compute): exposed = hidden x s_comm / S,
    2 ms x s / 132 on an H100; alone (a warm-up micro-batch) all 2 ms."""
    assert dispatcher in DISPATCHERS
    assert COMM_SMS[dispatcher] == sms and where in COMM_SMS_SOURCE[dispatcher]
    exchange = ExchangeTimes(1e-3, 1e-3, 0.0)
    paired, alone = exposed_per_layer(exchange, 10e-3, 10e-3, 0.0, 0.0, "1f1b", 132, False, dispatcher)
    assert alone == pytest.approx(2e-3)
    assert paired == pytest.approx(2e-3 * sms / 132)


def test_hybridep_moves_tokens_as_deepep() -> None:
    """HybridEP takes DeepEP's route (one copy per destination node, forwarded over NVLink), the same copies; their messages
    differ (issue 32): Qwen3-30B-A3B (h 2048, 128 experts, top 8) on EP 16 over two 8-GPU nodes, BF16 rows of 4,096 B.
    HybridEP's forward dispatch sends each copy with the fp32 probabilities of the node's 8 x 8 = 64 experts (shifangx/DeepEP
    @c9f647dd hybrid_ep_backend.cuh, intra_node_prob_buffer, NUM_OF_EXPERTS_PER_RANK x NUM_OF_RANKS_PER_NODE): 4,096 + 256 =
    4,352 B; DeepEP's internode message align16(4,096 + 8 + 8 x 4 + 8 x 4) = 4,176 B. It never dispatches FP8."""
    model, config, training, cluster = modern_cases.inputs(_case("mbridge-skill-qwen3-30b-a3b-16xh100-bf16-hybridep-overlap"))
    layout = config.layout
    tokens = routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel)
    hybrid = config.experts()
    assert hybrid.dispatcher == "hybridep" and hybrid.ep == 16
    deep = replace(hybrid, dispatcher="deepep")
    a = layer_exchange(model, tokens, 2.0, False, hybrid, cluster.fabric, cluster.gpus_per_node)
    b = layer_exchange(model, tokens, 2.0, False, deep, cluster.fabric, cluster.gpus_per_node)
    assert a.dispatch_bytes / b.dispatch_bytes == pytest.approx(4_352 / 4_176)
    assert a.forward > b.forward and a.backward > b.backward  # the probabilities go both ways (dispatch, its gradient)
    assert layer_exchange(model, tokens, 2.0, True, hybrid, cluster.fabric, cluster.gpus_per_node) == a


def test_fit_takes_hybridep(run_json, run_error) -> None:
    args = ["fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "1024", "--seq-len", "4096",
            "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--zero", "1", "--ep-overlap", "1f1b"]
    hybrid = run_json(*args, "--moe-dispatcher", "hybridep")
    deep = run_json(*args, "--moe-dispatcher", "deepep")
    # the same exchanges, more of the GPU held while they hide: hybridep's step is the slower
    assert hybrid["results"]["t_step"]["value"] > deep["results"]["t_step"]["value"]
    line = run_error([*args, "--moe-dispatcher", "nccl"])
    assert "alltoall, deepep, hybridep" in line


def test_fit_takes_round_robin_routing(run_json, run_error) -> None:
    """--moe-routing round-robin (Primus's 'even' routing, token t to experts (t k + j) mod E): Qwen3-30B-A3B's 128 experts on
    EP 16 (two nodes) put a token's 8 consecutive experts on one rank of 8, so DeepEP sends one copy a token where uniform
    routing sends D = 16 (1 - C(120, 8)/C(128, 8)) = 6.92 (tests/test_moe_distinct_ranks.py): a shorter exchange, and the
    setting in the JSON; NCCL's all-to-all sends k copies either way, so its step does not move. A choice outside uniform / round-robin, a
    node limit beside it, or the flag on a dense model: one line, exit 2."""
    args = ["fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "1024", "--seq-len", "4096",
            "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--zero", "1"]
    uniform = run_json(*args, "--moe-dispatcher", "deepep")
    even = run_json(*args, "--moe-dispatcher", "deepep", "--moe-routing", "round-robin")
    assert even["settings"]["moe_routing"] == "round-robin" and "moe_routing" not in uniform["settings"]
    t_ep = [r["results"]["t_ep"]["value"] for r in (uniform, even)]
    # across the two nodes the network paces the exchange: one copy a remote node, 1/2 a token under round-robin (its one
    # rank on the other node half the time) against 2 (1 - C(64, 8)/C(128, 8)) x 1/2 = 0.9969 under uniform routing; the
    # collectives' fixed latency keeps the ratio a little above 0.5016
    assert remote_nodes_per_token(128, 8, 2, None, "round-robin") / remote_nodes_per_token(128, 8, 2, None) == pytest.approx(0.5016, abs=1e-4)
    assert t_ep[1] / t_ep[0] == pytest.approx(0.5016, rel=0.07)
    alltoall = [run_json(*args, "--moe-routing", r)["results"]["t_step"]["value"] for r in ("uniform", "round-robin")]
    assert alltoall[0] == alltoall[1]
    assert "one of uniform, round-robin, got 'even'" in run_error([*args, "--moe-routing", "even"])
    assert "node limit applies" in run_error([*args, "--moe-routing", "round-robin", "--max-nodes-per-token", "1"])
    assert "applies to MoE models only" in run_error(["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch",
                                                      "64", "--tp", "1", "--pp", "1", "--dp", "8", "--moe-routing", "uniform"])  # fmt: skip


def test_fit_takes_the_eager_expert_activation(run_json, run_error) -> None:
    """--expert-activation eager times the experts' SwiGLU and probability product as Primus's eager code runs it (14 kernels
    moving 86 bytes a value where the fused kernel moves 16: tests/ground_truth/test_primus_expert_activation.py): a longer
    step, the setting in the JSON; the 30B's 48 MoE layers x 1,024 x 4,096 x 8 routed rows x 768 x 70 B more over 16 H100s at
    the H100 preset's HBM rate is seconds, not noise. A choice outside fused / eager, or the flag on a dense model: one line."""
    args = ["fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "1024", "--seq-len", "4096",
            "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--zero", "1"]
    fused = run_json(*args)
    eager = run_json(*args, "--expert-activation", "eager")
    assert eager["settings"]["expert_activation"] == "eager" and "expert_activation" not in fused["settings"]
    assert eager["results"]["t_step"]["value"] - fused["results"]["t_step"]["value"] > 1.0
    assert "one of fused, eager, got 'unfused'" in run_error([*args, "--expert-activation", "unfused"])
    assert "applies to MoE models only" in run_error(["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch",
                                                      "64", "--tp", "1", "--pp", "1", "--dp", "8", "--expert-activation", "eager"])  # fmt: skip
