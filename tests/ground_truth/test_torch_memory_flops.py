"""Ground truth: parcalc's activation bytes, FLOPs and model states against real PyTorch (CPU).

A small GPT (tests/ground_truth/tiny_gpt.py) runs one training step; the test measures
- the bytes of the distinct storages autograd saves for backward, per layer, for the embeddings and
  for the head (torch.autograd.graph.saved_tensors_hooks), with and without checkpointing, in
  fp32 and bf16, and compares them with parcalc.core.activations for the same layer: equal where
  the layer is the textbook one, and every other byte named (LayerNorm's mean and rstd, the
  unfused SwiGLU's silu output, position ids, targets and total_weight of the loss), and what
  F.dropout keeps on the CPU instead of a 1-byte mask;
- FLOPs with torch.utils.flop_counter.FlopCounterMode, forward and forward + backward, against
  parcalc.core.flops.training_flops (and with checkpointing, against the hardware FLOPs of full
  recomputation), and where FlopCounterMode counts differently (element-wise work, the CPU flash
  kernel, its SDPA backward formula);
- the bytes of parameters, gradients and optimizer states after a real optimizer step, against
  parcalc.core.model_states.model_states (and AdamW's step scalars beside them).

docs/known-differences.md lists each of these differences with the test that asserts it.

Runs in CI (torch==2.13.0, CPU wheel), in a few seconds.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from parcalc.core.activations import (
    ActivationConfig,
    Recompute,
    embedding_activations,
    layer_activations,
    output_activations,
)
from parcalc.core.choices import Optimizer, Precision
from parcalc.core.flops import ATTENTION_CORE_OPS, TrainingFlops, training_flops
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.core.model_states import model_states, state_bytes

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


def element_bytes(dtype: torch.dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def norm_statistics(saved: SavedBytes, region: str) -> list[int]:
    """Bytes of the (b, s, 1) tensors saved in a region: LayerNorm's mean and rstd, one pair per norm."""
    return [n for r, shape, _dtype, n in saved.tensors if r == region and shape == (BATCH, SEQ, 1)]


