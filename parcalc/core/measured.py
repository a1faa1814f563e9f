"""Measurement tables a calibrated preset carries (parcalc calibrate): nccl-tests rows behind a
link, GEMM timings behind a GPU's matmul share. Kept out of parcalc.core.hardware so that the
one-liners, which never load a calibrated preset, do not pay for defining them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredSize:
    """One nccl-tests row (out-of-place): size in bytes (nccl-tests' convention), time in
    seconds, algbw and busbw in bytes per second."""

    size: float
    time: float
    algbw: float
    busbw: float


@dataclass(frozen=True)
class MeasuredCollective:
    """The nccl-tests table a calibrated link was fitted to (parcalc.core.calibrate)."""

    collective: str  # nccl-tests' name: all_reduce, all_gather, reduce_scatter or sendrecv
    ranks: int
    nodes: int
    source: str
    rows: tuple[MeasuredSize, ...]


@dataclass(frozen=True)
class MatmulPoint:
    """One GEMM shape of a calibration sweep: (m x k) . (k x n), its best time per call in
    seconds, the FLOP/s it achieved, parcalc's tile/wave quantisation of it and the share of
    the dense peak it implies (achieved / (peak x quantisation); parcalc.core.calibrate.gemm)."""

    m: int
    k: int
    n: int
    time: float
    achieved: float
    quantisation: float
    share: float


@dataclass(frozen=True)
class MatmulSweep:
    """The measured GEMMs behind one dtype's `kernels.matmul` share, with their source."""

    source: str
    rows: tuple[MatmulPoint, ...]
