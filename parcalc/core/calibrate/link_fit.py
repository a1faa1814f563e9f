"""A link preset fitted to an nccl-tests table, in the sense parcalc's models read a link.

parcalc reads a link in two places: the NCCL model of `fit` (parcalc.core.timing.network) and
the alpha-beta model of `comm-volume` (parcalc.core.comm, collectives). The fit serves both:

- bus bandwidth B = the largest out-of-place busbw of the table. nccl-tests' busbw is exactly
  the bus bandwidth of NCCL's ring (docs/nccl-tuning.md sec. 11), and the largest one is where
  the fixed costs are best amortised; noise on a shared machine only ever slows a run down, so
  the largest value, not a median, is the estimate of what the link sustains. (In the
  published tables it is the largest size's: A100 x 8 all-reduce 230.84 GB/s at 1 GiB, while
  256 and 512 MiB sit near 201 GB/s, which a median of the large sizes would report.)
- inside one node the preset's `bandwidth_per_direction` is B itself and `nccl_efficiency` is 1:
  the network model moves bus bytes at bandwidth x efficiency (Fabric.intra_bus_bandwidth), so it
  moves them at B; the alpha-beta model reads `bandwidth_per_direction` alone, so it does too.
  Keeping a datasheet bandwidth and putting B / datasheet into `nccl_efficiency` instead was
  rejected: on H100 the measured 482 GB/s (NVLS) exceeds NVLink 4's 450 GB/s, which is not a
  share, and comm-volume would keep the datasheet figure.
- across nodes the table measures the network cards: a ring that fills its nodes leaves each
  node through all of its n_NIC cards (network.py, rails), so one card's bandwidth is B / n_NIC
  (a point-to-point send uses its own GPU's g / n_NIC share: B x g / n_NIC). The intra-node link
  must not bind for the model to reach B: the reproduction below says which link it assumed.
- latency: the fixed cost of one call, t0 = t(S) - S_bus / B at the smallest sizes (the least of
  the three smallest), spread over the ring's steps k (2(n-1) for all-reduce, n-1 for
  all-gather and reduce-scatter, 1 for a send): alpha = t0 / k, the per-message latency the
  alpha-beta model multiplies by k. The packaged presets hold NCCL's per-step hwLat instead
  (3.4 us on NVLink), which leaves out NCCL's base latency of 8.4 us per call; NCCL's own model
  (network.py) reads neither, it uses NCCL's constants for the link's `nccl_hardware` class.
  From a table whose smallest message is above 64 KiB, t0 also holds pipeline fill and partial
  channels (NCCL's model is 1.5-2x optimistic there, docs/nccl-tuning.md sec. 12): an upper bound.

Checked: parcalc's NCCL model with the fitted link reproduces the measured time of the largest
size (tests/test_calibrate.py: within 10 %, in fact within 1 % on the NVLink fixtures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from parcalc.core.activations import check_count
from parcalc.core.calibrate.nccl_tests import (
    CALIBRATED,
    NCCL_TEST_OPS,
    NcclRow,
    NcclTable,
    bus_factor,
)
from parcalc.core.choices import Collective
from parcalc.core.hardware import Link, Sourced
from parcalc.core.timing.network import (
    CollectiveTime,
    Fabric,
    Placement,
    collective_time,
)
from parcalc.derivation import Column, Derivation, Result, Table, Term
from parcalc.errors import InputError

OPS = {name: NCCL_TEST_OPS[name] for name in CALIBRATED}
LATENCY_ROWS = 3  # the smallest sizes t0 is taken from
SMALL_MESSAGE = (
    64 * 2**10
)  # above this NCCL leaves LL: t0 from larger messages is an upper bound
ONE_NODE_RANKS = (
    8  # a table of at most this many ranks that does not name its hosts: one 8-GPU node
)
CALIBRATION = (
    "parcalc calibrate nccl (parcalc/core/calibrate/link_fit.py; docs/calibration.md)"
)
NCCL_TESTS_BUSBW = (
    "NVIDIA/nccl-tests doc/PERFORMANCE.md (busbw = algbw x 2(n-1)/n, (n-1)/n or 1)"
)
UNBOUNDED = Link("unbounded", "an intra-node link that does not bind", Sourced(math.inf, "B/s", "assumed"), Sourced(0.0, "s", "assumed"),
                 nccl_hardware="nvlink")  # fmt: skip


@dataclass(frozen=True)
class LinkFit:
    """What the table says about the link, each number a derivation."""

    table: NcclTable
    op: Collective
    nodes: int
    nodes_origin: str
    per_node: int  # ranks on each node
    nics_per_node: int  # network cards per node (multi-node tables only)
    nccl_hardware: str  # nvlink / pci inside a node, net across nodes
    plateau: NcclRow
    bus_bandwidth: Derivation  # B
    latency_row: NcclRow
    call_latency: Derivation  # t0
    step_latency: Derivation  # alpha
    link_bandwidth: Derivation  # what goes into bandwidth_per_direction
    latency_upper_bound: bool

    @property
    def across_nodes(self) -> bool:
        return self.nodes > 1


def ring_steps(op: Collective, ranks: int) -> int:
    """Steps of NCCL's ring (tuning.cc nsteps): what the alpha-beta model multiplies alpha by."""
    if op is Collective.ALL_REDUCE:
        return 2 * (ranks - 1)
    if op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        return ranks - 1
    return 1


