"""Collective algorithms: rounds, bytes each worker sends and receives, network total, time.

Sizes follow the convention of nccl-tests (NVIDIA/nccl-tests, doc/PERFORMANCE.md): `size` (M)
is the whole array: the buffer being all-reduced, the full input of a reduce-scatter, the full
output of an all-gather, a rank's whole send buffer for all-to-all. Workers are N.

Time uses the alpha-beta (Hockney) model under the assumptions of Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005), sec. 2: a message
of x bytes takes alpha + x / beta; links are full duplex, so a worker sends and receives at once.
Each algorithm states its rounds (steps) and the bytes that cross the busiest port on the
critical path; time = steps x alpha + those bytes / beta.

Algorithms, with sources:
- parameter server (Li et al., OSDI 2014; seed 001): workers push M to a dedicated server and
  pull M back, push before pull;
- naive all-reduce (seed 001): every worker sends its whole vector to every other one;
- ring (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
  workstations", JPDC 2009; seed 002): reduce-scatter then all-gather, 2(N-1) rounds of M/N;
- tree: NCCL's binary tree (NVIDIA/nccl src/graph/trees.cc, ncclGetBtree), not pipelined:
  reduce up, broadcast down, the whole vector on each edge (seed 001's tree);
- double binary tree: NCCL's two complementary trees (ncclGetDtree; Sanders, Speck & Traeff,
  "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing
  2009; NVIDIA blog "Massively Scale Your Deep Learning Training with NCCL 2.4", 2019): half the
  vector on each tree, pipelined;
- butterfly (seed 001): recursive doubling, the whole vector exchanged with a partner log2 N
  times;
- halving-doubling (Rabenseifner 2004; Thakur et al. 2005 sec. 4.4): recursive-halving
  reduce-scatter then recursive-doubling all-gather. Both butterflies handle N that is not a
  power of two as Thakur et al. do: the r = N - p extra workers (p the largest power of two
  <= N) first hand their vector to a partner and get the result back at the end (2 more rounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache

from parcalc.core.choices import Algorithm, Collective  # re-exported
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.named_tuple import NamedTuple

NCCL_TESTS = "NVIDIA/nccl-tests doc/PERFORMANCE.md (algbw = S/t; busbw = algbw x factor)"
ALPHA_BETA = "alpha-beta model: steps x alpha + bytes on the busiest port / beta (Thakur, Rabenseifner & Gropp 2005, sec. 2)"


# Which algorithms each collective has. Beyond all-reduce the ring (a pipelined chain for the
# rooted broadcast and reduce) is what NCCL runs; all-to-all is a pairwise exchange of N-1 rounds.
ALGORITHMS: dict[Collective, tuple[Algorithm, ...]] = {
    Collective.ALL_REDUCE: (
        Algorithm.PARAMETER_SERVER, Algorithm.NAIVE, Algorithm.RING, Algorithm.TREE,
        Algorithm.DOUBLE_BINARY_TREE, Algorithm.BUTTERFLY, Algorithm.HALVING_DOUBLING,
    ),
    Collective.REDUCE_SCATTER: (Algorithm.RING,),
    Collective.ALL_GATHER: (Algorithm.RING,),
    Collective.BROADCAST: (Algorithm.RING,),
    Collective.REDUCE: (Algorithm.RING,),
    Collective.ALL_TO_ALL: (Algorithm.PAIRWISE,),
    Collective.POINT_TO_POINT: (Algorithm.DIRECT,),
}  # fmt: skip


def default_algorithm(collective: Collective) -> Algorithm:
    """Ring where a collective has one, else its only algorithm."""
    choices = ALGORITHMS[collective]
    return Algorithm.RING if Algorithm.RING in choices else choices[0]


# ---------------------------------------------------------------------------------------------
# Tree shapes (NCCL)


def btree_links(workers: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """(parent, children) of `rank` in NCCL's binary tree rooted at 0 (-1: no parent).

    A transcription of ncclGetBtree, NVIDIA/nccl src/graph/trees.cc.
    """
    bit = 1
    while bit < workers:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, ((bit >> 1,) if workers > 1 else ())
    up = (rank ^ bit) | (bit << 1)
    if up >= workers:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= workers:
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, tuple(c for c in (down0, down1) if c >= 0)


def _mirror_links(workers: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """NCCL's second tree: the first mirrored (N even) or shifted by one rank (N odd)."""
    if workers % 2:
        parent, children = btree_links(workers, (rank - 1 + workers) % workers)
        shift = lambda r: -1 if r < 0 else (r + 1) % workers  # noqa: E731
        return shift(parent), tuple(shift(c) for c in children)
    parent, children = btree_links(workers, workers - 1 - rank)
    return (-1 if parent < 0 else workers - 1 - parent), tuple(workers - 1 - c for c in children)


