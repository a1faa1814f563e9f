"""`parcalc calibrate trace TRACE.json[.gz]`: a PyTorch profiler (Kineto) Chrome trace of one's own training step,
its GPU kernels by parcalc's kinds of work and the host's time per launch, beside what `fit` predicts for the same
step (--model ... on one GPU) kind by kind; with -o FILE.yaml, a GPU preset calibrated from it: one factor per kind
of kernel and the host's time per launch (parcalc.core.calibrate.trace, docs/calibrate-trace.md).

Registered on `parcalc calibrate` by parcalc.commands.calibrate (which imports this module at its end: no circle).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from parcalc.commands.common import PresetsOption


class ReportFormat(str, Enum):
    """--format of `calibrate trace`, as of calibrate's other subcommands."""

    TEXT = "text"
    JSON = "json"

TRACE_EXAMPLES = """\
\b
Examples:
  parcalc calibrate trace tests/fixtures/h200/trace-llama1b-b4-s4096.json.gz
  parcalc calibrate trace tests/fixtures/h200/trace-llama1b-b4-s4096.json.gz --model tests/fixtures/h200/llama3.2-1b.json \\
      --gpu h200 --framework hf --batch 4 --seq-len 4096 -o presets/gpus/my-h200.yaml    # then: fit --presets presets --gpu my-h200
"""

Text = Optional[str]  # noqa: UP045 - typer needs Optional at runtime on 3.11
PRESET_SUFFIXES = (".yaml", ".yml")


def trace(
    file: Annotated[str, typer.Argument(metavar="TRACE", help="A PyTorch profiler Chrome trace of one training step (prof.export_chrome_trace; .json or .json.gz).")],
    model: Annotated[Text, typer.Option(metavar="NAME|config.json", help="The traced model (a preset or a Hugging Face config.json): fit's prediction of the same step beside the trace's.", show_default=False)] = None,
    gpu: Annotated[Text, typer.Option(metavar="NAME", help="The GPU preset of the traced GPU (with --model); -o FILE.yaml starts from it.", show_default=False)] = None,
    framework: Annotated[Text, typer.Option(metavar="NAME", help="The framework profile of the traced run (with --model; default fit's).", show_default=False)] = None,
    batch: Annotated[Text, typer.Option("--batch", metavar="b", help="Sequences in the traced step (one micro-batch, with --model).", show_default=False)] = None,
    seq_len: Annotated[Text, typer.Option("--seq-len", metavar="s", help="Sequence length of the traced step (with --model).", show_default=False)] = None,
    fmt: Annotated[Optional[ReportFormat], typer.Option("--format", "-f", metavar="FORMAT", help="text (default) or json; with -o, the file's extension when not given.", show_default=False)] = None,  # noqa: UP045
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="FILE.yaml: write the GPU preset calibrated from the trace (with --model and --gpu; all or nothing); another extension (.json, .txt, .md): write the report there.", show_default=False)] = None,  # noqa: UP045
    force: Annotated[bool, typer.Option("--force", help="Replace -o FILE.yaml if it exists.")] = False,
    name: Annotated[Text, typer.Option("--name", metavar="NAME", help="The calibrated preset's display name (its lookup name is the file's).", show_default=False)] = None,
    presets: PresetsOption = None,
) -> None:
    """Kernels of a traced step by kind (GEMMs, attention, memory-bound, optimizer), the GPU's busy time and the host's
    time per kernel launch; with --model, fit's prediction of the same step (one GPU) kind by kind; with --gpu, the
    factor each kind's modelled rate needs, and -o FILE.yaml writes them into a GPU preset that fit then uses."""
    from parcalc.core.calibrate.trace import read_trace, summarise
    from parcalc.errors import InputError

    if model is None and any(v is not None for v in (gpu, framework, batch, seq_len)):
        raise InputError("--gpu, --framework, --batch, --seq-len: describe the traced step for --model's prediction; give --model too")
    preset = output is not None and output.suffix.lower() in PRESET_SUFFIXES
    if preset and (model is None or gpu is None):
        raise InputError("-o FILE.yaml: a calibrated GPU preset needs the traced step (--model, --batch, --seq-len) and the GPU to start from (--gpu)")
    if (force or name is not None) and not preset:
        raise InputError(f"{'--force' if force else '--name'}: for the calibrated preset (-o FILE.yaml)")
    if output is not None and not preset:  # the report to -o (a preset is checked below, with --force)
        from parcalc.output import check_writable

        check_writable(output)
    path = _trace_path(file)
    if preset:
        from parcalc.results.preset_yaml import check_preset_output

        check_preset_output(output, force, "gpus")
    summary = summarise(read_trace(path), file)
    predicted: dict[str, Any] = {}
    fits: tuple[Any, ...] = ()
    host = base_host = None
    if model is not None:
        from parcalc.results.run import run_command

        inputs = {"model": model, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "recompute": ["none"], "flash_attention": True,
                  **({"gpu": gpu} if gpu is not None else {}), **({"framework": framework} if framework is not None else {}),
                  **({"batch": batch, "micro_batch": batch} if batch is not None else {}),
                  **({"seq_len": seq_len} if seq_len is not None else {}),
                  **({"presets": presets} if presets else {})}  # fmt: skip
        fitted = run_command("fit", inputs, "calibrate trace --model")
        predicted = {d.key: d.value for d in fitted.derivations}
    if model is not None and gpu is not None:
        fits, host, base_host, document = _calibration(file, summary, predicted, model, gpu, framework, batch, seq_len, name, presets)
    from parcalc.results.calibrate_trace import trace_result

    result = trace_result(file, summary, predicted, fits, host, base_host)
    if preset:
        _write_preset(result, document, output, fmt, file)  # type: ignore[arg-type]
        return
    from parcalc.output import OutputFormat, emit

    chosen = None if fmt is None else OutputFormat.JSON if fmt is ReportFormat.JSON else OutputFormat.TABLE
    emit(result, chosen, output)


