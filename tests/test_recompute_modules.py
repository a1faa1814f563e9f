"""--recompute-modules: Megatron-LM's selective recomputation of named modules (parcalc.core.recompute) in
memory, flops and fit. Byte counts against real PyTorch: tests/ground_truth/test_torch_recompute_modules.py;
the search against the scalar estimate: tests/test_fit_search_ep_cp.py (qwen3-30b-a3b-recompute-modules-64)."""

from __future__ import annotations

import pytest

from parcalc.core.activations import ActivationConfig, Recompute, layer_activations
from parcalc.core.flops import training_flops
from parcalc.core.recompute import (
    DEFAULT_MODULES,
    RECOMPUTE_MODULES,
    module_replays_kernel,
    parse_modules,
    recomputed_modules,
)
from parcalc.errors import InputError
from parcalc.presets import load_model

DSV3 = load_model("deepseek-v3", ())
S = 4096


def test_megatron_names_and_default() -> None:
    """transformer_config.py (d98e8a64) lines 562-564: the choices parcalc has layers for, and the default ['core_attn']."""
    assert RECOMPUTE_MODULES == ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
    assert DEFAULT_MODULES == ("core_attn",)
    assert recomputed_modules(Recompute.SELECTIVE, None) == ("core_attn",)
    assert recomputed_modules(Recompute.NONE, None) == () and recomputed_modules(Recompute.FULL, ("mlp",)) == ()
    # --recompute-mla-up-proj, the old spelling: one more name in the same list
    assert recomputed_modules(Recompute.NONE, None, mla_up_proj=True) == ("mla_up_proj",)
    assert recomputed_modules(Recompute.SELECTIVE, None, mla_up_proj=True) == ("core_attn", "mla_up_proj")
    assert parse_modules("MLA_up_proj, mlp,mlp") == ("mla_up_proj", "mlp")


@pytest.mark.parametrize("text", ["", " ", ",", "foo", "0", "-1", "1e308", "core-attn"])
def test_bad_names_are_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="--recompute-modules"):
        parse_modules(text)


def test_deepseek_v3_saved_bytes_by_hand() -> None:
    """bf16, b = 1, s = 4096, t = 1, FlashAttention. mla_up_proj drops per token the normed latents (1536 + 512)
    and Q, K (128 x 192 each) and V (128 x 128): 67,584 values; mlp (the three dense layers) the fused norm's
    output (7168) and the SwiGLU's gate, up and product (3 x 18432): 62,464 values."""
    plain = ActivationConfig(1, S, flash_attention=True, dropout=False)
    again = ActivationConfig(1, S, flash_attention=True, dropout=False, recompute=Recompute.SELECTIVE, recompute_modules=("mla_up_proj", "mlp"))
    dense = layer_activations(DSV3, plain).per_layer.value - layer_activations(DSV3, again).per_layer.value
    moe = layer_activations(DSV3, plain, moe_layer=True).per_layer.value - layer_activations(DSV3, again, moe_layer=True).per_layer.value
    assert moe == 67_584 * 2 * S
    assert dense == (67_584 + 62_464) * 2 * S


def test_deepseek_v3_recomputed_flops_by_hand() -> None:
    """B = 8, s = 4096: T = 32,768 tokens. Per layer mla_up_proj replays q_up 2 T 1536 (128 x 192) and kv_up
    2 T 512 (128 x 256): 3,573,412,790,272 FLOP; a dense layer's mlp 3 x 2 T 7168 x 18432 = 25,975,962,206,208.
    3 dense and 58 MoE layers: 3 x 29,549,374,996,480 + 58 x 3,573,412,790,272 = 295,906,066,825,216."""
    t = 8 * S
    up = 2 * t * 1536 * 128 * 192 + 2 * t * 512 * 128 * 256
    mlp = 3 * 2 * t * 7168 * 18432
    assert up == 3_573_412_790_272 and mlp == 25_975_962_206_208
    counted = training_flops(DSV3, 8, S, recompute="selective", recompute_modules=("mla_up_proj", "mlp"), causal=True)
    assert counted.recomputed.value == 3 * (up + mlp) + 58 * up == 295_906_066_825_216
    assert counted.hardware.value == counted.model.value + counted.recomputed.value
    assert counted.korthikanti_selective is None  # their eq. (8) is the attention core's
    # the default list is the attention core, as before
    default = training_flops(DSV3, 8, S, recompute="selective", causal=True)
    assert training_flops(DSV3, 8, S, recompute="selective", recompute_modules=("core_attn",), causal=True).recomputed.value == default.recomputed.value


