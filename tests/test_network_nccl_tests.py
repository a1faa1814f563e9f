"""parcalc.core.timing.network against published nccl-tests measurements (tests/fixtures/nccl, each file
with its source). These are tests, not calibration, but for one constant: the model's constants are
NCCL's own (src/graph/tuning.cc, search.cc, enqueue.cc, topo.h, transport/nvls.cc of v2.23.4;
docs/nccl-tuning.md) and the link presets' datasheet bandwidths, except nccl.CALL_US (the per-call
kernel launch NCCL's model leaves out), calibrated on a100x8_nvlink_all_reduce_mpi.txt's 8 B - 4 KiB
rows (test_call_cost_is_calibrated_on_one_table_only); every other table and size class tests it.

The issue's target (#18), per table: predicted time within a factor 1.5 of the measured out-of-place time
for at least 80 % of the sizes, and the median predicted/measured ratio within 20 % of 1 (0.8-1.2) for
small (< 64 KiB), medium and large (> 64 MiB) messages alike. `TABLES` lists, for every table that parcalc
can describe, the medians measured with this model (rounded; `python tests/nccl_cases.py` prints them):
the tables that meet the target are asserted to; the ones that do not are pinned within 0.05 of today's
median so that a change is seen, each with the reason in `MISSES`.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from nccl_cases import A100, H100, TABLES, ratios, size_class

from parcalc.core.choices import Collective
from parcalc.core.timing import nccl
from parcalc.core.timing.network import Fabric, Placement, collective_time, nvls_bus_bandwidth
from parcalc.presets import load_link

MEETS = [table for table in TABLES if not table.misses]
MISSES = [table for table in TABLES if table.misses]


@pytest.mark.parametrize("table", MEETS, ids=[table.name for table in MEETS])
def test_table_meets_the_target(table) -> None:  # type: ignore[no-untyped-def]
    measured = ratios(table)
    within = sum(1 / 1.5 <= ratio <= 1.5 for _, ratio in measured)
    assert within >= 0.8 * len(measured), measured
    for name, values in size_classes(measured).items():
        assert 0.8 <= statistics.median(values) <= 1.2, (name, statistics.median(values))


@pytest.mark.parametrize("table", MISSES, ids=[table.name for table in MISSES])
def test_known_misses_stay_where_they_are(table) -> None:  # type: ignore[no-untyped-def]
    medians = {name: statistics.median(values) for name, values in size_classes(ratios(table)).items()}
    assert medians == pytest.approx(table.medians, abs=0.05), table.misses


def size_classes(measured: list[tuple[int, float]]) -> dict[str, list[float]]:
    classes: dict[str, list[float]] = {}
    for size, ratio in measured:
        classes.setdefault(size_class(size), []).append(ratio)
    return classes


def test_every_target_table_is_described() -> None:
    # #18: 8 x A100 NVLink, 8 x H100 NVLink and two nodes over InfiniBand or RoCE, from small to large
    names = {table.name for table in TABLES}
    assert {"a100x8_nvlink_all_reduce.txt", "h100x8_nvlink_all_reduce.txt", "h100x16_ib_all_reduce.txt",
            "h100x16_roce_all_reduce.txt", "h100x4_nvlink_all_reduce.txt"} <= names  # fmt: skip
    assert {"h100x8_nvlink_all_reduce.txt", "h100x4_nvlink_all_reduce.txt", "h100x16_roce_all_reduce.txt",
            "a100x8_nvlink_all_reduce_mpi.txt", "h100x16_ib_all_reduce.txt", "h200x16_roce_all_gather.txt",
            "h100x4_nvlink_all_gather.txt"} <= {t.name for t in MEETS}  # fmt: skip


def test_call_cost_is_calibrated_on_one_table_only() -> None:
    # nccl.CALL_US = the median of (measured - NCCL's model without it) over the 8 B - 4 KiB rows of the
    # one-process-per-GPU A100 table (out-of-place times; 2.9-10.2 us, median 8.76 us -> 8.8).
    table = next(t for t in TABLES if t.name == "a100x8_nvlink_all_reduce_mpi.txt")
    # measured = predicted / ratio, and NCCL's model alone = predicted - CALL_US
    gaps = [(1 - ratio) * collective_time(table.op, float(size), table.group, table.fabric).time / ratio
            + nccl.CALL_US * 1e-6 for size, ratio in ratios(table) if size <= 4096]  # fmt: skip
    assert len(gaps) == 10
    assert statistics.median(gaps) * 1e6 == pytest.approx(8.76, abs=0.01)
    assert pytest.approx(statistics.median(gaps) * 1e6, abs=0.05) == nccl.CALL_US


def test_call_cost_is_per_call_and_leaves_nccls_choice_alone() -> None:
    # The same 8.8 us on every call, whatever the algorithm, protocol or size, and only once per call:
    # a 1 KiB all-reduce (ring LL) and a 16 GiB one (NVLS) inside an H100 node, a two-node tree, a send.
    calls = [collective_time(Collective.ALL_REDUCE, 1024, Placement(8, 8), H100),
             collective_time(Collective.ALL_REDUCE, 2**34, Placement(8, 8), H100),
             collective_time(Collective.ALL_REDUCE, 1024, Placement(16, 8), H100),
             collective_time(Collective.POINT_TO_POINT, 2**20, Placement(2, 1), H100)]  # fmt: skip
    assert [c.call for c in calls] == [pytest.approx(8.8e-6)] * 4
    assert [(c.algorithm, c.protocol) for c in calls[:3]] == [("ring", "LL"), ("nvls", "Simple"), ("tree", "LL")]
    # nothing for a call that does not happen (one rank, or no bytes)
    assert collective_time(Collective.ALL_REDUCE, 1024, Placement(1, 1), H100).time == 0.0
    assert collective_time(Collective.ALL_REDUCE, 0, Placement(8, 8), H100).time == 0.0


def test_nvls_inside_an_h100_node() -> None:
    # search.cc: one NVLS channel per GPU, (8 + 1) s <= 18 x 20.6 = 370.8 GB/s -> s = 40 (sm90 speeds 60, 50, 40):
    # busBw 8 x 40 = 320 GB/s, algBw x 5/6 = 266.7 GB/s (tuning.cc:224); latency hwLat[NVLINK][NVLS] = 25 us.
    group = Placement(8, 8)
    assert nvls_bus_bandwidth(group, H100) == pytest.approx(320e9)
    big = collective_time(Collective.ALL_REDUCE, 16 * 2**30, group, H100)
    assert (big.algorithm, big.protocol) == ("nvls", "Simple")
    # ramp: 16 channels x 8 heads = 128 pipes, 128 KiB chunks (nvls.cc NVLS_CHUNKSIZE), one stage behind
    fill = 128 * 131072 / (320e9 * 5 / 6)
    assert big.fill == pytest.approx(fill)
    assert big.time == pytest.approx(25e-6 + 16 * 2**30 / (320e9 * 5 / 6) + fill + 8.8e-6)  # + nccl.CALL_US
    # nccl-tests busbw 2 x 7/8 x algbw = 466 GB/s; measured 482.27 (h100x8_nvlink_all_reduce.txt, 16 GiB)
    assert big.busbw == pytest.approx(466e9, rel=0.005)


def test_two_and_four_gpus_of_an_nvswitch_node_keep_their_nvlink_bandwidth() -> None:
    # #11 (TP4): on NVSwitch every GPU keeps its 18 NVLinks whatever the group; NCCL's ring search packs
    # the same 12 channels x 30 GB/s = 360 GB/s for 2, 4 or 8 GPUs (search.cc). Measured, 4 of the 8 H100
    # of one node: busbw 367.46 GB/s at 16 GiB (h100x4_nvlink_all_reduce.txt), 8 GPUs with the ring 362.
    for n in (2, 4, 8):
        assert collective_time(Collective.ALL_GATHER, 2**34, Placement(n, n), H100).bus_bandwidth == pytest.approx(0.824 * 450e9)
    # NVLS with 4 GPUs: (4 + 1) s <= 370.8 -> s = 60, busBw 4 x 60 = 240 GB/s, algBw 200 GB/s: below the
    # ring's algBw 360 x 4 / 6 = 240 GB/s, so NCCL's model runs the ring; with 2 GPUs NVLS does not exist
    # (transport/nvls.cc:154); A100 (sm80) has none (search.cc:973).
    assert nvls_bus_bandwidth(Placement(4, 4), H100) == pytest.approx(240e9)
    four = collective_time(Collective.ALL_REDUCE, 2**34, Placement(4, 4), H100)
    assert four.algorithm == "ring" and four.busbw == pytest.approx(0.824 * 450e9, rel=0.01)
    assert nvls_bus_bandwidth(Placement(2, 2), H100) == 0.0
    assert nvls_bus_bandwidth(Placement(8, 8), A100) == 0.0


def test_nvls_tree_across_two_h100_nodes() -> None:
    # 16 H100 on 2 nodes: NVLS in each node, a tree between them. busBw min(8 x 40, 8 NICs x 50 GB/s) =
    # 320 GB/s (tuning.cc:183, 2 nodes), latency 25 + 2 log2(2) x 14 = 53 us (tuning.cc:274-275).
    group = Placement(16, 8)
    big = collective_time(Collective.ALL_REDUCE, 8 * 2**30, group, H100)
    assert big.algorithm == "nvls_tree"
    assert big.latency == pytest.approx(53e-6)
    assert big.bus_bandwidth == pytest.approx(320e9)
    # ramp: 128 pipes x 128 KiB, 3 stages behind (reduce in the node, up and down the tree, multicast)
    assert big.time == pytest.approx(53e-6 + 8 * 2**30 / (320e9 * 5 / 6) + 3 * 128 * 131072 / (320e9 * 5 / 6) + 8.8e-6)
    # without NVSwitches the ring of rails: min(NVLink's 0.824 x 450 GB/s, 8 x 50 GB/s) = 370.8 GB/s
    flat = Fabric(8, _without_nvswitch("nvlink4"), load_link("ib-ndr", ()), 8, "sm90")
    assert collective_time(Collective.ALL_REDUCE, 8 * 2**30, group, flat).bus_bandwidth == pytest.approx(0.824 * 450e9)
    one_per_node = collective_time(Collective.ALL_REDUCE, 8 * 2**30, Placement(16, 1), H100)
    assert one_per_node.bus_bandwidth == pytest.approx(50e9)  # one GPU per node: its own NIC, no NVLS


def _without_nvswitch(key: str):  # type: ignore[no-untyped-def]
    import dataclasses

    return dataclasses.replace(load_link(key, ()), nvswitch=False)


def test_nvls_chunk_follows_enqueue_cc() -> None:
    # calcCollChunking (enqueue.cc:2042-2060): one node, 128 pipes: below 64 x 128 x 128 KiB = 1 GiB the
    # chunk is 64 KiB, below 8 x 128 x 64 KiB = 64 MiB 32 KiB, below 2 x 128 x 32 KiB = 8 MiB 16 KiB
    assert [nccl.nvls_chunk(s, 128, 1) for s in (2**31, 2**29, 2**25, 2**22)] == [131072, 65536, 32768, 16384]
    # NVLS_TREE, 2 nodes: the 256 KiB rule never applies to 128 KiB; below 4 x 128 x 128 KiB = 64 MiB
    # 64 KiB, then below 1 x 128 x 64 KiB = 8 MiB 32 KiB (each test sees the chunk the one before left);
    # from 4 nodes at most 64 KiB (NCCL_NVLSTREE_MAX_CHUNKSIZE -2)
    assert [nccl.nvls_chunk(s, 128, 2) for s in (2**27, 2**25, 2**23, 2**22)] == [131072, 65536, 65536, 32768]
    assert nccl.nvls_chunk(2**33, 128, 4) == 65536


def test_tree_correction_factor() -> None:
    # tuning.cc:435-439, index floor(log2(bytes / 64)): 1 MiB -> 14: LL .5, LL128 .6, Simple .5; 64 B -> 0
    assert [nccl.tree_correction(p, 2**20) for p in ("LL", "LL128", "Simple")] == [0.5, 0.6, 0.5]
    assert nccl.tree_correction("Simple", 64) == 0.9
    assert nccl.tree_correction("LL", 32) == 1.0 and nccl.tree_correction("Simple", 2**30) == 1.0


def test_blackwell_nvls_speed() -> None:
    # B200: 18 x 40.1 GB/s = 721.8 GB/s per GPU; sm100 speeds (v2.30.7 search.cc) 90, 80: 9 x 80 = 720
    assert nccl.nvls_speed("sm100", 8, 721.8) == 80.0
    assert nccl.arch_of("Blackwell") == "sm100"
    assert nccl.nvls_speed("sm80", 8, 240.0) == 0.0


def test_small_messages_choose_a_low_latency_protocol() -> None:
    small = collective_time(Collective.ALL_REDUCE, 1024, Placement(8, 8), A100)
    assert small.protocol == "LL"
    # LL inside a node: 6.6 us + 14 steps x 0.6 us = 15.0 us, plus 2 x 7/8 x 1 KiB at min(llMaxBw 87.7 GB/s,
    # 0.5 x 240 GB/s), plus the per-call launch 8.8 us (nccl.CALL_US); measured 23.63-24.43 us at 1 KiB
    # (a100x8_nvlink_all_reduce_mpi.txt, out-of-place and in-place)
    assert small.time == pytest.approx(15.0e-6 + 1.75 * 1024 / 87.7e9 + 8.8e-6, rel=1e-9)
    big = collective_time(Collective.ALL_REDUCE, 2**30, Placement(8, 8), A100)
    assert big.protocol == "Simple"


def test_inter_node_ring_pays_the_network_post_overhead() -> None:
    # tuning.cc:252-259 (v2.23.4): all-gather over 16 H200-class ranks on 2 nodes, LL: intraLat =
    # max(0.6, netOverhead 1.0) us for the 14 intra-node steps, 2.7 us for the 1 inter-node step, + 6.6 base
    t = collective_time(Collective.ALL_GATHER, 1024, Placement(16, 8), H100)
    assert (t.algorithm, t.protocol) == ("ring", "LL")
    assert t.latency == pytest.approx((6.6 + 14 * 1.0 + 2.7) * 1e-6)
    assert math.isfinite(t.time)
