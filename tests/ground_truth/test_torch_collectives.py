"""Ground truth: parcalc's prediction against the collectives real PyTorch issues (CPU, gloo).

tests/ground_truth/torch_worker.py runs one training step of a small GPT under DDP, FSDP2
(`fully_shard`), tensor parallelism (`parallelize_module`, Megatron layout, with and without
sequence parallelism), pipeline parallelism (`torch.distributed.pipelining`, GPipe and 1F1B) and,
on 4 ranks, FSDP2 over tensor parallelism (2D) and HSDP (FSDP2 on a 2 x 2 replicate x shard mesh), on 2 and 4 processes, and records every
collective and point-to-point call. Each test predicts
the same configuration with parcalc.core.comm and asks for the same calls and bytes; what
PyTorch does beyond the textbook is either an option parcalc models (named in the Options
passed here) or a known difference asserted below and listed in docs/known-differences.md.

Needs torch (CPU wheel, torch==2.13.0); about 20 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from parcalc.core.collectives import Collective
from parcalc.core.comm import Network, Options, Workload, ddp_buckets, iteration_plan, parameter_tensors
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.core.pipeline import Schedule

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("torch_worker.py")
TIMEOUT_S = 400

# The worker's model (its config is checked against these): GPT-2 layout, fp32 on CPU.
HIDDEN, HEADS, FFN, SEQ, BATCH, VOCAB = 64, 4, 256, 16, 4, 129
FP32 = 4.0
ANY_LINK = Network(Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test")))


def gpt(layers: int, tied: bool = True) -> TransformerModel:
    return TransformerModel(
        key="ground-truth-gpt", name="ground-truth GPT", layers=layers, hidden=HIDDEN, heads=HEADS, kv_heads=HEADS,
        head_dim=HIDDEN // HEADS, ffn_hidden=FFN, mlp=Mlp.GELU, vocab=VOCAB, max_seq_len=SEQ, tied_embeddings=tied,
        position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True, source=str(WORKER),
    )  # fmt: skip


@dataclass
class Measured:
    world: int
    ranks: list[dict]

    def scenario(self, name: str, rank: int = 0) -> dict:
        data = self.ranks[rank][name]
        assert "error" not in data, f"{name} failed under torch on rank {rank}: {data['error']}"
        return data

    def calls(self, name: str, phase: str, rank: int = 0, dtype: str | None = "float32") -> list[dict]:
        return [c for c in self.scenario(name, rank)[phase] if dtype is None or c.get("dtype") in (dtype, None)]

    def sizes(self, name: str, phase: str, op: str, rank: int = 0) -> Counter:
        return Counter(c["bytes"] for c in self.calls(name, phase, rank) if c["op"] == op)


@pytest.fixture(scope="module", params=[2, 4], ids=["2-ranks", "4-ranks"])
def measured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Measured:
    world = request.param
    for attempt in range(2):  # the free port the worker picks can be taken before rank 0 binds it: retry once
        out = tmp_path_factory.mktemp(f"torch-{world}-")
        process = subprocess.run(
            [sys.executable, str(WORKER), "--world", str(world), "--out", str(out)],
            capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
        if process.returncode == 0 or "address already in use" not in process.stderr.lower() or attempt:
            break
    assert process.returncode == 0, process.stderr[-4000:]
    return Measured(world, [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)])


def plan_sizes(plan, op: Collective, purpose: str | None = None) -> Counter:
    """{bytes per call: calls} of a plan's rows for one op (summed over rows)."""
    sizes: Counter = Counter()
    for row in plan.calls:
        if row.op is op and (purpose is None or purpose in row.purpose):
            for size, count in row.call_sizes or ((row.bytes_per_call, row.calls),):
                sizes[int(size)] += count
    return sizes


def test_worker_model_is_the_model_parcalc_predicts(measured: Measured) -> None:
    config = measured.ranks[0]["config"]
    assert (config["hidden"], config["heads"], config["ffn"], config["seq"], config["batch"], config["vocab"]) == (
        HIDDEN, HEADS, FFN, SEQ, BATCH, VOCAB)
    # parcalc's tensor list is PyTorch's: the same parameter count, tied and untied.
    assert config["params"]["gpt2-tied"] == gpt(2).total_params == sum(t.numel for t in parameter_tensors(gpt(2)))
    assert config["params"]["pp-untied"] == gpt(measured.world, tied=False).total_params


# ---------------------------------------------------------------------------------------------
# DDP


