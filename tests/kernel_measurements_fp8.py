"""Published FP8 GEMM throughput and all-to-all bandwidth measurements, as plain data (issue #19).

Companion of tests/kernel_measurements.py (same conventions; its MAX_MATMUL table already holds the
ml-engineering MAMF rows for BF16 and FP8 on H100 / H200, which are not repeated here). No tests
live here and nothing from parcalc is imported. Every number was read in the source named next to
it (a git snapshot read with `git show`, or a GitHub issue thread through the issues search); a
value that no source states is None; "derived" marks arithmetic on stated values. Each row's
``source`` quotes the line or row it comes from.

Conventions
-----------
- GEMM: D[m, n] = A[m, k] @ B[k, n], 2*m*n*k FLOP; ``m``/``n`` are output dimensions and ``k`` is the
  reduced one. DeepGEMM prints 'M N K' for its NT layout 'D = C + A @ B.T' with A [M, K] and B [N, K]
  (README), i.e. the same m, n, k. torchao prints 'M, K, N' for a forward linear (input M x K,
  weight K x N); converted here to m, n, k.
- TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 B/s.
- nccl-tests alltoall: algbw = size / time where size is each rank's whole send buffer; busbw =
  algbw x (n - 1) / n (NVIDIA/nccl-tests issue #130, maintainer: 'The alltoall busBw bandwidth is
  simply computed by multiplying the AlgorithmBw by (n-1)/n, since 1/n of the data is local').
- DeepEP bandwidths are 'bottleneck bandwidth': the bytes over the slowest link (NVLink inside a node,
  RDMA across nodes) divided by time, with FP8 dispatch and BF16 combine (README).

Sources
-------
- deepseek-ai/DeepGEMM README.md: the 'Performance' tables at commit
  55ab91f72f76e8a6db0e86282c3169a88d93df1b (2025-03-25, 'Update performance') and at the initial
  commit a6d97a1c1b48a7a9d7994d0e155ee6f11d0a3f07 (2025-02-25); later READMEs dropped the tables.
  H800 SXM5, NVCC 12.8, FP8 (E4M3) with 1x128 / 128x128 block scaling, BF16 output; 'Speedup' is
  against DeepSeek's own CUTLASS 3.6 FP8 implementation, NOT against BF16.
- pytorch/ao torchao/float8/README.md @0cf1281a38bdd8c84b11549ffc49a63eb3a92d40: FP8-over-BF16
  speed-up of a float8 linear (forward + backward, with scaling/casting overhead) on H100.
- deepseek-ai/DeepEP: docs/legacy.md at b306af06afd412c88e51e71802951606e40b7358 (the V1 tables, the
  same numbers as README.md from 3b1045db43ed232691d32dde0517dfed571b0a65 'Fix the performance data.'
  2025-04-22), README.md at the initial commit ebfe47e46fa86a5b41be96c326a92f62ed6721da (2025-02-25;
  three internode numbers differ - both kept), and README.md at dd758caf451848bd150e1046af3d0a73e5fff38d
  (2026-07-14, the V2 table).
- NVIDIA/nccl issue #2169 and issue #1531 (alltoall_perf output, H100 / H800), NVIDIA/nccl-tests issues
  #130, #212, #267 (maintainers' statements of what alltoall busbw should reach).
"""

from __future__ import annotations

from typing import NamedTuple

# --------------------------------------------------------------------------------------------
# 1. FP8 GEMM throughput with shapes (DeepGEMM, H800)
# --------------------------------------------------------------------------------------------

DEEPGEMM_0325 = (
    "deepseek-ai/DeepGEMM README.md @55ab91f72f76 (2025-03-25), '## Performance': 'We test all shapes "
    "potentially used in DeepSeek-V3/R1 inference (including both prefilling and decoding, but without "
    "tensor parallelism) on H800 SXM5 with NVCC 12.8. All speedup metrics are calculated in comparison to "
    "our internally and carefully optimized implementation based on CUTLASS 3.6.'"
)
DEEPGEMM_0225 = (
    "deepseek-ai/DeepGEMM README.md @a6d97a1c1b48 (2025-02-25, initial commit), '## Performance': same "
    "text ('on H800 with NVCC 12.8')"
)


