"""The step's parts, each held against a real H200 (tests/fixtures/h200: copies of ../shared/measurements/h200-2026-11-28,
measured on one H200 SXM, 700 W, torch 2.11, transformers 5.17).

What sets each number and what checks it:
- GEMMs by tiles (parcalc.core.timing.gemm_tiles): three rows of gemm-bf16.json set the SM rate and the two overheads
  (16384^3, 4096x32x4096, 1024^3); the other 31 rows check the model; the training steps' GEMM kernel time checks it again.
- Fused attention by its tiles (parcalc.core.timing.attention_tiles): attention-sdpa.json's two GQA d128 rows set each
  tile's fixed cost and the d128 blocks' rate, its d64 row the d64 blocks' rate; the MHA d128 row, the training steps'
  attention kernels and the b1 trace's kernels check them (tests/test_attention_tiles.py).
- Memory-bound kernels at e_mem x HBM (hbm-copy.json sets the H200's e_mem) or, on a TensorIterator path that is not
  vectorised, at that path's element rate (the b4 trace sets them; the b1 trace and the 3B profile check them:
  tests/test_h200_mechanisms.py).
- GEMMs at the training step's SM clock under the power limit (the profile's nvidia-smi samples), over the sweep's.
- Fused AdamW: launches from multi_tensor_apply's limits, checked against the profile's multi_tensor_apply calls; each
  launch as long as its busiest SM (tests/test_h200_mechanisms.py).
- The host: the hf profile's costs per kernel re-derived from the b4 trace (each phase's host work less the profiler's
  share, measured with real PyTorch on the CPU: benchmarks/host_profiler_overhead.py), not from the small step they are
  checked on; the loop's synchronisation after the backward from the script that timed the steps (h200_truth.py). The
  segments between its synchronisations are checked against that loop's own timing of them (t_fwdbwd_s, t_opt_s), and the
  small step against the other loop (h200_profile.py's, synchronised only around the step).
- The whole uncalibrated step `fit --gpu h200 --framework hf` against train-steps.json.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.timing.attention_tiles import attention_shape
from parcalc.core.timing.gemm_tiles import tiled_gemm_time
from parcalc.core.timing.host import Phase, host_exposed, host_exposed_segments, optimizer_launches, step_segments
from parcalc.presets import load_framework, load_gpu, load_model

sys.path.insert(0, str(Path(__file__).parent))
from step_parts_cases import FIXTURES, PLAIN_LOOP, STEPS, fit_args, measured, plain_loop_presets, predicted, segments

H200 = load_gpu("h200", ())
GEMMS = json.loads((FIXTURES / "gemm-bf16.json").read_text())["rows"]
SDPA = json.loads((FIXTURES / "attention-sdpa.json").read_text())["rows"]
HBM = 0.8912 * 4.8e12  # the H200 preset's e_mem x bandwidth (hbm-copy.json)


def model_time(row: dict) -> float:
    return tiled_gemm_time(row["m"], row["k"], row["n"], 1, H200.kernels.tiled("bf16"), 132, HBM, 2.0)[0]


def test_the_gemm_model_is_solved_from_three_rows_of_the_sweep() -> None:
    """The preset's three numbers are the exact solution of three rows (gemm-bf16.json): 16384^3 in 63 waves of
    128x256 tiles, 4096x32x4096 in 4 waves of tiles with a 32-long main loop, 1024^3 in one wave of 64x128 tiles."""
    rows = {r["name"]: r for r in GEMMS}
    waves = math.ceil((16384 // 128) * (16384 // 256) / 132)
    a = np.array([[waves * 2 * 128 * 256 * 16384, waves, 1], [4 * 2 * 128 * 256 * 32, 4, 1], [2 * 64 * 128 * 1024, 1, 1]], dtype=float)
    y = np.array([rows["sq 16384"]["t_s"], rows["hw 4096x32x4096"]["t_s"], rows["sq 1024"]["t_s"]])
    inverse_rate, tile, kernel = np.linalg.solve(a, y)
    tiled = H200.kernels.tiled("bf16")
    assert tiled.sm_rate == pytest.approx(1 / inverse_rate, rel=1e-4)  # 5.4414 TFLOP/s per SM: 718 over 132 SMs
    assert tiled.tile_overhead == pytest.approx(tile, rel=1e-3)  # 3.129 us
    assert tiled.kernel_overhead == pytest.approx(kernel, rel=1e-3)  # 7.299 us
    for name in ("sq 16384", "hw 4096x32x4096", "sq 1024"):
        assert model_time(rows[name]) == pytest.approx(rows[name]["t_s"], rel=2e-3)


def test_gemms_by_shape_hold_against_the_sweep() -> None:
    """Every other row of the sweep within 1.5x, the large ones (a full wave of 128x256 tiles, K >= 1024: 29 rows) at a
    median of +4.7 % (the issue's check: within 7 %; the GEMM share parcalc had, 0.496 x peak x quantisation, was 16 %
    fast on training shapes, 3x on 1024^3). The worst, 2048^3 at 1.47x: one wave of 128 tiles measured at 718 TFLOP/s,
    faster per SM than the long GEMMs (a short GEMM loop holds a higher clock under the power limit: not modelled)."""
    ratios = {r["name"]: model_time(r) / r["t_s"] for r in GEMMS}
    large = [ratios[r["name"]] for r in GEMMS if r["m"] * r["n"] >= 132 * 128 * 256 and r["k"] >= 1024]
    assert len(large) == 29
    assert statistics.median(large) == pytest.approx(1.047, abs=0.005)
    assert abs(statistics.median(large) - 1) <= 0.07
    assert all(1 / 1.5 <= q <= 1.5 for q in ratios.values()), ratios
    assert ratios["sq 2048"] == pytest.approx(1.468, abs=0.005)


@pytest.mark.parametrize("row", range(4))
def test_fused_attention_against_the_sdpa_rows(row: int) -> None:
    """cuDNN's fused attention (attention-sdpa.json) through the tiles: rows 0-2 (d64; the two GQA d128 rows) set the
    preset's blocks' rates and tile costs (exact to the rounding), the MHA d128 row (3) comes out -5.5 % forward and
    -0.3 % backward (one rate a head dimension, at its longest row, gave +8.0 / +8.1 % for it and -6.4 / -11.0 % for the
    b 2 x 24-head row)."""
    r = SDPA[row]
    forward_flops = 4 * r["b"] * r["heads"] * r["s"] ** 2 * r["d"] / 2  # causal, as the file counts them
    forward, backward = sdpa_pass_times(r)
    measured_backward = r["t_fwd_bwd_s"] - r["t_fwd_s"]
    assert forward_flops > 0
    setting = row in (0, 1, 2)
    assert forward / r["t_fwd_s"] == pytest.approx(1.0 if setting else 0.945, abs=1e-3 if setting else 0.005)
    assert backward / measured_backward == pytest.approx(1.0 if setting else 0.997, abs=1e-3 if setting else 0.005)


def sdpa_pass_times(r: dict) -> tuple[float, float]:
    """(forward, backward) seconds parcalc gives one row of attention-sdpa.json (causal, bf16, the H200 preset)."""
    from parcalc.core.timing.kernels import compute_spec, flash_attention

    spec = compute_spec(H200, "bf16", 989.5e12)
    shape = attention_shape(r["b"] * r["heads"], r["s"], r["s"], 2 * r["d"], 0.5, True)
    flops = 4 * r["b"] * r["heads"] * r["s"] ** 2 * r["d"] / 2
    times = [flash_attention("attn", k * flops, 0.0, k > 1, spec, "", r["d"], shape).time for k in (1.0, 2.5)]
    return times[0], times[1]


def test_memory_bound_rate_is_the_hbm_copy() -> None:
    """hbm-copy.json: a 2 GiB device-to-device copy moves 4.28 TB/s (read + write): the preset's e_mem x 4.8 TB/s
    (0.8912; before, 0.9 from H100's quack softmax, 4.32 TB/s)."""
    copy = json.loads((FIXTURES / "hbm-copy.json").read_text())["copy"]
    assert copy["bytes_moved"] / copy["t_s"] / HBM == pytest.approx(1.0, abs=2e-4)
    assert H200.kernels.memory.value * H200.memory_bandwidth.value == pytest.approx(HBM)


@pytest.mark.parametrize(("name", "calls"), [("llama3.2-1b", 62), ("llama3.2-3b", 157)])
def test_fused_adamw_launches_equal_the_profiled_multi_tensor_apply_calls(name: str, calls: int) -> None:
    """train-step-profiles.json: 62 and 157 multi_tensor_apply kernels per step for the 1B and 3B shapes (146 and 254
    parameter tensors): the step counters' _foreach_add_ (110 tensors a launch) and the fused AdamW launches (320
    blocks of 65,536 elements or 36 tensors a launch, MultiTensorApply.cuh)."""
    from parcalc.core.comm.tensors import parameter_tensors

    profile = {c["name"]: c for c in json.loads((FIXTURES / "train-step-profiles.json").read_text())["configs"]}
    step = next(n for n in profile if n.startswith(name.replace("llama", "llama")))
    measured_calls = sum(k["calls_per_step"] for k in profile[step]["top_kernels"] if "multi_tensor_apply" in k["name"])
    assert measured_calls == calls
    tensors = parameter_tensors(load_model(str(FIXTURES / f"{name}.json")))
    assert optimizer_launches([t.rows * t.cols for t in tensors]) == calls


def test_host_exposure_is_what_the_gpu_cannot_hide() -> None:
    """The fluid model: a GPU-bound step hides the host entirely (its queue never empties); a host-bound one waits the
    difference; a slow phase before a fast one leaves the GPU idle in between."""
    assert host_exposed([Phase(1.0, 5.0), Phase(1.0, 5.0)]) == 0.0
    assert host_exposed([Phase(5.0, 1.0), Phase(5.0, 1.0)]) == pytest.approx(8.0)  # host-bound: 10 s of issue, 2 of GPU
    assert host_exposed([Phase(3.0, 1.0), Phase(1.0, 4.0)]) == pytest.approx(2.0)  # phase 1 done at 1, phase 2 issued by 3, ends at 7
    assert host_exposed([Phase(1.0, 4.0), Phase(3.0, 1.0)]) == pytest.approx(0.0)  # the backlog of phase 1 hides phase 2's issue


def test_a_synchronisation_empties_the_queue() -> None:
    """With a synchronisation between two segments the GPU's backlog of the first cannot hide the second's host work: a
    GPU-bound segment then a host-only one (the optimizer's Python) exposes it all, where one segment would hide it."""
    first, second = [Phase(1.0, 5.0)], [Phase(2.0, 0.0), Phase(0.5, 3.0)]
    assert host_exposed(first + second) == pytest.approx(0.0)  # issued by 3.5, the GPU busy until 8
    assert host_exposed_segments([first, second]) == pytest.approx(2.0)  # 5, then 2 of Python, then 3 of GPU
    # one micro-batch synchronised after its backward: the step's segments
    assert step_segments(1.0, 2.0, 3.0, 4.0, 2, 0.5, 0.1, 0.2, True) == [[Phase(1.0, 2.0), Phase(3.0, 4.0)]] * 2 + [[Phase(0.5, 0.0), Phase(0.1, 0.2)]]


def test_host_costs_are_the_b4_traces() -> None:
    """The hf profile's host time per kernel is the b4 step's trace (trace-llama1b-b4-s4096.json.gz), as calibrate trace
    derives it: each phase's host work (31.19 ms forward over 903 launches, 62.72 ms backward over 1,823, 1.82 ms over the
    62 AdamW launches, 2.14 ms of the optimizer's Python before its first launch), less the profiler's share (/ 1.30, / 1.54:
    benchmarks/host_profiler_overhead.py), over fit's kernels of the step (785, 1,416, 62; 146 parameter tensors): 30.56,
    28.76, 29.36, 14.65 us. The small step (1B, b 1, s 2048) is not used to set them."""
    from parcalc.core.calibrate.trace import summarise, traced_host
    from parcalc.results.calibrate_trace import read_trace_file

    summary = summarise(read_trace_file(str(FIXTURES / "trace-llama1b-b4-s4096.json.gz")))
    host = load_framework("hf").host
    assert host is not None
    assert (summary.forward.launches, summary.backward.launches, summary.optimizer.launches) == (903, 1823, 62)
    counts = {k.removeprefix("host."): v for k, v in predicted("llama3.2-1b b4 s4096").items() if k.startswith("host.")}
    assert (counts["n_f"], counts["n_b"], counts["n_o"], counts["n_p"]) == (785, 1416, 62, 146)
    fits = {f.phase: f.per_kernel for f in traced_host(summary, counts, None) or ()}
    assert (host.forward, host.backward, host.optimizer, host.prelude) == pytest.approx(
        (fits["forward"], fits["backward"], fits["optimizer"], fits["optimizer_prelude"]), rel=2e-4)
    assert (host.forward, host.backward, host.prelude) == pytest.approx((30.56e-6, 28.76e-6, 14.646e-6), rel=1e-4)
    # the trace's kernels by kind, as the profile counts them (train-step-profiles.json, another run of the same step)
    assert summary.kernel_seconds["gemm"] == pytest.approx(0.1603, abs=0.0005)
    assert summary.kernels == 2788


# The loop that timed the steps (h200_truth.py) synchronises after the backward and after the step, and times both
# segments: forward + backward (t_fwdbwd_s) and the optimizer step with zero_grad (t_opt_s). The optimizer segment is the
# optimizer's Python before its first launch (from the b4 trace) then its kernels: 12.15 / 29.73 / 12.15 ms against
# 12.43 / 29.53 / 12.13 (-2.3 / +0.7 / +0.2 %); forward + backward 340.3 / 412.6 / 64.7 ms against 354.8 / 434.1 / 68.2
# (-4.1 / -5.0 / -5.2 %: the GPU parts of the two large steps, the host of the small one).
SEGMENT_WITHIN = {"t_opt": 0.03, "t_fwdbwd": 0.06}


@pytest.mark.parametrize("segment", list(SEGMENT_WITHIN))
@pytest.mark.parametrize("name", list(STEPS))
def test_each_segment_between_synchronisations_holds_against_the_loops_timing(name: str, segment: str) -> None:
    assert abs(segments(predicted(name))[segment] / measured(name)[segment] - 1) <= SEGMENT_WITHIN[segment]


def test_the_small_step_holds_against_the_loop_without_a_synchronisation_inside(tmp_path: Path) -> None:
    """h200_profile.py's unprofiled loop synchronises around the step only (its t_step_s, 72.9 ms for 1B b1 s2048). The same
    model with the hf profile's loop set to it: 76.85 ms (+5.4 %), t_host 19.5 ms; with the host's per-launch cost as the
    profiled trace has it (34.5 us), it was 85.8 ms (+17.7 %). The small step is host-bound: the host issues forward and
    backward (64.7 ms) then the optimizer's Python, and the GPU runs the optimizer's 10 ms after it, with or without a
    synchronisation between them."""
    plain = predicted("llama3.2-1b b1 s2048", plain_loop_presets(tmp_path), framework=PLAIN_LOOP)
    assert plain["t_step"] == pytest.approx(0.07685, rel=2e-3)
    assert abs(plain["t_step"] / measured("llama3.2-1b b1 s2048")["t_step_profiled_run"] - 1) <= 0.10
    # and the large step, GPU-bound, hides the optimizer's Python under its backlog without the synchronisation
    assert predicted("llama3.2-1b b4 s4096", tmp_path, framework=PLAIN_LOOP)["t_host"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("name", list(STEPS))
def test_the_uncalibrated_hf_step_is_within_10_percent(name: str) -> None:
    """fit --gpu h200 --framework hf against the measured step (train-steps.json, median of 5 unprofiled steps):
    352.5 / 442.3 / 76.9 ms against 367.0 / 463.3 / 80.6 (-4.0 / -4.5 / -4.6 %) with the host following the loop's
    synchronisation and its cost without the profiler's share (350.6 / 439.1 / 85.8, -4.5 / -5.2 / +6.5 % before);
    350.2 / 440.3 / 86.5 ms (-4.6 / -5.0 / +7.4 %) when the parts first each held; before
    the parts did, 343.2 / 427.1 / 84.4 (-6.5 / -7.8 / +4.7 %: GEMMs too slow, memory-bound kernels too fast); before
    the H200's own measurements 383.1 / 496.4 / 56.7 (+4.4 / +7.1 / -29.6 %) with the GEMM share of an H100 run."""
    p, m = predicted(name), measured(name)
    assert abs(p["t_step"] / m["t_step"] - 1) <= 0.10
    assert p["t_step"] == pytest.approx(sum(p[k] for k in ("t_gemm", "t_attention", "t_memory_bound", "t_optimizer", "t_host")), rel=1e-9)


# Each part against the profile's kernel time of that kind (the issue: within 25 %). What holds is asserted; what does
# not is a strict xfail naming why, so that it fails the day it starts to hold.
PART_HOLDS = {
    ("llama3.2-1b b4 s4096", "t_gemm"): True,  # -4.7 % (+17.8 % at the sweep's clock)
    ("llama3.2-3b b2 s4096", "t_gemm"): True,  # -6.4 % (+15.6 %)
    ("llama3.2-1b b1 s2048", "t_gemm"): True,  # +10.1 % (+32.4 %): charged the capped clock; the step ran at 1980 MHz
    ("llama3.2-1b b4 s4096", "t_attention"): True,  # -4.3 %
    ("llama3.2-3b b2 s4096", "t_attention"): True,  # -2.2 % (-11.9 % at one rate a head dimension, before the tiles)
    ("llama3.2-1b b1 s2048", "t_attention"): True,  # +0.5 % (-24.0 %: each tile's fixed cost and the last wave at 2,048 tokens)
    ("llama3.2-1b b4 s4096", "t_memory_bound"): True,  # -1.7 % (-28.7 % with every kernel at the HBM rate)
    ("llama3.2-3b b2 s4096", "t_memory_bound"): True,  # -3.6 % (-33.4 %)
    ("llama3.2-1b b1 s2048", "t_memory_bound"): True,  # +0.5 % (-25.7 %)
    ("llama3.2-1b b4 s4096", "t_optimizer"): True,  # +6.7 % (-14.6 % without the launches' SM imbalance)
    ("llama3.2-3b b2 s4096", "t_optimizer"): True,  # +6.3 % (-14.9 %)
    ("llama3.2-1b b1 s2048", "t_optimizer"): True,  # +8.5 % (-13.2 %)
}


@pytest.mark.parametrize(("name", "part"), [pytest.param(n, k, marks=() if holds else pytest.mark.xfail(strict=True, reason="known gap"))
                                            for (n, k), holds in PART_HOLDS.items()])  # fmt: skip
def test_each_part_within_25_percent_of_the_profile(name: str, part: str) -> None:
    assert abs(predicted(name)[part] / measured(name)[part] - 1) <= 0.25


def test_fit_json_results_have_the_step_by_kind() -> None:
    result = CliRunner().invoke(app, fit_args("llama3.2-1b b4 s4096"))
    results = json.loads(result.stdout)["results"]
    assert {"t_gemm", "t_attention", "t_memory_bound", "t_host", "t_optimizer"} <= set(results)
    kinds = results["t_gemm"]["value"] + results["t_attention"]["value"] + results["t_memory_bound"]["value"]
    assert kinds == pytest.approx(results["t_compute"]["value"], rel=1e-12)
    assert results["t_gemm"]["formula"] == "m × G_mb"


KIND_CASES = {
    "dense, selective recomputation": ["--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--tp", "8", "--pp", "1", "--dp", "1",
                                       "--sequence-parallel", "--recompute", "selective"],
    "dense, full, pp 4 uneven": ["--model", "llama3-70b", "--gpu", "h100-sxm5", "--gpus", "64", "--tp", "8", "--pp", "4", "--dp", "2",
                                 "--batch", "64", "--recompute", "full", "--first-stage-layers", "17"],
    "fsdp2 eager, op-level": ["--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--framework", "fsdp2", "--tp", "1", "--pp", "1",
                              "--dp", "8", "--zero", "3", "--recompute", "op"],
    "MoE, fp8": ["--model", "mixtral-8x7b", "--gpu", "h100-sxm5", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--ep", "4",
                 "--precision", "fp8", "--recompute", "full", "--batch", "64"],
}  # fmt: skip


@pytest.mark.parametrize("case", list(KIND_CASES))
def test_the_kinds_add_up_to_the_compute_term(case: str) -> None:
    """t_gemm + t_attention + t_memory_bound = t_compute for recomputation of every kind, uneven pipeline stages, an MoE
    model under FP8 (the kinds are the same kernels as the compute term, summed by kind)."""
    result = CliRunner().invoke(app, ["fit", *KIND_CASES[case], "--format", "json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    kinds = results["t_gemm"]["value"] + results["t_attention"]["value"] + results["t_memory_bound"]["value"]
    assert kinds == pytest.approx(results["t_compute"]["value"], rel=1e-9)
    assert results["t_gemm"]["value"] > results["t_memory_bound"]["value"] > 0
    assert "t_host" not in results  # no host costs measured for these profiles: not modelled


@pytest.mark.parametrize("seed", range(40))
def test_the_vectorised_host_model_is_the_phase_by_phase_one(seed: int) -> None:
    """host_exposed_repeated (fit --search, on arrays) = host_exposed_segments over the step's segments: [forward,
    backward] x m, the optimizer's Python, its launches, in one segment or synchronised after every backward."""
    from parcalc.core.timing.host import host_exposed_repeated

    rng = np.random.default_rng(seed)
    h_f, g_f, h_b, g_b, h_o, g_o, h_pre = rng.exponential(1.0, 7) * rng.choice([0.01, 1.0, 100.0], 7)
    m = int(rng.integers(1, 9))
    for synced in (False, True):
        expected = host_exposed_segments(step_segments(h_f, g_f, h_b, g_b, m, h_pre, h_o, g_o, synced))
        assert float(host_exposed_repeated(h_f, g_f, h_b, g_b, m, h_o, g_o, h_pre, synced)) == pytest.approx(expected, rel=1e-9, abs=1e-12)


SEARCH_AGREES = {
    "1B b1 s2048 on one H200 (host-bound)": ["--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--gpus", "1", "--batch", "1",
                                             "--seq-len", "2048"],
    # one micro-batch of 1 per GPU: host-bound, as the b1 step (the top table shows distinct layouts, one here: DP 8)
    "1B b8 s2048 on 8 H200, DDP, 1 micro-batch": ["--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--gpus", "8", "--batch",
                                                   "8", "--seq-len", "2048"],
}  # fmt: skip


@pytest.mark.parametrize("case", list(SEARCH_AGREES))
def test_the_search_counts_the_host_as_a_pinned_layout_does(case: str) -> None:
    """fit --search ranked the hf profile's configurations without t_host (56.4 ms for the b1 step, where the pinned layout
    gives 84.4); every configuration of its top table now has the pinned layout's t_step and t_host."""
    args = ["fit", *SEARCH_AGREES[case], "--framework", "hf", "--format", "json"]
    found = CliRunner().invoke(app, [*args, "--search", "--top", "3"])
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)["tables"]["top"]["rows"]
    assert any(row["t_host"] > 0 for row in rows)
    for row in rows:
        pinned = ["--tp", str(row["tp"]), "--pp", str(row["pp"]), "--dp", str(row["dp"]), "--micro-batch", str(row["micro_batch"]),
                  "--recompute", row["recompute"], "--zero", str(row["zero"])]  # fmt: skip
        one = CliRunner().invoke(app, [*args, *pinned])
        assert one.exit_code == 0, one.output
        results = json.loads(one.stdout)["results"]
        assert row["t_step"] == pytest.approx(results["t_step"]["value"], rel=1e-9)
        assert row["t_host"] == pytest.approx(results.get("t_host", {"value": 0.0})["value"], rel=1e-9, abs=1e-12)