def test_replayed_kernels_of_each_layer_kind() -> None:
    """The step time replays, of a DeepSeek-V3 layer's forward kernels (parcalc.core.timing.compute and timing.moe
    keys), MLA's latent norms, up projections and RoPE in every layer, and in a dense layer the pre-MLP norm
    (fused into linear_fc1 in the TE spec) and the MLP; an MoE layer's experts are not replayed by 'mlp'."""
    from parcalc.core.fit import Cluster
    from parcalc.core.timing.compute import LayerShard, layer_passes
    from parcalc.core.timing.moe import ExpertShard
    from parcalc.presets import load_gpu, load_link

    gpu = load_gpu("h100-sxm5", ())
    cluster = Cluster(gpus=8, gpus_per_node=8, peak=989e12, capacity=gpu.memory_capacity.value, intra=load_link("nvlink4", ()),
                      inter=load_link("ib-ndr", ()), gpu=gpu)  # fmt: skip
    shard = LayerShard(1, S, 1, False, True, False, True, 2.0)
    modules = ("mla_up_proj", "mlp")
    dense = layer_passes(DSV3, shard, cluster.spec)
    moe = layer_passes(DSV3, shard, cluster.spec, ExpertShard(etp=1))
    mla = {"mla.q_norm", "mla.q_up", "mla.kv_norm", "mla.kv_up", "rope"}
    assert {k.key for k in dense.forward if module_replays_kernel(k.key, modules, DSV3, False)} == mla | {"norm2", "mlp.gate_up", "mlp.act", "mlp.down"}
    assert {k.key for k in moe.forward if module_replays_kernel(k.key, modules, DSV3, True)} == mla
    replayed = sum(k.time for k in dense.forward if k.key in mla | {"norm2", "mlp.gate_up", "mlp.act", "mlp.down"})
    assert dense.t_recompute(Recompute.SELECTIVE, DSV3, modules) == pytest.approx(replayed, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# CLI

MEMORY = ["memory", "--model", "deepseek-v3", "--seq-len", "4096", "--flash-attention", "--gpu", "h100-sxm5"]


def test_the_old_flag_is_the_same_list(run_json) -> None:  # type: ignore[no-untyped-def]
    """--recompute-mla-up-proj and --recompute selective --recompute-modules mla_up_proj keep the same bytes."""
    old = run_json(*MEMORY, "--recompute-mla-up-proj")
    new = run_json(*MEMORY, "--recompute", "selective", "--recompute-modules", "mla_up_proj")
    assert new["settings"]["recompute_modules"] == "mla_up_proj" and old["settings"]["recompute_mla_up_proj"] is True
    for key in ("activation_per_layer", "recompute_working_set", "total"):
        assert old["results"][key]["value"] == new["results"][key]["value"], key


def test_flops_and_fit_carry_the_modules(run_json) -> None:  # type: ignore[no-untyped-def]
    flops = run_json("flops", "--model", "deepseek-v3", "--batch", "8", "--seq-len", "4096", "--causal", "--recompute", "selective",
                     "--recompute-modules", "mla_up_proj,mlp")  # fmt: skip
    assert flops["settings"]["recompute_modules"] == "mla_up_proj,mlp"
    assert flops["results"]["recomputed_flops"]["value"] == 295_906_066_825_216
    fit = run_json("fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "64", "--seq-len", "4096",
                   "--flash-attention", "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--zero", "1", "--recompute", "selective",
                   "--recompute-modules", "moe_act,layernorm")  # fmt: skip
    assert fit["settings"]["recompute_modules"] == "moe_act,layernorm"
    # the text and the PDF said only "recompute selective": the modules are an assumption, with Megatron's sites
    said = [a for a in fit["assumptions"] if a.startswith("recompute selective: Megatron-LM's modules moe_act, layernorm")]
    assert len(said) == 1 and "moe_act: megatron/core/transformer/moe/experts.py" in said[0]
    search = run_json("fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "64", "--seq-len", "4096",
                      "--flash-attention", "--search", "--top", "2", "--recompute", "selective", "--recompute-modules", "moe_act")  # fmt: skip
    assert any(a.startswith("recompute selective: Megatron-LM's modules moe_act (") for a in search["assumptions"])
    plain = run_json("fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "64", "--seq-len", "4096",
                     "--flash-attention", "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--zero", "1", "--recompute", "selective")  # fmt: skip
    assert not any("Megatron-LM's modules" in a for a in plain["assumptions"])  # the default core_attn says nothing new


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["flops", "--model", "llama3-8b", "--recompute-modules", "mlp"], "--recompute-modules: needs --recompute selective"),
        (["flops", "--model", "llama3-8b", "--recompute", "selective", "--recompute-modules", "moe"], "has no Mixture-of-Experts layers"),
        (["flops", "--model", "llama3-8b", "--recompute", "selective", "--recompute-modules", "mla_up_proj"], "no multi-head latent attention"),
        (["flops", "--model", "mixtral-8x7b", "--recompute", "selective", "--recompute-modules", "mlp"], "has no dense MLP"),
        (["flops", "--model", "mixtral-8x7b", "--recompute", "selective", "--recompute-modules", "shared_experts"], "has no shared experts"),
        (["flops", "--model", "llama3-8b", "--recompute", "selective", "--recompute-modules", "layernorm"], "no separate norm"),
        (["memory", "--model", "llama3-8b", "--recompute", "full", "--recompute-modules", "core_attn"], "needs --recompute selective"),
        (["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--recompute", "full", "--recompute-modules", "mlp"],
         "needs --recompute selective"),
        (["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--recompute-modules", "nope"], "unknown module 'nope'"),
    ],
)
def test_bad_combinations_are_one_line_errors(run_error, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    assert message in run_error(args)
