"""Gated-DeltaNet layers' activations and kernels (parcalc.core.linear_attention_memory, core/timing/linear_attention_kernels).

Ground truth on the CPU: autograd's saved tensors (torch.autograd.graph.saved_tensors_hooks, one count per storage,
parameters left out) over transformers 5.24's Qwen3NextGatedDeltaNet in bf16 at a tiny shape, on its PyTorch path
(no causal-conv1d, no flash-linear-attention here). Each saved storage is put to the code that saved it: the conv
(causal_conv1d_fn's fallback), the gated norm (Qwen3NextRMSNormGated), the delta rule (torch_chunk_gated_delta_rule) or
the mixer around them. The tensors around the kernels are the GPU path's too and are held to gdn_mixer_tensors exactly;
the fallback's conv and norm to torch_path_tensors. The fallback's delta rule keeps fp32 chunk tensors and the per-chunk
loop's operands, which the GPU's fused kernel does not (FLA_SAVED): its count is printed apart, not modelled; the memory
counts fla's saved set, from its source.
"""

from __future__ import annotations

import collections
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.activations import ActivationConfig, Recompute
from parcalc.core.layer_ops import linear_attention_ops
from parcalc.core.layout import Layout
from parcalc.core.linear_attention import CHUNK
from parcalc.core.linear_attention_memory import (
    gdn_mixer_tensors,
    mixer_delta,
    stage_linear_layers,
    torch_chunk_rule_bytes,
    torch_path_tensors,
)
from parcalc.presets import load_model
from tests.search_rows import assert_row_is_estimate

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

QWEN3_NEXT = "qwen3-next-80b-a3b"


