"""Sliding-window and chunked attention (Mistral 7B, Gemma 3, gpt-oss, Llama 4): parameters, FLOPs, kernels.

Ground truth on the CPU, transformers 5.24's real model classes:
- parameters: sum(p.numel()) of MistralForCausalLM, Gemma3ForCausalLM, GptOssForCausalLM at the presets'
  config.json values (built on the meta device), and the published totals;
- FLOPs: torch.utils.flop_counter.FlopCounterMode over a tiny model's forward with eager attention, which
  multiplies the whole s x s square and masks it after: parcalc's count without --causal;
- the window's band: the mask each layer's eager attention receives (transformers' masking_utils), whose
  allowed (query, key) pairs are parcalc's band plus half its edge (parcalc.core.attention_window).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcalc.core.attention_window import AttentionWindow, WindowKind, causal_pairs, core_share
from parcalc.core.flops import training_flops
from parcalc.errors import PresetError
from parcalc.hf_config import model_from_hf_config
from parcalc.presets import load_model

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

B, S = 2, 24  # tiny shapes: s = 24 against windows / chunks of 8


def _alternating(layers: int) -> list[str]:
    """gpt-oss's layer_types: sliding first, then full, alternating (openai/gpt-oss-*/config.json)."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]


def _tiny() -> dict[str, tuple[object, type]]:
    """One tiny config per family; Llama 4 with one expert: Llama4TextMoe runs every expert on every token (it repeats
    the hidden states num_experts times and scales by the router's scores, modeling_llama4.py Llama4TextMoe.forward),
    so FlopCounterMode counts experts x tokens there, where a dropless top-k kernel runs top_k x tokens; with one
    expert of top-1 the two agree."""
    common = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    return {
        "mistral": (tf.MistralConfig(intermediate_size=96, num_hidden_layers=4, sliding_window=8, **common), tf.MistralForCausalLM),
        "gemma3": (tf.Gemma3TextConfig(intermediate_size=96, num_hidden_layers=6, head_dim=16, sliding_window=8, **common),
                   tf.Gemma3ForCausalLM),
        "gpt_oss": (tf.GptOssConfig(intermediate_size=32, num_hidden_layers=4, head_dim=16, sliding_window=8, num_local_experts=4,
                                    num_experts_per_tok=2, layer_types=_alternating(4), **common), tf.GptOssForCausalLM),
        "llama4": (tf.Llama4TextConfig(intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4, head_dim=16,
                                       attention_chunk_size=8, num_local_experts=1, num_experts_per_tok=1, **common),
                   tf.Llama4ForCausalLM),
    }  # fmt: skip


def _read(config: object, tmp_path: Path):  # type: ignore[no-untyped-def]
    config.save_pretrained(tmp_path)  # type: ignore[attr-defined]
    return model_from_hf_config(tmp_path / "config.json")


def _eager(config: object) -> None:
    config._attn_implementation = "eager"  # type: ignore[attr-defined]
    # gpt-oss: transformers' default experts path (a grouped GEMM) has no formula in FlopCounterMode; the eager loop
    # (GptOssExperts.forward: one matmul per expert over the tokens routed to it) is counted, top_k x tokens in all
    config._experts_implementation = "eager"  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", ["mistral", "gemma3", "gpt_oss", "llama4"])
def test_tiny_model_parameters_and_flops_equal_transformers(family: str, tmp_path: Path) -> None:
    """sum(p.numel()) and FlopCounterMode's count of one forward (eager attention: the whole s x s square)."""
    from torch.utils.flop_counter import FlopCounterMode

    config, cls = _tiny()[family]
    _eager(config)
    model = _read(config, tmp_path)
    torch.manual_seed(0)
    real = cls(config).train()
    assert model.total_params == sum(p.numel() for p in real.parameters())
    with FlopCounterMode(display=False) as counter:
        real(input_ids=torch.randint(0, 100, (B, S)))
    assert training_flops(model, B, S).forward.value == counter.get_total_flops()


