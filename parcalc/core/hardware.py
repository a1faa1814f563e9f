"""Typed descriptions of GPUs and interconnects, as the core consumes them.

Every number is a `Sourced` value in base units with the source it was taken from; presets.py
builds these from YAML, and users can build them in Python directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from parcalc.frozen import frozen

if TYPE_CHECKING:  # defined apart: only calibrated presets need them, and each dataclass costs start-up time
    from parcalc.core.measured import MatmulSweep, MeasuredCollective
    from parcalc.core.timing.attention_tiles import AttentionTiles
    from parcalc.core.timing.elementwise import ElementClock
    from parcalc.core.timing.gemm_tiles import TiledGemm  # only the H200's measured preset builds one (parcalc.presets)
    from parcalc.core.timing.host import HostCosts  # only a preset calibrated from a trace carries one


@frozen
class Sourced:
    """A number in base units (see parcalc.units) and where it comes from."""

    value: float
    unit: str
    source: str


@frozen
class KindEfficiency:
    """Factors on the modelled rate of each kind of kernel, measured from a profiler trace of one's own step
    (`parcalc calibrate trace`): e = modelled time / measured time of that kind's kernels in the traced step, so that
    each kind's modelled time is divided by its own e. One factor per kind, each from that kind's kernels only: GEMMs,
    fused attention, memory-bound kernels, the optimizer step's kernels. 1: the model as it is."""

    gemm: float
    attention: float
    memory: float
    optimizer: float
    source: str

    def of(self, kind: str) -> float:
        return {"gemm": self.gemm, "attention": self.attention, "memory": self.memory, "optimizer": self.optimizer}[kind]


@frozen
class DtypeRates:
    """Throughput of one numeric format on one GPU.

    fma_per_clock_per_sm: dense fused multiply-adds per clock per SM (or AMD compute unit);
    dense_peak / sparse_peak: the datasheet's peak FLOP/s, sparse meaning 2:4 structured sparsity.
    Any of them may be absent: a rate a datasheet does not give is never extrapolated.
    """

    fma_per_clock_per_sm: Sourced | None = None
    dense_peak: Sourced | None = None
    sparse_peak: Sourced | None = None


@frozen
class Gpu:
    """One GPU model as its datasheet describes it, each number a Sourced value in base units."""

    key: str
    name: str
    vendor: str
    architecture: str
    memory_capacity: Sourced
    memory_bandwidth: Sourced
    sms: Sourced | None = None
    boost_clock: Sourced | None = None
    nvlink_bandwidth: Sourced | None = None
    dtypes: Mapping[str, DtypeRates] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    kernels: KernelRates | None = None  # measured kernel efficiencies; None: parcalc's generic ones
    node: Node | None = None  # the usual server of this GPU; None: 8 per node, NVLink/IB by default
    # `parcalc calibrate gemm`'s sweeps, (dtype, sweep) pairs: data to read, not used by the model
    matmul_measured: tuple[tuple[str, MatmulSweep], ...] = ()
    # the datasheet's maximum board power (TDP / TBP), watts: energy to train (parcalc.core.training_cost)
    board_power: Sourced | None = None
    # the Tensor Core rate at board power limits below the one the peaks are rated at, ascending in
    # watts (parcalc.core.power); () where no rated or measured point is known
    power_curve: tuple[PowerPoint, ...] = ()
    # the enforced board power limit, watts: the preset's default limit or --power-limit; None: the
    # limit the peaks are rated at (Tensor Core rate as the datasheet gives it)
    power_limit: Sourced | None = None
    # the host's time per kernel issued, measured from a profiler trace of a step on this machine (`parcalc calibrate
    # trace`): used instead of the framework profile's `host:` where that profile models its host (None: the profile's)
    host: HostCosts | None = None
    # the CTAs NCCL runs one collective on (one per channel, each holding an SM that the GEMMs beside it lose while it
    # runs: parcalc.core.timing.sm_contention); None: not known, no contention timed
    nccl_channels: Sourced | None = None


@frozen
class PowerPoint:
    """One point of a GPU's power curve: at a board power limit of `watts`, the Tensor Cores run at
    `tensor_scale` of the preset's dense peaks (the clock the GPU holds under that limit)."""

    watts: float
    tensor_scale: float
    source: str


@frozen
class Link:
    """A point-to-point interconnect; bandwidth is per direction, latency per message (alpha)."""

    key: str
    name: str
    bandwidth_per_direction: Sourced
    latency: Sourced
    notes: tuple[str, ...] = ()
    nccl_hardware: str = "net"  # NCCL's class of this hardware for its latencies: nvlink, pci or net
    nccl_efficiency: Sourced | None = None  # share of the bandwidth NCCL's model gives a ring over it
    # `parcalc calibrate nccl`'s table. Not part of equality or the hash: no model reads it, and
    # links are keys of the collective-time cache, which should not hash a whole table per call.
    measured: MeasuredCollective | None = field(default=None, compare=False)
    # every GPU reaches the others through NVSwitches (DGX/HGX): NCCL's NVLS (NVLink SHARP) needs it
    # with compute capability 9.0 or later (src/graph/search.cc:973)
    nvswitch: bool = False


