"""Context parallelism of hybrid models' recurrent mixers (parcalc.core.hybrid_context) against Megatron-Core's own
formulas: megatron/core/ssm/mamba_context_parallel.py and gated_delta_net/{gdn,common}.py @d98e8a64 (the widths of
each all-to-all, the asserts on heads and groups), and the CLI through them. The exchange itself, run over gloo, is
tests/ground_truth/test_torch_hybrid_context_parallel.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.activations import ActivationConfig, Recompute
from parcalc.core.comm import Network, Workload, iteration_plan
from parcalc.core.flops import TrainingFlops, training_flops
from parcalc.core.hardware import Link, Sourced
from parcalc.core.hybrid_context import mixer_a2a_widths, mixer_cp_reason, mixer_cp_sent
from parcalc.core.layout import Layout
from parcalc.core.linear_attention import GatedDeltaNet
from parcalc.core.mamba import Mamba2
from parcalc.core.mamba_memory import mamba_tensors
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.derivation import Derivation
from parcalc.presets import load_model

LOOPBACK = Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test"))
ANY_LINK = Network(LOOPBACK, LOOPBACK)


def test_nemotron_h_56b_widths_at_tp8_cp2() -> None:
    """MambaContextParallel.pre_conv_ssm / post_conv_ssm at H 256, P 64 (d_inner 16384), N 256, G 8, t 8, cp 2, by hand:
    z, x: 16384 / 8 = 2048; a TP rank holds 8 / 8 = 1 group < cp, so group_repeat_count 2: B, C 1 x 2 x 256 = 512;
    dt 256 / 8 = 32; the scan's output back 2048."""
    widths = dict(mixer_a2a_widths(load_model("nemotron-h-56b"), 8, 2))
    assert widths == {"z": 2048, "x": 2048, "B": 512, "C": 512, "dt": 32, "scan output back": 2048}


def test_qwen3_next_widths_at_tp2_cp4() -> None:
    """a2a_cp_to_hp of [q, k, v, z, beta, alpha] at key_dim 16 x 128 = 2048, value_dim 32 x 128 = 4096, 32 value heads,
    t 2, by hand: (2 x 2048 + 2 x 4096 + 2 x 32) / 2 = 6176; a2a_hp_to_cp of the gated norm's output 4096 / 2 = 2048."""
    widths = dict(mixer_a2a_widths(load_model("qwen3-next-80b-a3b"), 2, 4))
    assert widths == {"q, k, v, z, beta, alpha": 6176, "gated norm output back": 2048}


def test_sent_bytes_of_one_mixer_layer() -> None:
    """Qwen3-Next, b 1, s 32768, t 2, cp 4, bf16: (cp - 1)/cp x b (s/cp) (6176 + 2048) e = 3/4 x 8192 x 8224 x 2 B."""
    assert mixer_cp_sent(load_model("qwen3-next-80b-a3b"), 1, 32768, 2, 4, 2.0) == 0.75 * 8192 * 8224 * 2


def _megatron_mamba_accepts(heads: int, groups: int, tp: int, cp: int) -> bool:
    """MambaContextParallel.__init__'s asserts (mamba_context_parallel.py lines 106-130), given heads and groups split by TP."""
    nheads_local_tp, ngroups_local_tp = heads // tp, groups // tp
    if nheads_local_tp % cp:
        return False
    if ngroups_local_tp < cp:
        return cp % ngroups_local_tp == 0
    return ngroups_local_tp % cp == 0


