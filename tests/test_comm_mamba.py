"""comm-volume on Mamba-2 hybrids (Nemotron-H) as Megatron-Core runs them: each layer is ONE block (Mamba-2, attention or
MLP) between a column- and a row-parallel linear, so one TP all-reduce (SP: all-gather + reduce-scatter) a layer per
pass (megatron/core/ssm/mamba_mixer.py @d98e8a64: in_proj ColumnParallelLinear, lines 280-295; out_proj row-parallel,
437-451); data-parallel gradients are the blocks' real tensors, split as MambaMixer marks them (conv1d, dt_bias, A_log,
D and the gated norm `tensor_model_parallel`, lines 325-434). The expected numbers are worked by hand below; the
tensors are checked against transformers' NemotronHForCausalLM (its parameters on the meta device) and against the
memory command's per-rank count (parcalc.core.mamba_memory.block_params_per_rank). The one-collective-a-pass claim is
run over gloo in tests/ground_truth/test_torch_mamba_tensor_parallel.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.collectives import Collective
from parcalc.core.comm import Network, Options, Workload, iteration_plan
from parcalc.core.comm.tensors import device_tensors, parameter_tensors, stage_ranges
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.mamba_memory import block_params_per_rank
from parcalc.errors import InputError
from parcalc.presets import load_model

LOOPBACK = Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test"))
ANY_LINK = Network(LOOPBACK, LOOPBACK)
BSH = 8192 * 4096 * 2  # one micro-batch's activation: b 1 x s 8192 x h 4096 x 2 bytes (bf16)


def _plan(tp: int = 8, pp: int = 2, dp: int = 4, sp: bool = False, recompute: bool = False, cp: int = 1, key: str = "nemotron-h-8b"):
    model = load_model(key)
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, sequence_parallel=sp)
    return model, iteration_plan(model, Workload(64, 1, 8192, 2.0, 2.0), layout, ANY_LINK, Options(recompute=recompute))


def _row(plan, dimension: str, phase: str, op: Collective, purpose: str | None = None):
    rows = [r for r in plan.calls if r.dimension == dimension and r.phase == phase and r.op is op
            and (purpose is None or r.purpose == purpose)]  # fmt: skip
    assert len(rows) == 1, rows
    return rows[0]


def test_the_brief_s_3d_line_runs() -> None:
    """The line that answered 'Error: --model: ... is a Mamba-2 hybrid' before: 3d, TP 8 x PP 2 x DP 4 on Nemotron-H-8B."""
    result = CliRunner().invoke(app, ["comm-volume", "--model", "nemotron-h-8b", "--strategy", "3d", "--tp", "8", "--pp", "2",
                                      "--dp", "4", "--batch", "64", "--seq-len", "8192", "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tp_allreduce_payload" in json.dumps(json.loads(result.output))


def test_one_tp_all_reduce_per_block_per_pass() -> None:
    """TP 8 x PP 2 x DP 4, batch 64, micro-batch 1: 16 micro-batches a replica, 26 layers a stage, each one block with one
    all-reduce forward and one backward: 26 x 16 = 416 calls of b s h = 67,108,864 B each way (a transformer layer: 832)."""
    _, plan = _plan()
    for phase in ("forward", "backward"):
        row = _row(plan, "tp", phase, Collective.ALL_REDUCE, "activations" if phase == "forward" else "activation gradients")
        assert row.calls == 26 * 16 and row.bytes_per_call == BSH
    headline = next(d for d in plan.derivations if d.key == "tp_allreduce_payload")
    assert headline.value == 2 * 26 * 16 * BSH == 55_834_574_848  # c = 1 forward + 1 backward, 26 layers, B = 16
    assert "mamba_mixer.py" in next(t for t in headline.inputs if t.key == "c").source


def test_full_recomputation_replays_one_forward_all_reduce() -> None:
    """Full recomputation replays each block's forward all-reduce once: 2 x 416 forward, 416 backward; c = 3."""
    _, plan = _plan(recompute=True)
    assert _row(plan, "tp", "forward", Collective.ALL_REDUCE, "activations").calls == 2 * 416
    assert _row(plan, "tp", "backward", Collective.ALL_REDUCE, "activation gradients").calls == 416
    assert next(d for d in plan.derivations if d.key == "tp_allreduce_payload").value == 3 * 26 * 16 * BSH


def test_sequence_parallel_gathers_and_scatters_once_a_block() -> None:
    """SP: each all-reduce becomes an all-gather + reduce-scatter (Korthikanti et al. 2022 sec. 4.2.2), and each block's one
    column-parallel linear (in_proj, linear_qkv or fc1) gathers its input again in backward: forward 416 + 416, backward
    416 + 416 and 416 re-gathers. The norm gradients all-reduced after backward: the 26 block norms of h = 4096 on each
    stage, plus the final norm on the last; no Mamba-2 parameter (split over TP, MambaMixer marks them
    tensor_model_parallel) is among them: stage 1 reduces (26 + 1) x 4096 x 2 B = 221,184 B in one flattened call."""
    _, plan = _plan(sp=True)
    for phase in ("forward", "backward"):
        assert _row(plan, "tp", phase, Collective.ALL_GATHER, "activations (sequence-parallel)").calls == 416
        assert _row(plan, "tp", phase, Collective.REDUCE_SCATTER, "activations (sequence-parallel)").calls == 416
    regather = _row(plan, "tp", "backward", Collective.ALL_GATHER, "activations (sequence-parallel, re-gathered for the weight gradient)")
    assert regather.calls == 416
    norms = sorted(r.bytes_per_call for r in plan.calls if r.dimension == "tp" and r.purpose.startswith("norm"))
    assert norms == [26 * 4096 * 2, 27 * 4096 * 2]
    gathers = {d.key: d.value for d in plan.derivations}
    assert gathers["sp_all_gather_payload"] == (2 + 1) * 26 * 16 * BSH  # c 2 + c_r 1
    assert gathers["sp_reduce_scatter_payload"] == 2 * 26 * 16 * BSH


