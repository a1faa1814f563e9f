"""Memory as PyTorch allocates it: the peak over one training step of a Hugging Face model.

The textbook sum (parcalc.core.memory: weights + gradients + optimizer states + Korthikanti's
activations) is not what a GPU holds at its fullest moment. This module walks one step of
transformers' `LlamaForCausalLM` as the framework runs it, tensor by tensor, and takes the maximum of
what is live:

1. before the step: the fp32 weights and AdamW's two fp32 states (created by the first step and kept);
   gradients are gone (`optimizer.zero_grad(set_to_none=True)`, the default since PyTorch 2.0);
2. the forward, layer by layer, under `torch.autocast(bfloat16)` over fp32 weights (the Trainer's
   `bf16=True`): what autograd saves for backward in `LlamaDecoderLayer` (HF_SOURCES), the transient
   tensors of each op while it runs, and autocast's bf16 copies of the weights, which it caches until
   the autocast region ends and which the linears save for backward;
3. the LM head and HF's loss: `logits.float()`, then `cross_entropy` saves its log-softmax in fp32;
4. the backward: the loss's gradients (nll_loss_backward's zeros, log_softmax_backward's output: with
   the saved log-softmax three fp32 copies of the logits at once), then layer by layer activations
   freed as fp32 gradients appear;
5. the optimizer step (fused AdamW updates in place: no temporaries).

With `gradient_checkpointing_enable()` HF checkpoints each decoder layer (non-reentrant
torch.utils.checkpoint): the forward keeps each layer's input only, and the backward recomputes one
layer's saved tensors just before its backward.

The walk counts bytes the way `torch.cuda.max_memory_allocated` does: every tensor's storage
rounded to the caching allocator's 512-byte blocks (parcalc.core.allocator); what the allocator
reserves comes from its block rules replayed over the steps' allocations in order (hf_reserved_replayed). The check is the
H200 measurements of ../shared/measurements/h200-2026-11-28 and PyTorch's own MemTracker under
FakeTensorMode on the CPU (tests/ground_truth/test_torch_memory_hf.py); nothing here is fitted to them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from parcalc.core.allocator import CachingAllocator
from parcalc.core.choices import Mlp, Norm, Optimizer, Position, Precision, Recompute
from parcalc.core.memory_moe_block import experts_backward, experts_forward, gated_shared_backward, gated_shared_forward
from parcalc.core.memory_walk import (
    NormShape,
    StepHooks,
    StepPeak,
    StepShapes,
    Walk,
    cast_back,
    cross_entropy_backward,
    cross_entropy_forward,
    keep_if_saved,
    linear,
    linear_backward,
    norm_backward,
    norm_forward,
    parameter_bytes,
    peak_of,
)
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

TRANSFORMERS = "huggingface/transformers v5.17.0"
HF_SOURCES = {
    "rmsnorm": (f"{TRANSFORMERS} src/transformers/models/llama/modeling_llama.py:62-67 LlamaRMSNorm.forward: "
                "hidden_states.to(float32); variance = pow(2).mean(-1); hidden_states * rsqrt(variance + eps) (saves the fp32 input "
                "and rsqrt); weight * hidden_states.to(input_dtype) (saves the fp32 normalised tensor)"),
    "rmsnorm_backward": ("pytorch/pytorch v2.13.0 tools/autograd/derivatives.yaml pow.Tensor_Scalar: pow_backward(grad, self, exponent) "
                         "= grad * (exponent * self.pow(exponent - 1)) (torch/csrc/autograd/FunctionsManual.cpp): self.pow(1) and "
                         "2 * self.pow(1) live beside the mean's gradient until the product is done; MemTracker over LlamaForCausalLM "
                         "(tests/ground_truth/test_torch_memory_hf.py) sees pow.Tensor_Scalar, mul.Scalar, mul.Tensor, then the "
                         "fp32 input's two gradients added into the residual stream's with add.Tensor (out of place)"),
    "attention": (f"{TRANSFORMERS} modeling_llama.py:254-280 LlamaAttention.forward: q_proj, k_proj, v_proj each cast the fp32 "
                  "norm output to bf16 under autocast and save their own copy; apply_rotary_pos_emb (q * cos + rotate_half(q) * sin, "
                  "cos in fp32) gives fp32 q and k, which SDPA casts back to bf16 and saves; o_proj saves SDPA's output"),
    "sdpa": (f"{TRANSFORMERS} src/transformers/integrations/sdpa_attention.py:97-168: enable_gqa=True and is_causal when there is no "
             "mask, so SDPA keeps q, k, v, its output and the fp32 logsumexp (b x heads x s); the output is transposed in place "
             "(transpose(1, 2).contiguous() copies nothing for the fused kernels' BSHD layout)"),
    "mlp": (f"{TRANSFORMERS} modeling_llama.py:174-176 LlamaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)): gate, up, "
            "silu and product outputs all saved (silu saves its input, the product both factors, down_proj its input)"),
    "residual": (f"{TRANSFORMERS} modeling_llama.py:305-324 LlamaDecoderLayer.forward: residual + hidden_states promotes the bf16 "
                 "branch output to the fp32 residual stream (the embedding output is fp32); the next RMSNorm's pow saves it"),
    "loss": (f"{TRANSFORMERS} src/transformers/loss/loss_utils.py:49-71 ForCausalLMLoss: logits = logits.float(), then "
             "fixed_cross_entropy (line 40): nn.functional.cross_entropy = log_softmax (saves its fp32 output) + nll_loss"),
    "loss_backward": ("PyTorch tools/autograd/derivatives.yaml: nll_loss_backward allocates a zeroed gradient the logits' size, "
                      "_log_softmax_backward_data another, while the saved log-softmax is still held: 3 fp32 copies of b x s x V"),
    "autocast_cache": ("PyTorch aten/src/ATen/autocast_mode.cpp cached_cast: an fp32 leaf that requires grad is cast once per autocast "
                       "region and kept in the cache until the outermost autocast exits (clear_cache); the linears also save it"),
    "checkpoint": (f"{TRANSFORMERS} src/transformers/modeling_layers.py GradientCheckpointingLayer and modeling_utils.py "
                   "gradient_checkpointing_enable (use_reentrant=False): each decoder layer checkpointed; PyTorch "
                   "torch/utils/checkpoint.py keeps the layer's inputs and recomputes its saved tensors when backward first needs one"),
    "adamw": ("PyTorch torch/optim/adam.py _fused_adam (AdamW(fused=True), the Trainer's adamw_torch_fused): torch._fused_adamw_ "
              "updates weights, exp_avg and exp_avg_sq in place; the states are created at the first step and kept"),
    "grads": ("PyTorch torch/csrc/autograd/functions/accumulate_grad.h: the first gradient of a parameter is stolen as .grad "
              "(fp32, the parameter's dtype: the bf16 weight gradient goes through ToCopyBackward first); zero_grad(set_to_none=True) frees them"),
    "ddp": ("PyTorch torch/nn/parallel/distributed.py DistributedDataParallel(gradient_as_bucket_view=False, the default): the reducer "
            "keeps flat bucket buffers as large as all the gradients, allocated when the model is wrapped, and copies each .grad into "
            "them for the all-reduce (the docs: with True 'gradients will be views pointing to different offsets of allreduce "
            "communication buckets ... the saved memory size will be equal to the total gradients size'); accelerate's "
            "DistributedDataParallelKwargs keeps that default and the Trainer does not set it"),
    "qk_norm": (f"{TRANSFORMERS} models/qwen3/modeling_qwen3.py Qwen3Attention.forward: q_norm(q_proj(x).view(..., head_dim)), "
                "k_norm likewise, before RoPE; Qwen3RMSNorm is LlamaRMSNorm over head_dim (an fp32 copy of the bf16 projection, "
                "rsqrt per head, weight times the normalised tensor cast back)"),
    "moe": (f"{TRANSFORMERS} models/mixtral/modeling_mixtral.py MixtralTopKRouter (router_logits.float(), softmax, topk, "
            "top-k weights renormalised in place, kept in fp32) and src/transformers/integrations/moe.py grouped_mm_experts_forward "
            "(the default experts_implementation, PreTrainedModel.get_correct_experts_implementation): the (token, expert) pairs "
            "sorted by expert, hidden_states gathered (S = tokens x top_k rows), one grouped matmul for gate and up, "
            "act(gate) * up, one for down, times the routing weights, put back in token order and summed over the top k"),
    "shared_expert": (f"{TRANSFORMERS} models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward: shared_expert(x) (a "
                      "Qwen2MoeMLP of shared_expert_intermediate_size) first, then the router and the experts, then "
                      "sigmoid(shared_expert_gate(x)) * the shared output, added to the experts' output; Qwen2MoeTopKRouter "
                      "divides the top-k weights by their sum only if norm_topk_prob and casts them to the logits' dtype"),
    "grouped_mm": ("PyTorch torch/_meta_registrations.py _meta_grouped_mm_common, mirroring aten/src/ATen/native/cuda/Blas.cpp "
                   "_grouped_mm_cuda: unscaled grouped matmuls take BF16 inputs only; transformers' _grouped_mm casts the input to "
                   "the weights' dtype and is not autocast-enabled (pytorch/pytorch#174763), so the experts need bf16 weights"),
    "cublas": ("PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp: a cuBLAS workspace per (handle, stream) from the caching allocator, "
               "4096 x 8 KiB = 32 MiB by default on Hopper; one handle for the forward's thread, one for autograd's device thread"),
}
MEASURED = ("measured on one H200, ../shared/measurements/h200-2026-11-28 (memory-llama1b-*.json: what is live at the peak by "
            "allocating line)")


@dataclass(frozen=True)
class HfStep:
    """What decides the memory of one step of the hf profile besides the model."""

    micro_batch: int
    seq_len: int
    precision: Precision = Precision.MIXED_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    recompute: Recompute = Recompute.NONE  # full: gradient_checkpointing_enable() (each decoder layer)
    cublas_workspace: float = 2 * 32 * 2**20  # HF_SOURCES["cublas"]; 0 on the CPU (MemTracker)
    # V x h gradient tables embedding_dense_backward holds at once: 1 in CUDA's kernel (aten/src/ATen/native/cuda/
    # Embedding.cu zeroes one table and accumulates into it); 2 in PyTorch's decomposition, which FakeTensorMode runs
    # (torch/_decomp/decompositions.py embedding_dense_backward: new_zeros, then an out-of-place index_put)
    embedding_backward_tables: int = 1
    # DDP across several GPUs (dp > 1): its gradient buckets, one more copy of the gradients for the whole run (HF_SOURCES["ddp"])
    ddp_buckets: bool = False
    # --compile: the whole model with its loss under torch.compile, walked as Inductor's code runs it
    # (parcalc.core.memory_hf_compiled) where that walk has read the step (compiled_walk_gaps), else the eager walk
    compiled: bool = False

    def compiled_walk(self, model: TransformerModel) -> bool:
        """Whether the compiled walk follows this step (--compile and nothing it has not read)."""
        from parcalc.core.memory_hf_compiled import compiled_walk_gaps

        return self.compiled and not compiled_walk_gaps(model, self.precision, self.recompute)


def recompute_reason(step_memory: str, recompute: Recompute) -> str | None:
    """Why a profile's stack cannot recompute this way (None: it can): HF checkpoints whole decoder layers or nothing."""
    if step_memory == "hf-eager" and recompute not in (Recompute.NONE, Recompute.FULL):
        return (f"--framework hf --recompute {recompute.value}: HF checkpoints whole decoder layers "
                "(gradient_checkpointing_enable): --recompute full or none")
    return None


