"""The JSON Schema of each command's `--format json` (draft 2020-12), and `parcalc schema COMMAND`.

One envelope for every command (parcalc.derivation), each command's schema naming what it
holds: the `command` it says, the settings it may carry with their types, its tables. The schemas
are shipped as files, parcalc/schemas/COMMAND.json, written from this module:

    python -m parcalc.schema

and tests/test_json_schema.py fails when a file differs from what this module makes, and
validates the JSON of every example of every `--help` against its command's schema.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from parcalc.derivation import SCHEMA_VERSION

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Settings: the resolved non-numeric inputs, each with one type in every command (json_keys).
_S, _I, _B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
SETTINGS: dict[str, Mapping[str, object]] = {
    "model": {**_S, "description": "model preset name ('custom' for flags alone)"},
    "gpu": {**_S, "description": "GPU preset name ('none' without --gpu; fit comparing GPU types: the names, comma-separated)"},
    "gpu_name": {**_S, "description": "the GPU's display name (fit)"},
    "dtype": {**_S, "description": "element type"}, "grad_dtype": {**_S, "description": "element type of the gradients"},
    "precision": {**_S, "description": "training recipe"}, "optimizer": _S, "framework": _S, "mode": _S, "network": _S,
    "rank_by": _S, "strategy": _S, "algorithm": _S, "all_reduce_algorithm": _S, "collective": _S, "data_parallel": _S,
    "link": _S, "inter_node_link": _S, "schedule": _S, "cp_comm": _S, "recompute": _S, "device": _S, "shapes": _S,
    "file": _S, "data": _S, "time_is": _S, "batch": _S, "nccl_hardware": _S, "category": _S, "name": _S, "path": _S,
    "tp": _I, "pp": _I, "dp": _I, "cp": _I, "gpus": _I, "zero": _I, "shard_group": _I, "recompute_layers": _I,
    "sparse": _B, "causal": _B, "dropout": _B, "flash_attention": _B, "fp32_grads": _B, "sequence_parallel": _B,
    "compile": {**_B, "description": "torch.compile (Inductor)"}, "recompute_mla_up_proj": _B,
    "recompute_modules": {**_S, "description": "Megatron-LM's modules recomputed by selective recomputation, comma-separated"},
    "kernels": {**_S, "enum": ["fused", "eager", "hf"], "description": "the memory-bound kernels between GEMMs (--kernels or the framework's)"},
    "moment_dtype": {**_S, "description": "element type of Adam's moments"},
    "moe_imbalance": {"type": "number", "description": "the busiest rank's MoE tokens over the balanced share"},
    "expert_activation": {**_S, "enum": ["fused", "eager"], "description": "the MoE experts' activation with the routing probabilities (--expert-activation)"},
    "moe_routing": {**_S, "enum": ["uniform", "round-robin"], "description": "which experts a token's top-k are (--moe-routing)"},
    "protocol": {**_S, "description": "NCCL's protocol: LL, LL128 or Simple"}, "gpus_per_node": _I,
    "knee": {"type": "number", "description": "the efficiency threshold of the knee (a fraction)"},
    "offload": {"type": "array", "items": _S},
    "stage_times": {"type": "array", "items": {"type": "number"}, "description": "seconds, one per stage"},
    "stage_layers": {"type": "array", "items": _I},
}  # fmt: skip

# command: (its settings, its tables (a name: what it holds), whether it answers "does it fit")
COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, str], bool]] = {
    "peak-flops": (("gpu", "dtype", "sparse"), {}, False),
    "intensity": (("model", "gpu", "gpu_name", "dtype", "flash_attention", "compile", "kernels"),
                  {"ops": "every operation of one layer: FLOPs, bytes, intensity, bound", "kernels": "--model with a GPU: every kernel of one layer timed"}, False),
    "comm-volume": (("model", "strategy", "dtype", "grad_dtype", "link", "inter_node_link", "all_reduce_algorithm", "tp", "pp", "dp",
                     "cp", "cp_comm", "gpus", "data_parallel", "sequence_parallel", "schedule", "shard_group", "algorithm", "collective",
                     "protocol", "gpus_per_node", "gpu"),
                    {"algorithms": "--collective --compare: each algorithm's steps, bytes and time",
                     "collectives": "--strategy: every collective of one iteration", "totals": "--strategy all: each strategy's totals"}, False),
    "bubble": (("schedule", "stage_times", "stage_layers"),
               {"devices": "per device: busy, idle, in-flight micro-batches (CSV's default)", "timeline": "the simulation's events"}, False),
    "memory": (("model", "gpu", "precision", "optimizer", "zero", "recompute", "schedule", "sequence_parallel", "flash_attention",
                "dropout", "fp32_grads", "offload", "cp", "cp_comm", "recompute_layers", "shard_group", "compile", "moment_dtype",
                "recompute_mla_up_proj", "moe_imbalance", "recompute_modules"),
               {"components": "bytes of the fullest stage's GPU by component", "layer_activations": "what one layer keeps for backward",
                "stages": "--per-stage: every pipeline stage (CSV's default then)"}, True),
    "flops": (("model", "gpu", "dtype", "recompute", "causal", "flash_attention", "cp", "recompute_layers", "recompute_modules"),
              {"layer_flops": "FLOPs of one layer by operation", "stage_flops": "--pp: FLOPs of each pipeline stage"}, False),
    "fit": (("model", "gpu", "gpu_name", "precision", "optimizer", "flash_attention", "framework", "mode", "offload", "network",
             "cp", "cp_comm", "shard_group", "recompute_layers", "rank_by", "compile", "recompute_modules", "kernels", "moe_routing", "expert_activation"),
            {"strategies": "the strategy table: memory, fits, most layers, step time", "stages": "one configuration's pipeline stages",
             "top": ("--search: the fastest layouts that fit (tp x pp x dp x cp x ep), each at its fastest configuration; in JSON and "
                     "CSV each row's memory_basis says what its memory is: 'replayed' (the caching allocator replayed over the step "
                     "walk: memory's and fit's total) or 'textbook' (no step walked: the textbook sum, memory's and fit's total too)"),
             "configurations": ("--search with JSON / CSV: every configuration evaluated; memory_basis: 'replayed' or 'textbook' as in "
                                "top (but a 1F1B pipeline row over the capacity by its textbook sum, not walked: memory and fit walk "
                                "it, which keeps at least as much), or 'floor' (a row not shown under an FSDP2 step walk: the floor of "
                                "the allocator's replay plus its reserve, over an interleaved or ZB-V pipeline's ranks up to where one passed "
                                "the capacity, a lower bound of memory's and fit's total, not the total; its fits is by the floor)"),
             "rejected": "--search: layouts rejected, by reason", "gpu_types": "--search over several --gpu: the best of each",
             "smallest": "--search where nothing fits, outside JSON and CSV: the smallest footprints"}, True),
    "presets list": ((), {"gpus": "GPU presets", "links": "link presets", "models": "model presets", "worksheets": "worksheets",
                          "frameworks": "framework profiles"}, False),
    "presets show": (("category", "name", "path"), {"fields": "every field of the preset with its unit and source"}, False),
    "calibrate gemm": (("device", "dtype", "shapes"), {"gemms": "each GEMM shape timed"}, False),
    "calibrate nccl": (("file", "collective", "nccl_hardware"), {"sizes": "each message size of the nccl-tests file"}, False),
    "calibrate trace": (("file",), {"kinds": "kernel time by kind, measured in the trace and predicted by fit (with --model)",
                                    "host": "host time per kernel launch by phase",
                                    "calibration": "with --gpu: each kind's factor on the modelled rate, before and after",
                                    "host_calibration": "with --gpu: the host's time per launch, before and after"}, False),
    "analyze": (("data", "time_is", "batch"), {"speedup": "speedup and efficiency per GPU count", "batch": "the batch per GPU",
                                                "shares": "compute and communication shares", "bandwidth": "achieved bus bandwidth"}, False),
    "scaling": (("model", "gpu", "gpu_name", "mode", "strategy", "precision", "framework", "flash_attention", "knee", "network"),
                {"scaling": "per GPU count N: layout, step time, throughput, speedup, efficiency (CSV's default)",
                 "terms": "the step's terms in GPU-seconds per sequence at each N"}, False),
}  # fmt: skip

_NUMBER_OR_NULL = {"type": ["number", "null"]}
TERM = {
    "type": "object", "additionalProperties": False,
    "required": ["value", "unit", "symbol", "description", "source"],
    "properties": {"value": {**_NUMBER_OR_NULL, "description": "in base units (B, s, FLOP, FLOP/s)"}, "unit": _S, "symbol": _S,
                   "description": _S, "source": _S},
}  # fmt: skip
DERIVATION = {
    "type": "object", "additionalProperties": False,
    "required": ["label", "value", "unit", "symbol", "formula", "formula_latex", "substituted", "inputs", "source", "assumptions"],
    "properties": {
        "label": _S, "value": _NUMBER_OR_NULL, "unit": _S, "symbol": _S, "formula": _S, "formula_latex": _S, "substituted": _S,
        "inputs": {"type": "object", "additionalProperties": TERM, "description": "keyed by the formula's placeholders"},
        "source": _S, "assumptions": {"type": "array", "items": _S},
    },
}  # fmt: skip
TABLE = {
    "type": "object", "additionalProperties": False, "required": ["title", "columns", "rows"],
    "properties": {
        "title": _S,
        "columns": {"type": "array", "items": {"type": "object", "additionalProperties": False, "required": ["key", "label", "unit"],
                                               "properties": {"key": _S, "label": _S, "unit": {**_S, "description": "of every value of the column"}}}},
        "rows": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}},
                 "description": "one record per row, keyed by the columns' keys; CSV prints one table with these keys as its header"},
    },
}  # fmt: skip


def file_name(command: str) -> str:
    return command.replace(" ", "-") + ".json"


def command_schema(command: str) -> dict[str, object]:
    """The JSON Schema of `parcalc COMMAND --format json`."""
    from parcalc.json_keys import NAMES, PER_COMMAND

    settings, tables, answers_fit = COMMANDS[command]
    own = PER_COMMAND.get(command, {})
    names = sorted({name for key, name in NAMES.items() if key not in own} | set(own.values()))
    properties: dict[str, object] = {
        "schema_version": {"const": SCHEMA_VERSION, "description": "changes when a key changes its meaning or type, or goes away"},
        "parcalc": {**_S, "description": "parcalc's version"},
        "command": {"const": command},
        "title": _S,
        "fits": ({"type": ["boolean", "null"], "description": "whether it fits in the GPU's memory; null without a capacity"}
                 if answers_fit else {"type": "null"}),
        "settings": {"type": "object", "properties": {k: SETTINGS[k] for k in settings},
                     "additionalProperties": {"type": ["string", "number", "boolean", "array", "null"]},
                     "description": "the resolved non-numeric inputs, typed"},
        "inputs": {"type": "object", "additionalProperties": TERM, "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
                   "description": "the numeric inputs by descriptive name (names used by parcalc: " + ", ".join(names) + ")"},
        "results": {"type": "object", "additionalProperties": DERIVATION, "description": "every derivation by key (the worksheets' answer names)"},
        "tables": {"type": "object", "properties": {k: {**TABLE, "description": v} for k, v in tables.items()}, "additionalProperties": TABLE},
        "verdicts": {"type": "array", "items": _S},
        "assumptions": {"type": "array", "items": _S},
    }  # fmt: skip
    required = list(properties)
    if command.startswith("calibrate"):
        properties["preset"] = {"type": "object", "description": "the preset written (or that would be): its YAML document as JSON"}
        properties["output"] = {"type": ["string", "null"], "description": "the file written, or null"}
    return {
        "$schema": DIALECT,
        "$id": f"https://parcalc.invalid/schemas/{SCHEMA_VERSION}/{file_name(command)}",
        "title": f"parcalc {command} --format json",
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }


_SCALAR = {"type": ["string", "number", "boolean", "null"]}


def sweep_schema() -> dict[str, object]:
    """The JSON Schema of `parcalc sweep --format json` (parcalc.sweeps.SweepResult.to_dict): not the
    envelope of one result but a row per grid point, each with its status and its results' values."""
    from parcalc.sweeps import ERROR, INFEASIBLE, OK

    row = {
        "type": "object", "additionalProperties": False, "required": ["point", "status", "error", "fits", "verdict", "results"],
        "properties": {
            "point": {"type": "object", "additionalProperties": _SCALAR, "description": "the --vary keys and this point's values"},
            "status": {"enum": [OK, INFEASIBLE, ERROR], "description": "ok; infeasible: the command's exit 1 (it does not fit); error: a bad combination"},
            "error": {"type": ["string", "null"], "description": "the one-line reason of an infeasible or error point"},
            "fits": {"type": ["boolean", "null"], "description": "whether it fits in the GPU's memory (null: no capacity given, or no result)"},
            "verdict": {"type": ["string", "null"], "description": "the result's first verdict line"},
            "results": {"type": "object", "additionalProperties": _NUMBER_OR_NULL, "description": "each result's value in the base unit `units` names"},
        },
    }  # fmt: skip
    return {
        "$schema": DIALECT,
        "$id": f"https://parcalc.invalid/schemas/{SCHEMA_VERSION}/{file_name('sweep')}",
        "title": "parcalc sweep --format json",
        "type": "object",
        "required": ["schema_version", "parcalc", "command", "inputs", "vary", "units", "rows"],
        "additionalProperties": False,
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION, "description": "changes when a key changes its meaning or type, or goes away"},
            "parcalc": {**_S, "description": "parcalc's version"},
            "command": {**_S, "description": "the command run at every point (the run file's `command`), e.g. fit"},
            "inputs": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "array", "null"]},
                       "description": "the run file's flags by name, as read"},
            "vary": {"type": "object", "additionalProperties": {"type": "array", "items": _SCALAR}, "description": "each --vary key and its values"},
            "units": {"type": "object", "additionalProperties": _S, "description": "the base unit of each result key of the rows"},
            "rows": {"type": "array", "items": row, "description": "one per grid point, the last --vary changing fastest"},
        },
    }  # fmt: skip


