"""The fast paths behind `comm-volume --strategy all`'s start-up give exactly what the plain ones give:
periodic DDP bucketing, planning equivalent strategies once, the column-wise plain table, and the
CLI's collector settings (issue 3: a one-liner within a few ms of `peak-flops`)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.cli import app
from parcalc.core.comm import (
    STRATEGIES,
    Network,
    Options,
    Workload,
    compare_strategies,
    ddp_bucket_counts,
    ddp_buckets,
    default_micro_batch,
    iteration_plan,
    single_strategy,
)
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.derivation import Column, Table
from parcalc.errors import InputError
from parcalc.presets import load_model
from parcalc.render.plain import table_lines
from parcalc.render.values import format_cell

NVLINK = Link("nvlink-test", "test NVLink", Sourced(300e9, "B/s", "test"), Sourced(3.4e-6, "s", "test"))
IB = Link("ib-test", "test InfiniBand", Sourced(25e9, "B/s", "test"), Sourced(14e-6, "s", "test"))


# ---------------------------------------------------------------------------------------------
# DDP buckets of a repeating sequence


@pytest.mark.parametrize(
    ("head", "period", "repeats", "tail", "cap", "first", "expected"),
    [
        # Sequence 3, 1, 3, 1, 3, 1, 2. First cap 2: 3 closes [3]; cap 4: 1 + 3 = 4 closes [4], again
        # 1 + 3 = 4 closes [4]; 1 + 2 = 3 is left over -> [3]. Buckets 3, 4, 4, 3: {3: 2, 4: 2}, 3 first.
        pytest.param([], [3, 1], 3, [2], 4, 2, {3: 2, 4: 2}, id="period-crosses-the-cap"),
        # Sequence 5, 1, 9, 1, 9, 1, 9. First cap 1: 5 closes [5]; cap 9: 1 + 9 = 10 closes [10] three
        # times: {5: 1, 10: 3}.
        pytest.param([5], [1, 9], 3, [], 9, 1, {5: 1, 10: 3}, id="fixed-point-after-one-period"),
        # No repeats: the head and tail alone, 2 + 2 = 4 closes [4] at cap 4.
        pytest.param([2], [7], 0, [2], 4, 4, {4: 1}, id="no-repeats"),
    ],
)
def test_ddp_bucket_counts(head: list[float], period: list[float], repeats: int, tail: list[float], cap: float, first: float,
                           expected: dict[float, int]) -> None:  # fmt: skip
    counts = ddp_bucket_counts(head, period, repeats, tail, cap, first)
    assert list(counts.items()) == list(expected.items())


sizes = st.lists(st.floats(min_value=0.5, max_value=5_000, allow_nan=False), max_size=8)


@settings(max_examples=300, deadline=None)
@given(sizes, st.lists(st.floats(min_value=0.5, max_value=5_000, allow_nan=False), min_size=1, max_size=8),
       st.integers(0, 60), sizes, st.floats(1, 20_000), st.floats(1, 20_000))  # fmt: skip
def test_ddp_bucket_counts_are_ddp_buckets_counted(head: list[float], period: list[float], repeats: int, tail: list[float],
                                                   cap: float, first: float) -> None:  # fmt: skip
    """The same buckets, to the bit, in order of first appearance, as walking every tensor."""
    walked = Counter(ddp_buckets(head + period * repeats + tail, cap, first))
    assert list(ddp_bucket_counts(head, period, repeats, tail, cap, first).items()) == list(walked.items())


def test_gpt3_buckets_walk_two_layers() -> None:
    # GPT-3's layer (16 tensors) has norm vectors far below the 25 MiB cap and matrices far above
    # it, so from the second layer on every layer starts with the same carried norm bytes.
    model = load_model("gpt3-175b")
    plan = iteration_plan(model, Workload(1536, 192, 2048, 2.0, 2.0), Layout(dp=8), Network(NVLINK))
    (row,) = plan.calls
    assert row.payload == model.total_params * 2.0
    assert row.calls == sum(count for _, count in row.call_sizes)


# ---------------------------------------------------------------------------------------------
# `--strategy all` plans each communication pattern once


def small(heads: int = 8, layers: int = 8) -> TransformerModel:
    return TransformerModel(key="gpt", name="gpt", layers=layers, hidden=64 * heads, heads=heads, kv_heads=heads, head_dim=64,
                            ffn_hidden=256 * heads, mlp=Mlp.GELU, vocab=1000, max_seq_len=256, tied_embeddings=True,
                            position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True, source="test")  # fmt: skip


@pytest.mark.parametrize(
    ("model", "gpus", "per_node", "batch", "micro_batch"),
    [
        pytest.param(small(), 8, 8, 64, None, id="one-node"),
        pytest.param(small(), 16, 4, 64, None, id="across-nodes"),
        pytest.param(small(), 8, 8, 64, 2, id="given-micro-batch"),
        pytest.param(small(heads=6, layers=4), 8, 8, 64, None, id="some-skipped"),
        pytest.param(small(), 8, 8, 12, None, id="batch-not-divisible"),
    ],
)
def test_comparison_is_each_strategy_planned_alone(model: TransformerModel, gpus: int, per_node: int, batch: int,
                                                   micro_batch: int | None) -> None:  # fmt: skip
    network = Network(NVLINK, IB)
    work = Workload(batch, 1, 256, 2.0, 4.0, "bf16", "fp32")
    comparison = compare_strategies(model, work, gpus, network, Options(), per_node, micro_batch)
    plans = {plan.strategy: plan for plan in comparison.plans}
    skipped = dict(comparison.skipped)
    assert set(plans) | set(skipped) == set(STRATEGIES)
    for name in STRATEGIES:
        par = single_strategy(name, gpus, per_node)
        alone_work = work._replace(micro_batch=micro_batch or default_micro_batch(work, par))
        if name in skipped:
            with pytest.raises(InputError) as error:
                iteration_plan(model, alone_work, par, network, Options(), strategy=name)
            assert skipped[name] == str(error.value)
            continue
        alone = iteration_plan(model, alone_work, par, network, Options(), strategy=name)
        assert plans[name] == alone  # every field: calls, derivations, assumptions, totals, parallelism


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Every GPU in one dimension; ZeRO and FSDP are flavours of the data-parallel one.
        pytest.param("dp", Layout(dp=8, gpus_per_node=4), id="dp"),
        pytest.param("zero1", Layout(dp=8, zero=1, gpus_per_node=4), id="zero1"),
        pytest.param("zero2", Layout(dp=8, zero=2, gpus_per_node=4), id="zero2"),
        pytest.param("zero3", Layout(dp=8, zero=3, gpus_per_node=4), id="zero3"),
        pytest.param("fsdp", Layout(dp=8, zero=3, gpus_per_node=4), id="fsdp"),
        pytest.param("tp", Layout(tp=8, gpus_per_node=4), id="tp"),
        pytest.param("tp+sp", Layout(tp=8, sequence_parallel=True, gpus_per_node=4), id="tp-sp"),
        pytest.param("pp-gpipe", Layout(pp=8, schedule="gpipe", gpus_per_node=4), id="pp-gpipe"),
        pytest.param("pp-1f1b", Layout(pp=8, schedule="1f1b", gpus_per_node=4), id="pp-1f1b"),
    ],
)
def test_single_strategy(name: str, expected: Layout) -> None:
    assert single_strategy(name, 8, 4) == expected


def test_single_strategy_unknown_name() -> None:
    with pytest.raises(KeyError):
        single_strategy("3d", 8, 8)


# ---------------------------------------------------------------------------------------------
# The plain table, column-wise


def reference_table_lines(table: Table) -> list[str]:
    """The row-by-row table of parcalc.render.plain before it was written column-wise."""
    headers = [c.label + (f" [{c.unit}]" if c.unit and c.unit != "fraction" else "") for c in table.columns]
    cells = [[format_cell(v, c.unit) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [not all(isinstance(row[i], str) for row in table.rows) for i in range(len(headers))]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  " + "  ".join(parts).rstrip()

    return [table.title, line(headers), "  " + "  ".join("-" * w for w in widths), *(line(row) for row in cells)]


cell_values = st.one_of(
    st.text(max_size=6), st.integers(-10**13, 10**13), st.booleans(), st.none(),
    st.floats(allow_nan=False, width=64), st.sampled_from([0.0, -0.0, 0, 1, 1.0, True, 2e9, 2e9 + 0.5]),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from(["", "B", "B/s", "s", "FLOP", "FLOP/s", "fraction", "Hz", "tokens"]), min_size=n, max_size=n),
    st.lists(st.lists(cell_values, min_size=n, max_size=n), max_size=6))))  # fmt: skip
def test_table_lines_match_the_row_by_row_table(shape: tuple[list[str], list[list[object]]]) -> None:
    units, rows = shape
    columns = tuple(Column(f"c{i}", f"col {i}", unit) for i, unit in enumerate(units))
    table = Table("t", "A table", columns, tuple(tuple(row) for row in rows))
    assert table_lines(table) == reference_table_lines(table)


def test_table_lines_keep_negative_zero() -> None:
    # 0.0 == -0.0 (and they hash alike), but bytes print "0 B" and "-0 B": a cache keyed on the
    # value alone would print the second as the first.
    table = Table("t", "zeros", (Column("x", "x", "B"),), ((0.0,), (-0.0,), (-0.0,)))
    lines = table_lines(table)
    assert lines == reference_table_lines(table)
    assert lines[-2] != lines[-3] and lines[-1] == lines[-2]


# ---------------------------------------------------------------------------------------------
# The CLI's collector settings


def test_a_command_leaves_the_collector_as_it_found_it(runner, run_error) -> None:
    before = gc.get_threshold()
    result = runner.invoke(app, ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "8"])
    assert result.exit_code == 0, result.output
    assert gc.get_threshold() == before
    run_error(["comm-volume", "--collective", "all-reduce", "--size", "-1GB", "--workers", "8"])
    assert gc.get_threshold() == before