def hf_model_gaps(model: TransformerModel) -> list[str]:
    """What of the model the walk does not follow (transformers' Llama decoder, or Mixtral's: RMSNorm, RoPE, a gated SiLU MLP
    or routed experts of one, no shared experts, no MLA)."""
    moe = model.moe
    return [what for what, ok in (("no RMSNorm", model.norm is Norm.RMSNORM), ("no RoPE", model.position is Position.ROPE),
                                  ("no SwiGLU MLP", model.mlp is Mlp.SWIGLU),
                                  # Qwen2MoeSparseMoeBlock's one shared expert under a sigmoid gate; not Llama 4's or DeepSeek's
                                  ("shared experts without Qwen2-MoE's sigmoid gate",
                                   moe is None or not moe.shared_experts or (moe.shared_experts == 1 and moe.shared_expert_gate)),
                                  ("dense layers between the MoE layers", moe is None or (moe.first_dense_layers == 0 and moe.every == 1)),
                                  ("a router bias", moe is None or not moe.router_bias),
                                  ("expert capacity (token dropping)", moe is None or moe.capacity_factor is None),
                                  ("latent attention (MLA)", model.mla is None), ("no vocabulary", model.vocab > 0),
                                  # transformers builds a 4-D mask for a window (masking_utils.sliding_window_causal_mask), which
                                  # the walk does not hold; Gemma's post-norms and gpt-oss's sinks are not Llama's decoder
                                  ("an attention window", model.window is None), ("post-norms", not model.post_norms),
                                  ("attention sinks", not model.attention_sinks), ("MTP modules", not model.mtp_layers)) if not ok]  # fmt: skip