@frozen
class KernelRates:
    """How close one GPU's kernels come to its peaks, each share with its source.

    matmul: dtype -> share of the dense peak that large, well-shaped GEMMs sustain in training;
    tile_m x tile_n: the output tile of one thread block, for tile and wave quantisation;
    memory: share of the HBM bandwidth that element-wise and reduction kernels sustain;
    attention_forward / attention_backward: share of the dense 16-bit peak FlashAttention sustains;
    launch: the shortest time one kernel takes (launch and tail), seconds;
    matmul_isolated: dtype -> share of the dense peak one well-shaped GEMM reaches alone.
    """

    matmul: tuple[tuple[str, Sourced], ...]  # (dtype, share) pairs: hashable, so kernel times can be cached
    tile_m: int
    tile_n: int
    tile_source: str
    memory: Sourced
    attention_forward: Sourced
    attention_backward: Sourced
    launch: Sourced
    # dtype -> share of the dense peak the best-shaped GEMM reaches alone (a microbenchmark, nothing
    # else on the GPU): what `intensity --m --k --n` holds against published GEMM measurements.
    # `matmul` is what training GEMMs sustain (fit's); () where no isolated measurement is given.
    matmul_isolated: tuple[tuple[str, Sourced], ...] = ()
    # dtype -> GEMM time by tiles, measured by shape on this GPU (parcalc.core.timing.gemm_tiles.TiledGemm): where
    # given, fit times that dtype's GEMMs with it instead of `matmul` x quantisation
    gemm_tiles: tuple[tuple[str, TiledGemm], ...] = ()
    # (head dim, forward share, backward share) of fused attention measured at that head dimension; () where not given
    attention_by_head_dim: tuple[tuple[int, Sourced, Sourced], ...] = ()
    # per-kind factors on the modelled kernel rates, from a profiler trace of this GPU (None: not calibrated)
    calibrated: KindEfficiency | None = None
    # PyTorch TensorIterator kernel path -> elements per second its kernels process at most (unit 'element/s'):
    # the paths that are not vectorised are bound by their per-element work, not by HBM
    # (parcalc.core.timing.elementwise); () where not measured: every memory-bound kernel at e_mem x HBM
    element_rates: tuple[tuple[str, Sourced], ...] = ()
    # the SM clock element_rates were measured at and the share of each path's time that follows the clock
    # (parcalc.core.timing.elementwise.ElementClock); None: the rates hold at every clock
    element_clock: ElementClock | None = None
    # (implementation, forward share, backward share) of fused attention kernels of another software generation than
    # the one attention_forward / attention_backward were measured with (parcalc.core.timing.attention_kernels); ()
    attention_kernels: tuple[tuple[str, Sourced, Sourced], ...] = ()
    # fused attention by its tiles (parcalc.core.timing.attention_tiles): where given, the attention shares are the
    # rate of the key/value blocks alone and each tile adds its fixed cost; None: one rate at every shape
    attention_tiles: AttentionTiles | None = None
    # share of the FP8 peak the block-scaled MXFP8 GEMMs of training shapes sustain (Blackwell: an E8M0 scale per 32
    # elements of each operand, applied inside the Tensor Core's main loop), where measured apart from per-tensor FP8's
    # `matmul['fp8']`; None: MXFP8 GEMMs take the fp8 share
    matmul_mxfp8: Sourced | None = None

    def matmul_share(self, dtype: str, fp8_recipe: str = "") -> Sourced | None:
        """The training GEMM share of `dtype`; for fp8 under the MXFP8 recipe its own where the preset measures it."""
        if dtype == "fp8" and fp8_recipe == "mxfp8" and self.matmul_mxfp8 is not None:
            return self.matmul_mxfp8
        return dict(self.matmul).get(dtype)

    def isolated_share(self, dtype: str) -> Sourced | None:
        return dict(self.matmul_isolated).get(dtype)

    def attention_share(self, head_dim: int, backward: bool) -> Sourced:
        """Fused attention's share of the 16-bit peak: at the measured head dimension nearest `head_dim` (the lower of
        two as near) where measured by head dimension, else attention_forward / attention_backward."""
        if self.attention_by_head_dim and head_dim:
            _, forward, back = min(self.attention_by_head_dim, key=lambda row: (abs(row[0] - head_dim), row[0]))
            return back if backward else forward
        return self.attention_backward if backward else self.attention_forward

    def tiled(self, dtype: str) -> TiledGemm | None:
        return dict(self.gemm_tiles).get(dtype)

    def element_rate(self, path: str) -> Sourced | None:
        return dict(self.element_rates).get(path)


@frozen
class Node:
    """What one server holds: its GPUs, the link between them and its network cards (rails)."""

    gpus: int
    intra_link: str  # link preset inside the node (NVLink + NVSwitch)
    inter_link: str  # link preset of one network card
    nics: int  # network cards for GPU traffic; one per GPU on rail-optimised DGX/HGX nodes
    source: str

    def nics_for(self, gpus_per_node: int) -> int:
        """The same cards per GPU on a node of another size (at least one)."""
        return max(1, round(self.nics * gpus_per_node / self.gpus))
