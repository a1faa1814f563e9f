"""Memory of MoE and MLA layouts: the token-exchange buffers, the experts' FP8 weight copies, Adam's
moments in bf16 (Megatron-LM's precision-aware optimizer), MLA's up-projection recomputation, and
their flags through `parcalc memory` (values in JSON, one-line errors). Expected values by hand."""

from __future__ import annotations

import pytest

from parcalc.core.choices import Optimizer, Precision
from parcalc.core.expert_parallel import fp8_linear_weights_per_rank, moe_dispatch_working_set
from parcalc.core.layout import Layout
from parcalc.core.memory import fp8_weight_cache
from parcalc.core.model import MixtureOfExperts, Mlp, Norm, Position, TransformerModel
from parcalc.core.model_states import state_bytes
from parcalc.presets import load_model


def small_moe(capacity_factor: float | None = None) -> TransformerModel:
    return TransformerModel(
        key="m", name="m", layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn_hidden=128, mlp=Mlp.SWIGLU, vocab=0,
        max_seq_len=0, tied_embeddings=True, position=Position.ROPE, norm=Norm.RMSNORM, bias=False, source="test",
        dropout=False, moe=MixtureOfExperts(16, 4, 32, shared_experts=1, first_dense_layers=1, capacity_factor=capacity_factor),
    )  # fmt: skip


def test_exchange_buffers_by_hand() -> None:
    # T = b s / (cp t) = 2 x 1024 / (2 x 2) = 512 tokens; 2 rho etp T k h e = 2 x 1.5 x 1 x 512 x 4 x 64 x 2 B
    d = moe_dispatch_working_set(small_moe(), 2, 1024, Layout(2, cp=2, sequence_parallel=True, ep=8, etp=1), element_bytes=2.0,
                                 imbalance=1.5)  # fmt: skip
    assert d.value == 2 * 1.5 * 512 * 4 * 64 * 2 == 786_432
    # dropless worst case named: ep x min(k, E/ep) / k = 8 x min(4, 2) / 4 = 4 times the balanced share
    assert any("4 times the balanced share" in a for a in d.assumptions)
    # a capacity factor caps the busiest rank's share (MixtureOfExperts.busiest_share); etp 2 gathers twice the tokens
    capped = moe_dispatch_working_set(small_moe(1.25), 2, 1024, Layout(2, cp=2, sequence_parallel=True, ep=8, etp=2), element_bytes=2.0,
                                      imbalance=1.5)  # fmt: skip
    assert capped.value == 2 * 1.25 * 2 * 512 * 4 * 64 * 2
    assert moe_dispatch_working_set(load_model("llama3-8b"), 1, 1024, Layout(etp=1), 2.0) is None


def test_fp8_copies_of_the_experts() -> None:
    # dense layer at t = 2 (q = 4 x 16 = 64, kv = 2 x 16 = 32): (h q + 2 h kv + q h + 3 h f) / 2
    # = (4096 + 4096 + 4096 + 24576) / 2 = 18,432
    # MoE layer at t = 2, ep 4, etp 1: (attention 12,288 + shared 3 x 64 x 32 = 6,144) / 2 + 16/4 x 3 x 64 x 32 = 33,792
    model = small_moe()
    assert fp8_linear_weights_per_rank(model, Layout(2)) == 18_432
    assert fp8_linear_weights_per_rank(model, Layout(2, ep=4, etp=1), moe_layer=True) == 9_216 + 24_576
    cache = fp8_weight_cache(model, Layout(2, ep=4, etp=1), 4, moe_layers=3)
    assert cache.value == 2 * (18_432 * 1 + 33_792 * 3)  # FP8 weight + transpose, 1 byte each
    assert fp8_weight_cache(model, Layout(2), 4).value == 2 * 18_432 * 4  # without the MoE split: the dense shapes, as before


