"""Preset loading: strict validation, lookup order, did-you-mean, config.json, hostile YAML."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from parcalc.core.model import Mlp, Norm, Position
from parcalc.errors import InputError, PresetError
from parcalc.hf_config import model_from_hf_config
from parcalc.preset_files import Category, find, find_all
from parcalc.presets import load_gpu, load_link, load_model

GOOD_GPU = """\
kind: gpu
name: Test GPU
vendor: Test
architecture: Test
sources:
  sheet: "Test datasheet, table 1"
sms: {value: 10, source: sheet}
boost_clock: {value: 1 GHz, source: sheet}
memory_capacity: {value: 16 GiB, source: sheet}
memory_bandwidth: {value: 1 TB/s, source: sheet}
dtypes:
  fp16:
    fma_per_clock_per_sm: {value: 256, source: sheet}
"""


def write_preset(root: Path, category: str, name: str, text: str) -> Path:
    folder = root / category
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_user_directory_preset_loads(tmp_path: Path) -> None:
    write_preset(tmp_path, "gpus", "test-gpu", GOOD_GPU)
    gpu = load_gpu("Test-GPU", [tmp_path])  # names are case-insensitive
    assert gpu.sms is not None and gpu.sms.value == 10
    assert gpu.memory_capacity.value == 16 * 2**30
    assert gpu.memory_bandwidth.value == 1e12
    assert gpu.dtypes["fp16"].fma_per_clock_per_sm.value == 256  # type: ignore[union-attr]
    assert gpu.boost_clock is not None and gpu.boost_clock.source == "Test datasheet, table 1"


def test_lookup_order_presets_flag_then_env_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag_dir, env_dir, xdg_dir = tmp_path / "flag", tmp_path / "env", tmp_path / "xdg"
    for directory, sms in ((flag_dir, 1), (env_dir, 2), (xdg_dir / "parcalc" / "presets", 3)):
        write_preset(directory, "gpus", "test-gpu", GOOD_GPU.replace("value: 10", f"value: {sms}"))
    monkeypatch.setenv("PARCALC_PRESETS", str(env_dir))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg_dir))
    assert load_gpu("test-gpu", [flag_dir]).sms.value == 1  # type: ignore[union-attr]
    assert load_gpu("test-gpu").sms.value == 2  # type: ignore[union-attr]
    monkeypatch.setenv("PARCALC_PRESETS", "")
    assert load_gpu("test-gpu").sms.value == 3  # type: ignore[union-attr]
    assert find(Category.GPUS, "test-gpu").origin == "XDG config"


def test_user_preset_overrides_packaged(tmp_path: Path) -> None:
    write_preset(tmp_path, "gpus", "a100-sxm4-80gb", GOOD_GPU)
    assert load_gpu("a100-sxm4-80gb", [tmp_path]).name == "Test GPU"
    assert load_gpu("a100-sxm4-80gb").name != "Test GPU"


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(PresetError, match=r"unknown gpu 'a100-sxm-80gb'; did you mean 'a100-sxm4-80gb'"):
        load_gpu("a100-sxm-80gb")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(("sms:", "smz:"), r"key 'smz': unknown key \(did you mean 'sms'\?\)", id="unknown-key"),
        pytest.param(("boost_clock: {value: 1 GHz, source: sheet}", "boost_clock: {value: 1 GHz}"),
                     r"key 'boost_clock.source': missing", id="missing-source"),
        pytest.param(("value: 16 GiB", "value: 16"), r"key 'memory_capacity.value': 16 has no unit", id="missing-unit"),
        pytest.param(("value: 16 GiB", "value: 16 GX"), r"cannot read '16 GX' as bytes", id="bad-unit"),
        pytest.param(("source: sheet}\nmemory_capacity", "source: shete}\nmemory_capacity"),
                     r"source 'shete' is not a key of 'sources'", id="unknown-source-key"),
        pytest.param(("kind: gpu", "kind: link"), r"key 'kind': expected 'gpu'", id="wrong-kind"),
        pytest.param(("  fp16:", "  fp17:"), r"key 'dtypes.fp17': unknown dtype", id="unknown-dtype"),
        pytest.param(("value: 10,", "value: -10,"), r"must not be negative", id="negative"),
    ],
)
def test_invalid_gpu_presets_name_file_and_key(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in GOOD_GPU
    path = write_preset(tmp_path, "gpus", "bad", GOOD_GPU.replace(old, new, 1))
    with pytest.raises(PresetError, match=message) as error:
        load_gpu("bad", [tmp_path])
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: gpu\nname: [unclosed\n", r"line \d+: invalid YAML", id="syntax"),
        pytest.param("!!python/object/apply:os.system ['echo pwned']\n", r"invalid YAML", id="python-tag"),
        pytest.param("kind: gpu\nkind: gpu\n", r"line 2: invalid YAML: duplicate key 'kind'", id="duplicate-key"),
        pytest.param("- just\n- a list\n", r"expected a mapping", id="not-a-mapping"),
    ],
)
def test_hostile_or_malformed_yaml(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "gpus" / "evil.yaml"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(PresetError, match=message) as error:
        load_gpu("evil", [tmp_path])
    assert str(path) in str(error.value)


def test_oversized_preset_is_refused(tmp_path: Path) -> None:
    path = write_preset(tmp_path, "gpus", "huge", GOOD_GPU + "notes:\n" + '  - "x"\n' * 200_000)
    assert path.stat().st_size > 1 << 20
    with pytest.raises(PresetError, match="too large"):
        load_gpu("huge", [tmp_path])


def test_link_preset() -> None:
    link = load_link("nvlink3")
    assert link.bandwidth_per_direction.value > 0 and link.latency.value > 0
    assert link.bandwidth_per_direction.unit == "B/s" and link.latency.unit == "s"


def test_homework_model_parameters() -> None:
    # Seed 004: 32 layers of 4 D^2 (attention) + 8 D^2 (MLP) with D = 4096 and nothing else:
    # 32 x 12 x 4096^2 = 6,442,450,944 parameters ("7B").
    model = load_model("homework-7b")
    assert model.total_params == 32 * 12 * 4096**2 == 6_442_450_944


def test_every_packaged_preset_loads() -> None:
    loaders = {Category.GPUS: load_gpu, Category.LINKS: load_link, Category.MODELS: load_model}
    for category, loader in loaders.items():
        presets = find_all(category)
        assert presets, category
        for preset in presets:
            assert loader(preset.key).name


def test_hf_config_llama(tmp_path: Path) -> None:
    # The fields of meta-llama/Llama-2-7b-hf's config.json that shape the model.
    config = {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    }  # fmt: skip
    path = tmp_path / "llama-2-7b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model = load_model(str(path))
    assert (model.mlp, model.norm, model.position, model.bias) == (Mlp.SWIGLU, Norm.RMSNORM, Position.ROPE, False)
    # LLaMA-2 7B: 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32000 x 4096 + 4096
    # = 6,738,415,616 parameters, the count Hugging Face reports for Llama-2-7b-hf.
    assert model.total_params == 6_738_415_616


def test_hf_config_gpt2(tmp_path: Path) -> None:
    # openai-community/gpt2's config.json: 12 layers, 768 wide, 12 heads, 1024 positions, 50257 tokens.
    config = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
              "vocab_size": 50257, "activation_function": "gelu_new", "n_inner": None}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = model_from_hf_config(path)
    assert (model.mlp, model.position, model.tied_embeddings, model.ffn_hidden) == (Mlp.GELU, Position.LEARNED, True, 3072)
    # GPT-2 small has 124,439,808 parameters (the count transformers reports for gpt2).
    assert model.total_params == 124_439_808


def test_missing_config_json_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="never downloaded"):
        load_model(str(tmp_path / "nope" / "config.json"))


@pytest.mark.parametrize("name", ["x" * 300, "../gpus/a100-sxm4-80gb", "a/b", ""], ids=["300-chars", "path", "slash", "empty"])
def test_names_that_are_not_file_stems_are_unknown_presets(name: str) -> None:
    # A preset name is a file's stem: a separator would reach outside the folder, and a 300-character
    # name made the file system raise (File name too long) instead of "unknown gpu".
    from parcalc.errors import PresetError
    from parcalc.presets import load_gpu

    with pytest.raises(PresetError, match="unknown gpu"):
        load_gpu(name, ())
