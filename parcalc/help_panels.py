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
