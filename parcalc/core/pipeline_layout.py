"""Megatron-LM's custom pipeline layout (--pipeline-model-parallel-layout): which layers each
virtual pipeline stage holds, written as recipes write it.

The text, as Megatron-LM reads it (megatron/core/transformer/pipeline_parallel_layer_layout.py,
PipelineParallelLayerLayout.parse_str_to_list and validate_layer_layout, NVIDIA/Megatron-LM
@d98e8a64dd): `E` the embedding, `t` a transformer (decoder) layer, `m` a multi-token-prediction
layer, `L` the loss; `|` ends a virtual stage; `(...)*n` and `x*n` repeat; commas are cosmetic.
The virtual stages are listed in layer order: virtual stage i runs on pipeline rank i mod p as its
(i div p)-th model chunk, so p ranks hold v = stages / p chunks each. Under a V schedule (DualPipeV,
ZB-V) the 2p virtual stages go in a V as torchtitan places them (V_PLACEMENT): rank d runs stage d on
the way down and stage 2p - 1 - d on the way back. DeepSeek-V3's recipe
`Et|(tt|)*30mL` on p = 8: 32 virtual stages, v = 4; rank 0 holds the embedding and layers
0, 15-16, 31-32, 47-48 (7 layers), ranks 1-6 eight each, rank 7 six and the MTP layer and loss.

Megatron's rules, each a one-line error here: the embedding first and the loss last, each once;
as many `t` as the model has layers and as many `m` as it has MTP layers, the MTP layers after
every transformer layer; the stage count a multiple of p. parcalc refuses one more thing
Megatron allows: a virtual stage that holds nothing (almost always a typo, an extra `|`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.named_tuple import NamedTuple

FLAG = "--pipeline-layout"
SOURCE = ("Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py (@d98e8a64dd): "
          "PipelineParallelLayerLayout.parse_str_to_list, validate_layer_layout")  # fmt: skip
V_PLACEMENT = ("torchtitan torchtitan/distributed/pipeline_parallel.py @b5bcd76c, _get_pp_rank_to_stage_indices_mapping: style 'v' for "
               "ScheduleZBVZeroBubble and ScheduleDualPipeV, rank d runs stages d and 2p - 1 - d, asserting stages_per_rank == 2 ('v "
               "schedules assume 2 stages per rank'); deepseek-ai/DualPipe @3da1bbe dualpipev.py takes any two modules a rank")  # fmt: skip
LETTERS = "E the embedding, t a transformer layer, m an MTP layer, L the loss, | ends a virtual stage, (...)*n or x*n repeats"
# Unrolled text longer than this is refused before it is built: a recipe for 1,000 layers on 1,000 stages is ~3,000 letters
MAX_LETTERS = 1_000_000
_REPEATS = (re.compile(r"\(([^()]+)\)\*(\d+)"), re.compile(r"([EtmL|])\*(\d+)"))  # Megatron's two patterns, in its order


class VirtualStage(NamedTuple):
    """What one virtual pipeline stage holds."""

    layers: int  # transformer layers
    embedding: bool = False
    mtp: int = 0  # multi-token-prediction layers
    loss: bool = False


class PipelineSplit(NamedTuple):
    """A parsed layout over p pipeline ranks: the virtual stages in layer order. v_shape: placed in a V (V_PLACEMENT) for
    DualPipeV and ZB-V, else virtual stage i on rank i mod p (Megatron-LM)."""

    text: str
    pp: int
    stages: tuple[VirtualStage, ...]
    v_shape: bool = False

    @property
    def chunks(self) -> int:
        """Model chunks per rank (Megatron's virtual pipeline size v; 2 in a V)."""
        return len(self.stages) // self.pp

    def rank_of(self, index: int) -> int:
        """The rank that runs virtual stage `index`: index mod p, or in a V index on the way down and 2p - 1 - index back."""
        if self.v_shape:
            return index if index < self.pp else 2 * self.pp - 1 - index
        return index % self.pp

    def rank_chunks(self, rank: int) -> tuple[VirtualStage, ...]:
        """The virtual stages rank `rank` holds, its chunk 0 first."""
        if self.v_shape:
            return (self.stages[rank], self.stages[2 * self.pp - 1 - rank])
        return self.stages[rank::self.pp]

    def stage_layers(self) -> tuple[int, ...]:
        """Transformer layers on each rank, first to last."""
        return tuple(sum(s.layers for s in self.rank_chunks(rank)) for rank in range(self.pp))

    def stage_ranges(self) -> tuple[tuple[range, ...], ...]:
        """The layer ranges each rank holds (one per chunk), first rank first."""
        ranges: list[list[range]] = [[] for _ in range(self.pp)]
        start = 0
        for index, stage in enumerate(self.stages):
            ranges[self.rank_of(index)].append(range(start, start + stage.layers))
            start += stage.layers
        return tuple(tuple(r) for r in ranges)

    def mtp_rank(self) -> int | None:
        """The rank whose last chunk holds the MTP layers (None: the layout has none)."""
        for index, stage in enumerate(self.stages):
            if stage.mtp:
                return self.rank_of(index)
        return None


def _unroll(text: str) -> str:
    """The layout with its repeats written out, as Megatron's parse_str_to_list does, refusing what would not fit in memory."""
    unrolled = text.replace(",", "").replace(" ", "")
    for pattern in _REPEATS:
        def repeat(match: re.Match[str]) -> str:
            times = match.group(2)
            if len(times) > 7 or int(times) * len(match.group(1)) > MAX_LETTERS:
                raise InputError(f"{FLAG}: the repeat {match.group(0)[:40]!r} unrolls to more than {MAX_LETTERS:,} letters")
            if int(times) == 0:
                raise InputError(f"{FLAG}: the repeat {match.group(0)[:40]!r} repeats nothing (a count of 0)")
            return match.group(1) * int(times)

        unrolled = pattern.sub(repeat, unrolled)
        if len(unrolled) > MAX_LETTERS:
            raise InputError(f"{FLAG}: the layout unrolls to more than {MAX_LETTERS:,} letters")
    leftover = sorted(set(unrolled) & set("()*0123456789"))
    if leftover:
        raise InputError(f"{FLAG}: cannot read {leftover[0]!r} in {text[:80]!r}: write a repeat as (...)*n or x*n with a whole n "
                         "(no nested parentheses)")  # fmt: skip
    return unrolled


def _letters(text: str) -> str:
    """The layout with its letters checked and its repeats unrolled (virtual stages split by '|')."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{FLAG}: an empty layout; {LETTERS}")
    unknown = sorted(set(text) - set("EtmL|()*0123456789, "))
    if unknown:
        raise InputError(f"{FLAG}: unknown letter {unknown[0]!r} in {text[:80]!r}; {LETTERS}")
    return _unroll(text)


def unrolled(text: str) -> str:
    """The layout's letters with its repeats written out (checked as parse_pipeline_layout checks them)."""
    return _letters(text)


def virtual_stage_count(text: str) -> int:
    """The virtual stages the layout lists (its letters checked, its repeats unrolled)."""
    return _letters(text).count("|") + 1


@lru_cache(maxsize=256)
def parse_pipeline_layout(text: str, pp: int, layers: int, mtp_layers: int | None = 0, v_shape: bool = False) -> PipelineSplit:
    """The layout `text` over `pp` ranks for a model of `layers` transformer layers and `mtp_layers`
    MTP layers (None: not checked), checked as Megatron-LM checks it (module docstring); InputError
    names what is wrong. v_shape: the stages placed in a V (DualPipeV, ZB-V: exactly 2p of them, V_PLACEMENT)."""
    flat = _letters(text)
    parts = flat.split("|")
    stages = tuple(VirtualStage(part.count("t"), "E" in part, part.count("m"), "L" in part) for part in parts)
    empty = [i for i, part in enumerate(parts) if not part]
    if empty:
        raise InputError(f"{FLAG}: virtual stage {empty[0] + 1} of {len(parts)} holds nothing (an extra '|'?)")
    if len(stages) % pp:
        count = f"{len(stages)} virtual stage{'s do' if len(stages) != 1 else ' does'}"
        raise InputError(f"{FLAG}: {count} not split over --pp {pp} (Megatron-LM: the stage count is a multiple of the pipeline "
                         "size; each rank runs stages / pp chunks)")  # fmt: skip
    if v_shape and len(stages) != 2 * pp:
        raise InputError(f"{FLAG}: {len(stages)} virtual stages over --pp {pp}; a V schedule runs exactly two a rank, stage d and "
                         f"2p - 1 - d (2p = {2 * pp}; {V_PLACEMENT})")  # fmt: skip
    letters = flat.replace("|", "")
    if letters.count("E") != 1 or letters[0] != "E":
        raise InputError(f"{FLAG}: the embedding E comes first and once (Megatron-LM validate_layer_layout)")
    if letters.count("L") != 1 or letters[-1] != "L":
        raise InputError(f"{FLAG}: the loss L comes last and once (Megatron-LM validate_layer_layout)")
    held = letters.count("t")
    if held != layers:
        raise InputError(f"{FLAG}: the layout holds {held} transformer layers (t), the model {layers}")
    mtp = letters.count("m")
    if mtp_layers is not None and mtp != mtp_layers:
        raise InputError(f"{FLAG}: the layout holds {mtp} MTP layers (m), the model {mtp_layers}"
                         + ("" if mtp_layers else " (it has no multi-token prediction)"))  # fmt: skip
    if mtp and "t" in letters[letters.index("m"):]:
        raise InputError(f"{FLAG}: the MTP layers (m) come after every transformer layer (Megatron-LM validate_layer_layout)")
    return PipelineSplit(text, pp, stages, v_shape)


def stage_layers_of_layout(split: PipelineSplit, rank: int) -> Derivation:
    """L_stage of rank `rank` under a custom layout: the transformer layers of its chunks, each named."""
    chunks = split.rank_chunks(rank)
    terms = tuple(Term(f"n_{c}", f"n_{c}", f"n_{{{c}}}", stage.layers, "",
                       f"layers of its chunk {c + 1} (virtual stage {c * split.pp + rank + 1} of --pipeline-layout)")
                  for c, stage in enumerate(chunks))  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in terms)
    return Derivation("stage_layers", f"Layers on stage {rank + 1} (--pipeline-layout {split.text})", "L_stage", r"L_{\mathrm{stage}}",
                      formula, formula, terms, float(sum(stage.layers for stage in chunks)), "", SOURCE)  # fmt: skip


