"""Published peak memory of MoE runs against parcalc.core.memory (issues #13 and #19: within 15 %).

Both figures are torch.cuda.max_memory_allocated on rank 0: what PyTorch's caching allocator has
handed out. It leaves out what parcalc's reserve counts (memory.RESERVE_PARTS): the CUDA context
(not allocated through PyTorch), NCCL's communicator buffers (cudaMalloc'ed by NCCL itself) and
the allocator's fragmentation and cached blocks (memory_reserved - memory_allocated). So parcalc's
side is its total with --reserve 0. What is in both: weights, gradient buffers, the distributed
optimizer's fp32 master and moments, every saved activation, the logits, and the transient MoE
exchange buffers of one layer (memory.moe_dispatch_working_set).

1. Qwen3-30B-A3B, 16 H100, BF16, EP 16, ETP 1, TP = PP = CP = 1, DP 16, s = 4096, b = 1, no
   recomputation (tests/published_modern_runs.MB_SKILL_RUNS: 62.166 GiB rank-0 peak allocated;
   recipe qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config: grad_reduce_in_fp32 False,
   use_precision_aware_optimizer True with exp_avg_dtype = exp_avg_sq_dtype = fp32, distributed
   optimizer, TE fused attention).
2. Moonlight-16B-A3B (DeepSeek-V3's architecture: MLA with q_lora_rank None, 64 routed experts
   top-6, 2 shared, the first layer dense), 8 H100, BF16, TP 2 with SP, EP 8, ETP 1, DP 4, s = 4096,
   b = 1, `recompute_modules = []` (MOONLIGHT below): 36.618 and, with mla_up_proj recomputation,
   35.902 "GB" peak allocated.
"""

from __future__ import annotations

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.model import LatentAttention, MixtureOfExperts, Mlp, Norm, Position, TransformerModel
from parcalc.core.training_setup import TrainingSetup
from parcalc.presets import load_model
from tests.published_modern_runs import MB_SKILL_RUNS

GIB = 2**30
TOLERANCE = 0.15  # issues #13 / #19: published memory figures within 15 %

MOONLIGHT_SOURCE = (
    "NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-activation-recompute/SKILL.md (read @067f987df03b), 'Matched H100 "
    "Evidence: Moonlight 16B': 'Bridge revision 600d069b... Megatron Core revision 24bad8e6... The Moonlight 16B BF16 pretraining "
    "recipe ran on 8 H100 80GB GPUs with sequence length 4096, MBS=1, GBS=4, TP=2, PP=1, CP=1, EP=8, mock data, and 20 steps. This "
    "model mixes one dense layer with 26 MLA+MoE layers.' 'Peak allocated memory is the maximum post-optimizer value reported after "
    "iteration 2.' rows '| `[]` | 36.618 |' and '| `mla_up_proj` | 35.902 |' under 'Peak allocated (GB)'; card.yaml "
    "'parallelism: TP2_PP1_CP1_EP8_DP4'. Recipe src/megatron/bridge/recipes/moonlight/h100/moonlight_16b.py "
    "moonlight_16b_pretrain_8gpu_h100_bf16_config (@067f987df03b): sequence_parallel True, expert_tensor_parallel_size 1, "
    "use_precision_aware_optimizer True, main_grads_dtype bf16, exp_avg_dtype bf16, exp_avg_sq_dtype bf16, grad_reduce_in_fp32 "
    "False, use_distributed_optimizer True, moe_token_dispatcher_type alltoall, transformer_impl transformer_engine"
)
MOONLIGHT_SHAPE_SOURCE = (
    "Megatron-Bridge recipes/moonlight (an earlier revision, index id 19784408325), MLAModelProvider(num_layers=27, hidden_size=2048, "
    "ffn_hidden_size=11264, num_attention_heads=16, q_lora_rank=None, kv_lora_rank=512, num_moe_experts=64, moe_ffn_hidden_size=1408, "
    "moe_shared_expert_intermediate_size=2816, moe_layer_freq=[0] * 1 + [1] * 26, moe_router_topk=6, ..., "
    "share_embeddings_and_output_weights=False, qk_layernorm=True); qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128 and "
    "vocab 163840 from the Megatron-LM arguments of the same model (--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
    "--vocab-size 163840, index id 1845436839); the pretraining recipe takes the Hugging Face config's vocab_size (163840)"
)


def moonlight() -> TransformerModel:
    """Moonlight-16B-A3B as Megatron runs it (MOONLIGHT_SHAPE_SOURCE). Two shared experts of 1408 = one of 2816.
    Megatron's expert bias (moe_router_enable_expert_bias) is a registered buffer, not a parameter: router_bias False."""
    return TransformerModel(
        key="moonlight-16b-a3b", name="Moonlight-16B-A3B", layers=27, hidden=2048, heads=16, kv_heads=16, head_dim=128,
        ffn_hidden=11264, mlp=Mlp.SWIGLU, vocab=163840, max_seq_len=8192, tied_embeddings=False, position=Position.ROPE,
        norm=Norm.RMSNORM, bias=False, source=MOONLIGHT_SHAPE_SOURCE, dropout=False,
        moe=MixtureOfExperts(64, 6, 1408, shared_experts=2, first_dense_layers=1), mla=LatentAttention(0, 512, 128, 64, 128),
    )  # fmt: skip


