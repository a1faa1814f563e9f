"""Mamba-2 hybrids: Nemotron-H's Mamba-2, attention and MLP blocks (parcalc.core.mamba).

Ground truth on the CPU: transformers 5.24's NemotronHForCausalLM (its torch reference paths: mamba2_chunk_scan and
causal_conv1d_fn, no mamba_ssm / causal_conv1d kernels installed): sum(p.numel()) at the presets' config.json values (meta
device) and torch.utils.flop_counter.FlopCounterMode over a tiny model's forward. parcalc counts the SSD as mamba_ssm's
kernels compute it; the torch path differs by three terms, each added back from its own formula below:
- C·B^T per head (B and C repeated to the H heads) where the kernel computes it once per group: 2 b c (H - G) Q^2 N more;
- the chunk-to-chunk state passing as an einsum over (c + 1) x (c + 1) chunk pairs (decay_chunk x states), where the
  kernel runs the recurrence, one multiply-add per state element and chunk: 2 b H P N ((c + 1)^2 - c) more;
- the conv1d padded by K - 1 on both sides and cut back (nn.Conv1d(padding=K - 1)): K - 1 outputs per sequence and
  channel more, 2 b (K - 1) conv_dim K.
FlopCounterMode counts the einsums (as bmm) and the convolution; it sees no element-wise work (softplus, exp, the gated
norm), which parcalc leaves out of F_fwd too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.activations import ActivationConfig, Recompute
from parcalc.core.flops import stage_flops, training_flops
from parcalc.core.layout import Layout
from parcalc.core.mamba import ATTENTION, MAMBA, MLP, Mamba2
from parcalc.core.mamba_memory import block_activation_bytes, block_params_per_rank, stage_layer_params
from parcalc.errors import InputError
from parcalc.hf_config import model_from_hf_config
from parcalc.presets import load_model

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"  # config.json of nvidia/Nemotron-H-8B-Base-8K
NEMOTRON_H_56B_PATTERN = ("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
                          "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")  # Megatron-Bridge NemotronHModelProvider56B  # fmt: skip


def _tiny(pattern: str, **overrides: object) -> object:
    shape = dict(vocab_size=256, hidden_size=64, hybrid_override_pattern=pattern, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, intermediate_size=96, mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
                 conv_kernel=4, chunk_size=16, tie_word_embeddings=False, max_position_embeddings=512)  # fmt: skip
    config = tf.NemotronHConfig(**(shape | overrides))
    config._attn_implementation = "eager"  # the s x s scores as matmuls FlopCounterMode counts (parcalc without --causal)
    return config


@pytest.mark.parametrize(("pattern", "seq_len", "overrides"), [
    ("M*-M-", 40, {}),  # a padded last chunk (40 = 2 x 16 + 8)
    ("M*-M-", 64, {}),  # four whole chunks
    ("MM*--M", 48, {"n_groups": 1, "use_conv_bias": False, "ssm_state_size": 8}),  # one group (Mamba-2's default), no conv bias
    ("M-*", 32, {"n_groups": 8, "mamba_num_heads": 8, "mamba_head_dim": 8}),  # one head per group: C·B^T the same both ways
])  # fmt: skip
def test_tiny_nemotron_h_parameters_and_flops(pattern: str, seq_len: int, overrides: dict, tmp_path: Path) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    config = _tiny(pattern, **overrides)
    config.save_pretrained(tmp_path)  # type: ignore[attr-defined]
    model = model_from_hf_config(tmp_path / "config.json")
    mamba = model.mamba
    assert mamba is not None and mamba.pattern == pattern
    torch.manual_seed(0)
    real = tf.NemotronHForCausalLM(config).train()
    assert model.total_params == sum(p.numel() for p in real.parameters())
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) < (5, 24):
        pytest.skip("the three differences below are those of transformers 5.24's torch reference path (5.17's counts "
                    "another set of einsums); the parameters above hold for both")
    batch = 2
    with FlopCounterMode(display=False) as counter:
        real(input_ids=torch.randint(0, 256, (batch, seq_len)), use_cache=False)
    counted = training_flops(model, batch, seq_len)
    c, h, g, q, n, p, k = mamba.chunks(seq_len), mamba.heads, mamba.groups, mamba.chunk, mamba.state, mamba.head_dim, mamba.conv_kernel
    cb_per_head = 2 * batch * c * (h - g) * q * q * n
    passing_quadratic = 2 * batch * h * p * n * ((c + 1) ** 2 - c)
    padded_conv = 2 * batch * (k - 1) * mamba.conv_dim * k
    layers = mamba.blocks_in(0, model.layers).mamba
    assert counted.forward.value + layers * (cb_per_head + passing_quadratic + padded_conv) == counter.get_total_flops()


@pytest.mark.parametrize(("key", "pattern", "shape", "expected"), [
    # sum(p.numel()) of NemotronHForCausalLM at the config.json values: 8,100,852,736 (the name's 8B)
    ("nemotron-h-8b", NEMOTRON_H_8B_PATTERN, dict(hidden_size=4096, num_attention_heads=32, intermediate_size=21504,
                                                  mamba_num_heads=128, ssm_state_size=128), 8_100_852_736),
    # 56,324,350,464 (the name's 56B)
    ("nemotron-h-56b", NEMOTRON_H_56B_PATTERN, dict(hidden_size=8192, num_attention_heads=64, intermediate_size=32768,
                                                    mamba_num_heads=256, ssm_state_size=256), 56_324_350_464),
])  # fmt: skip
def test_presets_equal_the_real_model(key: str, pattern: str, shape: dict, expected: int, tmp_path: Path) -> None:
    config = tf.NemotronHConfig(vocab_size=131072, hybrid_override_pattern=pattern, num_key_value_heads=8, head_dim=128,
                                mamba_head_dim=64, n_groups=8, conv_kernel=4, chunk_size=128, tie_word_embeddings=False,
                                max_position_embeddings=8192, **shape)  # fmt: skip
    with torch.device("meta"):
        real = tf.NemotronHForCausalLM(config)
    preset = load_model(key)
    assert preset.total_params == sum(p.numel() for p in real.parameters()) == expected
    nominal = float(key.split("-")[-1].rstrip("b")) * 1e9
    assert abs(preset.total_params - nominal) / nominal < 0.02
    config.save_pretrained(tmp_path)
    read = model_from_hf_config(tmp_path / "config.json")
    assert (read.total_params, read.mamba) == (preset.total_params, Mamba2(**{**vars(preset.mamba), "source": read.mamba.source}))  # type: ignore[union-attr, arg-type]


def test_the_layer_counts_the_paper_gives() -> None:
    """arXiv:2504.03624 sec. 2.1 / NVIDIA's Nemotron-H page: 8B 24 Mamba-2, 24 FFN, 4 attention; 56B 54, 54, 10."""
    for key, blocks in (("nemotron-h-8b", (24, 4, 24)), ("nemotron-h-56b", (54, 10, 54))):
        model = load_model(key)
        assert model.mamba is not None
        n = model.mamba.blocks_in(0, model.layers)
        assert (n.mamba, n.attention, n.mlp) == blocks


