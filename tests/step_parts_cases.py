"""The shared H200 steps (tests/fixtures/h200, measured on one H200: ../shared/measurements/h200-2026-11-28) as fit
predicts them with --gpu h200 --framework hf, part by part, beside the profile's kernel time of each kind.

    python tests/step_parts_cases.py                # prints the table of docs/step-time.md
    python tests/step_parts_cases.py --calibrated   # before and after `calibrate trace` from the b4 trace (docs/calibrate-trace.md),
                                                    # against the profiles' kernels as calibrate trace sorts them
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
# name in train-steps.json -> (model fixture, b, s)
STEPS = {"llama3.2-1b b4 s4096": ("llama3.2-1b", 4, 4096), "llama3.2-3b b2 s4096": ("llama3.2-3b", 2, 4096),
         "llama3.2-1b b1 s2048": ("llama3.2-1b", 1, 2048)}  # fmt: skip
KINDS = ("t_gemm", "t_attention", "t_memory_bound", "t_optimizer", "t_host")


def fit_args(name: str) -> list[str]:
    model, b, s = STEPS[name]
    return ["fit", "--model", str(FIXTURES / f"{model}.json"), "--gpus", "1", "--gpu", "h200", "--framework", "hf", "--batch", str(b),
            "--micro-batch", str(b), "--seq-len", str(s), "--flash-attention", "--recompute", "none", "--tp", "1", "--pp", "1", "--dp", "1",
            "--format", "json"]  # fmt: skip


# The unprofiled loop of h200_profile.py (train-step-profiles.json's t_step_s): it synchronises only around each step
# (h200_profile.py line 99: torch.cuda.synchronize(); t0 = ...; step(); torch.cuda.synchronize()), not after the backward
PLAIN_LOOP = "hf-plain-loop"


def plain_loop_presets(folder: Path) -> Path:
    """A presets folder with the hf profile as h200_profile.py's loop runs it (PLAIN_LOOP): no synchronisation inside the step."""
    text = (Path(__file__).parent.parent / "presets" / "frameworks" / "hf.yaml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("sync_after_backward:"))
    text = text.replace(line, 'sync_after_backward: {value: false, source: plain_loop}').replace(
        "sources:\n", 'sources:\n  plain_loop: "../shared/measurements/h200-2026-11-28/h200_profile.py line 99: synchronised around each step only"\n', 1)
    (folder / "frameworks").mkdir(parents=True, exist_ok=True)
    (folder / "frameworks" / f"{PLAIN_LOOP}.yaml").write_text(text)
    return folder


def predicted(name: str, presets: Path | None = None, gpu: str = "h200", framework: str = "hf") -> dict[str, float]:
    """fit's step and its parts (seconds) for one shared step (on `gpu` from `presets`: a calibrated preset)."""
    from typer.testing import CliRunner

    from parcalc.cli import app

    args = fit_args(name)
    args[args.index("h200")] = gpu
    args[args.index("hf")] = framework
    result = CliRunner().invoke(app, args + (["--presets", str(presets)] if presets is not None else []))
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    clock = results["t_gemm"]["inputs"].get("f_SM")  # the step's SM clock under the power limit (parcalc.core.timing.step_clock)
    host = {f"host.{k}": v["value"] for k, v in results["t_host"]["inputs"].items()} if "t_host" in results else {}
    return {key: results[key]["value"] for key in ("t_step", *KINDS) if key in results} | ({"f_SM": clock["value"]} if clock else {}) | host


def segments(p: dict[str, float]) -> dict[str, float]:
    """The predicted step's two sync-separated segments (one micro-batch), as the measured loop times them: forward and
    backward (train-steps.json's t_fwdbwd_s), the optimizer step with zero_grad (t_opt_s); parcalc.core.timing.host."""
    from parcalc.core.timing.host import host_exposed, step_segments

    h = {k.removeprefix("host."): v for k, v in p.items() if k.startswith("host.")}
    parts = step_segments(h["n_f"] * h["c_f"], h["G_f"], h["n_b"] * h["c_b"], h["G_b"], 1, h["n_p"] * h["c_p"], h["n_o"] * h["c_o"],
                          h["G_o"], True)  # fmt: skip
    fwdbwd, optimizer = (host_exposed(seg) + sum(x.gpu for x in seg) for seg in parts)
    return {"t_fwdbwd": fwdbwd, "t_opt": optimizer}


def measured_clock(name: str) -> float:
    """Hz: the median of the nvidia-smi SM clock samples taken while the profiled steps ran (train-step-profiles.json)."""
    import statistics

    profile = {c["name"]: c for c in json.loads((FIXTURES / "train-step-profiles.json").read_text())["configs"]}[name]
    return statistics.median(float(s.split(", ")[0]) for s in profile["smi_samples"]) * 1e6


def measured(name: str) -> dict[str, float]:
    """The step (train-steps.json, unprofiled median) and its kernel time by kind (train-step-profiles.json: torch.profiler):
    GEMMs, attention, memory-bound (element-wise + reduction + loss), the optimizer's kernels (multi_tensor_apply only:
    the profile's 'optimizer' also counts the Optimizer.step annotation's GPU range, the same time twice), GPU busy and wall."""
    steps = {s["name"]: s for s in json.loads((FIXTURES / "train-steps.json").read_text())["steps"]}
    profile = {c["name"]: c for c in json.loads((FIXTURES / "train-step-profiles.json").read_text())["configs"]}[name]
    kinds = profile["kernel_s_by_kind"]
    optimizer = sum(k["s_per_step"] for k in profile["top_kernels"] if k["kind"] == "optimizer" and "multi_tensor_apply" in k["name"])
    return {"t_step": steps[name]["t_step_s"], "t_step_profiled_run": profile["t_step_s"], "t_gemm": kinds["gemm"],
            "t_attention": kinds["attention"], "t_memory_bound": kinds["elementwise"] + kinds["reduction"] + kinds.get("loss", 0.0),
            "t_optimizer": optimizer, "gpu_busy": profile["gpu_busy_s"], "t_opt_step": steps[name]["t_opt_s"],
            "t_fwdbwd": steps[name]["t_fwdbwd_s"], "t_opt": steps[name]["t_opt_s"]}  # fmt: skip


def measured_as_parcalc_sorts(name: str) -> dict[str, float]:
    """measured(), its kernel time by kind as parcalc.core.calibrate.trace.kernel_kind sorts a trace's kernels: cuDNN's
    attention helpers (cudnn::fusion::compute_dot_do_o_specialized, convert_dq_to_16bits, launched by
    aten::_cudnn_attention_backward) moved from the profile's element-wise kernels to attention (their s_per_step in
    train-step-profiles.json's top_kernels: 2.06 / 2.70 / 0.32 ms of the 1B b4 / 3B b2 / 1B b1 steps)."""
    from parcalc.core.calibrate.trace import kernel_kind

    profile = {c["name"]: c for c in json.loads((FIXTURES / "train-step-profiles.json").read_text())["configs"]}[name]
    helpers = sum(k["s_per_step"] for k in profile["top_kernels"] if k["kind"] == "elementwise" and kernel_kind(k["name"]) == "attention")
    m = measured(name)
    return m | {"t_attention": m["t_attention"] + helpers, "t_memory_bound": m["t_memory_bound"] - helpers}


def calibrated_table() -> None:
    """Each step's parts before and after a preset calibrated from the b4 trace (the b4 row is the one it was fitted on)."""
    import tempfile

    from typer.testing import CliRunner

    from parcalc.cli import app

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "gpus").mkdir()
        made = CliRunner().invoke(app, ["calibrate", "trace", str(FIXTURES / "trace-llama1b-b4-s4096.json.gz"), "--model",
                                        str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--framework", "hf", "--batch", "4",
                                        "--seq-len", "4096", "-o", str(Path(folder) / "gpus" / "traced.yaml")])  # fmt: skip
        assert made.exit_code == 0, made.output
        for name in STEPS:
            before, after, m = predicted(name), predicted(name, Path(folder), "traced"), measured_as_parcalc_sorts(name)
            print(f"{name}{' (calibrated on it)' if name == 'llama3.2-1b b4 s4096' else ''}:")
            for key in (*KINDS[:4], "t_step"):
                print(f"   {key:15s} measured {m[key] * 1e3:7.1f} ms   before {before[key] * 1e3:7.1f} ({before[key] / m[key] - 1:+.1%})"
                      f"   after {after[key] * 1e3:7.1f} ({after[key] / m[key] - 1:+.1%})")
            print(f"   {'t_host':15s} before {before.get('t_host', 0) * 1e3:7.1f} ms   after {after.get('t_host', 0) * 1e3:7.1f} ms")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc
    if "--calibrated" in sys.argv:
        calibrated_table()
        sys.exit(0)
    for name in STEPS:
        p, m = predicted(name), measured(name)
        print(f"{name}: step {p['t_step'] * 1e3:.1f} ms vs {m['t_step'] * 1e3:.1f} ({p['t_step'] / m['t_step'] - 1:+.1%}; "
              f"profiled run {m['t_step_profiled_run'] * 1e3:.1f})")
        if "f_SM" in p:
            print(f"   SM clock {p['f_SM'] / 1e6:7.1f} MHz vs {measured_clock(name) / 1e6:7.1f} ({p['f_SM'] / measured_clock(name) - 1:+.1%}; "
                  "median of the nvidia-smi samples)")
        for key in KINDS[:4]:
            print(f"   {key:15s} {p[key] * 1e3:7.1f} ms vs {m[key] * 1e3:7.1f} ({p[key] / m[key] - 1:+.1%})")
        print(f"   {'t_host':15s} {p.get('t_host', 0) * 1e3:7.1f} ms (wall - GPU busy in the profiled run: "
              f"{(m['t_step_profiled_run'] - m['gpu_busy']) * 1e3:.1f})")
        for key, value in segments(p).items():
            print(f"   {key + ' segment':15s} {value * 1e3:7.1f} ms vs {m[key] * 1e3:7.1f} ({value / m[key] - 1:+.1%}; the loop's own timing)")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        plain = predicted("llama3.2-1b b1 s2048", plain_loop_presets(Path(folder)), framework=PLAIN_LOOP)
        m = measured("llama3.2-1b b1 s2048")
        print(f"llama3.2-1b b1 s2048, h200_profile.py's loop (no sync inside the step): {plain['t_step'] * 1e3:.1f} ms vs "
              f"{m['t_step_profiled_run'] * 1e3:.1f} ({plain['t_step'] / m['t_step_profiled_run'] - 1:+.1%}), t_host {plain['t_host'] * 1e3:.1f} ms")
