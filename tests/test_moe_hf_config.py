"""Reading Mixture-of-Experts config.json files (Mixtral, Qwen3-MoE, DeepSeek-V3, Llama 4): the same
model as the packaged preset; what parcalc cannot represent is refused with the key named."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.errors import InputError, ParcalcError
from parcalc.hf_config import model_from_hf_config
from parcalc.presets import load_model

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
FAMILIES = ["mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "deepseek-v2", "qwen3-30b-a3b", "qwen3-235b-a22b", "llama4-scout"]


def _shape(model):
    """Every field that shapes the model (names and sources aside)."""
    plain = dataclasses.replace(model, key="", name="", source="", dropout_source="")
    if plain.moe is not None:
        plain = dataclasses.replace(plain, moe=dataclasses.replace(plain.moe, source=""))
    if plain.mla is not None:
        plain = dataclasses.replace(plain, mla=dataclasses.replace(plain.mla, source=""))
    if plain.window is not None:
        plain = dataclasses.replace(plain, window=dataclasses.replace(plain.window, source=""))
    plain = dataclasses.replace(plain, mtp_source="")
    return plain


@pytest.mark.parametrize("name", FAMILIES)
def test_config_json_reads_as_the_preset(name: str) -> None:
    read = model_from_hf_config(FIXTURES / name / "config.json")
    preset = load_model(name)
    assert _shape(read) == _shape(preset)
    assert read.total_params == preset.total_params and read.active_params == preset.active_params


def test_deepseek_v3_config_reads_mla_and_dense_layers() -> None:
    model = model_from_hf_config(FIXTURES / "deepseek-v3" / "config.json")
    assert (model.moe.first_dense_layers, model.moe.every, model.moe.shared_experts, model.moe.router_bias) == (3, 1, 1, True)
    assert (model.mla.q_lora_rank, model.mla.kv_lora_rank, model.mla.qk_rope_head_dim) == (1536, 512, 64)
    assert model.total_params == 671_026_419_200  # the report's 671B (MTP module not counted)


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(config))
    return path


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def test_llama4_maverick_interleave_step_2(tmp_path: Path) -> None:
    # Llama-4-Maverick-17B-128E text_config: interleave_moe_layer_step 2, 128 experts; transformers
    # Llama4TextConfig: moe_layers = [i for i in range(48) if (i + 1) % 2 == 0], so layers 1, 3, ..., 47 are MoE
    config = _fixture("llama4-scout")
    config["text_config"].update(interleave_moe_layer_step=2, num_local_experts=128)
    model = model_from_hf_config(_write(tmp_path, config))
    assert [i for i in range(48) if model.is_moe_layer(i)] == list(range(1, 48, 2))
    h = 5120
    dense = 40 * 128 * h * 2 + 2 * h * 8 * 128 + 3 * h * 16384 + 2 * h  # intermediate_size_mlp for the dense layers
    moe = 40 * 128 * h * 2 + 2 * h * 8 * 128 + 129 * 3 * h * 8192 + h * 128 + 2 * h
    assert model.total_params == 24 * dense + 24 * moe + 2 * 202048 * h + h == 400_711_848_960  # text model; Meta rounds Maverick to "400B total" (the vision encoder adds 0.87B)
    assert model.active_params == 24 * dense + 24 * (moe - 127 * 3 * h * 8192) + 2 * 202048 * h + h  # 17.2B, Meta's 17B active
    assert round(model.active_params / 1e9) == 17


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("qwen3-30b-a3b", {"mlp_only_layers": [0, 5]}, "mlp_only_layers make layers 1, 2, 3, 4, 6"),
        ("qwen3-30b-a3b", {"num_experts_per_tok": 200}, "num_experts_per_tok (200) exceeds num_experts (128)"),
        ("mixtral-8x7b", {"num_local_experts": 0, "num_experts_per_tok": 9}, None),  # 0 experts: a dense model (below)
        ("deepseek-v3", {"moe_layer_freq": 2, "first_k_dense_replace": 0}, "first_k_dense_replace, moe_layer_freq make layers 0, 2, 4"),
        ("deepseek-v3", {"kv_lora_rank": None}, "kv_lora_rank"),
        ("qwen3-30b-a3b", {"mlp_only_layers": "all"}, "mlp_only_layers"),
        # Qwen2-MoE reads (tests/test_qwen2_moe.py); without shared_expert_intermediate_size its shared expert has no width
        ("qwen3-30b-a3b", {"model_type": "qwen2_moe"}, "shared_expert_intermediate_size"),
        ("llama4-scout", {"num_experts_per_tok": 17}, "num_experts_per_tok (17) exceeds num_local_experts (16)"),
    ],
    ids=["mlp-only-not-first-n", "top-k-over-experts", "zero-experts", "deepseek-freq-from-0", "mla-rank-missing",
         "mlp-only-not-a-list", "qwen2-moe", "llama4-top-k"],
)  # fmt: skip
def test_unrepresentable_configs_are_refused(tmp_path: Path, runner, name: str, changes: dict, message: str | None) -> None:
    config = _fixture(name)
    config.get("text_config", config).update(changes)
    path = _write(tmp_path, config)
    if message is None:  # Mixtral with num_local_experts 0: no experts, read as the dense model
        assert model_from_hf_config(path).moe is None
        return
    with pytest.raises(ParcalcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model_from_hf_config(path)
    result = runner.invoke(app, ["flops", "--model", str(path), "--batch", "1", "--seq-len", "1024"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message.split(" ")[0] in lines[0], result.stderr


def test_deepseek_freq_2_from_layer_1_is_read(tmp_path: Path) -> None:
    # modeling_deepseek.py: layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0 -> 2, 4, 6, ...;
    # parcalc: first_dense_layers 1, every 2 gives the same layers
    config = {**_fixture("deepseek-v3"), "moe_layer_freq": 2, "first_k_dense_replace": 1}
    model = model_from_hf_config(_write(tmp_path, config))
    assert [i for i in range(61) if model.is_moe_layer(i)] == list(range(2, 61, 2))
    assert isinstance(model.moe.every, int) and model.moe.every == 2


def test_qwen3_mlp_only_first_layers_read_as_first_dense(tmp_path: Path) -> None:
    model = model_from_hf_config(_write(tmp_path, {**_fixture("qwen3-30b-a3b"), "mlp_only_layers": [0, 1]}))
    assert (model.moe.first_dense_layers, model.moe.every, model.moe_layers) == (2, 1, 46)


def test_top_k_over_experts_in_a_user_preset_is_one_line(tmp_path: Path, runner) -> None:
    text = (Path(__file__).parents[1] / "presets" / "models" / "mixtral-8x7b.yaml").read_text()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "bad.yaml").write_text(text.replace("top_k: 2", "top_k: 9"))
    result = runner.invoke(app, ["flops", "--model", "bad", "--presets", str(tmp_path), "--batch", "1", "--seq-len", "128"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "top_k (9) cannot exceed the number of experts (8)" in lines[0], result.stderr
    (tmp_path / "models" / "bad.yaml").write_text(text.replace("experts: 8", "experts: 0"))
    result = runner.invoke(app, ["flops", "--model", "bad", "--presets", str(tmp_path), "--batch", "1", "--seq-len", "128"])
    assert result.exit_code == 2 and "experts" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_inputerror_is_raised_for_refusals(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        model_from_hf_config(_write(tmp_path, {**_fixture("qwen3-30b-a3b"), "mlp_only_layers": [3]}))
