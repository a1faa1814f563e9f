"""Context parallelism (issue #13 item 2): memory, communication, FLOPs balance, fit, bad input.

Expected values are derived by hand in each test from the formulas' sources:
Transformer Engine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py at
d0067d0 (the three cp_comm_type variants), Megatron-LM d98e8a6 (2cp-chunk balancing, the dp-cp
group, the tp-cp-ep-dp-pp rank order), The Llama 3 Herd of Models sec. 3.3.2 and Table 4.
The ring exchange itself is checked against real PyTorch in tests/ground_truth/test_torch_context_parallel.py.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.activations import ActivationConfig, layer_activations
from parcalc.core.choices import Schedule
from parcalc.core.comm import Network, Workload, iteration_plan
from parcalc.core.comm.context import cp_sent_per_layer
from parcalc.core.context import causal_imbalance, causal_pairs, check_context_parallel, context_working_set
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.training_setup import TrainingSetup
from parcalc.errors import InputError
from parcalc.presets import load_model

runner = CliRunner()
LINK = Network(Link("l", "l", Sourced(100e9, "B/s", "test"), Sourced(1e-6, "s", "test")))
GIB = 2**30


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama3-8b", ())  # h 4096, 32 heads, 8 K/V heads of 128, 32 layers (HF config.json)


@pytest.fixture(scope="module")
def gpt3():
    return load_model("gpt3-175b", ())  # h 12288, 96 heads, 96 layers


# ---------------------------------------------------------------------------------------------
# Memory


def test_activations_divide_by_cp_korthikanti(gpt3) -> None:
    """GPT-3 layer, s 2048, b 1, t 8 with SP, no recompute: Korthikanti eq. (4) sbh/t (34 + 5as/h)
    = 2048 x 12288 / 8 x (34 + 5 x 96 x 2048 / 12288) = 3,145,728 x 114 = 358,612,992 B; cp 4: a quarter."""
    one = layer_activations(gpt3, ActivationConfig(1, 2048, 8, True)).per_layer.value
    four = layer_activations(gpt3, ActivationConfig(1, 2048, 8, True, cp=4)).per_layer.value
    assert one == 358_612_992
    assert four == 358_612_992 / 4


def test_zero_shards_over_dp_times_cp(llama8b) -> None:
    """Megatron-LM's distributed optimizer shards over the dp-cp group: dp 2 x cp 4 holds the
    optimizer states dp 8 does: 12 B x 8,030,261,248 / 8 = 12,045,391,872 B (Llama 3 8B, TP 1)."""
    setup = TrainingSetup(1, 8192, flash_attention=True)
    a = memory_breakdown(llama8b, Layout(dp=2, cp=4, zero=1), setup).worst.states.optimizer.value
    b = memory_breakdown(llama8b, Layout(dp=8, zero=1), setup).worst.states.optimizer.value
    assert a == b == 12 * 8_030_261_248 / 8


@pytest.mark.parametrize(("kind", "blocks"), [("p2p", 8), ("all-gather", 16), ("a2a", None)])
def test_working_set_per_variant(llama8b, kind: str, blocks: int | None) -> None:
    """B_kv = 2 b (s/cp) (kv_heads d / t) e = 2 x 1 x 16,384 x 128 x 2 = 8,388,608 B (s 131,072,
    cp 8, t 8, bf16). p2p holds max(cp, 4) = 8 blocks, all-gather 2 cp = 16; a2a the all-to-all
    outputs of Q, K, V: B_q + B_kv, B_q = 1 x 16,384 x 512 x 2 = 16,777,216 B."""
    d = context_working_set(llama8b, 1, 131072, Layout(8, cp=8, cp_comm=kind), 2.0)
    assert d is not None
    b_kv = 2 * 16384 * 128 * 2
    assert b_kv == 8_388_608
    assert d.value == (blocks * b_kv if blocks else 16_777_216 + b_kv)
    assert context_working_set(llama8b, 1, 131072, Layout(8, cp_comm=kind), 2.0) is None


def test_llama3_405b_long_context_fits_h100() -> None:
    """Llama 3 405B's long-context phase (The Llama 3 Herd of Models, Table 4: 16,384 GPUs, TP 8,
    CP 16, PP 16, DP 8, sequence 131,072, 16M tokens per batch = 128 sequences, i.e. 16 per DP
    replica; sec. 3.3.2: all-gather CP, 126 layers with the embedding and loss taking a stage slot
    each, interleaved pipeline) fits an 80 GiB H100 (h100-sxm5 preset, 80 GiB HBM3) in parcalc with
    ZeRO-1, SP and FlashAttention and no recomputation; the same layout without CP does not."""
    model = load_model("llama3-405b", ())
    setup = TrainingSetup(1, 131072, flash_attention=True, capacity=80 * GIB, micro_batches=16)
    par = Layout(tp=8, pp=16, dp=8, sequence_parallel=True, zero=1, schedule=Schedule.INTERLEAVED,
                 chunks=8, embedding_in_split=True, loss_in_split=True, cp=16, cp_comm="all-gather")  # fmt: skip
    with_cp = memory_breakdown(model, par, setup)
    assert par.gpus == 16_384
    assert with_cp.worst.total.value < 80 * GIB
    assert with_cp.worst.context is not None
    without = memory_breakdown(model, par._replace(cp=1, dp=128), setup)
    assert without.worst.total.value > 80 * GIB
    # activations of the layers scale by exactly 1/16; the CP buffers are extra
    assert with_cp.worst.activations.value == pytest.approx(without.worst.activations.value / 16)


# ---------------------------------------------------------------------------------------------
# Communication


@pytest.mark.parametrize(("kind", "forward", "backward"), [
    # p2p: (cp - 1) B_kv forward, 2 (cp - 1) B_kv backward; B_kv = 2 x 1 x 8,192 x 1,024 x 2 = 33,554,432 B (cp 4, s 32,768)
    ("p2p", 3 * 33_554_432, 6 * 33_554_432),
    # all-gather: K and V gathered, (cp - 1)/cp of cp B_kv / 2 each: the same bytes as p2p
    ("all-gather", 3 * 33_554_432, 6 * 33_554_432),
    # a2a: (cp - 1)/cp (2 B_q + B_kv) each way, B_q = 8,192 x 4,096 x 2 = 67,108,864 B
    ("a2a", 0.75 * (2 * 67_108_864 + 33_554_432), 0.75 * (2 * 67_108_864 + 33_554_432)),
])  # fmt: skip
def test_bytes_per_layer_per_variant(llama8b, kind: str, forward: float, backward: float) -> None:
    work = Workload(4, 1, 32768, 2.0, 2.0)
    par = Layout(cp=4, dp=1, cp_comm=kind)
    assert cp_sent_per_layer(llama8b, work, par, "forward") == forward
    assert cp_sent_per_layer(llama8b, work, par, "backward") == backward
    plan = iteration_plan(llama8b, work, par, LINK)
    headlines = {d.key: d.value for d in plan.derivations}
    assert headlines["cp_forward_sent"] == forward and headlines["cp_backward_sent"] == backward


def test_calls_per_variant(llama8b) -> None:
    """Per layer and micro-batch at cp 4: p2p 3 sends forward, 4 backward; all-gather 2 forward, 2 + 2
    backward; a2a 4 and 4 (TE context_parallel.py). x 32 layers x 4 micro-batches per iteration."""
    work = Workload(4, 1, 32768, 2.0, 2.0)
    expected = {"p2p": {"forward": 3, "backward": 4}, "all-gather": {"forward": 2, "backward": 4}, "a2a": {"forward": 4, "backward": 4}}
    for kind, per_phase in expected.items():
        plan = iteration_plan(llama8b, work, Layout(cp=4, cp_comm=kind), LINK)
        for phase, calls in per_phase.items():
            assert sum(r.calls for r in plan.calls if r.dimension == "cp" and r.phase == phase) == calls * 32 * 4, (kind, phase)


def test_gradients_reduced_over_dp_times_cp_and_placement(llama8b) -> None:
    """The gradient all-reduce runs over dp x cp = 8 ranks; with tp 2 x cp 4 = 8 GPUs per node the
    cp group stays inside a node, with tp 4 x cp 4 it spans two (ranks tp apart: tp-cp-ep-dp-pp)."""
    work = Workload(4, 1, 32768, 2.0, 2.0)
    plan = iteration_plan(llama8b, work, Layout(tp=2, cp=4, dp=2), LINK._replace(inter=LINK.intra))
    grads = [r for r in plan.calls if r.dimension == "dp"]
    assert grads and all(r.group_size == 8 for r in grads)
    assert not any(r.inter_node for r in plan.calls if r.dimension == "cp")
    wide = iteration_plan(llama8b, work, Layout(tp=4, cp=4, dp=1), LINK._replace(inter=LINK.intra))
    assert all(r.inter_node for r in wide.calls if r.dimension == "cp")


def test_tp_volume_uses_the_sequence_shard(llama8b) -> None:
    """TP all-reduces move b (s/cp) h: with cp 4 a quarter of the bytes of cp 1 (same everything else)."""
    work = Workload(4, 1, 32768, 2.0, 2.0)
    one = iteration_plan(llama8b, work, Layout(tp=2), LINK).payload("tp")
    four = iteration_plan(llama8b, work, Layout(tp=2, cp=4), LINK).payload("tp")
    assert four == pytest.approx(one / 4)


# ---------------------------------------------------------------------------------------------
# FLOPs balance


def test_causal_balance() -> None:
    """Plain split: rank r has r n^2 + n (n + 1)/2 pairs, n = s/cp; the last of 4 ranks (s 8,192, n
    2,048): 3 x 2,048^2 + 2,048 x 2,049 / 2 = 12,582,912 + 2,098,176 = 14,681,088 pairs of the mean 8,192 x 8,193 / 8 =
    8,389,632: 1.7499 (-> (2cp - 1)/cp = 1.75). With Megatron's 2cp chunks every rank has exactly the mean."""
    assert causal_pairs(8192, 4, 3, balanced=False) == 14_681_088
    assert causal_imbalance(8192, 4, balanced=False).value == pytest.approx(14_681_088 / 8_389_632)
    assert {causal_pairs(8192, 4, r, balanced=True) for r in range(4)} == {8192 * 8193 / 8}
    assert causal_imbalance(8192, 4, balanced=True).value == 1.0


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(("seq", "cp", "kind", "message"), [
    (8192, 3, "p2p", "does not divide the sequence length"),
    (4096, 4096, "p2p", "not a multiple of 2 x cp"),
    (8192, 16, "a2a", "not divisible by --cp 16"),
    (8192, 0, "p2p", "at least 1"),
])  # fmt: skip
def test_check_context_parallel(llama8b, seq: int, cp: int, kind: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_context_parallel(llama8b, seq, Layout(cp=cp, cp_comm=kind))


@pytest.mark.parametrize("args", [
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "3"],
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "0"],
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "-1"],
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "x"],
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "2", "--cp-comm", "ring"],
    ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--cp", "16", "--cp-comm", "a2a"],
    ["comm-volume", "--strategy", "cp", "--model", "llama3-8b", "--seq-len", "4096", "--cp", "4096"],
    ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--seq-len", "8192", "--search", "--cp", "7"],  # --search --cp pins (issue #13); 7 does not divide 64
])  # fmt: skip
def test_cli_bad_cp_is_one_line_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output


def test_cli_json_carries_cp(llama8b) -> None:
    import json

    result = runner.invoke(app, ["memory", "--model", "llama3-8b", "--seq-len", "131072", "--tp", "8", "--cp", "8", "--flash-attention",
                                 "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["settings"]["cp"] == 8 and data["settings"]["cp_comm"] == "p2p"
    # B_kv = 2 x 16,384 x 128 x 2 = 8,388,608 B; p2p holds max(8, 4) of them
    assert data["results"]["cp_working_set"]["value"] == 8 * 8_388_608
