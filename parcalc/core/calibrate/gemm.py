"""The pure part of `parcalc calibrate gemm`: which GEMMs to time, and what their times mean to
parcalc's compute model.

parcalc times a GEMM (parcalc.core.timing.compute.gemm) as

    t = F / (P x e_mm x q(m, n))

with F = 2mkn, P the dtype's dense peak, e_mm the preset's `kernels.matmul.<dtype>` share and q
the tile and wave quantisation of the m x n output on the preset's SMs and tiles. A measured
time t therefore calibrates e_mm for its shape as

    e = (F / t) / (P x q(m, n))

and the preset gets the median over the sweep: the middle shape, not the best, because the model
applies one share to every GEMM of a layer and the best isolated shape overstates training
GEMMs (on A100 the best of a sweep reaches 86.9 % of the peak, ml-engineering's MAMF table;
GEMMs in Megatron-LM training 72 %, Korthikanti et al. 2022 Table 4; both cited in
presets/gpus/a100-sxm4-80gb.yaml). The whole table goes into the preset as data
(`matmul_measured`).

Shape sets (m x k x n of the forward GEMMs of a transformer layer with hidden size h on T
tokens: QKV T x h x 3h, attention projection T x h x h, MLP up T x h x 4h, MLP down T x 4h x h):

- large: h = 1024, 2048, 4096, 8192 on T = 8192 tokens (micro-batch x sequence, e.g. 4 x 2048):
  training-sized GEMMs for a GPU, up to 4.4 TFLOP each;
- small: h = 256, 512, 1024 on T = 1024: what a CPU times in seconds;
- tiny: h = 64, 128 on T = 128: for tests.

`default` is large on a GPU and small on a CPU.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, replace
from typing import Any

from parcalc.core.measured import MatmulPoint
from parcalc.core.timing.compute import (
    GENERIC,
    GENERIC_KERNELS,
    GENERIC_MATMUL,
    GENERIC_SMS,
    ComputeSpec,
    quantisation,
)
from parcalc.derivation import Column, Derivation, Result, Table, Term
from parcalc.errors import InputError


@dataclass(frozen=True)
class GemmShape:
    """(m x k) . (k x n), named after the layer's GEMM it stands for."""

    label: str
    m: int
    k: int
    n: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


@dataclass(frozen=True)
class ShapeSet:
    """GEMMs to time, how long one timed batch of calls runs at least, and the buffer of the copy
    that measures memory bandwidth when no base preset gives it."""

    name: str
    shapes: tuple[GemmShape, ...]
    batch_seconds: float
    copy_bytes: int


def layer_gemms(hidden: int, tokens: int) -> tuple[GemmShape, ...]:
    """The forward GEMMs of one transformer layer (module docstring)."""
    h, t = hidden, tokens
    return (
        GemmShape(f"h{h}.qkv", t, h, 3 * h),
        GemmShape(f"h{h}.proj", t, h, h),
        GemmShape(f"h{h}.mlp_up", t, h, 4 * h),
        GemmShape(f"h{h}.mlp_down", t, 4 * h, h),
    )


SHAPE_SETS: dict[str, ShapeSet] = {
    "large": ShapeSet(
        "large",
        tuple(s for h in (1024, 2048, 4096, 8192) for s in layer_gemms(h, 8192)),
        0.05,
        1 << 30,
    ),
    "small": ShapeSet(
        "small",
        tuple(s for h in (256, 512, 1024) for s in layer_gemms(h, 1024)),
        0.05,
        256 << 20,
    ),
    "tiny": ShapeSet(
        "tiny",
        tuple(s for h in (64, 128) for s in layer_gemms(h, 128)),
        0.005,
        16 << 20,
    ),
}


def shape_set(name: str, device_kind: str) -> ShapeSet:
    """A set by name; `default` picks large on a GPU, small on a CPU."""
    key = name.strip().lower()
    if key == "default":
        key = "small" if device_kind == "cpu" else "large"
    if key not in SHAPE_SETS:
        raise InputError(
            f"--shapes: unknown set {name!r}; use default, {', '.join(SHAPE_SETS)}"
        )
    return SHAPE_SETS[key]


@dataclass(frozen=True)
class GemmTiming:
    shape: GemmShape
    seconds: float  # the best time per call over the timed batches


def quantisation_spec(tile_m: int, tile_n: int, sms: int) -> ComputeSpec:
    """What parcalc's quantisation needs of a GPU: its tiles and SMs (the rest is unused)."""
    kernels = replace(GENERIC_KERNELS, tile_m=tile_m, tile_n=tile_n)
    return ComputeSpec(1.0, 1.0, 1.0, sms, GENERIC_MATMUL, kernels)