def test_ddp_first_iteration_is_one_bucket(measured: Measured) -> None:
    # DDP's first iteration puts every gradient in one bucket (find_unused_parameters=False):
    # parcalc's `ddp_first_iteration`. Both witnesses, the dispatcher and the comm hook, agree.
    n = measured.world
    plan = iteration_plan(gpt(2), Workload(BATCH * n, BATCH, SEQ, FP32, FP32), Layout(dp=n), ANY_LINK,
                          Options(ddp_first_iteration=True))  # fmt: skip
    expected = plan_sizes(plan, Collective.ALL_REDUCE)
    assert expected == Counter({gpt(2).total_params * 4: 1})
    for name in ("ddp", "ddp-buckets"):
        assert measured.sizes(name, "step1", "all-reduce") == expected
        assert Counter(c["bytes"] for c in measured.scenario(name)["hook1"]) == expected
        assert {c["group"] for c in measured.calls(name, "step1")} == {n}


def test_ddp_rebuilt_buckets_default_caps(measured: Measured) -> None:
    # From the second iteration: buckets in gradient-ready order with a 1 MiB first cap and 25 MiB after.
    # The whole model is 109,376 x 4 = 437,504 B < 1 MiB: one bucket.
    n = measured.world
    plan = iteration_plan(gpt(2), Workload(BATCH * n, BATCH, SEQ, FP32, FP32), Layout(dp=n), ANY_LINK)
    assert measured.sizes("ddp", "step2", "all-reduce") == plan_sizes(plan, Collective.ALL_REDUCE) == Counter({437_504: 1})


def test_ddp_small_buckets_in_order(measured: Measured) -> None:
    # bucket_cap_mb = 0.05 -> 52,428 B caps (an explicit cap applies to the first bucket too). parcalc
    # packs gradients in reverse registration order; PyTorch in the order they become ready, which
    # for this model is the same: the seven buckets match one by one, in order.
    n, cap = measured.world, measured.ranks[0]["config"]["ddp_small_bucket_bytes"]
    assert cap == 52_428
    ordered = ddp_buckets([t.numel * 4 for t in reversed(parameter_tensors(gpt(2)))], cap, cap)
    assert [c["bytes"] for c in measured.scenario("ddp-buckets")["hook2"]] == list(ordered)
    plan = iteration_plan(gpt(2), Workload(BATCH * n, BATCH, SEQ, FP32, FP32), Layout(dp=n), ANY_LINK,
                          Options(bucket_bytes=cap, first_bucket_bytes=cap))  # fmt: skip
    assert measured.sizes("ddp-buckets", "step2", "all-reduce") == plan_sizes(plan, Collective.ALL_REDUCE)
    assert sum(ordered) == gpt(2).total_params * 4


def test_ddp_known_differences(measured: Measured) -> None:
    # docs/known-differences.md: (1) construction broadcasts rank 0's parameters and buffers (all of
    # them, float32) after an all-gather and a broadcast of int64 shape metadata; (2) on the second
    # iteration rank 0 broadcasts the rebuilt bucket order (int32). parcalc models neither (one-off).
    setup = measured.scenario("ddp")["setup"]
    assert [c["bytes"] for c in setup if c["dtype"] == "float32"] == [gpt(2).total_params * 4]
    assert {(c["op"], c["dtype"]) for c in setup if c["dtype"] != "float32"} == {("all-gather", "int64"), ("broadcast", "int64")}
    extra = [c for c in measured.scenario("ddp")["step2"] if c["dtype"] != "float32"]
    assert extra and {(c["op"], c["dtype"]) for c in extra} == {("broadcast", "int32")}
    assert sum(c["bytes"] for c in extra) < 1024


# ---------------------------------------------------------------------------------------------
# FSDP2


