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

- nvfp4 (NVFP4Quantizer, TE's NVFP4BlockScaling recipe, transformer_engine/common/recipe/__init__.py; Megatron-LM
  --fp4-format e2m1 --fp4-recipe nvfp4): FP4 (E2M1, half a byte) data with one E4M3 scale byte per 16 elements and one
  fp32 scale per tensor. Activations and output gradients take a random Hadamard transform (16 x 16) on their
  column-wise (weight-gradient) copy, gradients stochastic rounding; weights 16 x 16 2D blocks, no RHT. With RHT the
  amax is the quantizer's own pass (quantize_impl: nvte_hadamard_transform_amax reads the input once for the row-wise
  and the post-RHT column-wise amax; normalization.cpp keeps the norm UNFUSED 'Amax is handled within NVFP4
  quantizer'), then one fused kernel (nvte_quantize_with_hadamard_transform: row-wise quantisation, RHT of the
  transpose, column-wise quantisation) reads it again and writes 2 x (1/2 + 1/16) bytes an element; stochastic
  rounding launches one kernel more for its RNG state (common.cpp philox_unpack: nvte_extract_seed_and_offset).

Weights are quantised once a step (Megatron-LM passes `is_first_microbatch` to TE, which caches the FP8 weights for
the later micro-batches): not counted here (Llama 3 8B: 4.7 ms of a 4.3 s step on a B200).
"""

from __future__ import annotations

from parcalc.core.dtypes import BYTES_PER_ELEMENT, NVFP4_COPY_BYTES
from parcalc.named_tuple import NamedTuple

FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")
NVFP4 = "nvfp4"  # the one FP4 recipe (Megatron-LM fp4_recipe: 'nvfp4' or a custom quantizer factory)
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
FP4_BYTES = BYTES_PER_ELEMENT["fp4"]  # E2M1: two values a byte
# A linear's input saved for its weight gradient under NVFP4: TE keeps the column-wise copy only (module/linear.py, 'Discard
# row-wise data since it is not needed in backward pass': inputmat.update_usage(rowwise_usage=False, columnwise_usage=True))
NVFP4_SAVED_INPUT_BYTES = NVFP4_COPY_BYTES
NVFP4_SOURCE = (
    f"Transformer Engine's NVFP4 quantizer ({TE_SOURCE}, transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::"
    "quantize_impl; recipe NVFP4BlockScaling in transformer_engine/common/recipe/__init__.py): FP4 E2M1 data with an E4M3 "
    "scale per 16 elements, row-wise and column-wise (the latter after a 16 x 16 random Hadamard transform); the amax in "
    "its own pass (nvte_hadamard_transform_amax), the casts in one fused kernel (nvte_quantize_with_hadamard_transform); "
    "gradients rounded stochastically (one RNG-state kernel more)"
)


class CastPlan(NamedTuple):
    """The kernels quantising one tensor: bytes of the amax pass (0: none), bytes of the cast, and the kernels
    that only launch (current scaling's scale from the amax)."""

    amax_bytes: float
    cast_bytes: float
    tiny_kernels: int


def _nvidia_blackwell(vendor: str, architecture: str) -> bool:
    return vendor.lower() == "nvidia" and architecture.lower().startswith("blackwell")


def non_tn_fp8_gemms(vendor: str, architecture: str) -> bool:
    """Whether the GPU's FP8 GEMMs take every operand layout, so per-tensor FP8 needs no transposed copy: TE's
    is_non_tn_fp8_gemm_supported (compute capability 10.x / 11.x / 13+), i.e. NVIDIA Blackwell (B200, GB200, B300)."""
    return _nvidia_blackwell(vendor, architecture)


def nvfp4_tensor_cores(vendor: str, architecture: str) -> bool:
    """Whether Transformer Engine's NVFP4 recipe runs on the GPU: FP4 Tensor Cores with E4M3 block scales, NVIDIA
    Blackwell (B200, GB200, B300; TE's gemm_profiling.rst: 'MXFP8 and NVFP4 require Blackwell (SM100+/SM120+)'). AMD's
    CDNA 4 has FP4 matrix cores but no NVFP4 training path stated (its MXFP4 is another format)."""
    return _nvidia_blackwell(vendor, architecture)


def quantise_recipe(precision: str, fp8_recipe: str) -> str:
    """The recipe quantising the linears' GEMM inputs: the FP8 recipe under --precision fp8, 'nvfp4' under fp4, '' else.
    `precision`: a parcalc.core.choices.Precision (a str enum, compared by value: choices imports this module)."""
    return fp8_recipe if precision == "fp8" else NVFP4 if precision == "fp4" else ""


def cast_plan(elements: float, element_bytes: float, recipe: str, non_tn: bool, amax_fused: bool = False,
              gradient: bool = False) -> CastPlan:  # fmt: skip
    """Quantising `elements` values of `element_bytes` each (a GEMM input that both its GEMMs use, row-wise and
    column-wise) under `recipe` on a GPU whose FP8 GEMMs do (`non_tn`) or do not take non-TN layouts;
    `amax_fused`: a norm kernel produced the input and its amax (current scaling only); `gradient`: an output
    gradient (NVFP4 rounds it stochastically: one RNG-state kernel more)."""
    read = elements * element_bytes
    if recipe == NVFP4:  # the amax pass, then one fused kernel writing both FP4 copies with their scales (NVFP4_SOURCE)
        return CastPlan(read, read + elements * 2 * NVFP4_COPY_BYTES, 1 if gradient else 0)
    if recipe == "mxfp8":
        return CastPlan(0.0, read + elements * 2 * (1.0 + 1.0 / MX_BLOCK), 0)
    if recipe == "blockwise":
        return CastPlan(0.0, read + elements * 2 * (1.0 + 4.0 / BLOCKWISE_BLOCK), 0)
    written = elements * (1.0 if non_tn else 2.0)  # the FP8 data, and its transpose where GEMMs need TN
    if recipe == "current":
        return CastPlan(0.0 if amax_fused else read, read + written, 1)
    return CastPlan(0.0, read + written, 0)  # delayed: the scale from the amax history, the amax recorded as it writes


# Under sequence parallelism Transformer Engine quantises a column-parallel linear's local input shard and all-gathers
# the quantised copy (module/linear.py:347-411 `with_input_all_gather_nccl`: `input_quantizer(inputmat)`, then
# `gather_along_first_dim(inputmat, tp_group, quantizer=quantizer)`; layernorm_linear.py:283-313 the norm's output alike),
# gathers the saved quantised shard again in backward for the weight gradient (linear.py:955-998), and gathers a
# row-parallel linear's output gradient quantised (base.py:1719-1751 'FP8 with all-gather'); the reduce-scatters carry
# the activation dtype (linear.py:572 `reduce_scatter_along_first_dim(out, tp_group)`, no quantizer).
SP_GATHER_SOURCE = (
    f"Transformer Engine ({TE_SOURCE}) under sequence parallelism without userbuffers: module/linear.py:347-411 "
    "(with_input_all_gather_nccl: input_quantizer(inputmat), then gather_along_first_dim(..., quantizer=quantizer)), "
    "layernorm_linear.py:283-313, the backward re-gather of the saved quantised input linear.py:955-998, the row-parallel "
    "output gradient base.py:1719-1751 ('FP8 with all-gather'); distributed.py _all_gather_fp8 (the FP8 data only, "
    "'Assume scaling factors are identical across ranks'), _start_all_gather_fp8_blockwise, _all_gather_mxfp8, "
    "_all_gather_nvfp4 (data and block scales); the reduce-scatters in the activation dtype"
)
# Current scaling and NVFP4 make the per-tensor scale identical across the TP ranks by reducing the shard's amax over the TP
# group before the cast (linear.py:351-355 and 809-823 set_quantizer_amax_reduction_group: the input of a column-parallel,
# the output gradient of a row-parallel linear; csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl
# `amax_reduction_group->allreduce(...)->wait()`, NVFP4Quantizer::quantize_impl `allreduce_coalesced`): one all-reduce of one
# fp32 a quantised gather, latency-bound. Delayed scaling takes the scale from the amax history (reduced once a step);
# MXFP8 and blockwise scale per block, no per-tensor amax.
AMAX_REDUCTION_SOURCE = (
    f"Transformer Engine ({TE_SOURCE}): module/linear.py:351-355 and 809-823 set_quantizer_amax_reduction_group(tp_group) "
    "under sequence parallelism; csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl (lines 1015-1020: "
    "allreduce of the amax, ReduceOp::MAX) and NVFP4Quantizer::quantize_impl (allreduce_coalesced)"
)
AMAX_BYTES = 4.0  # one fp32 amax
# how a derivation names a recipe's gathered tensor
GATHERED_NAMES = {"delayed": "per-tensor FP8 (delayed scaling)", "current": "per-tensor FP8 (current scaling)", "mxfp8": "MXFP8",
                  "blockwise": "blockwise FP8", NVFP4: "NVFP4"}  # fmt: skip


def gathered_bytes(recipe: str) -> float | None:
    """Bytes an element of a tensor Transformer Engine all-gathers quantised under `recipe` (SP_GATHER_SOURCE); None: not
    quantised (the activation dtype). Per-tensor FP8 (delayed, current): the 1-byte data only, the one scale shared;
    MXFP8: 1 byte with one E8M0 scale byte per 32 (row-wise forward, column-wise for the weight gradient, same size);
    blockwise: 1 byte with one fp32 scale per 1 x 128 tile (activations and gradients take 1D blocks, Float8BlockScaling
    x_block_scaling_dim = 1, common/recipe/__init__.py:435-437; 2D blocks fall back to a high-precision gather, weights only); NVFP4: half a byte with one
    E4M3 scale byte per 16."""
    if recipe in ("delayed", "current"):
        return 1.0
    if recipe == "mxfp8":
        return 1.0 + 1.0 / MX_BLOCK
    if recipe == "blockwise":
        return 1.0 + 4.0 / BLOCKWISE_BLOCK
    if recipe == NVFP4:
        return NVFP4_COPY_BYTES
    return None


def reduces_amax_per_gather(recipe: str) -> bool:
    """Whether each quantised SP all-gather is preceded by an all-reduce of the shard's amax over the TP group
    (AMAX_REDUCTION_SOURCE): current scaling and NVFP4's per-tensor scale."""
    return recipe in ("current", NVFP4)
