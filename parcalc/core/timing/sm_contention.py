"""SMs taken by NCCL kernels that run beside the compute they are hidden under.

An overlapped collective is not free: NCCL runs it as one kernel of one CTA per channel (NCCL src/enqueue.cc: the
kernel's grid is the collective's channel count), each CTA resident on an SM for the whole collective. A Hopper
GEMM's CTA (nvjet / CUTLASS warp-specialised kernels: three warpgroups, most of the register file and the shared memory
of the SM) cannot share an SM with it, so while the collective runs the GEMMs' waves go over S - c SMs instead of S:
the compute beside it advances at (S - c) / S of its rate, and what it lost is paid after:

    t_contention = T_hidden x c / S

with T_hidden the collective time that the overlap hid (the total less what stayed exposed), c the CTAs NCCL runs it
on and S the GPU's SMs. The channel count is the GPU's (its preset's `nccl_channels`, from NCCL's own init line on
that node: 'N coll channels'); NCCL sizes it from the NVLink count (NVIDIA/nccl issue #1429, a maintainer: 'Hopper
generation GPUs have 18 NVLink channels between the GPU and NVSwitch and the number of NCCL channels is directly
related to that'). The memory-bound kernels beside a collective lose less than c / S (they are bound by HBM, not by
their SMs); they are counted as the GEMMs are (a bound from above: GEMMs and attention are 80-99 % of the compute of
the published runs' steps).

Where a GPU's preset gives no channel count, no contention is timed: on those GPUs the fitted GEMM share carries it
(presets/gpus/*.yaml `matmul` sources).
"""

from __future__ import annotations

from typing import Any

from parcalc.core.hardware import Gpu

SOURCE = ("parcalc.core.timing.sm_contention: an overlapped NCCL collective holds c SMs (one CTA per channel) of the S "
          "the compute beside it runs on, for the time it is hidden: T_hidden x c / S")  # fmt: skip


def nccl_sm_share(gpu: Gpu | None) -> float:
    """c / S: the share of the GPU's SMs an NCCL collective holds while it runs (0 where the preset gives no channels)."""
    if gpu is None or gpu.nccl_channels is None or gpu.sms is None or gpu.sms.value <= 0:
        return 0.0
    return min(gpu.nccl_channels.value / gpu.sms.value, 1.0)


def contention(hidden: Any, share: float) -> Any:
    """The compute time lost to collectives hidden under it for `hidden` seconds holding `share` of the SMs (floats or
    numpy arrays alike)."""
    return hidden * share
