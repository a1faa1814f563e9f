"""What a Hugging Face config.json says of the architectures people train now, beyond a Llama layer:
which layers attend within a window or chunk (Mistral, Gemma 2/3, gpt-oss, Llama 4) and how many
multi-token-prediction modules follow the model (DeepSeek-V3). parcalc.presets reads the rest.

The keys, as transformers reads them (transformers 5.24):
- `layer_types`: "sliding_attention" / "chunked_attention" / "full_attention" per layer (Gemma 3, gpt-oss,
  Llama 4 write it out, or their configs derive it);
- `sliding_window`: W (Mistral 7B v0.1: every layer, MistralConfig; Qwen2 only with use_sliding_window);
- `sliding_window_pattern`: Gemma 3's older key, one global layer per pattern (Gemma3TextConfig.__post_init__:
  "sliding_attention" if (i + 1) % pattern else "full_attention", default 6); Gemma 2 alternates (pattern 2);
- `attention_chunk_size` and `no_rope_layers` / `no_rope_layer_interval` (Llama4TextConfig: a layer with RoPE is
  chunked, the NoPE layer (i + 1) % interval == 0 full);
- `num_nextn_predict_layers` (DeepSeek-V3's MTP depth);
- Nemotron-H's `hybrid_override_pattern` (or `layers_block_type`) and its Mamba-2 shape (mamba_num_heads, mamba_head_dim,
  ssm_state_size, n_groups, conv_kernel, chunk_size: parcalc.core.mamba).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from parcalc.core.attention_window import AttentionWindow, WindowKind
from parcalc.core.linear_attention import GatedDeltaNet
from parcalc.core.mamba import Mamba2
from parcalc.errors import PresetError, shown

# model_type -> (kind, the global-layer period when the config gives no layer_types)
_DEFAULT_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "gpt_oss": 2}
_LOCAL_TYPES = {"sliding_attention": WindowKind.SLIDING, "chunked_attention": WindowKind.CHUNKED}
_HYBRID = ("qwen3_next",)  # families whose layer_types name linear-attention layers


def window_from_hf(path: Path, config: Mapping[str, Any], architecture: str, layers: int, count: Callable[..., int]) -> AttentionWindow | None:
    """The model's local attention from its config.json (None: every layer attends to the whole prefix)."""
    if architecture in ("llama4", "llama4_text"):
        return _llama4_chunks(path, config, layers, count)
    if architecture in _HYBRID or config.get("sliding_window") is None or config.get("use_sliding_window") is False:
        return None
    size = count("sliding_window")
    types = config.get("layer_types")
    if types is not None:
        return _from_layer_types(path, types, layers, size, WindowKind.SLIDING, "sliding_window, layer_types")
    period = config.get("sliding_window_pattern", _DEFAULT_PATTERN.get(architecture, 0))
    if isinstance(period, bool) or not isinstance(period, int) or period < 0 or period == 1:
        raise PresetError(f"{path}: key 'sliding_window_pattern': expected a whole number >= 2, got {shown(period)}")
    keys = "sliding_window" + (", sliding_window_pattern" if "sliding_window_pattern" in config else
                               f" (model_type {architecture}: one global layer in {period})" if period else " (every layer)")
    return AttentionWindow(WindowKind.SLIDING, size, period, f"config.json at {path}: {keys}")


def _llama4_chunks(path: Path, config: Mapping[str, Any], layers: int, count: Callable[..., int]) -> AttentionWindow | None:
    if config.get("attention_chunk_size") is None:
        return None
    size = count("attention_chunk_size")
    types = config.get("layer_types")
    if types is not None:
        return _from_layer_types(path, types, layers, size, WindowKind.CHUNKED, "attention_chunk_size, layer_types")
    given = config.get("no_rope_layers")
    if given:  # Llama4TextConfig: an empty list or null is replaced by the interval's default
        if not isinstance(given, list) or len(given) != layers:
            raise PresetError(f"{path}: key 'no_rope_layers': expected one 0/1 per layer ({layers}), got {shown(given)}")
        types = ["chunked_attention" if flag else "full_attention" for flag in given]
        return _from_layer_types(path, types, layers, size, WindowKind.CHUNKED, "attention_chunk_size, no_rope_layers")
    interval = count("no_rope_layer_interval", default=4)
    return AttentionWindow(WindowKind.CHUNKED, size, interval if interval > 1 else 0,
                           f"config.json at {path}: attention_chunk_size, no_rope_layer_interval {interval} (Llama4TextConfig)")


def _from_layer_types(path: Path, types: Any, layers: int, size: int, kind: WindowKind, keys: str) -> AttentionWindow | None:
    """A layer_types list as 'all local' or 'all but every N-th' (AttentionWindow); another pattern is refused."""
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
        raise PresetError(f"{path}: key 'layer_types': expected one name per layer ({layers}), got {shown(types)}")
    unknown = sorted({t for t in types if t not in _LOCAL_TYPES and t != "full_attention"})
    if unknown:
        raise PresetError(f"{path}: key 'layer_types': {', '.join(unknown)} is not an attention kind parcalc counts "
                          "(sliding_attention, chunked_attention, full_attention)")  # fmt: skip
    local = [i for i, t in enumerate(types) if t != "full_attention"]
    if not local:
        return None
    kinds = {_LOCAL_TYPES[types[i]] for i in local}
    if len(kinds) > 1:
        raise PresetError(f"{path}: key 'layer_types' mixes sliding and chunked layers; parcalc represents one kind of window")
    period = 0 if len(local) == layers else next(i for i, t in enumerate(types) if t == "full_attention") + 1
    if period == 1:  # the first layer full: no 'one full layer in N' pattern (N >= 2) starts that way
        raise PresetError(f"{path}: key 'layer_types': its local layers are not 'all but every N-th'; parcalc would miscount them")
    window = AttentionWindow(kinds.pop() if kinds else kind, size, period, f"config.json at {path}: {keys}")
    marked = set(local)
    if any(window.is_local(i) != (i in marked) for i in range(layers)):
        raise PresetError(f"{path}: key 'layer_types': its local layers are not 'all but every N-th'; parcalc would miscount them")
    return window


