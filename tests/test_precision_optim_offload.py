"""FP8 (Transformer Engine recipe), today's optimizers and offloading (issue #13, parts 3-5).

Each expected value is derived by hand in the test from its source, named beside it."""

from __future__ import annotations

import json

import pytest
import torch

from parcalc.cli import app
from parcalc.core.activations import ActivationConfig, layer_activations
from parcalc.core.choices import Mlp, Norm, Optimizer, Position, Precision
from parcalc.core.layout import Layout
from parcalc.core.memory import fp8_weight_cache, memory_breakdown
from parcalc.core.model import TransformerModel
from parcalc.core.model_states import state_bytes
from parcalc.core.offload import pcie_traffic
from parcalc.core.optimizers import adafactor_state_ratio, muon_state_ratio
from parcalc.core.timing.offload import offload_times
from parcalc.core.training_setup import TrainingSetup
from parcalc.presets import load_gpu, load_link, load_model


def small(**changes: object) -> TransformerModel:
    """A 2-layer GPT layout without embeddings (vocab 0): only the layers' matrices and vectors."""
    base = dict(key="small", name="small", layers=2, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn_hidden=256, mlp=Mlp.GELU,
                vocab=0, max_seq_len=128, tied_embeddings=True, position=Position.NONE, norm=Norm.LAYERNORM, bias=True, source="test")
    base.update(changes)
    return TransformerModel(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Optimizers: bytes per parameter of state


@pytest.mark.parametrize(
    ("optimizer", "states", "per_state", "optimizer_bytes"),
    [
        pytest.param(Optimizer.ADAMW, 2, 4.0, 12.0, id="adamw: master 4 + 2 x 4 (ZeRO K = 12)"),
        pytest.param(Optimizer.SGD, 0, 4.0, 4.0, id="sgd: master only (torch sgd.py: no buffer without momentum)"),
        pytest.param(Optimizer.SGD_MOMENTUM, 1, 4.0, 8.0, id="sgd-momentum: master + momentum_buffer"),
        pytest.param(Optimizer.LION, 1, 4.0, 8.0, id="lion: master + one momentum (Chen et al. 2023, Algorithm 2)"),
        # bitsandbytes @06029dd6 Optimizer2State.init_state: uint8 state + fp32 absmax per 2048: 1 + 4/2048 = 1.001953125
        pytest.param(Optimizer.ADAM_8BIT, 2, 1.001953125, 4 + 2 * 1.001953125, id="adam-8bit: master + 2 x (1 + 4/2048)"),
    ],
)
def test_bytes_per_parameter_mixed_precision(optimizer: Optimizer, states: float, per_state: float, optimizer_bytes: float) -> None:
    per = state_bytes(Precision.MIXED_BF16, optimizer, model=small())
    assert (per.states, per.per_state, per.optimizer) == (states, per_state, optimizer_bytes)
    assert per.state_source  # each optimizer names its source


def test_adafactor_counts_rows_plus_columns_per_matrix() -> None:
    """Shazeer & Stern 2018 sec. 3: r + c per r x c matrix, full second moment for vectors.
    small(): h 64, q = kv = 64, f 256; per layer matrices [192x64], [64x64], [256x64], [64x256]:
    r + c = 256 + 128 + 320 + 320 = 1024, parameters 12288 + 4096 + 16384 + 16384 = 49152;
    vectors: LayerNorm 2 x 2 x 64 = 256, biases 192 + 64 + 256 + 64 = 576, 832 in all."""
    per_layer_state, per_layer_params = 1024 + 832, 49152 + 832
    assert adafactor_state_ratio(small()) == pytest.approx(per_layer_state / per_layer_params, rel=1e-12)
    per = state_bytes(Precision.FP32, Optimizer.ADAFACTOR, model=small())
    assert per.optimizer == pytest.approx(4 * 1856 / 49984)


def test_muon_momentum_for_hidden_matrices_adamw_for_the_rest() -> None:
    """Jordan et al. 2024 / Liu et al. 2025: 1 state for the 49152 matrix weights of a layer, 2 for its 832 vectors."""
    assert muon_state_ratio(small()) == pytest.approx((49152 + 2 * 832) / 49984, rel=1e-12)
    # with embeddings (V 1000, untied, h 64) those 2 x 64000 weights take AdamW's two states too
    model = small(vocab=1000, tied_embeddings=False)
    params = 2 * (49152 + 832) + 2 * 64000 + 2 * 64  # + final LayerNorm
    assert muon_state_ratio(model) == pytest.approx((2 * 49152 + 2 * (params - 2 * 49152)) / params, rel=1e-12)


def _torch_layers(model: TransformerModel) -> torch.nn.Module:
    """The same shapes as parcalc.core.optimizers.weight_shapes: fused QKV, projection, fc1, fc2, two LayerNorms per layer."""
    h, f = model.hidden, model.ffn_hidden
    layers = []
    for _ in range(model.layers):
        layers += [torch.nn.LayerNorm(h), torch.nn.Linear(h, model.q_width + 2 * model.kv_width), torch.nn.Linear(model.q_width, h),
                   torch.nn.LayerNorm(h), torch.nn.Linear(h, f), torch.nn.Linear(f, h)]
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize(
    ("optimizer", "make"),
    [
        pytest.param(Optimizer.ADAM, lambda p: torch.optim.Adam(p), id="adam"),
        pytest.param(Optimizer.SGD, lambda p: torch.optim.SGD(p, lr=0.1), id="sgd"),
        pytest.param(Optimizer.SGD_MOMENTUM, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), id="sgd-momentum"),
        pytest.param(Optimizer.ADAFACTOR, lambda p: torch.optim.Adafactor(p), id="adafactor"),
    ],
)
def test_torch_optimizer_state_bytes(optimizer: Optimizer, make: object) -> None:
    """torch 2.13 on CPU: the bytes of optimizer.state after one step (the scalar `step` tensors
    left out) equal parcalc's fp32 state bytes x parameters."""
    model = small()
    net = _torch_layers(model)
    params = sum(p.numel() for p in net.parameters())
    assert params == 2 * 49984  # the shapes parcalc counts
    opt = make(net.parameters())  # type: ignore[operator]
    loss = sum(m(torch.randn(3, m.normalized_shape[0] if isinstance(m, torch.nn.LayerNorm) else m.in_features)).square().sum() for m in net)
    loss.backward()  # every module on its own input: the shapes matter, not the chain
    opt.step()
    measured = sum(v.nbytes for s in opt.state.values() for k, v in s.items() if isinstance(v, torch.Tensor) and k != "step")
    per = state_bytes(Precision.FP32, optimizer, model=model)
    assert measured == pytest.approx(per.states * per.per_state * params, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# FP8: activations tensor by tensor, weight copies, peaks


def test_fp8_activations_by_hand() -> None:
    """small() GELU, s 128, b 2, t 1, no dropout, no FlashAttention, 16-bit activations.
    bf16 (Korthikanti eq. 1 without masks): per token 2 x (h norm1 + h qkv_in + q Q + kv K + kv V + q proj_in + h norm2
    + h mlp_in + f gelu_in + f down_in) = 2 x (64 x 8 + 2 x 256) = 2048 B, plus softmax 2 a s^2 b.
    FP8 (TE): qkv_in, proj_in, mlp_in, down_in in 1 byte: 64 + 64 + 64 + 256 = 448 B less per token."""
    model = small()
    s, b, a = 128, 2, 4
    bf16 = layer_activations(model, ActivationConfig(b, s, dropout=False)).per_layer.value
    fp8 = layer_activations(model, ActivationConfig(b, s, dropout=False, gemm_input_bytes=1.0)).per_layer.value
    assert bf16 == s * b * 2048 + 2 * a * s * s * b
    assert fp8 == bf16 - s * b * 448


def test_fp8_gated_mlp_keeps_the_gate_and_up_in_bf16() -> None:
    """SwiGLU (TE LayerNormMLP): fc1_out (gate, up) bf16, act_out FP8: f = 256 -> 2 x 256 x 2 + 256 x 1 per token."""
    model = small(mlp=Mlp.SWIGLU)
    kept = {t.key: t.bytes_per_element for t in layer_activations(model, ActivationConfig(1, 64, dropout=False, gemm_input_bytes=1.0)).kept}
    assert (kept["gate_output"], kept["up_output"], kept["down_input"], kept["norm2_input"], kept["mlp_input"]) == (2, 2, 1, 2, 1)


def test_fp8_leaves_bf16_results_unchanged() -> None:
    model = load_model("llama3-8b")
    par = Layout(tp=2, dp=4, zero=1, sequence_parallel=True)
    bf16 = memory_breakdown(model, par, TrainingSetup(1, 4096, precision=Precision.MIXED_BF16))
    assert bf16.worst.fp8_weights is None and bf16.layer.config.linear_input_bytes == 2.0


def test_fp8_weight_cache_llama3_8b() -> None:
    """TE keeps an FP8 weight and its FP8 transpose per linear weight: 2 B x (4096 x 4096 x 2 + 2 x 4096 x 1024 + 3 x 4096 x 14336)
    = 2 x 218,103,808 per layer, / t = 2."""
    cache = fp8_weight_cache(load_model("llama3-8b"), Layout(2), 16)
    assert cache.value == 2 * 218_103_808 / 2 * 16


@pytest.mark.parametrize(
    ("gpu", "peak"),
    [
        pytest.param("h100-sxm5", 1978.9e12, id="H100 SXM5: whitepaper V1.04 Table 1, 1978.9 TFLOPS dense FP8"),
        pytest.param("h100-pcie", 1513e12, id="H100 PCIe: whitepaper V1.04 Table 1, 1513 TFLOPS dense FP8"),
        pytest.param("h200", 1979e12, id="H200: datasheet 3,958 with sparsity, half dense"),
        pytest.param("b200", 4.5e15, id="B200: HGX B200 72 PFLOPS FP8 sparse / 8 GPUs / 2"),
    ],
)
def test_fp8_peaks(gpu: str, peak: float) -> None:
    rates = load_gpu(gpu).dtypes["fp8"]
    assert rates.dense_peak is not None and rates.dense_peak.value == pytest.approx(peak)


def test_fit_runs_fp8_gemms_at_the_fp8_peak(runner) -> None:
    args = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len", "4096", "--flash-attention",
            "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "1", "--micro-batch", "1", "--recompute", "none", "--format", "json"]
    bf16 = json.loads(runner.invoke(app, args).stdout)
    fp8 = json.loads(runner.invoke(app, [*args, "--precision", "fp8"]).stdout)

    def value(doc: dict, key: str) -> float:
        return doc["results"][key]["value"]

    # the GEMMs run at 1978.9 TFLOP/s x 0.477 (fp8 share, h100-sxm5.yaml fp8_tiles) instead of 989.4 x 0.496: 1.92 x faster
    assert value(fp8, "t_compute") < 0.8 * value(bf16, "t_compute")
    assert fp8["settings"]["precision"] == "fp8"


# ---------------------------------------------------------------------------------------------
# Offloading


def test_optimizer_offload_split_by_hand() -> None:
    """Llama 3 8B, DP 8, ZeRO-2, mixed bf16 Adam, optimizer offload: the GPU keeps 2 Psi of weights and no
    gradients (DeepSpeed estimate_zero2_model_states_mem_needs: gpu_mem = 2 Psi); the host holds
    (K 12 + fp32 gradient 4) x Psi / 8 per GPU (ZeRO-Offload)."""
    model = load_model("llama3-8b")
    par = Layout(dp=8, zero=2)
    off = memory_breakdown(model, par, TrainingSetup(1, 4096, offload_optimizer=True)).worst
    psi = off.parameters.value
    assert psi == 8_030_261_248
    assert off.states_total.value == 2 * psi
    assert off.host is not None and off.host.value == 16 * psi / 8
    down, up = pcie_traffic(psi, state_bytes(Precision.MIXED_BF16, Optimizer.ADAMW), par, 0.0, 32, 1, True, False)
    assert down.value == up.value == 2 * psi / 8  # 16-bit gradients down, 16-bit weights up (Ren et al. 2021 sec. 4.1)


def test_activation_offload_split_by_hand() -> None:
    """GPU keeps two layers of one micro-batch; the host A_layer x L x n; PCIe A_layer x L x m each way."""
    model = load_model("llama3-8b")
    par = Layout(pp=1, dp=1)
    setup = TrainingSetup(1, 2048, flash_attention=True, offload_activations=True)
    worst = memory_breakdown(model, par, setup).worst
    a = memory_breakdown(model, par, TrainingSetup(1, 2048, flash_attention=True)).layer.per_layer.value
    assert worst.activations.value == 2 * a
    assert worst.host is not None and worst.host.value == a * 32 * 1
    down, up = pcie_traffic(worst.parameters.value, state_bytes(Precision.MIXED_BF16, Optimizer.ADAMW), par, a, 32, 4, False, True)
    assert down.value == up.value == a * 32 * 4


def test_offload_time_by_hand() -> None:
    """1e9 parameters, PCIe 5.0 x16 (63 GB/s, 5.7 us), 8 GPUs per node on 614.4 GB/s of DDR5:
    gradients 2 GB in 31.75 ms + 5.7 us, hidden under a 20 ms window except 11.75 ms + 5.7 us; CPU-Adam
    30 B/parameter / 76.8 GB/s = 0.390625 s; weights back 31.75 ms + 5.7 us."""
    link = load_link("pcie5-x16")
    t = offload_times(grad_bytes=2e9, weight_bytes=2e9, shard_params=1e9, cpu_bytes_per_param=30.0, activation_bytes=0.0, link=link,
                      gpus_per_node=8, backward_window=0.020, forward_total=1.0, backward_total=2.0)
    one = 2e9 / 63e9 + 5.7e-6
    assert float(t.exposed) == pytest.approx(one - 0.020 + 30e9 / 76.8e9 + one, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--precision", "fp8"], "--precision fp8"),
        (["memory", "--model", "llama3-8b", "--gpu", "v100-sxm2-32gb", "--precision", "fp8"], "--precision fp8"),
        (["fit", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--precision", "fp8"], "--precision fp8"),
        (["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--host-link", "pcie5-x16"], "--host-link"),
        (["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--offload", "optimizer", "--host-link", "nope"], "nope"),
        (["memory", "--model", "llama3-8b", "--offload", "gpu"], "--offload"),
        (["memory", "--model", "llama3-8b", "--optimizer", "adam9"], "--optimizer"),
    ],
)
def test_errors_are_one_line_exit_2(runner, args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert message in result.stderr
    assert "Traceback" not in result.output
    if (args[0] == "memory" and "--precision" in args) or "--host-link" in args:
        assert len(lines) == 1 and lines[0].startswith("Error:")


def test_memory_json_carries_host_and_pcie(runner) -> None:
    result = runner.invoke(app, ["memory", "--model", "llama3-8b", "--seq-len", "2048", "--dp", "8", "--zero", "2", "--offload", "optimizer",
                                 "--offload", "activations", "--precision", "fp8", "--gpu", "h100-sxm5", "--format", "json"])
    assert result.exit_code == 0, result.output
    keys = {k: d["value"] for k, d in json.loads(result.stdout)["results"].items()}
    psi = 8_030_261_248
    assert keys["pcie_to_gpu"] == pytest.approx(2 * psi / 8 + keys["host_memory"] - 16 * psi / 8)
    assert keys["fp8_weights"] == 2 * 218_103_808 * 32


def test_optimizer_offload_shards_over_dp_and_cp() -> None:
    """--offload optimizer --cp 2: the offloaded shard is Psi / (dp x cp), as the on-GPU states are
    (model_states: Megatron-LM's distributed optimizer shards over the dp-cp group). Hand derivation:
    Llama 3 8B, Psi = 8,030,261,248, dp 4 x cp 2 = 8 ranks, ZeRO-2: host (K 12 + fp32 gradient 4) x Psi / 8,
    PCIe 2 x Psi / 8 each way; the same numbers as dp 8 without CP (test_optimizer_offload_split_by_hand).
    Before the fix the shard was Psi / 4 (dp only)."""
    model = load_model("llama3-8b")
    par = Layout(dp=4, cp=2, zero=2)
    off = memory_breakdown(model, par, TrainingSetup(1, 4096, offload_optimizer=True)).worst
    psi = off.parameters.value
    assert psi == 8_030_261_248
    assert off.host is not None and off.host.value == 16 * psi / 8
    down, up = pcie_traffic(psi, state_bytes(Precision.MIXED_BF16, Optimizer.ADAMW), par, 0.0, 32, 1, True, False)
    assert down.value == up.value == 2 * psi / 8
    on_gpu = memory_breakdown(model, par, TrainingSetup(1, 4096)).worst
    assert on_gpu.states.optimizer.value == 12 * psi / 8  # the same divisor on the GPU side
