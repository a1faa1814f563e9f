"""Published measurements of GPU kernel speed, as plain data for parcalc's roofline tests.

No tests live here and nothing from parcalc is imported. Every number below was read in the
source named next to it (a repository file at a stated commit, a GitHub issue, a paper's text, or
the labels printed on a paper's bar chart); a value that no source states is None, and nothing is
filled in from memory. Each row's ``source`` quotes the line, row or sentence it comes from.

Conventions
-----------
- FLOP counting: one multiply-add is 2 FLOP. A GEMM C[m, n] = A[m, k] @ B[k, n], repeated over a
  batch of b, is 2*b*m*n*k FLOP. ``m`` and ``n`` are the output dimensions and ``k`` is the reduced
  (contracted) dimension in every row below, whatever letters the source itself uses (ml-engineering
  prints "MxNxK" for torch.mm(MxK, KxN) -> MxN; XLA's table stores b, m, n (non-contracting) and k
  (contracting)).
- TFLOP/s = 1e12 FLOP per second; GB/s = 1e9 bytes per second; TB/s = 1e12 bytes per second.
- "Peak" means the vendor's dense (no 2:4 sparsity) datasheet number as the source prints it
  (A100 312 TFLOP/s BF16; H100/H200 SXM 989 BF16 and 1979 FP8; ...).
- Attention FLOPs follow FlashAttention-2/-3 (see ATTENTION_FLOP_CONVENTION): forward
  4 * seqlen^2 * head_dim * n_heads per sequence, halved with a causal mask; backward 2.5x the
  forward; forward+backward 3.5x the forward. Only the matmul FLOPs are counted.

Sources (all read through the stored-copy search tools, not the live web)
-------------------------------------------------------------------------
- stas00/ml-engineering (Stas Bekman): the "Maximum Achievable Matmul FLOPS" (MAMF) table in
  compute/accelerator/README.md at commit 744d01e18b79512572f64a6bbd8b5f4a725203a7, and two older
  versions of the same table in that file's git history (commits acf43e48..., dacf05a4...).
- openxla/xla's measured matmul performance table for sm_90 (H100), file
  xla/service/gpu/model/matmul_interpolator_data.h, read from the ROCm/xla mirror at commit
  b2766086ecf90e6e0a52b32f3b1837348859027f "[XLA:GPU] Update Latency-hiding scheduler cost model
  for GEMMS on H100" (2025-08-12). The same values are in tensorflow/tensorflow's
  third_party/xla copy (commit 372d578bb861cc5804e56d37d93aec931a59762c). XLA turns an entry into
  a time as 2*b*m*k*n / value (xla/service/gpu/model/matmul_interpolator.cc), so each value is a
  measured FLOP/s. The table was produced by xla/tools/matmul_perf_table_gen ("runs specified matrix
  shapes and datatypes (HLO dots) on given hardware").
- zzc0721/torch-performance-test-data: community square torch.mm benchmark (test.py: 30 timed
  torch.mm calls after warm-up, CUDA events, 2*n^3 FLOP per call), issues #79 and #108.
- te42kyfo/gpu-benches (Dominik Ernst) gpu-stream results at commit
  1c36d509ee717dca9215c27135fa1e611bb03ed1: streaming kernels over 1 GiB double arrays,
  GB/s = streams * N * 8 B / median time.
- Dao-AILab/quack media/2025-07-10-membound-sol.md (Guo, Zadouri, Dao blog post on memory-bound
  kernels), commit 8a8712b478f839a88c8fa8272fab783d30d9eb64.
- Dao 2023, FlashAttention-2 (arXiv:2307.08691): text read from a full-text Markdown conversion in
  the index; bar labels read from Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png
  and assets/flash2_h100_fwd_bwd_benchmark.png (commit 0251105a2fb19d2957484b7f023cd8c115286ced),
  the README's "Performance" figures, which are the paper's fwd+bwd figures.
- Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608): text read from a full-text conversion;
  forward bar labels read from Dao-AILab/flash-attention assets/flash3_fp16_fwd.png (same commit).
  The paper's backward-pass figure is not in the repository and no conversion carried its labels, so
  FA3 backward TFLOP/s are not recorded (only the stated 1.5-1.75x speedup over FA2).
- NVIDIA's "Matrix Multiplication Background User's Guide": the PDF is indexed but only its table of
  contents could be read; its worked tile/wave examples are taken from a transcription of a Chinese
  article that restates them (see TILE_FACTS), so they are second-hand.

Bar-chart labels that the chart's legend overlaps were not readable with certainty and are left out
(noted at each figure).
"""

from __future__ import annotations

from typing import NamedTuple

# --------------------------------------------------------------------------------------------
# Source strings
# --------------------------------------------------------------------------------------------

MLE_MAMF = (
    "stas00/ml-engineering compute/accelerator/README.md @744d01e18b79512572f64a6bbd8b5f4a725203a7, "
    "'Maximum Achievable Matmul FLOPS comparison table': 'The following measurements are for "
    "`matmul` with BF16 and FP8 inputs (no sparsity) TFLOPS ... Reporting a mean of 100 iterations "
    "after 50 warmup iterations for each shape'; columns 'Accelerator | MAMF | Theory | Efficiency | "
    "Best Shape MxNxK | torch version | Notes'; 'Efficiency is MAMF/Theory*100'"
)
MLE_MAMF_V1 = (
    "stas00/ml-engineering compute/accelerator/README.md @dacf05a44db342544d9b041ae985d7d2987b9340 "
    "(2025-01-03, 'mamf-finder v2 w/ 2 cache resets'): 'This is the older v1 version table that "
    "didn't reset the cache during the benchmark'; columns 'Accelerator | MAMF | Theory | Efficiency "
    "| Best Shape | Notes'"
)
MLE_MAMF_V2 = (
    "stas00/ml-engineering compute/accelerator/README.md @dacf05a44db342544d9b041ae985d7d2987b9340 "
    "(2025-01-03): 'The two tables show the `max()` and `median()` results'"
)
MLE_MAMF_2024 = (
    "stas00/ml-engineering compute/accelerator/README.md @acf43e482fa642fd20bd7f5f5e9ff8ea693f8d80 "
    "(2024-08-06): 'The values are for matmul with BF16 inputs (no sparsity) TFLOPS'; columns "
    "'Accelerator | MAMAF | Theory | Efficiency | Best Shape | Notes'"
)
XLA_SM90 = (
    "openxla/xla xla/service/gpu/model/matmul_interpolator_data.h (read from ROCm/xla "
    "@b2766086ecf90e6e0a52b32f3b1837348859027f, '[XLA:GPU] Update Latency-hiding scheduler cost "
    "model for GEMMS on H100'), table key 'sm_90', entry flops key 'bf16xbf16->bf16'; "
    "matmul_interpolator.cc: 'int64_t flops = 2ll * spec->b * spec->m * spec->k * spec->n; ... "
    "absl::Seconds(1.0 * flops / ...Eval(point))'"
)
ZZC_SCRIPT = (
    "zzc0721/torch-performance-test-data test.py @6e2382c (CUDA events around 30 torch.mm calls, "
    "'flops_per_iter = 2 * matrix_size**3')"
)
GPU_BENCHES = (
    "te42kyfo/gpu-benches @1c36d509ee717dca9215c27135fa1e611bb03ed1 gpu-stream: 'init A[i] = c (1 "
    "store stream) | read sum = A[i] (1 load stream) | scale A[i] = B[i] * c (1 load, 1 store) | "
    "triad A[i] = B[i] + c * C[i] (2 load, 1 store)'; main.cu prints 'streamCount * "
    "max_buffer_size * sizeof(double) / time.median() * 1e-9' GB/s, max_buffer_size = 128Mi doubles"
)
FA2_PAPER = "Dao 2023, 'FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning' (arXiv:2307.08691)"
FA3_PAPER = "Shah et al. 2024, 'FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision' (arXiv:2407.08608)"
FA_REPO = "Dao-AILab/flash-attention @0251105a2fb19d2957484b7f023cd8c115286ced"


