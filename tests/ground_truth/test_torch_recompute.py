"""Ground truth for `--recompute op` and `--recompute-layers n` against real PyTorch (CPU, torch 2.13).

Op-level selective checkpointing: a small Llama block as TorchTitan writes it runs under
torch.utils.checkpoint with create_selective_checkpoint_contexts and TorchTitan's policy
(tests/ground_truth/tiny_llama.py). What each block keeps until its backward is the SAC cache
(the outputs of the ops the policy saves, read from the caching mode's storage) and the block's
input; parcalc.core.activations (Recompute.OP) must give those bytes exactly. FlopCounterMode
counts the matmuls the replay runs; parcalc.core.flops' hardware FLOPs must match them, less the
attention core the CPU flash kernel hides from FlopCounterMode (test_torch_memory_flops.py,
test_flop_counter_misses_the_cpu_flash_kernel).

--recompute-layers: the tiny GPT of tiny_gpt.py with the first n of its blocks checkpointed
(Megatron-LM's block method) keeps n layer inputs and every tensor of the other blocks.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, Recompute, layer_activations
from parcalc.core.choices import Precision
from parcalc.core.flops import training_flops
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.core.recompute import op_recomputed_matmuls, op_saved_matmuls

from .tiny_llama import LlamaConfig, TinyLlama, counted_flops, sac_saved_bytes

BATCH, SEQ = 2, 24
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def llama_shape(c: LlamaConfig) -> TransformerModel:
    """parcalc's description of the tiny Llama: blocks only (no vocabulary), RMSNorm, RoPE, no biases."""
    return TransformerModel(
        key="tiny-llama", name="tiny Llama", layers=c.layers, hidden=c.hidden, heads=c.heads, kv_heads=c.kv_heads,
        head_dim=c.head_dim, ffn_hidden=c.ffn, mlp=Mlp.SWIGLU if c.gated else Mlp.GELU, vocab=0, max_seq_len=SEQ,
        tied_embeddings=False, position=Position.ROPE, norm=Norm.RMSNORM, bias=False, source="tests/ground_truth/tiny_llama.py",
    )  # fmt: skip


def run(c: LlamaConfig, dtype: torch.dtype, **options) -> tuple[TinyLlama, torch.Tensor]:
    torch.manual_seed(0)
    model = TinyLlama(c, dtype=dtype, **options)
    x = torch.randn(BATCH, SEQ, c.hidden, dtype=dtype, requires_grad=True)
    return model, x


CONFIGS = [pytest.param(LlamaConfig(), id="swiglu-gqa"), pytest.param(LlamaConfig(gated=False), id="gelu-gqa"),
           pytest.param(LlamaConfig(heads=4, kv_heads=4), id="swiglu-mha")]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
@pytest.mark.parametrize("c", CONFIGS)
def test_op_checkpointing_keeps_what_parcalc_counts(c: LlamaConfig, dtype: str) -> None:
    model, x = run(c, DTYPES[dtype])
    kept = sac_saved_bytes(model, x)
    config = ActivationConfig(BATCH, SEQ, recompute=Recompute.OP, flash_attention=True, dropout=False,
                              activation_bytes=torch.tensor([], dtype=DTYPES[dtype]).element_size())  # fmt: skip
    predicted = layer_activations(llama_shape(c), config)
    assert kept.layers == [predicted.per_layer.value] * c.layers
    # tensor by tensor: the block input, then the cached outputs in the order the ops ran: wq, wv, then
    # w1 (and w2 with a gate: the 7th mm), SDPA's output [b, a, s, d] and its fp32 log-sum-exp [b, a, s]
    e = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    tokens, q, kv = BATCH * SEQ, c.heads * c.head_dim, c.kv_heads * c.head_dim
    mms = [(tokens, q), (tokens, kv), (tokens, c.ffn)] + ([(tokens, c.hidden)] if c.gated else [])
    expected = [(shape, DTYPES[dtype], shape[0] * shape[1] * e) for shape in mms]
    expected += [((BATCH, c.heads, SEQ, c.head_dim), DTYPES[dtype], BATCH * SEQ * q * e), ((BATCH, c.heads, SEQ), torch.float32, BATCH * SEQ * c.heads * 4)]
    assert kept.cached[0] == expected
    assert kept.inputs == [BATCH * SEQ * c.hidden * e] * c.layers
    assert op_saved_matmuls(llama_shape(c)) == (("q_proj", "v_proj", "mlp_gate", "mlp_down") if c.gated else ("q_proj", "v_proj", "mlp_up"))
    assert [t.key for t in predicted.kept] == ["layer_input", *(f"{k}_output" for k in op_saved_matmuls(llama_shape(c))), "attention_output", "lse"]


def core_flops(c: LlamaConfig) -> float:
    """Q·K^T and score·V of every layer, forward: 2 x 2 b s^2 (a d), which FlopCounterMode does not
    see inside the CPU flash kernel (full square: SDPA's FLOP formula ignores causality)."""
    return c.layers * 4 * BATCH * SEQ**2 * c.heads * c.head_dim


