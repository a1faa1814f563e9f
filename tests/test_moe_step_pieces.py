"""The data-parallel and optimizer pieces of an MoE model's step (parcalc.core.timing.step), and
the DualPipe comparison fit states beside its 1F1B bubble.

Megatron-Core keeps the routed experts' parameters in their own buffers and reduces their
gradients over the expert-data-parallel group (edp = tp x dp x cp / (ep x etp) ranks, etp x ep
apart), the dense ones over the dp-cp group (megatron/core/distributed/distributed_data_parallel.py,
expert_parallel_buffers; parallel_state.py get_expert_data_parallel_group). Each expected value
below is built by hand from collective_time, the one collective model."""

from __future__ import annotations

import math

import pytest

from parcalc.core.choices import Collective, Recompute
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.layout import Layout
from parcalc.core.memory import stage_expert_parameters, stage_parameters
from parcalc.core.timing.compute import layer_passes
from parcalc.core.timing.network import collective_time, placement
from parcalc.core.timing.step import dp_pieces, layer_pieces, optimizer_step_time, weight_gradients
from parcalc.presets import load_framework, load_gpu, load_link, load_model

H100 = load_gpu("h100-sxm5", ())
MIXTRAL = load_model("mixtral-8x7b", ())


def h100_cluster(gpus: int) -> Cluster:
    node = H100.node
    return Cluster(gpus, 8, H100.dtypes["bf16"].dense_peak.value, H100.memory_capacity.value, load_link(node.intra_link, ()),
                   load_link(node.inter_link, ()), gpu=H100, framework=load_framework("megatron", ()), nics_per_node=8)  # fmt: skip


TRAINING = Training(256, 4096, flash_attention=True)