def _saved_by_phase(batch: int, seq: int) -> tuple[dict[str, int], dict[str, int], object]:
    """Bytes of the storages autograd saves in one forward of a tiny Qwen3NextGatedDeltaNet, by the code saving them."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next as hf

    torch.manual_seed(0)
    cfg = Qwen3NextConfig(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                          linear_value_head_dim=8, linear_conv_kernel_dim=4, num_hidden_layers=4, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16)  # fmt: skip
    mixer = hf.Qwen3NextGatedDeltaNet(cfg, 0).to(torch.bfloat16)
    phase = ["outer"]

    def tagged(name: str, fn):
        def run(*args, **kwargs):
            phase[0] = name
            try:
                return fn(*args, **kwargs)
            finally:
                phase[0] = "outer"
        return run

    saved: dict[int, tuple[str, int, int]] = {}
    params = {p.untyped_storage().data_ptr() for p in mixer.parameters()}
    tokens = batch * seq

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() not in saved:
            saved[storage.data_ptr()] = (phase[0], storage.nbytes(), t.numel())
        return t

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(hf, "torch_chunk_gated_delta_rule", tagged("kernel", hf.torch_chunk_gated_delta_rule))
        mp.setattr(hf, "causal_conv1d_fn", tagged("conv", hf.causal_conv1d_fn))
        mixer.norm.forward = tagged("norm", mixer.norm.forward)
        x = torch.randn(batch, seq, 64, dtype=torch.bfloat16, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            mixer(x)
    finally:
        mp.undo()
    by_phase: dict[str, int] = collections.Counter()
    parameter_sized: dict[str, int] = collections.Counter()
    for name, nbytes, numel in saved.values():
        (by_phase if numel % tokens == 0 or name != "outer" else parameter_sized)[name] += nbytes
    return dict(by_phase), dict(parameter_sized), cfg


def _tiny_model():
    from parcalc.core.linear_attention import GatedDeltaNet

    model = load_model(QWEN3_NEXT)
    return replace(model, hidden=64, linear_attention=GatedDeltaNet(2, 4, 16, 8, 4, 4))


@pytest.mark.parametrize(("batch", "seq"), [(2, 128), (1, 100)], ids=["b2-s128", "b1-s100-padded"])
def test_saved_tensors_against_autograd(batch: int, seq: int) -> None:
    """Around the kernels the CPU's saved bytes are gdn_mixer_tensors' exactly (in_proj's input, beta, softplus's input
    and output, out_proj's input); the fallback's conv and gated norm are torch_path_tensors' (SiLU's input a view of the
    padded convolution: its storage T + K - 1 positions per sequence)."""
    measured, parameter_sized, _ = _saved_by_phase(batch, seq)
    model = _tiny_model()
    config = ActivationConfig(batch, seq)
    tokens = batch * seq
    gpu = {t.key: t.bytes(config) for t in gdn_mixer_tensors(model, config)}
    around = ("gdn_in_proj_input", "gdn_beta", "gdn_softplus_input", "gdn_softplus_output", "gdn_out_proj_input")
    assert measured["outer"] == sum(gpu[k] for k in around)
    # per token: in_proj's input 64 x 2 B + beta 4 x 2 B + softplus's input and output 2 x 4 x 4 B + out_proj's input 32 x 2 B
    assert measured["outer"] == (64 * 2 + 4 * 2 + 2 * 4 * 4 + 32 * 2) * tokens
    assert parameter_sized == {"outer": 2 * 4 * 4}  # exp(A_log) and its negation, fp32, one per value head (not per token)
    torch_path = {t.key: t.bytes(config) for t in torch_path_tensors(model, config)}
    conv_padded = torch_path["silu_input"] * (seq + 4 - 1) / seq
    assert measured["conv"] == torch_path["conv_input"] + conv_padded
    norm = ("norm_x_fp32", "norm_rstd", "norm_normed", "norm_gate_fp32", "norm_silu", "norm_scaled")
    assert measured["norm"] == sum(torch_path[k] for k in norm)
    # the fallback's delta rule keeps far more than fla's fused kernel (fp32 chunks, the loop's operands): held apart
    assert measured["kernel"] == sum(b for _, b in torch_chunk_rule_bytes(model.linear_attention, batch, seq))
    fla = sum(gpu[k] for k in ("gdn_q", "gdn_q_rstd", "gdn_k", "gdn_k_rstd", "gdn_v", "gdn_g_cumsum", "gdn_ut_inverse"))
    assert measured["kernel"] > 10 * fla


def test_qwen3_next_mixer_bytes_per_token() -> None:
    """One gated-DeltaNet mixer of Qwen3-Next (h 2048, 16 key / 32 value heads of 128, conv 4) at t = 1, bf16, per token:
    2 B x (h 2048 + conv_dim 8192 + q, k 2 x 2048 + v 4096 + beta 32 + A 64 x 32 + o, z, out_proj input 3 x 4096) +
    4 B x (q, k rstd 2 x 16 + g 32 + softplus in, out 2 x 32 + norm rstd 32) = 65,600 + 640 = 66,240 B (FLA_SAVED, CONV_SAVED,
    NORM_GATE_SAVED); split over t = 4 all but in_proj's input."""
    model = load_model(QWEN3_NEXT)
    one = ActivationConfig(1, 1)
    assert sum(t.bytes(one) for t in gdn_mixer_tensors(model, one)) == 66_240
    four = ActivationConfig(1, 1, tp=4)
    assert sum(t.bytes(four) for t in gdn_mixer_tensors(model, four)) == 4096 + (66_240 - 4096) / 4
    # attention's mixer at FlashAttention: QKV input 2048 + Q 4096 + K, V 512 each + LSE 16 fp32 + the gate's two 4096-wide
    # tensors + proj input 4096, x 2 B (64 B of LSE) = 38,976 B: a gated-DeltaNet layer keeps 27,264 B per token more
    flash = ActivationConfig(1, 1, flash_attention=True)
    assert mixer_delta(model, flash) == 66_240 - (2 * (2048 + 4096 + 512 + 512 + 2 * 4096 + 4096) + 16 * 4)
    assert mixer_delta(model, replace(flash, recompute=Recompute.FULL)) == 0.0


