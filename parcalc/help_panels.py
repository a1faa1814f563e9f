"""`--help` by section (issue 28: `fit --help` ran 336 lines of options in declaration order):
each option's section as Typer's `rich_help_panel` (typer.core.TyperOption, since typer 0.6),
set here from one table for every command, and a plain help formatter that prints the examples
first, then the options section by section.

The table is by flag name, since one flag means one thing in every command (parcalc.flags); a
flag it does not name falls in "Options" (tests/test_help_panels.py holds every flag named).
parcalc's help stays click's plain text (rich_markup_mode=None: no boxes at 80 columns, no rich
import at start-up); with typer's rich help turned on, the same panels would group it there too.
"""

from __future__ import annotations

from typing import Any

OTHER = "Options"

# In the order the help shows them: what is trained, how it is laid out, how it trains, on what,
# what to ask of a search or a run, and where the answer goes.
PANELS: dict[str, tuple[str, ...]] = {
    "Model": ("--model", "--layers", "--hidden", "--heads", "--kv-heads", "--ffn-hidden", "--mlp", "--vocab", "--tied", "--params",
              "--dropout", "--flash-attention", "--causal", "--vocab-parallel", "--m", "--n", "--k", "--elements", "--shapes"),
    "Layout": ("--gpus", "--gpus-per-node", "--tp", "--pp", "--dp", "--cp", "--cp-comm", "--ep", "--etp", "--zero", "--shard-group",
               "--sequence-parallel", "--schedule", "--chunks", "--first-stage-layers", "--last-stage-layers", "--embedding-in-split",
               "--loss-in-split", "--pipeline-layout", "--stages", "--ranks", "--nodes", "--strategy", "--weak"),
    "Training": ("--batch", "--seq-len", "--micro-batch", "--micro-batches", "--recompute", "--recompute-layers", "--recompute-modules",
                 "--recompute-mla-up-proj", "--precision", "--fp8-recipe", "--fp8-all-gather", "--optimizer", "--moment-dtype", "--grad-dtype",
                 "--grad-bytes", "--fp32-grads", "--offload", "--host-link", "--compile", "--compile-loss", "--expandable-segments", "--kernels", "--framework",
                 "--dp-overlap", "--tp-comm-overlap", "--moe-dispatcher", "--max-nodes-per-token", "--ep-overlap", "--moe-routing", "--expert-activation", "--moe-imbalance",
                 "--bucket-size", "--reshard-root", "--shard-padding", "--ddp-first-iteration", "--allreduces",
                 "--t-forward", "--t-backward", "--t-weight", "--stage-times", "--step-time", "--time-is", "--mfu",
                 "--tflops-per-gpu"),
    "Hardware": ("--gpu", "--capacity", "--reserve", "--dtype", "--peak", "--efficiency", "--clock", "--sms", "--fma-per-clock",
                 "--sparse", "--link", "--intra-link", "--inter-node-link", "--nics-per-node", "--ideal-network", "--bandwidth",
                 "--latency", "--p2p-latency", "--nccl-hardware", "--gpu-power", "--power-limit", "--pue", "--device"),
    "Collective": ("--collective", "--algorithm", "--size", "--message-size", "--compare"),
    "Search and run": ("--search", "--top", "--explain", "--rank-by", "--interleaved", "--allow-cross-node-tp", "--max-layers",
                       "--tokens", "--iterations", "--price", "--per-stage", "--timeline", "--best", "--knee", "--target", "--vary"),
    "Output": ("--format", "--output", "--table", "--detail", "--template", "--section", "--name", "--force", "--list",
               "--presets", "--config", "--help"),
}  # fmt: skip
_PANEL_OF = {flag: panel for panel, flags in PANELS.items() for flag in flags}


def examples_block(help_text: str) -> str:
    """The examples of a command's --help: from "Examples:" to the first section heading after them
    (a line at the margin ending in ":", "Model:"), since the options now follow the examples."""
    import re

    after = help_text.split("Examples:", 1)[1] if "Examples:" in help_text else ""
    return re.split(r"\n(?=[^\s][^\n]*:\n)", after, maxsplit=1)[0]


def panel_of(param: Any) -> str:
    """The section of a click parameter: its long flag's, else "Options"."""
    for opt in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
        if opt in _PANEL_OF:
            return _PANEL_OF[opt]
    return OTHER


def group_help(command: Any) -> None:
    """Give `command`'s options (and its subcommands') their panels, and print its help with the
    examples before the options and the options under their panels' headings."""
    for sub in getattr(command, "commands", {}).values():
        group_help(sub)
    command.format_epilog = lambda ctx, formatter: format_epilog(command, ctx, formatter)
    if getattr(command, "commands", None) is not None:
        return  # a group lists its commands; its few options stay as click prints them
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and getattr(param, "rich_help_panel", None) is None:
            try:
                param.rich_help_panel = panel_of(param)
            except AttributeError:  # a plain click option without the attribute: set it anyway
                object.__setattr__(param, "rich_help_panel", panel_of(param))

    def format_help(ctx: Any, formatter: Any) -> None:
        command.format_usage(ctx, formatter)
        command.format_help_text(ctx, formatter)
        command.format_epilog(ctx, formatter)  # the examples first: a command line to copy before 80 options
        _format_options(command, ctx, formatter)

    command.format_help = format_help