# Beyond this many ranks the tree's shape is taken from its closed forms (checked against walking
# every rank up to here in tests/test_hardening_cli.py): walking a million ranks took a minute.
WALKED_TREE_RANKS = 4096


def tree_height(workers: int) -> int:
    """Edges from the deepest rank to the root of NCCL's binary tree: ceil(log2 N) for N >= 2."""
    if workers > WALKED_TREE_RANKS:
        return (workers - 1).bit_length()
    deepest = 0
    for rank in range(workers):
        depth, node = 0, rank
        while node > 0:
            node = btree_links(workers, node)[0]
            depth += 1
        deepest = max(deepest, depth)
    return deepest


def tree_max_edges(workers: int, double: bool = False) -> int:
    """Most tree edges at one rank: parent + children, summed over both trees when `double`."""
    if workers > WALKED_TREE_RANKS:  # an inner rank of the first tree has a parent and two children
        return 4 if double else 3
    best = 0
    for rank in range(workers):
        parent, children = btree_links(workers, rank)
        edges = (parent >= 0) + len(children)
        if double:
            parent2, children2 = _mirror_links(workers, rank)
            edges += (parent2 >= 0) + len(children2)
        best = max(best, edges)
    return best


# ---------------------------------------------------------------------------------------------
# Costs


class _Quantity(NamedTuple):
    """One formula of an algorithm: text and LaTeX templates over $m, $n, ... and its value."""

    text: str
    latex: str
    value: Callable[[Mapping[str, float]], float]


class _Spec(NamedTuple):
    steps: _Quantity
    sent: _Quantity
    received: _Quantity
    total: _Quantity
    critical: _Quantity  # bytes through the busiest port on the critical path (beta term)
    time: _Quantity  # steps x alpha + critical / beta, written the way the literature does
    assumption: str
    source: str


def _q(text: str, latex: str, value: Callable[[Mapping[str, float]], float]) -> _Quantity:
    return _Quantity(text, latex, value)


def _ring_like(rounds: str, rounds_tex: str, per_round: float, label: str, source: str) -> _Spec:
    """N-1 (or 2(N-1)) rounds of M/N each: ring reduce-scatter, all-gather, all-to-all, all-reduce."""
    k = per_round  # rounds = k (N - 1)
    m_n = _q(f"{rounds} × $m / $n", rf"{rounds_tex} \frac{{$m}}{{$n}}", lambda v: k * (v["n"] - 1) * v["m"] / v["n"])
    return _Spec(
        steps=_q(rounds.strip(), rounds_tex, lambda v: k * (v["n"] - 1)),
        sent=m_n,
        received=m_n,
        total=_q(f"{rounds} × $m", rf"{rounds_tex} $m", lambda v: k * (v["n"] - 1) * v["m"]),
        critical=m_n,
        time=_q(f"{rounds} × ($alpha + $m / ($n × $beta))", rf"{rounds_tex} \left($alpha + \frac{{$m}}{{$n $beta}}\right)",
                lambda v: k * (v["n"] - 1) * (v["alpha"] + v["m"] / (v["n"] * v["beta"]))),
        assumption=label,
        source=source,
    )  # fmt: skip