def test_data_parallel_gradients_are_the_stage_s_real_parameters() -> None:
    """DDP all-reduces each rank's gradients once an iteration. Stage 1 of TP 8 x PP 2 holds layers 26-51: their blocks'
    norms whole and mixers / 8 (439,287,360, as `memory` counts them), the final norm (4,096) and its slice of the LM head
    (131,072 x 4,096 / 8 = 67,108,864): 506,400,320 parameters, 1,012,800,640 B of bf16 gradients."""
    model, plan = _plan()
    stage_1 = sum(block_params_per_rank(model, 8, model.mamba.block(i)) for i in range(26, 52))  # type: ignore[union-attr]
    assert stage_1 == 439_287_360
    rows = [r for r in plan.calls if r.dimension == "dp" and r.op is Collective.ALL_REDUCE]
    assert max(r.payload for r in rows) == (stage_1 + 4096 + 67_108_864) * 2 == 1_012_800_640


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 4), (8, 2)])
def test_stage_tensors_are_what_memory_holds(tp: int, pp: int) -> None:
    """Each stage's tensors on one TP rank equal block_params_per_rank over its layers (the memory command's count)."""
    model = load_model("nemotron-h-56b")
    layout = Layout(tp=tp, pp=pp, dp=1)
    for stage, (layers,) in enumerate(stage_ranges(model.layers, layout)):  # 118 layers on 4 stages: 30, 30, 29, 29
        held = device_tensors(model, layout, stage, Options())
        assert len(held.blocks) == len(layers)
        assert sum(t.numel for block in held.blocks for t in block) == sum(
            block_params_per_rank(model, tp, model.mamba.block(i)) for i in layers)  # type: ignore[union-attr]


def test_parameter_tensors_are_the_real_model_s() -> None:
    """transformers' NemotronHForCausalLM at the 8B config: 311 parameter tensors, 8,100,852,736 parameters, and the same
    multiset of tensor sizes (the order within a Mamba-2 block differs: parcalc follows Megatron-Core's registration)."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    config = tf.NemotronHConfig(vocab_size=131072, hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                                num_key_value_heads=8, head_dim=128, mamba_head_dim=64, n_groups=8, conv_kernel=4, chunk_size=128,
                                tie_word_embeddings=False, max_position_embeddings=8192, hidden_size=4096, num_attention_heads=32,
                                intermediate_size=21504, mamba_num_heads=128, ssm_state_size=128)  # fmt: skip
    with torch.device("meta"):
        real = tf.NemotronHForCausalLM(config)
    mine = parameter_tensors(load_model("nemotron-h-8b"))
    assert sorted(t.numel for t in mine) == sorted(p.numel() for p in real.parameters())
    assert len(mine) == 311 and sum(t.numel for t in mine) == 8_100_852_736


def test_fsdp_gathers_every_parameter() -> None:
    """ZeRO-3 / FSDP on 8 ranks: all 8,100,852,736 parameters gathered forward and again backward, reduce-scattered once
    (bf16; payload before shard padding, which Nemotron-H-8B's tensor rows need none of at 8)."""
    model = load_model("nemotron-h-8b")
    plan = iteration_plan(model, Workload(64, 8, 8192, 2.0, 2.0), Layout(dp=8, zero=3), ANY_LINK)
    scatter = _row(plan, "dp", "backward", Collective.REDUCE_SCATTER)
    assert scatter.payload == 8_100_852_736 * 2


def test_context_parallel_adds_the_mixer_all_to_alls() -> None:
    """CP 2 at TP 8: the 24 Mamba-2 layers' all-to-alls over heads (hybrid_context) and the 4 attention layers' exchange."""
    _, plan = _plan(tp=8, pp=1, dp=2, cp=2)
    mixer = [r for r in plan.calls if r.dimension == "cp" and r.purpose.startswith("Mamba-2 mixer")]
    assert mixer and all(r.calls % (24 * 32) == 0 for r in mixer)  # 24 Mamba-2 layers x 32 micro-batches


def test_tp_must_split_the_mamba_heads_and_groups() -> None:
    """MambaMixer asserts nheads % tp_size == 0 and ngroups % tp_size == 0 (mamba_mixer.py lines 262, 270): 4 groups on
    TP 8 is refused in one line."""
    model = load_model("nemotron-h-8b")
    narrow = dataclasses.replace(model, mamba=dataclasses.replace(model.mamba, groups=4))  # type: ignore[type-var]
    with pytest.raises(InputError, match="4 Mamba-2 groups"):
        iteration_plan(narrow, Workload(64, 1, 8192, 2.0, 2.0), Layout(tp=8, dp=1), ANY_LINK)
