"""A Hugging Face `config.json` made into parcalc's TransformerModel: the shape fields of the
architectures parcalc reads (Llama, Mistral, Qwen2/3, GPT-2 and friends, the MoE families, MLA,
windows, MTP, gated DeltaNet: parcalc.hf_architectures), checked as strictly as a preset (size,
nesting, numbers a float holds exactly), every number with the config key it came from."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from parcalc.core.model import LatentAttention, MixtureOfExperts, Mlp, Norm, Position, TransformerModel
from parcalc.errors import InputError, PresetError, shown
from parcalc.files import MAX_PRESET_BYTES
from parcalc.hf_architectures import (
    is_mamba_hybrid,
    linear_attention_from_hf,
    mamba_from_hf,
    mamba_layers_from_hf,
    mtp_from_hf,
    window_from_hf,
)

# Architectures whose MLP is gated (three matrices): their config's hidden_act names the gate.
_GATED_ARCHITECTURES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "olmo",
    "olmo2", "deepseek_v2", "deepseek_v3", "internlm2", "cohere", "granite", "starcoder2_gated",
    "qwen3_moe", "qwen2_moe", "llama4", "llama4_text", "gemma3_text", "gpt_oss", "qwen3_next",
}  # fmt: skip
_LEARNED_POSITIONS = {"gpt2", "bert", "roberta", "opt", "gpt_neo", "gpt_bigcode", "megatron-bert", "xlm-roberta"}


# A config.json is a flat object with a few nested ones (rope_scaling, quantization_config):
# 1 MiB and 32 levels are far beyond any real one, and 200,000 nested '[' made json.loads raise
# RecursionError. The largest shape number accepted: floats stay exact below 2**53.
MAX_CONFIG_DEPTH = 32
MAX_SHAPE = 2**53


# Keys by which a config.json declares experts: Mixtral's num_local_experts, DeepSeek-V2/V3's
# n_routed_experts, Qwen2-MoE / Qwen3-MoE / OLMoE's num_experts, and the moe_* family
# (moe_intermediate_size, moe_layer_freq, ...). A dense reading of such a model counts one expert's
# MLP per layer (Mixtral 8x7B as 7.24 B parameters, not 46.7 B), so until experts are modelled it is
# refused rather than silently wrong.
_EXPERT_COUNT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", "num_experts_per_tok", "n_shared_experts")


def _refuse_mixture_of_experts(path: Path, config: Mapping[str, Any]) -> None:
    """A Mixture-of-Experts config.json: InputError naming the key found (parcalc models dense layers)."""
    found = [k for k in _EXPERT_COUNT_KEYS if _declares(config.get(k))]
    found += sorted(k for k in config if k.lower().startswith("moe_") and _declares(config[k]))
    if found:
        key = found[0]
        raise InputError(f"--model: {path} is a Mixture-of-Experts model ({key}: {config[key]!r}); parcalc models dense "
                         "transformers only and would count one expert per layer (give a dense model)")  # fmt: skip


# Mixture-of-Experts families read from a config.json, by model_type, each with the modeling code
# whose layer pattern and expert shapes it follows.
_MOE_FAMILIES = ("mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v2", "deepseek_v3", "llama4", "llama4_text", "gpt_oss", "qwen3_next")
MAX_MOE_LAYERS = 100_000  # a layer pattern is checked layer by layer; no model has this many


def _text_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """Llama 4 (Llama4ForConditionalGeneration) nests its language model in text_config; the
    vision tower is not modelled. tie_word_embeddings stays at the top level there."""
    text = config.get("text_config")
    if not isinstance(text, dict) or "hidden_size" in config:
        return config
    merged = dict(text)
    if "tie_word_embeddings" not in merged and "tie_word_embeddings" in config:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    merged.setdefault("_name_or_path", config.get("_name_or_path"))
    return merged


def _moe_layer_pattern(path: Path, config: Mapping[str, Any], architecture: str, layers: int, count: Callable[..., int]) -> tuple[list[int], str]:
    """The 0-based indices of the MoE layers as the family's modeling code builds them, and the keys that said so."""
    if architecture == "mixtral":
        return list(range(layers)), "every layer (MixtralDecoderLayer)"
    if architecture in ("qwen3_moe", "qwen2_moe", "qwen3_next"):
        # transformers Qwen3MoeDecoderLayer (and Qwen3NextDecoderLayer): (layer_idx not in mlp_only_layers) and (layer_idx + 1) % decoder_sparse_step == 0
        step = count("decoder_sparse_step", default=1)
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise PresetError(f"{path}: key 'mlp_only_layers': expected a list of layer indices, got {shown(only)}")
        return [i for i in range(layers) if i not in only and (i + 1) % step == 0], "decoder_sparse_step, mlp_only_layers"
    if architecture in ("deepseek_v2", "deepseek_v3"):
        # deepseek-ai modeling_deepseek.py DeepseekV3DecoderLayer: layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0
        first = count("first_k_dense_replace", default=0, minimum=0)
        freq = count("moe_layer_freq", default=1)
        return [i for i in range(layers) if i >= first and i % freq == 0], "first_k_dense_replace, moe_layer_freq"
    # Llama 4: config.moe_layers, else transformers Llama4TextConfig's (i + 1) % interleave_moe_layer_step == 0
    step = count("interleave_moe_layer_step", default=1)
    given = config.get("moe_layers")
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in given):
            raise PresetError(f"{path}: key 'moe_layers': expected a list of layer indices, got {shown(given)}")
        return sorted(set(given)), "moe_layers"
    return [i for i in range(layers) if (i + 1) % step == 0], "interleave_moe_layer_step"


