"""Hybrid layers: Qwen3-Next's gated DeltaNet beside gated attention (parcalc.core.linear_attention).

Ground truth on the CPU: transformers 5.24's Qwen3NextForCausalLM (its torch_chunk_gated_delta_rule and
causal_conv1d_fn reference paths): sum(p.numel()) at the preset's config.json values (meta device) and
torch.utils.flop_counter.FlopCounterMode over a tiny model's forward. FlopCounterMode counts the matmuls and the
convolution but not torch.linalg.solve_triangular (no formula), which parcalc counts (the UT transform); and the
reference conv1d pads K - 1 on both sides and drops the tail, computing K - 1 outputs per sequence more than the
causal_conv1d kernel parcalc counts. Both differences are added back below, each from its own formula.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.flops import stage_flops, training_flops
from parcalc.core.linear_attention import CHUNK, GatedDeltaNet, chunks
from parcalc.hf_config import model_from_hf_config
from parcalc.presets import load_model

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")


def _tiny() -> object:
    config = tf.Qwen3NextConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
                                linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                shared_expert_intermediate_size=24, intermediate_size=96, vocab_size=100, max_position_embeddings=256)  # fmt: skip
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the per-expert loop FlopCounterMode counts (top_k x tokens in all)
    return config


@pytest.mark.parametrize("seq_len", [128, 96])  # two whole chunks; a padded last chunk
def test_tiny_qwen3_next_parameters_and_flops(seq_len: int, tmp_path: Path) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    config = _tiny()
    config.save_pretrained(tmp_path)  # type: ignore[attr-defined]
    model = model_from_hf_config(tmp_path / "config.json")
    gdn = model.linear_attention
    assert gdn is not None and (gdn.full_every, model.linear_layers_in(0, 4)) == (4, 3)
    torch.manual_seed(0)
    real = tf.Qwen3NextForCausalLM(config).train()
    assert model.total_params == sum(p.numel() for p in real.parameters())
    batch = 2
    with FlopCounterMode(display=False) as counter:
        real(input_ids=torch.randint(0, 100, (batch, seq_len)))
    counted = training_flops(model, batch, seq_len)
    groups = batch * gdn.value_heads * chunks(seq_len)
    solves = groups * CHUNK * (CHUNK - 1) * (gdn.value_head_dim + gdn.key_head_dim)  # 2 FLOP x C (C - 1) / 2 per column
    padded_conv = 2 * batch * (gdn.conv_kernel - 1) * gdn.conv_dim * gdn.conv_kernel
    linear_layers = model.linear_layers_in(0, model.layers)
    assert counted.forward.value - linear_layers * solves + linear_layers * padded_conv == counter.get_total_flops()


def test_qwen3_next_80b_parameters_equal_the_real_model(tmp_path: Path) -> None:
    """sum(p.numel()) of Qwen3NextForCausalLM at the preset's config.json: 79,674,391,296, the card's '80B in total'."""
    config = tf.Qwen3NextConfig(hidden_size=2048, num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                                linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
                                linear_conv_kernel_dim=4, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                                shared_expert_intermediate_size=512, intermediate_size=5120, vocab_size=151936,
                                max_position_embeddings=262144, tie_word_embeddings=False)  # fmt: skip
    with torch.device("meta"):
        real = tf.Qwen3NextForCausalLM(config)
    preset = load_model("qwen3-next-80b-a3b")
    assert preset.total_params == sum(p.numel() for p in real.parameters()) == 79_674_391_296
    assert abs(preset.total_params - 80e9) < 0.5e9
    config.save_pretrained(tmp_path)
    read = model_from_hf_config(tmp_path / "config.json")
    assert (read.total_params, read.active_params) == (preset.total_params, preset.active_params)


def test_stages_add_up_and_take_their_own_layers() -> None:
    """Four stages of 12 layers: 9 linear and 3 full-attention layers each; the stages add up to F_hw."""
    counted = training_flops(load_model("qwen3-next-80b-a3b"), 8, 4096, causal=True, recompute="full")
    each = [stage_flops(counted, (12, 12, 12, 12), i).value for i in range(4)]
    assert sum(each) == pytest.approx(counted.hardware.value, rel=1e-12)
    assert each[0] == pytest.approx(each[1], rel=1e-12)
    assert counted.linear is not None and counted.linear_delta < 0  # a DeltaNet mixer is cheaper than attention at 4096


@given(st.integers(0, 200), st.integers(0, 200), st.sampled_from([0, 2, 3, 4]))
def test_linear_layers_in_closed_form(start: int, length: int, every: int) -> None:
    gdn = GatedDeltaNet(2, 4, 16, 16, 4, every)
    assert gdn.linear_layers_in(start, start + length) == sum(gdn.is_linear(i) for i in range(start, start + length))


@pytest.mark.parametrize("command", [
    # 32 CP ranks for 16 key heads: Megatron-LM's GatedDeltaNet splits q and k by whole heads over CP
    ["memory", "--model", "qwen3-next-80b-a3b", "--micro-batch", "1", "--seq-len", "4096", "--gpus", "32", "--cp", "32"],
    ["memory", "--model", "qwen3-next-80b-a3b", "--micro-batch", "1", "--seq-len", "4096", "--recompute", "selective"],
    ["flops", "--model", "qwen3-next-80b-a3b", "--batch", "8", "--seq-len", "4096", "--recompute", "selective"],
])  # fmt: skip
def test_what_is_not_modelled_is_one_line(command: list[str]) -> None:
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: ")