def check_layout_settings(layout: Any, model: Any) -> None:
    """A custom layout against the rest of the Layout and the model: its letters (parse_pipeline_layout, the model's
    MTP layers too), its chunks equal to the Layout's, and no other split given beside it."""
    from parcalc.core.choices import Schedule

    assert layout.pipeline_layout is not None
    v_shape = layout.schedule.v_shape and layout.pp > 1  # DualPipeV, ZB-V: two virtual stages a rank in a V (V_PLACEMENT)
    split = parse_pipeline_layout(layout.pipeline_layout, layout.pp, model.layers, getattr(model, "mtp_layers", 0), v_shape)
    if layout.first_stage_layers is not None or layout.last_stage_layers is not None or layout.embedding_in_split or layout.loss_in_split:
        raise InputError(f"{FLAG}: gives every stage's layers; --first-stage-layers, --last-stage-layers and the embedding / loss "
                         "slots split the stages another way (give one of them)")  # fmt: skip
    if v_shape:
        return  # the V's two chunks a rank are the schedule's, not --chunks (parcalc.results.fit_request)
    if layout.chunks != split.chunks:
        raise InputError(f"{FLAG}: {len(split.stages)} virtual stages over --pp {layout.pp} are {split.chunks} chunks per rank, "
                         f"not --chunks {layout.chunks}")  # fmt: skip
    if split.chunks > 1 and layout.schedule is not Schedule.INTERLEAVED:
        raise InputError(f"{FLAG}: {split.chunks} chunks per rank run the interleaved schedule (--schedule interleaved)")