def layernorm_statistics_bytes(norms: int, dtype: torch.dtype) -> int:
    """What `norms` LayerNorms keep beyond Korthikanti's count: mean and rstd, b x s values each.

    torch.native_layer_norm returns (out, mean, rstd) and its backward takes all three. On the CPU
    they are in the parameters' dtype (aten/src/ATen/native/layer_norm.cpp, layer_norm_cpu:
    param_scalar_type), so 2 bytes each in bf16; the CUDA kernel keeps them in fp32 (layer_norm_cuda:
    toAccumulateType), which these CPU tests do not measure."""
    return norms * 2 * BATCH * SEQ * element_bytes(dtype)


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
    e = element_bytes(DTYPES[dtype])
    for index, measured in enumerate(saved.layers):
        # mean and rstd of each of the two LayerNorms, b x s values each, in the activations' dtype on CPU
        stats = norm_statistics(saved, f"layer {index}")
        assert stats == [BATCH * SEQ * e] * 4
        explained = layernorm_statistics_bytes(2, DTYPES[dtype])
        if extra == "silu_output":
            # unfused SwiGLU: silu(gate) * up saves both factors. gate and up are views of the fc1
            # output (one storage of 2 b s f elements, saved by silu and mul: parcalc's gate and up);
            # silu(gate), b s f elements, is a storage of its own: the extra
            wide = [n for r, shape, _d, n in saved.tensors if r == f"layer {index}" and shape == (BATCH, SEQ, config.ffn)]
            assert wide == [2 * BATCH * SEQ * config.ffn * e, BATCH * SEQ * config.ffn * e]
            explained += BATCH * SEQ * config.ffn * e
        assert measured == predicted + explained, (variant, index, saved.tensors)


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
def test_full_recomputation_keeps_the_layer_input(dtype: str) -> None:
    config = TinyConfig()
    saved = measure(config, DTYPES[dtype], checkpoint=True)
    predicted = layer_activations(shape_of(config), activation_config(config, DTYPES[dtype], recompute=Recompute.FULL))
    # 2 sbh in bf16, 4 sbh in fp32: the checkpoint's save_for_backward of the layer input, nothing else
    assert saved.layers == [predicted.per_layer.value] * config.layers
    assert predicted.per_layer.value == BATCH * SEQ * config.hidden * element_bytes(DTYPES[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
def test_embedding_and_head_activations(dtype: str) -> None:
    config = TinyConfig()
    saved = measure(config, DTYPES[dtype])
    model, act = shape_of(config), activation_config(config, DTYPES[dtype])
    # embeddings: int64 token ids (8 s b) and the dropout mask (s b h) as parcalc counts them, plus the
    # int64 position ids (8 s) that the learned-position embedding keeps for its backward
    embedding = [(shape, dt) for r, shape, dt, _n in saved.tensors if r == "embedding"]
    assert embedding == [((BATCH, SEQ), torch.int64), ((SEQ,), torch.int64), ((BATCH, SEQ, config.hidden), torch.bool)]
    assert saved.embedding == embedding_activations(model, act, 1).value + 8 * SEQ
    # head: final norm input and LM-head input (2 x e s b h) and fp32 logits (4 s b V, log_softmax's
    # output) as parcalc counts them, plus the final norm's mean and rstd (2 x e s b), the int64
    # targets (8 s b) and the fp32 total_weight scalar (4 bytes) that nll_loss keeps
    head = [(shape, dt) for r, shape, dt, _n in saved.tensors if r == "head"]
    kind = DTYPES[dtype]
    assert head == [((BATCH, SEQ, config.hidden), kind), ((BATCH, SEQ, 1), kind), ((BATCH, SEQ, 1), kind),
                    ((BATCH * SEQ, config.hidden), kind), ((BATCH * SEQ, config.vocab), torch.float32),
                    ((BATCH * SEQ,), torch.int64), ((), torch.float32)]  # fmt: skip
    assert norm_statistics(saved, "head") == [BATCH * SEQ * element_bytes(kind)] * 2
    assert saved.head == output_activations(model, act, 1).value + layernorm_statistics_bytes(1, kind) + 8 * SEQ * BATCH + 4


def saved_storages(function, *inputs: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """(shape, dtype, bytes) of each distinct non-input storage autograd saves while `function` runs."""
    given = {x.untyped_storage().data_ptr() for x in inputs}
    found: dict[int, tuple[tuple[int, ...], torch.dtype, int]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = tensor.untyped_storage().data_ptr()
        if key not in given:
            found.setdefault(key, (tuple(tensor.shape), tensor.dtype, tensor.untyped_storage().nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function(*inputs)
    return list(found.values())


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
def test_cpu_dropout_keeps_a_noise_tensor_not_a_mask(dtype: str) -> None:
    # F.dropout on the CPU multiplies by a scaled Bernoulli noise tensor of the input's dtype and keeps
    # it (e bytes per element); the fused kernel (torch.native_dropout, what CUDA runs) keeps a bool
    # mask, 1 byte per element, which is Korthikanti's count and what tiny_gpt.py calls.
    x = torch.randn(BATCH, SEQ, 64, dtype=DTYPES[dtype], requires_grad=True)
    e = element_bytes(DTYPES[dtype])
    assert saved_storages(lambda t: F.dropout(t, 0.1, training=True), x) == [((BATCH, SEQ, 64), DTYPES[dtype], BATCH * SEQ * 64 * e)]
    assert saved_storages(lambda t: torch.native_dropout(t, 0.1, True), x) == [((BATCH, SEQ, 64), torch.bool, BATCH * SEQ * 64)]


# ---------------------------------------------------------------------------------------------
# FLOPs


@pytest.mark.parametrize(
    ("config", "checkpoint", "recompute"),
    [
        pytest.param(TinyConfig(), False, "none", id="textbook"),
        pytest.param(TinyConfig(heads=8, kv_heads=2, mlp="swiglu"), False, "none", id="gqa-swiglu"),
        # reentrant checkpointing runs each layer's forward again inside the backward: hardware FLOPs
        pytest.param(TinyConfig(), True, "full", id="full-recompute"),
        # SDPA with dropout: the CPU has no fused kernel for it and runs the math path (bmm), all counted
        pytest.param(TinyConfig(attention="sdpa"), False, "none", id="sdpa-math-path"),
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


def attention_core_flops(predicted: TrainingFlops) -> float:
    """parcalc's forward FLOPs of Q·K^T and score·V, every layer together."""
    layers = predicted.forward.term("L").value
    return sum(layers * predicted.op_flops(op) for op in predicted.layer_ops if op.key in ATTENTION_CORE_OPS)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(TinyConfig(dropout=0.0, attention="sdpa"), id="mha"),
        pytest.param(TinyConfig(dropout=0.0, attention="sdpa", heads=8, kv_heads=2), id="gqa"),
    ],
)
def test_flop_counter_misses_the_cpu_flash_kernel(config: TinyConfig) -> None:
    # Without dropout, F.scaled_dot_product_attention on the CPU runs
    # aten._scaled_dot_product_flash_attention_for_cpu, for which FlopCounterMode (torch 2.13) has no
    # formula: Q·K^T and score·V, 4 b s^2 (heads x head_dim) FLOP per layer forward and twice that
    # backward, are missing from its count; every projection, the MLP and the LM head are counted.
    torch.manual_seed(0)
    model = TinyGpt(config)
    tokens, targets = sample_batch(config, BATCH, SEQ)
    measured = counted_flops(model, tokens, targets)
    predicted = training_flops(shape_of(config), BATCH, SEQ)
    core = config.layers * 4 * BATCH * SEQ**2 * config.heads * config.head_dim  # 2 x 2 b s^2 (a d) per layer
    assert attention_core_flops(predicted) == core
    assert measured.forward == predicted.forward.value - core
    assert measured.forward_backward == predicted.model.value - 3 * core


def test_flop_counter_counts_no_elementwise_work() -> None:
    # FlopCounterMode has formulas for matmuls, convolutions and attention kernels only: softmax,
    # LayerNorm, GELU, SiLU, dropout, the cross-entropy and element-wise products count 0 FLOP. parcalc's
    # totals count matmuls only as well, and show the element-wise work beside them (elementwise_flops).
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(BATCH, SEQ, 64, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        y = torch.softmax(x, -1) * F.gelu(F.layer_norm(x, (64,))) + F.silu(x)
        y = torch.native_dropout(y, 0.1, True)[0]
        loss = F.cross_entropy(y.view(-1, 64), torch.zeros(BATCH * SEQ, dtype=torch.long))
        loss.backward()
    assert counter.get_total_flops() == 0
    with FlopCounterMode(display=False) as counter:
        torch.randn(8, 16) @ torch.randn(16, 4)
    assert counter.get_total_flops() == 2 * 8 * 16 * 4  # 2 FLOP per multiply-add, as parcalc counts


def test_flop_counter_sdpa_formulas() -> None:
    # What FlopCounterMode registers for the fused attention kernels that run on GPUs (flash,
    # memory-efficient, cuDNN): forward Q·K^T and score·V, 4 b a s^2 d; backward five matmuls of that
    # size, 10 b a s^2 d, 2.5 x the forward: it counts the recomputation of Q·K^T inside the backward
    # (torch/utils/flop_counter.py, sdpa_backward_flop_count), where parcalc's model FLOPs count 2 x the
    # forward. The causal flag is not an input: the full s x s is counted, as parcalc does without --causal.
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    b, a, s, d = 2, 4, 128, 16
    q = (b, a, s, d)
    assert sdpa_flop_count(q, q, q) == 4 * b * a * s * s * d
    assert sdpa_backward_flop_count(q, q, q, q) == 10 * b * a * s * s * d


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
    # every state the optimizer keeps, by name: nothing else is measured
    names = {name for state in optimizer.state.values() for name in state}
    if optimizer_name is Optimizer.ADAMW:
        assert names == {"step", "exp_avg", "exp_avg_sq"}
        # the step counter: a 0-d fp32 tensor per parameter tensor (torch/optim/adam.py, Adam._init_group,
        # which AdamW inherits: torch.tensor(0.0, dtype=_get_scalar_dtype()), kept on the CPU unless
        # capturable or fused): this GPT has 12 tensors per layer (two norms' weight
        # and bias, QKV, projection, fc1, fc2 weight and bias), 2 embeddings and the final norm's 2:
        # 2 x 12 + 2 + 2 = 28 tensors, 4 x 28 = 112 bytes
        assert steps == 4 * len(trained) == 4 * 28
    else:
        assert names == {"momentum_buffer"} and steps == 0


# ---------------------------------------------------------------------------------------------
# docs/known-differences.md names these tests: each name it cites must be a test of this module


def test_known_differences_cite_existing_tests() -> None:
    import re
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "known-differences.md").read_text(encoding="utf-8")
    section = text.split("## Memory and FLOPs: what PyTorch keeps beyond Korthikanti et al.", 1)[1]
    cited = set(re.findall(r"`(test_[a-z0-9_]+)(?:\[[^\]]*\])?`", section))
    module = sys.modules[__name__]
    assert len(cited) >= 8
    assert {name for name in cited if not callable(getattr(module, name, None))} == set()
    # and each parametrised case it cites (`test_x[id]`) is one of this module's ids
    source = Path(__file__).read_text(encoding="utf-8")
    ids = set(re.findall(r"`test_[a-z0-9_]+\[([^\]*]+)\]`", section))
    assert ids and {case for case in ids if f'id="{case}"' not in source} == set()