def format_epilog(command: Any, ctx: Any, formatter: Any) -> None:
    """click's Command.format_epilog with the lines of its \\b blocks (kept as written, not rewrapped by click) folded to
    the terminal's width: at 80 columns the examples of `memory --help` ran to 275 characters, each wrapped by the
    terminal in the middle of a word (session 24's 80-column pass)."""
    import inspect

    if command.epilog:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(fold_epilog(inspect.cleandoc(command.epilog), formatter.width - formatter.current_indent))


# The first words of an example's command line (the rest of a \b block is prose)
_COMMAND_STARTS = ("parcalc ", "cat ", "printf ", "eval ", "mkdir ")
CONTINUATION = " \\"
CONTINUATION_INDENT = "    "  # the examples' own continuation lines are indented 4 more than their command
PARAGRAPH_INDENT = 0  # prose at the margin is a paragraph; lines further in are a table's or a file's


def fold_epilog(text: str, width: int) -> str:
    """`text` (an epilog, paragraphs apart by blank lines) with each line of a \\b paragraph longer than `width` folded:
    a command line before one of its flags, with a shell continuation (` \\`), so that it still pastes into a
    shell (a comment that no longer fits goes on its own line above it, or below the command's last line); a run of prose lines of one indentation that
    holds a long line, rewrapped between words at that indentation. Lines that fit are left as written."""
    import textwrap

    out: list[str] = []
    raw = continued = False
    prose: list[str] = []

    def wrap(text: str, indent: str, more: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more, break_long_words=False,
                             break_on_hyphens=False)  # fmt: skip

    def flush_prose() -> None:
        if not any(len(line) > width for line in prose):
            out.extend(prose)
        elif _indent(prose[0]) <= PARAGRAPH_INDENT:  # a paragraph: rewrapped whole
            indent = " " * _indent(prose[0])
            out.extend(wrap(" ".join(line.strip() for line in prose), indent, indent))
        else:  # deeper: a table's or a file's lines, each kept a line of its own, a long one folded under itself
            for line in prose:
                indent = " " * _indent(line)
                out.extend(wrap(line.strip(), indent, indent + "  ") if len(line) > width else [line])
        prose.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not line or stripped == "\b":  # click's paragraphs end at an empty line (one of spaces is in the paragraph)
            flush_prose()
            raw = stripped == "\b"
            continued = False
            out.append(line)
        elif raw and (continued or stripped.startswith(_COMMAND_STARTS)):
            flush_prose()
            out.extend(fold_command(line, width, first=not continued) if len(line) > width else [line])
            continued = stripped.endswith("\\")
        elif raw:
            if prose and _indent(prose[0]) != _indent(line):
                flush_prose()
            prose.append(line)
        else:
            out.append(line)  # click rewraps a paragraph without \b itself
    flush_prose()
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def fold_command(line: str, width: int, first: bool = True) -> list[str]:
    """One shell command line as lines of at most `width` (where its words allow), each but the last ending in ` \\`:
    a flag is kept with its value, the lines after the first indented 4 more when `line` is a command's first line."""
    indent = line[: _indent(line)]
    words, comment = _shell_words(line.strip())
    ends_continued = words[-1:] == ["\\"]
    if ends_continued:
        words = words[:-1]
    units: list[str] = []
    for word in words:  # a flag starts a unit, its values follow it; a pipe starts one too
        if units and not word.startswith(("-", "|")):
            units[-1] += " " + word
        else:
            units.append(word)
    lines = [indent + units[0]]
    more = indent + (CONTINUATION_INDENT if first else "")
    for unit in units[1:]:
        if len(lines[-1]) + 1 + len(unit) + len(CONTINUATION) <= width:
            lines[-1] += " " + unit
        else:
            lines[-1] += CONTINUATION
            lines.append(more + unit)
    if ends_continued:
        lines[-1] += CONTINUATION
    if comment:
        if len(lines[-1]) + 4 + len(comment) <= width:
            lines[-1] += "    " + comment
        elif first:  # above the command, as a shell comment line of its own
            lines[:0] = textwrap_comment(comment, indent, width)
        else:  # below it: a comment line inside a continued command would end the command
            lines.extend(textwrap_comment(comment, indent, width))
    return lines


def textwrap_comment(comment: str, indent: str, width: int) -> list[str]:
    import textwrap

    body = comment.lstrip("#").strip()
    return textwrap.wrap(body, width, initial_indent=indent + "# ", subsequent_indent=indent + "# ", break_long_words=False,
                         break_on_hyphens=False)  # fmt: skip


def _shell_words(command: str) -> tuple[list[str], str]:
    """The words of a command line as a shell splits them (quotes kept in the word, not removed), and its trailing
    comment (from a `#` that starts a word, outside quotes)."""
    words: list[str] = []
    word = ""
    quote = ""
    for at, char in enumerate(command):
        if quote:
            word += char
            quote = "" if char == quote else quote
        elif char in "'\"":
            word += char
            quote = char
        elif char == " ":
            if word:
                words.append(word)
            word = ""
        elif char == "#" and not word:
            return words, command[at:]
        else:
            word += char
    if word:
        words.append(word)
    return words, ""


def _format_options(command: Any, ctx: Any, formatter: Any) -> None:
    """click's Command.format_options, one section per panel, in PANELS' order ("Options" last)."""
    records: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            panel = getattr(param, "rich_help_panel", None) or panel_of(param)  # --help is made by click at each call
            records.setdefault(panel, []).append(record)
    order = [*PANELS, OTHER]
    for panel in sorted(records, key=lambda name: order.index(name) if name in order else len(order)):
        with formatter.section(panel if panel != OTHER or len(records) == 1 else "Other options"):
            formatter.write_dl(records[panel])
