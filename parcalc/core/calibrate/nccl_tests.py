"""Reading nccl-tests output (github.com/NVIDIA/nccl-tests): the table of one `*_perf` run.

A data row is a line that starts with an integer (nccl-tests' own comments start with `#`, and
NCCL prints a bare `NCCL version ...` line); everything else is a comment. Two layouts exist
(tests/fixtures/nccl/README.md):

    size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong   (13 fields)
    size count type redop      | time algbw busbw error  | time algbw busbw error    (12, 2021-22)

`size` in bytes (all_gather / reduce_scatter: the whole gathered buffer), `time` in
microseconds, `algbw` / `busbw` in GB/s (1e9 B/s); `#wrong` may be `N/A`. A launcher's prefix on
every line (srun's `0: `, Open MPI's `[1,0]<stdout>:`) is removed first.

What the table does not print, it is told or it is inferred, in this order:

- the collective: `--collective`; the `# Collective test starting: all_reduce_perf` section
  header; a `*_perf` name on any line (a pasted command line); else the columns: busbw/algbw
  above 1 is an all-reduce, below 1 with `sum` a reduce-scatter (`none`: all-gather or
  all-to-all, which the columns cannot tell apart: an error asking for --collective);
- the ranks: `--ranks`; the `#  Rank N Group G Pid P on HOST device D [bus] NAME` lines;
  an `nRanks N` line; busbw/algbw, which is 2(n-1)/n (all-reduce) or (n-1)/n (all-gather,
  reduce-scatter) on every row (nccl-tests src/all_reduce.cu:59-64, all_gather.cu:38-43); a
  pasted launch line (`mpirun -np 16 ... all_reduce_perf -g 1`); `nThread T nGpus G` of a single
  process; a sendrecv without any of these is taken as one pair (its busbw is algbw whatever n is);
- the nodes: the distinct hosts of the `Rank` lines, or a pasted `mpirun -np N -npernode k`.

A file with several `Collective test starting` sections (one log, four tests) gives the section
of `--collective`. Sizes must increase from row to row (one run per file).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from parcalc.core import collectives
from parcalc.core.activations import check_count
from parcalc.core.choices import Collective
from parcalc.errors import InputError

GB = 1e9  # nccl-tests' GB/s are 1e9 B/s (src/common.cu: "GB/s" of size / time / 1e3 with time in us)
US = 1e-6

# nccl-tests' test binaries; the four parcalc calibrates from come first.
CALIBRATED = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
# nccl-tests' names of the collectives parcalc models
NCCL_TEST_OPS = {
    "all_reduce": Collective.ALL_REDUCE,
    "all_gather": Collective.ALL_GATHER,
    "reduce_scatter": Collective.REDUCE_SCATTER,
    "sendrecv": Collective.POINT_TO_POINT,
    "alltoall": Collective.ALL_TO_ALL,
    "broadcast": Collective.BROADCAST,
    "reduce": Collective.REDUCE,
}
KNOWN_TESTS = (
    *CALIBRATED,
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "hypercube",
)

_TEST_NAME = re.compile(
    r"\b(" + "|".join(sorted(KNOWN_TESTS, key=len, reverse=True)) + r")_perf\b"
)
_SECTION = re.compile(r"^#\s*Collective test starting:\s*(\w+?)(?:_perf)?\s*$")
_RANK_LINE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$"
)
_N_RANKS = re.compile(r"\bnRanks[\s:=]+(\d+)")
_THREADS_GPUS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_NCCL_VERSION = re.compile(r"NCCL version[:\s]+(\d[\w.+-]*)")
_LAUNCHER_PREFIX = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:)")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ROW_FIELDS = (13, 12)  # with and without the `root` column


@dataclass(frozen=True)
class NcclRow:
    """One size: out-of-place and in-place time (s), algbw and busbw (B/s)."""

    line: int
    size: int  # bytes, nccl-tests' convention
    count: int
    dtype: str
    redop: str
    time: float
    algbw: float
    busbw: float
    in_place_time: float
    in_place_algbw: float
    in_place_busbw: float


@dataclass(frozen=True)
class NcclTable:
    """One nccl-tests run as read: rows in increasing size, and how each fact was found."""

    name: str  # the file (or "stdin") the text came from, for messages
    collective: (
        str  # nccl-tests' name: all_reduce, all_gather, reduce_scatter, sendrecv, ...
    )
    collective_origin: str
    ranks: int
    ranks_origin: str
    nodes: int | None  # None: the text does not say
    nodes_origin: str
    devices: tuple[str, ...]  # device names of the Rank lines
    nccl_version: str  # "" when not printed
    rows: tuple[NcclRow, ...]


class MalformedRow(InputError):
    """A line that starts with a number but is not a row of the table."""

    def __init__(self, name: str, line: int, reason: str) -> None:
        super().__init__(f"{name}, line {line}: not an nccl-tests row ({reason})")
        self.line, self.reason = line, reason


def canonical_collective(name: str, flag: str = "--collective") -> str:
    """`all-reduce`, `allreduce`, `all_reduce_perf` -> `all_reduce` (nccl-tests' own names)."""
    compact = (
        name.strip().lower().removesuffix("_perf").replace("-", "").replace("_", "")
    )
    for known in KNOWN_TESTS:
        if known.replace("_", "") == compact:
            return known
    raise InputError(
        f"{flag}: unknown nccl-tests collective {name!r}; use one of {', '.join(CALIBRATED)}"
    )


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw as nccl-tests prints it (doc/PERFORMANCE.md; parcalc.core.collectives.bus_factor),
    by nccl-tests' name; gather and scatter as all-gather (nccl-tests gather.cu / scatter.cu:
    factor (n - 1) / n), hypercube 1 (hypercube.cu)."""
    op = NCCL_TEST_OPS.get(collective, Collective.ALL_GATHER if collective in ("gather", "scatter") else Collective.BROADCAST)
    return collectives.bus_factor(op, ranks)


def parse_nccl_tests(text: str, name: str = "input", collective: str | None = None, ranks: int | None = None,
                     nodes: int | None = None) -> NcclTable:  # fmt: skip
    """The table of one nccl-tests run in `text` (see the module docstring); InputError when the
    text is not nccl-tests output, a row is malformed, or what it measured cannot be told."""
    for flag, given in (("--ranks", ranks), ("--nodes", nodes)):
        if given is not None:
            check_count(flag, given)
    wanted = canonical_collective(collective) if collective else None
    lines = [_LAUNCHER_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    start, stop, section = _section(lines, name, wanted)
    preamble = lines[:start] if section else []
    body = lines[start:stop]
    rows, first_bad = _rows(body, start, name)
    if first_bad is not None and rows:
        raise first_bad
    if not rows:
        where = f" in its {section}_perf section" if section else ""
        why = f" (line {first_bad.line}: {first_bad.reason})" if first_bad else ""
        raise InputError(
            f"{name} is not nccl-tests output: no rows of 'size count type redop root time algbw busbw ...'{where}{why}"
        )
    if len(rows) < 2:
        raise InputError(
            f"{name}: only one message size (line {rows[0].line}); a calibration needs several (nccl-tests -b 8 -e 8G -f 2)"
        )
    header = preamble + body
    found, found_origin = _collective(header, section, rows, name, wanted)
    devices, hosts = _rank_lines(header)
    count, count_origin = _ranks(header, devices, found, rows, ranks, name)
    launch = _launch(header)
    if nodes is not None:
        node_count, nodes_origin = nodes, "--nodes"
    elif hosts:
        node_count, nodes_origin = (
            len(hosts),
            f"{len(hosts)} host{'s' if len(hosts) > 1 else ''} in the 'Rank' lines",
        )
    elif launch.nodes:
        node_count, nodes_origin = launch.nodes, "the launch line"
    else:
        node_count, nodes_origin = None, "not printed"
    if node_count is not None and not 1 <= node_count <= count:
        raise InputError(
            f"{name}: {node_count} nodes for {count} ranks (from {nodes_origin}); give --nodes"
        )
    version = next((m[1] for line in header if (m := _NCCL_VERSION.search(line))), "")
    return NcclTable(name, found, found_origin, count, count_origin, node_count, nodes_origin, tuple(devices.values()), version,
                     tuple(rows))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Sections and rows


def _section(lines: list[str], name: str, wanted: str | None) -> tuple[int, int, str]:
    """(first line, end, test name) of the section to read; the whole text when it has none."""
    starts = [
        (i, canonical_collective(m[1], name))
        for i, line in enumerate(lines)
        if (m := _SECTION.match(line.strip()))
    ]
    if not starts:
        return 0, len(lines), ""
    bounds = [
        (i, (starts[j + 1][0] if j + 1 < len(starts) else len(lines)), test)
        for j, (i, test) in enumerate(starts)
    ]
    tests = [test for _, _, test in bounds]
    if wanted is not None:
        chosen = [b for b in bounds if b[2] == wanted]
        if not chosen:
            raise InputError(
                f"{name} has no {wanted}_perf section (it has: {', '.join(t + '_perf' for t in tests)})"
            )
    elif len(set(tests)) > 1:
        raise InputError(
            f"{name} holds several tests ({', '.join(t + '_perf' for t in tests)}); pick one with --collective"
        )
    else:
        chosen = bounds
    if len(chosen) > 1:
        raise InputError(
            f"{name} holds {len(chosen)} runs of {chosen[0][2]}_perf (lines {chosen[0][0] + 1} and {chosen[1][0] + 1}); split the file"
        )
    return chosen[0]


def _rows(
    body: list[str], offset: int, name: str
) -> tuple[list[NcclRow], MalformedRow | None]:
    """The rows, and the first line that starts with a number but is no row. That line is an
    error in a table that has rows, and the reason a text without any is not nccl-tests output."""
    rows: list[NcclRow] = []
    first_bad: MalformedRow | None = None
    layouts: tuple[int, ...] = _ROW_FIELDS
    for index, raw in enumerate(body):
        fields = raw.split()
        if fields[:4] == [
            "#",
            "size",
            "count",
            "type",
        ]:  # the column header says which layout follows
            layouts = (13,) if "root" in fields else (12,)
        if not fields or not fields[0].isdigit():
            continue  # a comment, a `NCCL version` line, a log line
        number = offset + index + 1
        try:
            row = _row(fields, number, name, layouts)
        except MalformedRow as error:
            first_bad = first_bad or error
            continue
        if rows and row.size <= rows[-1].size:
            raise InputError(
                f"{name}, line {number}: size {row.size} B after {rows[-1].size} B; sizes must increase (one run per file)"
            )
        rows.append(row)
    return rows, first_bad


def _row(
    fields: list[str], number: int, name: str, layouts: tuple[int, ...] = _ROW_FIELDS
) -> NcclRow:
    def bad(reason: str) -> MalformedRow:
        return MalformedRow(name, number, reason)

    if len(fields) not in layouts:
        names: dict[tuple[int, ...], str] = {(13,): "13", (12,): "12 (the layout without root)"}
        layout = names.get(layouts, "13, or 12 without root")
        raise bad(f"{len(fields)} fields, expected {layout}")
    # types are names such as float, bfloat16, int8, f8e4m3; redops sum, prod, max, min, avg, none
    if (
        not fields[1].isdigit()
        or not _NAME.fullmatch(fields[2])
        or not _NAME.fullmatch(fields[3])
    ):
        raise bad("expected size, count, type and redop first")
    measures = fields[5:] if len(fields) == 13 else fields[4:]
    try:
        out_time, out_alg, out_bus, in_time, in_alg, in_bus = (
            float(v) for v in (*measures[0:3], *measures[4:7])
        )
    except ValueError:
        raise bad("time, algbw and busbw must be numbers") from None
    for wrong in (measures[3], measures[7]):
        if wrong != "N/A" and not re.fullmatch(
            r"[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?", wrong
        ):
            raise bad(f"#wrong / error column {wrong!r} is neither a number nor N/A")
    values = (out_time, out_alg, out_bus, in_time, in_alg, in_bus)
    if (
        not all(v >= 0 and v != float("inf") for v in values)
        or out_time <= 0
        or in_time <= 0
    ):
        raise bad("times must be positive and bandwidths not negative")
    size = int(fields[0])
    # algbw = size / time (GB/s, time in us): a row whose columns slipped fails this
    expected = size / out_time / 1e3
    if out_alg >= 0.1 and abs(out_alg - expected) > 0.05 * expected + 0.01:
        raise bad(f"algbw {out_alg} GB/s is not size / time = {expected:.4g} GB/s")
    return NcclRow(number, size, int(fields[1]), fields[2], fields[3], out_time * US, out_alg * GB, out_bus * GB, in_time * US,
                   in_alg * GB, in_bus * GB)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What was measured


def _collective(
    header: list[str], section: str, rows: list[NcclRow], name: str, wanted: str | None
) -> tuple[str, str]:
    if wanted is not None:
        return wanted, "--collective"
    if section:
        return section, "the 'Collective test starting' line"
    named = sorted(
        {
            canonical_collective(m[1], name)
            for line in header
            for m in _TEST_NAME.finditer(line)
        }
    )
    if len(named) == 1:
        return named[0], f"the name {named[0]}_perf in the text"
    if len(named) > 1:
        raise InputError(
            f"{name} names several tests ({', '.join(n + '_perf' for n in named)}); pick one with --collective"
        )
    ratio = _bus_ratio(rows)
    if ratio is None:
        raise InputError(
            f"{name}: cannot tell which collective was measured (no *_perf name, no row above 1 GB/s); give --collective"
        )
    redops = {row.redop for row in rows}
    if ratio > 1.0005:
        return "all_reduce", f"busbw / algbw = {ratio:.4g} > 1"
    if ratio < 0.9995 and redops == {"sum"}:
        return "reduce_scatter", f"busbw / algbw = {ratio:.4g} < 1 with redop sum"
    if ratio < 0.9995:
        raise InputError(
            f"{name}: busbw / algbw = {ratio:.4g} with redop {'/'.join(sorted(redops))} fits all_gather and alltoall; give --collective"
        )
    raise InputError(
        f"{name}: busbw = algbw fits sendrecv, broadcast and reduce; give --collective"
    )


def _bus_ratio(rows: list[NcclRow]) -> float | None:
    """busbw / algbw of the fastest rows (at least 1 GB/s, so print rounding stays below 0.5 %)."""
    usable = sorted((r for r in rows if r.algbw >= 1 * GB), key=lambda r: r.algbw)[-3:]
    return statistics.median(r.busbw / r.algbw for r in usable) if usable else None


def _ranks_from_ratio(collective: str, rows: list[NcclRow]) -> int | None:
    """n from busbw / algbw = 2(n-1)/n or (n-1)/n, when the printed digits single out one n."""
    usable = sorted(
        (r for r in rows if r.algbw >= 1 * GB and r.busbw > 0), key=lambda r: r.algbw
    )[-3:]
    if not usable or collective not in (
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "alltoall",
    ):
        return None
    ratio = statistics.median(r.busbw / r.algbw for r in usable)
    top = 2.0 if collective == "all_reduce" else 1.0
    if not 0 < ratio < top:
        return None
    estimate = top / (top - ratio)  # solves ratio = top x (n - 1) / n
    fastest = usable[-1]
    # both bandwidths are printed to 0.01 GB/s: the ratio is known to this relative precision
    tolerance = ratio * (0.005 * GB / fastest.algbw + 0.005 * GB / fastest.busbw)
    fits = [
        n
        for n in range(max(2, round(estimate) - 2), round(estimate) + 3)
        if abs(bus_factor(collective, n) - ratio) <= tolerance
    ]
    return fits[0] if len(fits) == 1 else None


def _rank_lines(header: list[str]) -> tuple[dict[int, str], set[str]]:
    devices: dict[int, str] = {}
    hosts: set[str] = set()
    for line in header:
        match = _RANK_LINE.match(line.strip())
        if match:
            devices[int(match[1])] = match[3].strip()
            hosts.add(match[2])
    return devices, hosts


@dataclass(frozen=True)
class _Launch:
    ranks: int = (
        0  # processes x the test's threads (-t) x GPUs per thread (-g); 0: not given
    )
    nodes: int = 0  # 0: not given


def _launch(header: list[str]) -> _Launch:
    """What a pasted launch line says: launcher flags before the `*_perf` binary (Open MPI's
    mpirun -np / -npernode, or srun's -n / -N), the test's own flags after it."""
    for line in header:
        match = _TEST_NAME.search(line)
        if not match:
            continue
        before, after = line[: match.start()], line[match.end() :]
        per_process = (_flag(after, ("-t",)) or 1) * (_flag(after, ("-g",)) or 1)
        if re.search(r"\bsrun\b", before):
            processes, nodes = (
                _flag(before, ("-n", "--ntasks")),
                _flag(before, ("-N", "--nodes")),
            )
        else:
            processes = _flag(before, ("-np", "-n", "--np"))
            per_node = _flag(before, ("-N", "-npernode", "--npernode"))
            nodes = -(-processes // per_node) if processes and per_node else 0
        ranks = (processes or 1) * per_process
        return _Launch(ranks if ranks > 1 else 0, nodes)
    return _Launch()


def _flag(text: str, names: tuple[str, ...]) -> int:
    for name in names:
        match = re.search(rf"(?:^|\s){re.escape(name)}(?:\s+|=)(\d+)\b", text)
        if match:
            return int(match[1])
    return 0


def _ranks(header: list[str], devices: dict[int, str], collective: str, rows: list[NcclRow], given: int | None,
           name: str) -> tuple[int, str]:  # fmt: skip
    from_ratio = _ranks_from_ratio(collective, rows)
    stated: list[tuple[int, str]] = []
    if given is not None:
        stated.append((given, "--ranks"))
    if devices:
        stated.append((max(devices) + 1, "the 'Rank' lines"))
    counted = next((int(m[1]) for line in header if (m := _N_RANKS.search(line))), 0)
    if counted:
        stated.append((counted, "the nRanks line"))
    if stated:
        count, origin = stated[0]
        if count < 2:
            raise InputError(
                f"{name}: {count} rank (from {origin}); a collective needs at least 2"
            )
        if from_ratio is not None and from_ratio != count:
            factor = bus_factor(collective, from_ratio)
            raise InputError(
                f"{name}: {count} ranks (from {origin}), but busbw / algbw = {factor:.4g} means {from_ratio} for {collective}"
            )
        return count, origin
    if from_ratio is not None:
        return (
            from_ratio,
            f"busbw / algbw = {bus_factor(collective, from_ratio):.4g} on the fastest rows",
        )
    launch = _launch(header)
    if launch.ranks:
        return launch.ranks, "the launch line (processes x -t x -g)"
    threads = next(
        (
            (int(m[1]) * int(m[2]))
            for line in header
            if (m := _THREADS_GPUS.match(line.strip()))
        ),
        0,
    )
    if threads > 1:
        return threads, "nThread x nGpus of a single process"
    if collective == "sendrecv":
        return (
            2,
            "not printed; sendrecv's busbw does not depend on it (one pair assumed)",
        )
    raise InputError(
        f"{name}: cannot tell how many ranks ran (no 'Rank' lines, no row above 1 GB/s); give --ranks"
    )
