"""Ground truth for `--recompute-modules` (Megatron-LM's recompute_modules) against real PyTorch (CPU, torch 2.13).

tests/ground_truth/tiny_megatron.py is one Megatron-Core layer (Transformer Engine spec) in small, dense or
MoE, with Megatron's checkpoints around the modules named: reentrant torch.utils.checkpoint for core_attn,
mlp, moe and shared_experts (Megatron's tensor_parallel.checkpoint is that autograd Function), Megatron's
CheckpointWithoutOutput for layernorm and moe_act. What autograd keeps once the forward has run (distinct
storages, a discarded output at 0 B) must equal parcalc.core.activations' layer bytes for the same modules,
exactly, beside the LayerNorms' fp32 mean and rstd (b x s values each), which parcalc leaves out as
Korthikanti et al. do; and FlopCounterMode's forward + backward FLOPs must exceed the plain layer's by exactly
parcalc's recomputed FLOPs for that layer kind (parcalc.core.flops, the F_re terms).
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, Recompute, layer_activations
from parcalc.core.flops import training_flops
from parcalc.core.model import MixtureOfExperts, Mlp, Norm, Position, TransformerModel

from .tiny_megatron import MegatronConfig, MegatronLayer, kept_storages

BATCH, SEQ = 2, 12
C = MegatronConfig()
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# layer 0 dense, layer 1 MoE (first_dense_layers 1), as DeepSeek-V3's first three dense layers before its MoE layers
MODEL = TransformerModel(
    key="tiny-megatron", name="tiny Megatron layer", layers=2, hidden=C.hidden, heads=C.heads, kv_heads=C.heads,
    head_dim=C.hidden // C.heads, ffn_hidden=C.ffn, mlp=Mlp.SWIGLU, vocab=0, max_seq_len=0, tied_embeddings=True,
    position=Position.ROPE, norm=Norm.LAYERNORM, bias=False, source="tests/ground_truth/tiny_megatron.py", dropout=False,
    moe=MixtureOfExperts(C.experts, C.top_k, C.expert_ffn, shared_experts=1, shared_ffn_hidden=C.shared_ffn, first_dense_layers=1),
)  # fmt: skip
CASES = [
    pytest.param(False, (), id="dense-none"),
    pytest.param(False, ("core_attn",), id="dense-core_attn"),
    pytest.param(False, ("mlp",), id="dense-mlp"),
    pytest.param(False, ("core_attn", "mlp"), id="dense-core_attn-mlp"),
    pytest.param(True, (), id="moe-none"),
    pytest.param(True, ("core_attn",), id="moe-core_attn"),
    pytest.param(True, ("layernorm",), id="moe-layernorm"),
    pytest.param(True, ("moe_act",), id="moe-moe_act"),
    pytest.param(True, ("shared_experts",), id="moe-shared_experts"),
    pytest.param(True, ("moe",), id="moe-moe"),
    pytest.param(True, ("layernorm", "moe_act", "shared_experts"), id="moe-layernorm-moe_act-shared"),
    pytest.param(True, ("mlp",), id="moe-mlp-skips-moe-layers"),  # Megatron: 'mlp' recomputes dense MLPs only
]


def config(modules: tuple[str, ...], e: float) -> ActivationConfig:
    return ActivationConfig(BATCH, SEQ, dropout=False, activation_bytes=e,
                            recompute=Recompute.SELECTIVE if modules else Recompute.NONE, recompute_modules=modules or None)  # fmt: skip


def measure(moe: bool, modules: tuple[str, ...], dtype: torch.dtype) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    torch.manual_seed(0)
    layer = MegatronLayer(C, moe, modules, dtype=dtype)
    return kept_storages(layer, torch.randn(BATCH, SEQ, C.hidden, dtype=dtype, requires_grad=True))


def separate_norms(moe: bool, modules: tuple[str, ...]) -> int:
    """LayerNorms that run with autograd in the forward (and keep mean and rstd): the input norm always;
    the pre-MLP norm unless a checkpoint holds it (dense: inside 'mlp'; MoE: 'layernorm')."""
    return 1 + (("layernorm" not in modules) if moe else ("mlp" not in modules))


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
@pytest.mark.parametrize(("moe", "modules"), CASES)
def test_kept_bytes_equal_parcalc(moe: bool, modules: tuple[str, ...], dtype: str) -> None:
    found = measure(moe, modules, DTYPES[dtype])
    statistics = [n for shape, _, n in found if shape == (BATCH, SEQ, 1)]
    assert len(statistics) == 2 * separate_norms(moe, modules)  # mean and rstd of each norm that ran with autograd
    e = float(torch.tensor([], dtype=DTYPES[dtype]).element_size())
    parcalc = layer_activations(MODEL, config(modules, e), moe_layer=moe).per_layer.value
    assert sum(n for _, _, n in found) - sum(statistics) == parcalc


def test_the_savings_by_hand() -> None:
    """Per token, fp32 (e = 4), b s = 24 tokens: 'mlp' drops the fused norm's output (h = 32) and the SwiGLU's
    [gate, up] (2 f = 96) and product (f = 48): 176 x 4 x 24 = 16,896 B; 'core_attn' drops the softmax output
    (a s^2 b = 4 x 144 x 2 = 1,152 values): 4,608 B; 'moe_act' drops the experts' product (k f = 80): 7,680 B;
    'layernorm' the router's input (h = 32): 3,072 B; 'shared_experts' their [gate, up] and product (3 x 24): 6,912 B."""
    def saved(moe: bool, modules: tuple[str, ...]) -> float:
        return layer_activations(MODEL, config(modules, 4.0), moe_layer=moe).per_layer.value

    assert saved(False, ()) - saved(False, ("mlp",)) == 176 * 4 * 24 == 16_896
    assert saved(False, ()) - saved(False, ("core_attn",)) == 4 * 144 * 2 * 4 == 4_608
    assert saved(True, ()) - saved(True, ("moe_act",)) == 2 * 40 * 4 * 24 == 7_680
    assert saved(True, ()) - saved(True, ("layernorm",)) == 32 * 4 * 24 == 3_072
    assert saved(True, ()) - saved(True, ("shared_experts",)) == 3 * 24 * 4 * 24 == 6_912


