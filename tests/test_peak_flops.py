"""Peak FLOP/s: derived from clock x SMs x FMA/clock/SM, and compared with datasheets."""

from __future__ import annotations

import pytest

from parcalc import peak_flops
from parcalc.core.peak_flops import gpu_peak_flops
from parcalc.errors import InputError
from parcalc.presets import load_gpu


@pytest.mark.parametrize(
    ("clock", "sms", "fma", "expected"),
    [
        # Seed 004 question 1.1 by hand: 2 FLOP/FMA x 1.41e9 /s x 108 SMs x 512 FMA/clock/SM
        # = 2 x 1.41e9 x 55,296 = 155,934,720,000,000 FLOP/s = 155.93472 TFLOP/s.
        pytest.param(1.41e9, 108, 512, 155.93472e12, id="seed004-q1.1-a100-tf32"),
        # A100 FP16 Tensor Core: 1024 dense FMA/clock/SM (A100 whitepaper) -> 2 x 1.41e9 x 108 x 1024
        # = 311,869,440,000,000 FLOP/s, which the datasheet rounds to 312 TFLOP/s.
        pytest.param(1.41e9, 108, 1024, 311.86944e12, id="a100-fp16"),
        # V100 SXM2: 80 SMs x 8 Tensor Cores x 64 FMA = 512 FMA/clock/SM at 1530 MHz:
        # 2 x 1.53e9 x 80 x 512 = 125,337,600,000,000 FLOP/s, the datasheet's "125 TFLOPS".
        pytest.param(1.53e9, 80, 512, 125.3376e12, id="v100-fp16"),
    ],
)
def test_peak_from_primitives(clock: float, sms: int, fma: int, expected: float) -> None:
    assert peak_flops(clock, sms, fma).value == pytest.approx(expected, rel=1e-12)


def test_sparse_doubles_the_rate() -> None:
    dense = peak_flops(1.41e9, 108, 512).value
    assert peak_flops(1.41e9, 108, 512, sparse=True).value == 2 * dense


def test_derivation_reads_like_the_formula() -> None:
    derivation = peak_flops(1.41e9, 108, 512, dtype="tf32")
    assert derivation.formula_text() == "2 × f × N_SM × FMA"
    assert derivation.substituted_text() == "2 × 1.41 GHz × 108 × 512"
    assert derivation.formula_tex() == r"2 \times f \times N_{\mathrm{SM}} \times \mathrm{FMA}"
    assert derivation.unit == "FLOP/s"


@pytest.mark.parametrize(("value", "name"), [(0, "clock"), (-1, "clock")])
def test_non_positive_primitives_are_rejected(value: float, name: str) -> None:
    with pytest.raises(InputError, match=name):
        peak_flops(value, 108, 512)


def test_preset_peak_is_shown_beside_the_datasheet() -> None:
    a100 = load_gpu("a100-sxm4-80gb")
    peak = gpu_peak_flops(a100, "tf32")
    assert peak.derived is not None and peak.datasheet is not None and peak.difference is not None
    assert peak.derived.value == pytest.approx(155.93472e12, rel=1e-12)
    # A100 datasheet: TF32 Tensor Core 156 TFLOPS (dense).
    assert peak.datasheet.value == 156e12
    # (155.93472 - 156) / 156 = -0.000418461...
    assert peak.difference.value == pytest.approx(-0.06528 / 156, rel=1e-9)


def test_command_line_primitives_override_the_preset() -> None:
    a100 = load_gpu("a100-sxm4-80gb")
    peak = gpu_peak_flops(a100, "tf32", clock_hz=1.0e9)
    # 2 x 1.0e9 x 108 x 512 = 110,592,000,000,000
    assert peak.value == pytest.approx(110.592e12, rel=1e-12)
    assert peak.derived is not None and peak.derived.term("f").source == "given on the command line"


def test_unsupported_dtype_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no fp8 rate"):
        gpu_peak_flops(load_gpu("a100-sxm4-80gb"), "fp8")


def test_sparse_needs_a_datasheet_sparse_rate() -> None:
    # The A100 datasheet gives no sparse FP64 rate: parcalc must not invent one.
    with pytest.raises(InputError, match="no sparse fp64"):
        gpu_peak_flops(load_gpu("a100-sxm4-80gb"), "fp64", sparse=True)
