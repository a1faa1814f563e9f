"""`--recompute op` (TorchTitan's op-level selective checkpointing) and `--recompute-layers n`
(Megatron-LM's block method): memory, FLOPs, time, the search and the command line.

Expected values are derived by hand below from the policy (parcalc/core/recompute.py, which cites
TorchTitan and Megatron-LM at a commit); tests/ground_truth/test_torch_recompute.py holds the same
counts against real PyTorch.
"""

from __future__ import annotations

import random

import pytest

from parcalc.core.activations import ActivationConfig, Recompute, layer_activations, recompute_working_set
from parcalc.core.choices import Precision
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.fit_search import COST_FIELDS, RECOMPUTES, SearchSpace, search
from parcalc.core.flops import training_flops
from parcalc.core.layout import Layout
from parcalc.errors import InputError
from parcalc.presets import load_gpu, load_link, load_model

LLAMA3_8B = load_model("llama3-8b", ())  # h 4096, 32 heads of 128, 8 K/V heads, f 14336, SwiGLU
GPT3 = load_model("gpt3-175b", ())  # 96 layers, h 12288, GELU 4h
A100 = load_gpu("a100-sxm4-80gb", ())


def a100_cluster(gpus: int) -> Cluster:
    return Cluster(gpus=gpus, gpus_per_node=8, peak=312e12, capacity=A100.memory_capacity.value, intra=load_link("nvlink3", ()),
                   inter=load_link("ib-hdr", ()), gpu=A100)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Memory


def test_op_keeps_the_saved_op_outputs_of_llama3_8b() -> None:
    # Per token, 16-bit: layer input h + wq's Q (4096) + wv's V (8 x 128 = 1024) + w1's gate (14336) +
    # w2's output h + SDPA's output (4096) = 31,744 elements = 63,488 B, and the fp32 log-sum-exp of 32
    # heads = 128 B: 63,616 B x 8,192 tokens = 521,142,272 B (against 1,089 MiB without recomputation).
    config = ActivationConfig(1, 8192, recompute=Recompute.OP, flash_attention=True, dropout=False)
    assert layer_activations(LLAMA3_8B, config).per_layer.value == 63_616 * 8192 == 521_142_272
    # TP 8 with SP: every tensor split by 8 but w2's partial sum (b s h on each rank, before its
    # reduce-scatter), plus the two reduce-scatter outputs (h / 8 each): 512 + 512 + 128 + 1792 + 4096
    # + 512 + 2 x 512 = 8,576 elements = 17,152 B, and 4 heads' log-sum-exp 16 B: 17,168 B per token.
    split = ActivationConfig(1, 8192, 8, True, Recompute.OP, flash_attention=True, dropout=False)
    assert layer_activations(LLAMA3_8B, split).per_layer.value == 17_168 * 8192


def test_op_without_flash_attention_keeps_nothing_of_the_core() -> None:
    # the math path's matmuls are aten.bmm, not in TorchTitan's list: no score tensor, no SDPA output;
    # GPT-3's GELU MLP saves wq, wv, up (mm 1, 3, 5): h + q + q (MHA: kv = q) + 4h = 7h per token
    config = ActivationConfig(1, 2048, recompute=Recompute.OP, flash_attention=False, dropout=True)
    assert layer_activations(GPT3, config).per_layer.value == 2 * 7 * 12288 * 2048


def test_op_working_set_is_what_the_replay_materialises() -> None:
    plain = ActivationConfig(1, 8192, flash_attention=True, dropout=False)
    op = ActivationConfig(1, 8192, recompute=Recompute.OP, flash_attention=True, dropout=False)
    every = layer_activations(LLAMA3_8B, plain).per_layer.value
    kept = layer_activations(LLAMA3_8B, op).per_layer.value
    working = recompute_working_set(LLAMA3_8B, op)
    assert working is not None and working.value == every - kept