@pytest.mark.parametrize("c", CONFIGS)
def test_op_checkpointing_recomputes_every_second_matmul(c: LlamaConfig) -> None:
    shape = llama_shape(c)
    model, x = run(c, torch.float32)
    forward, with_replay = counted_flops(model, x)
    plain, _ = run(c, torch.float32, sac=False)
    _, without_replay = counted_flops(plain, x)
    predicted = training_flops(shape, BATCH, SEQ, recompute="op", flash_attention=True)
    core = core_flops(c)
    assert forward == predicted.forward.value - core
    assert without_replay == predicted.model.value - 3 * core
    assert with_replay == predicted.hardware.value - 3 * core  # the replay adds exactly parcalc's F_re
    # which: wk, wo and w3 with a gate (mm 2, 4, 6 of 7); wk, wo and w2 without (mm 2, 4, 6 of 6)
    recomputed = ("k_proj", "out_proj", "mlp_up") if c.gated else ("k_proj", "out_proj", "mlp_down")
    assert op_recomputed_matmuls(shape, True) == recomputed
    widths = {"k_proj": c.hidden * c.kv_heads * c.head_dim, "out_proj": c.heads * c.head_dim * c.hidden,
              "mlp_up": c.hidden * c.ffn, "mlp_down": c.ffn * c.hidden}  # fmt: skip
    assert with_replay - without_replay == c.layers * sum(2 * BATCH * SEQ * widths[k] for k in recomputed)


def test_early_stop_skips_a_last_matmul_nothing_needs() -> None:
    # torch.utils.checkpoint's default early_stop=True ends the replay once every tensor the backward
    # needs is back. Without a gate the 6th mm (w2) is recomputable but nothing in the block's backward
    # needs its output, so the replay stops before it; TorchTitan today passes early_stop=False
    # (activation_checkpoint.py at b5bcd76c, SelectiveAC._wrap_block) and parcalc counts w2. With a gate
    # (Llama) w2 is the 7th mm, saved, and both agree.
    for gated, skipped in ((False, 1), (True, 0)):
        c = LlamaConfig(gated=gated)
        late, x = run(c, torch.float32, early_stop=False)
        early, _ = run(c, torch.float32, early_stop=True)
        difference = counted_flops(late, x)[1] - counted_flops(early, x)[1]
        assert difference == skipped * c.layers * 2 * BATCH * SEQ * c.ffn * c.hidden


# ---------------------------------------------------------------------------------------------
# --recompute-layers: the first n blocks checkpointed (Megatron-LM's block method)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_recompute_first_n_layers(n: int) -> None:
    from .test_torch_memory_flops import activation_config, layernorm_statistics_bytes, shape_of
    from .tiny_gpt import TinyConfig, TinyGpt, sample_batch, saved_activation_bytes
    from .tiny_gpt import counted_flops as gpt_flops

    config = TinyConfig(layers=3)

    class FirstN(TinyGpt):
        def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:  # tiny_gpt's, with a checkpoint on blocks 0 .. n-1
            from torch.utils.checkpoint import checkpoint

            from .tiny_gpt import _dropout

            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = _dropout(self.wte(tokens) + self.wpe(positions), self.config.dropout, self.training)
            for index, block in enumerate(self.blocks):
                x = checkpoint(block, x, use_reentrant=True) if index < n else block(x)
            return x

    torch.manual_seed(0)
    model = FirstN(config)
    tokens, targets = sample_batch(config, BATCH, SEQ)
    saved = saved_activation_bytes(model, tokens, targets)
    shape = shape_of(config)
    full = layer_activations(shape, activation_config(config, torch.float32, recompute=Recompute.FULL)).per_layer.value
    none = layer_activations(shape, activation_config(config, torch.float32)).per_layer.value
    stats = layernorm_statistics_bytes(2, torch.float32)  # LayerNorm's mean and rstd, beside Korthikanti's count
    assert saved.layers == [full] * n + [none + stats] * (config.layers - n)
    # the whole stage through parcalc.core.memory: the same sum (one stage, one micro-batch in flight)
    from parcalc.core.layout import Layout
    from parcalc.core.memory import memory_breakdown
    from parcalc.core.training_setup import TrainingSetup

    setup = TrainingSetup(BATCH, SEQ, precision=Precision.FP32, recompute=Recompute.FULL, recompute_layers=n, dropout=True)
    stage = memory_breakdown(shape, Layout(1, 1, 1), setup).stages[0]
    assert stage.activations.value == n * full + (config.layers - n) * none
    # FLOPs: the n checkpointed blocks run their forward again
    measured = gpt_flops(model, tokens, targets)
    predicted = training_flops(shape, BATCH, SEQ, recompute="full", recomputed_layers=n)
    assert measured.forward_backward == predicted.hardware.value
    assert predicted.recomputed.value == n * predicted.layer_forward.value