# --------------------------------------------------------------------------------------------
# 1. Maximum achievable matmul FLOP/s per GPU and dtype, and the datasheet peak it compares to
# --------------------------------------------------------------------------------------------


class MaxMatmul(NamedTuple):
    """Best measured matmul throughput on one GPU for one input dtype."""

    gpu: str
    dtype: str  # input dtype: "bf16" or "fp8_e4m3"
    tflops: float  # measured best TFLOP/s
    peak_tflops: float  # datasheet dense peak the source compares to ("Theory")
    efficiency_pct: float | None  # as printed by the source (tflops / peak * 100)
    m: int | None  # shape at which it was reached (output m x n, reduction k)
    n: int | None
    k: int | None
    software: str
    source: str


MAX_MATMUL: tuple[MaxMatmul, ...] = (
    # ---- ml-engineering MAMF table, BF16 (current) ----
    MaxMatmul("A100 SXM", "bf16", 271.2, 312, 86.9, 1024, 10240, 5120, "torch 2.6.0+cu126",
              MLE_MAMF + "; row '| NVIDIA A100 SXM  |  271.2 |    312 |      86.9% |  1024x10240x5120 | 2.6.0+cu126 |'"),
    MaxMatmul("A100 PCIe", "bf16", 252.9, 312, 81.1, 2048, 5120, 6144, "torch 2.5.1+cu124",
              MLE_MAMF + "; row '| NVIDIA A100 PCIe |  252.9 |    312 |      81.1% |   2048x5120x6144 | 2.5.1+cu124 |'"),
    MaxMatmul("H100 SXM", "bf16", 794.5, 989, 80.3, 2048, 2048, 13312, "torch 2.7.0+cu126",
              MLE_MAMF + "; row '| NVIDIA H100 SXM  |  794.5 |    989 |      80.3% |  2048x2048x13312 | 2.7.0+cu126 | H200 is the same |'"),
    MaxMatmul("GH200 SXM", "bf16", 828.6, 989, 83.8, 1024, 15360, 4096, "torch 2.6.0+cu126",
              MLE_MAMF + "; row '| NVIDIA GH200 SXM |  828.6 |    989 |      83.8% |  1024x15360x4096 | 2.6.0+cu126 | 900W 141GiB HBM3e version |'"),
    MaxMatmul("B200 SXM", "bf16", 1745.0, 2250, 77.6, 1792, 16128, 3072, "torch 2.7.1+cu128",
              MLE_MAMF + "; row '| NVIDIA B200 SXM  | 1745.0 |   2250 |      77.6% |  1792x16128x3072 | 2.7.1+cu128 |'"),
    MaxMatmul("B300 SXM", "bf16", 1769.0, 2250, 78.6, 12288, 18432, 1024, "torch 2.9.1+cu130",
              MLE_MAMF + "; row '| NVIDIA B300 SXM  | 1769.0 |   2250 |      78.6% | 12288x18432x1024 | 2.9.1+cu130 | same as B200, newer torch/cuda |'"),
    MaxMatmul("GB200 SXM", "bf16", 1822.0, 2500, 72.9, 4096, 9728, 2048, "torch 2.10.0.dev20250916+cu130",
              MLE_MAMF + "; row '| NVIDIA GB200 SXM | 1822.0 |   2500 |      72.9% |   4096x9728x2048 |'"),
    MaxMatmul("MI300X", "bf16", 668.4, 1300, 51.4, 10240, 15360, 8192, "torch 2.5.1+6.3.42131, PYTORCH_TUNABLEOP_ENABLED=1",
              MLE_MAMF + "; row '| AMD MI300X |  668.4 |   1300 |      51.4% | 10240x15360x8192 | 2.5.1+6.3.42131 | PYTORCH_TUNABLEOP_ENABLED=1 |'"),
    MaxMatmul("MI325X", "bf16", 784.9, 1300, 60.4, 13312, 10240, 8192, "torch 2.6.0+6.2.4, PYTORCH_TUNABLEOP_ENABLED=1, 1000W",
              MLE_MAMF + "; row '| AMD MI325X |  784.9 |   1300 |      60.4% | 13312x10240x8192 |'"),
    MaxMatmul("MI355X", "bf16", 1565.0, 2300, 68.0, 12288, 8192, 8192, "torch 2.8.0+rocm7.0.2, PYTORCH_TUNABLEOP_ENABLED=0",
              MLE_MAMF + "; row '| AMD MI355X | 1565.0 |   2300 |      68.0% |  12288x8192x8192 |'"),
    # ---- ml-engineering MAMF table, FP8 float8_e4m3fn (current) ----
    MaxMatmul("H100 SXM", "fp8_e4m3", 1402.6, 1979, 70.9, 1024, 9216, 14336, "torch 2.7.0+cu126",
              MLE_MAMF + "; FP8 row '| NVIDIA H100 SXM  | 1402.6 |   1979 |      70.9% |  1024x9216x14336 | 2.7.0+cu126 |'"),
    MaxMatmul("H200 SXM", "fp8_e4m3", 1453.4, 1979, 73.4, 1280, 4096, 12032, "torch 2.7.1+cu128",
              MLE_MAMF + "; FP8 row '| NVIDIA H200 SXM  | 1453.4 |   1979 |      73.4% |  1280x4096x12032 | 2.7.1+cu128 |'"),
    MaxMatmul("GH200 SXM", "fp8_e4m3", 1535.0, 1979, 77.6, 1024, 14336, 14336, "torch 2.6.0+cu126",
              MLE_MAMF + "; FP8 row '| NVIDIA GH200 SXM | 1535.0 |   1979 |      77.6% | 1024x14336x14336 |'"),
    MaxMatmul("B200 SXM", "fp8_e4m3", 3432.5, 4500, 76.3, 15360, 4096, 3072, "torch 2.7.1+cu128",
              MLE_MAMF + "; FP8 row '| NVIDIA B200 SXM  | 3432.5 |   4500 |      76.3% |  15360x4096x3072 |'"),
    MaxMatmul("B300 SXM", "fp8_e4m3", 3353.3, 4500, 74.5, 3072, 6144, 7168, "torch 2.9.1+cu130",
              MLE_MAMF + "; FP8 row '| NVIDIA B300 SXM  | 3353.3 |   4500 |      74.5% |   3072x6144x7168 |'"),
    MaxMatmul("GB200 SXM", "fp8_e4m3", 3615.6, 5000, 72.3, 19456, 5120, 1536, "torch 2.10.0.dev20250916+cu130",
              MLE_MAMF + "; FP8 row '| NVIDIA GB200 SXM | 3615.6 |   5000 |      72.3% |  19456x5120x1536 |'"),
    # ---- zzc0721/torch-performance-test-data database.md: max over square n in
    #      {1024, 2048, 4096, 8192, 10240}; shape of the max is not printed in the table ----
    MaxMatmul("A100 SXM 80GB", "bf16", 264.53, 312, None, None, None, None, "PyTorch 2.8.0 + CUDA 12.8",
              "zzc0721/torch-performance-test-data database.md @9d82827637262c4351e3f9483f96b8cff57a601f: "
              "'| NVIDIA A100 SXM4 80GB | 19.18 | | 258.74 | 264.53 | Docker 容器云（参考）；Python 3.10 + PyTorch 2.8.0 + "
              "CUDA 12.8 |' (columns fp32|tf32|fp16|bf16; row added 2025-09-25 when test.py timed with "
              "time.time() around 30 calls); peak 312 from MLE_MAMF 'Theory' column for A100"),
    MaxMatmul("H100 SXM", "bf16", 797.51, 989, None, 8192, 8192, 8192, "PyTorch 2.7.0 + cu128",
              "zzc0721/torch-performance-test-data issue #79 (NVIDIA H100 80GB HBM3): 'BF16: ... 8192x8192: "
              "797.51 TFLOPS'; " + ZZC_SCRIPT + "; peak 989 from MLE_MAMF"),
    MaxMatmul("H200 SXM", "bf16", 790.29, 989, None, None, None, None, "not stated",
              "zzc0721/torch-performance-test-data database.md @9d828276: '| NVIDIA H200 | 51.34 | | 759.40 | "
              "790.29 | docker |'; peak 989 from ml-engineering ('H200 is the same' as H100 for BF16)"),
    MaxMatmul("B200 SXM", "bf16", 1696.03, 2250, None, None, None, None, "PyTorch 2.8.0",
              "zzc0721/torch-performance-test-data database.md @9d828276: '| NVIDIA B200 180GB | 66.24 | | "
              "1627.64 | 1696.03 | GCP a4-highgpu-8g 实例；Python 3.12 + PyTorch 2.8.0 |'"),
)