def search_reason(text: str, p: int, model: Any, interleaved: bool = True, max_chunks: int | None = None,
                  v_shape: bool = False) -> str | None:  # fmt: skip
    """Why `fit --search` cannot run the layout on p pipeline ranks (None: it can). The layout is kept as written: p
    must split its virtual stages (v = stages / p chunks each), interleaving must be allowed for v > 1, and every rank
    must hold a transformer layer (the search's arrays time a stage by its layers). Any layers the ranks then hold are
    timed: the search takes each rank's from the layout (parcalc.core.fit_search, search_layouts.split_layers)."""
    if v_shape:
        return f"the search places the {FLAG}'s virtual stages on rank i mod p; a V schedule's layout is timed without --search"
    stages = virtual_stage_count(text)
    if stages % p:
        return f"pp does not split the {FLAG}'s {stages} virtual stages"
    v = stages // p
    if v > 1 and (p == 1 or not interleaved or (max_chunks is not None and v > max_chunks)):
        return f"the {FLAG}'s chunks per rank (stages / pp) are not searched (pp 1, --no-interleaved or --max-chunks)"
    split = parse_pipeline_layout(text, p, model.layers, model.mtp_layers).stage_layers()
    if min(split) == 0:
        return f"a rank holds no transformer layer under the {FLAG} (the search's arrays time a stage by its layers)"
    return None


