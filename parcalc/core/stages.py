"""Transformer layers per pipeline stage: Megatron-LM's even split and its uneven first and last stages.

Megatron-LM (NVIDIA/Megatron-LM at d98e8a64ddf3; the line numbers below are of that commit):

- Without --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, every stage
  builds L/p layers and p must divide L: megatron/training/arguments.py, validate_args, lines
  985-998 ('Number of layers should be divisible by the pipeline-model-parallel size'), and
  megatron/core/transformer/transformer_block.py, get_num_layers_to_build, lines 147-159.
- With them, the first stage builds n_first layers, the last n_last, and the L - n_first - n_last
  others split evenly over the stages left, p - 2 when both are given and p - 1 when one is
  (get_num_layers_to_build, lines 103-146: layers_to_distribute, pipeline_stages_left).
- TransformerConfig.__post_init__ (megatron/core/transformer/transformer_config.py, "Uneven PP",
  lines 2294-2366) refuses n_first or n_last <= 0 ('must be larger than 0'), middle layers left
  over with no middle stage or middle stages with no layers ('Mismatch'), a remainder that the
  middle stages do not divide, and with v virtual stages (the interleaved schedule) an n_first,
  n_last or middle-stage count that v does not divide (each stage is cut into v chunks, lines
  161-181 of transformer_block.py).

parcalc follows those rules exactly: 0 layers on the first or last stage is an error (Megatron
refuses it), and so is an empty middle stage.

Megatron's other way to unbalance the ends, --account-for-embedding-in-pipeline-split /
--account-for-loss-in-pipeline-split (parcalc: --embedding-in-split / --loss-in-split), counts the
embedding (the loss) as one layer slot of the split: with e, l in {0, 1}, p v must divide the
L + e + l slots, every stage holds (L + e + l)/p of them, and the embedding's slot is taken from
the first chunk of the first stage, the loss's from the last chunk of the last stage
(get_num_layers_to_build, lines 147-159 and 188-202 of that commit: 'Include the embedding layer
and loss layer into pipeline parallelism partition'; the uneven-stage flags and these two exclude
each other, lines 108-112: 'Does not support standalone embedding stage and standalone loss stage with
uneven pp'). The layers per stage are those of n_first = (L + e + l)/p - e and n_last =
(L + e + l)/p - l; only the chunks differ: v must divide the slots of a stage, not its layers, so
that with v = (L + e + l)/p the first chunk of the first stage holds the embedding alone. parcalc
refuses a stage left with no transformer layer (its stage model times layers).

Examples. Llama 3 405B: 126 layers on 16 stages, 'we reduce one Transformer layer each from the
first and the last stages' (Dubey et al. 2024, The Llama 3 Herd of Models, sec. 3.3.2): 7 + 14 x 8
+ 7 = 126; 'this means that the first model chunk on the first stage has only the embedding, and
the last model chunk on the last stage has only output projection and loss calculation', i.e. the
embedding and the loss each take a slot, 128 slots on 16 stages, and one slot per chunk, v = 8
(--embedding-in-split --loss-in-split --chunks 8). BLOOM 176B: 70 layers on 12 stages with Megatron-DeepSpeed's 'type:transformer|embedding'
partition, 'pp rank 0: [embed | 5 transformer blocks] ... pp rank 1: [6 transformer blocks] ...
pp rank 11: [5 transformer blocks | embed]' (bigscience-workshop/bigscience,
train/tr11-176B-ml/README.md): 5 + 10 x 6 + 5 = 70, entered as --first-stage-layers 5
--last-stage-layers 5.
"""

from __future__ import annotations

from functools import lru_cache

from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

FIRST_FLAG = "--first-stage-layers"
LAST_FLAG = "--last-stage-layers"
EMBEDDING_FLAG = "--embedding-in-split"
LOSS_FLAG = "--loss-in-split"
MEGATRON_EVEN = (
    "Megatron-LM: equal stages, p divides L (megatron/training/arguments.py, validate_args; "
    "megatron/core/transformer/transformer_block.py, get_num_layers_to_build)"
)
MEGATRON_SLOTS = (
    "Megatron-LM's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split "
    "(megatron/core/transformer/transformer_block.py, get_num_layers_to_build)"
)
MEGATRON_UNEVEN = (
    "Megatron-LM's uneven pipeline, --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers "
    "(megatron/core/transformer/transformer_block.py, get_num_layers_to_build; transformer_config.py, 'Uneven PP')"
)


