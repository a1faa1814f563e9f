"""Mixture-of-Experts presets: parameter counts against the published ones, to the printed digit.

Each row: the preset, the published total and active counts as printed, the digits printed, and
whether the publisher rounded or cut (truncated) to those digits: Mixtral's 12.9B active is
12.88B rounded; DeepSeek-V3's 37B is 37.55B cut, as is Qwen3-30B-A3B's 3.3B (3.35B). Where both
conventions give the printed number, "either".
"""

from __future__ import annotations

import math

import pytest

from parcalc.presets import load_model


def printed(value: float, decimals: int, how: str) -> float:
    """value in billions as a publisher prints it with `decimals` decimals."""
    scaled = value / 1e9 * 10**decimals
    rounded = math.floor(scaled + 0.5) / 10**decimals
    cut = math.floor(scaled) / 10**decimals
    if how == "either":
        assert rounded == cut, f"{value:,}: rounding gives {rounded}, cutting {cut}"
        return rounded
    return rounded if how == "round" else cut


# (preset, total printed, decimals, convention, active printed, decimals, convention, source)
PUBLISHED = [
    ("mixtral-8x7b", 46.7, 1, "either", 12.9, 1, "round",
     "Hugging Face mistralai/Mixtral-8x7B-v0.1 model card 46.7B; Jiang et al. 2024 sec. 2: 13B active (12.9B: 46.7B/12.9B in the issue)"),
    ("mixtral-8x22b", 141, 0, "round", 39, 0, "either", "mistral.ai/news/mixtral-8x22b: 39B active out of 141B"),
    ("deepseek-v3", 671, 0, "either", 37, 0, "cut", "DeepSeek-V3 Technical Report (arXiv:2412.19437) abstract: 671B total, 37B activated"),
    ("deepseek-v2", 236, 0, "round", 21, 0, "either", "DeepSeek-V2 (arXiv:2405.04434) abstract and sec. 3.1.2: 236B total, 21B activated"),
    ("qwen3-30b-a3b", 30.5, 1, "either", 3.3, 1, "cut", "Hugging Face Qwen/Qwen3-30B-A3B model card: 30.5B in total and 3.3B activated"),
    ("qwen3-235b-a22b", 235, 0, "either", 22, 0, "either", "Hugging Face Qwen/Qwen3-235B-A22B model card: 235B in total and 22B activated"),
]


@pytest.mark.parametrize("row", PUBLISHED, ids=[r[0] for r in PUBLISHED])
def test_published_total_and_active(row: tuple) -> None:
    name, total, t_dec, t_how, active, a_dec, a_how, _source = row
    model = load_model(name)
    assert printed(model.total_params, t_dec, t_how) == total
    assert printed(model.active_params, a_dec, a_how) == active


# Exact counts, each derived by hand from the config.json values quoted in the preset.
def test_mixtral_8x7b_by_hand() -> None:
    h, f, layers, v = 4096, 14336, 32, 32000
    attention = h * h + 2 * h * 1024 + h * h  # 32 query heads, 8 KV heads of 128
    expert = 3 * h * f
    layer = attention + 8 * expert + h * 8 + 2 * h  # experts, router (no bias), two RMSNorms
    total = layers * layer + 2 * v * h + h  # untied embeddings and LM head, final norm
    model = load_model("mixtral-8x7b")
    assert model.total_params == total == 46_702_792_704
    assert model.active_params == total - layers * 6 * expert == 12_879_925_248


def test_qwen3_30b_counts_qk_norm() -> None:
    """q_norm and k_norm (Qwen3MoeRMSNorm(head_dim), transformers modeling_qwen3_moe.py) are weights: 2 x 128 per layer."""
    h, hd, layers = 2048, 128, 48
    attention = h * 32 * hd + 2 * h * 4 * hd + 32 * hd * h + 2 * hd
    layer = attention + 128 * 3 * h * 768 + h * 128 + 2 * h
    model = load_model("qwen3-30b-a3b")
    assert model.qk_norm and model.qk_norm_params_per_layer == 256
    assert model.total_params == layers * layer + 2 * 151936 * h + h == 30_532_122_624
    assert model.active_params == 3_353_032_704  # 3.35B: the card's "3.3B" cuts it
    assert model.total_params - model.embedding_params - model.lm_head_params == 29_909_790_720  # the card's 29.9B non-embedding