def mtp_from_hf(config: Mapping[str, Any], count: Callable[..., int]) -> int:
    """DeepSeek-V3's num_nextn_predict_layers (0 when absent)."""
    return count("num_nextn_predict_layers", default=0, minimum=0) if config.get("num_nextn_predict_layers") is not None else 0


def linear_attention_from_hf(path: Path, config: Mapping[str, Any], architecture: str, layers: int,
                             count: Callable[..., int]) -> GatedDeltaNet | None:  # fmt: skip
    """Qwen3-Next's gated-DeltaNet layers (Qwen3NextConfig: linear_num_key_heads, linear_num_value_heads,
    linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim; layer_types 'linear_attention' /
    'full_attention', by default from full_attention_interval 4). None for another family."""
    if architecture not in _HYBRID:
        return None
    types = config.get("layer_types")
    if types is None:
        interval = count("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"linear_attention", "full_attention"}:
        raise PresetError(f"{path}: key 'layer_types': expected 'linear_attention' or 'full_attention' for each of {layers} layers, "
                          f"got {shown(types)}")  # fmt: skip
    linear = [t == "linear_attention" for t in types]
    period = 0 if all(linear) else linear.index(False) + 1
    if period == 1 or any(linear[i] != (not period or (i + 1) % period != 0) for i in range(layers)):
        raise PresetError(f"{path}: key 'layer_types': its linear-attention layers are not 'all but every N-th'; parcalc would miscount them")
    if not any(linear):
        return None
    return GatedDeltaNet(count("linear_num_key_heads"), count("linear_num_value_heads"), count("linear_key_head_dim"),
                         count("linear_value_head_dim"), count("linear_conv_kernel_dim"), period,
                         f"config.json at {path}: linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, "
                         "linear_value_head_dim, linear_conv_kernel_dim, layer_types")  # fmt: skip


_BLOCK_TYPES = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}  # NemotronHConfig._list_to_pattern


def is_mamba_hybrid(architecture: str) -> bool:
    return architecture == "nemotron_h"


def mamba_layers_from_hf(path: Path, config: Mapping[str, Any]) -> int:
    """Nemotron-H's layer count: the pattern's length (NemotronHConfig.num_hidden_layers is len(layers_block_type))."""
    return len(_mamba_pattern(path, config))


def _mamba_pattern(path: Path, config: Mapping[str, Any]) -> str:
    """hybrid_override_pattern as written, or layers_block_type (transformers 5's key) turned back into it."""
    pattern = config.get("hybrid_override_pattern")
    if pattern is None and isinstance(config.get("layers_block_type"), list):
        types = config["layers_block_type"]
        if not all(isinstance(t, str) and t in _BLOCK_TYPES for t in types):
            raise PresetError(f"{path}: key 'layers_block_type': expected {', '.join(_BLOCK_TYPES)} per layer, got {shown(types)}")
        pattern = "".join(_BLOCK_TYPES[t] for t in types)
    if not isinstance(pattern, str) or not pattern:
        raise PresetError(f"{path}: key 'hybrid_override_pattern' missing or not a string (looked for layers_block_type too), got {shown(pattern)}")
    declared = config.get("num_hidden_layers")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared != len(pattern):
        raise PresetError(f"{path}: key 'hybrid_override_pattern' names {len(pattern)} layers, num_hidden_layers says {declared}")
    return pattern


def mamba_from_hf(path: Path, config: Mapping[str, Any], count: Callable[..., int]) -> Mamba2:
    """Nemotron-H's Mamba-2 mixers and layer pattern (NemotronHConfig: mamba_num_heads, mamba_head_dim, ssm_state_size,
    n_groups, conv_kernel, chunk_size, use_conv_bias; the older mamba_* names its __post_init__ accepts too)."""
    if any(config.get(k) for k in ("use_bias", "mamba_proj_bias", "mlp_bias", "attention_bias")):
        raise PresetError(f"{path}: a Nemotron-H with biases (use_bias, mamba_proj_bias, mlp_bias or attention_bias true) is not "
                          "modelled; parcalc counts the released models, which have none")  # fmt: skip
    heads = count("mamba_num_heads", default=128)
    conv_bias = config.get("use_conv_bias", config.get("mamba_conv_bias", True))
    return Mamba2(heads=heads, head_dim=count("mamba_head_dim", default=64), state=count("ssm_state_size", default=128),
                  groups=count("n_groups", "mamba_n_groups", default=8), conv_kernel=count("conv_kernel", "mamba_d_conv", default=4),
                  chunk=count("chunk_size", "mamba_chunk_size", default=128), pattern=_mamba_pattern(path, config),
                  conv_bias=bool(conv_bias),
                  source=f"config.json at {path}: mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size, "
                         "use_conv_bias, hybrid_override_pattern (defaults: transformers NemotronHConfig)")  # fmt: skip
