"""Multi-token prediction (DeepSeek-V3 report sec. 2.2; Megatron-LM --mtp-num-layers): parameters, FLOPs, memory, time.

Ground truth: the parameters of DeepSeek-V3's Hugging Face checkpoint, whose safetensors metadata
(https://huggingface.co/api/models/deepseek-ai/DeepSeek-V3?expand[]=safetensors) lists 684,531,386,000 tensor elements:
BF16 3,918,786,560, F8_E4M3 680,571,043,840, F32 41,555,600. Its layer 61 is the MTP module, stored with its own
copies of the embedding and the output head (model.layers.61.embed_tokens, shared_head.head). Megatron-LM's FLOPs
formula with --mtp-num-layers is checked in tests/test_moe_flops.py (megatron_flops, mtp=1).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.flops import stage_flops, training_flops
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.training_setup import TrainingSetup
from parcalc.presets import load_model

H, V, HEADS = 7168, 129280, 128


def test_deepseek_v3_mtp_module_by_hand() -> None:
    """One MTP module: enorm, hnorm, final norm (3 h), eh_proj (2h x h, no bias), and an MoE block as layers 3..60 are
    (MLA, two norms, router with its correction bias, 1 shared and 256 routed experts of 3 x h x 2048)."""
    model = load_model("deepseek-v3")
    mla = H * 1536 + 1536 + 1536 * HEADS * 192 + H * 576 + 512 + 512 * HEADS * 256 + HEADS * 128 * H
    block = mla + 2 * H + (256 * H + 256) + 257 * 3 * H * 2048
    assert model.mtp_layer_is_moe and model.mtp_layers == 1
    assert model.mtp_module_params == 3 * H + 2 * H * H + block == 11_610_068_224
    # eh_proj's shape, which memory, activations and FLOPs read from the model: the checkpoint's
    # model.layers.61.eh_proj.weight is [7168, 14336] (out x in: nn.Linear(2h, h))
    assert model.mtp_projection == (14336, 7168) and model.mtp_norm_params == 3 * H
    assert model.trained_params == 671_026_419_200 + 11_610_068_224


def _fp8_block_scales() -> int:
    """F32 scale_inv tensors of the checkpoint's FP8 weights: one per 128 x 128 block (config.json quantization_config
    weight_block_size [128, 128]) of every linear of attention and MLP / experts; eh_proj is stored in BF16."""

    def blocks(out: int, into: int) -> int:
        return math.ceil(out / 128) * math.ceil(into / 128)

    attention = blocks(1536, H) + blocks(HEADS * 192, 1536) + blocks(576, H) + blocks(HEADS * 256, 512) + blocks(H, HEADS * 128)
    dense = 2 * blocks(18432, H) + blocks(H, 18432)
    expert = 2 * blocks(2048, H) + blocks(H, 2048)
    return 3 * (attention + dense) + 59 * (attention + 257 * expert)  # 58 MoE layers and the MTP module's block


def test_checkpoint_elements_are_the_model_its_mtp_module_and_the_copies() -> None:
    """The checkpoint's BF16 + F8 weights are the main model, the MTP module and layer 61's copies of the embedding and
    head (2 V h), less the 59 MoE layers' e_score_correction_bias (256 each), stored in F32 with the block scales:
    684,489,845,504 = 3,918,786,560 + 680,571,043,840 + 59 x 256, and 41,555,600 = 59 x 256 + 41,540,496 scales."""
    model = load_model("deepseek-v3")
    stored = model.trained_params + 2 * V * H
    biases = 59 * 256
    assert stored == 3_918_786_560 + 680_571_043_840 + biases == 684_489_845_504
    assert biases + _fp8_block_scales() == 41_555_600
    assert stored + _fp8_block_scales() == 684_531_386_000


def test_flops_add_one_module_on_the_last_stage() -> None:
    """F_mtp = D (4 T h^2 + F_moe_block + F_head); stage_flops puts it on the last stage, and the stages add up."""
    model = load_model("deepseek-v3")
    counted = training_flops(model, 8, 4096, causal=True, recompute="full")
    without = training_flops(dataclasses.replace(model, mtp_layers=0), 8, 4096, causal=True, recompute="full")
    tokens = 8 * 4096
    head = 2 * tokens * H * V
    assert counted.mtp is not None
    assert counted.mtp.value == pytest.approx(2 * tokens * 2 * H * H + counted.moe_layer_forward.value + head, rel=1e-12)
    assert counted.model.value - without.model.value == pytest.approx(3 * counted.mtp.value, rel=1e-12)
    split = (16, 15, 15, 15)
    each = [stage_flops(counted, split, i).value for i in range(4)]
    assert sum(each) == pytest.approx(counted.hardware.value, rel=1e-12)
    assert each[:3] == [stage_flops(without, split, i).value for i in range(3)]
    assert each[3] - stage_flops(without, split, 3).value == pytest.approx(3 * counted.mtp.value, rel=1e-12)


def _stages(pp: int, ep: int = 1) -> tuple[object, object]:
    model = load_model("deepseek-v3")
    par = Layout(tp=1, pp=pp, dp=ep, ep=ep, first_stage_layers=5 if pp > 1 else None,
                 last_stage_layers=8 if pp > 1 else None)  # 5 + 8 x 6 + 8 = 61
    setup = TrainingSetup(micro_batch=1, seq_len=4096, flash_attention=True, dropout=False, micro_batches=pp)
    return memory_breakdown(model, par, setup), memory_breakdown(dataclasses.replace(model, mtp_layers=0), par, setup)


def test_memory_holds_the_module_on_the_last_stage() -> None:
    """One stage: its parameters are everything trained; with p > 1 the last stage holds the module and a copy of the
    embedding (Megatron-LM gpt_model.py: 'if self.pre_process or self.mtp_process: self.embedding'), and its
    activations the module's (projection input 2 s b h e, its block as a layer, its logits)."""
    one, _ = _stages(1)
    assert one.stages[0].parameters.value == load_model("deepseek-v3").trained_params
    eight, plain = _stages(8, ep=8)
    extra = eight.stages[-1].parameters.value - plain.stages[-1].parameters.value
    model = load_model("deepseek-v3")
    block = model.moe_layer_params - model.routed_expert_params_per_layer + model.routed_expert_params_per_layer // 8
    assert extra == 3 * H + 2 * H * H + block + V * H
    assert [s.parameters.value for s in eight.stages[:-1]] == [s.parameters.value for s in plain.stages[:-1]]
    mtp = eight.stages[-1].mtp
    assert mtp is not None and all(s.mtp is None for s in eight.stages[:-1])
    terms = {t.key: t.value for t in mtp.inputs}
    assert terms["A_proj"] == 2 * 2 * 4096 * H
    assert mtp.value == pytest.approx((terms["A_proj"] + terms["A_block"] + terms["A_logits"]) * terms["n_last"], rel=1e-12)
    assert eight.stages[-1].activations_total.value - plain.stages[-1].activations_total.value == pytest.approx(mtp.value, rel=1e-12)