def _first_dense_and_every(pattern: list[int], layers: int) -> tuple[int, int] | None:
    """parcalc's (first_dense_layers, every) that gives exactly these MoE layers, or None."""
    gaps = {b - a for a, b in itertools.pairwise(pattern)}
    every = gaps.pop() if len(gaps) == 1 else 1 if not gaps else 0
    for step in ([every] if every else []) + ([layers - pattern[0]] if len(pattern) == 1 else []):
        first = pattern[0] - step + 1
        if first >= 0 and [i for i in range(layers) if i >= first and (i - first + 1) % step == 0] == pattern:
            return first, step
    return None


def _moe_from_hf(path: Path, config: Mapping[str, Any], architecture: str, layers: int, count: Callable[..., int]) -> MixtureOfExperts | None:
    """The experts of a Mixtral, Qwen3-MoE, DeepSeek-V2/V3 or Llama 4 config.json (None when it has none)."""
    if layers > MAX_MOE_LAYERS:
        raise PresetError(f"{path}: key 'num_hidden_layers': {layers} layers is beyond any Mixture-of-Experts model parcalc reads")
    expert_key = {"mixtral": "num_local_experts", "llama4": "num_local_experts", "llama4_text": "num_local_experts", "gpt_oss": "num_local_experts",
                  "deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts"}.get(architecture, "num_experts")  # fmt: skip
    experts = count(expert_key, default=0, minimum=0)
    if experts == 0:
        return None
    top_k = count("num_experts_per_tok")
    if top_k > experts:
        raise InputError(f"--model: {path}: num_experts_per_tok ({top_k}) exceeds {expert_key} ({experts}); a token cannot go to more experts than exist")
    pattern, keys = _moe_layer_pattern(path, config, architecture, layers, count)
    if not pattern:
        return None
    if pattern[-1] >= layers or pattern[0] < 0:
        raise InputError(f"--model: {path}: {keys} names layer {pattern[-1] if pattern[-1] >= layers else pattern[0]}, outside 0..{layers - 1}")
    shape = _first_dense_and_every(pattern, layers)
    if shape is None:
        shown_layers = ", ".join(str(i) for i in pattern[:8]) + (", ..." if len(pattern) > 8 else "")
        raise InputError(f"--model: {path}: {keys} make layers {shown_layers} MoE; parcalc represents only 'the first n dense, then "
                         "every k-th' and would miscount this pattern")  # fmt: skip
    first, every = shape
    if architecture in ("mixtral", "gpt_oss"):  # gpt-oss: GptOssExperts of intermediate_size, with biases (attention_bias)
        width, shared, shared_width = count("intermediate_size"), 0, 0
    elif architecture in ("llama4", "llama4_text"):
        # transformers Llama4TextMoe: experts of expert_dim = intermediate_size and one shared_expert Llama4TextMLP of the same width
        width, shared, shared_width = count("intermediate_size"), 1, 0
    elif architecture == "qwen3_moe":
        width, shared, shared_width = count("moe_intermediate_size"), 0, 0
    elif architecture in ("qwen2_moe", "qwen3_next"):
        # transformers Qwen2MoeSparseMoeBlock: experts of moe_intermediate_size, one shared_expert Qwen2MoeMLP of
        # shared_expert_intermediate_size, gated by shared_expert_gate (hidden x 1, no bias)
        width, shared = count("moe_intermediate_size"), 1
        shared_width = count("shared_expert_intermediate_size")
    else:  # DeepSeek: shared_experts = DeepseekV3MLP(intermediate_size = moe_intermediate_size x n_shared_experts)
        width, shared, shared_width = count("moe_intermediate_size"), count("n_shared_experts", default=0, minimum=0), 0
    return MixtureOfExperts(
        experts=experts,
        top_k=top_k,
        expert_ffn_hidden=width,
        shared_experts=shared,
        shared_ffn_hidden=shared_width,
        first_dense_layers=first,
        every=every,
        capacity_factor=None,
        # DeepSeek-V3's noaux_tc routing adds e_score_correction_bias, an nn.Parameter (transformers DeepseekV3TopkRouter)
        # gpt-oss: GptOssTopKRouter has a bias of num_local_experts
        router_bias=architecture in ("deepseek_v3", "gpt_oss") or config.get("topk_method") == "noaux_tc",
        source=f"config.json at {path}: {expert_key} {experts}, num_experts_per_tok {top_k}; MoE layers from {keys}"
        + ("; shared_expert_intermediate_size and its gate (Qwen2MoeSparseMoeBlock.shared_expert_gate)" if architecture == "qwen2_moe" else ""),
        shared_expert_gate=architecture in ("qwen2_moe", "qwen3_next"),
        # transformers Qwen3MoeTopKRouter and Qwen2MoeTopKRouter cast the top-k weights to the logits' dtype; Mixtral's keeps
        # them in fp32
        routing_weights_cast=architecture in ("qwen3_moe", "qwen2_moe"),
        # Qwen2MoeTopKRouter / Qwen3MoeTopKRouter divide by the top-k sum only `if self.norm_topk_prob`; MixtralTopKRouter always
        top_k_renormalised=architecture == "mixtral" or config.get("norm_topk_prob", True) is not False,
    )


