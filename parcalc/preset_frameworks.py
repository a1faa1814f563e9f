"""Framework profiles: a YAML document made into parcalc.core.timing.framework's Framework, every
setting a {value, source} pair."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parcalc.errors import InputError, PresetError, shown
from parcalc.preset_doc import PresetDoc, compiled_host_costs_of, host_costs_of, opened
from parcalc.preset_files import Category
from parcalc.units import Dimension, parse_quantity

_FRAMEWORK_FLAGS = ("fp32_grads", "overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch", "reshard_after_forward",
                    "tp_comm_overlap")  # fmt: skip
_FRAMEWORK_KEYS = ("kind", "name", "sources", "gradient_buckets", "reduce_bytes", "zero_stages", "default_zero", "notes", "pipeline", *_FRAMEWORK_FLAGS,
                   "kernels", "host", "compiled_host", "step_memory", "data_parallel_only", "optimizer_writes_weight_copy", "expert_gemm_host",
                   "sync_after_backward", "pipeline_scatter_gather", "sequence_parallel_with_tp", "overlap_p2p_comm",
                   "fp8_dispatch", "quantised_sp_gathers", "pipeline_split", "context_parallel", "cp_comm_default", "not_run")  # fmt: skip
# The settings a profile's `not_run:` may name (Framework.run_reason): the flags as typed
NOT_RUN_FLAGS = ("--compile", "--recompute selective", "--recompute full", "--recompute op")
# What a framework's `pipeline` block may change when pp > 1 (parcalc.core.timing.framework.Framework.pipeline)
_PIPELINE_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch", "zero_stages", "bf16_grad_accumulation_bytes")


def framework_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Any:
    """A framework profile: every setting a {value, source} pair (parcalc.core.timing.framework)."""
    from parcalc.core.timing.framework import Framework

    doc, sources = opened(path, data, _FRAMEWORK_KEYS, Category.FRAMEWORKS)
    cited: list[tuple[str, str]] = []

    def setting(block: PresetDoc, name: str, cite_as: str) -> Any:
        node = block.child(name)
        node.only(("value", "source", "note"))
        if "value" not in node.data:
            raise node.error("value", "missing")
        note = node.text("note", required=False)
        cited.append((cite_as, node.source_ref("source", sources) + (f" ({note})" if note else "")))
        return node.data["value"]

    def value_of(block: PresetDoc, name: str, cite_as: str) -> Any:
        value = setting(block, name, cite_as)
        if name in _FRAMEWORK_FLAGS:
            if not isinstance(value, bool):
                raise block.error(f"{name}.value", f"expected true or false, got {shown(value)}")
            return value
        if name == "reduce_bytes":
            if value not in (1, 2, 4) or isinstance(value, bool):
                raise block.error("reduce_bytes.value", f"bytes per gradient element on the wire: 1, 2 or 4, got {shown(value)}")
            return float(value)
        if name == "zero_stages":
            if not isinstance(value, list) or not value or any(type(z) is not int or z not in (0, 1, 2, 3) for z in value):
                raise block.error("zero_stages.value", f"a list of ZeRO stages among 0, 1, 2, 3, got {shown(value)}")
            return tuple(sorted(set(value)))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:  # bytes per parameter
            raise block.error(f"{name}.value", f"bytes per parameter between 0 and 100, got {shown(value)}")
        return float(value)

    flags = {name: value_of(doc, name, name) for name in _FRAMEWORK_FLAGS}
    reduce_bytes = value_of(doc, "reduce_bytes", "reduce_bytes")
    stages = value_of(doc, "zero_stages", "zero_stages")
    kernels = "fused"  # optional: profiles written before kernel sets existed time Megatron-LM's fused kernels
    if "kernels" in data:
        from parcalc.core.timing.framework import KERNEL_SETS

        kernels = setting(doc, "kernels", "kernels")
        if kernels not in KERNEL_SETS:
            raise doc.error("kernels.value", f"one of {', '.join(KERNEL_SETS)}, got {shown(kernels)}")
    memory: dict[str, Any] = {}  # optional: profiles without them count memory as the textbook does
    if "default_zero" in data:  # optional: the stage without --zero (profiles without it: 0, DDP)
        default_zero = setting(doc, "default_zero", "default_zero")
        if type(default_zero) is not int or default_zero not in stages:
            raise doc.error("default_zero.value", f"one of its zero_stages ({', '.join(str(z) for z in stages)}), got {shown(default_zero)}")
        memory["default_zero"] = default_zero
    if "step_memory" in data:
        from parcalc.core.timing.framework import STEP_MEMORY_MODELS

        memory["step_memory"] = setting(doc, "step_memory", "step_memory")
        if memory["step_memory"] not in STEP_MEMORY_MODELS:
            raise doc.error("step_memory.value", f"one of {', '.join(STEP_MEMORY_MODELS)}, got {shown(memory['step_memory'])}")
    # optional true/false settings: data_parallel_only (no tp / pp / cp / ep), optimizer_writes_weight_copy (a 16-bit weight
    # buffer written by the optimizer), sync_after_backward (the loop's synchronisation inside the step: parcalc.core.timing.host),
    # pipeline_scatter_gather (profiles without it split the pipeline's sends over the TP ranks), sequence_parallel_with_tp
    # (tp > 1 runs with sequence parallelism always), overlap_p2p_comm (the interleaved schedule's steady-state sends hidden),
    # fp8_dispatch (DeepEP's dispatch in FP8 under FP8 training: parcalc.core.timing.moe), quantised_sp_gathers (SP's
    # all-gathers in the FP8 / NVFP4 recipe's bytes: parcalc.core.timing.fp8_quantise.gathered_bytes)
    for name in ("data_parallel_only", "optimizer_writes_weight_copy", "sync_after_backward", "pipeline_scatter_gather",
                 "sequence_parallel_with_tp", "overlap_p2p_comm", "fp8_dispatch", "quantised_sp_gathers"):
        if name in data:
            memory[name] = setting(doc, name, name)
            if not isinstance(memory[name], bool):
                raise doc.error(f"{name}.value", f"expected true or false, got {shown(memory[name])}")
    if "pipeline_split" in data:  # optional: the stack's own split of the layers without one given (profiles without it: Megatron's)
        from parcalc.core.timing.framework import PIPELINE_SPLITS

        memory["pipeline_split"] = setting(doc, "pipeline_split", "pipeline_split")
        if memory["pipeline_split"] not in PIPELINE_SPLITS:
            raise doc.error("pipeline_split.value", f"one of {', '.join(PIPELINE_SPLITS)}, got {shown(memory['pipeline_split'])}")
    if "context_parallel" in data:  # optional: whose CP attention the stack runs (profiles without it: Transformer Engine's)
        from parcalc.core.timing.framework import CONTEXT_PARALLEL

        memory["context_parallel"] = setting(doc, "context_parallel", "context_parallel")
        if memory["context_parallel"] not in CONTEXT_PARALLEL:
            raise doc.error("context_parallel.value", f"one of {', '.join(CONTEXT_PARALLEL)}, got {shown(memory['context_parallel'])}")
    if "cp_comm_default" in data:  # optional: the CP exchange without --cp-comm (profiles without it: p2p, Megatron-LM's)
        from parcalc.core.context import cp_comm_of

        given = setting(doc, "cp_comm_default", "cp_comm_default")
        try:
            memory["cp_comm_default"] = cp_comm_of(given).value
        except InputError:
            raise doc.error("cp_comm_default.value", f"one of p2p, all-gather, a2a, got {shown(given)}") from None
    host = host_costs_of(doc, sources) if "host" in data else None
    if "compiled_host" in data:  # optional: the host per kernel of --compile's code (parcalc.core.timing.host CompiledHostCosts)
        memory["compiled_host"] = compiled_host_costs_of(doc, sources)
    if "expert_gemm_host" in data:  # optional: MoE experts as a host loop of GEMMs (parcalc.core.timing.moe)
        per_gemm = doc.quantity("expert_gemm_host", Dimension.TIME, sources)
        assert per_gemm is not None
        if not 0 < per_gemm.value <= 1e-2:
            raise doc.error("expert_gemm_host.value", f"a host time per expert GEMM above 0 and at most 10 ms, got {shown(data['expert_gemm_host'])}")
        memory["expert_gemm_host"] = per_gemm.value
        cited.append(("expert_gemm_host", per_gemm.source))
    if "not_run" in data:
        memory["not_run"] = _not_run(doc, sources, cited)
    pipeline: tuple[tuple[str, Any], ...] = ()
    if "pipeline" in doc.data:
        block = doc.child("pipeline")
        block.only(_PIPELINE_KEYS)
        if not block.data:
            raise doc.error("pipeline", f"give at least one of {', '.join(_PIPELINE_KEYS)}")
        pipeline = tuple((name, value_of(block, name, f"pipeline.{name}")) for name in _PIPELINE_KEYS if name in block.data)
    buckets = doc.child("gradient_buckets")
    buckets.only(("min_params", "params_per_dp_rank", "bytes", "source"))
    cited.append(("bucket", buckets.source_ref("source", sources)))
    numbers = {}
    for name in ("min_params", "params_per_dp_rank"):
        value = buckets.data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise buckets.error(name, f"a number of parameters >= 0, got {shown(value)}")
        numbers[name] = float(value)
    size = buckets.data.get("bytes")
    bucket_bytes = 0.0
    if size is not None:
        try:
            bucket_bytes = parse_quantity(size, Dimension.BYTES, f"{path}: key 'gradient_buckets.bytes'")
        except InputError as error:
            raise PresetError(str(error)) from None
    if not (numbers["min_params"] or numbers["params_per_dp_rank"] or bucket_bytes):
        raise buckets.error("min_params", "give min_params / params_per_dp_rank or bytes")
    return Framework(
        key=key, name=doc.text("name"), bucket_min_params=numbers["min_params"], bucket_params_per_dp_rank=numbers["params_per_dp_rank"],
        bucket_bytes=bucket_bytes, reduce_bytes=reduce_bytes, zero_stages=stages, sources=tuple(cited), pipeline=pipeline, **flags,
        kernels=kernels, host=host, notes=doc.texts("notes"), **memory,
    )  # fmt: skip


def _not_run(doc: PresetDoc, sources: Mapping[str, str], cited: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """`not_run:` {flag: {why, source}}: the settings parcalc models that the stack does not run, each refused with its
    why (Framework.run_reason); cited as 'not_run FLAG'."""
    block = doc.child("not_run")
    if not block.data:
        raise doc.error("not_run", f"give at least one of {', '.join(NOT_RUN_FLAGS)}")
    refused = []
    for flag in block.data:
        if flag not in NOT_RUN_FLAGS:
            raise block.error(str(flag), f"not a setting a profile can refuse; one of {', '.join(NOT_RUN_FLAGS)}")
        entry = block.child(flag)
        entry.only(("why", "source"))
        why = entry.text("why")
        cited.append((f"not_run {flag}", entry.source_ref("source", sources)))
        refused.append((flag, why))
    return tuple(refused)
