"""`memory --compile-loss`: torchtitan's loss under torch.compile in the step walk (parcalc.core.memory_compiled_loss).

The walk's program is Inductor's code for the loss (tests/ground_truth/test_torch_memory_compiled_loss.py holds it against
every allocation of compiled steps on the CPU); these tests hold what it gives at the Trainy H200 rows' layout (Llama 3 8B,
FSDP 32, micro-batch 2, sequence 8192, selective op checkpointing, Float8 with the FP8 all-gather, torch.compile: pytorch/
torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, torchtitan e7c0cae, which compiles the loss)."""

from __future__ import annotations

import pytest

from parcalc.cli import app

TRAINY_4_NODES = ("memory", "--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--dp", "32",
                  "--micro-batch", "2", "--seq-len", "8192", "--recompute", "op", "--precision", "fp8", "--compile", "--fp8-all-gather")
TOKENS, VOCAB = 2 * 8192, 128256  # b x s, Llama 3's vocabulary


def test_the_compiled_loss_holds_the_bf16_logits_and_their_gradient(run_json) -> None:
    """At the peak (the loss's backward) the compiled loss holds the bf16 logits its graph saved and their bf16 gradient, plus
    each row's max and log(sum(exp(x - max))) in fp32 and the count of labels (one 512-byte block): Inductor's program for
    cross_entropy(pred.flatten(0, 1).float(), labels) (memory_compiled_loss LOSS_SOURCES['program'])."""
    results = run_json(*TRAINY_4_NODES, "--compile-loss")["results"]
    logits = results["step_peak"]["inputs"]["M_X"]
    assert logits["value"] == 2 * TOKENS * VOCAB * 2 + 2 * TOKENS * 4 + 512  # 8,405,516,800 B
    assert "build_cross_entropy_loss" in logits["source"]
    eager = run_json(*TRAINY_4_NODES)["results"]["step_peak"]["inputs"]["M_X"]
    # the eager loss's backward: the fp32 log-softmax it saved, nll_loss's and log_softmax's fp32 gradients (memory_walk
    # cross_entropy_backward), 12 B a logit against the compiled loss's 4 B
    assert eager["value"] == 3 * TOKENS * VOCAB * 4
    # the walked reserved peak at 4 nodes, 59.28 -> 43.62 GiB (published 47.96: 1.236 -> 0.909, tests/published_memory_runs.py)
    assert results["step_reserved"]["value"] / 2**30 == pytest.approx(43.62, abs=0.005)


def test_the_flag_is_stated_in_settings(run_json) -> None:
    document = run_json(*TRAINY_4_NODES, "--compile-loss")
    assert document["settings"]["compile_loss"] is True and document["settings"]["fp8_all_gather"] is True
    assert "compile_loss" not in run_json(*TRAINY_4_NODES)["settings"]  # the default: 9dec370's eager loss, not stated


@pytest.mark.parametrize("drop", ["--compile", "torchtitan"])
def test_the_compiled_loss_needs_the_compiled_torchtitan_walk(runner, drop: str) -> None:
    flags = [f for f in TRAINY_4_NODES if f != drop]
    if drop == "torchtitan":  # the textbook sum (no profile): nothing is walked
        flags.remove("--framework")
        flags.remove("--fp8-all-gather")
    result = runner.invoke(app, [*flags, "--compile-loss"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["Error: --compile-loss: torchtitan's compiled loss is walked with --compile --framework torchtitan"]


# Llama 3 8B on 8 H100 under torchtitan, compiled (bf16), FSDP over 8, micro-batch 1
EIGHT = ("--model", "llama3-8b", "--framework", "torchtitan", "--compile", "--zero", "3", "--dp", "8", "--micro-batch", "1",
         "--gpu", "h100-sxm5")


def test_fit_and_its_search_give_memory_s_total_with_the_compiled_loss(run_json) -> None:
    """issue #30: `memory` and `fit` give the same total for the same layout, --compile-loss included; the search's row of that
    layout too (parcalc.core.search_step_peaks passes the flag to the walk). The compiled loss holds 8.4 GB less here by each
    stream's own peak (the eager loss's fp32 logits of 8192 tokens x 128,256: 12 B a logit at the loss's backward, the
    compiled 4 B), 10.5 GB less with the allocator replayed (the eager loss's large blocks fragment the default pool)."""
    eager = run_json("memory", *EIGHT)["results"]["total"]["value"]
    compiled = run_json("memory", *EIGHT, "--compile-loss")["results"]["total"]["value"]
    assert eager - compiled == 77_984_694_272 - 67_477_962_752  # the two replays on this commit (session 19)
    pinned = run_json("fit", "--gpus", "8", "--tp", "1", "--pp", "1", *EIGHT, "--compile-loss")
    assert pinned["results"]["total"]["value"] == compiled and pinned["settings"]["compile_loss"] is True
    search = run_json("fit", "--gpus", "8", "--search", *[f for f in EIGHT if f not in ("--dp", "8", "--zero", "3", "--micro-batch", "1")],
                      "--compile-loss")  # fmt: skip
    row = next(r for r in search["tables"]["top"]["rows"] if (r["tp"], r["pp"], r["dp"], r["micro_batch"], r["recompute"], r["zero"]) == (1, 1, 8, 1, "none", 3))
    assert row["memory"] == compiled


def test_fit_refuses_the_compiled_loss_without_the_compiled_torchtitan_walk(runner) -> None:
    result = runner.invoke(app, ["fit", "--gpus", "8", *[f for f in EIGHT if f != "--compile"], "--compile-loss"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["Error: --compile-loss: torchtitan's compiled loss is walked with --compile --framework torchtitan"]
