"""Activation memory: the tensors one transformer layer keeps for its backward pass.

The count follows Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (MLSys 2023, arXiv:2205.05198), sec. 4: with 16-bit activations and 1-byte
dropout masks a standard GPT layer keeps s b h (34 + 5 a s / h) bytes (eq. 1), which is
- attention 11 sbh + 5 a s^2 b: QKV input 2sbh, Q and K 4sbh, softmax output 2as^2b, its
  dropout mask as^2b, the dropout output 2as^2b and V 2sbh, the output projection's input 2sbh
  and the attention dropout's mask sbh;
- MLP 19 sbh: up-projection input 2sbh, GELU input 8sbh, down-projection input 8sbh, mask sbh;
- the two LayerNorms' inputs 4sbh.
Tensor parallelism (t) splits everything but the norms, the projections' inputs and the dropout
masks: sbh (10 + 24/t + 5as/(ht)) (eq. 2); sequence parallelism splits those too: sbh/t (34 +
5as/h) (eq. 4); selective recomputation drops the 5as^2b of the attention core (sbh (10 + 24/t),
and 34 sbh/t with SP, eq. 6); full recomputation keeps the layer's input, 2sbh (sec. 5).

parcalc lists the saved tensors one by one (`layer_saved_tensors`), so that the same count covers
grouped-query attention (K, V of kv_heads x head_dim), MLP widths other than 4h, gated MLPs,
ReLU, RMSNorm, no norms, no dropout, fp32 activations and FlashAttention, and reduces to
Korthikanti's closed forms for their layer (`korthikanti_per_layer`; the tests check both
against each other and against the tensors PyTorch's autograd saves).

Conventions stated where sources differ:
- ReLU keeps its output, which is also the down projection's input (PyTorch's relu backward uses
  its result: tools/autograd/derivatives.yaml, `threshold_backward(grad, result, 0)`): one f-wide
  tensor where GELU keeps two.
- Gated MLPs (SwiGLU, GeGLU) keep the gate and up outputs (the fused activation's input) and the
  product: three f-wide tensors, as Megatron-LM's fused bias_swiglu keeps (megatron/core/fusions/
  fused_bias_swiglu.py saves its input); unfused PyTorch also keeps silu(gate): four.
- Norm statistics (LayerNorm's mean and rstd, RMSNorm's rstd: b x s values each) are left out,
  as Korthikanti et al. leave them out; they are under 0.1 % of a layer for h in the thousands.
- With full recomputation and sequence parallelism the kept input is the layer's sequence shard,
  2sbh/t: Megatron-LM checkpoints the hidden states it holds, which SP has already split
  (megatron/core/transformer/transformer_block.py, _checkpointed_forward). Korthikanti et al.'s
  Table 2 gives 2sbh, the input without SP.
- FlashAttention keeps no s^2 tensor: Q, K, V, its output and the fp32 log-sum-exp of each row
  (Dao 2023, "FlashAttention-2", Algorithm 1 returns O and L; the dropout mask is regenerated
  from the RNG state).
- Selective recomputation with FlashAttention is what Megatron-LM runs with
  --recompute-granularity selective and a fused attention kernel: the core attention is
  checkpointed (megatron/core/transformer/attention.py, _checkpointed_attention_forward), so Q, K
  and V stay as the checkpoint's inputs, the output stays as the projection's input, and only the
  kernel's log-sum-exp is dropped; the kernel's forward runs again before its backward (counted by
  parcalc.core.flops and the step time as the recomputed attention core).
"""

from __future__ import annotations

from parcalc.core.choices import Recompute  # re-exported
from parcalc.core.counts import MAX_COUNT, check_count, check_sequence  # noqa: F401 - re-exported where callers found them
from parcalc.core.dtypes import NVFP4_COPY_BYTES
from parcalc.core.model import Mlp, Norm, TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen

KORTHIKANTI = "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models' (arXiv:2205.05198)"
KORTHIKANTI_EQ1 = "Korthikanti et al. 2022 sec. 4.1"
KORTHIKANTI_TABLE2 = f"{KORTHIKANTI}, sec. 4, Table 2"
KORTHIKANTI_OUTPUT = f"{KORTHIKANTI}, sec. 4.3 (input embeddings, last LayerNorm and output layer)"
MEGATRON_MEMORY = "megatron/training/theoretical_memory_usage.py (NVIDIA/Megatron-LM), compute_activation_memory"
FLASH = "Dao 2023, FlashAttention-2, Algorithm 1 (keeps Q, K, V, O and the log-sum-exp L)"
# What the frameworks run by default, why FlashAttention/SDPA is parcalc's default (--no-flash-attention opts out)
ATTENTION_DEFAULTS = (
    "transformers: attn_implementation 'sdpa' whenever the model can dispatch to it (src/transformers/modeling_utils.py, "
    "PreTrainedModel._check_and_adjust_attn_implementation); torchtitan: F.scaled_dot_product_attention "
    "(torchtitan/models/attention.py); Megatron-LM: TEDotProductAttention (megatron/core/extensions/transformer_engine.py), "
    "whose Transformer Engine backend is FlashAttention or cuDNN's fused attention"
)


def attention_assumption(flash_attention: bool, timed: bool = False) -> str:
    """The attention kernel the answer assumes, stated with the flag that changes it: FlashAttention/SDPA
    by default (no s x s scores kept), the materialised scores of Korthikanti et al. 2022 (5as^2b bytes
    per layer with dropout) with --no-flash-attention, as a textbook question counts them. `timed`: the
    answer has a step time, so the kernel's time is stated too."""
    if flash_attention:
        return ("attention: FlashAttention/SDPA, scores not materialised (Q, K, V, the output and an fp32 log-sum-exp per row "
                "kept" + ("; timed as one fused kernel" if timed else "") + f"), as every framework runs it ({ATTENTION_DEFAULTS}); "
                "--no-flash-attention for the materialised s x s scores a textbook counts (Korthikanti et al. 2022's 5as^2b)")
    return ("attention: the s x s scores materialised (--no-flash-attention): the softmax output kept, with dropout its mask and "
            "output too (Korthikanti et al. 2022's 5as^2b)" + ("; Q·K^T, softmax and ·V timed as separate kernels" if timed else "")
            + "; FlashAttention/SDPA, what frameworks run, is the default")


MEGATRON_SELECTIVE = (
    "Megatron-LM megatron/core/transformer/attention.py, Attention._checkpointed_attention_forward: with --recompute-granularity "
    "selective the core attention runs under tensor_parallel.checkpoint, which keeps its inputs Q, K, V and runs it again "
    "before its backward"
)

# FP8 training (Transformer Engine): a linear saves its casted FP8 input for the weight gradient
# (`input_quantizer.set_usage(rowwise=True, columnwise=backward_needs_input)`, then the quantised
# tensor is saved), LayerNormLinear / LayerNormMLP save the norm's bf16 input and its FP8 output
# (ln_out), LayerNormMLP saves fc1's bf16 output (the activation's input) and the FP8 activation
# output that fc2 multiplies; attention's Q, K, V, softmax, norms and residuals stay bf16
# (fp8_dpa off, the default of recipe.DelayedScaling).
TE_FP8 = ("FP8 (1 byte): Transformer Engine saves the casted FP8 input of each linear for its weight gradient "
          "(NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py, _Linear.forward; layernorm_linear.py saves ln_out)")  # fmt: skip
TE_NVFP4 = ("NVFP4 (0.5625 byte): Transformer Engine saves the column-wise NVFP4 copy of each linear's input for its weight "
            "gradient, FP4 data and an E4M3 scale per 16 (NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py: "
            "inputmat.update_usage(rowwise_usage=False, columnwise_usage=True))")  # fmt: skip