# Datasheet dense peaks quoted by the sources (TFLOP/s), keyed (gpu, dtype).
DATASHEET_PEAK_TFLOPS: dict[tuple[str, str], tuple[float, str]] = {
    ("A100", "bf16"): (312.0, FA2_PAPER + ": 'the A100 GPU has a max theoretical throughput of 312 "
                       "TFLOPs/s of FP16/BF16 matmul, but only 19.5 TFLOPs/s of non-matmul FP32'"),
    ("A100", "fp32_nonmatmul"): (19.5, FA2_PAPER + ": '... but only 19.5 TFLOPs/s of non-matmul FP32'"),
    ("H100 SXM", "bf16"): (989.0, MLE_MAMF + " 'Theory' column for NVIDIA H100 SXM (dense; "
                           "stas00/ml-engineering issue #100: 'w/o sparsity')"),
    ("H100 SXM", "fp8_e4m3"): (1979.0, MLE_MAMF + " FP8 'Theory' column for NVIDIA H100 SXM"),
    ("H200 SXM", "bf16"): (989.0, "stas00/ml-engineering insights/when-to-upgrade-gpus/README.md: "
                           "'| Peak bf16 TFLOPS (theoretical) | 989 | 2250 |' (H200 SXM | B200 SXM)"),
    ("H200 SXM", "fp8_e4m3"): (1979.0, MLE_MAMF + " FP8 'Theory' column for NVIDIA H200 SXM"),
    ("B200 SXM", "bf16"): (2250.0, MLE_MAMF + " 'Theory' column for NVIDIA B200 SXM"),
    ("B200 SXM", "fp8_e4m3"): (4500.0, MLE_MAMF + " FP8 'Theory' column for NVIDIA B200 SXM"),
    ("MI300X", "bf16"): (1300.0, MLE_MAMF + " 'Theory' column for AMD MI300X"),
    ("MI300X", "fp8_e4m3"): (2600.0, MLE_MAMF + " FP8 row '| AMD MI300X | | 2600 |' (no MAMF measured)"),
}


# --------------------------------------------------------------------------------------------
# 2. Measured GEMMs (shape, dtype, GPU, TFLOP/s)
# --------------------------------------------------------------------------------------------


class Gemm(NamedTuple):
    """One measured GEMM: C[b, m, n] = A[b, m, k] @ B[b, k, n]; 2*b*m*n*k FLOP."""

    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    batch: int
    tflops: float  # measured TFLOP/s (as printed, or value/1e12 where the source prints FLOP/s)
    time_s: float | None  # measured time per GEMM if the source prints it, else None
    library: str
    source: str


def _xla(b: int, m: int, n: int, k: int, flops_per_s: int) -> Gemm:
    """A row of XLA's sm_90 (H100) bf16 table; the raw FLOP/s value is kept in the source."""
    return Gemm(
        "H100 (sm_90)", "bf16", m, n, k, b, round(flops_per_s / 1e12, 2), None,
        "XLA (cuBLAS/Triton as XLA picks)",
        XLA_SM90 + f"; entry 'b: {b} m: {m} n: {n} k: {k} flops {{ key: \"bf16xbf16->bf16\" value: "
        f"{flops_per_s} }}'",
    )


