"""FP8 quantisation on Blackwell held against Transformer Engine's own measurement of it (issue 31, part (d) of the dense
FP8 rows' question: are TE's casts what makes the Blackwell FP8 rows slower than parcalc?).

The measurement: NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @8f2e6357 (the GEMM profiling
tutorial, 'GEMM Benchmark (Model Config Mode) on NVIDIA B300 SXM6 AC'; benchmarks/gemm/benchmark_gemm.py, read at
@d0067d0d: each of the 12 GEMMs of one layer of a 5B model, hidden 4096, intermediate 16384, M = 31 x 512 = 15,872 tokens,
is timed as a `te.Linear(K, N)` forward on an M x K input under `te.autocast` (benchmark_fp8_current, benchmark_fp8), 100
calls back to back). 'Per-layer total' in autocast mode (quantisation included) against `--pre-quantize` (the GEMM kernels
alone): FP8 CurrentScaling 9.147 - 6.812 = 2.335 ms, MXFP8 8.984 - 7.161 = 1.823 ms of quantisation per layer. Each call
quantises its input (M x K) and its weight (K x N): te.Linear outside a micro-batch loop keeps no FP8 weight cache.

parcalc's casts (parcalc.core.timing.kernels.fp8_cast, parcalc.core.timing.fp8_quantise.cast_plan) for the same 24
tensors on the B300 preset (HBM at 0.819 of 8 TB/s, a 4 us launch floor): 1.991 ms current scaling, 1.540 ms MXFP8, 0.853
and 0.845 of TE's measured time: TE's casts move their bytes at about 0.70 of the 8 TB/s, not the 0.819 of CCCL's copy
(presets/gpus/b200.yaml cccl_b200), the kernels' own rate, which no other measurement gives. Not entered (one measurement
would set the rate and be its own check). What it would move: the casts are about 6 % of the B200 Llama 3 8B FP8 step as
parcalc times it (0.21 of 3.63 s), so TE's 1/0.85 of their time is about one point of that row's +18 %: the casts are not what makes the dense
Blackwell FP8 rows fast (tests/test_published_blackwell_amd.py --parts; docs/step-time.md, session 19).
"""

from __future__ import annotations

import pytest

from parcalc.core.timing.kernels import compute_spec, fp8_cast
from parcalc.presets import load_gpu

HIDDEN, INTERMEDIATE, TOKENS = 4096, 16384, 31 * 512
FPROP = ((TOKENS, HIDDEN, 3 * HIDDEN), (TOKENS, HIDDEN, HIDDEN), (TOKENS, HIDDEN, INTERMEDIATE), (TOKENS, INTERMEDIATE, HIDDEN))
DGRAD = tuple((m, n, k) for m, k, n in FPROP)  # benchmark_gemm.py's Dgrad shapes: K and N swapped
WGRAD = tuple((k, m, n) for m, k, n in FPROP)  # and Wgrad's: the tokens are the inner dimension
# (autocast - pre-quantised) per-layer total, ms (gemm_profiling.rst, B300 'Per-Layer GEMM Time' tables)
TE_QUANTISATION_MS = {"current": 9.147 - 6.812, "mxfp8": 8.984 - 7.161}


def layer_casts(recipe: str) -> float:
    """Seconds parcalc gives the casts of the 12 te.Linear calls: each call's input and weight, 16-bit, under `recipe`."""
    gpu = load_gpu("b300", ())
    fp8, bf16 = gpu.dtypes["fp8"].dense_peak, gpu.dtypes["bf16"].dense_peak
    assert fp8 is not None and bf16 is not None
    spec = compute_spec(gpu, "fp8", fp8.value, bf16.value)
    assert spec.fp8_non_tn  # Blackwell: one FP8 copy per tensor under per-tensor scaling
    return sum(fp8_cast("cast", elements, 2.0, recipe, spec).time for m, k, n in FPROP + DGRAD + WGRAD for elements in (m * k, k * n))


@pytest.mark.parametrize(("recipe", "ratio"), [("current", 0.853), ("mxfp8", 0.845)])
def test_casts_of_a_5b_layer_against_transformer_engine_on_a_b300(recipe: str, ratio: float) -> None:
    """parcalc's casts take 0.85 of TE's measured quantisation time, both recipes alike (the module's docstring): a
    change of the cast model or of the Blackwell memory share shows here against the measurement."""
    measured = TE_QUANTISATION_MS[recipe] * 1e-3
    modelled = layer_casts(recipe)
    assert modelled / measured == pytest.approx(ratio, abs=0.005), f"{recipe}: {modelled * 1e3:.3f} ms vs TE's {measured * 1e3:.3f} ms"


def test_current_scaling_costs_more_than_mxfp8_as_measured() -> None:
    """Current scaling reads each input twice (amax, then cast) and launches three kernels; MXFP8 one pass writing two
    copies: TE measured 2.335 against 1.823 ms, parcalc orders them the same way."""
    assert layer_casts("current") > layer_casts("mxfp8")
