"""One kernel's time on one GPU: a roofline per operation.

Every operation of a layer's forward and backward pass is one kernel, timed as the slowest of
what it computes, what it moves and the shortest time any kernel takes:

    t = max(F / (P x e_mm x q), Q / (BW x e_mem), N / R_path, t_launch)

- GEMMs run at a share e_mm of the dtype's dense peak P that large GEMMs sustain (measured, in
  the GPU preset), times q, the tile and wave quantisation of the output (NVIDIA, "Matrix
  Multiplication Background User's Guide": an m x n output is cut into tiles, one thread block
  each, run in waves of one tile per SM; a partial last wave or a partial tile is paid in full);
  or, where the GPU's GEMMs were measured by shape, by their tiles (parcalc.core.timing.gemm_tiles);
- memory-bound kernels (norms, residual adds with dropout, softmax, activations, rotary
  embeddings, cross-entropy) move Q bytes at a share e_mem of the HBM bandwidth, and those on a
  TensorIterator path that is not vectorised process their N elements at most at that path's
  measured rate, the share of it the SMs issue at the step's SM clock (parcalc.core.timing.elementwise);
- FlashAttention is one kernel per pass at its own measured share of the peak, its backward
  2.5 x the forward FLOPs (it recomputes the scores: 5 matmuls against 2; Dao 2023, sec. 3.1);
  causal masking skips half of the blocks, a sliding window or chunk those outside its band.

Which kernels a layer runs is parcalc.core.timing.compute's (and the kernel sets' modules).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from parcalc.core.hardware import Gpu, KernelRates, KindEfficiency, Sourced
from parcalc.core.timing.fp8_quantise import (  # noqa: F401 - the recipes re-exported where callers found them
    FP8_RECIPE_SOURCE,
    FP8_RECIPES,
    cast_plan,
    non_tn_fp8_gemms,
)
from parcalc.core.timing.gemm_tiles import TiledGemm, tiled_gemm_choice
from parcalc.core.timing.sm_contention import linear_stretch, persistent_stretch
from parcalc.frozen import frozen
from parcalc.named_tuple import NamedTuple

if TYPE_CHECKING:
    from parcalc.core.timing.attention_tiles import AttentionShape

GENERIC = "parcalc's generic assumption for a GPU without measured kernel data (see docs/step-time.md)"
# Used only for GPUs whose preset has no `kernels` section; each figure is stated as an assumption.
GENERIC_KERNELS = KernelRates(
    matmul=(),
    tile_m=256,
    tile_n=128,
    tile_source="NVIDIA Matrix Multiplication Background User's Guide, 'Dimension Quantization Effects' (256x128 tiles)",
    memory=Sourced(0.8, "fraction", GENERIC),
    attention_forward=Sourced(0.5, "fraction", GENERIC),
    attention_backward=Sourced(0.4, "fraction", GENERIC),
    launch=Sourced(4e-6, "s", GENERIC),
)
GENERIC_MATMUL = Sourced(0.7, "fraction", GENERIC)
# With only --peak and --capacity (no GPU preset), the HBM bandwidth and SM count an A100 80GB has
# (presets/gpus/a100-sxm4-80gb.yaml: 2039 GB/s, 108 SMs) stand in, rounded; stated by the CLI's inputs.
GENERIC_BANDWIDTH = 2.0e12
GENERIC_SMS = 108
FLASH_BACKWARD_FLOPS = 2.5  # Dao 2023 (FlashAttention-2), sec. 3.1 / 4.1: backward = 2.5 x forward FLOPs
MASK_BYTES = 1.0  # dropout masks are one byte per element (Korthikanti et al. 2022, sec. 4.1)
LOGIT_BYTES = 4.0  # the cross-entropy upcasts logits to fp32 (Megatron-LM vocab_parallel_cross_entropy)
# The linears Megatron-LM splits by output column (ColumnParallelLinear), by their kernels' keys below
COLUMN_PARALLEL_DGRADS = ("qkv.dgrad", "mlp.up.dgrad", "mlp.gate_up.dgrad")

@frozen
class ComputeSpec:
    """One GPU as the kernels see it: the dtype's dense peak, HBM bandwidth, SMs and efficiencies."""

    peak: float  # FLOP/s, dense, in the dtype the GEMMs run in
    attention_peak: float  # FLOP/s, dense 16-bit (FlashAttention runs in bf16/fp16)
    bandwidth: float  # B/s of HBM
    sms: int
    matmul: Sourced  # share of `peak` large GEMMs sustain
    kernels: KernelRates
    scale: float = 1.0  # --efficiency: multiplies every kernel's rate
    # The same GPU's 16-bit GEMMs, when `peak` is another dtype's (FP8 training keeps the LM head, the
    # router and attention in BF16); None when the GEMMs already run in 16 bits.
    sixteen_bit: ComputeSpec | None = None
    # share of the rated peaks the Tensor Cores reach under the GPU's board power limit, already in
    # `peak` and `attention_peak` (parcalc.core.power; 1: no limit set)
    power_scale: float = 1.0
    # the GPU's GEMMs in this dtype by tiles, measured by shape (parcalc.core.timing.gemm_tiles); None: peak x matmul x q
    tiled: TiledGemm | None = None
    # per-kind factors on the kernels' rates measured from a profiler trace (KernelRates.calibrated; None: 1 each)
    calibrated: KindEfficiency | None = None
    # the tiled GEMMs' SM clock in a training step over the sweep's (TiledGemm.clock_ratio); 1 for a GEMM alone
    gemm_clock: float = 1.0
    # FP8 GEMMs take every operand layout (Blackwell), so per-tensor FP8 casts write no transpose (fp8_quantise)
    fp8_non_tn: bool = False
    # the SMs an NCCL collective holds while it runs beside the kernels (the GPU's nccl_channels: parcalc.core.timing.
    # sm_contention); 0: not known, nothing slowed
    nccl_ctas: int = 0

    def kind_rate(self, kind: str) -> float:
        """The trace-calibrated factor on one kind's kernel rate ('gemm', 'attention', 'memory', 'optimizer'); 1 uncalibrated."""
        return 1.0 if self.calibrated is None else self.calibrated.of(kind)

    @property
    def step_clock(self) -> float:
        """Hz: the SM clock of the step being timed (the tiled GEMMs': parcalc.core.timing.step_clock, else the preset's
        training clock); 0 where the GPU's clock is not modelled."""
        return self.tiled.step_hz if self.tiled is not None and self.tiled.clock > 0 else 0.0

    @property
    def tile_area(self) -> int:
        return self.kernels.tile_m * self.kernels.tile_n


