"""`fit`'s step time against published training runs beyond Narayanan and Korthikanti.

The runs and their sources are in tests/published_step_runs.py; how each is entered into parcalc
(framework, ZeRO stage, recomputation, what the source leaves open) is in tests/step_time_cases.py.
tests/test_fit_published.py holds the two Megatron-LM papers (Narayanan et al. 2021 Table 1,
Korthikanti et al. 2022 Table 5).

What was calibrated on what. A100: the GEMM share (0.72) comes from ONE layer of Korthikanti's
Table 4 (test_fit_published.py). H100: the GEMM share (0.496; 0.491 before the fsdp2 profile's eager
kernels) comes from ONE run, step_time_cases.CALIBRATION (MPT-7B on one node of 8 H100s, no network),
and is asserted to reproduce it below. Every other run here is a test; nothing else was tuned.

Bands, and why. Each run within 25 % (the issue's worst-case target), and the mean absolute error
over the runs at most 10 %. Measured (docs/step-time.md): 14 runs, mean 8.6 %, worst +17.4 % (MPT-13B on 64
H100s, one micro-batch of 2 per step, where FSDP's first gather and last reduce-scatter are least
hidden). BLOOM 176B joined the tests (+12.5 %) when DeepSpeed's pipeline engine was modelled from its
source (it was a known gap at +21.6 %). The errors are throughput ratios, so +10 % means parcalc predicts the run 10 % faster.
"""

from __future__ import annotations

import pytest
from step_time_cases import CALIBRATION, CASES, KNOWN_GAPS, Case, error, inputs


@pytest.mark.parametrize("case", CASES, ids=[case.key for case in CASES])
def test_published_run_within_25_percent(case: Case) -> None:
    err, est = error(case)
    assert est.fits or case.unchecked_memory, f"{case.key} needs {est.total_memory / 2**30:.1f} GiB"
    assert abs(err) <= 0.25, f"{case.key}: parcalc {err * 100:+.1f} % ({case.assumed})"


def test_mean_error_at_most_10_percent() -> None:
    errors = [abs(error(case)[0]) for case in CASES]
    assert len(errors) >= 10
    assert sum(errors) / len(errors) <= 0.10


def test_runs_come_from_several_sources_and_both_gpus() -> None:
    gpus = {case.run.gpu[:4] for case in CASES}
    assert {"a100", "h100"} <= gpus
    frameworks = {case.framework for case in CASES}
    assert {"megatron", "fsdp2", "torchtitan"} <= frameworks
    assert len({case.run.source[:40] for case in CASES}) >= 3


def test_h100_calibration_reproduces_its_run() -> None:
    # the one H100 run the GEMM share was set from: 10,643 tokens/s per GPU (llm-foundry, MPT-7B, 8 x H100)
    err, _ = error(CALIBRATION)
    assert CALIBRATION not in CASES
    assert err == pytest.approx(0.0, abs=0.01)
    _, config, _, cluster = inputs(CALIBRATION)
    assert (config.layout.tp, config.layout.pp, config.layout.dp, config.micro_batch, config.layout.zero) == (1, 1, 8, 6, 3)
    assert cluster.gpus == cluster.gpus_per_node == 8  # one node: no network in the calibration


@pytest.mark.parametrize("case", KNOWN_GAPS, ids=[case.key for case in KNOWN_GAPS])
def test_known_gaps_are_predicted_too_fast(case: Case) -> None:
    # Not tests of accuracy: each lacks a mechanism in parcalc (docs/step-time.md, "Known gaps"). They
    # pin the direction and size of the gap, so that a change that closes it (or widens it) is seen.
    err, _ = error(case)
    assert 0.20 <= err <= 0.45, f"{case.key}: {err * 100:+.1f} %"


# The search against the layouts practitioners chose. Measured for every run above: the plain-FSDP
# layouts of MPT on 64 GPUs rank first of 16-19 layouts. Three runs rank lower, each because the search
# adds tensor parallelism that the run's stack did not offer and so drops full recomputation (MPT-30B on
# 8 A100: TP 2 x DP 4, 19 % faster; MPT-70B on 128 A100 40GB: TP 2 x PP 2, 16 %; TorchTitan 70B:
# TP 4 x DP 16, 18 %). GPT-3 175B (2021 feature set: full recomputation, no SP, no ZeRO) ranks 5th of 6:
# parcalc prefers TP 4 x PP 16 to the published TP 8 x PP 16 by 12 %, against Narayanan et al. 2021
# Fig. 13 (TP up to the node size is best): an open question of the model (docs/step-time.md).
RANKED = [case for case in CASES if case.key.startswith(("mpt-70b-64x", "mpt-13b-", "mpt-1b-", "mpt-7b-"))]
# Multi-node plain FSDP (#18): TorchTitan Llama 3 8B on 64 A100 (8 nodes) ranks first of 21: every FSDP layout
# above, on 64 to 128 GPUs of A100 and H100, is a multi-node FSDP run; measured before and after NVLS / NVLS_TREE.
RANKED += [case for case in CASES if case.key == "torchtitan-llama3-8b-64xa100"]