def _megatron_gdn_accepts(key_heads: int, value_heads: int, key_dim: int, value_dim: int, tp: int, cp: int) -> bool:
    """_build_head_perm_for_split_sections (every section of in_proj's output % cp) and the q / k split into
    qk_dim_local_tp // key_head_dim // cp_size heads (common.py), which must leave each CP rank whole key heads."""
    sections = (key_heads * key_dim // tp, key_heads * key_dim // tp, value_heads * value_dim // tp,
                value_heads * value_dim // tp, value_heads // tp, value_heads // tp)  # fmt: skip
    return all(s % cp == 0 for s in sections) and (key_heads // tp) % cp == 0


def _model(mamba: Mamba2 | None = None, gdn: GatedDeltaNet | None = None) -> TransformerModel:
    return TransformerModel(key="hybrid-cp", name="hybrid cp", layers=1, hidden=64, heads=4, kv_heads=4, head_dim=16,
                            ffn_hidden=128, mlp=Mlp.GELU, vocab=0, max_seq_len=4096, tied_embeddings=False, position=Position.ROPE,
                            norm=Norm.RMSNORM, bias=False, source="test", mamba=mamba, linear_attention=gdn)  # fmt: skip


@given(st.sampled_from([8, 16, 32, 64, 128, 256]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([2, 3, 4, 8, 16, 32]))  # fmt: skip
def test_mamba_refusals_are_megatrons_asserts(heads: int, groups: int, tp: int, cp: int) -> None:
    if heads % tp or groups % tp:
        return  # TP's own check (check_mamba_memory) answers first
    model = _model(mamba=Mamba2(heads, 4, 8, groups, 4, 128, "M"))
    assert (mixer_cp_reason(model, tp, cp) is None) == _megatron_mamba_accepts(heads, groups, tp, cp)


@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 3, 4, 8, 16]))
def test_gdn_refusals_are_megatrons_asserts(key_heads: int, ratio: int, tp: int, cp: int) -> None:
    if key_heads % tp:
        return
    gdn = GatedDeltaNet(key_heads, key_heads * ratio, 128, 128, 4)
    assert (mixer_cp_reason(_model(gdn=gdn), tp, cp) is None) == _megatron_gdn_accepts(key_heads, key_heads * ratio, 128, 128, tp, cp)


def test_mamba_scan_input_keeps_the_repeated_groups() -> None:
    """Under CP the fused scan saves its input after the all-to-all: Nemotron-H-56B at t 8, cp 2 keeps B and C of one group
    repeated twice, so zxBCdt per token of the rank's shard is (in_proj width 37120 + 2 x 8 x 256) / 8 / 2 elements, by hand:
    in_proj width = 2 x 16384 + 2 x 8 x 256 + 256 = 37120 (z, x, B, C, dt)."""
    model = load_model("nemotron-h-56b")
    config = ActivationConfig(1, 16384, 8, True, Recompute.NONE, True, False, 2.0, cp=2)
    zxbcdt = next(t for t in mamba_tensors(model, config) if t.key == "zxbcdt")
    assert zxbcdt.bytes(config) == 16384 * (37120 + 4096) / 8 / 2 * 2.0
    single = ActivationConfig(1, 16384, 8, True, Recompute.NONE, True, False, 2.0, cp=1)
    assert next(t for t in mamba_tensors(model, single) if t.key == "zxbcdt").bytes(single) == 16384 * 37120 / 8 * 2.0


def test_comm_volume_rows_of_a_gated_deltanet_hybrid() -> None:
    """Qwen3-Next, t 2, cp 4, dp 2, B 16, s 32768, bf16: 8 micro-batches per replica; the 36 gated-DeltaNet layers run the
    mixer's all-to-alls (8192 x 8224 x 2 = 134,742,016 B a layer and micro-batch, in two calls), the 12 attention layers
    the K/V ring (cp - 1 sends of 2 x 8192 x (2 x 256 / 2) x 2 = 8,388,608 B)."""
    model = load_model("qwen3-next-80b-a3b")
    work = Workload(16, 1, 32768, 2.0, 2.0)
    plan = iteration_plan(model, work, Layout(tp=2, cp=4, dp=2, ep=8), ANY_LINK)
    rows = [r for r in plan.calls if r.dimension == "cp"]
    a2a = {r.phase: r for r in rows if r.op.value == "all-to-all"}
    assert a2a["forward"].payload == pytest.approx(36 * 8 * 8192 * 8224 * 2)
    assert a2a["backward"].payload == pytest.approx(36 * 8 * 8192 * 8224 * 2)
    ring = next(r for r in rows if r.phase == "forward" and r.op.value == "point-to-point")
    assert ring.payload == pytest.approx(12 * 8 * 3 * 2 * 8192 * 256 * 2)
    keys = {d.key: d.value for d in plan.derivations}
    assert keys["cp_mixer_forward_sent"] == keys["cp_mixer_backward_sent"] == 0.75 * 8192 * 8224 * 2