def sixteen_bit_peak(gpu: Gpu) -> float | None:
    """The dense bf16 (else fp16) peak: FlashAttention runs in 16 bits whatever dtype the GEMMs use."""
    rates = gpu.dtypes.get("bf16") or gpu.dtypes.get("fp16")
    return rates.dense_peak.value if rates is not None and rates.dense_peak is not None else None


def compute_spec(gpu: Gpu | None, dtype: str, peak: float, attention_peak: float | None = None, scale: float = 1.0,
                 sm_clock: float | None = None, fp8_recipe: str = "") -> ComputeSpec:  # fmt: skip
    """The spec of `gpu` for GEMMs in `dtype` at `peak` FLOP/s (a bare peak without a GPU: generic).

    `peak` and `attention_peak` are the rated peaks; under `gpu.power_limit` both are multiplied by
    the Tensor Core scale of parcalc.core.power (MFU stays quoted against the rated peak). `sm_clock` (Hz): the clock of
    the step being timed, for GEMMs measured by shape (parcalc.core.timing.step_clock; None: the preset's training clock).
    `fp8_recipe`: how FP8 GEMM inputs are scaled; 'mxfp8' takes the preset's block-scaled share (kernels.matmul_mxfp8)
    where it measures one."""
    from parcalc.core.power import tensor_power_scale

    kernels = gpu.kernels if gpu is not None and gpu.kernels is not None else GENERIC_KERNELS
    matmul = kernels.matmul_share(dtype, fp8_recipe)
    if matmul is None:
        fallback = kernels.matmul_share("bf16")
        matmul = GENERIC_MATMUL if fallback is None else Sourced(fallback.value, fallback.unit, f"{fallback.source}; bf16's share, none measured for {dtype}")
    bandwidth = gpu.memory_bandwidth.value if gpu is not None else GENERIC_BANDWIDTH
    sms = int(gpu.sms.value) if gpu is not None and gpu.sms is not None else GENERIC_SMS
    sixteen = None
    if dtype not in ("bf16", "fp16", "fp32", "tf32") and attention_peak:
        sixteen = compute_spec(gpu, "bf16", attention_peak, attention_peak, scale, sm_clock)
    # a board power limit lowers the SM clock: the Tensor Core peaks (GEMMs, FlashAttention) scale, HBM does not
    power = tensor_power_scale(gpu) if gpu is not None and gpu.power_limit is not None else None
    s = power.value if power is not None else 1.0
    tiled = kernels.tiled(dtype)
    non_tn = gpu is not None and non_tn_fp8_gemms(gpu.vendor, gpu.architecture)
    if tiled is not None and sm_clock is not None and tiled.clock > 0:
        tiled = replace(tiled, step_clock=sm_clock)
    ctas = int(gpu.nccl_channels.value) if gpu is not None and gpu.nccl_channels is not None else 0
    return ComputeSpec(peak * s, (attention_peak or peak) * s, bandwidth, sms, matmul, kernels, scale, sixteen, s, tiled,
                       kernels.calibrated, tiled.clock_ratio if tiled is not None else 1.0, fp8_non_tn=non_tn,
                       nccl_ctas=ctas if 0 < ctas < sms else 0)  # fmt: skip


