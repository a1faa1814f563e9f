"""Speed of `parcalc fit --search`: GPT-3 175B, global batch 1536, s = 2048, on 64, 1024 and 8192
A100s. Prints configurations evaluated, the wall time of the whole search (median of several runs,
in-process, one thread), configurations per second, and the speed-up over evaluating the same
configurations one by one with the scalar parcalc.core.fit.estimate (timed on a sample). Run by hand:

    python benchmarks/fit_search.py [runs]

Aim (issue 6): the full space on 1024 GPUs in well under a second on one core.
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


if __name__ == "__main__":
    main()
    moe(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
