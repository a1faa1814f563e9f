"""The memory-bound kernels of a shared H200 trace (tests/fixtures/h200: Kineto traces with shapes, measured on one
H200, ../shared/measurements/h200-2026-11-28) by TensorIterator path (parcalc.core.timing.elementwise.kernel_path),
each with the elements it wrote, from the shapes its launching ATen op recorded.

    python tests/trace_paths.py     # each path's median element rate in both traces (what presets/gpus/h200.yaml holds)
"""

from __future__ import annotations

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


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))
    for trace in ("trace-llama1b-b4-s4096.json.gz", "trace-llama1b-b1-s2048.json.gz"):
        print(trace, {p: f"{r / 1e9:.1f} G/s" for p, r in sorted(path_rates(trace).items())})
        print("   seconds", {str(p): f"{t * 1e3:.2f} ms" for p, t in sorted(path_seconds(trace).items(), key=lambda x: str(x[0]))})