def quantised_input_note(gemm_bytes: float, activation_bytes: float) -> str:
    """The source appended to a linear's saved input where a recipe quantises it: FP8 (1 byte) or NVFP4's column-wise copy
    (parcalc.core.dtypes.NVFP4_COPY_BYTES); '' where it is kept in the activations' dtype."""
    if gemm_bytes == activation_bytes:
        return ""
    return f"; {TE_NVFP4}" if gemm_bytes == NVFP4_COPY_BYTES else f"; {TE_FP8}"


TE_FP8_MLP = ("Transformer Engine transformer_engine/pytorch/module/layernorm_mlp.py, _LayerNormMLP.forward: fc1_out (bf16, the "
              "activation's input) and act_out (FP8, fc2's input) are both saved")  # fmt: skip

TOKEN_ID_BYTES = 8.0  # int64 token ids, which the embedding's backward keeps (torch.nn.Embedding)
LOGIT_BYTES = 4.0  # the cross-entropy works on fp32 logits (Korthikanti et al. sec. 4.3)
GATED_ATTENTION = ("transformers models/qwen3_next/modeling_qwen3_next.py (5.24), Qwen3NextAttention.forward: "
                   "attn_output = attn_output * torch.sigmoid(gate), then o_proj")  # fmt: skip
LSE_BYTES = 4.0  # FlashAttention keeps its per-row log-sum-exp in fp32


