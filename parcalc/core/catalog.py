"""Results describing presets themselves, for `parcalc presets list` and `presets show`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from parcalc.core.hardware import Gpu, Link, Sourced
from parcalc.core.model import TransformerModel
from parcalc.derivation import Column, Result, Table

# "as read": the value with its unit as a person reads it (80 GiB, 3.35 TB/s, 989.4 TFLOP/s; bytes of memory in binary
# units, as capacities are); "value" and "unit": the same in base units, what JSON and CSV carry
_FIELD_COLUMNS = (Column("field", "field"), Column("as_read", "as read"), Column("value", "value"), Column("unit", "unit"),
                  Column("source", "source"))  # fmt: skip


def _as_read(value: object, unit: str) -> object:
    """A field's value with its unit in human form (parcalc.units.format_quantity); text as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    from parcalc.units import format_quantity

    return format_quantity(float(value), unit, significant=6, iec=unit == "B")


def catalog_result(listing: Mapping[str, Sequence[tuple[str, str, str, str, str]]]) -> Result:
    """One table per category: name, what it is (the preset's own name or title), origin (packaged, --presets, ...),
    file, and why it cannot be read ("" when it can; not in the terminal's brief table, whose description says 'broken');
    rows (name, file, origin, description, problem)."""
    columns = (Column("name", "name"), Column("description", "description"), Column("origin", "origin"), Column("path", "file"),
               Column("problem", "problem"))  # fmt: skip
    tables = tuple(
        Table(category, f"{category} ({len(rows)})", columns,
              tuple((key, description, origin, path, problem) for key, path, origin, description, problem in rows),
              brief_columns=("name", "description", "origin", "path"))
        for category, rows in listing.items()
    )  # fmt: skip
    return Result(command="presets list", title="Presets", inputs=(), derivations=(), tables=tables)


def preset_result(category: str, key: str, path: str, preset: Any) -> Result:
    measured: tuple[Table, ...] = ()
    if isinstance(preset, Gpu):
        rows = _gpu_rows(preset)
        title = f"GPU {preset.name}"
        measured = tuple(_matmul_table(dtype, sweep) for dtype, sweep in preset.matmul_measured)
    elif isinstance(preset, Link):
        rows = _sourced_rows(preset, ("bandwidth_per_direction", "latency"))
        title = f"Link {preset.name}"
        if preset.measured is not None:
            measured = (_collective_table(preset.measured),)
    elif isinstance(preset, TransformerModel):
        rows = _model_rows(preset)
        title = f"Model {preset.name}"
    elif hasattr(preset, "bucket_params"):  # a framework profile (parcalc.core.timing.framework)
        rows = _framework_rows(preset)
        title = f"Framework {preset.name}"
    else:
        rows = [(str(k), _text(v), "", "") for k, v in preset.items() if not isinstance(v, (list, dict))]
        title = f"{category.removesuffix('s').capitalize()} {key}"
    notes = tuple(getattr(preset, "notes", ()) or ())
    return Result(
        command="presets show",
        title=title,
        inputs=(),
        derivations=(),
        tables=(Table("fields", f"{key} ({path})", _FIELD_COLUMNS, tuple((row[0], _as_read(row[1], str(row[2])), *row[1:]) for row in rows)),
                *measured),  # fmt: skip
        verdicts=notes,
        settings=(("category", category), ("name", key), ("path", path)),
    )


