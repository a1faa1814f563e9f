"""Start-up cost of a one-liner: `parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32` against
`python -c "import typer"`, both as whole processes, median of several runs. Run by hand:

    python benchmarks/startup.py [runs]
    python benchmarks/startup.py --instructions    # each once under valgrind: a count that load does not move

Aim (the project's bar): every one-liner, a command that answers one question from a few flags
(peak-flops, intensity, comm-volume, bubble, flops), at most 1.3x `import typer`; each is timed
with its ratio, and the gap to peak-flops (the cheapest) shows a command that imports too much.

The commands take turns (one run of each, then the next round), so that a slow spell of a
shared machine falls on all of them alike and the differences stay meaningful; the preset
cache is warmed first, as a user's would be after the first run.

Session 24 (before: 8c24843; after: the commit that added these lines; every one-liner's stdout, stderr and exit code
unchanged). Instructions (`--instructions`, valgrind's callgrind, one run each: a count that other work on the machine
does not move, though `import typer`'s varies by ~1 % with the files in the current directory, which the import system
lists), millions, each once, and after's ratio to `python -c "import typer"`'s 240.6 M:

    one-liner                   before    after    after / before    after / import typer
    peak-flops                  284.6     272.4    0.957             1.132x
    intensity                   297.0     284.2    0.957             1.180x
    intensity no gpu            274.6     263.5    0.959             1.094x
    intensity layer             324.1     317.6    0.980             1.319x
    comm-volume collective      304.4     301.1    0.989             1.251x
    comm-volume all             345.6     341.6    0.988             1.419x
    comm-volume 3d              346.9     342.9    0.988             1.425x
    comm-volume 3d megatron     349.3     345.3    0.988             1.434x
    bubble                      294.3     292.4    0.994             1.215x
    flops                       305.4     299.4    0.980             1.244x

The instruction ratios run above the seconds' because `import typer` alone spends 34 M instructions (4.6 ms) in 29
passes of the garbage collector, which a one-liner defers (parcalc.__main__, ParcalcGroup.main), and its memory-bound
passes cost more seconds per instruction than a one-liner's work. In CPU seconds (user + sys of each process, 15 rounds
taking turns, load about 2), 8c24843 read: `import typer` 45.7 ms; peak-flops 1.093x, intensity 1.151x, intensity layer
1.227x, comm-volume 3d 1.268x, all 1.287x, 3d megatron 1.283x, bubble 1.117x, flops 1.155x; with seven test suites
running (load 8-12) the seconds moved too much to show a 1-4 % change: after / before, 15 rounds paired, 0.96-1.01,
median 0.98.

What moved: peak-flops and intensity's GEMM lines no longer create parcalc.core.choices' enums (results.parse imports
Schedule where it needs it: 0.96 of their instructions); a one-liner imports the validation of the preset kinds it reads
only (parcalc.presets._builder); comm-volume leaves torchao's FP8 sources out unless --fp8-all-gather; and @frozen
leaves dataclasses' field collection to the first look-up of a plain class's fields (parcalc.frozen._defer_fields: a
one-liner defines 17 to 38 such classes and asks none; ~0.99 of comm-volume's instructions, 0.98 of intensity layer's).

What is left of comm-volume 3d above `import typer` (about 100 M instructions, 11 ms of CPU): two thirds importing its
62 modules (about 45 us each of finding and reading before a line runs, then their classes: parcalc.core.choices' twelve
enums are the costliest module, ~1 ms, then comm.plan's NamedTuples, commands.common's typer options, core.collectives),
one third running (typer building its 57 options, ~1 ms; the three presets read and validated; the plan's groups
placed on nodes; the brief's text wrapped). None of it is one cost to remove:
this session's aim of 1.15x would need about a fifth of parcalc's own work gone. Checked and left: enum._simple_enum,
CPython's own quicker way to make an enum (its stdlib uses it for re and http), makes the twelve in 0.37 ms instead
of 0.68 ms, but it is private and gives each class another base; skipping the interpreter's teardown with os._exit
saved no measurable time (the collector's exit pass is already skipped: parcalc.cli._skip_exit_collection).
"""

from __future__ import annotations

import os
import re
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


def instructions(argv: list[str]) -> int:
    """The user-space instructions of one run of `argv` (valgrind's callgrind, its `Collected` count), after a plain
    run has warmed the bytecode and preset caches: a figure the machine's other work does not move, where its seconds
    vary by 10-20 % on a shared machine. About fifty times slower than the run. str hashes are seeded with 0, so that a
    dict's layout, and the count, repeat run after run (to ~0.5 %)."""
    seconds(argv)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, env=ENV | {"PYTHONHASHSEED": "0"}, text=True)  # fmt: skip
    counted = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or counted is None:
        raise SystemExit(f"{' '.join(argv)} under valgrind failed: {done.stderr[-500:]}")
    return int(counted.group(1))


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


def main_instructions() -> None:
    baseline = instructions(BASELINE)
    print(f"python -c 'import typer'         {baseline / 1e6:7.1f} M instructions")
    for name, args in COMMANDS.items():
        count = instructions([PYTHON, "-m", "parcalc", *args])
        print(f"parcalc {name:<25} {count / 1e6:7.1f} M  ratio {count / baseline:.3f}x", flush=True)


def main() -> None:
    if sys.argv[1:] == ["--instructions"]:
        main_instructions()
        return
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