def report_schema() -> dict[str, object]:
    """The JSON Schema of `parcalc report --format json` (parcalc.commands.report): the worksheet's
    questions, each with its answers and the envelopes of the calculations that answer it (which the
    commands' own schemas describe; here an object with its `command`)."""
    answer = {
        "type": "object", "additionalProperties": False, "required": ["key", "label", "calculation", "value", "unit"],
        "properties": {
            "key": {**_S, "description": "the answer's result key, as the worksheet names it"},
            "label": {**_S, "description": "the answer as the report prints it"},
            "calculation": {"type": "integer", "description": "the 1-based index of the calculation it came from"},
            "value": {"type": ["number", "null"], "description": "in the base unit `unit` names"},
            "unit": _S,
        },
    }  # fmt: skip
    question = {
        "type": "object", "additionalProperties": False, "required": ["id", "title", "answers", "results"],
        "properties": {
            "id": _S, "title": _S, "answers": {"type": "array", "items": answer},
            "results": {"type": "array", "items": {"type": "object", "required": ["schema_version", "command"]},
                        "description": "each calculation's result: the envelope of its command (`parcalc schema COMMAND`)"},
        },
    }  # fmt: skip
    return {
        "$schema": DIALECT,
        "$id": f"https://parcalc.invalid/schemas/{SCHEMA_VERSION}/{file_name('report')}",
        "title": "parcalc report --format json",
        "type": "object",
        "required": ["schema_version", "parcalc", "command", "worksheet", "title", "questions"],
        "additionalProperties": False,
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION, "description": "changes when a key changes its meaning or type, or goes away"},
            "parcalc": {**_S, "description": "parcalc's version"},
            "command": {"const": "report"},
            "worksheet": {**_S, "description": "the worksheet file answered"},
            "title": _S,
            "questions": {"type": "array", "items": question},
        },
    }  # fmt: skip


# Commands whose JSON is not one result's envelope: their own schema.
OWN_SCHEMAS: dict[str, Callable[[], dict[str, object]]] = {"sweep": sweep_schema, "report": report_schema}
# Every command with a shipped schema (`parcalc schema` lists these).
SHIPPED: tuple[str, ...] = (*COMMANDS, *OWN_SCHEMAS)


def schema_text(command: str) -> str:
    schema = OWN_SCHEMAS[command]() if command in OWN_SCHEMAS else command_schema(command)
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_all() -> None:
    """Write parcalc/schemas/*.json from COMMANDS and OWN_SCHEMAS."""
    SCHEMA_DIR.mkdir(exist_ok=True)
    for command in SHIPPED:
        (SCHEMA_DIR / file_name(command)).write_text(schema_text(command), encoding="utf-8")


if __name__ == "__main__":
    write_all()
    sys.stdout.write(f"wrote {len(SHIPPED)} schemas to {SCHEMA_DIR}\n")
