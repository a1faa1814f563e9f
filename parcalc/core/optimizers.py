"""Optimizer state per parameter: how many parameter-sized state tensors each optimizer keeps, and
in how many bytes per element, each with its source.

- adam / adamw: exp_avg and exp_avg_sq, two states (Kingma & Ba 2015; torch/optim/adam.py,
  Adam._init_group).
- sgd: none; sgd-momentum: one momentum_buffer (torch/optim/sgd.py keeps it only when momentum != 0).
- lion: one momentum state, exp_avg (Chen et al. 2023, "Symbolic Discovery of Optimization
  Algorithms", Algorithm 2: "only keeps track of the momentum").
- adam-8bit (bitsandbytes Adam8bit): state1 and state2 in uint8 plus one fp32 absmax per block
  and state, blocks of 2048 elements: `blocks = n // 2048` (+1 for a remainder),
  `state["absmax1"] = torch.zeros((blocks,), dtype=torch.float32)` (bitsandbytes-foundation/
  bitsandbytes bitsandbytes/optim/optimizer.py, Optimizer2State.init_state, commit 06029dd6);
  later releases quantise in blocks of 256. Per parameter 2 x (1 + 4/2048) = 2.00390625 bytes.
  Tensors under min_8bit_size = 4096 elements keep fp32 states there; parcalc counts every
  tensor at 8 bits (norm weights and biases are under 0.1 % of a transformer's parameters).
- adafactor: the second moment of an r x c matrix factored into a row and a column statistic,
  r + c values instead of r c (Shazeer & Stern 2018, "Adafactor", sec. 3 and Algorithm 4); vectors
  keep a full second moment; no first moment (beta1 = 0, their default; torch.optim.Adafactor
  keeps row_var / col_var for tensors of 2 or more dimensions and `variance` for the others,
  torch/optim/_adafactor.py, Adafactor._init_group). parcalc counts r + c per matrix exactly from
  the layer's shapes (`adafactor_state_ratio`).
- muon: one momentum buffer for the 2-D weights of the hidden layers, AdamW (two states) for the
  embeddings, the LM head, norms and biases (Jordan et al. 2024, "Muon: An optimizer for hidden
  layers in neural networks"; Liu et al. 2025, "Muon is Scalable for LLM Training", sec. 2 and
  3: "AdamW for ... embedding, output, RMSNorm"). The mix is counted from the shapes
  (`muon_state_ratio`).

Every state is kept in the state precision (fp32 beside a master copy, as ZeRO counts K = 12 for
Adam), except adam-8bit's, which are 8-bit whatever the parameters are.
"""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.core.choices import Norm, Optimizer, Position
from parcalc.core.model import TransformerModel

BNB_BLOCK = 2048  # bitsandbytes Optimizer2State.init_state, commit 06029dd6
BNB_ABSMAX_BYTES = 4.0
BNB_SOURCE = ("bitsandbytes-foundation/bitsandbytes bitsandbytes/optim/optimizer.py @06029dd6, Optimizer2State.init_state: uint8 "
              "state1/state2 and fp32 absmax1/absmax2 per block of 2048 (later releases: 256)")  # fmt: skip
ADAM_SOURCE = "Kingma & Ba 2015; torch/optim/adam.py Adam._init_group (exp_avg, exp_avg_sq)"
SGD_SOURCE = "torch/optim/sgd.py: a momentum_buffer only when momentum != 0"
LION_SOURCE = "Chen et al. 2023, 'Symbolic Discovery of Optimization Algorithms', Algorithm 2 (one momentum state)"
ADAFACTOR_SOURCE = ("Shazeer & Stern 2018, 'Adafactor', sec. 3 (factored second moment: r + c values per r x c matrix), beta1 = 0; "
                    "torch/optim/_adafactor.py Adafactor._init_group (row_var, col_var; variance for vectors)")  # fmt: skip
PRECISION_AWARE = ("Megatron-LM megatron/training/arguments.py (d98e8a6) lines 3667-3675: --use-precision-aware-optimizer with "
                   "--exp-avg-dtype and --exp-avg-sq-dtype (fp32, fp16, bf16, fp8) keeps Adam's moments in that dtype beside the fp32 "
                   "main parameters (megatron/core/optimizer/optimizer_config.py line 203, OptimizerConfig.exp_avg_dtype; fp32 "
                   "unless precision-aware, line 476)")  # fmt: skip
