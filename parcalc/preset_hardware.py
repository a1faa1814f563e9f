"""GPU and link presets: their YAML documents made into parcalc.core.hardware's Gpu and Link,
every number with its unit and source."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.dtypes import COMPUTE_DTYPES
from parcalc.core.hardware import DtypeRates, Gpu, KernelRates, Link, Node, PowerPoint, Sourced
from parcalc.errors import InputError, PresetError, shown
from parcalc.preset_doc import (
    PresetDoc,
    has_unit,
    host_costs_of,
    one_of,
    opened,
    row_quantity,
    rows_of,
    share_of,
    whole_number,
)
from parcalc.preset_files import Category
from parcalc.units import Dimension, parse_quantity

if TYPE_CHECKING:  # only calibrated presets build them (parcalc.core.measured)
    from parcalc.core.measured import MatmulSweep, MeasuredCollective


_GPU_KEYS = (
    "kind", "name", "vendor", "architecture", "sources", "sms", "boost_clock", "memory_capacity",
    "memory_bandwidth", "nvlink_bandwidth_per_direction", "dtypes", "kernels", "node", "notes", "matmul_measured",
    "board_power", "power_curve", "power_limit", "host", "nccl_channels",
)  # fmt: skip
_KERNEL_KEYS = ("matmul", "tile", "memory", "attention_forward", "attention_backward", "launch", "matmul_isolated", "gemm_tiles",
                "attention_by_head_dim", "calibrated", "element_rates", "element_clock", "attention_kernels", "attention_tiles",
                "matmul_mxfp8")
_CALIBRATED_KINDS = ("gemm", "attention", "memory", "optimizer")
_NODE_KEYS = ("gpus", "intra_link", "inter_link", "nics", "source")
_RATE_KEYS = ("fma_per_clock_per_sm", "dense_peak", "sparse_peak")


def gpu_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Gpu:
    doc, sources = opened(path, data, _GPU_KEYS, Category.GPUS)
    dtypes: dict[str, DtypeRates] = {}
    if "dtypes" in doc.data:
        table = doc.child("dtypes")
        for dtype in table.data:
            if dtype not in COMPUTE_DTYPES:
                raise table.error(str(dtype), f"unknown dtype; known: {', '.join(COMPUTE_DTYPES)}")
            rates = table.child(dtype)
            rates.only(_RATE_KEYS)
            parsed = DtypeRates(
                fma_per_clock_per_sm=rates.quantity("fma_per_clock_per_sm", Dimension.COUNT, sources, False),
                dense_peak=rates.quantity("dense_peak", Dimension.FLOP_RATE, sources, False),
                sparse_peak=rates.quantity("sparse_peak", Dimension.FLOP_RATE, sources, False),
            )
            if parsed == DtypeRates():
                raise rates.error("dense_peak", "a dtype needs fma_per_clock_per_sm or dense_peak")
            dtypes[dtype] = parsed
    return Gpu(
        key=key,
        name=doc.text("name"),
        vendor=doc.text("vendor"),
        architecture=doc.text("architecture"),
        sms=doc.quantity("sms", Dimension.COUNT, sources, required=False),
        boost_clock=doc.quantity("boost_clock", Dimension.FREQUENCY, sources, required=False),
        memory_capacity=doc.quantity("memory_capacity", Dimension.BYTES, sources),  # type: ignore[arg-type]
        memory_bandwidth=doc.quantity("memory_bandwidth", Dimension.BANDWIDTH, sources),  # type: ignore[arg-type]
        nvlink_bandwidth=doc.quantity("nvlink_bandwidth_per_direction", Dimension.BANDWIDTH, sources, False),
        dtypes=dtypes,
        notes=doc.texts("notes"),
        kernels=_kernels(doc, sources, dtypes) if "kernels" in doc.data else None,
        node=_node(doc, sources) if "node" in doc.data else None,
        matmul_measured=_matmul_measured(doc, sources, dtypes) if "matmul_measured" in doc.data else (),
        board_power=doc.quantity("board_power", Dimension.POWER, sources, required=False),
        **_power(doc, sources),
        host=host_costs_of(doc, sources) if "host" in doc.data else None,
        nccl_channels=doc.quantity("nccl_channels", Dimension.COUNT, sources, required=False),
    )


_POWER_POINT_KEYS = ("power", "tensor_scale", "source", "note")


def _power(doc: PresetDoc, sources: Mapping[str, str]) -> dict[str, Any]:
    """`power_curve:` [{power, tensor_scale, source, note?}] ascending in power, the Tensor Core
    rate (a share of the dense peaks, at most 1) at each board power limit; `power_limit:` the
    default enforced limit, a point the curve covers (parcalc.core.power)."""
    board = doc.quantity("board_power", Dimension.POWER, sources, required=False)
    # points may lie above this board's power: the same die rated higher bounds the interpolation
    curve: list[PowerPoint] = []
    if "power_curve" in doc.data:
        rows = doc.data["power_curve"]
        if not isinstance(rows, list) or not rows:
            raise doc.error("power_curve", "expected a non-empty list of {power, tensor_scale, source} points")
        for index, row in enumerate(rows):
            where = f"{doc.path}: key 'power_curve[{index}]'"
            if not isinstance(row, dict) or not {"power", "tensor_scale", "source"} <= set(row) or not set(row) <= set(_POWER_POINT_KEYS):
                raise PresetError(f"{where}: expected a mapping with the keys power, tensor_scale, source (and an optional note)")
            point = PresetDoc(doc.path, row, f"power_curve[{index}]")
            if not (isinstance(row["power"], str) and has_unit(row["power"])):
                raise point.error("power", f"{shown(row['power'])} has no unit; write it with one, e.g. 400W")
            watts = row_quantity(row, "power", Dimension.POWER, where)
            scale = row_quantity(row, "tensor_scale", Dimension.FRACTION, where)
            if scale > 1:
                raise point.error("tensor_scale", f"a share of the preset's peaks, at most 1, got {shown(row['tensor_scale'])}")
            if curve and watts <= curve[-1].watts:
                raise point.error("power", "points must ascend in power")
            if curve and scale < curve[-1].tensor_scale:
                raise point.error("tensor_scale", "a higher power limit cannot give a lower Tensor Core rate")
            note = point.text("note", required=False)
            source = point.source_ref("source", sources)
            curve.append(PowerPoint(watts, scale, f"{source} ({note})" if note else source))
    limit = doc.quantity("power_limit", Dimension.POWER, sources, required=False)
    if limit is not None:
        if not curve:
            raise doc.error("power_limit", "a default power limit needs a power_curve to time it")
        if limit.value < curve[0].watts * (1 - 1e-9) or (board is not None and limit.value > board.value * (1 + 1e-9)):
            raise doc.error("power_limit", f"{limit.value:g} W is outside the power curve ({curve[0].watts:g} W up to the board power)")
    return {"power_curve": tuple(curve), "power_limit": limit}


def _kernels(doc: PresetDoc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> KernelRates:
    """`kernels:` measured shares of the peaks, each with its source (see parcalc.core.timing.compute)."""
    node = doc.child("kernels")
    node.only(_KERNEL_KEYS)
    matmul, isolated = _shares(node, "matmul", sources, dtypes), _shares(node, "matmul_isolated", sources, dtypes)
    tile = node.child("tile")
    tile.only(("m", "n", "source"))
    return KernelRates(
        matmul=tuple(matmul),
        tile_m=tile.integer("m"),
        tile_n=tile.integer("n"),
        tile_source=tile.source_ref("source", sources),
        memory=share_of(node, "memory", sources, required=True),  # type: ignore[arg-type]
        attention_forward=share_of(node, "attention_forward", sources, required=True),  # type: ignore[arg-type]
        attention_backward=share_of(node, "attention_backward", sources, required=True),  # type: ignore[arg-type]
        launch=node.quantity("launch", Dimension.TIME, sources),  # type: ignore[arg-type]
        matmul_isolated=isolated,
        gemm_tiles=_gemm_tiles(node, sources, dtypes) if "gemm_tiles" in node.data else (),
        attention_by_head_dim=_attention_by_head_dim(node, sources) if "attention_by_head_dim" in node.data else (),
        calibrated=_calibrated(node, sources) if "calibrated" in node.data else None,
        element_rates=_element_rates(node, sources) if "element_rates" in node.data else (),
        element_clock=_element_clock(node, sources) if "element_clock" in node.data else None,
        attention_kernels=_attention_kernels(node, sources) if "attention_kernels" in node.data else (),
        attention_tiles=_attention_tiles(node, sources) if "attention_tiles" in node.data else None,
        matmul_mxfp8=share_of(node, "matmul_mxfp8", sources),
    )


def _attention_tiles(node: PresetDoc, sources: Mapping[str, str]) -> Any:
    """`kernels.attention_tiles:` {tile, forward_overhead, backward_overhead, source} (parcalc.core.timing.attention_tiles)."""
    from parcalc.core.timing.attention_tiles import AttentionTiles

    block = node.child("attention_tiles")
    block.only(("tile", "forward_overhead", "backward_overhead", "source", "note"))
    source = block.source_ref("source", sources)
    overheads = []
    for name in ("forward_overhead", "backward_overhead"):
        if name not in block.data:
            raise block.error(name, "missing")
        value = parse_quantity(block.data[name], Dimension.TIME, f"{block.path}: key 'attention_tiles.{name}'")
        if not 0 <= value < 1e-3:
            raise block.error(name, f"a tile's fixed cost in [0, 1 ms), got {shown(block.data.get(name))}")
        overheads.append(value)
    return AttentionTiles(block.integer("tile"), overheads[0], overheads[1], source)


def _element_rates(node: PresetDoc, sources: Mapping[str, str]) -> tuple[tuple[str, Sourced], ...]:
    """`kernels.element_rates:` {path: {value: elements per second, source, note?}} for the TensorIterator kernel paths
    of parcalc.core.timing.elementwise.PATHS."""
    from parcalc.core.timing.elementwise import PATHS

    table = node.child("element_rates")
    table.only(PATHS)
    out = []
    for path in table.data:
        rate = table.quantity(str(path), Dimension.COUNT, sources)
        if rate is None or not rate.value > 0:
            raise table.error(str(path), "a rate above 0 (elements per second)")
        out.append((str(path), Sourced(rate.value, "element/s", rate.source)))
    return tuple(out)


def _element_clock(node: PresetDoc, sources: Mapping[str, str]) -> Any:
    """`kernels.element_clock:` {clock: the SM clock element_rates were measured at, shares: {path: share of its time per
    element that follows the clock, in [0, 1]}, source, note?} (parcalc.core.timing.elementwise.ElementClock)."""
    from parcalc.core.timing.elementwise import PATHS, ElementClock

    if "element_rates" not in node.data:
        raise node.error("element_clock", "the clock of kernels.element_rates: give the rates too")
    block = node.child("element_clock")
    block.only(("clock", "shares", "source", "note"))
    clock = block.quantity("clock", Dimension.FREQUENCY, sources)
    assert clock is not None
    if not clock.value > 0:
        raise block.error("clock", "a clock above 0")
    table = block.child("shares")
    table.only(PATHS)
    shares = []
    for path, value in table.data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise table.error(str(path), f"a share of the time per element between 0 and 1, got {shown(value)}")
        shares.append((str(path), float(value)))
    return ElementClock(clock.value, tuple(shares), f"{block.source_ref('source', sources)}; the clock: {clock.source}")


def _calibrated(node: PresetDoc, sources: Mapping[str, str]) -> Any:
    """`kernels.calibrated:` {gemm, attention, memory, optimizer: factor on that kind's modelled rate, source, note?}
    (`parcalc calibrate trace`; parcalc.core.hardware.KindEfficiency)."""
    from parcalc.core.hardware import KindEfficiency

    block = node.child("calibrated")
    block.only((*_CALIBRATED_KINDS, "source", "note"))
    factors = {}
    for kind in _CALIBRATED_KINDS:
        value = block.data.get(kind)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.05 <= value <= 20:
            raise block.error(kind, f"a factor on the modelled rate between 0.05 and 20, got {shown(value)}")
        factors[kind] = float(value)
    return KindEfficiency(**factors, source=block.source_ref("source", sources))


def _attention_kernels(node: PresetDoc, sources: Mapping[str, str]) -> tuple[tuple[str, Sourced, Sourced], ...]:
    """`kernels.attention_kernels:` {implementation: {forward: share, backward: share, source, note?}}: fused attention
    kernels of another software generation (parcalc.core.timing.attention_kernels)."""
    table = node.child("attention_kernels")
    out = []
    for name in table.data:
        row = table.child(name)
        row.only(("forward", "backward", "source", "note"))
        shares = []
        for part in ("forward", "backward"):
            value = row.data.get(part)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise row.error(part, f"a share of the peak in (0, 1], got {shown(value)}")
            shares.append(Sourced(float(value), "fraction", row.source_ref("source", sources)))
        out.append((str(name), shares[0], shares[1]))
    return tuple(out)


def _attention_by_head_dim(node: PresetDoc, sources: Mapping[str, str]) -> tuple[tuple[int, Sourced, Sourced], ...]:
    """`kernels.attention_by_head_dim:` {head dim: {forward: share, backward: share, source}} of fused attention."""
    table = node.child("attention_by_head_dim")
    out = []
    for key in table.data:
        dim = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else 0
        if dim <= 0:
            raise table.error(str(key), f"a head dimension (a whole number above 0), got {shown(key)}")
        row = table.child(key)
        row.only(("forward", "backward", "source", "note"))
        shares = []
        for name in ("forward", "backward"):
            value = row.data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise row.error(name, f"a share of the peak in (0, 1], got {shown(value)}")
            shares.append(Sourced(float(value), "fraction", row.source_ref("source", sources)))
        out.append((dim, shares[0], shares[1]))
    return tuple(sorted(out, key=lambda r: r[0]))


def _dtype_keys(table: PresetDoc, dtypes: Mapping[str, DtypeRates]) -> list[str]:
    """A table's keys, each a dtype the GPU has a peak for (else the preset's one-line error naming it)."""
    for dtype in table.data:
        if dtype not in dtypes:
            raise table.error(str(dtype), f"no peak for this dtype in 'dtypes' (known: {', '.join(dtypes)})")
    return [str(dtype) for dtype in table.data]


def _gemm_tiles(node: PresetDoc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, Any], ...]:
    """`kernels.gemm_tiles:` dtype -> {sm_rate, tile_overhead, kernel_overhead, split_k_slice, tiles, source}
    (parcalc.core.timing.gemm_tiles)."""
    from parcalc.core.timing.gemm_tiles import TiledGemm

    table = node.child("gemm_tiles")
    out = []
    for dtype in _dtype_keys(table, dtypes):
        block = table.child(dtype)
        block.only(("sm_rate", "tile_overhead", "kernel_overhead", "split_k_slice", "tiles", "source", "note", "clock", "training_clock",
                    "max_clock", "training_load", "power_exponent"))  # fmt: skip
        for needed in ("sm_rate", "tile_overhead", "kernel_overhead"):
            if needed not in block.data:
                raise block.error(needed, "missing")
        try:
            rate = parse_quantity(block.data["sm_rate"], Dimension.FLOP_RATE, f"{block.path}: key 'gemm_tiles.{dtype}.sm_rate'")
            tile = parse_quantity(block.data["tile_overhead"], Dimension.TIME, f"{block.path}: key 'gemm_tiles.{dtype}.tile_overhead'")
            kernel = parse_quantity(block.data["kernel_overhead"], Dimension.TIME, f"{block.path}: key 'gemm_tiles.{dtype}.kernel_overhead'")
        except InputError as error:
            raise PresetError(str(error)) from None
        tiles = block.data.get("tiles")
        if not (isinstance(tiles, list) and tiles and all(isinstance(t, list) and len(t) == 2 and all(type(v) is int and v > 0 for v in t)
                                                            for t in tiles)):  # fmt: skip
            raise block.error("tiles", f"a list of [tm, tn] tile sizes, got {shown(tiles)}")
        if not (rate > 0 and tile >= 0 and kernel >= 0):
            raise block.error("sm_rate", "a rate above 0 and overheads of at least 0")
        clock = block.quantity("clock", Dimension.FREQUENCY, sources, required=False)
        training = block.quantity("training_clock", Dimension.FREQUENCY, sources, required=False)
        if (clock is None) != (training is None):
            raise block.error("clock", "clock and training_clock come together (the sweep's SM clock and a training step's)")
        clocks = (clock.value, training.value, f"{clock.source}; {training.source}") if clock and training else (0.0, 0.0, "")
        top, load, exponent, power = _power_clock(block, sources, clock)
        out.append((str(dtype), TiledGemm(rate, tile, kernel, block.integer("split_k_slice"), tuple((t[0], t[1]) for t in tiles),
                                          block.source_ref("source", sources), *clocks, max_clock=top, training_load=load,
                                          power_exponent=exponent, power_source=power)))  # fmt: skip
    return tuple(out)


def _power_clock(block: PresetDoc, sources: Mapping[str, str], clock: Sourced | None) -> tuple[float, float, float, str]:
    """`max_clock`, `training_load`, `power_exponent` of a gemm_tiles block (all three or none, with the clocks): the step's
    clock from its power (parcalc.core.timing.step_clock); zeros where not given."""
    keys = ("max_clock", "training_load", "power_exponent")
    given = [key for key in keys if key in block.data]
    if not given:
        return 0.0, 0.0, 0.0, ""
    if len(given) < len(keys) or clock is None:
        raise block.error(given[0], "max_clock, training_load and power_exponent come together, with clock and training_clock "
                                    "(the step's clock from its power: parcalc.core.timing.step_clock)")  # fmt: skip
    top = block.quantity("max_clock", Dimension.FREQUENCY, sources)
    load = block.quantity("training_load", Dimension.FRACTION, sources)
    exponent = block.quantity("power_exponent", Dimension.COUNT, sources)
    assert top is not None and load is not None and exponent is not None
    if not (0 < load.value <= 1 and exponent.value > 0 and top.value > 0):
        raise block.error("training_load", "a load in (0, 1], an exponent above 0 and a clock above 0")
    return top.value, load.value, exponent.value, f"{top.source}; {load.source}; {exponent.source}"


def _shares(node: PresetDoc, key: str, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, Sourced], ...]:
    """`kernels.<key>:` dtype -> share of that dtype's dense peak, each with its source."""
    shares = []
    if key in node.data:
        table = node.child(key)
        for dtype in _dtype_keys(table, dtypes):
            share = share_of(table, dtype, sources, required=True)
            assert share is not None
            shares.append((str(dtype), share))
    return tuple(shares)


