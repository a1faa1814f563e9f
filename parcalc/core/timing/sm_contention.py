"""SMs taken by NCCL kernels that run beside the compute they are hidden under.

An overlapped collective is not free: NCCL runs it as one kernel of one CTA per channel, each CTA resident on an SM for
the whole collective, and the compute kernels beside it get the S - c SMs it leaves. Measured on an H100 (NVIDIA
developer forum, 'Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of Tail Effect', 2025:
an FSDP-like GEMM beside an all-gather): the ncclAllGather kernel launches 24 blocks; the GEMM, 132 blocks, 'achieves
high MFU (~80%)' alone and '~47%' beside the all-gather, its time 'nearly doubles': its blocks that find no free SM run
as a second wave.

How much longer a kernel takes while c SMs are held (`stretch`):
- a GEMM timed by tiles (parcalc.core.timing.gemm_tiles) runs persistent CTAs, min(its CTAs, S) of them (cuBLAS's
  Hopper kernels launch one per SM and loop over the tiles: the forum's 132 blocks), each doing the same share of the
  work, so the CTAs past S - c wait for a whole CTA's work: ceil(min(CTAs, S) / (S - c)) times as long (1 for a GEMM
  of at most S - c CTAs, 2 for one that fills the GPU);
- the other compute-bound kernels (attention, GEMMs timed by a share of the peak) run many CTAs in waves: S / (S - c);
- memory-bound kernels are held by HBM, not by their SMs: 1.

A collective hidden for H seconds then costs the compute beside it H x (1 - t / t_stretched), t and t_stretched the
layer's kernel time alone and with every kernel stretched (the share of its work the compute does not get done while the
collective runs): the contention term that t_dp adds to what stays exposed (parcalc.core.timing.step.dp_exposed). A GEMM
longer than the rest of the collective loses only that rest: the term is exact for collectives that span whole kernels
and a bound from above otherwise (one GEMM outlasting the collective).

c is the GPU's (its preset's `nccl_channels`, NCCL's own init line on that node: 'N coll channels'). Where a preset
gives no channel count, no contention is timed: on those GPUs the fitted GEMM share carries it (presets/gpus/*.yaml
`matmul` sources).
"""

from __future__ import annotations

import math
from typing import Any

SOURCE = ("parcalc.core.timing.sm_contention: an overlapped NCCL collective holds c of the S SMs (one CTA per channel) "
          "for the time H it is hidden; the compute beside it loses H (1 - t / t_stretched), a persistent GEMM's CTAs past "
          "S - c running as a second wave (NVIDIA developer forum, H100: a 132-block GEMM from ~80 % to ~47 % MFU beside "
          "a 24-block ncclAllGather)")  # fmt: skip


def persistent_stretch(ctas: int, sms: int, held: int) -> float:
    """How much longer a persistent kernel of `ctas` CTAs (one per SM at most, each an equal share of the work) takes
    when `held` of the `sms` SMs are taken: its CTAs run in ceil(min(ctas, sms) / (sms - held)) rounds."""
    if held <= 0:
        return 1.0
    return float(math.ceil(min(ctas, sms) / (sms - held)))


def linear_stretch(sms: int, held: int) -> float:
    """How much longer a kernel of many CTA waves takes on sms - held SMs."""
    return sms / (sms - held) if held > 0 else 1.0


def loss_share(kernels: Any) -> float:
    """1 - t / t_stretched of a layer's kernels: the share of a hidden collective's time the compute beside it loses."""
    alone = sum(k.time for k in kernels)
    stretched = sum(k.time * k.stretch for k in kernels)
    return 1.0 - alone / stretched if stretched > 0 else 0.0


def contention(hidden: Any, loss: Any) -> Any:
    """The compute time lost beside collectives hidden for `hidden` seconds (floats or numpy arrays alike)."""
    return hidden * loss