def check_hf_model(model: TransformerModel) -> None:
    """The walk follows transformers' Llama decoder: RMSNorm, RoPE, a gated SiLU MLP, no MoE, no MLA."""
    missing = hf_model_gaps(model)
    if missing:
        raise InputError(f"--framework hf: the step-memory walk follows transformers' LlamaForCausalLM and its MoE kin (Mixtral, Qwen2-MoE, "
                         "Qwen3-MoE: RMSNorm, RoPE, SwiGLU, routed experts and at most Qwen2-MoE's gated shared expert); "
                         f"{model.name} has {', '.join(missing)}; use another --framework for its textbook sum")  # fmt: skip


def step_shapes(model: TransformerModel, step: HfStep) -> StepShapes:
    w = parameter_bytes(step.precision)
    autocast = step.precision in (Precision.MIXED_BF16, Precision.MIXED_FP16)
    return shapes_of(model, step.micro_batch, step.seq_len, w, 2.0 if autocast else w, autocast)


def shapes_of(model: TransformerModel, micro_batch: int, seq_len: int, w: float, c: float, autocast: bool) -> StepShapes:
    """The walk's shapes of `model` at b x s; w: the weights' and residual stream's bytes, c: what the linears compute in."""
    moe = model.moe
    return StepShapes(float(micro_batch * seq_len), micro_batch, seq_len, model.hidden, model.heads * model.head_dim,
                      model.kv_heads * model.head_dim, model.ffn_hidden, model.vocab, model.heads, w, c, autocast,
                      moe.experts if moe else 0, moe.top_k if moe else 0, moe.expert_ffn_hidden if moe else 0, model.qk_norm,
                      c if moe and moe.routing_weights_cast else 4.0, moe.shared_width if moe and moe.shared_experts else 0,
                      moe.top_k_renormalised if moe else True)  # fmt: skip


