"""Kernel times that can be held against a measurement: what `parcalc intensity` prints with a GPU.

Every time here is the step-time model's own (parcalc.core.timing.compute: `gemm`, `quantisation`,
`layer_passes`, `end_passes`, the same functions and the same ComputeSpec that `fit` uses); this
module only turns their Kernels into Derivations and a table. A kernel takes

    t = max(F / (P x e_mm x q), Q / (BW x e_mem), t_launch)

with F its FLOPs, Q its bytes, P the dtype's dense peak, q the tile and wave quantisation of a
GEMM's output, BW the HBM bandwidth and e_mm, e_mem the GPU preset's shares.

Two GEMM rates, both from the preset's `kernels` section:
- in training (`kernels.matmul`, what `fit` charges): the share GEMMs sustain inside a training step,
  calibrated on a published run (clock throttling at the power limit, SMs taken by overlapped NCCL
  kernels; presets/gpus/h100-sxm5.yaml `mpt_7b_h100`, and `fp8_tiles` for FP8);
- alone (`kernels.matmul_isolated`): one GEMM benchmarked by itself (torch.mm in a loop, a profiler
  trace of a microbenchmark), from the best shape of a published sweep. What a published GEMM
  measurement is compared with (tests/test_kernel_times.py).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

# the kernel primitives from their own module, not through compute: a matmul's intensity needs no layer model, and
# compute (the layer passes) costs the one-liner `intensity --gpu` start-up time (benchmarks/startup.py)
from parcalc.core.timing.kernels import ComputeSpec, Kernel, compute_spec, gemm, quantisation, sixteen_bit_peak
from parcalc.derivation import Column, Derivation, Table, Term

if TYPE_CHECKING:
    from parcalc.core.hardware import Gpu
    from parcalc.core.model import TransformerModel
    from parcalc.core.timing.layer_shard import LayerShard

COMPUTE_SOURCE = "parcalc.core.timing.compute (the kernel model fit uses): roofline per kernel with a launch floor"
QUANTISATION_SOURCE = ("NVIDIA, Matrix Multiplication Background User's Guide, 'Dimension Quantization Effects': the m x n "
                       "output in tiles, one per SM per wave, a partial wave paid in full; the better of the preset's tile "
                       "and one of half its height (parcalc.core.timing.compute.quantisation)")  # fmt: skip


def kernel_spec(gpu: Gpu | None, dtype: str, peak: float, bandwidth: float | None = None, given_peak: bool = False) -> ComputeSpec:
    """The ComputeSpec fit builds for `gpu` with GEMMs in `dtype` at `peak` FLOP/s (Cluster.spec:
    FlashAttention at the preset's 16-bit peak unless the peak was given, commands/fit.py _cluster);
    `bandwidth` (B/s) replaces the preset's HBM bandwidth (intensity --bandwidth)."""
    spec = compute_spec(gpu, dtype, peak, sixteen_bit_peak(gpu) if gpu is not None and not given_peak else None)
    if bandwidth is not None:
        sixteen = replace(spec.sixteen_bit, bandwidth=bandwidth) if spec.sixteen_bit is not None else None
        spec = replace(spec, bandwidth=bandwidth, sixteen_bit=sixteen)
    return spec


def alone_spec(spec: ComputeSpec, dtype: str) -> ComputeSpec | None:
    """The same spec with the share one GEMM reaches alone (kernels.matmul_isolated); None without one."""
    share = spec.kernels.isolated_share(dtype)
    return None if share is None else replace(spec, matmul=share, gemm_clock=1.0)  # alone: at the sweep's clock


def _rate_terms(spec: ComputeSpec, which: str) -> tuple[Term, ...]:
    return (
        Term("P", "P", "P", spec.peak, "FLOP/s", "dense peak of the dtype"),
        Term("e_mm", "e_mm", r"e_{\mathrm{mm}}", spec.matmul.value, "", f"share of the peak large GEMMs sustain {which}", spec.matmul.source),
        Term("BW", "BW", r"B_{\mathrm{mem}}", spec.bandwidth, "B/s", "HBM bandwidth"),
        Term("e_mem", "e_mem", r"e_{\mathrm{mem}}", spec.kernels.memory.value, "", "share of the bandwidth kernels sustain",
             spec.kernels.memory.source),
        Term("t_launch", "t_launch", r"t_{\mathrm{launch}}", spec.kernels.launch.value, "s", "shortest kernel (launch floor)",
             spec.kernels.launch.source),
    )  # fmt: skip


def gemm_time(kernel: Kernel, q: float, spec: ComputeSpec, key: str, which: str) -> tuple[Derivation, Derivation]:
    """(time, achieved FLOP/s) of one GEMM kernel of the compute model, as derivations."""
    inputs = (Term("F", "F", "F", kernel.flops, "FLOP", "FLOPs (2 m k n per product)"),
              Term("Q", "Q", "Q", kernel.bytes, "B", "bytes moved (operands read once, output written once)"),
              Term("q", "q", "q", q, "", "tile and wave quantisation of the output", QUANTISATION_SOURCE)) + _rate_terms(spec, which)  # fmt: skip
    time = Derivation(
        key=f"time_{key}", label=f"Predicted GEMM time ({which})", symbol=f"t_{key}", latex_symbol=rf"t_{{\mathrm{{{key}}}}}",
        formula="max($F / ($P × $e_mm × $q), $Q / ($BW × $e_mem), $t_launch)",
        formula_latex=r"\max\left(\frac{$F}{$P \times $e_mm \times $q},\ \frac{$Q}{$BW \times $e_mem},\ $t_launch\right)",
        inputs=inputs, value=kernel.time, unit="s", source=COMPUTE_SOURCE,
        assumptions=(f"the GEMM is {kernel.bound}-bound on this GPU ({which})",),
    )  # fmt: skip
    achieved = Derivation(
        key=f"achieved_{key}", label=f"Achieved FLOP/s ({which})", symbol=f"R_{key}", latex_symbol=rf"R_{{\mathrm{{{key}}}}}",
        formula="$F / $t", formula_latex=r"\frac{$F}{$t}",
        inputs=(inputs[0], time.as_term("t")), value=kernel.flops / kernel.time, unit="FLOP/s", source=COMPUTE_SOURCE,
    )  # fmt: skip
    return time, achieved


TILES_SOURCE = ("parcalc.core.timing.gemm_tiles: the m x n output in tm x tn tiles, waves of one tile per SM, each tile's main "
                "loop at the SM rate measured by shape (at the sweep's clock x the training step's over it) plus a fixed cost a "
                "tile and a kernel, split-K with its reduce kernel; the fastest of cuBLAS's candidate tiles")  # fmt: skip


def tiled_gemm_derivation(m: int, k: int, n: int, batch: int, element_bytes: float, spec: ComputeSpec, key: str,
                          which: str) -> tuple[Derivation, Derivation]:  # fmt: skip
    """(time, achieved FLOP/s) of one GEMM on a GPU whose GEMMs were measured by shape (ComputeSpec.tiled), as derivations
    of the tile model (the formula of the candidate it picks)."""
    from parcalc.core.timing.gemm_tiles import tiled_gemm_choice

    tiled = spec.tiled
    assert tiled is not None
    bandwidth = spec.bandwidth * spec.kernels.memory.value * spec.scale
    choice = tiled_gemm_choice(m, k, n, batch, tiled, spec.sms, bandwidth, element_bytes, spec.scale * spec.power_scale * spec.gemm_clock)
    flops, traffic = 2.0 * m * k * n * batch, element_bytes * batch * (m * k + k * n + m * n)
    clock = ("the training step's SM clock over the sweep's" if spec.gemm_clock != 1 else "the sweep's clock") + (
        ", x --efficiency and the power limit's share" if spec.scale * spec.power_scale != 1 else "")
    inputs = [Term("F", "F", "F", flops, "FLOP", "FLOPs (2 m k n per product)"),
              Term("w", "w", "w", choice.waves, "", f"waves of {choice.tile_m}x{choice.tile_n} tiles over {spec.sms} SMs"
                   + (f" (K split {choice.split} ways)" if choice.split > 1 else "")),
              Term("t_m", "t_m", "t_m", choice.tile_m, "", "tile rows"), Term("t_n", "t_n", "t_n", choice.tile_n, "", "tile columns"),
              Term("K_s", "K_s", "K_s", math.ceil(k / choice.split), "", "K of one tile's main loop"),
              Term("r_sm", "r_sm", r"r_{\mathrm{sm}}", tiled.sm_rate, "FLOP/s", "one SM's main loop, measured by shape", tiled.source),
              Term("c", "c", "c", choice.rate / tiled.sm_rate, "", clock, tiled.clock_source or tiled.source),
              Term("t_tile", "t_tile", r"t_{\mathrm{tile}}", tiled.tile_overhead, "s", "fixed cost of a tile", tiled.source),
              Term("Q", "Q", "Q", traffic, "B", "bytes moved (operands read once, output written once)"),
              Term("BW", "BW", r"B_{\mathrm{mem}}", bandwidth, "B/s", "HBM rate memory-bound kernels sustain", spec.kernels.memory.source),
              Term("t_kernel", "t_kernel", r"t_{\mathrm{kernel}}", tiled.kernel_overhead, "s", "fixed cost of a kernel", tiled.source)]  # fmt: skip
    formula = "max($w × (2 × $t_m × $t_n × $K_s / ($r_sm × $c) + $t_tile), $Q / $BW) + $t_kernel"
    latex = r"\max\left($w \left(\frac{2 $t_m $t_n $K_s}{$r_sm $c} + $t_tile\right),\ \frac{$Q}{$BW}\right) + $t_kernel"
    if choice.split > 1:  # the reduce kernel: the s fp32 partial outputs read, the result written
        inputs += [Term("s", "s", "s", choice.split, "", "splits of K"), Term("E", "E", "E", batch * m * n, "", "output elements"),
                   Term("e", "e", "e", element_bytes, "B", "bytes per output element")]
        formula += " + $t_kernel + $E × (4 × $s + $e) / $BW"
        latex += r" + $t_kernel + \frac{$E (4 $s + $e)}{$BW}"
    time = Derivation(
        key=f"time_{key}", label=f"Predicted GEMM time ({which})", symbol=f"t_{key}", latex_symbol=rf"t_{{\mathrm{{{key}}}}}",
        formula=formula, formula_latex=latex, inputs=tuple(inputs), value=choice.time, unit="s", source=TILES_SOURCE,
        assumptions=(f"the GEMM is {choice.bound}-bound on this GPU ({which})",),
    )  # fmt: skip
    achieved = Derivation(
        key=f"achieved_{key}", label=f"Achieved FLOP/s ({which})", symbol=f"R_{key}", latex_symbol=rf"R_{{\mathrm{{{key}}}}}",
        formula="$F / $t", formula_latex=r"\frac{$F}{$t}", inputs=(inputs[0], time.as_term("t")), value=flops / choice.time,
        unit="FLOP/s", source=TILES_SOURCE,
    )  # fmt: skip
    return time, achieved


def gemm_times(m: int, k: int, n: int, batch: int, element_bytes: float, dtype: str, spec: ComputeSpec) -> tuple[Derivation, ...]:
    """Time and achieved FLOP/s of (m x k) . (k x n), `batch` times, in training (fit's rate) and,
    where the preset has one, alone. A GPU whose GEMMs were measured by shape shows the tile model's formula."""
    q = quantisation(m, n, batch, spec)
    train, alone_which = "in training, as fit charges it", "alone, as a benchmark measures it"
    alone = alone_spec(spec, dtype)
    if spec.tiled is not None:
        out = tiled_gemm_derivation(m, k, n, batch, element_bytes, spec, "train", train)
        return out + (tiled_gemm_derivation(m, k, n, batch, element_bytes, alone, "alone", alone_which) if alone is not None else ())
    out2: tuple[Derivation, ...] = gemm_time(gemm("gemm", m, k, n, element_bytes, spec, batch), q, spec, "train", train)
    if alone is not None:
        out2 += gemm_time(gemm("gemm", m, k, n, element_bytes, alone, batch), q, alone, "alone", alone_which)
    return out2


KERNEL_COLUMNS = (
    Column("kernel", "kernel"),
    Column("pass", "pass"),
    Column("kind", "kind"),
    Column("shape", "shape"),
    Column("flops", "FLOPs", "FLOP"),
    Column("bytes", "bytes", "B"),
    Column("time", "time", "s"),
    Column("achieved", "achieved", "FLOP/s"),
    Column("bound", "bound"),
)


def layer_kernels(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, moe_layer: bool = False) -> tuple[Table, tuple[Derivation, ...]]:
    """Every kernel of one layer's forward and backward (and of the embedding, final norm, LM head
    and loss) on one GPU, timed by the compute model: a table and the layer's forward and backward
    time. moe_layer: one of the model's MoE layers (one GPU: no expert parallelism)."""
    from parcalc.core.timing.compute import end_passes, layer_passes
    from parcalc.core.timing.moe import ExpertShard

    passes = layer_passes(model, shard, spec, ExpertShard() if moe_layer else None)
    ends = end_passes(model, shard, spec)

    def row(k: Kernel, where: str) -> tuple[object, ...]:
        return (k.key, where, k.kind, k.shape, k.flops, k.bytes, k.time, k.flops / k.time if k.flops else None, k.bound)

    rows = [row(k, "forward") for k in passes.forward] + [row(k, "backward") for k in passes.backward]
    rows += [row(k, "backward" if k.key.endswith(".bwd") or k.key.endswith("grad") else "forward") for k in ends.kernels]
    layer = "MoE layer" if moe_layer else "layer"
    totals = (
        _sum("layer_forward_time", f"Forward kernels of one {layer}", "t_fwd", passes.t_forward),
        _sum("layer_backward_time", f"Backward kernels of one {layer}", "t_bwd", passes.t_backward),
    )
    table = Table("kernels", f"Kernel times of one {layer} and the model's ends, one micro-batch (the step-time model)",
                  KERNEL_COLUMNS, tuple(rows))  # fmt: skip
    return table, totals


def _sum(key: str, label: str, symbol: str, value: float) -> Derivation:
    return Derivation(key=key, label=label, symbol=symbol, latex_symbol=symbol.replace("_", r"_{\mathrm{") + "}}",
                      formula="sum of the table's kernel times for that pass", formula_latex=r"\textstyle\sum_{\mathrm{kernels}} t",
                      inputs=(), value=value, unit="s", source=COMPUTE_SOURCE)  # fmt: skip
