"""The host's time per kernel of compiled code (--compile: Inductor's generated wrapper; parcalc.core.timing.host
CompiledHostCosts), a mechanism of its own beside the eager host's (tests/test_step_parts.py): each number from its source,
the step's phases by kind of kernel, and what the shared H200 steps become with it.

Sources (presets/frameworks/hf.yaml, compiled_host):
- a generated (Triton) kernel's launch: meta-pytorch/tritonbench pull request #1017 (GB200, CachingAutotuner.run of a
  19-argument kernel, 9.1 us; cuLaunchKernel alone 3.3 us);
- an extern kernel: the same ATen op's host time in the eager b4 trace (tests/fixtures/h200/trace-llama1b-b4-s4096.json.gz,
  ../shared/measurements/h200-2026-11-28), less the profiler's share of the forward (/ 1.30);
- the wrapper's own lines per kernel: benchmarks/compiled_wrapper_host.py, real PyTorch 2.13 on the CPU (1.832 us).
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.timing.host import PROFILED_HOST_SLOWDOWN, CompiledHostCosts, host_exposed_segments, step_segments
from parcalc.errors import PresetError
from parcalc.presets import load_framework

sys.path.insert(0, str(Path(__file__).parent))
from step_parts_cases import FIXTURES, STEPS, fit_args

US = 1e-6
COMPILED = load_framework("hf").compiled_host
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel", "cudaMemsetAsync", "cudaLaunchKernelExC")


def results(name: str, *extra: str, compiled: bool = True) -> dict[str, Any]:
    """fit's results (JSON) for a shared step's shape, compiled or not, with `extra` arguments replacing its own."""
    args = fit_args(name)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        args[args.index(flag) + 1] = value
    result = CliRunner().invoke(app, args + (["--compile"] if compiled else []))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"]


def unblocked_op_medians(path: Path, names: tuple[str, ...]) -> dict[str, tuple[int, float]]:
    """(calls, median host seconds) of each named ATen op in a Kineto trace: its CPU duration less what each launch inside it
    stayed blocked beyond that launch call's median (a full launch queue; parcalc.core.calibrate.trace.traced_host's rule)."""
    with gzip.open(path) as trace:
        events = [e for e in json.load(trace)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    launches: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["name"] in LAUNCHES:
            launches[e["tid"]].append(e)
    median = {n: statistics.median(e["dur"] for calls in launches.values() for e in calls if e["name"] == n)
              for n in {e["name"] for calls in launches.values() for e in calls}}  # fmt: skip
    for calls in launches.values():
        calls.sort(key=lambda e: e["ts"])
    starts = {tid: [e["ts"] for e in calls] for tid, calls in launches.items()}
    out = {}
    for name in names:
        host = []
        for op in (e for e in events if e["name"] == name):
            calls, i, blocked = launches[op["tid"]], bisect.bisect_left(starts[op["tid"]], op["ts"]), 0.0
            while i < len(calls) and calls[i]["ts"] + calls[i]["dur"] <= op["ts"] + op["dur"]:
                blocked += max(calls[i]["dur"] - median[calls[i]["name"]], 0.0)
                i += 1
            host.append(op["dur"] - blocked)
        out[name] = (len(host), statistics.median(host) * US)
    return out


def test_extern_kernels_cost_what_their_aten_op_cost_in_the_eager_trace() -> None:
    """An extern kernel of the compiled wrapper is the ATen op eager code calls (extern_kernels.mm is aten::mm with out=; the
    SDPA fallback is aten::_scaled_dot_product_cudnn_attention and its backward), cuBLASLt's and cuDNN's host work included:
    in the b4 trace, 30.08 us over 339 mm calls, 94.53 and 178.39 us over 16 attention ops each way; the profiler's share of
    the forward (/ 1.30) taken out: 23.14, 72.71, 137.22 us."""
    ops = unblocked_op_medians(FIXTURES / "trace-llama1b-b4-s4096.json.gz",
                               ("aten::mm", "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward"))
    (n_mm, mm), (n_af, af), (n_ab, ab) = ops.values()
    assert (n_mm, n_af, n_ab) == (339, 16, 16)  # 7 x 16 + 1 forward GEMMs (the LM head) x 3 (forward, dgrad, wgrad); 16 layers
    assert (mm, af, ab) == pytest.approx((30.08 * US, 94.53 * US, 178.39 * US), rel=1e-3)
    assert COMPILED is not None
    slowdown = PROFILED_HOST_SLOWDOWN["forward"]
    assert (COMPILED.gemm, COMPILED.attention_forward, COMPILED.attention_backward) == pytest.approx(
        (mm / slowdown, af / slowdown, ab / slowdown), rel=1e-3)


def test_generated_kernels_and_the_wrapper_are_their_measurements() -> None:
    """A generated kernel's launch is tritonbench #1017's CachingAutotuner.run for a 19-argument kernel (9.1 us on GB200,
    above cuLaunchKernel's own 3.3 us), the wrapper's own lines benchmarks/compiled_wrapper_host.py's 1.832 us per kernel line
    (real PyTorch 2.13 on the CPU); both far below eager's 30.56 / 28.76 us per kernel (Python model code, autograd)."""
    assert COMPILED is not None
    assert COMPILED.generated == pytest.approx(9.1 * US)
    assert COMPILED.wrapper == pytest.approx(1.832 * US)
    eager = load_framework("hf").host
    assert eager is not None and COMPILED.generated + COMPILED.wrapper < min(eager.forward, eager.backward) / 2.5


def test_a_phase_costs_each_kind_of_kernel_its_own_host_time() -> None:
    """H = generated x c_g + GEMMs x c_mm + attention ops x c_attention + every kernel x c_w."""
    costs = CompiledHostCosts(generated=1.0, gemm=10.0, attention_forward=100.0, attention_backward=1000.0, wrapper=0.5, source="test")
    assert costs.phase(2, 3, 1, backward=False) == pytest.approx(2 * 1.0 + 3 * 10.0 + 100.0 + 6 * 0.5)
    assert costs.phase(2, 3, 1, backward=True) == pytest.approx(2 * 1.0 + 3 * 10.0 + 1000.0 + 6 * 0.5)


def test_the_compiled_step_issues_its_kernels_by_kind() -> None:
    """1B, b 1, s 2048 compiled (parcalc.core.timing.hf_compiled_kernels): forward 16 x (12 generated + 7 GEMMs + 1 attention)
    + the ends (5 generated, the LM head) = 197 + 113 + 16 = 326 kernels; backward 16 x (14 + 14 + 1) + the ends (6 generated,
    the head's dgrad and wgrad) = 230 + 226 + 16 = 472. Its host: H_f = 197 x 9.1 + 113 x 23.14 + 16 x 72.71 + 326 x 1.832 us
    = 6.17 ms (9.96 ms at the eager 30.56 us a kernel); H_b = 230 x 9.1 + 226 x 23.14 + 16 x 137.22 + 472 x 1.832 us
    = 10.38 ms (13.57 ms)."""
    got = {k: v["value"] for k, v in results("llama3.2-1b b1 s2048")["t_host"]["inputs"].items()}
    assert (got["g_f"], got["k_f"], got["a_f"], got["g_b"], got["k_b"], got["a_b"]) == (197, 113, 16, 230, 226, 16)
    h_f = got["g_f"] * got["c_g"] + got["k_f"] * got["c_mm"] + got["a_f"] * got["c_af"] + 326 * got["c_w"]
    h_b = got["g_b"] * got["c_g"] + got["k_b"] * got["c_mm"] + got["a_b"] * got["c_ab"] + 472 * got["c_w"]
    assert (h_f, h_b) == pytest.approx((6.1681e-3, 10.3829e-3), rel=1e-4)
    # eager, the same step keeps its per-phase costs (tests/test_step_parts.py): n x c
    eager = {k: v["value"] for k, v in results("llama3.2-1b b1 s2048", compiled=False)["t_host"]["inputs"].items()}
    assert (eager["n_f"], eager["n_b"], eager["c_f"], eager["c_b"]) == pytest.approx((785, 1416, 30.56 * US, 28.76 * US))


@pytest.mark.parametrize("name", list(STEPS))
def test_the_shared_steps_compiled_hide_the_model_hosts_work(name: str) -> None:
    """The three shared H200 steps compiled are GPU-bound in every phase (1B b1 s2048: H_f 6.17 ms under G_f 11.17, H_b 10.38
    under G_b 21.68), as they were at the eager costs (9.96, 13.57 ms): t_host is the optimizer's Python alone, exposed by
    the Trainer's synchronisation after the backward, n_p x c_p (146 x 14.646 us = 2.138 ms for 1B; 3B's 254 tensors)."""
    got = results(name)["t_host"]
    inputs = {k: v["value"] for k, v in got["inputs"].items()}
    assert got["value"] == pytest.approx(inputs["n_p"] * inputs["c_p"], rel=1e-9)
    assert got["value"] == pytest.approx({"llama3.2-1b": 2.1383e-3, "llama3.2-3b": 3.7201e-3}[STEPS[name][0]], rel=1e-4)


def test_a_small_compiled_step_waits_for_the_compiled_host() -> None:
    """1B, b 1, s 512 compiled is host-bound (G_f 4.87 ms, G_b 8.82 ms): the fluid model over the compiled costs, 4.99 ms,
    where the eager cost per kernel gave 11.98 ms (parcalc before the compiled host); the eager step (t_host 44.3 ms) is
    unchanged."""
    got = results("llama3.2-1b b1 s2048", "--seq-len", "512")["t_host"]
    i = {k: v["value"] for k, v in got["inputs"].items()}
    h_f = i["g_f"] * i["c_g"] + i["k_f"] * i["c_mm"] + i["a_f"] * i["c_af"] + (i["g_f"] + i["k_f"] + i["a_f"]) * i["c_w"]
    h_b = i["g_b"] * i["c_g"] + i["k_b"] * i["c_mm"] + i["a_b"] * i["c_ab"] + (i["g_b"] + i["k_b"] + i["a_b"]) * i["c_w"]
    expected = host_exposed_segments(step_segments(h_f, i["G_f"], h_b, i["G_b"], 1, i["n_p"] * i["c_p"], i["n_o"] * i["c_o"], i["G_o"], True))
    assert got["value"] == pytest.approx(expected, rel=1e-9)
    assert got["value"] == pytest.approx(4.990e-3, rel=2e-3)
    assert "g_f × c_g" in got["formula"] and any("compiled" in a for a in got["assumptions"])
    assert results("llama3.2-1b b1 s2048", "--seq-len", "512", compiled=False)["t_host"]["value"] == pytest.approx(44.32e-3, rel=2e-3)


def test_the_search_counts_the_compiled_host_as_a_pinned_layout_does() -> None:
    """fit --search --compile: each row of its top table has the pinned layout's t_host (the search's vectorised model takes
    each phase's host time from the same compiled costs)."""
    args = ["fit", "--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--gpus", "1", "--batch", "1", "--seq-len", "512",
            "--framework", "hf", "--compile", "--format", "json"]  # fmt: skip
    found = CliRunner().invoke(app, [*args, "--search", "--top", "3"])
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)["tables"]["top"]["rows"]
    assert any(row["t_host"] > 0 for row in rows)
    for row in rows:
        pinned = ["--tp", str(row["tp"]), "--pp", str(row["pp"]), "--dp", str(row["dp"]), "--micro-batch", str(row["micro_batch"]),
                  "--recompute", row["recompute"], "--zero", str(row["zero"])]  # fmt: skip
        one = CliRunner().invoke(app, [*args, *pinned])
        assert one.exit_code == 0, one.output
        assert row["t_host"] == pytest.approx(json.loads(one.stdout)["results"]["t_host"]["value"], rel=1e-9, abs=1e-12)


def test_a_compiled_host_block_without_a_cost_is_refused(tmp_path: Path) -> None:
    """A profile's compiled_host block names every cost (a missing one is a preset error, not a silent 0)."""
    text = (Path(__file__).parent.parent / "presets" / "frameworks" / "hf.yaml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("compiled_host:"))
    (tmp_path / "frameworks").mkdir()
    (tmp_path / "frameworks" / "hf-broken.yaml").write_text(text.replace(line, line.replace("wrapper: 1.832 us, ", "")))
    with pytest.raises(PresetError, match="wrapper"):
        load_framework("hf-broken", (tmp_path,))
