"""torchtitan's compiled block under tensor parallelism (parcalc.core.memory_torchtitan_tp_compile) through `parcalc memory`
and `fit`: the layouts it follows, what it refuses, and what the compiled TP block keeps. Its bytes are held by the profiler in
tests/ground_truth/test_torch_memory_torchtitan_tp_compile.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_peak
from parcalc.presets import load_model

_8B = ("--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--sequence-parallel", "--seq-len",
       "8192", "--compile")  # fmt: skip


@pytest.mark.parametrize("tp, recompute, precision", [(2, "none", "bf16"), (4, "full", "bf16"), (8, "full", "fp8"), (2, "none", "fp8")])
def test_compiled_tp_is_walked_and_memory_equals_fit(run_json, tp: int, recompute: str, precision: str) -> None:
    """FSDP x TP on 16 GPUs: `memory` walks the compiled TP block and `fit` gives the same total (issue 30's check)."""
    flags = (*_8B, "--tp", str(tp), "--dp", str(16 // tp), "--micro-batch", "2", "--recompute", recompute, "--precision", precision)
    memory = run_json("memory", *flags)["results"]
    assert "step_reserved" in memory
    fit = run_json("fit", *flags, "--gpu", "h100-sxm5", "--gpus", "16", "--batch", str(2 * 16 // tp), "--pp", "1")
    assert fit["results"]["total"]["value"] == pytest.approx(memory["total"]["value"], rel=0.01)


@pytest.mark.parametrize("flags, reason", [
    (("--tp", "4", "--dp", "4", "--precision", "fp8"), "--compile --precision fp8 with tp = 4"),
    (("--tp", "8", "--dp", "2", "--cp", "2", "--cp-comm", "all-gather"), "--compile with cp and tp"),
])  # fmt: skip
def test_what_the_compiled_tp_walk_does_not_follow_keeps_the_textbook(run_json, flags: tuple[str, ...], reason: str) -> None:
    document = run_json("memory", *_8B, "--micro-batch", "1", "--recompute", "full", *flags)
    assert "step_reserved" not in document["results"]
    assert reason in json.dumps(document)


def _step(tp: int, recompute: Recompute, compiled: bool = True, b: int = 2) -> FsdpStep:
    return FsdpStep(b, 4096, 16 // tp, Precision.MIXED_BF16, 4.0, recompute=recompute, reshard_last_block=False, model_code="torchtitan",
                    tp=tp, compiled=compiled)  # fmt: skip


def test_without_checkpointing_each_compiled_block_keeps_its_gathered_norm_outputs_and_not_its_fp32_copies() -> None:
    """The compiled TP forward keeps what the partitioner saves: both norms' all-gathered outputs (the whole sequence, T x hidden
    bf16: the column-parallel linears' weight gradients need them) and a rank's heads' and MLP's tensors, but none of eager's
    fp32 norm or RoPE copies: the compiled step holds less than the eager one, at tp 2 and 8."""
    model = replace(load_model("llama3-8b"), layers=4)
    for tp in (2, 8):
        compiled, eager = (fsdp_step_peak(model, _step(tp, Recompute.NONE, c)) for c in (True, False))
        gathered = sum(t.bytes for t in compiled.live if t.kind == "activations" and t.what.startswith("bf16 activation (hidden width)"))
        assert gathered == 4 * 2 * 2 * 4096 * 4096 * 2, tp  # four blocks, two norms, b 2 x s 4096 tokens x hidden 4096, bf16
        assert compiled.allocated < eager.allocated, tp


def test_under_full_checkpointing_a_compiled_block_keeps_its_input_alone() -> None:
    """Under full checkpointing the compiled TP forward keeps its input (a rank's sequence shard) alone, as the eager one does:
    where the peak is the loss's backward, the compiled and eager steps peak alike."""
    from parcalc.core.memory_torchtitan_tp_compile import DEGREES, FLOAT8_DEGREES, PROGRAMS

    for (precision, tp, policy, _), (forward, _backward) in PROGRAMS.items():
        saved = [line for line in forward if line[0] in "+=" and line[-1] == "A" and "OUT" not in line]
        assert (policy == "full") == (not saved), (precision, tp, policy)
    assert {(p, tp) for p, tp, _, _ in PROGRAMS} == {("bf16", tp) for tp in DEGREES} | {("float8", tp) for tp in FLOAT8_DEGREES}
    model = load_model("llama3-8b")
    compiled, eager = (fsdp_step_peak(model, _step(8, Recompute.FULL, c, b=4)) for c in (True, False))
    assert compiled.phase.startswith("backward: loss") and eager.phase.startswith("backward: loss")
    assert compiled.allocated == pytest.approx(eager.allocated, rel=1e-3)


def test_pipeline_stages_walk_their_blocks_compiled(run_json) -> None:
    """Each stage's blocks compiled (apply_compile runs on each stage's model chunk): `memory --pp` walks them, with and without TP."""
    for tp in (1, 2):
        flags = ("--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--sequence-parallel", "--tp",
                 str(tp), "--pp", "2", "--dp", "2", "--micro-batch", "1", "--micro-batches", "4", "--seq-len", "4096", "--recompute", "full")  # fmt: skip
        compiled = run_json("memory", *flags, "--compile")["results"]
        eager = run_json("memory", *flags)["results"]
        assert "step_reserved" in compiled, tp
        assert compiled["step_reserved"]["value"] <= eager["step_reserved"]["value"] * 1.001, tp