def forward_backward_flops(moe: bool, modules: tuple[str, ...]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    layer = MegatronLayer(C, moe, modules)
    x = torch.randn(BATCH, SEQ, C.hidden, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        layer(x).float().square().sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(("moe", "modules"), [c for c in CASES if c.values[1]])
def test_replayed_flops_equal_parcalc(moe: bool, modules: tuple[str, ...]) -> None:
    """The checkpoints' replays run in the backward: FlopCounterMode's extra FLOPs over the plain layer are
    parcalc's recomputed FLOPs of that layer kind (non-causal: the tiny layer computes the whole score matrix)."""
    extra = forward_backward_flops(moe, modules) - forward_backward_flops(moe, ())
    counted = training_flops(MODEL, BATCH, SEQ, recompute="selective", recompute_modules=modules, causal=False)
    if modules == ("core_attn",):  # the default list: L x F_core, the same in both layer kinds
        per_layer = counted.recomputed.value / MODEL.layers
    else:
        per_layer = counted.recomputed.term("F_re_m" if moe else "F_re_d").value
    assert extra == per_layer


def test_the_replay_gives_the_same_gradients() -> None:
    """Every checkpoint replays what it dropped: the input gradient with all modules equals the plain layer's."""
    grads = []
    for modules in ((), ("core_attn", "layernorm", "moe_act", "shared_experts")):
        torch.manual_seed(0)
        layer = MegatronLayer(C, True, modules, dtype=torch.float64)
        x = torch.randn(BATCH, SEQ, C.hidden, dtype=torch.float64, requires_grad=True)
        layer(x).square().sum().backward()
        grads.append((x.grad, layer.router.weight.grad, layer.fc1.grad, layer.norm2.weight.grad))
    for plain, again in zip(*grads, strict=True):
        torch.testing.assert_close(plain, again)
