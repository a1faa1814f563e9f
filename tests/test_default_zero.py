"""Without --zero, one configuration runs the stack's own ZeRO stage: torchtitan shards over every data-parallel rank
(torchtitan/config/configs.py @b5bcd76: data_parallel_shard_degree = -1, 'the parallelism method used is FSDP'), a bare
fully_shard is ZeRO-3 (fsdp2), Megatron-LM, DeepSpeed and Hugging Face DDP start at 0. Before, memory and fit took
ZeRO-0 for every stack: `fit --framework torchtitan` on 8 H100 said Llama 3 8B needs 159.7 GiB a GPU (DDP's sum), where
torchtitan's FSDP step holds 87.7 GiB (the allocator replayed over a run of it, plus the reserve)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.errors import PresetError
from parcalc.presets import load_framework

BASE = ["--model", "llama3-8b", "--seq-len", "8192", "--micro-batch", "1", "--gpu", "h100-sxm5"]


def _memory(*flags: str) -> dict:
    result = CliRunner().invoke(app, ["memory", *BASE, "--gpus", "8", *flags, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _fit(*flags: str) -> dict:
    result = CliRunner().invoke(app, ["fit", *BASE, "--gpus", "8", "--tp", "1", "--pp", "1", *flags, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(("framework", "stage"), [("torchtitan", 3), ("fsdp2", 3), ("megatron", 0), ("deepspeed", 0), ("hf", 0)])
def test_each_profile_names_its_own_stage(framework: str, stage: int) -> None:
    assert load_framework(framework, ()).default_zero == stage


@pytest.mark.parametrize("framework", ["torchtitan", "fsdp2"])
def test_memory_and_fit_without_zero_are_the_stacks_stage(framework: str) -> None:
    """The same total as --zero 3 given, in memory and in fit (torchtitan 8B on 8 H100: 87.67 GiB, not DDP's 159.7)."""
    default, stated = _memory("--framework", framework), _memory("--framework", framework, "--zero", "3")
    assert default["results"]["total"]["value"] == stated["results"]["total"]["value"]
    fitted = _fit("--framework", framework)
    assert fitted["results"]["total"]["value"] == pytest.approx(_fit("--framework", framework, "--zero", "3")["results"]["total"]["value"])
    if framework == "torchtitan":
        assert default["results"]["total"]["value"] / 2**30 == pytest.approx(87.67, abs=0.01)


def test_megatron_without_zero_stays_ddp() -> None:
    """Megatron-LM's --use-distributed-optimizer is off by default: ZeRO-0, 159.7 GiB for 8B on 8 GPUs (16 B a parameter
    and the activations)."""
    assert _memory()["results"]["total"]["value"] == _memory("--zero", "0")["results"]["total"]["value"]


def test_one_data_parallel_rank_takes_no_stage_and_says_no_no_op() -> None:
    """--tp 8 leaves one data-parallel rank: nothing to shard, and nothing the user gave is reported as a no-op."""
    result = CliRunner().invoke(app, ["memory", *BASE, "--gpus", "8", "--tp", "8", "--framework", "torchtitan", "--detail", "full"])
    assert result.exit_code == 0, result.output
    assert "no-op" not in result.output and "ZeRO-3:" not in result.output and "1 TP" not in result.output
    assert "8 TP x 1 PP x 1 DP" in result.output


def test_a_default_stage_the_profile_does_not_offer_is_a_preset_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    source = (Path(__file__).parent.parent / "presets" / "frameworks" / "torchtitan.yaml").read_text()
    (tmp_path / "frameworks").mkdir()
    (tmp_path / "frameworks" / "titan-bad.yaml").write_text(source.replace("default_zero: {value: 3", "default_zero: {value: 1"))
    with pytest.raises(PresetError, match=r"key 'default_zero.value': one of its zero_stages \(0, 3\), got 1"):
        load_framework("titan-bad", (tmp_path,))


def test_scaling_without_a_strategy_runs_the_stacks_stage() -> None:
    """scaling --framework torchtitan: ZeRO-3 at each N with more than one data-parallel rank; at N = 1 (and with --tp 8
    on 8 GPUs) nothing to shard, so the point runs without it rather than being refused as a stated --zero 3 is."""
    args = ["scaling", "--model", "llama3.2-1b", "--gpu", "h100-sxm5", "--batch", "64", "--seq-len", "2048", "--framework", "torchtitan",
            "--format", "json"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--gpus", "1,2,4"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["tables"]["scaling"]["rows"]
    assert [row["layout"] for row in rows] == ["1x1x1", "1x1x2", "1x1x4"] and all(row["t_step"] for row in rows)
    stated = CliRunner().invoke(app, [*args, "--gpus", "1,2,4", "--strategy", "zero3"])
    stated_rows = json.loads(stated.stdout)["tables"]["scaling"]["rows"]
    assert stated_rows[0]["t_step"] is None and stated_rows[2]["t_step"] == rows[2]["t_step"]


def test_a_layout_object_is_taken_as_written() -> None:
    """parcalc.memory(layout=Layout(dp=8)) runs the layout as written, ZeRO-0 (DDP) under torchtitan too: a Layout is a
    whole layout; the flat keywords without zero take the profile's stage, as the command line does."""
    import parcalc

    common = {"model": "llama3-8b", "framework": "torchtitan", "seq_len": 8192, "micro_batch": 1, "gpu": "h100-sxm5"}
    assert not parcalc.memory(layout=parcalc.Layout(dp=8), **common).title.endswith("ZeRO-3")
    assert parcalc.memory(dp=8, **common).title.endswith("ZeRO-3")
