"""`parcalc calibrate trace`'s Result: a traced step's kernels by kind beside fit's prediction, the host's time per
launch, and (with --model and --gpu) the calibration each kind gets (parcalc.core.calibrate.trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parcalc.core.calibrate.trace import KIND_KEYS, KIND_SOURCE
from parcalc.derivation import Column, Result, Table

# the kinds of parcalc.core.calibrate.trace.KIND_KEYS, as the tables name them
_LABELS = {"gemm": "GEMMs", "attention": "attention", "memory": "memory-bound", "optimizer": "optimizer"}
KIND_LABELS = tuple((kind, key, _LABELS[kind]) for kind, key in KIND_KEYS)


def trace_result(file: str, summary: Any, predicted: dict[str, float], fits: tuple[Any, ...] = (),
                 host: tuple[Any, ...] | None = None, base_host: Any = None) -> Result:  # fmt: skip
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
        tables.append(Table("calibration", "Calibration: each kind's factor on the modelled rate (modelled / traced kernel time, fitted "
                            "where the difference is beyond the trace's resolution: 2 standard errors of the launches' spread)",
                            (Column("kind", "kind"), Column("measured", "traced", "s"), Column("predicted", "modelled", "s"),
                             Column("resolution", "resolution", "s"), Column("before", "before"), Column("after", "after")),
                            tuple((labels[f.kind], f.measured, f.predicted, f.resolution, f.before, f.after) for f in fits)))  # fmt: skip
        if host is not None:
            tables.append(_host_table(host, base_host))
        fitted = [f for f in fits if not f.kept]
        verdicts.append("calibrated: " + (", ".join(f"{labels[f.kind]} x{f.after:.4g}" for f in fitted) or "nothing") + " on the modelled rates"
                        + "".join(f"; {labels[f.kind]} kept at x{f.after:.4g}: {f.kept}" for f in fits if f.kept))  # fmt: skip
        if "clock.f_SM" in predicted and any(f.kind == "gemm" and not f.kept for f in fits):
            verdicts.append(f"the GEMM factor is the traced step's rate at the SM clock fit gives it, {predicted['clock.f_SM'] / 1e6:.1f} MHz "
                            "(parcalc.core.timing.step_clock): fit times every step's GEMMs at its own clock, then applies it; so is the "
                            "memory-bound factor where the GPU's element paths follow the clock (kernels.element_clock); attention's "
                            "and the optimizer's carry no clock (docs/calibrate-trace.md)")  # fmt: skip
    return Result(command="calibrate trace", title=f"Trace: {file}", inputs=(), derivations=(), settings=(("file", file),),
                  tables=tuple(tables), verdicts=tuple(verdicts),
                  assumptions=(KIND_SOURCE, "the host times per launch are the profiled run's: the profiler's own per-op cost is in "
                                            "them; the calibration takes it out (parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN)"))  # fmt: skip


def _host_table(host: tuple[Any, ...], base_host: Any) -> Table:
    """The host phase by phase: its work in the trace, without the profiler (measured), fit's prediction of it before the
    calibration (fit's kernels x the base's host time per kernel), and the time per kernel before and after."""
    before = {"forward": base_host.forward, "backward": base_host.backward, "optimizer": base_host.optimizer,
              "optimizer_prelude": base_host.prelude} if base_host is not None else {}  # fmt: skip
    labels = {"optimizer_prelude": "optimizer's Python"}
    rows = tuple((labels.get(f.phase, f.phase), f.traced, f.unprofiled, f.count * before[f.phase] if f.phase in before else None, f.per_kernel)
                 for f in host)  # fmt: skip
    slowdown = ", ".join(f"{f.phase} / {f.slowdown:g}" for f in host if f.slowdown != 1)
    return Table("host_calibration", f"Calibration: the host phase by phase; measured = traced less the profiler's share ({slowdown}), "
                 "predicted = fit before the calibration; per kernel of fit's lists after it",
                 (Column("phase", "phase"), Column("traced", "traced", "s"), Column("measured", "measured", "s"),
                  Column("predicted", "predicted", "s"), Column("after", "per kernel", "s")), rows)  # fmt: skip


# A profiled step's Chrome trace: the shared H200 steps' are about 0.5 MB gzipped (tests/fixtures/h200); a step of a large
# model profiled with shapes and stacks runs to hundreds of MB of JSON. More than this is not one step's trace.
MAX_TRACE_BYTES = 1 << 30


def check_flags(*, model: str | None, gpu: str | None, framework: str | None, batch: str | None, seq_len: str | None, preset: bool) -> None:
    """The flags that describe the traced step go together: with --model, and -o FILE.yaml needs --model and --gpu."""
    from parcalc.errors import InputError

    if model is None and any(v is not None for v in (gpu, framework, batch, seq_len)):
        raise InputError("--gpu, --framework, --batch, --seq-len: describe the traced step for --model's prediction; give --model too")
    if preset and (model is None or gpu is None):
        raise InputError("-o FILE.yaml: a calibrated GPU preset needs the traced step (--model, --batch, --seq-len) and the GPU to start from (--gpu)")


def read_trace_file(file: str) -> dict[str, Any]:
    """TRACE's JSON, read through parcalc.files.read_regular: a directory, a FIFO, a device or a file over
    MAX_TRACE_BYTES is one line, not a hang or a traceback."""
    from parcalc.core.calibrate.trace import parse_trace
    from parcalc.errors import InputError
    from parcalc.files import NotRegularFileError, TooLargeError, check_name_length, read_regular

    if not file.strip():
        raise InputError("TRACE: give the trace file (a .json or .json.gz of prof.export_chrome_trace)")
    path = Path(file)
    check_name_length(path, "TRACE")  # a 300-byte name was ENAMETOOLONG, an internal error
    try:
        raw = read_regular(path, MAX_TRACE_BYTES)
    except IsADirectoryError:
        raise InputError(f"{file}: is a directory, not a trace") from None
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{file}: no such file") from None
    except NotRegularFileError:  # a FIFO without a writer would block the read for ever
        raise InputError(f"{file}: not a regular file (a trace is a .json or .json.gz file)") from None
    except TooLargeError as error:
        raise InputError(f"{file}: too large for one step's trace: {error}") from None
    except OSError as error:
        raise InputError(f"{file}: cannot read it ({error.strerror or error})") from None
    return parse_trace(raw, str(path))


def from_flags(file: str, trace: dict[str, Any], predicted: dict[str, float], *, model: str | None = None, gpu: str | None = None, framework: str | None = None,
               batch: str | None = None, seq_len: str | None = None, name: str | None = None,
               presets: Any = None) -> tuple[Result, dict[str, Any] | None]:  # fmt: skip
    """The report of the trace (read_trace_file) beside fit's prediction of the same step (`predicted`: fit's derivations
    by key, run by the command with --model; empty without), and with --gpu the calibrated GPU preset's document (None
    without)."""
    from parcalc.core.calibrate.trace import summarise

    summary = summarise(trace, file)
    fits: tuple[Any, ...] = ()
    host = base_host = document = None
    if model is not None and gpu is not None:
        fits, host, base_host, document = _calibration(file, summary, predicted, model, gpu, framework, batch, seq_len, name, presets)
    return trace_result(file, summary, predicted, fits, host, base_host), document


def _calibration(file: str, summary: Any, predicted: dict[str, Any], model: str, gpu: str, framework: str | None, batch: str | None,
                 seq_len: str | None, name: str | None, presets: Any) -> tuple[Any, ...]:  # fmt: skip
    """(the kinds' factors, the host per launch, the base's host costs, the calibrated preset's document)."""
    import time

    from parcalc import __version__
    from parcalc.core.calibrate.trace import calibrated_document, kind_fits, traced_host
    from parcalc.preset_files import Category, find
    from parcalc.preset_hardware import gpu_from_document
    from parcalc.presets import load_framework
    from parcalc.results.parse import preset_dirs
    from parcalc.strict_yaml import read_yaml

    dirs = preset_dirs(presets)
    found = find(Category.GPUS, gpu, dirs)
    base = read_yaml(found.path)
    typed = gpu_from_document(found.key, found.path, base)
    profile = load_framework(framework or "megatron", dirs)
    base_host = typed.host if typed.host is not None else profile.host
    fits = kind_fits(summary, predicted, typed.kernels.calibrated if typed.kernels is not None else None, file)
    host = traced_host(summary, {k.removeprefix("host."): v for k, v in predicted.items() if k.startswith("host.")}, base_host)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    step = f"{Path(model).name}, b {batch or 'fit default'}, s {seq_len or 'fit default'}, framework {profile.key}"
    source = (f"calibrated by parcalc {__version__} calibrate trace from {Path(file).name} ({summary.kernels:,} kernels; {step}), {when}: "
              "each kind's factor = the base preset's x modelled / traced kernel time of that kind (the base's where the model is within "
              "2 standard errors of the launches' spread); host = the trace's host work of each "
              "phase, blocked launches excluded, less the profiler's share, over fit's kernels of the phase (parcalc.core.calibrate.trace)")  # fmt: skip
    display = name or f"{typed.name}, calibrated from {Path(file).name}"
    document = calibrated_document(base, fits, host, display, source, file, predicted.get("clock.f_SM"))
    return fits, host, base_host, document