def _framework_rows(framework: Any) -> list[tuple[object, ...]]:
    bucket = framework.source("bucket")
    rows: list[tuple[object, ...]] = [("name", framework.name, "", "")]
    if framework.bucket_bytes:
        rows.append(("gradient bucket", framework.bucket_bytes, "B", bucket))
    else:
        rows.append(("gradient bucket", f"max({framework.bucket_min_params:.4g}, {framework.bucket_params_per_dp_rank:.4g} x dp) parameters", "", bucket))
    for name in ("fp32_grads", "reduce_bytes", "overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch",
                 "reshard_after_forward", "tp_comm_overlap", "zero_stages", "default_zero"):  # fmt: skip
        value = getattr(framework, name)
        shown = ", ".join(str(z) for z in value) if isinstance(value, tuple) else str(value).lower() if isinstance(value, bool) else value
        rows.append((name, shown, "B" if name == "reduce_bytes" else "", framework.source(name)))
    # the memory-bound kernels between GEMMs the profile times (--kernels overrides it)
    rows.append(("kernels", framework.kernels, "", framework.source("kernels")))
    # where the profile says: what a TP rank sends across a stage boundary; whether TP runs with sequence parallelism always;
    # whether the interleaved schedule hides its steady-state sends; whether DeepEP dispatches FP8 under FP8 training;
    # whether SP's all-gathers carry the quantised tensor under FP8 / NVFP4
    # and how it splits the layers over the pipeline without a split given (parcalc.core.pipeline_torchtitan); whose context-
    # parallel attention it runs (parcalc.core.timing.torch_ring_attention)
    for name in ("pipeline_scatter_gather", "sequence_parallel_with_tp", "overlap_p2p_comm", "fp8_dispatch", "quantised_sp_gathers",
                 "pipeline_split", "context_parallel"):
        if name in dict(framework.sources):
            rows.append((name, str(getattr(framework, name)).lower(), "", framework.source(name)))
    if framework.expert_gemm_host:  # the host's time per expert GEMM of a looped grouped GEMM (parcalc.core.timing.moe)
        rows.append(("expert_gemm_host", framework.expert_gemm_host, "s", framework.source("expert_gemm_host")))
    for flag, _ in framework.not_run:  # what parcalc models that the stack does not run: refused under --framework
        rows.append(("not_run", flag, "", framework.source(f"not_run {flag}")))
    for name, value in framework.pipeline:  # what its own pipeline engine changes when pp > 1
        shown = ", ".join(str(z) for z in value) if isinstance(value, tuple) else str(value).lower() if isinstance(value, bool) else value
        unit = "B/param" if name == "bf16_grad_accumulation_bytes" else ""
        rows.append((f"pp > 1: {name}", shown, unit, framework.source(f"pipeline.{name}")))
    return rows


def _row(name: str, value: Sourced) -> tuple[object, ...]:
    return (name, value.value, value.unit, value.source)


