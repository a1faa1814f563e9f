"""`flops --cp`: FLOPs of the busiest context-parallel rank, with and without the 2cp-chunk causal balancing
(parcalc.core.context.cp_rank_flops). Expected values derived by hand below."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.context import cp_rank_flops
from parcalc.core.flops import training_flops
from parcalc.errors import InputError
from parcalc.presets import load_model

S = 8192


@pytest.fixture(scope="module")
def counted():  # type: ignore[no-untyped-def]
    return training_flops(load_model("llama3-8b"), 1, S, causal=True)


def test_attention_core_and_the_balanced_rank(counted) -> None:  # type: ignore[no-untyped-def]
    # Llama 3 8B: 32 layers, 32 heads x 128 = 4096 query width. Q·K^T and score·V are 2 s^2 4096 FLOP each,
    # halved by the causal mask: 2 x 8192^2 x 4096 per layer forward; x 32 layers x 3 (forward + 2x backward)
    f_att = 3 * 32 * 2 * S * S * 4096
    assert f_att == 52_776_558_133_248
    d = cp_rank_flops(counted, S, 8, balanced=True)
    assert d.term("F_a").value == f_att
    # balanced: every rank the same work, the whole iteration / 8
    assert d.term("k").value == 1.0
    assert d.value == pytest.approx(counted.hardware.value / 8)


def test_plain_split_last_rank(counted) -> None:  # type: ignore[no-untyped-def]
    # cp = 8, n = 1024: the last rank's queries 7168..8191 see 7 n^2 + n (n + 1)/2 = 7,864,832 pairs; the mean rank
    # s (s + 1) / 2 / 8 = 4,194,816: kappa = 1.874893...
    kappa = (7 * 1024**2 + 1024 * 1025 / 2) / (S * (S + 1) / 2 / 8)
    assert kappa == pytest.approx(1.874893, abs=1e-6)
    d = cp_rank_flops(counted, S, 8, balanced=False)
    f_att = d.term("F_a").value
    assert d.term("k").value == pytest.approx(kappa)
    assert d.value == pytest.approx((counted.hardware.value - f_att) / 8 + kappa * f_att / 8)
    assert d.value / (counted.hardware.value / 8) == pytest.approx(1.1095, abs=1e-4)


def test_selective_recompute_runs_the_attention_core_four_times() -> None:
    c = training_flops(load_model("llama3-8b"), 1, S, causal=True, recompute="selective")
    assert cp_rank_flops(c, S, 8).term("F_a").value == 4 * 32 * 2 * S * S * 4096


@pytest.mark.parametrize(("cp", "message"), [(3, "does not divide the sequence length 8192"),
                                             (8192, "2 x 8192 chunks do not divide"), (0, "at least 1")])  # fmt: skip
def test_bad_degrees(counted, cp: int, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=message):
        cp_rank_flops(counted, S, cp)


def test_cli_json_and_errors() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["flops", "--model", "llama3-8b", "--seq-len", "8192", "--causal", "--cp", "8", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    text = json.dumps(doc)
    assert "cp_rank_flops" in text and "cp_rank_flops_plain" in text
    for bad in ("0", "-1", "abc", "3"):
        r = runner.invoke(app, ["flops", "--model", "llama3-8b", "--seq-len", "8192", "--cp", bad])
        assert r.exit_code == 2, (bad, r.output)
        assert "Traceback" not in r.output and "--cp" in r.output
