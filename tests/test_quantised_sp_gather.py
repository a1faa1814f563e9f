"""Sequence parallelism's all-gathers under FP8 / NVFP4 on Transformer Engine carry the quantised tensor (issue #32).

TE quantises a column-parallel linear's local input shard and all-gathers the quantised copy (NVIDIA/TransformerEngine
@d0067d0d module/linear.py:347-411, layernorm_linear.py:283-313), gathers the saved quantised shard again in backward
(linear.py:955-998) and a row-parallel linear's output gradient quantised (base.py:1719-1751); distributed.py
_all_gather_fp8 moves the FP8 data only ('Assume scaling factors are identical across ranks'), the block-scaled gathers
their data and scales. Current scaling and NVFP4 all-reduce the shard's amax over the TP group before the cast
(linear.py:351-355, 809-823; csrc/quantizer.cpp:1015-1020). The reduce-scatters carry BF16 (linear.py:572)."""

from __future__ import annotations

import pytest

from parcalc.core.choices import Collective, Precision, Recompute
from parcalc.core.fit import Cluster, Training
from parcalc.core.layout import Layout
from parcalc.core.timing.fp8_quantise import gathered_bytes, reduces_amax_per_gather
from parcalc.core.timing.network import collective_time, placement
from parcalc.core.timing.step import layer_pieces
from parcalc.presets import load_framework, load_gpu, load_link, load_model

H100 = load_gpu("h100-sxm5", ())


def _cluster(dtype: str, framework: str = "megatron") -> Cluster:
    return Cluster(8, 8, H100.dtypes[dtype].dense_peak.value, H100.memory_capacity.value, load_link("nvlink4", ()),
                   load_link("ib-ndr", ()), gpu=H100, dtype=dtype, framework=load_framework(framework, ()))  # fmt: skip


def test_gathered_bytes_follow_te_quantised_tensor_layouts() -> None:
    """Bytes an element on the wire: per-tensor FP8 1 (the uint8 data, _all_gather_fp8), MXFP8 1 + 1/32 (an E8M0 scale
    a 32-block, _all_gather_mxfp8), blockwise 1 + 4/128 (an fp32 scale a 1 x 128 tile, Float8BlockScaling
    x_block_scaling_dim = 1), NVFP4 0.5 + 1/16 (E2M1 with an E4M3 scale a 16-block, _all_gather_nvfp4); BF16: none."""
    assert gathered_bytes("delayed") == gathered_bytes("current") == 1.0
    assert gathered_bytes("mxfp8") == pytest.approx(1.03125, rel=1e-15)
    assert gathered_bytes("blockwise") == pytest.approx(1.03125, rel=1e-15)
    assert gathered_bytes("nvfp4") == pytest.approx(0.5625, rel=1e-15)
    assert gathered_bytes("") is None
    # the per-tensor amax reduced over the TP group: current scaling and NVFP4 only (quantizer.cpp quantize_impl)
    assert [reduces_amax_per_gather(r) for r in ("delayed", "current", "mxfp8", "blockwise", "nvfp4")] == [False, True, False, False, True]


def test_one_layer_tp_time_under_fp8_current_scaling_by_hand() -> None:
    """Llama 3 8B, TP 8 with SP on one H100 node, micro-batch 1 x 8192 tokens, FP8 current scaling on Megatron-LM (TE):
    per TP site and direction one all-gather of b s h x 1 byte (8192 x 4096 = 33.5 MB), one all-reduce of one fp32 amax
    and one reduce-scatter of b s h x 2 bytes; two sites (attention, MLP), forward and backward: 4 of each a layer.
    The backward re-gathers of the column-parallel inputs move the saved FP8 shard: 1 byte an element, no amax."""
    model = load_model("llama3-8b", ())
    cluster = _cluster("fp8")
    training = Training(8, 8192, Precision.FP8, fp8_recipe="current")
    lp = layer_pieces(model, Layout(tp=8, sequence_parallel=True), 1, Recompute.NONE, training, cluster)
    group, fabric = placement(8, 1, 8), cluster.fabric
    bsh = 1 * 8192 * 4096
    gather = collective_time(Collective.ALL_GATHER, bsh * 1.0, group, fabric).time
    amax = collective_time(Collective.ALL_REDUCE, 4.0, group, fabric).time
    scatter = collective_time(Collective.REDUCE_SCATTER, bsh * 2.0, group, fabric).time
    assert lp.tp_layer == pytest.approx(4 * (gather + amax + scatter), rel=1e-12)
    assert lp.regather == pytest.approx(2 * gather, rel=1e-12)  # Q/K/V and MLP gate-up: 2 column-parallel inputs
    # against BF16's gather of the same b s h: the FP8 gather is cheaper; the amax all-reduce costs its latency only
    assert gather < collective_time(Collective.ALL_GATHER, bsh * 2.0, group, fabric).time
    assert amax == pytest.approx(collective_time(Collective.ALL_REDUCE, 1.0, group, fabric).time, rel=0.01)


def test_torchtitan_gathers_bf16_under_fp8() -> None:
    """torchtitan @b5bcd76c shards with plain DTensor ColwiseParallel (since 1786292db; its Float8Linear casts after the
    gather): the same run times the all-gathers at BF16's 2 bytes (presets/frameworks/torchtitan.yaml float8_tp)."""
    model = load_model("llama3-8b", ())
    cluster = _cluster("fp8", "torchtitan")
    training = Training(8, 8192, Precision.FP8, fp8_recipe="current")
    lp = layer_pieces(model, Layout(tp=8, sequence_parallel=True), 1, Recompute.NONE, training, cluster)
    group, fabric = placement(8, 1, 8), cluster.fabric
    bsh = 1 * 8192 * 4096
    gather = collective_time(Collective.ALL_GATHER, bsh * 2.0, group, fabric).time
    scatter = collective_time(Collective.REDUCE_SCATTER, bsh * 2.0, group, fabric).time
    assert lp.tp_layer == pytest.approx(4 * (gather + scatter), rel=1e-12)


def test_nvfp4_gathers_fp4_with_block_scales() -> None:
    """NVFP4 (--precision fp4: 0.5625 bytes an element, amax all-reduced) against MXFP8 (1.03125, no amax) on the same
    layer: the reduce-scatters are BF16 in both, so the layers' TP times differ by the gathers and NVFP4's amax reductions."""
    model = load_model("llama3-8b", ())
    cluster = _cluster("fp8")
    layout = Layout(tp=8, sequence_parallel=True)
    group, fabric = placement(8, 1, 8), cluster.fabric
    bsh = 8192 * 4096
    fp4 = layer_pieces(model, layout, 1, Recompute.NONE, Training(8, 8192, Precision.FP4), cluster)
    mx = layer_pieces(model, layout, 1, Recompute.NONE, Training(8, 8192, Precision.FP8, fp8_recipe="mxfp8"), cluster)
    g4 = collective_time(Collective.ALL_GATHER, bsh * 0.5625, group, fabric).time
    g8 = collective_time(Collective.ALL_GATHER, bsh * 1.03125, group, fabric).time
    amax = collective_time(Collective.ALL_REDUCE, 4.0, group, fabric).time
    assert fp4.tp_layer - mx.tp_layer == pytest.approx(4 * (g4 + amax - g8), rel=1e-9)
