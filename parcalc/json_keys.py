"""The JSON's names for a result's inputs, and its settings as typed values.

A Term's key is the placeholder of its formula ("s" in `$s`), chosen to read like the paper's
symbol: the same letter means the sequence length in memory and bytes per element in intensity.
The JSON keys a result's top-level inputs by a descriptive name instead, one meaning per name in
every command: NAMES, with PER_COMMAND where a command's symbol means something else. A key in
neither keeps its own (already a word: layers, hidden, heads in comm-volume).
"""

from __future__ import annotations

NAMES: dict[str, str] = {
    # the model
    "L": "layers", "h": "hidden", "a": "heads", "kv": "kv_heads", "f": "ffn_hidden", "V": "vocab", "P": "params",
    # the batch
    "B": "batch", "b": "micro_batch", "s": "seq_len", "m": "micro_batches",
    # the layout
    "N": "gpus", "g": "gpus_per_node", "t": "tp", "p": "pp", "d": "dp", "c": "cp", "c_p": "cp", "v": "chunks",
    "S": "shard_group", "e": "ep", "etp": "etp", "d_e": "expert_dp", "nics": "nics_per_node",
    # the GPU and the network
    "C": "capacity", "R": "reserve", "peak": "peak_flops", "x": "efficiency", "e_mm": "gemm_efficiency",
    "e_mem": "memory_bandwidth_efficiency", "B_intra": "intra_node_bandwidth", "B_nic": "nic_bandwidth",
    "alpha": "latency", "beta": "bandwidth", "alpha_intra": "intra_node_latency", "beta_intra": "intra_node_bandwidth",
    "alpha_inter": "inter_node_latency", "beta_inter": "inter_node_bandwidth", "bw": "memory_bandwidth",
    "s_g": "grad_bytes_per_element", "n_sm": "sms", "fma": "fma_per_clock",
    "P_limit": "power_limit", "s_P": "power_scale", "F_cap": "capped_peak_flops",  # a board power limit (parcalc.core.power)
    # bubble
    "t_f": "t_forward", "t_b": "t_backward", "t_w": "t_weight", "latency": "p2p_latency",
    # intensity's model mode
    "l": "seq_len", "n_h": "heads", "d_ff": "ffn_hidden",
}  # fmt: skip

PER_COMMAND: dict[str, dict[str, str]] = {
    "peak-flops": {"f": "clock"},
    "intensity": {"h": "head_dim", "d": "hidden", "b": "batch", "s": "bytes_per_element", "m": "m", "n": "n", "k": "k"},
    # --collective --gpu (NCCL's model): its time's terms t_lat, t_bw, t_fill, seconds, not a latency or a bandwidth
    "comm-volume": {"s": "bytes_per_element", "m": "message_bytes", "n": "gpus", "lat": "t_latency", "bw": "t_bandwidth", "fill": "t_fill"},
    "calibrate gemm": {"N": "shapes", "P": "peak_flops"},
    "calibrate nccl": {"n": "ranks", "nodes": "nodes"},
}

# settings that hold several values: always a list in the JSON, even of one
LIST_SETTINGS = frozenset({"offload", "stage_times", "stage_layers"})


def input_name(command: str, key: str) -> str:
    """The JSON name of the input whose formula key is `key` in `command`'s result."""
    own = PER_COMMAND.get(command, {})
    return own.get(key) or NAMES.get(key) or key


def setting_value(key: str, value: object) -> object:
    """A setting as its type: true / false as booleans, whole numbers as numbers, a list as a list."""
    if not isinstance(value, str):
        return value
    if key in LIST_SETTINGS:
        return [_scalar(part) for part in value.split(",") if part]
    return _scalar(value)


def _scalar(text: str) -> object:
    if text in ("true", "false"):
        return text == "true"
    if text.isdigit() and len(text) < 16:
        return int(text)
    try:
        number = float(text)
    except ValueError:
        return text
    return number if number == number and text.strip() == text and not text.isalpha() else text