class Fp8Gemm(NamedTuple):
    """One measured FP8 GEMM (or grouped GEMM) shape and its throughput."""

    gpu: str
    kind: str  # "dense" | "grouped-contiguous" | "grouped-masked"
    groups: int  # 1 for a dense GEMM
    m: int  # per group
    n: int
    k: int
    tflops: float
    mem_gbps: float | None  # 'Memory bandwidth' column as printed
    speedup_vs_cutlass_fp8: float | None  # as printed ('Speedup' vs DeepSeek's CUTLASS 3.6 FP8 kernel)
    software: str
    source: str


def _dg(kind: str, groups: int, m: int, n: int, k: int, tflops: float, gbps: float, speedup: float,
        row: str, src: str = DEEPGEMM_0325) -> Fp8Gemm:
    return Fp8Gemm("H800 SXM5", kind, groups, m, n, k, tflops, gbps, speedup,
                   "DeepGEMM (FP8 E4M3, 1x128 activation / 128x128 weight scaling, BF16 out), NVCC 12.8",
                   f"{src}; row '{row}'")


_T = "### Normal GEMMs for dense models, columns 'M | N | K | Computation | Memory bandwidth | Speedup'"
_TC = "### Grouped GEMMs for MoE models (contiguous layout), columns '#Groups | M per group | N | K | Computation | Memory bandwidth | Speedup'"
_TM = "### Grouped GEMMs for MoE models (masked layout), same columns"

DEEPGEMM: tuple[Fp8Gemm, ...] = (
    # Dense, M = 4096 (prefill/training-sized): the rows that matter for training step times.
    _dg("dense", 1, 4096, 2112, 7168, 1009, 503, 1.1, f"{_T}: | 4096 | 2112  | 7168  | 1009 TFLOPS |     503 GB/s     |  1.1x   |"),
    _dg("dense", 1, 4096, 24576, 1536, 1125, 893, 1.1, f"{_T}: | 4096 | 24576 | 1536  | 1125 TFLOPS |     893 GB/s     |  1.1x   |"),
    _dg("dense", 1, 4096, 32768, 512, 751, 1569, 1.1, f"{_T}: | 4096 | 32768 |  512  | 751 TFLOPS  |    1569 GB/s     |  1.1x   |"),
    _dg("dense", 1, 4096, 7168, 16384, 1426, 361, 1.3, f"{_T}: | 4096 | 7168  | 16384 | 1426 TFLOPS |     361 GB/s     |  1.3x   |"),
    _dg("dense", 1, 4096, 4096, 7168, 1265, 485, 1.2, f"{_T}: | 4096 | 4096  | 7168  | 1265 TFLOPS |     485 GB/s     |  1.2x   |"),
    _dg("dense", 1, 4096, 7168, 2048, 1168, 794, 1.2, f"{_T}: | 4096 | 7168  | 2048  | 1168 TFLOPS |     794 GB/s     |  1.2x   |"),
    # Dense, small M (decode-sized): memory-bound, shows the low end of the curve.
    _dg("dense", 1, 128, 7168, 16384, 645, 2604, 1.4, f"{_T}: | 128  | 7168  | 16384 | 645 TFLOPS  |    2604 GB/s     |  1.4x   |"),
    _dg("dense", 1, 128, 4096, 7168, 533, 2221, 2.0, f"{_T}: | 128  | 4096  | 7168  | 533 TFLOPS  |    2221 GB/s     |  2.0x   |"),
    _dg("dense", 1, 64, 4096, 7168, 287, 2320, 1.4, f"{_T}: |  64  | 4096  | 7168  | 287 TFLOPS  |    2320 GB/s     |  1.4x   |"),
    # Grouped GEMMs for MoE experts (K 7168 = DeepSeek-V3 hidden; N or K 2048 = its expert FFN width).
    _dg("grouped-contiguous", 4, 8192, 4096, 7168, 1346, 434, 1.3, f"{_TC}: |    4    |    8192     | 4096 | 7168 | 1346 TFLOPS |     434 GB/s     |  1.3x   |"),
    _dg("grouped-contiguous", 4, 8192, 7168, 2048, 1214, 752, 1.3, f"{_TC}: |    4    |    8192     | 7168 | 2048 | 1214 TFLOPS |     752 GB/s     |  1.3x   |"),
    _dg("grouped-contiguous", 8, 4096, 4096, 7168, 1346, 516, 1.3, f"{_TC}: |    8    |    4096     | 4096 | 7168 | 1346 TFLOPS |     516 GB/s     |  1.3x   |"),
    _dg("grouped-contiguous", 8, 4096, 7168, 2048, 1214, 826, 1.2, f"{_TC}: |    8    |    4096     | 7168 | 2048 | 1214 TFLOPS |     826 GB/s     |  1.2x   |"),
    _dg("grouped-masked", 1, 1024, 4096, 7168, 1233, 924, 1.2, f"{_TM}: |    1    |    1024     | 4096 | 7168 | 1233 TFLOPS |     924 GB/s     |  1.2x   |"),
    _dg("grouped-masked", 4, 256, 4096, 7168, 932, 2064, 1.1, f"{_TM}: |    4    |     256     | 4096 | 7168 | 932 TFLOPS  |    2064 GB/s     |  1.1x   |"),
    _dg("grouped-masked", 4, 256, 7168, 2048, 815, 2047, 1.2, f"{_TM}: |    4    |     256     | 7168 | 2048 | 815 TFLOPS  |    2047 GB/s     |  1.2x   |"),
)
# The initial README (2025-02-25) printed lower numbers for the same M = 4096 shapes, e.g.
# '| 4096 | 7168  | 16384 | 1358 TFLOPS |     343 GB/s     |  1.2x   |', '| 4096 | 32768 |  512  | 590 TFLOPS
# |    1232 GB/s     |  1.0x   |', and contiguous '|    4    |    8192     | 4096 | 7168 | 1297 TFLOPS |'; the
# 2025-03-25 table above supersedes them (same hardware, newer kernels). Kept as DEEPGEMM_INITIAL:
DEEPGEMM_INITIAL: tuple[Fp8Gemm, ...] = (
    _dg("dense", 1, 4096, 7168, 16384, 1358, 343, 1.2, f"{_T}: | 4096 | 7168  | 16384 | 1358 TFLOPS |     343 GB/s     |  1.2x   |", DEEPGEMM_0225),
    _dg("dense", 1, 4096, 32768, 512, 590, 1232, 1.0, f"{_T}: | 4096 | 32768 |  512  | 590 TFLOPS  |    1232 GB/s     |  1.0x   |", DEEPGEMM_0225),
    _dg("grouped-contiguous", 4, 8192, 4096, 7168, 1297, 418, 1.2, f"{_TC}: |    4    |    8192     | 4096 | 7168 | 1297 TFLOPS |     418 GB/s     |  1.2x   |", DEEPGEMM_0225),
)
DEEPGEMM_PEAK_CLAIM = (
    1550.0,
    "deepseek-ai/DeepGEMM README.md @54e22612409371d6364144b69086735beb54e98b (2026-06-23) News: "
    "'2025.04.18: DeepGEMM now achieves up to **1550 TFLOPS** on H800!' (shape not stated)",
)