def _sourced_rows(preset: Any, names: Sequence[str]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [("name", preset.name, "", "")]
    for name in names:
        value = getattr(preset, name)
        if value is not None:
            rows.append(_row(name, value))
    return rows


def _gpu_rows(gpu: Gpu) -> list[tuple[object, ...]]:
    # counts carry no unit in base units; here each says what it counts (AMD's compute units stand in the SM fields)
    core = "CU" if gpu.vendor == "AMD" else "SM"
    count_units = {"sms": f"{core}s", "fma_per_clock_per_sm": f"FMA/clock/{core}"}
    rows = _sourced_rows(gpu, ("sms", "boost_clock", "memory_capacity", "memory_bandwidth", "nvlink_bandwidth", "board_power"))
    rows = [(name, value, unit or count_units.get(str(name), ""), source) for name, value, unit, source in rows]
    rows[1:1] = [("vendor", gpu.vendor, "", ""), ("architecture", gpu.architecture, "", "")]
    for dtype, rates in gpu.dtypes.items():
        for name in ("fma_per_clock_per_sm", "dense_peak", "sparse_peak"):
            value = getattr(rates, name)
            if value is not None:
                rows.append((f"{dtype}.{name}", value.value, value.unit or count_units.get(name, ""), value.source))
    kernels = gpu.kernels
    if kernels is not None:  # the shares of the peaks the step-time model uses (parcalc.core.timing.compute)
        rows += [_row(f"kernels.matmul.{dtype}", share) for dtype, share in kernels.matmul]
        rows.append(("kernels.tile", f"{kernels.tile_m} x {kernels.tile_n}", "elements", kernels.tile_source))
        rows += [_row(f"kernels.{name}", getattr(kernels, name)) for name in ("memory", "attention_forward", "attention_backward", "launch")]
        # fused attention measured by head dimension (attention_by_head_dim: it decides where given) and timed by its
        # tiles (attention_tiles, parcalc.core.timing.attention_tiles: t0 a tile's fixed cost); short names: 80 columns
        for dim, forward, backward in kernels.attention_by_head_dim:
            rows += [_row(f"kernels.attention.d{dim}.fwd", forward), _row(f"kernels.attention.d{dim}.bwd", backward)]
        if kernels.attention_tiles is not None:
            tiles = kernels.attention_tiles
            rows += [("kernels.attention.tile", tiles.tile, "rows", tiles.source), ("kernels.attention.t0.fwd", tiles.forward_overhead, "s", tiles.source),
                     ("kernels.attention.t0.bwd", tiles.backward_overhead, "s", tiles.source)]  # fmt: skip
    if gpu.power_limit is not None:
        rows.append(_row("power_limit", gpu.power_limit))
    # the Tensor Core share at each board power limit (parcalc.core.power)
    rows += [(f"power_curve.{point.watts:g}W", point.tensor_scale, "fraction", point.source) for point in gpu.power_curve]
    if gpu.node is not None:
        node = gpu.node
        rows.append(("node", f"{node.gpus} GPUs, {node.intra_link} inside, {node.nics} x {node.inter_link}", "GPUs, NICs", node.source))
    return rows


def _matmul_table(dtype: str, sweep: Any) -> Table:
    """The GEMM sweep `parcalc calibrate gemm` measured behind one dtype's matmul share."""
    columns = (Column("m", "m"), Column("k", "k"), Column("n", "n"), Column("time", "time", "s"),
               Column("achieved", "achieved", "FLOP/s"), Column("quantisation", "quantisation", "fraction"),
               Column("share", "share of peak", "fraction"))  # fmt: skip
    rows = tuple((p.m, p.k, p.n, p.time, p.achieved, p.quantisation, p.share) for p in sweep.rows)
    return Table(f"matmul_measured_{dtype}", f"Measured {dtype} GEMMs ({sweep.source})", columns, rows)


def _collective_table(measured: Any) -> Table:
    """The nccl-tests rows `parcalc calibrate nccl` fitted the link to."""
    columns = (Column("size", "size", "B"), Column("time", "time", "s"), Column("algbw", "algbw", "B/s"),
               Column("busbw", "busbw", "B/s"))  # fmt: skip
    rows = tuple((r.size, r.time, r.algbw, r.busbw) for r in measured.rows)
    where = f"{measured.ranks} ranks on {measured.nodes} node{'s' if measured.nodes != 1 else ''}"
    return Table("measured", f"Measured {measured.collective}, {where} ({measured.source})", columns, rows)


def _model_rows(model: TransformerModel) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [("source", "", "", model.source)]
    for field in fields(model):
        if field.name in ("key", "source"):
            continue
        value = getattr(model, field.name)
        if field.name in ("mtp_source", "dropout_source"):  # each the source of its field's row, not a field of its own
            continue
        if field.name == "dropout":
            rows.append(("dropout", _text(value), "", model.dropout_source))
            continue
        if field.name == "mtp_layers":
            rows.append(("mtp_layers", model.mtp_layers, "", model.mtp_source))
            continue
        if field.name in ("moe", "mla", "window", "linear_attention", "mamba") and value is not None:  # one row per field of the block, with the block's source
            shown = [f for f in fields(value) if f.name != "source"]
            rows += [(f"{field.name}.{f.name}", _text(getattr(value, f.name)), "", value.source if i == 0 else "") for i, f in enumerate(shown)]
            continue
        rows.append((field.name, _text(value), "", ""))
    if model.mamba is not None:  # one block per layer: no layer of attention and MLP together
        from parcalc.core.mamba import BLOCKS

        counts = model.mamba.blocks_in(0, model.layers)
        for block, what in BLOCKS.items():
            number = {"Mamba-2": counts.mamba, "attention": counts.attention, "MLP": counts.mlp}[what]
            rows.append((f"{what}_layers", number, "", f"'{block}' in mamba.pattern (parcalc.core.mamba)"))
            rows.append((f"{what}_layer_params", model.block_params(block), "", "its norm and its mixer, counted from the shape (parcalc.core.model)"))
    else:
        rows.append(("params_per_layer", model.params_per_layer, "", "counted from the shape (parcalc.core.model)"))
    if model.moe is not None:
        rows.append(("moe_layers", model.moe_layers, "", "layers with experts (parcalc.core.model)"))
        rows.append(("moe_layer_params", model.moe_layer_params, "", "counted from the shape (parcalc.core.model)"))
    rows.append(("total_params", model.total_params, "", "counted from the shape (parcalc.core.model)"))
    if model.mtp_layers:
        rows.append(("mtp_params", model.mtp_params, "", "the multi-token-prediction modules, embedding and head shared (parcalc.core.model)"))
        rows.append(("trained_params", model.trained_params, "", "total_params + mtp_params: what the optimizer updates"))
    if model.window is not None:
        rows.append(("local_layers", model.local_layers_in(0, model.layers), "", f"layers with a {model.window.kind.value} window (parcalc.core.model)"))
    if model.moe is not None:
        rows.append(("active_params", model.active_params, "", "per token: top_k routed + shared experts (parcalc.core.model)"))
    return rows


def _text(value: object) -> object:
    if hasattr(value, "value") and not isinstance(value, (int, float)):
        return str(value.value)  # enums
    if isinstance(value, bool):
        return "true" if value else "false"
    return value
