"""Start-up cost of a one-liner: `parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32` against
`python -c "import typer"`, both as whole processes, median of several runs. Run by hand:

    python benchmarks/startup.py [runs]

Aim (the project's bar): every one-liner, a command that answers one question from a few flags
(peak-flops, intensity, comm-volume, bubble, flops), at most 1.3x `import typer`; each is timed
with its ratio, and the gap to peak-flops (the cheapest) shows a command that imports too much.

The commands take turns (one run of each, then the next round), so that a slow spell of a
shared machine falls on all of them alike and the differences stay meaningful; the preset
cache is warmed first, as a user's would be after the first run.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

PYTHON = sys.executable
BASELINE = [PYTHON, "-c", "import typer"]
# An installed wheel has compiled bytecode; a shell that forbids writing it would time the
# compiler instead of parcalc.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
REFERENCE = "peak-flops"
BAR = 1.3  # the most a one-liner may take, as a multiple of `python -c "import typer"`
COMMANDS = {
    "peak-flops": ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"],
    "intensity": ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--gpu", "a100-sxm4-80gb"],
    "intensity no gpu": ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--dtype", "fp16"],
    "intensity layer": ["intensity", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb"],
    "comm-volume collective": ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--link", "nvlink3"],
    "comm-volume all": ["comm-volume", "--strategy", "all", "--model", "gpt3-175b", "--batch", "1536", "--seq-len", "2048"],
    "comm-volume 3d": ["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "4",
                       "--batch", "1536", "--seq-len", "2048"],
    # the same line in Megatron-LM's spelling: what the hidden aliases (parcalc.flags) cost when used
    "comm-volume 3d megatron": ["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tensor-model-parallel-size", "8",
                                "--pipeline-model-parallel-size", "8", "--dp", "4", "--global-batch-size", "1536",
                                "--seq-length", "2048"],
    "bubble": ["bubble", "--pp", "4", "--micro-batches", "16", "--schedule", "1f1b"],
    "flops": ["flops", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096"],
}  # fmt: skip


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return elapsed


def taking_turns(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Each parcalc command line and `import typer` (key "import typer") run `runs` times in turn, after one warm-up each
    (the file cache, the bytecode, the preset cache): their wall seconds, run by run."""
    argvs = {"import typer": BASELINE} | {name: [PYTHON, "-m", "parcalc", *args] for name, args in commands.items()}
    for argv in argvs.values():
        seconds(argv)
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(runs):
        for name, argv in argvs.items():
            times[name].append(seconds(argv))
    return times


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    times = taking_turns(COMMANDS, runs)
    medians = {name: statistics.median(values) for name, values in times.items()}
    baseline = medians["import typer"]
    print(f"python -c 'import typer'         {baseline * 1e3:7.1f} ms  (median of {runs}, commands taking turns; "
          f"bar {BAR}x = {BAR * baseline * 1e3:.1f} ms)")
    for name in COMMANDS:
        seconds_ = medians[name]
        # the gap as the median of the differences within a round: runs taken back to back
        paired = statistics.median(a - b for a, b in zip(times[name], times[REFERENCE], strict=True))
        gap = "" if name == REFERENCE else f"  {paired * 1e3:+6.1f} ms vs {REFERENCE} (median of paired differences)"
        over = "  OVER" if seconds_ / baseline > BAR else "      "
        print(f"parcalc {name:<25} {seconds_ * 1e3:7.1f} ms  ratio {seconds_ / baseline:.2f}x{over}{gap}")


if __name__ == "__main__":
    main()
