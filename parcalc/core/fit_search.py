"""Every configuration of a training run on N GPUs, evaluated at once with numpy.

The space: tp dividing the heads, K/V heads and MLP width (within a node unless allowed), pp
dividing the layers, dp = N / (tp pp) dividing the global batch, micro-batch b dividing the
replica's batch, recomputation none / selective / full, ZeRO 0-3 (1-3 only with dp > 1),
sequence parallelism (only with tp > 1), and the 1F1B or interleaved schedule with v chunks
(v dividing the layers of a stage, m a multiple of p).

Whatever depends on the layer's shape comes from the scalar cores once per distinct value
(parcalc.core.activations for one sequence, parcalc.core.memory for a stage's parameters,
parcalc.core.flops per recomputation, parcalc.core.collectives for two message sizes, since an
alpha-beta time is affine in the size); the arithmetic that combines them, per configuration, runs
on arrays. The formulas are parcalc.core.fit's, term for term; tests/test_fit_search.py checks
random samples against parcalc.core.fit.estimate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from parcalc.core.activations import (
    ActivationConfig,
    embedding_activations,
    layer_activations,
    output_activations,
    recompute_working_set,
)
from parcalc.core.choices import Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, group_spans_nodes
from parcalc.core.memory import (
    Parallelism,
    layer_params_per_rank,
    stage_parameters,
    state_bytes,
)
from parcalc.core.model import TransformerModel
from parcalc.core.timing.step import (
    DataParallelPieces,
    StagePieces,
    combine,
    dp_exposed,
    dp_pieces,
    optimizer_step_time,
    stage_pieces,
)
from parcalc.errors import InputError

RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)

# Columns of the evaluated table, in order: the configuration, then what it costs.
CONFIG_FIELDS = ("tp", "pp", "dp", "micro_batch", "micro_batches", "recompute", "zero", "sequence_parallel", "schedule", "chunks")
COST_FIELDS = ("memory", "fits", "t_compute", "t_tp", "t_bubble", "t_pp", "t_dp", "t_optimizer", "t_step", "tokens_per_second", "mfu", "hfu")


@dataclass(frozen=True)
class SearchSpace:
    """Which choices to try; the defaults try everything."""

    recomputes: tuple[Recompute, ...] = RECOMPUTES
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    sequence_parallel: tuple[bool, ...] = (False, True)
    interleaved: bool = True
    micro_batches: tuple[int, ...] | None = None  # micro-batch sizes b to try (None: every divisor)
    max_chunks: int | None = None
    tp: int | None = None  # pinned dimensions (None: every valid value)
    pp: int | None = None
    dp: int | None = None


@dataclass
class Evaluated:
    """Arrays, one entry per configuration evaluated (every field of CONFIG_FIELDS and COST_FIELDS)."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["tp"])

    def config(self, i: int) -> Config:
        c = self.columns
        return Config(int(c["tp"][i]), int(c["pp"][i]), int(c["dp"][i]), int(c["micro_batch"][i]),
                      RECOMPUTES[int(c["recompute"][i])], int(c["zero"][i]), bool(c["sequence_parallel"][i]),
                      Schedule.INTERLEAVED if c["schedule"][i] else Schedule.ONE_F_ONE_B, int(c["chunks"][i]))  # fmt: skip

    def rows(self, order: np.ndarray | None = None) -> Iterator[tuple[object, ...]]:
        """Each configuration as a tuple of plain Python values, in CONFIG_FIELDS + COST_FIELDS order."""
        c = self.columns
        index = order if order is not None else np.arange(len(self))
        lists = {k: c[k][index].tolist() for k in CONFIG_FIELDS + COST_FIELDS}
        for j in range(len(index)):
            yield (lists["tp"][j], lists["pp"][j], lists["dp"][j], lists["micro_batch"][j], lists["micro_batches"][j],
                   RECOMPUTES[lists["recompute"][j]].value, lists["zero"][j], bool(lists["sequence_parallel"][j]),
                   "interleaved" if lists["schedule"][j] else "1f1b", lists["chunks"][j],
                   *(lists[k][j] for k in COST_FIELDS))  # fmt: skip