def check_stage_layers(flag: str, value: object) -> None:
    """A first or last stage's layers: a whole number from 1 (Megatron-LM refuses 0) to 2^53."""
    # imported here: comm-volume's start-up need not load parcalc.core.activations
    from parcalc.core.activations import check_count

    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise InputError(f"{flag}: at least 1 layer, got {value} (Megatron-LM refuses an empty first or last stage: "
                         "'must be larger than 0')")  # fmt: skip
    check_count(flag, value)


@lru_cache(maxsize=4096)  # pure (a tuple, or InputError, which is not cached); the search asks again per layout and stage
def stage_split(layers: int, pp: int, first: int | None = None, last: int | None = None, chunks: int = 1, *,
                pp_flag: str = "--pp", embedding_in_split: bool = False, loss_in_split: bool = False) -> tuple[int, ...]:  # fmt: skip
    """Transformer layers of each of the `pp` stages, first to last, by Megatron-LM's rule (module
    docstring): L/p each when neither `first` nor `last` is given, else `first` and `last` layers on
    the end stages and the rest split evenly over the middle ones. `chunks`: the interleaved
    schedule's model chunks per stage, which must divide every stage's layers (its layer slots with
    `embedding_in_split` / `loss_in_split`: the embedding / the loss as one slot of the split).
    InputError, naming the flag, for a split Megatron refuses (`pp_flag`: the flag that gave pp)."""
    from parcalc.core.activations import check_count

    for flag, value in (("--layers", layers), (pp_flag, pp), ("--chunks", chunks)):
        check_count(flag, value)
    if embedding_in_split or loss_in_split:
        return _slot_split(layers, pp, first, last, chunks, pp_flag, int(embedding_in_split), int(loss_in_split))
    if first is None and last is None:
        if layers % (pp * chunks):
            what = f"pp x chunks = {pp} x {chunks}" if chunks > 1 else f"pp = {pp}"
            raise InputError(f"{pp_flag}: {layers} layers do not split evenly over {what} (Megatron-LM requires equal stages "
                             f"unless {FIRST_FLAG} / {LAST_FLAG} are given){_hint(layers, pp, chunks)}")  # fmt: skip
        return (layers // pp,) * pp
    given = [(flag, n) for flag, n in ((FIRST_FLAG, first), (LAST_FLAG, last)) if n is not None]
    for flag, n in given:
        check_stage_layers(flag, n)
    names = " and ".join(flag for flag, _ in given)
    if pp == 1:
        raise InputError(f"{names}: an uneven split needs {pp_flag} > 1 (one stage holds all {layers} layers)")
    for flag, n in given:
        if n >= layers:
            raise InputError(f"{flag}: {n} layers leave none for the other {pp - 1} stage(s) of a {layers}-layer model; "
                             "every stage needs at least one")  # fmt: skip
    middle = pp - len(given)
    rest = layers - sum(n for _, n in given)
    sum_text = " + ".join(f"{n}" for _, n in given)
    others = f"{middle} middle stage(s)" if len(given) == 2 else f"other {middle} stage(s)"
    if rest < 0:
        raise InputError(f"{names}: {sum_text} = {layers - rest} layers, more than the model's {layers}{_hint(layers, pp, chunks)}")
    if middle == 0 and rest != 0:
        raise InputError(f"{names}: {sum_text} = {layers - rest} layers, but with {pp_flag} 2 the two stages hold all {layers} layers "
                         f"(Megatron-LM's 'Mismatch' check){_hint(layers, pp, chunks)}")  # fmt: skip
    if middle > 0 and rest < middle:
        raise InputError(f"{names}: {sum_text} layers leave {rest} of the {layers} for the {others}; "
                         f"every stage needs at least one layer{_hint(layers, pp, chunks)}")  # fmt: skip
    if middle > 0 and rest % middle:
        raise InputError(f"{names}: the {rest} layers left after {sum_text} do not split evenly over the {others} "
                         f"(Megatron-LM requires it){_hint(layers, pp, chunks)}")  # fmt: skip
    each = rest // middle if middle else 0
    n_first = first if first is not None else each
    n_last = last if last is not None else each
    split = (n_first,) + (each,) * (pp - 2) + (n_last,)
    if chunks > 1:
        for where, held in (("first stage", n_first), ("middle stages", each if pp > 2 else None), ("last stage", n_last)):
            if held is not None and held % chunks:
                raise InputError(f"--chunks: {chunks} chunks per stage do not divide the {held} layers of the {where} "
                                 "(Megatron-LM cuts every stage into v equal chunks)")  # fmt: skip
    return split


def stage_ends(layers: int, pp: int, first: int | None = None, last: int | None = None, chunks: int = 1, *,
               embedding_in_split: bool = False, loss_in_split: bool = False) -> tuple[int | None, int | None]:  # fmt: skip
    """(n_first, n_last) as the uneven split takes them (None, None: the even split): the given ones,
    or, with the embedding / loss slots, the layers those leave on the end stages, which the timing
    and memory models treat like Megatron-LM's uneven split of the same layers."""
    if not (embedding_in_split or loss_in_split) or pp == 1:
        return first, last
    split = stage_split(layers, pp, first, last, chunks, embedding_in_split=embedding_in_split, loss_in_split=loss_in_split)
    return split[0], split[-1]


def _slot_split(layers: int, pp: int, first: int | None, last: int | None, chunks: int, pp_flag: str, e: int,
                l_slot: int) -> tuple[int, ...]:  # fmt: skip
    """Megatron-LM's split with the embedding (e = 1) and / or the loss (l_slot = 1) as layer slots."""
    names = " and ".join(flag for flag, on in ((EMBEDDING_FLAG, e), (LOSS_FLAG, l_slot)) if on)
    if first is not None or last is not None:
        given = FIRST_FLAG if first is not None else LAST_FLAG
        raise InputError(f"{names}: not with {given} (Megatron-LM: 'Does not support standalone embedding stage and "
                         "standalone loss stage with uneven pp')")  # fmt: skip
    slots = layers + e + l_slot
    if slots % (pp * chunks):
        what = f"pp x chunks = {pp} x {chunks}" if chunks > 1 else f"pp = {pp}"
        raise InputError(f"{pp_flag}: the {slots} slots of {names} ({layers} layers + {e + l_slot}) do not split evenly "
                         f"over {what} (Megatron-LM requires it)")  # fmt: skip
    each = slots // pp
    split = (each,) * pp if pp > 1 else (slots,)
    split = (split[0] - e,) + split[1:]
    split = split[:-1] + (split[-1] - l_slot,)
    if min(split) < 1:
        raise InputError(f"{names}: {slots} slots on {pp} stages leave a stage with no transformer layer "
                         "(Megatron-LM allows it; parcalc's stage model needs one layer per stage)")  # fmt: skip
    return split


def _hint(layers: int, pp: int, chunks: int) -> str:
    """A valid uneven split to suggest, when there is one."""
    if pp < 2:
        return ""
    options = balanced_splits(layers, pp, chunks)
    if not options:
        return ""
    first, last = min(options, key=lambda s: (abs(s[0] - s[1]), s[1]))
    return f"; e.g. {FIRST_FLAG} {first} {LAST_FLAG} {last} ({split_text(stage_split(layers, pp, first, last, chunks))})"


@lru_cache(maxsize=256)
def balanced_splits(layers: int, pp: int, chunks: int = 1) -> tuple[tuple[int, int], ...]:
    """(n_first, n_last) of the uneven splits Megatron-LM allows whose fullest stage holds the fewest
    layers any of them can: the splits `fit --search` tries when p does not divide L. For 126 layers
    on 16 stages: (6, 8), (7, 7), (8, 6), each with 8 layers on every middle stage.

    Without trying every split (which took hours for a million layers): the middle stages' layers
    m (a multiple of the chunks v) leave r = L - (p - 2) m for the ends, whose fuller end holds at
    least v ceil(r / 2v); the fullest stage, max(m, that), falls and then rises with m, so its
    fewest is found by walking from m = L / p, and every m that reaches it lies next to that one."""
    if pp < 2 or layers < pp:
        return ()
    c, middle_stages = chunks, pp - 2
    if layers % c:  # the ends and the middle stages are all multiples of v
        return ()

    def fullest(each: int) -> int:
        rest = layers - middle_stages * each
        return max(each, c * -(-rest // (2 * c)))

    if middle_stages:
        low, high = c, (layers - 2 * c) // middle_stages // c * c  # both ends keep at least v layers
        if high < low:
            return ()
        best = min(max(layers // pp // c * c, low), high)
        while best - c >= low and fullest(best - c) < fullest(best):
            best -= c
        while best + c <= high and fullest(best + c) < fullest(best):
            best += c
    else:
        low = high = best = 0
    fewest = fullest(best)
    first_each = last_each = best
    while first_each - c >= low and fullest(first_each - c) == fewest:
        first_each -= c
    while last_each + c <= high and fullest(last_each + c) == fewest:
        last_each += c
    found = []
    for each in range(first_each, last_each + 1, c) if middle_stages else (0,):
        rest = layers - middle_stages * each
        lowest = max(c, rest - fewest)
        lowest = -(-lowest // c) * c
        for first in range(lowest, min(fewest, rest - c) + 1, c):
            found.append((first, rest - first))
    return tuple(sorted(found))


def split_text(split: tuple[int, ...]) -> str:
    """'7 + 14 x 8 + 7': runs of equal stages as count x layers."""
    parts, i = [], 0
    while i < len(split):
        j = i
        while j < len(split) and split[j] == split[i]:
            j += 1
        parts.append(f"{split[i]}" if j - i == 1 else f"{j - i} x {split[i]}")
        i = j
    return " + ".join(parts)


def is_uneven(first: int | None, last: int | None) -> bool:
    return first is not None or last is not None


def stage_layers_derivation(layers: int, pp: int, first: int | None, last: int | None, stage: int, chunks: int = 1, *,
                            embedding_in_split: bool = False, loss_in_split: bool = False) -> Derivation:  # fmt: skip
    """L_stage of stage `stage` (0-based), with the formula of Megatron-LM's rule it follows."""
    split = stage_split(layers, pp, first, last, chunks, embedding_in_split=embedding_in_split, loss_in_split=loss_in_split)
    l_term = Term("L", "L", "L", layers, "", "transformer layers")
    p_term = Term("p", "p", "p", pp, "", "pipeline stages")
    label = f"Layers on stage {stage + 1}"
    if (embedding_in_split or loss_in_split) and pp > 1:
        e, z = int(embedding_in_split), int(loss_in_split)
        s_term = Term("n_s", "n_slots", r"n_{\mathrm{slots}}", e + z, "",
                      "layer slots of the embedding and the loss (" + " and ".join(
                          f for f, on in ((EMBEDDING_FLAG, e), (LOSS_FLAG, z)) if on) + ")")  # fmt: skip
        formula, latex = "($L + $n_s) / $p", r"\frac{$L + $n_s}{$p}"
        if (stage == 0 and e) or (stage == pp - 1 and z):
            what = "embedding" if stage == 0 and e else "loss"
            formula, latex = formula + " - 1", latex + " - 1"
            label += f" (one slot is the {what})"
        return Derivation("stage_layers", label, "L_stage", r"L_{\mathrm{stage}}", formula, latex, (l_term, s_term, p_term),
                          float(split[stage]), "", MEGATRON_SLOTS)  # fmt: skip
    if not is_uneven(first, last):
        return Derivation("stage_layers", label, "L_stage", r"L_{\mathrm{stage}}", "$L / $p", r"\frac{$L}{$p}", (l_term, p_term),
                          float(split[stage]), "", MEGATRON_EVEN)  # fmt: skip
    f_term = Term("n_first", "n_first", r"n_{\mathrm{first}}", first or 0, "", f"layers on the first stage ({FIRST_FLAG})")
    z_term = Term("n_last", "n_last", r"n_{\mathrm{last}}", last or 0, "", f"layers on the last stage ({LAST_FLAG})")
    inputs: tuple[Term, ...]
    if stage == 0 and first is not None:
        formula, latex, inputs = "$n_first", "$n_first", (f_term,)
    elif stage == pp - 1 and last is not None:
        formula, latex, inputs = "$n_last", "$n_last", (z_term,)
    elif first is not None and last is not None:
        formula, latex, inputs = (
            "($L - $n_first - $n_last) / ($p - 2)",
            r"\frac{$L - $n_first - $n_last}{$p - 2}",
            (l_term, f_term, z_term, p_term),
        )
    else:
        given = f_term if first is not None else z_term
        formula, latex, inputs = f"($L - ${given.key}) / ($p - 1)", rf"\frac{{$L - ${given.key}}}{{$p - 1}}", (l_term, given, p_term)
    return Derivation("stage_layers", label, "L_stage", r"L_{\mathrm{stage}}", formula, latex, inputs, float(split[stage]), "",
                      MEGATRON_UNEVEN)  # fmt: skip
