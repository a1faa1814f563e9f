"""The shape of a decoder-style transformer, and the parameter counts that follow from it.

Counts follow the layer as built by Megatron-LM / GPT-2 (biases, LayerNorm, learned positions)
or LLaMA (no biases, RMSNorm, RoPE, SwiGLU, grouped-query attention), chosen by the fields.
With bias=True, norm="layernorm", position="learned" and tied embeddings the total is
Narayanan et al. 2021, sec. 5.1, P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), plus the 2h of
the final LayerNorm that formula leaves out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from parcalc.core.choices import Mlp, Norm, Position  # re-exported
from parcalc.errors import InputError
from parcalc.frozen import frozen

if TYPE_CHECKING:  # a model's window, linear attention and Mamba-2 blocks; their modules load where a model has them
    from parcalc.core.attention_window import AttentionWindow
    from parcalc.core.linear_attention import GatedDeltaNet
    from parcalc.core.mamba import Mamba2


@frozen
class MixtureOfExperts:
    """The feed-forward block of a Mixture-of-Experts layer (Shazeer et al. 2017; Fedus et al. 2022).

    Each token goes to `top_k` of `experts` routed experts (FFNs of width `expert_ffn_hidden`,
    the model's MLP kind) chosen by a linear router (hidden x experts), plus `shared_experts`
    that see every token (DeepSeekMoE, Dai et al. 2024), each of width `shared_ffn_hidden`
    (0: the routed experts' width). Which layers are MoE: none of the first
    `first_dense_layers` (DeepSeek-V3: 3), then every `every`-th layer, counting 1-based from
    there (Llama 4 Maverick's interleave step 2: layers 2, 4, 6, ... in 1-based numbering, as
    transformers' `(layer_idx + 1) % interleave_moe_layer_step == 0`); the other layers are
    dense with the model's `ffn_hidden`. capacity_factor: None is dropless (every routed token
    is computed); a number caps each expert at capacity_factor x tokens x top_k / experts.
    router_bias: a per-expert bias of the router (DeepSeek-V3's e_score_correction_bias, an
    nn.Parameter in its modeling code).
    """

    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int = 0
    shared_ffn_hidden: int = 0
    first_dense_layers: int = 0
    every: int = 1
    capacity_factor: float | None = None
    router_bias: bool = False
    source: str = ""
    # Qwen2-MoE scales its shared expert's output by sigmoid(x·w), w a hidden x 1 weight without bias
    # (transformers modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock.shared_expert_gate; Megatron-LM
    # --moe-shared-expert-gate: SharedExpertMLP.gate_weight of 1 x hidden, replicated over TP)
    shared_expert_gate: bool = False
    # the router's top-k weights cast to the router logits' dtype (transformers Qwen3MoeTopKRouter:
    # router_top_value.to(router_logits.dtype)); False: kept in fp32 (MixtralTopKRouter). Decides the dtype of the
    # experts' weighted outputs in a step (parcalc.core.memory_timeline)
    routing_weights_cast: bool = False
    # the top-k weights divided by their sum (Mixtral always; transformers' Qwen2/Qwen3-MoE routers when config.json's
    # norm_topk_prob is true: Qwen3-MoE's is, Qwen1.5-MoE's is not). The division saves its inputs in a step
    # (parcalc.core.memory_timeline); it moves no FLOP count
    top_k_renormalised: bool = True

    def __post_init__(self) -> None:
        if self.experts < 1 or self.top_k < 1 or self.expert_ffn_hidden < 1 or self.every < 1:
            raise InputError("MoE: experts, top_k, expert_ffn_hidden and every must be at least 1")
        if self.top_k > self.experts:
            raise InputError(f"MoE: top_k ({self.top_k}) cannot exceed the number of experts ({self.experts})")
        if self.shared_experts < 0 or self.shared_ffn_hidden < 0 or self.first_dense_layers < 0:
            raise InputError("MoE: shared_experts, shared_ffn_hidden and first_dense_layers must not be negative")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise InputError(f"MoE: capacity_factor must be greater than zero (or absent: dropless), got {self.capacity_factor}")

    def busiest_share(self, imbalance: float) -> float:
        """The busiest rank's tokens over the balanced share: the stated imbalance, capped by the capacity factor."""
        return imbalance if self.capacity_factor is None else min(imbalance, self.capacity_factor)

    @property
    def shared_width(self) -> int:
        return self.shared_ffn_hidden or self.expert_ffn_hidden

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) has experts."""
        return index >= self.first_dense_layers and (index - self.first_dense_layers + 1) % self.every == 0


@frozen
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, sec. 2.1; DeepSeek-V3 sec. 2.1.1).

    Queries go through a low-rank bottleneck of `q_lora_rank` (0: a full query projection, as
    DeepSeek-V2-Lite), keys and values through one of `kv_lora_rank`, which is what the KV cache
    keeps. Each head's query and key have a `qk_nope_head_dim` part from the latent and a
    `qk_rope_head_dim` rotary part (the rotary key is shared by all heads); values have
    `v_head_dim`. The latents are normalised (RMSNorm of width q_lora_rank and kv_lora_rank).
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    source: str = ""

    def __post_init__(self) -> None:
        if min(self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim) < 1 or self.q_lora_rank < 0:
            raise InputError("MLA: kv_lora_rank and the head dimensions must be at least 1, q_lora_rank at least 0")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params(self, hidden: int, heads: int) -> int:
        """Weights of one MLA block (no biases, as DeepSeek-V3's attention_bias = false), norms included.

        q: hidden x q_lora, norm q_lora, q_lora x heads x qk_head_dim (or hidden x heads x qk_head_dim);
        kv: hidden x (kv_lora + rope), norm kv_lora, kv_lora x heads x (nope + v); out: heads x v x hidden
        (transformers' DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
        kv_a_layernorm, kv_b_proj, o_proj).
        """
        if self.q_lora_rank:
            query = hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        else:
            query = hidden * heads * self.qk_head_dim
        key_value = hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        key_value += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return query + key_value + heads * self.v_head_dim * hidden


@frozen
class TransformerModel:
    """A stack of identical transformer layers plus optional embeddings and LM head.

    vocab = 0 means the model has no embedding or output layer (seed 004's homework model).
    dropout = False: a model trained without dropout (Llama), so no dropout masks are kept.
    max_seq_len is the longest sequence the model takes (its position table when positions are
    learned, which is then counted in the parameters); 0 when unknown.
    """

    key: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    mlp: Mlp
    vocab: int
    max_seq_len: int
    tied_embeddings: bool
    position: Position
    norm: Norm
    bias: bool
    source: str
    # Whether training applies dropout (attention probabilities, attention and MLP outputs,
    # embeddings), whose 1-byte masks the activations keep (Korthikanti et al. 2022 sec. 4.1).
    # GPT-style models train with it; Llama-family models have no dropout layer at all.
    dropout: bool = True
    dropout_source: str = ""  # why dropout is on or off for this model (a preset's source, a config.json key)
    # Mixture-of-Experts feed-forward blocks (None: every layer dense) and multi-head latent
    # attention (None: standard multi-head / grouped-query attention).
    moe: MixtureOfExperts | None = None
    mla: LatentAttention | None = None
    # Per-head RMSNorm of the queries and keys (Qwen3: transformers' Qwen3MoeAttention has
    # q_norm = k_norm = Qwen3MoeRMSNorm(head_dim), each a learned weight of head_dim values,
    # shared by all heads). Llama 4's use_qk_norm is a weightless L2 norm (Llama4TextL2Norm): no
    # parameters, so False there.
    qk_norm: bool = False
    # Biases on the query, key and value projections only (Qwen2 / Qwen2-MoE: q_proj, k_proj, v_proj with
    # bias = config.qkv_bias, o_proj and the MLPs without: transformers Qwen2MoeAttention); bias=True has them everywhere
    qkv_bias: bool = False
    # Local attention (parcalc.core.attention_window): a sliding window or chunks of W tokens on some or all
    # layers (Mistral 7B, Gemma 3, gpt-oss, Llama 4); None: every layer attends to the whole prefix
    window: AttentionWindow | None = None
    # Gemma 2 / 3's two more norms per layer: post_attention_layernorm and post_feedforward_layernorm beside
    # input_layernorm and pre_feedforward_layernorm (transformers Gemma3DecoderLayer), hidden-wide each
    post_norms: bool = False
    # gpt-oss: one learned sink logit per head and layer (transformers GptOssAttention.sinks = nn.Parameter(heads))
    attention_sinks: bool = False
    # Multi-token prediction (DeepSeek-V3 report sec. 2.2; Megatron-LM --mtp-num-layers): D sequential modules,
    # each a projection M_k (2h -> h) of two normalised inputs, one transformer block of the model's last layer's
    # kind, and a final norm, sharing the embedding and the output head with the main model
    mtp_layers: int = 0
    mtp_source: str = ""
    # Hybrid models: gated-DeltaNet mixers in place of attention on all but every N-th layer (Qwen3-Next;
    # parcalc.core.linear_attention); None: every layer has softmax attention
    linear_attention: GatedDeltaNet | None = None
    # Gated attention (Qwen3-Next: Qwen3NextAttention.q_proj outputs heads x head_dim x 2, the second half a sigmoid
    # gate on the attention output): the query projection twice as wide
    attention_gate: bool = False
    # Hybrid Mamba-2 models (Nemotron-H; parcalc.core.mamba): every layer is ONE block, a norm and one mixer, by the
    # pattern: 'M' a Mamba-2 mixer, '*' attention, '-' the MLP; None: every layer has attention and an MLP
    mamba: Mamba2 | None = None

    def __post_init__(self) -> None:
        if self.mamba is not None:
            self._check_mamba(self.mamba)
        if self.mtp_layers < 0:
            raise InputError(f"model {self.key}: mtp_layers must not be negative, got {self.mtp_layers}")
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden"):
            if getattr(self, name) < 1:
                raise InputError(f"model {self.key}: {name} must be at least 1, got {getattr(self, name)}")
        if self.vocab < 0 or self.max_seq_len < 0:
            raise InputError(f"model {self.key}: vocab and max_seq_len must not be negative")
        if self.heads % self.kv_heads:
            raise InputError(
                f"model {self.key}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}) "
                "for grouped-query attention"
            )

    @property
    def q_width(self) -> int:
        """Width of the query projection output: heads x head_dim (usually = hidden)."""
        return self.heads * self.head_dim

    @property
    def tp_sites_per_layer(self) -> int:
        """Tensor-parallel collectives a layer runs forward (as many backward; full recomputation replays them): one per
        mixer between a column- and a row-parallel linear, so 2 in a transformer layer (attention, MLP), 1 in a Mamba-2
        hybrid's (parcalc.core.mamba.TP_SITES_PER_BLOCK)."""
        if self.mamba is None:
            return 2
        from parcalc.core.mamba import TP_SITES_PER_BLOCK

        return TP_SITES_PER_BLOCK

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projections: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        if self.mla is not None:
            return self.mla.params(self.hidden, self.heads)
        weights = self.hidden * self.q_width * (2 if self.attention_gate else 1) + 2 * self.hidden * self.kv_width + self.q_width * self.hidden
        biases = (self.q_width + 2 * self.kv_width + self.hidden) if self.bias else (self.q_width + 2 * self.kv_width) if self.qkv_bias else 0
        sinks = self.heads if self.attention_sinks else 0
        return weights + biases + self.qk_norm_params_per_layer + sinks

    @property
    def qk_norm_params_per_layer(self) -> int:
        """Qwen3's q_norm and k_norm: one head_dim-wide weight each (0 without qk_norm)."""
        return 2 * self.norm.params_per_channel * self.head_dim if self.qk_norm else 0

    def ffn_params(self, width: int) -> int:
        """One feed-forward network of the model's MLP kind and the given inner width."""
        matrices = 3 if self.mlp.gated else 2
        weights = matrices * self.hidden * width
        biases = ((matrices - 1) * width + self.hidden) if self.bias else 0
        return weights + biases

    @property
    def mlp_params_per_layer(self) -> int:
        """The feed-forward block of a dense layer (width ffn_hidden)."""
        return self.ffn_params(self.ffn_hidden)

    @property
    def norm_params_per_layer(self) -> int:
        return (4 if self.post_norms else 2) * self.norm.params_per_channel * self.hidden

    @property
    def params_per_layer(self) -> int:
        """A dense layer: attention, dense MLP and the two norms (every layer when moe is None)."""
        return self.attention_params_per_layer + self.mlp_params_per_layer + self.norm_params_per_layer

    # --- Mixture-of-Experts ------------------------------------------------------------------

    def is_moe_layer(self, index: int) -> bool:
        return self.moe is not None and self.moe.is_moe_layer(index)

    def moe_layers_in(self, start: int, end: int) -> int:
        """MoE layers among layers start .. end - 1 (0-based): the j = i - first_dense + 1 >= 1 that
        are multiples of `every` (MixtureOfExperts.is_moe_layer), counted in closed form."""
        if self.moe is None:
            return 0
        first, every = self.moe.first_dense_layers, self.moe.every
        low, high = max(start, first) - first + 1, end - first
        return high // every - (low - 1) // every if high >= low else 0

    @property
    def moe_layers(self) -> int:
        return self.moe_layers_in(0, self.layers)

    @property
    def expert_params(self) -> int:
        """One routed expert's FFN (0 without MoE)."""
        return 0 if self.moe is None else self.ffn_params(self.moe.expert_ffn_hidden)

    @property
    def router_params_per_layer(self) -> int:
        if self.moe is None:
            return 0
        return self.hidden * self.moe.experts + (self.moe.experts if self.moe.router_bias else 0)

    @property
    def shared_expert_params_per_layer(self) -> int:
        """The shared experts of one MoE layer, and Qwen2-MoE's hidden x 1 shared-expert gate."""
        if self.moe is None:
            return 0
        gate = self.hidden if self.moe.shared_expert_gate and self.moe.shared_experts else 0
        return self.moe.shared_experts * self.ffn_params(self.moe.shared_width) + gate

    @property
    def routed_expert_params_per_layer(self) -> int:
        """All routed experts of one MoE layer: what expert parallelism splits."""
        return 0 if self.moe is None else self.moe.experts * self.expert_params

    @property
    def moe_layer_params(self) -> int:
        """An MoE layer: attention, norms, router, shared and routed experts."""
        return (self.attention_params_per_layer + self.norm_params_per_layer + self.router_params_per_layer
                + self.shared_expert_params_per_layer + self.routed_expert_params_per_layer)  # fmt: skip

    def _check_mamba(self, mamba: Mamba2) -> None:
        if len(mamba.pattern) != self.layers:
            raise InputError(f"model {self.key}: the Mamba-2 pattern names {len(mamba.pattern)} layers, the model has {self.layers}")
        if self.moe is not None or self.mla is not None or self.linear_attention is not None or self.mtp_layers:
            raise InputError(f"model {self.key}: a Mamba-2 hybrid with MoE, MLA, gated-DeltaNet or MTP blocks is not modelled")

    def block_params(self, block: str) -> int:
        """One layer of a Mamba-2 hybrid: its norm and its one mixer (NemotronHBlock: norm, mixer, residual)."""
        from parcalc.core.mamba import ATTENTION, MAMBA

        assert self.mamba is not None
        norm = self.norm.params_per_channel * self.hidden
        if block == MAMBA:
            return norm + self.mamba.params(self.hidden, self.bias)
        return norm + (self.attention_params_per_layer if block == ATTENTION else self.mlp_params_per_layer)

    def layer_params(self, index: int) -> int:
        if self.mamba is not None:
            return self.block_params(self.mamba.block(index))
        layer = self.moe_layer_params if self.is_moe_layer(index) else self.params_per_layer
        return layer + (self.linear_mixer_delta if self.linear_attention is not None and self.linear_attention.is_linear(index) else 0)

    def layers_params(self, start: int, end: int) -> int:
        """Parameters of layers start .. end - 1 (0-based)."""
        if self.mamba is not None:
            from parcalc.core.mamba import ATTENTION, MAMBA, MLP

            n = self.mamba.blocks_in(start, end)
            return n.mamba * self.block_params(MAMBA) + n.attention * self.block_params(ATTENTION) + n.mlp * self.block_params(MLP)
        moe = self.moe_layers_in(start, end)
        return moe * self.moe_layer_params + (end - start - moe) * self.params_per_layer + self.linear_layers_in(start, end) * self.linear_mixer_delta

    # --- Hybrid (linear-attention) layers ------------------------------------------------------

    def linear_layers_in(self, start: int, end: int) -> int:
        """Layers among start .. end - 1 (0-based) whose mixer is a gated DeltaNet (0 without one)."""
        return 0 if self.linear_attention is None else self.linear_attention.linear_layers_in(start, end)

    @property
    def linear_mixer_delta(self) -> int:
        """A linear-attention layer's parameters less a full-attention layer's: its mixer for the attention block."""
        return 0 if self.linear_attention is None else self.linear_attention.params(self.hidden) - self.attention_params_per_layer

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: routed experts count top_k times, not experts times."""
        if self.moe is None:
            return self.total_params
        idle = self.moe.experts - self.moe.top_k
        return self.total_params - self.moe_layers * idle * self.expert_params

    @property
    def embedding_params(self) -> int:
        """Token embeddings, learned positions and the final norm (0 without a vocabulary)."""
        if self.vocab == 0:
            return 0
        positions = self.max_seq_len * self.hidden if self.position is Position.LEARNED else 0
        final_norm = self.norm.params_per_channel * self.hidden
        return self.vocab * self.hidden + positions + final_norm

    @property
    def lm_head_params(self) -> int:
        """The output projection to the vocabulary, when not tied to the token embeddings."""
        return 0 if self.vocab == 0 or self.tied_embeddings else self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """The main model's parameters (embeddings, layers, head), without the multi-token-prediction modules
        (DeepSeek-V3's 671B; its MTP module is the 14B more of the 685B checkpoint): trained_params adds them."""
        return self.layers_params(0, self.layers) + self.embedding_params + self.lm_head_params

    # --- Multi-token prediction --------------------------------------------------------------

    @property
    def mtp_layer_is_moe(self) -> bool:
        """An MTP module's block is of the kind of the model's last layer (DeepSeek-V3's: an MoE layer;
        Megatron-LM get_gpt_mtp_block_spec takes the decoder's layer spec, its MoE spec when the model has experts)."""
        return self.is_moe_layer(self.layers - 1)

    @property
    def mtp_projection(self) -> tuple[int, int]:
        """An MTP module's projection M_k (eh_proj), (in, out) features: the concatenation [RMSNorm(h); RMSNorm(Emb)]
        of 2h onto h, no bias (DeepSeek-V3 report eq. (21), M_k of d x 2d; Megatron-LM MultiTokenPredictionLayer.eh_proj)."""
        return 2 * self.hidden, self.hidden

    @property
    def mtp_norm_params(self) -> int:
        """An MTP module's norms: enorm and hnorm on its two inputs, final_layernorm on its output."""
        return 3 * self.norm.params_per_channel * self.hidden

    @property
    def mtp_module_params(self) -> int:
        """One MTP module without the shared embedding and head: the norms of its two inputs (enorm, hnorm),
        the projection M_k of 2h -> h without bias (eh_proj), the block, and its final norm (Megatron-LM
        multi_token_prediction.py MultiTokenPredictionLayer: enorm, hnorm, eh_proj, transformer_layer,
        final_layernorm; DeepSeek-V3's checkpoint layer 61: enorm, hnorm, eh_proj, shared_head.norm)."""
        block = self.moe_layer_params if self.mtp_layer_is_moe else self.params_per_layer
        features_in, features_out = self.mtp_projection
        return self.mtp_norm_params + features_in * features_out + block

    @property
    def mtp_params(self) -> int:
        return self.mtp_layers * self.mtp_module_params

    @property
    def trained_params(self) -> int:
        """Every parameter the optimizer updates: the main model and its MTP modules."""
        return self.total_params + self.mtp_params

    # --- Local attention ---------------------------------------------------------------------

    def local_layers_in(self, start: int, end: int) -> int:
        """Layers among start .. end - 1 (0-based) that attend within a window (0 without one)."""
        return 0 if self.window is None else self.window.local_layers_in(start, end)


def _hash_once(hash_fields: Callable[[TransformerModel], int]) -> Callable[[TransformerModel], int]:
    """A model's hash kept on the (immutable) instance once computed: every lru_cache of the core keyed on the model
    (stage_moe_layers, layer_passes, the fullest stage, ...) hashed its fields and nested fields again on each call,
    some 12,800 times in the search of DeepSeek-V3 on 2,048 GPUs (benchmarks/fit_search.py). Equality is unchanged."""

    def __hash__(self: TransformerModel) -> int:
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash_fields(self)
            object.__setattr__(self, "_hash", cached)
        return cached

    __hash__.__qualname__ = "TransformerModel.__hash__"
    return __hash__


TransformerModel.__hash__ = _hash_once(TransformerModel.__hash__)  # type: ignore[method-assign, assignment]