def test_an_older_config_json_with_the_8b_keys(tmp_path: Path) -> None:
    """The config.json as released (transformers 4.48 keys: attention_head_dim, hybrid_override_pattern, mamba_hidden_act)."""
    config = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_bias": False, "attention_dropout": 0.0,
              "attention_head_dim": 128, "chunk_size": 128, "conv_kernel": 4, "expand": 2, "hidden_dropout": 0.0, "hidden_size": 4096,
              "hybrid_override_pattern": NEMOTRON_H_8B_PATTERN, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
              "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128, "mamba_proj_bias": False,
              "max_position_embeddings": 8192, "mlp_bias": False, "mlp_hidden_act": "relu2", "n_groups": 8, "num_attention_heads": 32,
              "num_hidden_layers": 52, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "ssm_state_size": 128,
              "tie_word_embeddings": False, "use_bias": False, "use_conv_bias": True, "vocab_size": 131072}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    read = model_from_hf_config(tmp_path / "config.json")
    assert read.total_params == load_model("nemotron-h-8b").total_params == 8_100_852_736
    assert not read.dropout and read.position.value == "none" and read.mlp.value == "relu"


def test_stages_add_up_and_take_their_own_blocks() -> None:
    """Four stages of 13 layers of the 8B: each its own Mamba-2, attention and MLP blocks; together F_hw."""
    model = load_model("nemotron-h-8b")
    counted = training_flops(model, 8, 8192, causal=True, recompute="full")
    each = [stage_flops(counted, (13, 13, 13, 13), i).value for i in range(4)]
    assert sum(each) == pytest.approx(counted.hardware.value, rel=1e-12)
    assert counted.layers_forward(0, 52) == pytest.approx(sum(counted.layers_forward(i, i + 1) for i in range(52)), rel=1e-12)
    # stage 1's layers 0-12 'M-M-M-M*-M-M-' hold 6 M, 1 *, 6 -; stage 4's 39-51 'M-M-M-M-M-M-M-'... the pattern decides
    first = model.mamba.blocks_in(0, 13)  # type: ignore[union-attr]
    assert (first.mamba, first.attention, first.mlp) == (6, 1, 6)


