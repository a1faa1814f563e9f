"""A PyTorch profiler (Kineto) Chrome trace of one training step: its GPU kernels by parcalc's kinds of work,
and the host's time per kernel launch.

`prof.export_chrome_trace(path)` writes {"traceEvents": [...]} (optionally gzipped): complete events ("ph": "X")
with a category: `kernel`, `gpu_memcpy`, `gpu_memset` on the GPU's streams; `cuda_runtime` / `cuda_driver` calls
on the host threads (cudaLaunchKernel, cuLaunchKernelEx, cudaMemsetAsync ...); `user_annotation` ranges such as
"Optimizer.step#AdamW.step". Kernels are sorted into kinds by name as the shared H200 profiles sort them
(../shared/measurements/h200-2026-11-28/h200_profile.py, kind()): fused attention (flash, fmha, cuDNN's sdpa),
GEMMs (gemm, cutlass, xmma, nvjet, sm90_, cublas ...), the optimizer (multi_tensor_apply, adam, foreach) and the
rest memory-bound (element-wise, reductions, the loss, copies and fills). One departure from those profiles: cuDNN's
fused attention runs its backward as the flash kernel and three helpers in the `cudnn::fusion` namespace
(compute_dot_do_o_specialized: the rows' dO . O; convert_dq_to_16bits: dQ's fp32 accumulator to bf16; fmha_reduce_head:
dK and dV of a GQA group's query heads summed), all launched by aten::_cudnn_attention_backward (the shared traces'
External ids); parcalc counts all three as attention, as the isolated SDPA rows that set the model's attention rate
timed them (attention-sdpa.json: forward + autograd backward, every kernel of it). h200_profile.py counts the first
two as element-wise: 2.07 of the b 4 step's 152.2 ms of memory-bound kernels, 0.33 of the b 1 step's 25.5.

The resolution of each kind's traced time: the kernels of one launch (the same kernel, grid and block, launched by the
same op on the same input shapes) differ from launch to launch (the SM clock moves under the power limit: the b 4
step's backward attention kernels take 2.27 ms at its start and 1.80 ms at its end); the standard error of the kind's
sum, sqrt(sum over launches of n x var), says how far the trace itself pins that sum down. A trace recorded without
shapes cannot tell one launch from another, and the resolution is not known there.

The host's time per launch: on each host thread, the time from one launch call to the next, less what a launch
spent blocked beyond the thread's median launch (a full launch queue: the host waits for the GPU there, which is
not host work). The forward runs on the Python thread, the backward on autograd's engine thread (the thread
with the most launches), the optimizer step inside its annotation.
"""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
import zlib
from dataclasses import dataclass
from typing import Any

from parcalc.errors import InputError

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
KIND_SOURCE = ("kernel names sorted as ../shared/measurements/h200-2026-11-28/h200_profile.py kind() sorts them, cuDNN's fused "
               "attention helpers (cudnn::fusion) as attention")


def kernel_kind(name: str) -> str:
    """parcalc's kind of one GPU kernel by its name: 'communication' (NCCL's kernels: ncclDevKernel_AllReduce_..., counted
    apart, not as memory-bound), 'attention', 'gemm', 'optimizer' or 'memory'."""
    n = name.lower()
    if "nccl" in n:
        return "communication"
    if any(s in n for s in ("flash", "fmha", "attention", "cudnn_generated_fort_native_sdpa", "sdpa", "cudnn::fusion")):
        return "attention"
    if any(s in n for s in ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "sm80_", "cublas", "matmul", "splitk")):
        return "gemm"
    if any(s in n for s in ("adam", "multi_tensor", "foreach")):
        return "optimizer"
    return "memory"


@dataclass(frozen=True)
class HostPhase:
    """The launches of one phase of the step on one host thread."""

    launches: int
    per_launch: float  # s of host work per launch (blocked time excluded)

    @property
    def seconds(self) -> float:
        """The phase's host work under the profiler: its launches x the work per launch."""
        return self.launches * self.per_launch


@dataclass(frozen=True)
class TraceSummary:
    kernel_seconds: dict[str, float]  # by kind
    kernels: int
    gpu_busy: float  # s: union of the kernels' intervals
    gpu_span: float  # s: first kernel start to last kernel end
    forward: HostPhase | None  # None: no host activity in the trace (profiled without ProfilerActivity.CPU)
    backward: HostPhase | None
    optimizer: HostPhase | None
    # s from the optimizer step's annotation to its first launch: its Python before any kernel (None: no annotation)
    optimizer_prelude: float | None = None
    # s by kind: the standard error of the kind's kernel time from the spread of repeated launches (launch_spread; a kind
    # missing: the trace does not identify its launches, no shapes recorded)
    kernel_error: dict[str, float] | None = None


