"""Ground truth: parcalc's activation bytes, FLOPs and model states against real PyTorch (CPU).

A small GPT (tests/ground_truth/tiny_gpt.py) runs one training step; the test measures
- the bytes of the distinct storages autograd saves for backward, per layer, for the embeddings and
  for the head (torch.autograd.graph.saved_tensors_hooks), with and without checkpointing, in
  fp32 and bf16, and compares them with parcalc.core.activations for the same layer: equal where
  the layer is the textbook one, and every other byte named (LayerNorm's mean and rstd, the
  unfused SwiGLU's silu output, position ids, targets);
- FLOPs with torch.utils.flop_counter.FlopCounterMode, forward and forward + backward, against
  parcalc.core.flops.training_flops (and with checkpointing, against the hardware FLOPs of full
  recomputation);
- the bytes of parameters, gradients and optimizer states after a real optimizer step, against
  parcalc.core.memory.model_states.

Runs in CI (torch==2.13.0, CPU wheel), in a few seconds.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, Recompute, embedding_activations, layer_activations, output_activations
from parcalc.core.flops import training_flops
from parcalc.core.memory import Optimizer, Precision, model_states, state_bytes
from parcalc.core.model import Mlp, Norm, Position, TransformerModel

from .tiny_gpt import SavedBytes, TinyConfig, TinyGpt, counted_flops, sample_batch, saved_activation_bytes

BATCH, SEQ = 2, 24
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def shape_of(config: TinyConfig) -> TransformerModel:
    """parcalc's description of the TinyGpt: GPT-2 layout, tied head, learned positions."""
    return TransformerModel(
        key="tiny-gpt", name="tiny GPT", layers=config.layers, hidden=config.hidden, heads=config.heads,
        kv_heads=config.kv_heads, head_dim=config.head_dim, ffn_hidden=config.ffn, mlp=Mlp(config.mlp), vocab=config.vocab,
        max_seq_len=config.max_seq, tied_embeddings=True, position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True,
        source="tests/ground_truth/tiny_gpt.py",
    )  # fmt: skip


def measure(config: TinyConfig, dtype: torch.dtype, checkpoint: bool = False) -> SavedBytes:
    torch.manual_seed(0)
    model = TinyGpt(config, dtype=dtype, checkpoint_layers=checkpoint)
    tokens, targets = sample_batch(config, BATCH, SEQ)
    return saved_activation_bytes(model, tokens, targets)


def activation_config(config: TinyConfig, dtype: torch.dtype, **options) -> ActivationConfig:
    element = torch.tensor([], dtype=dtype).element_size()
    return ActivationConfig(BATCH, SEQ, activation_bytes=float(element), dropout=config.dropout > 0, **options)


def norm_statistics(saved: SavedBytes, region: str) -> list[int]:
    """Bytes of the (b, s, 1) tensors saved in a region: LayerNorm's mean and rstd, one pair per norm."""
    return [n for r, shape, _dtype, n in saved.tensors if r == region and shape == (BATCH, SEQ, 1)]


# ---------------------------------------------------------------------------------------------
# Activations per layer


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
@pytest.mark.parametrize(
    ("variant", "config", "options", "extra"),
    [
        # Korthikanti et al.'s layer (MHA, 4h GELU MLP, dropout): parcalc's count is exact; the only
        # extra bytes are LayerNorm's mean and rstd, which the paper leaves out.
        pytest.param("textbook", TinyConfig(), {}, "none", id="textbook"),
        # grouped-query attention: K and V of kv_heads x head_dim, kept without repetition
        pytest.param("gqa", TinyConfig(heads=8, kv_heads=2), {}, "none", id="gqa"),
        # ReLU keeps its output once: the relu backward and the down projection share it
        pytest.param("relu", TinyConfig(mlp="relu"), {}, "none", id="relu"),
        # unfused SwiGLU also keeps silu(gate), s x b x f elements, beside Megatron's fused three
        pytest.param("swiglu", TinyConfig(mlp="swiglu"), {}, "silu_output", id="swiglu"),
        # no dropout: no masks, the softmax output feeds score x V itself
        pytest.param("no-dropout", TinyConfig(dropout=0.0), {}, "none", id="no-dropout"),
        # PyTorch's fused attention (CPU flash kernel): no s x s tensor, an fp32 log-sum-exp per row
        pytest.param("flash", TinyConfig(dropout=0.0, attention="sdpa"), {"flash_attention": True}, "none", id="flash"),
    ],
)
def test_saved_activations_per_layer(dtype: str, variant: str, config: TinyConfig, options: dict, extra: str) -> None:
    saved = measure(config, DTYPES[dtype])
    predicted = layer_activations(shape_of(config), activation_config(config, DTYPES[dtype], **options)).per_layer.value
    for index, measured in enumerate(saved.layers):
        stats = norm_statistics(saved, f"layer {index}")
        assert len(stats) == 4  # mean and rstd of each of the two LayerNorms
        explained = sum(stats)
        if extra == "silu_output":
            explained += BATCH * SEQ * config.ffn * torch.tensor([], dtype=DTYPES[dtype]).element_size()
        assert measured == predicted + explained, (variant, index, saved.tensors)


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
def test_full_recomputation_keeps_the_layer_input(dtype: str) -> None:
    config = TinyConfig()
    saved = measure(config, DTYPES[dtype], checkpoint=True)
    predicted = layer_activations(shape_of(config), activation_config(config, DTYPES[dtype], recompute=Recompute.FULL))
    # 2 sbh in bf16, 4 sbh in fp32: the checkpoint's save_for_backward of the layer input, nothing else
    assert saved.layers == [predicted.per_layer.value] * config.layers
    assert predicted.per_layer.value == BATCH * SEQ * config.hidden * torch.tensor([], dtype=DTYPES[dtype]).element_size()


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
def test_embedding_and_head_activations(dtype: str) -> None:
    config = TinyConfig()
    saved = measure(config, DTYPES[dtype])
    model, act = shape_of(config), activation_config(config, DTYPES[dtype])
    # embeddings: int64 token ids (8 s b) and the dropout mask (s b h) as parcalc counts them, plus the
    # int64 position ids (8 s) that learned positions index with
    assert saved.embedding == embedding_activations(model, act, 1).value + 8 * SEQ
    # head: final norm input and LM-head input (2 x e s b h) and fp32 logits (4 s b V) as parcalc counts
    # them, plus the final norm's mean and rstd, the int64 targets (8 s b) and the cross-entropy's fp32
    # total_weight scalar (4 bytes)
    stats = norm_statistics(saved, "head")
    assert len(stats) == 2
    assert saved.head == output_activations(model, act, 1).value + sum(stats) + 8 * SEQ * BATCH + 4


