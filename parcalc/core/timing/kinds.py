"""The step's kernel time by kind of work, as a profiler groups it.

parcalc times every kernel of a layer (parcalc.core.timing.compute) with a kind: a GEMM (a linear
layer's product, or attention's score and context products without FlashAttention), an attention
kernel (FlashAttention / cuDNN fused attention, one per pass) or a memory-bound kernel (norms,
activations, residual adds, casts, RoPE, the loss, fp32 gradient accumulation). The compute term
of the step is the sum of the slowest stage's kernels over the micro-batches; here the same sum
is split by kind, so that each part can be held against the kernel time of that kind in a
profile (torch.profiler's CUDA kernels grouped by name: ../shared/measurements/h200-2026-11-28,
train-step-profiles.json) and the parts add up to the compute term exactly.

    t_gemm + t_attention + t_memory_bound = t_compute
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from parcalc.frozen import frozen

# What each kind counts, in words (fit's derivations): written once here.
KIND_TEXT = {
    "gemm": "GEMM kernels (linear layers' products forward, input and weight gradients; attention's products without FlashAttention)",
    "attention": "fused attention kernels (FlashAttention / cuDNN SDPA: one forward and one backward kernel per layer)",
    "memory": "memory-bound kernels (norms, activations, residual adds, casts, RoPE, embedding, loss, gradient accumulation)",
}


@frozen
class KindTimes:
    """Seconds of kernel time by kind (one micro-batch, one layer, a stage: whatever was summed)."""

    gemm: float = 0.0
    attention: float = 0.0
    memory: float = 0.0
    # of `memory`, what scales as 1 / the SM clock (the element paths' share: parcalc.core.timing.kernels.Kernel.clocked)
    clocked: float = 0.0

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.memory

    def __add__(self, other: KindTimes) -> KindTimes:
        return KindTimes(self.gemm + other.gemm, self.attention + other.attention, self.memory + other.memory,
                         self.clocked + other.clocked)  # fmt: skip

    def scaled(self, factor: float) -> KindTimes:
        return KindTimes(self.gemm * factor, self.attention * factor, self.memory * factor, self.clocked * factor)


def kind_times(kernels: Iterable[Any], weights: Iterable[float] | None = None) -> KindTimes:
    """The kernels' time by kind, each kernel counted `weights[i]` times (1 when not given)."""
    sums = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
    clocked = 0.0
    if weights is None:
        for k in kernels:
            sums[k.kind] += k.time
            clocked += k.clocked
    else:
        for k, w in zip(kernels, weights, strict=True):
            sums[k.kind] += k.time * w
            clocked += k.clocked * w
    return KindTimes(sums["gemm"], sums["attention"], sums["memory"], clocked)