GEMM_SHAPES: tuple[Gemm, ...] = (
    # ---- MAMF best shapes (ml-engineering), current table ----
    Gemm("A100 SXM", "bf16", 1024, 10240, 5120, 1, 271.2, None, "torch.mm", MLE_MAMF + "; 'NVIDIA A100 SXM | 271.2 | 1024x10240x5120'"),
    Gemm("A100 PCIe", "bf16", 2048, 5120, 6144, 1, 252.9, None, "torch.mm", MLE_MAMF + "; 'NVIDIA A100 PCIe | 252.9 | 2048x5120x6144'"),
    Gemm("H100 SXM", "bf16", 2048, 2048, 13312, 1, 794.5, None, "torch.mm", MLE_MAMF + "; 'NVIDIA H100 SXM | 794.5 | 2048x2048x13312'"),
    Gemm("H100 SXM", "fp8_e4m3", 1024, 9216, 14336, 1, 1402.6, None, "torch._scaled_mm (mamf-finder.py: 'torch._scaled_mm(A, B, scale, scale, out=C)')", MLE_MAMF + "; FP8 'NVIDIA H100 SXM | 1402.6 | 1024x9216x14336'"),
    # ---- MAMF, older table versions (same script family, older software) ----
    Gemm("A100 SXM", "bf16", 6912, 16384, 2048, 1, 267.9, None, "torch.mm, CUDA-12.1", MLE_MAMF_V1 + "; '| NVIDIA A100 SXM  |  267.9 |  312.0 |      85.9% |   6912x16384x2048 | CUDA-12.1 |'"),
    Gemm("A100 PCIe", "bf16", 2304, 5120, 1536, 1, 256.4, None, "torch.mm, CUDA-12.1", MLE_MAMF_V1 + "; '| NVIDIA A100 PCIe |  256.4 |  312.0 |      82.2% |    2304x5120x1536 | CUDA-12.1 |'"),
    Gemm("H100 SXM", "bf16", 6144, 17920, 2816, 1, 792.1, None, "torch.mm, CUDA-12.1", MLE_MAMF_V1 + "; '| NVIDIA H100 SXM  |  792.1 |  989.0 |      80.1% |   6144x17920x2816 | CUDA-12.1 |'"),
    Gemm("H100 SXM", "bf16", 1024, 12288, 8192, 1, 786.3, None, "torch.mm, torch 2.5.1+cu124 (max of runs)", MLE_MAMF_V2 + "; Max measured '| NVIDIA H100 SXM  | 786.3 | 989.0 | 79.5% | 1024x12288x8192 | 2.5.1+cu124 |'"),
    Gemm("H100 SXM", "bf16", 1024, 13312, 8192, 1, 779.5, None, "torch.mm, torch 2.5.1+cu124 (median of runs)", MLE_MAMF_V2 + "; Median measured '| NVIDIA H100 SXM  | 779.5 | 989.0 | 78.8% | 1024x13312x8192 | 2.5.1+cu124 |'"),
    Gemm("A100 PCIe", "bf16", 2560, 4096, 4096, 1, 242.0, None, "torch.mm", MLE_MAMF_2024 + "; '| NVIDIA A100 PCIe |   242 |    312 |            | 2560x4096x4096 |     3 |'"),
    # ---- zzc0721/torch-performance-test-data: square torch.mm, bf16 ----
    Gemm("H100 SXM", "bf16", 1024, 1024, 1024, 1, 176.62, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79 'NVIDIA H100 80GB HBM3', torch270cu128: 'BF16: 1024x1024: 176.62 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("H100 SXM", "bf16", 2048, 2048, 2048, 1, 676.59, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79: 'BF16: ... 2048x2048: 676.59 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("H100 SXM", "bf16", 4096, 4096, 4096, 1, 788.72, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79: 'BF16: ... 4096x4096: 788.72 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("H100 SXM", "bf16", 8192, 8192, 8192, 1, 797.51, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79: 'BF16: ... 8192x8192: 797.51 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("H100 SXM", "bf16", 10240, 10240, 10240, 1, 719.72, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79: 'BF16: ... 10240x10240: 719.72 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "bf16", 1024, 1024, 1024, 1, 94.89, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108 'NVIDIA A100-PCIE-40GB', torch280cu128: 'BF16: 1024x1024: 94.89 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "bf16", 2048, 2048, 2048, 1, 138.46, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108: 'BF16: ... 2048x2048: 138.46 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "bf16", 4096, 4096, 4096, 1, 234.14, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108: 'BF16: ... 4096x4096: 234.14 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "bf16", 8192, 8192, 8192, 1, 215.26, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108: 'BF16: ... 8192x8192: 215.26 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "bf16", 10240, 10240, 10240, 1, 211.72, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108: 'BF16: ... 10240x10240: 211.72 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("A100 PCIe 40GB", "fp16", 4096, 4096, 4096, 1, 241.49, None, "torch.mm", "zzc0721/torch-performance-test-data issue #108: 'FP16: ... 4096x4096: 241.49 TFLOPS'; " + ZZC_SCRIPT),
    Gemm("H100 SXM", "fp16", 4096, 4096, 4096, 1, 760.04, None, "torch.mm", "zzc0721/torch-performance-test-data issue #79: 'FP16: ... 4096x4096: 760.04 TFLOPS'; " + ZZC_SCRIPT),
    # ---- FlashAttention-3 paper, Table 2: not a plain GEMM, kept in ATTENTION ----
    # ---- XLA's measured sm_90 (H100) bf16 table ----
    _xla(1, 256, 256, 256, 6452775384615),
    _xla(1, 512, 512, 512, 40721398058252),
    _xla(1, 1024, 1024, 1024, 236298816901408),
    _xla(1, 2048, 2048, 2048, 631984593290170),
    _xla(1, 4096, 4096, 4096, 783328793548203),
    _xla(1, 4096, 4096, 256, 392162828341855),
    _xla(1, 4096, 4096, 512, 543116754678806),
    _xla(1, 4096, 4096, 1024, 677439636593059),
    _xla(1, 4096, 4096, 2048, 738736406437117),
    _xla(1, 256, 4096, 4096, 412026793553338),
    _xla(1, 512, 4096, 4096, 644116271145770),
    _xla(1, 1024, 4096, 4096, 738474431911967),
    _xla(1, 2048, 4096, 4096, 753643516181744),
    _xla(1, 4096, 256, 4096, 376223484232655),
    _xla(1, 4096, 512, 4096, 649964784503632),
    _xla(1, 4096, 1024, 4096, 738474431911967),
    _xla(1, 4096, 2048, 4096, 758434522012648),
    _xla(1, 256, 256, 4096, 84307618090452),
    _xla(1, 1024, 256, 4096, 169681072060682),
    _xla(1, 2048, 1024, 4096, 653127630170316),
    _xla(1, 4096, 1024, 1024, 488064465454545),
    _xla(2, 4096, 4096, 2048, 763011394582711),
    _xla(4, 4096, 4096, 512, 619859436746254),
    _xla(4, 2048, 2048, 2048, 725746417032781),
    _xla(2, 4096, 2048, 4096, 783185953785750),
    _xla(4, 4096, 4096, 256, 503874974234136),
)


# --------------------------------------------------------------------------------------------
# 3. Achievable HBM bandwidth vs datasheet
# --------------------------------------------------------------------------------------------


class HbmBandwidth(NamedTuple):
    """A measured memory-bound kernel's bandwidth next to the datasheet number."""

    gpu: str
    kernel: str
    measured_gbps: float  # GB/s = 1e9 B/s, bytes read + written as the source counts them
    datasheet_gbps: float | None
    note: str
    source: str
    datasheet_source: str

    def fraction_of_datasheet(self) -> float | None:
        if self.datasheet_gbps is None:
            return None
        return self.measured_gbps / self.datasheet_gbps


_MLE_HBM = (
    "stas00/ml-engineering compute/accelerator/README.md @744d01e1, memory table 'Accelerator | Memory "
    "(GB) | Type | Peak Bandwidth (TBps)'"
)
_A100_40_DATASHEET = (
    "karpathy/llm.c @f1e2ace651495b74ae22d45d1723443fd00ecd3a dev/cuda/gelu_forward.cu: '// and e.g. "
    "A100 40GB PCIe is advertised at 1,555GB/s'; " + FA2_PAPER + ": 'the A100 GPU has 40-80GB of high "
    "bandwidth memory (HBM) with bandwidth 1.5-2.0TB/s'"
)

HBM_BANDWIDTH: tuple[HbmBandwidth, ...] = (
    # gpu-benches gpu-stream: the 100%-occupancy row (blockSize 1024) unless noted as max.
    HbmBandwidth("A100 40GB (form factor not stated)", "read (1 load stream)", 1490.0, 1555.0,
                 "blockSize 1024, 100% occupancy",
                 GPU_BENCHES + "; gpu-stream/a100_40.txt row '1024 110592 100.0 % | GB/s: 1503 1490 1381 1360 1372 1368' (init read scale triad 1pt 3pt)",
                 _A100_40_DATASHEET),
    HbmBandwidth("A100 40GB (form factor not stated)", "scale (1 load + 1 store)", 1381.0, 1555.0,
                 "blockSize 1024", GPU_BENCHES + "; gpu-stream/a100_40.txt row 1024: scale 1381", _A100_40_DATASHEET),
    HbmBandwidth("A100 40GB (form factor not stated)", "triad (2 load + 1 store)", 1375.0, 1555.0,
                 "max over block sizes (blockSize 704)", GPU_BENCHES + "; gpu-stream/a100_40.txt triad column max 1375 (blockSize 704)", _A100_40_DATASHEET),
    HbmBandwidth("A100 80GB (form factor not stated)", "read (1 load stream)", 1769.0, 2000.0,
                 "blockSize 1024; datasheet is the SXM figure (PCIe 80GB: 1940)",
                 GPU_BENCHES + "; gpu-stream/a100_80.txt row '1024 110592 100.0 % | GB/s: 1880 1769 1732 1759 1696 1680' (init read scale triad 3pt 5pt)",
                 _MLE_HBM + ": '| NVIDIA A100 SXM | 80 | HBM2e | 2.00 |', '| NVIDIA A100 PCIe | 80 | HBM2e | 1.94 |'"),
    HbmBandwidth("A100 80GB (form factor not stated)", "scale (1 load + 1 store)", 1732.0, 2000.0,
                 "blockSize 1024", GPU_BENCHES + "; gpu-stream/a100_80.txt row 1024: scale 1732",
                 _MLE_HBM + ": '| NVIDIA A100 SXM | 80 | HBM2e | 2.00 |'"),
    HbmBandwidth("A100 80GB (form factor not stated)", "triad (2 load + 1 store)", 1759.0, 2000.0,
                 "blockSize 1024", GPU_BENCHES + "; gpu-stream/a100_80.txt row 1024: triad 1759",
                 _MLE_HBM + ": '| NVIDIA A100 SXM | 80 | HBM2e | 2.00 |'"),
    HbmBandwidth("H100 PCIe", "read (1 load stream)", 1942.0, 2000.0, "blockSize 1024, CUDA 11.7",
                 GPU_BENCHES + "; README 'Results from a NVIDIA-H100-PCIe / CUDA 11.7' row '1024 116736 100.0 % | GB/s: 2016 1942 1704 1832 1686 1683'",
                 _MLE_HBM + ": '| NVIDIA H100 PCIe | 80 | HBM3 | 2.00 |'"),
    HbmBandwidth("H100 PCIe", "scale (1 load + 1 store)", 1704.0, 2000.0, "blockSize 1024",
                 GPU_BENCHES + "; gpu-stream/h100_pcie.txt row 1024: scale 1704", _MLE_HBM + ": '| NVIDIA H100 PCIe | 80 | HBM3 | 2.00 |'"),
    HbmBandwidth("H100 PCIe", "triad (2 load + 1 store)", 1832.0, 2000.0, "blockSize 1024",
                 GPU_BENCHES + "; gpu-stream/h100_pcie.txt row 1024: triad 1832", _MLE_HBM + ": '| NVIDIA H100 PCIe | 80 | HBM3 | 2.00 |'"),
    HbmBandwidth("H200 SXM", "read (1 load stream)", 2756.0, 4800.0, "blockSize 1024",
                 GPU_BENCHES + "; gpu-stream/h200.txt row '1024 135168 100.0 % | GB/s: 3884 2756 3165 3534 3128 3110'",
                 _MLE_HBM + ": '| NVIDIA H200 SXM | 141 | HBM3e | 4.80 |'"),
    HbmBandwidth("H200 SXM", "scale (1 load + 1 store)", 3165.0, 4800.0, "blockSize 1024",
                 GPU_BENCHES + "; gpu-stream/h200.txt row 1024: scale 3165", _MLE_HBM + ": '| NVIDIA H200 SXM | 141 | HBM3e | 4.80 |'"),
    HbmBandwidth("H200 SXM", "triad (2 load + 1 store)", 3534.0, 4800.0, "blockSize 1024",
                 GPU_BENCHES + "; gpu-stream/h200.txt row 1024: triad 3534", _MLE_HBM + ": '| NVIDIA H200 SXM | 141 | HBM3e | 4.80 |'"),
    HbmBandwidth("H200 SXM", "init (1 store stream)", 3898.0, 4800.0, "max over block sizes (blockSize 608)",
                 GPU_BENCHES + "; gpu-stream/h200.txt init column max 3898", _MLE_HBM + ": '| NVIDIA H200 SXM | 141 | HBM3e | 4.80 |'"),
    HbmBandwidth("H100 SXM", "fused softmax (CuTe DSL, fp32, 16K x 131K)", 3010.0, 3350.0,
                 "Nsight Compute DRAM throughput",
                 "Dao-AILab/quack media/2025-07-10-membound-sol.md @8a8712b4: 'We profile our softmax kernel "
                 "implementation with batch dim=16K, reduction dim=131K in NVIDIA H100 with HBM3 (DRAM peak "
                 "throughput = 3.35 TB/s) ... We achieve DRAM throughput (device memory throughput) at 3.01 TB/s "
                 "which is 89.7% of the peak DRAM throughput.'; also 'generally maintains a model memory "
                 "throughput about 3 TB/s (~90% peak) for a reduction dimension larger than 4k'",
                 "same post: 'H100 HBM3's 3.35 TB/s throughput'; " + _MLE_HBM + ": '| NVIDIA H100 SXM | 80 | HBM3 | 3.35 |'"),
    HbmBandwidth("A100 80GB (form factor not stated)", "torch copy_ (crude wall-clock timing)", 1490.0, 2000.0,
                 "single copy timed with time.time(), tensors up to 2^26.5 floats; lower bound",
                 "chsasank/device-benchmarks README @7ccc8838: '| Nvidia A100 80GB | GPU | 19 | 189 | 237 | NA | 1490 |' "
                 "(last column 'Memory Bandwidth (GB/s)'); benchmark.py: 'bandwidth = 2 * bytes_copied / elapsed_time / 1e9'",
                 _MLE_HBM + ": '| NVIDIA A100 SXM | 80 | HBM2e | 2.00 |'"),
    HbmBandwidth("H100 PCIe", "torch copy_ (crude wall-clock timing)", 1630.0, 2000.0,
                 "as above; lower bound",
                 "chsasank/device-benchmarks README @7ccc8838: '| Nvidia H100-PCIe 80GB | GPU | 38 | 435 | 449 | NA | 1630 |'",
                 _MLE_HBM + ": '| NVIDIA H100 PCIe | 80 | HBM3 | 2.00 |'"),
)

# Datasheet HBM bandwidth of GPUs without a measurement above (TB/s), for completeness.
DATASHEET_HBM_TBPS: dict[str, tuple[float, str]] = {
    "H100 SXM": (3.35, _MLE_HBM + ": '| NVIDIA H100 SXM | 80 | HBM3 | 3.35 |'"),
    "H200 SXM": (4.80, _MLE_HBM + ": '| NVIDIA H200 SXM | 141 | HBM3e | 4.80 |'"),
    "B200 SXM": (8.00, _MLE_HBM + ": '| NVIDIA B200 SXM | 180 | HBM3e | 8.00 |'"),
    "MI300X": (5.30, _MLE_HBM + ": '| AMD MI300X | 192 | HBM3 | 5.30 |'"),
    "A100 SXM 80GB": (2.00, _MLE_HBM + ": '| NVIDIA A100 SXM | 80 | HBM2e | 2.00 |'"),
    "A100 PCIe 80GB": (1.94, _MLE_HBM + ": '| NVIDIA A100 PCIe | 80 | HBM2e | 1.94 |'"),
    "H100 PCIe": (2.00, _MLE_HBM + ": '| NVIDIA H100 PCIe | 80 | HBM3 | 2.00 |'"),
}


# --------------------------------------------------------------------------------------------
# 4. FlashAttention forward / backward TFLOP/s
# --------------------------------------------------------------------------------------------

ATTENTION_FLOP_CONVENTION = (
    FA2_PAPER + " section 4.1 (identical wording in " + FA3_PAPER + " section 4.1): 'To calculate the "
    "FLOPs of the forward pass, we use: 4 * seqlen^2 * head dimension * number of heads. With causal "
    "mask, we divide this number by 2 to account for the fact that approximately only half of the "
    "entries are calculated. To get the FLOPs of the backward pass, we multiply the forward pass FLOPs "
    "by 2.5 (since there are 2 matmuls in the forward pass and 5 matmuls in the backward pass, due to "
    "recomputation).' The benchmark script agrees: " + FA_REPO + " benchmarks/benchmark_flash_attention.py "
    "'f = 4 * batch * seqlen**2 * nheads * headdim // (2 if causal else 1); return f if mode == \"fwd\" "
    "else (2.5 * f if mode == \"bwd\" else 3.5 * f)'. Setting: 'we vary the sequence length from 512, "
    "1k, ..., 16k, and set batch size so that the total number of tokens is 16k. We set hidden dimension "
    "to 2048, and head dimension to be either 64 or 128 (i.e., 32 heads or 16 heads)' (FA3 adds 256, "
    "'8 heads')."
)


class Attention(NamedTuple):
    """Measured attention kernel throughput under the FA2/FA3 FLOP convention above."""

    gpu: str
    impl: str  # "FlashAttention-2", "FlashAttention-3", ...
    dtype: str
    pass_: str  # "fwd", "bwd", "fwd+bwd"
    causal: bool
    head_dim: int | None  # None where the source does not say
    seqlen: int | None  # None for a headline "up to" figure
    batch: int | None
    n_heads: int | None
    tflops: float
    source: str


def _fig(gpu: str, impl: str, pass_: str, causal: bool, head_dim: int,
         labels: dict[int, float], source: str, dtype: str = "fp16/bf16") -> tuple[Attention, ...]:
    """Rows from one bar chart: seqlen -> printed bar label. batch = 16k/seqlen, heads = 2048/hdim."""
    return tuple(
        Attention(gpu, impl, dtype, pass_, causal, head_dim, s, 16384 // s, 2048 // head_dim, float(v), source)
        for s, v in labels.items()
    )


_FA2_A100_FIG = (
    FA_REPO + " assets/flash2_a100_fwd_bwd_benchmark.png (README 'FlashAttention speedup on A100 80GB SXM5 "
    "with FP16/BF16'; plot title 'Attention forward + backward speed (A100 80GB SXM4)'), purple "
    "'FlashAttention-2' bar labels, panel {panel}"
)
_FA2_H100_FIG = (
    FA_REPO + " assets/flash2_h100_fwd_bwd_benchmark.png (README 'FlashAttention speedup on H100 SXM5 with "
    "FP16/BF16'; plot title 'Attention forward + backward speed (H100 80GB SXM5)'), purple "
    "'FlashAttention-2' bar labels, panel {panel}; " + FA2_PAPER + ": 'Just running the same "
    "implementation on H100 GPUs ... we obtain up to 335 TFLOPs/s (Fig. 7)'"
)
_FA3_FIG = (
    FA_REPO + " assets/flash3_fp16_fwd.png (README 'FlashAttention-3 speedup on H100 80GB SXM5 with FP16'; "
    "= " + FA3_PAPER + " Fig. 5, 'Attention forward speed ... (H100 80GB SXM5)'), {series} bar labels, "
    "panel {panel}"
)

ATTENTION: tuple[Attention, ...] = (
    # ---- headline figures stated in the papers' text ----
    Attention("A100 SXM 80GB", "FlashAttention-2", "fp16/bf16", "fwd", False, None, None, None, None, 230.0,
              FA2_PAPER + ": 'FlashAttention-2 reaches up to 230 TFLOPs/s, 73% of the theoretical maximum "
              "TFLOPs/s on A100 GPUs'; '... reaching up to 73% of the theoretical max throughput in the "
              "forward pass, and up to 63% of the theoretical max throughput in the backward pass' (73% of 312 is the forward figure)"),
    Attention("H100 SXM", "FlashAttention-2", "fp16/bf16", "fwd+bwd", False, 128, 16384, 1, 16, 338.0,
              FA2_PAPER + ": 'we obtain up to 335 TFLOPs/s (Fig. 7)'; the repo figure's highest label is 338 "
              "(hd128, no causal mask, 16k) - " + _FA2_H100_FIG.format(panel="(b)")),
    Attention("H100 SXM", "FlashAttention-3", "fp16", "fwd", False, None, None, None, None, 740.0,
              FA3_PAPER + ": 'FlashAttention-3 reaches up to 740 TFLOPs/s, 75% of the theoretical maximum "
              "TFLOPs/s on H100 GPUs'; 'FlashAttention-2 achieving only 35% utilization on the H100 GPU'; "
              "'1.5-2.0x faster than FlashAttention-2 in the forward pass and 1.5-1.75x faster in the "
              "backward pass' (arXiv v1 wording; shape not specified)"),
    Attention("H100 SXM", "FlashAttention-3", "fp16", "fwd", False, 128, 8448, 4, 16, 661.0,
              FA3_PAPER + " Table 2 'Pipelining ablation measurements' for '{batch,seqlen,nheads,hdim} = "
              "{4,8448,16,128}': '| FlashAttention-3 | 3.538 ms | 661 |' (no GEMM-softmax pipelining: "
              "4.021 ms, 582; no warp specialization: 4.105 ms, 570)"),
    # ---- FA2 on A100, forward+backward (README/paper figure); 1k label of panel (a) and the 512/1k
    #      labels of panel (b) are covered by the legend and left out ----
    *_fig("A100 SXM 80GB", "FlashAttention-2", "fwd+bwd", False, 64,
          {512: 132, 2048: 162, 4096: 171, 8192: 175, 16384: 176},
          _FA2_A100_FIG.format(panel="(a) Without causal mask, head dimension 64")),
    *_fig("A100 SXM 80GB", "FlashAttention-2", "fwd+bwd", False, 128,
          {2048: 187, 4096: 196, 8192: 201, 16384: 203},
          _FA2_A100_FIG.format(panel="(b) Without causal mask, head dimension 128")),
    *_fig("A100 SXM 80GB", "FlashAttention-2", "fwd+bwd", True, 64,
          {512: 88, 1024: 119, 2048: 140, 4096: 156, 8192: 165, 16384: 171},
          _FA2_A100_FIG.format(panel="(c) With causal mask, head dimension 64")),
    *_fig("A100 SXM 80GB", "FlashAttention-2", "fwd+bwd", True, 128,
          {512: 99, 1024: 133, 2048: 155, 4096: 173, 8192: 182, 16384: 189},
          _FA2_A100_FIG.format(panel="(d) With causal mask, head dimension 128")),
    # ---- FA2 on H100, forward+backward; 1k label of panel (b) partly covered, left out ----
    *_fig("H100 SXM", "FlashAttention-2", "fwd+bwd", False, 64,
          {512: 215, 1024: 254, 2048: 274, 4096: 288, 8192: 294, 16384: 296},
          _FA2_H100_FIG.format(panel="(a) Without causal mask, head dimension 64")),
    *_fig("H100 SXM", "FlashAttention-2", "fwd+bwd", False, 128,
          {512: 248, 2048: 320, 4096: 326, 8192: 335, 16384: 338},
          _FA2_H100_FIG.format(panel="(b) Without causal mask, head dimension 128")),
    *_fig("H100 SXM", "FlashAttention-2", "fwd+bwd", True, 64,
          {512: 141, 1024: 192, 2048: 232, 4096: 257, 8192: 273, 16384: 284},
          _FA2_H100_FIG.format(panel="(c) With causal mask, head dimension 64")),
    *_fig("H100 SXM", "FlashAttention-2", "fwd+bwd", True, 128,
          {512: 163, 1024: 221, 2048: 265, 4096: 294, 8192: 308, 16384: 328},
          _FA2_H100_FIG.format(panel="(d) With causal mask, head dimension 128")),
    # ---- FA3 paper Fig. 5: H100 forward, FP16; FA3 and FA2 series. The FA3 1k label of panel (c)
    #      and of panel (e) are covered by the legend and left out ----
    *_fig("H100 SXM", "FlashAttention-3", "fwd", False, 64,
          {512: 333, 1024: 392, 2048: 460, 4096: 476, 8192: 496, 16384: 497},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(a) Forward, without causal mask, head dim 64"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-3", "fwd", True, 64,
          {512: 197, 1024: 265, 2048: 371, 4096: 420, 8192: 460, 16384: 473},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(b) Forward, with causal mask, head dim 64"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-3", "fwd", False, 128,
          {512: 467, 2048: 625, 4096: 638, 8192: 646, 16384: 648},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(c) Forward, without causal mask, head dim 128"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-3", "fwd", True, 128,
          {512: 292, 1024: 423, 2048: 521, 4096: 579, 8192: 602, 16384: 616},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(d) Forward, with causal mask, head dim 128"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-3", "fwd", False, 256,
          {512: 482, 2048: 707, 4096: 736, 8192: 746, 16384: 756},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(e) Forward, without causal mask, head dim 256"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-3", "fwd", True, 256,
          {512: 286, 1024: 427, 2048: 537, 4096: 612, 8192: 628, 16384: 642},
          _FA3_FIG.format(series="'FlashAttention-3'", panel="(f) Forward, with causal mask, head dim 256"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", False, 64,
          {512: 282, 1024: 306, 2048: 318, 4096: 321, 8192: 322, 16384: 324},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(a) Forward, without causal mask, head dim 64"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", True, 64,
          {512: 180, 1024: 229, 2048: 262, 4096: 284, 8192: 295, 16384: 299},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(b) Forward, with causal mask, head dim 64"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", False, 128,
          {512: 309, 1024: 350, 2048: 362, 4096: 368, 8192: 370, 16384: 370},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(c) Forward, without causal mask, head dim 128"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", True, 128,
          {512: 191, 1024: 260, 2048: 298, 4096: 319, 8192: 333, 16384: 335},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(d) Forward, with causal mask, head dim 128"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", False, 256,
          {512: 275, 1024: 313, 2048: 321, 4096: 323, 8192: 324, 16384: 326},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(e) Forward, without causal mask, head dim 256"), "fp16"),
    *_fig("H100 SXM", "FlashAttention-2", "fwd", True, 256,
          {512: 208, 1024: 251, 2048: 278, 4096: 293, 8192: 297, 16384: 298},
          _FA3_FIG.format(series="'FlashAttention-2'", panel="(f) Forward, with causal mask, head dim 256"), "fp16"),
    # ---- an independent FA3 forward measurement (GPU not named in the commit message) ----
    *_fig("unstated Hopper GPU", "FlashAttention-3", "fwd", False, 128,
          {512: 430.32, 1024: 517.099, 2048: 565.544, 4096: 590.233, 8192: 614.234, 16384: 620.73},
          "pytorch/benchmark commit ff65cb675209d2308f7d27c6920af8a32de9aa90 (PR #2391, 'Fix dimension order "
          "for FlashAttention-3'): 'the FA3 paper sizes inputs such that B*S=16k and H*Dhead=2048 ... "
          "(Batch, Heads, SeqLen, Dhead) ... flash_v3-tflops: (32, 16, 512, 128) 430.32; (16, 16, 1024, 128) "
          "517.099; (8, 16, 2048, 128) 565.544; (4, 16, 4096, 128) 590.233; (2, 16, 8192, 128) 614.234; "
          "(1, 16, 16384, 128) 620.73' (tritonbench, non-causal assumed: no causal flag in the command)"),
)

# Backward-only fractions stated for FA2 on A100 (no per-shape backward numbers were readable).
FA2_A100_FWD_MAX_FRACTION_OF_PEAK = (0.73, FA2_PAPER + ": 'up to 73% of the theoretical max throughput in the forward pass'")
FA2_A100_BWD_MAX_FRACTION_OF_PEAK = (0.63, FA2_PAPER + ": 'up to 63% of the theoretical max throughput in the backward pass'")
FA3_H100_BWD_SPEEDUP_OVER_FA2 = ((1.5, 1.75), FA3_PAPER + ": '1.5-1.75x faster in the backward pass'")


# --------------------------------------------------------------------------------------------
# 5. Facts for modelling tile and wave quantisation
# --------------------------------------------------------------------------------------------


class TileFact(NamedTuple):
    topic: str
    gpu: str
    value: object
    fact: str
    source: str


_MLE_PERF = "stas00/ml-engineering training/performance/README.md @744d01e1"
_ZARTBOT = (
    "zartbot, 'Tensor-103.3 Hopper Persistent Kernel' (2025-10-27, mp.weixin.qq.com; Markdown transcription "
    "in the public GitHub index, find_string id 55325550225), section 1 restating NVIDIA's 'Matrix "
    "Multiplication Background User's Guide' (second-hand)"
)

TILE_FACTS: tuple[TileFact, ...] = (
    TileFact("sm_count", "A100", 108, "A100 has 108 SMs",
             FA2_PAPER + ": 'there are 108 of these SMs on an A100 GPU'; " + _MLE_PERF + ": 'only as many "
             "thread blocks as there are SMs may be scheduled at a time - 108 on A100, and 132 on H100/H200'"),
    TileFact("sm_count", "H100 SXM / H200", 132, "H100 SXM and H200 have 132 SMs",
             _MLE_PERF + ": '108 on A100, and 132 on H100/H200 (measured with "
             "`torch.cuda.get_device_properties(0).multi_processor_count`...)'"),
    TileFact("sm_count", "H100 PCIe", 114, "H100 PCIe enables 114 SMs",
             "chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-bandwidth: 'We're testing "
             "H100's PCIe version on Lambda Cloud, which enables 114 of those SMs, 50 MB of L2 cache' and 'The "
             "SXM H100 ... has 132 SMs enabled'"),
    TileFact("sm_count", "B200 / B300", (148, 152), "B300 ships with 148 and 152 SMs; a B200 SKU reads 148",
             _MLE_PERF + ": 'B300 ships in at least two SKUs, with **148** and **152** SMs' ... 'and a B200 "
             "SKU also reads 148'"),
    TileFact("wave_formula", "any", "W = ceil(C/S), C = ceil(m/Tm)*ceil(n/Tn)",
             "time is proportional to the number of waves of output tiles",
             _MLE_PERF + ": 'A GEMM decomposes into `C` thread blocks, `C = ceil(m/Tm) * ceil(n/Tn)` for a "
             "`Tm x Tn` tile. On `S` SMs that takes `W = ceil(C/S)` waves, and since a wave costs the same "
             "whether it is full or not, time is proportional to `W`.'"),
    TileFact("wave_example", "B300", {"m": 8192, "n": 14336, "tile": (128, 256), "blocks": 3584},
             "Llama-3.1-8B MLP up-projection at 8K tokens over a 128x256 tile is 3584 blocks (25 waves at 148 "
             "SMs, 24 at 152)",
             _MLE_PERF + ": 'an `8192 x 14336` output, which over a `128 x 256` tile is `64 * 56` = 3584 "
             "blocks'; table row '| 3584 | 25 | 24 | 1.042x |'"),
    TileFact("tensor_core_alignment", "A100", 64,
             "fp16/bf16 GEMM dims should be multiples of 64 elements (128 bytes) on A100; 8 elements on V100",
             _MLE_PERF + ": 'Tensor Cores can be fully utilized when GEMM dimensions `m`, `k`, and `n` are "
             "multiples of 16 bytes and 128 bytes for V100 and A100 GPUs, respectively. Since a FP16 element "
             "is 2 bytes, this corresponds to dimension sizes that are multiples of 8 and 64 elements'"),
    TileFact("wave_example_nvidia_guide", "A100",
             {"m": 2304, "k": 4096, "tile": (256, 128), "sms": 108,
              "full_wave_n": (1536, 3072, 4608, 6144), "tiles": (108, 216, 324, 432)},
             "M=2304 gives 2304/256 = 9 tile rows; N = 1536/3072/4608/6144 gives 108/216/324/432 tiles = 1/2/3/4 "
             "full waves on 108 SMs (throughput peaks); N slightly above (e.g. 1544) adds a tail wave",
             _ZARTBOT + ": '考虑一个例子, `K=4096`, 但使用一个较小的 `M=2304`并改变 N 维度, 一块NVIDIA A100 GPU拥有108个SM. "
             "在使用256x128的Tile的特定情况下 ... N=1536: N维度Tile数 = 1536/128 = 12. 总Tile数 = 9 * 12 = 108 (1个满波)'"),
    TileFact("tile_example_nvidia_guide", "A100 (guide's example GPU)",
             {"m": 27648, "k": 4096, "tile": (256, 128), "n_range": (136, 256, 8)},
             "with a fixed 256x128 tile, N from 136 to 256 always uses 2 tile columns: runtime is constant and "
             "throughput rises with N; the drop is between N=128 and N=136 (8/128 = 6.25% useful)",
             _ZARTBOT + ": '考虑一个GEMM例子: `M = 27648`, `K = 4096`, 并且库函数固定使用256x128的Tile. 当以 8 为步长将 N "
             "从 136 增加到 256 时 ... N 维度总是被划分为2个Tile ... 吞吐量在`N = 128` ... 和`N = 136`(... 只有8/128 = "
             "6.25%是有效数据)之间出现了显著的下降'"),
    TileFact("tile_example", "A100", {"m": 1792, "n": 1792, "tile": (256, 128), "tiles": 98},
             "1792x1792 output over 256x128 tiles = 7 x 14 = 98 tiles (< 108 SMs, one partial wave)",
             "notes.haroldbenoit.com/ml/engineering/gpus/gpu-memory-tiling: 'A100 has 108 SMs and a 1792x1792 "
             "matrix tile (256x128) grid has dimensions 1792/256=7 and 1792/128=14. That gives us 14*7=98 tiles.'"),
    TileFact("attention_tile", "A100 (FlashAttention-2)", ((64, 128), (64, 128)),
             "FA2 uses blocks of {64,128} x {64,128} (query rows x key columns)",
             FA2_PAPER + " section 3.3: 'Typically we choose blocks of size {64,128} x {64,128}, depending on the "
             "head dimension d and the device shared memory size.'"),
    TileFact("attention_tile", "H100 (FlashAttention-3, fp16/bf16 forward)",
             {64: (192, 192), "64_causal": (192, 128), 128: (128, 176), "128_causal": (128, 128),
              256: (128, 80)},
             "FA3 sm90 forward tile (kBlockM, kBlockN) by head dim; causal/local uses kBlockN 128 for hd<=128",
             FA_REPO + " hopper/tile_size.h tile_size_fwd_sm90: hd<=64 'return {192, use_blockN_128 ? 128 : 192, "
             "...}'; hd<=128 'return {128, use_blockN_128 ? 128 : 176, true, true};' with 'use_blockN_128 = "
             "is_causal || is_local || paged_kv_non_TMA'; hd>192 'return {128, is_local ? 64 : 80, true, true};'"),
    TileFact("l2_cache", "A100 / H100", {"A100": "40MiB", "H100": "50MiB"},
             "L2 capacity per accelerator",
             "stas00/ml-engineering compute/accelerator/README.md @744d01e1 cache table: '| 50MiB | NVIDIA Hopper "
             "(H100 example) | L2 | per accelerator |', '| 40MiB | NVIDIA Ampere (A100 example) | L2 | per "
             "accelerator |'"),
)
