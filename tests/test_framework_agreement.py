"""parcalc against what the frameworks really do (issue #12, "Agree with the frameworks").

Each test pins a value with its source: a line of Megatron-LM, DeepSpeed or PyTorch, a paper's
equation, or a derivation by hand written out beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.hf_config import model_from_hf_config
from parcalc.presets import load_model

# ---------------------------------------------------------------------------------------------
# Gradient bytes: a convention, stated (item 3)

LLAMA3_8B_PARAMS = 8_030_261_248  # Hugging Face's count for Meta-Llama-3-8B (presets/models/llama3-8b.yaml)


def test_memory_states_the_16_byte_convention_and_its_alternatives(run_json) -> None:
    # Rajbhandari et al. 2020 sec. 3.1: 2 + 2 + 12 = 16 bytes per parameter with mixed-precision Adam;
    # the gradients alone, 2 bytes x 8,030,261,248 = 16,060,522,496 bytes on one GPU.
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096")
    assert doc["results"]["gradients"]["value"] == 2 * LLAMA3_8B_PARAMS
    assert doc["results"]["gradients"]["inputs"]["g"]["source"].startswith("Rajbhandari et al. 2020 sec. 3.1")
    grads = next(a for a in doc["assumptions"] if "gradients (2 bytes, 16 per parameter)" in a)
    assert "Megatron-LM keeps fp32 gradients (--fp32-grads, 18 with Adam)" in grads
    assert "estimate_zero2_model_states_mem_needs counts 20 at N = 1" in grads


def test_memory_fp32_grads_is_megatrons_18_bytes(run_json) -> None:
    # Megatron-LM megatron/training/arguments.py: --bf16 sets accumulate_allreduce_grads_in_fp32, so
    # main_grad is fp32: 4 bytes x 8,030,261,248 = 32,121,044,992 bytes, 18 bytes per parameter in all.
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--fp32-grads")
    assert doc["results"]["gradients"]["value"] == 4 * LLAMA3_8B_PARAMS
    assert any(a.startswith("fp32 gradients (4 bytes, 18 per parameter): Megatron-LM megatron/training/arguments.py") for a in doc["assumptions"])


FIT_ONE = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--seq-len", "4096", "--tp", "8", "--pp", "1", "--dp", "1"]


@pytest.mark.parametrize(
    ("flags", "fp32", "said"),
    [
        ([], True, "gradients in fp32, 4 bytes (18 per parameter with adamw): the Megatron-LM (Megatron-Core) profile's default"),
        (["--framework", "deepspeed"], False, "gradients in 16-bit, 2 bytes (16 per parameter with adamw): the DeepSpeed ZeRO profile's default"),
        # where the fsdp2 walk runs, its fp32 states (tests/test_memory_state_bytes_line.py); here (TP 8) the textbook's
        (["--framework", "fsdp2"], False, "where it is not, the textbook's: gradients in 16-bit, 2 bytes (16 per parameter with adamw): "
         "the PyTorch FSDP2"),
        (["--framework", "deepspeed", "--fp32-grads"], True, "gradients: fp32 gradients (4 bytes, 18 per parameter)"),
        (["--no-fp32-grads"], False, "gradients: 16-bit gradients (2 bytes, 16 per parameter)"),
    ],
    ids=["megatron", "deepspeed", "fsdp2", "deepspeed+fp32", "megatron-no-fp32"],
)
def test_fit_states_the_gradient_convention_it_used(run_json, flags: list[str], fp32: bool, said: str) -> None:
    # The model states of one GPU of TP 8 differ by exactly 2 bytes per local parameter between
    # fp32 and 16-bit gradients (presets/frameworks/*.yaml: fp32_grads, each with its source).
    doc = run_json(*FIT_ONE, *flags)
    assert any(a.startswith(said) or ("; where it is not, the textbook's: " in a and said in a) for a in doc["assumptions"]), doc["assumptions"]
    base = run_json(*FIT_ONE, "--no-fp32-grads")["results"]["model_states"]["value"]
    params = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--tp", "8")["results"]["stage_parameters"]["value"]
    assert doc["results"]["model_states"]["value"] - base == (2 * params if fp32 else 0)


# ---------------------------------------------------------------------------------------------
# Dropout: Llama has none (item 4)

# Llama 3 8B, b = 1, s = 4096, t = 1, no FlashAttention (--no-flash-attention), no recomputation, bytes per token kept by one
# layer: norm inputs 2 x 2h, QKV input 2h, Q 2h, K and V 2 x 2 kv (kv = 1024), projection input 2h,
# MLP input 2h, gate, up and product 3 x 2f (f = 14336): 6 x 8192 + 2 x 2048 + 3 x 28672 = 139,264;
# the softmax output 2 a s^2 b (a = 32). A = 4096 x 139,264 + 64 x 4096^2 = 1,644,167,168 bytes.
LLAMA3_8B_LAYER_NO_DROPOUT = 4096 * 139_264 + 2 * 32 * 4096**2
# Dropout adds two h-wide 1-byte masks per token (attention and MLP outputs) and, per score, a 1-byte
# mask and a 2-byte dropped-out copy (Korthikanti et al. 2022 sec. 4.1): 4096 x 8192 + 3 x 32 x 4096^2.
LLAMA3_8B_LAYER_DROPOUT = LLAMA3_8B_LAYER_NO_DROPOUT + 4096 * 8192 + 3 * 32 * 4096**2
# The default, FlashAttention/SDPA: no s x s tensor, an fp32 log-sum-exp per row and head instead (Dao 2023,
# FlashAttention-2, Algorithm 1): 4096 x 139,264 + 4 x 32 x 4096 = 570,949,632 bytes.
LLAMA3_8B_LAYER_FLASH = 4096 * 139_264 + 4 * 32 * 4096


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"])
def test_llama_presets_train_without_dropout(name: str) -> None:
    # meta-llama/llama and meta-llama/llama3 llama/model.py: no dropout layer in Attention,
    # FeedForward or TransformerBlock.
    model = load_model(name)
    assert model.dropout is False
    assert "llama/model.py" in model.dropout_source


def test_flash_attention_is_the_default_and_said(run_json) -> None:
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096")
    assert doc["results"]["activation_per_layer"]["value"] == LLAMA3_8B_LAYER_FLASH == 570_949_632
    assert doc["settings"]["flash_attention"] is True
    assert any(a.startswith("attention: FlashAttention/SDPA, scores not materialised") and "--no-flash-attention" in a
               for a in doc["assumptions"])  # fmt: skip
    textbook = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--no-flash-attention")
    assert textbook["results"]["activation_per_layer"]["value"] - doc["results"]["activation_per_layer"]["value"] == 2 * 32 * 4096**2 - 4 * 32 * 4096
    assert any(a.startswith("attention: the s x s scores materialised (--no-flash-attention)") for a in textbook["assumptions"])


def test_llama_activations_have_no_dropout_masks_unless_asked(run_json) -> None:
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--no-flash-attention")
    assert doc["results"]["activation_per_layer"]["value"] == LLAMA3_8B_LAYER_NO_DROPOUT == 1_644_167_168
    assert doc["settings"]["dropout"] is False
    assert any(a.startswith("no dropout masks: Llama 3 8B trains without dropout (meta-llama/llama3") for a in doc["assumptions"])
    names = {row["tensor"] for row in doc["tables"]["layer_activations"]["rows"]}
    assert not any("dropout" in n for n in names)
    forced = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--dropout", "--no-flash-attention")
    assert forced["results"]["activation_per_layer"]["value"] == LLAMA3_8B_LAYER_DROPOUT == 3_288_334_336
    assert any(a == "dropout masks counted (1 byte per element): --dropout" for a in forced["assumptions"])


def test_gpt_presets_keep_korthikantis_dropout(run_json) -> None:
    # Korthikanti et al. 2022 eq. (1): s b h (34 + 5 a s / h) with its dropout masks; GPT-3 175B,
    # s = 2048, b = 1, h = 12288, a = 96: 855,638,016 + 2,013,265,920 = 2,868,903,936 bytes.
    doc = run_json("memory", "--model", "gpt3-175b", "--seq-len", "2048", "--no-flash-attention")
    assert doc["results"]["activation_per_layer"]["value"] == 2048 * 12288 * 34 + 5 * 96 * 2048**2 == 2_868_903_936
    assert doc["results"]["korthikanti_per_layer"]["value"] == 2_868_903_936
    assert doc["settings"]["dropout"] is True


def test_fit_follows_the_models_dropout(run_json) -> None:
    # fit's memory is memory's: the same Llama layer without masks, unless --dropout.
    args = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "1", "--seq-len", "4096", "--tp", "1", "--pp", "1", "--dp", "1",
            "--no-flash-attention"]  # the score masks too (with FlashAttention the kernel regenerates its mask)
    plain = run_json(*args)["results"]["activations"]["value"]
    masked = run_json(*args, "--dropout")["results"]["activations"]["value"]
    assert masked - plain == pytest.approx(32 * (LLAMA3_8B_LAYER_DROPOUT - LLAMA3_8B_LAYER_NO_DROPOUT) + 4096 * 4096, rel=1e-12)


def _config(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return path


# meta-llama/Meta-Llama-3-8B config.json, the keys that shape the model
LLAMA3_8B_CONFIG = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "dropout"),
    [
        ({}, False),  # attention_dropout 0.0, the only dropout of transformers' LlamaModel
        ({"attention_dropout": None}, False),  # no key: LlamaConfig's default 0.0
        ({"attention_dropout": 0.1}, True),
        ({"model_type": "gpt_neox", "hidden_dropout": 0.1, "attention_dropout": 0.0}, True),  # any probability above 0
    ],
    ids=["llama3-config", "no-key", "attention-dropout", "hidden-dropout"],
)
def test_config_json_dropout(tmp_path: Path, changes: dict, dropout: bool) -> None:
    config = {k: v for k, v in {**LLAMA3_8B_CONFIG, **changes}.items() if v is not None}
    assert model_from_hf_config(_config(tmp_path, "m", config)).dropout is dropout


def test_gpt2_config_json_keeps_dropout(tmp_path: Path) -> None:
    # openai-community/gpt2 config.json: attn_pdrop, resid_pdrop and embd_pdrop 0.1
    config = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257,
              "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}  # fmt: skip
    model = model_from_hf_config(_config(tmp_path, "gpt2", config))
    assert model.dropout is True and "attn_pdrop 0.1" in model.dropout_source


def test_llama3_config_json_counts_like_the_preset(tmp_path: Path, run_json) -> None:
    path = _config(tmp_path, "Meta-Llama-3-8B", LLAMA3_8B_CONFIG)
    doc = run_json("memory", "--model", str(path), "--seq-len", "4096")
    assert doc["results"]["activation_per_layer"]["value"] == LLAMA3_8B_LAYER_FLASH
    assert any("config.json: attention_dropout 0" in a for a in doc["assumptions"])


# ---------------------------------------------------------------------------------------------
# Mixture of Experts: read with its experts now (issue #13); what parcalc cannot represent is refused

# mistralai/Mixtral-8x7B-v0.1 config.json
MIXTRAL_CONFIG = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "num_local_experts": 8, "num_experts_per_tok": 2, "attention_dropout": 0.0,
}  # fmt: skip


def test_mixtral_read_densely_would_be_7_24b(tmp_path: Path) -> None:
    # Without its experts, Mixtral 8x7B reads as one dense 7B model, 32 x (2 x 4096^2 +
    # 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096) + 2 x 32000 x 4096 + 4096 = 7,241,732,096
    # parameters, where Mistral AI gives 46.7 B (eight experts' MLPs per layer): with them, 46.7 B.
    dense = {k: v for k, v in MIXTRAL_CONFIG.items() if k not in ("num_local_experts", "num_experts_per_tok")}
    assert model_from_hf_config(_config(tmp_path, "dense", dense)).total_params == 7_241_732_096
    assert model_from_hf_config(_config(tmp_path, "mixtral", MIXTRAL_CONFIG)).total_params == 46_702_792_704


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        # DeepSeek-V3's expert keys without num_experts_per_tok: the missing key is named
        ({"model_type": "deepseek_v3", "n_routed_experts": 256, "moe_intermediate_size": 2048}, "num_experts_per_tok"),
        # Qwen2-MoE reads now (tests/test_qwen2_moe.py); without num_experts_per_tok the missing key is named
        ({"model_type": "qwen2_moe", "num_experts": 60, "moe_intermediate_size": 1408}, "num_experts_per_tok"),
        ({"model_type": "custom", "moe_intermediate_size": 1408}, "moe_intermediate_size: 1408"),
    ],
    ids=["deepseek-v3", "qwen2-moe", "moe-key"],
)
def test_moe_config_json_is_refused_with_the_key(tmp_path: Path, runner, extra: dict, key: str) -> None:
    path = _config(tmp_path, "moe", {**LLAMA3_8B_CONFIG, **extra})
    for command in (["memory", "--model", str(path), "--seq-len", "4096"],
                    ["fit", "--model", str(path), "--gpu", "h100-sxm5", "--gpus", "8", "--seq-len", "4096"]):  # fmt: skip
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ") and key in lines[0] and "config.json" in lines[0], result.stderr


@pytest.mark.parametrize("value", [None, 0, 1, False], ids=["null", "zero", "one", "false"])
def test_dense_configs_with_empty_expert_keys_are_read(tmp_path: Path, value: object) -> None:
    # some dense configs carry the keys unset (num_experts: null) or at one expert
    model = model_from_hf_config(_config(tmp_path, "dense", {**LLAMA3_8B_CONFIG, "num_local_experts": value}))
    assert model.total_params == LLAMA3_8B_PARAMS


# ---------------------------------------------------------------------------------------------
# Selective recomputation with FlashAttention: what Megatron-LM runs (item 5)

# Llama 3 8B, b = 1, s = 8192, FlashAttention, no dropout: per token 6 x 8192 + 2 x 2048 + 3 x 28672 =
# 139,264 bytes (as above, without the s^2 softmax output), and FlashAttention's fp32 log-sum-exp,
# 4 a s b = 4 x 32 x 8192 = 1,048,576 bytes (Dao 2023, FlashAttention-2, Algorithm 1 returns O and L).
LLAMA3_8B_FLASH_TOKENS = 8192 * 139_264
LLAMA3_8B_LSE = 4 * 32 * 8192


def test_selective_with_flash_attention_keeps_q_k_v_and_drops_the_log_sum_exp(run_json) -> None:
    # Megatron-LM megatron/core/transformer/attention.py: with --recompute-granularity selective,
    # Attention.forward calls _checkpointed_attention_forward, i.e. tensor_parallel.checkpoint over
    # the core attention (FlashAttention with TE): the checkpoint keeps its inputs Q, K, V; its output
    # is kept by linear_proj as its input; the kernel's own saved log-sum-exp is not kept.
    args = ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--flash-attention"]
    plain = run_json(*args)["results"]
    selective = run_json(*args, "--recompute", "selective")
    assert plain["activation_per_layer"]["value"] == LLAMA3_8B_FLASH_TOKENS + LLAMA3_8B_LSE == 1_141_899_264
    assert selective["results"]["activation_per_layer"]["value"] == LLAMA3_8B_FLASH_TOKENS == 1_140_850_688
    # what the replayed kernel materialises again during one layer's backward: its log-sum-exp
    assert selective["results"]["recompute_working_set"]["value"] == LLAMA3_8B_LSE
    assert any("_checkpointed_attention_forward" in a for a in selective["assumptions"])


def test_selective_with_flash_attention_replays_the_kernels_forward() -> None:
    # The checkpoint runs the core attention's forward again before its backward, so the hardware
    # FLOPs gain one attention core per layer: Q K^T and score V, 2 x 2 s^2 (a d) per sequence =
    # 4 x 4096^2 x 4096 x 64 sequences x 32 layers (not causal: fit counts the whole square), and the
    # step time one FlashAttention forward per layer and micro-batch (parcalc.core.timing.compute).
    from parcalc.core.choices import Recompute
    from parcalc.core.fit import Cluster, Config, Training, estimate
    from parcalc.core.timing.compute import LayerShard, layer_passes
    from parcalc.presets import load_gpu, load_link

    model, gpu = load_model("llama3-8b"), load_gpu("h100-sxm5")
    training = Training(64, 4096, flash_attention=True)
    cluster = Cluster(gpus=8, gpus_per_node=8, peak=989e12, capacity=gpu.memory_capacity.value, intra=load_link("nvlink4"),
                      inter=load_link("ib-ndr"), gpu=gpu)  # fmt: skip
    none = estimate(model, Config.of(8, 1, 1, 1, Recompute.NONE), training, cluster)
    selective = estimate(model, Config.of(8, 1, 1, 1, Recompute.SELECTIVE), training, cluster)
    assert selective.hardware_flops.value - none.hardware_flops.value == 4 * 4096**2 * 4096 * 64 * 32
    assert selective.model_flops.value == none.model_flops.value
    flash = layer_passes(model, LayerShard(1, 4096, 8, False, True, False, True, 2.0), cluster.spec).attention_core
    assert [k.key for k in flash] == ["attn.flash"]
    assert selective.compute.value - none.compute.value == pytest.approx(64 * 32 * flash[0].time, rel=1e-12)
    assert selective.total_memory < none.total_memory


def test_fit_accepts_selective_with_flash_attention(run_json) -> None:
    doc = run_json("fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--seq-len", "4096", "--flash-attention",
                   "--recompute", "selective", "--search", "--top", "1")  # fmt: skip
    assert doc["tables"]["top"]["rows"][0]["recompute"] == "selective"
    table = run_json("fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--seq-len", "4096", "--flash-attention")
    rows = [r for r in table["tables"]["strategies"]["rows"] if r["recompute"] == "selective"]
    assert rows and all(r["memory"] is not None for r in rows)


# ---------------------------------------------------------------------------------------------
# ZeRO-3 / FSDP: the root unit is gathered too (item 2)

# (root unit on one GPU at t = 1: word embeddings + final norm + untied LM head; one layer), from
# the presets' shapes: V h + h + V h and 4 h^2 ... as parcalc.core.memory.layer_params_per_rank counts.
LLAMA3_ROOT_AND_LAYER = {
    "llama3-8b": (2 * 128_256 * 4096 + 4096, 218_112_000),
    "llama3-70b": (2 * 128_256 * 8192 + 8192, 855_654_400),
    "llama3-405b": (2 * 128_256 * 16384 + 16384, 3_187_703_808),
}


@pytest.mark.parametrize("name", sorted(LLAMA3_ROOT_AND_LAYER))
def test_the_root_unit_outweighs_a_layer_for_every_llama3(name: str) -> None:
    from parcalc.core.layout import Layout
    from parcalc.core.memory import layer_params_per_rank, root_unit

    model = load_model(name)
    root, layer = LLAMA3_ROOT_AND_LAYER[name]
    early, late = root_unit(model, Layout(dp=8, zero=3), 0)
    assert early + late == root and layer_params_per_rank(model, 1) == layer
    assert root > layer


def test_zero3_holds_the_root_unit_as_fsdp2_does(run_json) -> None:
    # FSDP2 (fully_shard per block, then the root): the root's weights stay gathered from its forward
    # to the end of backward (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, FSDPState._lazy_init:
    # 'For the root, do not reshard after forward'); its gradients are reduce-scattered at the end of
    # backward (_root_post_backward_final_callback), so the LM head's gradient (2 x 525,340,672 bytes,
    # norm included) lives through the layers' backward; two blocks' weights and one block's gradients
    # (6 x 218,112,000); the untied embeddings' gradient (2 x 525,336,576) comes last, after them.
    # 2 x 1,050,677,248 + 2 x 525,340,672 + max(1,308,672,000, 1,050,673,152) = 4,460,707,840 bytes,
    # where the layers alone gave 1,308,672,000.
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--dp", "8", "--zero", "3")
    gathered = doc["results"]["zero3_gathered"]
    assert gathered["value"] == 2 * 1_050_677_248 + 2 * 525_340_672 + 6 * 218_112_000 == 4_460_707_840
    assert gathered["formula"] == "w × P_root + g × P_early + max((2 × w + g) × P_layer/t, g × P_late)"
    assert "_fsdp_state.py" in gathered["source"]
    # DeepSpeed's estimate_zero3_model_states_mem_needs: 4 x the largest module's own parameters
    # (model_to_params: max over model.modules() of parameters(recurse=False)), the 128,256 x 4096
    # embedding or LM head: 2,101,346,304 bytes, which the FSDP2 count holds.
    deepspeed = 4 * 128_256 * 4096
    assert any(f"counts 4 x its largest module, here {deepspeed:,} B" in a for a in gathered["assumptions"])
    assert gathered["value"] > deepspeed


def test_zero3_root_unit_sits_on_the_end_stages(run_json) -> None:
    # With pp = 4 the first stage holds the embeddings (P_late, gradient last), the last the final
    # norm and LM head (P_early), the middle ones neither: (2w + g) P_l only.
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "4096", "--pp", "4", "--dp", "2", "--zero", "3", "--per-stage",
                   "--reserve", "0")  # fmt: skip
    rows = doc["tables"]["stages"]["rows"]
    layer = 6 * 218_112_000
    first = 2 * 525_336_576 + max(layer, 2 * 525_336_576)
    last = 2 * 525_340_672 + 2 * 525_340_672 + layer
    recompute = 0  # no recomputation: "other" is the gathered buffers and the reserve (0)
    assert [r["other"] for r in rows] == [first + recompute, layer, layer, last]


def test_search_counts_the_root_unit_as_the_scalar_core_does() -> None:
    # The vectorised search takes each stage's gathered buffers from zero3_working_set: ZeRO-3 on a
    # 30-layer Llama 3 8B over 16 GPUs (uneven splits when pp does not divide 30) equals the scalar
    # estimate configuration by configuration.
    import random

    from parcalc.core.fit import Cluster, Training, estimate, with_layers
    from parcalc.core.fit_search import SearchSpace, search
    from parcalc.presets import load_framework, load_gpu, load_link

    model = with_layers(load_model("llama3-8b"), 30)
    gpu = load_gpu("h100-sxm5")
    cluster = Cluster(gpus=16, gpus_per_node=8, peak=989e12, capacity=gpu.memory_capacity.value, intra=load_link("nvlink4"),
                      inter=load_link("ib-ndr"), gpu=gpu, framework=load_framework("fsdp2"))  # fmt: skip
    training = Training(64, 4096, flash_attention=True)
    found = search(model, training, cluster, SearchSpace(zero_stages=(3,)))
    evaluated = found.evaluated
    assert len(evaluated) > 40
    for i in random.Random(2).sample(range(len(evaluated)), 40):
        config = evaluated.config(i)
        scalar = estimate(model, config, training, cluster)
        assert evaluated.columns["memory"][i] == pytest.approx(scalar.total_memory, rel=1e-12), config.label()
        assert evaluated.columns["fits"][i] == scalar.fits
    assert any(evaluated.config(i).layout.pp > 1 and evaluated.config(i).layout.first_stage_layers is not None for i in range(len(evaluated)))


# ---------------------------------------------------------------------------------------------
# Defaults for flags never passed (item 8)


def test_bandwidth_without_latency_takes_latency_zero(run_json) -> None:
    # Ring all-reduce of M = 1 GB over N = 8 on 25 GB/s with alpha = 0: 2 (N - 1) M / (N beta)
    # = 14 x 1e9 / 2e11 = 70 ms (Thakur, Rabenseifner & Gropp 2005), the bandwidth term alone.
    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "8", "--bandwidth", "25GB/s")
    times = [r for r in doc["results"].values() if r["unit"] == "s"]
    assert times[0]["value"] == pytest.approx(2 * 7 * 1e9 / (8 * 25e9), rel=1e-12)
    assert doc["inputs"]["latency"]["value"] == 0
    assert any(a.startswith("--latency not given: 0 s") for a in doc["assumptions"])


def test_bubble_target_alone_finds_the_micro_batches(run_json) -> None:
    # 1F1B, p = 8, target 5 % of total time: (p - 1) / (m + p - 1) <= 0.05 gives m >= 7 x 0.95 / 0.05
    # = 133 (Narayanan et al. 2021 sec. 2.2.1), and the bubble at m = 133 is 7 / 140 = 5 %.
    doc = run_json("bubble", "--stages", "8", "--target", "5%")
    assert doc["inputs"]["micro_batches"]["value"] == 133
    assert doc["results"]["bubble_share"]["value"] == pytest.approx(7 / 140, rel=1e-12)
    assert any(a.startswith("no --micro-batches: m = 133") for a in doc["assumptions"])


def test_bubble_needs_micro_batches_or_a_target(run_error) -> None:
    assert "--micro-batches: required (or give --target" in run_error(["bubble", "--stages", "4"])


@pytest.mark.parametrize(
    ("sizes", "reason"),
    [(["64"], "micro-batch 64 divides no replica batch B / dp"), (["3", "5"], "micro-batches 3, 5 divide no replica batch B / dp")],
    ids=["one", "two"],
)
def test_search_names_a_micro_batch_that_divides_no_replica_batch(run_error, sizes: list[str], reason: str) -> None:
    # GPT-2 XL (25 heads: tp = 1) on 8 GPUs: the replica batches B / dp are 16, 8, 4, 2 for B = 16
    # (none a multiple of 64) and 64, 32, 16, 8 for B = 64 (none a multiple of 3 or 5).
    batch = "16" if sizes == ["64"] else "64"
    flags = [x for b in sizes for x in ("--micro-batch", b)]
    line = run_error(["fit", "--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--batch", batch, "--search", *flags])
    assert f"B = {batch}" in line and reason in line
    assert "memory (does not fit): 0" not in line


# A V100 has no bf16 (NVIDIA Tesla V100 datasheet: fp64, fp32 and fp16 Tensor Core rates only, as
# presets/gpus/v100-sxm2-32gb.yaml lists them): defaults fall back to fp16 and say so.
V100 = ["--gpu", "v100-sxm2-32gb"]
NO_BF16 = "NVIDIA Tesla V100 SXM2 32GB has no bf16 (its datasheet lists fp64, fp32, fp16)"


def test_fit_on_a_v100_defaults_to_fp16(run_json) -> None:
    doc = run_json("fit", "--model", "llama3-8b", *V100, "--gpus", "8", "--seq-len", "2048")
    assert doc["settings"]["precision"] == "mixed-fp16"
    assert doc["assumptions"][0].startswith(NO_BF16) and "GEMMs at the fp16 peak" in doc["assumptions"][0]
    # the V100's fp16 Tensor Core peak, 125 TFLOP/s (datasheet), is the one the step time runs at
    assert doc["inputs"]["peak_flops"]["value"] == pytest.approx(125e12, rel=0.01)


def test_fit_names_the_precision_typed_on_a_v100(run_error) -> None:
    line = run_error(["fit", "--model", "llama3-8b", *V100, "--gpus", "8", "--seq-len", "2048", "--precision", "mixed-bf16"])
    assert line.startswith("Error: --precision mixed-bf16: NVIDIA Tesla V100 SXM2 32GB has no bf16 rate")


def test_flops_mfu_on_a_v100_uses_the_fp16_peak(run_json) -> None:
    # MFU = model FLOPs / (1 s x 8 GPUs x 125 TFLOP/s): against the V100's fp16 Tensor Core peak
    doc = run_json("flops", "--model", "llama3-8b", "--batch", "8", "--seq-len", "2048", *V100, "--gpus", "8", "--step-time", "1s")
    mfu = doc["results"]["mfu"]
    assert mfu["value"] == pytest.approx(doc["results"]["model_flops"]["value"] / (8 * 125e12), rel=0.01)
    assert doc["settings"]["dtype"] == "fp16"
    assert any(a.startswith(NO_BF16) for a in doc["assumptions"])


def test_memory_on_a_v100_defaults_to_mixed_fp16(run_json) -> None:
    doc = run_json("memory", "--model", "llama3-8b", *V100, "--seq-len", "2048", "--tp", "8")
    assert doc["settings"]["precision"] == "mixed-fp16"
    assert doc["assumptions"][0].startswith(NO_BF16)


# ---------------------------------------------------------------------------------------------
# Attention: FlashAttention/SDPA by default (issue 28), stated; --no-flash-attention the textbook's scores

# The case pinned at the layout its search picks (Llama 3 8B, 64 x H100, s = 8192, B = 1024)
LLAMA3_8B_64_H100 = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "1024", "--seq-len", "8192",
                     "--tp", "2", "--pp", "1", "--dp", "32", "--micro-batch", "2", "--zero", "1", "--sequence-parallel"]  # fmt: skip


def test_fit_times_flash_attention_by_default_and_says_so(run_json) -> None:
    default = run_json(*LLAMA3_8B_64_H100)
    assert default["settings"]["flash_attention"] is True
    assert default == run_json(*LLAMA3_8B_64_H100, "--flash-attention")
    said = [a for a in default["assumptions"] if a.startswith("attention: FlashAttention/SDPA, scores not materialised")]
    assert len(said) == 1 and "timed as one fused kernel" in said[0] and "--no-flash-attention" in said[0]
    textbook = run_json(*LLAMA3_8B_64_H100, "--no-flash-attention")
    assert any(a.startswith("attention: the s x s scores materialised (--no-flash-attention)") for a in textbook["assumptions"])
    # the materialised scores cost time (Q·K^T, softmax and ·V as separate kernels, no causal skip) and memory
    # (2 a s^2 b / t per layer, no dropout): 16.70 s against 21.93 s on this layout (parcalc's step model), and it no longer fits
    assert default["results"]["t_step"]["value"] < 0.8 * textbook["results"]["t_step"]["value"]
    assert default["results"]["activations"]["value"] < textbook["results"]["activations"]["value"]


def test_no_flash_attention_is_refused_where_nothing_would_change(run_error) -> None:
    # the hf profile walks transformers' SDPA attention (its default attn_implementation); eager attention is not walked
    line = run_error(["memory", "--model", "llama2-7b", "--seq-len", "4096", "--framework", "hf", "--no-flash-attention", "--gpu", "h200"])
    assert "--framework hf --no-flash-attention" in line
    # intensity's single matmul has no attention: the switch, given either way, is refused as --compile is
    for switch in ("--flash-attention", "--no-flash-attention"):
        assert f"{switch}: only with --model" in run_error(["intensity", "--m", "64", "--k", "64", "--n", "64", switch])
