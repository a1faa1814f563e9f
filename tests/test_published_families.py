"""Issue #32's check on the published-runs tables, family by family (tests/published_families.py): each
family's mean |error| at most 10 %, its worst at most 25 %. The rows' families are stated row by row in
FAMILIES; the modern runs' must be their own `categories` (tests/published_modern_runs.py)."""

from __future__ import annotations

import modern_cases
import pytest
import step_time_cases
from published_families import CATEGORY_FAMILY, FAMILIES, FP8, FSDP, LONG, MEGATRON, MOE, ORDER, family_stats, rows


def test_every_row_of_both_tables_has_its_families() -> None:
    keys = [case.key for case in step_time_cases.CASES + step_time_cases.KNOWN_GAPS + modern_cases.CASES + modern_cases.KNOWN_GAPS]
    assert sorted(keys) == sorted(FAMILIES)
    assert all(FAMILIES[key] and set(FAMILIES[key]) <= set(ORDER) for key in keys)


def test_modern_rows_families_are_their_categories() -> None:
    # a modern run's families are the categories its source states; one without any is a dense FSDP2 run
    for case in modern_cases.CASES + modern_cases.KNOWN_GAPS:
        stated = {CATEGORY_FAMILY[c] for c in case.run.categories} or {FSDP}
        assert set(FAMILIES[case.key]) == stated, case.key


def test_dense_rows_family_follows_their_framework() -> None:
    # Megatron-LM and Megatron-DeepSpeed (and Meta's TP/PP run, entered with the megatron profile) against FSDP
    for case in step_time_cases.CASES + step_time_cases.KNOWN_GAPS:
        assert FAMILIES[case.key] == ((MEGATRON,) if case.framework in ("megatron", "deepspeed") else (FSDP,)), case.key


STATS = {stat.family: stat for stat in family_stats(rows(include_gaps=False))}
# over 10 % (python tests/published_families.py): mean / worst |error|. MoE was 12.7 / 18.9 % at the start of session 13,
# 9.5 / 18.9 % once the Qwen3-235B BF16 row was entered with the dispatcher and recomputation its source states.
# Megatron-style was 10.4 / 12.5 % until session 15 entered GPT-3 175B as its README's commit ran it (the whole activation
# sent by every TP rank, dropout 0.1, the fp16 all-reduce): 9.2 / 12.5 %
# MoE 10.6 / 18.4 % since session 18: the H100's FP8 GEMM share became a mechanism (0.44, an untested derate -> 0.477, the
# 16-bit share x the GH100 tile model's FP8 / BF16 ratio: presets/gpus/h100-sxm5.yaml fp8_tiles), which speeds up the FP8 MoE
# rows that were already too fast (DeepSeek-V3 +3.9 / +5.3 -> +7.0 / +7.4 %, Qwen3-235B FP8 +17.9 -> +18.4 %); what makes them
# fast is not their GEMM rate (docs/step-time.md, Hopper's FP8 GEMMs)
# and 12.2 / 21.1 % once Megatron-Core's overlapped pipeline sends were modelled (overlap_p2p_comm: the interleaved MoE rows
# DeepSeek-V3 +7.0 / +7.4 -> +10.0 / +10.2 %, Qwen3-235B FP8 +18.4 -> +21.1 %; docs/step-time.md)
# and 10.2 / 16.2 % after session 19 (Megatron's BF16 dispatch under FP8, the dispatchers' SMs, the DeepSeek-V3 rows'
# recipes). Session 20: 9.99 / 16.2 % (passes, by 0.01 point) once the all-to-all dispatcher sorts the received copies into
# expert order and back (parcalc.core.timing.moe SORT_SOURCE): Qwen3-235B FP8 +16.0 -> +15.1 %; Qwen3-30B BF16 HybridEP
# +16.2 % is the worst. The host's launches after the dispatcher's sync were checked and do not explain the rest
# (benchmarks/moe_host_overlap.py, docs/step-time.md)
# Session 24: 9.9 -> 10.2 % once SP's all-gathers carry the FP8 recipe's bytes (Transformer Engine quantises before it
# gathers: parcalc.core.timing.fp8_quantise.SP_GATHER_SOURCE): DeepSeek-V3 FP8 +8.6 / +9.1 -> +9.3 / +9.5 %, Qwen3-235B FP8
# +15.1 -> +15.3 %. Not tuned back: the saving is the source's, and the rows it moves were already predicted too fast.
OVER_10: dict[str, str] = {
    MOE: ("mean 10.2 %: the FP8 MoE rows were already too fast and the sourced FP8 SP all-gathers make them faster still; "
          "the missing cost is elsewhere, e.g. the MoE layers' host time after the dispatcher's sync (docs/step-time.md "
          "'Known gaps')"),
}


