"""`parcalc calibrate trace ... -o gpus/NAME.yaml`: a GPU preset calibrated from a profiler trace, better and never worse
on the steps it was not calibrated on (tests/fixtures/h200: copies of ../shared/measurements/h200-2026-11-28, measured on
one H200 SXM).

Calibrated from the b4 step's trace (trace-llama1b-b4-s4096.json.gz) only; held out: the 1B b1 s2048 step (its own trace,
and its kernel time by kind in train-step-profiles.json) and the 3B b2 s4096 step (train-step-profiles.json), whose
kernels the calibration never saw. Numbers in the comments: before -> after, predicted / measured - 1.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.calibrate.trace import summarise
from parcalc.errors import PresetError
from parcalc.presets import load_gpu
from parcalc.results.calibrate_trace import read_trace_file

sys.path.insert(0, str(Path(__file__).parent))
from step_parts_cases import FIXTURES, fit_args, measured

B4_TRACE = FIXTURES / "trace-llama1b-b4-s4096.json.gz"
B1_TRACE = FIXTURES / "trace-llama1b-b1-s2048.json.gz"
CALIBRATE = ["calibrate", "trace", str(B4_TRACE), "--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--framework", "hf",
             "--batch", "4", "--seq-len", "4096"]  # fmt: skip
PARTS = ("t_gemm", "t_attention", "t_memory_bound", "t_optimizer")
TRACE_KIND = {"t_gemm": "gemm", "t_attention": "attention", "t_memory_bound": "memory", "t_optimizer": "optimizer"}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The presets folder holding gpus/h200-traced.yaml, calibrated from the b4 trace."""
    root = tmp_path_factory.mktemp("presets")
    (root / "gpus").mkdir()
    result = CliRunner().invoke(app, [*CALIBRATE, "-o", str(root / "gpus" / "h200-traced.yaml")])
    assert result.exit_code == 0, result.output
    return root


