"""NCCL's own tuning constants: the latencies and bandwidth caps its cost model uses to pick an
algorithm and a protocol for each collective (NVIDIA/nccl src/graph/tuning.cc).

These are software constants of one NCCL release, not properties of a link, so they live here as
data with their source; docs/nccl-tuning.md explains every one and the formulas that use them.
Protocols: LL (8-byte lines carrying 4 bytes of data and a flag: lowest latency), LL128 (128-byte
lines carrying 120 bytes), Simple (plain copies with a fence per chunk: highest bandwidth).
"""

from __future__ import annotations

NCCL_VERSION = "NCCL v2.23.4 (NVIDIA/nccl src/graph/tuning.cc:56-78; docs/nccl-tuning.md)"
PROTOCOLS = ("LL", "LL128", "Simple")

# baseLat[algorithm][protocol], microseconds: a fixed cost per collective call.
BASE_LATENCY_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 0.0},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}
# hwLat[hardware][algorithm][protocol], microseconds: the cost of one step over that hardware.
HARDWARE_LATENCY_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 6.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
# llMaxBws[arch][nodes 1 | 2 | 4+], GB/s: the most bus bandwidth LL reaches.
LL_MAX_BUS_GBPS = {"sm70": (39.0, 39.0, 20.4), "sm80": (87.7, 22.5, 19.0), "sm90": (141.0, 45.0, 35.0)}
LL128_SHARE = 120.0 / 128.0  # tuning.cc: LL128 carries 120 of every 128 bytes (busBw * 0.92)
LL_SHARE_ALL_REDUCE = 0.5  # tuning.cc (v2.23.4): ring LL busBw = min(llMaxBw, 0.5 x busBw)
LL_SHARE_OTHER = 0.5
TREE_SHARE = 0.92  # tuning.cc: tree busBw * 0.92
LL_TREE_SHARE = 1.0 / 3.8  # tuning.cc: tree LL busBw / 3.8
RING_PLATEAU = {"sm70": 1.9, "sm80": 1.4, "sm90": 1.4}  # ncclTopoGetAlgoTime: ring Simple latency x this across nodes


def arch_of(architecture: str) -> str:
    """NCCL's arch row for a GPU's architecture text (Volta, Ampere, Hopper, later: Hopper's row)."""
    text = architecture.lower()
    if "volta" in text:
        return "sm70"
    if "ampere" in text or "ada" in text:
        return "sm80"
    return "sm90"
