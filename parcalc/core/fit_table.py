"""One row per strategy family on N GPUs: its per-GPU memory, whether it fits, and the deepest
model of the same layer shape that would (seed 000, part B-4 (e): "What parallelism strategy and
model size (number of layers) could you fit on a 2 GPU setup?").

Families: a single GPU, DP, ZeRO-1/2/3 (FSDP), TP, TP with sequence parallelism, PP (1F1B) and
TP x PP (TP as wide as a node allows), each without, with selective and with full activation
recomputation. Memory is parcalc.core.memory's, via parcalc.core.fit.memory_of. With a framework
chosen (`fit --framework`), only the families its stack runs: the ZeRO stages its profile offers
(torchtitan and FSDP2: DDP or ZeRO-3; Megatron-LM: ZeRO-1), TP only with sequence parallelism where the
stack always shards the sequence (torchtitan's apply_tp), data parallelism only where that is all it has (hf).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from parcalc.core.choices import Recompute
from parcalc.core.fit import (
    Cluster,
    Config,
    Estimate,
    Training,
    invalid_reason,
    memory_of,
    training_setup_of,
    with_layers,
)
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation
from parcalc.errors import InputError

MAX_LAYERS_SEARCHED = 1_000_000  # beyond any model; stops the search when a layer costs nothing


@dataclass(frozen=True)
class StrategyRow:
    family: str
    recompute: Recompute
    config: Config | None  # None: the family has no layout on these GPUs
    gpus_used: int
    memory: float | None  # bytes on the fullest GPU
    fits: bool
    headroom: float | None
    max_layers: int | None  # deepest model of this layer shape that fits (a multiple of pp)
    note: str = ""
    # parcalc.core.speedup.timed_strategy_table: the step-time model's estimate of a row that fits,
    # and its speedup and parallel efficiency over the reference setup (None: not timed)
    estimate: Estimate | None = None
    speedup: Derivation | None = None
    efficiency: Derivation | None = None
    # the fullest GPU's memory by component (parcalc.core.memory.StageMemory.components), as
    # `memory` sums them; () for a row without a layout (drawn by `fit -o fit.svg`)
    components: tuple[tuple[str, float], ...] = ()


def families(model: TransformerModel, cluster: Cluster, micro_batch: int = 1,
             runnable_only: bool = False) -> list[tuple[str, Config | None, str]]:  # fmt: skip
    """(name, configuration without recomputation, why absent); `runnable_only`: only the families
    cluster.framework's stack runs (module docstring)."""
    n, g, b = cluster.gpus, cluster.gpus_per_node, micro_batch
    stack = cluster.framework
    zeros = [(name, z) for name, z in (("ZeRO-1", 1), ("ZeRO-2", 2), ("ZeRO-3 (FSDP)", 3)) if not runnable_only or z in stack.zero_stages]
    model_parallel = not (runnable_only and stack.data_parallel_only)
    sp_only = runnable_only and stack.sequence_parallel_with_tp  # no TP row without SP; TP x PP with it
    names = ["DP", *(name for name, _ in zeros)] + (["TP", "TP + SP", "PP", "TP x PP"] if model_parallel else [])
    if sp_only:
        names.remove("TP")
    rows: list[tuple[str, Config | None, str]] = [("single GPU", Config.of(1, 1, 1, b), "")]
    if n == 1:
        return rows + [(name, None, "needs 2 or more GPUs") for name in names]
    rows.append(("DP", Config.of(1, 1, n, b), ""))
    rows += [(name, Config.of(1, 1, n, b, zero=z), "") for name, z in zeros]
    if not model_parallel:
        return rows
    if not sp_only:
        rows.append(("TP", Config.of(n, 1, 1, b), ""))
    rows.append(("TP + SP", Config.of(n, 1, 1, b, sequence_parallel=True), ""))
    rows.append(("PP", Config.of(1, n, 1, b), ""))
    widths = [t for t in range(min(g, n // 2), 1, -1) if n % t == 0 and not (model.heads % t or model.kv_heads % t or model.ffn_hidden % t)]
    if widths and n // widths[0] >= 2:
        rows.append(("TP x PP", Config.of(widths[0], n // widths[0], 1, b, sequence_parallel=sp_only), ""))
    else:
        rows.append(("TP x PP", None, "no split of the GPUs into tp >= 2 (within a node, dividing the heads) and pp >= 2"))
    return rows


def strategy_table(model: TransformerModel, training: Training, cluster: Cluster,
                   recomputes: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), *,
                   micro_batch: int = 1, deepest: bool = True, runnable_only: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> tuple[StrategyRow, ...]:  # fmt: skip
    """Every family x recomputation; `deepest` adds the most layers each holds (a few more memory evaluations);
    `runnable_only`: only the families the cluster's framework runs (families); `progress(done, total)` after each row
    (a walked framework's row takes up to seconds: torchtitan's step walks)."""
    rows: list[StrategyRow] = []
    table_families = list(families(model, cluster, micro_batch, runnable_only))
    row_count = len(table_families) * len(recomputes)
    for name, base, absent in table_families:
        for recompute in recomputes:
            if progress is not None:
                progress(len(rows), row_count)
            if base is None:
                rows.append(StrategyRow(name, recompute, None, cluster.gpus, None, False, None, None, absent))
                continue
            config = replace(base, recompute=recompute)
            used = replace(cluster, gpus=config.layout.tp * config.layout.pp * config.layout.dp)
            try:
                config = framework_split(model, config, cluster.framework)
            except InputError as error:
                rows.append(StrategyRow(name, recompute, config, used.gpus, None, False, None, None, str(error)))
                continue
            reason = invalid_reason(model, config, training, used)
            if reason is not None:
                rows.append(StrategyRow(name, recompute, config, used.gpus, None, False, None, None, reason))
                continue
            worst = memory_of(model, config, training, used).worst
            total = worst.total.value
            most = max_layers(model, config, training, used) if deepest else None
            rows.append(StrategyRow(name, recompute, config, used.gpus, total, total <= cluster.capacity, cluster.capacity - total, most,
                                    components=worst.components()))  # fmt: skip
    return tuple(rows)


def framework_split(model: TransformerModel, config: Config, framework: Any) -> Config:
    """The configuration with the framework's own pipeline split of the model's layers where it has one and no split is
    given (torchtitan's: parcalc.core.pipeline_torchtitan); a split it made for another depth is made again."""
    if framework.pipeline_split != "torchtitan":
        return config
    from parcalc.core.pipeline_torchtitan import split_layout

    layout = config.layout._replace(pipeline_layout=None, split_by=None) if config.layout.split_by is not None else config.layout
    return config.replaced(**split_layout(layout, model.layers, model.mtp_layers)._asdict())


def at_depth(model: TransformerModel, config: Config, layers: int, framework: Any) -> tuple[TransformerModel, Config]:
    """The model with `layers` layers of its shape and the configuration split for it (framework_split)."""
    deeper = with_layers(model, layers)
    return deeper, framework_split(deeper, config, framework)


def max_layers(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> int:
    """The most layers (a multiple of pp x chunks) of this layer shape that fit; 0 if none do.

    Memory is affine in the layers of a stage (model states and activations per layer, plus the
    embeddings, head and reserve), so two evaluations give the estimate; the scalar memory then
    confirms it and steps to the exact boundary. Under an FSDP2 step walk that boundary is found by
    the floor of the allocator's replay (memory_of(allocator_replayed=False), a lower bound), then
    the replay itself steps down from it to the deepest model whose replay fits (_replayed_boundary). The floor of a
    dense model's walked step is the search's (search_step_peaks.worst_stage_total: the same bytes from walks of 4 and 5
    layers, whatever the depth), not a walk of every depth tried."""
    from parcalc.core.search_replay import replays  # the search's modules: loaded where a table is drawn
    from parcalc.core.search_step_peaks import worst_stage_total

    step = config.layout.pp * config.layout.chunks
    screened = replays(cluster) and model.moe is None
    setup = training_setup_of(config, training, cluster)

    def total(layers: int) -> float:
        deeper, split = at_depth(model, config, layers, cluster.framework)
        if screened and split.layout.pipeline_layout is None:  # the search's floor follows even splits (a framework's own
            return worst_stage_total(deeper, split.layout, setup)  # uneven split is walked: memory_of)
        return memory_of(deeper, split, training, cluster, allocator_replayed=False).worst.total.value

    def fits(layers: int) -> bool:
        return total(layers) <= cluster.capacity

    one, two = total(step), total(2 * step)
    if one > cluster.capacity:
        return 0
    slope = two - one
    if slope <= 0:
        raise InputError("the model's layers take no memory; give a model with a hidden size")
    guess = step * max(1, min(MAX_LAYERS_SEARCHED // step, int((cluster.capacity - one) // slope) + 1))
    while guess > step and not fits(guess):
        guess -= step
    while guess + step <= MAX_LAYERS_SEARCHED and fits(guess + step):
        guess += step
    return _replayed_boundary(model, config, training, cluster, guess, step, slope)


def _replayed_boundary(model: TransformerModel, config: Config, training: Training, cluster: Cluster, most: int, step: int,
                       slope: float) -> int:  # fmt: skip
    """The deepest model (a multiple of `step` layers, at most `most`, the deepest by the floor) whose total with the
    allocator replayed fits; `most` itself where no stage is walked (the floor is then the total). A replay is never below
    its floor, so nothing deeper than `most` fits; from it, jumps of the excess over the floor's `slope` a layer, then
    single steps."""
    def replayed(layers: int) -> tuple[float, bool]:
        breakdown = memory_of(*at_depth(model, config, layers, cluster.framework), training, cluster)
        return breakdown.worst.total.value, any(s.peak_replayed is not None for s in breakdown.stages)

    if most == 0:
        return 0
    total, walked = replayed(most)
    if not walked:
        return most
    guess, over = most, most + step  # over: the fewest layers known not to fit
    while total > cluster.capacity and guess > step:
        over = guess
        guess = max(step, guess - step * max(1, math.ceil((total - cluster.capacity) / (slope * step))))
        total = replayed(guess)[0]
    if total > cluster.capacity:
        return 0
    while guess + step < over and replayed(guess + step)[0] <= cluster.capacity:
        guess += step
    return guess