def _linear_weights(model: TransformerModel) -> tuple[tuple[str, int, int], ...]:
    """A layer's matrices in the order its constructor makes them (d_in, d_out; an expert stack as one)."""
    h, q, kv, f = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim, model.ffn_hidden
    attention = (("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h),
                 *((("q_norm", model.head_dim, 1), ("k_norm", model.head_dim, 1)) if model.qk_norm else ()))
    if model.moe is not None:  # MixtralSparseMoeBlock: the router, then the experts' gate_up_proj and down_proj
        e, fe = model.moe.experts, model.moe.expert_ffn_hidden
        experts: tuple[tuple[str, int, int], ...] = (("router", h, e), ("gate_up_proj", h, e * 2 * fe), ("down_proj", e * fe, h))
        if model.moe.shared_experts:  # Qwen2MoeSparseMoeBlock: then shared_expert (gate, up, down) and shared_expert_gate
            fs = model.moe.shared_width
            experts += (("shared gate_proj", h, fs), ("shared up_proj", h, fs), ("shared down_proj", fs, h), ("shared_expert_gate", h, 1))
        return (*attention, *experts)
    return (*attention, ("gate_proj", h, f), ("up_proj", h, f), ("down_proj", f, h))


def hf_step_peak(model: TransformerModel, step: HfStep) -> StepPeak:
    """The allocation peak of one steady-state training step (see the module docstring)."""
    check_hf_model(model)
    if step.precision.quantised:
        raise InputError(f"--framework hf --precision {step.precision.value}: transformers' eager code has no "
                         f"{step.precision.value.upper()} recipe; use mixed-bf16, bf16 or fp32")
    if model.moe is not None and step.precision is not Precision.BF16:
        raise InputError(f"--framework hf --precision {step.precision.value}: transformers' grouped_mm experts need bf16 weights "
                         "(torch's grouped matmul takes BF16 inputs only and is not autocast-enabled); use --precision bf16")
    reason = recompute_reason("hf-eager", step.recompute)
    if reason is not None:
        raise InputError(reason)
    if step.optimizer not in (Optimizer.ADAMW, Optimizer.ADAM, Optimizer.SGD, Optimizer.SGD_MOMENTUM):
        raise InputError(f"--framework hf --optimizer {step.optimizer.value}: the walk knows torch.optim's AdamW, Adam and SGD")
    walk = _hf_walk(model, step, events=True)
    return replace(peak_of(walk), reserved=_replayed(model, step, walk).reserved, reserved_by="replayed")


def _hf_walk(model: TransformerModel, step: HfStep, events: bool = False) -> Walk:
    x = step_shapes(model, step)
    walk = Walk()
    walk.events = [] if events else None
    params = model.total_params
    walk.phase = "before the step"
    walk.alloc("weights", params * x.w, "weights", "weights (the model's dtype)")
    if step.ddp_buckets:
        walk.alloc("ddp_buckets", params * x.w, "gradients", "DDP's gradient buckets (dp > 1, gradient_as_bucket_view=False)")
    for i in range(step.optimizer.states):
        walk.alloc(f"state{i}", params * x.w, "optimizer states", f"optimizer state {i + 1} (torch.optim: the parameter's dtype)")
    walk.alloc("cublas", step.cublas_workspace, "workspace", "cuBLAS workspaces")
    walk.alloc("ids", x.T * 8, "activations", "input ids and labels (int64)")
    if step.optimizer.states:  # one fp32 step counter per parameter tensor (torch.optim keeps state['step'] as a tensor)
        walk.alloc("step_counts", 4 * ((len(_linear_weights(model)) + 2) * model.layers + 2 + (0 if model.tied_embeddings else 1)), "optimizer states",
                   "AdamW step counters")
    if step.compiled_walk(model):
        from parcalc.core.memory_hf_compiled import walk_compiled_step

        walk_compiled_step(walk, model, x)
        walk.phase = "optimizer step"
        return walk
    checkpointed = step.recompute is Recompute.FULL
    hooks = StepHooks()
    walk_forward(walk, model, x, checkpointed, hooks)
    walk_backward(walk, model, x, checkpointed, step.embedding_backward_tables, hooks)
    walk.phase = "optimizer step"  # fused AdamW: in place, nothing allocated (HF_SOURCES['adamw'])
    return walk


# ---------------------------------------------------------------------------------------------
# Forward


def _head_shape(x: StepShapes, width: int) -> NormShape:
    """Qwen3's q_norm / k_norm: an RMSNorm over each head's head_dim values, on the projection's output (x.c)."""
    head_dim = x.q // x.heads
    return NormShape(width, x.T * width / head_dim, head_dim, x.c)


def _head_norm(walk: Walk, x: StepShapes, key: str, proj: str, width: int, saved: bool) -> str:
    """q_norm or k_norm on a projection's output; the projection's output goes when the norm returns unless the norm
    saved it (fp32 throughout: pow saves its input)."""
    out = norm_forward(walk, x, key, proj, saved, _head_shape(x, width))
    if x.c != 4:
        walk.free(proj)
    else:
        walk.rename(proj, f"{key}.in", "q/k norm input (saved by pow)", "activations" if saved else "temporaries")
    return out


def _rope_input_bytes(x: StepShapes) -> float:
    """Bytes of q and k as RoPE gets them: the projections' dtype, or the q/k norm's output (weight times input)."""
    return max(x.w, x.c) if x.qk_norm else x.c


def _layer_forward(walk: Walk, x: StepShapes, i: int, inp: str, saved: bool, recomputing: bool = False) -> str:
    """One LlamaDecoderLayer; returns its output's key. `saved`: autograd keeps what it saves (False
    under checkpointing: everything but the autocast weight cache goes when the layer returns)."""
    T, h, q, kv, f = x.T, x.h, x.q, x.kv, x.f
    k = f"L{i}"
    kind = "activations" if saved else "temporaries"
    y = norm_forward(walk, x, f"{k}.n1", inp, saved)
    qo = linear(walk, x, f"{k}.q", y, x.w, h, q, saved, "q_proj")
    if x.qk_norm:  # Qwen3Attention: q_norm(q_proj(x).view(..., head_dim)), then k likewise (HF_SOURCES['qk_norm'])
        qo = _head_norm(walk, x, f"{k}.qn", qo, q, saved)
    ko = linear(walk, x, f"{k}.k", y, x.w, h, kv, saved, "k_proj")
    if x.qk_norm:
        ko = _head_norm(walk, x, f"{k}.kn", ko, kv, saved)
    vo = linear(walk, x, f"{k}.v", y, x.w, h, kv, saved, "v_proj")
    walk.relabel(vo, "v_proj output (SDPA's v)", kind)  # v goes to SDPA as it is
    rope = max(x.c, x.w)  # bf16 q times fp32 cos promotes to fp32 (HF_SOURCES['attention'])
    qb = _rope_input_bytes(x)
    for name, width, proj in (("q", q, qo), ("k", kv, ko)):
        walk.alloc(f"{k}.{name}cos", T * width * rope, "temporaries", "RoPE q*cos")
        walk.alloc(f"{k}.{name}neg", T * width / 2 * qb, "temporaries", "RoPE -x2")
        walk.alloc(f"{k}.{name}rot", T * width * qb, "temporaries", "RoPE rotate_half")
        walk.free(f"{k}.{name}neg")
        walk.alloc(f"{k}.{name}sin", T * width * rope, "temporaries", "RoPE rotate_half*sin")
        walk.free(f"{k}.{name}rot")
        walk.alloc(f"{k}.{name}emb", T * width * rope, "temporaries", f"RoPE {name} (fp32)")
        walk.free(f"{k}.{name}cos", f"{k}.{name}sin", proj)
    for name, width in (("q", q), ("k", kv)):  # SDPA's inputs: autocast casts the fp32 q, k back to bf16
        if rope != x.c:
            walk.alloc(f"{k}.{name}sd", T * width * x.c, kind, f"SDPA {name} (bf16 cast of RoPE's output)")
        else:  # SDPA keeps RoPE's output itself
            walk.rename(f"{k}.{name}emb", f"{k}.{name}sd", f"SDPA {name} (RoPE's output)", kind)
    walk.alloc(f"{k}.attn", T * q * x.c, kind, "SDPA output (o_proj input)")
    walk.alloc(f"{k}.lse", x.b * x.heads * x.s * 4, kind, "SDPA logsumexp (fp32)")
    walk.free(f"{k}.qemb", f"{k}.kemb")
    oo = linear(walk, x, f"{k}.o", f"{k}.attn", x.c, q, h, saved, "o_proj")
    keep_if_saved(walk, x, y, kind, "RMSNorm output (the q, k, v projections' input)")
    walk.alloc(f"{k}.x1", T * h * x.w, kind, "residual stream after attention")
    walk.free(oo)
    y2 = norm_forward(walk, x, f"{k}.n2", f"{k}.x1", saved)
    if x.experts:
        shared = _mlp_forward(walk, x, f"{k}.se", y2, x.fs, saved, "shared expert ") if x.fs else ""
        do = experts_forward(walk, x, k, y2, kind, recomputing and not shared)
        if shared:
            do = gated_shared_forward(walk, x, k, y2, shared, do, kind, recomputing)
        if recomputing:
            return ""
        keep_if_saved(walk, x, y2, kind, "RMSNorm output (the router's input)")
    else:
        do = _mlp_forward(walk, x, k, y2, f, saved, "", recomputing)
        if recomputing:
            return ""
        keep_if_saved(walk, x, y2, kind, "RMSNorm output (gate and up projections' input)")
    walk.alloc(f"{k}.x2", T * h * x.w, "activations", "decoder layer output (residual stream)")
    walk.free(do)
    if not saved:  # checkpointed: only the layer's input stays (and autocast's cached weight copies)
        walk.free(*[key for key in list(walk.live) if key.startswith(f"{k}.") and key != f"{k}.x2" and not key.endswith(".wcopy")])
    elif x.w != 4:  # a bf16 residual stream: each RMSNorm saved its fp32 copy, so autograd keeps neither the layer's input
        walk.free(f"{k}.x1", *((inp,) if inp != "emb" else ()))  # nor x1 (LlamaModel's inputs_embeds holds the embedding)
    return f"{k}.x2"


def _mlp_forward(walk: Walk, x: StepShapes, k: str, inp: str, width: int, saved: bool, what: str, recomputing: bool = False) -> str:
    """LlamaMLP (or Qwen2-MoE's shared expert, `what` naming it): down(act(gate(x)) * up(x)); returns down's output key."""
    T, h, c = x.T, x.h, x.c
    kind = "activations" if saved else "temporaries"
    go = linear(walk, x, f"{k}.gate", inp, x.w, h, width, saved, f"{what}gate_proj")
    walk.relabel(go, f"{what}MLP gate_proj output", kind)
    walk.alloc(f"{k}.act", T * width * c, kind, f"{what}MLP act_fn(gate) output")
    uo = linear(walk, x, f"{k}.up", inp, x.w, h, width, saved, f"{what}up_proj")
    walk.relabel(uo, f"{what}MLP up_proj output", kind)
    walk.alloc(f"{k}.prod", T * width * c, kind, f"{what}MLP act * up (down_proj input)")
    if recomputing:  # non-reentrant checkpoint's early stop: nothing after the last saved tensor runs again
        if x.autocast:
            walk.alloc(f"{k}.down.wcopy", width * h * c, "autocast weight copies", "autocast bf16 weight copies")
        return ""
    return linear(walk, x, f"{k}.down", f"{k}.prod", x.c, width, h, saved, f"{what}down_proj")


def walk_forward(walk: Walk, model: TransformerModel, x: StepShapes, checkpointed: bool, hooks: StepHooks) -> None:
    """The forward and the loss, layer by layer (HF_SOURCES), with the framework's hooks around each layer."""
    hooks.before_forward(walk)
    walk.phase = "forward: embedding"
    walk.alloc("emb", x.T * x.h * x.w, "activations", "embedding output (residual stream)")
    walk.alloc("cos", x.s * model.head_dim * x.w, "activations", "RoPE cos, sin")
    walk.alloc("sin", x.s * model.head_dim * x.w, "activations", "RoPE cos, sin")
    current = "emb"
    for i in range(model.layers):
        walk.phase = f"forward: layer {i + 1} of {model.layers}"
        hooks.before_layer(walk, i)
        current = _layer_forward(walk, x, i, current, saved=not checkpointed)
        hooks.after_layer(walk, i)
    walk.phase = "forward: final norm and LM head"
    y = norm_forward(walk, x, "final", current, saved=True)
    if x.w != 4 and not checkpointed:  # the norm saved its fp32 copy; hidden_states = self.norm(hidden_states) drops the input
        walk.free(current)
    logits = linear(walk, x, "head", y, x.w, x.h, x.V, True, "lm_head")
    walk.free(y)
    walk.phase = "forward: loss (logits.float(), cross_entropy)"
    walk.relabel(logits, "logits (compute dtype)", "logits and loss")
    if x.c != 4:
        walk.alloc("logits32", x.T * x.V * 4, "logits and loss", "logits.float()")
    cross_entropy_forward(walk, x)
    walk.free("logits32", logits)  # ForCausalLMLoss returns; the output object with the logits is dropped before backward
    if checkpointed:  # autocast exits: the cached weight copies go unless a graph node saved them (the LM head's)
        walk.free(*[key for key in list(walk.live) if key.startswith("L") and key.endswith(".wcopy")])
    hooks.after_forward(walk)


# ---------------------------------------------------------------------------------------------
# Backward


def _layer_backward(walk: Walk, x: StepShapes, i: int, g_out: str, into: str) -> None:
    T, h, q, kv, f, c = x.T, x.h, x.q, x.kv, x.f, x.c
    k = f"L{i}"
    if x.experts:
        g_shared = gated_shared_backward(walk, x, k, g_out) if x.fs else ""
        experts_backward(walk, x, k, g_out, keep_input=bool(g_shared))
        if g_shared:  # the shared expert's nodes are the block's oldest: they run last
            _mlp_backward(walk, x, f"{k}.se", g_shared, x.fs, f"{k}.n2.out", f"{k}.g_y2c", f"{k}.g_y2")
    else:
        # x2 = x1 + down: the bf16 branch gets a cast of the gradient, x1 the gradient itself
        walk.alloc(f"{k}.g_down", T * h * c, "temporaries", "residual gradient cast to bf16")
        walk.rename(g_out, f"{k}.g_x1")
        walk.free(f"{k}.x2")
        _mlp_backward(walk, x, k, f"{k}.g_down", f, f"{k}.n2.out", f"{k}.g_y2c", f"{k}.g_y2")
    norm_backward(walk, x, f"{k}.n2", f"{k}.g_y2", f"{k}.x1", f"{k}.g_x1")
    walk.free(f"{k}.x1")
    # x1 = x + attention
    walk.alloc(f"{k}.g_o", T * h * c, "temporaries", "residual gradient cast to bf16")
    linear_backward(walk, x, f"{k}.o", f"{k}.g_o", q, h, "", f"{k}.g_attn")
    walk.alloc(f"{k}.g_qsd", T * q * c, "temporaries", "SDPA backward dq")
    walk.alloc(f"{k}.g_ksd", T * kv * c, "temporaries", "SDPA backward dk")
    walk.alloc(f"{k}.g_v", T * kv * c, "temporaries", "SDPA backward dv")
    walk.free(f"{k}.g_attn", f"{k}.attn", f"{k}.lse", f"{k}.qsd", f"{k}.ksd")
    walk.free(f"{k}.v.out")
    linear_backward(walk, x, f"{k}.v", f"{k}.g_v", h, kv, "", f"{k}.g_yc")
    cast_back(walk, x, f"{k}.g_yc", f"{k}.g_y", h)
    rope, qb = max(x.c, x.w), _rope_input_bytes(x)
    for name, width in (("k", kv), ("q", q)):
        g = f"{k}.g_{name}sd"
        if rope != c:  # the cast's backward: the gradient in fp32
            walk.alloc(f"{k}.g_{name}emb", T * width * rope, "temporaries", "RoPE backward")
            walk.free(g)
            g = f"{k}.g_{name}emb"
        walk.transient(f"{k}.g_{name}cos32", T * width * rope, "temporaries", "RoPE backward")
        walk.alloc(f"{k}.g_{name}proj", T * width * qb, "temporaries", "RoPE backward")
        walk.transient(f"{k}.g_{name}sin32", T * width * rope, "temporaries", "RoPE backward")
        walk.alloc(f"{k}.g_{name}rot", T * width * qb, "temporaries", "RoPE backward (rotate_half)")
        walk.free(g)
        walk.transient(f"{k}.g_{name}slice", T * width * qb, "temporaries", "RoPE backward (slices)")
        walk.free(f"{k}.g_{name}rot")
        if x.qk_norm:
            walk.rename(f"{k}.g_{name}proj", f"{k}.g_{name}n")
            norm_backward(walk, x, f"{k}.{name}n", f"{k}.g_{name}n", "", f"{k}.g_{name}proj", _head_shape(x, width))
            walk.free(f"{k}.{name}n.in")
        linear_backward(walk, x, f"{k}.{name}", f"{k}.g_{name}proj", h, width, f"{k}.n1.out" if name == "q" else "", f"{k}.g_yc")
        cast_back(walk, x, f"{k}.g_yc", f"{k}.g_y", h)
    norm_backward(walk, x, f"{k}.n1", f"{k}.g_y", "", f"{k}.g_x1")
    walk.rename(f"{k}.g_x1", into)


def _mlp_backward(walk: Walk, x: StepShapes, k: str, g_down: str, width: int, saved_input: str, g_in_c: str, g_in: str) -> None:
    """LlamaMLP's backward from down's output gradient `g_down`: down, the product, up, the SiLU and gate; the input's
    gradient added into g_in (via g_in_c, the compute dtype); frees saved_input with the gate's (the last reader)."""
    T, h, c = x.T, x.h, x.c
    linear_backward(walk, x, f"{k}.down", g_down, width, h, f"{k}.prod", f"{k}.g_prod")
    walk.alloc(f"{k}.g_act", T * width * c, "temporaries", "MLP backward")
    walk.alloc(f"{k}.g_up", T * width * c, "temporaries", "MLP backward")
    walk.free(f"{k}.g_prod", f"{k}.act", f"{k}.up.out")
    linear_backward(walk, x, f"{k}.up", f"{k}.g_up", h, width, "", g_in_c)
    cast_back(walk, x, g_in_c, g_in, h)
    walk.alloc(f"{k}.g_gate", T * width * c, "temporaries", "MLP backward (silu)")
    walk.free(f"{k}.g_act", f"{k}.gate.out")
    linear_backward(walk, x, f"{k}.gate", f"{k}.g_gate", h, width, saved_input, g_in_c)
    cast_back(walk, x, g_in_c, g_in, h)


def walk_backward(walk: Walk, model: TransformerModel, x: StepShapes, checkpointed: bool, embedding_tables: int, hooks: StepHooks) -> None:
    """The backward from the loss to the embedding; embedding_tables: HfStep.embedding_backward_tables."""
    T, V, h = x.T, x.V, x.h
    walk.phase = "backward: loss (nll_loss and log_softmax gradients)"
    hooks.before_backward(walk)
    g_logits = cross_entropy_backward(walk, x)
    walk.phase = "backward: LM head"
    if x.c != 4:
        walk.alloc("g_logits", T * V * x.c, "logits and loss", "logits gradient (compute dtype)")
        walk.free(g_logits)
        g_logits = "g_logits"
    linear_backward(walk, x, "head", g_logits, h, V, "head.in", "final.g_yc")
    cast_back(walk, x, "final.g_yc", "final.g_y", h)
    last = f"L{model.layers - 1}.x2"
    norm_backward(walk, x, "final", "final.g_y", last, "g_stream")
    for i in reversed(range(model.layers)):
        walk.phase = f"backward: layer {i + 1} of {model.layers}" + (" (recomputed)" if checkpointed else "")
        inp = "emb" if i == 0 else f"L{i - 1}.x2"
        hooks.before_layer_backward(walk, i)
        if checkpointed:  # the layer's forward again, under autocast (the recomputation stops after its last saved tensor)
            walk.rename(f"L{i}.x2", f"L{i}.x2_keep")
            _layer_forward(walk, x, i, inp, saved=True, recomputing=True)
            walk.rename(f"L{i}.x2_keep", f"L{i}.x2")
        _layer_backward(walk, x, i, "g_stream", "g_stream_next")
        walk.rename("g_stream_next", "g_stream")
        hooks.after_layer_backward(walk, i)
    walk.phase = "backward: embedding"
    walk.free("emb")
    # embedding_dense_backward: a full-size gradient table, added into the tied LM head's gradient
    for table in range(embedding_tables):
        walk.alloc(f"g_embedding{table}", V * h * x.w, "gradients", "embedding gradient (before it is added)")
    walk.free("g_stream", *(f"g_embedding{t}" for t in range(embedding_tables)), "cos", "sin")
    if not model.tied_embeddings:
        walk.alloc("embedding.grad", V * h * x.w, "gradients", "weight gradients")
    hooks.after_backward(walk)


# ---------------------------------------------------------------------------------------------
# In parcalc.core.memory's breakdown


@lru_cache(maxsize=4096)
def hf_reserved_total(model: TransformerModel, micro_batch: int, seq_len: int, precision: Precision, optimizer: Optimizer,
                      recompute: Recompute, ddp_buckets: bool = False, compiled: bool = False) -> float:  # fmt: skip
    """The step's peak as the allocator reserves it (no reserve added): fit's search, one row at a time."""
    return hf_step_peak(model, HfStep(micro_batch, seq_len, precision, optimizer, recompute, ddp_buckets=ddp_buckets, compiled=compiled)).reserved


# ---------------------------------------------------------------------------------------------
# What the allocator reserves: the caching allocator's rules replayed over the steps (fragmentation)

# Tensors the walk counts as one (the weights, AdamW's states, the cuBLAS workspaces) that the replay allocates one
# by one, as the program does; and the step's inputs, allocated once
_SET_UP = ("weights", "ddp_buckets", "state0", "state1", "step_counts", "cublas", "ids")
# The first step (no optimizer states until its end) and two steady ones: what the allocator holds no longer grows
# after the second (the three H200 steps: the same reserved bytes after 2, 3 and 8 steps)
REPLAYED_STEPS = 3


def _parameters_in_order(model: TransformerModel) -> list[int]:
    """Elements of each parameter as LlamaForCausalLM's constructor allocates them (modeling_llama.py: embed_tokens,
    each layer's q, k, v, o, gate, up, down projections and two norms, the final norm, then lm_head)."""
    h = model.hidden
    layer = [d_in * d_out for _, d_in, d_out in _linear_weights(model)] + [h, h]
    return [model.vocab * h, *layer * model.layers, h, model.vocab * h]


def hf_reserved_replayed(model: TransformerModel, step: HfStep, steps: int = REPLAYED_STEPS) -> CachingAllocator:
    """The caching allocator (parcalc.core.allocator.CachingAllocator) after `steps` training steps of the hf walk as
    a script runs them (../shared/measurements/h200-2026-11-28/h200_truth.py): the model built on the GPU (each
    parameter a tensor; a tied LM head's own weight allocated by nn.Linear, then dropped by tie_weights), the input
    ids, then each step's allocations and frees in the walk's order; the first optimizer step creates each
    parameter's step counter and states (torch/optim/adam.py _init_group), zero_grad frees the gradients."""
    hf_step_peak(model, step)  # what the walk accepts
    return _replayed(model, step, _hf_walk(model, step, events=True), steps)


def _replayed(model: TransformerModel, step: HfStep, walk: Walk, steps: int = REPLAYED_STEPS) -> CachingAllocator:
    assert walk.events is not None
    allocator = CachingAllocator()
    weight_bytes = parameter_bytes(step.precision)
    sizes = _parameters_in_order(model)
    for k, n in enumerate(sizes):
        handle = allocator.malloc(n * weight_bytes)
        if k == len(sizes) - 1 and model.tied_embeddings:
            allocator.free(handle)  # tie_weights: lm_head.weight = embed_tokens.weight
    if step.ddp_buckets:
        allocator.malloc(model.total_params * weight_bytes)
    allocator.malloc(step.micro_batch * step.seq_len * 8)
    handles: dict[str, float] = {}
    for i in range(steps):
        for key, size in walk.events:
            if key in _SET_UP:
                if key == "cublas" and i == 0:
                    for _ in range(2):  # one workspace per handle (HF_SOURCES['cublas']); the walk has none on the CPU
                        allocator.malloc(step.cublas_workspace / 2)
                continue
            if size > 0:
                handles[key] = allocator.malloc(size)
            elif size < 0:  # Walk.rename: old\0new
                old, new = key.split("\0")
                handles[new] = handles.pop(old)
            elif key in handles:
                allocator.free(handles.pop(key))
        if i == 0:
            for n in sizes[: len(sizes) - (1 if model.tied_embeddings else 0)]:
                if step.optimizer.states:
                    allocator.malloc(4)  # state['step'], on the GPU for fused AdamW
                for _ in range(step.optimizer.states):
                    allocator.malloc(n * weight_bytes)
        for key in sorted(handles, key=_parameter_order):  # zero_grad(set_to_none=True), in parameter order
            allocator.free(handles.pop(key))
    return allocator


def _parameter_order(key: str) -> tuple[int, str]:
    if key.startswith("L") and "." in key:
        return (int(key[1:key.index(".")]) + 1, key)
    return (0 if key.startswith(("head", "embedding")) else 10**9, key)
