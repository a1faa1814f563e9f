"""Speed of `parcalc fit --search`: GPT-3 175B, global batch 1536, s = 2048, on 64, 1024 and 8192
A100s. Prints configurations evaluated, the wall time of the whole search (median of several runs,
in-process, one thread), configurations per second, and the speed-up over evaluating the same
configurations one by one with the scalar parcalc.core.fit.estimate (timed on a sample). Then the
searches of issues #31 and #32 in-process, and as whole one-liners (`python -m parcalc fit --search ...`,
start-up and rendering included) against `python -c "import typer"`, as benchmarks/startup.py does. Run by hand:

    python benchmarks/fit_search.py [runs]

Aims: the full space on 1024 GPUs in well under a second on one core (issue 6); each one-liner of ONE_LINERS
under a second of wall time on a 2-core machine (issues #31 and #32).

Measured as whole processes on the 2-core machine of issue #32 (wall seconds, median of 9 runs taking turns with the
other command; the ratio is to `python -c "import typer"` timed the same way, about 0.06 s; before: c4f4650, after: the
commit that added these lines; every searched row equal before and after, tests/test_fit_search_speed.py):

    one-liner                                   before           after            after / before (paired)
    DeepSeek-V3, 2,048 H800                     1.26 s (21.0x)   0.94 s (16.0x)   0.78
    DeepSeek-V3, 2,048 H800, layout string      0.57 s           0.57 s (9.0x)    0.99
    Llama 3 405B, 16,384 H100                   0.35 s           0.34 s (5.2x)    1.01
    Llama 3 405B, 16,384 GB200                  0.41 s           0.37 s (5.7x)    0.91

The torchtitan one-liners (session 15, parcalc.core.search_walk_runs: each step walk's reserved peak from walks of 4 and 5
layers, and of w + 4 and w + 5 micro-batches of a 1F1B stage; every row byte-identical), farm-bench, 7 runs each taking
turns with main (cedaecf), medians; the machine ran four other test suites at the same time, so wall seconds read about
2.5 x the CPU seconds (unloaded, main's wall was 1.54 s and 5.24 s):

    one-liner                                   CPU before   CPU after   wall before   wall after   after / before (paired, wall)
    Llama 3 8B, 8 H100, torchtitan              1.24 s       0.71 s      3.16 s        1.78 s       0.58
    Llama 3 70B, 256 H100, torchtitan           4.62 s       1.58 s      11.69 s       4.02 s       0.34
    DeepSeek-V3, 2,048 H800 (megatron)          1.08 s       1.09 s      2.82 s        2.75 s       0.98

The search alone (CPU seconds): 8B 1.02 -> 0.44, 70B 4.6 -> 1.35. What is left of the 70B search is walks of pipeline
stages too short to shrink (PP 16: 5 layers, up to 16 micro-batches, a warm-up of up to 15) and the short walks of PP 8
and 16, whose warm-ups make them long (w + 4 micro-batches): the next step is the warm-up and cool-down as runs of their own.

The DeepSeek-V3 search itself (in-process, CPU seconds, best of 7 with the cores' caches cleared): 1.00 -> 0.68. Of
what is left, about 60 % is the scalar cores' own time (layer_pieces, dp_pieces_of, stage_parameters, ...) asked once
per distinct key; the start-up (imports: numpy, typer, the cores) is about 0.2 s of every one-liner.

Session 15, speed (before: 99eaeb7; after: the commit that added these lines): the short walks' SegmentWalk keeps what
each live tensor added to its stream's sums (free() looks nothing up again), a middle pipeline stage's warm-up, steady
pairs and cool-down as runs of their own whose three short walks the stages of a pipeline share
(search_walk_runs.three_run_plan), an MoE split's fullest stage from the search's kept stage parameters, ZeRO-3 buffers
only where a layout has ZeRO-3 rows; every searched row byte-identical (the JSON of the one-liners below, GPT-3 175B on
1,024 A100, Llama 3 70B on 64 H100 and on 256 H100 with B = 512, Llama 3 8B on 64 H100 with B = 1,024 under torchtitan,
Mixtral 8x7B on 64 H100 under DeepSpeed and FSDP2). farm-bench, 7 runs each taking turns with main, medians; the machine
ran four other test suites at the same time (wall about 3 x CPU), so the CPU seconds are the figures to read:

    one-liner                                   CPU before   CPU after   wall before   wall after   after / before (paired, CPU)
    Llama 3 70B, 256 H100, torchtitan           1.74 s       1.30 s      5.28 s        3.93 s       0.77
    Llama 3 8B, 8 H100, torchtitan              0.74 s       0.60 s      2.57 s        2.17 s       0.81
    DeepSeek-V3, 2,048 H800 (megatron)          1.10 s       1.10 s      4.23 s        3.97 s       0.99
    Llama 3 405B, 16,384 H100                   0.35 s       0.33 s      1.42 s        1.44 s       0.99
    Llama 3 405B, 16,384 GB200                  0.36 s       0.36 s      1.49 s        1.43 s       0.99
    python -c "import typer" (the yardstick)    0.07 s                   0.28 s        (DeepSeek-V3 / typer, paired: 15.6 x CPU)

The 70B search alone (in-process CPU seconds, loaded): 1.49 -> 1.00. Its walks are now 0.9 of its 1.0 s: whole walks of
stages whose runs are too short to shrink (PP 8 with 8 micro-batches of 10 layers, PP 16 with 8 or 16 of 5), each
~20 ms; walking a stage faster (memory_torchtitan's block walk) is what is left. DeepSeek-V3 is unchanged within the
noise (its search 0.76 -> 0.74 and 0.86 -> 0.79 CPU s, min of 5 and of 7 taking turns; the one-liner again, 11 runs:
1.27 -> 1.22 CPU s, paired 0.96): its time is the scalar timing cores once per distinct key
(layer_pieces ~25 %, dp_pieces_of ~16 %, stage parameters ~10 %), not the search's own arithmetic (~17 %).

End of session 15 (34e7930 against the session's start cedaecf; farm-bench, 7 runs taking turns, medians, the machine
quiet): the search now also walks torchtitan's TP-sharded pipeline stages (memory_pipeline_stage with TP) and FSDP x CP
rows, as `memory` and `fit` do, where the session's start gave those rows the textbook sum; the 70B search pays for it:

    one-liner                                   wall before   wall after   after / before (paired, wall)
    DeepSeek-V3, 2,048 H800 (megatron)          0.962 s       0.958 s      0.99
    Llama 3 8B, 8 H100, torchtitan              1.439 s       0.807 s      0.55
    Llama 3 70B, 256 H100, torchtitan           4.593 s       12.541 s     2.69

The 70B search walks 739 stage peaks (88 distinct layouts x their stages; 555 from short runs), ~43 ms each, where its
TP x PP rows were not walked before: agreement with `fit` kept over speed, as session 14 decided (a search that
recommends a layout `fit` then refuses is the worse defect; for Table 5's layout the textbook sum is 0.516 of the published peak, the bf16 walk 0.930).
Next: TP stages in search_walk_runs' short runs at fewer micro-batches, or a cheaper block walk.

Session 16 (TTSPEED2; before: ee009dd, main; after: the commit that added these lines): the cheaper block walk. Measured
first (cProfile of the 70B one-liner): 836 stage walks (555 distinct steps, 739 stage peaks of 88 layouts), ~29,000
layer-micro-batches, 4.4 million allocations and 2.9 million frees, ~440 us a layer-micro-batch; 95 % of the search.
Every block of a stage runs the same ops on the same sizes, so parcalc.core.search_segment_walk records a block's
forward (and its recomputation with its backward) once per kind of call and touched state, and replays the rest: each
stream's sums change by the recorded totals, the phase's first peak is taken where the recording's running change first
peaks (only if strictly higher, the walk's rule), the live tensors end as the recording's did, in the same order;
tests/test_fit_search_replay.py holds replayed walks equal to walked ones segment by segment and tensor by tensor
(from empty caches). 57,694 of the 70B search's block calls are replayed, 100 kinds recorded. Every searched row
byte-identical: the JSON of the 8B/8 and 70B/256 torchtitan one-liners, DeepSeek-V3/2048, Llama 3 405B/16,384, GPT-3
175B/1,024, and under torchtitan Llama 3 70B on 64 H100, 70B on 256 H100 with B = 512, 8B on 64 H100 with B = 1,024.
farm-bench, 7 runs each taking turns with main (a detached worktree of ee009dd), medians, the machine lightly loaded (load
2 to 4 on 2 cores; wall medians read up to 1.4 x CPU):

    one-liner                                   CPU before   CPU after   wall before   wall after   after / before (paired, CPU)
    Llama 3 70B, 256 H100, torchtitan           11.57 s      2.69 s      16.45 s       3.81 s       0.23 (wall 0.235; min wall 2.63 s)
    Llama 3 8B, 8 H100, torchtitan              0.672 s      0.533 s     0.741 s       0.670 s      0.80
    DeepSeek-V3, 2,048 H800 (megatron)          0.998 s      1.029 s     1.051 s       1.087 s      1.03 (15 runs again: 1.025 -> 1.022 s, 1.02)

DeepSeek-V3's search walks nothing and runs the same code (memory_walk gains two methods it does not call): its ratio
is the machine's noise (a first call under load 7 to 14 read 1.01). Under that heavier load the 70B one-liner read
13.17 -> 3.17 CPU s (0.24 paired) and 46.2 -> 11.1 s wall.

The 70B one-liner is back under its session-15 start (4.59 s wall quiet, 12.5 s after the TP x PP walks): 2.7 CPU
seconds. What is left of its search (cProfile): the walks' fixed costs in parcalc.core.memory_fsdp (each walk builds every
layer's parameter list and allocates the stage's sharded states, ~15 %), FSDP2's hooks and accumulate() per
layer-micro-batch, and the replays themselves (~20 %). Next: the per-walk set-up in memory_fsdp once per step shape, and
the stage walks' FSDP hooks as replayable calls too.

Session 19 (REPLAYTOTAL, issue #30; before: aabef71, main; after: the commit that added these lines): the torchtitan rows
carry the floor of the caching allocator's replay (search_walk_runs.floor_total, from the same short walks) and the rows
shown are replayed through fit.memory_of (parcalc.core.search_replay). farm-bench, paired with main, medians, the machine
loaded by other helpers' test suites (wall noisy; CPU the figure to read):

    one-liner                                   CPU before   CPU after   after / before (paired, CPU)
    Llama 3 8B, 8 H100, torchtitan              0.547 s      0.646 s     1.19 (three shown rows replayed, ~0.05 s each)
    Llama 3 70B, 256 H100, torchtitan           2.853 s      2.844 s     1.01 (its five shown rows: HSDP / interleaved, no walk)
    DeepSeek-V3, 2,048 H800 (megatron)          0.947 s      0.996 s     1.04 (nothing replayed: the machine's noise)

Replaying every fitting row instead: 8B's 326 fitting rows (24 walked) 4.0 s of CPU; the 70B search with --top 20 replays
2.9 s (pipeline rows replay every stage), behind a progress bar.

Session 20 (MEMFAST; before: 03aa8c4, main; after: the commit that added these lines): the replay runs compiled per-stream
programs (parcalc.core.allocator_replay; benchmarks/replay.py). Whole processes, paired with main, medians of 7, CPU (the
machine loaded): Llama 3 8B, 8 H100, torchtitan 0.704 -> 0.539 s (0.77); DeepSeek-V3, 2,048 H800 0.902 -> 0.833 s (0.91:
nothing replayed there, the same search). Every searched row byte-identical; JSON rows gain memory_basis.

Session 21 (TTSPLIT, issue #31; before: e0d8560, main; after: the commit that added these lines): the torchtitan searches
time every split torchtitan makes (middle ranks that differ, the V schedules), so they search more: Llama 3 70B on 256
H100 4,404 configurations on 24 layouts (was 2,296 on 8; PP 4-32 refused before), 8B on 8 H100 320 (was 228); their new
1F1B rows' stages are walked as fit walks them, only the stages that can reserve the most (search_step_peaks.walked_stages).
Whole processes, paired with main, medians of 7, CPU seconds (the machine loaded, load 6 to 12):

    one-liner                                   CPU before   CPU after   after / before (paired)
    DeepSeek-V3, 2,048 H800                     0.810 s      0.799 s     1.00 (byte-identical rows)
    DeepSeek-V3, 2,048 H800, layout string      0.385 s      0.384 s     1.01
    Llama 3 405B, 16,384 H100                   0.237 s      0.233 s     1.01
    Llama 3 405B, 16,384 GB200                  0.231 s      0.232 s     1.00
    Llama 3 8B, 8 H100, torchtitan              0.395 s      0.442 s     1.12 (92 more configurations)
    Llama 3 70B, 256 H100, torchtitan           0.595 s      1.650 s     2.76 (2,108 more; walking every stage: 3.0 s)

The 70B one-liner is over its second again: ~1 s of CPU walks the new depths' 1F1B stages (90 keys, ~3 stages each, short
walks of search_walk_runs). Next: the walks of a pipeline's stage 0 and last stage from the middle stage's short runs.

Session 22 (SCREEN, issues #30 and #31; before: 4d7d464, main; after: the commit that added these lines): the interleaved
rows the torchtitan walk follows are screened by their ranks' floor of the allocator's replay, not the textbook sum (no
bound of the walk: docs/memory-peak.md), so every such row walks its ranks (70B on 256 H100: 252 rows, 95 that fit walk
every rank walked_ranks names), where the search walked none and replayed the shown ones (two of them then dropped: 6
rank walks and replays). Made affordable: the search's SegmentWalk replays an interleaved rank's blocks (6.4x), ranks a
middle one dominates left out, walks stopped past the capacity, fewer rounds of micro-batches (a 70B PP 2 x v 2 rank with
16 micro-batches: 0.33 -> 0.03 s). Every non-interleaved row byte-identical (the 70B/256 JSON); fewer_rounds changes no
byte of the 70B/64 and 70B/256 JSON. Whole processes, paired with main, medians of 5, the machine loaded (load 7 to 9):

    one-liner                                   CPU before   CPU after   after / before (paired)
    Llama 3 8B, 8 H100, torchtitan              0.933 s      1.173 s     1.26
    Llama 3 70B, 256 H100, torchtitan           5.022 s      6.048 s     1.15

The brief's second (issue #31) is not met: what is left is walking the 95 fitting rows' ranks whole (~13 ms each, ~3 s
of CPU). Next: an interleaved rank's short walk in layers (each chunk's layers extrapolated as search_walk_runs does a 1F1B
stage's), and a faster block walk.

Session 22 (SPEED, issues #30 and #31; before: b3a94b1, main; after: the commit that added these lines): each walk's
per-parameter allocations (a stage's sharded parameters and AdamW states, ~1,100 tensors a 70B PP 2 rank, and foreach
AdamW's sqrt temporaries) are kept by the units that decide them (memory_fsdp._unit_allocs) and the search's SegmentWalk
makes such a run at once (alloc_all: one look at each stream's peak at the run's end, the same as one by one since the
sums only grow over a run); _block_params / _root_params asked once. Every searched row byte-identical (the --format json
of 70B/256, 8B/8 and 70B/64 under torchtitan). Whole processes, farm-bench, 7 runs taking turns with main, medians (load 3):

    one-liner                                   CPU before   CPU after   after / before (paired, CPU)
    Llama 3 70B, 256 H100, torchtitan           4.695 s      4.149 s     0.89
    Llama 3 70B, 64 H100, torchtitan            3.778 s      3.364 s     0.88
    Llama 3 8B, 8 H100, torchtitan              0.998 s      0.951 s     0.96

The brief's second is still not met. Measured (the 70B/256 search in-process, timers around each walk): 395 interleaved
rank walks take ~2.7 s of its ~4 s, 238 of them under the capacity (2.2 s: these must be walked to the end, their floor is
the row's value) and 157 stopped over it (0.5 s). By pipeline shape the under-capacity walks cost: PP 2 with v 2 to 4
~0.34 s (the only ones a short walk in layers could shrink: each chunk's 10 to 20 layers to 4 and 5, v + 1 walks), PP 2
with v 5 to 14 ~0.89 s, PP 4 ~0.6 s, PP 8 and 16 ~0.4 s (chunks of 2 to 7 layers: nothing to shrink). fewer_rounds for
v >= 4 at its K rounds is wrong (15 of 53 ranks of the 70B/256 search peak 16 to 32 MiB under the whole walk, as SCREEN found);
at K + 1 the 19 ranks it applies to agreed, but it would save ~0.25 s and has no proof. What is left is the walks' own
ops: block replays, FSDP2's accumulate (~0.6 s: 78,759 calls freeing each unit's gradients), unshard / wait_for_unshard
(~0.5 s) of interleaved ranks with four or more chunks, whose stages are resharded and gathered again every round.

Session 24 (LAYOUTSEARCH; before: 8c24843, after: the commit that added these lines): under Megatron-LM's profile the
search proposes a layout string for the v no split of a pp runs (parcalc.core.search_layouts.proposed_layouts, at most
three a pp). Whole processes, bytecode cached, 7 runs taking turns (5 for the last three), medians; the machine ran
other helpers' work, so the CPU seconds are the figures to read (wall about 3x):

    one-liner                                   CPU before   CPU after   after / before (paired, CPU)
    DeepSeek-V3, 2,048 H800                     0.757 s      0.851 s     1.14
    DeepSeek-V3, 2,048 H800, layout string      0.445 s      0.389 s     0.87
    Llama 3 405B, 16,384 H100                   0.242 s      0.254 s     1.02
    Llama 3 405B, 16,384 GB200                  0.276 s      0.289 s     1.03

DeepSeek-V3 evaluates 7 more (pp, v) pipelines (PP 2 x 8 and 16, 4 x 4 and 8, 8 x 2 and 4, 16 x 2): 87,480 -> 145,512
configurations (10,233 -> 18,271 fit; the best unchanged, TP 1 x PP 16, 29.58 s); the layouts' stages are kept by their content (layers, MoE layers,
ends) and shared with the splits', the layout string one-liner gains from the same. Proposing every v up to one layer
a virtual stage instead (51 pipelines on 1,024 GPUs) was 2.5x the search (1.26 s against 0.51 s, in-process CPU).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the aim says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from parcalc.core.fit import Cluster, Training, estimate
from parcalc.core.fit_search import SearchSpace, search
from parcalc.presets import load_gpu, load_link, load_model

SAMPLE = 100


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    model = load_model("gpt3-175b", ())
    gpu = load_gpu("a100-sxm4-80gb", ())
    training = Training(1536, 2048)
    print(f"{'GPUs':>6} {'configs':>9} {'wall':>10} {'configs/s':>12} {'scalar/config':>14} {'speed-up':>9}")
    for gpus in (64, 1024, 8192):
        cluster = Cluster(gpus, 8, gpu.dtypes["bf16"].dense_peak.value, gpu.memory_capacity.value, load_link("nvlink3", ()),
                          load_link("ib-hdr", ()))  # fmt: skip
        times, found = [], None
        for _ in range(runs):
            start = time.perf_counter()
            found = search(model, training, cluster)
            times.append(time.perf_counter() - start)
        wall = statistics.median(times)
        count = len(found.evaluated)
        picks = random.Random(gpus).sample(range(count), min(SAMPLE, count))
        start = time.perf_counter()
        for i in picks:
            estimate(model, found.evaluated.config(i), training, cluster)
        scalar = (time.perf_counter() - start) / len(picks)
        print(f"{gpus:>6} {count:>9,} {wall * 1e3:>8.1f} ms {count / wall:>12,.0f} {scalar * 1e3:>11.2f} ms {scalar * count / wall:>8.0f}x")


def moe(runs: int) -> None:
    """DeepSeek-V3 (671B, 256 experts) on 2,048 H800s, B = 15,360, s = 4,096: the MoE search of issue
    #19, every ep dividing the experts and every uneven split of its 61 layers (target: the whole
    one-liner under 1 s)."""
    from parcalc.core.timing import nccl

    model = load_model("deepseek-v3", ())
    gpu = load_gpu("h800-sxm5", ())
    node = gpu.node
    training = Training(15360, 4096)
    cluster = Cluster(2048, node.gpus, gpu.dtypes["bf16"].dense_peak.value, gpu.memory_capacity.value, load_link(node.intra_link, ()),
                      load_link(node.inter_link, ()), gpu=gpu, nics_per_node=node.nics)  # fmt: skip
    assert nccl.arch_of(gpu.architecture) == "sm90"
    times, found = [], None
    for _ in range(runs):
        start = time.perf_counter()
        found = search(model, training, cluster, SearchSpace(zero_stages=cluster.framework.zero_stages))  # as `fit --search`
        times.append(time.perf_counter() - start)
    wall = statistics.median(times)
    count = len(found.evaluated)
    print(f"DeepSeek-V3 on 2048 H800: {count:,} configurations on {found.layouts} layouts, {wall * 1e3:.1f} ms, {count / wall:,.0f} configs/s")


# The one-liners of issues #31 and #32 (DeepSeek-V3's technical report: 15,360 sequences of 4,096 tokens; Llama 3's
# 405B: 2,048 sequences of 8,192, its 16,384 H100s, and the same on GB200 NVL72 racks of 72 GPUs in one NVLink domain)
ONE_LINERS = {
    "DeepSeek-V3, 2,048 H800": ["fit", "--model", "deepseek-v3", "--gpus", "2048", "--gpu", "h800-sxm5", "--search", "--batch", "15360",
                                "--seq-len", "4096"],
    "DeepSeek-V3, 2,048 H800, layout string": ["fit", "--model", "deepseek-v3", "--gpus", "2048", "--gpu", "h800-sxm5", "--search",
                                               "--batch", "15360", "--seq-len", "4096", "--pipeline-layout", "Et|(tt|)*30mL"],
    "Llama 3 405B, 16,384 H100": ["fit", "--model", "llama3-405b", "--gpus", "16384", "--gpu", "h100-sxm5", "--search", "--batch", "2048",
                                  "--seq-len", "8192"],
    "Llama 3 405B, 16,384 GB200": ["fit", "--model", "llama3-405b", "--gpus", "16384", "--gpu", "gb200", "--search", "--batch", "2048",
                                   "--seq-len", "8192"],
    # torchtitan's step walks in the search (parcalc.core.search_walk_runs): fit's default batch and sequence
    "Llama 3 8B, 8 H100, torchtitan": ["fit", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm5", "--search", "--framework",
                                       "torchtitan"],
    "Llama 3 70B, 256 H100, torchtitan": ["fit", "--model", "llama3-70b", "--gpus", "256", "--gpu", "h100-sxm5", "--search",
                                          "--framework", "torchtitan"],
}  # fmt: skip


def searches(runs: int) -> None:
    """Each one-liner's search alone, in-process (the request read as the command line reads it)."""
    from parcalc.results.fit_request import request

    for name, argv in ONE_LINERS.items():
        req = request(**_as_flags(argv))
        times, found = [], None
        for _ in range(runs):
            start = time.perf_counter()
            found = search(req.model, req.training, req.cluster, req.space)
            times.append(time.perf_counter() - start)
        assert found is not None
        wall = statistics.median(times)
        print(f"{name:<40} search {wall * 1e3:7.1f} ms  {len(found.evaluated):>7,} configurations on {found.layouts} layouts")


