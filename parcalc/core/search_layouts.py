"""The space fit --search covers (SearchSpace: what it varies and what is pinned) and the parallel layouts and
pipeline splits it tries there (parcalc.core.fit_search evaluates them): every (tp, pp, cp, dp, ep) whose degrees
divide the model and the cluster, and for each pipeline depth the stage splits to time, with the reason each rejected
layout is counted under."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from parcalc.core.choices import Recompute, Schedule
from parcalc.core.layout import Layout
from parcalc.core.stages import balanced_splits, stage_ends, stage_split
from parcalc.errors import InputError

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Training
    from parcalc.core.model import TransformerModel


RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL, Recompute.OP)  # an index of this is the column "recompute"

# cp is searched only for sequences of at least this many tokens (or pinned by --cp): below it the
# attention's share of the step is small and context parallelism only adds exchanges, and the
# space stays small (issue #13).
CP_MIN_SEQ_LEN = 16384


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
    first_stage_layers: int | None = None  # a pinned uneven split (with a pinned pp; None: the search's own)
    last_stage_layers: int | None = None
    embedding_in_split: bool = False  # the embedding / the loss as one layer slot of every split (parcalc.core.stages)
    loss_in_split: bool = False
    # Megatron-LM's layout string (--pipeline-layout), kept fixed: only pp dividing its virtual stages, with chunks = stages / pp
    pipeline_layout: str | None = None
    cp: int | None = None  # pinned context parallelism (None: 1, and every valid cp when s >= CP_MIN_SEQ_LEN)
    ep: int | None = None  # pinned expert parallelism (None: every ep dividing the routed experts; 1 for dense models)
    cp_comm: str = "p2p"  # the CP exchange every cp > 1 uses (parcalc.core.context.CpComm)
    # How every MoE layout exchanges tokens (parcalc.core.fit.Config's fields of the same names)
    moe_imbalance: float = 1.0
    moe_dispatcher: str = "alltoall"
    max_nodes_per_token: int | None = None
    ep_overlap: str = "none"
    moe_routing: str = "uniform"
    # a split-backward schedule every pipelined layout runs (fit --search --schedule; parcalc.core.pipeline_step.step_bubble);
    # None: 1F1B, and the interleaved schedule where `interleaved` allows
    schedule: Schedule | None = None
    # how the framework splits the layers when no split is pinned (Framework.pipeline_split): "megatron" (the even split, or
    # Megatron-LM's balanced uneven ones) or "torchtitan" (its own split, parcalc.core.pipeline_torchtitan)
    framework_split: str = "megatron"

    @property
    def moe(self) -> tuple[float, str, int | None, str, str]:
        return self.moe_imbalance, self.moe_dispatcher, self.max_nodes_per_token, self.ep_overlap, self.moe_routing
    shard_group: int | None = None  # pinned shard group for ZeRO-1/2/3 (None: every candidate of shard_groups_of)
    hybrid: bool = True  # try shard groups smaller than dp x cp for ZeRO-1/2/3 (hybrid sharding)
    time_all: bool = False  # time the configurations that do not fit too (a picture of them); else their times are nan

    def shard_groups_of(self, ranks: int, tp: int, gpus_per_node: int) -> list[int]:
        """The shard groups S to try for ZeRO-1/2/3 on `ranks` = dp x cp data-parallel ranks: the
        pinned one (if it divides them), or every divisor from one node's share of the data-parallel
        group (gpus_per_node / tp ranks, tp apart) up to all of them; [ranks] alone without hybrid."""
        if self.shard_group is not None:
            return [self.shard_group] if self.shard_group <= ranks and ranks % self.shard_group == 0 else []
        if not self.hybrid:
            return [ranks]
        share = gpus_per_node // tp if gpus_per_node % tp == 0 else 1
        return [s for s in divisors(ranks) if s >= min(share, ranks)]

    def cp_values(self, gpus: int, seq_len: int) -> list[int]:
        """The cp degrees to try: the pinned one, or 1 and, for s >= CP_MIN_SEQ_LEN, every divisor
        of the GPUs that splits the sequence into 2 cp equal chunks (causal load balancing)."""
        if self.cp is not None:
            return [self.cp]
        if seq_len < CP_MIN_SEQ_LEN:
            return [1]
        return [c for c in divisors(gpus) if seq_len % (2 * c) == 0 or c == 1]

    @property
    def torchtitan_split(self) -> bool:
        """Whether every pipeline splits its layers as torchtitan does: its framework's rule, and no split pinned."""
        return (self.framework_split == "torchtitan" and self.pipeline_layout is None and self.first_stage_layers is None
                and self.last_stage_layers is None and not any(self.slots))  # fmt: skip

    @property
    def slots(self) -> tuple[int, int]:
        """(e, l): the layer slots the embedding and the loss take (Megatron-LM's account-for flags)."""
        return int(self.embedding_in_split), int(self.loss_in_split)


def divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def layouts(model: TransformerModel, training: Training, cluster: Cluster, rejected: Counter,
            space: SearchSpace | None = None, cp: int = 1) -> list[tuple[int, int, int]]:  # fmt: skip
    """(tp, pp, dp) with tp x pp x cp x dp = N that pass the divisibility and placement checks (pp:
    an even split, one of search_splits, or the split `space` pins)."""
    gpus = cluster.gpus // cp
    pinned = space is not None and (space.first_stage_layers is not None or space.last_stage_layers is not None)
    slots = space is not None and any(space.slots)
    found = []
    for t in divisors(gpus):
        for p in divisors(gpus // t):
            d = gpus // (t * p)
            if any(v % t for v in (model.heads, model.kv_heads, model.ffn_hidden)):
                rejected["tp does not divide the heads or MLP width"] += 1
            elif (t > cluster.gpus_per_node or cluster.gpus_per_node % t) and not cluster.allow_cross_node_tp:
                rejected["tp does not divide the GPUs of a node"] += 1
            elif space is not None and (space.pipeline_layout is not None or (space.torchtitan_split and p > 1)):
                v_shape = space.schedule is not None and space.schedule.v_shape
                reason = _layout_reason(model, p, space) if space.pipeline_layout is not None else torchtitan_reason(model, p, v_shape)
                if reason is not None:
                    rejected[reason] += 1
                elif training.global_batch % d:
                    rejected["dp does not divide the global batch"] += 1
                else:
                    found.append((t, p, d))
            elif slots and space is not None and not _slot_split_fits(model.layers, p, space):
                rejected["pp does not divide the layer slots (layers + embedding / loss)"] += 1
            elif (not slots and model.layers % p and not search_splits(model.layers, p) and not (pinned and space is not None and p == space.pp)
                  and not (space is not None and proposed_layouts(model, p, space, cluster))):  # fmt: skip
                rejected[NO_SPLIT] += 1
            elif training.global_batch % d:
                rejected["dp does not divide the global batch"] += 1
            else:
                found.append((t, p, d))
    return found


NO_SPLIT = "pp does not divide the layers (no balanced uneven split or layout)"


def proposes_layouts(space: SearchSpace, cluster: Cluster, model: TransformerModel) -> bool:
    """Whether the search proposes Megatron-LM layout strings (proposed_layouts): Megatron-LM's profile (the flag is
    its), the megatron split, no split given (a layout, first / last stage layers, embedding / loss slots), no
    split-backward schedule, and a model whose layers the search's layouts count (no Mamba-2 or gated-DeltaNet mixers)."""
    return (cluster.framework.key == "megatron" and space.framework_split == "megatron" and space.pipeline_layout is None
            and space.first_stage_layers is None and space.last_stage_layers is None and not any(space.slots)
            and space.schedule is None and model.mamba is None and model.linear_attention is None)  # fmt: skip


def covered_chunks(model: TransformerModel, p: int, space: SearchSpace) -> frozenset[int]:
    """The chunk counts v the search's splits of the layers over p ranks already run (the even split or Megatron-LM's
    balanced uneven ones: 1F1B, and v dividing every stage's layers interleaved; fit_search._schedules)."""
    found: set[int] = set()
    for given in splits(model, p, space):
        split = stage_split(model.layers, p, *given)
        found.add(1)
        if p > 1 and space.interleaved:
            found.update(v for v in divisors(math.gcd(*split)) if space.max_chunks is None or v <= space.max_chunks)
    return frozenset(found)


# The slots a virtual stage the published layouts hold (parcalc.core.pipeline_layout.balanced_layout counts them): 2 in
# Megatron-Bridge's H100 recipes (DeepSeek-V3 and Kimi K2 on PP 8 x VP 4, Llama 3 70B on PP 8 x VP 5) and Megatron-LM's
# DeepSeek-V3 example (PP 16 x VP 2), 4 in its GB200 / GB300 ones (DeepSeek-V3 on PP 4 x VP 4 and PP 2 x VP 8)
SLOTS_PER_VIRTUAL_STAGE = (2, 4)


def proposed_layouts(model: TransformerModel, p: int, space: SearchSpace, cluster: Cluster) -> tuple[tuple[int, str], ...]:
    """(v, layout string) of each chunk count v the search proposes a layout for on p ranks: where the search's splits
    (covered_chunks) run no interleaving with it, the v whose virtual stages hold the slots a published layout's do
    (SLOTS_PER_VIRTUAL_STAGE: v = slots / (p x k), rounded), and v = 1 where no split runs p at all; each with the balanced
    layout Megatron-LM users write for it (parcalc.core.pipeline_layout.balanced_layout), where Megatron-LM accepts it and
    every rank holds a transformer layer. One layout per (p, v), at most three per p."""
    if p < 2 or not proposes_layouts(space, cluster, model):
        return ()
    return _proposed(model.layers, model.mtp_layers, p, space.interleaved, space.max_chunks, covered_chunks(model, p, space))


@lru_cache(maxsize=256)
def _proposed(layers: int, mtp_layers: int, p: int, interleaved: bool, max_chunks: int | None,
              covered: frozenset[int]) -> tuple[tuple[int, str], ...]:  # fmt: skip
    from parcalc.core.pipeline_layout import balanced_layout, parse_pipeline_layout

    slots = layers + mtp_layers + 2
    wanted = {1}
    if interleaved:  # v = slots / (p k) to the nearest whole
        wanted |= {(2 * slots + p * k) // (2 * p * k) for k in SLOTS_PER_VIRTUAL_STAGE}
    found = []
    for v in sorted(wanted - covered):
        if v < 1 or (max_chunks is not None and v > max_chunks):
            continue
        text = balanced_layout(layers, mtp_layers, p, v)
        if text is not None and min(parse_pipeline_layout(text, p, layers, mtp_layers).stage_layers()) > 0:
            found.append((v, text))
    return tuple(found)


def search_splits(layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """(n_first, n_last) of the uneven splits the search tries when pp does not divide the layers:
    Megatron-LM's, with no stage above ceil(L / pp) layers (module docstring)."""
    if pp < 2 or layers % pp == 0:
        return ()
    top = -(-layers // pp)
    return tuple((f, z) for f, z in balanced_splits(layers, pp) if max(stage_split(layers, pp, f, z)) == top)


def layout_stage_layers(model: TransformerModel, p: int, text: str) -> tuple[int, ...]:
    """The transformer layers each of p ranks holds under the layout string (its chunks together)."""
    from parcalc.core.pipeline_layout import parse_pipeline_layout

    return parse_pipeline_layout(text, p, model.layers, model.mtp_layers).stage_layers()


def _layout_reason(model: TransformerModel, p: int, space: SearchSpace) -> str | None:
    """Why pp = p cannot run the search's --pipeline-layout (parcalc.core.pipeline_layout.search_reason; None: it can)."""
    from parcalc.core.pipeline_layout import search_reason

    assert space.pipeline_layout is not None
    v_shape = space.schedule is not None and space.schedule.v_shape  # a V's layout is placed otherwise (pipeline_layout.V_PLACEMENT)
    return search_reason(space.pipeline_layout, p, model, space.interleaved, space.max_chunks, v_shape)


def torchtitan_ranks(layers: int, p: int, stages: int, v_shape: bool = False) -> tuple[int, ...] | None:
    """The transformer layers each of p ranks holds under torchtitan's split of the layers over `stages` virtual stages
    (rank r: stages r, r + p, ...; in a V stages r and 2p - 1 - r); None where torchtitan refuses the split."""
    from parcalc.core.pipeline_torchtitan import virtual_stage_layers

    try:
        split = virtual_stage_layers(stages, layers)
    except InputError:
        return None
    if v_shape:
        return tuple(split[r] + split[2 * p - 1 - r] for r in range(p))
    return tuple(sum(split[r::p]) for r in range(p))


def torchtitan_reason(model: TransformerModel, p: int, v_shape: bool = False) -> str | None:
    """Why the search cannot time torchtitan's split of the layers over p ranks (None: it can): torchtitan refuses it (the
    MTP module under pp, more stages than layers) or a rank holds no layer. Any per-rank layer counts it gives are timed
    (parcalc.core.fit_search takes each rank's layers and its ends from torchtitan's own layout: 80 layers on PP 8 are
    10 + 11 + 5 x 10 + 9). v_shape: the split of a V schedule (ZB-V, DualPipeV), 2p stages placed in the V, rank 0 holding
    the embedding and the head."""
    if model.mtp_layers:
        return "torchtitan trains the MTP module without pipeline parallelism only"
    split = torchtitan_ranks(model.layers, p, 2 * p if v_shape else p, v_shape)  # a V: 2p stages, rank r runs r and 2p - 1 - r
    if split is None or min(split) == 0:
        return "torchtitan's split leaves a stage without a transformer layer (or refuses pp)"
    return None


def _slot_split_fits(layers: int, p: int, space: SearchSpace) -> bool:
    """Whether p stages split the layer slots evenly with a transformer layer on every stage (stage_split)."""
    try:
        stage_split(layers, p, embedding_in_split=space.embedding_in_split, loss_in_split=space.loss_in_split)
    except InputError:
        return False
    return True


def splits(model: TransformerModel, p: int, space: SearchSpace) -> list[tuple[int | None, int | None]]:
    """The (first, last) stage-layer pairs to evaluate for pp = p; (None, None): the even split. With
    the embedding / loss slots, the uneven split that leaves the same layers per stage."""
    if any(space.slots):
        return [stage_ends(model.layers, p, embedding_in_split=space.embedding_in_split, loss_in_split=space.loss_in_split)]
    if space.pipeline_layout is not None and p > 1:  # the ranks' layers as the layout places them (_layout_reason checked the shape)
        split = layout_stage_layers(model, p, space.pipeline_layout)
        return [(None, None)] if len(set(split)) == 1 else [(split[0], split[-1])]
    if space.first_stage_layers is not None or space.last_stage_layers is not None:
        return [(space.first_stage_layers, space.last_stage_layers)]
    if space.torchtitan_split and p > 1:  # torchtitan's own split (its ranks' layers: split_layers)
        ranks = split_layers(model, p, space, (None, None))
        return [(None, None)] if len(set(ranks)) == 1 else [(ranks[0], ranks[-1])]
    if model.layers % p == 0:
        return [(None, None)]
    return list(search_splits(model.layers, p))


def split_layers(model: TransformerModel, p: int, space: SearchSpace, given: tuple[int | None, int | None]) -> tuple[int, ...]:
    """Every rank's transformer layers, first to last, of the split `given` (one of splits()): a --pipeline-layout's ranks'
    (whatever they hold); torchtitan's own where the search splits as torchtitan does (one stage a rank, or 2p in a V: any
    per-rank counts, its middle ranks need not be equal); else Megatron-LM's first / even middle / last split
    (parcalc.core.stages.stage_split)."""
    if space.pipeline_layout is not None and p > 1:  # the layout's own ranks, whatever they hold
        return layout_stage_layers(model, p, space.pipeline_layout)
    if space.torchtitan_split and p > 1:
        v_shape = space.schedule is not None and space.schedule.v_shape  # a V: its 2p stages placed in the V
        ranks = torchtitan_ranks(model.layers, p, 2 * p if v_shape else p, v_shape)
        assert ranks is not None  # torchtitan_reason let the layout through
        return ranks
    return stage_split(model.layers, p, *given)


def parallel_layouts(model: TransformerModel, training: Training, cluster: Cluster, space: SearchSpace,
                      rejected: Counter) -> list[tuple[int, int, int, int, int]]:  # fmt: skip
    """(tp, pp, cp, dp, ep) to evaluate: layouts() for every cp of SearchSpace.cp_values that
    parcalc.core.context accepts, and for MoE models every ep dividing the routed experts with
    ep x etp dividing tp x cp x dp (etp = tp: the search keeps Megatron-Core's default; --etp is
    for one configuration), as parcalc.core.expert_parallel.expert_layout checks it."""
    from parcalc.core.context import check_context_parallel
    from parcalc.core.expert_parallel import expert_layout

    if model.moe is None:
        eps = [space.ep if space.ep is not None else 1]
    else:
        eps = [space.ep] if space.ep is not None else divisors(model.moe.experts)
    found = []
    for c in space.cp_values(cluster.gpus, training.seq_len):
        if cluster.gpus % c:
            rejected["cp does not divide the GPUs"] += 1
            continue
        for t, p, d in layouts(model, training, cluster, rejected, space, cp=c):
            if not (space.tp in (None, t) and space.pp in (None, p) and space.dp in (None, d)):
                continue
            try:
                check_context_parallel(model, training.seq_len, Layout(t, cp=c, cp_comm=space.cp_comm), training.causal)
            except InputError:
                rejected["cp does not split the sequence (or the heads, a2a)"] += 1
                continue
            if model.mamba is not None and _mamba_reason(model, t, c):
                rejected["tp x cp does not split the Mamba-2 heads and groups (MambaMixer, MambaContextParallel)"] += 1
                continue
            for e in eps:
                layout = Layout(tp=t, pp=p, dp=d, cp=c, ep=e)
                if cluster.framework.layout_reason(layout) is not None:  # a data-parallel-only stack (the hf profile)
                    rejected[f"{cluster.framework.key} runs data parallelism only"] += 1
                    continue
                try:
                    expert_layout(model, layout)
                except InputError:
                    rejected["ep x etp does not divide tp x cp x dp (or ep the experts)"] += 1
                    continue
                found.append((t, p, c, d, e))
    return found


def _mamba_reason(model: TransformerModel, tp: int, cp: int) -> bool:
    """Whether Megatron-Core's MambaMixer refuses tp (nheads and ngroups % tp_size, megatron/core/ssm/mamba_mixer.py
    @d98e8a64 lines 262, 270) or MambaContextParallel refuses cp on it (parcalc.core.hybrid_context.mixer_cp_reason)."""
    from parcalc.core.hybrid_context import mixer_cp_reason

    assert model.mamba is not None
    return bool(model.mamba.heads % tp or model.mamba.groups % tp or mixer_cp_reason(model, tp, cp) is not None)
