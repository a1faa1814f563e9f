"""torchtitan's own pipeline split: the transformer layers of each virtual stage when no split is given.

torchtitan (pytorch/torchtitan @b5bcd76c, torchtitan/distributed/pipeline_parallel.py, _generate_llm_fqn_per_model_part,
called by pipeline_llm when parallelism.module_fqns_per_model_part is not set) counts the embedding as input_weight and
the final norm + output head as output_weight "effective layers" (torchtitan/config/configs.py ParallelismConfig:
pipeline_parallel_first_stage_less_layers = 1 and pipeline_parallel_last_stage_less_layers = 1 by default), spreads the
L + w_in + w_out effective layers over the S virtual stages as evenly as whole numbers allow (q = floor((L + w_in +
w_out) / S) each, one more on the first r = (L + w_in + w_out) mod S stages), and gives the first stage its share less
w_in transformer layers and the last its share less w_out. It refuses S > L + w_in + w_out, q = 0, and w_in or w_out
above q ('exceeds minimum layers per stage').

The S virtual stages: pp x v, v = 1 for single-stage schedules (1F1B, GPipe) and 2 for multi-stage ones by default
(_get_pipeline_metadata: 'For multi-stage schedules, default is 2 virtual stages per rank'; any v with
pipeline_parallel_layers_per_stage); placed on rank i mod pp (style 'loop') or in a V for ZB-V / DualPipeV
(_get_pp_rank_to_stage_indices_mapping; parcalc.core.pipeline_layout.V_PLACEMENT).

Examples, by hand from that formula: Llama 3 405B's 126 layers on 8 x 2 = 16 stages: 128 effective, q = 8, r = 0:
7 + 14 x 8 + 7, so rank r holds stages r and r + 8: 15 + 6 x 16 + 15 (the split Llama 3 sec. 3.3.2 describes). 80 layers
on 8 stages: 82 effective, q = 10, r = 2: 10 + 11 + 5 x 10 + 9 (uneven although 8 divides 80).

parcalc writes the split as a Megatron layout string (parcalc.core.pipeline_layout), so memory, FLOPs, the bubble and the
step time read each rank's chunks from it as from a --pipeline-layout. The MTP module is refused with pp > 1, as
torchtitan refuses it (torchtitan/models/deepseek_v3/mtp.py @b5bcd76c: 'MTP does not support pipeline parallelism yet').
"""

from __future__ import annotations

from typing import Any

from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

SPLIT = "torchtitan"  # Layout.split_by and the framework profile's pipeline_split for this rule
SOURCE = ("pytorch/torchtitan @b5bcd76c torchtitan/distributed/pipeline_parallel.py, _generate_llm_fqn_per_model_part (its "
          "input_weight / output_weight: torchtitan/config/configs.py ParallelismConfig.pipeline_parallel_first_stage_less_layers "
          "= 1, pipeline_parallel_last_stage_less_layers = 1)")  # fmt: skip
MTP_SOURCE = "torchtitan/models/deepseek_v3/mtp.py @b5bcd76c: 'MTP does not support pipeline parallelism yet'"
INPUT_WEIGHT = 1  # the embedding counted as one layer (ParallelismConfig.pipeline_parallel_first_stage_less_layers)
OUTPUT_WEIGHT = 1  # the final norm and output head as one (pipeline_parallel_last_stage_less_layers)


def virtual_stage_layers(stages: int, layers: int, input_weight: int = INPUT_WEIGHT,
                         output_weight: int = OUTPUT_WEIGHT) -> tuple[int, ...]:  # fmt: skip
    """Transformer layers of each of `stages` virtual stages, first to last, as torchtitan's
    _generate_llm_fqn_per_model_part assigns `layers` (module docstring); InputError where it raises."""
    if stages < 1:
        raise InputError("torchtitan's pipeline split: at least one stage")
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    if stages > effective:
        raise InputError(f"torchtitan's pipeline split: {stages} virtual stages exceed the {effective} effective layers "
                         f"({layers} layers + {input_weight} embedding + {output_weight} output; torchtitan's "
                         "_generate_llm_fqn_per_model_part refuses them)")  # fmt: skip
    each, extra = divmod(effective, stages)
    if input_weight > each or output_weight > each:
        raise InputError(f"torchtitan's pipeline split: {stages} virtual stages leave {each} effective layers a stage, fewer than "
                         f"the embedding's {input_weight} or the output's {output_weight} (torchtitan: 'exceeds minimum layers per "
                         "stage')")  # fmt: skip
    shares = [each + (1 if i < extra else 0) for i in range(stages)]
    shares[0] -= input_weight
    shares[-1] -= output_weight
    return tuple(shares)


def layout_text(stage_layers: tuple[int, ...]) -> str:
    """The virtual stages as a Megatron layout string: 'Et*7|(t*8|)*14t*7L' for 7 + 14 x 8 + 7."""
    def held(n: int) -> str:
        return "" if n == 0 else "t" if n == 1 else f"t*{n}"

    if len(stage_layers) == 1:
        return f"E{held(stage_layers[0])}L"
    parts = [f"E{held(stage_layers[0])}|"]
    middle = stage_layers[1:-1]
    i = 0
    while i < len(middle):
        j = i
        while j < len(middle) and middle[j] == middle[i]:
            j += 1
        run = f"{held(middle[i])}|"
        parts.append(run if j - i == 1 else f"({run})*{j - i}")
        i = j
    parts.append(f"{held(stage_layers[-1])}L")
    return "".join(parts)


