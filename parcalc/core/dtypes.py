"""Numeric formats: storage bytes per element, and the names parcalc accepts for them."""

from __future__ import annotations

from parcalc.errors import InputError

# Storage size in bytes. TF32 is a Tensor Core math mode: its operands are stored as FP32
# (NVIDIA A100 whitepaper, "TF32 ... operates on FP32 inputs"), so it moves 4 bytes each.
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp6": 0.75,
    "fp4": 0.5,
    "int4": 0.5,
}

# NVFP4 (Transformer Engine's NVFP4BlockScaling): E2M1 data, half a byte, with one E4M3 scale byte per 16 consecutive
# elements (TE recipe docstring); one copy of a tensor so stored, an element: the data and its block scales
NVFP4_BLOCK = 16
NVFP4_COPY_BYTES = BYTES_PER_ELEMENT["fp4"] + 1.0 / NVFP4_BLOCK

DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8-e4m3": "fp8",
    "fp8-e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
}

# Peak-rate keys a GPU preset may list beyond the storage formats: FP64 on Tensor Cores is a
# separate pipe from FP64 on the CUDA cores (A100 whitepaper, Table 1).
COMPUTE_DTYPES: tuple[str, ...] = ("fp64", "fp64-tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")


def canonical_dtype(name: str, flag: str = "--dtype") -> str:
    """Lower-case canonical name ("bfloat16" -> "bf16"); an unknown name is an InputError."""
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key in BYTES_PER_ELEMENT or key in COMPUTE_DTYPES:
        return key
    known = ", ".join(COMPUTE_DTYPES)
    raise InputError(f"{flag}: unknown dtype {name!r}; known: {known}")


def bytes_per_element(dtype: str, flag: str = "--dtype") -> float:
    key = canonical_dtype(dtype, flag)
    return BYTES_PER_ELEMENT[key.removesuffix("-tensor")]
