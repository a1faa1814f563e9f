"""Collectives of a training iteration under DP, ZeRO, FSDP, TP, SP, PP and 3D: seed 004 question 2 and invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.collectives import Algorithm, Collective
from parcalc.core.comm import (
    Network,
    Options,
    ParamTensor,
    Split,
    Workload,
    compare_strategies,
    ddp_buckets,
    device_tensors,
    iteration_plan,
    padded_numel,
    parameter_tensors,
    stage_layers,
)
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.core.pipeline import Schedule
from parcalc.errors import InputError
from parcalc.presets import load_model

NVLINK = Link("nvlink-test", "test NVLink", Sourced(300e9, "B/s", "test"), Sourced(3.4e-6, "s", "test"))
IB = Link("ib-test", "test InfiniBand", Sourced(25e9, "B/s", "test"), Sourced(14e-6, "s", "test"))
NET = Network(NVLINK, IB)

HOMEWORK = load_model("homework-7b")  # seed 004: 32 layers, D = 4096, 32 heads, 4D ReLU MLP, no embeddings/biases/norms
# Seed 004 Q2: B = 128 sequences of L = 4096 tokens in FP16 (2 bytes) on 8 GPUs.
B, L, D, FP16 = 128, 4096, 4096, 2.0


def seed004(micro_batch: int = 128, dp: int = 1) -> Workload:
    return Workload(B, micro_batch, L, FP16, FP16, "fp16", "fp16")


def derivation(plan, key: str) -> float:
    return next(d.value for d in plan.derivations if d.key == key)


# ---------------------------------------------------------------------------------------------
# Seed 004 question 2, derived by hand


def test_homework_model_has_the_seeds_parameter_count() -> None:
    # Per layer: Q, K, V, O are D x D = 4 D^2; the MLP D x 4D and 4D x D = 8 D^2; 12 D^2 in all.
    # 12 x 4096^2 = 201,326,592 per layer; x 32 layers = 6,442,450,944 (the "7B" model).
    assert HOMEWORK.total_params == 6_442_450_944
    assert sum(t.numel for t in parameter_tensors(HOMEWORK)) == 6_442_450_944


SEED004 = [
    # Q2.1 DP: every gradient is all-reduced once per iteration; payload ("bytes aggregated") =
    # P x 2 bytes = 6,442,450,944 x 2 = 12,884,901,888 B, whatever the bucket sizes.
    pytest.param(Layout(dp=8), 16, "dp_allreduce_payload", 12_884_901_888, id="q2.1-dp-allreduce"),
    # Q2.2 PP (GPipe, 8 stages of 4 layers): each micro-batch's activation b x L x D x 2 bytes crosses
    # stage i -> i+1 once; over the iteration the micro-batches add up to the batch:
    # B x L x D x 2 = 128 x 4096 x 4096 x 2 = 4,294,967,296 B forward, the same bytes of gradients back.
    pytest.param(Layout(pp=8, schedule=Schedule.GPIPE), 1, "pp_p2p_per_boundary", 4_294_967_296, id="q2.2-pp-gpipe"),
    # Q2.3 TP degree 8 (Megatron): 2 all-reduces of B x L x D x 2 = 4,294,967,296 B per layer forward and
    # 2 backward: 4 x 32 layers = 128 all-reduces; 128 x 4,294,967,296 = 549,755,813,888 B.
    pytest.param(Layout(tp=8), 128, "tp_allreduce_payload", 549_755_813_888, id="q2.3-tp-allreduce"),
    # Q2.4 FSDP: the parameters are all-gathered in forward and again in backward:
    # 2 x 6,442,450,944 x 2 B = 25,769,803,776 B; the gradients reduce-scattered once: 12,884,901,888 B.
    pytest.param(Layout(dp=8, zero=3), 16, "fsdp_all_gather_payload", 25_769_803_776, id="q2.4-fsdp-all-gather"),
    pytest.param(Layout(dp=8, zero=3), 16, "fsdp_reduce_scatter_payload", 12_884_901_888, id="q2.4-fsdp-reduce-scatter"),
]


@pytest.mark.parametrize(("par", "micro_batch", "key", "expected"), SEED004)
def test_seed004_question2(par: Layout, micro_batch: int, key: str, expected: int) -> None:
    plan = iteration_plan(HOMEWORK, seed004(micro_batch), par, NET)
    assert derivation(plan, key) == expected


def test_seed004_rows_add_up_to_the_headlines() -> None:
    # The headline derivations and the table of calls must agree: the table is summed here.
    dp = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8), NET)
    assert dp.payload("dp", Collective.ALL_REDUCE) == 12_884_901_888
    tp = iteration_plan(HOMEWORK, seed004(128), Layout(tp=8), NET)
    assert tp.payload("tp", Collective.ALL_REDUCE) == 549_755_813_888
    fsdp = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8, zero=3), NET)
    assert fsdp.payload("dp", Collective.ALL_GATHER) == 25_769_803_776
    assert fsdp.payload("dp", Collective.REDUCE_SCATTER) == 12_884_901_888


@pytest.mark.parametrize("micro_batch", [1, 4, 32, 128])
@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B])
def test_seed004_pp_bytes_do_not_depend_on_micro_batches(micro_batch: int, schedule: Schedule) -> None:
    # B/b micro-batches of b x L x D x 2 bytes each: always 128 x 4096 x 4096 x 2 = 4,294,967,296 B per
    # boundary and direction; the number of sends is B/b per boundary and direction.
    plan = iteration_plan(HOMEWORK, seed004(micro_batch), Layout(pp=8, schedule=schedule), NET)
    forward = [c for c in plan.calls if c.dimension == "pp" and c.phase == "forward"]
    backward = [c for c in plan.calls if c.dimension == "pp" and c.phase == "backward"]
    assert [(c.payload, c.calls, c.direction, c.groups) for c in forward] == [(4_294_967_296, B // micro_batch, "i → i+1", 7)]
    assert [(c.payload, c.direction) for c in backward] == [(4_294_967_296, "i+1 → i")]
    assert all(c.op is Collective.POINT_TO_POINT and c.group_size == 2 for c in forward + backward)


def test_seed004_per_device_traffic_is_the_other_convention() -> None:
    # Seed 003 sec. 11: per-device traffic of a ring all-reduce = 2 (N-1)/N x payload:
    # 2 x 7/8 x 12,884,901,888 = 22,548,578,304 B sent by each GPU.
    plan = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8), NET)
    assert derivation(plan, "sent_per_device") == 22_548_578_304
    # FSDP: 3 ring collectives of 12,884,901,888 B payload each, (N-1)/N = 7/8 of it sent: 3 x 11,274,289,152.
    fsdp = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8, zero=3), NET)
    assert derivation(fsdp, "sent_per_device") == 3 * 11_274_289_152


def test_seed004_dp_buckets_decide_calls_not_bytes() -> None:
    # Reverse registration order: MLP down (16384 x 4096 x 2 B = 128 MiB) first: over the 1 MiB first cap,
    # so a bucket of its own; then every tensor (32 MiB attention, 128 MiB MLP) exceeds 25 MiB:
    # one bucket per tensor, 6 per layer x 32 = 192 all-reduces.
    plan = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8), NET)
    (row,) = plan.calls
    assert row.calls == 192
    assert dict(row.call_sizes) == {32 * 2**20: 128, 128 * 2**20: 64}
    first = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8), NET, Options(ddp_first_iteration=True))
    assert first.calls[0].calls == 1 and first.calls[0].payload == row.payload


# ---------------------------------------------------------------------------------------------
# Buckets, shards and parameter tensors


@pytest.mark.parametrize(
    ("sizes", "cap", "first", "expected"),
    [
        # First cap 2: the first 3 reaches it -> [3]; then cap 5: 3 + 3 = 6 reaches it -> [6]; the last 3 is left -> [3].
        pytest.param([3, 3, 3, 3], 5, 2, (3, 6, 3), id="first-bucket-smaller"),
        # A tensor larger than the cap gets a bucket of its own (it closes the bucket it lands in).
        pytest.param([1, 10, 1], 4, 4, (11, 1), id="oversize-tensor"),
        pytest.param([1, 1, 1], 100, 100, (3,), id="one-bucket"),
    ],
)
def test_ddp_buckets(sizes: list[int], cap: float, first: float, expected: tuple) -> None:
    assert ddp_buckets(sizes, cap, first) == expected


@given(st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=60), st.integers(1, 20_000), st.integers(1, 20_000))
def test_ddp_buckets_keep_every_byte(sizes: list[int], cap: int, first: int) -> None:
    buckets = ddp_buckets(sizes, cap, first)
    assert sum(buckets) == sum(sizes)
    limits = [first] + [cap] * len(buckets)
    assert all(b >= limit for b, limit in zip(buckets[:-1], limits, strict=False))


@pytest.mark.parametrize(
    ("rows", "group", "padded_rows"),
    [
        # FSDP2 chunks dim 0 into ceil(rows / N) per rank (torch.chunk): 129 rows on 4 ranks -> 33 each -> 132.
        pytest.param(129, 4, 132, id="vocab-129-on-4"),
        pytest.param(129, 2, 130, id="vocab-129-on-2"),
        pytest.param(4096, 8, 4096, id="divisible"),
        pytest.param(3, 8, 8, id="fewer-rows-than-ranks"),
    ],
)
def test_fsdp2_shard_padding(rows: int, group: int, padded_rows: int) -> None:
    assert padded_numel(ParamTensor("w", rows, 64, Split.VOCAB), group) == padded_rows * 64


MODELS = st.builds(
    lambda layers, heads, head_dim, mult, vocab, bias, norm, mlp, tied: TransformerModel(
        key="m", name="m", layers=layers, hidden=heads * head_dim, heads=heads, kv_heads=heads, head_dim=head_dim,
        ffn_hidden=mult * heads * head_dim, mlp=mlp, vocab=vocab, max_seq_len=32, tied_embeddings=tied,
        position=Position.LEARNED, norm=norm, bias=bias, source="hypothesis",
    ),
    st.integers(1, 12), st.sampled_from([1, 2, 4, 8]), st.sampled_from([8, 16]), st.integers(1, 4),
    st.sampled_from([0, 50, 128]), st.booleans(), st.sampled_from(list(Norm)), st.sampled_from(list(Mlp)), st.booleans(),
)  # fmt: skip


@given(MODELS)
def test_parameter_tensors_add_up_to_the_model(model: TransformerModel) -> None:
    assert sum(t.numel for t in parameter_tensors(model)) == model.total_params


@given(MODELS, st.integers(1, 6))
def test_pipeline_stages_hold_every_layer_once(model: TransformerModel, pp: int) -> None:
    if pp > model.layers:
        return
    stages = stage_layers(model.layers, pp)
    assert [layer for stage in stages for layer in stage] == list(range(model.layers))
    held = sum(device_tensors(model, Layout(pp=pp), s, Options()).numel for s in range(pp))
    # Megatron keeps a copy of a tied word embedding on the last stage when it is not the first.
    copy = model.vocab * model.hidden if (model.tied_embeddings and pp > 1 and model.vocab) else 0
    assert held == model.total_params + copy


# ---------------------------------------------------------------------------------------------
# Strategies


def gpt(layers: int = 4, vocab: int = 1000, tied: bool = True) -> TransformerModel:
    return TransformerModel(key="gpt", name="gpt", layers=layers, hidden=256, heads=8, kv_heads=8, head_dim=32, ffn_hidden=1024,
                            mlp=Mlp.GELU, vocab=vocab, max_seq_len=128, tied_embeddings=tied, position=Position.LEARNED,
                            norm=Norm.LAYERNORM, bias=True, source="test")  # fmt: skip


def test_zero1_and_zero2_move_what_dp_moves() -> None:
    # ZeRO sec. 7.2.1: reduce-scatter (Psi) + all-gather (Psi) = the 2 Psi of an all-reduce.
    work = Workload(64, 8, 128, 2.0, 2.0)
    dp = iteration_plan(gpt(), work, Layout(dp=8), NET)
    for stage in (1, 2):
        zero = iteration_plan(gpt(), work, Layout(dp=8, zero=stage), NET)
        assert zero.payload(op=Collective.REDUCE_SCATTER) == zero.payload(op=Collective.ALL_GATHER) == dp.payload()
        assert derivation(zero, "sent_per_device") == pytest.approx(derivation(dp, "sent_per_device"))


def test_fsdp2_keeps_the_root_unit_after_forward() -> None:
    # FSDP2 does not reshard the root after forward: embeddings, final norm gathered once, layers twice.
    # (64 sequences on 4 replicas in micro-batches of 16: one micro-batch each.)
    model, work = gpt(), Workload(64, 16, 128, 4.0, 4.0)
    par = Layout(dp=4, zero=3)
    textbook = iteration_plan(model, work, par, NET, Options(shard_padding=False))
    fsdp2 = iteration_plan(model, work, par, NET, Options(shard_padding=False, reshard_root=False))
    root = (1000 * 256 + 128 * 256 + 2 * 256) * 4  # wte + wpe + final LayerNorm, fp32
    assert textbook.payload(op=Collective.ALL_GATHER) == 2 * model.total_params * 4
    assert fsdp2.payload(op=Collective.ALL_GATHER) == 2 * model.total_params * 4 - root
    assert fsdp2.payload(op=Collective.REDUCE_SCATTER) == model.total_params * 4


def test_sequence_parallel_moves_what_tensor_parallel_moves() -> None:
    # Korthikanti et al. 2022 sec. 4.2.2: an all-gather plus a reduce-scatter per all-reduce, same bytes per device;
    # and, as the same section goes on, an extra all-gather of each column-parallel input in backward (Megatron's
    # default, sp_regather): 2 per layer per micro-batch, the size of the others.
    model, work = gpt(vocab=0), Workload(8, 8, 128, 2.0, 2.0)
    tp = iteration_plan(model, work, Layout(tp=4), NET)
    conjugates = iteration_plan(model, work, Layout(tp=4, sequence_parallel=True), NET, Options(sp_regather=False))
    layers = conjugates.payload("tp", Collective.ALL_GATHER, "activations")
    assert layers == conjugates.payload("tp", Collective.REDUCE_SCATTER, "activations") == tp.payload("tp", Collective.ALL_REDUCE)
    sp_layers = sum(c.sent for c in conjugates.calls if "activations" in c.purpose)
    assert sp_layers == pytest.approx(derivation(tp, "sent_per_device"))
    sp = iteration_plan(model, work, Layout(tp=4, sequence_parallel=True), NET)
    regathered = sp.payload("tp", Collective.ALL_GATHER, "re-gathered")
    assert regathered == 2 * 4 * 8 * 128 * 256 * 2.0  # 2 per layer x 4 layers x b s h x 2 B
    assert sp.payload("tp", Collective.ALL_GATHER, "activations") == layers + regathered
    assert [c.phase for c in sp.calls if "re-gathered" in c.purpose] == ["backward"]
    # and the norms' and row-parallel biases' gradients: per layer 2 LayerNorms (2 x 2 x 256) + 2 biases (2 x 256).
    grads = sp.payload("tp", Collective.ALL_REDUCE, "gradients")
    assert grads == 4 * (4 * 256 + 2 * 256) * 2.0


def test_megatron_vocabulary_parallel_extras() -> None:
    # One all-reduce of the embedding output and one of the LM head input's gradient (b x s x h x 2 B),
    # and 3 all-reduces of b x s fp32 values in the cross-entropy, per micro-batch.
    work = Workload(8, 2, 128, 2.0, 2.0)
    plan = iteration_plan(gpt(), work, Layout(tp=4), NET)
    extras = {c.purpose: (c.calls, c.bytes_per_call) for c in plan.calls if "activation" not in c.purpose}
    assert extras["embedding output"] == (4, 2 * 128 * 256 * 2)
    assert extras["LM head input gradient"] == (4, 2 * 128 * 256 * 2)
    assert extras["cross-entropy max, target logit, sum of exp"] == (12, 2 * 128 * 4)
    without = iteration_plan(gpt(), work, Layout(tp=4), NET, Options(vocab_parallel=False))
    assert {c.purpose for c in without.calls} == {"activations", "activation gradients"}


def test_tied_embeddings_are_synchronised_across_the_pipeline() -> None:
    # Megatron all-reduces the word-embedding gradient between the first and last stage: V x h x 2 B.
    plan = iteration_plan(gpt(), Workload(8, 1, 128, 2.0, 2.0), Layout(pp=4), NET)
    (sync,) = [c for c in plan.calls if c.dimension == "embedding"]
    assert (sync.op, sync.group_size, sync.payload) == (Collective.ALL_REDUCE, 2, 1000 * 256 * 2.0)
    untied = iteration_plan(gpt(tied=False), Workload(8, 1, 128, 2.0, 2.0), Layout(pp=4), NET)
    assert not [c for c in untied.calls if c.dimension == "embedding"]


def test_interleaving_sends_v_times_as_often() -> None:
    # Narayanan et al. 2021 sec. 2.2.2: v chunks per device -> each micro-batch crosses v p - 1 chunk
    # boundaries per direction, v times between neighbours and v - 1 times from the last device to the first.
    work = Workload(16, 1, 128, 2.0, 2.0)
    plain = iteration_plan(gpt(layers=8, vocab=0), work, Layout(pp=4), NET)
    inter = iteration_plan(gpt(layers=8, vocab=0), work, Layout(pp=4, schedule=Schedule.INTERLEAVED, chunks=2), NET)
    forward = [c for c in inter.calls if c.phase == "forward"]
    assert sorted(c.calls for c in forward) == [16, 32]
    assert sum(c.payload * c.groups for c in forward) == (2 * 4 - 1) * 16 * 128 * 256 * 2
    assert sum(c.payload * c.groups for c in plain.calls if c.phase == "forward") == 3 * 16 * 128 * 256 * 2


def test_3d_groups_cross_nodes_where_the_rank_layout_says() -> None:
    # TP 8 fills a node of 8; DP ranks r and r + 8 sit on two nodes; stages are 16 ranks apart.
    plan = iteration_plan(gpt(layers=4, vocab=0), Workload(32, 1, 128, 2.0, 2.0), Layout(tp=8, pp=2, dp=2), NET)
    inter = {c.dimension: c.inter_node for c in plan.calls}
    assert inter == {"tp": False, "dp": True, "pp": True}
    assert {c.link for c in plan.calls if c.inter_node} == {"ib-test"}
    # TP groups: one per (dp rank, stage) = 4; DP groups: one per (tp rank, stage) = 16; p2p pairs: 8 x 2 = 16.
    assert {c.dimension: c.groups for c in plan.calls if c.phase != "backward" or c.dimension != "tp"} == {"tp": 4, "dp": 16, "pp": 16}


def test_groups_inside_a_node_use_the_intra_node_link() -> None:
    plan = iteration_plan(gpt(layers=4, vocab=0), Workload(32, 1, 128, 2.0, 2.0), Layout(tp=2, pp=2, dp=2), NET)
    assert all(not c.inter_node and c.link == "nvlink-test" for c in plan.calls)


def test_dp_payload_over_all_groups_is_every_gradient_once() -> None:
    # Summed over the DP groups (one per stage and TP rank), the all-reduced bytes are the model's
    # gradients; a model without replicated tensors (no biases, no norms) so that TP does not repeat any.
    model = TransformerModel(key="m", name="m", layers=8, hidden=512, heads=8, kv_heads=8, head_dim=64, ffn_hidden=2048,
                             mlp=Mlp.RELU, vocab=0, max_seq_len=0, tied_embeddings=True, position=Position.NONE,
                             norm=Norm.NONE, bias=False, source="test")  # fmt: skip
    plan = iteration_plan(model, Workload(16, 1, 64, 2.0, 4.0), Layout(tp=2, pp=4, dp=2), NET)
    total = sum(c.payload * c.groups for c in plan.calls if c.dimension == "dp")
    assert total == model.total_params * 4.0


@settings(max_examples=25)
@given(bucket=st.integers(min_value=1_000, max_value=10**9))
def test_bucket_size_changes_calls_not_bytes(bucket: int) -> None:
    plan = iteration_plan(gpt(), Workload(64, 8, 128, 2.0, 2.0), Layout(dp=8), NET, Options(bucket_bytes=bucket, first_bucket_bytes=bucket))
    assert plan.payload() == gpt().total_params * 2.0


def test_recomputation_replays_the_forward_all_reduces() -> None:
    work = Workload(8, 8, 128, 2.0, 2.0)
    plain = iteration_plan(gpt(vocab=0), work, Layout(tp=4), NET)
    again = iteration_plan(gpt(vocab=0), work, Layout(tp=4), NET, Options(recompute=True))
    assert again.payload("tp") == pytest.approx(1.5 * plain.payload("tp"))


def test_algorithm_choice_changes_traffic_not_payload() -> None:
    work = Workload(64, 8, 128, 2.0, 2.0)
    ring = iteration_plan(gpt(), work, Layout(dp=8), NET)
    naive = iteration_plan(gpt(), work, Layout(dp=8), NET, Options(algorithm=Algorithm.NAIVE))
    assert ring.payload() == naive.payload()
    # naive: (N-1) x payload = 7 x; ring: 2 (N-1)/N = 1.75 x
    assert derivation(naive, "sent_per_device") == pytest.approx(7 / 1.75 * derivation(ring, "sent_per_device"))


def test_compare_strategies_skips_what_cannot_run() -> None:
    # 8 GPUs of TP cannot split 6 heads; PP over 8 stages needs 8 layers.
    model = TransformerModel(key="m", name="m", layers=4, hidden=384, heads=6, kv_heads=6, head_dim=64, ffn_hidden=1536,
                             mlp=Mlp.GELU, vocab=0, max_seq_len=0, tied_embeddings=True, position=Position.NONE,
                             norm=Norm.NONE, bias=False, source="test")  # fmt: skip
    result = compare_strategies(model, Workload(8, 1, 64, 2.0, 2.0), 8, NET)
    skipped = dict(result.skipped)
    assert {"tp", "tp+sp", "pp-gpipe", "pp-1f1b"} == set(skipped)
    assert "6 attention heads" in skipped["tp"] and "4 layers" in skipped["pp-gpipe"]
    assert [p.strategy for p in result.plans] == ["dp", "zero1", "zero2", "fsdp"]


@pytest.mark.parametrize(
    ("par", "work", "message"),
    [
        pytest.param(Layout(tp=3), Workload(8, 8, 128, 2.0, 2.0), "--tp: 3 does not divide the 32 attention heads", id="tp-heads"),
        pytest.param(Layout(pp=64), Workload(64, 1, 128, 2.0, 2.0), "more stages than the model's 32 layers", id="pp-layers"),
        pytest.param(Layout(dp=8), Workload(128, 3, 128, 2.0, 2.0), "--micro-batch: 3 does not divide", id="micro-batch"),
        pytest.param(Layout(dp=3), Workload(128, 1, 128, 2.0, 2.0), "--batch: the global batch 128 is not a multiple of --dp 3", id="batch-dp"),
        pytest.param(Layout(tp=8, sequence_parallel=True), Workload(8, 8, 100, 2.0, 2.0), "--sequence-parallel", id="sp-seq"),
        pytest.param(Layout(pp=4, chunks=2), Workload(8, 1, 128, 2.0, 2.0), "--chunks", id="chunks-without-interleaving"),
        pytest.param(Layout(dp=0), Workload(8, 1, 128, 2.0, 2.0), "--dp: must be a whole number of at least 1", id="dp-zero"),
    ],
)
def test_bad_configurations_name_the_constraint(par: Layout, work: Workload, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        iteration_plan(HOMEWORK, work, par, NET)


def test_groups_across_nodes_need_an_inter_node_link() -> None:
    with pytest.raises(InputError, match="--inter-node-link"):
        iteration_plan(HOMEWORK, seed004(8), Layout(dp=16), Network(NVLINK))


def test_fsdp_gathers_for_every_micro_batch_and_reduces_once() -> None:
    # 64 sequences on 4 replicas = 16 each; micro-batches of 4 -> 4 forward/backward passes, each
    # gathering every unit twice (textbook reshard); gradients accumulate and are reduce-scattered once.
    model, par = gpt(), Layout(dp=4, zero=3)
    one = iteration_plan(model, Workload(64, 16, 128, 2.0, 2.0), par, NET, Options(shard_padding=False))
    four = iteration_plan(model, Workload(64, 4, 128, 2.0, 2.0), par, NET, Options(shard_padding=False))
    assert four.payload(op=Collective.ALL_GATHER) == 4 * one.payload(op=Collective.ALL_GATHER) == 4 * 2 * model.total_params * 2
    assert four.payload(op=Collective.REDUCE_SCATTER) == one.payload(op=Collective.REDUCE_SCATTER) == model.total_params * 2
    assert derivation(four, "fsdp_all_gather_payload") == four.payload(op=Collective.ALL_GATHER)


def test_totals_name_both_conventions_per_kind_of_collective() -> None:
    # Seed 004 DP: payload 12,884,901,888 B; per device 2 x 7/8 of it = 22,548,578,304 B.
    (total,) = iteration_plan(HOMEWORK, seed004(16), Layout(dp=8), NET).totals
    assert (total.dimension, total.op, total.payload, total.sent, total.group_size) == (
        "dp", Collective.ALL_REDUCE, 12_884_901_888, 22_548_578_304, 8)
    # 3D: the DP row of the largest stage (stage 0 holds the embeddings), not the sum over stages;
    # point-to-point counted at the sender: i -> i+1 from stage 0 (all boundaries carry the same).
    plan = iteration_plan(gpt(layers=4), Workload(32, 1, 128, 2.0, 2.0), Layout(tp=2, pp=2, dp=2), NET)
    totals = {(t.dimension, t.op, t.direction): t for t in plan.totals}
    dp = totals[("dp", Collective.ALL_REDUCE, "")]
    stage0 = device_tensors(gpt(layers=4), Layout(tp=2, pp=2, dp=2), 0, Options()).numel * 2.0
    assert (dp.stage, dp.payload) == (0, stage0)
    forward = totals[("pp", Collective.POINT_TO_POINT, "i → i+1")]
    assert (forward.stage, forward.payload) == (0, 16 * 128 * 256 * 2.0)


# ---------------------------------------------------------------------------------------------
# Sequence parallelism's backward all-gather (issue #12, item 1)
#
# Megatron-LM's column-parallel linear under SP saves only its sequence shard of the input
# (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.forward,
# `ctx.save_for_backward(input, weight)`) and all-gathers it again in backward to compute the weight
# gradient (backward, the `if ctx.sequence_parallel` branch under `wgrad_compute`). Calculon counts it
# the same way (calculon/llm/layers.py TPComm: the `wgrad` stage's all-gather with seq_par_ag_redo).

GPT3 = load_model("gpt3-175b")  # 96 layers, h = 12,288
# b = 1, s = 2048, bf16: one micro-batch's activation b s h x 2 B
A_GPT3 = 1 * 2048 * 12288 * 2  # 50,331,648 B


def test_sp_backward_all_gather_gpt3_175b_by_hand() -> None:
    # GPT-3 175B on TP 8 with SP, one sequence of 2048 tokens. Per layer and micro-batch:
    #   forward:  all-gather before Q/K/V and before MLP up (2), reduce-scatter after the attention
    #             projection and MLP down (2);
    #   backward: their conjugates, an all-gather of each reduce-scatter's output gradient (2) and a
    #             reduce-scatter of each all-gather's input gradient (2); and the two column-parallel
    #             inputs gathered again for the weight gradients (2).
    # 6 all-gathers and 4 reduce-scatters of A per layer; parcalc printed 4 and 4 before.
    work = Workload(1, 1, 2048, 2.0, 2.0, "bf16", "bf16")
    par = Layout(tp=8, sequence_parallel=True)
    plan = iteration_plan(GPT3, work, par, NET)
    before = iteration_plan(GPT3, work, par, NET, Options(sp_regather=False))
    # Headlines (the layers only): 6 x 96 x A and 4 x 96 x A.
    assert derivation(plan, "sp_all_gather_payload") == 6 * 96 * A_GPT3 == 28_991_029_248
    assert derivation(plan, "sp_reduce_scatter_payload") == 4 * 96 * A_GPT3 == 19_327_352_832
    assert derivation(before, "sp_all_gather_payload") == 4 * 96 * A_GPT3
    assert derivation(plan, "sp_all_gather_payload") / derivation(before, "sp_all_gather_payload") == 1.5
    # Every TP row, embedding and LM head included: the embedding output's gradient (1 all-gather) and the LM
    # head's input (1 all-gather forward, 1 again in backward, Megatron's output layer being a
    # ColumnParallelLinear); the reduce-scatters of the embedding output and of the LM head input's gradient.
    gathered = plan.payload("tp", Collective.ALL_GATHER)
    scattered = plan.payload("tp", Collective.REDUCE_SCATTER)
    assert gathered == (6 * 96 + 3) * A_GPT3 == 29_142_024_192
    assert scattered == (4 * 96 + 2) * A_GPT3 == 19_428_016_128
    assert before.payload("tp", Collective.ALL_GATHER) == (4 * 96 + 2) * A_GPT3
    assert gathered / before.payload("tp", Collective.ALL_GATHER) == 1.5
    assert (gathered + scattered) / (2 * (4 * 96 + 2) * A_GPT3) == 1.25
    # All TP traffic, the small all-reduces included (norm and row-bias gradients, 3 x b s fp32 in the loss, both
    # unchanged: 14,229,504 B): 1.25 to within 0.01 %.
    all_reduced = plan.payload("tp", Collective.ALL_REDUCE)
    assert all_reduced == before.payload("tp", Collective.ALL_REDUCE) == 14_229_504
    assert plan.payload("tp") / before.payload("tp") == pytest.approx(1.25, rel=1e-4)
    # Per device: a ring all-gather sends (n - 1)/n of the payload.
    sent = next(t.sent for t in plan.totals if t.dimension == "tp" and t.op is Collective.ALL_GATHER)
    assert sent == 7 / 8 * 29_142_024_192


def test_sp_backward_all_gather_with_full_recomputation() -> None:
    # The recomputed forward runs the column-parallel linear's forward again (gathers, and saves the shard
    # again), so backward still re-gathers: 2 + 2 (replayed) + 2 + 2 (re-gathered) = 8 all-gathers and
    # 2 + 2 + 2 = 6 reduce-scatters per layer.
    work = Workload(1, 1, 2048, 2.0, 2.0)
    plan = iteration_plan(GPT3, work, Layout(tp=8, sequence_parallel=True), NET, Options(recompute=True))
    assert derivation(plan, "sp_all_gather_payload") == 8 * 96 * A_GPT3
    assert derivation(plan, "sp_reduce_scatter_payload") == 6 * 96 * A_GPT3
    assert plan.payload("tp", Collective.ALL_GATHER, "re-gathered") == 2 * 96 * A_GPT3 + A_GPT3  # layers + LM head


def test_sp_backward_all_gather_in_3d() -> None:
    # TP 8 x PP 8 x DP 2, SP, 16 micro-batches of 1 per replica: each stage's 12 layers re-gather 2 inputs per
    # micro-batch; the last stage's LM head once more.
    work = Workload(32, 1, 2048, 2.0, 2.0)
    par = Layout(tp=8, pp=8, dp=2, sequence_parallel=True)
    plan = iteration_plan(GPT3, work, par, NET)
    rows = [c for c in plan.calls if c.purpose.startswith("activations (sequence-parallel, re-gathered")]
    assert [(c.calls, c.bytes_per_call, c.groups) for c in rows] == [(2 * 12 * 16, A_GPT3, 8 * 2)]
    head = [c for c in plan.calls if c.purpose.startswith("LM head input, re-gathered")]
    assert [(c.calls, c.stages) for c in head] == [(16, "stage 7")]
    # without SP nothing is re-gathered
    assert not any("re-gathered" in c.purpose for c in iteration_plan(GPT3, work, par._replace(sequence_parallel=False), NET).calls)
