"""Collective algorithms: steps, bytes per worker, network totals, alpha-beta time, nccl-tests bus bandwidth."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.collectives import (
    ALGORITHMS,
    SLIDE_TOTALS,
    Algorithm,
    Collective,
    btree_links,
    bus_factor,
    collective_cost,
    compare_algorithms,
    cost_derivations,
    seed002_ring_time,
    size_term,
    tree_height,
    tree_max_edges,
)
from parcalc.errors import InputError

AR = Collective.ALL_REDUCE
M = 1e9  # a 1 GB message, as in seed 003 sec. 11

# Known answers: (collective, algorithm, N, steps, sent per worker, total on the network), in units of M.
KNOWN = [
    # Seed 003 sec. 11: ring all-reduce of P = 1 GB on 4 GPUs: 0.75 GB reduce-scatter + 0.75 GB
    # all-gather = 1.5 GB sent per device = 2P(N-1)/N; 2(N-1) = 6 rounds; 4 devices x 1.5 = 6 GB in all.
    pytest.param(AR, Algorithm.RING, 4, 6, 1.5, 6.0, id="ring-seed003-4gpus"),
    # Ring on 8: 2 x 7 = 14 rounds of M/8; 2 x 7 / 8 = 1.75 M each; 8 x 1.75 = 14 M = 2(N-1)M, not the slide's 2NM = 16 M.
    pytest.param(AR, Algorithm.RING, 8, 14, 1.75, 14.0, id="ring-8"),
    # Seed 001 naive: each of 4 workers sends M to the 3 others: 3 M each, N(N-1)M = 12 M in all (the slide's table says N^2 M).
    pytest.param(AR, Algorithm.NAIVE, 4, 3, 3.0, 12.0, id="naive-4"),
    # Seed 001 parameter server: each worker pushes M and pulls M; 2NM = 8 M in all on 4 workers; push then pull = 2 rounds.
    pytest.param(AR, Algorithm.PARAMETER_SERVER, 4, 2, 1.0, 8.0, id="ps-4"),
    # NCCL binary tree on 8 (trees.cc): 0-4, 4-{2,6}, 2-{1,3}, 6-{5,7}; height 3, so 2 x 3 = 6 rounds;
    # rank 4 talks to its parent and two children: 3 M sent; 7 edges x M up + 7 x M down = 14 M.
    pytest.param(AR, Algorithm.TREE, 8, 6, 3.0, 14.0, id="tree-8"),
    # NCCL double binary tree on 8: rank 4 is interior in tree 1 (3 edges) and a leaf in the mirrored
    # tree 2 (1 edge): 4 edges x M/2 = 2 M; each tree's 7 edges carry M/2 both ways: 2 x 7 x M = 14 M.
    pytest.param(AR, Algorithm.DOUBLE_BINARY_TREE, 8, 6, 2.0, 14.0, id="double-tree-8"),
    # Seed 001 butterfly on 8: log2 8 = 3 rounds of the whole vector: 3 M each; N M log N = 24 M.
    pytest.param(AR, Algorithm.BUTTERFLY, 8, 3, 3.0, 24.0, id="butterfly-8"),
    # Butterfly on 6 (Thakur et al. 2005): p = 4, r = 2 extra ranks fold in and out (2 rounds):
    # 2 + 2 = 4 rounds; a partner sends 2 M + M (the result back) = 3 M; 4 x 2 M + 2 x 2 x M = 12 M.
    pytest.param(AR, Algorithm.BUTTERFLY, 6, 4, 3.0, 12.0, id="butterfly-6"),
    # Rabenseifner on 8: 2 log2 8 = 6 rounds; M/2 + M/4 + M/8 twice = 1.75 M each; 2(N-1)M = 14 M.
    pytest.param(AR, Algorithm.HALVING_DOUBLING, 8, 6, 1.75, 14.0, id="halving-doubling-8"),
    # Seed 003 sec. 11: reduce-scatter and all-gather of P = 1 GB on 4 GPUs: 0.75 GB each; N-1 = 3 rounds.
    pytest.param(Collective.REDUCE_SCATTER, Algorithm.RING, 4, 3, 0.75, 3.0, id="reduce-scatter-seed003"),
    pytest.param(Collective.ALL_GATHER, Algorithm.RING, 4, 3, 0.75, 3.0, id="all-gather-seed003"),
    # Broadcast down a chain of 4: every rank but the last forwards M; 3 hops; 3 M in all.
    pytest.param(Collective.BROADCAST, Algorithm.RING, 4, 3, 1.0, 3.0, id="broadcast-4"),
    pytest.param(Collective.REDUCE, Algorithm.RING, 4, 3, 1.0, 3.0, id="reduce-4"),
    # All-to-all of a 1 GB send buffer on 4: 3 blocks of M/4 leave each rank: 0.75 M; 4 x 0.75 = 3 M.
    pytest.param(Collective.ALL_TO_ALL, Algorithm.PAIRWISE, 4, 3, 0.75, 3.0, id="all-to-all-4"),
    pytest.param(Collective.POINT_TO_POINT, Algorithm.DIRECT, 2, 1, 1.0, 1.0, id="send-recv"),
]


@pytest.mark.parametrize(("collective", "algorithm", "workers", "steps", "sent", "total"), KNOWN)
def test_known_costs(collective: Collective, algorithm: Algorithm, workers: int, steps: float, sent: float, total: float) -> None:
    cost = collective_cost(collective, algorithm, M, workers)
    assert cost.steps == steps
    assert cost.sent == pytest.approx(sent * M, rel=1e-12)
    assert cost.received == pytest.approx(sent * M, rel=1e-12)
    assert cost.total == pytest.approx(total * M, rel=1e-12)


def test_ring_time_matches_hand_calculation() -> None:
    # 1 GB ring all-reduce on 8 GPUs, beta = 300 GB/s, alpha = 3.4 us:
    # 2 x 7 x (3.4e-6 + 1e9 / (8 x 300e9)) = 14 x (3.4e-6 + 4.16667e-4) = 5.880933e-3 s.
    cost = collective_cost(AR, Algorithm.RING, 1e9, 8)
    assert cost.time(300e9, 3.4e-6) == pytest.approx(14 * (3.4e-6 + 1e9 / 2.4e12), rel=1e-12)
    assert cost.time(300e9, 3.4e-6) == pytest.approx(5.8809333e-3, rel=1e-6)


def test_seed002_ring_time_is_the_same_model() -> None:
    # Seed 002: T = 2(N-1) T(X itsize / N). 25M fp32 items (100 MB) on 4 ranks at 25 GB/s, 5 us:
    # 6 x (5e-6 + 1e8 / 1e11) = 6 x 0.001005 = 0.00603 s.
    derived = seed002_ring_time(25e6, 4.0, 4, 25e9, 5e-6)
    assert derived.value == pytest.approx(0.00603, rel=1e-12)
    assert derived.value == pytest.approx(collective_cost(AR, Algorithm.RING, 1e8, 4).time(25e9, 5e-6), rel=1e-12)
    assert derived.formula_text() == "2 × (N - 1) × (α + X × itsize / (N × β))"


@pytest.mark.parametrize(
    ("collective", "workers", "factor"),
    [
        # NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary": 2(n-1)/n, (n-1)/n, (n-1)/n, 1, 1, (n-1)/n.
        pytest.param(AR, 8, 14 / 8, id="all-reduce"),
        pytest.param(Collective.REDUCE_SCATTER, 8, 7 / 8, id="reduce-scatter"),
        pytest.param(Collective.ALL_GATHER, 8, 7 / 8, id="all-gather"),
        pytest.param(Collective.BROADCAST, 8, 1.0, id="broadcast"),
        pytest.param(Collective.REDUCE, 8, 1.0, id="reduce"),
        pytest.param(Collective.ALL_TO_ALL, 8, 7 / 8, id="all-to-all"),
    ],
)
def test_nccl_tests_bus_factor(collective: Collective, workers: int, factor: float) -> None:
    assert bus_factor(collective, workers) == pytest.approx(factor)


def test_nccl_btree_matches_the_illustration_in_trees_cc() -> None:
    # NVIDIA/nccl src/graph/trees.cc draws the tree on 14 ranks: 0-8, 8-{4,12}, 4-{2,6},
    # 12-{10,13}, 2-{1,3}, 6-{5,7}, 10-{9,11}.
    assert btree_links(14, 0) == (-1, (8,))
    assert btree_links(14, 8) == (0, (4, 12))
    assert btree_links(14, 12) == (8, (10, 13))
    assert btree_links(14, 13) == (12, ())
    assert btree_links(14, 10) == (12, (9, 11))
    assert tree_height(14) == 4


@given(st.integers(min_value=2, max_value=300))
def test_btree_is_a_tree_of_height_ceil_log2(workers: int) -> None:
    # Every rank but 0 has a parent that lists it as a child; height = ceil(log2 N).
    for rank in range(1, workers):
        parent, _ = btree_links(workers, rank)
        assert rank in btree_links(workers, parent)[1]
    children = sum(len(btree_links(workers, r)[1]) for r in range(workers))
    assert children == workers - 1
    assert tree_height(workers) == math.ceil(math.log2(workers))


@given(st.integers(min_value=3, max_value=200))
def test_double_tree_spreads_the_load(workers: int) -> None:
    # Each rank is interior in at most one of NCCL's two trees: at most 3 + 1 edges, except the
    # roots' neighbourhood; the bound the double tree is built for (Sanders et al. 2009).
    assert tree_max_edges(workers, double=True) <= 4


ALL_PAIRS = [(c, a) for c, algorithms in ALGORITHMS.items() for a in algorithms]


@settings(max_examples=60)
@given(
    pair=st.sampled_from(ALL_PAIRS),
    workers=st.integers(min_value=1, max_value=64),
    size=st.floats(min_value=1.0, max_value=1e12),
    bandwidth=st.floats(min_value=1e6, max_value=1e13),
    latency=st.floats(min_value=0.0, max_value=1e-3),
)
def test_time_formula_agrees_with_steps_and_bytes(pair, workers, size, bandwidth, latency) -> None:
    collective, algorithm = pair
    if collective is Collective.POINT_TO_POINT:
        workers = 2
    derived = cost_derivations(collective, algorithm, size_term(size), workers, bandwidth, latency)
    by_key = {d.key: d for d in derived}
    cost = collective_cost(collective, algorithm, size, workers)
    assert by_key["time"].value == pytest.approx(cost.time(bandwidth, latency), rel=1e-9, abs=1e-15)
    assert by_key["steps"].value == cost.steps
    assert by_key["sent_per_worker"].value == pytest.approx(cost.sent, rel=1e-12)
    assert by_key["total_bytes"].value == pytest.approx(cost.total, rel=1e-12)
    assert cost.sent <= cost.total + 1e-6 or (algorithm is Algorithm.PARAMETER_SERVER)


@settings(max_examples=60)
@given(algorithm=st.sampled_from(ALGORITHMS[AR]), workers=st.integers(min_value=2, max_value=128), size=st.floats(1.0, 1e12))
def test_no_all_reduce_beats_the_bandwidth_lower_bound(algorithm: Algorithm, workers: int, size: float) -> None:
    # Patarasuk & Yuan 2009: every all-reduce moves at least 2(N-1)M bytes over the network,
    # and a worker that takes part in the reduction sends at least 2(N-1)M/N.
    cost = collective_cost(AR, algorithm, size, workers)
    assert cost.total >= 2 * (workers - 1) * size * (1 - 1e-12)
    if algorithm is not Algorithm.PARAMETER_SERVER:  # its workers hand the reduction to the server
        assert cost.sent >= 2 * (workers - 1) * size / workers * (1 - 1e-12)
    ring = collective_cost(AR, Algorithm.RING, size, workers)
    if algorithm is not Algorithm.PARAMETER_SERVER:
        assert ring.sent <= cost.sent * (1 + 1e-12)


@settings(max_examples=40)
@given(pair=st.sampled_from(ALL_PAIRS), workers=st.integers(min_value=2, max_value=64), size=st.floats(1.0, 1e12))
def test_bytes_scale_linearly_with_the_message(pair, workers: int, size: float) -> None:
    collective, algorithm = pair
    workers = 2 if collective is Collective.POINT_TO_POINT else workers
    one, two = collective_cost(collective, algorithm, size, workers), collective_cost(collective, algorithm, 2 * size, workers)
    assert two.sent == pytest.approx(2 * one.sent, rel=1e-12)
    assert two.total == pytest.approx(2 * one.total, rel=1e-12)
    assert two.steps == one.steps


@pytest.mark.parametrize("collective", [AR, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.BROADCAST,
                                        Collective.REDUCE, Collective.ALL_TO_ALL])  # fmt: skip
def test_bandwidth_optimal_algorithms_reach_busbw_equal_to_the_link(collective: Collective) -> None:
    # nccl-tests defines busbw so that a bandwidth-optimal algorithm with no latency reports the
    # link's bandwidth, whatever N: the ring (and chain, pairwise) with alpha = 0 must give busbw = beta.
    algorithm = ALGORITHMS[collective][2] if collective is AR else ALGORITHMS[collective][0]
    derived = {d.key: d for d in cost_derivations(collective, algorithm, size_term(4e9), 16, 50e9, 0.0)}
    assert derived["busbw"].value == pytest.approx(50e9, rel=1e-12)


def test_compare_table_puts_the_slide_beside_the_exact_count() -> None:
    rows = {r.algorithm: r for r in compare_algorithms(AR, 1e9, 8, 300e9, 3.4e-6)}
    assert set(rows) == set(ALGORITHMS[AR])
    # Seed 001's table: ring 2NM = 16 GB where the ring really moves 2(N-1)M = 14 GB.
    assert rows[Algorithm.RING].slide_total == 16e9
    assert rows[Algorithm.RING].cost.total == 14e9
    # Naive: slide N^2 M = 64 GB; exact N(N-1)M = 56 GB.
    assert rows[Algorithm.NAIVE].slide_total == 64e9
    assert rows[Algorithm.NAIVE].cost.total == 56e9
    # Butterfly: N M log2 N = 24 GB, which is exact.
    assert rows[Algorithm.BUTTERFLY].slide_total == rows[Algorithm.BUTTERFLY].cost.total == 24e9
    assert rows[Algorithm.DOUBLE_BINARY_TREE].slide_total is None  # not on the slide
    assert set(SLIDE_TOTALS) <= set(rows)


def test_derivations_read_like_the_formulas() -> None:
    derived = {d.key: d for d in cost_derivations(AR, Algorithm.RING, size_term(1e9), 8, 300e9, 3.4e-6)}
    assert derived["sent_per_worker"].formula_text() == "2 × (N - 1) × M / N"
    assert derived["time"].formula_text() == "2 × (N - 1) × (α + M / (N × β))"
    assert derived["busbw"].formula_text() == "algbw × 2 × (N - 1) / N"
    assert derived["sent_per_worker"].unit == "B" and derived["time"].unit == "s"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"workers": 0}, "--workers", id="no-workers"),
        pytest.param({"workers": -3}, "--workers", id="negative-workers"),
        pytest.param({"size": 0.0}, "--size", id="zero-size"),
        pytest.param({"size": -1.0}, "--size", id="negative-size"),
        pytest.param({"size": float("nan")}, "--size", id="nan-size"),
        pytest.param({"algorithm": Algorithm.TREE, "collective": Collective.ALL_GATHER}, "--algorithm", id="tree-all-gather"),
        pytest.param({"collective": Collective.POINT_TO_POINT, "algorithm": Algorithm.DIRECT, "workers": 3}, "--workers", id="p2p-3"),
    ],
)
def test_bad_input_is_an_input_error(kwargs: dict, message: str) -> None:
    args = {"collective": AR, "algorithm": Algorithm.RING, "size": 1e6, "workers": 4} | kwargs
    with pytest.raises(InputError, match=message):
        collective_cost(args["collective"], args["algorithm"], args["size"], args["workers"])


def test_one_worker_communicates_nothing() -> None:
    for algorithm in (Algorithm.RING, Algorithm.NAIVE, Algorithm.TREE, Algorithm.HALVING_DOUBLING):
        cost = collective_cost(AR, algorithm, 1e6, 1)
        assert (cost.steps, cost.sent, cost.total) == (0, 0, 0)
