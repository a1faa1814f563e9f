"""fit's modelled step as a Chrome trace event file (`fit -o step.trace.json`), which ui.perfetto.dev and
chrome://tracing open beside a real PyTorch profiler trace.

The format is the Trace Event Format (Google, "Trace Event Format" document, the JSON Object Format): {"traceEvents":
[...], "displayTimeUnit": "ms"} with complete events ("ph": "X", "ts" and "dur" in microseconds), and metadata events
("ph": "M", process_name / thread_name) naming the tracks. One track per stream: the GPU's compute stream, the host,
each communicator (tensor, context, expert, pipeline, data parallel), the pipeline's bubble, the host link of
offloading.

fit's step is the sum of its exposed terms (parcalc.core.timing.step: t_step = t_compute + t_host + the exposed
collectives + t_bubble + t_optimizer ...), so the events lie end to end, each term once on its stream's track, and the
file spans exactly t_step. The kernels are named so that `parcalc calibrate trace` sorts them into fit's kinds again
(parcalc.core.calibrate.trace.kernel_kind): 'kernel' events whose names say gemm, attention, memory-bound, the
optimizer's multi_tensor_apply, NCCL for the collectives. Each event's args name the term, its formula with its
numbers, and its source.
"""

from __future__ import annotations

import json
from typing import Any

from parcalc.derivation import Derivation, Result, Term
from parcalc.errors import InputError

# (term key, event name, category, track): in the order the events are laid out. GPU work is 'kernel' (as the profiler
# writes CUDA kernels), so that calibrate trace reads it back; the host's wait and the bubble are GPU idle time.
TERMS = (
    ("t_gemm", "GEMM kernels (gemm, t_gemm)", "kernel", "GPU compute stream"),
    ("t_attention", "fused attention kernels (attention, t_attention)", "kernel", "GPU compute stream"),
    ("t_memory_bound", "memory-bound kernels (t_memory_bound)", "kernel", "GPU compute stream"),
    ("t_host", "GPU waiting for the host (t_host)", "cpu_op", "host (eager kernel launches)"),
    ("t_tp", "tensor-parallel collectives, exposed (NCCL, t_tp)", "kernel", "tensor-parallel communicator"),
    ("t_cp", "context-parallel exchanges, exposed (NCCL, t_cp)", "kernel", "context-parallel communicator"),
    ("t_ep", "expert-parallel dispatch and combine, exposed (NCCL, t_ep)", "kernel", "expert-parallel communicator"),
    ("t_bubble", "pipeline bubble (t_bubble)", "gpu_user_annotation", "pipeline bubble"),
    ("t_pp", "pipeline sends, exposed (NCCL, t_pp)", "kernel", "pipeline-parallel communicator"),
    ("t_dp", "data-parallel collectives, exposed (NCCL, t_dp)", "kernel", "data-parallel communicator"),
    ("t_offload", "offloading, exposed (t_offload)", "cpu_op", "host link (offload)"),
    ("t_optimizer", "optimizer step (multi_tensor_apply, t_optimizer)", "kernel", "GPU compute stream"),
)  # fmt: skip
# The kinds' sum without kinds (a result that does not split t_compute): one event
COMPUTE = ("t_compute", "compute kernels (t_compute)", "kernel", "GPU compute stream")
PROCESS = 1


def chrome_trace(result: Result) -> dict[str, Any]:
    """The Trace Event Format document of one configuration's step (fit with a pinned layout)."""
    found: dict[str, Derivation | Term] = {d.key: d for d in result.derivations}
    if "t_step" not in found:
        raise InputError("-o FILE.trace.json: fit's result has no step time to draw (t_step)")
    step = found["t_step"]
    assert isinstance(step, Derivation)
    for term in step.inputs:  # a search shows its best configuration's step: its terms are t_step's inputs
        found.setdefault(term.key, term)
    terms = TERMS if "t_gemm" in found else (COMPUTE, *TERMS[3:])
    tracks: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    now = 0.0
    for key, name, category, track in terms:
        derivation = found.get(key)
        if derivation is None or not derivation.value > 0:
            continue
        tid = tracks.setdefault(track, len(tracks) + 1)
        duration = derivation.value * 1e6
        events.append({"name": name, "cat": category, "ph": "X", "pid": PROCESS, "tid": tid, "ts": now, "dur": duration,
                       "args": _args(derivation)})  # fmt: skip
        now += duration
    meta = [{"name": "process_name", "ph": "M", "pid": PROCESS, "args": {"name": f"parcalc fit: {result.title}"}},
            *({"name": "thread_name", "ph": "M", "pid": PROCESS, "tid": tid, "args": {"name": track}} for track, tid in tracks.items()),
            *({"name": "thread_sort_index", "ph": "M", "pid": PROCESS, "tid": tid, "args": {"sort_index": tid}} for tid in tracks.values())]  # fmt: skip
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"parcalc": "fit's modelled step: its exposed terms end to end, one track per stream", "t_step_s": step.value,
                          "t_step": f"{step.formula_text()} = {step.substituted_text()} = {step.value:.6g} s"}}  # fmt: skip


def _args(derivation: Derivation | Term) -> dict[str, Any]:
    if isinstance(derivation, Term):  # a term of t_step (a search's best configuration): its description and source
        return {"term": derivation.key, "label": derivation.description, "seconds": derivation.value, "source": derivation.source}
    return {"term": derivation.key, "label": derivation.label, "seconds": derivation.value,
            "formula": f"{derivation.symbol} = {derivation.formula_text()}", "substituted": derivation.substituted_text(),
            "source": derivation.source}  # fmt: skip


def render_chrome_trace(result: Result) -> str:
    return json.dumps(chrome_trace(result), ensure_ascii=False, allow_nan=False) + "\n"