def fit_link(
    table: NcclTable, nics_per_node: int | None = None, nccl_hardware: str | None = None
) -> LinkFit:
    """Fit the link (module docstring). `nics_per_node`: network cards per node of a table that
    spans nodes (default: one per GPU, rail-optimised as DGX/HGX nodes are)."""
    if nics_per_node is not None:
        check_count("--nics-per-node", nics_per_node)
    if table.collective not in OPS:
        raise InputError(
            f"{table.name}: parcalc fits links to {', '.join(c + '_perf' for c in CALIBRATED)}, not {table.collective}_perf"
        )
    op, n = OPS[table.collective], table.ranks
    nodes, nodes_origin = table.nodes, table.nodes_origin
    if nodes is None:
        if n > ONE_NODE_RANKS:
            raise InputError(
                f"{table.name}: {n} ranks, and the table does not say on how many nodes; give --nodes"
            )
        nodes, nodes_origin = (
            1,
            f"assumed: the table names no hosts, and {n} ranks fit one {ONE_NODE_RANKS}-GPU node",
        )
    if n % nodes:
        raise InputError(
            f"{table.name}: {n} ranks do not split evenly over {nodes} nodes"
        )
    per_node = n // nodes
    nics = nics_per_node if nics_per_node is not None else per_node
    nics_origin = (
        "--nics-per-node"
        if nics_per_node is not None
        else "one per GPU, rail-optimised (default)"
    )
    if nics < 1:
        raise InputError(f"--nics-per-node: at least 1, got {nics}")
    hardware = nccl_hardware or ("net" if nodes > 1 else "nvlink")
    if nodes > 1 and hardware != "net":
        raise InputError(
            f"--nccl-hardware {hardware}: a table across {nodes} nodes measures the network (net)"
        )
    rows = table.rows
    plateau = max(rows, key=lambda r: (r.busbw, r.size))
    if plateau.busbw <= 0:
        raise InputError(
            f"{table.name}: every busbw is 0.00 GB/s; measure larger messages (nccl-tests -e 8G)"
        )
    bandwidth = Derivation(
        key="bus_bandwidth", label="Bus bandwidth (the largest busbw measured)", symbol="B", latex_symbol="B",
        formula="$busbw", formula_latex="$busbw",
        inputs=(Term("busbw", "max busbw", r"\max \mathrm{busbw}", plateau.busbw, "B/s",
                     f"the largest out-of-place busbw: {plateau.size:,} B, line {plateau.line} of {table.name}", table.name),),
        value=plateau.busbw, unit="B/s", source=NCCL_TESTS_BUSBW,
        assumptions=("noise only slows a run: the largest busbw, not a median of the large sizes, estimates what the link sustains",),
    )  # fmt: skip
    latency_row, call_latency = _call_latency(table, bandwidth)
    steps = ring_steps(op, n)
    step_latency = Derivation(
        key="step_latency", label="Latency per ring step (alpha)", symbol="α", latex_symbol=r"\alpha",
        formula="$t0 / $k", formula_latex=r"\frac{$t0}{$k}",
        inputs=(call_latency.as_term("t0"), Term("k", "k", "k", steps, "", f"steps of the ring {table.collective} on {n} ranks")),
        value=call_latency.value / steps, unit="s", source="alpha-beta model: steps x alpha + bytes on the busiest port / beta",
    )  # fmt: skip
    return LinkFit(table, op, nodes, nodes_origin, per_node, nics, hardware, plateau, bandwidth, latency_row, call_latency, step_latency,
                   _link_bandwidth(op, bandwidth, nodes, per_node, nics, nics_origin), latency_row.size > SMALL_MESSAGE)  # fmt: skip