# --------------------------------------------------------------------------------------------
# 2. FP8 vs BF16 speed-up of a linear layer, forward + backward, H100 (torchao)
# --------------------------------------------------------------------------------------------

TORCHAO_F8 = (
    "pytorch/ao torchao/float8/README.md @0cf1281a38bd, '# Performance': 'Given the M, K, N of the forward "
    "pass through your linear, you can reference the table below for a microbenchmark based speedup estimate "
    "on NVIDIA H100' (the table itself is an image, not read)"
)


class LinearSpeedup(NamedTuple):
    """FP8-over-BF16 speed-up of one linear layer (forward + backward, scaling overhead included)."""

    gpu: str
    m: int  # tokens (forward input rows)
    n: int  # output features
    k: int  # input features
    speedup_fp8_over_bf16: float
    recipe: str | None
    source: str


TORCHAO_LINEAR: tuple[LinearSpeedup, ...] = (
    LinearSpeedup("H100", 1024, 1024, 2048, 0.80, None,
                  f"{TORCHAO_F8}; 'Example 1 (small shapes): forward input tensor size 1024x2048, linear weight "
                  "size 2048x1024; M, K, N = 1024, 2048, 1024; benchmark speedup is 0.80; recommendation: leave this "
                  "linear in bfloat16'"),
    LinearSpeedup("H100", 4096, 16384, 8192, 1.39, None,
                  f"{TORCHAO_F8}; 'Example 2 (large shapes): forward input tensor size 4096x8192, linear weight "
                  "size 8192x16384; M, K, N = 4096, 8192, 16384; benchmark speedup is 1.39'"),
)
TORCHAO_OVERHEAD_NOTE = (
    "torchao README 'Derivation': 'In a bf16 linear, assume all of the time is spent in gemms. In a float8 "
    "linear, account for max_abs and casting overhead ... bf16_gemm_time > fp8_gemm_time + fp8_overhead_time "
    "... LHS > 0 for large shapes, with the gemm speedup approaching 2x as M, K, N increase; LHS < 0 for small "
    "shapes, on NVIDIA H100 + cuBLAS; RHS > 0 for all shapes, bounded by memory bandwidth'; 'Delayed scaling "
    "is theoretically faster than dynamic scaling ... the observed performance of delayed scaling is close to "
    "that of dynamic scaling'"
)