@frozen
class ActivationConfig:
    """What decides the activations of one layer for one micro-batch.

    activation_bytes: bytes per stored activation element (2 for 16-bit training, 4 for fp32);
    mask_bytes: bytes per dropout-mask element (1: the GPU kernels keep a bool per element).
    """

    micro_batch: int
    seq_len: int
    tp: int = 1
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    flash_attention: bool = False
    dropout: bool = True
    activation_bytes: float = 2.0
    mask_bytes: float = 1.0
    gemm_input_bytes: float | None = None  # saved inputs of the linears (FP8: 1, TE_FP8); None: activation_bytes

    @property
    def linear_input_bytes(self) -> float:
        return self.activation_bytes if self.gemm_input_bytes is None else self.gemm_input_bytes
    cp: int = 1  # context parallelism: this GPU holds s/cp tokens of each sequence (parcalc.core.context)
    # Megatron-LM's --recompute-modules mla_up_proj: MLA's up-projections and RoPE run again in backward,
    # so Q, K, V and the latent norms' outputs are not kept (mla_tensors; multi-head latent attention only)
    mla_up_proj: bool = False
    # Megatron-LM's --recompute-modules with --recompute selective (parcalc.core.recompute.RECOMPUTE_MODULES): the
    # modules whose saved activations are dropped and whose forward runs again in backward; None: ['core_attn']
    recompute_modules: tuple[str, ...] | None = None

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules checkpointed (parcalc.core.recompute.recomputed_modules): what selective
        recomputation and --recompute-mla-up-proj drop, one list."""
        from parcalc.core.recompute import recomputed_modules

        return recomputed_modules(self.recompute, self.recompute_modules, self.mla_up_proj)

    def __post_init__(self) -> None:
        for flag, value in (("--micro-batch", self.micro_batch), ("--seq-len", self.seq_len), ("--tp", self.tp), ("--cp", self.cp)):
            check_count(flag, value)
        if self.seq_len % self.cp:
            raise InputError(f"--cp: {self.cp} does not divide the sequence length {self.seq_len}; each context-parallel rank holds s/cp tokens")
        if self.sequence_parallel and self.tp == 1:
            raise InputError("--sequence-parallel: splits the sequence over the tensor-parallel group; with --tp 1 there is no group (use --tp > 1)")
        if not (self.activation_bytes > 0 and self.mask_bytes > 0):
            raise InputError("activation and mask bytes per element must be greater than zero")


@frozen
class SavedTensor:
    """One tensor a layer keeps for backward, for one micro-batch.

    per: "token" (width elements per token, s b width in all), "score" (width heads, each an
    s x s matrix per sequence: b width s^2 elements) or "row" (one value per head and token:
    b width s elements, FlashAttention's log-sum-exp). split: "tp" when tensor parallelism splits
    it, "sp" when only sequence parallelism does (kept whole on every TP rank otherwise).
    attention_core: one of the tensors selective recomputation drops.
    """

    key: str
    name: str
    per: str
    width: float  # a fraction of top_k copies under a capacity factor below 1
    bytes_per_element: float
    split: str
    attention_core: bool
    source: str

    def elements(self, seq_len: int, micro_batch: int) -> float:
        if self.per == "score":
            return float(micro_batch) * self.width * seq_len * seq_len
        return float(seq_len) * micro_batch * self.width  # "token" and "row"

    def divisor(self, tp: int, sequence_parallel: bool) -> int:
        return tp if self.split == "tp" or (self.split == "sp" and sequence_parallel) else 1

    def bytes(self, config: ActivationConfig) -> float:
        """Bytes on one GPU (one TP rank, one CP rank) for one micro-batch: context parallelism
        keeps s/cp tokens, and of a score tensor its s/cp query rows against all s keys (or, with
        DeepSpeed-Ulysses, all s rows of heads/cp heads): either way 1/cp of every tensor."""
        total = self.elements(config.seq_len, config.micro_batch) * self.bytes_per_element
        return total / self.divisor(config.tp, config.sequence_parallel) / config.cp


def check_tensor_parallel(model: TransformerModel, tp: int) -> None:
    """Megatron-style TP splits heads, K/V groups and the MLP width: each must divide by t."""
    for flag_what, value in (("attention heads", model.heads), ("key/value heads", model.kv_heads), ("MLP width (ffn_hidden)", model.ffn_hidden)):
        if value % tp:
            raise InputError(f"--tp: {tp} does not divide the {flag_what} ({value}); tensor parallelism gives each rank an equal share")


# --compile: what Inductor's partitioner (torch/_functorch/partitioners.py, min_cut_rematerialization_partition)
# hands the backward is the set counted below, checked on the CPU (tests/ground_truth/test_torch_compile.py).
COMPILE_ACTIVATIONS = (
    "saved activations unchanged: torch.compile's min-cut partitioner (torch/_functorch/partitioners.py, "
    "min_cut_rematerialization_partition, line 3725 at torch 2.13.0) keeps the tensors parcalc counts for the hand-fused kernels (norm inputs "
    "and statistics, GEMM inputs, Q/K/V and the attention output, the MLP's gate and up outputs, dropout masks): "
    "checked with torch 2.13 on a Llama block (RMSNorm, RoPE, SwiGLU, SDPA) and a GPT block (explicit softmax, "
    "1-byte masks); eager PyTorch code with fp32 norms and RoPE keeps more (1.66x on the Llama block)"
)


def layer_saved_tensors(model: TransformerModel, config: ActivationConfig, moe_layer: bool = False) -> tuple[SavedTensor, ...]:
    """The tensors one layer keeps for backward without recomputation, in forward order
    (moe_layer: one of the model's Mixture-of-Experts layers, `moe_tensors` in place of the MLP's)."""
    e, m, g = config.activation_bytes, config.mask_bytes, config.linear_input_bytes
    h, f = model.hidden, model.ffn_hidden
    norm = model.norm is not Norm.NONE
    k1 = KORTHIKANTI_EQ1
    fp8 = quantised_input_note(g, e)
    out: list[SavedTensor] = []
    if norm:
        out.append(SavedTensor("norm1_input", "attention norm input", "token", h, e, "sp", False, k1 + ": LayerNorm input 2sbh"))
    if model.mla is not None:  # multi-head latent attention: its latents, then Q, K, V of its own widths (mla_tensors)
        out.append(SavedTensor("qkv_input", "down-projection input (normed hidden states)", "token", h, g, "sp", False,
                               f"{MLA_SHORT}: the q and kv down projections share it" + fp8))
        out += mla_tensors(model, config)
        out.append(SavedTensor("proj_input", "output projection input (attention output, heads x v_head_dim)", "token",
                               model.heads * model.mla.v_head_dim, g, "tp", False, f"{MLA_SHORT}: linear_proj's input" + fp8))
    else:
        out += _attention_tensors(model, config)
    if config.dropout:
        out.append(SavedTensor("proj_dropout_mask", "attention output dropout mask", "token", h, m, "sp", False, k1 + ": attention dropout mask sbh"))
    if norm:
        out.append(SavedTensor("norm2_input", "MLP norm input", "token", h, e, "sp", False, k1 + ": LayerNorm input 2sbh"))
    if moe_layer and model.moe is not None:  # the router and the experts run in 16 bits (TE's FP8 covers the dense linears)
        out.append(SavedTensor("mlp_input", "router and shared-expert input", "token", h, e, "sp", False, k1 + ": first linear input 2sbh"))
        out += moe_tensors(model, e)
    else:
        out.append(SavedTensor("mlp_input", "MLP up-projection input", "token", h, g, "sp", False, k1 + ": first linear input 2sbh" + fp8))
        out += _mlp_tensors(model.mlp, f, e, g)
    if config.dropout:
        out.append(SavedTensor("mlp_dropout_mask", "MLP output dropout mask", "token", h, m, "sp", False, k1 + ": MLP dropout mask sbh"))
    return tuple(out)


def _attention_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """Standard multi-head / grouped-query attention from its QKV input to the output projection's input."""
    e, m, g = config.activation_bytes, config.mask_bytes, config.linear_input_bytes
    h, q, kv = model.hidden, model.q_width, model.kv_width
    k1 = KORTHIKANTI_EQ1
    fp8 = quantised_input_note(g, e)
    out: list[SavedTensor] = [SavedTensor("qkv_input", "QKV projection input", "token", h, g, "sp", False, k1 + ": shared QKV input 2sbh" + fp8)]
    if config.flash_attention:
        out += [
            SavedTensor("q", "Q", "token", q, e, "tp", False, FLASH),
            SavedTensor("k", "K", "token", kv, e, "tp", False, FLASH),
            SavedTensor("v", "V", "token", kv, e, "tp", False, FLASH),
            # the one tensor of the kernel's own that selective recomputation drops (MEGATRON_SELECTIVE)
            SavedTensor("lse", "softmax log-sum-exp (fp32)", "row", model.heads, LSE_BYTES, "tp", True, FLASH),
        ]
    else:
        out += [
            SavedTensor("q", "Q (for Q·K^T)", "token", q, e, "tp", False, k1 + ": Q and K 4sbh"),
            SavedTensor("k", "K (for Q·K^T)", "token", kv, e, "tp", False, k1 + ": Q and K 4sbh"),
            SavedTensor("softmax_output", "softmax output", "score", model.heads, e, "tp", True, k1 + ": softmax output 2as^2b"),
        ]
        if config.dropout:
            out += [
                SavedTensor("attention_dropout_mask", "attention-probability dropout mask", "score", model.heads, m, "tp", True,
                            k1 + ": softmax dropout mask as^2b"),
                SavedTensor("attention_dropout_output", "dropped-out probabilities (for ·V)", "score", model.heads, e, "tp", True,
                            k1 + ": dropout output 2as^2b"),
            ]  # fmt: skip
        out.append(SavedTensor("v", "V (for ·V)", "token", kv, e, "tp", False, k1 + ": V 2sbh"))
    if model.attention_gate:  # gated attention: o_proj(attn_output * sigmoid(gate)); the product keeps both factors
        out += [SavedTensor("gate_attention_output", "attention output before the gate", "token", q, e, "tp", False, GATED_ATTENTION),
                SavedTensor("gate_sigmoid", "sigmoid(gate), also sigmoid's saved output", "token", q, e, "tp", False, GATED_ATTENTION)]  # fmt: skip
    out.append(SavedTensor("proj_input", "output projection input", "token", q, g, "tp", False, k1 + ": linear projection input 2sbh" + fp8))
    return out


MEGATRON_MLA = ("Megatron-LM megatron/core/transformer/multi_latent_attention.py (d98e8a6), MLASelfAttention."
                "get_query_key_value_tensors; layer spec megatron/core/models/gpt/gpt_layer_specs.py: linear_q_down_proj and "
                "linear_kv_down_proj TELinear, linear_q_up_proj and linear_kv_up_proj TELayerNormColumnParallelLinear (the latent "
                "norms fused into them, q_layernorm = kv_layernorm = IdentityOp)")  # fmt: skip
MEGATRON_MLA_UP = ("Megatron-LM multi_latent_attention.py: with --recompute-granularity selective --recompute-modules mla_up_proj, "
                   "qkv_up_proj_and_rope_apply runs under tensor_parallel.CheckpointWithoutOutput, which keeps its inputs (q latent, "
                   "kv latent, rotary key) and discards Q, K, V after the core attention (discard_output_and_register_recompute)")  # fmt: skip
MLA_SHORT = "Megatron-LM multi_latent_attention.py, get_query_key_value_tensors (parcalc.core.activations.MEGATRON_MLA)"
MLA_UP_SHORT = "dropped by --recompute-modules mla_up_proj (MEGATRON_MLA_UP)"
TE_LN_SHORT = "TE LayerNormLinear keeps the norm's input and output (TE_LN_LINEAR)"
TE_LN_LINEAR = ("Transformer Engine transformer_engine/pytorch/module/layernorm_linear.py, _LayerNormLinear.forward: saves the norm's "
                "input (inputmat) and its output (ln_out, the GEMM input)")  # fmt: skip


def mla_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """What multi-head latent attention keeps for backward between the down projections' input and
    the output projection's input (DeepSeek-V2 sec. 2.1, as Megatron-LM runs it, MEGATRON_MLA):

    - the q latent c_q (q_lora_rank per token; absent when q_lora_rank = 0, a full q projection of
      the normed hidden states) and its norm's output, both kept by linear_q_up_proj (TE_LN_LINEAR);
    - the kv down projection's output [c_kv, k_rope] (kv_lora_rank + qk_rope_head_dim per token:
      the kv norm keeps c_kv, a view that holds the whole storage) and the kv norm's output
      (kv_lora_rank), kept by linear_kv_up_proj;
    - Q and K of heads x (qk_nope + qk_rope) and V of heads x v_head_dim, made contiguous after
      RoPE: FlashAttention's inputs (192 and 128 per head for DeepSeek-V3), or without it Q, K, the
      s x s scores and V. The up projections' outputs and RoPE keep nothing else (RoPE's backward
      needs only cos / sin; split and cat none).
    The latents are as wide on every TP rank (duplicated down projections), split by SP only; Q, K,
    V by TP. With mla_up_proj recomputation (MEGATRON_MLA_UP) only the latents stay: c_q and [c_kv,
    k_rope]; the norms' outputs and Q, K, V are made again in backward."""
    mla = model.mla
    assert mla is not None
    e, m, g = config.activation_bytes, config.mask_bytes, config.linear_input_bytes
    heads, qk, v = model.heads, mla.qk_head_dim, mla.v_head_dim
    fp8 = quantised_input_note(g, e)
    up = "mla_up_proj" in config.modules
    out: list[SavedTensor] = []
    if mla.q_lora_rank:
        out.append(SavedTensor("q_latent", "q latent c_q (q down-projection output, q norm input)", "token", mla.q_lora_rank, e, "sp",
                               False, f"{MLA_SHORT}; {TE_LN_SHORT}"))
        if not up:
            out.append(SavedTensor("q_latent_norm", "normed q latent (q up-projection input)", "token", mla.q_lora_rank, g, "sp", False,
                                   f"{TE_LN_SHORT}; {MLA_UP_SHORT}" + fp8))
    out.append(SavedTensor("kv_latent", "kv down-projection output [c_kv, k_rope] (kv norm input)", "token",
                           mla.kv_lora_rank + mla.qk_rope_head_dim, e, "sp", False,
                           f"{MLA_SHORT}: c_kv and k_rope are torch.split views of one storage; {TE_LN_SHORT}"))
    if not up:
        out.append(SavedTensor("kv_latent_norm", "normed kv latent (kv up-projection input)", "token", mla.kv_lora_rank, g, "sp", False,
                               f"{TE_LN_SHORT}; {MLA_UP_SHORT}" + fp8))
    source = f"{MLA_SHORT}: query = cat(q_nope, q_rope), key = cat(k_nope, k_rope), value, each contiguous; {MLA_UP_SHORT}"
    if config.flash_attention:
        if not up:
            out += [SavedTensor("q", f"Q (heads x {qk})", "token", heads * qk, e, "tp", False, f"{source}; {FLASH}"),
                    SavedTensor("k", f"K (heads x {qk}, the rotary part shared)", "token", heads * qk, e, "tp", False, f"{source}; {FLASH}"),
                    SavedTensor("v", f"V (heads x {v})", "token", heads * v, e, "tp", False, f"{source}; {FLASH}")]  # fmt: skip
        out.append(SavedTensor("lse", "softmax log-sum-exp (fp32)", "row", heads, LSE_BYTES, "tp", True, FLASH))
        return out
    k1 = KORTHIKANTI_EQ1
    if not up:
        out += [SavedTensor("q", f"Q (heads x {qk}, for Q·K^T)", "token", heads * qk, e, "tp", False, f"{source}; {k1}: Q and K"),
                SavedTensor("k", f"K (heads x {qk}, for Q·K^T)", "token", heads * qk, e, "tp", False, f"{source}; {k1}: Q and K")]  # fmt: skip
    out.append(SavedTensor("softmax_output", "softmax output", "score", heads, e, "tp", True, k1 + ": softmax output 2as^2b"))
    if config.dropout:
        out += [SavedTensor("attention_dropout_mask", "attention-probability dropout mask", "score", heads, m, "tp", True,
                            k1 + ": softmax dropout mask as^2b"),
                SavedTensor("attention_dropout_output", "dropped-out probabilities (for ·V)", "score", heads, e, "tp", True,
                            k1 + ": dropout output 2as^2b")]  # fmt: skip
    if not up:
        out.append(SavedTensor("v", f"V (heads x {v}, for ·V)", "token", heads * v, e, "tp", False, f"{source}; {k1}: V"))
    return out


def _mlp_tensors(mlp: Mlp, f: int, e: float, g: float | None = None) -> list[SavedTensor]:
    """The MLP's saved tensors; g: bytes of the down projection's saved input (FP8: 1; None: e)."""
    g = e if g is None else g
    fp8 = quantised_input_note(g, e)
    if mlp is Mlp.RELU:
        relu = [SavedTensor("relu_output", "ReLU output (= down-projection input)", "token", f, e, "tp", False,
                            "PyTorch derivatives.yaml: relu backward uses its result")]  # fmt: skip
        if g != e:  # TE's LayerNormMLP keeps fc1_out for the activation's backward and the FP8 act_out for fc2's wgrad
            relu.append(SavedTensor("down_input", "down-projection input (FP8 copy)", "token", f, g, "tp", False, TE_FP8_MLP))
        return relu
    if mlp.gated:
        fused = "Megatron-LM fused_bias_swiglu.py saves [gate, up]"
        return [
            SavedTensor("gate_output", "gate projection output", "token", f, e, "tp", False, fused),
            SavedTensor("up_output", "up projection output", "token", f, e, "tp", False, fused),
            SavedTensor("down_input", "gated product (down-projection input)", "token", f, g, "tp", False, fused + fp8),
        ]
    k1 = KORTHIKANTI_EQ1
    return [
        SavedTensor("activation_input", f"{mlp.value.upper()} input", "token", f, e, "tp", False, k1 + ": GeLU input 8sbh"),
        SavedTensor("down_input", "down-projection input", "token", f, g, "tp", False, k1 + ": second linear input 8sbh" + fp8),
    ]


ROUTER_PROB_BYTES = 4.0  # router softmax in fp32 (Mixtral: F.softmax(router_logits, dim=1, dtype=torch.float); Megatron moe_router_dtype)
INDEX_BYTES = 8.0  # int64 indices (torch.topk, index / gather backward)
MOE_SOURCE = ("Mixture-of-Experts layer as transformers' MixtralSparseMoeBlock / Megatron-LM's token dispatcher run it "
              "(router, top-k, permute, experts, weighted combine); checked against autograd's saved tensors in "
              "tests/ground_truth/test_torch_moe.py")


def moe_tensors(model: TransformerModel, e: float) -> list[SavedTensor]:
    """What an MoE layer's feed-forward keeps for backward, per token (the router / shared-expert
    input, kept as 'mlp_input', comes before): the router probabilities (fp32 softmax output, E
    per token), the routing indices (int64: the top-k choice, the token each copy came from and
    the copies' order by expert: 3 k per token), the permuted token copies (top_k copies of the
    h-wide input, the experts' GEMM inputs), the experts' intermediates for top_k experts per token
    (the MLP's own tensors at width expert_ffn_hidden), the expert outputs and routing weights the
    weighted combine keeps (k h + k), and the shared experts' intermediates. Dropless, balanced
    routing: every token has exactly top_k copies (a capacity factor below 1 keeps that share)."""
    moe = model.moe
    assert moe is not None
    h, k = model.hidden, moe.top_k * (min(1.0, moe.capacity_factor) if moe.capacity_factor is not None else 1)
    out = [
        SavedTensor("router_probs", "router probabilities (fp32 softmax output)", "token", moe.experts, ROUTER_PROB_BYTES, "sp", False, MOE_SOURCE),
        SavedTensor("routing_indices", "routing indices (top-k choice, source token, order by expert)", "token", 3 * moe.top_k,
                    INDEX_BYTES, "sp", False, MOE_SOURCE),
        SavedTensor("permuted_tokens", "permuted token copies (top_k per token, expert GEMM input)", "token", k * h, e, "sp", False, MOE_SOURCE),
    ]  # fmt: skip
    for t in _mlp_tensors(model.mlp, moe.expert_ffn_hidden, e):
        out.append(SavedTensor(f"expert_{t.key}", f"routed experts' {t.name} (top_k per token)", "token", k * t.width, e, "tp", False,
                               f"{t.source}; {MOE_SOURCE}"))  # fmt: skip
    out += [
        SavedTensor("expert_output", "expert outputs (for the weighted combine)", "token", k * h, e, "sp", False, MOE_SOURCE),
        SavedTensor("routing_weights", "routing weights of the copies (for the weighted combine)", "token", k, e, "sp", False, MOE_SOURCE),
    ]
    if moe.shared_experts:
        for t in _mlp_tensors(model.mlp, moe.shared_experts * moe.shared_width, e):
            out.append(SavedTensor(f"shared_{t.key}", f"shared experts' {t.name}", "token", t.width, e, "tp", False, t.source))
    return out


def tensor_bytes(tensor: SavedTensor, config: ActivationConfig) -> float:
    """Bytes of one saved tensor on one GPU for one micro-batch."""
    return tensor.bytes(config)


def kept_tensors(model: TransformerModel, config: ActivationConfig, moe_layer: bool = False) -> tuple[SavedTensor, ...]:
    """What a layer keeps under the chosen recomputation (full: only its input)."""
    if config.recompute is Recompute.FULL:
        source = f"{KORTHIKANTI}, sec. 5 (full recomputation keeps the input of each layer, 2sbh)"
        return (SavedTensor("layer_input", "layer input (checkpoint)", "token", model.hidden, config.activation_bytes, "sp", False, source),)
    if config.recompute is Recompute.OP:
        return op_saved_tensors(model, config)
    tensors = layer_saved_tensors(model, config, moe_layer)
    modules = config.modules
    if modules:  # selective recomputation of Megatron's modules (parcalc.core.recompute.module_drops)
        from parcalc.core.recompute import module_drops

        tensors = tuple(t for t in tensors if not module_drops(t.key, t.attention_core, modules, model, moe_layer))
    return tensors


def op_saved_tensors(model: TransformerModel, config: ActivationConfig) -> tuple[SavedTensor, ...]:
    """What one layer keeps under op-level selective checkpointing (parcalc.core.recompute: TorchTitan's
    policy): its input, the outputs of the odd-numbered matmuls, FlashAttention's output and
    log-sum-exp, and under sequence parallelism the two reduce-scatter outputs. A row-parallel
    matmul's output (wo, w2) is a partial sum over every token: b s h on each TP rank ("none")."""
    from parcalc.core.recompute import TT_POLICY, check_op_supported, op_saved_matmuls

    check_op_supported(model)
    e, h = config.activation_bytes, model.hidden
    widths = {"q_proj": (model.q_width, "tp", "Q projection output (wq)"), "v_proj": (model.kv_width, "tp", "V projection output (wv)"),
              "mlp_gate": (model.ffn_hidden, "tp", "gate projection output (w1)"),
              "mlp_up": (model.ffn_hidden, "tp", "up projection output" + (" (w3)" if model.mlp.gated else "")),
              "mlp_down": (h, "none", "down projection output (w2; partial sum under TP)"),
              "k_proj": (model.kv_width, "tp", "K projection output (wk)"), "out_proj": (h, "none", "output projection output (wo)")}  # fmt: skip
    source = f"{TT_POLICY}: saved op output"
    out = [SavedTensor("layer_input", "layer input (checkpoint argument)", "token", h, e, "sp", False,
                       "torch.utils.checkpoint keeps the wrapped block's input for the replay")]  # fmt: skip
    for key in op_saved_matmuls(model):
        width, split, name = widths[key]
        out.append(SavedTensor(f"{key}_output", name, "token", width, e, split, False, source))
    if config.flash_attention:
        out += [SavedTensor("attention_output", "SDPA output", "token", model.q_width, e, "tp", False, f"{source}; {FLASH}"),
                SavedTensor("lse", "SDPA log-sum-exp (fp32)", "row", model.heads, LSE_BYTES, "tp", False, f"{source}; {FLASH}")]  # fmt: skip
    if config.sequence_parallel:
        out += [SavedTensor(f"reduce_scatter_{i}", f"reduce-scatter output after {w}", "token", h, e, "sp", False, source)
                for i, w in ((1, "wo"), (2, "w2"))]  # fmt: skip
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Derivations


@frozen
class LayerActivations:
    """One layer's activations on one GPU for one micro-batch: the total and what it is made of."""

    per_layer: Derivation
    kept: tuple[SavedTensor, ...]
    config: ActivationConfig
    korthikanti: Derivation | None

    def rows(self) -> tuple[tuple[object, ...], ...]:
        """(tensor, elements per micro-batch, bytes per element, split over, bytes on this GPU, source) per kept tensor."""
        c = self.config
        rows = []
        for t in self.kept:
            elements = t.elements(c.seq_len, c.micro_batch)
            divisor = t.divisor(c.tp, c.sequence_parallel)
            split = {1: "none"}.get(divisor, f"{'TP' if t.split == 'tp' else 'SP'} ({divisor})")
            if c.cp > 1:
                split = f"CP ({c.cp})" if divisor == 1 else f"{split}, CP ({c.cp})"
            rows.append((t.name, elements, t.bytes_per_element, split, tensor_bytes(t, c), t.source))
        return tuple(rows)


def _shape_terms(model: TransformerModel, config: ActivationConfig) -> dict[str, Term]:
    return {
        "s": Term("s", "s", "s", config.seq_len, "", "sequence length"),
        "b": Term("b", "b", "b", config.micro_batch, "", "micro-batch size (sequences)"),
        "h": Term("h", "h", "h", model.hidden, "", "hidden size"),
        "a": Term("a", "a", "a", model.heads, "", "attention heads"),
        "t": Term("t", "t", "t", config.tp, "", "tensor-parallel degree"),
        "e": Term("e", "e", "e", config.activation_bytes, "B", "bytes per activation element"),
    }


def layer_activations(model: TransformerModel, config: ActivationConfig, moe_layer: bool = False) -> LayerActivations:
    """Bytes one layer keeps for backward, on one GPU, for one micro-batch (see the module docstring);
    moe_layer: one of the model's Mixture-of-Experts layers."""
    check_tensor_parallel(model, config.tp)
    check_sequence(model, config.seq_len)
    kept = kept_tensors(model, config, moe_layer)
    value = sum(tensor_bytes(t, config) for t in kept)
    terms = _shape_terms(model, config)
    t_div = " / $t" if config.sequence_parallel else ""
    t_div_tex = r" / $t" if config.sequence_parallel else ""
    if config.recompute is Recompute.FULL:
        derivation = Derivation(
            key="activation_per_layer",
            label="Activations kept per layer per micro-batch (full recomputation: the layer input)",
            symbol="A_layer",
            latex_symbol=r"A_{\mathrm{layer}}",
            formula=f"$e × $s × $b × $h{t_div}",
            formula_latex=rf"$e \times $s \times $b \times $h{t_div_tex}",
            inputs=tuple(terms[k] for k in ("e", "s", "b", "h", *(("t",) if config.sequence_parallel else ()))),
            value=value,
            unit="B",
            source=f"{KORTHIKANTI}, sec. 5 and Table 2 (2sbh with e = 2 bytes)",
            assumptions=_assumptions(model, config),
        )
        return LayerActivations(with_cp(derivation, config.cp), kept, config, korthikanti_per_layer(model, config))
    def split(t: SavedTensor) -> bool:  # split over the TP ranks (by TP itself, or by SP)
        return t.split == "tp" or (t.split == "sp" and config.sequence_parallel)

    per_token_whole = sum(t.bytes_per_element * t.width for t in kept if t.per == "token" and not split(t))
    per_token_split = sum(t.bytes_per_element * t.width for t in kept if t.per == "token" and split(t))
    per_score = sum(t.bytes_per_element for t in kept if t.per == "score")
    per_row = sum(t.bytes_per_element for t in kept if t.per == "row")
    c_whole = Term("c_w", "c_whole", r"c_{\mathrm{whole}}", per_token_whole, "B",
                   "bytes per token kept whole on every TP rank (norm inputs, projection inputs, dropout masks; table 'layer_activations')")  # fmt: skip
    c_split = Term("c_t", "c_split", r"c_{\mathrm{split}}", per_token_split, "B",
                   "bytes per token split over the TP ranks (Q, K, V, MLP intermediates; table 'layer_activations')")  # fmt: skip
    if per_token_whole:
        formula, latex = "$s × $b × ($c_w + $c_t / $t)", r"$s \times $b \times \left($c_w + \frac{$c_t}{$t}\right)"
        inputs = [terms["s"], terms["b"], c_whole, c_split, terms["t"]]
    else:  # sequence parallelism: every tensor is split
        formula, latex = "$s × $b × $c_t / $t", r"\frac{$s \times $b \times $c_t}{$t}"
        inputs = [terms["s"], terms["b"], c_split, terms["t"]]
    if per_score:
        c_score = Term("c_a", "c_score", r"c_{\mathrm{score}}", per_score, "B",
                       "bytes per attention-score element (softmax output, dropout mask and output)")  # fmt: skip
        formula += " + $a × $s² × $b × $c_a / $t"
        latex += r" + \frac{$a \times $s^2 \times $b \times $c_a}{$t}"
        inputs += [terms["a"], c_score]
    if per_row:
        c_row = Term("c_r", "c_lse", r"c_{\mathrm{lse}}", per_row, "B", "bytes per attention row (FlashAttention's fp32 log-sum-exp)", FLASH)
        formula += " + $a × $s × $b × $c_r / $t"
        latex += r" + \frac{$a \times $s \times $b \times $c_r}{$t}"
        inputs += [terms["a"], c_row]
    derivation = Derivation(
        key="activation_per_layer",
        label=("Activations kept per MoE layer per micro-batch (every saved tensor)" if moe_layer else
               "Activations kept per layer per micro-batch (op-level checkpointing: what the policy saves, table 'layer_activations')"
               if config.recompute is Recompute.OP else
               "Activations kept per layer per micro-batch (every saved tensor, table 'layer_activations')"),
        symbol="A_layer",
        latex_symbol=r"A_{\mathrm{layer}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(dict.fromkeys(inputs)),
        value=value,
        unit="B",
        source=(f"{KORTHIKANTI}, sec. 4.1-4.2.2 and sec. 5, tensor by tensor" if config.recompute is not Recompute.OP else
                "parcalc.core.recompute.op_saved_tensors (TorchTitan's op-level policy), tensor by tensor"),
        assumptions=_assumptions(model, config) + ((MOE_ASSUMPTION,) if moe_layer else ()),
    )
    return LayerActivations(with_cp(derivation, config.cp), kept, config, korthikanti_per_layer(model, config))


def with_cp(derivation: Derivation, cp: int, scale: bool = False) -> Derivation:
    """`derivation` on one context-parallel rank: its formula divided by cp (the value already is,
    unless `scale`). Context parallelism keeps s/cp tokens per GPU (parcalc.core.context)."""
    if cp <= 1:
        return derivation
    from dataclasses import replace

    term = Term("c_p", "cp", r"c_p", cp, "", "context-parallel degree (each GPU holds s/cp tokens)")
    return replace(
        derivation,
        formula=f"({derivation.formula}) / $c_p",
        formula_latex=rf"\frac{{{derivation.formula_latex}}}{{$c_p}}",
        inputs=(*derivation.inputs, term),
        value=derivation.value / cp if scale else derivation.value,
        assumptions=(*derivation.assumptions, f"context parallelism over {cp} ranks: each GPU holds s/cp tokens of every sequence, "
                     "so every tensor here is 1/cp of its size"),
    )


MOE_ASSUMPTION = ("MoE layer: dropless, balanced routing (top_k copies of every token; a capacity factor below 1 keeps that share), "
                  "router softmax in fp32, int64 routing indices, fused gated activation (3 tensors per expert; unfused PyTorch keeps "
                  "silu(gate) too); the expert tensors split like the MLP's (expert TP = TP)")


def _assumptions(model: TransformerModel, config: ActivationConfig) -> tuple[str, ...]:
    masks = f", dropout masks in {config.mask_bytes:g}" if config.dropout else ""
    out = [f"activations stored in {config.activation_bytes:g} bytes per element{masks}"]
    if config.linear_input_bytes != config.activation_bytes:
        kind = "NVFP4 training (Transformer Engine; FP4 data and an E4M3 scale per 16, column-wise copy only)" \
            if config.linear_input_bytes < 1 else "FP8 training (Transformer Engine)"
        out.append(f"{kind}: the saved inputs of the linears (QKV, output projection, MLP up and down) in "
                   f"{config.linear_input_bytes:g} byte per element; norms, attention (Q, K, V, softmax), activation inputs and "
                   "residuals stay 16-bit (TE's fp8_dpa off by default)")  # fmt: skip
    if model.norm is Norm.LAYERNORM or model.norm is Norm.RMSNORM:
        out.append("norm statistics (mean / rstd, b x s values per norm) left out, as Korthikanti et al. do")
    if not config.dropout:
        out.append("no dropout: no masks, and the softmax output itself feeds the ·V product")
    if model.mlp is Mlp.RELU:
        out.append("ReLU keeps its output, which is also the down projection's input: one f-wide tensor")
    if model.mlp.gated:
        out.append("gated MLP keeps gate output, up output and their product (Megatron-LM's fused activation); unfused PyTorch also keeps silu(gate)")
    if model.mla is not None:
        mla = model.mla
        latents = (f"q latent {mla.q_lora_rank}, " if mla.q_lora_rank else "no q latent (q_lora_rank 0: a full q projection), ")
        out.append(f"multi-head latent attention as Megatron-LM runs it ({MEGATRON_MLA}): {latents}kv down-projection output "
                   f"{mla.kv_lora_rank} + {mla.qk_rope_head_dim}, " + ("the latent norms' outputs, " if "mla_up_proj" not in config.modules else "")
                   + f"Q and K of {model.heads} x {mla.qk_head_dim}, V and the output of {model.heads} x {mla.v_head_dim} per token"
                   + (f"; {MEGATRON_MLA_UP}: Q, K, V and the norms' outputs are made again in backward (the up projections' "
                      "FLOPs count in hardware FLOPs)" if "mla_up_proj" in config.modules else ""))  # fmt: skip
    out.append(attention_assumption(config.flash_attention))
    if not config.flash_attention and model.window is not None:  # transformers' eager_attention_forward and Megatron's unfused softmax mask the whole square
        out.append(f"the {model.window.kind.value} window of {model.window.size:,} tokens saves no memory here: attention without a "
                   "fused kernel computes and keeps the whole s x s score square and masks it (transformers eager_attention_forward)")
    modules = config.modules
    if modules and modules != ("core_attn",):
        from parcalc.core.recompute import MEGATRON_MODULE_SITES, MEGATRON_MODULES

        out.append(f"selective recomputation of Megatron-LM's modules {', '.join(modules)} ({MEGATRON_MODULES}): "
                   + "; ".join(f"{m}: {MEGATRON_MODULE_SITES[m]}" for m in modules))
    if "core_attn" in modules and config.flash_attention:
        out.append("selective recomputation with FlashAttention (Megatron-LM's core-attention checkpoint): Q, K, V are kept as the "
                   "checkpoint's inputs and the output as the projection's input; only the fp32 log-sum-exp is dropped, and the "
                   f"FlashAttention forward runs again before its backward ({MEGATRON_SELECTIVE})")
    elif "core_attn" in modules:
        out.append("selective recomputation: the attention core (softmax, dropout, dropout output) is recomputed in backward")
    if config.recompute is Recompute.OP:
        from parcalc.core.recompute import TT_ORDER, op_recomputed_matmuls

        again = ", ".join(op_recomputed_matmuls(model, config.flash_attention))
        out.append("op-level selective checkpointing (TorchTitan's policy): the layer input, every other matmul output in "
                   f"TorchTitan's order ({TT_ORDER})" + (", SDPA's output and log-sum-exp" if config.flash_attention else "")
                   + (", the two reduce-scatter outputs" if config.sequence_parallel else "")
                   + f" are kept; norms, RoPE, activation, residual adds and the matmuls {again} run again in backward")
        if model.bias:
            out.append("a linear with a bias runs as aten.addmm, which the April-2024 list does not save: parcalc counts every "
                       "linear as aten.mm, as TorchTitan's bias-free models run them")  # fmt: skip
    if config.recompute is Recompute.FULL and config.sequence_parallel:
        out.append("full recomputation with SP keeps the layer input's sequence shard (Megatron-LM); Korthikanti's Table 2 gives 2sbh without SP")
    return tuple(out)


def is_korthikanti_layer(model: TransformerModel) -> bool:
    """The layer Korthikanti et al. count: MHA, head_dim x heads = h, MLP 4h with GELU, LayerNorm."""
    return (
        model.kv_heads == model.heads
        and model.q_width == model.hidden
        and model.ffn_hidden == 4 * model.hidden
        and model.mlp is Mlp.GELU
        and model.norm is Norm.LAYERNORM
    )


def korthikanti_per_layer(model: TransformerModel, config: ActivationConfig) -> Derivation | None:
    """Korthikanti et al.'s closed form (Table 2) for this s, b, h, a, t, with 16-bit activations.

    None where the paper gives no form: FlashAttention, or a run without dropout. The closed form
    describes their layer (GELU MLP of 4h, MHA, LayerNorm); for any other layer it is the paper's
    estimate, and `layer_activations` is the count for the layer as defined.
    """
    if config.flash_attention or not config.dropout or config.recompute is Recompute.OP:  # no closed form for op-level checkpointing
        return None
    if config.recompute is Recompute.SELECTIVE and config.modules != ("core_attn",):  # the paper's selective is the attention core only
        return None
    terms = _shape_terms(model, config)
    s, b, h, a, t = config.seq_len, config.micro_batch, model.hidden, model.heads, config.tp
    sp, rc = config.sequence_parallel, config.recompute
    keys: tuple[str, ...]
    if rc is Recompute.FULL:
        formula, latex, keys, value, where = "2 × $s × $b × $h", r"2 \times $s \times $b \times $h", ("s", "b", "h"), 2.0 * s * b * h, "full activation recompute"
    elif rc is Recompute.SELECTIVE and sp:
        formula, latex, keys, value, where = "34 × $s × $b × $h / $t", r"\frac{34 \times $s \times $b \times $h}{$t}", ("s", "b", "h", "t"), 34.0 * s * b * h / t, "eq. (6)"
    elif rc is Recompute.SELECTIVE:
        formula, latex = "$s × $b × $h × (10 + 24 / $t)", r"$s \times $b \times $h \times \left(10 + \frac{24}{$t}\right)"
        keys, value, where = ("s", "b", "h", "t"), s * b * h * (10 + 24 / t), "tensor parallel + selective recompute"
    elif sp:
        formula, latex = "$s × $b × $h / $t × (34 + 5 × $a × $s / $h)", r"\frac{$s \times $b \times $h}{$t} \times \left(34 + \frac{5 \times $a \times $s}{$h}\right)"
        keys, value, where = ("s", "b", "h", "t", "a"), s * b * h / t * (34 + 5 * a * s / h), "eq. (4)"
    elif t > 1:
        formula = "$s × $b × $h × (10 + 24 / $t + 5 × $a × $s / ($h × $t))"
        latex = r"$s \times $b \times $h \times \left(10 + \frac{24}{$t} + \frac{5 \times $a \times $s}{$h \times $t}\right)"
        keys, value, where = ("s", "b", "h", "t", "a"), s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), "eq. (2)"
    else:
        formula, latex = "$s × $b × $h × (34 + 5 × $a × $s / $h)", r"$s \times $b \times $h \times \left(34 + \frac{5 \times $a \times $s}{$h}\right)"
        keys, value, where = ("s", "b", "h", "a"), s * b * h * (34 + 5 * a * s / h), "eq. (1)"
    standard = is_korthikanti_layer(model) and config.activation_bytes == 2 and config.mask_bytes == 1 and config.linear_input_bytes == 2
    note = "" if standard else " (their layer: 4h GELU MLP, MHA, 16-bit; an estimate for this one)"
    return Derivation(
        key="korthikanti_per_layer",
        label=f"Korthikanti et al.'s closed form per layer per micro-batch{note}",
        symbol="A_K",
        latex_symbol=r"A_{\mathrm{K}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(terms[k] for k in keys),
        value=value,
        unit="B",
        source=f"{KORTHIKANTI_TABLE2}: {where}",
        assumptions=("16-bit activations (2 bytes), 1-byte dropout masks, h >> 1 (norm statistics left out)",),
    )


