"""Qwen2-MoE (Qwen1.5-MoE-A2.7B): a gated shared expert and q/k/v-only biases, read from its config.json.

transformers models/qwen2_moe/modeling_qwen2_moe.py: Qwen2MoeSparseMoeBlock has `gate` (hidden x
num_experts, no bias), num_experts experts of moe_intermediate_size, one `shared_expert` of
shared_expert_intermediate_size and `shared_expert_gate = torch.nn.Linear(config.hidden_size, 1,
bias=False)`, whose sigmoid scales the shared expert's output; Qwen2MoeAttention has q_proj, k_proj,
v_proj with bias = config.qkv_bias and o_proj without. tests/fixtures/hf/qwen1.5-moe-a2.7b/config.json
is Qwen/Qwen1.5-MoE-A2.7B's (its keys as copies of it on huggingface.co carry them, '_name_or_path':
'Qwen/Qwen1.5-MoE-A2.7B'). Published: '14.3B total / 2.7B active' (NVIDIA NeMo AutoModel model
coverage, Qwen1.5-MoE-A2.7B; the Qwen team's model card: '14.3B parameters in total and 2.7B
activated parameters during runtime')."""

from __future__ import annotations

from pathlib import Path

from parcalc.cli import app
from parcalc.core.expert_parallel import moe_dense_params_per_rank
from parcalc.core.flops import training_flops
from parcalc.core.layer_ops import transformer_layer_ops
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.training_setup import TrainingSetup
from parcalc.hf_config import model_from_hf_config

CONFIG = Path(__file__).parent / "fixtures" / "hf" / "qwen1.5-moe-a2.7b" / "config.json"
H, HEADS, F_E, F_S, E, K, L, V = 2048, 16, 1408, 5632, 60, 4, 24, 151936


def test_parameters_equal_the_published_counts() -> None:
    model = model_from_hf_config(CONFIG)
    assert model.qkv_bias and not model.bias and model.moe.shared_expert_gate
    assert (model.moe.experts, model.moe.top_k, model.moe.shared_experts, model.moe.shared_width) == (E, K, 1, F_S)
    attention = 4 * H * H + 3 * H  # q, k, v, o weights; q, k, v biases only
    layer = attention + 2 * H + H * E + 3 * H * F_S + H + E * 3 * H * F_E  # norms, router, shared expert, its gate, experts
    assert model.moe_layer_params == layer
    assert model.total_params == L * layer + 2 * V * H + H == 14_315_784_192  # '14.3B total'
    assert model.active_params == model.total_params - L * (E - K) * 3 * H * F_E == 2_689_173_504  # '2.7B active'


def test_gate_flops_and_memory_split() -> None:
    model = model_from_hf_config(CONFIG)
    ops = {op.key: op for op in transformer_layer_ops(model, 1, 4096, 2.0, moe_layer=True)}
    assert ops["shared_gate"].flops == 2 * 4096 * H  # x·w^gate: [T x h] x [h x 1]
    shared = training_flops(model, 1, 4096).moe_layer_forward.term("F_shared").value
    assert shared == 3 * 2 * 4096 * H * F_S + 2 * 4096 * H  # the shared expert's three GEMMs and its gate
    # one TP rank of t = 2: attention weights and q/k/v biases / 2, norms, router and the gate whole, the shared expert / 2
    assert moe_dense_params_per_rank(model, 2) == (4 * H * H + 3 * H) // 2 + 2 * H + H * E + H + 3 * H * F_S // 2
    worst = memory_breakdown(model, Layout(dp=8, ep=4, zero=1), TrainingSetup(1, 4096, flash_attention=True)).worst
    assert worst.parameters.value == model.total_params - L * (E - E // 4) * 3 * H * F_E


def test_config_reads_on_the_command_line(runner) -> None:
    result = runner.invoke(app, ["flops", "--model", str(CONFIG), "--batch", "1", "--seq-len", "4096", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "14315784192" in result.output.replace(",", "").replace("_", "")


def test_its_router_as_transformers_runs_it() -> None:
    """Qwen2MoeTopKRouter: `if self.norm_topk_prob:` divide by the top-k sum (false in Qwen1.5-MoE's config.json), then
    `.to(router_logits.dtype)`: bf16 routing weights in a bf16 step."""
    moe = model_from_hf_config(CONFIG).moe
    assert not moe.top_k_renormalised and moe.routing_weights_cast


def test_hf_walks_it_and_fsdp2_says_it_does_not(run_json) -> None:
    """The hf walk follows Qwen2MoeSparseMoeBlock (MemTracker: tests/ground_truth/test_torch_memory_hf_architectures.py);
    the fsdp2 walk's parameter list has no shared expert, so fsdp2 falls back to the textbook sum and says so."""
    flags = ["--model", str(CONFIG), "--precision", "bf16", "--seq-len", "4096", "--micro-batch", "1", "--gpu", "h100-sxm5"]
    hf = run_json("memory", *flags, "--framework", "hf")
    assert "step_peak" in hf["results"]
    fsdp = run_json("memory", *flags, "--framework", "fsdp2", "--dp", "8", "--zero", "3")
    assert "step_peak" not in fsdp["results"]
    assert any("a shared expert (the fsdp2 walk shards the routed experts' blocks)" in a for a in fsdp["assumptions"])