def fit_parts(name: str, presets: Path | None = None) -> dict[str, float]:
    args = fit_args(name)
    if presets is not None:
        args[args.index("h200")] = "h200-traced"
        args += ["--presets", str(presets)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    return {key: results[key]["value"] for key in (*PARTS, "t_host", "t_step")}


def test_the_preset_holds_one_factor_per_kind_and_the_traces_host(calibrated: Path) -> None:
    """Each factor is modelled / traced kernel time of its kind on the b4 step (GEMMs 152.4 / 160.3 ms at the step's own
    1662.7 MHz, its wall now holding the optimizer's exposed Python, 2.1 ms: 0.95067; 152.7 at 1659 MHz before: 0.95245;
    151.6 at the capped steps' 1672.5 before the clock followed the step's power: 0.94561; attention 40.29 /
    42.97, memory-bound 147.6 / 152.2, optimizer 10.01 / 10.00 at 28 B a parameter (10.73 at 30 B, before AdamW over fp32
    weights stopped writing a 16-bit copy); before the H200 mechanisms of tests/test_h200_mechanisms.py 187.3, 40.29, 107.0,
    8.58: factors 1.1685, 0.9375, 0.7032, 0.8581); the host per kernel is the trace's, less the profiler's share."""
    gpu = load_gpu("h200-traced", (calibrated,))
    factors = gpu.kernels.calibrated
    assert (factors.gemm, factors.attention, factors.memory, factors.optimizer) == pytest.approx((0.95067, 0.93753, 0.96979, 1.0008), rel=1e-4)
    assert "calibrate trace from trace-llama1b-b4-s4096.json.gz" in factors.source
    # the b4 trace's host work per phase (31.19 / 62.72 / 1.82 ms; 2.14 ms of the optimizer's Python before its launches), less
    # the profiler's share (/ 1.30, / 1.54, parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN), over fit's 785 / 1,416 / 62
    # kernels and 146 parameter tensors: 30.56 / 28.76 / 29.36 / 14.65 us (34.54 / 34.40 / 29.36 us per traced launch, the
    # profiler's share in, before)
    host = (gpu.host.forward, gpu.host.backward, gpu.host.optimizer, gpu.host.prelude)
    assert host == pytest.approx((30.560e-6, 28.760e-6, 29.356e-6, 14.646e-6), rel=1e-4)
    assert gpu.name == "NVIDIA H200 SXM 141GB, calibrated from trace-llama1b-b4-s4096.json.gz"


def test_the_calibrated_preset_reproduces_its_own_trace_kind_by_kind(calibrated: Path) -> None:
    """Not a prediction (this is the row it was fitted on): the factors divide each kind's time exactly."""
    summary = summarise(read_trace_file(str(B4_TRACE)))
    after = fit_parts("llama3.2-1b b4 s4096", calibrated)
    for part in PARTS:
        assert after[part] == pytest.approx(summary.kernel_seconds[TRACE_KIND[part]], rel=2e-4)


HELD_OUT = ("llama3.2-3b b2 s4096", "llama3.2-1b b1 s2048")


# Where calibrating on the b4 trace moves a held-out part away from its measurement (strict xfails: they fail the day
# they hold). The memory-bound factor (0.970) corrects the b4 step's -3.0 %; the b1 step's part was within 1 % (+0.5 ->
# +3.6 %). (The GEMM factor moved the b1 step's GEMMs away, +10.1 -> +16.5 %, while every step was charged the capped
# clock; with each step at the clock its power leaves it, parcalc.core.timing.step_clock, the factor is the b4 step's at
# its own 1659 MHz and the b1 step runs at 1980: -3.2 -> +1.6 %.)
# The attention factor (1.045) corrects the b4 step's -4.3 %; since attention is timed by its tiles
# (parcalc.core.timing.attention_tiles) the held-out steps' attention is within 2.2 % before it and the factor overshoots:
# b1 +0.5 -> +7.2 % against the profile, -1.0 -> +5.6 % against its trace; 3B -2.2 -> +4.3 %. The b4 step ran at a capped
# 1695 MHz, the b1 step at 1980: a factor of one step's clock does not carry to another's.
B1_AWAY = {"t_memory_bound": "the b1 step's memory-bound part was within 1 % before the b4 factor",
           "t_attention": "the b1 step's attention was within 1 % before the b4 factor (+0.5 -> +7.2 %, trace -1.0 -> +5.6 %)"}
# 3B b2's optimizer is within 1 % before calibrating (AdamW over fp32 weights at 28 B a parameter): the b4 factor (1.0008)
# moves it -0.77 -> -0.85 %, within the trace's noise, where nothing was left to correct
B2_AWAY = {"t_optimizer": "the 3B step's optimizer was within 1 % before the b4 factor (-0.77 -> -0.85 %)",
           "t_attention": "the 3B step's attention was within 2.2 % before the b4 factor (-2.2 -> +4.3 %)"}


def _held_out(name: str, part: str) -> object:
    away = B1_AWAY if name == "llama3.2-1b b1 s2048" else B2_AWAY
    return pytest.param(name, part, marks=pytest.mark.xfail(strict=True, reason=away[part]) if part in away else ())


@pytest.mark.parametrize(("name", "part"), [_held_out(name, part) for name in HELD_OUT for part in PARTS])
def test_calibration_moves_every_held_out_part_closer_to_the_profile(calibrated: Path, name: str, part: str) -> None:
    """Against train-step-profiles.json's kernel time of the kind (a run the trace is not from). 3B b2: GEMMs -6.1 ->
    -1.4 %, attention -2.2 -> +4.3 (xfail; -11.9 -> -6.0 at one rate a head dimension), memory-bound -3.6 -> -0.6,
    optimizer -0.77 -> -0.85 (xfail); 1B b1: GEMMs -3.2 -> +1.6 (+10.1 -> +16.5 at the capped clock), attention +0.5 ->
    +7.2 (xfail; -24.0 -> -18.9 at one rate), +0.5 -> +3.6 (xfail), +1.2 -> +1.2. (Before the H200 mechanisms, when every part was 13-33 %
    off, calibration moved every one closer.)"""
    truth = measured(name)[part]
    before, after = fit_parts(name)[part], fit_parts(name, calibrated)[part]
    assert abs(after / truth - 1) < abs(before / truth - 1)


@pytest.mark.parametrize("part", [pytest.param(part, marks=pytest.mark.xfail(strict=True, reason=B1_AWAY[part]) if part in B1_AWAY else ())
                                  for part in PARTS])  # fmt: skip
def test_calibration_moves_every_part_closer_to_the_held_out_trace(calibrated: Path, part: str) -> None:
    """Against the b1 step's own trace (trace-llama1b-b1-s2048.json.gz): GEMMs -4.1 -> +0.7 % (away, +9 -> +15, at the
    capped clock), optimizer +1.1 -> +1.0 %; memory-bound and attention (-1.0 -> +5.6 %; -25 -> -20 at one rate a head
    dimension) move away (B1_AWAY)."""
    truth = summarise(read_trace_file(str(B1_TRACE))).kernel_seconds[TRACE_KIND[part]]
    before, after = fit_parts("llama3.2-1b b1 s2048")[part], fit_parts("llama3.2-1b b1 s2048", calibrated)[part]
    assert abs(after / truth - 1) < abs(before / truth - 1)



def test_calibration_moves_the_held_out_gpu_bound_step_closer(calibrated: Path) -> None:
    """The whole step against train-steps.json (unprofiled median of 5): 3B b2 442.3 -> 460.7 ms against 463.3 (-4.5 ->
    -0.6 %; -5.2 -> -1.3 % before the host followed the loop's synchronisation)."""
    truth = measured("llama3.2-3b b2 s4096")["t_step"]
    before, after = fit_parts("llama3.2-3b b2 s4096")["t_step"], fit_parts("llama3.2-3b b2 s4096", calibrated)["t_step"]
    assert abs(after / truth - 1) < abs(before / truth - 1)


@pytest.mark.parametrize("name", HELD_OUT)
def test_the_held_out_steps_are_within_5_percent_calibrated(calibrated: Path, name: str) -> None:
    """The issue's check, calibrated from the b4 trace: 3B b2 -0.6 %, 1B b1 -4.6 % (76.85 ms against 80.58; +6.51 % before
    the host followed the loop's synchronisation and took the profiler's share out of its cost, a strict xfail then)."""
    assert abs(fit_parts(name, calibrated)["t_step"] / measured(name)["t_step"] - 1) <= 0.05


def test_calibration_leaves_the_host_bound_step_where_it_was(calibrated: Path) -> None:
    """1B b1 is host-bound: its step is the host's forward and backward, the optimizer's Python, then the optimizer's
    kernels. The host's costs come from the same b4 trace calibrated or not, and only the optimizer's factor (1.0008) reaches
    the step: 76.862 -> 76.854 ms (-4.615 -> -4.625 %), no worse than 0.02 percentage points. The GPU parts it hides move
    closer (test_calibration_moves_every_held_out_part_closer_to_the_profile)."""
    truth = measured("llama3.2-1b b1 s2048")["t_step"]
    before, after = fit_parts("llama3.2-1b b1 s2048"), fit_parts("llama3.2-1b b1 s2048", calibrated)
    assert abs(after["t_step"] / truth - 1) <= abs(before["t_step"] / truth - 1) + 2e-4
    assert after["t_host"] < before["t_host"]  # the GPU's larger parts leave less of the host exposed


def test_a_preset_needs_the_traced_step_and_a_base_gpu(tmp_path: Path) -> None:
    out = tmp_path / "gpus" / "x.yaml"
    out.parent.mkdir()
    result = CliRunner().invoke(app, ["calibrate", "trace", str(B4_TRACE), "-o", str(out)])
    assert result.exit_code == 2 and "needs the traced step" in result.output and not out.exists()


def test_a_step_that_is_not_the_traced_one_is_refused(tmp_path: Path) -> None:
    """64 sequences modelled against the kernels of 4: a factor of 10+ on GEMMs is no calibration."""
    out = tmp_path / "gpus" / "x.yaml"
    out.parent.mkdir()
    args = [*CALIBRATE, "-o", str(out)]
    args[args.index("4")] = "64"
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "not a calibration, a different step" in result.output and not out.exists()


def test_an_existing_preset_is_kept_without_force(tmp_path: Path) -> None:
    out = tmp_path / "gpus" / "x.yaml"
    out.parent.mkdir()
    out.write_text("mine")
    result = CliRunner().invoke(app, [*CALIBRATE, "-o", str(out)])
    assert result.exit_code == 2 and "--force" in result.output and out.read_text() == "mine"


def test_a_factor_out_of_bounds_is_a_preset_error(calibrated: Path, tmp_path: Path) -> None:
    text = (calibrated / "gpus" / "h200-traced.yaml").read_text()
    assert re.search(r"gemm: 0\.9506\d*", text)
    text = re.sub(r"gemm: 0\.9506\d*", "gemm: 0", text)
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "bad.yaml").write_text(text)
    with pytest.raises(PresetError, match=r"kernels\.calibrated\.gemm"):
        load_gpu("bad", (tmp_path,))