# ---------------------------------------------------------------------------------------------
# Outside the layers: input embeddings (first stage) and the output layer (last stage)


def embedding_activations(model: TransformerModel, config: ActivationConfig, in_flight: float) -> Derivation:
    """First stage: token ids (int64, for the embedding's backward) and the embedding dropout mask,
    for each micro-batch in flight (Korthikanti et al. sec. 4.3: sbhp/t of dropout mask with SP;
    Megatron-LM's calculator also counts the 8 s b p bytes of token ids)."""
    terms = _shape_terms(model, config)
    n = Term("n_0", "n_0", "n_0", in_flight, "", "micro-batches in flight on the first stage")
    ids = Term("i", "i", "i", TOKEN_ID_BYTES, "B", "bytes per token id (int64)")
    sp = config.sequence_parallel
    if config.dropout:
        mask = Term("m", "m", "m", config.mask_bytes, "B", "bytes per dropout-mask element")
        per = TOKEN_ID_BYTES * config.seq_len * config.micro_batch + config.mask_bytes * config.seq_len * config.micro_batch * model.hidden / (config.tp if sp else 1)
        formula = "($i × $s × $b + $m × $s × $b × $h" + (" / $t" if sp else "") + ") × $n_0"
        latex = r"\left($i \times $s \times $b + " + (r"\frac{$m \times $s \times $b \times $h}{$t}" if sp else r"$m \times $s \times $b \times $h") + r"\right) \times $n_0"
        inputs = [ids, terms["s"], terms["b"], mask, terms["h"], *([terms["t"]] if sp else []), n]
    else:
        per = TOKEN_ID_BYTES * config.seq_len * config.micro_batch
        formula, latex, inputs = "$i × $s × $b × $n_0", r"$i \times $s \times $b \times $n_0", [ids, terms["s"], terms["b"], n]
    return with_cp(Derivation(
        key="embedding_activations",
        label="Input-embedding activations (token ids" + (", embedding dropout mask)" if config.dropout else ")"),
        symbol="A_emb",
        latex_symbol=r"A_{\mathrm{emb}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(inputs),
        value=per * in_flight,
        unit="B",
        source=f"{KORTHIKANTI_OUTPUT}; {MEGATRON_MEMORY}",
        assumptions=("token ids are kept whole on every TP rank (each rank embeds the full batch)",),
    ), config.cp, scale=True)