# FP8 / BF16 best-GEMM ratio on H100 from tests/kernel_measurements.MAX_MATMUL (ml-engineering MAMF table):
# derived 1402.6 / 794.5 = 1.765 (H100 SXM); H200 SXM FP8 1453.4 (its BF16 row is 'H200 is the same' as H100).
MAMF_FP8_OVER_BF16_H100 = 1402.6 / 794.5  # derived from kernel_measurements.MAX_MATMUL, not a new measurement


# --------------------------------------------------------------------------------------------
# 3. MoE all-to-all: DeepEP dispatch / combine bandwidth (H800 + CX7 400 Gb/s)
# --------------------------------------------------------------------------------------------

DEEPEP_V1 = (
    "deepseek-ai/DeepEP docs/legacy.md @b306af06afd4 (= README.md @3b1045db43ed, 2025-04-22 'Fix the "
    "performance data.'), '### Normal kernels with NVLink and RDMA forwarding': 'We test normal kernels on "
    "H800 (~160 GB/s NVLink maximum bandwidth), with each connected to a CX7 InfiniBand 400 Gb/s RDMA network "
    "card (~50 GB/s maximum bandwidth). And we follow the DeepSeek-V3/R1 pretraining setting (4096 tokens per "
    "batch, 7168 hidden, top-4 groups, top-8 experts, FP8 dispatching and BF16 combining).', columns 'Type | "
    "Dispatch #EP | Bottleneck bandwidth | Combine #EP | Bottleneck bandwidth'"
)
DEEPEP_V1_INITIAL = "deepseek-ai/DeepEP README.md @ebfe47e46fa8 (2025-02-25, initial commit), same table"
DEEPEP_V1_LL = (
    "deepseek-ai/DeepEP docs/legacy.md @b306af06afd4, '### Low-latency kernels with pure RDMA': 'We test "
    "low-latency kernels on H800 with each connected to a CX7 InfiniBand 400 Gb/s RDMA network card (~50 GB/s "
    "maximum bandwidth). And we follow a typical DeepSeek-V3/R1 production setting (128 tokens per batch, 7168 "
    "hidden, top-8 experts, FP8 dispatching and BF16 combining).', columns 'Dispatch #EP | Latency | RDMA "
    "bandwidth | Combine #EP | Latency | RDMA bandwidth'"
)
DEEPEP_V2 = (
    "deepseek-ai/DeepEP README.md @dd758caf4518 (2026-07-14), '## Performance': 'Following V3's configuration, "
    "we tested with 8K tokens per batch, 7168 hidden dimensions, top 8 experts, FP8 dispatching, and BF16 "
    "combining'; columns 'Arch | NIC type | Topo | Dispatch Bottleneck Bandwidth | Combine Bottleneck Bandwidth "
    "| #SMs'; 'Notes: the results are logical bandwidth. For example, under the `EP 8 x 2` case, 90 GB/s "
    "actually contains local rank traffic.'"
)


class EpCommBandwidth(NamedTuple):
    """Measured MoE dispatch / combine bandwidth per GPU for one EP group size."""

    gpu: str
    library: str
    ep: int
    nodes: int  # ep / 8 GPUs per node (derived)
    link: str  # the bottleneck link the source names: "nvlink" | "rdma"
    tokens_per_batch: int  # per rank
    hidden: int
    top_k: int
    dispatch_gbps: float  # bottleneck bandwidth, GB/s
    combine_gbps: float
    dispatch_latency_us: float | None
    combine_latency_us: float | None
    sms: int | None
    source: str