def test_deepseek_v3_by_hand() -> None:
    """MLA (q_a, q_a_layernorm, q_b, kv_a_proj_with_mqa, kv_a_layernorm, kv_b, o_proj), 3 dense layers of 18432,
    58 MoE layers with 1 shared + 256 routed experts of 2048 and a router with e_score_correction_bias."""
    h, n = 7168, 128
    mla = h * 1536 + 1536 + 1536 * n * 192 + h * (512 + 64) + 512 + 512 * n * (128 + 128) + n * 128 * h
    dense = mla + 3 * h * 18432 + 2 * h
    moe = mla + 2 * h + (h * 256 + 256) + 3 * h * 2048 * (1 + 256)
    total = 3 * dense + 58 * moe + 2 * 129280 * h + h
    model = load_model("deepseek-v3")
    assert model.moe_layers == 58
    assert model.total_params == total == 671_026_419_200
    assert model.active_params == total - 58 * 248 * 3 * h * 2048 == 37_552_297_472


def test_deepseek_v2_by_hand() -> None:
    """DeepSeek-V2's config.json (presets/models/deepseek-v2.yaml): MLA with q_lora_rank 1536, one dense layer of 12288,
    59 MoE layers with 2 shared + 160 routed experts of 1536 and a softmax router without bias (modeling_deepseek_v2.py)."""
    h, n = 5120, 128
    mla = h * 1536 + 1536 + 1536 * n * 192 + h * (512 + 64) + 512 + 512 * n * (128 + 128) + n * 128 * h
    dense = mla + 3 * h * 12288 + 2 * h
    moe = mla + 2 * h + h * 160 + 3 * h * 1536 * (2 + 160)
    total = dense + 59 * moe + 2 * 102400 * h + h
    model = load_model("deepseek-v2")
    assert model.moe_layers == 59
    assert model.total_params == total == 235_741_434_880  # the paper's '236B total'
    assert model.active_params == total - 59 * 154 * 3 * h * 1536 == 21_375_800_320  # '21B are activated'


def test_llama4_scout_text_and_vision() -> None:
    """Meta: 17B active, 109B total. The text model parcalc counts is 107.8B; Meta's total also counts
    the vision encoder, counted here by hand from vision_config (Llama4VisionModel in transformers
    modeling_llama4.py: class embedding, 577 x 1408 positions, 14 x 14 x 3 patch projection, pre/post
    LayerNorms, 34 layers with biased q/k/v/o and fc1/fc2, the pixel-shuffle adapter 5632 -> 4096 ->
    4096, and the projector 4096 -> 5120 without bias)."""
    model = load_model("llama4-scout")
    h = 5120
    attention = h * 40 * 128 + 2 * h * 8 * 128 + 40 * 128 * h
    ffn = 3 * h * 8192
    layer = attention + 16 * ffn + ffn + h * 16 + 2 * h  # 16 routed, 1 shared expert, router, norms
    assert model.total_params == 48 * layer + 2 * 202048 * h + h == 107_769_861_120
    assert model.active_params == 48 * (attention + 2 * ffn + h * 16 + 2 * h) + 2 * 202048 * h + h == 17_172_894_720
    assert printed(model.active_params, 0, "either") == 17
    v, mlp = 1408, 5632
    vision_layer = 4 * (v * v + v) + (v * mlp + mlp) + (mlp * v + v) + 4 * v
    vision = v + 577 * v + 3 * 14 * 14 * v + 4 * v + 34 * vision_layer + (4 * v * 4096 + 4096 * 4096) + 4096 * h
    assert vision == 871_932_416
    assert printed(model.total_params + vision, 0, "round") == 109
    assert printed(model.total_params, 0, "round") == 108  # the text model alone is not Meta's 109B


def test_moe_presets_load_with_their_blocks() -> None:
    assert load_model("deepseek-v3").mla is not None
    assert load_model("deepseek-v3").moe.router_bias
    assert load_model("llama4-scout").moe.shared_experts == 1
    assert not load_model("mixtral-8x7b").qk_norm


def test_presets_show_lists_experts_and_active_params(run_json) -> None:
    doc = run_json("presets", "show", "deepseek-v3")
    rows = {row["field"]: row["value"] for row in doc["tables"]["fields"]["rows"]}
    assert rows["moe.experts"] == 256 and rows["moe.top_k"] == 8 and rows["mla.kv_lora_rank"] == 512
    assert rows["total_params"] == 671_026_419_200 and rows["active_params"] == 37_552_297_472 and rows["moe_layers"] == 58