def _chain(label: str) -> _Spec:
    source = "NVIDIA/nccl-tests doc/PERFORMANCE.md: broadcast and reduce take t = S/B, all data through the root"
    """Broadcast / reduce along a pipelined chain: N-1 hops of latency, the vector once through a port."""
    return _Spec(
        steps=_q("$n - 1", "$n - 1", lambda v: v["n"] - 1),
        sent=_q("$m", "$m", lambda v: v["m"] if v["n"] > 1 else 0.0),
        received=_q("$m", "$m", lambda v: v["m"] if v["n"] > 1 else 0.0),
        total=_q("($n - 1) × $m", r"($n - 1) $m", lambda v: (v["n"] - 1) * v["m"]),
        critical=_q("$m", "$m", lambda v: v["m"] if v["n"] > 1 else 0.0),
        time=_q("($n - 1) × $alpha + $m / $beta", r"($n - 1) $alpha + \frac{$m}{$beta}",
                lambda v: (v["n"] - 1) * v["alpha"] + (v["m"] / v["beta"] if v["n"] > 1 else 0.0)),
        assumption=label,
        source=source,
    )  # fmt: skip


def _butterfly(halving: bool) -> _Spec:
    """Recursive doubling (whole vector each round) or halving-doubling; extra ranks fold in first."""

    def extra(v: Mapping[str, float]) -> float:
        return 1.0 if v["r"] > 0 else 0.0

    if halving:
        core, core_tex = "2 × ($p - 1) × $m / $p", r"\frac{2 ($p - 1) $m}{$p}"
        core_bytes = lambda v: 2 * (v["p"] - 1) * v["m"] / v["p"]  # noqa: E731
        rounds, rounds_tex = "2 × log2($p)", r"2 \log_2 $p"
        core_rounds = lambda v: 2 * math.log2(v["p"])  # noqa: E731
        total, total_tex = "2 × ($p - 1) × $m", r"2 ($p - 1) $m"
        total_bytes = lambda v: 2 * (v["p"] - 1) * v["m"]  # noqa: E731
        label = "halving-doubling: recursive-halving reduce-scatter + recursive-doubling all-gather (Rabenseifner)"
    else:
        core, core_tex = "log2($p) × $m", r"$m \log_2 $p"
        core_bytes = lambda v: math.log2(v["p"]) * v["m"]  # noqa: E731
        rounds, rounds_tex = "log2($p)", r"\log_2 $p"
        core_rounds = lambda v: math.log2(v["p"])  # noqa: E731
        total, total_tex = "$p × log2($p) × $m", r"$p $m \log_2 $p"
        total_bytes = lambda v: v["p"] * math.log2(v["p"]) * v["m"]  # noqa: E731
        label = "butterfly: recursive doubling, the whole vector exchanged with a partner each round"
    fold = " + 2 × $m", r" + 2 $m"
    return _Spec(
        steps=_q(f"{rounds} + 2 × [$r > 0]", rf"{rounds_tex} + 2 [$r > 0]", lambda v: core_rounds(v) + 2 * extra(v)),
        sent=_q(f"{core} + $m × [$r > 0]", rf"{core_tex} + $m [$r > 0]", lambda v: core_bytes(v) + v["m"] * extra(v)),
        received=_q(f"{core} + $m × [$r > 0]", rf"{core_tex} + $m [$r > 0]", lambda v: core_bytes(v) + v["m"] * extra(v)),
        total=_q(f"{total} + 2 × $r × $m", rf"{total_tex} + 2 $r $m", lambda v: total_bytes(v) + 2 * v["r"] * v["m"]),
        critical=_q(f"{core}{fold[0]} × [$r > 0]", rf"{core_tex}{fold[1]} [$r > 0]", lambda v: core_bytes(v) + 2 * v["m"] * extra(v)),
        time=_q(f"({rounds} + 2 × [$r > 0]) × $alpha + ({core}{fold[0]} × [$r > 0]) / $beta",
                rf"({rounds_tex} + 2 [$r > 0]) $alpha + \frac{{{core_tex}{fold[1]} [$r > 0]}}{{$beta}}",
                lambda v: (core_rounds(v) + 2 * extra(v)) * v["alpha"] + (core_bytes(v) + 2 * v["m"] * extra(v)) / v["beta"]),
        source="recursive doubling (butterfly): Thakur, Rabenseifner & Gropp 2005 sec. 4.4" if not halving
        else "Rabenseifner, Optimization of collective reduction operations (ICCS 2004); Thakur et al. 2005 sec. 4.4",
        assumption=label + "; N not a power of two: r = N - p extra workers hand their vector to a partner first and get the result back last (Thakur et al. 2005)",
    )  # fmt: skip


