"""The time of one collective on a described cluster, as NCCL would run it.

A group of n ranks sits on `nodes` servers with k = n / nodes ranks on each (Megatron-LM's rank
order packs a group's ranks into as few servers as its stride allows). NCCL's cost model
(src/graph/tuning.cc, see parcalc.core.timing.nccl and docs/nccl-tuning.md) prices every
algorithm and protocol it may use and runs the cheapest:

    t = latency + bus bytes / bus bandwidth

- bus bytes (nccl-tests' convention): all-reduce 2 (n - 1)/n x S, all-gather and reduce-scatter
  (n - 1)/n x S with S the whole buffer, a point-to-point send S;
- ring bus bandwidth: inside a node, NCCL's per-link NVLink bandwidth times the links
  (the link preset's `nccl_efficiency` of its raw bandwidth); across nodes, also at most the
  network cards of the group's k GPUs on each node: a ring leaves and enters every node once per
  channel, and DGX-class nodes give every GPU its own card (rail-optimised), so the group moves
  k x NICs/GPU x B_NIC per node, not one card's worth;
- tree (all-reduce across nodes): 92 % of that bandwidth, but latency 2 ((k - 1) x intra +
  log2(nodes) x inter) instead of a step per rank;
- protocols: LL at a quarter (all-reduce, or across nodes) or a third of the bandwidth, capped
  (llMaxBws); LL128 at 120/128; Simple at the full bandwidth with the highest latency;
- latency: baseLat + (steps - inter-node steps) x the link's hwLat + inter-node steps x the
  network's hwLat, per algorithm and protocol; an inter-node ring's step costs at least NCCL's network
  post overhead, and a tree's bandwidth takes NCCL's treeCorrectionFactor for its size;
- NVLS (NVLink SHARP, all-reduce on Hopper/Blackwell NVSwitch nodes with more than 2 GPUs of the group
  in a node): the switch reduces and multicasts, one channel per GPU (`nvls_bus_bandwidth`), 25 us; across
  nodes NVLS_TREE, NVLS in each node and a tree between them;
- NCCL picks by that estimate; the NVLS pipelines then also take their ramp (`_nvls_fill`), which NCCL's
  estimate leaves out. docs/nccl-tuning.md sec. 13 has each rule's source and the nccl-tests comparison;
- every call then takes a per-call cost NCCL's model leaves out (`nccl.CALL_US`: one kernel launched per
  call, behind the previous one), calibrated on one table and tested on the others (docs sec. 14).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

from parcalc.core.choices import Collective
from parcalc.core.collectives import bus_factor
from parcalc.core.hardware import Link
from parcalc.core.timing import nccl
from parcalc.errors import InputError

US = 1e-6


@dataclass(frozen=True)
class Fabric:
    """The network of a cluster: GPUs per node, the link inside a node, one network card's link,
    the cards per node, and NCCL's architecture row for the GPU."""

    gpus_per_node: int
    intra: Link
    inter: Link
    nics_per_node: int
    arch: str = "sm80"
    intra_kind: str = "nvlink"  # NCCL's hardware class of the intra-node link: nvlink or pci
    ideal: bool = False  # an ideal network (`fit --ideal-network`): zero latency, infinite bandwidth, every call 0 s

    def __hash__(self) -> int:
        # Every collective_time looks its fabric up in a cache: hashing the nested links each time
        # was ~10 % of a large search. Computed once per (immutable) instance, from every field.
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def nic_bandwidth_per_gpu(self) -> float:
        return self.nics_per_node * self.inter.bandwidth_per_direction.value / self.gpus_per_node

    def intra_bus_bandwidth(self) -> float:
        link = self.intra
        return link.bandwidth_per_direction.value * (link.nccl_efficiency.value if link.nccl_efficiency else 1.0)


def node_fabric(gpus_per_node: int, intra: Link, inter: Link, nics: int | None = None, gpu: Any = None, ideal: bool = False) -> Fabric:
    """The fabric of nodes of `gpus_per_node` GPUs: NCCL's architecture row from the GPU (sm80
    without one), one network card per GPU unless `nics` says otherwise (rail-optimised nodes)."""
    arch = nccl.arch_of(gpu.architecture) if gpu is not None else "sm80"
    return Fabric(gpus_per_node, intra, inter, nics if nics is not None else gpus_per_node, arch, intra.nccl_hardware or "nvlink", ideal)


@dataclass(frozen=True)
class Placement:
    """n ranks, k of them on each of the nodes they span."""

    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return math.ceil(self.size / self.per_node)