@pytest.mark.parametrize("command", [
    ["fit", "--model", "nemotron-h-56b", "--gpu", "h200", "--gpus", "64", "--tp", "8", "--pp", "1", "--cp", "2", "--batch", "64",
     "--seq-len", "16384", "--recompute", "full"],
    ["fit", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--gpus", "64", "--tp", "2", "--pp", "1", "--cp", "4", "--ep", "8",
     "--batch", "64", "--seq-len", "32768", "--recompute", "full"],
    ["memory", "--model", "nemotron-h-56b", "--tp", "8", "--cp", "2", "--dp", "4", "--seq-len", "16384", "--batch", "8"],
])  # fmt: skip
def test_hybrids_run_under_context_parallelism(command: list[str]) -> None:
    result = CliRunner().invoke(app, command, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "CP 2" in result.output or "CP 4" in result.output or "2 CP" in result.output


def test_fit_times_the_mixer_exchange() -> None:
    """CP adds the mixers' all-to-alls to the step: Nemotron-H-56B's t_cp carries Megatron-Core's source."""
    result = CliRunner().invoke(app, ["fit", "--model", "nemotron-h-56b", "--gpu", "h200", "--gpus", "64", "--tp", "8", "--pp", "1",
                                      "--cp", "2", "--batch", "64", "--seq-len", "16384", "--recompute", "full",
                                      "--format", "json"], terminal_width=200)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "mamba_context_parallel.py" in result.output and "all-to-alls over heads" in result.output


@pytest.mark.parametrize("command", [
    ["fit", "--model", "nemotron-h-56b", "--gpu", "h200", "--gpus", "48", "--tp", "8", "--pp", "1", "--cp", "3", "--batch", "48",
     "--seq-len", "12288"],
    ["fit", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--gpus", "64", "--tp", "8", "--pp", "1", "--cp", "4", "--ep", "8",
     "--batch", "64", "--seq-len", "32768"],
    ["memory", "--model", "nemotron-h-56b", "--tp", "8", "--cp", "-2", "--seq-len", "16384"],
    ["memory", "--model", "nemotron-h-56b", "--tp", "8", "--cp", "2", "--seq-len", "16385"],
    ["comm-volume", "--strategy", "3d", "--model", "qwen3-next-80b-a3b", "--tp", "8", "--cp", "4", "--batch", "8", "--seq-len", "4096"],
    ["flops", "--model", "qwen3-next-80b-a3b", "--batch", "8", "--seq-len", "4096", "--causal", "--cp", "32"],
])  # fmt: skip
def test_bad_context_parallel_layouts_are_one_line(command: list[str]) -> None:
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output


def _cp_flops(model: TransformerModel, balanced: bool) -> tuple[TrainingFlops, Derivation]:
    from parcalc.core.context import cp_rank_flops

    counted = training_flops(model, 8, 8192, causal=True)
    return counted, cp_rank_flops(counted, 8192, 4, balanced)


def test_cp_flops_of_a_gated_deltanet_hybrid_count_attention_layers_only() -> None:
    """Qwen3-Next under CP 4: the attention core split by causal pairs is the 12 softmax-attention layers' (12 / 48 of the
    same model's with attention in every layer); the gated-DeltaNet mixers, head-split by Megatron-Core, are in F_other / cp.
    With 2cp-chunk balancing every rank does 1/cp of all (κ = 1)."""
    from dataclasses import replace

    model = load_model("qwen3-next-80b-a3b")
    counted, plain = _cp_flops(model, balanced=False)
    _, every_layer = _cp_flops(replace(model, linear_attention=None), balanced=False)
    assert plain.term("F_a").value == pytest.approx(every_layer.term("F_a").value * 12 / 48, rel=1e-12)
    assert plain.term("F_o").value + plain.term("F_a").value == pytest.approx(counted.hardware.value, rel=1e-12)
    _, balanced = _cp_flops(model, balanced=True)
    assert balanced.value == pytest.approx(counted.hardware.value / 4, rel=1e-12)


def test_cp_flops_of_a_mamba_hybrid() -> None:
    """Nemotron-H-8B (4 attention blocks of 52): balanced, every rank 1/cp of the hardware FLOPs; on the plain split only the
    attention blocks' cores are uneven, so the busiest rank is above 1/cp by κ - 1 of their share."""
    model = load_model("nemotron-h-8b")
    counted, balanced = _cp_flops(model, balanced=True)
    assert balanced.value == pytest.approx(counted.hardware.value / 4, rel=1e-12)
    _, plain = _cp_flops(model, balanced=False)
    kappa, f_a = plain.term("k").value, plain.term("F_a").value
    assert plain.value == pytest.approx(counted.hardware.value / 4 + (kappa - 1) * f_a / 4, rel=1e-12)
    assert 0 < f_a < 0.1 * counted.hardware.value  # 4 attention blocks among 52 at s = 8192
