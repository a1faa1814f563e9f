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
    from parcalc.errors import InputError
    from parcalc.results.calibrate_trace import check_flags, from_flags, read_trace_file

    preset = output is not None and output.suffix.lower() in PRESET_SUFFIXES
    check_flags(model=model, gpu=gpu, framework=framework, batch=batch, seq_len=seq_len, preset=preset)
    if (force or name is not None) and not preset:
        raise InputError(f"{'--force' if force else '--name'}: for the calibrated preset (-o FILE.yaml)")
    if output is not None and not preset:  # the report to -o (a preset is checked below, with --force)
        from parcalc.files import check_writable

        check_writable(output)
    # the prediction first: a bad --model / --batch / --seq-len is one line at once, not after seconds of reading a large trace
    predicted = _predicted(model, gpu, framework, batch, seq_len, presets) if model is not None else {}
    trace_data = read_trace_file(file)
    if preset:
        from parcalc.results.preset_yaml import check_preset_output

        check_preset_output(output, force, "gpus")
    result, document = from_flags(file, trace_data, predicted, model=model, gpu=gpu, framework=framework, batch=batch, seq_len=seq_len, name=name,
                                  presets=presets)  # fmt: skip
    if preset:
        _write_preset(result, document, output, fmt, file)  # type: ignore[arg-type]
        return
    from parcalc.output import OutputFormat, emit

    chosen = None if fmt is None else OutputFormat.JSON if fmt is ReportFormat.JSON else OutputFormat.TABLE
    emit(result, chosen, output)


def _predicted(model: str, gpu: str | None, framework: str | None, batch: str | None, seq_len: str | None, presets: Any) -> dict[str, float]:
    """fit's prediction of the traced step on one GPU, its derivations by key (run as the library runs a command)."""
    from parcalc.results.run import run_command

    inputs = {"model": model, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "recompute": ["none"], "flash_attention": True,
              **({"gpu": gpu} if gpu is not None else {}), **({"framework": framework} if framework is not None else {}),
              **({"batch": batch, "micro_batch": batch} if batch is not None else {}),
              **({"seq_len": seq_len} if seq_len is not None else {}),
              **({"presets": presets} if presets else {})}  # fmt: skip
    fitted = run_command("fit", inputs, "calibrate trace --model")
    host = next((d for d in fitted.derivations if d.key == "t_host"), None)  # its kernel counts: what the host's costs multiply
    counts = {f"host.{t.key}": t.value for t in host.inputs if t.key in ("n_f", "n_b", "n_o", "n_p")} if host is not None else {}
    # the SM clock fit timed the step's GEMMs at (parcalc.core.timing.step_clock): the GEMM factor is a rate at that clock
    gemm = next((d for d in fitted.derivations if d.key == "t_gemm"), None)
    f_sm = next((t.value for t in gemm.inputs if t.key == "f_SM"), None) if gemm is not None else None
    clock = {"clock.f_SM": f_sm} if f_sm is not None else {}
    return {d.key: d.value for d in fitted.derivations} | counts | clock


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

        from parcalc.derivation import result_record

        sys.stdout.write(json.dumps({**result_record(result), "preset": document, "output": str(output)}, indent=2, ensure_ascii=False,
                                    allow_nan=False) + "\n")  # fmt: skip
    else:
        sys.stdout.write(render_text(result, OutputFormat.TABLE))
    sys.stdout.flush()
    print(f"wrote {output}", file=sys.stderr)