def placement(size: int, stride: int, gpus_per_node: int) -> Placement:
    """Where a group of `size` ranks `stride` apart lands (Megatron-LM's order: TP ranks
    adjacent, then DP, then PP). Ranks that share a node: as many as fit in its span."""
    if size <= 1:
        return Placement(max(size, 1), max(size, 1))
    span = size * stride
    if span <= gpus_per_node and gpus_per_node % span == 0:
        return Placement(size, size)  # the whole group inside one node
    if stride >= gpus_per_node:
        return Placement(size, 1)  # one rank per node
    if gpus_per_node % stride == 0 and span % gpus_per_node == 0:
        return Placement(size, gpus_per_node // stride)  # whole nodes, g / stride ranks on each
    # A group that does not line up with nodes (tp = 6 on 8-GPU nodes): some of its instances
    # straddle two nodes; the slowest one, split in two, sets the pace.
    return Placement(size, max(1, math.ceil(size / 2)) if span <= 2 * gpus_per_node else max(1, gpus_per_node // max(stride, 1)))


@dataclass(frozen=True)
class CollectiveTime:
    """One collective call: its time, the algorithm and protocol chosen, nccl-tests' bandwidths."""

    op: Collective
    size: float  # bytes, nccl-tests' convention (the whole buffer)
    group: Placement
    time: float
    algorithm: str
    protocol: str
    latency: float
    bus_bandwidth: float  # B/s the chosen algorithm moves bus bytes at
    fill: float = 0.0  # seconds of pipeline ramp NCCL's own model leaves out (in `time`, not in its choice)
    call: float = 0.0  # seconds of per-call cost (kernel launch) NCCL's own model leaves out (in `time`, not in its choice)

    @property
    def algbw(self) -> float:
        return self.size / self.time if self.time else math.inf

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.op, self.group.size)



def _steps(op: Collective, n: int, nodes: int) -> tuple[int, int]:
    """(ring steps, of which across nodes): tuning.cc's nsteps and nInterSteps."""
    if op is Collective.ALL_REDUCE:
        return 2 * (n - 1), (2 * (nodes - 1) if nodes > 1 else 0)  # tuning.cc:257 (v2.23.4; 2 N in v2.21)
    if op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        return n - 1, nodes - 1
    return n, nodes


def _ring_bus_bandwidth(group: Placement, fabric: Fabric) -> float:
    intra = fabric.intra_bus_bandwidth()
    if group.nodes == 1:
        return intra
    network = group.per_node * fabric.nic_bandwidth_per_gpu
    return min(intra, network) if group.per_node > 1 else network


def collective_time(op: Collective, size: float, group: Placement, fabric: Fabric) -> CollectiveTime:
    """The cheapest of NCCL's algorithm x protocol choices for this call (module docstring).

    On an ideal fabric every call takes 0 s: zero latency (no base or per-step latency) and infinite
    bandwidth (bus bytes / infinity), the thought experiment of a network that costs nothing."""
    if fabric.ideal:
        return CollectiveTime(op, float(size), group, 0.0, "ideal", "none", 0.0, math.inf)
    return _collective_time(op, float(size), group, fabric)


@lru_cache(maxsize=65536)
def _collective_time(op: Collective, size: float, group: Placement, fabric: Fabric) -> CollectiveTime:
    n, nodes = group.size, group.nodes
    if size < 0 or not math.isfinite(size):
        raise InputError(f"collective size must be a finite number of bytes, got {size!r}")
    if n < 2 or size == 0:
        return CollectiveTime(op, size, group, 0.0, "none", "none", 0.0, math.inf)
    if op is Collective.POINT_TO_POINT:
        return _with_call(_send(size, group, fabric))
    if op is Collective.ALL_TO_ALL:
        return _with_call(_all_to_all(size, group, fabric))
    bus_bytes = size * bus_factor(op, n)  # broadcast and reduce: 1
    intra_hw = fabric.intra_kind
    ring_bw = _ring_bus_bandwidth(group, fabric)
    steps, inter_steps = _steps(op, n, nodes)
    nodes_row = 0 if nodes == 1 else 1 if nodes == 2 else 2
    ll_cap = nccl.LL_MAX_BUS_GBPS[fabric.arch][nodes_row] * 1e9
    best: CollectiveTime | None = None
    for protocol in nccl.PROTOCOLS:
        # ring
        if protocol == "LL":
            share = nccl.LL_SHARE_ALL_REDUCE if (nodes > 1 or op is Collective.ALL_REDUCE) else nccl.LL_SHARE_OTHER
            bw = min(ll_cap, ring_bw * share)
        elif protocol == "LL128":
            bw = ring_bw * nccl.LL128_SHARE
        else:
            bw = ring_bw
        intra_lat = nccl.HARDWARE_LATENCY_US[intra_hw]["ring"][protocol]
        if nodes > 1:  # tuning.cc:252-256: a step of an inter-node ring costs at least the network post overhead
            intra_lat = max(intra_lat, nccl.NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
        # (tuning.cc:236 charges a ring with one rank per node the tree's network latency instead; not
        # adopted: no nccl-tests table with one GPU per node to check it against; docs/nccl-tuning.md)
        inter_lat = nccl.HARDWARE_LATENCY_US["net"]["ring"][protocol]
        latency = nccl.BASE_LATENCY_US["ring"][protocol] + (steps - inter_steps) * intra_lat + inter_steps * inter_lat
        if protocol == "Simple" and nodes > 1 and op is Collective.ALL_REDUCE:
            latency *= nccl.RING_PLATEAU[fabric.arch]
        candidate = CollectiveTime(op, size, group, latency * US + bus_bytes / bw, "ring", protocol, latency * US, bw)
        if best is None or candidate.time < best.time:
            best = candidate
        # tree: all-reduce across nodes
        if op is Collective.ALL_REDUCE and nodes > 1:
            tree_bw = ring_bw * nccl.TREE_SHARE
            if protocol == "LL":
                tree_bw = min(ll_cap, tree_bw * nccl.LL_TREE_SHARE)
            elif protocol == "LL128":
                tree_bw = tree_bw * nccl.LL128_SHARE
            tree_bw *= nccl.tree_correction(protocol, size)  # tuning.cc:458
            k = group.per_node
            tree_inter = nccl.HARDWARE_LATENCY_US["net"]["tree"][protocol]
            lat = nccl.BASE_LATENCY_US["tree"][protocol] + 2 * ((k - 1) * nccl.HARDWARE_LATENCY_US[intra_hw]["tree"][protocol]
                                                                + math.floor(math.log2(nodes)) * tree_inter)  # fmt: skip
            # a tree moves the whole buffer up and down: algbw = busBw / 2 (tuning.cc ratio .5)
            candidate = CollectiveTime(op, size, group, lat * US + 2 * size / tree_bw, "tree", protocol, lat * US, tree_bw)
            if candidate.time < best.time:
                best = candidate
    assert best is not None  # the ring is a candidate for every protocol
    nvls = _nvls(op, size, group, fabric)
    if nvls is not None and nvls.time < best.time:
        best = nvls
    if best.fill:  # NCCL chose by its model; the call also takes the ramp its model leaves out
        best = replace(best, time=best.time + best.fill)
    return _with_call(best)


def _with_call(chosen: CollectiveTime) -> CollectiveTime:
    """The call as nccl-tests times it: NCCL's estimate (and ramp) plus the per-call cost its model
    leaves out (nccl.CALL_US: the kernel launch behind the previous call's kernel and the kernel's
    start). A constant per call, so NCCL's choice among algorithms and protocols is unchanged."""
    call = nccl.CALL_US * US
    return replace(chosen, time=chosen.time + call, call=call)


def nvls_bus_bandwidth(group: Placement, fabric: Fabric) -> float:
    """B/s of NCCL's NVLS (NVLink SHARP) all-reduce for this group, 0 where NCCL has none: compute
    capability 9.0 or later, NVSwitches, and more than two of the group's GPUs in each node
    (search.cc:973, nvls.cc:154). One NVLS channel per local GPU at nccl.nvls_speed (search.cc).
    Across nodes (NVLS_TREE, tuning.cc:183): at most the node's network cards that the group's GPUs own
    (2 nodes; from 3 nodes on, half of them: tuning.cc's bwInter / 2)."""
    k = group.per_node
    if fabric.arch not in nccl.NVLS_SPEEDS_GBPS or not fabric.intra.nvswitch or k < nccl.NVLS_MIN_LOCAL_GPUS:
        return 0.0
    bus = k * nccl.nvls_speed(fabric.arch, k, fabric.intra_bus_bandwidth() / 1e9) * 1e9
    if group.nodes > 1:
        network = k * fabric.nic_bandwidth_per_gpu
        bus = min(bus, network if group.nodes <= 2 else network / 2)
    return bus


def _nvls(op: Collective, size: float, group: Placement, fabric: Fabric) -> CollectiveTime | None:
    """NCCL's NVLS all-reduce (one node) or NVLS_TREE (NVLS in each node, a tree between nodes),
    Simple protocol only, algBw = busBw x 5/6 (tuning.cc:164-275, v2.23.4). NVLS all-gather and
    reduce-scatter exist but NCCL's model never prefers them to the ring on a full node (their busBw
    is kept as the algorithm bandwidth: tuning.cc:220): not modelled."""
    if op is not Collective.ALL_REDUCE:
        return None
    bus = nvls_bus_bandwidth(group, fabric)
    if bus <= 0:
        return None
    latency = nccl.NVLS_LATENCY_US
    name = "nvls"
    if group.nodes > 1:
        latency += 2 * math.floor(math.log2(group.nodes)) * nccl.NVLS_TREE_NET_LATENCY_US
        name = "nvls_tree"
    algbw = bus * nccl.NVLS_BUS_TO_ALG
    return CollectiveTime(op, size, group, latency * US + size / algbw, name, "Simple", latency * US, bus,
                          fill=_nvls_fill(size, group, algbw))


def _nvls_fill(size: float, group: Placement, algbw: float) -> float:
    """Seconds NCCL's cost model leaves out of an NVLS pipeline: its ramp. The data moves through
    channels x heads pipes (nccl.NVLS_CHANNELS x the node's GPUs) in chunks (nccl.nvls_chunk). A chunk
    crosses, one after another, the transfers that run at the pipe's share of the bandwidth
    (src/device/all_reduce.h, RunWorkColl NVLS and NVLS_TREE): in one node the reduction read from the
    switch (multimem.ld_reduce) and the multicast write to it; across nodes also one network hop up and
    one down per level of the tree of nodes (log2(nodes) levels). The copies between the user's buffers
    and the NVLS buffers (scatter, gather warps) run at HBM speed and are not counted. The last chunk
    finishes (transfers - 1) chunk-times after the bandwidth term alone says; a chunk-time is one
    pipe's chunk at its share of the algorithm bandwidth. A modelling choice of parcalc's, not NCCL's:
    docs/nccl-tuning.md sec. 13 compares it with the tables."""
    pipes = nccl.NVLS_CHANNELS * group.per_node
    piece = min(nccl.nvls_chunk(size, pipes, group.nodes), size / pipes)
    hops = 1 + 2 * math.floor(math.log2(group.nodes)) if group.nodes > 1 else 1
    return hops * piece * pipes / algbw


def _send(size: float, group: Placement, fabric: Fabric) -> CollectiveTime:
    """A point-to-point send between two ranks (pipeline activations): over NVLink inside a node,
    over the sending GPU's own network card across nodes; NCCL's p2p uses the Simple protocol."""
    if group.nodes == 1:
        bw, hw = fabric.intra_bus_bandwidth(), fabric.intra_kind
    else:
        bw, hw = fabric.nic_bandwidth_per_gpu, "net"
    latency = (nccl.BASE_LATENCY_US["ring"]["Simple"] + nccl.HARDWARE_LATENCY_US[hw]["ring"]["Simple"]) * US
    return CollectiveTime(Collective.POINT_TO_POINT, size, group, latency + size / bw, "p2p", "Simple", latency, bw)


def node_forwarded_exchange(network_bytes: float, nvlink_bytes: float, fabric: Fabric) -> float:
    """Seconds of an exchange that crosses the network once per destination node and is forwarded
    inside the node over NVLink (DeepEP / HybridEP, parcalc.core.timing.moe): the slower of the
    rank's network card(s) and NVLink, after one network latency (NCCL's Simple p2p constants)."""
    if fabric.ideal:
        return 0.0
    latency = (nccl.BASE_LATENCY_US["ring"]["Simple"] + nccl.HARDWARE_LATENCY_US["net"]["ring"]["Simple"]) * US
    return latency + max(network_bytes / fabric.nic_bandwidth_per_gpu, nvlink_bytes / fabric.intra_bus_bandwidth())


def _all_to_all(size: float, group: Placement, fabric: Fabric) -> CollectiveTime:
    """All-to-all of a buffer of `size` bytes per rank: (n - 1)/n of it leaves each rank, the part
    for other nodes through the rank's own network card(s)."""
    n, k = group.size, group.per_node
    intra_share = (k - 1) / n
    inter_share = (n - k) / n
    t_intra = size * intra_share / fabric.intra_bus_bandwidth()
    t_inter = size * inter_share / fabric.nic_bandwidth_per_gpu if inter_share else 0.0
    hw = "net" if group.nodes > 1 else fabric.intra_kind
    latency = (nccl.BASE_LATENCY_US["ring"]["Simple"] + nccl.HARDWARE_LATENCY_US[hw]["ring"]["Simple"]) * US
    bw = size * (n - 1) / n / max(t_intra, t_inter) if max(t_intra, t_inter) > 0 else math.inf
    return CollectiveTime(Collective.ALL_TO_ALL, size, group, latency + max(t_intra, t_inter), "pairwise", "Simple", latency, bw)
