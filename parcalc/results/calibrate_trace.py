"""`parcalc calibrate trace`'s Result: a traced step's kernels by kind beside fit's prediction, the host's time per
launch, and (with --model and --gpu) the calibration each kind gets (parcalc.core.calibrate.trace)."""

from __future__ import annotations

from typing import Any

from parcalc.core.calibrate.trace import KIND_KEYS, KIND_SOURCE
from parcalc.derivation import Column, Result, Table

# the kinds of parcalc.core.calibrate.trace.KIND_KEYS, as the tables name them
_LABELS = {"gemm": "GEMMs", "attention": "attention", "memory": "memory-bound", "optimizer": "optimizer"}
KIND_LABELS = tuple((kind, key, _LABELS[kind]) for kind, key in KIND_KEYS)


def trace_result(file: str, summary: Any, predicted: dict[str, float], fits: tuple[Any, ...] = (),
                 host: tuple[float, float, float] | None = None, base_host: Any = None) -> Result:  # fmt: skip
    """The report: kernel time by kind (measured, predicted, error), the host per launch, the calibration's factors."""
    rows: list[tuple[object, ...]] = []
    for kind, key, label in KIND_LABELS:
        measured = summary.kernel_seconds[kind]
        guess = predicted.get(key)
        rows.append((label, measured, guess, (guess / measured - 1) if guess is not None and measured else None))
    if summary.kernel_seconds["communication"]:  # NCCL kernels run beside compute: their time is not fit's exposed time
        rows.append(("communication (NCCL)", summary.kernel_seconds["communication"], None, None))
    rows.append(("GPU busy", summary.gpu_busy, None, None))
    if "t_step" in predicted:
        rows.append(("step (GPU span)", summary.gpu_span, predicted["t_step"], predicted["t_step"] / summary.gpu_span - 1))
    tables = [Table("kinds", f"Kernel time by kind: {file} ({summary.kernels:,} kernels)",
                    (Column("kind", "kind"), Column("measured", "measured", "s"), Column("predicted", "predicted (fit)", "s"),
                     Column("error", "predicted / measured - 1", "fraction")), tuple(rows))]  # fmt: skip
    phases = [(name, phase) for name, phase in (("forward", summary.forward), ("backward", summary.backward), ("optimizer", summary.optimizer))
              if phase is not None]  # fmt: skip
    if phases:
        tables.append(Table("host", "Host time per kernel launch (blocked launches excluded)",
                            (Column("phase", "phase"), Column("launches", "launches"), Column("per_launch", "per launch", "s")),
                            tuple((name, phase.launches, phase.per_launch) for name, phase in phases)))  # fmt: skip
    verdicts = [f"GPU busy {summary.gpu_busy / summary.gpu_span:.1%} of the span of its kernels"]
    if fits:
        labels = {kind: label for kind, _, label in KIND_LABELS}
        tables.append(Table("calibration", "Calibration: each kind's factor on the modelled rate (modelled / traced kernel time)",
                            (Column("kind", "kind"), Column("measured", "traced", "s"), Column("predicted", "modelled", "s"),
                             Column("before", "factor before"), Column("after", "factor after")),
                            tuple((labels[f.kind], f.measured, f.predicted, f.before, f.after) for f in fits)))  # fmt: skip
        if host is not None:
            before = (base_host.forward, base_host.backward, base_host.optimizer) if base_host is not None else (None, None, None)
            tables.append(Table("host_calibration", "Calibration: the host's time per launch",
                                (Column("phase", "phase"), Column("before", "before", "s"), Column("after", "after", "s")),
                                tuple(zip(("forward", "backward", "optimizer"), before, host, strict=True))))  # fmt: skip
        verdicts.append("calibrated: " + ", ".join(f"{labels[f.kind]} x{f.after:.4g}" for f in fits) + " on the modelled rates")
    return Result(command="calibrate trace", title=f"Trace: {file}", inputs=(), derivations=(), settings=(("file", file),),
                  tables=tuple(tables), verdicts=tuple(verdicts),
                  assumptions=(KIND_SOURCE, "the profiler's own per-op cost is in the host times (an upper bound)"))  # fmt: skip
