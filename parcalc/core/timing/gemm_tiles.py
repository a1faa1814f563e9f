"""A GEMM's time from its tiles, as cuBLAS runs it on a GPU whose GEMMs were measured by shape.

cuBLAS (on Hopper its nvjet kernels, named by tile: nvjet_sm90_tst_128x256_..., 256x128, 128x128,
64x128, as torch.profiler lists them in ../shared/measurements/h200-2026-11-28/train-step-profiles.json)
cuts the m x n output into tiles, one thread block (CTA) each, and runs them in waves of one tile per
SM (NVIDIA, Matrix Multiplication Background User's Guide, "Dimension Quantization Effects"). A tile
of tm x tn over the whole K takes 2 tm tn K / r_sm in its main loop plus a fixed prologue and epilogue
t_tile (filling the TMA pipeline, writing the tile); a kernel adds a fixed t_kernel (start and drain,
back to back on a stream). Small outputs with a long K are split along K over more SMs (split-K, at
least `split_k_slice` of K per split), the partial sums reduced by a second kernel
(cublasLt::splitKreduce_kernel in the same profile). cuBLAS picks the fastest of its candidates, and
so does this model; a GEMM whose operands take longer to stream from HBM than to multiply is bound
by that:

    t = min over tiles, splits of max(waves x (2 tm tn ceil(K/s) / r_sm + t_tile), Q / BW) + t_kernel (+ the reduce)

r_sm, t_tile and t_kernel are three numbers of one GPU, measured by shape (the preset says which
rows of which sweep set them; the other rows check them: tests/test_step_parts.py).

The clock. r_sm is the SM rate at the clock the sweep's GEMM loop ran at; a GPU at its board power limit
lowers its SM clock until the board's power fits, and a loop of large GEMMs draws the most. Inside a
training step GEMMs alternate with memory-bound kernels that draw less, and the clock the power limit
leaves is higher: fit runs the main loop at r_sm x f_step / f_sweep (`clock`, `training_clock`; the
preset says where each comes from), `intensity` (a GEMM alone) at r_sm. Where the preset also gives the highest clock and
the capped steps' Tensor Core load (`max_clock`, `training_load`, `power_exponent`), f_step is the step's own: the clock
its power leaves it under the limit (parcalc.core.timing.step_clock); else the capped steps' training_clock.
"""

from __future__ import annotations

import math

from parcalc.frozen import frozen
from parcalc.named_tuple import NamedTuple


@frozen
class TiledGemm:
    """One GPU's GEMM by tiles in one dtype (see the module docstring); source: where the numbers were measured."""

    sm_rate: float  # FLOP/s of one SM's main loop
    tile_overhead: float  # s per tile: prologue and epilogue
    kernel_overhead: float  # s per kernel
    split_k_slice: int  # the least K of one split
    tiles: tuple[tuple[int, int], ...]  # (tm, tn) candidates
    source: str
    # Hz: the SM clock the sweep's GEMMs ran at, and the clock GEMMs run at inside a training step under the board's
    # power limit; fit's GEMMs run their main loop at sm_rate x training_clock / clock (0: not known, no change)
    clock: float = 0.0
    training_clock: float = 0.0
    clock_source: str = ""
    # The clock as a function of the step's power (parcalc.core.timing.step_clock; 0: not known, every step at
    # training_clock): the GPU's highest SM clock (Hz), the Tensor Core load of the capped steps that ran at training_clock
    # (their GEMM and attention kernel time over their wall time), and n in P ~ f^n
    max_clock: float = 0.0
    training_load: float = 0.0
    power_exponent: float = 0.0
    power_source: str = ""
    step_clock: float = 0.0  # Hz: the clock of the step being timed (parcalc.core.timing.step_clock); 0: training_clock

    @property
    def power_model(self) -> bool:
        """Whether the step's clock follows its power (else every step runs at training_clock)."""
        return self.max_clock > 0 and self.training_load > 0 and self.power_exponent > 0 and self.clock > 0

    @property
    def clock_ratio(self) -> float:
        """The training step's SM clock over the sweep's (1 where either is not known)."""
        return self.step_hz / self.clock if self.clock > 0 and self.step_hz > 0 else 1.0

    @property
    def step_hz(self) -> float:
        """The SM clock GEMMs run at in the step being timed: its own where it was solved, else the capped steps'."""
        return self.step_clock or self.training_clock


SPLITS = (1, 2, 4, 8, 16)


class TileChoice(NamedTuple):
    """The candidate cuBLAS would run (the fastest): its tile, split of K, waves, and the time it takes."""

    time: float  # s
    bound: str  # "compute" or "memory"
    tile_m: int
    tile_n: int
    split: int  # K split over this many SMs (1: none)
    waves: int
    rate: float  # FLOP/s of one SM's main loop after the scale


def tiled_gemm_choice(m: int, k: int, n: int, batch: int, model: TiledGemm, sms: int, bandwidth: float, element_bytes: float,
                      scale: float = 1.0) -> TileChoice:  # fmt: skip
    """The fastest candidate for `batch` products (m x k) . (k x n) on one GPU (tiled_gemm_time's arguments)."""
    traffic = element_bytes * batch * (m * k + k * n + m * n)
    stream = traffic / bandwidth
    rate = model.sm_rate * scale
    best = TileChoice(math.inf, "compute", 0, 0, 1, 0, rate)
    for tm, tn in model.tiles:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        for s in SPLITS:
            if s > 1 and (k / s < model.split_k_slice or tiles * s > sms):
                continue
            waves = math.ceil(tiles * s / sms)
            work = waves * (2.0 * tm * tn * math.ceil(k / s) / rate + model.tile_overhead)
            time = max(work, stream) + model.kernel_overhead
            if s > 1:  # the reduce kernel: read the s fp32 partial outputs, write the result
                time += model.kernel_overhead + batch * m * n * (4.0 * s + element_bytes) / bandwidth
            if time < best.time:
                best = TileChoice(time, "compute" if work >= stream else "memory", tm, tn, s, waves, rate)
    return best


def tiled_gemm_time(m: int, k: int, n: int, batch: int, model: TiledGemm, sms: int, bandwidth: float, element_bytes: float,
                    scale: float = 1.0) -> tuple[float, str]:  # fmt: skip
    """(seconds, what bounds it: 'compute' or 'memory') of `batch` products (m x k) . (k x n) on one GPU;
    `bandwidth`: the HBM rate memory-bound kernels sustain (B/s); `scale`: a factor on the SMs' rate
    (a board power limit, --efficiency, the training step's clock over the sweep's)."""
    choice = tiled_gemm_choice(m, k, n, batch, model, sms, bandwidth, element_bytes, scale)
    return choice.time, choice.bound
