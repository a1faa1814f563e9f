"""The memory-bound kernels of a shared H200 trace (tests/fixtures/h200: Kineto traces with shapes, measured on one
H200, ../shared/measurements/h200-2026-11-28) by TensorIterator path (parcalc.core.timing.elementwise.kernel_path),
each with the elements it wrote, from the shapes its launching ATen op recorded.

    python tests/trace_paths.py     # each path's median element rate in both traces (what presets/gpus/h200.yaml holds),
                                    # and the share of each path's time that follows the SM clock in the b4 trace
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
ELEMENT_BYTES = {"float": 4, "c10::BFloat16": 2, "long int": 8, "c10::Half": 2, "bool": 1, "double": 8, "int": 4}
LARGE = 4_000_000  # elements: kernels below this are left out of the rates (their fixed cost is not their path's rate)
INDEX_LIMIT = 2**31  # TensorIterator splits an op over more elements than 32-bit indexing reaches (can_use_32bit_indexing)


class TraceKernel(NamedTuple):
    op: str  # the launching ATen op
    path: str | None
    seconds: float
    elements: float  # elements written (0: not known from the recorded shapes)


def _broadcast(shapes: list[list[int]]) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        out = [max(a, b) for a, b in zip(out, [1] * (rank - len(shape)) + list(shape), strict=True)]
    return out


def _elements(op: str, args: dict[str, Any]) -> float:
    dims, types = args.get("Input Dims", []), args.get("Input type", [])
    if op == "aten::cat":
        parts = dims[0] if dims and isinstance(dims[0], list) else []
        return float(sum(math.prod(p) for p in parts if isinstance(p, list)))
    tensors = [d for d, t in zip(dims, types, strict=False) if isinstance(d, list) and d and t in ELEMENT_BYTES]
    if not tensors:
        return 0.0
    if op in ("aten::copy_", "aten::sum", "aten::mean"):  # a copy writes its destination; a reduction reads its input
        n = float(math.prod(tensors[0]))
    else:
        n = float(math.prod(_broadcast(tensors)))
    pieces = math.ceil(n / INDEX_LIMIT) if op == "aten::copy_" and n > INDEX_LIMIT else 1  # the logits' cast: 4 kernels
    return n / pieces


def memory_kernels(name: str) -> list[TraceKernel]:
    """Every memory-bound kernel of one trace (`trace-llama1b-b4-s4096.json.gz`), with its path and elements."""
    from parcalc.core.calibrate.trace import kernel_kind
    from parcalc.core.timing.elementwise import kernel_path
    from parcalc.results.calibrate_trace import read_trace_file

    events = read_trace_file(str(FIXTURES / name))["traceEvents"]
    ops: dict[Any, dict[str, Any]] = {}
    for event in events:
        if event.get("cat") == "cpu_op":
            ops.setdefault(event["args"].get("External id"), event)
    out = []
    for event in events:
        if event.get("cat") != "kernel" or kernel_kind(event["name"]) != "memory":
            continue
        op = ops.get(event["args"].get("External id"))
        name = op["name"] if op else "?"
        out.append(TraceKernel(name, kernel_path(event["name"]), event["dur"] * 1e-6, _elements(name, op["args"]) if op else 0.0))
    return out


def path_rates(name: str) -> dict[str, float]:
    """Each path's median element rate (elements per second) over its large kernels in one trace."""
    rates: dict[str, list[float]] = defaultdict(list)
    for k in memory_kernels(name):
        if k.path is not None and k.elements >= LARGE:
            rates[k.path].append(k.elements / k.seconds)
    return {path: statistics.median(r) for path, r in rates.items()}


def path_seconds(name: str) -> dict[str | None, float]:
    """Each path's summed kernel time in one trace (None: the kernels of no TensorIterator path)."""
    out: dict[str | None, float] = defaultdict(float)
    for k in memory_kernels(name):
        out[k.path] += k.seconds
    return dict(out)


NEAREST_GEMMS = 8  # the GEMM launches around a kernel that tell the clock it ran at (a layer's backward runs 14)
REPEATED = 4  # launches of one shape, at least, to have a median to compare each with
SHORTEST = 3.0  # us: shorter launches are left out (their fixed cost, not their work, sets their time)
CLOCK_RANGE = 0.1  # a path's share is measured where its GEMM neighbours' times spread by at least this much


def clock_shares(name: str) -> dict[str, float | None]:
    """The share s of each path's time that follows the SM clock, from one trace's own clock variation.

    Each launch's duration over the median of launches of the same kernel, op, input shapes and grid (its slowdown); a
    GEMM's slowdown is the clock's (f_median / f: its main loop runs at the SM clock); each memory-bound launch against
    the median slowdown of the NEAREST_GEMMS GEMM launches around it in time: slowdown - 1 = s (GEMM slowdown - 1), the
    least-squares slope. None: the path ran where the clock did not move (the GEMMs beside it spread by under
    CLOCK_RANGE), nothing to measure."""
    import numpy as np

    from parcalc.core.calibrate.trace import kernel_kind
    from parcalc.core.timing.elementwise import VECTOR, kernel_path
    from parcalc.results.calibrate_trace import read_trace_file

    events = read_trace_file(str(FIXTURES / name))["traceEvents"]
    ops = {e["args"].get("External id"): e for e in events if e.get("cat") == "cpu_op"}
    launches = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        kind = kernel_kind(e["name"])
        what = "gemm" if kind == "gemm" else kernel_path(e["name"]) if kind == "memory" else None
        op = ops.get(e["args"].get("External id"), {})
        key = (e["name"], op.get("name"), str(op.get("args", {}).get("Input Dims")), str(e["args"].get("grid")))
        launches.append((e["ts"], e["dur"], what, key))
    by_key: dict[Any, list[float]] = defaultdict(list)
    for _, dur, _, key in launches:
        by_key[key].append(dur)
    median = {key: statistics.median(d) for key, d in by_key.items() if len(d) >= REPEATED and statistics.median(d) >= SHORTEST}
    slowdowns = [(ts, dur / median[key], what) for ts, dur, what, key in launches if what is not None and key in median]
    gemms = [(ts, slow) for ts, slow, what in slowdowns if what == "gemm"]
    times = [ts for ts, _ in gemms]
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for ts, slow, what in slowdowns:
        if what != "gemm":
            i = bisect.bisect(times, ts)
            clock = statistics.median(s for _, s in gemms[max(0, i - NEAREST_GEMMS // 2):i + NEAREST_GEMMS // 2])
            points[what or VECTOR].append((clock - 1, slow - 1))
    out: dict[str, float | None] = {}
    for path, xy in points.items():
        x, y = np.array([p[0] for p in xy]), np.array([p[1] for p in xy])
        out[path] = float(np.polyfit(x, y, 1)[0]) if x.max() - x.min() >= CLOCK_RANGE else None
    return out


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))
    for trace in ("trace-llama1b-b4-s4096.json.gz", "trace-llama1b-b1-s2048.json.gz"):
        print(trace, {p: f"{r / 1e9:.1f} G/s" for p, r in sorted(path_rates(trace).items())})
        print("   seconds", {str(p): f"{t * 1e3:.2f} ms" for p, t in sorted(path_seconds(trace).items(), key=lambda x: str(x[0]))})
    print("clock shares (b4 trace)", {p: None if s is None else round(s, 3) for p, s in sorted(clock_shares("trace-llama1b-b4-s4096.json.gz").items())})
