"""`parcalc calibrate trace ... -o gpus/NAME.yaml`: a GPU preset calibrated from a profiler trace, better and never worse
on the steps it was not calibrated on (tests/fixtures/h200: copies of ../shared/measurements/h200-2026-11-28, measured on
one H200 SXM).

Calibrated from the b4 step's trace (trace-llama1b-b4-s4096.json.gz) only; held out: the 1B b1 s2048 step (its own trace,
and its kernel time by kind in train-step-profiles.json) and the 3B b2 s4096 step (train-step-profiles.json), whose
kernels the calibration never saw. The profiles' kinds are taken as calibrate trace sorts a trace's kernels (cuDNN's
attention helpers as attention: step_parts_cases.measured_as_parcalc_sorts). Numbers in the comments: before -> after,
predicted / measured - 1.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.calibrate.trace import RESOLVED, kernel_kind, launch_spread, summarise
from parcalc.errors import PresetError
from parcalc.presets import load_gpu
from parcalc.results.calibrate_trace import read_trace_file

sys.path.insert(0, str(Path(__file__).parent))
from step_parts_cases import FIXTURES, fit_args, measured, measured_as_parcalc_sorts

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
    """Each factor is modelled / traced kernel time of its kind on the b4 step (GEMMs 152.3 / 160.3 ms at the step's own
    1663.9 MHz, the element paths' clocked share in its clock solve: 0.95006; 152.4 at 1662.7 MHz before they followed the
    clock, its wall holding the optimizer's exposed Python, 2.1 ms: 0.95067; 152.7 at 1659 MHz before: 0.95245;
    151.6 at the capped steps' 1672.5 before the clock followed the step's power: 0.94561; attention 40.29 / 45.04 with
    cuDNN's helpers counted as attention, as the isolated SDPA rows that set its rate timed them (40.29 / 42.97: 0.93753
    while they were memory-bound), memory-bound 148.3 / 150.13 with the element paths at the step's clock (147.6 at the
    rates' own clock: 0.98315; 147.6 / 152.2: 0.96979), optimizer 10.010 / 10.002 kept at
    1: within the trace's resolution (below; 1.0008 fitted before); before the H200 mechanisms of
    tests/test_h200_mechanisms.py 187.3, 40.29, 107.0, 8.58: factors 1.1685, 0.9375, 0.7032, 0.8581); the host per kernel is
    the trace's, less the profiler's share."""
    gpu = load_gpu("h200-traced", (calibrated,))
    factors = gpu.kernels.calibrated
    assert (factors.gemm, factors.attention, factors.memory, factors.optimizer) == pytest.approx((0.95006, 0.89443, 0.98811, 1.0), rel=1e-4)
    assert "calibrate trace from trace-llama1b-b4-s4096.json.gz" in factors.source
    # the b4 trace's host work per phase (31.19 / 62.72 / 1.82 ms; 2.14 ms of the optimizer's Python before its launches), less
    # the profiler's share (/ 1.30, / 1.54, parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN), over fit's 785 / 1,416 / 62
    # kernels and 146 parameter tensors: 30.56 / 28.76 / 29.36 / 14.65 us (34.54 / 34.40 / 29.36 us per traced launch, the
    # profiler's share in, before)
    host = (gpu.host.forward, gpu.host.backward, gpu.host.optimizer, gpu.host.prelude)
    assert host == pytest.approx((30.560e-6, 28.760e-6, 29.356e-6, 14.646e-6), rel=1e-4)
    assert gpu.name == "NVIDIA H200 SXM 141GB, calibrated from trace-llama1b-b4-s4096.json.gz"


def test_the_calibrated_preset_reproduces_its_own_trace_kind_by_kind(calibrated: Path) -> None:
    """Not a prediction (this is the row it was fitted on): the fitted factors divide each kind's time exactly; the kind
    kept at its base (the optimizer) stays within the trace's resolution of it (10.010 against 10.002 ms, 0.036 ms)."""
    summary = summarise(read_trace_file(str(B4_TRACE)))
    after = fit_parts("llama3.2-1b b4 s4096", calibrated)
    for part in ("t_gemm", "t_attention", "t_memory_bound"):
        assert after[part] == pytest.approx(summary.kernel_seconds[TRACE_KIND[part]], rel=2e-4)
    assert summary.kernel_error is not None
    assert abs(after["t_optimizer"] - summary.kernel_seconds["optimizer"]) <= RESOLVED * summary.kernel_error["optimizer"]


