"""`memory` / `fit --framework hf --compile`: the step's peak walks the code Inductor generates for transformers'
LlamaForCausalLM compiled whole with its loss (parcalc.core.memory_hf_compiled; held against every allocation of compiled
CPU steps in tests/ground_truth/test_torch_memory_hf_compiled.py). Here: the shared H200 run's shape (Llama 3.2 1B, b 4,
s 4096), whose eager step was measured (71.5 GiB, memory-llama1b-b4-s4096.json, the eager walk within 0.01 %) and whose
compiled step was not: the compiled figures are the walk's prediction, pinned for the measurement a GPU session may take."""

from __future__ import annotations

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_timeline import HfStep, hf_step_peak
from parcalc.presets import load_model

GIB = 2**30


def test_compiled_peak_of_the_h200_step() -> None:
    """Eager 71.51 GiB at the loss's backward (three fp32 b s x V tensors, 7.83 GiB each); compiled 41.24 GiB at the LM head's
    backward: the logits' bf16 gradient written into the logits' buffer (3.91 GiB), the partitioner's saved activations (one
    bf16 norm output per norm, no fp32 copies), the bf16 weight casts (2.30 GiB, as eager's autocast cache), weights and
    AdamW's states (13.81 GiB)."""
    model = load_model("llama3.2-1b")
    eager, compiled = (hf_step_peak(model, HfStep(4, 4096, compiled=c)) for c in (False, True))
    assert eager.allocated / GIB == pytest.approx(71.508, abs=5e-4)
    assert compiled.allocated / GIB == pytest.approx(41.237, abs=5e-4)
    assert compiled.phase == "backward: LM head"
    parts = dict(compiled.parts)
    assert parts["logits and loss"] == pytest.approx(4096 * 4 * 128256 * 2, abs=1024)  # the bf16 logits' gradient only
    assert parts["autocast weight copies"] / GIB == pytest.approx(2.302, abs=1e-3)  # 1.236e9 parameters' bf16 casts
    # the activations: 16 layers' saved tensors (about 41 T h bytes a layer), less the last layer's input gradient work
    assert parts["activations"] / GIB == pytest.approx(20.66, abs=0.01)


def test_the_compiled_walk_stands_only_where_it_was_read() -> None:
    """Checkpointing, bf16 weights and Qwen3's q/k norms under --compile: the eager walk stands, the same figure as without."""
    model = load_model("llama3.2-1b")
    for step in (HfStep(2, 4096, recompute=Recompute.FULL), HfStep(2, 4096, precision=Precision.BF16)):
        assert hf_step_peak(model, step).allocated == hf_step_peak(model, HfStep(**{**step.__dict__, "compiled": True})).allocated


def test_memory_names_the_compiled_walk(run_json) -> None:
    out = run_json("memory", "--model", "llama3.2-1b", "--seq-len", "4096", "--micro-batch", "4", "--framework", "hf", "--gpu",
                   "h200", "--compile")  # fmt: skip
    assert out["results"]["step_peak"]["value"] / GIB == pytest.approx(41.237, abs=5e-4)
    assert "memory_hf_compiled" in out["results"]["step_peak"]["source"]
    assert any(a.startswith("--compile: the step's peak walks the code Inductor generates") for a in out["assumptions"])
    stated = run_json("memory", "--model", "llama3.2-1b", "--seq-len", "4096", "--micro-batch", "4", "--framework", "hf", "--gpu",
                      "h200", "--compile", "--recompute", "full")  # fmt: skip
    assert any("the eager step walk stands" in a and "--recompute full" in a for a in stated["assumptions"])


@pytest.mark.parametrize("compiled, largest", [(False, 4), (True, 9)])
def test_largest_micro_batch_on_an_80_gib_h100(run_json, compiled: bool, largest: int) -> None:
    """At s 4096 on one H100 (80 GiB): eager fits b 4 (measured on the H200: 71.5 GiB allocated, 75.7 GiB with what the
    allocator and the reserve hold), compiled b 9 (73.8 GiB; b 10 needs 80.4 GiB): a prediction."""

    def fits(b: int) -> bool:
        out = run_json("memory", "--model", "llama3.2-1b", "--seq-len", "4096", "--micro-batch", str(b), "--framework", "hf",
                       "--gpu", "h100-sxm5", *(("--compile",) if compiled else ()))  # fmt: skip
        return bool(out["fits"])

    assert fits(largest) and not fits(largest + 1)
