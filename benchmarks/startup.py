"""Start-up cost of a one-liner: `parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32` against
`python -c "import typer"`, both as whole processes, median of several runs. Run by hand:

    python benchmarks/startup.py [runs]

Aims: peak-flops at most 1.5x `import typer`; `comm-volume --strategy all` on GPT-3 175B at most
3 ms slower than peak-flops (issue 3). Extra commands are timed too, to catch a command that
imports too much.

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
COMMANDS = {
    "peak-flops": ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"],
    "intensity": ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--gpu", "a100-sxm4-80gb"],
    "comm-volume all": ["comm-volume", "--strategy", "all", "--model", "gpt3-175b", "--batch", "1536", "--seq-len", "2048"],
    "comm-volume 3d": ["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "4",
                       "--batch", "1536", "--seq-len", "2048"],
    # the same line in Megatron-LM's spelling: what the hidden aliases (parcalc.flags) cost when used
    "comm-volume 3d megatron": ["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tensor-model-parallel-size", "8",
                                "--pipeline-model-parallel-size", "8", "--dp", "4", "--global-batch-size", "1536",
                                "--seq-length", "2048"],
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
    print(f"python -c 'import typer'      {baseline * 1e3:7.1f} ms  (median of {runs}, commands taking turns)")
    for name in COMMANDS:
        seconds_ = medians[name]
        # the gap as the median of the differences within a round: runs taken back to back
        paired = statistics.median(a - b for a, b in zip(times[name], times[REFERENCE], strict=True))
        gap = "" if name == REFERENCE else f"  {paired * 1e3:+6.1f} ms vs {REFERENCE} (median of paired differences)"
        print(f"parcalc {name:<22} {seconds_ * 1e3:7.1f} ms  ratio {seconds_ / baseline:.2f}x{gap}")


if __name__ == "__main__":
    main()