def test_each_kinds_resolution_is_the_spread_of_its_repeated_launches() -> None:
    """Two standard errors of each kind's traced time, from launches of the same kernel, grid, block, op and input shapes
    (launch_spread) in the b4 trace: GEMMs 1.097 ms, attention 1.331 (the backward's flash kernel slows from 1.80 to 2.27 ms
    where the power cap lowers the clock), memory-bound 0.299, optimizer 0.036 ms. The model's misses beyond them are
    fitted (GEMMs 8.01 ms, attention 4.75, memory-bound 1.79); the optimizer's 0.008 ms is not resolved, and a factor there
    (1.0008) moved the held-out 3B step's optimizer away from its profile (-0.77 -> -0.85 %)."""
    summary = summarise(read_trace_file(str(B4_TRACE)))
    assert summary.kernel_error is not None
    spread = {kind: RESOLVED * summary.kernel_error[kind] for kind in ("gemm", "attention", "memory", "optimizer")}
    assert spread == pytest.approx({"gemm": 1.0972e-3, "attention": 1.3313e-3, "memory": 0.2992e-3, "optimizer": 0.0359e-3}, rel=1e-3)


def test_launches_are_told_apart_by_their_op_and_shapes() -> None:
    """Two launches of one kernel by one op on one shape, 10 and 12 us: variance 2 us^2, n x var 4, standard error 2 us; a
    third of another shape is a launch of its own (once: nothing); a kernel whose op recorded no shapes leaves its kind's
    resolution unknown (a persistent GEMM kernel of one name and grid runs every shape)."""
    def op(i: int, dims: list[list[int]] | None) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": i, "dur": 1, "args": {"External id": i, **({"Input Dims": dims} if dims else {})}}

    def kernel(i: int, dur: float, name: str = "vectorized_elementwise_kernel") -> dict[str, object]:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": 100 + i, "dur": dur, "args": {"External id": i, "grid": [4, 1, 1], "block": [128, 1, 1]}}

    events = [op(1, [[8]]), op(2, [[8]]), op(3, [[16]]), op(4, None), kernel(1, 10.0), kernel(2, 12.0), kernel(3, 30.0),
              kernel(4, 5.0, "nvjet_sm90_tst_128x256")]  # fmt: skip
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert launch_spread(kernels, events) == pytest.approx({"memory": 2e-6})


def test_cudnns_attention_helpers_count_as_attention() -> None:
    """cuDNN's SDPA backward runs the flash kernel and three helpers (the rows' dO . O, dQ's fp32 accumulator to bf16, dK / dV
    summed over a GQA group's query heads); every one in both shared traces is launched by aten::_cudnn_attention_backward,
    and attention-sdpa.json's rows, which set the model's attention rate, time them (forward + autograd backward)."""
    assert kernel_kind("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*") == "attention"
    assert kernel_kind("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned") == "attention"
    assert kernel_kind("void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int, unsigned int,") == "attention"
    for trace in (B4_TRACE, B1_TRACE):
        events = read_trace_file(str(trace))["traceEvents"]
        ops = {e["args"].get("External id"): e["name"] for e in events if e.get("cat") == "cpu_op"}
        launched = {ops.get(e["args"].get("External id")) for e in events if e.get("cat") == "kernel" and "cudnn::fusion" in e["name"]}
        assert launched == {"aten::_cudnn_attention_backward"}


