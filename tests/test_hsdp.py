"""Hybrid sharding (--shard-group S; parcalc.core.sharding): ZeRO states over S of the dp x cp
data-parallel ranks, replicated over dp x cp / S groups, in memory, the communication plan, the
step time, the search and the CLI.

Expected values are derived by hand from the formulas cited in each test: ZeRO's divisors
(Rajbhandari et al. 2020 sec. 5) with N_d replaced by S; FSDP2's HSDP reduce (torch 2.13.0
torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, foreach_reduce: reduce-scatter over the
shard group, then an all-reduce of the reduce-scatter's output, 1/S of the unit, over the replicate
group); Megatron-LM's --num-distributed-optimizer-instances (param_and_grad_buffer.py at d98e8a6,
start_grad_sync: each bucket reduce-scattered in its instance, its local shard all-reduced across
instances). The call-for-call check against real PyTorch is
tests/ground_truth/test_torch_collectives.py::test_hsdp_fully_shard_on_a_2x2_mesh.
"""

from __future__ import annotations

import json
import random

import pytest

from parcalc.cli import app
from parcalc.core.choices import Collective, Optimizer, Precision, Recompute
from parcalc.core.comm import Network, Options, Workload, iteration_plan
from parcalc.core.fit import Cluster, Config, Training, estimate, invalid_reason
from parcalc.core.fit_search import SearchSpace, search
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.model_states import model_states, state_bytes
from parcalc.core.timing.network import collective_time, placement
from parcalc.core.timing.step import dp_pieces
from parcalc.core.training_setup import TrainingSetup
from parcalc.errors import InputError
from parcalc.help_panels import examples_block
from parcalc.presets import load_framework, load_gpu, load_link, load_model

MIXED_ADAMW = state_bytes(Precision.MIXED_BF16, Optimizer.ADAMW)  # w 2, g 2, K 12 (ZeRO sec. 3.1)
H100 = load_gpu("h100-sxm5", ())


def h100_cluster(gpus: int, framework: str = "fsdp2") -> Cluster:
    node = H100.node
    return Cluster(gpus, 8, H100.dtypes["bf16"].dense_peak.value, H100.memory_capacity.value, load_link(node.intra_link, ()),
                   load_link(node.inter_link, ()), gpu=H100, framework=load_framework(framework, ()), nics_per_node=8)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Memory: the ZeRO divisor is S


@pytest.mark.parametrize(("zero", "weights", "gradients", "optimizer"), [
    (1, 2e9, 2e9, 12e9 / 8),        # P_os: optimizer states / S
    (2, 2e9, 2e9 / 8, 12e9 / 8),    # P_os+g: and gradients
    (3, 2e9 / 8, 2e9 / 8, 12e9 / 8),  # P_os+g+p: and weights
], ids=["zero1", "zero2", "zero3"])  # fmt: skip
def test_model_states_divide_by_the_shard_group(zero: int, weights: float, gradients: float, optimizer: float) -> None:
    # 1e9 parameters, mixed-bf16 AdamW (2 + 2 + 12 bytes), dp = 64, S = 8: ZeRO's Psi / N_d with N_d = S.
    states = model_states(1e9, MIXED_ADAMW, Layout(dp=64, zero=zero, shard_group=8))
    assert (states.weights.value, states.gradients.value, states.optimizer.value) == (weights, gradients, optimizer)
    assert "shard group S = 8" in states.optimizer.label
    # S = dp x cp is full sharding: the same bytes as no shard group; S = 16 over dp 8 x cp 2 likewise
    full, given = model_states(1e9, MIXED_ADAMW, Layout(dp=64, zero=zero)), model_states(1e9, MIXED_ADAMW, Layout(dp=64, zero=zero, shard_group=64))
    assert given.total == full.total
    assert model_states(1e9, MIXED_ADAMW, Layout(dp=8, cp=2, zero=zero, shard_group=16)).total == model_states(1e9, MIXED_ADAMW, Layout(dp=8, cp=2, zero=zero)).total