def test_op_is_refused_for_moe_and_latent_attention() -> None:
    for key in ("mixtral-8x7b", "deepseek-v3"):
        with pytest.raises(InputError, match="--recompute op: modelled for dense layers"):
            layer_activations(load_model(key, ()), ActivationConfig(1, 1024, recompute=Recompute.OP, flash_attention=True))


# ---------------------------------------------------------------------------------------------
# FLOPs


def test_op_recomputes_wk_wo_and_w3() -> None:
    # Llama 3 8B, b 64, s 8192: the 2nd, 4th and 6th mm of seven (wk 4096 x 1024, wo 4096 x 4096,
    # w3 4096 x 14336) run again: 2 x 64 x 8192 x 4096 x (1024 + 4096 + 14336) per layer, 32 layers.
    counted = training_flops(LLAMA3_8B, 64, 8192, recompute="op", causal=True, flash_attention=True)
    assert counted.recomputed.value == 32 * 2 * 64 * 8192 * 4096 * (1024 + 4096 + 14336)
    assert counted.hardware.value == counted.model.value + counted.recomputed.value
    # without FlashAttention the attention core runs again too (causal: half of 2 x 2 b s^2 a d)
    math = training_flops(LLAMA3_8B, 64, 8192, recompute="op", causal=True, flash_attention=False)
    assert math.recomputed.value - counted.recomputed.value == 32 * 0.5 * 4 * 64 * 8192**2 * 4096


def test_recompute_layers_counts_n_layers_per_chunk() -> None:
    # GPT-3 175B on 16 stages of 6 layers: 2 per stage recomputed = 32 of 96 layers
    full = training_flops(GPT3, 1536, 2048, recompute="full")
    part = training_flops(GPT3, 1536, 2048, recompute="full", recomputed_layers=32)
    assert part.recomputed.value == 32 * full.layer_forward.value == full.recomputed.value / 3
    with pytest.raises(InputError, match="--recompute-layers"):
        training_flops(GPT3, 1536, 2048, recompute="selective", recomputed_layers=32)


# ---------------------------------------------------------------------------------------------
# Time


def test_op_replays_the_memory_bound_kernels_and_every_second_gemm() -> None:
    from parcalc.core.timing.compute import LayerShard, compute_spec, layer_passes

    spec = compute_spec(A100, "bf16", 312e12)
    layer = layer_passes(LLAMA3_8B, LayerShard(1, 8192, 1, False, True, False, True, 2.0), spec)
    times = {k.key: k.time for k in layer.forward}
    # wk's share of the fused QKV GEMM (1024 of 4096 + 2 x 1024), wo whole, w3's half of the fused
    # gate-up GEMM, every memory-bound kernel; not wq, wv, w1, w2 or the FlashAttention kernel
    expected = (times["qkv"] / 6 + times["proj"] + times["mlp.gate_up"] / 2
                + sum(times[k] for k in ("norm1", "rope", "residual1", "norm2", "mlp.act", "residual2")))  # fmt: skip
    assert layer.t_recompute(Recompute.OP, LLAMA3_8B) == pytest.approx(expected, rel=1e-12)
    assert 0 < layer.t_recompute(Recompute.OP, LLAMA3_8B) < layer.t_recompute(Recompute.FULL)


def test_tp_collectives_replayed_by_op_recomputation() -> None:
    # with SP, op-level checkpointing replays the 2 all-gathers of the forward (it saves the
    # reduce-scatter outputs); full recomputation replays the 2 all-gathers and the 2 reduce-scatters
    from parcalc.core.timing.step import stage_pieces

    training, cluster = Training(64, 4096, flash_attention=True), a100_cluster(16)
    pieces = {r: stage_pieces(LLAMA3_8B, Layout(8, 1, 2, sequence_parallel=True), 1, r, training, cluster)[0] for r in Recompute}
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement

    activation = 4096 * 4096 * 2.0
    group = placement(8, 1, 8)
    gather = collective_time(Collective.ALL_GATHER, activation, group, cluster.fabric).time
    scatter = collective_time(Collective.REDUCE_SCATTER, activation, group, cluster.fabric).time
    assert pieces[Recompute.OP].tp - pieces[Recompute.NONE].tp == pytest.approx(32 * 2 * gather, rel=1e-12)
    assert pieces[Recompute.FULL].tp - pieces[Recompute.NONE].tp == pytest.approx(32 * 2 * (gather + scatter), rel=1e-12)