def output_activations(model: TransformerModel, config: ActivationConfig, in_flight: float) -> Derivation:
    """Last stage: the final norm's input, the LM head's input and the fp32 logits the
    cross-entropy keeps, 4sbh/t (1 + v/h) with SP and 16-bit activations (Korthikanti et al.
    sec. 4.3), for each micro-batch in flight on the last stage."""
    terms = _shape_terms(model, config)
    n = Term("n_last", "n_last", r"n_{\mathrm{last}}", in_flight, "", "micro-batches in flight on the last stage")
    v = Term("V", "V", "V", model.vocab, "", "vocabulary size")
    f32 = Term("l", "l", "l", LOGIT_BYTES, "B", "bytes per logit (fp32 for the cross-entropy)")
    sp = config.sequence_parallel
    inputs_kept = 2 if model.norm is not Norm.NONE else 1
    k = Term("k_in", "k", "k", inputs_kept, "", "h-wide inputs kept: final norm input and LM-head input" if inputs_kept == 2 else "LM-head input")
    per = (inputs_kept * config.activation_bytes * config.seq_len * config.micro_batch * model.hidden / (config.tp if sp else 1)
           + LOGIT_BYTES * config.seq_len * config.micro_batch * model.vocab / config.tp)  # fmt: skip
    whole = "$k_in × $e × $s × $b × $h" + (" / $t" if sp else "")
    whole_tex = (r"\frac{$k_in \times $e \times $s \times $b \times $h}{$t}" if sp else r"$k_in \times $e \times $s \times $b \times $h")
    return with_cp(Derivation(
        key="output_activations",
        label="Output-layer activations (final norm and LM-head inputs, fp32 logits for the cross-entropy)",
        symbol="A_out",
        latex_symbol=r"A_{\mathrm{out}}",
        formula=f"({whole} + $l × $s × $b × $V / $t) × $n_last",
        formula_latex=rf"\left({whole_tex} + \frac{{$l \times $s \times $b \times $V}}{{$t}}\right) \times $n_last",
        inputs=(k, terms["e"], terms["s"], terms["b"], terms["h"], terms["t"], f32, v, n),
        value=per * in_flight,
        unit="B",
        source=f"{KORTHIKANTI_OUTPUT}; {MEGATRON_MEMORY}",
        assumptions=("vocabulary-parallel logits and cross-entropy (Megatron-LM): V / t logits per token on each TP rank",),
    ), config.cp, scale=True)