# The layout fit --search proposes where the layers do not split over pp x v virtual stages (balanced_layout)
BALANCED_SOURCE = ("Megatron-LM counts the embedding and the loss as one layer slot each when splitting the pipeline "
                   "(--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, megatron/core/transformer/"
                   "transformer_config.py @d98e8a64dd); Megatron-Bridge's H100 recipes deal E, the layers, the MTP layers and L "
                   "so over PP 8 x VP 4: DeepSeek-V3 'Et|(tt|)*30mL' (src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py), "
                   "Kimi K2 'Et|(tt|)*30L' (perf_recipes/kimi/h100/kimi_k2.py), NVIDIA-NeMo/Megatron-Bridge @067f987df")  # fmt: skip


@lru_cache(maxsize=1024)
def balanced_layout(layers: int, mtp_layers: int, pp: int, chunks: int) -> str | None:
    """The layout string that deals a model's slots evenly over pp x chunks virtual stages in layer order (None: none
    such that Megatron-LM accepts): the embedding, each transformer layer, each MTP layer and the loss one slot each
    (BALANCED_SOURCE), q = slots // stages a stage and the first slots % stages stages one more; the embedding opens
    the first stage, the MTP layers and the loss close the last (Megatron-LM: every MTP layer in one virtual stage,
    the rank's last). DeepSeek-V3 (61 layers, 1 MTP) on PP 8 x VP 4: 64 slots, 2 a stage, 'Et|(tt|)*30mL'."""
    stages = pp * chunks
    slots = layers + mtp_layers + 2
    if stages < 2 or stages > slots:
        return None
    share, extra = divmod(slots, stages)
    shares = [share + 1 if i < extra else share for i in range(stages)]
    tail = mtp_layers + 1  # the MTP layers and the loss: the last stage's
    if shares[-1] < tail:
        return None
    counts = [shares[0] - 1, *shares[1:-1], shares[-1] - tail]  # transformer layers of each virtual stage
    texts = [_layer_run(n) for n in counts]
    texts[0] = "E" + texts[0]
    texts[-1] += ("m" * mtp_layers if mtp_layers < 3 else f"m*{mtp_layers}") + "L"
    return _written(texts)


def _layer_run(n: int) -> str:
    """n transformer layers as recipes write them: 't', 'tt', then 't*n'."""
    return "t" * n if n < 3 else f"t*{n}"


def _written(texts: list[str]) -> str:
    """Virtual stages' letters as one layout string, a run of equal stages (the last stage apart) as '(X|)*n'."""
    out, i = [], 0
    while i < len(texts) - 1:
        j = i
        while j + 1 < len(texts) - 1 and texts[j + 1] == texts[i]:
            j += 1
        run = j - i + 1
        out.append(f"({texts[i]}|)*{run}" if run > 1 else f"{texts[i]}|")
        i = j + 1
    return "".join(out) + texts[-1]