_PS = _Spec(
    steps=_q("2", "2", lambda v: 2.0),
    sent=_q("$m", "$m", lambda v: v["m"]),
    received=_q("$m", "$m", lambda v: v["m"]),
    total=_q("2 × $n × $m", r"2 $n $m", lambda v: 2 * v["n"] * v["m"]),
    critical=_q("2 × $n × $m", r"2 $n $m", lambda v: 2 * v["n"] * v["m"]),
    time=_q("2 × ($alpha + $n × $m / $beta)", r"2 \left($alpha + \frac{$n $m}{$beta}\right)",
            lambda v: 2 * (v["alpha"] + v["n"] * v["m"] / v["beta"])),
    assumption="parameter server: one dedicated server outside the N workers; its port receives N x M (push), then sends N x M (pull)",
    source="Li et al., Scaling Distributed Machine Learning with the Parameter Server (OSDI 2014)",
)  # fmt: skip

_NAIVE = _Spec(
    steps=_q("$n - 1", "$n - 1", lambda v: v["n"] - 1),
    sent=_q("($n - 1) × $m", r"($n - 1) $m", lambda v: (v["n"] - 1) * v["m"]),
    received=_q("($n - 1) × $m", r"($n - 1) $m", lambda v: (v["n"] - 1) * v["m"]),
    total=_q("$n × ($n - 1) × $m", r"$n ($n - 1) $m", lambda v: v["n"] * (v["n"] - 1) * v["m"]),
    critical=_q("($n - 1) × $m", r"($n - 1) $m", lambda v: (v["n"] - 1) * v["m"]),
    time=_q("($n - 1) × ($alpha + $m / $beta)", r"($n - 1) \left($alpha + \frac{$m}{$beta}\right)",
            lambda v: (v["n"] - 1) * (v["alpha"] + v["m"] / v["beta"])),
    assumption="naive all-reduce: each worker sends its whole vector to each of the N-1 others, one peer per round",
    source="direct exchange: every worker sends its whole vector to each of the N - 1 others (hand derivation)",
)  # fmt: skip

_TREE = _Spec(
    steps=_q("2 × $h", r"2 $h", lambda v: 2 * v["h"]),
    sent=_q("$e × $m", r"$e $m", lambda v: v["e"] * v["m"]),
    received=_q("$e × $m", r"$e $m", lambda v: v["e"] * v["m"]),
    total=_q("2 × ($n - 1) × $m", r"2 ($n - 1) $m", lambda v: 2 * (v["n"] - 1) * v["m"]),
    critical=_q("2 × $h × $m", r"2 $h $m", lambda v: 2 * v["h"] * v["m"]),
    time=_q("2 × $h × ($alpha + $m / $beta)", r"2 $h \left($alpha + \frac{$m}{$beta}\right)",
            lambda v: 2 * v["h"] * (v["alpha"] + v["m"] / v["beta"])),
    assumption="tree: NCCL's binary tree, not pipelined; each level moves the whole vector, a parent exchanging with its children at once (one link per edge)",
    source="NVIDIA/nccl src/graph/trees.cc (ncclGetBtree); reduce up, broadcast down, the whole vector on each edge (hand derivation)",
)  # fmt: skip