def mtp_activations(model: TransformerModel, config: ActivationConfig, in_flight: float) -> Derivation | None:
    """Last stage: what the multi-token-prediction modules keep for backward, per micro-batch in flight: each
    module's projection input [RMSNorm(h); RMSNorm(Emb)] (2h wide, split by t with SP), its block's activations
    (a layer of the model's last layer's kind, as parcalc counts a layer) and its own output activations (final
    norm and head inputs, fp32 logits: output_activations). None without MTP."""
    if not model.mtp_layers:
        return None
    block = layer_activations(model, config, moe_layer=model.mtp_layer_is_moe).per_layer.value
    # s/cp tokens on a context-parallel rank, as output_activations and the layers count them
    features_in, _ = model.mtp_projection
    projection = config.activation_bytes * config.seq_len * config.micro_batch * features_in / (config.tp if config.sequence_parallel else 1) / config.cp
    logits = output_activations(model, config, 1.0).value
    per = projection + block + logits
    inputs = (Term("D_mtp", "D", "D", model.mtp_layers, "", "multi-token-prediction modules", model.mtp_source),
              Term("A_proj", "A_proj", r"A_{\mathrm{proj}}", projection, "B", "the projection's 2h-wide input per micro-batch"),
              Term("A_block", "A_block", r"A_{\mathrm{block}}", block, "B", "one block's activations per micro-batch (as a layer of its kind)"),
              Term("A_logits", "A_out", r"A_{\mathrm{out}}", logits, "B", "its final norm and head inputs and fp32 logits per micro-batch"),
              Term("n_last", "n_last", r"n_{\mathrm{last}}", in_flight, "", "micro-batches in flight on the last stage"))  # fmt: skip
    return Derivation(
        key="mtp_activations",
        label="Multi-token-prediction activations (projection input, block, logits of each module)",
        symbol="A_mtp",
        latex_symbol=r"A_{\mathrm{mtp}}",
        formula="$D_mtp × ($A_proj + $A_block + $A_logits) × $n_last",
        formula_latex=r"$D_mtp \times \left($A_proj + $A_block + $A_logits\right) \times $n_last",
        inputs=inputs,
        value=model.mtp_layers * per * in_flight,
        unit="B",
        source="Megatron-LM megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer.forward: "
               "torch.cat of the normed embedding and hidden state, eh_proj, transformer_layer, final_layernorm; the loss "
               "through the shared output_layer); DeepSeek-V3 report sec. 2.2",
    )


