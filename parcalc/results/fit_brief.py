"""What `fit`'s brief terminal form keeps (parcalc.render.brief; --detail full shows everything):
the derivations that answer, the table columns that tell the layouts apart within 80 columns, and
the assumptions that move the step time or the memory (issue 28: the answer came after 25 lines
of inputs, each with a 300-character source, and a 26-column table wrapped into soup).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parcalc.derivation import Result

# The answer of each form: the table's fastest strategy, its speedup, efficiency and the deepest
# model; one configuration's memory and step time; the search's best step; a run's time and cost.
KEY_TERMS = (
    "best_strategy", "speedup", "efficiency", "max_layers",
    "total", "t_step", "tokens_per_second", "mfu",
    "train_days", "gpu_hours", "energy", "cost", "cost_per_million_tokens",
)  # fmt: skip

# The strategy table at 80 columns: which layout, whether it fits, how fast, against the reference
# (throughput, efficiency, headroom and the deepest model follow from these or are key terms).
STRATEGY_COLUMNS = ("strategy", "recompute", "tp", "pp", "dp", "memory", "fits", "t_step", "speedup")
# A configuration of the search: the flags that pin it (the degrees, b, recomputation, ZeRO, SP, the
# interleaved chunks v, the shard group S) and what it costs; the step's parts are --detail full's.
CONFIGURATION_COLUMNS = ("gpu", "tp", "pp", "dp", "cp", "ep", "etp", "micro_batch", "recompute", "zero", "sequence_parallel",
                         "chunks", "pipeline_layout", "shard_group", "memory", "t_step", "days", "cost", "mfu")  # fmt: skip
COLUMNS = {"strategies": STRATEGY_COLUMNS, "configurations": CONFIGURATION_COLUMNS, "top": CONFIGURATION_COLUMNS,
           "smallest": CONFIGURATION_COLUMNS}  # fmt: skip

# The assumptions that move the answer, by how they start: attention's kernel (s x s scores or not),
# the framework's overlaps and gradient dtype, the kernels' fusion, the links, what the search left
# out (CP, EP), what timed the GEMMs (a share of the peak, or the tiles measured by shape), and the reference of the speedups.
KEY_ASSUMPTIONS = (
    "attention:", "framework", "gradients in", "kernels:", "links:", "context parallelism", "expert parallelism",
    "GEMMs at", "GEMMs by", "speedup S", "precision", "offload",
)  # fmt: skip


def briefed(result: Result) -> Result:
    """`result` with the brief form's choices (idempotent)."""
    tables = tuple(replace(t, brief_columns=COLUMNS[t.key]) if t.key in COLUMNS else t for t in result.tables)
    return replace(result, tables=tables, key_terms=KEY_TERMS, key_assumptions=KEY_ASSUMPTIONS)
