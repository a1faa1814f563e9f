"""Building a command's flags must not load the math, the presets' YAML or the renderers: a
one-liner pays only for what it runs. The flags' choices come from parcalc.core.choices, which
imports nothing, so the CLI and the core cannot drift apart."""

import subprocess
import sys

import pytest

from parcalc.cli import COMMANDS

HEAVY = ("parcalc.core.comm", "parcalc.core.collectives", "parcalc.core.memory", "parcalc.core.activations",
         "parcalc.core.flops", "parcalc.core.pipeline", "parcalc.core.model", "parcalc.presets", "yaml", "jinja2",
         "parcalc.render.terminal")  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_loading_a_command_imports_no_core_module(name: str) -> None:
    script = f"""
import sys
from parcalc.cli import load_command
load_command({name!r})
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"`parcalc {name}` imports {out} before it runs"


def test_building_a_command_reads_its_parameters_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """parcalc.cli._get_command: typer reads a command function's parameters twice (typer/main.py,
    get_command_from_info); the second read is served from the first (start-up time)."""
    import typer.main

    from parcalc.cli import load_command

    calls: list[str] = []
    real = typer.main.get_params_from_function

    def counting(function):
        calls.append(function.__name__)
        return real(function)

    monkeypatch.setattr(typer.main, "get_params_from_function", counting)
    command = load_command("comm-volume")
    assert calls == ["comm_volume"]
    assert typer.main.get_params_from_function is counting  # put back as it was
    names = {p.name for p in command.params}
    assert {"strategy", "model", "batch", "seq_len", "tp", "pp", "dp"} <= names and len(names) > 40