def _masks(family: str, tmp_path: Path) -> tuple[object, list[int]]:
    """The model as parcalc reads it, and the allowed (query, key) pairs of each layer's mask, for one sequence, as
    the real model's eager attention receives them."""
    import importlib

    config, cls = _tiny()[family]
    _eager(config)
    model = _read(config, tmp_path)
    module = importlib.import_module(cls.__module__)
    seen: list[int] = []
    original = module.eager_attention_forward

    def counting(attention, query, key, value, attention_mask, *args, **kwargs):  # type: ignore[no-untyped-def]
        allowed = attention_mask[0, 0] == 0 if attention_mask.dtype != torch.bool else attention_mask[0, 0]
        seen.append(int(allowed.sum()))
        return original(attention, query, key, value, attention_mask, *args, **kwargs)

    module.eager_attention_forward = counting
    try:
        with torch.no_grad():
            cls(config).eval()(input_ids=torch.randint(0, 100, (1, S)))
    finally:
        module.eager_attention_forward = original
    return model, seen


@pytest.mark.parametrize("family", ["mistral", "gemma3", "gpt_oss", "llama4"])
def test_band_is_the_mask_less_half_its_edge(family: str, tmp_path: Path) -> None:
    """Each layer's mask (transformers masking_utils, as the model builds it): a full causal layer allows s (s + 1) / 2
    pairs, parcalc counts s^2 / 2; a sliding layer sum_i min(i + 1, W) = s W - W^2 / 2 + W / 2, parcalc s W - W^2 / 2;
    a chunked layer n W (W + 1) / 2 + r (r + 1) / 2, parcalc n W^2 / 2 + r^2 / 2. The mean over the layers is the share
    the FLOPs count with --causal."""
    model, seen = _masks(family, tmp_path)
    window = model.window
    assert window is not None and len(seen) == model.layers
    counted = []
    for index, allowed in enumerate(seen):
        local = window.is_local(index)
        band = window.pairs(S) if local else causal_pairs(S)
        edge = (window.size / 2 if window.kind is WindowKind.SLIDING else S / 2) if local else S / 2
        assert allowed == band + edge, (index, local)
        counted.append(band)
    assert sum(counted) / (model.layers * S * S) == pytest.approx(core_share(window, model.layers, S), rel=1e-15)
    causal = training_flops(model, B, S, causal=True)
    full = training_flops(model, B, S)
    core = full.layer_forward.term("F_core").value
    assert causal.layer_forward.term("F_core").value == pytest.approx(core * core_share(window, model.layers, S), rel=1e-12)


# Real configs (the presets' config.json values, their sources in presets/models/*.yaml), built on the meta device.
def _real_configs() -> dict[str, tuple[object, type]]:
    return {
        "mistral-7b": (tf.MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                        num_key_value_heads=8, vocab_size=32000, sliding_window=4096, max_position_embeddings=32768,
                                        tie_word_embeddings=False), tf.MistralForCausalLM),
        "gemma3-27b": (tf.Gemma3TextConfig(hidden_size=5376, intermediate_size=21504, num_hidden_layers=62, num_attention_heads=32,
                                           num_key_value_heads=16, head_dim=128, vocab_size=262208, sliding_window=1024,
                                           max_position_embeddings=131072, query_pre_attn_scalar=168), tf.Gemma3ForCausalLM),
        "gpt-oss-120b": (tf.GptOssConfig(hidden_size=2880, intermediate_size=2880, num_hidden_layers=36, num_attention_heads=64,
                                         num_key_value_heads=8, head_dim=64, vocab_size=201088, sliding_window=128, num_local_experts=128,
                                         num_experts_per_tok=4, max_position_embeddings=131072, layer_types=_alternating(36),
                                         tie_word_embeddings=False, attention_bias=True), tf.GptOssForCausalLM),
        "gpt-oss-20b": (tf.GptOssConfig(hidden_size=2880, intermediate_size=2880, num_hidden_layers=24, num_attention_heads=64,
                                        num_key_value_heads=8, head_dim=64, vocab_size=201088, sliding_window=128, num_local_experts=32,
                                        num_experts_per_tok=4, max_position_embeddings=131072, layer_types=_alternating(24),
                                        tie_word_embeddings=False, attention_bias=True), tf.GptOssForCausalLM),
    }  # fmt: skip


@pytest.mark.parametrize("name", ["mistral-7b", "gemma3-27b", "gpt-oss-120b", "gpt-oss-20b"])
def test_preset_parameters_equal_the_real_model(name: str, tmp_path: Path) -> None:
    """The preset equals transformers' model at its config.json, parameter for parameter, and reading that config.json
    gives the preset's shape (its window included)."""
    config, cls = _real_configs()[name]
    with torch.device("meta"):
        real = cls(config)
    preset = load_model(name)
    assert preset.total_params == sum(p.numel() for p in real.parameters())
    read = _read(config, tmp_path)
    assert read.total_params == preset.total_params and read.active_params == preset.active_params
    assert dataclasses.replace(read.window, source="") == dataclasses.replace(preset.window, source="")