def test_step_time_kinds_add_up_with_the_module(tmp_path) -> None:
    """One stage (the MTP module on it): t_gemm + t_attention + t_memory_bound = t_compute, and the step is longer than
    without the module by about one MoE layer and one head (a 1/61 + head share)."""
    import re

    (tmp_path / "models").mkdir()
    preset = (Path(__file__).resolve().parent.parent / "presets" / "models" / "deepseek-v3.yaml").read_text()
    without = re.sub(r"\nmtp:\n  layers: 1\n  source: mtp\n", "\n", preset)
    assert without != preset
    (tmp_path / "models" / "deepseek-v3-no-mtp.yaml").write_text(without)
    args = ["fit", "--gpu", "h100-sxm5", "--gpus", "64", "--tp", "8", "--pp", "1", "--dp", "8", "--ep", "8",
            "--batch", "64", "--seq-len", "4096", "--presets", str(tmp_path), "--format", "json"]  # fmt: skip
    computes = {}
    for model in ("deepseek-v3", "deepseek-v3-no-mtp"):
        result = CliRunner().invoke(app, [*args, "--model", model])
        assert result.exit_code == 0, result.output
        results = json.loads(result.stdout)["results"]
        kinds = results["t_gemm"]["value"] + results["t_attention"]["value"] + results["t_memory_bound"]["value"]
        assert kinds == pytest.approx(results["t_compute"]["value"], rel=1e-9)
        computes[model] = results["t_compute"]["value"]
    # one MoE block of 61 more, and the head again (smaller than a block): 1.0223 today
    assert 1 + 1 / 61 < computes["deepseek-v3"] / computes["deepseek-v3-no-mtp"] < 1 + 2 / 61


def test_flops_command_shows_the_module() -> None:
    result = CliRunner().invoke(app, ["flops", "--model", "deepseek-v3", "--batch", "8", "--seq-len", "4096", "--causal", "--format", "json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert results["mtp_forward_flops"]["value"] > 0


def test_the_mtp_block_exchanges_as_a_layer_on_its_stage() -> None:
    """Megatron-LM's MultiTokenPredictionLayer holds a transformer layer (multi_token_prediction.py): on the stage with
    the loss its TP collectives and, DeepSeek-V3's block being an MoE layer, its expert exchange count beside the
    stage's own layers: with every layer on one stage (pp 1) the TP time is (61 + 1) / 61 of the model without MTP, and
    the stage's exchanging MoE blocks 58 + 1 (61 layers, the first 3 dense)."""
    from parcalc.core.choices import Precision
    from parcalc.core.choices import Recompute as R
    from parcalc.core.fit import Cluster, Training
    from parcalc.core.timing.step import stage_pieces
    from parcalc.presets import load_gpu, load_link

    model = load_model("deepseek-v3")
    without = dataclasses.replace(model, mtp_layers=0)
    gpu = load_gpu("h800-sxm5", ())
    cluster = Cluster(gpus=64, gpus_per_node=8, peak=gpu.dtypes["bf16"].dense_peak.value, capacity=gpu.memory_capacity.value,
                      intra=load_link("nvlink4", ()), inter=load_link("ib-ndr", ()), gpu=gpu)  # fmt: skip
    training = Training(64, 4096, Precision.MIXED_BF16)
    layout = Layout(8, 1, 8, ep=8)
    with_mtp, _, _ = stage_pieces(model, layout, 1, R.NONE, training, cluster)
    plain, _, _ = stage_pieces(without, layout, 1, R.NONE, training, cluster)
    assert model.mtp_layers == 1 and model.layers == 61
    assert with_mtp.tp == pytest.approx(plain.tp * 62 / 61, rel=1e-9)
    assert (with_mtp.moe_layers, plain.moe_layers) == (59, 58)
    assert with_mtp.ep_total == pytest.approx(plain.ep_total * 59 / 58, rel=1e-9)