@pytest.mark.parametrize("case", RANKED, ids=[case.key for case in RANKED])
def test_search_ranks_the_published_layout_in_the_best_tenth(case: Case) -> None:
    from parcalc.core.fit_search import SearchSpace, search

    model, config, training, cluster = inputs(case)
    result = search(model, training, cluster, SearchSpace(zero_stages=cluster.framework.zero_stages))
    columns = result.evaluated.columns
    best: dict[tuple[int, int, int], float] = {}
    for i in result.fitting:
        layout = (int(columns["tp"][i]), int(columns["pp"][i]), int(columns["dp"][i]))
        best[layout] = min(best.get(layout, float("inf")), float(columns["t_step"][i]))
    ranking = sorted(best, key=best.__getitem__)
    rank = ranking.index((config.layout.tp, config.layout.pp, config.layout.dp)) + 1
    assert len(ranking) >= 10
    assert rank <= 0.1 * len(ranking), f"{case.key}: published layout {rank} of {len(ranking)}; best {ranking[:3]}"


def test_gpt3_published_layout_is_within_12_percent_of_the_search_best() -> None:
    # GPT-3 175B on 1024 A100 (Megatron-LM README, 2021: full recomputation, no SP, no distributed optimizer).
    # Measured: best TP 4 x PP 16 x DP 16 (v = 3) at 26.8 s; the published TP 8 x PP 16 x DP 8 at best 29.8 s
    # (11.0 % slower; v = 2, micro-batch 2), 5th of 6 layouts. TP 8 pays twice TP 4's all-reduce time per GPU (the
    # same b s h bytes per call, half the compute per call), and TP 4's extra pipeline bubble costs less by the
    # model; Narayanan et al. 2021 Fig. 13 found TP 8 best at 64 GPUs. 6.8 % (25.2 / 26.9 s) until the case ran
    # the README's commit (dropout on, and every TP rank sending the whole activation: each extra chunk of an
    # interleaved TP 8 layout now pays 8 x the bytes a rank sent with the later scatter/gather).
    from parcalc.core.choices import Recompute
    from parcalc.core.fit_search import SearchSpace, search

    case = CASES[0]
    assert case.key == "megatron-gpt3-175b-1024xa100"
    model, config, training, cluster = inputs(case)
    space = SearchSpace(recomputes=(Recompute.FULL,), zero_stages=(0,), sequence_parallel=(False,))
    result = search(model, training, cluster, space)
    columns = result.evaluated.columns
    times = {(int(columns["tp"][i]), int(columns["pp"][i]), int(columns["dp"][i])): float(columns["t_step"][i]) for i in result.ranked()[::-1]}
    published = times[(config.layout.tp, config.layout.pp, config.layout.dp)]
    assert published / min(times.values()) - 1 == pytest.approx(0.110, abs=0.01)


def test_h100_share_is_rederived_from_the_calibration_run_alone() -> None:
    # The fsdp2 profile's eager kernels changed the calibration run's memory-bound kernels (autograd's adds of
    # the two residual branches' gradients; LayerNorm and GeLU are one ATen kernel each, as fused): re-derived
    # from that one run, 0.496 (0.491 under the fused set). The preset must hold the re-derived value.
    # Since the optimizer step counts multi_tensor_apply's launches (compute.multi_tensor_waves: x 1.2375 on 132 SMs,
    # a mechanism measured on the H200), the same run re-derives 0.4973 (0.4918 fused): the optimizer takes 1.5 ms
    # more of MPT-7B's 1.155 s. The preset keeps 0.496 (not re-tuned to absorb a mechanism that moved the calibration
    # run by 0.1 %, as the lead asked); the tolerance moved from 0.0005 to 0.0015 for that.
    from step_time_cases import calibrate_h100_share

    from parcalc.presets import load_gpu

    assert calibrate_h100_share("fused") == pytest.approx(0.4918, abs=0.0005)
    share = calibrate_h100_share()
    assert share == pytest.approx(0.4973, abs=0.0005)
    for preset in ("h100-sxm5", "h100-sxm5-96gb-hbm2e", "h200"):  # every preset that takes the H100's calibrated share
        rates = load_gpu(preset, ()).kernels
        assert rates is not None and rates.matmul_share("bf16").value == pytest.approx(share, abs=0.0015), preset  # type: ignore[union-attr]
        assert rates.matmul_share("bf16").value == 0.496  # type: ignore[union-attr]


def test_torch_compile_speedup_of_torchtitans_pairs() -> None:
    # TorchTitan's Dec 2024 tables (tests/published_step_runs.py): torch.compile takes Llama 3.1 8B FSDP from 5,762
    # to 6,667 tokens/s per GPU on 8 H100s (+15.7 %) and from 5,605 to 6,514 on 128 (+16.2 %). With the fused set as
    # the eager baseline parcalc predicted +0.3 %; the eager set (one kernel per ATen op, the torchtitan profile's)
    # against Inductor's groups of the same code (compiled per block, complex RoPE left to ATen, the ends eager:
    # compute.COMPILE_PER_BLOCK) predicts +16.3 % for both on a 700 W H100, and +14.8 % on the runs' 500 W part (its
    # GEMMs run 1 / 0.896 slower, its memory-bound kernels do not, so what compile removes is a smaller share of the
    # step: parcalc.core.power). Not tuned to them; before the per-block groups (with the session-8 compiled set,
    # fused RoPE and ends) it was +21 %.
    from step_time_cases import compile_speedups

    rows = compile_speedups()
    assert len(rows) == 2
    for key, predicted, published in rows:
        assert published == pytest.approx(0.157 if "-8xh100" in key else 0.162, abs=0.001)
        assert 0.10 <= predicted <= 0.30, f"{key}: predicted {predicted * 100:+.1f} %"
        assert predicted == pytest.approx(0.148, abs=0.005)  # measured: +14.8 % and +14.8 % (at 500 W)
