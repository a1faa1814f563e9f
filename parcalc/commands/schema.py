"""`parcalc schema COMMAND`: the JSON Schema of a command's `--format json` (parcalc/schemas)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

EXAMPLES = """\
\b
Examples:
  parcalc schema memory
  parcalc schema "presets list"
  parcalc schema                      # the commands that have one
  parcalc memory --model llama3-8b --gpu h100-sxm5 -f json | jq '.fits, .settings.zero'
"""


def schema(
    command: Annotated[Optional[str], typer.Argument(metavar="COMMAND", help="A command with JSON output, e.g. memory, fit, \"presets list\" (or presets-list).", show_default=False)] = None,  # noqa: UP045
) -> None:
    """Print the JSON Schema (draft 2020-12) of a command's --format json: the envelope every command
    shares (schema_version, command, fits, settings, inputs, results, tables, verdicts, assumptions)
    and what this command puts in it. Without COMMAND, the commands that have one."""
    from parcalc.errors import InputError
    from parcalc.schema import SCHEMA_DIR, SHIPPED, file_name
    from parcalc.streams import write_out

    if command is None:
        write_out("".join(f"{name}\n" for name in SHIPPED))
        return
    wanted = " ".join(command.lower().replace("-", " ").split()).replace("peak flops", "peak-flops").replace("comm volume", "comm-volume")
    if wanted not in SHIPPED:
        import difflib

        close = difflib.get_close_matches(wanted, list(SHIPPED), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(f"COMMAND: no JSON schema for {command!r}{hint} (the commands: {', '.join(SHIPPED)})")
    write_out((SCHEMA_DIR / file_name(wanted)).read_text(encoding="utf-8"))