_DOUBLE_TREE = _Spec(
    steps=_q("2 × $h", r"2 $h", lambda v: 2 * v["h"]),
    sent=_q("$e × $m / 2", r"\frac{$e $m}{2}", lambda v: v["e"] * v["m"] / 2),
    received=_q("$e × $m / 2", r"\frac{$e $m}{2}", lambda v: v["e"] * v["m"] / 2),
    total=_q("2 × ($n - 1) × $m", r"2 ($n - 1) $m", lambda v: 2 * (v["n"] - 1) * v["m"]),
    critical=_q("$e × $m / 2", r"\frac{$e $m}{2}", lambda v: v["e"] * v["m"] / 2),
    time=_q("2 × $h × $alpha + $e × $m / (2 × $beta)", r"2 $h $alpha + \frac{$e $m}{2 $beta}",
            lambda v: 2 * v["h"] * v["alpha"] + v["e"] * v["m"] / (2 * v["beta"])),
    assumption="double binary tree: half the vector on each of NCCL's two trees, reduce and broadcast pipelined in small chunks",
    source="Sanders, Speck & Traeff, Parallel Computing 2009; NVIDIA/nccl src/graph/trees.cc (ncclGetDtree); NVIDIA blog, NCCL 2.4 (2019)",
)  # fmt: skip

_P2P = _Spec(
    steps=_q("1", "1", lambda v: 1.0),
    sent=_q("$m", "$m", lambda v: v["m"]),
    received=_q("$m", "$m", lambda v: v["m"]),
    total=_q("$m", "$m", lambda v: v["m"]),
    critical=_q("$m", "$m", lambda v: v["m"]),
    time=_q("$alpha + $m / $beta", r"$alpha + \frac{$m}{$beta}", lambda v: v["alpha"] + v["m"] / v["beta"]),
    assumption="point-to-point: one message from one sender to one receiver",
    source="alpha-beta model of one message",
)  # fmt: skip

_SPECS: dict[tuple[Collective, Algorithm], _Spec] = {
    (Collective.ALL_REDUCE, Algorithm.PARAMETER_SERVER): _PS,
    (Collective.ALL_REDUCE, Algorithm.NAIVE): _NAIVE,
    (Collective.ALL_REDUCE, Algorithm.RING): _ring_like("2 × ($n - 1)", r"2 ($n - 1)", 2, "ring all-reduce: reduce-scatter then all-gather around the ring, M/N per round", "Patarasuk & Yuan, JPDC 2009"),
    (Collective.ALL_REDUCE, Algorithm.TREE): _TREE,
    (Collective.ALL_REDUCE, Algorithm.DOUBLE_BINARY_TREE): _DOUBLE_TREE,
    (Collective.ALL_REDUCE, Algorithm.BUTTERFLY): _butterfly(halving=False),
    (Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING): _butterfly(halving=True),
    (Collective.REDUCE_SCATTER, Algorithm.RING): _ring_like("($n - 1)", r"($n - 1)", 1, "ring reduce-scatter: N-1 rounds of M/N", "Patarasuk & Yuan, JPDC 2009 (first half of the ring all-reduce)"),
    (Collective.ALL_GATHER, Algorithm.RING): _ring_like("($n - 1)", r"($n - 1)", 1, "ring all-gather: N-1 rounds of M/N", "Patarasuk & Yuan, JPDC 2009 (second half of the ring all-reduce)"),
    (Collective.ALL_TO_ALL, Algorithm.PAIRWISE): _ring_like("($n - 1)", r"($n - 1)", 1, "pairwise all-to-all: in round k worker i sends its M/N block for worker i+k", "Thakur, Rabenseifner & Gropp 2005 sec. 4.6 (pairwise exchange)"),
    (Collective.BROADCAST, Algorithm.RING): _chain("ring broadcast: a pipelined chain from the root (NCCL), N-1 hops of latency"),
    (Collective.REDUCE, Algorithm.RING): _chain("ring reduce: a pipelined chain to the root (NCCL), N-1 hops of latency"),
    (Collective.POINT_TO_POINT, Algorithm.DIRECT): _P2P,
}  # fmt: skip


