"""Start-up cost of a one-liner: `parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32` against
`python -c "import typer"`, both as whole processes, median of several runs. Run by hand:

    python benchmarks/startup.py [runs]

Aim: ratio <= 1.5. Extra commands are timed too, to catch a command that imports too much.
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
COMMANDS = {
    "peak-flops": ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"],
    "intensity": ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--gpu", "a100-sxm4-80gb"],
    "comm-volume all": ["comm-volume", "--strategy", "all", "--model", "gpt3-175b", "--batch", "1536", "--seq-len", "2048"],
}


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    median_seconds(BASELINE, 2)  # warm the file cache
    baseline = median_seconds(BASELINE, runs)
    print(f"python -c 'import typer'      {baseline * 1e3:7.1f} ms  (median of {runs})")
    for name, args in COMMANDS.items():
        try:
            seconds = median_seconds([PYTHON, "-m", "parcalc", *args], runs)
        except SystemExit as skipped:
            print(f"parcalc {name:<22} skipped: {skipped}")
            continue
        print(f"parcalc {name:<22} {seconds * 1e3:7.1f} ms  ratio {seconds / baseline:.2f}x")


if __name__ == "__main__":
    main()
