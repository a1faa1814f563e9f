"""The embedding and the loss as layer slots of the pipeline split (issue #11, item 5): Megatron-LM's
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split as parcalc's
--embedding-in-split / --loss-in-split, in the split rule (parcalc.core.stages), memory, flops,
bubble and fit (scalar and search). Llama 3 405B ran this way: 'the first model chunk on the first
stage has only the embedding, and the last model chunk on the last stage has only output
projection and loss calculation' (Dubey et al. 2024, sec. 3.3.2)."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.choices import Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, estimate, invalid_reason
from parcalc.core.fit_search import COST_FIELDS, SearchSpace, search
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.stages import stage_layers_derivation, stage_split
from parcalc.core.training_setup import TrainingSetup
from parcalc.errors import InputError
from parcalc.presets import load_gpu, load_link, load_model

LLAMA = load_model("llama3-405b", ())
H100 = load_gpu("h100-sxm5", ())


def megatron_chunks(layers: int, pp: int, vp: int | None, embedding: bool, loss: bool) -> list[list[int]] | None:
    """Transformer layers of every model chunk of every pipeline rank, transcribed from
    get_num_layers_to_build (NVIDIA/Megatron-LM at d98e8a64ddf3,
    megatron/core/transformer/transformer_block.py lines 147-202): with the account-for flags the
    L + e + l slots split evenly over the ranks ('num_layers % pipeline_model_parallel_size == 0'),
    each rank's over its vp chunks ('should be divisible by vp_size'), and the first chunk of the
    first rank (the last chunk of the last rank) builds one layer fewer. None where it asserts."""
    num_layers = layers + int(embedding) + int(loss)
    if num_layers % pp:
        return None
    per_rank = num_layers // pp
    v = vp if vp is not None and pp > 1 else 1
    if per_rank % v:
        return None
    ranks = []
    for rank in range(pp):
        chunks = []
        for chunk in range(v):
            n = per_rank // v
            if embedding and rank == 0 and chunk == 0:
                n -= 1
                if n < 0:
                    return None  # 'Not enough layers in the first virtual pipeline stage'
            if loss and rank == pp - 1 and chunk == v - 1:
                n -= 1
            chunks.append(n)
        ranks.append(chunks)
    return ranks


def test_llama3_405b_split_as_the_paper_describes_it() -> None:
    # 126 layers + embedding + loss = 128 slots on 16 stages, 8 each; v = 8: one slot per chunk, the
    # first chunk of stage 1 is the embedding alone, the last of stage 16 the loss alone (sec. 3.3.2)
    chunks = megatron_chunks(126, 16, 8, True, True)
    assert chunks is not None
    assert chunks[0] == [0] + [1] * 7 and chunks[-1] == [1] * 7 + [0]
    split = stage_split(126, 16, chunks=8, embedding_in_split=True, loss_in_split=True)
    assert split == (7,) + (8,) * 14 + (7,) == tuple(sum(c) for c in chunks)
    # Megatron's uneven-stage flags cannot express it with v = 8 (8 does not divide 7)
    with pytest.raises(InputError, match="do not divide the 7 layers"):
        stage_split(126, 16, 7, 7, chunks=8)


def test_the_slot_split_equals_megatron_on_every_small_case() -> None:
    checked = refused = 0
    for layers in range(1, 41):
        for pp in (1, 2, 3, 4, 6, 8):
            for vp in (None, 2, 3, 4):
                for embedding, loss in ((True, False), (False, True), (True, True)):
                    chunks = megatron_chunks(layers, pp, vp, embedding, loss)
                    v = vp if vp is not None and pp > 1 else 1
                    expected = None if chunks is None else tuple(sum(c) for c in chunks)
                    if expected is not None and min(expected) < 1:
                        expected = None  # Megatron builds an embedding-only stage; parcalc refuses it (stages.py)
                    try:
                        got = stage_split(layers, pp, chunks=v, embedding_in_split=embedding, loss_in_split=loss)
                    except InputError:
                        got = None
                    assert got == expected, (layers, pp, vp, embedding, loss)
                    checked += 1
                    refused += got is None
    assert checked == 40 * 6 * 4 * 3 and 0 < refused < checked


def test_slots_exclude_the_uneven_stage_flags() -> None:
    # transformer_block.py lines 108-112: 'Does not support standalone embedding stage and standalone
    # loss stage with uneven pp'
    with pytest.raises(InputError, match="not with --first-stage-layers"):
        stage_split(126, 16, 7, None, embedding_in_split=True)
    with pytest.raises(InputError, match="127 slots"):
        stage_split(126, 16, embedding_in_split=True)  # 126 + 1 on 16 stages


def test_the_derivation_names_the_slot() -> None:
    first = stage_layers_derivation(126, 16, None, None, 0, 8, embedding_in_split=True, loss_in_split=True)
    middle = stage_layers_derivation(126, 16, None, None, 5, 8, embedding_in_split=True, loss_in_split=True)
    last = stage_layers_derivation(126, 16, None, None, 15, 8, embedding_in_split=True, loss_in_split=True)
    assert (first.value, middle.value, last.value) == (7, 8, 7)
    assert "embedding" in first.label and "loss" in last.label
    assert first.formula == "($L + $n_s) / $p - 1" and middle.formula == "($L + $n_s) / $p"
    assert "account-for-embedding" in first.source


def test_memory_per_stage_with_slots() -> None:
    # stage 1 holds 7 layers and the embedding, a middle stage 8 layers, the last 7 and the LM head
    par = Layout(8, 16, 128, sequence_parallel=True, zero=1, schedule=Schedule.INTERLEAVED, chunks=8, embedding_in_split=True,
                 loss_in_split=True)  # fmt: skip
    setup = TrainingSetup(1, 8192, flash_attention=True, dropout=False, micro_batches=16)
    breakdown = memory_breakdown(LLAMA, par, setup)
    same = memory_breakdown(LLAMA, Layout(8, 16, 128, sequence_parallel=True, zero=1, first_stage_layers=7, last_stage_layers=7), setup)
    # the same layers per stage as Megatron's uneven 7 + 14 x 8 + 7: the same parameters on every stage
    for a, b in zip(breakdown.stages, same.stages, strict=True):
        assert a.parameters.value == b.parameters.value


def _cluster(gpus: int) -> Cluster:
    from parcalc.presets import load_framework

    return Cluster(gpus=gpus, gpus_per_node=8, peak=989.4e12, capacity=H100.memory_capacity.value,
                   intra=load_link("nvlink4", ()), inter=load_link("ib-ndr", ()), gpu=H100, dtype="bf16",
                   framework=load_framework("megatron", ()))  # fmt: skip


def test_fit_with_slots_times_the_same_stages_as_the_uneven_split() -> None:
    # v = 1: the slots leave 7 + 14 x 8 + 7, which Megatron's uneven flags also give; the step is the same
    training = Training(2048, 8192, flash_attention=True, dropout=False)
    cluster = _cluster(16384)
    slots = Config.of(8, 16, 128, 1, Recompute.NONE, 1, True, embedding_in_split=True, loss_in_split=True)
    uneven = Config.of(8, 16, 128, 1, Recompute.NONE, 1, True, first_stage_layers=7, last_stage_layers=7)
    assert estimate(LLAMA, slots, training, cluster).step.value == estimate(LLAMA, uneven, training, cluster).step.value
    # v = 8 runs only with the slots; the bubble shrinks by v: (p - 1)/(v m) (Narayanan et al. 2021 sec. 2.2)
    interleaved = Config.of(8, 16, 128, 1, Recompute.NONE, 1, True, Schedule.INTERLEAVED, 8, embedding_in_split=True, loss_in_split=True)
    assert invalid_reason(LLAMA, interleaved, training, cluster) is None
    est = estimate(LLAMA, interleaved, training, cluster)
    assert est.bubble.value == pytest.approx((16 - 1) / (8 * 16) * (est.compute.value + est.tp_comm.value), rel=1e-12)


def test_search_with_slots_agrees_with_the_scalar_estimate() -> None:
    training = Training(2048, 8192, flash_attention=True, dropout=False)
    cluster = _cluster(16384)
    space = SearchSpace(recomputes=(Recompute.NONE, Recompute.FULL), zero_stages=(1,), sequence_parallel=(True,), tp=8,
                        embedding_in_split=True, loss_in_split=True)  # fmt: skip
    found = search(LLAMA, training, cluster, space)
    evaluated = found.evaluated
    c = evaluated.columns
    # pp must divide 128 slots: 1, 2, 4, 8, 16, ... and never 3 or 6 (126 = 2 x 3^2 x 7 would allow them)
    assert set(c["pp"].tolist()) <= {1, 2, 4, 8, 16, 32, 64, 128}
    assert 16 in set(c["pp"].tolist())
    sixteen = [i for i in range(len(evaluated)) if c["pp"][i] == 16]
    assert {int(c["chunks"][i]) for i in sixteen} == {1, 2, 4, 8}  # v divides the 8 slots of a stage
    fitting = [i for i in range(len(evaluated)) if c["fits"][i]]  # the search times what fits
    for i in random.Random(11).sample(fitting, 30):
        config = evaluated.config(i)
        assert config.layout.embedding_in_split and config.layout.loss_in_split
        assert invalid_reason(LLAMA, config, training, cluster) is None
        scalar = estimate(LLAMA, config, training, cluster)
        expected = {
            "memory": scalar.total_memory, "fits": scalar.fits, "t_compute": scalar.compute.value, "t_tp": scalar.tp_comm.value,
            "t_bubble": scalar.bubble.value, "t_pp": scalar.pp_comm.value, "t_dp": scalar.dp_comm.value, "t_optimizer": scalar.optimizer.value,
            "t_step": scalar.step.value, "tokens_per_second": scalar.tokens_per_second.value, "mfu": scalar.mfu.value, "hfu": scalar.hfu.value,
        }  # fmt: skip
        assert set(expected) == set(COST_FIELDS)
        for key, value in expected.items():
            assert c[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (config.label(), key)


# ---------------------------------------------------------------------------------------------
# The CLI

RUN = CliRunner()
LLAMA_FLAGS = ["--model", "llama3-405b", "--seq-len", "8192", "--tp", "8", "--pp", "16", "--embedding-in-split", "--loss-in-split"]


def test_memory_cli_lists_the_slot_split() -> None:
    result = RUN.invoke(app, ["memory", *LLAMA_FLAGS, "--dp", "128", "--schedule", "interleaved", "--chunks", "8",
                              "--micro-batches", "16", "--flash-attention", "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert any(a.startswith("pipeline stages hold 7 + 14 x 8 + 7 layers: the embedding and the loss each take one layer slot")
               for a in data["assumptions"])  # fmt: skip
    assert data["tables"]["components"]["title"] == "Memory of one GPU of stage 2 of 16 (the fullest)"


def test_flops_and_bubble_cli_take_the_slots() -> None:
    result = RUN.invoke(app, ["flops", "--model", "llama3-405b", "--batch", "2048", "--seq-len", "8192", "--pp", "16",
                              "--embedding-in-split", "--loss-in-split"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "7 + 14 x 8 + 7 layers" in result.output
    result = RUN.invoke(app, ["bubble", "--stages", "16", "--micro-batches", "16", "--schedule", "interleaved", "--chunks", "8",
                              "--layers", "126", "--embedding-in-split", "--loss-in-split"])  # fmt: skip
    assert result.exit_code == 0, result.output
    result = RUN.invoke(app, ["bubble", "--stages", "16", "--micro-batches", "16", "--embedding-in-split"])
    assert result.exit_code == 2 and "--embedding-in-split: give --layers L too" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--first-stage-layers", "7"], "not with --first-stage-layers"),
        (["--chunks", "3"], "128 slots"),  # 128 slots do not split over 16 x 3
    ],
)
def test_fit_cli_refuses_slots_megatron_refuses(extra: list[str], message: str) -> None:
    result = RUN.invoke(app, ["fit", *LLAMA_FLAGS, "--dp", "128", "--gpus", "16384", "--gpu", "h100-sxm5", "--batch", "2048", *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_fit_cli_evaluates_llama3_as_it_ran() -> None:
    result = RUN.invoke(app, ["fit", *LLAMA_FLAGS, "--dp", "128", "--gpus", "16384", "--gpu", "h100-sxm5", "--batch", "2048",
                              "--chunks", "8", "--sequence-parallel", "--zero", "1", "--recompute", "none", "--flash-attention",
                              "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "embedding and loss in the split" in " ".join(json.loads(result.output)["verdicts"])


def test_comm_volume_takes_the_slots() -> None:
    # the same layers per stage as 7 + 14 x 8 + 7, so the same traffic as that uneven split; v = 8 only with the slots
    base = ["comm-volume", "--strategy", "3d", "--model", "llama3-405b", "--seq-len", "8192", "--batch", "2048", "--tp", "8",
            "--pp", "16", "--dp", "128", "--sequence-parallel", "--format", "json"]  # fmt: skip
    slots = RUN.invoke(app, [*base, "--embedding-in-split", "--loss-in-split"])
    uneven = RUN.invoke(app, [*base, "--first-stage-layers", "7", "--last-stage-layers", "7"])
    assert slots.exit_code == 0 and uneven.exit_code == 0, slots.output + uneven.output
    assert json.loads(slots.output)["results"] == json.loads(uneven.output)["results"]
    assert any("7 + 14 x 8 + 7 layers (the embedding / loss as layer slots" in a for a in json.loads(slots.output)["assumptions"])
    chunked = RUN.invoke(app, [*base, "--embedding-in-split", "--loss-in-split", "--schedule", "interleaved", "--chunks", "8"])
    assert chunked.exit_code == 0, chunked.output
    refused = RUN.invoke(app, [*base, "--first-stage-layers", "7", "--last-stage-layers", "7", "--schedule", "interleaved",
                               "--chunks", "8"])  # fmt: skip
    assert refused.exit_code == 2 and "more stages than the model's 126 layers" in refused.output
    wrong_mode = RUN.invoke(app, ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "8", "--loss-in-split"])
    assert wrong_mode.exit_code == 2 and "--loss-in-split: applies to --strategy" in wrong_mode.output
