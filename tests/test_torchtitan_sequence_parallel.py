"""torchtitan runs tensor parallelism with sequence parallelism always (presets/frameworks/torchtitan.yaml
sequence_parallel_with_tp; pytorch/torchtitan parallelize_llama.py:113-199 at 9dec370, apply_tp: the norms SequenceParallel,
the embedding's and wo / w2's outputs Shard(1)): memory and a pinned fit take SP with tp > 1, fit's search tries no TP row
without it, and --no-sequence-parallel with tp > 1 is refused."""

from __future__ import annotations

import pytest

from parcalc.presets import load_framework

_8B = ("--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--seq-len", "8192", "--recompute", "full")


def test_the_profiles_say_which_stack_forces_sequence_parallelism() -> None:
    assert load_framework("torchtitan", ()).sequence_parallel_with_tp is True
    assert "apply_tp" in load_framework("torchtitan", ()).source("sequence_parallel_with_tp")
    # Megatron-LM and DeepSpeed take --sequence-parallel as a choice
    assert load_framework("megatron", ()).sequence_parallel_with_tp is False
    assert load_framework("deepspeed", ()).sequence_parallel_with_tp is False


def test_memory_with_tp_walks_the_sequence_parallel_block_without_the_flag(run_json) -> None:
    flags = (*_8B, "--zero", "3", "--tp", "2", "--dp", "4", "--micro-batch", "1")
    without = run_json("memory", *flags)
    with_flag = run_json("memory", *flags, "--sequence-parallel")
    assert "step_reserved" in without["results"]  # walked (before: the textbook sum, 'tp without sequence parallel')
    assert without["results"]["total"]["value"] == with_flag["results"]["total"]["value"]


def test_a_pinned_fit_equals_memory_and_the_search_row(run_json) -> None:
    flags = (*_8B, "--micro-batch", "1")
    memory = run_json("memory", *flags, "--zero", "3", "--tp", "2", "--dp", "4")["results"]["total"]["value"]
    fit = run_json("fit", *flags, "--gpu", "h200", "--gpus", "8", "--batch", "4", "--tp", "2", "--pp", "1", "--zero", "3")
    assert fit["results"]["total"]["value"] == pytest.approx(memory, rel=1e-9)
    search = run_json("fit", *flags, "--gpu", "h200", "--gpus", "8", "--batch", "4", "--search", "--top", "200")
    rows = [r for r in search["tables"]["top"]["rows"] if r["tp"] > 1]
    assert rows and all(r["sequence_parallel"] for r in rows)


def test_no_sequence_parallel_with_tp_is_refused(run_error) -> None:
    out = run_error(["fit", *_8B, "--gpu", "h200", "--gpus", "8", "--batch", "4", "--tp", "2", "--pp", "1", "--no-sequence-parallel"])
    assert "--no-sequence-parallel: TorchTitan" in out and "sequence parallelism always" in out
