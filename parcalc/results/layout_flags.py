"""A `Layout` value as the flags it stands for: the library's `layout=` keyword.

`parcalc.memory(model="llama3-70b", layout=parcalc.Layout(tp=8, pp=4, dp=2, zero=1))` is
`parcalc.memory(model="llama3-70b", tp=8, pp=4, dp=2, zero=1)`: the layout is read into the flags of
its fields that the command has (LAYOUT_FLAGS), and the command runs on those flags as from the
command line, with the same checks and messages. The layout sets every flag of its fields, so
giving one of them beside `layout=` is an InputError naming both.

Which flags a field's value gives: the degrees tp, pp and dp always (a layout is a whole
layout: dp = 1 is dp = 1, not "whatever --gpus leaves"); every other field only where it differs
from Layout's default, so that `layout=Layout(tp=8, pp=2, dp=4)` is exactly `tp=8, pp=2, dp=4`.
`fit` takes its --gpus from the layout too (tp x pp x cp x dp), and pins the configuration.
The CP exchange (cp_comm) is given whenever cp > 1, as the ZeRO stage always is: a layout's exchange
is the one written, not the framework profile's default for a missing --cp-comm (torchtitan's all-gather).

Fields a command has no flag for do not enter its numbers and are not used: `memory` does not
place ranks on nodes (gpus_per_node); `flops` counts one iteration's FLOPs, which no degree but the
pipeline's stages (the busiest stage) and context parallelism (one rank's share) changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The Layout fields each command has a flag for (flag and field share their Python name).
_PIPELINE = ("first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split")
_ALL = ("tp", "pp", "dp", "cp", "cp_comm", "ep", "etp", "zero", "shard_group", "sequence_parallel", "schedule", "chunks",
        *_PIPELINE, "pipeline_layout")  # fmt: skip
LAYOUT_FLAGS: dict[str, tuple[str, ...]] = {
    "memory": _ALL,
    "fit": (*_ALL, "gpus_per_node"),
    "comm-volume": (*_ALL, "gpus_per_node"),
    "flops": ("pp", "cp", *_PIPELINE),
}
_ALWAYS = ("tp", "pp", "dp", "zero")  # what a whole layout gives, default or not (flops: pp only where the stages differ); its
# ZeRO stage too: Layout(dp=8) under --framework torchtitan is DDP as written, not the profile's default_zero
# flags the layout sets besides its own fields' (fit: the GPUs, tp x pp x cp x dp)
_ALSO_SET: dict[str, tuple[str, ...]] = {"fit": ("gpus",)}


def layout_inputs(command_name: str, layout: Any, given: Mapping[str, Any], label: str = "layout=") -> dict[str, Any]:
    """The inputs (Python flag names to values, as a run file gives them) that `layout` sets for
    `command_name`; a flag among `given` (keys as flag or Python names; None: not given) that the
    layout sets too is an InputError naming both. `layout` not a Layout: TypeError."""
    from parcalc.core.layout import Layout
    from parcalc.errors import InputError

    if command_name not in LAYOUT_FLAGS:
        raise TypeError(f"{label}: `{command_name}` takes no layout (it has no parallel degrees)")
    if not isinstance(layout, Layout):
        raise TypeError(f"{label}: a parcalc.Layout (e.g. parcalc.Layout(tp=8, pp=2, dp=4)), got {type(layout).__name__}")
    fields = LAYOUT_FLAGS[command_name]
    sets = (*fields, *_ALSO_SET.get(command_name, ()))
    for key, value in given.items():
        name = key.replace("-", "_")
        name = name[3:] if name.startswith("no_") and name[3:] in sets else name  # --no-sequence-parallel
        if value is not None and name in sets:
            raise InputError(f"{label} and {key}=: the layout sets --{name.replace('_', '-')} ({_shown(layout, name)}); give one of them")
    default = Layout()
    always = _ALWAYS if command_name != "flops" else ()
    inputs: dict[str, Any] = {}
    for field in fields:
        value = getattr(layout, field)
        # the CP exchange of a layout with cp > 1 too: Layout(cp=2) is p2p as written, not --framework torchtitan's all-gather
        written = field in always or (field == "cp_comm" and layout.cp > 1)
        if not written and value == getattr(default, field):
            continue
        inputs[field] = _flag_value(command_name, field, value)
    if command_name == "fit":
        inputs["gpus"] = layout.gpus
    return inputs


def _flag_value(command_name: str, field: str, value: Any) -> Any:
    """A field's value as its flag takes it: an Enum as its value; fit's repeatable --zero as a list."""
    value = getattr(value, "value", value)
    if field == "zero" and command_name == "fit":
        return [value]
    return value


def _shown(layout: Any, field: str) -> str:
    if field == "gpus":
        return f"tp x pp x cp x dp = {layout.gpus}"
    return f"layout.{field} = {getattr(getattr(layout, field), 'value', getattr(layout, field))!r}"
