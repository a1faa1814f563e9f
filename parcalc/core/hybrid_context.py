"""Context parallelism of a hybrid model's recurrent mixers (Mamba-2 in Nemotron-H, gated DeltaNet in Qwen3-Next) as
Megatron-Core runs them: what each mixer exchanges over the cp ranks, which layouts it accepts, and what it keeps.

Megatron-Core passes no recurrent state between CP ranks. Each mixer swaps the sequence split for a head split with
all-to-alls around its convolution and scan (DeepSpeed-Ulysses' scheme): every CP rank then runs the causal conv1d and
the chunked scan over the WHOLE sequence for heads / (t cp) of the heads, and swaps back before out_proj. The attention
layers of the hybrid keep attention's own CP exchange (parcalc.core.comm.context); the MLP blocks of a Nemotron-H
exchange nothing.

- Mamba-2 (MAMBA_CP): pre_conv_ssm runs five all-to-alls on in_proj's output, z and x (d_inner / t each), B and C
  (G N / t each, first repeated r = cp / (G / t) times where a TP rank holds fewer groups than there are CP ranks, so
  that every CP rank receives the group of its heads) and dt (H / t), each from [s/cp, b, w] to [s, b, w/cp];
  post_conv_ssm one all-to-all of the scan's gated output (d_inner / t) back. Per token of the rank's shard:
  into = (2 d_inner + H) / t + 2 N max(G / t, cp) elements, back = d_inner / t.
- gated DeltaNet (GDN_CP): a2a_cp_to_hp permutes in_proj's output [q, k, v, z, beta, alpha] by head and runs ONE
  all-to-all of it; after the gated norm a2a_hp_to_cp runs one of its output back (value_dim / t). Per token:
  into = (2 key_dim + 2 value_dim + 2 H_v) / t, back = value_dim / t.
Backward runs the transposed all-to-all of each (Megatron's _AllToAll: the gradient goes the other way, the same bytes);
full recomputation replays the forward's. Each all-to-all's payload is one rank's buffer, b (s/cp) w e bytes, of which a
device sends (cp - 1)/cp.

Where the work goes: the projections run on the rank's s/cp tokens with all its TP heads; the conv1d and the scan on all
s tokens with heads / (t cp). Every kernel of the mixer is linear in (sequence chunks x heads), so a rank does the same
work either way; parcalc times the kernels on s/cp tokens and H / t heads (parcalc.core.timing.mamba_kernels,
linear_attention_kernels) and states it.
"""

from __future__ import annotations

from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

MEGATRON_CP_COMMIT = "d98e8a64"
MAMBA_CP = (
    f"Megatron-LM megatron/core/ssm/mamba_context_parallel.py @{MEGATRON_CP_COMMIT}, MambaContextParallel: __init__ asserts "
    "nheads_local_tp % cp_size == 0 and ngroups_local_tp % cp_size == 0 or cp_size % ngroups_local_tp == 0 (lines 106-130, "
    "group_repeat_count = cp_size // ngroups_local_tp); pre_conv_ssm all-to-alls z, x, B, C, dt (_all_to_all_cp2hp, lines "
    "162-193), post_conv_ssm the scan's output back (_all_to_all_hp2cp, lines 201-211); mamba_mixer.py _ssm_training "
    "calls them around mamba_split_conv1d_scan_combined"
)
GDN_CP = (
    f"Megatron-LM megatron/core/ssm/gated_delta_net/gdn.py @{MEGATRON_CP_COMMIT}, GatedDeltaNet.forward: a2a_cp_to_hp of "
    "in_proj's output [q, k, v, z, beta, alpha] (line 175); common.py: a2a_cp_to_hp (lines 819-866: the head permutation, "
    "then one unsectioned all-to-all), _build_head_perm_for_split_sections asserts every section % cp_size == 0 (lines "
    "627-644), _prepare_input_for_gated_delta_rule splits q and k by qk_dim_local_tp // key_head_dim // cp_size heads, "
    "_gated_norm_and_a2a (lines 347-368) runs a2a_hp_to_cp of the gated norm's output"
)
KERNELS_UNDER_CP = ("under CP each rank runs the mixer's conv1d and scan on all s tokens for heads / (t cp) of the heads; "
                    "every kernel is linear in (chunks x heads), so parcalc times it on s/cp tokens and heads / t")  # fmt: skip