class Kernel(NamedTuple):
    """One kernel of a pass: what it computes and moves, and its time on the GPU (a NamedTuple:
    the search builds hundreds of thousands)."""

    key: str
    kind: str  # "gemm", "attention" or "memory"
    flops: float
    bytes: float
    time: float
    bound: str  # "compute", "memory", "launch" or "elements" (a TensorIterator path's element rate)
    shape: str = ""
    path: str = ""  # a memory-bound kernel's TensorIterator path (parcalc.core.timing.elementwise); "": by its bytes alone
    # how much longer it takes while an NCCL collective holds ComputeSpec.nccl_ctas of the SMs (parcalc.core.timing.
    # sm_contention.stretch); 1: not slowed, or no channel count known
    stretch: float = 1.0
    # seconds of `time` that scale as 1 / the SM clock beside the GEMMs' main loops: an element path's share at the
    # step's clock (parcalc.core.timing.elementwise.ElementClock), which the step's clock solve scales (step_clock)
    clocked: float = 0.0


def quantisation(m: int, n: int, batch: int, spec: ComputeSpec) -> float:
    """Useful share of the tiles provisioned for an m x n output (x batch): tile and wave quantisation.

    cuBLAS picks among tile sizes; parcalc takes the better of the preset's tile and one of half
    its height, as the heuristics do for outputs that fill a wave badly."""
    best = 0.0
    for tm, tn in ((spec.kernels.tile_m, spec.kernels.tile_n), (max(spec.kernels.tile_m // 2, 1), spec.kernels.tile_n)):
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(tiles / spec.sms)
        best = max(best, (m * n * batch) / (waves * spec.sms * tm * tn))
    return best


def _roofline(key: str, kind: str, flops: float, traffic: float, rate: float, spec: ComputeSpec, shape: str, path: str = "") -> Kernel:
    compute = flops / (rate * spec.scale) if flops else 0.0
    memory = traffic / (spec.bandwidth * spec.kernels.memory.value * spec.scale)
    launch = spec.kernels.launch.value
    time = max(compute, memory, launch) / spec.kind_rate(kind)  # a trace's factor scales the kind's time as a whole
    bound = "compute" if time == compute else "memory" if time == memory else "launch"
    stretch = linear_stretch(spec.sms, spec.nccl_ctas) if spec.nccl_ctas and bound == "compute" else 1.0
    return Kernel(key, kind, flops, traffic, time, bound, shape, path, stretch)


def gemm(key: str, m: int, k: int, n: int, e: float, spec: ComputeSpec, batch: int = 1) -> Kernel:
    """An (m x k) . (k x n) product, `batch` times, operands and output of e bytes each."""
    flops = 2.0 * m * k * n * batch
    traffic = e * batch * (m * k + k * n + m * n)
    if spec.tiled is not None:  # measured by shape on this GPU: its tiles, waves, split-K and fixed costs
        choice = tiled_gemm_choice(m, k, n, batch, spec.tiled, spec.sms, spec.bandwidth * spec.kernels.memory.value * spec.scale, e,
                                   spec.scale * spec.power_scale * spec.gemm_clock)  # fmt: skip
        time = choice.time / spec.kind_rate("gemm")
        stretch = 1.0
        if spec.nccl_ctas and choice.bound == "compute":
            ctas = math.ceil(m / choice.tile_m) * math.ceil(n / choice.tile_n) * batch * choice.split
            stretch = persistent_stretch(ctas, spec.sms, spec.nccl_ctas)
        shape = f"[{m}×{k}]·[{k}×{n}]" + (f" ×{batch}" if batch > 1 else "")
        return Kernel(key, "gemm", flops, traffic, time, choice.bound, shape, stretch=stretch)
    rate = spec.peak * spec.matmul.value * quantisation(m, n, batch, spec)
    shape = f"[{m}×{k}]·[{k}×{n}]" + (f" ×{batch}" if batch > 1 else "")
    return _roofline(key, "gemm", flops, traffic, rate, spec, shape)


def gemm_assumptions(spec: ComputeSpec, dtype: str) -> tuple[str, ...]:
    """What timed the GEMMs, in words: gemm()'s two ways, the share of the peak named only where it times GEMMs. On a GPU
    whose GEMMs in `dtype` were measured by shape the tiles time every one; the 16-bit GEMMs of FP8 training
    (`spec.sixteen_bit`) get their own line where their dtype is timed the other way. (fla's fused products,
    linear_attention_kernels.fused_kernel, take the share where the tiles find one memory-bound: none is at fla's chunk of
    64 and head dims of 64-128 on the H200, each tile's fixed cost outweighing its operands' bytes, so no line is given.)"""
    lines = [_gemm_line(spec, dtype)]
    sixteen = spec.sixteen_bit
    if sixteen is not None and (sixteen.tiled is None) != (spec.tiled is None):
        lines.append("the 16-bit GEMMs (LM head, router): " + _gemm_line(sixteen, "bf16"))
    return tuple(lines)


def _gemm_line(spec: ComputeSpec, dtype: str) -> str:
    tiled = spec.tiled
    if tiled is None:
        return f"GEMMs at {spec.matmul.value:.0%} of the {dtype} peak x tile/wave quantisation ({spec.matmul.source})"
    rate = f"one SM's main loop at {tiled.sm_rate / 1e12:.5g} TFLOP/s"
    if tiled.clock > 0 and tiled.step_hz > 0:
        at, rate = f" at {tiled.step_hz / 1e6:,.1f} MHz", f"{rate} at the sweep's {tiled.clock / 1e6:,.1f} MHz"
    else:
        at = ""
    return (f"GEMMs by their tiles{at} ({dtype}: {rate}, each GEMM's tiles, waves, split of K and fixed costs by the tile "
            f"model, parcalc.core.timing.gemm_tiles): {tiled.source}")


def memory_op(key: str, traffic: float, spec: ComputeSpec, shape: str = "", path: str = "", elements: float = 0.0) -> Kernel:
    """A memory-bound kernel moving `traffic` bytes; on a TensorIterator `path` that is not vectorised (parcalc.core.timing.
    elementwise) it also takes `elements` / that path's measured element rate where the GPU has one."""
    kernel = _roofline(key, "memory", 0.0, traffic, 1.0, spec, shape, path)
    rate = spec.kernels.element_rate(path) if path and elements else None
    if rate is None:
        return kernel
    per_rate = elements / (rate.value * spec.scale) / spec.kind_rate("memory")
    clock = spec.kernels.element_clock
    if clock is None:
        return kernel._replace(time=per_rate, bound="elements") if per_rate > kernel.time else kernel
    issue = per_rate * clock.factor(path, spec.step_clock)  # the share of the work the SMs issue at the step's clock
    if issue <= kernel.time:
        return kernel
    return kernel._replace(time=issue, bound="elements", clocked=per_rate * clock.clocked(path, spec.step_clock))


def flash_attention(key: str, flops: float, traffic: float, backward: bool, spec: ComputeSpec, shape: str, head_dim: int = 0,
                    tiles: AttentionShape | None = None) -> Kernel:  # fmt: skip
    """One fused attention pass at the GPU's measured share of the 16-bit peak: the share measured at the nearest
    head dimension where the preset has them by head dimension (KernelRates.attention_by_head_dim), else its one share;
    where the preset times attention by its tiles (KernelRates.attention_tiles) and `tiles` gives the pass's shape, the
    share is the blocks' rate and the pass takes its longest-first schedule (parcalc.core.timing.attention_tiles)."""
    rate = spec.attention_peak * spec.kernels.attention_share(head_dim, backward).value
    by_tiles = spec.kernels.attention_tiles
    if by_tiles is not None and tiles is not None and flops:
        from parcalc.core.timing.attention_tiles import tiled_attention_time  # only a preset timed by tiles: start-up

        rate = flops / tiled_attention_time(tiles, by_tiles, rate, backward, spec.sms, FLASH_BACKWARD_FLOPS)
    return _roofline(key, "attention", flops, traffic, rate, spec, shape)



def linear_kernels(key: str, m: int, k: int, n: int, e: float, spec: ComputeSpec, batch: int = 1) -> tuple[Kernel, Kernel, Kernel]:
    """Y = X W (`batch` times: a grouped GEMM): the forward GEMM, and its backward: dX = dY W^T and dW = X^T dY."""
    return (gemm(key, m, k, n, e, spec, batch), gemm(f"{key}.dgrad", m, n, k, e, spec, batch),
            gemm(f"{key}.wgrad", k, m, n, e, spec, batch))  # fmt: skip


def fp8_cast(key: str, elements: float, element_bytes: float, recipe: str, spec: ComputeSpec, amax_fused: bool = False,
             gradient: bool = False) -> Kernel:  # fmt: skip
    """Quantising one GEMM input to FP8 (or NVFP4) as Transformer Engine does (parcalc.core.timing.fp8_quantise): its cast
    kernel, with the amax pass and the scale kernel of current scaling (NVFP4: the RHT amax pass, the RNG state of a
    gradient's stochastic rounding) folded into it (their times added, one Kernel)."""
    plan = cast_plan(elements, element_bytes, recipe, spec.fp8_non_tn, amax_fused, gradient)
    cast = memory_op(key, plan.cast_bytes, spec, f"{elements:.0f} values")
    extra = (memory_op(f"{key}.amax", plan.amax_bytes, spec).time if plan.amax_bytes else 0.0) + plan.tiny_kernels * spec.kernels.launch.value
    if not extra:
        return cast
    return cast._replace(bytes=plan.amax_bytes + plan.cast_bytes, time=cast.time + extra)


def linear_passes(key: str, m: int, k: int, n: int, e: float, spec: ComputeSpec, fp8: str = "",
                  batch: int = 1, norm_fed: bool = False) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:  # fmt: skip
    """(forward, backward) kernels of a linear layer; under FP8 (`fp8`: the recipe) each GEMM input
    is quantised first: the activation forward, the output gradient backward. `norm_fed`: a norm kernel
    produces the input (TE's LayerNormLinear), which under current scaling also reduces its amax."""
    fwd, dgrad, wgrad = linear_kernels(key, m, k, n, e, spec, batch)
    if not fp8:
        return (fwd,), (dgrad, wgrad)
    return ((fwd, fp8_cast(f"{key}.cast", m * batch * k, e, fp8, spec, norm_fed)),
            (dgrad, wgrad, fp8_cast(f"{key}.dgrad.cast", m * batch * n, e, fp8, spec, gradient=True)))  # fmt: skip



class LayerKernels:
    """A layer's forward and backward kernels as its operations are added: `mem`, a memory-bound
    operation (and its backward when it has one); `linear`, a GEMM with its two backward GEMMs
    (and FP8 casts under an FP8 recipe)."""

    def __init__(self, spec: ComputeSpec, element_bytes: float, fp8: str, forward: list[Kernel] | None = None,
                 backward: list[Kernel] | None = None) -> None:  # fmt: skip
        self.spec, self.e, self.fp8 = spec, element_bytes, fp8
        self.forward: list[Kernel] = forward if forward is not None else []
        self.backward: list[Kernel] = backward if backward is not None else []

    def mem(self, key: str, fwd_bytes: float, bwd_bytes: float, shape: str) -> None:
        self.forward.append(memory_op(key, fwd_bytes, self.spec, shape))
        if bwd_bytes:
            self.backward.append(memory_op(f"{key}.bwd", bwd_bytes, self.spec, shape))

    def linear(self, key: str, m: int, k: int, n: int, norm_fed: bool = False) -> None:
        fwd, bwd = linear_passes(key, m, k, n, self.e, self.spec, self.fp8, norm_fed=norm_fed)
        self.forward.extend(fwd)
        self.backward.extend(bwd)


