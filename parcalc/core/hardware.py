"""Typed descriptions of GPUs and interconnects, as the core consumes them.

Every number is a `Sourced` value in base units with the source it was taken from; presets.py
builds these from YAML, and users can build them in Python directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sourced:
    """A number in base units (see parcalc.units) and where it comes from."""

    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class DtypeRates:
    """Throughput of one numeric format on one GPU.

    fma_per_clock_per_sm: dense fused multiply-adds per clock per SM (or AMD compute unit);
    dense_peak / sparse_peak: the datasheet's peak FLOP/s, sparse meaning 2:4 structured sparsity.
    Any of them may be absent: a rate a datasheet does not give is never extrapolated.
    """

    fma_per_clock_per_sm: Sourced | None = None
    dense_peak: Sourced | None = None
    sparse_peak: Sourced | None = None


@dataclass(frozen=True)
class Gpu:
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


@dataclass(frozen=True)
class Link:
    """A point-to-point interconnect; bandwidth is per direction, latency per message (alpha)."""

    key: str
    name: str
    bandwidth_per_direction: Sourced
    latency: Sourced
    notes: tuple[str, ...] = ()