@pytest.mark.parametrize(("pp", "chunks", "expected"), [
    (4, 1, (9, 9, 9, 9)),  # 12 layers a stage, every 4th full attention (Qwen3NextConfig full_attention_interval 4)
    (8, 1, (5, 4, 5, 4, 5, 4, 5, 4)),  # 6 layers: 0-5 hold attention at 3; 6-11 at 7 and 11
    (2, 3, (18, 18)),  # interleaved: chunks of 8 layers, two attention layers each
    (2, 12, (24, 12)),  # chunks of 2 layers: the first stage's are layers 0-1, 4-5, ..., never the 4th of a group
])  # fmt: skip
def test_linear_layers_per_stage(pp: int, chunks: int, expected: tuple[int, ...]) -> None:
    model = load_model(QWEN3_NEXT)
    layout = Layout(pp=pp, chunks=chunks, schedule="interleaved" if chunks > 1 else "1f1b")  # type: ignore[arg-type]
    assert tuple(stage_linear_layers(model, layout, s) for s in range(pp)) == expected


def test_memory_adds_the_mixers() -> None:
    """memory: the stage's activations are the transformer layers' plus ΔA_gdn × L_gdn × n (9 gated-DeltaNet layers on
    each of 4 stages), the table lists the mixer's tensors."""
    args = ["memory", "--model", QWEN3_NEXT, "--seq-len", "4096", "--micro-batch", "1", "--tp", "2", "--pp", "4", "--dp", "8",
            "--ep", "8", "--etp", "1", "--zero", "1", "--sequence-parallel", "--gpu", "h100-sxm5", "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    text = json.dumps(data)
    assert "dA_gdn" in text and "[gated DeltaNet] A, each chunk's inverted UT system" in text


def test_kernels_follow_the_counted_flops() -> None:
    """fla's three forward kernels do layer_ops' counted products: fwd_intra K_beta K^T and the UT transform (as fla runs
    it: the inverse A, C (C - 1) (C - 2) / 3 FLOPs a chunk, then two GEMMs by A, 2 C / (C - 1) times the triangular
    solves' count), fwd_h K_cum S and K^T V_new, fwd_o Q K^T, Q S and A·V_new; in_proj_qkvz and in_proj_ba one GEMM."""
    from parcalc.core.timing.linear_attention_kernels import gdn_mixer

    model = load_model(QWEN3_NEXT)
    forward, backward = gdn_mixer(model, _shard(micro_batch=1, seq_len=4096), _spec())
    flops = {k.key: k.flops for k in forward}
    counted = {op.key: op.flops for op in linear_attention_ops(model, 1, 4096, 2.0)}
    groups = 32 * 4096 // CHUNK  # value heads x chunks
    wy = (counted["gdn_solve_v"] + counted["gdn_solve_k"]) * 2 * CHUNK / (CHUNK - 1)
    inverse = groups * CHUNK * (CHUNK - 1) * (CHUNK - 2) / 3
    assert flops["gdn.fwd_intra"] == pytest.approx(counted["gdn_ut"] + wy + inverse)
    assert flops["gdn.fwd_h"] == pytest.approx(counted["gdn_read_k"] + counted["gdn_state"])
    assert flops["gdn.fwd_o"] == pytest.approx(counted["gdn_intra"] + counted["gdn_read_q"] + counted["gdn_context"])
    assert flops["gdn.in_proj"] == pytest.approx(counted["gdn_in_qkvz"] + counted["gdn_in_ba"])
    assert flops["gdn.out_proj"] == pytest.approx(counted["gdn_out"])
    # backward (chunk_gated_delta_rule_bwd): w, u and h computed again before the gradients
    again = {k.key: k.flops for k in backward}
    assert again["gdn.recompute_w_u"] == pytest.approx(wy)
    assert again["gdn.fwd_h.again"] == flops["gdn.fwd_h"]
    # each fused kernel reads its inputs once: fwd_o reads q, k (16 key heads x 128), v_new, and writes o (32 value heads
    # x 128) at 2 B, g (fp32, 32 a token) and the 64 chunk states of 128 x 128 per value head
    tokens = 4096
    fwd_o = next(k for k in forward if k.key == "gdn.fwd_o")
    assert fwd_o.bytes == 2 * tokens * (2 * 2048 + 2 * 4096) + 4 * tokens * 32 + 2 * groups * 128 * 128


def _spec():
    from parcalc.core.timing.kernels import compute_spec
    from parcalc.presets import load_gpu

    gpu = load_gpu("h100-sxm5")
    return compute_spec(gpu, "bf16", gpu.dtypes["bf16"].dense_peak.value)


def _shard(micro_batch: int, seq_len: int):
    from parcalc.core.timing.layer_shard import LayerShard

    return LayerShard(micro_batch, seq_len, 1, False, True, False, True, 2.0)


def test_fit_and_search_run() -> None:
    """fit times a given layout and --search finds layouts for Qwen3-Next (36 gated-DeltaNet, 12 attention layers)."""
    runner = CliRunner()
    base = ["fit", "--model", QWEN3_NEXT, "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "64", "--seq-len", "4096"]
    one = runner.invoke(app, [*base, "--tp", "2", "--pp", "4", "--dp", "8", "--ep", "8", "--etp", "1", "--zero", "1",
                              "--sequence-parallel", "--micro-batch", "1"])  # fmt: skip
    assert one.exit_code == 0, one.output
    search = runner.invoke(app, [*base, "--search"])
    assert search.exit_code == 0, search.output
    assert "fastest layouts that fit" in search.output


def test_search_agrees_with_the_scalar_estimate() -> None:
    """fit's vectorised search counts each stage's gated-DeltaNet layers as memory does (interleaving moves them between
    stages: with 12 chunks of 2 layers on 2 stages, the first holds 24 gated-DeltaNet layers, the second 12): its memory
    and step time equal the scalar estimate's on a sample of 40 configurations of 32 H100s."""
    import random

    from parcalc.core.fit import Cluster, Training
    from parcalc.core.fit_search import search
    from parcalc.presets import load_gpu, load_link

    h100 = load_gpu("h100-sxm5", ())
    cluster = Cluster(gpus=32, gpus_per_node=8, peak=989e12, capacity=h100.memory_capacity.value, intra=load_link("nvlink4", ()),
                      inter=load_link("ib-ndr", ()))  # fmt: skip
    model, training = load_model(QWEN3_NEXT, ()), Training(32, 4096)
    found = search(model, training, cluster)
    columns = found.evaluated.columns
    rng = random.Random(31)
    fitting = [i for i in range(len(found.evaluated)) if columns["fits"][i]]
    for i in rng.sample(range(len(found.evaluated)), 25) + rng.sample(fitting, 15):
        assert_row_is_estimate(found, i, model, training, cluster)
    interleaved = Layout(pp=2, chunks=12, schedule="interleaved")  # type: ignore[arg-type]
    assert (stage_linear_layers(model, interleaved, 0), stage_linear_layers(model, interleaved, 1)) == (24, 12)


def test_sequence_parallel_regather_by_share() -> None:
    """SP's backward re-gathers of the mean layer: one per column-parallel linear (the mixer's, the MLP's), each hidden
    behind its input-gradient GEMM; the mixer's GEMM is QKV's in 12 of 48 layers and in_proj's in 36: a gather longer
    than every GEMM leaves 2 t_AG - (t_qkv / 4 + 3 t_in_proj / 4 + t_mlp) exposed (Megatron-LM's overlap, step.regather_per_layer)."""
    from parcalc.core.timing.compute import layer_passes
    from parcalc.core.timing.layer_shard import LayerShard
    from parcalc.core.timing.linear_attention_kernels import mean_layer_regather

    model = load_model(QWEN3_NEXT)
    passes = layer_passes(model, LayerShard(1, 4096, 2, True, True, False, True, 2.0), _spec())
    times = {k.key: k.time for k in passes.backward}
    qkv, in_proj = times["qkv.dgrad"] / 0.25, times["gdn.in_proj.dgrad"] / 0.75  # the kernels are scaled by their shares
    assert mean_layer_regather(model, passes.backward, 0.0) == (0.0, 0.0)
    long = 1.0  # seconds: longer than any GEMM
    assert mean_layer_regather(model, passes.backward, long) == pytest.approx(
        (2 * long, 2 * long - (0.25 * qkv + 0.75 * in_proj + times["mlp.gate_up.dgrad"])))
    short = min(qkv, in_proj, times["mlp.gate_up.dgrad"]) / 2  # hidden behind each
    assert mean_layer_regather(model, passes.backward, short)[1] == 0.0


# flash-linear-attention's published benchmark of chunk_gated_delta_rule ('chunk_gdn', use_qk_l2norm_in_kernel, bf16;
# README.md 'Benchmarks' @bc3b101d: one NVIDIA GB200, CUDA 12.9, PyTorch 2.9.0, triton.testing.do_bench medians):
# (B, T, H, D) -> (forward ms, forward + backward ms), q, k, v of H heads of D
FLA_GB200_CHUNK_GDN = {
    (1, 8192, 96, 128): (1.265, 4.738), (2, 16384, 16, 128): (1.029, 3.616), (4, 2048, 16, 128): (0.753, 2.085),
    (4, 4096, 64, 128): (1.581, 5.964), (8, 1024, 8, 64): (0.631, 1.974), (8, 2048, 32, 256): (1.831, 8.644),
}
DELTA_RULE = ("gdn.l2norm", "gdn.g_cumsum", "gdn.fwd_intra", "gdn.fwd_h", "gdn.fwd_o", "gdn.recompute_w_u", "gdn.fwd_h.again",
              "gdn.bwd_dv_local", "gdn.bwd_dhu", "gdn.bwd_dqkwg", "gdn.prepare_wy_bwd")


@pytest.mark.parametrize("shape", sorted(FLA_GB200_CHUNK_GDN), ids=lambda s: "B{}-T{}-H{}-D{}".format(*s))
def test_delta_rule_against_fla_published_gb200(shape: tuple[int, int, int, int]) -> None:
    """A known gap, held: parcalc's delta-rule kernels (l2norm, cumsum, fla's three forward and six backward kernels at
    the GB200 preset's rates) against fla's published times. Every published time is longer: it holds a per-call cost
    parcalc does not model (about 0.6 ms a forward, what the smallest shape's 0.631 ms is almost all of: its GPU work is
    some 0.03 ms) and the Triton kernels' own efficiency (not measured here). Where the GPU work is largest (the shapes
    of 4 ms and more forward + backward) it is still more than a third of the published time."""
    from parcalc.core.linear_attention import GatedDeltaNet
    from parcalc.core.timing.kernels import compute_spec
    from parcalc.core.timing.layer_shard import LayerShard
    from parcalc.core.timing.linear_attention_kernels import gdn_mixer
    from parcalc.presets import load_gpu

    batch, seq, heads, dim = shape
    gpu = load_gpu("gb200")
    spec = compute_spec(gpu, "bf16", gpu.dtypes["bf16"].dense_peak.value)
    model = replace(load_model(QWEN3_NEXT), linear_attention=GatedDeltaNet(heads, heads, dim, dim, 4, 4))
    forward, backward = gdn_mixer(model, LayerShard(batch, seq, 1, False, True, False, True, 2.0), spec)
    t_forward = sum(k.time for k in forward if k.key in DELTA_RULE)
    t_both = t_forward + sum(k.time for k in backward if k.key.removesuffix(".bwd") in DELTA_RULE)
    published_forward, published_both = FLA_GB200_CHUNK_GDN[shape]
    assert t_forward * 1e3 < published_forward and t_both * 1e3 < published_both
    if published_both >= 4.0:
        assert t_both * 1e3 > published_both / 3