def test_family_sizes() -> None:
    assert {family: len(STATS[family].rows) for family in ORDER} == {MEGATRON: 4, FSDP: 11, MOE: 5, LONG: 6, FP8: 9}


@pytest.mark.parametrize("family", ORDER)
def test_family_worst_error_at_most_25_percent(family: str) -> None:
    assert STATS[family].worst <= 0.25, f"{family}: worst {STATS[family].worst * 100:.1f} %"


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=f"{f}: {OVER_10[f]}"))
                                    if f in OVER_10 else f for f in ORDER])  # fmt: skip
def test_family_mean_error_at_most_10_percent(family: str) -> None:
    assert STATS[family].mean <= 0.10, f"{family}: mean {STATS[family].mean * 100:.1f} %"


# The H100's fitted GEMM share against the GH100 die's mechanisms (issue #32, session 21; docs/step-time.md "What slows the
# H100 rows below the GH100 die model"). The bound that matters: the H200's own loop of large GEMMs at the 700 W limit (the
# sweep's 16384^3, 718 TFLOP/s: gemm_tiles' `clock`, 1328.5 MHz) is the slowest the die's GEMMs run under that limit by
# the power model (no step's Tensor Core load exceeds a GEMM loop's), and the H100's own large GEMMs alone ran as fast
# (pytorch/pytorch issue #100850: 720-772 TFLOP/s). Even there, and with the attention kernel each run's stack ran, these
# rows stay over 10 % fast, so the clock cannot be what the fitted 0.496 stands for on them.
LOOP_CLOCK_STILL_FAST = {
    # python tests/published_families.py --gh100-loop-clock --run-attention (session 21)
    "llama3-405b-16384xh100-seq8192": 0.126,
    "llama3-405b-8192xh100-seq8192": 0.178,
    "mcore-moe-deepseek-v3-1024xh100-fp8blk": 0.301,  # 0.291 before SP's FP8 all-gathers (session 24)
    "mbridge2509-deepseek-v3-1024xh100-fp8": 0.257,  # 0.252 before SP's FP8 all-gathers (session 24)
    "mcore-moe-qwen3-235b-256xh100-bf16": 0.216,
    "mbridge2604-qwen3-235b-256xh100-fp8": 0.212,  # 0.209 before SP's FP8 all-gathers (session 24)
    "mbridge-skill-qwen3-30b-a3b-16xh100-bf16-hybridep-overlap": 0.319,  # 0.322 before HybridEP's probabilities (issue 32)
}


def test_h100_rows_at_the_gemm_loops_clock_stay_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    import published_families

    for module in (step_time_cases, modern_cases):
        monkeypatch.setattr(module, "load_gpu", module.load_gpu)  # restored after the test
    monkeypatch.setattr(step_time_cases, "RUN_ATTENTION_KERNELS", True)
    published_families.gh100_loop_clock()
    errors = {row.key: row.error for row in rows(include_gaps=False)}
    for key, expected in LOOP_CLOCK_STILL_FAST.items():
        assert errors[key] == pytest.approx(expected, abs=0.002), key
        assert errors[key] > 0.10, f"{key}: {errors[key] * 100:+.1f} % at the GEMM loop's clock"
    # the MPT rows, which ran llm-foundry's Triton attention, are within the bars there (MPT-13B the worst)
    mpt = [errors[key] for key in errors if key.startswith("mpt-") and "xh100" in key]
    assert len(mpt) == 3 and max(mpt) == pytest.approx(0.124, abs=0.002)