def _node(doc: PresetDoc, sources: Mapping[str, str]) -> Node:
    """`node:` the usual server of this GPU: GPUs, intra-node link, one NIC's link, NICs."""
    node = doc.child("node")
    node.only(_NODE_KEYS)
    return Node(gpus=node.integer("gpus"), intra_link=node.text("intra_link"), inter_link=node.text("inter_link"),
                nics=node.integer("nics"), source=node.source_ref("source", sources))  # fmt: skip


_MATMUL_POINT_KEYS = ("m", "k", "n", "time", "achieved", "quantisation", "share")


def _matmul_measured(doc: PresetDoc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, MatmulSweep], ...]:
    """`matmul_measured:` dtype -> {source, rows: [{m, k, n, time, achieved, quantisation, share}]},
    the sweep `parcalc calibrate gemm` measured (data: the model uses `kernels.matmul`)."""
    from parcalc.core.measured import MatmulPoint, MatmulSweep

    table = doc.child("matmul_measured")
    sweeps = []
    for dtype in _dtype_keys(table, dtypes):
        sweep = table.child(dtype)
        sweep.only(("source", "rows"))
        points = []
        for where, row in rows_of(sweep, _MATMUL_POINT_KEYS):
            m, k, n = (whole_number(row, key, where) for key in ("m", "k", "n"))
            time = row_quantity(row, "time", Dimension.TIME, where)
            achieved = row_quantity(row, "achieved", Dimension.FLOP_RATE, where)
            quantisation = row_quantity(row, "quantisation", Dimension.FRACTION, where)
            if quantisation > 1:
                raise PresetError(f"{where}.quantisation: a share of at most 1, got {quantisation!r}")
            points.append(MatmulPoint(m, k, n, time, achieved, quantisation, row_quantity(row, "share", Dimension.FRACTION, where)))
        sweeps.append((str(dtype), MatmulSweep(sweep.source_ref("source", sources), tuple(points))))
    return tuple(sweeps)