def _call_latency(
    table: NcclTable, bandwidth: Derivation
) -> tuple[NcclRow, Derivation]:
    """t0 = t - S_bus / B at the smallest sizes, the least of them."""
    factor = bus_factor(table.collective, table.ranks)

    def fixed_cost(row: NcclRow) -> float:
        return row.time - row.size * factor / bandwidth.value

    row = min(table.rows[:LATENCY_ROWS], key=fixed_cost)
    if fixed_cost(row) <= 0:
        raise InputError(f"{table.name}: its smallest messages already run at the full bus bandwidth, so it shows no latency; "
                         "measure from small sizes (nccl-tests -b 8)")  # fmt: skip
    value = fixed_cost(row)
    derivation = Derivation(
        key="call_latency", label="Fixed cost of one call", symbol="t0", latex_symbol="t_0",
        formula="$t - $f × $S / $B", formula_latex=r"$t - $f \cdot \frac{$S}{$B}",
        inputs=(Term("t", "t(S)", "t(S)", row.time, "s", f"measured time at S (line {row.line})", table.name),
                Term("f", "f", "f", factor, "", f"busbw / algbw of {table.collective} on {table.ranks} ranks", NCCL_TESTS_BUSBW),
                Term("S", "S", "S", float(row.size), "B", f"message size (the least fixed cost of the {LATENCY_ROWS} smallest)", table.name),
                bandwidth.as_term("B")),
        value=value, unit="s", source=CALIBRATION,
        assumptions=(() if row.size <= SMALL_MESSAGE else
                     ((f"the table's smallest message is {row.size:,} B (> 64 KiB): t0 also holds pipeline fill and partial channels, "
                       "an upper bound of the latency"),)),
    )  # fmt: skip
    return row, derivation


def _link_bandwidth(
    op: Collective,
    bandwidth: Derivation,
    nodes: int,
    per_node: int,
    nics: int,
    nics_origin: str,
) -> Derivation:
    """bandwidth_per_direction: B inside a node; one network card's share of B across nodes."""
    if nodes == 1:
        return Derivation("link_bandwidth", "Link bandwidth per direction (NCCL's bus bandwidth)", "B_link", r"B_{\mathrm{link}}",
                          "$B", "$B", (bandwidth.as_term("B"),), bandwidth.value, "B/s", CALIBRATION,
                          ("nccl_efficiency 1: the bandwidth is already what NCCL achieved",))  # fmt: skip
    nic_term = Term(
        "nics",
        "n_NIC",
        r"n_{\mathrm{NIC}}",
        nics,
        "",
        f"network cards per node ({nics_origin})",
    )
    inputs: tuple[Term, ...]
    if (
        op is Collective.POINT_TO_POINT
    ):  # a send uses its own GPU's share of the cards (network.py _send)
        g = Term("g", "g", "g", per_node, "", "GPUs per node")
        formula, latex, inputs, value = (
            "$B × $g / $nics",
            r"\frac{$B \cdot $g}{$nics}",
            (bandwidth.as_term("B"), g, nic_term),
            bandwidth.value * per_node / nics,
        )
    else:  # a ring that fills its nodes leaves each through all n_NIC cards (network.py _ring_bus_bandwidth)
        formula, latex, inputs, value = (
            "$B / $nics",
            r"\frac{$B}{$nics}",
            (bandwidth.as_term("B"), nic_term),
            bandwidth.value / nics,
        )
    return Derivation("link_bandwidth", "One network card's bandwidth per direction", "B_NIC", r"B_{\mathrm{NIC}}", formula, latex,
                      inputs, value, "B/s", "parcalc.core.timing.network: rail-optimised nodes, one card's share of the ring",
                      (f"{nics} network cards per node carry the ring between nodes",))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The preset