def configurable(stages: int, layers: int) -> bool:
    """Whether torchtitan's configuration can ask for `stages` virtual stages of `layers` layers: by default a multi-stage
    schedule runs two a rank; otherwise pipeline_parallel_layers_per_stage k gives ceil((L + w_in + w_out) / k) of them
    (torchtitan/distributed/pipeline_parallel.py @b5bcd76c, _get_pipeline_metadata). ceil(E / k) falls as k grows, so
    the least k with ceil(E / k) <= S, k = ceil(E / S), either gives S or no k does: 70B's 82 effective layers give 82,
    41, 28, 21, 17, 14, ... stages, never 36 (PP 2 x v 18)."""
    effective = layers + INPUT_WEIGHT + OUTPUT_WEIGHT
    per_stage = -(-effective // stages)
    return -(-effective // per_stage) == stages


def applies(layout: Any) -> bool:
    """Whether torchtitan's split gives the layout's stages: pp > 1 and no split given (no --pipeline-layout, first / last
    stage layers or embedding / loss slots). DualPipe (two pipelines, each GPU a stage of each) keeps parcalc's p equal
    stages: torchtitan runs no DualPipe (its schedules: torch.distributed.pipelining's, DualPipeV among them)."""
    from parcalc.core.choices import Schedule

    return (layout.pp > 1 and layout.pipeline_layout is None and layout.first_stage_layers is None
            and layout.last_stage_layers is None and not layout.embedding_in_split and not layout.loss_in_split
            and layout.schedule is not Schedule.DUALPIPE)  # fmt: skip


def virtual_stages(layout: Any) -> int:
    """S: pp x v, or 2 pp in a V (ZB-V, DualPipeV: two stages a rank)."""
    return 2 * layout.pp if layout.schedule.v_shape else layout.pp * layout.chunks


def split_layout(layout: Any, layers: int, mtp_layers: int = 0) -> Any:
    """The Layout with torchtitan's split as its pipeline layout (Layout.split_by 'torchtitan'), where it applies; else
    the Layout unchanged. InputError where torchtitan refuses the split or an MTP model under pp > 1."""
    if not applies(layout):
        return layout
    if mtp_layers:
        raise InputError(f"--pp {layout.pp}: torchtitan trains the multi-token-prediction module without pipeline parallelism "
                         f"only ({MTP_SOURCE}); give --pipeline-layout to time Megatron-LM's placement")  # fmt: skip
    if layout.chunks > 2 and not layout.schedule.v_shape and not configurable(virtual_stages(layout), layers):
        effective = layers + INPUT_WEIGHT + OUTPUT_WEIGHT
        raise InputError(f"--chunks {layout.chunks}: torchtitan makes ceil({effective} / k) virtual stages of {layers} layers "
                         f"(pipeline_parallel_layers_per_stage k, or two a rank by default), never {virtual_stages(layout)} = "
                         f"--pp {layout.pp} x {layout.chunks}; give --pipeline-layout to time such a split")  # fmt: skip
    try:
        stages = virtual_stage_layers(virtual_stages(layout), layers)
    except InputError as error:  # named by the flags that set the stage count
        given = f"--pp {layout.pp}" + (f" --chunks {layout.chunks}" if layout.chunks > 1 and not layout.schedule.v_shape else "")
        raise InputError(f"{given}: {error}") from None
    if len(set(stages)) == 1:  # equal stages: Megatron-LM's even split, which every model of parcalc times without a layout
        return layout._replace(split_by=SPLIT)
    return layout._replace(pipeline_layout=layout_text(stages), split_by=SPLIT)


def stage_layers_derivation(layout: Any, layers: int, rank: int) -> Derivation:
    """L_stage of rank `rank` under torchtitan's split: the layers of its chunks, each from torchtitan's formula."""
    stages = virtual_stages(layout)
    split = virtual_stage_layers(stages, layers)
    effective = layers + INPUT_WEIGHT + OUTPUT_WEIGHT
    each, extra = divmod(effective, stages)
    p = layout.pp
    indices = (rank, 2 * p - 1 - rank) if layout.schedule.v_shape else tuple(range(rank, stages, p))  # V_PLACEMENT, or i mod p
    terms = []
    for c, index in enumerate(indices):
        share = f"{each}{' + 1' if index < extra else ''}"
        less = " - 1 (the embedding)" if index == 0 else " - 1 (the norm and output head)" if index == stages - 1 else ""
        terms.append(Term(f"n_{c}", f"n_{c}", f"n_{{{c}}}", split[index], "",
                          f"layers of virtual stage {index + 1} of {stages}: its share of the {effective} effective layers "
                          f"(L + 2), {share}{less}"))  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in terms)
    return Derivation("stage_layers", f"Layers on stage {rank + 1} (torchtitan's split of {layers} layers over {stages} virtual "
                      "stages)", "L_stage", r"L_{\mathrm{stage}}", formula, formula, tuple(terms),
                      float(sum(t.value for t in terms)), "", SOURCE)  # fmt: skip