MUON_SOURCE = ("Jordan et al. 2024, 'Muon' (momentum buffer for hidden 2-D weights); Liu et al. 2025, 'Muon is Scalable for LLM "
               "Training', sec. 2-3 (AdamW for embeddings, output head, norms)")  # fmt: skip


@dataclass(frozen=True)
class OptimizerState:
    """State tensors per parameter (a mean over the model where it differs between tensors) and
    bytes per state element (None: the state precision of the training)."""

    states: float
    element_bytes: float | None
    text: str
    source: str


def weight_shapes(model: TransformerModel) -> tuple[list[tuple[int, int, bool]], int]:
    """The model's weight matrices as (rows, cols, hidden) with `hidden` true for a transformer
    layer's 2-D weight (Megatron-LM's fused layout: QKV, output projection, fc1 (gate and up
    fused), fc2), and the count of vector parameters (norm weights and biases). Dense layers."""
    h, q, kv, f = model.hidden, model.q_width, model.kv_width, model.ffn_hidden
    up = 2 * f if model.mlp.gated else f
    layer = [(q + 2 * kv, h, True), (h, q, True), (up, h, True), (h, f, True)]
    vectors = model.norm_params_per_layer + ((q + 2 * kv + h + up + h) if model.bias else 0)
    matrices = layer * model.layers
    total_vectors = vectors * model.layers
    if model.vocab:
        matrices.append((model.vocab, h, False))
        if not model.tied_embeddings:
            matrices.append((model.vocab, h, False))
        if model.position is Position.LEARNED:
            matrices.append((model.max_seq_len, h, False))
        if model.norm is not Norm.NONE:
            total_vectors += model.norm.params_per_channel * h
    return matrices, total_vectors


def adafactor_state_ratio(model: TransformerModel) -> float:
    """State elements per parameter of Adafactor: sum of (r + c) over the matrices plus every vector
    element, over the parameters of those shapes (Shazeer & Stern 2018, sec. 3)."""
    matrices, vectors = weight_shapes(model)
    params = sum(r * c for r, c, _ in matrices) + vectors
    return (sum(r + c for r, c, _ in matrices) + vectors) / params if params else 0.0


def muon_state_ratio(model: TransformerModel) -> float:
    """State tensors per parameter of Muon: 1 for the hidden 2-D weights, 2 (AdamW) for the rest."""
    matrices, vectors = weight_shapes(model)
    hidden = sum(r * c for r, c, is_hidden in matrices if is_hidden)
    params = sum(r * c for r, c, _ in matrices) + vectors
    return (hidden + 2 * (params - hidden)) / params if params else 1.0


def optimizer_state(optimizer: Optimizer, model: TransformerModel | None = None) -> OptimizerState:
    """How many state tensors per parameter `optimizer` keeps, and their element size (None: the
    training's state precision). Without a model, Adafactor's and Muon's shares take their
    limits for large matrices (0 and 1 states)."""
    if optimizer in (Optimizer.ADAM, Optimizer.ADAMW):
        return OptimizerState(2.0, None, "2 states (exp_avg, exp_avg_sq)", ADAM_SOURCE)
    if optimizer is Optimizer.SGD:
        return OptimizerState(0.0, None, "no state", SGD_SOURCE)
    if optimizer is Optimizer.SGD_MOMENTUM:
        return OptimizerState(1.0, None, "1 state (momentum_buffer)", SGD_SOURCE)
    if optimizer is Optimizer.LION:
        return OptimizerState(1.0, None, "1 state (momentum)", LION_SOURCE)
    if optimizer is Optimizer.ADAM_8BIT:
        per = 1.0 + BNB_ABSMAX_BYTES / BNB_BLOCK
        return OptimizerState(2.0, per, f"2 states of 8 bits + one fp32 absmax per {BNB_BLOCK} elements ({per:g} B each)", BNB_SOURCE)
    if optimizer is Optimizer.ADAFACTOR:
        ratio = adafactor_state_ratio(model) if model is not None else 0.0
        how = "from the model's shapes" if model is not None else "the large-matrix limit, no model given"
        return OptimizerState(ratio, None, f"factored second moment: {ratio:.6f} state elements per parameter ({how})", ADAFACTOR_SOURCE)
    ratio = muon_state_ratio(model) if model is not None else 1.0
    return OptimizerState(ratio, None, f"momentum for hidden 2-D weights, AdamW for the rest: {ratio:.6f} states per parameter",
                          MUON_SOURCE)  # fmt: skip
