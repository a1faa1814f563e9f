"""The GPU's wait for the host issuing an MoE layer's expert GEMMs one by one (parcalc.core.timing.moe.expert_host_exposed).

Mechanism (sources in moe.py and presets/frameworks/megatron.yaml): Megatron-LM's dispatchers copy the tokens per expert
to the host and wait for them in every MoE layer (@d98e8a64 moe/token_dispatcher.py, _maybe_dtoh_and_synchronize), and
Transformer Engine's GroupedLinear launches one cuBLASLt GEMM per local expert in a host loop (@d0067d0d
common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm): 2 GEMMs per expert forward, 4 backward. The host time per
expert GEMM is TE pull request #3134's benchmark on an SM100 GPU: 8 experts x 128 tokens, N = K = 2048, the per-expert
loop 0.267 ms against one CUTLASS launch 0.069 ms: (0.267 - 0.069) / 8 = 24.75 us.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from published_blackwell_amd_runs import RUNS
from test_published_blackwell_amd import fit_inputs

from parcalc.core.fit import estimate
from parcalc.core.timing.moe import GEMMS_PER_EXPERT, expert_host_exposed, routed_rows, routed_tokens
from parcalc.core.timing.step import layer_pieces
from parcalc.errors import PresetError
from parcalc.preset_frameworks import framework_from_document
from parcalc.presets import load_framework

TE_PR_3134 = (0.267e-3 - 0.069e-3) / 8  # s per expert GEMM: the per-expert loop less one launch, over 8 experts


def test_megatron_profile_carries_te_grouped_linears_host_time_per_expert_gemm() -> None:
    assert load_framework("megatron", ()).expert_gemm_host == pytest.approx(TE_PR_3134)
    assert pytest.approx(24.75e-6) == TE_PR_3134
    # the other stacks run their experts otherwise (torch._grouped_mm in one launch, or no MoE path modelled)
    for other in ("fsdp2", "torchtitan", "deepspeed", "hf"):
        assert load_framework(other, ()).expert_gemm_host == 0.0, other


def test_exposed_host_time_is_the_loop_less_the_gpu_work_beside_it() -> None:
    """16 local experts (Qwen3-30B-A3B on EP 8): forward 32 GEMM launches, backward 64."""
    c = 24.75e-6
    assert GEMMS_PER_EXPERT == (2, 4)  # fc1, fc2; and the dgrad and wgrad of each
    forward, backward = expert_host_exposed(16, c, 0.1e-3, 1.0e-3)
    assert forward == pytest.approx(16 * 2 * c - 0.1e-3)  # 0.692 ms
    assert backward == pytest.approx(16 * 4 * c - 1.0e-3)  # 0.584 ms
    assert expert_host_exposed(16, c, 1e-3, 2e-3) == (0.0, 0.0)  # the GPU's work outlasts the loop: nothing exposed
    assert expert_host_exposed(16, 0.0, 0.0, 0.0) == (0.0, 0.0)  # a stack without the loop


def _b200_qwen3():  # type: ignore[no-untyped-def]
    run = next(r for r in RUNS if r.key == "mb2511-b200-qwen3-30b-a3b-8gpu-mxfp8")
    return fit_inputs(run)


def test_b200_qwen3_row_adds_the_loop_per_moe_layer_and_micro_batch() -> None:
    """The held-out B200 Qwen3-30B-A3B row (MBS 1, EP 8, MXFP8): 2,048 rows per local expert, whose GEMMs are short on a
    B200, so the host's loop shows: the exposed EP time per MoE layer grows by exactly expert_host_exposed of the layer's
    own kernels, and the step by m x 48 layers of it."""
    model, config, training, cluster = _b200_qwen3()
    without = replace(cluster, framework=replace(cluster.framework, expert_gemm_host=0.0))
    experts = config.experts()
    lp = layer_pieces(model, config.layout, config.micro_batch, config.recompute, training, cluster, experts=experts)
    lp0 = layer_pieces(model, config.layout, config.micro_batch, config.recompute, training, without, experts=experts)
    from parcalc.core.timing.compute import layer_passes
    from parcalc.core.timing.step import _layer_shard

    moe_layer = layer_passes(model, _layer_shard(model, config.layout, config.micro_batch, training, cluster), cluster.spec, experts)
    rows, local = routed_rows(model, routed_tokens(config.micro_batch, training.seq_len, 1, False), experts)
    assert (rows, local) == (2048, 16)
    experts_forward = sum(k.time for k in moe_layer.forward if k.key.startswith("moe.experts"))
    host_f, host_b = expert_host_exposed(local, cluster.framework.expert_gemm_host, experts_forward, moe_layer.t_backward)
    # 32 launches of 24.75 us (0.792 ms) against the experts' forward GEMMs: 0.599 ms exposed at MXFP8's GEMM share
    assert host_f > 0.55e-3 and host_b > 0.0
    assert lp.ep_alone - lp0.ep_alone == pytest.approx(host_f + host_b)
    assert lp.ep_paired - lp0.ep_paired == pytest.approx(host_f + host_b)
    m = config.micro_batches(training)
    step, step0 = estimate(model, config, training, cluster).step.value, estimate(model, config, training, without).step.value
    assert step - step0 == pytest.approx(m * model.layers * (host_f + host_b), rel=1e-9)


def test_gpu_bound_moe_layers_pay_nothing() -> None:
    """At 8 x 4,096 tokens per micro-batch the MI355X row's expert GEMMs outlast the loop (Primus, MBS 8)."""
    run = next(r for r in RUNS if r.key == "primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline")
    model, config, training, cluster = fit_inputs(run)
    without = replace(cluster, framework=replace(cluster.framework, expert_gemm_host=0.0))
    assert estimate(model, config, training, cluster).step.value == pytest.approx(estimate(model, config, training, without).step.value)


@pytest.mark.parametrize(("value", "message"), [("24.75", "has no unit"), ("0 us", "greater than zero"),
                                                ("20 ms", "above 0 and at most 10 ms")])  # fmt: skip
def test_a_bad_expert_gemm_host_is_a_preset_error(value: str, message: str) -> None:
    path = Path(__file__).parents[1] / "presets" / "frameworks" / "megatron.yaml"
    data = yaml.safe_load(path.read_text())
    data["expert_gemm_host"] = {"value": value, "source": "te_grouped"}
    with pytest.raises(PresetError, match=message):
        framework_from_document("megatron", path, data)
