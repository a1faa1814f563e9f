"""Step time of Mixture-of-Experts, long-context and FP8 runs held against published runs (issue #19).

The runs and how each is entered are in tests/modern_cases.py (data: tests/published_modern_runs.py);
nothing in parcalc was tuned to them: the H100's GEMM share comes from one dense MPT-7B run
(tests/step_time_cases.py CALIBRATION), the FlashAttention shares from the FlashAttention-2 paper, the
network from NCCL's tuning tables and the DGX H100 node description, the dispatch model from
DeepSeek-V3 sec. 3.2.2 / DeepEP's design. `python tests/modern_cases.py` prints the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import modern_cases as mc

from parcalc.core.choices import Precision, Recompute
from parcalc.core.fit import Config, Training, estimate
from parcalc.core.timing.moe import ExpertShard, remote_nodes_per_token, routed_rows
from parcalc.errors import InputError
from parcalc.presets import load_model

ERRORS = {case.key: mc.error(case)[0] for case in mc.CASES}


def test_the_runs_cover_what_the_issue_asks() -> None:
    """At least 10 runs from at least 4 sources; 4 MoE of two families, 3 CP (one at >= 128K), 3 FP8."""
    runs = [case.run for case in mc.CASES]
    assert len(runs) >= 10
    sources = {run.source.split(",")[0].split(";")[0][:40] for run in runs}
    assert len({run.framework for run in runs}) >= 4 and len(sources) >= 4
    moe = [r for r in runs if "moe" in r.categories]
    assert len(moe) >= 4 and len({r.model for r in moe}) >= 2
    cp = [r for r in runs if "cp" in r.categories]
    assert len(cp) >= 3 and max(r.seq_len or 0 for r in cp) >= 131072
    assert len([r for r in runs if "fp8" in r.categories]) >= 3


def test_mean_and_worst_error() -> None:
    """The issue's target: mean absolute error of predicted throughput at most 20 %, none above 40 %."""
    errors = [abs(e) for e in ERRORS.values()]
    assert sum(errors) / len(errors) <= 0.20, ERRORS
    assert max(errors) <= 0.40, ERRORS


@pytest.mark.parametrize("key", [c.key for c in mc.KNOWN_GAPS])
def test_known_gaps_are_predicted_too_fast(key: str) -> None:
    """TorchTitan's Dec 2024 ring attention and the FP8 Qwen3-30B row: parcalc predicts them faster than
    published, for reasons it has no mechanism for (tests/modern_cases.py KNOWN_GAPS); pinned, not accurate.
    With the 500 W power curve of their GPU (presets/gpus/h100-sxm5-96gb-hbm2e.yaml) the CP rows went from
    +24 / +72 / +83 % to +12 / +55 / +65 %, with PyTorch's ring attention timed as it runs (its exchanges and fp32 merges,
    parcalc.core.timing.torch_ring_attention; the rotate method torchtitan's default allgather) to +8 / +48 / +56 %: still
    too fast, the gap growing with the CP degree (FSDP 8 CP 1 at 32K, the table's control row, is +14.5 %: the CP 2 row's
    +8 % is of that size, the CP 4 and 8 rows' is not: the CP 2 row is a test, tests/modern_cases.py CASES)."""
    case = next(c for c in mc.KNOWN_GAPS if c.key == key)
    floor = {"tt2412-llama31-8b-8xh100-fsdp2-cp4-seq128k-fp8": 0.4,
             "tt2412-llama31-8b-8xh100-fsdp1-cp8-seq256k-fp8": 0.4}.get(key, 0.1)  # fmt: skip
    assert mc.error(case)[0] > floor


def test_moe_overlap_and_dispatcher_move_the_step_as_published() -> None:
    """Megatron-Bridge's A/B on Qwen3-30B-A3B, 16 H100 (SKILL.md): plain EP overlap took 244.0 to 287.3 TFLOP/s
    (x1.18). parcalc's HybridEP run without and with --ep-overlap 1f1b: the overlap shortens the step by 5-30 %."""
    case = next(c for c in mc.CASES if c.key == "mbridge-skill-qwen3-30b-a3b-16xh100-bf16-hybridep-overlap")
    model, config, training, cluster = mc.inputs(case)
    with_overlap = estimate(model, config, training, cluster)

    without = estimate(model, config.replaced(ep_overlap="none"), training, cluster)
    gain = without.step.value / with_overlap.step.value
    assert 1.05 < gain < 1.30
    assert with_overlap.ep_comm is not None and without.ep_comm is not None
    assert with_overlap.ep_comm.value < without.ep_comm.value
    nccl = estimate(model, config.replaced(ep_overlap="none", moe_dispatcher="alltoall"), training, cluster)
    assert nccl.ep_comm is not None and nccl.ep_comm.value > without.ep_comm.value  # DeepEP's per-node dedup sends less