def test_the_8b_mamba_block_by_hand() -> None:
    """One Mamba-2 block of the 8B at b = 1, s = 8192: in_proj 2 x 8192 x 4096 x 18560, out_proj 2 x 8192 x 8192 x 4096,
    conv 2 x 8192 x 10240 x 4, and the SSD over 64 chunks of 128 (H 128, G 8, P 64, N 128)."""
    counted = training_flops(load_model("nemotron-h-8b"), 1, 8192)
    assert counted.mamba is not None
    c, q, h, g, p, n = 64, 128, 128, 8, 64, 128
    ssd = 2 * c * (g * q * q * n + h * q * q * p + 2 * h * q * n * p + h * p * n)
    expected = 2 * 8192 * 4096 * 18560 + 2 * 8192 * 8192 * 4096 + 2 * 8192 * 10240 * 4 + ssd
    assert counted.mamba.value == expected


@given(st.text(alphabet="M*-", min_size=1, max_size=60), st.integers(0, 70), st.integers(0, 70))
def test_blocks_in_counts_the_pattern(pattern: str, start: int, length: int) -> None:
    mamba = Mamba2(8, 16, 16, 2, 4, 16, pattern)
    n = mamba.blocks_in(start, start + length)
    part = pattern[start:start + length]
    assert (n.mamba, n.attention, n.mlp) == (part.count("M"), part.count("*"), part.count("-"))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pattern": "M*E-"}, r"'E' \(MoE\) blocks are not modelled"),
    ({"pattern": "MX"}, "expected one of"),
    ({"heads": 6, "groups": 4}, "multiple of groups"),
    ({"chunk": 0}, "at least 1"),
])  # fmt: skip
def test_bad_shapes_are_input_errors(kwargs: dict, message: str) -> None:
    shape = dict(heads=8, head_dim=16, state=16, groups=2, conv_kernel=4, chunk=16, pattern="M*-") | kwargs
    with pytest.raises(InputError, match=message):
        Mamba2(**shape)  # type: ignore[arg-type]