def link_document(fit: LinkFit, name: str, when: str, version: str) -> dict[str, Any]:
    """The link preset as a YAML-ready mapping; every number with its unit and source."""
    table = fit.table
    first, last = table.rows[0], table.rows[-1]
    nccl = (
        f"NCCL {table.nccl_version}"
        if table.nccl_version
        else "NCCL version not printed"
    )
    placement = f"{table.ranks} ranks on {fit.nodes} node{'s' if fit.nodes > 1 else ''}"
    document: dict[str, Any] = {
        "kind": "link",
        "name": name,
        "sources": {
            "nccl_tests": f"nccl-tests {table.collective}_perf output {table.name}: {placement}, {len(table.rows)} sizes "
                          f"{first.size:,}-{last.size:,} B; {nccl}",
            "calibration": f"parcalc {version} calibrate nccl, {when}: bandwidth = the largest busbw, latency = the fixed cost of the "
                           "smallest messages per ring step (parcalc/core/calibrate/link_fit.py, docs/calibration.md)",
        },
        "bandwidth_per_direction": {"value": _bandwidth_text(fit.link_bandwidth.value), "source": "nccl_tests",
                                    "note": _bandwidth_note(fit)},
        "latency": {"value": f"{fit.step_latency.value * 1e6:.4g} us", "source": "calibration", "note": _latency_note(fit)},
        "nccl_hardware": fit.nccl_hardware,
    }  # fmt: skip
    if not fit.across_nodes:
        document["nccl_efficiency"] = {"value": 1, "source": "calibration",
                                       "note": "bandwidth_per_direction is already what NCCL's ring achieved"}  # fmt: skip
    document["measured"] = {
        "collective": table.collective, "ranks": table.ranks, "nodes": fit.nodes, "source": "nccl_tests",
        "rows": [{"size": f"{r.size} B", "time": f"{r.time * 1e6:.7g} us", "algbw": _bandwidth_text(r.algbw),
                  "busbw": _bandwidth_text(r.busbw)} for r in table.rows],
    }  # fmt: skip
    document["notes"] = _notes(fit)
    return document


def _bandwidth_text(value: float) -> str:
    return f"{value / 1e9:.10g} GB/s"


def _bandwidth_note(fit: LinkFit) -> str:
    where = f"the largest busbw, {fit.plateau.busbw / 1e9:.6g} GB/s at {fit.plateau.size:,} B"
    if not fit.across_nodes:
        return (
            f"{where}: what NCCL's {fit.table.collective} moved per GPU and direction"
        )
    if fit.op is Collective.POINT_TO_POINT:
        return f"{where}, x {fit.per_node} GPUs / {fit.nics_per_node} cards per node: one card's bandwidth"
    return f"{where}, / {fit.nics_per_node} cards per node: one card's bandwidth (a ring leaves a node through all of them)"


def _latency_note(fit: LinkFit) -> str:
    steps = int(fit.step_latency.term("k").value)
    text = (f"alpha per ring step: t0 = {fit.call_latency.value * 1e6:.4g} us (time - bus bytes / bandwidth at "
            f"{fit.latency_row.size:,} B) / {steps} steps")  # fmt: skip
    return text + (
        "; an upper bound: the table has no message under 64 KiB"
        if fit.latency_upper_bound
        else ""
    )


def _notes(fit: LinkFit) -> list[str]:
    table = fit.table
    notes = [
        f"Calibrated from {table.name}: collective from {table.collective_origin}; ranks from {table.ranks_origin}; nodes from {fit.nodes_origin}.",
        (
            "NCCL's cost model in parcalc (fit) reads bandwidth_per_direction x nccl_efficiency and its own latency constants for "
            "nccl_hardware; comm-volume's alpha-beta model reads bandwidth_per_direction and latency."
        ),
    ]
    if fit.across_nodes:
        notes.append(f"A network card's link: use it as --inter-node-link with --nics-per-node {fit.nics_per_node}; the model reaches "
                     "the measured bandwidth only if the link inside the node does not bind first.")  # fmt: skip
    return notes


# ---------------------------------------------------------------------------------------------
# Holding the model against the table


@dataclass(frozen=True)
class Reproduction:
    row: NcclRow
    model: CollectiveTime

    @property
    def ratio(self) -> float:
        return self.model.time / self.row.time


def nccl_arch(devices: tuple[str, ...]) -> str:
    """NCCL's architecture row for the GPUs of the Rank lines (Hopper's when none is named)."""
    text = " ".join(devices).upper()
    if "V100" in text:
        return "sm70"
    if any(
        tag in text
        for tag in (
            "A100",
            "A800",
            "A30",
            "A40",
            "A10",
            "L40",
            "L4",
            "RTX 30",
            "RTX 40",
            "RTX A",
        )
    ):
        return "sm80"
    return "sm90"


