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
# sm100 (Blackwell): v2.30.7 tuning.cc ncclTunerConstantsDefaults, llMaxBws row 3 = 2 x Hopper's (v2.23.4 predates it)
LL_MAX_BUS_GBPS = {"sm70": (39.0, 39.0, 20.4), "sm80": (87.7, 22.5, 19.0), "sm90": (141.0, 45.0, 35.0),
                   "sm100": (282.0, 90.0, 70.0)}
LL128_SHARE = 120.0 / 128.0  # tuning.cc: LL128 carries 120 of every 128 bytes (busBw * 0.92)
LL_SHARE_ALL_REDUCE = 0.5  # tuning.cc (v2.23.4): ring LL busBw = min(llMaxBw, 0.5 x busBw)
LL_SHARE_OTHER = 0.5
TREE_SHARE = 0.92  # tuning.cc: tree busBw * 0.92
LL_TREE_SHARE = 1.0 / 3.8  # tuning.cc: tree LL busBw / 3.8
RING_PLATEAU = {"sm70": 1.9, "sm80": 1.4, "sm90": 1.4, "sm100": 1.4}  # ncclTopoGetAlgoTime: ring Simple latency x this across nodes


# NVLink SHARP (NVLS): the NVSwitch reduces and multicasts (H100/H200/B200, compute capability >= 9.0).
# tuning.cc:271-275 (v2.23.4): NVLS latency = hwLat[NVLINK][NVLS][SIMPLE] alone (baseLat 0), NVLS_TREE
# (NVLS inside each node, a tree between nodes) = hwLat[NVLINK][NVLS_TREE][SIMPLE] + 2 log2(nodes) x
# hwLat[NET][NVLS_TREE][SIMPLE]; only the Simple protocol (tuning.cc:176).
NVLS_LATENCY_US = 25.0  # hwLat[NCCL_HW_NVLINK][NCCL_ALGO_NVLS / NVLS_TREE][NCCL_PROTO_SIMPLE]
NVLS_TREE_NET_LATENCY_US = 14.0  # hwLat[NCCL_HW_NET][NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE]
NVLS_BUS_TO_ALG = 5.0 / 6.0  # tuning.cc:224: NVLS and NVLS_TREE algBw = busBw x 5/6
NVLS_MIN_LOCAL_GPUS = 3  # src/transport/nvls.cc:154: no NVLS with 2 GPUs or fewer in the node's communicator
# The NVLS graph search (src/graph/search.cc:980-983, ncclTopoSearchTryNvls 386-416): one channel per
# local GPU, each channel loading every GPU's NVLink with the speed s and its head GPU with 2 s, so
# (gpus + 1) x s <= the GPU's NVLink bandwidth; s is the fastest entry of the speed list that fits
# (search.cc:930-938, sm90SpeedArrayIntra; v2.30.7 sm100SpeedArrayIntra for Blackwell).
NVLS_SPEEDS_GBPS = {
    "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
# Inter-node rings pay a network post overhead per step (tuning.cc:117-125, 252-256): intraLat =
# max(intraLat, netOverhead), netOverhead 1.0 us on Intel and non-x86 CPUs (2.0 on AMD), x3 for Simple.
NET_OVERHEAD_US = 1.0
# treeCorrectionFactor[protocol][log2(bytes / 64)] (tuning.cc:435-439, applied at 458): NCCL's own
# measured efficiency of the tree all-reduce by message size, 64 B (index 0) to 256-511 MiB (index 22).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


def tree_correction(protocol: str, size: float) -> float:
    """treeCorrectionFactor for a tree all-reduce of `size` bytes (1 outside the table, as tuning.cc)."""
    log_size = int(size) >> 6
    if log_size <= 0:
        return 1.0
    index = log_size.bit_length() - 1  # log2i: floor(log2)
    return TREE_CORRECTION[protocol][index] if index < 23 else 1.0


def nvls_speed(arch: str, gpus: int, gpu_nvlink_gbps: float) -> float:
    """GB/s per NVLS channel: the fastest search speed s with (gpus + 1) s within the GPU's NVLink
    bandwidth (NCCL's per-link bandwidth x links); 0 where NCCL has no NVLS (before Hopper)."""
    for speed in NVLS_SPEEDS_GBPS.get(arch, ()):
        if (gpus + 1) * speed <= gpu_nvlink_gbps:
            return speed
    return 0.0


# The per-call cost NCCL's estimate leaves out (docs/nccl-tuning.md sec. 14). nccl-tests times back-to-back
# calls (NVIDIA/nccl-tests a0b82b2 src/common.cu:728-772, wall time / iterations, no sync between them) and
# every call is one kernel launch (v2.23.4 src/enqueue.cc:1622-1694 ncclLaunchKernel, cuLaunchKernelEx), started behind the previous
# one, whose first thread block then loads its work before the first step; NCCL's time is only
# latency x latCount + bytes / bandwidth (tuning.cc:441-467). No NCCL constant gives that cost, so it is
# CALIBRATED, on one table only: the median of (measured - NCCL's model) over the 8 B - 4 KiB rows of
# tests/fixtures/nccl/a100x8_nvlink_all_reduce_mpi.txt (8 x A100 in one node, one process per GPU, no
# network: 2.9-10.2 us, median 8.76). Every other table tests it (tests/test_network_nccl_tests.py).
# CUDA graphs remove most of it (NVIDIA/nccl issue #1984: 1 KiB ring all-reduce on 4 H800, 3.5 us
# per call launched, 0.5 us graph-captured); parcalc assumes calls are launched, not graph-captured.
CALL_US = 8.8

# NVLS pipelines (src/enqueue.cc calcCollChunking:2042-2060, v2.23.4): each of the NVLS channels
# (NCCL_NVLS_NCHANNELS, default 16: src/transport/nvls.cc:145) runs one pipe per head GPU and moves its
# share in chunks of NCCL_NVLS_CHUNKSIZE (128 KiB, nvls.cc:146), made smaller for smaller messages.
NVLS_CHANNELS = 16
NVLS_CHUNK = 128 * 1024


def nvls_chunk(size: float, pipes: int, nodes: int) -> int:
    """enqueue.cc calcCollChunking's chunk (bytes) for an NVLS (one node) or NVLS_TREE all-reduce of
    `size` bytes over `pipes` = channels x heads concurrent pipes (maxChunkSize -2: 64 KiB from 4 nodes)."""
    chunk = NVLS_CHUNK
    if nodes == 1:
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if size < factor * pipes * chunk and chunk > floor:
                chunk = floor
        return chunk
    chunk = min(chunk, 65536) if nodes >= 4 else chunk
    for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if size < factor * pipes * chunk and chunk > floor:
            chunk = floor
    return chunk


def arch_of(architecture: str) -> str:
    """NCCL's arch row for a GPU's architecture text (Volta, Ampere, Hopper, Blackwell; later: Hopper's row)."""
    text = architecture.lower()
    if "volta" in text:
        return "sm70"
    if "ampere" in text or "ada" in text:
        return "sm80"
    if "blackwell" in text:
        return "sm100"
    return "sm90"