def test_a_trace_without_shapes_fits_every_kind(tmp_path: Path) -> None:
    """Without the ops' recorded shapes the trace cannot tell one launch from another: no resolution, every kind fitted (the
    optimizer too: 1.0008)."""
    data = read_trace_file(str(B4_TRACE))
    for event in data["traceEvents"]:
        if event.get("cat") == "cpu_op":
            event["args"].pop("Input Dims", None)
    trace = tmp_path / "no-shapes.json"
    trace.write_text(json.dumps(data))
    assert summarise(read_trace_file(str(trace))).kernel_error == {}
    out = tmp_path / "gpus" / "x.yaml"
    out.parent.mkdir()
    args = [*CALIBRATE, "-o", str(out)]
    args[args.index(str(B4_TRACE))] = str(trace)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert load_gpu("x", (tmp_path,)).kernels.calibrated.optimizer == pytest.approx(1.0008, abs=1e-4)


HELD_OUT = ("llama3.2-3b b2 s4096", "llama3.2-1b b1 s2048")


# Where calibrating on the b4 trace moves a held-out part away from its measurement (strict xfails: they fail the day
# they hold); none now. The b1 step's memory-bound part moved away (+1.8 -> +3.5 % against the profile, +1.1 -> +2.9 %
# against its trace) while the non-vectorised paths ran at the rates the b4 trace measured at its throttled clock: the b1
# step runs at 1980 MHz, and its casts took 11.6 % less than the model (6.12 / 6.83 ms). With each path's share of its time
# at the step's clock (parcalc.core.timing.elementwise.ElementClock, measured in the b4 trace's own clock variation) the
# casts are +2.3 % and the part -2.1 % before calibrating, -0.9 % after (trace -2.7 -> -1.6 %). What is left is the other
# way: the b1 step's small reductions take 1.8x the model (0.97 / 0.52 ms, 24 % occupancy), its strided kernels 6.4 % more
# (a fixed cost of small launches): not modelled. (Element rates in proportion to the clock, share 1, took the part to
# -5.8 %. Before cuDNN's attention helpers counted as attention the factor was 0.970 and attention moved away too: b1
# +0.5 -> +7.2 %, 3B -2.2 -> +4.3 %, the model's attention holding kernels the trace counted as memory-bound; the GEMM
# factor moved the b1 step's GEMMs away while every step was charged the capped clock, +10.1 -> +16.5 %, until each step
# ran at the clock its power leaves it: parcalc.core.timing.step_clock.)
B1_AWAY: dict[str, str] = {}
# A kind the calibration kept at its base (within the b4 trace's resolution): the held-out parts of that kind do not move
KEPT = ("t_optimizer",)


def _held_out(name: str, part: str) -> object:
    away = B1_AWAY if name == "llama3.2-1b b1 s2048" else {}
    return pytest.param(name, part, marks=pytest.mark.xfail(strict=True, reason=away[part]) if part in away else ())


def _closer_or_kept(part: str, before: float, after: float, truth: float) -> None:
    if part in KEPT:
        assert after == pytest.approx(before, rel=1e-12)
    else:
        assert abs(after / truth - 1) < abs(before / truth - 1)


@pytest.mark.parametrize(("name", "part"), [_held_out(name, part) for name in HELD_OUT for part in PARTS])
def test_calibration_moves_every_held_out_part_closer_to_the_profile(calibrated: Path, name: str, part: str) -> None:
    """Against train-step-profiles.json's kernel time of the kind (a run the trace is not from), sorted as calibrate trace
    sorts kernels. 3B b2: GEMMs -6.1 -> -1.2 %, attention -7.7 -> +3.2 (-2.2 -> +4.3, away, with cuDNN's helpers counted
    as memory-bound), memory-bound -1.6 -> -0.4 (-2.1 -> -0.4 before the element paths followed the clock), optimizer -0.77 kept (-0.85 with a factor of 1.0008); 1B b1: GEMMs -3.2 ->
    +1.8 (+10.1 -> +16.5 at the capped clock), attention -8.4 -> +2.4 (+0.5 -> +7.2, away, before), memory-bound -2.1 ->
    -0.9 (+1.8 -> +3.5, away, while the element paths ignored the clock: B1_AWAY's comment), optimizer +1.2 kept.
    (Before the H200 mechanisms, when every part was 13-33 % off, calibration moved every one closer.)"""
    truth = measured_as_parcalc_sorts(name)[part]
    _closer_or_kept(part, fit_parts(name)[part], fit_parts(name, calibrated)[part], truth)