def matmul_points(
    timings: tuple[GemmTiming, ...], peak: float, spec: ComputeSpec
) -> tuple[MatmulPoint, ...]:
    """Each timed shape: achieved FLOP/s, q and the share e = achieved / (peak x q)."""
    points = []
    for timing in timings:
        s = timing.shape
        if not timing.seconds > 0:
            raise InputError(
                f"GEMM {s.label}: a time of {timing.seconds!r} s cannot be measured; the timer failed"
            )
        achieved = s.flops / timing.seconds
        q = quantisation(s.m, s.n, 1, spec)
        points.append(
            MatmulPoint(
                s.m, s.k, s.n, timing.seconds, achieved, q, achieved / (peak * q)
            )
        )
    return tuple(points)


def median_share(
    points: tuple[MatmulPoint, ...], peak: float, dtype: str, peak_source: str
) -> Derivation:
    """e_mm = the median share over the sweep; above 1 the peak cannot be this device's."""
    middle = statistics.median(p.share for p in points)
    best = max(points, key=lambda p: p.achieved)
    if middle > 1:
        raise InputError(f"the GEMMs ran at {middle:.3g} x (peak x quantisation): a share above 1 (best {best.achieved / 1e12:.4g} TFLOP/s "
                         f"against a peak of {peak / 1e12:.4g} TFLOP/s); is that the dense {dtype} peak of this device? (--peak)")  # fmt: skip
    return Derivation(
        key="matmul_share", label=f"Share of the dense {dtype} peak GEMMs sustain (kernels.matmul.{dtype})", symbol="e_mm",
        latex_symbol=r"e_{\mathrm{mm}}", formula="median of $N shares F / (t × $P × q)",
        formula_latex=r"\operatorname{median}_{$N} \frac{F}{t \cdot $P \cdot q}",
        inputs=(Term("N", "N", "N", len(points), "", "GEMM shapes timed"), Term("P", "P", "P", peak, "FLOP/s", f"dense {dtype} peak", peak_source)),
        value=middle, unit="fraction", source="parcalc.core.timing.compute: t = F / (P x e_mm x q); parcalc/core/calibrate/gemm.py",
        assumptions=("the median shape, not the best: one share serves every GEMM of a layer",),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The preset


@dataclass(frozen=True)
class DeviceFacts:
    """What the measuring run knows of the device, for a preset made without a base one."""

    kind: str  # "cuda" (CUDA or ROCm) or "cpu"
    name: str
    vendor: str
    architecture: str
    memory_capacity: float  # bytes
    sms: int | None  # streaming multiprocessors / compute units; None on a CPU
    copy_bandwidth: float  # B/s, read + write of a device-to-device copy
    copy_bytes: int
    where: str  # how these were read, for the sources


def significant(value: float) -> float:
    """Four significant digits: a share of a CPU against a GPU's peak can be 1e-5, where rounding
    to decimals would write 0."""
    return float(f"{value:.4g}")


def source_key(dtype: str) -> str:
    return f"calibrate_gemm_{dtype}"


def skeleton(
    base: dict[str, Any] | None, facts: DeviceFacts, dtype: str
) -> dict[str, Any]:
    """The preset before calibration: a copy of the base preset's document, or a new one from
    what the device reports (a CPU is a 'gpu' to parcalc here); with a `kernels` section."""
    document = copy.deepcopy(base) if base is not None else _new_document(facts, dtype)
    if "kernels" not in document:
        document["kernels"] = _generic_kernels(document.setdefault("sources", {}))
    return document


def calibrate_document(document: dict[str, Any], facts: DeviceFacts, dtype: str, peak: float, peak_given: bool,
                       points: tuple[MatmulPoint, ...], share: float, name: str, sweep_text: str) -> dict[str, Any]:  # fmt: skip
    """`skeleton`'s document with kernels.matmul.<dtype> replaced, the sweep added under
    matmul_measured.<dtype> and, with --peak, dtypes.<dtype>.dense_peak set to it."""
    key = source_key(dtype)
    document = copy.deepcopy(document)
    document["name"] = name
    sources = document.setdefault("sources", {})
    sources[key] = sweep_text
    if peak_given:
        sources[f"{key}_peak"] = "given to parcalc calibrate gemm --peak"
        rates = document.setdefault("dtypes", {}).setdefault(dtype, {})
        rates["dense_peak"] = {
            "value": f"{peak / 1e12:.10g} TFLOP/s",
            "source": f"{key}_peak",
        }
    matmul = document["kernels"].setdefault("matmul", {})
    previous = matmul.get(dtype)
    matmul[dtype] = {
        "value": significant(share),
        "source": key,
        "note": f"median share of {len(points)} GEMM shapes; table in matmul_measured",
    }
    document.setdefault("matmul_measured", {})[dtype] = {
        "source": key,
        "rows": [{"m": p.m, "k": p.k, "n": p.n, "time": f"{p.time * 1e6:.6g} us", "achieved": f"{p.achieved / 1e12:.6g} TFLOP/s",
                  "quantisation": significant(p.quantisation), "share": significant(p.share)} for p in points],
    }  # fmt: skip
    was = (
        f" (was {previous['value']}, source {previous.get('source')})"
        if isinstance(previous, dict)
        else ""
    )
    document.setdefault("notes", []).append(
        f"kernels.matmul.{dtype} = {significant(share)}: calibrated by parcalc calibrate gemm on {facts.name}{was}."
    )
    return document


def _new_document(facts: DeviceFacts, dtype: str) -> dict[str, Any]:
    document: dict[str, Any] = {
        "kind": "gpu", "name": facts.name, "vendor": facts.vendor, "architecture": facts.architecture,
        "sources": {"device": f"reported by the device at calibration ({facts.where})",
                    "copy": f"measured by parcalc calibrate gemm: the best of several copies of {facts.copy_bytes >> 20} MiB, read + write"},
    }  # fmt: skip
    if facts.sms is not None:
        document["sms"] = {"value": facts.sms, "source": "device"}
    document["memory_capacity"] = {
        "value": f"{int(facts.memory_capacity)} B",
        "source": "device",
    }
    document["memory_bandwidth"] = {"value": f"{facts.copy_bandwidth / 1e9:.6g} GB/s", "source": "copy",
                                    "note": "a measured copy rate, not a datasheet peak; kernels.memory is therefore 1"}  # fmt: skip
    document["dtypes"] = {dtype: {}}
    document["kernels"] = _generic_kernels(
        document["sources"], cpu=facts.kind == "cpu", measured_memory=True
    )
    document["notes"] = [
        f"Made by parcalc calibrate gemm from what the device reports; the kernels other than matmul are {GENERIC}."
    ]
    return document


def _generic_kernels(
    sources: dict[str, str], cpu: bool = False, measured_memory: bool = False
) -> dict[str, Any]:
    """A `kernels:` section for a preset that had none: parcalc's generic shares, sourced as such."""
    sources["parcalc_generic"] = GENERIC
    g = GENERIC_KERNELS
    if cpu:
        sources["cpu_tiles"] = (
            "a CPU has no thread-block tiles: 1 x 1 makes parcalc's tile and wave quantisation (almost) 1"
        )
        tile = {"m": 1, "n": 1, "source": "cpu_tiles"}
    else:
        sources["mm_guide"] = g.tile_source
        tile = {"m": g.tile_m, "n": g.tile_n, "source": "mm_guide"}
    memory = (
        {"value": 1, "source": "copy", "note": "memory_bandwidth is itself measured"}
        if measured_memory
        else {"value": g.memory.value, "source": "parcalc_generic"}
    )
    return {
        "matmul": {}, "tile": tile, "memory": memory,
        "attention_forward": {"value": g.attention_forward.value, "source": "parcalc_generic"},
        "attention_backward": {"value": g.attention_backward.value, "source": "parcalc_generic"},
        "launch": {"value": f"{g.launch.value * 1e6:g} us", "source": "parcalc_generic"},
    }  # fmt: skip


def tiles_of(document: dict[str, Any]) -> tuple[int, int, int]:
    """(tile_m, tile_n, SMs) the compute model will use for this document (compute_spec's rules)."""
    tile = document.get("kernels", {}).get("tile", {})
    sms = (
        document.get("sms", {}).get("value")
        if isinstance(document.get("sms"), dict)
        else None
    )
    return (
        int(tile.get("m", GENERIC_KERNELS.tile_m)),
        int(tile.get("n", GENERIC_KERNELS.tile_n)),
        int(sms) if sms else GENERIC_SMS,
    )


def gemm_result(points: tuple[MatmulPoint, ...], timings: tuple[GemmTiming, ...], share: Derivation, dtype: str, device: str,
                shapes: str) -> Result:  # fmt: skip
    """What `parcalc calibrate gemm` shows: the share, and every shape timed."""
    columns = (Column("label", "GEMM"), Column("shape", "m×k×n"), Column("time", "time", "s"), Column("achieved", "achieved", "FLOP/s"),
               Column("quantisation", "q", "fraction"), Column("share", "share", "fraction"))  # fmt: skip
    rows = tuple((t.shape.label, f"{p.m}×{p.k}×{p.n}", p.time, p.achieved, p.quantisation, p.share)
                 for t, p in zip(timings, points, strict=True))  # fmt: skip
    return Result(
        command="calibrate gemm",
        title=f"GEMMs in {dtype} on {device}",
        inputs=share.inputs,
        derivations=(share,),
        tables=(Table("gemms", f"{len(points)} GEMMs ({shapes} set): best time per call", columns, rows),),
        assumptions=("share = achieved / (peak x q), q = parcalc's tile and wave quantisation of the m x n output",
                     "the preset's matmul_measured rows carry m, k and n as numbers"),
        settings=(("dtype", dtype), ("device", device), ("shapes", shapes)),
    )  # fmt: skip