_LINK_KEYS = ("kind", "name", "sources", "bandwidth_per_direction", "latency", "nccl_hardware", "nccl_efficiency", "notes", "measured", "nvswitch")
_NCCL_HARDWARE = ("nvlink", "pci", "net")


def link_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Link:
    doc, sources = opened(path, data, _LINK_KEYS, Category.LINKS)
    return Link(
        key=key,
        name=doc.text("name"),
        bandwidth_per_direction=doc.quantity("bandwidth_per_direction", Dimension.BANDWIDTH, sources),  # type: ignore[arg-type]
        latency=doc.quantity("latency", Dimension.TIME, sources),  # type: ignore[arg-type]
        notes=doc.texts("notes"),
        nccl_hardware=one_of(doc, "nccl_hardware", _NCCL_HARDWARE, "net"),
        nccl_efficiency=share_of(doc, "nccl_efficiency", sources),
        measured=_measured_collective(doc, sources) if "measured" in doc.data else None,
        nvswitch=doc.flag("nvswitch", False),
    )


_MEASURED_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
_MEASURED_SIZE_KEYS = ("size", "time", "algbw", "busbw")


def _measured_collective(doc: PresetDoc, sources: Mapping[str, str]) -> MeasuredCollective:
    from parcalc.core.measured import MeasuredCollective, MeasuredSize

    """`measured:` the nccl-tests table `parcalc calibrate nccl` fitted the link to (data)."""
    node = doc.child("measured")
    node.only(("collective", "ranks", "nodes", "source", "rows"))
    rows = []
    for where, row in rows_of(node, _MEASURED_SIZE_KEYS):
        rows.append(MeasuredSize(
            size=row_quantity(row, "size", Dimension.BYTES, where),
            time=row_quantity(row, "time", Dimension.TIME, where),
            algbw=row_quantity(row, "algbw", Dimension.BANDWIDTH, where, allow_zero=True),  # nccl-tests prints 0.00 for tiny sizes
            busbw=row_quantity(row, "busbw", Dimension.BANDWIDTH, where, allow_zero=True),
        ))  # fmt: skip
    if any(b.size <= a.size for a, b in itertools.pairwise(rows)):
        raise node.error("rows", "sizes must increase from row to row")
    collective = node.text("collective")
    if collective not in _MEASURED_COLLECTIVES:
        raise node.error("collective", f"{shown(collective)} is not one of {', '.join(_MEASURED_COLLECTIVES)}")
    return MeasuredCollective(
        collective=collective,
        ranks=node.integer("ranks"),
        nodes=node.integer("nodes"),
        source=node.source_ref("source", sources),
        rows=tuple(rows),
    )