def mixer_cp_reason(model: TransformerModel, tp: int, cp: int) -> str | None:
    """Why Megatron-Core cannot run this model's recurrent mixers on `cp` context-parallel ranks with `tp` TP ranks
    (None: it can, or the model has none, or cp = 1): its asserts, in words."""
    if cp <= 1:
        return None
    mamba, gdn = model.mamba, model.linear_attention
    if mamba is not None:
        heads, groups = mamba.heads // tp, mamba.groups // tp
        if (mamba.heads // tp) % cp:
            return (f"--cp: {cp} does not divide the {heads} Mamba-2 heads of a TP rank ({mamba.heads} / t = {tp}); Megatron-LM's "
                    "MambaContextParallel gives each CP rank whole heads (nheads must be evenly divisible by tp_size * cp_size)")  # fmt: skip
        if groups < cp and cp % groups:
            return (f"--cp: {cp} is not a multiple of the {groups} Mamba-2 groups of a TP rank ({mamba.groups} / t = {tp}); "
                    "Megatron-LM's MambaContextParallel repeats a group over cp / groups ranks (cp_size must be evenly divisible "
                    "by ngroups/tp_size)")  # fmt: skip
        if groups >= cp and groups % cp:
            return (f"--cp: {cp} does not divide the {groups} Mamba-2 groups of a TP rank ({mamba.groups} / t = {tp}); "
                    "Megatron-LM's MambaContextParallel (ngroups must be evenly divisible by tp_size * cp_size)")  # fmt: skip
    if gdn is not None:
        heads = gdn.key_heads // tp
        if heads % cp:
            return (f"--cp: {cp} does not divide the {heads} gated-DeltaNet key heads of a TP rank ({gdn.key_heads} / t = {tp}); "
                    "Megatron-LM's GatedDeltaNet splits q and k by whole heads over the CP ranks "
                    "(qk_dim_local_tp // key_head_dim // cp_size; its head permutation asserts every section % cp_size == 0)")  # fmt: skip
    return None


def check_mixer_cp(model: TransformerModel, tp: int, cp: int) -> None:
    """InputError where mixer_cp_reason has a reason."""
    reason = mixer_cp_reason(model, tp, cp)
    if reason is not None:
        raise InputError(reason)


def mamba_group_repeat(model: TransformerModel, tp: int, cp: int) -> int:
    """r: how many CP ranks share one group's B and C (MambaContextParallel.group_repeat_count), 1 where a TP rank holds at
    least cp groups."""
    assert model.mamba is not None
    groups = model.mamba.groups // tp
    return cp // groups if groups < cp else 1


def mixer_a2a_widths(model: TransformerModel, tp: int, cp: int) -> tuple[tuple[str, float], ...]:
    """(what, elements per token of a rank's s/cp shard) of each forward all-to-all of one recurrent mixer on one TP rank,
    in the order Megatron-Core calls them (the module docstring); () for a model without recurrent mixers or at cp = 1."""
    if cp <= 1:
        return ()
    if model.mamba is not None:
        m = model.mamba
        bc = m.state * (m.groups // tp) * mamba_group_repeat(model, tp, cp)  # B (or C), each group repeated r times
        return (("z", m.d_inner / tp), ("x", m.d_inner / tp), ("B", bc), ("C", bc), ("dt", m.heads / tp),
                ("scan output back", m.d_inner / tp))  # fmt: skip
    if model.linear_attention is not None:
        g = model.linear_attention
        return (("q, k, v, z, beta, alpha", (2 * g.key_dim + 2 * g.value_dim + 2 * g.value_heads) / tp),
                ("gated norm output back", g.value_dim / tp))  # fmt: skip
    return ()


def mixer_a2a_buffers(model: TransformerModel, micro_batch: int, seq_len: int, tp: int, cp: int, element_bytes: float
                      ) -> tuple[tuple[str, float], ...]:  # fmt: skip
    """(what, bytes of one rank's buffer) of each forward all-to-all of one recurrent mixer for one micro-batch: b (s/cp) w e."""
    return tuple((what, micro_batch * (seq_len / cp) * width * element_bytes) for what, width in mixer_a2a_widths(model, tp, cp))


def mixer_cp_sent(model: TransformerModel, micro_batch: int, seq_len: int, tp: int, cp: int, element_bytes: float) -> float:
    """Bytes one device sends in one direction (forward, or backward) of one recurrent mixer's CP exchange for one
    micro-batch: (cp - 1)/cp of every all-to-all's buffer."""
    return (cp - 1) / cp * sum(size for _, size in mixer_a2a_buffers(model, micro_batch, seq_len, tp, cp, element_bytes)) if cp > 1 else 0.0


def exchanging_layers(model: TransformerModel, start: int, end: int) -> tuple[int, int]:
    """(attention layers, recurrent-mixer layers) among layers start .. end - 1: those that run attention's CP exchange and
    those that run the mixer's all-to-alls (a Nemotron-H's MLP blocks run neither)."""
    if model.mamba is not None:
        n = model.mamba.blocks_in(start, end)
        return n.attention, n.mamba
    if model.linear_attention is not None:
        linear = model.linear_attention.linear_layers_in(start, end)
        return (end - start) - linear, linear
    return end - start, 0


def layer_shares(model: TransformerModel) -> tuple[float, float]:
    """(attention, recurrent mixer) layers as shares of all layers: what the mean layer of the step model carries."""
    attention, mixers = exchanging_layers(model, 0, model.layers)
    return attention / model.layers, mixers / model.layers