def test_fsdp2_fully_shard(measured: Measured) -> None:
    # fully_shard on each block, then on the root (embeddings, final norm, tied head). FSDP2 pads each
    # tensor's dim 0 to a multiple of N (wte: 129 rows -> 130 on 2 ranks, 132 on 4) and keeps the root
    # unsharded after forward: parcalc's shard_padding and reshard_root=False.
    n = measured.world
    plan = iteration_plan(gpt(2), Workload(BATCH * n, BATCH, SEQ, FP32, FP32), Layout(dp=n, zero=3),
                          ANY_LINK, Options(shard_padding=True, reshard_root=False))  # fmt: skip
    root = (-(-VOCAB // n) * n * HIDDEN + SEQ * HIDDEN + 2 * HIDDEN) * 4  # padded wte + wpe + ln_f, fp32
    layer = (gpt(2).params_per_layer) * 4  # 49,984 x 4 = 199,936 B (64 and 256 divide by 2 and 4: no padding)
    # forward: root + 2 layers; backward: the 2 layers again (not the root); reduce-scatter: all 3 units.
    assert plan_sizes(plan, Collective.ALL_GATHER) == Counter({root: 1, layer: 4})
    assert plan_sizes(plan, Collective.REDUCE_SCATTER) == Counter({root: 1, layer: 2})
    assert measured.sizes("fsdp", "step1", "all-gather") == plan_sizes(plan, Collective.ALL_GATHER)
    assert measured.sizes("fsdp", "step1", "reduce-scatter") == plan_sizes(plan, Collective.REDUCE_SCATTER)
    assert {c["op"] for c in measured.calls("fsdp", "step1", dtype=None)} == {"all-gather", "reduce-scatter"}
    assert measured.scenario("fsdp")["setup"] == []
    # The textbook (and DeepSpeed ZeRO-3) re-gathers the root too: exactly one root all-gather more.
    textbook = iteration_plan(gpt(2), Workload(BATCH * n, BATCH, SEQ, FP32, FP32), Layout(dp=n, zero=3),
                              ANY_LINK, Options(shard_padding=True, reshard_root=True))  # fmt: skip
    assert plan_sizes(textbook, Collective.ALL_GATHER) - plan_sizes(plan, Collective.ALL_GATHER) == Counter({root: 1})


def test_hsdp_fully_shard_on_a_2x2_mesh(measured: Measured) -> None:
    """HSDP: FSDP2 `fully_shard` on a 2-D DeviceMesh (replicate 2, shard 2) over 4 gloo ranks (it
    runs on CPU in torch 2.13.0). parcalc's --shard-group 2 on dp = 4: every gather and
    reduce-scatter inside the shard groups {0, 1} and {2, 3} (2 consecutive data-parallel ranks),
    FSDP2's padding to a multiple of S = 2 (wte 129 -> 130 rows: the root unit is 37,888 B, as on
    2 ranks), then each unit's shard of its reduce-scatter, half of it, all-reduced over the
    replica groups {0, 2} and {1, 3} (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
    foreach_reduce: reduce_scatter over reduce_scatter_group, then dist.all_reduce(reduce_output,
    group=all_reduce_group)). Per rank and iteration: all-gathers 37,888 + 4 x 199,936 B,
    reduce-scatters 37,888 + 2 x 199,936 B, all-reduces 18,944 + 2 x 99,968 B."""
    if measured.world < 4:
        assert measured.ranks[0]["hsdp"] == {"not run": "HSDP on a 2 x 2 mesh needs 4 ranks"}
        return
    plan = iteration_plan(gpt(2), Workload(4 * BATCH, BATCH, SEQ, FP32, FP32),
                          Layout(dp=4, zero=3, shard_group=2), ANY_LINK,
                          Options(shard_padding=True, reshard_root=False))  # fmt: skip
    root = (-(-VOCAB // 2) * 2 * HIDDEN + SEQ * HIDDEN + 2 * HIDDEN) * 4  # wte padded to 130 rows + wpe + ln_f: 37,888 B
    layer = gpt(2).params_per_layer * 4  # 199,936 B
    assert root == 37_888 and layer == 199_936
    assert plan_sizes(plan, Collective.ALL_GATHER) == Counter({root: 1, layer: 4})
    assert plan_sizes(plan, Collective.REDUCE_SCATTER) == Counter({root: 1, layer: 2})
    assert plan_sizes(plan, Collective.ALL_REDUCE) == Counter({root // 2: 1, layer // 2: 2})
    groups = {(r.op, r.group_size, r.groups) for r in plan.calls}
    assert groups == {(Collective.ALL_GATHER, 2, 2), (Collective.REDUCE_SCATTER, 2, 2), (Collective.ALL_REDUCE, 2, 2)}
    shard_groups, replica_groups = {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}, {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}
    for rank in range(4):
        calls = measured.calls("hsdp", "step1", rank)
        for op, collective in (("all-gather", Collective.ALL_GATHER), ("reduce-scatter", Collective.REDUCE_SCATTER),
                               ("all-reduce", Collective.ALL_REDUCE)):  # fmt: skip
            assert measured.sizes("hsdp", "step1", op, rank) == plan_sizes(plan, collective), (rank, op)
        assert {tuple(c["ranks"]) for c in calls if c["op"] != "all-reduce"} == {shard_groups[rank]}
        assert {tuple(c["ranks"]) for c in calls if c["op"] == "all-reduce"} == {replica_groups[rank]}
        # each unit's all-reduce follows its reduce-scatter (foreach_reduce), in backward order
        reduces = [(c["op"], c["bytes"]) for c in calls if c["op"] in ("reduce-scatter", "all-reduce")]
        assert reduces == [(op, size) for unit in (layer, layer, root) for op, size in (("reduce-scatter", unit), ("all-reduce", unit // 2))]
    assert {c["op"] for c in measured.calls("hsdp", "step1", 0, dtype=None)} == {"all-gather", "reduce-scatter", "all-reduce"}
    assert measured.scenario("hsdp")["setup"] == []


# ---------------------------------------------------------------------------------------------
# Tensor and sequence parallelism


def test_tensor_parallel_megatron_layout(measured: Measured) -> None:
    # Per layer 2 all-reduces forward (attention out, MLP down) and 2 backward (before Q/K/V and MLP up),
    # each of b x s x h x 4 = 4 x 16 x 64 x 4 = 16,384 B: 8 for 2 layers. Embedding and head replicated.
    n = measured.world
    plan = iteration_plan(gpt(2), Workload(BATCH, BATCH, SEQ, FP32, FP32), Layout(tp=n), ANY_LINK, Options(vocab_parallel=False))
    assert plan_sizes(plan, Collective.ALL_REDUCE) == Counter({16_384: 8})
    calls = measured.calls("tp", "step1", dtype=None)
    assert Counter(c["bytes"] for c in calls if c["op"] == "all-reduce") == plan_sizes(plan, Collective.ALL_REDUCE)
    assert {(c["op"], c["group"]) for c in calls} == {("all-reduce", n)}


def test_sequence_parallel(measured: Measured) -> None:
    # Each layer all-reduce becomes an all-gather + reduce-scatter of 16,384 B (8 of each); the embedding
    # output's gradient and the LM head's input are gathered once more each (10 all-gathers). The norm
    # gradients are all-reduced, 64 x 4 = 256 B per tensor: 4 per layer + the final norm's 2 = 10.
    # PyTorch differs from Megatron in three named ways (Options): it adds the row-parallel bias before
    # the reduce-scatter, so that gradient needs no all-reduce (sp_row_bias_sync=False), it
    # all-reduces each tensor on its own (coalesce_sp_grads=False), and autograd keeps the gathered
    # input of each column-parallel linear for its weight gradient, where Megatron keeps the sequence
    # shard and gathers it again in backward (sp_regather=False).
    n = measured.world
    opts = Options(vocab_parallel=False, sp_row_bias_sync=False, coalesce_sp_grads=False, sp_regather=False)
    plan = iteration_plan(gpt(2), Workload(BATCH, BATCH, SEQ, FP32, FP32), Layout(tp=n, sequence_parallel=True), ANY_LINK, opts)
    assert plan_sizes(plan, Collective.ALL_GATHER) == Counter({16_384: 10})
    assert plan_sizes(plan, Collective.REDUCE_SCATTER) == Counter({16_384: 8})
    assert plan_sizes(plan, Collective.ALL_REDUCE) == Counter({256: 10})
    for op, collective in (("all-gather", Collective.ALL_GATHER), ("reduce-scatter", Collective.REDUCE_SCATTER),
                           ("all-reduce", Collective.ALL_REDUCE)):  # fmt: skip
        assert measured.sizes("sp", "step1", op) == plan_sizes(plan, collective), op
    # Megatron's defaults: one coalesced all-reduce that also carries the 4 row-parallel biases (4 x 256 B more).
    megatron = iteration_plan(gpt(2), Workload(BATCH, BATCH, SEQ, FP32, FP32), Layout(tp=n, sequence_parallel=True),
                              ANY_LINK, Options(vocab_parallel=False))  # fmt: skip
    assert plan_sizes(megatron, Collective.ALL_REDUCE) == Counter({14 * 256: 1})
    # and Megatron's re-gather of the Q/K/V and MLP-up inputs in backward: 2 per layer more (the LM head is
    # replicated here, vocab_parallel=False, so it re-gathers nothing)
    assert plan_sizes(megatron, Collective.ALL_GATHER) == Counter({16_384: 14})


def test_tensor_parallel_known_differences(measured: Measured) -> None:
    # parallelize_module distributes the weights from rank 0 (distribute_tensor, src_data_rank=0):
    # scatters of the sharded tensors and broadcasts of the replicated row-parallel biases, once.
    for name in ("tp", "sp"):
        assert {c["op"] for c in measured.scenario(name)["setup"]} == {"scatter", "broadcast"}


def test_fsdp2_with_tensor_parallel_2d(measured: Measured) -> None:
    # 2D on 4 ranks: TP inside the pairs (0, 1) and (2, 3), FSDP2 across them (a 2 x 2 mesh, TP ranks
    # adjacent as in parcalc's Megatron layout). parcalc's 3D planner: FSDP2 gathers each device's TP
    # shard of a layer (49,984 / 2 + replicated norms and row biases = 25,184 elements = 100,736 B) and the
    # TP-replicated root (padded wte 130 rows + wpe + ln_f = 9,472 elements = 37,888 B); TP all-reduces
    # b x s x h x 4 = 16,384 B 4 times per layer, with each replica's own batch of 4.
    if measured.world < 4:
        assert measured.ranks[0]["fsdp-tp"] == {"not run": "2D needs 4 ranks"}
        return
    plan = iteration_plan(gpt(2), Workload(2 * BATCH, BATCH, SEQ, FP32, FP32), Layout(tp=2, dp=2, zero=3),
                          ANY_LINK, Options(vocab_parallel=False, reshard_root=False))  # fmt: skip
    assert plan_sizes(plan, Collective.ALL_GATHER) == Counter({37_888: 1, 100_736: 4})
    for rank in range(4):
        for op, collective in (("all-gather", Collective.ALL_GATHER), ("reduce-scatter", Collective.REDUCE_SCATTER),
                               ("all-reduce", Collective.ALL_REDUCE)):  # fmt: skip
            assert measured.sizes("fsdp-tp", "step1", op, rank) == plan_sizes(plan, collective), (rank, op)
        assert {c["group"] for c in measured.calls("fsdp-tp", "step1", rank)} == {2}
    assert {(r.dimension, r.group_size, r.groups) for r in plan.calls} == {("dp", 2, 2), ("tp", 2, 2)}


# ---------------------------------------------------------------------------------------------
# Pipeline parallelism


@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B], ids=["gpipe", "1f1b"])
def test_pipeline_point_to_point(measured: Measured, schedule: Schedule) -> None:
    # One layer per stage, batch 4 in micro-batches of 1: on each boundary 4 sends of 1 x 16 x 64 x 4 =
    # 4,096 B forward (activations) and 4 backward (their gradients), for GPipe and 1F1B alike.
    n, name = measured.world, f"pp-{schedule.value}"
    plan = iteration_plan(gpt(n, tied=False), Workload(BATCH, 1, SEQ, FP32, FP32), Layout(pp=n, schedule=schedule), ANY_LINK)
    forward = [r for r in plan.calls if r.phase == "forward"]
    backward = [r for r in plan.calls if r.phase == "backward"]
    assert [(r.calls, r.bytes_per_call, r.groups) for r in forward] == [(4, 4096, n - 1)]
    assert [(r.calls, r.bytes_per_call, r.groups) for r in backward] == [(4, 4096, n - 1)]
    sends: Counter = Counter()
    for rank in range(n):
        for call in measured.calls(name, "step2", rank):
            if call["op"] == "send":
                sends[(rank, call["peer"], call["bytes"])] += 1
    expected = Counter()
    for stage in range(n - 1):
        expected[(stage, stage + 1, forward[0].bytes_per_call)] += forward[0].calls
        expected[(stage + 1, stage, backward[0].bytes_per_call)] += backward[0].calls
    assert sends == expected
    assert all(c["op"] in ("send", "recv") for r in range(n) for c in measured.calls(name, "step2", r, dtype=None))


@pytest.mark.parametrize("name", ["pp-gpipe", "pp-1f1b"])
def test_pipeline_known_differences(measured: Measured, name: str) -> None:
    # docs/known-differences.md: the first step also exchanges, between neighbours, a warm-up vote
    # (int32) and the tensor metadata as pickled object lists (int64 length + uint8 bytes); from the
    # second step on only the activations and gradients move. No loss is all-reduced.
    for rank in range(measured.world):
        step1, step2 = measured.scenario(name, rank)["step1"], measured.scenario(name, rank)["step2"]
        extra = [c for c in step1 if c["dtype"] != "float32"]
        assert {c["dtype"] for c in extra} <= {"int32", "int64", "uint8"}
        assert {c["op"] for c in extra} <= {"send", "recv"} and sum(c["bytes"] for c in extra) < 1024
        assert Counter(c["bytes"] for c in step1 if c["dtype"] == "float32") == Counter(c["bytes"] for c in step2)