@pytest.mark.parametrize("part", [pytest.param(part, marks=pytest.mark.xfail(strict=True, reason=B1_AWAY[part]) if part in B1_AWAY else ())
                                  for part in PARTS])  # fmt: skip
def test_calibration_moves_every_part_closer_to_the_held_out_trace(calibrated: Path, part: str) -> None:
    """Against the b1 step's own trace (trace-llama1b-b1-s2048.json.gz): GEMMs -4.1 -> +0.9 % (away, +9 -> +15, at the
    capped clock), attention -9.7 -> +0.9 (-1.0 -> +5.6, away, with cuDNN's helpers counted as memory-bound), memory-bound
    -2.7 -> -1.6 (+1.1 -> +2.9, away, before the element paths followed the step's clock), optimizer +1.1 kept."""
    truth = summarise(read_trace_file(str(B1_TRACE))).kernel_seconds[TRACE_KIND[part]]
    _closer_or_kept(part, fit_parts("llama3.2-1b b1 s2048")[part], fit_parts("llama3.2-1b b1 s2048", calibrated)[part], truth)


def test_calibration_moves_the_held_out_gpu_bound_step_closer(calibrated: Path) -> None:
    """The whole step against train-steps.json (unprofiled median of 5): 3B b2 447.9 -> 465.6 ms against 463.3 (-3.3 ->
    +0.5 %; 447.2 -> 465.7 before the element paths followed the clock; 442.3 -> 460.7, -4.5 -> -0.6 %, with the GEMMs' clock of an earlier model; -5.2 -> -1.3 % before the host
    followed the loop's synchronisation)."""
    truth = measured("llama3.2-3b b2 s4096")["t_step"]
    before, after = fit_parts("llama3.2-3b b2 s4096")["t_step"], fit_parts("llama3.2-3b b2 s4096", calibrated)["t_step"]
    assert abs(after / truth - 1) < abs(before / truth - 1)


@pytest.mark.parametrize("name", HELD_OUT)
def test_the_held_out_steps_are_within_5_percent_calibrated(calibrated: Path, name: str) -> None:
    """The issue's check, calibrated from the b4 trace: 3B b2 +0.5 %, 1B b1 -4.6 % (76.86 ms against 80.58; +6.51 % before
    the host followed the loop's synchronisation and took the profiler's share out of its cost, a strict xfail then)."""
    assert abs(fit_parts(name, calibrated)["t_step"] / measured(name)["t_step"] - 1) <= 0.05


def test_calibration_leaves_the_host_bound_step_where_it_was(calibrated: Path) -> None:
    """1B b1 is host-bound: its step is the host's forward and backward, the optimizer's Python, then the optimizer's
    kernels. The host's costs come from the same b4 trace calibrated or not, and only the optimizer's factor reaches the
    step: kept at 1 (within the b4 trace's resolution), the step stays at 76.862 ms (-4.615 %; 76.854, -4.625 %, with the
    factor of 1.0008 it had before). The GPU parts it hides move closer (test_calibration_moves_every_held_out_part_closer_to_the_profile)."""
    before, after = fit_parts("llama3.2-1b b1 s2048"), fit_parts("llama3.2-1b b1 s2048", calibrated)
    assert after["t_step"] == pytest.approx(before["t_step"], rel=1e-9)
    assert before["t_step"] / measured("llama3.2-1b b1 s2048")["t_step"] - 1 == pytest.approx(-0.04615, abs=5e-5)
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
    assert re.search(r"gemm: 0\.9500\d*", text)
    text = re.sub(r"gemm: 0\.9500\d*", "gemm: 0", text)
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "bad.yaml").write_text(text)
    with pytest.raises(PresetError, match=r"kernels\.calibrated\.gemm"):
        load_gpu("bad", (tmp_path,))