def test_memory_breakdown_of_llama3_70b_hsdp() -> None:
    # Llama 3 70B (70,553,706,496 parameters), dp 64, ZeRO-3 over S = 16: weights 2 x P / 16 = 8,819,213,312 B,
    # optimizer states 12 x P / 16 = 52,915,279,872 B; the gathered working set does not depend on S.
    model = load_model("llama3-70b", ())
    setup = TrainingSetup(1, 4096, recompute=Recompute.FULL, flash_attention=True)
    hybrid = memory_breakdown(model, Layout(dp=64, zero=3, shard_group=16), setup).worst
    full = memory_breakdown(model, Layout(dp=64, zero=3), setup).worst
    assert hybrid.states.weights.value == 8_819_213_312 == 2 * 70_553_706_496 / 16
    assert hybrid.states.optimizer.value == 52_915_279_872
    assert hybrid.gathered is not None and full.gathered is not None and hybrid.gathered.value == full.gathered.value
    assert hybrid.total.value - full.total.value == pytest.approx(16 * 70_553_706_496 * (1 / 16 - 1 / 64))


def test_moe_experts_stay_sharded_over_expert_dp() -> None:
    # Mixtral 8x7B, tp 2, dp 16, ep 8, etp 1, ZeRO-1: dense states over N_d = 16, experts over expert-DP 2 x 16 / 8 = 4.
    # A shard group S = 8 changes the dense part's divisor only: K x Psi_d x (1/8 - 1/16) more, the experts' as before.
    model = load_model("mixtral-8x7b", ())
    setup = TrainingSetup(1, 4096, flash_attention=True)
    par = Layout(tp=2, dp=16, zero=1, ep=8, etp=1)
    full = memory_breakdown(model, par, setup).worst
    hybrid = memory_breakdown(model, Layout(tp=2, dp=16, zero=1, ep=8, etp=1, shard_group=8), setup).worst
    dense = next(t.value for t in hybrid.states.optimizer.inputs if t.key == "psi_d")
    assert next(t.value for t in hybrid.states.optimizer.inputs if t.key == "N_e") == 4
    assert next(t.value for t in hybrid.states.optimizer.inputs if t.key == "N_d") == 8
    assert hybrid.states.optimizer.value - full.states.optimizer.value == pytest.approx(12 * dense * (1 / 8 - 1 / 16))