@pytest.mark.parametrize(("name", "total", "tolerance"), [
    ("mistral-7b", 7.24e9, 0.005e9),     # Jiang et al. 2023 (arXiv:2310.06825): 'a 7-billion-parameter', the card's 7.24B
    ("gpt-oss-120b", 116.83e9, 0.005e9),  # OpenAI gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total
    ("gpt-oss-20b", 20.91e9, 0.005e9),    # the same table: 20.91B total
])  # fmt: skip
def test_published_totals(name: str, total: float, tolerance: float) -> None:
    assert abs(load_model(name).total_params - total) <= tolerance


def test_gpt_oss_active_parameters_less_the_embedding_are_the_cards() -> None:
    """The model card's active counts (5.13B, 3.61B) leave out the token-embedding table (a lookup): V h = 579,133,440."""
    for name, active in (("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)):
        model = load_model(name)
        assert abs(model.active_params - model.vocab * model.hidden - active) <= 0.005e9


def test_gemma3_27b_layers_are_the_reports_non_embedding_parameters() -> None:
    """Gemma 3 Technical Report (arXiv:2503.19786) Table 1: 27B, 25,600M non-embedding parameters (the layers)."""
    model = load_model("gemma3-27b")
    assert model.layers_params(0, model.layers) == 25_599_710_720
    assert abs(model.layers_params(0, model.layers) - 25_600e6) < 0.5e6
    assert (model.local_layers_in(0, 62), 62 - model.local_layers_in(0, 62)) == (52, 10)


def test_llama4_scout_chunks_three_layers_of_four() -> None:
    """Llama4TextConfig: no_rope_layer_interval 4, layer_types 'chunked_attention' on the RoPE layers (36 of 48)."""
    model = load_model("llama4-scout")
    assert model.window is not None and model.window.kind is WindowKind.CHUNKED and model.window.size == 8192
    assert [model.window.is_local(i) for i in range(8)] == [True, True, True, False] * 2
    assert model.local_layers_in(0, 48) == 36


# --- the window's arithmetic -------------------------------------------------------------------


@given(st.integers(1, 300), st.integers(1, 64), st.sampled_from([WindowKind.SLIDING, WindowKind.CHUNKED]))
def test_pairs_are_the_allowed_pairs_less_half_the_edge(s: int, w: int, kind: WindowKind) -> None:
    """Brute force over masking_utils' predicates (kv <= q, and kv > q - W or kv // W == q // W)."""
    if kind is WindowKind.SLIDING:
        allowed = sum(1 for q in range(s) for k in range(q + 1) if k > q - w)
        edge = min(s, w) / 2
    else:
        allowed = sum(1 for q in range(s) for k in range(q + 1) if k // w == q // w)
        edge = s / 2
    assert AttentionWindow(kind, w).pairs(s) == allowed - edge


@given(st.integers(0, 200), st.integers(0, 200), st.sampled_from([0, 2, 3, 4, 6]))
def test_local_layers_in_closed_form(start: int, length: int, every: int) -> None:
    window = AttentionWindow(WindowKind.SLIDING, 8, every)
    assert window.local_layers_in(start, start + length) == sum(window.is_local(i) for i in range(start, start + length))


def test_flops_with_causal_window() -> None:
    """Mistral 7B at s = 8192 and W = 4096: each layer's core is s W - W^2/2 = 3/4 of the causal triangle (3/8 of the
    square); at s <= W the window cuts nothing (the same count as without it)."""
    model = load_model("mistral-7b")
    plain = dataclasses.replace(model, window=None)
    windowed = training_flops(model, 1, 8192, causal=True)
    causal = training_flops(plain, 1, 8192, causal=True)
    assert windowed.core_share == 0.375 and causal.core_share == 0.5
    core = training_flops(plain, 1, 8192).layer_forward.term("F_core").value
    assert windowed.layer_forward.term("F_core").value == 0.375 * core
    assert windowed.window is not None and windowed.window.value == 0.375
    short = training_flops(model, 1, 4096, causal=True)
    assert short.model.value == training_flops(plain, 1, 4096, causal=True).model.value
    # without --causal (eager attention: the whole square) the window changes nothing
    assert training_flops(model, 1, 8192).model.value == training_flops(plain, 1, 8192).model.value


def test_fused_attention_kernel_runs_the_band() -> None:
    """The step-time model's FlashAttention kernel (parcalc.core.timing.compute) is given the band's FLOPs: for
    Gemma 3 27B at s = 8192, 17.89 % of the square against 50 % without the window."""
    from parcalc.core.timing.compute import LayerShard, compute_spec, layer_passes
    from parcalc.presets import load_gpu

    gpu = load_gpu("h100-sxm5")
    spec = compute_spec(gpu, "bf16", gpu.dtypes["bf16"].dense_peak.value)
    shard = LayerShard(1, 8192, 1, False, True, False, True, 2.0)
    model = load_model("gemma3-27b")

    def flash(m):  # type: ignore[no-untyped-def]
        return next(k for k in layer_passes(m, shard, spec).forward if k.key == "attn.flash")

    share = core_share(model.window, 62, 8192)
    assert share == pytest.approx((10 * 8192**2 / 2 + 52 * (8192 * 1024 - 1024**2 / 2)) / (62 * 8192**2), rel=1e-15)
    assert flash(model).flops == pytest.approx(flash(dataclasses.replace(model, window=None)).flops * share / 0.5, rel=1e-12)


# --- reading config.json ---------------------------------------------------------------------


def _config(tmp_path: Path, **fields: object) -> Path:
    base = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 96, "num_hidden_layers": 6, "vocab_size": 100, "rms_norm_eps": 1e-6, "sliding_window": 8}
    base.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base))
    return path