@dataclass
class SearchResult:
    evaluated: Evaluated
    rejected: Counter = field(default_factory=Counter)  # reason -> configurations (or layouts) rejected
    layouts: int = 0  # (tp, pp, dp) layouts that passed the divisibility checks

    @property
    def fitting(self) -> np.ndarray:
        return np.flatnonzero(self.evaluated.columns["fits"])

    def ranked(self) -> np.ndarray:
        """Indices of the configurations that fit, fastest first (ties: less memory first)."""
        fit = self.fitting
        c = self.evaluated.columns
        order = np.lexsort((c["memory"][fit], c["t_step"][fit]))
        return fit[order]


def divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


# ---------------------------------------------------------------------------------------------
# Layouts


def layouts(model: TransformerModel, training: Training, cluster: Cluster, rejected: Counter) -> list[tuple[int, int, int]]:
    """(tp, pp, dp) with tp x pp x dp = N that pass the divisibility and placement checks."""
    found = []
    for t in divisors(cluster.gpus):
        for p in divisors(cluster.gpus // t):
            d = cluster.gpus // (t * p)
            if any(v % t for v in (model.heads, model.kv_heads, model.ffn_hidden)):
                rejected["tp does not divide the heads or MLP width"] += 1
            elif (t > cluster.gpus_per_node or cluster.gpus_per_node % t) and not cluster.allow_cross_node_tp:
                rejected["tp does not divide the GPUs of a node"] += 1
            elif model.layers % p:
                rejected["pp does not divide the layers"] += 1
            elif training.global_batch % d:
                rejected["dp does not divide the global batch"] += 1
            else:
                found.append((t, p, d))
    return found


# ---------------------------------------------------------------------------------------------
# What depends on the shape only, from the scalar cores, once per distinct value


class _Shapes:
    """Memoised scalar quantities: activations per sequence, stage parameters, collective times."""

    def __init__(self, model: TransformerModel, training: Training, cluster: Cluster) -> None:
        from parcalc.core.flops import training_flops

        self.model, self.training, self.cluster = model, training, cluster
        self.per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads)
        self.e = training.precision.activation_bytes
        counted = {r: training_flops(model, training.global_batch, training.seq_len, recompute=r.value) for r in RECOMPUTES}
        self.model_flops = counted[Recompute.NONE].model.value
        self.hardware_flops = np.array([counted[r].hardware.value for r in RECOMPUTES])
        self._activations: dict[tuple[int, bool, Recompute], tuple[float, float, float, float]] = {}
        self._dp: dict[tuple[int, int, int], DataParallelPieces] = {}
        self._stages: dict[tuple[int, ...], tuple[float, ...]] = {}

    def activations(self, tp: int, sp: bool, recompute: Recompute) -> tuple[float, float, float, float]:
        """Per sequence (b = 1): layer, embedding, output (both per micro-batch in flight), recompute working set."""
        key = (tp, sp, recompute)
        if key not in self._activations:
            t = self.training
            if (recompute is Recompute.SELECTIVE and t.flash_attention) or (sp and tp == 1):
                self._activations[key] = (math.nan,) * 4
            else:
                config = ActivationConfig(1, t.seq_len, tp, sp, recompute, t.flash_attention, t.dropout, self.e)
                vocab = self.model.vocab > 0
                working = recompute_working_set(self.model, config)
                self._activations[key] = (
                    layer_activations(self.model, config).per_layer.value,
                    embedding_activations(self.model, config, 1.0).value if vocab else 0.0,
                    output_activations(self.model, config, 1.0).value if vocab else 0.0,
                    working.value if working is not None else 0.0,
                )
        return self._activations[key]

    def stage_params(self, tp: int, pp: int) -> tuple[float, float]:
        """Parameters on one GPU of the first and of the last stage."""
        par = Parallelism(tp, pp, 1, micro_batches=pp)
        return stage_parameters(self.model, par, 0).value, stage_parameters(self.model, par, pp - 1).value

    def dp(self, tp: int, pp: int, dp: int) -> DataParallelPieces:
        key = (tp, pp, dp)
        if key not in self._dp:
            self._dp[key] = dp_pieces(self.model, tp, pp, dp, self.training, self.cluster)
        return self._dp[key]

    def stage_arrays(self, tp: int, pp: int, dp: int, b: np.ndarray, sp: np.ndarray, r: np.ndarray) -> tuple[StagePieces, np.ndarray, np.ndarray]:
        """parcalc.core.timing.step.stage_pieces for every configuration, from one scalar call per distinct (b, SP, r)."""
        keys = b * 8 + sp.astype(int) * 4 + r
        unique, inverse = np.unique(keys, return_inverse=True)
        rows = []
        for key in unique.tolist():
            size, rest = divmod(key, 8)
            memo = (tp, pp, dp, size, rest)
            if memo not in self._stages:
                pieces, f_layer, b_layer = stage_pieces(self.model, tp, pp, dp, size, bool(rest // 4), RECOMPUTES[rest % 4], self.training, self.cluster)
                self._stages[memo] = (pieces.forward, pieces.backward, pieces.recompute, pieces.tp, pieces.tp_hidden, pieces.p2p,
                                      pieces.first_forward, pieces.last_backward, f_layer, b_layer)  # fmt: skip
            rows.append(self._stages[memo])
        table = np.array(rows)[inverse]
        stage = StagePieces(*(table[:, i] for i in range(8)))
        return stage, table[:, 8], table[:, 9]


# ---------------------------------------------------------------------------------------------
# One layout's configurations, as arrays


def _layout_arrays(shapes: _Shapes, t: int, p: int, d: int, space: SearchSpace, rejected: Counter) -> dict[str, np.ndarray] | None:
    model, training = shapes.model, shapes.training
    replica = training.global_batch // d
    sizes = [b for b in divisors(replica) if space.micro_batches is None or b in space.micro_batches]
    recomputes = [i for i, r in enumerate(RECOMPUTES) if r in space.recomputes]
    if training.flash_attention and RECOMPUTES.index(Recompute.SELECTIVE) in recomputes:
        recomputes.remove(RECOMPUTES.index(Recompute.SELECTIVE))
    zeros = [z for z in space.zero_stages if z == 0 or d > 1]
    sps = [sp for sp in space.sequence_parallel if not sp or t > 1]
    schedules = [(0, 1)]
    if p > 1 and space.interleaved:
        per_stage = model.layers // p
        schedules += [(1, v) for v in divisors(per_stage) if v > 1 and (space.max_chunks is None or v <= space.max_chunks)]
    if not (sizes and recomputes and zeros and sps):
        return None
    grid = np.meshgrid(np.array(sizes), np.array(recomputes), np.array(zeros), np.array([int(s) for s in sps]),
                       np.arange(len(schedules)), indexing="ij")  # fmt: skip
    b, r, z, sp, k = (a.ravel() for a in grid)
    sched = np.array([s for s, _ in schedules])[k]
    v = np.array([c for _, c in schedules])[k]
    m = replica // b
    valid = (sched == 0) | (m % p == 0)
    if not valid.all():
        rejected["interleaved needs m a multiple of p"] += int((~valid).sum())
        b, r, z, sp, sched, v, m = (a[valid] for a in (b, r, z, sp, sched, v, m))
    if b.size == 0:
        return None
    n = b.size
    return {"tp": np.full(n, t), "pp": np.full(n, p), "dp": np.full(n, d), "micro_batch": b, "micro_batches": m, "recompute": r,
            "zero": z, "sequence_parallel": sp.astype(bool), "schedule": sched, "chunks": v}  # fmt: skip


def _in_flight(p: int, m: np.ndarray, stage: int, interleaved: np.ndarray, v: np.ndarray) -> np.ndarray:
    """parcalc.core.pipeline.in_flight_micro_batches for 1F1B and interleaved, on arrays."""
    plain = np.minimum(p - stage, m).astype(float)
    warm_up = (p - stage - 1) * 2 + (v - 1) * p
    chunked = np.where(m == p, m.astype(float), np.minimum(warm_up + 1, m * v) / v)
    return np.where(interleaved.astype(bool) & (v > 1), chunked, plain)


def _evaluate_layout(shapes: _Shapes, cols: dict[str, np.ndarray]) -> None:
    """Fill in COST_FIELDS for one layout's configurations (parcalc.core.fit.estimate, on arrays)."""
    model, training, cluster, per = shapes.model, shapes.training, shapes.cluster, shapes.per
    t, p, d = int(cols["tp"][0]), int(cols["pp"][0]), int(cols["dp"][0])
    b, m, r, z, sp, v = cols["micro_batch"], cols["micro_batches"], cols["recompute"], cols["zero"], cols["sequence_parallel"], cols["chunks"]
    layers_here = model.layers // p

    # Memory: the first and the last stage (the middle ones hold no more than the first).
    table = np.array([[shapes.activations(t, bool(s), rec) for rec in RECOMPUTES] for s in (False, True)])  # [sp, r, 4]
    a_layer, a_emb, a_out, a_re = (table[sp.astype(int), r, i] * b for i in range(4))
    p_first, p_last = shapes.stage_params(t, p)
    replicated = np.ones_like(b, dtype=float)
    shard_w = np.where(z >= 3, d, 1) * replicated
    shard_g = np.where(z >= 2, d, 1) * replicated
    shard_o = np.where(z >= 1, d, 1) * replicated
    per_param = per.weight / shard_w + per.gradient / shard_g + per.optimizer / shard_o
    gathered = np.where(z == 3, (2 * per.weight + per.gradient) * layer_params_per_rank(model, t), 0.0)
    n_first = _in_flight(p, m, 0, cols["schedule"], v)
    n_last = _in_flight(p, m, p - 1, cols["schedule"], v)
    first = p_first * per_param + gathered + a_layer * layers_here * n_first + a_emb * n_first + a_re + training.reserve
    if p == 1:
        memory = first + a_out * n_last
    else:
        last = p_last * per_param + gathered + a_layer * layers_here * n_last + a_out * n_last + a_re + training.reserve
        memory = np.maximum(first, last)

    # Time: the pieces from the scalar timing models, once per distinct (b, SP, recomputation);
    # the same combination as parcalc.core.fit.estimate, on arrays.
    stage, f_layer, b_layer = shapes.stage_arrays(t, p, d, b, sp, r)
    dp = shapes.dp(t, p, d)
    framework = cluster.framework
    t_dp = dp_exposed(z, m, stage, dp, overlap_grad=cluster.overlap_grad, overlap_param=cluster.overlap_param,
                      reduce_every=framework.reduce_every_micro_batch, reshard=framework.reshard_after_forward,
                      layer_forward=f_layer, layer_backward=b_layer)  # fmt: skip
    t_opt = optimizer_step_time(model, t, p, d, z, training, cluster)
    terms = combine(stage, m, v, p, t_dp, t_opt, tp_overlap=cluster.overlap_tp)
    t_step = terms["t_step"]
    n, peak = cluster.gpus, cluster.peak
    cols.update(
        memory=memory, fits=memory <= cluster.capacity, t_compute=terms["t_compute"], t_tp=terms["t_tp"], t_bubble=terms["t_bubble"],
        t_pp=terms["t_pp"], t_dp=t_dp, t_optimizer=t_opt + 0.0 * b, t_step=t_step,
        tokens_per_second=training.global_batch * training.seq_len / t_step,
        mfu=shapes.model_flops / (t_step * n * peak), hfu=shapes.hardware_flops[r] / (t_step * n * peak),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The search


def search(model: TransformerModel, training: Training, cluster: Cluster, space: SearchSpace = SearchSpace(),
           progress: Callable[[int, int], None] | None = None) -> SearchResult:  # fmt: skip
    """Every configuration of the space evaluated; `progress(done, total)` after each layout."""
    if cluster.gpus < 1:
        raise InputError(f"--gpus: must be at least 1, got {cluster.gpus}")
    rejected: Counter = Counter()
    shapes = _Shapes(model, training, cluster)
    found = [(t, p, d) for t, p, d in layouts(model, training, cluster, rejected)
             if space.tp in (None, t) and space.pp in (None, p) and space.dp in (None, d)]  # fmt: skip
    parts = []
    for i, (t, p, d) in enumerate(found):
        cols = _layout_arrays(shapes, t, p, d, space, rejected)
        if cols is not None:
            _evaluate_layout(shapes, cols)
            parts.append(cols)
        if progress is not None:
            progress(i + 1, len(found))
    if parts:
        columns = {k: np.concatenate([c[k] for c in parts]) for k in CONFIG_FIELDS + COST_FIELDS}
    else:
        columns = {k: np.array([]) for k in CONFIG_FIELDS + COST_FIELDS}
    evaluated = Evaluated(columns)
    rejected["memory (does not fit)"] += int(len(evaluated) - np.count_nonzero(columns["fits"])) if len(evaluated) else 0
    return SearchResult(evaluated, rejected, len(found))


__all__ = ["Evaluated", "SearchResult", "SearchSpace", "divisors", "group_spans_nodes", "layouts", "search"]