def test_fp8_copies_of_latent_attention() -> None:
    # DeepSeek-V3's MLA projections (LatentAttention.params less the two latent norms 1536 + 512) and the dense MLP, t = 1
    dsv3 = load_model("deepseek-v3")
    attention = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert fp8_linear_weights_per_rank(dsv3, Layout()) == attention + 3 * 7168 * 18432


def test_bf16_moments() -> None:
    # Megatron-LM --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16: K = 4 + 2 x 2 = 8
    per = state_bytes(Precision.MIXED_BF16, Optimizer.ADAMW, moment_bytes=2.0)
    assert (per.weight, per.gradient, per.master, per.per_state, per.optimizer, per.total) == (2, 2, 4, 2, 8, 12)
    assert state_bytes(Precision.FP8, Optimizer.LION, moment_bytes=2.0).optimizer == 4 + 1 * 2


def test_flags_in_json(run_json) -> None:
    doc = run_json("memory", "--model", "qwen3-30b-a3b", "--seq-len", "4096", "--dp", "16", "--ep", "16", "--etp", "1", "--zero", "1",
                   "--flash-attention", "--moe-imbalance", "1.2", "--moment-dtype", "bf16")  # fmt: skip
    results = doc["results"]
    # 2 x 1.2 x 4096 x 8 x 2048 x 2 B
    assert results["moe_dispatch_working_set"]["value"] == pytest.approx(2 * 1.2 * 4096 * 8 * 2048 * 2)
    assert results["optimizer_states"]["inputs"]["K"]["value"] == 8.0
    assert doc["settings"]["moment_dtype"] == "bf16" and doc["settings"]["moe_imbalance"] == 1.2
    args = ["memory", "--model", "deepseek-v3", "--seq-len", "4096", "--tp", "8", "--dp", "8", "--ep", "64", "--etp", "1",
            "--sequence-parallel", "--flash-attention"]  # fmt: skip
    plain, again = run_json(*args), run_json(*args, "--recompute-mla-up-proj")
    assert again["settings"]["recompute_mla_up_proj"] is True
    # per MLA layer and token on t = 8: normed c_q 1536 / 8 and normed c_kv 512 / 8 (SP), Q and K 128 x 192 / 8, V 128 x 128 / 8
    saved = (1536 + 512 + 2 * 128 * 192 + 128 * 128) // 8 * 2 * 4096 * 61
    assert plain["results"]["stage_activations"]["value"] - again["results"]["stage_activations"]["value"] == saved


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "qwen3-30b-a3b", "--moment-dtype", "fp8"], "--moment-dtype: one of fp32, bf16, fp16"),
        (["--model", "qwen3-30b-a3b", "--moment-dtype", "bf16", "--precision", "bf16"], "--moment-dtype: applies beside an fp32 master"),
        (["--model", "qwen3-30b-a3b", "--moment-dtype", "bf16", "--optimizer", "adam-8bit"], "--moment-dtype: adam-8bit keeps"),
        (["--model", "qwen3-30b-a3b", "--moe-imbalance", "0.5"], "--moe-imbalance: the busiest rank's tokens"),
        (["--model", "qwen3-30b-a3b", "--moe-imbalance", "1e308"], "--moe-imbalance: 1e+308 is more than the 128 routed experts"),
        (["--model", "qwen3-30b-a3b", "--moe-imbalance", "x"], "--moe-imbalance: cannot read 'x'"),
        (["--model", "llama3-8b", "--moe-imbalance", "1.2"], "--moe-imbalance: model llama3-8b has no experts"),
        (["--model", "llama3-8b", "--recompute-mla-up-proj"], "--recompute-mla-up-proj: Llama 3 8B has no multi-head latent attention"),
    ],
    ids=["moment-fp8", "moment-pure-bf16", "moment-8bit", "imbalance-below-1", "imbalance-huge", "imbalance-text", "imbalance-dense",
         "mla-up-proj-dense"],
)  # fmt: skip
def test_bad_input_is_one_line(run_error, args: list[str], message: str) -> None:
    assert run_error(["memory", *args]).startswith(f"Error: {message}")