def _gpt3(n: int | None, recompute: Recompute = Recompute.FULL, chunks: int = 1) -> object:
    from parcalc.core.choices import Schedule

    config = Config.of(8, 16, 8, 1, recompute, 1, True, Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B, chunks,
                    recompute_layers=n)  # fmt: skip
    return estimate(GPT3, config, Training(1536, 2048), a100_cluster(1024))


def test_recompute_layers_runs_between_none_and_full() -> None:
    # 6 layers per stage: n = 6 is full recomputation, n = 0 none, n = 3 half of full's extra time
    none, full = _gpt3(None, Recompute.NONE), _gpt3(None)
    assert _gpt3(6).step.value == pytest.approx(full.step.value, rel=1e-12)
    assert _gpt3(6).hardware_flops.value == full.hardware_flops.value
    zero = _gpt3(0)
    assert zero.compute.value == pytest.approx(none.compute.value, rel=1e-12)
    assert zero.tp_comm.value == pytest.approx(none.tp_comm.value, rel=1e-12)
    assert zero.hardware_flops.value == none.hardware_flops.value
    assert zero.memory.worst.activations.value == none.memory.worst.activations.value  # the stage's layers keep everything
    half = _gpt3(3)
    assert half.compute.value - none.compute.value == pytest.approx((full.compute.value - none.compute.value) / 2, rel=1e-9)
    assert none.total_memory > half.total_memory > full.total_memory
    # interleaved, v = 2: chunks of 3 layers; n = 3 recomputes them all
    assert _gpt3(3, chunks=2).step.value == pytest.approx(_gpt3(None, chunks=2).step.value, rel=1e-12)
    with pytest.raises(InputError, match="chunk holds 3"):
        _gpt3(4, chunks=2)
    with pytest.raises(InputError, match="needs --recompute full"):
        _gpt3(2, Recompute.SELECTIVE)


# ---------------------------------------------------------------------------------------------
# The search


def test_search_tries_op_and_agrees_with_the_estimate() -> None:
    training = Training(64, 4096, Precision.MIXED_BF16, flash_attention=True)
    cluster = a100_cluster(16)
    found = search(LLAMA3_8B, training, cluster)
    evaluated = found.evaluated
    op_rows = [i for i in range(len(evaluated)) if RECOMPUTES[int(evaluated.columns["recompute"][i])] is Recompute.OP]
    assert len(op_rows) * 4 == len(evaluated)  # one of four recomputation kinds
    timed = [i for i in op_rows if evaluated.columns["fits"][i]]  # the search times what fits
    assert len(timed) >= 30
    for i in random.Random(0).sample(timed, 30):
        config = evaluated.config(i)
        assert config.recompute is Recompute.OP
        scalar = estimate(LLAMA3_8B, config, training, cluster)
        assert evaluated.columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9)
        assert evaluated.columns["memory"][i] == pytest.approx(scalar.total_memory, rel=1e-9)
        assert evaluated.columns["hfu"][i] == pytest.approx(scalar.hfu.value, rel=1e-9)
    assert set(COST_FIELDS) <= set(evaluated.columns)


def test_search_leaves_op_out_for_moe_models() -> None:
    model = load_model("mixtral-8x7b", ())
    found = search(model, Training(256, 4096, flash_attention=True), a100_cluster(64), SearchSpace(zero_stages=(1,), interleaved=False))
    kinds = {RECOMPUTES[int(r)] for r in found.evaluated.columns["recompute"].tolist()}
    assert kinds == {Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL}


