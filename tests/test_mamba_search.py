"""fit --search on Mamba-2 hybrids (Nemotron-H): the search's memory counts each stage's Mamba-2, attention and MLP blocks
as `memory` does (parcalc.core.mamba_memory: each block kind's activations times its count on the stage, the stage's
parameters block by block, the largest block's recomputation working set), and its step time is fit's (the mean layer
of the blocks by their share). Every sampled row must equal the scalar estimate of the same configuration."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.choices import Recompute
from parcalc.core.fit import Cluster, Training
from parcalc.core.fit_search import RECOMPUTES, search
from parcalc.presets import load_gpu, load_link, load_model
from tests.search_rows import assert_row_is_estimate


def _cluster(gpus: int) -> Cluster:
    h100 = load_gpu("h100-sxm5", ())
    return Cluster(gpus=gpus, gpus_per_node=8, peak=989e12, capacity=h100.memory_capacity.value, intra=load_link("nvlink4", ()),
                   inter=load_link("ib-ndr", ()))  # fmt: skip


@pytest.mark.parametrize(("key", "gpus", "batch", "seq_len"), [("nemotron-h-8b", 16, 32, 8192), ("nemotron-h-56b", 64, 64, 8192)])
def test_search_agrees_with_the_scalar_estimate(key: str, gpus: int, batch: int, seq_len: int) -> None:
    """Memory and step time of 25 random rows and 15 random fitting rows equal estimate()'s (rel 1e-9): uneven block mixes
    per stage (Nemotron-H-8B's 52 layers on 4 stages hold 6/1/6, 6/1/6, 6/1/6, 6/1/6 Mamba-2/attention/MLP; interleaving
    moves them), recomputation none and full, SP, ZeRO-0/1/2, CP where MambaContextParallel allows it."""
    from parcalc.core.layout import Layout
    from parcalc.core.mamba_memory import stage_block_counts

    model, training, cluster = load_model(key, ()), Training(batch, seq_len), _cluster(gpus)
    found = search(model, training, cluster)
    columns = found.evaluated.columns
    assert len(found.evaluated) > 40
    rng = random.Random(52)
    fitting = [i for i in range(len(found.evaluated)) if columns["fits"][i]]
    assert fitting
    chunked = pipelined = 0
    for i in rng.sample(range(len(found.evaluated)), 25) + rng.sample(fitting, min(15, len(fitting))):
        config = assert_row_is_estimate(found, i, model, training, cluster)
        chunked += config.layout.chunks > 1
        pipelined += config.layout.pp > 1
    assert pipelined and chunked  # the sample holds stages that differ by their blocks, and interleaved ones
    if key == "nemotron-h-8b":  # 13 layers a stage: M-M-M-M*-M-M- and its like, 6 Mamba-2, 1 attention, 6 MLP blocks
        assert [stage_block_counts(model, Layout(pp=4), s) for s in range(4)] == [{"M": 6, "*": 1, "-": 6}] * 4
    assert {RECOMPUTES[r] for r in columns["recompute"].tolist()} == {Recompute.NONE, Recompute.FULL}  # mamba_layout_reason
    assert not (columns["zero"] == 3).any()  # no ZeRO-3 yet (mamba_layout_reason)


def test_the_search_line_runs() -> None:
    """The line that answered 'fit's search counts the memory of transformer layers' before."""
    result = CliRunner().invoke(app, ["fit", "--model", "nemotron-h-56b", "--gpu", "h100-sxm5", "--gpus", "64", "--batch", "64",
                                      "--seq-len", "8192", "--search"], terminal_width=200)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "fastest layouts that fit" in result.output


@pytest.mark.parametrize("extra", [["--precision", "fp8"], ["--schedule", "zb-h1"], ["--pipeline-layout", "Et|t|t|tL"]])
def test_what_the_search_does_not_count_is_one_line(extra: list[str]) -> None:
    result = CliRunner().invoke(app, ["fit", "--model", "nemotron-h-8b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "32",
                                      "--seq-len", "8192", "--search", *extra])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: ")