def test_gemma3_sliding_window_pattern_of_the_older_configs(tmp_path: Path) -> None:
    """sliding_window_pattern (Gemma 3's first configs) reads as layer_types does: one global layer in 6."""
    model = model_from_hf_config(_config(tmp_path, sliding_window_pattern=3))
    assert model.window is not None and model.window.global_every == 3 and model.local_layers_in(0, 6) == 4


def test_layer_types_beyond_one_in_n_are_refused(tmp_path: Path) -> None:
    odd = ["full_attention", "sliding_attention", "sliding_attention", "full_attention", "full_attention", "sliding_attention"]
    with pytest.raises(PresetError, match="not 'all but every N-th'"):
        model_from_hf_config(_config(tmp_path, layer_types=odd))
    with pytest.raises(PresetError, match="expected one name per layer"):
        model_from_hf_config(_config(tmp_path, layer_types=["sliding_attention"]))
    with pytest.raises(PresetError, match="linear_attention is not an attention kind"):
        model_from_hf_config(_config(tmp_path, layer_types=["linear_attention"] * 6))


def test_qwen2_window_only_when_used(tmp_path: Path) -> None:
    """Qwen2's config carries sliding_window but applies it only with use_sliding_window (Qwen2Config)."""
    model = model_from_hf_config(_config(tmp_path, model_type="qwen2", use_sliding_window=False, sliding_window=4096))
    assert model.window is None


def test_windowed_model_through_memory_fit_and_search() -> None:
    """Every command that takes a model runs a windowed one: memory (its parameters; activations as without the window,
    FlashAttention keeps no s x s tensor), fit and its search (the step time with the band's attention kernels)."""
    from typer.testing import CliRunner

    from parcalc.cli import app

    runner = CliRunner()
    for args in (["memory", "--model", "gemma3-27b", "--micro-batch", "1", "--seq-len", "8192", "--tp", "8", "--flash-attention"],
                 ["fit", "--model", "gpt-oss-20b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len", "4096",
                  "--tp", "1", "--pp", "1", "--ep", "8", "--micro-batch", "1"],
                 ["fit", "--model", "mistral-7b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len", "16384", "--search"]):  # fmt: skip
        result = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert result.exit_code == 0, (args, result.output)


def test_window_saves_no_activation_memory_without_a_fused_kernel() -> None:
    """Eager attention (transformers eager_attention_forward: softmax of the full Q K^T plus the mask) keeps the whole
    s x s square whatever the window; FlashAttention keeps none. The window changes neither count."""
    from parcalc.core.activations import ActivationConfig, layer_activations
    from parcalc.core.choices import Recompute

    model = load_model("mistral-7b")
    for flash in (False, True):
        config = ActivationConfig(1, 8192, 1, False, Recompute.NONE, flash, False, 2.0)
        windowed = layer_activations(model, config).per_layer
        plain = layer_activations(dataclasses.replace(model, window=None), config).per_layer
        assert windowed.value == plain.value
        assert any("saves no memory" in a for a in windowed.assumptions) is (not flash)
