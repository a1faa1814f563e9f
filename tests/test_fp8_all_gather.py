"""`--fp8-all-gather`: torchao's FP8 all-gather under FSDP2 (parcalc.core.comm.float8_all_gather) in fit, its search and
comm-volume: the walked memory (memory = fit = the search's row), the FSDP all-gather's bytes, the amax all-reduce, and the
step time they give.

Sources: pytorch/ao torchao/float8/fsdp_utils.py (WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather returns the FP8 data
of the shard; precompute_float8_dynamic_scale_for_fsdp's one all-reduce of the stacked amaxes), pytorch/torchtitan
torchtitan/float8.py at 9dec370 (every nn.Linear but 'output' converted) and train.py (the precompute after the optimizer
step)."""

from __future__ import annotations

import pytest

from parcalc.cli import app
from parcalc.core.choices import Optimizer

# Llama 3 8B (presets/models/llama3-8b.yaml: h 4096, 32 heads of 128, 8 KV heads, MLP 14336, 32 layers, vocabulary 128,256,
# untied), its Float8 linears counted by hand, per layer:
#   wq 4096 x 4096 = 16,777,216    wk, wv 1024 x 4096 = 4,194,304 each    wo 4096 x 4096 = 16,777,216
#   w1, w3 14336 x 4096 = 58,720,256 each    w2 4096 x 14336 = 58,720,256
#   = 2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256 = 218,103,808 a layer, x 32 layers = 6,979,321,856 (7 weights a layer)
# and the rest, gathered in bf16: the embedding and the output projection 2 x 128,256 x 4096 = 1,050,673,152, the two RMSNorms
# of each layer 32 x 2 x 4096 = 262,144 and the final norm 4096: 1,050,939,392 (8,030,261,248 in all; FSDP 8 pads nothing,
# every dim 0 is a multiple of 8)
FLOAT8_ELEMENTS = 6_979_321_856
OTHER_ELEMENTS = 1_050_939_392
FSDP8 = ("comm-volume", "--strategy", "fsdp", "--model", "llama3-8b", "--batch", "8", "--seq-len", "8192", "--gpus", "8")


def test_the_fsdp_all_gather_payload_names_the_float8_weights_at_one_byte(run_json) -> None:
    """Forward and backward gathers of every unit (comm-volume re-gathers the root), the Float8 weights at 1 byte (e4m3:
    fsdp_pre_all_gather's float8_tensor._data), the rest at bf16's 2: 2 x (6,979,321,856 + 2 x 1,050,939,392) B."""
    results = run_json(*FSDP8, "--fp8-all-gather")["results"]
    payload = results["fsdp_all_gather_payload"]
    inputs = payload["inputs"]
    assert inputs["p_8"]["value"] == FLOAT8_ELEMENTS and inputs["s_8"]["value"] == 1
    assert inputs["p_o"]["value"] == OTHER_ELEMENTS and inputs["s"]["value"] == 2
    assert payload["value"] == 2 * (FLOAT8_ELEMENTS * 1 + OTHER_ELEMENTS * 2) == 18_162_401_280
    assert "fsdp_pre_all_gather" in payload["source"]
    # without it, every parameter at 2 bytes (tests/test_comm.py q2.4's convention): 32,121,044,992 B
    assert run_json(*FSDP8)["results"]["fsdp_all_gather_payload"]["value"] == 2 * (FLOAT8_ELEMENTS + OTHER_ELEMENTS) * 2
    # the gradients' reduce-scatter is unchanged (reduce_dtype)
    assert results["fsdp_reduce_scatter_payload"]["value"] == (FLOAT8_ELEMENTS + OTHER_ELEMENTS) * 2


def test_the_amax_all_reduce_is_one_fp32_per_float8_weight(run_json) -> None:
    """precompute_float8_dynamic_scale_for_fsdp: one all-reduce a step of the stacked amaxes, 7 weights x 32 layers x 4 B."""
    document = run_json(*FSDP8, "--fp8-all-gather")
    amax = document["results"]["fsdp_float8_amax_payload"]
    assert amax["inputs"]["n_8"]["value"] == 7 * 32 and amax["value"] == 7 * 32 * 4 == 896
    assert "precompute_float8_dynamic_scale_for_fsdp" in amax["source"]
    assert document["settings"]["fp8_all_gather"] is True


def test_the_root_unit_kept_unsharded_is_gathered_once(run_json) -> None:
    """--no-reshard-root (FSDP2's default): the root (embedding, final norm, output; all bf16) gathered in forward only."""
    payload = run_json(*FSDP8, "--fp8-all-gather", "--no-reshard-root")["results"]["fsdp_all_gather_payload"]
    root = 2 * 128_256 * 4096 + 4096
    assert payload["value"] == 2 * (FLOAT8_ELEMENTS * 1 + (OTHER_ELEMENTS - root) * 2) + root * 2