def allocated(model: TransformerModel, par: Layout, setup: TrainingSetup) -> tuple[float, object]:
    """parcalc's bytes on the fullest GPU without the reserve (what max_memory_allocated sees), and the stage."""
    worst = memory_breakdown(model, par, setup).worst
    return worst.total.value, worst


def test_moonlight_parameters() -> None:
    """15.96 B total, 2.91 B active: the model card's '16B total, 3B activated' (counted by hand: embeddings and
    head 2 x 163840 x 2048; MLA per layer 2048 x 16 x 192 + 2048 x 576 + 512 + 512 x 16 x 256 + 16 x 128 x 2048;
    the dense MLP 3 x 2048 x 11264; an MoE layer's router 64 x 2048, 2 shared and 64 routed experts of 3 x 2048 x 1408)."""
    m = moonlight()
    attention = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    dense = attention + 3 * 2048 * 11264 + 2 * 2048
    moe = attention + 2 * 2048 + 64 * 2048 + 66 * 3 * 2048 * 1408
    assert m.total_params == dense + 26 * moe + 2 * 163840 * 2048 + 2048 == 15_960_108_544
    assert m.active_params == m.total_params - 26 * 58 * 3 * 2048 * 1408 == 2_914_774_528


def test_qwen3_30b_a3b_peak_allocated_within_15_percent() -> None:
    run = MB_SKILL_RUNS[0]
    assert run.peak_memory_gib == 62.166 and (run.ep, run.etp, run.dp, run.tp, run.seq_len) == (16, 1, 16, 1, 4096)
    model = load_model("qwen3-30b-a3b")
    par = Layout(tp=1, pp=1, dp=16, zero=1, ep=16, etp=1)
    setup = TrainingSetup(1, 4096, Precision.MIXED_BF16, recompute=Recompute.NONE, flash_attention=True, reserve=0.0)
    value, worst = allocated(model, par, setup)
    # by hand: 48 MoE layers of 128 / 16 = 8 local experts, 3 x 2048 x 768 each: 1,811,939,328 expert parameters, their
    # fp32 master and two fp32 moments (K = 12) unsharded (expert-DP 1); 1,541,081,088 dense parameters sharded over 16
    assert worst.parameters.value == 1_541_081_088 + 1_811_939_328
    assert worst.states.optimizer.value == 12 * (1_541_081_088 / 16 + 1_811_939_328)
    # the exchange buffers of one MoE layer: 2 x T k h e = 2 x 4096 x 8 x 2048 x 2 B
    assert worst.dispatch.value == 2 * 4096 * 8 * 2048 * 2 == 268_435_456
    published = run.peak_memory_gib * GIB
    assert value == pytest.approx(61.697 * GIB, rel=1e-4)  # 0.75 % under the published 62.166 GiB
    assert abs(value / published - 1) < TOLERANCE


def moonlight_run(mla_up_proj: bool) -> tuple[float, object]:
    par = Layout(tp=2, pp=1, dp=4, sequence_parallel=True, zero=1, ep=8, etp=1)
    setup = TrainingSetup(1, 4096, Precision.MIXED_BF16, recompute=Recompute.NONE, flash_attention=True, reserve=0.0,
                          moment_bytes=2.0, mla_up_proj=mla_up_proj)  # fmt: skip
    return allocated(moonlight(), par, setup)


@pytest.mark.parametrize("unit", [1e9, GIB], ids=["GB-as-1e9", "GB-as-GiB"])
def test_moonlight_peak_allocated_within_15_percent(unit: float) -> None:
    """36.618 'GB': the skill does not say whether GB is 1e9 bytes or Megatron's MB (2^20) / 1024; parcalc's
    36.30 GB = 33.80 GiB is within 15 % either way (0.9 % under 1e9-byte GB, 7.7 % under GiB)."""
    value, worst = moonlight_run(False)
    # precision-aware optimizer with bf16 moments: K = 4 + 2 x 2 = 8 bytes per parameter (Megatron's --exp-avg-dtype bf16)
    assert worst.states.optimizer.inputs[0].value == 8.0
    # edp = tp x dp / (etp x ep) = 2 x 4 / 8 = 1: the experts' states unsharded; the dense ones over dp = 4
    assert value == pytest.approx(36.297e9, rel=1e-4)
    assert abs(value / (36.618 * unit) - 1) < TOLERANCE


def test_moonlight_mla_up_proj_saving() -> None:
    """--recompute-modules mla_up_proj drops, per MLA layer and token on each of t = 2 ranks, the normed kv latent
    (512 / 2, SP) and Q, K (16 x 192 / 2 each) and V (16 x 128 / 2): 4,352 elements x 2 B x 4096 tokens x 27 layers =
    962,592,768 B, less what the replay makes again during one layer's backward (the working set
    activations.recompute_working_set counts for every selective module since --recompute-modules: the same 4,352
    elements x 2 B x 4096 tokens of one layer = 35,651,584 B): 926,941,184 B. The study measured 36.618 - 35.902 =
    0.716 GB; parcalc's saving is 0.927 GB, 29 % more, a gap parcalc does not explain (the study names no cause). The
    totals, each within 15 %, are the test of issue #19; this difference is pinned to its hand derivation only."""
    plain, _ = moonlight_run(False)
    again, _ = moonlight_run(True)
    per_layer = (512 // 2 + (2 * 16 * 192 + 16 * 128) // 2) * 2 * 4096
    assert plain - again == per_layer * 27 - per_layer == 926_941_184
    assert abs(again / (35.902e9) - 1) < TOLERANCE