def _trace_path(file: str) -> Path:
    """TRACE as a regular file's path; one line for what is not one."""
    import stat

    from parcalc.errors import InputError
    from parcalc.files import check_name_length

    if not file.strip():
        raise InputError("TRACE: give the trace file (a .json or .json.gz of prof.export_chrome_trace)")
    path = Path(file)
    check_name_length(path, "TRACE")  # a 300-byte name was ENAMETOOLONG, an internal error
    if path.is_dir():
        raise InputError(f"{file}: is a directory, not a trace")
    if not path.exists():
        raise InputError(f"{file}: no such file")
    if not stat.S_ISREG(path.stat().st_mode):  # a FIFO without a writer would block the read for ever
        raise InputError(f"{file}: not a regular file (a trace is a .json or .json.gz file)")
    return path


def _calibration(file: str, summary: Any, predicted: dict[str, Any], model: str, gpu: str, framework: str | None, batch: str | None,
                 seq_len: str | None, name: str | None, presets: Any) -> tuple[Any, ...]:  # fmt: skip
    """(the kinds' factors, the host per launch, the base's host costs, the calibrated preset's document)."""
    import time

    from parcalc import __version__
    from parcalc.commands.common import preset_dirs
    from parcalc.core.calibrate.trace import calibrated_document, kind_fits, traced_host
    from parcalc.preset_files import Category, find
    from parcalc.preset_hardware import gpu_from_document
    from parcalc.presets import load_framework
    from parcalc.strict_yaml import read_yaml

    dirs = preset_dirs(presets)
    found = find(Category.GPUS, gpu, dirs)
    base = read_yaml(found.path)
    typed = gpu_from_document(found.key, found.path, base)
    profile = load_framework(framework or "megatron", dirs)
    base_host = typed.host if typed.host is not None else profile.host
    fits = kind_fits(summary, predicted, typed.kernels.calibrated if typed.kernels is not None else None, file)
    host = traced_host(summary, base_host)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    step = f"{Path(model).name}, b {batch or 'fit default'}, s {seq_len or 'fit default'}, framework {profile.key}"
    source = (f"calibrated by parcalc {__version__} calibrate trace from {Path(file).name} ({summary.kernels:,} kernels; {step}), {when}: "
              "each kind's factor = the base preset's x modelled / traced kernel time of that kind; host = the trace's time per launch, "
              "blocked launches excluded (parcalc.core.calibrate.trace)")  # fmt: skip
    display = name or f"{typed.name}, calibrated from {Path(file).name}"
    document = calibrated_document(base, fits, host, display, source, file)
    return fits, host, base_host, document


def _write_preset(result: Any, document: dict[str, Any], output: Path, fmt: ReportFormat | None, trace_file: str) -> None:
    """The preset to -o (validated as --presets reads it, all or nothing), the report to stdout."""
    import sys
    from dataclasses import replace

    from parcalc.files import write_atomically
    from parcalc.output import OutputFormat, render_text
    from parcalc.results.preset_yaml import validated_preset

    key = output.stem.lower()
    text, _ = validated_preset(document, key, output, "gpus", f"GPU preset made by parcalc calibrate trace from {Path(trace_file).name}")
    folder = output.parent
    use = (f"use it: parcalc fit --presets {folder.parent} --gpu {key} ..." if folder.name.lower() == "gpus"
           else f"use it: move it to DIR/gpus/{output.name}, then parcalc fit --presets DIR --gpu {key} ...")  # fmt: skip
    result = replace(result, verdicts=(*result.verdicts, use))
    write_atomically(output, text)
    if fmt is ReportFormat.JSON:
        import json

        from parcalc.render.json_out import result_record

        sys.stdout.write(json.dumps({**result_record(result), "preset": document, "output": str(output)}, indent=2, ensure_ascii=False,
                                    allow_nan=False) + "\n")  # fmt: skip
    else:
        sys.stdout.write(render_text(result, OutputFormat.TABLE))
    sys.stdout.flush()
    print(f"wrote {output}", file=sys.stderr)