def reproduce(
    fit: LinkFit, link: Link, intra: Link | None = None
) -> tuple[Reproduction, ...]:
    """parcalc's NCCL model of every row with the calibrated link (across nodes: as the network
    card, beside `intra`, or a link inside the node that does not bind)."""
    n, k = fit.table.ranks, fit.per_node
    arch = nccl_arch(fit.table.devices)
    if fit.across_nodes:
        inside = intra or UNBOUNDED
        fabric = Fabric(
            k,
            inside,
            link,
            fit.nics_per_node,
            arch,
            inside.nccl_hardware if inside.nccl_hardware != "net" else "nvlink",
        )
    else:
        fabric = Fabric(
            n,
            link,
            link,
            n,
            arch,
            link.nccl_hardware if link.nccl_hardware != "net" else "pci",
        )
    group = (
        Placement(2, 1 if fit.across_nodes else 2)
        if fit.op is Collective.POINT_TO_POINT
        else Placement(n, k)
    )
    return tuple(
        Reproduction(row, collective_time(fit.op, float(row.size), group, fabric))
        for row in fit.table.rows
    )


def link_result(
    fit: LinkFit,
    link: Link,
    checks: tuple[Reproduction, ...],
    intra: Link | None = None,
) -> Result:
    """What `parcalc calibrate nccl` shows: the fit, and the model against every size."""
    table = fit.table
    largest = checks[-1]
    error = Derivation(
        key="reproduction", label="parcalc's NCCL model at the largest size, against the measurement", symbol="ε", latex_symbol=r"\varepsilon",
        formula="$t_model / $t_measured - 1", formula_latex=r"\frac{$t_model}{$t_measured} - 1",
        inputs=(Term("t_model", "t_model", r"t_{\mathrm{model}}", largest.model.time, "s",
                     f"{largest.model.algorithm} / {largest.model.protocol} at {largest.row.size:,} B", "parcalc.core.timing.network"),
                Term("t_measured", "t_measured", r"t_{\mathrm{measured}}", largest.row.time, "s", f"line {largest.row.line}", table.name)),
        value=largest.ratio - 1, unit="fraction", source="parcalc.core.timing.network.collective_time with the calibrated link",
    )  # fmt: skip
    inputs: tuple[Term, ...] = (
        Term("n", "n", "n", table.ranks, "", f"ranks ({table.ranks_origin})"),
        Term("nodes", "nodes", "nodes", fit.nodes, "", f"nodes ({fit.nodes_origin})"),
    )
    if fit.across_nodes:
        inputs += (fit.link_bandwidth.term("nics"),)
    # sizes as nccl-tests prints them (exact bytes), not as SI-prefixed megabytes of powers of two
    columns = (Column("size", "size (B)"), Column("time", "measured", "s"), Column("busbw", "busbw", "B/s"), Column("model", "model", "s"),
               Column("algorithm", "NCCL choice"), Column("ratio", "model/meas."))  # fmt: skip
    rows = tuple((float(c.row.size), c.row.time, c.row.busbw, c.model.time, f"{c.model.algorithm}/{c.model.protocol}", round(c.ratio, 3))
                 for c in checks)  # fmt: skip
    derivations = [fit.bus_bandwidth, fit.call_latency, fit.step_latency]
    if fit.across_nodes:
        derivations.append(fit.link_bandwidth)
    derivations.append(error)
    assumptions = [f"collective {table.collective} from {table.collective_origin}",
                   (f"NCCL architecture row {nccl_arch(table.devices)} ({'from the device names' if table.devices else 'no device named: Hopper'}; "
                   "it only moves the small-message protocols)")]  # fmt: skip
    if fit.across_nodes:
        inside = (
            intra.name
            if intra is not None
            else "a link inside the node that does not bind"
        )
        assumptions.append(
            f"the model's group: {fit.per_node} GPUs per node, {fit.nics_per_node} network cards per node, {inside}"
        )
    assumptions.append(
        "NCCL's model is 1.5-2x optimistic between 1 and 32 MiB (docs/nccl-tuning.md sec. 12): the ratio column shows it"
    )
    placement = f"{table.ranks} ranks on {fit.nodes} node{'s' if fit.nodes > 1 else ''}"
    return Result(
        command="calibrate nccl",
        title=f"Link from {table.name}: {table.collective}, {placement}",
        inputs=inputs,
        derivations=tuple(derivations),
        tables=(
            Table("sizes", "measured against parcalc's NCCL model", columns, rows),
        ),
        assumptions=tuple(assumptions),
        settings=(
            ("collective", table.collective),
            ("file", table.name),
            ("nccl_hardware", fit.nccl_hardware),
        ),
    )
