"""The operations of one transformer layer's forward pass, with FLOPs and bytes moved.

This is the table of seed 004, question 2 (Q/K/V projections, scores, softmax, score x V,
output projection, MLP up, activation, MLP down), generalised to grouped-query attention
(K and V of width kv_heads x head_dim) and gated MLPs (gate and up projections).

Matmuls count 2 FLOP per multiply-add. Element-wise operations count the FLOP per element
named in ELEMENTWISE_FLOP below, a convention (exp counted as 1 FLOP) since hardware does not
count them the same way. Bytes follow the minimum-traffic convention of core.intensity.
Norms, residual adds, biases and dropout are not listed: they are element-wise, memory-bound,
and under 1 % of the layer's FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.core.model import Mlp, TransformerModel
from parcalc.errors import InputError

# FLOP per element of the element-wise operations, by convention:
#   scaled softmax: scale, max, subtract, exp, sum, divide = 6
#   relu: one compare; gelu (tanh form): x^3, two multiplies, add, tanh, add, two multiplies = 8
#   swiglu: silu = x / (1 + exp(-x)) is negate, exp, add, divide = 4, times the up branch = 5
#   geglu: gelu (8) times the up branch = 9
ELEMENTWISE_FLOP: dict[str, int] = {"softmax": 6, "relu": 1, "gelu": 8, "swiglu": 5, "geglu": 9}


@dataclass(frozen=True)
class LayerOp:
    """One operation of a layer's forward pass, for the whole micro-batch.

    kind: "matmul" or "elementwise"; flops in FLOP, bytes in bytes; batch/m/k/n describe a
    matmul (batch independent products of m x k by k x n), elements an element-wise op.
    """

    key: str
    name: str
    kind: str
    flops: float
    bytes: float
    shape: str
    batch: int = 1
    m: int = 0
    k: int = 0
    n: int = 0
    elements: int = 0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def _matmul(key: str, name: str, m: int, k: int, n: int, s: float, batch: int = 1, shape: str = "",
            a_elements: int | None = None, b_elements: int | None = None) -> LayerOp:  # fmt: skip
    """Y = XW; `a_elements` / `b_elements` override the operand sizes when an operand is shared
    across the batch (K and V shared by the query heads of a group in GQA)."""
    a = batch * m * k if a_elements is None else a_elements
    b = batch * k * n if b_elements is None else b_elements
    return LayerOp(
        key=key, name=name, kind="matmul", flops=2.0 * batch * m * k * n, bytes=s * (a + b + batch * m * n),
        shape=shape or f"[{m}×{k}]·[{k}×{n}]" + (f" ×{batch}" if batch > 1 else ""),
        batch=batch, m=m, k=k, n=n,
    )  # fmt: skip


def _elementwise(key: str, name: str, elements: int, flop_per_element: int, s: float, reads: int, shape: str) -> LayerOp:
    """`reads` input tensors of `elements` each are read and one is written."""
    return LayerOp(
        key=key, name=name, kind="elementwise", flops=float(flop_per_element * elements),
        bytes=s * elements * (reads + 1), shape=shape, elements=elements,
    )  # fmt: skip


def transformer_layer_ops(model: TransformerModel, batch: int, seq_len: int, bytes_per_element: float) -> tuple[LayerOp, ...]:
    """Forward-pass operations of one layer for `batch` sequences of `seq_len` tokens."""
    if batch < 1 or seq_len < 1:
        raise InputError(f"--batch and --seq-len must be at least 1, got {batch} and {seq_len}")
    s = bytes_per_element
    tokens = batch * seq_len
    d, f, hd = model.hidden, model.ffn_hidden, model.head_dim
    heads, kv = model.heads, model.kv_heads
    scores = batch * heads * seq_len * seq_len
    activation = model.mlp.value
    ops = [
        _matmul("q_proj", "Q = x·W^Q", tokens, d, model.q_width, s),
        _matmul("k_proj", "K = x·W^K", tokens, d, model.kv_width, s),
        _matmul("v_proj", "V = x·W^V", tokens, d, model.kv_width, s),
        _matmul(
            "scores", "Q_i·K_i^T", seq_len, hd, seq_len, s, batch=batch * heads,
            shape=f"[{seq_len}×{hd}]·[{hd}×{seq_len}] ×{batch * heads}",
            b_elements=batch * kv * hd * seq_len,
        ),
        _elementwise("softmax", "softmax(·/√d)", scores, ELEMENTWISE_FLOP["softmax"], s, 1,
                     f"[{seq_len}×{seq_len}] ×{batch * heads}"),
        _matmul(
            "context", "Z_i = score_i·V_i", seq_len, seq_len, hd, s, batch=batch * heads,
            shape=f"[{seq_len}×{seq_len}]·[{seq_len}×{hd}] ×{batch * heads}",
            b_elements=batch * kv * seq_len * hd,
        ),
        _matmul("out_proj", "Out = Z·W^O", tokens, model.q_width, d, s),
    ]  # fmt: skip
    if model.mlp.gated:
        ops.append(_matmul("mlp_gate", "G = Out·W^gate", tokens, d, f, s))
    ops.append(_matmul("mlp_up", "A = Out·W^1", tokens, d, f, s))
    reads = 2 if model.mlp.gated else 1
    label = {Mlp.RELU: "relu(A)", Mlp.GELU: "gelu(A)", Mlp.SWIGLU: "silu(G)⊙A", Mlp.GEGLU: "gelu(G)⊙A"}[model.mlp]
    ops.append(_elementwise("activation", label, tokens * f, ELEMENTWISE_FLOP[activation], s, reads, f"[{tokens}×{f}]"))
    ops.append(_matmul("mlp_down", "x' = A'·W^2", tokens, f, d, s))
    return tuple(ops)


def lm_head_op(model: TransformerModel, batch: int, seq_len: int, bytes_per_element: float) -> LayerOp | None:
    """The projection to vocabulary logits, once per model (None without a vocabulary)."""
    if model.vocab == 0:
        return None
    return _matmul("lm_head", "logits = x·W^vocab", batch * seq_len, model.hidden, model.vocab, bytes_per_element)