class CollectiveCost(NamedTuple):
    """What one call of a collective costs, independent of the link.

    A NamedTuple rather than a frozen dataclass: ~1 ms less at import (`comm-volume` start-up).

    size: M in bytes (nccl-tests convention); sent / received: bytes of the busiest worker;
    total: bytes of every message on the network; critical: bytes through the busiest port on
    the critical path (the beta term of the time).
    """

    collective: Collective
    algorithm: Algorithm
    size: float
    workers: int
    steps: float
    sent: float
    received: float
    total: float
    critical: float

    def time(self, bandwidth: float, latency: float) -> float:
        """Seconds under the alpha-beta model: steps x latency + critical bytes / bandwidth."""
        return self.steps * latency + self.critical / bandwidth


def _check(collective: Collective, algorithm: Algorithm, size: float, workers: int) -> _Spec:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"--workers: must be a whole number of at least 1, got {workers!r}")
    if not (isinstance(size, (int, float)) and math.isfinite(size) and size > 0):
        raise InputError(f"--size: must be a positive number of bytes, got {size!r}")
    spec = _SPECS.get((collective, algorithm))
    if spec is None:
        allowed = ", ".join(a.value for a in ALGORITHMS[collective])
        raise InputError(f"--algorithm: {algorithm.value} does not apply to {collective.value}; use {allowed}")
    if collective is Collective.POINT_TO_POINT and workers != 2:
        raise InputError(f"--workers: point-to-point is between 2 workers, got {workers}")
    return spec


def _variables(size: float, workers: int, algorithm: Algorithm, bandwidth: float = 1.0, latency: float = 0.0) -> dict[str, float]:
    values = {"m": float(size), "n": float(workers), "alpha": latency, "beta": bandwidth}
    if algorithm in (Algorithm.BUTTERFLY, Algorithm.HALVING_DOUBLING):
        p = 1 << (workers.bit_length() - 1)
        values.update(p=float(p), r=float(workers - p))
    if algorithm in (Algorithm.TREE, Algorithm.DOUBLE_BINARY_TREE):
        values.update(h=float(tree_height(workers)), e=float(tree_max_edges(workers, algorithm is Algorithm.DOUBLE_BINARY_TREE)))
    return values


@lru_cache(maxsize=1024, typed=True)  # a plan asks the same (collective, size, group) for many stages and phases
def collective_cost(collective: Collective, algorithm: Algorithm, size: float, workers: int) -> CollectiveCost:
    """Rounds and bytes of one call: M = `size` bytes over `workers` workers."""
    spec = _check(collective, algorithm, size, workers)
    values = _variables(size, workers, algorithm)
    return CollectiveCost(
        collective=collective,
        algorithm=algorithm,
        size=float(size),
        workers=workers,
        steps=spec.steps.value(values),
        sent=spec.sent.value(values),
        received=spec.received.value(values),
        total=spec.total.value(values),
        critical=spec.critical.value(values),
    )


