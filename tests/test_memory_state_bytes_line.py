"""memory's 'bytes per parameter' assumption says what the components count (issue 32): the textbook's 16-bit weights
beside an fp32 master (Rajbhandari et al. 2020 sec. 3.1: 2 + 2 + 12) where memory is the textbook sum, and where the step
is walked the walk's own bytes: transformers' Trainer (bf16=True: torch.autocast over the fp32 model, fused AdamW) and FSDP2
(MixedPrecisionPolicy over fp32 shards) keep fp32 parameters, fp32 gradients and two fp32 AdamW states, no master copy
(parcalc.core.memory_walk.parameter_bytes). Before, every framework printed the textbook's 'weights 2, gradients 2 (or 4),
optimizer 12 (master 4 + ...)'. Each line is checked against the same output's component bytes / parameters, and the
gradients, which are not live at the loss's peak, against the walk's own tensors at the optimizer step."""

from __future__ import annotations

import re

import pytest

from parcalc.core.memory_walk import Walk
from parcalc.results.memory import request

_LINE = re.compile(r"bytes per parameter: weights ([\d.]+), gradients ([\d.]+).*?, optimizer ([\d.]+) ")


def _line(document: dict) -> tuple[float, float, float]:
    (found,) = [a for a in document["assumptions"] if a.startswith("bytes per parameter")]
    match = _LINE.match(found)
    assert match is not None, found
    weights, gradients, optimizer = (float(g) for g in match.groups())
    return weights, gradients, optimizer


def _components(document: dict) -> dict[str, float]:
    return {row["component"]: row["bytes"] for row in document["tables"]["components"]["rows"]}


def _kind_bytes(walk: Walk, kind: str) -> float:
    return sum(t.bytes for t in walk.live.values() if t.kind == kind)


def _hf_gradients(flags: dict[str, str]) -> float:
    """Bytes of gradients live at the hf walk's optimizer step (its last phase), per parameter."""
    from parcalc.core.memory_timeline import HfStep, _hf_walk

    req = request(**flags, framework="hf")
    s = req.setup
    walk = _hf_walk(req.model, HfStep(s.micro_batch, s.seq_len, s.precision, s.optimizer, s.recompute, ddp_buckets=req.layout.dp > 1))
    assert walk.phase == "optimizer step"
    return _kind_bytes(walk, "gradients") / req.model.total_params


def _fsdp_gradients(flags: dict[str, str], framework: str) -> float:
    """Bytes of sharded gradients live at the FSDP2 walk's optimizer step, per parameter of the shard."""
    from parcalc.core.memory import stage_layers
    from parcalc.core.memory_fsdp import walk_fsdp_step
    from parcalc.core.memory_step_peak import fsdp_stage_step

    req = request(**flags, framework=framework)
    setup = req.setup.for_model(req.model)
    walk = Walk()
    walk_fsdp_step(req.model, fsdp_stage_step(req.layout, setup, 0, stage_layers(req.model, req.layout)), walk)
    assert walk.phase.startswith("optimizer step")
    return _kind_bytes(walk, "sharded gradients") / (req.model.total_params / (req.layout.dp * req.layout.cp))


_1B = {"model": "llama3.2-1b", "gpu": "h200", "seq_len": "4096"}


@pytest.mark.parametrize("gpus, gradients", [("1", 4.0), ("2", 8.0)])  # dp 2: DDP's bucket beside each .grad
def test_hf_line_is_its_walks_fp32_states(run_json, gpus: str, gradients: float) -> None:
    """The brief's case: `memory --model llama3.2-1b --gpu h200 --gpus 1 --seq-len 4096 --framework hf` said 'weights 2,
    gradients 4, optimizer 12 (master 4 + 2 ...)'; the walk holds 4 + 4 + 8 (+ 4 of DDP's buckets at dp > 1)."""
    document = run_json("memory", "--model", "llama3.2-1b", "--gpu", "h200", "--gpus", gpus, "--seq-len", "4096", "--framework", "hf")
    weights, grads, optimizer = _line(document)
    assert (weights, grads, optimizer) == (4.0, gradients, 8.0)
    params = document["results"]["stage_parameters"]["value"]
    parts = _components(document)
    assert parts["weights"] / params == pytest.approx(weights, rel=1e-6)
    assert parts["optimizer states"] / params == pytest.approx(optimizer, rel=1e-4)  # + AdamW's fp32 step counters
    assert _hf_gradients({**_1B, "gpus": gpus}) == pytest.approx(grads, rel=1e-4)
    assert "master" not in document["assumptions"][1] and "no master copy" in " ".join(document["assumptions"])


_8B = {"model": "llama3-8b", "gpu": "h200", "gpus": "8", "dp": "8", "seq_len": "4096"}


@pytest.mark.parametrize("framework", ["torchtitan", "fsdp2"])
def test_fsdp_lines_are_the_walks_fp32_shards(run_json, framework: str) -> None:
    """fully_shard over 8 ranks keeps fp32 shards, their fp32 gradients (the reduce-scatter's output cast to the shards'
    dtype) and two fp32 AdamW states: 4 + 4 + 8 a parameter of the shard (the line said 2 + 2 + 12)."""
    document = run_json("memory", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--dp", "8", "--seq-len", "4096",
                        "--framework", framework)  # fmt: skip
    assert "step_reserved" in document["results"]  # walked
    weights, grads, optimizer = _line(document)
    assert (weights, grads, optimizer) == (4.0, 4.0, 8.0)
    shard = document["results"]["stage_parameters"]["value"] / 8
    parts = _components(document)
    assert parts["sharded parameters"] / shard == pytest.approx(weights, rel=1e-3)  # shards padded to ceil(rows / 8)
    assert parts["optimizer states"] / shard == pytest.approx(optimizer, rel=1e-3)
    assert _fsdp_gradients(_8B, framework) == pytest.approx(grads, rel=1e-3)


@pytest.mark.parametrize("framework, line", [("megatron", (2.0, 4.0, 12.0)), ("deepspeed", (2.0, 2.0, 12.0))])
def test_textbook_lines_are_their_components(run_json, framework: str, line: tuple[float, float, float]) -> None:
    """The textbook profiles: Megatron-LM's fp32 main_grad (2 + 4 + 12, arguments.py accumulate_allreduce_grads_in_fp32),
    DeepSpeed's ZeRO paper count (2 + 2 + 12); the line and the components agree, as before."""
    document = run_json("memory", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "1", "--seq-len", "4096", "--framework", framework)
    assert _line(document) == line
    params = document["results"]["stage_parameters"]["value"]
    parts = _components(document)
    assert tuple(parts[k] / params for k in ("weights", "gradients", "optimizer states")) == pytest.approx(line, rel=1e-9)


def test_an_unwalked_torchtitan_layout_keeps_the_textbook_line(run_json) -> None:
    """torchtitan's walk does not cover tied embeddings (Llama 3.2 1B): the textbook sum, and its line, stand."""
    document = run_json("memory", "--model", "llama3.2-1b", "--gpu", "h200", "--gpus", "2", "--dp", "2", "--seq-len", "4096",
                        "--framework", "torchtitan")  # fmt: skip
    assert "step_reserved" not in document["results"]
    assert _line(document) == (2.0, 2.0, 12.0)
    per_rank = document["results"]["stage_parameters"]["value"] / 2  # ZeRO-3 over 2 ranks
    parts = _components(document)
    assert tuple(parts[k] / per_rank for k in ("weights", "gradients", "optimizer states")) == pytest.approx((2.0, 2.0, 12.0), rel=1e-9)
