"""Expert parallelism (--ep / --etp): Megatron-Core's folding rules, per-GPU parameters and states,
the all-to-all rows of comm-volume, fit's t_ep, and the CLI's errors.

Hand derivations are written out in each test; the model is Mixtral 8x7B's shape
(mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, expert
FFN 14336, 8 experts, top-2, vocab 32000, untied, RMSNorm, no biases).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.collectives import Collective
from parcalc.core.comm import Network, Options, Workload, iteration_plan
from parcalc.core.expert_parallel import expert_layout, expert_params_per_rank, moe_dense_params_per_rank
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.model import MixtureOfExperts, Mlp, Norm, Position, TransformerModel
from parcalc.core.training_setup import TrainingSetup
from parcalc.errors import InputError

L, H, HEADS, KV, F, E, K, V = 32, 4096, 32, 8, 14336, 8, 2, 32000


def mixtral(**moe: object) -> TransformerModel:
    return TransformerModel(
        key="mixtral-test", name="Mixtral 8x7B (test)", layers=L, hidden=H, heads=HEADS, kv_heads=KV, head_dim=H // HEADS,
        ffn_hidden=F, mlp=Mlp.SWIGLU, vocab=V, max_seq_len=32768, tied_embeddings=False, position=Position.ROPE,
        norm=Norm.RMSNORM, bias=False, source="mistralai/Mixtral-8x7B-v0.1 config.json", dropout=False,
        moe=MixtureOfExperts(**{"experts": E, "top_k": K, "expert_ffn_hidden": F, "source": "config.json", **moe}),  # type: ignore[arg-type]
    )  # fmt: skip


def dense() -> TransformerModel:
    return TransformerModel(key="dense", name="dense", layers=4, hidden=256, heads=4, kv_heads=4, head_dim=64, ffn_hidden=1024,
                            mlp=Mlp.GELU, vocab=0, max_seq_len=128, tied_embeddings=True, position=Position.ROPE,
                            norm=Norm.LAYERNORM, bias=False, source="test")  # fmt: skip


ATTN = H * H + 2 * H * (KV * 128) + H * H  # q, k, v, o: 41,943,040 (Mixtral: 4096 x 4096, 2 x 4096 x 1024, 4096 x 4096)
EXPERT = 3 * H * F  # one SwiGLU expert: 176,160,768
ROUTER = H * E  # 32,768


# --- Megatron-Core's rules -------------------------------------------------------------------


@pytest.mark.parametrize(("tp", "cp", "dp", "ep", "etp", "edp"), [
    (2, 1, 16, 8, None, 4),   # etp = tp = 2: 2 x 8 = 16 divides 32, expert-DP 2
    (2, 1, 16, 8, 1, 4),      # 32 / (1 x 8) = 4
    (8, 1, 4, 4, 1, 8),       # Megatron's folding example: TP8 attention, EP4 x ETP1 experts over 32 ranks
    (1, 2, 4, 8, None, 1),    # cp folds in too: 1 x 2 x 4 = 8 = 1 x 8
], ids=["etp-default", "etp1", "tp8-ep4-etp1", "cp2"])  # fmt: skip
def test_expert_layout_is_megatron_folding(tp: int, cp: int, dp: int, ep: int, etp: int | None, edp: int) -> None:
    # parallel_state.py initialize_model_parallel: expert_data_parallel_size = world // (etp x ep x pp)
    layout = expert_layout(mixtral(), Layout(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp))
    if etp is None:
        edp = tp * cp * dp // (tp * ep)
    assert layout.edp == edp and layout.ep == ep and layout.etp == (etp or tp) and layout.dense_dp == dp * cp


@pytest.mark.parametrize(("args", "message"), [
    ((2, 1, 16, 3, None), "--ep: 3 does not divide the 8 routed experts"),
    ((2, 1, 2, 8, None), "etp x ep = 2 x 8 does not divide tp x cp x dp = 2 x 1 x 2 = 4"),
    ((2, 1, 16, 0, None), "--ep: must be a whole number of at least 1"),
    ((2, 1, 16, 1, 3), "--etp: 3 does not divide the expert FFN width 14336"),
])  # fmt: skip
def test_expert_layout_refuses(args: tuple, message: str) -> None:
    tp, cp, dp, ep, etp = args
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        expert_layout(mixtral(), Layout(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp))


def test_ep_on_a_dense_model_is_an_error() -> None:
    with pytest.raises(InputError, match="has no experts"):
        expert_layout(dense(), Layout(dp=4, ep=2))
    with pytest.raises(InputError, match="has no experts"):
        memory_breakdown(dense(), Layout(dp=4, ep=2), TrainingSetup(1, 128))


# --- memory ----------------------------------------------------------------------------------


def test_parameters_per_gpu_by_hand() -> None:
    # tp 2, dp 16, ep 8, etp 1: each GPU holds 8/8 = 1 whole expert of each of the 32 MoE layers,
    # attention / 2 and the router (replicated: Megatron's Router weight is not TP-split) and 2 RMSNorms.
    m = mixtral()
    assert moe_dense_params_per_rank(m, 2) == ATTN // 2 + 2 * H + ROUTER == 21_012_480
    assert expert_params_per_rank(m, Layout(ep=8, etp=1)) == EXPERT == 176_160_768
    assert expert_params_per_rank(m, Layout(ep=4, etp=2)) == 2 * EXPERT // 2  # 2 experts, each split 2 ways: the same count
    b = memory_breakdown(m, Layout(tp=2, dp=16, zero=1, ep=8, etp=1), TrainingSetup(1, 4096))
    embed = head = V * H // 2  # V/t rows each (untied), final norm H on the last stage
    assert b.worst.parameters.value == L * (21_012_480 + EXPERT) + embed + head + H == 6_440_620_032


def test_zero_shards_dense_over_dp_and_experts_over_expert_dp() -> None:
    # mixed bf16, Adam: w 2, g 2, K 12. ZeRO-1: K x (Psi_d / N_d + Psi_x / N_e), N_d = dp = 16,
    # N_e = tp x dp / (etp x ep) = 32 / 8 = 4.
    m = mixtral()
    b = memory_breakdown(m, Layout(tp=2, dp=16, zero=1, ep=8, etp=1), TrainingSetup(1, 4096))
    psi_x = L * EXPERT
    psi_d = 6_440_620_032 - psi_x
    assert b.worst.states.weights.value == 2 * (psi_d + psi_x)
    assert b.worst.states.optimizer.value == pytest.approx(12 * (psi_d / 16 + psi_x / 4))
    # ZeRO-2 shards gradients the same way; ZeRO-3 weights too
    b3 = memory_breakdown(m, Layout(tp=2, dp=16, zero=3, ep=8, etp=1), TrainingSetup(1, 4096))
    assert b3.worst.states.weights.value == pytest.approx(2 * (psi_d / 16 + psi_x / 4))
    # ZeRO-3 gathers one MoE layer's local part whole: 2 layers' weights and one layer's gradients
    unit = 21_012_480 + EXPERT
    assert b3.worst.gathered is not None
    assert b3.worst.gathered.value >= (2 * 2 + 2) * unit


def megatron_weight_and_optimizer_bytes(tp: int, dp: int) -> float:
    """megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM 00caa53a),
    compute_weight_and_optimizer_memory, written out for this model with pp = 1, untied
    embeddings, SwiGLU (gated_linear_multiplier 3/2), RMSNorm (norm_size 1), no shared experts,
    the distributed optimizer (6 + 12 / dp bytes per parameter)."""
    self_attn = 2 * H * H * ((1 + KV / HEADS) * 1.0)  # query_projection_to_hidden_size_ratio = 1
    moe_layer = 2 * H * (F * E * 1.5 + 1) + self_attn
    block = moe_layer * L + H  # + final_layernorm
    embedding = H * V
    shard = (block + embedding) / tp + embedding / tp  # untied and pp == 1: the output layer too
    return shard * (6 + 12 / dp)


def test_memory_agrees_with_megatron_theoretical_memory_at_ep1() -> None:
    # --fp32-grads, ZeRO-1: 2 + 4 + 12 / dp bytes per parameter, Megatron's distributed optimizer.
    # At ep = 1, etp = tp the two differ only where Megatron's formula is wrong: it divides the norms
    # by tp (they are replicated) and leaves out the router (h x E per MoE layer, replicated).
    tp, dp = 2, 8
    m = mixtral()
    b = memory_breakdown(m, Layout(tp=tp, dp=dp, zero=1), TrainingSetup(1, 4096, fp32_grads=True))
    ours = b.worst.states.total
    missing = L * (ROUTER + 2 * H * (1 - 1 / tp)) + H * (1 - 1 / tp)
    assert ours - megatron_weight_and_optimizer_bytes(tp, dp) == pytest.approx((6 + 12 / dp) * missing)


def test_megatron_theoretical_memory_ignores_ep() -> None:
    # With ep = 8, etp = 1 each GPU keeps 1 expert of 8, whole: Megatron's formula still counts all 8
    # experts / tp (it has no expert_model_parallel_size term): 4 experts' worth per GPU against 1,
    # 175.13 GB against parcalc's 73.67 GB of weights, gradients and optimizer states.
    tp, dp = 2, 8
    m = mixtral()
    b = memory_breakdown(m, Layout(tp=tp, dp=dp, zero=1, ep=8, etp=1), TrainingSetup(1, 4096, fp32_grads=True))
    psi_x = L * EXPERT
    psi_d = b.worst.parameters.value - psi_x
    assert b.worst.states.total == pytest.approx(6 * (psi_d + psi_x) + 12 * (psi_d / dp + psi_x / 2))
    assert megatron_weight_and_optimizer_bytes(tp, dp) == pytest.approx(175_131_540_480)
    assert b.worst.states.total == pytest.approx(73_671_800_832)


def test_dense_model_memory_unchanged_by_ep_fields() -> None:
    a = memory_breakdown(dense(), Layout(dp=4, zero=1), TrainingSetup(1, 128))
    assert a.worst.states.optimizer.formula == "$K × $psi / $N_d"


def test_first_dense_layers_count_on_their_stage() -> None:
    # DeepSeek-style: the first 2 of 32 layers dense; pp 2: stage 1 holds 14 MoE layers, stage 2 16.
    m = mixtral(first_dense_layers=2)
    b = memory_breakdown(m, Layout(tp=2, pp=2, dp=8, ep=8, etp=1), TrainingSetup(1, 4096, micro_batches=2))
    first = b.stages[0].parameters
    assert {t.key: t.value for t in first.inputs}["L_m"] == 14
    assert {t.key: t.value for t in b.stages[1].parameters.inputs}["L_m"] == 16


# --- comm-volume -----------------------------------------------------------------------------

NET = Network(Link("nv", "nv", Sourced(300e9, "B/s", "test"), Sourced(3e-6, "s", "test")),
              Link("ib", "ib", Sourced(25e9, "B/s", "test"), Sourced(14e-6, "s", "test")))  # fmt: skip


def test_all_to_all_rows_by_hand() -> None:
    # tp 2 + SP, dp 16, ep 8, etp 1, b 4, s 4096, bf16: T = 4 x 4096 / 2 = 8192 tokens per rank;
    # buffer = T k h s = 8192 x 2 x 4096 x 2 B = 134,217,728 B; 32 layers x 1 micro-batch per pass.
    par = Layout(tp=2, dp=16, sequence_parallel=True, zero=1, ep=8, etp=1)
    plan = iteration_plan(mixtral(), Workload(64, 4, 4096, 2.0, 2.0), par, NET)
    rows = [c for c in plan.calls if c.dimension == "ep"]
    assert len(rows) == 4 and all(c.op is Collective.ALL_TO_ALL and c.calls == 32 for c in rows)
    assert {c.bytes_per_call for c in rows} == {134_217_728.0}
    assert {c.sent for c in rows} == {32 * 134_217_728 * 7 / 8}
    assert not any(c.inter_node for c in rows)  # ep ranks 0-7 with etp 1: one node of 8
    edp = [c for c in plan.calls if c.dimension == "edp"]
    assert {c.group_size for c in edp} == {4} and all(c.inter_node for c in edp)  # ranks 8 apart
    assert sum(c.payload for c in edp if c.op is Collective.REDUCE_SCATTER) == L * EXPERT * 2


def test_imbalance_and_capacity_factor() -> None:
    par = Layout(dp=8, ep=8)
    work = Workload(8, 1, 1024, 2.0, 2.0)
    base = next(d for d in iteration_plan(mixtral(), work, par, NET).derivations if d.key == "ep_all_to_all_sent").value
    skewed = iteration_plan(mixtral(), work, par, NET, Options(moe_imbalance=1.5))
    assert next(d for d in skewed.derivations if d.key == "ep_all_to_all_sent").value == pytest.approx(1.5 * base)
    capped = iteration_plan(mixtral(capacity_factor=1.25), work, par, NET, Options(moe_imbalance=1.5))
    assert next(d for d in capped.derivations if d.key == "ep_all_to_all_sent").value == pytest.approx(1.25 * base)
    # hand: 4 x 32 layers x 1024 tokens x 2 x 4096 x 2 B x 7/8
    assert base == 4 * 32 * 1024 * 2 * 4096 * 2 * 7 / 8
    with pytest.raises(InputError, match="--moe-imbalance"):
        iteration_plan(mixtral(), work, par, NET, Options(moe_imbalance=0.5))


def test_etp_rows() -> None:
    # etp 2: the received T k tokens all-gathered over 2 ranks (output 2 x buffer), reduce-scattered back
    par = Layout(tp=2, dp=8, sequence_parallel=True, ep=4, etp=2)
    plan = iteration_plan(mixtral(), Workload(8, 1, 1024, 2.0, 2.0), par, NET)
    rows = [c for c in plan.calls if c.dimension == "etp"]
    buffer = 1024 / 2 * 2 * 4096 * 2
    assert {(c.op, c.bytes_per_call) for c in rows} == {(Collective.ALL_GATHER, 2 * buffer), (Collective.REDUCE_SCATTER, 2 * buffer)}


def test_dense_dp_rows_exclude_experts() -> None:
    par = Layout(dp=8, ep=8)
    plan = iteration_plan(mixtral(), Workload(8, 1, 1024, 2.0, 2.0), par, NET)
    dp_payload = plan.payload(dimension="dp")
    # all non-expert parameters (dp = 8 over tp 1): total - 32 layers x 8 experts
    assert dp_payload == (mixtral().total_params - L * E * EXPERT) * 2


# --- CLI -------------------------------------------------------------------------------------

PRESET = """kind: model
name: Mixtral 8x7B (test)
sources:
  hf: "mistralai/Mixtral-8x7B-v0.1 config.json"
