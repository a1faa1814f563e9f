"""The cluster a step-time estimate runs on (parcalc.core.fit.Cluster), from the flags `fit` and
`scaling` share: GPUs, the GPU preset or its capacity and peak, GPUs per node, links, NICs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parcalc.results.parse import MAX_GPUS, MAX_GPUS_PER_NODE, check_at_most, power_limited

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster


def cluster_from_flags(gpus: str, gpu: str | None, gpus_per_node: str | None, capacity: str | None, dtype: str, peak: str | None,
                       efficiency: str | None, link: str | None, inter_node_link: str | None, nics_per_node: str | None, dp_overlap: bool | None,
                       tp_comm_overlap: bool | None, allow_cross_node_tp: bool, framework: Any, dirs: tuple, *,
                       ideal_network: bool = False, power_limit: str | None = None) -> Cluster:  # fmt: skip
    """The cluster fit and scaling compute on, from their flags: the GPU (a preset, or --capacity and
    --peak), its node and links, the kernel efficiency, the overlap switches and the framework."""
    from parcalc.core.fit import DEFAULT_EFFICIENCY, Cluster
    from parcalc.errors import InputError
    from parcalc.presets import load_gpu, load_link
    from parcalc.results.comm_volume import DEFAULT_INTER_NODE_LINK, DEFAULT_LINK
    from parcalc.results.flops import _peak
    from parcalc.units import Dimension, parse_count, parse_quantity

    n = check_at_most(parse_count(gpus, "--gpus"), MAX_GPUS, "--gpus", "GPUs")
    if gpu is None and (capacity is None or peak is None):
        raise InputError("--gpu: give a GPU preset, or both --capacity and --peak")
    device = load_gpu(gpu, dirs) if gpu is not None else None
    device = power_limited(device, power_limit, peak_given=peak is not None)  # the Tensor Core rate under the board power limit
    if capacity is not None:
        cap, cap_source = parse_quantity(capacity, Dimension.BYTES, "--capacity", require_unit=True), "given on the command line"
    else:
        assert device is not None  # guarded above: no --capacity means a --gpu
        cap, cap_source = device.memory_capacity.value, device.memory_capacity.source
    rate, rate_source, _ = _peak(gpu, peak, dtype, dirs)
    from parcalc.core.timing.compute import sixteen_bit_peak

    attention = sixteen_bit_peak(device) if device is not None and peak is None else None
    e = DEFAULT_EFFICIENCY
    if efficiency is not None:
        try:
            e = float(efficiency.rstrip("%")) / (100 if efficiency.endswith("%") else 1)
        except ValueError:
            raise InputError(f"--efficiency: a factor on every kernel's rate such as 0.9 or 90%, got {efficiency!r}") from None
        if not (0 < e <= 2):
            raise InputError(f"--efficiency: a factor above 0 and at most 2, got {efficiency!r}")
    node = device.node if device is not None else None
    per_node = parse_count(gpus_per_node, "--gpus-per-node") if gpus_per_node is not None else (node.gpus if node else 8)
    check_at_most(per_node, MAX_GPUS_PER_NODE, "--gpus-per-node", "GPUs per node")
    nics = parse_count(nics_per_node, "--nics-per-node") if nics_per_node is not None else (node.nics_for(per_node) if node else None)
    return Cluster(
        gpus=n, gpus_per_node=per_node, peak=rate, capacity=cap,
        intra=load_link(link or (node.intra_link if node else DEFAULT_LINK), dirs),
        inter=load_link(inter_node_link or (node.inter_link if node else DEFAULT_INTER_NODE_LINK), dirs),
        gpu_name=device.name if device else "GPU", peak_source=rate_source, capacity_source=cap_source, efficiency=e,
        dp_overlap=dp_overlap, allow_cross_node_tp=allow_cross_node_tp, nics_per_node=nics, gpu=device, dtype=dtype,
        framework=framework, tp_comm_overlap=tp_comm_overlap, attention_peak=attention, ideal_network=ideal_network,
    )  # fmt: skip
