"""Speed of the caching allocator's replay where parcalc walks an FSDP2 step (issue #30): the two commands session 19's
replay made slow, as whole processes taking turns with `python -c "import typer"` (benchmarks/startup.py), then Table 5's
eight stages in-process, each stage's walk beside its replay. Run by hand:

    PYTHONPATH=. python benchmarks/replay.py [runs]     (from the repository root: this tree's parcalc)

The commands:
- `fit` of Llama 3 8B on 8 H100 under torchtitan, the strategy table (s 8192, B 8): its ZeRO-3 rows are walked and
  replayed, and their deepest models (up to 127 layers) replayed;
- `memory` of torchtitan's Table 5 (Llama 3.1 405B, FSDP 8 x TP 8 x PP 8, 15 + 6 x 16 + 15 layers, 8 micro-batches of 4,
  Float8 compiled, full recomputation): each of the 8 stages walked and replayed.

Session 20 (MEMFAST; before: 03aa8c4, main; after: the commit that added these lines), whole processes paired with main,
medians of 7 runs, the machine loaded by the other helpers' test suites (CPU seconds the figure to read; every total
byte-identical, tests/test_allocator_programs.py):

    command                                     CPU before   CPU after   after / before (paired, CPU)
    fit, Llama 3 8B on 8 H100, strategy table   1.75 s       1.21 s      0.66
    memory, 405B Table 5 (8 stages)             2.40 s       1.72 s      0.71

What moved them: the replay runs one compiled program per CUDA stream (parcalc.core.allocator_replay; 405B stage 1: 0.157 ->
0.100 s of CPU for the replay, its walk 0.13 s), and the deepest model's screen takes the search's floor from walks of 4
and 5 layers where it walked every depth it tried (fit_table.max_layers). What is left: the walks themselves (about half
of `memory`), and three replays of 122-127-layer models for the strategy table's deepest ZeRO-3 model.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

COMMANDS = {
    "fit, Llama 3 8B on 8 H100, strategy table": ["fit", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm5", "--framework",
                                                  "torchtitan", "--seq-len", "8192", "--batch", "8"],
    "memory, 405B Table 5 (8 stages)": ["memory", "--model", "llama3-405b", "--framework", "torchtitan", "--flash-attention", "--zero", "3",
                                        "--sequence-parallel", "--first-stage-layers", "15", "--last-stage-layers", "15", "--tp", "8",
                                        "--pp", "8", "--dp", "8", "--micro-batch", "4", "--micro-batches", "8", "--seq-len", "8192",
                                        "--recompute", "full", "--precision", "fp8", "--schedule", "1f1b", "--compile"],
}  # fmt: skip


def stages() -> None:
    """Table 5's stages in-process: CPU seconds of each walk and of its replay (the memo cleared: every stage replayed)."""
    from parcalc.core import allocator_replay
    from parcalc.core.choices import Optimizer, Precision, Recompute
    from parcalc.core.memory_fsdp import EventWalk, fsdp_step_of, replayed_reserve, walk_fsdp_step
    from parcalc.presets import load_model

    model = load_model("llama3-405b", ())
    step = replace(fsdp_step_of("torchtitan-eager", 4, 8192, 8, Precision.FP8, Optimizer.ADAMW, Recompute.FULL, tp=8, compiled=True),
                   pp=8, micro_batches=8)  # fmt: skip
    split = (15, 16, 16, 16, 16, 16, 16, 15)
    walks = replays = 0.0
    for index in range(8):
        first = sum(split[:index])
        stage = replace(step, pp_stage=index, stage_layers=(first, first + split[index]))
        start = time.process_time()
        walk = EventWalk()
        walk_fsdp_step(model, stage, walk)
        walked = time.process_time()
        allocator_replay._MEMO.clear()
        replayed_reserve(walk, stage.expandable_segments)
        walks, replays = walks + walked - start, replays + time.process_time() - walked
    print(f"405B Table 5, 8 stages in-process: walks {walks:.3f} s, replays {replays:.3f} s of CPU")


def processes(runs: int) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from startup import taking_turns  # benchmarks/startup.py: the same process timing

    times = taking_turns(COMMANDS, runs)
    baseline = statistics.median(times["import typer"])
    print(f"python -c 'import typer'                      {baseline * 1e3:7.1f} ms  (median of {runs}, commands taking turns)")
    for name in COMMANDS:
        print(f"parcalc {name:<40} {statistics.median(times[name]) * 1e3:7.1f} ms wall")


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    stages()
    processes(runs)