def test_fp8_over_bf16_on_a_dense_70b_model() -> None:
    """The issue: FP8/BF16 step ratio of a dense 8B-70B model on H100 within 1.15-1.6, explained term by term.
    Llama 3 70B on 64 H100, TP 8 x PP 1 x DP 8, SP, micro-batch 1, s 8192, FlashAttention: the GEMMs run at
    0.477 x 1979 against 0.496 x 989 TFLOP/s (x1.92), attention and memory-bound kernels unchanged, and each
    linear's inputs pay an FP8 cast, and SP's all-gathers move the FP8 data; the ratio lands in 1.15-1.6 and is less than
    the GEMM-only 1.77."""
    from parcalc.presets import load_gpu, load_link

    model = load_model("llama3-70b")
    gpu = load_gpu("h100-sxm5")
    assert gpu.node is not None
    config = Config.of(8, 1, 8, 1, Recompute.NONE, 1, True)
    times = {}
    for precision in (Precision.MIXED_BF16, Precision.FP8):
        from parcalc.core.fit import Cluster

        dtype = precision.gemm_dtype
        cluster = Cluster(64, 8, gpu.dtypes[dtype].dense_peak.value, gpu.memory_capacity.value, load_link("nvlink4"),
                          load_link("ib-ndr"), gpu=gpu, dtype=dtype, attention_peak=gpu.dtypes["bf16"].dense_peak.value)  # fmt: skip
        training = Training(512, 8192, precision, flash_attention=True, dropout=False, fp8_recipe="delayed")
        times[precision] = estimate(model, config, training, cluster)
    bf16, fp8 = times[Precision.MIXED_BF16], times[Precision.FP8]
    ratio = bf16.step.value / fp8.step.value
    assert 1.15 <= ratio <= 1.6
    assert bf16.compute.value / fp8.compute.value < (0.477 * 1978.9) / (0.496 * 989.4)  # casts and BF16 kernels remain
    # Transformer Engine all-gathers the FP8 data (1 byte an element, not BF16's 2: TE @d0067d0d module/linear.py:347-411,
    # distributed.py _all_gather_fp8), the reduce-scatters stay BF16 (linear.py:572): the TP time falls, by less than half.
    # Before session 24 parcalc gathered BF16 and FP8's tp_comm was the larger (15.52 against 14.65 s: its shorter
    # input-gradient GEMMs hide less of the SP re-gathers); now 11.47 against 14.65 s, the ratio 1.41 -> 1.51
    assert 0.5 * bf16.tp_comm.value < fp8.tp_comm.value < bf16.tp_comm.value
    assert fp8.tp_comm.value == pytest.approx(11.47, abs=0.01)


def test_remote_nodes_per_token_hand_values() -> None:
    """E = 256 experts on N = 8 nodes (32 each), top-8. Without a limit a token's 8 experts fall on
    8 (1 - C(224, 8)/C(256, 8)) = 5.29 distinct nodes, 7/8 of them remote: 4.63. With M = 4 (DeepSeek-V3):
    4 (1 - C(96, 8)/C(128, 8)) = 3.63 distinct, 3.18 remote. NCCL's all-to-all sends 8 x 7/8 = 7 copies."""
    from math import comb

    free = 8 * (1 - comb(224, 8) / comb(256, 8)) * 7 / 8
    limited = 4 * (1 - comb(96, 8) / comb(128, 8)) * 7 / 8
    assert remote_nodes_per_token(256, 8, 8, None) == pytest.approx(free)
    assert remote_nodes_per_token(256, 8, 8, 4) == pytest.approx(limited)
    assert (round(free, 2), round(limited, 2)) == (4.63, 3.18)
    assert remote_nodes_per_token(256, 8, 1, None) == 0.0


def test_rows_per_local_expert() -> None:
    """m_e = rho x etp x T k ep / E: DeepSeek-V3, T = 2048 tokens per rank (b 1, s 4096, SP over TP 2), k 8,
    ep 64, E 256: 2048 x 8 x 64 / 256 = 4096 rows for each of the 4 local experts."""
    model = load_model("deepseek-v3")
    rows, local = routed_rows(model, 2048, ExpertShard(ep=64, etp=1))
    assert (rows, local) == (4096.0, 4)
    rows, _ = routed_rows(model, 2048, ExpertShard(ep=64, etp=1, imbalance=1.25))
    assert rows == 5120.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_nodes_per_token": 16}, "is more than the 8 node"),
        ({"max_nodes_per_token": 0}, "at least 1"),
        ({"moe_dispatcher": "nvshmem"}, "--moe-dispatcher"),
        ({"ep_overlap": "always"}, "--ep-overlap"),
    ],
)
def test_bad_moe_settings_are_one_line_errors(changes: dict, message: str) -> None:

    case = next(c for c in mc.CASES if c.key == "mcore-moe-deepseek-v3-1024xh100-fp8blk")
    model, config, training, cluster = mc.inputs(case)
    with pytest.raises(InputError, match=message):
        estimate(model, config.replaced(**changes), training, cluster)


@pytest.mark.parametrize("value", ["1e308", "129", "nan", "-1", "", "abc"])
def test_moe_imbalance_hostile_values_are_one_line_errors(value: str) -> None:
    """--moe-imbalance beyond the routed experts (a rank receives at most every routed copy of its EP group, ep <= 128
    times the balanced share) or not a factor >= 1: one line, exit 2 (1e308 used to overflow the expert rows)."""
    from typer.testing import CliRunner

    from parcalc.cli import app

    result = CliRunner().invoke(app, ["fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "1024",
                                      "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "16", "--moe-imbalance", value])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: --moe-imbalance") and result.output.count("\n") == 1