def parse_trace(raw: bytes, path: str) -> dict[str, Any]:
    """The trace's JSON from the file's bytes (gzipped or not; parcalc.results.calibrate_trace reads the file); one-line
    errors, naming `path`, for what is not a Kineto trace."""
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (EOFError, OSError, zlib.error):
        raise InputError(f"{path}: a truncated or damaged gzip file, not a readable trace") from None
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise InputError(f"{path}: not a JSON trace (a PyTorch profiler Chrome trace, prof.export_chrome_trace)") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list: not a PyTorch profiler Chrome trace")
    return data


# One kernel longer than an hour (in the trace's microseconds) is no profiled training step's.
MAX_KERNEL_US = 3.6e9


def summarise(data: dict[str, Any], where: str = "trace") -> TraceSummary:
    """Kernels by kind and the host's time per launch of one profiled step (see the module docstring)."""
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph", "X") == "X" and _number(e.get("ts")) and _number(e.get("dur"))]
    kernels = [e for e in events if e.get("cat") in GPU_CATEGORIES]
    if not kernels:
        raise InputError(f"{where}: no CUDA kernels in the trace (profile with ProfilerActivity.CUDA)")
    for e in kernels:  # a profiler writes durations in microseconds, from 0 to at most the step (found by the review: -5 us was summed)
        if not 0 <= float(e["dur"]) <= MAX_KERNEL_US:
            raise InputError(f"{where}: kernel {str(e.get('name', '?'))[:60]!r} lasts {float(e['dur']):g} us: not a profiled kernel's duration "
                             f"(0 to {MAX_KERNEL_US:g} us)")  # fmt: skip
    seconds: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "memory": 0.0, "optimizer": 0.0, "communication": 0.0}
    for e in kernels:
        seconds[kernel_kind(str(e.get("name", "")))] += float(e["dur"]) * 1e-6
    error = launch_spread(kernels, events)
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    busy, start, end = 0.0, spans[0][0], spans[0][1]
    for s, t in spans[1:]:
        if s > end:
            busy, start, end = busy + end - start, s, t
        else:
            end = max(end, t)
    busy += end - start
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCHES
                and (e.get("tid") is None or _is_id(e.get("tid")))]  # fmt: skip
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in launches:
        by_thread.setdefault(e.get("tid"), []).append(e)
    if not by_thread:  # a trace of the GPU alone: kernels by kind, no host
        return TraceSummary(seconds, len(kernels), busy * 1e-6, (spans[-1][1] - spans[0][0]) * 1e-6, None, None, None, None, error)
    engine = max(by_thread, key=lambda tid: len(by_thread[tid]))
    backward = sorted(by_thread[engine], key=lambda e: e["ts"])
    main = sorted((e for tid, es in by_thread.items() if tid != engine for e in es), key=lambda e: e["ts"])
    step = next((e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("Optimizer.step")), None)
    forward = [e for e in main if e["ts"] < backward[0]["ts"]]
    optimizer = [e for e in main if step is not None and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
    prelude = (float(optimizer[0]["ts"]) - float(step["ts"])) * 1e-6 if step is not None and optimizer else None
    return TraceSummary(seconds, len(kernels), busy * 1e-6, (spans[-1][1] - spans[0][0]) * 1e-6, _phase(forward) if forward else None,
                        _phase(backward), _phase(optimizer) if len(optimizer) > 1 else None, prelude, error)  # fmt: skip


def launch_spread(kernels: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, float]:
    """The standard error (s) of each kind's summed kernel time: the kernels grouped by launch (name, grid, block, and
    the launching op's name and input shapes, found by the kernel's External id), sqrt(sum over groups of n x sample
    variance). A kernel launched once adds nothing (its variance is not measured: the error is a lower bound). A kind with
    a kernel whose op or shapes the trace does not hold (recorded without record_shapes) is left out: its launches cannot
    be told apart, and a GEMM's persistent kernel of one name and grid runs every shape."""
    ops: dict[Any, dict[str, Any]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and isinstance(e.get("args"), dict) and _is_id(e["args"].get("External id")):
            ops.setdefault(e["args"].get("External id"), e)
    groups: dict[tuple[str, str], list[float]] = {}
    unknown: set[str] = set()
    for e in kernels:
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = kernel_kind(str(e.get("name", "")))
        op = ops.get(args.get("External id")) if _is_id(args.get("External id")) else None
        if op is None or "Input Dims" not in op["args"]:
            unknown.add(kind)
            continue
        launch = json.dumps([e.get("name"), args.get("grid"), args.get("block"), op.get("name"), op["args"]["Input Dims"]], default=str)
        groups.setdefault((kind, launch), []).append(float(e["dur"]) * 1e-6)
    variance: dict[str, float] = {}
    for (kind, _), durations in groups.items():
        variance[kind] = variance.get(kind, 0.0) + (len(durations) * statistics.variance(durations) if len(durations) > 1 else 0.0)
    return {kind: value**0.5 for kind, value in variance.items() if kind not in unknown}


def _is_id(value: Any) -> bool:
    """A thread or correlation id as a profiler writes one (a number or a name): a list or a mapping there is no trace's
    (found by the hostile-value pass: a list as 'tid' was an internal error, unhashable as a key)."""
    return isinstance(value, (int, str))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


def _phase(launches: list[dict[str, Any]]) -> HostPhase:
    """Host work per launch over consecutive launches of one thread, blocked time beyond the median launch excluded."""
    if len(launches) < 2:
        return HostPhase(len(launches), 0.0)
    typical = statistics.median(float(e["dur"]) for e in launches)
    work = sum(max(float(b["ts"]) - float(a["ts"]) - max(float(a["dur"]) - typical, 0.0), 0.0) for a, b in itertools.pairwise(launches))
    return HostPhase(len(launches), work / (len(launches) - 1) * 1e-6)


# ---------------------------------------------------------------------------------------------
# Calibration: one factor per kind of kernel, the host's time per launch

# parcalc's kinds, the key of fit's derivation of each
KIND_KEYS = (("gemm", "t_gemm"), ("attention", "t_attention"), ("memory", "t_memory_bound"), ("optimizer", "t_optimizer"))
# A factor outside these bounds says the trace is not the step --model/--batch/--seq-len describe (or not this GPU):
# the shared H200's kinds are within 0.70-1.33 of the uncalibrated model (tests/test_trace_calibration.py)
PLAUSIBLE = (0.2, 5.0)


# A kind's model is told apart from its traced time only beyond this many standard errors of that time (launch_spread):
# the two-sided 95 % bound of a normal error (1.96, rounded), the usual line between a measured difference and noise
RESOLVED = 2.0


@dataclass(frozen=True)
class KindFit:
    """One kind's factor on the modelled rate: after = before x predicted / measured (the trace's own step), or before
    where the trace cannot tell the two apart (`kept`)."""

    kind: str
    measured: float  # s of the trace's kernels of this kind
    predicted: float  # s fit models for the same step with the base preset (its factor `before` included)
    before: float  # the base preset's factor (1: uncalibrated)
    after: float  # the calibrated factor
    resolution: float | None = None  # s: RESOLVED standard errors of `measured` (None: the trace does not say)
    kept: str = ""  # why the factor stays `before` ("": fitted)


def kind_fits(summary: TraceSummary, predicted: dict[str, float], base: Any, where: str) -> tuple[KindFit, ...]:
    """The factor of each kind (base: the base preset's KindEfficiency, None when uncalibrated). A kind the trace or the
    model has none of keeps its factor; so does one whose model is within the trace's resolution of its traced time
    (RESOLVED standard errors, launch_spread): there the trace measures no difference to correct, and a factor would
    carry the launches' noise to every other step."""
    fits = []
    errors = summary.kernel_error or {}
    for kind, key in KIND_KEYS:
        before = 1.0 if base is None else float(base.of(kind))
        measured, guess = summary.kernel_seconds[kind], float(predicted.get(key, 0.0))
        resolution = RESOLVED * errors[kind] if kind in errors else None
        kept = ""
        if not (measured > 0 and guess > 0):
            kept = "no kernels of this kind in the trace or the model"
        elif resolution is not None and abs(guess - measured) <= resolution:
            kept = f"the model is within the trace's resolution ({RESOLVED:g} standard errors of the launches' spread)"
        after = before * guess / measured if not kept else before
        if not PLAUSIBLE[0] <= after / before <= PLAUSIBLE[1]:
            raise InputError(f"{where}: its {kind} kernels take {measured * 1e3:.4g} ms, the model {guess * 1e3:.4g} ms for the step described: "
                             "not a calibration, a different step; give the traced step's --model, --batch and --seq-len")  # fmt: skip
        fits.append(KindFit(kind, measured, guess, before, after, resolution, kept))
    return tuple(fits)


@dataclass(frozen=True)
class HostFit:
    """One phase of the host: its work in the trace, that work without the profiler, fit's kernels of the phase for the
    traced step, and the host time per kernel that follows (the calibrated preset's)."""

    phase: str  # forward, backward, optimizer, optimizer_prelude
    traced: float  # s of host work in the trace (blocked launches excluded)
    slowdown: float  # the profiler's factor on it (parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN)
    count: int  # fit's kernels (parameter tensors for the prelude) of the phase in the traced step
    per_kernel: float  # s: traced / slowdown / count

    @property
    def unprofiled(self) -> float:
        return self.traced / self.slowdown


def traced_host(summary: TraceSummary, counts: dict[str, float], fallback: Any) -> tuple[HostFit, ...] | None:
    """The host's time per kernel of fit's lists, phase by phase, from the trace: the phase's host work, less the
    profiler's own share (its slowdown of that phase), over the kernels fit counts for the traced step (`counts`: fit's
    n_f, n_b, n_o, n_p of the t_host derivation). fit's lists leave out the memsets and small copies the trace launches
    too; dividing the phase's whole work by fit's count keeps the phase's host time. A phase the trace lacks keeps
    `fallback`'s (HostCosts or None) per kernel; None when the trace has no host activity and there is no fallback."""
    from parcalc.core.timing.host import PROFILED_HOST_SLOWDOWN

    phases = (("forward", summary.forward, "n_f"), ("backward", summary.backward, "n_b"), ("optimizer", summary.optimizer, "n_o"))
    if all(p is None for _, p, _ in phases) or not counts:
        return None
    known = {"forward": fallback.forward, "backward": fallback.backward, "optimizer": fallback.optimizer,
             "optimizer_prelude": fallback.prelude} if fallback is not None else {}  # fmt: skip
    fits = []
    for name, phase, key in phases:
        count = int(counts.get(key, 0))
        if phase is not None and phase.launches > 1 and count > 0:
            slowdown = PROFILED_HOST_SLOWDOWN.get(name, 1.0)
            fits.append(HostFit(name, phase.seconds, slowdown, count, phase.seconds / slowdown / count))
        elif name in known:
            fits.append(HostFit(name, 0.0, 1.0, count, known[name]))
        else:
            return None
    tensors = int(counts.get("n_p", 0))
    if summary.optimizer_prelude is not None and tensors > 0:
        fits.append(HostFit("optimizer_prelude", summary.optimizer_prelude, 1.0, tensors, summary.optimizer_prelude / tensors))
    else:
        fits.append(HostFit("optimizer_prelude", 0.0, 1.0, tensors, known.get("optimizer_prelude", 0.0)))
    return tuple(fits)


def _five(value: float) -> float:
    return float(f"{value:.5g}")


def calibrated_document(base: dict[str, Any], fits: tuple[KindFit, ...], host: tuple[HostFit, ...] | None, display: str,
                        source: str, where: str, clock: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The base GPU preset with `kernels.calibrated` (one factor per kind) and the host's `host:` from the trace, every
    number citing `source` (key `trace_calibration`); `clock` (Hz): the SM clock fit gave the traced step's GEMMs."""
    import copy

    if not isinstance(base.get("kernels"), dict):
        raise InputError(f"{where}: the --gpu preset has no kernels section (measured kernel rates) to calibrate; start from one that has "
                         "(e.g. --gpu h200)")  # fmt: skip
    document = copy.deepcopy(base)
    document["name"] = display
    document["sources"] = {**document.get("sources", {}), "trace_calibration": source}
    note = ", ".join(f"{f.kind} {f.predicted * 1e3:.4g} ms modelled / {f.measured * 1e3:.4g} ms traced" + (" (kept: within the trace's "
                     f"resolution, {f.resolution * 1e3:.3g} ms)" if f.kept and f.resolution is not None else " (kept)" if f.kept else "")
                     for f in fits)  # fmt: skip
    if clock:
        note += f"; GEMMs at the traced step's SM clock under the power limit, {clock / 1e6:.1f} MHz (parcalc.core.timing.step_clock)"
    document["kernels"]["calibrated"] = {**{f.kind: _five(f.after) for f in fits}, "source": "trace_calibration", "note": note}
    if host is not None:
        per = {f.phase: f.per_kernel for f in host}
        document["host"] = {"forward": f"{_five(per['forward'] * 1e6)} us", "backward": f"{_five(per['backward'] * 1e6)} us",
                            "optimizer": f"{_five(per['optimizer'] * 1e6)} us",
                            "optimizer_prelude": f"{_five(per['optimizer_prelude'] * 1e6)} us", "source": "trace_calibration",
                            "note": "host time per kernel of fit's lists: the trace's host work of each phase (blocked launches excluded), "
                                    "less the profiler's share (parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN), over fit's kernels of "
                                    "the phase; the optimizer's Python per parameter tensor before its first launch; replaces the "
                                    "framework profile's"}  # fmt: skip
    notes = list(document.get("notes", []))
    notes.append("Calibrated from a profiler trace: each kind of kernel (GEMMs, attention, memory-bound, optimizer) runs at its own "
                 "factor of the modelled rate, measured on that kind's kernels only; collectives, the power limit and the "
                 "shapes' own model are untouched (docs/calibrate-trace.md).")  # fmt: skip
    document["notes"] = notes
    return document
