"""Element-wise kernels by the path PyTorch's TensorIterator launches them on.

An eager PyTorch op that is not a GEMM runs as one of a few generic CUDA kernels
(pytorch aten/src/ATen/native/cuda/CUDALoops.cuh, `gpu_kernel_impl` / `gpu_kernel_impl_nocast`):

- `vector`: every operand contiguous and of the op's dtype (an fp32 -> bf16 copy too: its own vectorised
  bfloat16_copy_kernel_cuda): `vectorized_elementwise_kernel`, 16-byte loads, bound by HBM (e_mem x BW);
- `cast`: contiguous operands of mixed dtypes (a bf16 -> fp32 copy, fp32 + bf16): `unrolled_elementwise_kernel`,
  each element fetched and converted one at a time through a dtype switch (fetch_and_cast);
- `strided`: a broadcast or non-contiguous operand (x * rstd[rows, 1], x * weight[h], a transposed view, the
  expand of mean's gradient), one dtype: `elementwise_kernel<128, 2|4>` (the legacy kernel), each element's
  offsets computed by OffsetCalculator (an integer division per dimension) and loaded as scalars;
- `strided_cast`: both at once (bf16 q * fp32 cos in rotary embeddings): the legacy kernel with casting;
- `cat`: torch.cat of non-contiguous inputs (rotate_half): `CatArrayBatchedCopy`;
- `reduce`: `reduce_kernel` (mean, sum over rows or columns).

The paths other than `vector` are bound by the work per element (index arithmetic, scalar loads, conversion),
not by HBM: on one H200, fp32 x * rstd[rows, 1] moves 268 MB in 110 us (2.4 TB/s) where a contiguous fp32
product moves 403 MB in 93 us (4.3 TB/s, the copy rate). So such a kernel takes

    t = max(Q / (BW x e_mem), N / R_path, t_launch)

with N the elements it writes and R_path the elements per second of its path, measured per GPU
(`kernels.element_rates` of the preset: the median over the kernels of that path in a profiler trace).
A GPU without measured rates times every memory-bound kernel by its bytes alone (R_path unbounded).

The clock. Work per element is issued by the SMs, so a path's rate follows the SM clock in part: in the b4 step's trace
on one H200 (../shared/measurements/h200-2026-11-28/trace-llama1b-b4-s4096.json.gz), whose clock falls in its first
backward layers as the board hits its power cap, the GEMMs (whose main loops run at the SM clock) take up to 1.21x
their median launch, and launches of one shape beside them take 1 + s (that - 1) as long: s = 0.60 for the casts, 0.70
for the strided kernels, 0.22 for the reductions, 0.16 for the vectorised ones (HBM-bound: not scaled). The rates are
measured at the b4 step's clock f0 and a kernel at another step's clock f takes

    N / R_path x ((1 - s) + s f0 / f)

(ElementClock; the step's clock is parcalc.core.timing.step_clock's). The forward kernels of the trace ran at one clock
(its GEMMs within 1.6 % of their median): the paths only they run (strided_cast, cat) have no share measured, and keep
their rate at every clock.
"""

from __future__ import annotations

from parcalc.frozen import frozen

VECTOR, CAST, STRIDED, STRIDED_CAST, CAT, REDUCE = "vector", "cast", "strided", "strided_cast", "cat", "reduce"
# the paths with a measured element rate (a preset's kernels.element_rates keys); `vector` is HBM-bound
PATHS = (CAST, STRIDED, STRIDED_CAST, CAT, REDUCE)
PATH_SOURCE = ("PyTorch aten/src/ATen/native/cuda/CUDALoops.cuh (gpu_kernel_impl: vectorized_elementwise_kernel for contiguous "
               "operands of one dtype, unrolled_elementwise_kernel with fetch_and_cast for mixed dtypes, elementwise_kernel "
               "with OffsetCalculator for broadcast or strided operands), Reduce.cuh (reduce_kernel), Shape.cu "
               "(CatArrayBatchedCopy)")  # fmt: skip


def kernel_path(name: str) -> str | None:
    """The TensorIterator path of a CUDA kernel by its name as a profiler lists it (None: not one of these kernels,
    e.g. a GEMM, cuDNN's, a softmax or a copy engine's memcpy)."""
    if "vectorized_elementwise_kernel" in name:
        return VECTOR
    if "unrolled_elementwise_kernel" in name:
        return CAST
    if "elementwise_kernel<" in name:
        return STRIDED_CAST if "gpu_kernel_impl<" in name else STRIDED
    if "CatArrayBatchedCopy" in name:
        return CAT
    if "reduce_kernel" in name:
        return REDUCE
    return None


@frozen
class ElementClock:
    """The SM clock the element rates were measured at, and the share s of each path's time per element that follows
    the clock (paths not named: none of it); a preset's kernels.element_clock."""

    clock: float  # Hz: the clock of the step whose trace measured the rates
    shares: tuple[tuple[str, float], ...]
    source: str

    def factor(self, path: str, step_clock: float) -> float:
        """(1 - s) + s f0 / f: a path's time per element at `step_clock` (Hz) over its time at the rates' clock (1 where
        the step's clock is not known)."""
        share = dict(self.shares).get(path, 0.0)
        return 1.0 - share + self.clocked(path, step_clock) if share and step_clock > 0 else 1.0

    def clocked(self, path: str, step_clock: float) -> float:
        """s f0 / f: the part of factor() that scales as 1 / f (0 where the step's clock is not known)."""
        share = dict(self.shares).get(path, 0.0)
        return share * self.clock / step_clock if share and step_clock > 0 else 0.0