def _ep(ep: int, link: str, d: float, c: float, row: str, src: str = DEEPEP_V1, tokens: int = 4096,
        lib: str = "DeepEP V1 normal kernels (NVSHMEM)", gpu: str = "H800", sms: int | None = None,
        dl: float | None = None, cl: float | None = None) -> EpCommBandwidth:
    return EpCommBandwidth(gpu, lib, ep, max(1, ep // 8), link, tokens, 7168, 8, d, c, dl, cl, sms,
                           f"{src}; row '{row}'")


DEEPEP: tuple[EpCommBandwidth, ...] = (
    _ep(8, "nvlink", 153, 158, "| Intranode |      8       |  153 GB/s (NVLink)   |      8      |  158 GB/s (NVLink)   |"),
    _ep(16, "rdma", 43, 43, "| Internode |      16      |    43 GB/s (RDMA)    |     16      |    43 GB/s (RDMA)    |"),
    _ep(32, "rdma", 58, 57, "| Internode |      32      |    58 GB/s (RDMA)    |     32      |    57 GB/s (RDMA)    |"),
    _ep(64, "rdma", 51, 50, "| Internode |      64      |    51 GB/s (RDMA)    |     64      |    50 GB/s (RDMA)    |"),
)
# The initial README printed different internode numbers for the same test; kept, not merged:
DEEPEP_INITIAL: tuple[EpCommBandwidth, ...] = (
    _ep(32, "rdma", 44, 47, "| Internode |      32      |    44 GB/s (RDMA)    |     32      |    47 GB/s (RDMA)    |", DEEPEP_V1_INITIAL),
    _ep(64, "rdma", 46, 45, "| Internode |      64      |    46 GB/s (RDMA)    |     64      |    45 GB/s (RDMA)    |", DEEPEP_V1_INITIAL),
)
DEEPEP_LOW_LATENCY: tuple[EpCommBandwidth, ...] = (
    _ep(8, "rdma", 98, 127, "|      8       |  77 us  |    98 GB/s     |      8      | 114 us  |    127 GB/s    |",
        DEEPEP_V1_LL, tokens=128, lib="DeepEP V1 low-latency kernels (pure RDMA)", dl=77, cl=114),
    _ep(16, "rdma", 63, 74, "|      16      | 118 us  |    63 GB/s     |     16      | 195 us  |    74 GB/s     |",
        DEEPEP_V1_LL, tokens=128, lib="DeepEP V1 low-latency kernels (pure RDMA)", dl=118, cl=195),
    _ep(64, "rdma", 43, 46, "|      64      | 173 us  |    43 GB/s     |     64      | 314 us  |    46 GB/s     |",
        DEEPEP_V1_LL, tokens=128, lib="DeepEP V1 low-latency kernels (pure RDMA)", dl=173, cl=314),
    _ep(256, "rdma", 39, 40, "|     256      | 194 us  |    39 GB/s     |     256     | 360 us  |    40 GB/s     |",
        DEEPEP_V1_LL, tokens=128, lib="DeepEP V1 low-latency kernels (pure RDMA)", dl=194, cl=360),
)
DEEPEP_V2_ROWS: tuple[EpCommBandwidth, ...] = (
    _ep(16, "rdma", 90, 81, "| SM90 | CX7 | EP 8 x 2 | 90 GB/s (RDMA) | 81 GB/s (RDMA) | 12 |", DEEPEP_V2, tokens=8192,
        lib="DeepEP V2 (NCCL Gin backend)", gpu="SM90 (Hopper; model not named)", sms=12),
    _ep(32, "rdma", 61, 61, "| SM90 | CX7 | EP 8 x 4 | 61 GB/s (RDMA) | 61 GB/s (RDMA) | 6 |", DEEPEP_V2, tokens=8192,
        lib="DeepEP V2 (NCCL Gin backend)", gpu="SM90 (Hopper; model not named)", sms=6),
)


# --------------------------------------------------------------------------------------------
# 4. nccl-tests alltoall_perf on H100 / H800, and maintainers' statements
# --------------------------------------------------------------------------------------------


class AllToAllRow(NamedTuple):
    """One alltoall_perf output row (out-of-place) as printed."""

    gpu: str
    ranks: int
    nodes: int
    size_bytes: int  # nccl-tests 'size': each rank's send buffer
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    nccl: str | None
    env: str
    source: str


NCCL_2169 = (
    "NVIDIA/nccl issue #2169 '[Question]: alltoall throughput drops sharply above 512 MB message size' (erfiboy), "
    "'#  Rank  0 ... on    Node1 device  0 [0000:4e:00] NVIDIA H100 80GB HBM3' ... Rank 3 on the same node; "
    "column header '#       size         count      type   redop    root     time   algbw   busbw  #wrong'"
)
NCCL_1531 = (
    "NVIDIA/nccl issue #1531 'When the number of nodes increases, the bandwidth performance of alltoall is "
    "unstable' (fj1425fj, 2024-12-05): 'Rank  0 ... on GPU-NODE09 device  0 [0x0a] NVIDIA H800' ... 'Rank 63 "
    "... on GPU-NODE16 device  7'; 'nThread 1 nGpus 1 minBytes 8388608 maxBytes 17179869184 step: 2(factor)'"
)

NCCL_ALLTOALL: tuple[AllToAllRow, ...] = (
    AllToAllRow("H100 80GB HBM3", 4, 1, 524288000, 1174.14, 446.53, 334.90, "2.30.4 (nccl-headers=23004)",
                "mpirun -np 4 -x NCCL_ALGO=Ring -x NCCL_PROTO=Simple ./build/alltoall_perf -b 500M -e 524M -g 1 -n 10 -w 1",
                f"{NCCL_2169}; row '524288000      32768000     float    none      -1  1174.14  446.53  334.90       0'"),
    AllToAllRow("H100 80GB HBM3", 4, 1, 524288000, 1097.14, 477.87, 358.40, "2.30.4 (nccl-headers=23004)",
                "same, with '-R1' (registered user buffers)",
                f"{NCCL_2169}; '### NCCL v2.30.4, -R1'; row '524288000      32768000     float    none      -1  1097.14  477.87  358.40       0'"),
    AllToAllRow("H100 80GB HBM3", 4, 1, 524288000, 3245.27, 161.55, 121.17, "2.28.3 (nccl-headers=22803)",
                "same, with '-R2 -x2' ('### Flag: -R2 -x2, NCCL v2.28.3')",
                f"{NCCL_2169}; row '524288000      32768000     float    none      -1  3245.27  161.55  121.17'"),
    AllToAllRow("H800", 64, 8, 8388608, 337.8, 24.83, 24.44, None,
                "not given in the excerpt read (8 nodes x 8 H800)",
                f"{NCCL_1531}; row '8388608         32768     float    none      -1    337.8   24.83   24.44      0'"),
)
# Only the rows above were readable in the stored threads; the issues' larger sizes were cut off.
# No 8-GPU single-node H100 alltoall_perf table with its output was found in the stored material
# (searched the issues and pages corpora and find_string 'alltoall_perf -b'); the 4-GPU rows above are
# the closest H100 NVLink measurement.

ALLTOALL_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("busbw = algbw x (n-1)/n; across N nodes with NICs, busbw -> N/(N-1) x per-GPU network bandwidth",
     "NVIDIA/nccl-tests issue #130 (sjeaugey, 2023-02-03): 'The alltoall busBw bandwidth is simply computed by "
     "multiplying the AlgorithmBw by (n-1)/n ... On 2 nodes, 50% of the traffic is inter-node so you should see "
     "BusBW = 2x network bandwidth per GPU. As the number of nodes increases, it will go down to 1x the network "
     "bandwidth per GPU (general formula is N/(N-1)x the bandwidth per GPU, N being the number of nodes).'"),
    ("alltoall does not aggregate NICs; a 400 Gb/s CX-7 gives 48-49 GB/s",
     "NVIDIA/nccl-tests issue #267 (sjeaugey, 2024-11-19): 'Alltoall cannot aggregate the bandwidth of multiple "
     "NICs, so the performance you should see is the performance of a single NIC.'; (AddyLaddy, 2025-01-23): "
     "'CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC. The BW reported for an A2A will "
     "be the average over all the P2P communications, and some of those will be over N[VLink]'"),
    ("H100 NVLink: ~370 GB/s effective busbw for non-allreduce collectives",
     "NVIDIA/nccl-tests issue #212 (sjeaugey, 2024-05-06): '450GB/s is the line rate. With the protocol overhead "
     "(~20%) NCCL can get an effective NVLink bandwidth of 370GB/s, which you can observe as \"BusBw\" when "
     "running non-allreduce operations'"),
    ("DeepSeek-V3 link speeds used by its all-to-all design",
     "DeepSeek-V3 report sec. 3.2.2: 'NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of IB (50 "
     "GB/s). ... we limit each token to be dispatched to at most 4 nodes ... each token can efficiently select an "
     "average of 3.2 experts per node without incurring additional overhead from NVLink ... only 20 SMs are "
     "sufficient to fully utilize the bandwidths of IB and NVLink.' (text conversion, index id 60572378208)"),
)