# ---------------------------------------------------------------------------------------------
# The command line


def test_memory_and_flops_json_carry_op(run_json) -> None:
    doc = run_json("memory", "--model", "llama3-8b", "--seq-len", "8192", "--flash-attention", "--recompute", "op")
    assert doc["settings"]["recompute"] == "op"
    assert doc["results"]["activation_per_layer"]["value"] == 521_142_272
    flops = run_json("flops", "--model", "llama3-8b", "--batch", "64", "--seq-len", "8192", "--causal", "--recompute", "op",
                     "--flash-attention")  # fmt: skip
    assert flops["results"]["recomputed_flops"]["value"] == 32 * 2 * 64 * 8192 * 4096 * (1024 + 4096 + 14336)
    rows = {r["op"]: r["recomputed"] for r in flops["tables"]["layer_flops"]["rows"]}
    assert rows["K = x·W^K"] > 0 and rows["Q = x·W^Q"] == 0 and rows["Q_i·K_i^T"] == 0


def test_recompute_layers_through_the_commands(run_json) -> None:
    args = ["--model", "gpt3-175b", "--tp", "8", "--pp", "16", "--dp", "8", "--sequence-parallel", "--recompute", "full"]
    doc = run_json("memory", *args, "--recompute-layers", "2")
    assert doc["settings"]["recompute_layers"] == 2
    stage = doc["results"]["stage_activations"]
    per_layer = {key: term["value"] for key, term in stage["inputs"].items()}
    assert per_layer["L_re"] == 2 and per_layer["L_stage"] == 6
    assert stage["value"] == (2 * per_layer["A_full"] + 4 * per_layer["A_none"]) * per_layer["n"]
    flops = run_json("flops", "--model", "gpt3-175b", "--batch", "1536", "--pp", "16", "--recompute", "full", "--recompute-layers", "2")
    assert flops["results"]["recomputed_flops"]["value"] == 32 * flops["results"]["layer_forward_flops"]["value"]
    fit = run_json("fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--batch", "1536", "--tp", "8",
                   "--pp", "16", "--dp", "8", "--sequence-parallel", "--recompute", "full", "--recompute-layers", "2")  # fmt: skip
    assert fit["settings"]["recompute_layers"] == 2
    assert fit["results"]["hardware_flops"]["value"] == pytest.approx(flops["results"]["hardware_flops"]["value"], rel=1e-12)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory", "--model", "gpt3-175b", "--pp", "16", "--recompute", "full", "--recompute-layers", "7"], "chunk holds 6"),
        (["memory", "--model", "gpt3-175b", "--recompute", "full", "--recompute-layers", "-1"], "must be 0 or more"),
        (["memory", "--model", "gpt3-175b", "--recompute", "full", "--recompute-layers", "two"], "a whole number"),
        (["memory", "--model", "gpt3-175b", "--recompute", "full", "--recompute-layers", "1e99"], "a whole number"),
        (["memory", "--model", "gpt3-175b", "--recompute-layers", "2"], "needs --recompute full"),
        (["flops", "--model", "gpt3-175b", "--recompute", "selective", "--recompute-layers", "2"], "needs --recompute full"),
        (["memory", "--model", "mixtral-8x7b", "--recompute", "op", "--flash-attention"], "--recompute op: modelled for dense"),
        (["flops", "--model", "deepseek-v3", "--recompute", "op"], "--recompute op: modelled for dense"),
        (["fit", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5", "--gpus", "64", "--search", "--recompute", "op"], "--recompute op"),
        (["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--batch", "1536", "--search",
          "--recompute", "full", "--recompute-layers", "2"], "without --search"),
        (["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--recompute", "full", "--recompute-layers", "2"],
         "describes one configuration"),
    ],
)
def test_bad_recompute_input_is_one_line(run_error, args: list[str], message: str) -> None:
    assert message in run_error(args)
