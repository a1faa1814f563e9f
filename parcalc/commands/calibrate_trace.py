"""`parcalc calibrate trace TRACE.json[.gz]`: a PyTorch profiler (Kineto) Chrome trace of one's own training step,
its GPU kernels by parcalc's kinds of work and the host's time per launch, beside what `fit` predicts for the same
step (--model ... on one GPU) kind by kind (parcalc.core.calibrate.trace).

Registered on `parcalc calibrate` by parcalc.commands.calibrate (which imports this module at its end: no circle).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


class ReportFormat(str, Enum):
    """--format of `calibrate trace`, as of calibrate's other subcommands."""

    TEXT = "text"
    JSON = "json"

TRACE_EXAMPLES = """\
\b
Examples:
  parcalc calibrate trace tests/fixtures/h200/trace-llama1b-b4-s4096.json.gz
  parcalc calibrate trace tests/fixtures/h200/trace-llama1b-b4-s4096.json.gz --model tests/fixtures/h200/llama3.2-1b.json \\
      --gpu h200 --framework hf --batch 4 --seq-len 4096
"""

Text = Optional[str]  # noqa: UP045 - typer needs Optional at runtime on 3.11
KIND_LABELS = (("gemm", "t_gemm", "GEMMs"), ("attention", "t_attention", "attention"), ("memory", "t_memory_bound", "memory-bound"),
               ("optimizer", "t_optimizer", "optimizer"))  # fmt: skip


def trace(
    file: Annotated[str, typer.Argument(metavar="TRACE", help="A PyTorch profiler Chrome trace of one training step (prof.export_chrome_trace; .json or .json.gz).")],
    model: Annotated[Text, typer.Option(metavar="NAME|config.json", help="The traced model (a preset or a Hugging Face config.json): fit's prediction of the same step beside the trace's.", show_default=False)] = None,
    gpu: Annotated[Text, typer.Option(metavar="NAME", help="The GPU preset of the traced GPU (with --model).", show_default=False)] = None,
    framework: Annotated[Text, typer.Option(metavar="NAME", help="The framework profile of the traced run (with --model; default fit's).", show_default=False)] = None,
    batch: Annotated[Text, typer.Option("--batch", metavar="b", help="Sequences in the traced step (one micro-batch, with --model).", show_default=False)] = None,
    seq_len: Annotated[Text, typer.Option("--seq-len", metavar="s", help="Sequence length of the traced step (with --model).", show_default=False)] = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", metavar="FORMAT", help="text (default) or json.")] = ReportFormat.TEXT,
) -> None:
    """Kernels of a traced step by kind (GEMMs, attention, memory-bound, optimizer), the GPU's busy time and the host's
    time per kernel launch; with --model, fit's prediction of the same step (one GPU) kind by kind."""
    from parcalc.core.calibrate.trace import KIND_SOURCE, read_trace, summarise
    from parcalc.derivation import Column, Result, Table
    from parcalc.errors import InputError

    if model is None and any(v is not None for v in (gpu, framework, batch, seq_len)):
        raise InputError("--gpu, --framework, --batch, --seq-len: describe the traced step for --model's prediction; give --model too")
    from parcalc.files import check_name_length

    if not file.strip():
        raise InputError("TRACE: give the trace file (a .json or .json.gz of prof.export_chrome_trace)")
    path = Path(file)
    check_name_length(path, "TRACE")  # a 300-byte name was ENAMETOOLONG, an internal error
    if path.is_dir():
        raise InputError(f"{file}: is a directory, not a trace")
    if not path.exists():
        raise InputError(f"{file}: no such file")
    import stat

    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO without a writer would block the read for ever
        raise InputError(f"{file}: not a regular file (a trace is a .json or .json.gz file)")
    summary = summarise(read_trace(path), file)
    predicted: dict[str, Any] = {}
    if model is not None:
        from parcalc.results.run import run_command

        inputs = {"model": model, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "recompute": ["none"], "flash_attention": True,
                  **({"gpu": gpu} if gpu else {}), **({"framework": framework} if framework else {}),
                  **({"batch": batch, "micro_batch": batch} if batch else {}), **({"seq_len": seq_len} if seq_len else {})}  # fmt: skip
        fitted = run_command("fit", inputs, "calibrate trace --model")
        predicted = {d.key: d.value for d in fitted.derivations}
    rows = []
    for kind, key, label in KIND_LABELS:
        measured = summary.kernel_seconds[kind]
        guess = predicted.get(key)
        rows.append((label, measured, guess, (guess / measured - 1) if guess is not None and measured else None))
    rows.append(("GPU busy", summary.gpu_busy, None, None))
    if "t_step" in predicted:
        rows.append(("step (GPU span)", summary.gpu_span, predicted["t_step"], predicted["t_step"] / summary.gpu_span - 1))
    table = Table("kinds", f"Kernel time by kind: {file} ({summary.kernels:,} kernels)",
                  (Column("kind", "kind"), Column("measured", "measured", "s"), Column("predicted", "predicted (fit)", "s"),
                   Column("error", "predicted / measured - 1", "fraction")), tuple(rows))  # fmt: skip
    host = [(name, phase) for name, phase in (("forward", summary.forward), ("backward", summary.backward), ("optimizer", summary.optimizer))
            if phase is not None]  # fmt: skip
    host_table = Table("host", "Host time per kernel launch (blocked launches excluded)",
                       (Column("phase", "phase"), Column("launches", "launches"), Column("per_launch", "per launch", "s")),
                       tuple((name, phase.launches, phase.per_launch) for name, phase in host))  # fmt: skip
    verdicts = [f"GPU busy {summary.gpu_busy / summary.gpu_span:.1%} of the span of its kernels"]
    result = Result(command="calibrate trace", title=f"Trace: {file}", inputs=(), derivations=(), settings=(("file", file),), tables=(table, host_table) if host else (table,),
                    verdicts=tuple(verdicts),
                    assumptions=(KIND_SOURCE, "the profiler's own per-op cost is in the host times (an upper bound)"))  # fmt: skip
    from parcalc.output import OutputFormat, render_text

    if fmt is ReportFormat.JSON:
        import json
        import sys

        from parcalc.render.json_out import result_record

        sys.stdout.write(json.dumps(result_record(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        typer.echo(render_text(result, OutputFormat.TABLE), nl=False)
