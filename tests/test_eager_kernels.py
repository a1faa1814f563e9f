"""Kernel sets (--kernels fused|eager): which profile takes which, what eager adds to a layer, and that the
CLI, the search and the single estimate agree. The eager list itself is held against real PyTorch in
tests/ground_truth/test_torch_eager_kernels.py (a TorchDispatchMode record of TorchTitan's block)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.choices import Mlp, Norm, Position
from parcalc.core.model import TransformerModel
from parcalc.core.timing.compute import LayerShard, compute_spec, layer_passes, memory_kernel_count
from parcalc.presets import load_framework

sys.path.insert(0, str(Path(__file__).parent))

runner = CliRunner()
SPEC = compute_spec(None, "bf16", 1e15)


@pytest.mark.parametrize(("name", "kernels"), [("megatron", "fused"), ("deepspeed", "fused"), ("fsdp2", "eager"), ("torchtitan", "eager")])
def test_profiles_name_their_kernel_set_with_a_source(name: str, kernels: str) -> None:
    profile = load_framework(name)
    assert profile.kernels == kernels
    assert profile.source("kernels") != f"{profile.name} profile"  # a cited source, not the fallback


@pytest.mark.parametrize(("name", "kernels"), [("megatron", "fused"), ("deepspeed", "fused"), ("fsdp2", "eager"), ("torchtitan", "eager")])
def test_presets_show_lists_the_kernel_set_and_the_notes(name: str, kernels: str) -> None:
    """`presets show <profile>` listed every setting but the kernel set, and none of the profile's notes."""
    import yaml

    result = runner.invoke(app, ["presets", "show", name, "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    rows = {row["field"]: row for row in document["tables"]["fields"]["rows"]}
    profile = load_framework(name)
    assert rows["kernels"]["value"] == kernels
    assert rows["kernels"]["source"] == profile.source("kernels")
    # the notes, as the YAML file writes them (presets/frameworks/<name>.yaml)
    data = yaml.safe_load((Path(__file__).parent.parent / f"presets/frameworks/{name}.yaml").read_text())
    assert document["verdicts"] == data["notes"] and data["notes"]


def test_a_profile_without_kernels_is_fused_and_a_bad_value_is_one_error(tmp_path: Path) -> None:
    text = (Path(__file__).parent.parent / "presets/frameworks/fsdp2.yaml").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("kernels:") and not line.startswith("  kernels:")]
    (tmp_path / "frameworks").mkdir()
    (tmp_path / "frameworks/plain.yaml").write_text("\n".join(lines) + "\n")
    assert load_framework("plain", (tmp_path,)).kernels == "fused"
    (tmp_path / "frameworks/bad.yaml").write_text(text.replace("kernels: {value: eager", "kernels: {value: jit"))
    args = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--framework", "bad", "--presets", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "kernels.value" in result.stderr and "fused, eager" in result.stderr and "Traceback" not in result.output


def _mpt_like() -> TransformerModel:
    return TransformerModel(key="mpt-tiny", name="MPT-like", layers=2, hidden=256, heads=4, kv_heads=4, head_dim=64, ffn_hidden=1024,
                            mlp=Mlp.GELU, vocab=0, max_seq_len=128, tied_embeddings=True, position=Position.ALIBI,
                            norm=Norm.LAYERNORM, bias=False, source="test")  # fmt: skip


def test_mpt_eager_differs_from_fused_by_the_residual_gradient_adds() -> None:
    """llm-foundry's MPT: LPLayerNorm (one native_layer_norm), nn.GELU (one kernel), fused Wqkv, ALiBi: the
    same kernels as the fused set forward; backward two more, autograd's adds of each residual branch's two
    gradients, 3 x 2 B per value each (read two, write one); and the LayerNorms' fp32 statistics and weights."""
    model = _mpt_like()
    b, s, h, e = 2, 128, 256, 2.0
    fused = layer_passes(model, LayerShard(b, s, 1, False, True, False, True, e), SPEC)
    eager = layer_passes(model, LayerShard(b, s, 1, False, True, False, True, e, eager=True), SPEC)
    assert len(eager.forward) == len(fused.forward)
    assert len(eager.backward) == len(fused.backward) + 2
    adds = [k for k in eager.backward if k.key.endswith("add_grads.bwd")]
    assert [k.bytes for k in adds] == [3 * e * b * s * h] * 2
    stats = 2 * 4.0 * b * s  # mean and 1/sigma per row, fp32, per LayerNorm
    forward_extra = sum(k.bytes for k in eager.forward) - sum(k.bytes for k in fused.forward)
    assert forward_extra == 2 * (stats + e * h)  # two LayerNorms: statistics written, weight read
    gemms = [k for k in eager.forward + eager.backward if k.kind == "gemm"]
    assert gemms == [k for k in fused.forward + fused.backward if k.kind == "gemm"]  # GEMMs untouched


def test_llama_eager_kernel_counts() -> None:
    """Llama 3 8B's layer under each set (FlashAttention, no dropout): fused 6 + 4 memory-bound kernels, eager
    28 + 50 (tests/ground_truth/test_torch_eager_kernels.py's record on the same ops), compiled 9 + 11 from eager
    code (the kernels Inductor's output code for TorchTitan's block holds, torch 2.13 on the CPU: forward norm1,
    2 fp32 casts, 2 complex products left to ATen, casts back + repeat_kv, residual1 + norm2, silu * mul, residual2;
    backward the same groups reversed, conj(freqs_cis), the V repeat's sum; the CPU's own SDPA-backward copy left
    out), 4 + 4 from the fused set (norm1 fused into the previous block's last residual add)."""
    from parcalc.presets import load_model

    model = load_model("llama3-8b")
    assert memory_kernel_count(model, False, False, True, False) == 10
    assert memory_kernel_count(model, True, False, True, False) == 78
    assert memory_kernel_count(model, True, True, True, False) == 20
    assert memory_kernel_count(model, False, True, True, False) == 8


def test_cli_kernels_flag_overrides_the_profile_and_search_agrees() -> None:
    base = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "16", "--seq-len", "8192", "--flash-attention",
            "--framework", "torchtitan", "--format", "json"]
    pinned = [*base, "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "3", "--micro-batch", "2", "--recompute", "op"]
    docs = {k: json.loads(runner.invoke(app, [*pinned, *(["--kernels", k] if k else [])]).stdout) for k in ("", "eager", "fused")}
    assert docs[""]["settings"]["kernels"] == docs["eager"]["settings"]["kernels"] == "eager"  # the profile's
    assert docs["fused"]["settings"]["kernels"] == "fused"
    t = {k: d["results"]["t_step"]["value"] for k, d in docs.items()}
    assert t[""] == t["eager"]
    assert t["eager"] / t["fused"] == pytest.approx(1.159, abs=0.005)  # measured: 2.548 s against 2.198 s
    assert docs["eager"]["inputs"]["n_mem"]["value"] == 78 and docs["fused"]["inputs"]["n_mem"]["value"] == 10
    # the vectorised search holds the same step for that configuration (tests/test_fit_search.py's rule)
    import step_time_cases as stc

    from parcalc.core.fit import estimate
    from parcalc.core.fit_search import RECOMPUTES, SearchSpace, search

    for eager_case in stc.PAIRS[0]:
        model, config, training, cluster = stc.inputs(eager_case)
        one = estimate(model, config, training, cluster).step.value
        columns = search(model, training, cluster, SearchSpace(zero_stages=(3,))).evaluated.columns
        found = [float(columns["t_step"][i]) for i in range(len(columns["tp"]))
                 if (int(columns["tp"][i]), int(columns["pp"][i]), int(columns["dp"][i]), int(columns["micro_batch"][i])) == (1, 1, 8, 2)
                 and RECOMPUTES[int(columns["recompute"][i])] is config.recompute]  # fmt: skip
        assert found and found[0] == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize("value", ["0", "-1", "jit", "", "1e9"])
def test_cli_kernels_bad_values_are_one_line(value: str) -> None:
    result = runner.invoke(app, ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--kernels", value])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: --kernels: one of fused, eager, hf, got {value!r}"


def test_intensity_kernels_lists_the_eager_kernels() -> None:
    args = ["intensity", "--model", "llama3-8b", "--seq-len", "8192", "--dtype", "bf16", "--gpu", "h100-sxm5", "--flash-attention", "--format", "json"]
    fused = json.loads(runner.invoke(app, args).stdout)
    eager = json.loads(runner.invoke(app, [*args, "--kernels", "eager"]).stdout)
    assert fused["settings"]["kernels"] == "fused" and eager["settings"]["kernels"] == "eager"
    keys = {row["kernel"] for row in eager["tables"]["kernels"]["rows"]}
    assert {"norm1.to_fp32", "rope.q.mul", "repeat_kv.k", "mlp.silu", "mlp.mul", "cross_entropy.log_softmax"} <= keys
    assert "norm1.to_fp32" not in {row["kernel"] for row in fused["tables"]["kernels"]["rows"]}
    # one sequence of 8192 tokens: the eager RMSNorm's first kernel reads 2 B and writes 4 B per value
    row = next(r for r in eager["tables"]["kernels"]["rows"] if r["kernel"] == "norm1.to_fp32")
    assert row["bytes"] == 6 * 8192 * 4096
    bad = runner.invoke(app, ["intensity", "--m", "8", "--k", "8", "--n", "8", "--kernels", "eager"])
    assert bad.exit_code == 2 and bad.stderr.strip() == "Error: --kernels: only with --model (it changes a layer's kernels)"