def _as_flags(argv: list[str]) -> dict[str, object]:
    """fit's request() arguments from a one-liner's words (the flags ONE_LINERS uses)."""
    flags: dict[str, object] = {"search": True}
    words = iter(argv[1:])
    for word in words:
        if word == "--search":
            continue
        key = word.removeprefix("--").replace("-", "_")
        value = next(words)
        flags[key] = [value] if key == "gpu" else value
    return flags


def one_liners(runs: int) -> None:
    """The one-liners as whole processes, taking turns with `python -c "import typer"` (benchmarks/startup.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from startup import taking_turns  # benchmarks/startup.py: the same process timing

    times = taking_turns(ONE_LINERS, runs)
    baseline = statistics.median(times["import typer"])
    print(f"python -c 'import typer'                 {baseline * 1e3:7.1f} ms  (median of {runs}, commands taking turns)")
    for name in ONE_LINERS:
        wall = statistics.median(times[name])
        # the ratio as the median of the ratios within a round: runs taken back to back
        paired = statistics.median(a / b for a, b in zip(times[name], times["import typer"], strict=True))
        print(f"parcalc fit --search: {name:<40} {wall * 1e3:7.1f} ms  ratio {wall / baseline:.1f}x (paired {paired:.1f}x)")


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    main()
    moe(runs)
    searches(runs)
    one_liners(max(runs, 7))