def recompute_working_set(model: TransformerModel, config: ActivationConfig) -> Derivation | None:
    """What recomputation materialises again during one layer's backward, for one micro-batch:
    the whole layer (full), what op-level checkpointing did not keep, or under selective
    recomputation the largest of what each checkpointed module drops (its replay runs just before
    its own backward, one module at a time). None without recomputation."""
    from dataclasses import replace

    modules = config.modules
    if config.recompute is Recompute.NONE and not modules:
        return None
    plain = replace(config, recompute=Recompute.NONE, recompute_modules=None, mla_up_proj=False)
    every = layer_saved_tensors(model, plain)
    if config.recompute is Recompute.OP:  # what the replay materialises beside what was kept
        kept = sum(tensor_bytes(t, config) for t in op_saved_tensors(model, config))
        value = max(sum(tensor_bytes(t, plain) for t in every) - kept, 0.0)
    elif config.recompute is Recompute.FULL:
        value = sum(tensor_bytes(t, plain) for t in every)
    else:
        value = max(_module_working_set(model, config, plain, m) for m in modules)
    if config.recompute is Recompute.OP:
        what = "the layer's activations less what op-level checkpointing kept"
    elif config.recompute is Recompute.FULL:
        what = "the whole layer's activations"
    elif modules != ("core_attn",):
        what = f"the largest of what the checkpointed modules ({', '.join(modules)}) drop"
    elif config.flash_attention:
        what = "FlashAttention's log-sum-exp, recomputed with the kernel's forward"
    else:
        what = "the attention core's softmax, mask and dropout output"
    one = Term("A_re", "A_recomputed", r"A_{\mathrm{re}}", value, "B", f"{what}, one layer, one micro-batch")
    return Derivation(
        key="recompute_working_set",
        label="Recomputed during one layer's backward (one micro-batch at a time)",
        symbol="A_re",
        latex_symbol=r"A_{\mathrm{re}}",
        formula="$A_re",
        formula_latex="$A_re",
        inputs=(one,),
        value=value,
        unit="B",
        source=f"{KORTHIKANTI}, sec. 5: recomputation runs the forward of a layer again just before its backward",
    )


def _module_working_set(model: TransformerModel, config: ActivationConfig, plain: ActivationConfig, module: str) -> float:
    """Bytes one checkpointed module drops in the layer kind it belongs to (the MoE layer for moe,
    shared_experts, moe_act and an MoE layer's norm; the dense layer otherwise, or the larger of both)."""
    from dataclasses import replace

    alone = replace(plain, recompute=Recompute.SELECTIVE, recompute_modules=(module,))
    kinds = [False] if model.moe is None else [True] if model.moe_layers >= model.layers else [False, True]
    return max(sum(tensor_bytes(t, plain) for t in layer_saved_tensors(model, plain, k))
               - sum(tensor_bytes(t, plain) for t in kept_tensors(model, alone, k)) for k in kinds)