def bus_factor(collective: Collective, workers: int) -> float:
    """busbw / algbw of nccl-tests: 2(n-1)/n all-reduce, (n-1)/n reduce-scatter, all-gather and
    all-to-all, 1 broadcast, reduce and send/receive (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""
    n = workers
    if collective is Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


_BUS_FACTOR_TEXT = {
    Collective.ALL_REDUCE: ("2 × ($n - 1) / $n", r"\frac{2 ($n - 1)}{$n}"),
    Collective.REDUCE_SCATTER: ("($n - 1) / $n", r"\frac{$n - 1}{$n}"),
    Collective.ALL_GATHER: ("($n - 1) / $n", r"\frac{$n - 1}{$n}"),
    Collective.ALL_TO_ALL: ("($n - 1) / $n", r"\frac{$n - 1}{$n}"),
}


# ---------------------------------------------------------------------------------------------
# Derivations for `parcalc comm-volume --collective`


def _terms(values: Mapping[str, float], size_term: Term) -> dict[str, Term]:
    described = {
        "m": size_term,
        "n": Term("n", "N", "N", values["n"], "", "workers"),
        "alpha": Term("alpha", "α", r"\alpha", values["alpha"], "s", "latency per message (alpha)"),
        "beta": Term("beta", "β", r"\beta", values["beta"], "B/s", "bandwidth per direction (beta)"),
    }
    if "p" in values:
        described["p"] = Term("p", "p", "p", values["p"], "", "largest power of two <= N")
        described["r"] = Term("r", "r", "r", values["r"], "", "extra workers beyond p")
    if "h" in values:
        described["h"] = Term("h", "h", "h", values["h"], "", "height of NCCL's binary tree (ceil(log2 N))")
        described["e"] = Term("e", "e", "e", values["e"], "", "most tree edges at one worker (parent + children, both trees)")
    return described


def _derive(key: str, label: str, symbol: str, latex: str, quantity: _Quantity, terms: Mapping[str, Term],
            values: Mapping[str, float], unit: str, source: str, assumptions: tuple[str, ...] = ()) -> Derivation:  # fmt: skip
    used = [t for k, t in terms.items() if f"${k}" in quantity.text]
    return Derivation(key, label, symbol, latex, quantity.text, quantity.latex, tuple(used), quantity.value(values),
                      unit, source, assumptions)  # fmt: skip


def size_term(size: float, elements: float | None = None, element_bytes: float | None = None, dtype: str = "") -> Term:
    description = "message size M (nccl-tests convention: the whole array)"
    if elements is not None and element_bytes is not None:
        description += f" = {elements:g} elements x {element_bytes:g} B ({dtype})"
    return Term("m", "M", "M", float(size), "B", description)


def cost_derivations(collective: Collective, algorithm: Algorithm, size: Term, workers: int,
                     bandwidth: float, latency: float) -> tuple[Derivation, ...]:  # fmt: skip
    """Steps, bytes per worker, network total, time, algbw and busbw of one call, as derivations."""
    spec = _check(collective, algorithm, size.value, workers)
    if not bandwidth > 0 or latency < 0:
        raise InputError("--bandwidth must be positive and --latency must not be negative")
    values = _variables(size.value, workers, algorithm, bandwidth, latency)
    terms = _terms(values, size)
    source = spec.source
    name = f"{algorithm.value} {collective.value}"
    steps = _derive("steps", f"Steps (rounds) of {name}", "k", "k", spec.steps, terms, values, "", source)
    sent = _derive("sent_per_worker", "Bytes each worker sends", "S_w", r"S_{w}", spec.sent, terms, values, "B", source)
    received = _derive("received_per_worker", "Bytes each worker receives", "R_w", r"R_{w}", spec.received, terms, values, "B", source)
    total = _derive("total_bytes", "Bytes on the network (all messages)", "S_net", r"S_{\mathrm{net}}", spec.total, terms, values, "B", source)
    time = _derive("time", f"Time of one {name} (alpha-beta)", "t", "t", spec.time, terms, values, "s", ALPHA_BETA,
                   (spec.assumption, "links are full duplex: a worker sends and receives at once"))  # fmt: skip
    time_term = time.as_term("t")
    algbw = Derivation(
        "algbw", "Algorithm bandwidth (nccl-tests algbw)", "algbw", r"\mathrm{algbw}", "$m / $t", r"\frac{$m}{$t}",
        (size, time_term), size.value / time.value if time.value > 0 else 0.0, "B/s", NCCL_TESTS,
    )  # fmt: skip
    factor_text = _BUS_FACTOR_TEXT.get(collective, ("1", "1"))
    busbw = Derivation(
        "busbw", "Bus bandwidth (nccl-tests busbw)", "busbw", r"\mathrm{busbw}", f"$algbw × {factor_text[0]}",
        rf"$algbw \times {factor_text[1]}", (algbw.as_term("algbw"), terms["n"]) if collective in _BUS_FACTOR_TEXT else (algbw.as_term("algbw"),),
        algbw.value * bus_factor(collective, workers), "B/s", NCCL_TESTS,
    )  # fmt: skip
    return steps, sent, received, total, time, algbw, busbw


def seed002_ring_time(items: float, item_bytes: float, workers: int, bandwidth: float, latency: float) -> Derivation:
    """Seed 002's ring all-reduce time T = 2 (N-1) T(X itsize / N), with T(x) = alpha + x / beta.

    Patarasuk & Yuan (JPDC 2009), as quoted by seed 002; X items of `item_bytes` each.
    """
    terms = (
        Term("n", "N", "N", workers, "", "processes"),
        Term("x", "X", "X", items, "", "items"),
        Term("s", "itsize", r"\mathit{itsize}", item_bytes, "B", "bytes per item"),
        Term("alpha", "α", r"\alpha", latency, "s", "latency per message (alpha)"),
        Term("beta", "β", r"\beta", bandwidth, "B/s", "bandwidth per direction (beta)"),
    )
    return Derivation(
        key="ring_time_patarasuk_yuan",
        label="Ring all-reduce time as Patarasuk & Yuan write it, T = 2(N-1) T(X·itsize/N)",
        symbol="T",
        latex_symbol="T",
        formula="2 × ($n - 1) × ($alpha + $x × $s / ($n × $beta))",
        formula_latex=r"2 ($n - 1) \left($alpha + \frac{$x \cdot $s}{$n $beta}\right)",
        inputs=terms,
        value=2 * (workers - 1) * (latency + items * item_bytes / (workers * bandwidth)),
        unit="s",
        source="Patarasuk & Yuan, Bandwidth optimal all-reduce algorithms for clusters of workstations (JPDC 2009)",
    )


# ---------------------------------------------------------------------------------------------
# Seed 001's comparison slide, beside the exact counts

# (overall communication as the slide writes it, its value, the slide's time) for M bytes, N workers
APPROXIMATIONS = ("approximation, approximate total and time (--compare): each algorithm's closed form as lecture slides quote it, beside "
                  "the exact count: N - 1 taken as N (ring: 2 N M for the exact 2 (N-1) M), time from bandwidth B alone, no latency")
SLIDE_TOTALS: dict[Algorithm, tuple[str, Callable[[float, int], float], str]] = {
    Algorithm.PARAMETER_SERVER: ("2 × N × M", lambda m, n: 2 * n * m, "M × N / B"),
    Algorithm.NAIVE: ("N² × M", lambda m, n: n * n * m, "-"),
    Algorithm.RING: ("2 × N × M", lambda m, n: 2 * n * m, "M/N × 2N / B"),
    Algorithm.TREE: ("2 × N × M", lambda m, n: 2 * n * m, "M × 2 log2(N) / B"),
    Algorithm.BUTTERFLY: ("N × M × log2(N)", lambda m, n: n * m * math.log2(n), "-"),
}


class AlgorithmRow(NamedTuple):
    """One row of `--compare`: exact counts, the slide's approximation, and the time."""

    algorithm: Algorithm
    cost: CollectiveCost
    time: float
    busbw: float
    slide_formula: str
    slide_total: float | None
    slide_time: str


def compare_algorithms(collective: Collective, size: float, workers: int, bandwidth: float, latency: float) -> tuple[AlgorithmRow, ...]:
    """Every algorithm of `collective` on the same message, for seed 001's comparison table."""
    rows = []
    for algorithm in ALGORITHMS[collective]:
        cost = collective_cost(collective, algorithm, size, workers)
        time = cost.time(bandwidth, latency)
        slide = SLIDE_TOTALS.get(algorithm) if collective is Collective.ALL_REDUCE else None
        rows.append(
            AlgorithmRow(
                algorithm=algorithm,
                cost=cost,
                time=time,
                busbw=(size / time) * bus_factor(collective, workers) if time > 0 else 0.0,
                slide_formula=slide[0] if slide else "-",
                slide_total=slide[1](size, workers) if slide else None,
                slide_time=slide[2] if slide else "-",
            )
        )
    return tuple(rows)
