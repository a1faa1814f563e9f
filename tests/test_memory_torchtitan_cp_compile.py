"""torchtitan's compiled block under context parallelism (parcalc.core.memory_torchtitan_cp_compile) through `parcalc memory`
and `fit`: the layouts it follows, what it refuses, and what the compiled ring keeps. Its bytes are held by the profiler in
tests/ground_truth/test_torch_memory_torchtitan_cp_compile.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_peak
from parcalc.presets import load_model

_8B = ("--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--micro-batch", "1", "--recompute", "full",
       "--cp-comm", "all-gather", "--compile")  # fmt: skip
GIB = 2**30


@pytest.mark.parametrize("cp, precision", [(2, "bf16"), (4, "fp8"), (8, "fp8")])
def test_compiled_cp_is_walked_and_memory_equals_fit(run_json, cp: int, precision: str) -> None:
    """Table 2's layouts (8 GPUs, 32K tokens a rank): `memory` walks them and `fit` gives the same total (issue 30's check)."""
    flags = (*_8B, "--dp", str(8 // cp), "--cp", str(cp), "--seq-len", str(32768 * cp), "--precision", precision)
    memory = run_json("memory", *flags)["results"]
    assert "step_reserved" in memory
    fit = run_json("fit", *flags, "--gpu", "h100-sxm5", "--gpus", "8", "--batch", str(8 // cp), "--tp", "1", "--pp", "1")
    assert fit["results"]["total"]["value"] == pytest.approx(memory["total"]["value"], rel=0.01)


def test_a_sequence_the_load_balancer_cannot_split_is_bad_input_compiled_too(run_error) -> None:
    # context_parallel balances causal attention over 2 x cp chunks (memory_torchtitan_cp.CP_SOURCES['ring'])
    line = run_error(["memory", *_8B, "--dp", "2", "--cp", "4", "--seq-len", "65540", "--precision", "fp8"])
    assert "not a multiple of 2 x cp" in line


@pytest.mark.parametrize("flags, reason", [
    (("--dp", "2", "--cp", "4", "--seq-len", "65536", "--precision", "fp8", "--fp8-all-gather"), "--fp8-all-gather with cp and --compile"),
    (("--dp", "1", "--cp", "16", "--seq-len", "131072"), "--compile with cp = 16"),
])  # fmt: skip
def test_what_the_compiled_cp_walk_does_not_follow_keeps_the_textbook(run_json, flags: tuple[str, ...], reason: str) -> None:
    document = run_json("memory", *_8B, *flags)
    assert "step_reserved" not in document["results"]
    assert reason in json.dumps(document)


def _step(cp: int, recompute: Recompute, compiled: bool = True) -> FsdpStep:
    return FsdpStep(1, 4096 * cp, 2 * cp, Precision.MIXED_BF16, 4.0, recompute=recompute, reshard_last_block=False, model_code="torchtitan",
                    cp=cp, compiled=compiled)  # fmt: skip


def test_without_checkpointing_each_block_keeps_its_all_gathered_keys_and_values() -> None:
    """The compiled forward keeps the all-gathered K/V of every block (cp x 2 x tokens x q x 2 B) where eager keeps a rank's own
    repeated K and V (the ring's backward gathers them again): at cp 8 the compiled step holds more than the eager one; under
    full checkpointing each keeps its block input alone, and the two steps' peaks differ only by what the block's code allocates
    inside its backward (the peak here in the loss's backward)."""
    model = replace(load_model("llama3-8b"), layers=4)
    compiled, eager = (fsdp_step_peak(model, _step(8, Recompute.NONE, c)) for c in (True, False))
    assert compiled.phase.startswith("backward: loss")
    gathered = [t for t in compiled.live if "all-gathered K/V" in t.what and t.kind == "activations"]
    assert [t.bytes for t in gathered] == [4 * 8 * 2 * 4096 * 4096 * 2]  # the four blocks' (one row of the walk's live set)
    assert compiled.allocated > eager.allocated


def test_search_rows_with_compiled_context_parallelism_are_fits_memory() -> None:
    """fit's search walks its FSDP x CP rows with the compiled ring as `memory` and `fit` do (the search passes --compile and
    the rotate method to the same step; test_fit_search_walk_runs.py holds the eager rows the same way)."""
    from parcalc.core.fit import memory_of
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-8b", gpus="16", gpu=["h100-sxm5"], framework="torchtitan", cp=2, cp_comm="all-gather",
                  batch="32", seq_len="32768", compile_=True, precision=Precision.FP8)  # fmt: skip
    ev = search(req.model, req.training, req.cluster, req.space).evaluated
    c = ev.columns
    rows = [i for i in range(len(ev)) if c["pp"][i] == 1 and c["tp"][i] == 1 and c["zero"][i] == 3 and c["shard_group"][i] == 16]
    assert len(rows) >= 4
    for i in rows:
        config = ev.config(i)
        walked = memory_of(req.model, config, req.training, req.cluster, allocator_replayed=False)  # unreplayed: the floor
        assert c["memory"][i] == walked.worst.total.value, config
    # the walked figure, not the textbook's: b 1, full checkpointing, as the eager bf16 step's (test_fit_search_walk_runs.py:
    # 45,527,072,768 B by each stream's own peak + 2 GiB; the search's rows carry the replay's floor + 1.5 GiB since session
    # 19, 44,931,481,600 B): the compiled block keeps its input alone under full checkpointing and the peak is the loss's
    from parcalc.core.search_columns import RECOMPUTES

    full = [i for i in rows if c["micro_batch"][i] == 1 and RECOMPUTES[int(c["recompute"][i])] is Recompute.FULL]
    assert [c["memory"][i] for i in full] == [44_931_481_600]