def _mla_from_hf(path: Path, config: Mapping[str, Any], count: Callable[..., int]) -> LatentAttention:
    """DeepSeek-V2/V3 multi-head latent attention ranks; q_lora_rank null (DeepSeek-V2-Lite) is a full query projection."""
    return LatentAttention(
        q_lora_rank=count("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=count("kv_lora_rank"),
        qk_nope_head_dim=count("qk_nope_head_dim"),
        qk_rope_head_dim=count("qk_rope_head_dim"),
        v_head_dim=count("v_head_dim"),
        source=f"config.json at {path}: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim",
    )


def _declares(value: Any) -> bool:
    """Whether a config value declares experts: a count above 1, or any other set value (null, 0, 1, false and '' do not)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > 1
    return True


# Dropout probabilities as Hugging Face configs name them: Llama / Mistral / Qwen2 / OPT
# (attention_dropout), GPT-2 and Phi (attn_pdrop, resid_pdrop, embd_pdrop), BERT
# (attention_probs_dropout_prob, hidden_dropout_prob), GPT-NeoX / Falcon (hidden_dropout), OPT
# (dropout, activation_dropout).
_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "hidden_dropout", "hidden_dropout_prob",
                 "resid_pdrop", "embd_pdrop", "embedding_dropout", "dropout", "activation_dropout", "ffn_dropout")  # fmt: skip


def _trains_with_dropout(config: Mapping[str, Any], architecture: str) -> tuple[bool, str]:
    """Whether the model trains with dropout, and why: any dropout probability above 0 in the
    config; with none given, the architecture's default: none for the Llama family (Meta's
    llama/model.py has no dropout layer, and transformers' LlamaConfig defaults attention_dropout
    to 0.0), dropout for the GPT-2 / BERT family (their configs default to 0.1)."""
    given = {k: config[k] for k in _DROPOUT_KEYS if isinstance(config.get(k), (int, float)) and not isinstance(config.get(k), bool)}
    if given:
        listed = ", ".join(f"{k} {v:g}" for k, v in given.items())
        return any(p > 0 for p in given.values()), f"config.json: {listed}"
    if architecture in _GATED_ARCHITECTURES:
        return False, f"config.json gives no dropout; model_type {architecture!r} has none by default (transformers: attention_dropout 0.0)"
    return True, "config.json gives no dropout probability; assumed on (GPT-2 / BERT configs default to 0.1)"


HF_CONFIG = "config.json"  # the file of a Hugging Face model directory that describes its shape


def hf_config_path(path: Path) -> Path:
    """`path` itself, or DIR/config.json for a model directory DIR."""
    try:
        is_dir = path.is_dir()
    except OSError:  # a name too long for the file system, say: _read_hf_config says what is wrong
        return path
    if not is_dir:
        return path
    if not (path / HF_CONFIG).exists():
        raise InputError(f"--model: the directory {shown(str(path))} holds no {HF_CONFIG} (a Hugging Face model directory has one)")
    return path / HF_CONFIG


def model_from_hf_config(path: Path) -> TransformerModel:
    """Read the shape of a model from a Hugging Face `config.json` on disk."""
    config = _read_hf_config(path)

    def pick(*names: str, default: Any = None) -> Any:
        for name in names:
            if config.get(name) is not None:
                return config[name]
        if default is None:
            raise PresetError(f"{path}: key '{names[0]}' missing (looked for {', '.join(names)})")
        return default

    def count(*names: str, default: int | None = None, minimum: int = 1) -> int:
        """A whole number >= minimum (a shape); "big", 0 heads or 1e300 is an error naming the key."""
        value = pick(*names, default=default)
        name = next((n for n in names if config.get(n) is not None), names[0])
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SHAPE:
            raise PresetError(f"{path}: key {name!r}: expected a whole number >= {minimum}, got {shown(value)}")
        return value

    config = _text_model_config(config)
    architecture = str(config.get("model_type", "")).lower()
    # Nemotron-H's config.json carries NemotronHConfig's MoE defaults (n_routed_experts 8, ...) whatever its pattern: its
    # experts are the pattern's 'E' blocks, which parcalc.core.mamba refuses
    if architecture not in _MOE_FAMILIES and not is_mamba_hybrid(architecture):
        _refuse_mixture_of_experts(path, config)
    hidden = count("hidden_size", "n_embd", "d_model")
    heads = count("num_attention_heads", "n_head", "num_heads")
    kv_heads = count("num_key_value_heads", default=1 if config.get("multi_query") else heads)
    activation = str(pick("hidden_act", "activation_function", "hidden_activation", default="gelu")).lower()
    gated = architecture in _GATED_ARCHITECTURES
    hybrid = is_mamba_hybrid(architecture)
    if gated:
        mlp = Mlp.GEGLU if "gelu" in activation else Mlp.SWIGLU
    elif hybrid:  # NemotronHMLP: up_proj, act (mlp_hidden_act relu2: squared ReLU), down_proj
        mlp = Mlp.RELU
    else:
        mlp = Mlp.RELU if "relu" in activation else Mlp.GELU
    if architecture in _LEARNED_POSITIONS:
        position = Position.LEARNED
    elif hybrid:  # NemotronHAttention applies no rotary embedding (Megatron-Bridge's NemotronHBridge: position_embedding_type none)
        position = Position.NONE
    elif "alibi" in json.dumps(config).lower():
        position = Position.ALIBI
    else:
        position = Position.ROPE
    dropout, dropout_source = _trains_with_dropout(config, architecture)
    layers = mamba_layers_from_hf(path, config) if hybrid else count("num_hidden_layers", "n_layer", "num_layers")
    moe = _moe_from_hf(path, config, architecture, layers, count) if architecture in _MOE_FAMILIES else None
    # Llama 4: the dense layers' MLP is intermediate_size_mlp; intermediate_size is the experts' width
    ffn_keys = ("intermediate_size_mlp",) if architecture in ("llama4", "llama4_text") else ()
    try:
        return TransformerModel(
            key=path.parent.name or path.stem,
            name=str(config.get("_name_or_path") or path.parent.name or path.stem),
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=count("head_dim", "attention_head_dim", "v_head_dim", default=max(hidden // heads, 1)),
            ffn_hidden=count(*ffn_keys, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
            mlp=mlp,
            vocab=count("vocab_size"),
            max_seq_len=count("max_position_embeddings", "n_positions", "n_ctx", default=0, minimum=0),
            tied_embeddings=bool(config.get("tie_word_embeddings", True)),
            position=position,
            norm=Norm.RMSNORM if "rms_norm_eps" in config or hybrid else Norm.LAYERNORM,
            bias=False if hybrid else bool(config.get("attention_bias", config.get("bias", not gated))),
            source=f"Hugging Face config.json at {path}",
            dropout=dropout,
            dropout_source=dropout_source,
            moe=moe,
            mla=_mla_from_hf(path, config, count) if architecture in ("deepseek_v2", "deepseek_v3") else None,
            # Gemma 3: Gemma3Attention.q_norm / k_norm of head_dim (Gemma 2 has none)
            qk_norm=architecture in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text", "qwen3_next"),
            window=window_from_hf(path, config, architecture, layers, count),
            # Gemma 2 / 3: post_attention_layernorm and post_feedforward_layernorm too (Gemma3DecoderLayer)
            post_norms=architecture in ("gemma2", "gemma3", "gemma3_text"),
            attention_sinks=architecture == "gpt_oss",  # GptOssAttention.sinks
            mtp_layers=mtp_from_hf(config, count),
            linear_attention=linear_attention_from_hf(path, config, architecture, layers, count),
            attention_gate=architecture == "qwen3_next",  # Qwen3NextAttention: q_proj of heads x head_dim x 2
            mamba=mamba_from_hf(path, config, count) if hybrid else None,  # Nemotron-H: biases refused there
            mtp_source=f"config.json at {path}: num_nextn_predict_layers" if config.get("num_nextn_predict_layers") else "",
            # Qwen2-MoE: q_proj, k_proj, v_proj with bias = config.qkv_bias (True unless the config says otherwise), o_proj
            # and the MLPs without (transformers modeling_qwen2_moe.py, Qwen2MoeAttention)
            qkv_bias=architecture == "qwen2_moe" and bool(config.get("qkv_bias", True)) and not config.get("attention_bias"),
        )
    except (TypeError, ValueError) as error:
        raise PresetError(f"{path}: {error}") from None


def _read_hf_config(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json: at most 1 MiB, 32 levels deep, finite numbers only."""
    from parcalc.files import NotRegularFileError, TooLargeError, check_name_length, read_regular

    check_name_length(path, "--model")
    try:
        data = read_regular(path, MAX_PRESET_BYTES)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise InputError(f"--model: no such file {shown(str(path))} (a config.json is read from disk, never downloaded)") from None
    except (TooLargeError, NotRegularFileError) as error:
        raise PresetError(f"{path}: not a config.json: {error}") from None
    except OSError as error:
        raise PresetError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PresetError(f"{path}: not UTF-8 text") from None
    if _json_depth(text) > MAX_CONFIG_DEPTH:
        raise PresetError(f"{path}: nested more than {MAX_CONFIG_DEPTH} levels deep (no config.json is)")

    def refuse_constant(name: str) -> float:  # NaN, Infinity, -Infinity: JSON has none
        raise PresetError(f"{path}: {name} is not a number a config.json can hold")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):  # 1e400
            raise PresetError(f"{path}: {shown(text)} is not a finite number")
        return value

    def whole(text: str) -> int:
        if len(text) > 40:  # before int(): 5,000 digits exceed Python's int-str limit (ValueError)
            raise PresetError(f"{path}: a number of {len(text)} digits is too large")
        return int(text)

    try:
        config = json.loads(text, parse_constant=refuse_constant, parse_float=finite, parse_int=whole)
    except json.JSONDecodeError as error:
        raise PresetError(f"{path}: not a readable JSON config: {error}") from None
    if not isinstance(config, dict):
        raise PresetError(f"{path}: expected a JSON object")
    return config


def _json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest (strings skipped), without parsing it;
    stops counting past MAX_CONFIG_DEPTH. Linear: an unterminated string runs to the end of the
    text (`"?`) instead of being retried from every later quote."""
    import re

    depth = deepest = 0
    for match in re.finditer(r'"(?:[^"\\]+|\\.)*"?|[\[\]{}]', text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_CONFIG_DEPTH:
                break
        elif first in "]}":
            depth -= 1
    return deepest