@pytest.mark.parametrize(("shard_group", "zero", "message"), [
    (3, 3, "3 does not divide the data-parallel ranks dp x cp = 64"),
    (128, 3, "128 does not divide"),
    (0, 3, "at least 1"),
    (-1, 2, "at least 1"),
    (8, 0, "with --zero 0 (DDP)"),
], ids=["not-a-divisor", "larger-than-dp", "zero", "negative", "zero-0"])  # fmt: skip
def test_bad_shard_groups(shard_group: int, zero: int, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        memory_breakdown(load_model("llama3-8b", ()), Layout(dp=64, zero=zero, shard_group=shard_group), TrainingSetup(1, 2048))


# ---------------------------------------------------------------------------------------------
# Communication per iteration

LINKS = Network(Link("nvl", "intra", Sourced(100e9, "B/s", "test"), Sourced(1e-6, "s", "test")),
                Link("net", "inter", Sourced(25e9, "B/s", "test"), Sourced(5e-6, "s", "test")))  # fmt: skip


def _rows(plan, op: Collective) -> list:
    return [r for r in plan.calls if r.op is op]


def test_zero1_hsdp_on_two_nodes_reduces_in_the_node_and_all_reduces_the_shard_across() -> None:
    # llama3-8b, dp 16 on 2 nodes of 8, ZeRO-1 with S = 8 (Megatron's --num-distributed-optimizer-instances 2):
    # reduce-scatters and all-gathers in 2 groups of 8 ranks 0-7 and 8-15 (inside a node each), then each bucket's 1/8 shard
    # all-reduced in 8 replica groups {i, i + 8} (across the nodes). Payloads: all-reduce = reduce-scatter / 8.
    model = load_model("llama3-8b", ())
    work = Workload(16, 1, 2048, 2.0, 2.0)
    plan = iteration_plan(model, work, Layout(dp=16, zero=1, shard_group=8), LINKS)
    (rs,), (ar,), (ag,) = _rows(plan, Collective.REDUCE_SCATTER), _rows(plan, Collective.ALL_REDUCE), _rows(plan, Collective.ALL_GATHER)
    assert (rs.group_size, rs.groups, rs.inter_node) == (8, 2, False)
    assert (ag.group_size, ag.groups, ag.inter_node) == (8, 2, False)
    assert (ar.group_size, ar.groups, ar.inter_node) == (2, 8, True)
    assert ar.calls == rs.calls and ar.payload == pytest.approx(rs.payload / 8)
    assert rs.payload == model.total_params * 2.0  # every gradient once, bf16
    headline = {d.key: d.value for d in plan.derivations}["hsdp_all_reduce_payload"]
    assert headline == pytest.approx(model.total_params * 2.0 / 8)
    # without the shard group: one reduce-scatter group of 16 across the nodes, no all-reduce
    full = iteration_plan(model, work, Layout(dp=16, zero=1), LINKS)
    assert {(r.op, r.group_size, r.inter_node) for r in full.calls} == {(Collective.REDUCE_SCATTER, 16, True), (Collective.ALL_GATHER, 16, True)}


def test_zero3_hsdp_groups_with_tensor_and_context_parallelism() -> None:
    # tp 2, cp 2, dp 2 on nodes of 4: the dp-cp index j sits at rank t + 2 j. S = 2: shard groups j in {0, 1} -> ranks
    # {t, t + 2} (one node, 0-3), replica groups j in {0, 2}, {1, 3} -> ranks {t, t + 4}, {t + 2, t + 6} (across nodes).
    # Each unit's gradient shard all-reduced is half its reduce-scatter (units padded to a multiple of S = 2).
    model = load_model("llama3-8b", ())
    par = Layout(tp=2, dp=2, cp=2, zero=3, gpus_per_node=4, shard_group=2)
    plan = iteration_plan(model, Workload(2, 1, 4096, 2.0, 2.0), par, LINKS, Options(reshard_root=False))
    for row in plan.calls:
        if row.dimension != "dp":
            continue
        if row.op is Collective.ALL_REDUCE:
            assert (row.group_size, row.groups, row.inter_node) == (2, 4, True)
        else:
            assert (row.group_size, row.groups, row.inter_node) == (2, 4, False)
    (rs,) = _rows(plan, Collective.REDUCE_SCATTER)
    ar = next(r for r in plan.calls if r.op is Collective.ALL_REDUCE and r.dimension == "dp")
    assert ar.calls == rs.calls == model.layers + 1  # one per unit: 32 layers and the root
    assert ar.payload == pytest.approx(rs.payload / 2)


def test_shard_group_errors_in_the_plan() -> None:
    model, work = load_model("llama3-8b", ()), Workload(16, 1, 2048, 2.0, 2.0)
    with pytest.raises(InputError, match="does not divide"):
        iteration_plan(model, work, Layout(dp=16, zero=3, shard_group=6), LINKS)
    with pytest.raises(InputError, match="--zero 0"):
        iteration_plan(model, work, Layout(dp=16, shard_group=8), LINKS)


# ---------------------------------------------------------------------------------------------
# Time


def test_dp_pieces_time_the_shard_group_and_the_replicas() -> None:
    # Llama 3 70B on 512 H100 (8 per node), fsdp2 profile, dp 512, S = 8: a layer's gather and reduce-scatter over
    # 8 ranks in one node; its gradient shard (1/8, bf16 on the wire) all-reduced over 64 replicas, 8 apart (one per node).
    model, cluster = load_model("llama3-70b", ()), h100_cluster(512)
    training = Training(512, 4096, flash_attention=True)
    pieces = dp_pieces(model, Layout(1, 1, 512, zero=1, shard_group=8), training, cluster)
    layer = 855_654_400  # Llama 3 70B's parameters per layer (parcalc.core.memory.layer_params_per_rank)
    shards, replicas = placement(8, 1, 8), placement(64, 8, 8)
    assert (shards.nodes, replicas.nodes, replicas.per_node) == (1, 64, 1)
    assert pieces.layer_gather == collective_time(Collective.ALL_GATHER, layer * 2.0, shards, cluster.fabric).time
    assert pieces.layer_reduce == collective_time(Collective.REDUCE_SCATTER, layer * 2.0, shards, cluster.fabric).time
    assert pieces.layer_replica_reduce == collective_time(Collective.ALL_REDUCE, layer * 2.0 / 8, replicas, cluster.fabric).time
    full = dp_pieces(model, Layout(1, 1, 512, zero=1), training, cluster)
    assert full.layer_replica_reduce == full.grad_replica_all_reduce == 0.0
    assert pieces.grad_all_reduce == full.grad_all_reduce  # DDP's all-reduce does not change
    assert dp_pieces(model, Layout(1, 1, 512, zero=1, shard_group=512), training, cluster) == full


def test_estimate_t_dp_formula_adds_the_replica_all_reduce_to_each_reduce() -> None:
    # ZeRO-3 with overlap (fsdp2): t_dp = m (g_0 + g + (L-1) max(0, g - f_l) + L max(0, g - b_l))
    #                                    + m (L max(0, (r + a) - max(0, b_l - g)) + (r + a))  (fsdp2 reduces every micro-batch)
    model, cluster = load_model("llama3-70b", ()), h100_cluster(512)
    training = Training(1024, 4096, flash_attention=True)
    config = Config.of(1, 1, 512, 1, Recompute.FULL, 3, shard_group=64)
    result = estimate(model, config, training, cluster)
    v = {t.key: t.value for t in result.dp_comm.inputs}
    assert v["a"] > 0 and "($r + $a)" in result.dp_comm.formula
    m, layers, g, r, a, g0, f, b = v["m"], v["L_s"], v["g"], v["r"], v["a"], v["g_0"], v["f_l"], v["b_l"]
    by_hand = m * (g0 + g + (layers - 1) * max(0, g - f) + layers * max(0, g - b)) + m * (layers * max(0, r + a - max(0, b - g)) + r + a)
    assert result.dp_comm.value == pytest.approx(by_hand, rel=1e-12)
    assert m == 2
    # the optimizer's shard is 1/S; S = dp x cp is the full-sharding estimate exactly
    assert next(t.value for t in result.optimizer.inputs if t.key == "d_z") == 64
    same = estimate(model, Config.of(1, 1, 512, 1, Recompute.FULL, 3, shard_group=512), training, cluster)
    plain = estimate(model, Config.of(1, 1, 512, 1, Recompute.FULL, 3), training, cluster)
    assert same.step.value == plain.step.value and same.total_memory == plain.total_memory


def test_estimate_zero1_hsdp_reduce_includes_the_shard_all_reduce() -> None:
    # Megatron profile, ZeRO-1, S = 8 on dp 64 (8 nodes): max(T_rs + T_ar - W_b, (T_rs + T_ar) / n_b) + max(T_ag - W_f, T_ag / n_b)
    model, cluster = load_model("llama3-8b", ()), h100_cluster(64, "megatron")
    result = estimate(model, Config.of(1, 1, 64, 1, Recompute.NONE, 1, shard_group=8), Training(64, 4096, flash_attention=True), cluster)
    v = {t.key: t.value for t in result.dp_comm.inputs}
    assert v["T_ar"] > 0
    rs = v["T_rs"] + v["T_ar"]
    assert result.dp_comm.value == pytest.approx(max(rs - v["W_b"], rs / v["n_b"]) + max(v["T_ag"] - v["W_f"], v["T_ag"] / v["n_b"]))


# ---------------------------------------------------------------------------------------------
# The search


def test_shard_group_candidates() -> None:
    space = SearchSpace()
    assert space.shard_groups_of(64, 1, 8) == [8, 16, 32, 64]  # one node's share of dp (8 / tp) up to dp
    assert space.shard_groups_of(32, 2, 8) == [4, 8, 16, 32]
    assert space.shard_groups_of(4, 1, 8) == [4]  # dp inside a node: full sharding only
    assert space.shard_groups_of(24, 1, 8) == [8, 12, 24]  # divisors only
    assert SearchSpace(shard_group=16).shard_groups_of(64, 1, 8) == [16]
    assert SearchSpace(shard_group=16).shard_groups_of(24, 1, 8) == []
    assert SearchSpace(hybrid=False).shard_groups_of(64, 1, 8) == [64]


def test_search_agrees_with_estimate_on_hybrid_configurations() -> None:
    # tests/test_fit_search.py's equality, on rows whose shard group is smaller than dp x cp
    model, cluster = load_model("llama3-8b", ()), h100_cluster(64)
    training = Training(256, 4096, flash_attention=True)
    found = search(model, training, cluster, SearchSpace(zero_stages=(0, 1, 2, 3)))
    c = found.evaluated.columns
    hybrid = [i for i in range(len(found.evaluated))
              if c["zero"][i] >= 1 and c["shard_group"][i] < c["dp"][i] * c["cp"][i] and c["fits"][i]]  # timed: those that fit
    assert len(hybrid) > 100
    assert {int(c["shard_group"][i]) for i in hybrid} >= {8, 16, 32}
    for i in random.Random(18).sample(hybrid, 40):
        config = found.evaluated.config(i)
        assert config.layout.shard_group == int(c["shard_group"][i]) and invalid_reason(model, config, training, cluster) is None
        scalar = estimate(model, config, training, cluster)
        for key, value in (("memory", scalar.total_memory), ("t_dp", scalar.dp_comm.value), ("t_optimizer", scalar.optimizer.value),
                           ("t_step", scalar.step.value), ("fits", scalar.fits)):  # fmt: skip
            assert c[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (config.label(), key)
    # ZeRO-0 rows are evaluated once, with S = dp x cp
    zero0 = c["zero"] == 0
    assert (c["shard_group"][zero0] == (c["dp"] * c["cp"])[zero0]).all()


def test_pinned_shard_group_in_the_search() -> None:
    model, cluster = load_model("llama3-8b", ()), h100_cluster(64)
    found = search(model, Training(256, 4096, flash_attention=True), cluster, SearchSpace(zero_stages=(1, 3), shard_group=16))
    c = found.evaluated.columns
    assert set(c["shard_group"].tolist()) == {16}
    assert found.rejected["shard group does not divide dp x cp (ZeRO-1/2/3)"] > 0  # layouts with dp = 8, 4, 2, 1


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_json_carries_the_shard_group(run_json) -> None:
    memory = run_json("memory", "--model", "llama3-70b", "--seq-len", "4096", "--dp", "64", "--zero", "3", "--shard-group", "16")
    assert memory["settings"]["shard_group"] == 16
    assert memory["results"]["weights"]["value"] == 2 * 70_553_706_496 / 16
    comm = run_json("comm-volume", "--strategy", "fsdp", "--model", "llama3-8b", "--batch", "16", "--seq-len", "2048", "--gpus", "16",
                    "--shard-group", "8")  # fmt: skip
    text = json.dumps(comm)
    assert "hsdp_all_reduce_payload" in text and "gradient shards (across the replicas)" in text
    fit = run_json("fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "64", "--seq-len", "4096",
                   "--tp", "1", "--pp", "1", "--zero", "3", "--shard-group", "8", "--framework", "fsdp2")  # fmt: skip
    assert fit["settings"]["shard_group"] == 8 and "shard group 8" in json.dumps(fit["verdicts"])
    assert fit["results"]["t_dp"]["inputs"]["a"]["value"] > 0  # the replica all-reduce of a layer's shard


def test_cli_search_shows_the_shard_group_column(run_json) -> None:
    found = run_json("fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "256", "--seq-len", "4096",
                     "--search", "--framework", "fsdp2", "--flash-attention")  # fmt: skip
    columns = [col["key"] for col in found["tables"]["configurations"]["columns"]]
    assert "shard_group" in columns
    rows = found["tables"]["configurations"]["rows"]
    assert {row["shard_group"] for row in rows if row["zero"] == 3 and row["dp"] == 64} == {8, 16, 32, 64}


@pytest.mark.parametrize("args", [
    ["memory", "--model", "llama3-8b", "--dp", "64", "--zero", "3", "--shard-group", "3"],
    ["memory", "--model", "llama3-8b", "--dp", "64", "--zero", "3", "--shard-group", "0"],
    ["memory", "--model", "llama3-8b", "--dp", "64", "--zero", "3", "--shard-group", "-1"],
    ["memory", "--model", "llama3-8b", "--dp", "64", "--zero", "3", "--shard-group", "abc"],
    ["memory", "--model", "llama3-8b", "--dp", "64", "--zero", "3", "--shard-group", "1e30"],
    ["memory", "--model", "llama3-8b", "--dp", "64", "--shard-group", "8"],
    ["comm-volume", "--strategy", "all", "--model", "llama3-8b", "--gpus", "16", "--shard-group", "8"],
    ["comm-volume", "--strategy", "dp", "--model", "llama3-8b", "--gpus", "16", "--shard-group", "8"],
    ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "8", "--shard-group", "8"],
    ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "16", "--shard-group", "8"],
    ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "16", "--tp", "1", "--pp", "1", "--zero", "3", "--shard-group", "3"],
], ids=["not-a-divisor", "zero", "negative", "not-a-number", "huge", "zero-0", "strategy-all", "ddp", "collective", "fit-table",
        "fit-not-a-divisor"])  # fmt: skip
def test_cli_bad_shard_group_is_one_line_exit_2(run_error, args: list[str]) -> None:
    line = run_error(args)
    assert line.startswith("Error: ") and "shard-group" in line


def test_cli_help_and_examples(runner) -> None:
    for command in ("memory", "comm-volume", "fit"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "--shard-group" in result.output and "--shard-group" in examples_block(result.output)
