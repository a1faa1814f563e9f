"""`parcalc calibrate nccl|gemm` (parcalc.core.calibrate): nccl-tests tables read exactly, links
fitted so that parcalc's NCCL model gives back the measured time, GEMM sweeps on the CPU, the
presets they write loading and serving `fit`, and bad input as one line.

Expected values are read off the fixture files (tests/fixtures/nccl, each with its source)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parcalc.cli import app
from parcalc.core.calibrate.nccl_tests import parse_nccl_tests
from parcalc.core.choices import Collective
from parcalc.core.timing.network import Fabric, Placement, collective_time
from parcalc.errors import InputError, PresetError
from parcalc.preset_hardware import link_from_document
from parcalc.presets import load_gpu, load_link

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
GB, US = 1e9, 1e-6

# ---------------------------------------------------------------------------------------------
# Reading nccl-tests output

# file, options, collective, ranks, nodes (None: not printed), rows, (first size, last size), last row's busbw (GB/s)
TABLES = [
    ("a100x8_nvlink_all_reduce.txt", {}, "all_reduce", 8, 1, 11, (2**20, 2**30), 230.84),
    ("a100x8_nvlink_sendrecv.txt", {}, "sendrecv", 8, None, 4, (2**27, 2**30), 195.10),
    ("a100x8_nvlink_all_reduce_mpi.txt", {}, "all_reduce", 8, 1, 30, (8, 2**32), 232.81),
    ("a100x8_nvlink_all_reduce_g8.txt", {}, "all_reduce", 8, 1, 30, (8, 2**32), 232.44),
    ("h100x8_nvlink_all_reduce.txt", {}, "all_reduce", 8, 1, 10, (2**25, 2**34), 482.27),
    ("h100x8_nvlink_all_gather.txt", {}, "all_gather", 8, 1, 10, (2**25, 2**34), 361.86),
    ("h100x8_nvlink_reduce_scatter.txt", {}, "reduce_scatter", 8, 1, 10, (2**25, 2**34), 364.76),
    ("h100x8_nvlink_sendrecv.txt", {}, "sendrecv", 8, 1, 10, (2**25, 2**34), 367.25),
    ("h100x4_nvlink_all_reduce.txt", {}, "all_reduce", 4, 1, 10, (2**25, 2**34), 367.46),
    ("h100x4_nvlink_all_gather.txt", {}, "all_gather", 4, 1, 10, (2**25, 2**34), 347.75),
    ("a100x16_roce_all_reduce.txt", {}, "all_reduce", 16, 2, 25, (64, 2**30), 87.18),
    ("h100x16_ib_all_reduce.txt", {}, "all_reduce", 16, 2, 31, (8, 2**33), 467.54),
    ("h100x16_roce_all_reduce.txt", {}, "all_reduce", 16, None, 5, (2**30, 2**34), 464.57),
    ("h200x16_roce_all_gather.txt", {"collective": "all_gather"}, "all_gather", 16, None, 24, (2**10, 2**33), 325.52),
    ("a100x32_ib_sharp_all_reduce.txt", {}, "all_reduce", 32, None, 31, (8, 2**33), 115.64),
    ("a100x16_efa_all_reduce.txt", {}, "all_reduce", 16, None, 29, (8, 2**31), 78.33),
    ("h100x16_efa_all_reduce.txt", {}, "all_reduce", 16, None, 32, (8, 2**34), 487.09),
    ("h100x16_tcpxo_all_reduce.txt", {}, "all_reduce", 16, 2, 31, (8, 2**33), 338.82),
]  # fmt: skip


def read(name: str, **options: object):
    return parse_nccl_tests((FIXTURES / name).read_text(), name, **options)  # type: ignore[arg-type]


def test_every_fixture_is_listed() -> None:
    assert sorted(t[0] for t in TABLES) == sorted(
        p.name for p in FIXTURES.glob("*.txt")
    )


@pytest.mark.parametrize(
    ("name", "options", "collective", "ranks", "nodes", "count", "sizes", "busbw"),
    TABLES,
    ids=[t[0] for t in TABLES],
)
def test_fixture_tables(
    name: str,
    options: dict,
    collective: str,
    ranks: int,
    nodes: int | None,
    count: int,
    sizes: tuple,
    busbw: float,
) -> None:
    table = read(name, **options)
    assert (table.collective, table.ranks, table.nodes, len(table.rows)) == (
        collective,
        ranks,
        nodes,
        count,
    )
    assert (table.rows[0].size, table.rows[-1].size) == sizes
    assert table.rows[-1].busbw == pytest.approx(busbw * GB, rel=1e-12)
    assert all(
        b.size > a.size for a, b in zip(table.rows, table.rows[1:], strict=False)
    )


def test_exact_values_of_a_new_layout_row() -> None:
    # a100x8_nvlink_all_reduce.txt, first row: 1048576 262144 float sum -1 | 78.77 13.31 23.29 0 | 81.31 12.90 22.57 0
    row = read("a100x8_nvlink_all_reduce.txt").rows[0]
    assert (row.size, row.count, row.dtype, row.redop) == (
        1048576,
        262144,
        "float",
        "sum",
    )
    assert (row.time, row.algbw, row.busbw) == pytest.approx(
        (78.77 * US, 13.31 * GB, 23.29 * GB), rel=1e-12
    )
    assert (row.in_place_time, row.in_place_algbw, row.in_place_busbw) == pytest.approx(
        (81.31 * US, 12.90 * GB, 22.57 * GB), rel=1e-12
    )


def test_old_layout_without_root_column() -> None:
    # a100x32_ib_sharp_all_reduce.txt (2021-22 layout, 12 fields): 8 2 float sum 58.23 0.00 0.00 0e+00 56.02 ...
    table = read("a100x32_ib_sharp_all_reduce.txt")
    assert (table.rows[0].size, table.rows[0].time, table.rows[0].in_place_time) == (
        8,
        pytest.approx(58.23 * US),
        pytest.approx(56.02 * US),
    )
    assert table.rows[-1].time == pytest.approx(143927 * US)
    # 2 x 31/32: the README's inferred 32 ranks
    assert table.ranks_origin.startswith("busbw / algbw = 1.938")


def test_na_wrong_column_and_bare_nccl_version_line() -> None:
    sendrecv = read("h100x8_nvlink_sendrecv.txt")  # in-place #wrong is N/A
    assert (
        sendrecv.rows[2].busbw == pytest.approx(162.54 * GB)
        and sendrecv.nccl_version == "2.29.2"
    )
    # `NCCL version 2.26.6+cuda12.8` without '#'
    gather = read("h200x16_roce_all_gather.txt", collective="all_gather")
    assert gather.nccl_version == "2.26.6+cuda12.8"
    assert gather.rows[0].time == pytest.approx(28.70 * US)


def test_what_the_table_says_and_how_it_was_found() -> None:
    table = read("a100x8_nvlink_all_reduce.txt")
    assert (
        table.devices[0] == "NVIDIA A100-SXM4-40GB"
        and table.ranks_origin == "the 'Rank' lines"
    )
    assert (
        read("h100x8_nvlink_all_gather.txt").collective_origin
        == "the 'Collective test starting' line"
    )
    # mpirun -n 16 -N 8
    assert read("h100x16_ib_all_reduce.txt").nodes_origin == "the launch line"


def test_types_with_digits() -> None:
    text = (
        (FIXTURES / "a100x8_nvlink_all_reduce.txt")
        .read_text()
        .replace("     float     sum", "  bfloat16     sum")
    )
    assert {row.dtype for row in parse_nccl_tests(text, "bf16.txt").rows} == {
        "bfloat16"
    }


def test_launcher_prefixes_are_removed() -> None:
    text = "\n".join(
        f"0: {line}"
        for line in (FIXTURES / "a100x8_nvlink_all_reduce.txt").read_text().splitlines()
    )
    assert len(parse_nccl_tests(text, "srun.txt").rows) == 11


def test_several_sections_need_a_choice() -> None:
    text = (FIXTURES / "h100x8_nvlink_all_reduce.txt").read_text() + (
        FIXTURES / "h100x8_nvlink_all_gather.txt"
    ).read_text()
    with pytest.raises(InputError, match=r"several tests .*pick one with --collective"):
        parse_nccl_tests(text, "log.txt")
    chosen = parse_nccl_tests(text, "log.txt", collective="all-gather")
    assert chosen.collective == "all_gather" and chosen.rows[-1].busbw == pytest.approx(
        361.86 * GB
    )


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("", "is not nccl-tests output: no rows of 'size count type", id="empty"),
    pytest.param("hello\n1. Introduction\nsome words\n", "is not nccl-tests output", id="prose"),
    pytest.param("x" * 2_000_000, "is not nccl-tests output", id="huge-line"),
    pytest.param("1024 256 float sum -1 12.0 0.09 0.15 0\n", "is not nccl-tests output: no rows of 'size count type redop root time algbw "
                 "busbw ...' (line 1: 9 fields, expected 13, or 12 without root)", id="short-row"),
    pytest.param("1024 256 float sum -1 1.0 50.00 87.50 0 1.0 1.02 1.79 0\n2048 512 float sum -1 1.0 2.05 3.58 0 1.0 2.05 3.58 0\n",
                 "algbw 50.0 GB/s is not size / time", id="columns-out-of-place"),
    pytest.param("2048 512 float sum -1 12.0 0.17 0.30 0 12.0 0.17 0.30 0\n1024 256 float sum -1 12.0 0.09 0.15 0 12.0 0.09 0.15 0\n",
                 "line 2: size 1024 B after 2048 B; sizes must increase", id="decreasing"),
    pytest.param("1024 256 float sum -1 12.0 0.09 0.15 0 12.0 0.09 0.15 0\n", "only one message size", id="one-row"),
])  # fmt: skip
def test_not_nccl_tests_output(text: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_nccl_tests(text, "input.txt", collective="all_reduce", ranks=8)


def test_a_malformed_row_in_a_table() -> None:
    lines = (FIXTURES / "a100x8_nvlink_all_reduce.txt").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.split()[:1] == ["4194304"])
    lines[index] = lines[index].replace(" 55.97 ", " ")  # one busbw lost
    with pytest.raises(
        InputError, match=rf"line {index + 1}: not an nccl-tests row \(12 fields"
    ):
        parse_nccl_tests("\n".join(lines), "cut.txt")


def test_ranks_that_contradict_the_table() -> None:
    with pytest.raises(
        InputError,
        match=r"16 ranks \(from --ranks\), but busbw / algbw = 1\.75 means 8",
    ):
        read("a100x8_nvlink_all_reduce.txt", ranks=16)


# ---------------------------------------------------------------------------------------------
# Fitting a link, and the model giving the measurement back


def calibrate(
    runner, tmp_path: Path, name: str, *args: str, key: str = "calibrated-link"
) -> tuple[Path, object]:
    target = tmp_path / "links" / f"{key}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    result = runner.invoke(
        app,
        [
            "calibrate",
            "nccl",
            str(FIXTURES / name),
            "-o",
            str(target),
            "--format",
            "json",
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    return target, json.loads(result.stdout)


def model_time(op: Collective, size: float, group: Placement, fabric: Fabric) -> float:
    return collective_time(op, size, group, fabric).time


def test_a100_nvlink_bandwidth_is_the_largest_busbw(runner, tmp_path: Path) -> None:
    target, report = calibrate(runner, tmp_path, "a100x8_nvlink_all_reduce.txt")
    link = load_link("calibrated-link", [tmp_path])
    # busbw at 1 GiB
    assert link.bandwidth_per_direction.value == pytest.approx(230.84 * GB, rel=1e-12)
    assert (
        link.nccl_efficiency is not None
        and link.nccl_efficiency.value == 1
        and link.nccl_hardware == "nvlink"
    )
    # latency: (78.77 us - 1.75 x 1 MiB / 230.84 GB/s) / 14 ring steps
    assert link.latency.value == pytest.approx(
        (78.77e-6 - 1.75 * 2**20 / 230.84e9) / 14, rel=1e-3
    )
    assert (
        link.measured is not None
        and len(link.measured.rows) == 11
        and link.measured.rows[-1].time == pytest.approx(8139.9 * US)
    )
    assert report["results"]["bus_bandwidth"]["value"] == 230_840_000_000
    # `presets show` prints the nccl-tests rows the link was fitted to (8 ranks, one node)
    shown = runner.invoke(app, ["presets", "show", "calibrated-link", "--presets", str(tmp_path), "--format", "json"])
    assert shown.exit_code == 0, shown.output
    table = json.loads(shown.stdout)["tables"]["measured"]
    assert table["title"].startswith("Measured all_reduce, 8 ranks on 1 node (")
    assert len(table["rows"]) == 11 and table["rows"][-1]["time"] == pytest.approx(8139.9 * US)
    assert report["preset"]["measured"]["rows"][0] == {
        "size": "1048576 B",
        "time": "78.77 us",
        "algbw": "13.31 GB/s",
        "busbw": "23.29 GB/s",
    }
    assert report["output"] == str(target)


@pytest.mark.parametrize(
    "name", ["a100x8_nvlink_all_reduce.txt", "h100x8_nvlink_all_reduce.txt"]
)
def test_nvlink_calibration_reproduces_the_large_message_time(
    runner, tmp_path: Path, name: str
) -> None:
    calibrate(runner, tmp_path, name)
    link = load_link("calibrated-link", [tmp_path])
    largest = read(name).rows[-1]
    fabric = Fabric(8, link, load_link("ib-ndr"), 8, "sm90", link.nccl_hardware)
    predicted = model_time(Collective.ALL_REDUCE, largest.size, Placement(8, 8), fabric)
    assert predicted == pytest.approx(largest.time, rel=0.10)


def test_two_nodes_need_both_links_calibrated(runner, tmp_path: Path) -> None:
    # H100 x 16 over InfiniBand reaches 467.54 GB/s busbw, more than NVLink 4's ring in NCCL's model
    # (0.824 x 450 GB/s): with the NVLink calibrated from the same kind of node (482.27 GB/s, NVLS) and
    # the network card fitted to the two-node table, the model gives the measured time back.
    calibrate(runner, tmp_path, "h100x8_nvlink_all_reduce.txt", key="h100-nvlink")
    _, report = calibrate(
        runner,
        tmp_path,
        "h100x16_ib_all_reduce.txt",
        "--intra-link",
        "h100-nvlink",
        "--presets",
        str(tmp_path),
        key="h100-ib",
    )
    nic = load_link("h100-ib", [tmp_path])
    assert (
        nic.bandwidth_per_direction.value == pytest.approx(467.54 * GB / 8)
        and nic.nccl_hardware == "net"
    )
    fabric = Fabric(8, load_link("h100-nvlink", [tmp_path]), nic, 8, "sm90")
    largest = read("h100x16_ib_all_reduce.txt").rows[-1]
    assert model_time(
        Collective.ALL_REDUCE, largest.size, Placement(16, 8), fabric
    ) == pytest.approx(largest.time, rel=0.10)
    # the stock NVLink as a ring binds: 26 % slow; with its NVSwitch, NCCL's NVLS_TREE (NVLink SHARP
    # in each node, parcalc.core.timing.network._nvls) gives 8 x 40 GB/s x 5/6 = 266.7 GB/s algbw:
    # 8 GiB in 53 us + 32.2 ms + the ramp, 6 % under the measured 34.4 ms
    ring_only = Fabric(8, dataclasses.replace(load_link("nvlink4"), nvswitch=False), nic, 8, "sm90")
    assert (
        model_time(Collective.ALL_REDUCE, largest.size, Placement(16, 8), ring_only)
        > 1.2 * largest.time
    )
    with_stock_nvlink = Fabric(8, load_link("nvlink4"), nic, 8, "sm90")
    assert model_time(
        Collective.ALL_REDUCE, largest.size, Placement(16, 8), with_stock_nvlink
    ) == pytest.approx(0.94 * largest.time, rel=0.01)
    assert abs(report["results"]["reproduction"]["value"]) < 0.10


@pytest.mark.parametrize(("name", "args"), [
    ("a100x8_nvlink_sendrecv.txt", ()), ("h100x8_nvlink_all_gather.txt", ()), ("h100x8_nvlink_reduce_scatter.txt", ()),
    ("h100x8_nvlink_sendrecv.txt", ()), ("a100x16_roce_all_reduce.txt", ()), ("h100x16_roce_all_reduce.txt", ("--nodes", "2")),
    ("h200x16_roce_all_gather.txt", ("--collective", "all_gather", "--nodes", "2")), ("a100x32_ib_sharp_all_reduce.txt", ("--nodes", "4")),
    ("a100x16_efa_all_reduce.txt", ("--nodes", "2", "--nics-per-node", "4")), ("h100x16_efa_all_reduce.txt", ("--nodes", "2")),
    ("h100x16_tcpxo_all_reduce.txt", ()),
])  # fmt: skip
def test_every_fixture_calibrates_and_reproduces_its_largest_size(
    runner, tmp_path: Path, name: str, args: tuple[str, ...]
) -> None:
    _, report = calibrate(runner, tmp_path, name, *args)
    assert abs(report["results"]["reproduction"]["value"]) < 0.10
    assert load_link("calibrated-link", [tmp_path]).measured is not None


def test_fit_uses_a_calibrated_link_from_a_preset_dir(
    run_json, runner, tmp_path: Path
) -> None:
    calibrate(runner, tmp_path, "a100x8_nvlink_all_reduce.txt", key="our-nvlink")
    doc = run_json("fit", "--presets", str(tmp_path), "--gpu", "a100-sxm4-80gb", "--link", "our-nvlink", "--model", "homework-7b",
                   "--gpus", "8", "--seq-len", "2048")  # fmt: skip
    assert doc["inputs"]["intra_node_bandwidth"]["value"] == 230_840_000_000


def test_preset_text_goes_to_stdout_and_the_report_to_stderr(runner) -> None:
    result = runner.invoke(
        app, ["calibrate", "nccl", str(FIXTURES / "a100x8_nvlink_all_reduce.txt")]
    )
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(result.stdout)
    assert (
        document["kind"] == "link"
        and document["bandwidth_per_direction"]["value"] == "230.84 GB/s"
    )
    link_from_document("from-stdout", Path("from-stdout.yaml"), document)
    assert "Bus bandwidth" in result.stderr and "use it:" in result.stderr


def test_stdin(runner) -> None:
    text = (FIXTURES / "a100x8_nvlink_all_reduce.txt").read_text()
    result = runner.invoke(
        app, ["calibrate", "nccl", "-", "--format", "json"], input=text
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"]["file"] == "stdin"


# ---------------------------------------------------------------------------------------------
# Bad input through the command line: one line, exit 2, nothing written


@pytest.mark.parametrize(("content", "fragment"), [
    pytest.param(None, "is not nccl-tests output", id="a-readme"),
    pytest.param(b"", "is not nccl-tests output", id="empty"),
    pytest.param(b"just some words\nand more\n", "is not nccl-tests output", id="random-text"),
    pytest.param(b"\x7fELF\x02\x01\x01\x00\x00" * 100, "is a binary file", id="binary"),
    pytest.param(b"7" * 3_000_000, "is not nccl-tests output", id="huge-single-line"),
    pytest.param(b"1 2 3 " * 500_000, "(line 1: 1500000 fields, expected 13", id="huge-numeric-line"),
])  # fmt: skip
def test_bad_files(
    run_error, tmp_path: Path, content: bytes | None, fragment: str
) -> None:
    path = FIXTURES / "README.md" if content is None else tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    line = run_error(["calibrate", "nccl", str(path), "-o", str(tmp_path / "out.yaml")])
    assert fragment in line and len(line) < 300
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize(("args", "fragment"), [
    pytest.param(["no-such-file.txt"], "no such file", id="missing"),
    pytest.param([str(FIXTURES)], "is a directory", id="directory"),
    pytest.param([str(FIXTURES / "h200x16_roce_all_gather.txt"), "--nodes", "2"], "fits all_gather and alltoall; give --collective", id="ambiguous"),
    pytest.param([str(FIXTURES / "a100x32_ib_sharp_all_reduce.txt")], "32 ranks, and the table does not say on how many nodes", id="nodes"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--collective", "alltoall"], "not alltoall_perf", id="alltoall"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--collective", "nope"], "unknown nccl-tests collective", id="collective"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--nccl-hardware", "ethernet"], "--nccl-hardware", id="hardware"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--intra-link", "nvlink3"], "only for a table across nodes", id="intra"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--ranks", "1e308"], "--ranks: 1e+308 is beyond any possible size", id="ranks-huge"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--nodes", "1e308"], "--nodes: 1e+308 is beyond any possible size", id="nodes-huge"),
    pytest.param([str(FIXTURES / "a100x8_nvlink_all_reduce.txt"), "--nics-per-node", "1e308"], "--nics-per-node: 1e+308 is beyond any possible size", id="nics-per-node-huge"),
])  # fmt: skip
def test_bad_arguments(run_error, args: list[str], fragment: str) -> None:
    assert fragment in run_error(["calibrate", "nccl", *args])


def test_overwrite_needs_force(runner, run_error, tmp_path: Path) -> None:
    target = tmp_path / "links" / "mine.yaml"
    target.parent.mkdir()
    target.write_text("kept\n")
    line = run_error(
        [
            "calibrate",
            "nccl",
            str(FIXTURES / "a100x8_nvlink_all_reduce.txt"),
            "-o",
            str(target),
        ]
    )
    assert "exists; pass --force" in line and target.read_text() == "kept\n"
    forced = runner.invoke(
        app,
        [
            "calibrate",
            "nccl",
            str(FIXTURES / "a100x8_nvlink_all_reduce.txt"),
            "-o",
            str(target),
            "--force",
        ],
    )
    assert forced.exit_code == 0, forced.output
    assert load_link("mine", [tmp_path]).bandwidth_per_direction.value == pytest.approx(
        230.84 * GB
    )
    # no temporary file left
    assert sorted(p.name for p in target.parent.iterdir()) == ["mine.yaml"]


@pytest.mark.parametrize(("output", "fragment"), [
    pytest.param("missing/links/x.yaml", "does not exist", id="missing-directory"),
    pytest.param("gpus/x.yaml", "belongs in a 'links' folder", id="wrong-folder"),
    pytest.param("x.json", "a preset is a .yaml file", id="extension"),
])  # fmt: skip
def test_bad_output(run_error, tmp_path: Path, output: str, fragment: str) -> None:
    (tmp_path / "gpus").mkdir()
    assert fragment in run_error(
        [
            "calibrate",
            "nccl",
            str(FIXTURES / "a100x8_nvlink_all_reduce.txt"),
            "-o",
            str(tmp_path / output),
        ]
    )


# ---------------------------------------------------------------------------------------------
# The measured table in presets: validated, optional


def test_measured_table_is_validated(runner) -> None:
    result = runner.invoke(
        app, ["calibrate", "nccl", str(FIXTURES / "a100x8_nvlink_all_reduce.txt")]
    )
    document = yaml.safe_load(result.stdout)
    rows = document["measured"]["rows"]
    rows[0], rows[1] = rows[1], rows[0]
    with pytest.raises(PresetError, match=r"key 'measured.rows': sizes must increase"):
        link_from_document("x", Path("x.yaml"), document)
    rows[0] = {"size": "1 MiB", "time": "78 us"}
    with pytest.raises(
        PresetError,
        match=r"measured.rows\[0\]'.*exactly the keys size, time, algbw, busbw",
    ):
        link_from_document("x", Path("x.yaml"), document)
    del document["measured"]
    assert link_from_document("x", Path("x.yaml"), document).measured is None


# ---------------------------------------------------------------------------------------------
# GEMM sweeps (PyTorch on the CPU)


def gemm(runner, tmp_path: Path, *args: str, key: str = "my-cpu") -> dict:
    target = tmp_path / "gpus" / f"{key}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    result = runner.invoke(
        app,
        [
            "calibrate",
            "gemm",
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "-o",
            str(target),
            "--format",
            "json",
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cpu_sweep_writes_a_gpu_preset_that_fit_uses(
    runner, run_json, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    # a peak far above any CPU: the share is small but in (0, 1]; timing noise cannot break it
    report = gemm(runner, tmp_path, "--peak", "100TFLOP/s")
    gpu = load_gpu("my-cpu", [tmp_path])
    assert gpu.kernels is not None and gpu.dtypes["fp32"].dense_peak is not None
    share = gpu.kernels.matmul_share("fp32")
    assert share is not None and 0 < share.value <= 1
    assert gpu.dtypes["fp32"].dense_peak.value == 100e12
    ((dtype, sweep),) = gpu.matmul_measured
    assert (
        dtype == "fp32"
        and len(sweep.rows) == 8
        and all(p.achieved > 0 and p.time > 0 for p in sweep.rows)
    )
    # the h64 layer's QKV on 128 tokens
    assert (sweep.rows[0].m, sweep.rows[0].k, sweep.rows[0].n) == (
        128,
        64,
        192,
    )
    assert report["results"]["matmul_share"]["value"] == pytest.approx(
        share.value, rel=1e-3
    )
    assert len(report["tables"]["gemms"]["rows"]) == 8
    doc = run_json("fit", "--presets", str(tmp_path), "--gpu", "my-cpu", "--model", "homework-7b", "--gpus", "8", "--seq-len", "2048",
                   "--precision", "fp32", "--capacity", "80GiB")  # fmt: skip
    assert doc["inputs"]["gemm_efficiency"]["value"] == share.value
    # `presets show` lists the share and the measured sweep behind it, row for row
    shown = run_json("presets", "show", "my-cpu", "--presets", str(tmp_path))
    rows = {row["field"]: row for row in shown["tables"]["fields"]["rows"]}
    assert rows["kernels.matmul.fp32"]["value"] == share.value
    table = shown["tables"]["matmul_measured_fp32"]
    assert [(r["m"], r["k"], r["n"]) for r in table["rows"]] == [(p.m, p.k, p.n) for p in sweep.rows]
    assert [r["share"] for r in table["rows"]] == [p.share for p in sweep.rows]


def test_cpu_sweep_from_a_base_gpu_keeps_the_rest_of_it(runner, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    gemm(runner, tmp_path, "--gpu", "a100-sxm4-80gb", "--dtype", "fp32", key="a100-cal")
    gpu, base = load_gpu("a100-cal", [tmp_path]), load_gpu("a100-sxm4-80gb")
    # the peak stays the datasheet's
    assert (
        gpu.memory_capacity == base.memory_capacity
        and gpu.dtypes["fp32"] == base.dtypes["fp32"]
    )
    assert gpu.kernels is not None and base.kernels is not None
    assert gpu.kernels.matmul_share("bf16") == base.kernels.matmul_share("bf16")
    share = gpu.kernels.matmul_share("fp32")
    assert (
        share is not None and 0 < share.value <= 1 and "calibrate gemm" in share.source
    )


def test_peak_below_what_was_measured(run_error) -> None:
    pytest.importorskip("torch")
    line = run_error(
        [
            "calibrate",
            "gemm",
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "--peak",
            "1MFLOP/s",
        ]
    )
    assert "a share above 1" in line and "--peak" in line


def test_cpu_needs_a_peak(run_error) -> None:
    pytest.importorskip("torch")
    assert "no preset knows this CPU's peak" in run_error(
        ["calibrate", "gemm", "--device", "cpu", "--shapes", "tiny"]
    )


def test_missing_torch_names_the_install_command(
    run_error, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `import torch` now raises ImportError
    monkeypatch.setitem(sys.modules, "torch", None)
    line = run_error(["calibrate", "gemm", "--device", "cpu", "--peak", "1TFLOP/s"])
    assert "calibrate gemm needs PyTorch: pip install torch" in line


def test_the_cli_does_not_load_torch_or_numpy() -> None:
    script = "import sys; from parcalc.cli import load_command; load_command('calibrate'); print(sorted(m for m in ('torch', 'numpy', 'yaml') if m in sys.modules))"
    assert (
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "[]"
    )