def _reduce_scatter(params: float, ranks: int, stride: int, cluster: Cluster) -> float:
    """Megatron's buckets of max(40M, 1M x ranks) parameters, each a reduce-scatter of fp32 gradients."""
    framework = cluster.framework
    wire = framework.reduce_bytes
    buckets = max(1, math.ceil(params / framework.bucket_params(ranks, wire)))
    group = placement(ranks, stride, cluster.gpus_per_node)
    return buckets * collective_time(Collective.REDUCE_SCATTER, params / buckets * wire, group, cluster.fabric).time


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_expert_gradients_reduce_over_expert_dp_and_dense_over_dp(ep: int) -> None:
    """Mixtral 8x7B on 64 H100s, TP 1 x PP 4 x DP 16: the dense parameters of the fullest stage
    reduce-scatter over the 16 DP ranks (tp = 1 apart), the routed experts
    (8 / ep per GPU) over edp = 16 / ep ranks, ep apart."""
    cluster = h100_cluster(64)
    par = Layout(1, 4, 16, ep=ep)
    params = [stage_parameters(MIXTRAL, par, s).value for s in range(4)]
    fullest = max(range(4), key=lambda s: params[s])
    experts = stage_expert_parameters(MIXTRAL, par, fullest)
    dense = params[fullest] - experts
    assert experts == 32 // 4 * 8 // ep * 3 * 4096 * 14336  # 8 layers a stage, 8/ep experts of 3 x h x f each
    expected = _reduce_scatter(dense, 16, 1, cluster) + (_reduce_scatter(experts, 16 // ep, ep, cluster) if ep < 16 else 0.0)
    pieces = dp_pieces(MIXTRAL, Layout(1, 4, 16, ep=ep), TRAINING, cluster)
    assert pieces.grad_reduce_scatter == pytest.approx(expected, rel=1e-12)


def test_zero0_optimizer_updates_only_the_local_experts() -> None:
    """ZeRO-0 (no sharding): the step updates the fullest stage's dense parameters and its 8 / ep
    experts; ZeRO-1 shards the dense ones over dp x cp = 16 and the experts over edp = 16 / ep."""
    cluster = h100_cluster(64)
    one = optimizer_step_time(MIXTRAL, Layout(1, 4, 16, ep=1), TRAINING, cluster)
    eight = optimizer_step_time(MIXTRAL, Layout(1, 4, 16, ep=8), TRAINING, cluster)
    par1, par8 = Layout(1, 4, 16, ep=1), Layout(1, 4, 16, ep=8)
    ratio = max(stage_parameters(MIXTRAL, par8, s).value for s in range(4)) / max(stage_parameters(MIXTRAL, par1, s).value for s in range(4))
    assert float(eight) / float(one) == pytest.approx(ratio, rel=1e-12)
    sharded = optimizer_step_time(MIXTRAL, Layout(1, 4, 16, ep=8, zero=1), TRAINING, cluster)
    fullest = max(range(4), key=lambda s: stage_parameters(MIXTRAL, par8, s).value)  # the last: head and final norm
    experts = stage_expert_parameters(MIXTRAL, par8, fullest)
    dense = stage_parameters(MIXTRAL, par8, fullest).value - experts
    assert float(sharded) == pytest.approx(float(eight) * (dense / 16 + experts / 2) / (dense + experts), rel=1e-12)


def test_weight_gradients_are_the_linears_wgrad_kernels() -> None:
    """Llama 3 8B layer: dW of qkv, proj, gate_up and down, nothing of attention's core GEMMs."""
    from parcalc.core.timing.compute import LayerShard

    cluster = h100_cluster(8)
    model = load_model("llama3-8b", ())
    pieces = layer_pieces(model, Layout(), 1, Recompute.NONE, Training(8, 4096), cluster)
    shard = LayerShard(1, 4096, 1, False, False, False, True, 2.0, 1, "")
    passes = layer_passes(model, shard, cluster.spec)
    wanted = {"qkv.wgrad", "proj.wgrad", "mlp.gate_up.wgrad", "mlp.down.wgrad"}
    assert {k.key for k in passes.backward if k.key.endswith(".wgrad")} == wanted | {"attn.context.wgrad", "attn.scores.wgrad"}
    assert weight_gradients(passes) == pytest.approx(sum(k.time for k in passes.backward if k.key in wanted), rel=1e-12)
    assert pieces.wgrad_dense == pytest.approx(weight_gradients(passes), rel=1e-12)


def test_fit_states_dualpipe_beside_the_1f1b_bubble_for_moe_pipelines() -> None:
    cluster = h100_cluster(64)
    config = Config.of(1, 4, 16, 1, Recompute.NONE, 1, ep=8)
    result = estimate(MIXTRAL, config, TRAINING, cluster)
    notes = " ".join(result.bubble.assumptions)
    assert "DualPipe" in notes and "(p/2 - 1)(F&B + B - 3W)" in notes
    # the numbers in the note: DualPipe's bubble from the slowest stage's F, B, W, and 1F1B's (p - 1)(F + B)
    from parcalc.core.pipeline import dualpipe_bubble
    from parcalc.core.timing.step import stage_pieces
    from parcalc.units import format_time

    stage, _, _ = stage_pieces(MIXTRAL, Layout(1, 4, 16), 1, Recompute.NONE, TRAINING, cluster, experts=config.experts())
    lp = layer_pieces(MIXTRAL, Layout(), 1, Recompute.NONE, TRAINING, cluster, experts=config.experts())
    f, b = stage.forward, stage.backward + stage.recompute
    w = stage.moe_layers * lp.wgrad_moe + (stage.layers - stage.moe_layers) * lp.wgrad_dense
    assert 0 < w < b
    assert f"would leave {format_time(dualpipe_bubble(4, f, b, w))} idle" in notes
    assert f"1F1B's (p - 1)(F + B) is {format_time(3 * (f + b))}" in notes
    # DeepSeek-V3 Table 2 by hand: PP 16, one chunk F = 1, B = 2, W = 0.8 (the stage holds two chunks): 7 x (1 + 2 + 2 - 2.4)
    assert dualpipe_bubble(16, 2.0, 4.0, 1.6) == pytest.approx(7 * 2.6)
    assert dualpipe_bubble(2, 2.0, 4.0, 1.6) == 0.0  # PP 2: p/2 - 1 = 0
    dense = estimate(load_model("llama3-8b", ()), Config.of(1, 4, 16, 1, Recompute.NONE, 1), TRAINING, cluster)
    assert not any("DualPipe" in a for a in dense.bubble.assumptions)
