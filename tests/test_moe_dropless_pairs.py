"""benchmarks/moe_dropless_pairs.py: Qwen3-30B-A3B dropless against token-dropping on the same layouts (issues #31, #32).

The report changes no prediction; these tests hold its readings of Megatron-Bridge's performance archive to the printed
rows, pin what parcalc gives each pair, and name the gap the pairs show as a strict xfail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import moe_dropless_pairs as pairs


def test_rows_are_the_printed_ones() -> None:
    """Each row carries the rate and GPU count its quoted archive row prints (docs/performance-summary-archive.md
    @067f987df03b), and its layout is the printed one."""
    for row in pairs.ROWS:
        assert f"{row.tokens_per_s_per_gpu:.0f}" in row.quote.replace(",", ""), row.label
        assert f"| {row.run.gpus} |" in row.quote, row.label
        assert f"| {row.run.micro_batch} | 4096 |" in row.quote, row.label
        assert row.dropless == ("tokendrop" not in row.quote), row.label


def test_the_steps_and_layer_micro_batches() -> None:
    """Steps from the printed rates: 512 x 4096 / (rate x GPUs). H100: 16 GPUs, PP 2, so DP 8 and 512 / (8 x 2) = 32
    micro-batches of 24 MoE layers a stage; B200: 64 of 48; GB200 at MBS 4: 16 of 48."""
    measured = {row.label: pairs.measured_step(row) for row in pairs.ROWS}
    assert measured["H100 FP8-CS MBS 2, token-drop (25.09)"] == pytest.approx(512 * 4096 / (10494 * 16))  # 12.49 s
    assert measured["B200 MXFP8 MBS 1, dropless (25.11)"] == pytest.approx(28.19, abs=0.01)
    assert [pairs.layer_micro_batches(row) for row in pairs.ROWS] == [768, 768, 3072, 3072, 768, 768]


def test_dropless_ran_twice_as_long_where_the_host_was_not_graphed() -> None:
    """The archive's pairs: H100 10,494 -> 5,275 tok/s (1.99x the step), B200 18,066 -> 9,299 (1.94x), GB200 22,775 ->
    23,766 (0.96x: HybridEP dropless against a graphed all-to-all)."""
    ratios = [pairs.measured_step(pairs.ROWS[b]) / pairs.measured_step(pairs.ROWS[a]) for a, b in pairs.PAIRS]
    assert ratios == pytest.approx([10494 / 5275, 18066 / 9299, 22775 / 23766])
    assert ratios[0] == pytest.approx(1.99, abs=0.005) and ratios[1] == pytest.approx(1.94, abs=0.005)


def test_parcalc_gives_the_h100_pair_one_step() -> None:
    """Both H100 rows run eager on the same layout and expert work: parcalc has nothing that tells them apart (9.98 s,
    its host loop of expert GEMMs charged in both); the B200 pair differs by that loop alone, which the graphed
    token-drop row does not issue: 16 local experts x (2 + 4) GEMMs x 24.75 us less the GEMMs' own time, 64 x 48 times
    (3.61 s with the GEMMs at MXFP8's block-scaled share, kernels.matmul_mxfp8: 3.69 s at per-tensor FP8's)."""
    h100_drop, h100_dropless = (pairs.predicted_step(pairs.ROWS[i]) for i in pairs.PAIRS[0])
    assert h100_drop == h100_dropless == pytest.approx(9.98, abs=0.01)
    b200_drop, b200_dropless = (pairs.predicted_step(pairs.ROWS[i]) for i in pairs.PAIRS[1])
    assert b200_dropless - b200_drop == pytest.approx(3.61, abs=0.02)


@pytest.mark.xfail(strict=True, reason="known gap (issues #31, #32): the dropless dispatcher's per-layer host sync "
                   "doubles the eager H100 step (1.99x), parcalc charges only the expert GEMMs' host loop (1.00x); the host's "
                   "time per MoE layer is not measured (docs/step-time.md, 'Dropless against token-dropping')")  # fmt: skip
def test_dropless_over_token_drop_on_h100_within_ten_percent() -> None:
    drop, dropless = (pairs.predicted_step(pairs.ROWS[i]) for i in pairs.PAIRS[0])
    assert dropless / drop == pytest.approx(10494 / 5275, rel=0.10)


def test_parcalcs_host_model_cut_at_the_sync_gives_a_tenth_not_double() -> None:
    """parcalc's launch list of the H100 layer (149 forward, 182 backward launches with the per-expert casts and GEMMs of 16
    local experts, current scaling's three kernels a cast) at the HF profile's host cost per kernel (30.56 / 28.76 us:
    9.79 ms of host against 11.33 ms of GPU a layer and micro-batch), cut at every layer's sync, over the same run ahead:
    1.10x, where the archive's pair shows 1.99x."""
    row = pairs.ROWS[pairs.PAIRS[0][1]]
    assert pairs.sync_cut_ratio(row) == pytest.approx(1.10, abs=0.01)