# ---------------------------------------------------------------------------------------------
# FLOPs


@pytest.mark.parametrize(
    ("config", "checkpoint", "recompute"),
    [
        pytest.param(TinyConfig(), False, "none", id="textbook"),
        pytest.param(TinyConfig(heads=8, kv_heads=2, mlp="swiglu"), False, "none", id="gqa-swiglu"),
        # reentrant checkpointing runs each layer's forward again inside the backward: hardware FLOPs
        pytest.param(TinyConfig(), True, "full", id="full-recompute"),
    ],
)
def test_flop_counter_matches_the_exact_count(config: TinyConfig, checkpoint: bool, recompute: str) -> None:
    torch.manual_seed(0)
    model = TinyGpt(config, checkpoint_layers=checkpoint)
    tokens, targets = sample_batch(config, BATCH, SEQ)
    measured = counted_flops(model, tokens, targets)
    predicted = training_flops(shape_of(config), BATCH, SEQ, recompute=recompute)
    assert measured.forward == predicted.forward.value
    # forward + backward: the backward of every matmul is two matmuls of its size
    assert measured.forward_backward == predicted.hardware.value
    assert predicted.model.value == 3 * predicted.forward.value


# ---------------------------------------------------------------------------------------------
# Model states after a real optimizer step


def _step(model: TinyGpt, optimizer: torch.optim.Optimizer, config: TinyConfig, masters: list | None = None) -> None:
    tokens, targets = sample_batch(config, BATCH, SEQ)
    model(tokens, targets).backward()
    if masters is not None:  # mixed precision: fp32 master weights take the 16-bit gradients
        for master, param in zip(masters, model.parameters(), strict=True):
            master.grad = param.grad.float()
    optimizer.step()
    if masters is not None:
        optimizer.zero_grad(set_to_none=True)  # the fp32 copy of the gradient is transient
        with torch.no_grad():
            for master, param in zip(masters, model.parameters(), strict=True):
                param.copy_(master)


def _state_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    """(bytes of per-parameter states, bytes of the scalar `step` tensors) of a torch optimizer."""
    states = steps = 0
    for state in optimizer.state.values():
        for name, value in state.items():
            if not isinstance(value, torch.Tensor):
                continue
            if name == "step":
                steps += value.nbytes
            else:
                states += value.nbytes
    return states, steps


@pytest.mark.parametrize(
    ("precision", "optimizer_name", "dtype"),
    [
        pytest.param(Precision.FP32, Optimizer.ADAMW, torch.float32, id="fp32-adamw"),
        pytest.param(Precision.BF16, Optimizer.ADAMW, torch.bfloat16, id="bf16-adamw"),
        pytest.param(Precision.MIXED_BF16, Optimizer.ADAMW, torch.bfloat16, id="mixed-bf16-adamw"),
        pytest.param(Precision.FP32, Optimizer.SGD_MOMENTUM, torch.float32, id="fp32-sgd-momentum"),
    ],
)
def test_model_states_after_an_optimizer_step(precision: Precision, optimizer_name: Optimizer, dtype: torch.dtype) -> None:
    config = TinyConfig()
    torch.manual_seed(0)
    model = TinyGpt(config, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    assert params == shape_of(config).total_params  # parcalc counts the same parameters
    mixed = precision in (Precision.MIXED_BF16, Precision.MIXED_FP16)
    masters = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()] if mixed else None
    trained = masters if masters is not None else list(model.parameters())
    if optimizer_name is Optimizer.ADAMW:
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(trained, lr=1e-3)
    else:
        optimizer = torch.optim.SGD(trained, lr=1e-3, momentum=0.9)
    _step(model, optimizer, config, masters)
    weights = sum(p.nbytes for p in model.parameters())
    gradients = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    states, steps = _state_bytes(optimizer)
    master_bytes = sum(m.nbytes for m in masters) if masters is not None else 0
    predicted = model_states(params, state_bytes(precision, optimizer_name))
    assert weights == predicted.weights.value
    assert gradients == predicted.gradients.value
    # the optimizer's K bytes per parameter: fp32 master copy (mixed) + exp_avg, exp_avg_sq (AdamW) or
    # momentum_buffer (SGD); AdamW's scalar `step` (one fp32 per parameter tensor) is not per parameter
    assert master_bytes + states == predicted.optimizer.value
    if optimizer_name is Optimizer.ADAMW:
        assert steps == 4 * len(trained)