source: hf
layers: 32
hidden: 4096
heads: 32
kv_heads: 8
ffn_hidden: 14336
mlp: swiglu
vocab: 32000
max_seq_len: 32768
tied_embeddings: false
position: rope
norm: rmsnorm
bias: false
dropout: false
moe: {experts: 8, top_k: 2, expert_ffn_hidden: 14336, source: hf}
"""


@pytest.fixture
def presets(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mixtral-test.yaml").write_text(PRESET)
    return tmp_path


MEMORY = ["memory", "--model", "mixtral-test", "--seq-len", "4096", "--tp", "2", "--dp", "16"]
COMM = ["comm-volume", "--strategy", "ep", "--model", "mixtral-test", "--tp", "2", "--dp", "16", "--batch", "16", "--seq-len", "1024"]


@pytest.mark.parametrize(("argv", "message"), [
    (MEMORY + ["--ep", "3"], "Error: --ep: 3 does not divide the 8 routed experts"),
    (MEMORY + ["--ep", "0"], "Error: --ep:"),
    (MEMORY + ["--ep", "-1"], "Error: --ep:"),
    (MEMORY + ["--ep", "x"], "Error: --ep:"),
    (MEMORY + ["--ep", "8", "--etp", "8"], "Error: --ep / --etp: etp x ep = 8 x 8 does not divide"),
    (COMM + ["--ep", "8", "--moe-imbalance", "0.9"], "Error: --moe-imbalance:"),
    (COMM + ["--ep", "8", "--moe-imbalance", "nan"], "Error: --moe-imbalance:"),
    (COMM + ["--ep", "8", "--moe-imbalance", "abc"], "Error: --moe-imbalance:"),
    (COMM + ["--ep", "16"], "Error: --ep: 16 does not divide the 8 routed experts"),
    (["memory", "--model", "llama3-8b", "--ep", "2"], "Error: --ep: model llama3-8b has no experts"),
    (["comm-volume", "--strategy", "3d", "--model", "llama3-8b", "--dp", "2", "--etp", "1"], "Error: --etp: model llama3-8b has no experts"),
])  # fmt: skip
def test_cli_errors_are_one_line_exit_2(presets: Path, argv: list[str], message: str) -> None:
    result = CliRunner().invoke(app, [*argv, "--presets", str(presets)], env={"COLUMNS": "80"})
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), result.output


def test_cli_memory_json_carries_expert_terms(presets: Path) -> None:
    import json

    result = CliRunner().invoke(app, [*MEMORY, "--ep", "8", "--etp", "1", "--zero", "1", "--format", "json", "--presets", str(presets)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["results"]["stage_parameters"]["value"] == 6_440_620_032
    inputs = {key: t["value"] for key, t in data["inputs"].items()}
    assert inputs["ep"] == 8 and inputs["etp"] == 1 and inputs["expert_dp"] == 4


def test_cli_comm_volume_ep_strategy(presets: Path) -> None:
    import json

    result = CliRunner().invoke(app, [*COMM, "--ep", "8", "--etp", "1", "--sequence-parallel", "--format", "json", "--presets", str(presets)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    sent = data["results"]["ep_all_to_all_sent"]
    # b = 1 (16 / 16), T = 1024 / 2 = 512; 4 x 32 x 512 x 2 x 4096 x 2 B x 7/8
    assert sent["value"] == 4 * 32 * 512 * 2 * 4096 * 2 * 7 / 8


# --- fit -------------------------------------------------------------------------------------


def test_fit_t_ep_by_hand(presets: Path) -> None:
    from parcalc.core.fit import Cluster, Config, Training, estimate, invalid_reason
    from parcalc.core.timing.network import collective_time, placement
    from parcalc.presets import load_gpu, load_link

    gpu = load_gpu("h100-sxm5")
    cluster = Cluster(256, 8, gpu.peak("bf16").value if hasattr(gpu, "peak") else 989e12, gpu.memory_capacity.value,
                      load_link("nvlink4"), load_link("ib-ndr"), gpu=gpu)  # fmt: skip
    training = Training(1024, 4096)
    config = Config.of(2, 4, 32, 1, zero=1, sequence_parallel=True, ep=8, etp=1)
    assert invalid_reason(mixtral(), config, training, cluster) is None
    assert "does not divide the 8 routed experts" in str(invalid_reason(mixtral(), Config.of(2, 4, 32, 1, ep=3), training, cluster))
    est = estimate(mixtral(), config, training, cluster)
    # T = 1 x 4096 / 2 = 2048 tokens; buffer = 2048 x 2 x 4096 x 2 B; ep 8 ranks 1 apart: one node
    buffer = 2048 * 2 * 4096 * 2
    a2a = collective_time(Collective.ALL_TO_ALL, buffer, placement(8, 1, 8), cluster.fabric).time
    m = 1024 // (32 * 1)
    assert est.ep_comm is not None and est.ep_comm.value == pytest.approx(m * 8 * 4 * a2a)  # 32 layers / pp 4 = 8 MoE layers
    parts = (est.compute, est.tp_comm, est.bubble, est.pp_comm, est.dp_comm, est.optimizer, est.ep_comm)
    assert est.step.value == pytest.approx(sum(p.value for p in parts))
