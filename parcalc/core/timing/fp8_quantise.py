"""FP8 quantisation kernels: what Transformer Engine casts before each FP8 GEMM, in which layouts, and the bytes.

Under an FP8 recipe every GEMM input is quantised first, in memory-bound kernels that read the 16-bit tensor from
HBM and write its FP8 copies. A linear's input X feeds the forward GEMM (row-wise) and the weight gradient
(column-wise, saved for backward); the output gradient dY feeds the input gradient (row-wise) and the weight
gradient (column-wise). What is written, per element of the quantised tensor, by recipe (Transformer Engine,
NVIDIA/TransformerEngine @d0067d0d, transformer_engine/pytorch/csrc/quantizer.cpp and tensor/*.py):

- delayed (Float8Quantizer) and current (Float8CurrentScalingQuantizer), one fp32 scale per tensor: the FP8 data
  (1 byte), plus its transpose (1 byte more) where the GPU's FP8 GEMMs take only the TN layout. Blackwell's take
  every layout, so TE writes no transpose there (`convert_and_update_tensor`: need_transpose = columnwise_usage &&
  !is_non_tn_fp8_gemm_supported; pytorch/utils.py is_non_tn_fp8_gemm_supported: compute capability 10.x, 11.x or
  13.0 and later, i.e. Blackwell).
- current scaling reduces the tensor's amax first (Float8CurrentScalingQuantizer::quantize_impl:
  nvte_compute_amax, nvte_compute_scale_from_amax, nvte_quantize_v2: three kernels, the input read twice); where the
  input comes out of a norm TE fuses the amax into the norm kernel (extensions/normalization.cpp,
  Impl::FUSED_NORM_AMAX_FP8: 'Compute norm and amax in high precision, then quantize to FP8'), one read less.
- mxfp8 (MXFP8Quantizer, block scaling along 32 elements): row-wise and column-wise data are two quantisations along
  different axes, each 1 byte an element with one E8M0 scale byte per 32 (create_tensor: rowwise_data,
  rowwise_scale_inv, columnwise_data, columnwise_scale_inv), on every GPU: 2 + 2/32 bytes written.
- blockwise (Float8BlockQuantizer, DeepSeek-V3 sec. 3.3.2's 1 x 128 tiles): row-wise and column-wise data, each
  with one fp32 scale per 128 elements: 2 + 2 x 4/128 bytes written.

Weights are quantised once a step (Megatron-LM passes `is_first_microbatch` to TE, which caches the FP8 weights for
the later micro-batches): not counted here (Llama 3 8B: 4.7 ms of a 4.3 s step on a B200).
"""

from __future__ import annotations

from parcalc.named_tuple import NamedTuple

FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")
TE_SOURCE = "NVIDIA/TransformerEngine @d0067d0d"
FP8_RECIPE_SOURCE = (
    f"Transformer Engine's quantizers ({TE_SOURCE}, transformer_engine/pytorch/csrc/quantizer.cpp): delayed and current "
    "scaling write the FP8 data and, where FP8 GEMMs take only the TN layout (before Blackwell: pytorch/utils.py "
    "is_non_tn_fp8_gemm_supported), its transpose; current scaling reduces the amax first (nvte_compute_amax, "
    "nvte_compute_scale_from_amax, nvte_quantize_v2), fused into the norm where a norm feeds the GEMM "
    "(extensions/normalization.cpp, FUSED_NORM_AMAX_FP8); MXFP8 writes row-wise and column-wise data with an E8M0 "
    "scale per 32 elements; blockwise (DeepSeek-V3 sec. 3.3.2) row-wise and column-wise with an fp32 scale per 128"
)
MX_BLOCK = 32  # MXFP8: one E8M0 (1-byte) scale per 32 elements (OCP Microscaling spec v1.0, sec. 5.1)
BLOCKWISE_BLOCK = 128  # Float8BlockScaling: one fp32 scale per 1 x 128 tile (DeepSeek-V3 sec. 3.3.2)


class CastPlan(NamedTuple):
    """The kernels quantising one tensor: bytes of the amax pass (0: none), bytes of the cast, and the kernels
    that only launch (current scaling's scale from the amax)."""

    amax_bytes: float
    cast_bytes: float
    tiny_kernels: int


def non_tn_fp8_gemms(vendor: str, architecture: str) -> bool:
    """Whether the GPU's FP8 GEMMs take every operand layout, so per-tensor FP8 needs no transposed copy: TE's
    is_non_tn_fp8_gemm_supported (compute capability 10.x / 11.x / 13+), i.e. NVIDIA Blackwell (B200, GB200, B300)."""
    return vendor.lower() == "nvidia" and architecture.lower().startswith("blackwell")


def cast_plan(elements: float, element_bytes: float, recipe: str, non_tn: bool, amax_fused: bool = False) -> CastPlan:
    """Quantising `elements` values of `element_bytes` each (a GEMM input that both its GEMMs use, row-wise and
    column-wise) under `recipe` on a GPU whose FP8 GEMMs do (`non_tn`) or do not take non-TN layouts;
    `amax_fused`: a norm kernel produced the input and its amax (current scaling only)."""
    read = elements * element_bytes
    if recipe == "mxfp8":
        return CastPlan(0.0, read + elements * 2 * (1.0 + 1.0 / MX_BLOCK), 0)
    if recipe == "blockwise":
        return CastPlan(0.0, read + elements * 2 * (1.0 + 4.0 / BLOCKWISE_BLOCK), 0)
    written = elements * (1.0 if non_tn else 2.0)  # the FP8 data, and its transpose where GEMMs need TN
    if recipe == "current":
        return CastPlan(0.0 if amax_fused else read, read + written, 1)
    return CastPlan(0.0, read + written, 0)  # delayed: the scale from the amax history, the amax recorded as it writes