@pytest.mark.parametrize("flags", [("--strategy", "dp"), ("--strategy", "3d", "--dp", "8", "--zero", "1"), ("--strategy", "all")])
def test_comm_volume_refuses_it_without_fsdp(runner, flags: tuple[str, ...]) -> None:
    args = ["comm-volume", *flags, "--model", "llama3-8b", "--batch", "8", "--seq-len", "8192", "--fp8-all-gather"]
    if "--dp" not in flags:
        args += ["--gpus", "8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["Error: --fp8-all-gather: torchao's FP8 all-gather is FSDP's (--strategy fsdp or zero3, or "
                                                  "3d with --zero 3)"]  # fmt: skip


# fit: Llama 3 8B under torchtitan with Float8, FSDP over 8 H200 (the Trainy rows' GPU), torchtitan's selective op checkpointing
H200 = ("--model", "llama3-8b", "--framework", "torchtitan", "--precision", "fp8", "--gpu", "h200", "--recompute", "op", "--batch", "16")
PINNED = ("fit", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "3", "--micro-batch", "2", *H200)


def test_memory_and_fit_give_the_same_total_with_it(run_json) -> None:
    """issue #30: the same total for the same layout; the walk's unsharded Float8 weights in FP8 hold less than in bf16."""
    memory_flags = ("memory", "--dp", "8", "--zero", "3", "--micro-batch", "2", *[f for f in H200 if f not in ("--gpu", "h200", "--batch", "16")])
    with_it = run_json(*memory_flags, "--fp8-all-gather")["results"]["total"]["value"]
    without = run_json(*memory_flags)["results"]["total"]["value"]
    assert with_it < without
    fit = run_json(*PINNED, "--fp8-all-gather")
    assert fit["results"]["total"]["value"] == with_it and fit["settings"]["fp8_all_gather"] is True
    assert run_json(*PINNED)["results"]["total"]["value"] == without


def test_fit_gathers_a_layer_at_its_float8_bytes_and_reduces_the_amaxes(run_json) -> None:
    """t_dp's g: one layer's all-gather of 218,103,808 Float8 elements at 1 B and its two norms (8,192) at 2 B, as
    parcalc.core.timing.network times an all-gather of that size over the 8 GPUs of the node; a_8: the 224 amaxes."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement
    from parcalc.results.fit_request import request

    fabric = request(model="llama3-8b", gpus="8", gpu=["h200"], framework="torchtitan").clusters[0].fabric
    dp = run_json(*PINNED, "--fp8-all-gather")["results"]["t_dp"]
    gather = dp["inputs"]["g"]
    assert gather["value"] == pytest.approx(collective_time(Collective.ALL_GATHER, 218_103_808 * 1 + 8192 * 2, placement(8, 1, 8), fabric).time,
                                            rel=1e-12)  # fmt: skip
    assert "Float8" in gather["description"]
    assert dp["inputs"]["a_8"]["value"] == pytest.approx(collective_time(Collective.ALL_REDUCE, 224 * 4, placement(8, 1, 8), fabric).time,
                                                         rel=1e-12)  # fmt: skip
    bf16 = run_json(*PINNED)["results"]["t_dp"]["inputs"]
    assert bf16["g"]["value"] == pytest.approx(collective_time(Collective.ALL_GATHER, (218_103_808 + 8192) * 2, placement(8, 1, 8), fabric).time,
                                               rel=1e-12)  # fmt: skip
    assert "a_8" not in bf16


def test_the_search_row_is_fit_of_its_layout(run_json) -> None:
    """fit --search walks each row with the flag (memory) and times it with it: the FSDP 8 row's memory, t_dp and t_step
    are fit's of that layout."""
    pinned = run_json(*PINNED, "--fp8-all-gather")["results"]
    search = run_json("fit", "--gpus", "8", "--search", *H200, "--fp8-all-gather", "--top", "50")
    row = next(r for r in search["tables"]["top"]["rows"]
               if (r["tp"], r["pp"], r["dp"], r["micro_batch"], r["recompute"], r["zero"]) == (1, 1, 8, 2, "op", 3))  # fmt: skip
    assert row["memory"] == pinned["total"]["value"]
    assert row["t_dp"] == pytest.approx(pinned["t_dp"]["value"], rel=1e-9)
    assert row["t_step"] == pytest.approx(pinned["t_step"]["value"], rel=1e-9)
    assert search["settings"]["fp8_all_gather"] is True


H200_FULL = tuple("full" if f == "op" else f for f in H200)  # the TP walk checkpoints whole blocks or nothing (memory_fsdp.tp_gaps)


def test_the_search_walks_the_tp_row_with_it(run_json) -> None:
    """With TP the FP8 all-gather is walked since session 17 (memory_step_peak.float8_all_gather_gaps; ground truth
    tests/ground_truth/test_torch_memory_float8_all_gather_tp_pp.py): the search's TP 2 row is `fit` of its layout and
    `memory`'s total, below the walk that gathers in bf16 (2026-11-29: 55.36 GiB, 55.46 without the flag, each stream's own
    peak + 2 GiB; since session 19 the allocator replayed + 1.5 GiB: 59.36 and 59.71; before, the textbook sum with the flag)."""
    gib = 2**30
    search = run_json("fit", "--gpus", "8", "--search", *H200_FULL, "--fp8-all-gather", "--top", "200")
    row = next(r for r in search["tables"]["top"]["rows"] if (r["tp"], r["pp"], r["dp"], r["zero"]) == (2, 1, 4, 3))
    assert row["sequence_parallel"] is True and row["micro_batch"] == 4  # torchtitan's apply_tp always shards the sequence
    layout = ("--gpus", "8", "--tp", "2", "--pp", "1", "--dp", "4", "--zero", "3", "--micro-batch", "4", "--sequence-parallel", *H200_FULL)
    pinned = run_json("fit", *layout, "--fp8-all-gather")["results"]["total"]["value"]
    assert row["memory"] == pinned and pinned / gib == pytest.approx(59.36, abs=0.01)
    assert pinned < run_json("fit", *layout)["results"]["total"]["value"]
    memory = run_json("memory", "--model", "llama3-8b", "--framework", "torchtitan", "--precision", "fp8", "--recompute", "full", "--tp", "2",
                      "--dp", "4", "--zero", "3", "--sequence-parallel", "--micro-batch", "4", "--seq-len", "8192", "--fp8-all-gather")  # fmt: skip
    assert memory["results"]["total"]["value"] == pinned and "step_reserved" in memory["results"]


def test_memory_and_fit_walk_it_in_pipeline_stages(run_json) -> None:
    """TP 2 x PP 2 x FSDP 2 under 1F1B, 8 micro-batches: memory and fit walk the stages with the flag to the same total,
    2.09 GiB below the bf16 gathers (the allocator replayed, session 19: 36.92 vs 39.00 GiB; each stream's own peak + 2 GiB
    gave 37.12 vs 38.80; each stage keeps its 16 blocks unsharded through the step, their TP-local Float8 weights at 1 B an
    element in place of 2)."""
    gib = 2**30
    flags = ("--model", "llama3-8b", "--framework", "torchtitan", "--precision", "fp8", "--recompute", "full", "--tp", "2", "--pp", "2",
             "--dp", "2", "--zero", "3", "--sequence-parallel", "--micro-batch", "1", "--seq-len", "8192", "--schedule", "1f1b")  # fmt: skip
    totals = {}
    for extra in ((), ("--fp8-all-gather",)):
        memory = run_json("memory", *flags, "--micro-batches", "8", *extra)["results"]
        assert "step_reserved" in memory
        fit = run_json("fit", *flags, *extra, "--batch", "16", "--gpus", "8", "--gpu", "h200")["results"]
        assert fit["total"]["value"] == memory["total"]["value"]
        totals[extra] = memory["total"]["value"] / gib
    assert totals[()] == pytest.approx(39.00, abs=0.01) and totals[("--fp8-all-gather",)] == pytest.approx(36.92, abs=0.01)


def test_the_compiled_tp_block_keeps_the_textbook_with_it(run_json) -> None:
    """The compiled TP block's Inductor code is read with the weights cast in the block (memory_torchtitan_tp_compile): with
    --compile and TP the flag keeps the textbook sum, named (memory_step_peak.float8_all_gather_gaps), and the walk itself
    refuses it (memory_fsdp.check_fsdp_step)."""
    from parcalc.core.choices import Precision, Recompute
    from parcalc.core.memory_fsdp import fsdp_step_of, fsdp_step_peak
    from parcalc.errors import InputError
    from parcalc.presets import load_model

    flags = ("--model", "llama3-8b", "--framework", "torchtitan", "--precision", "fp8", "--recompute", "full", "--tp", "2", "--dp", "4",
             "--zero", "3", "--sequence-parallel", "--micro-batch", "4", "--seq-len", "8192", "--compile")  # fmt: skip
    assert "step_reserved" in run_json("memory", *flags)["results"]
    document = run_json("memory", *flags, "--fp8-all-gather")
    assert "step_reserved" not in document["results"]
    assert "--fp8-all-gather with tp and --compile (the compiled TP block's code is read with the weights cast in the block)" in str(document)
    step = fsdp_step_of("torchtitan-eager", 4, 8192, 4, Precision.FP8, Optimizer.ADAMW, Recompute.FULL, 2, True, float8_all_gather=True)
    with pytest.raises(InputError, match="not all-gathered in FP8"):
        fsdp_step_peak(load_model("llama3-8b"), step)


@pytest.mark.parametrize("drop", ["fp8", "torchtitan"])
def test_fit_refuses_it_without_float8_under_torchtitan(runner, drop: str) -> None:
    """The rule and the message of memory's (results.parse.fp8_all_gather_flag, one place for both)."""
    flags = list(PINNED)
    flags[flags.index(drop)] = "mixed-bf16" if drop == "fp8" else "fsdp2"
    if drop == "torchtitan":
        flags[flags.index("op")] = "none"  # fsdp2 offers no op checkpointing
    result = runner.invoke(app, [*flags, "--fp8-all-gather"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["Error: --fp8-all-gather: torchao's FP8 all-gather of the Float8 linears' weights is walked "
                                                  "with --precision fp8 --framework torchtitan"]  # fmt: skip