def test_presets_show_every_number() -> None:
    result = CliRunner().invoke(app, ["presets", "show", "nemotron-h-56b", "--detail", "full"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("mamba.heads", "256", "mamba.pattern", "Mamba-2_layers", "54", "attention_layers", "10", "56,324,350,464",
                 "NemotronHModelProvider56B"):  # fmt: skip
        assert text in result.output, text


@pytest.mark.parametrize("command", [
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--framework", "hf"],
    # 256 CP ranks for 128 Mamba-2 heads: Megatron-LM's MambaContextParallel asserts nheads % (tp cp) == 0
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--gpus", "256", "--cp", "256"],
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--gpus", "8", "--zero", "3"],
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--precision", "fp8"],
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--recompute", "selective"],
    ["memory", "--model", "nemotron-h-8b", "--micro-batch", "1", "--seq-len", "8192", "--tp", "16", "--gpus", "16"],
    ["intensity", "--model", "nemotron-h-8b", "--batch", "1", "--seq-len", "4096"],
    ["fit", "--model", "nemotron-h-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "8", "--seq-len", "8192", "--pp", "1",
     "--dp", "8", "--kernels", "eager"],
    ["flops", "--model", "nemotron-h-8b", "--batch", "8", "--seq-len", "8192", "--recompute", "selective"],
])  # fmt: skip
def test_what_is_not_modelled_is_one_line(command: list[str]) -> None:
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: ")


def test_flops_accepts_the_presets() -> None:
    result = CliRunner().invoke(app, ["flops", "--model", "nemotron-h-56b", "--batch", "1", "--seq-len", "8192", "--causal"],
                                terminal_width=200)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "F_ssm" in result.output and "[Mamba-2 layer]" in result.output


@pytest.mark.parametrize(("block", "per_token"), [
    # Mamba-2 (parcalc.core.mamba_memory.SSD_SAVED, GATED_NORM, TE_LN_LINEAR_SAVES): 2 B x (norm input 4096 + in_proj input 4096
    # + zxBCdt 18560 + out_x 8192 + gated norm input 8192 + out_proj input 8192) + 4 B x 8 rstd
    (MAMBA, 2 * (4096 + 4096 + 18560 + 3 * 8192) + 4 * 8),
    # attention with FlashAttention: 2 B x (norm input, QKV input, Q, output projection input: 4096 each; K, V: 1024 each)
    # + the fp32 log-sum-exp of 32 heads (Dao 2023, FlashAttention-2, Algorithm 1)
    (ATTENTION, 2 * (4 * 4096 + 2 * 1024) + 4 * 32),
    # MLP: 2 B x (norm input, fc1 input: 4096 each; relu(x) and relu(x)^2: 21504 each) (SQUARED_RELU)
    (MLP, 2 * (2 * 4096 + 2 * 21504)),
])  # fmt: skip
def test_the_8b_blocks_activations_by_hand(block: str, per_token: int) -> None:
    model = load_model("nemotron-h-8b")
    config = ActivationConfig(micro_batch=2, seq_len=8192, flash_attention=True, dropout=False)
    assert block_activation_bytes(model, config, block) == 2 * 8192 * per_token
    split = ActivationConfig(micro_batch=2, seq_len=8192, tp=2, sequence_parallel=True, flash_attention=True, dropout=False)
    assert block_activation_bytes(model, split, block) == pytest.approx(2 * 8192 * per_token / 2)  # SP splits the norm's and inputs
    full = ActivationConfig(micro_batch=2, seq_len=8192, recompute=Recompute.FULL, flash_attention=True, dropout=False)
    assert block_activation_bytes(model, full, block) == 2 * 8192 * 4096 * 2  # the block's input, 2 s b h


def test_the_mlp_block_keeps_what_autograd_keeps() -> None:
    """transformers' NemotronHMLP in bf16 on the CPU: the unique storages autograd saves are fc1's input (h), relu(x) (f)
    and relu(x)^2 (f): what mlp_block_tensors counts beside the norm's input (NemotronHRMSNorm's own fp32 copies are the
    eager norm's, not Transformer Engine's fused one)."""
    config = _tiny("-", intermediate_size=96)
    mlp = tf.models.nemotron_h.modeling_nemotron_h.NemotronHMLP(config).to(torch.bfloat16)
    x = torch.randn(2, 40, 64, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, int] = {}
    weights = {p.untyped_storage().data_ptr() for p in mlp.parameters()}

    def pack(t: object) -> object:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in weights:  # activations, not weights
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mlp(x).sum().backward()
    assert sum(saved.values()) == 2 * 40 * 2 * (64 + 2 * 96)


def test_stage_parameters_add_up_over_tensor_and_pipeline_ranks() -> None:
    """8B on TP 2 x PP 4: each rank holds its blocks' norms whole and their mixers halved; over the stages the layers'
    parameters are every norm once and every mixer / 2."""
    model = load_model("nemotron-h-8b")
    layout = Layout(tp=2, pp=4, dp=1)
    held = sum(stage_layer_params(model, layout, s)[3] for s in range(4))
    norms = model.layers * model.hidden
    assert held == norms + (model.layers_params(0, model.layers) - norms) // 2
    assert block_params_per_rank(model, 2, MAMBA) == 4096 + (109_640_064 - 4096) // 2


def test_memory_accepts_the_presets() -> None:
    command = ["memory", "--model", "nemotron-h-56b", "--tp", "8", "--pp", "2", "--gpus", "64", "--micro-batch", "1", "--seq-len", "8192",
               "--recompute", "full", "--sequence-parallel"]  # fmt: skip
    result = CliRunner().invoke(app, command, terminal_width=200)
    assert result.exit_code == 0, result.output
    full = CliRunner().invoke(app, [*command, "--detail", "full"], terminal_width=200).output
    assert "Mamba-2, attention and MLP blocks each their own" in full and "[Mamba-2] block input (full recomputation)" in full
    assert "Activations kept per layer" not in full  # no layer of attention and MLP to show


def _kernels(model_key: str = "nemotron-h-8b") -> tuple[object, object, object]:
    from parcalc.core.timing.compute import LayerShard
    from parcalc.core.timing.kernels import compute_spec
    from parcalc.presets import load_gpu

    gpu = load_gpu("h100-sxm5")
    spec = compute_spec(gpu, "bf16", gpu.dtypes["bf16"].dense_peak.value)
    return load_model(model_key), LayerShard(1, 8192, 1, False, True, False, True, 2.0), spec


def test_the_mamba_blocks_gemms_are_its_counted_flops() -> None:
    """The Mamba-2 block's GEMM kernels carry the FLOPs parcalc.core.flops counts for it (in_proj, out_proj and the four SSD
    products), its backward twice those; the conv and the state passing are its memory-bound kernels."""
    from parcalc.core.timing.mamba_kernels import mamba_block

    model, shard, spec = _kernels()
    forward, backward = mamba_block(model, shard, spec)  # type: ignore[arg-type]
    counted = training_flops(model, 1, 8192)
    assert counted.mamba is not None
    gemms = sum(k.flops for k in forward if k.kind == "gemm")
    memory_ops = ("ssm_conv", "ssd_pass")  # timed by their bytes
    assert gemms == counted.mamba.value - sum(t.value for t in counted.mamba.inputs if t.key in memory_ops)
    assert sum(k.flops for k in backward if k.kind == "gemm") == 2 * gemms
    assert {k.key for k in forward if k.kind == "memory"} >= {"norm1", "ssm.conv", "ssd.state_passing", "ssm.gated_norm", "residual"}


def test_the_mean_layer_is_the_blocks_by_their_share() -> None:
    """L mean layers are 24 Mamba-2, 4 attention and 24 MLP blocks of the 8B (hybrid_override_pattern)."""
    from parcalc.core.timing.compute import _attention_block, layer_passes
    from parcalc.core.timing.mamba_kernels import attention_block, mamba_block, mlp_block

    model, shard, spec = _kernels()
    mean = layer_passes(model, shard, spec)  # type: ignore[arg-type]
    blocks = [mamba_block(model, shard, spec), attention_block(_attention_block(model, shard, spec))[:2],  # type: ignore[arg-type]
              mlp_block(model, shard, spec)]  # type: ignore[arg-type]
    for pass_index, total in ((0, mean.t_forward), (1, mean.t_backward)):
        expected = sum(count * sum(k.time for k in kernels[pass_index]) for count, kernels in zip((24, 4, 24), blocks, strict=True))
        assert 52 * total == pytest.approx(expected, rel=1e-12)
    assert not any(k.key.startswith("norm2") for k in blocks[1][0])  # one norm per block


def test_fit_times_one_layout() -> None:
    result = CliRunner().invoke(app, ["fit", "--model", "nemotron-h-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len",
                                      "8192", "--pp", "2", "--dp", "4", "--recompute", "full"], terminal_width=200)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "per iteration" in result.output and "2 x 26 layers" in result.output


def test_a_hybrid_layer_runs_one_tensor_parallel_collective_each_way() -> None:
    """Each Nemotron-H block is one mixer between a column- and a row-parallel linear (Megatron-LM MambaMixer @00bebb45:
    in_proj column-parallel, out_proj row-parallel; attention and MLP likewise), so a layer all-reduces once forward and
    once backward, and full recomputation replays one: half a transformer layer's four and two."""
    from parcalc.core.fit import Cluster, Config, Training
    from parcalc.core.layout import Layout
    from parcalc.core.timing.step import layer_pieces
    from parcalc.presets import load_gpu, load_link

    gpu = load_gpu("h100-sxm5", ())
    cluster = Cluster(8, 8, gpu.dtypes["bf16"].dense_peak.value, gpu.memory_capacity.value, load_link("nvlink4", ()), load_link("ib-ndr", ()))
    training = Training(8, 8192)
    pieces = {}
    for key in ("nemotron-h-8b", "llama3-8b"):
        model = load_model(key, ())
        for recompute in (Recompute.NONE, Recompute.FULL):
            config = Config(Layout(tp=2, dp=4), 1, recompute)
            pieces[key, recompute] = layer_pieces(model, config.layout, 1, recompute, training, cluster)
    hybrid, dense = pieces["nemotron-h-8b", Recompute.NONE], pieces["llama3-8b", Recompute.NONE]
    assert hybrid.tp_layer == pytest.approx(dense.tp_layer / 2, rel=1e-12)  # the same b s h all-reduce: same hidden 4096
    assert pieces["nemotron-h-8b", Recompute.FULL].tp_replay == pytest.approx(hybrid.tp_layer / 2, rel=1e-12)


def test_sequence_parallel_regathers_once_per_hybrid_layer() -> None:
    """Under SP each block's column-parallel linear gathers its input again for its weight gradient (Korthikanti et al.
    2022 sec. 4.2.2): one all-gather a layer, exposed where it outlasts that block's input-gradient GEMM, weighted by the
    blocks' shares (24 / 4 / 24 of 52 in Nemotron-H-8B)."""
    from parcalc.core.timing.kernels import Kernel
    from parcalc.core.timing.mamba_kernels import mean_layer_regather

    model = load_model("nemotron-h-8b", ())
    share = {"ssm.in_proj.dgrad": 24 / 52, "qkv.dgrad": 4 / 52, "mlp.up.dgrad": 24 / 52}
    dgrad = {"ssm.in_proj.dgrad": 3e-3, "qkv.dgrad": 0.5e-3, "mlp.up.dgrad": 1e-3}
    backward = tuple(Kernel(key, "gemm", 0.0, 0.0, share[key] * dgrad[key], "compute") for key in share)
    gather, exposed = mean_layer_regather(model, backward, 2e-3)
    assert gather == 2e-3
    assert exposed == pytest.approx(4 / 52 * 1.5e-3 + 24 / 52 * 1e-3, rel=1e-12)


def test_presets_show_prints_the_linear_attention_block_too() -> None:
    """presets show listed each nested block's fields but for linear_attention, whose GatedDeltaNet it tried to print as
    a number (an internal error on qwen3-next-80b-a3b before the Mamba-2 block joined the list)."""
    result = CliRunner().invoke(app, ["presets", "show", "qwen3-next-80b-a3b"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "linear_attention.value_heads" in result.output
