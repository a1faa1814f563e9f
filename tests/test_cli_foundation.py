"""The CLI of the foundation: peak-flops, intensity, presets, output formats and bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app

# ---------------------------------------------------------------------------------------------
# peak-flops


def test_peak_flops_seed004_from_primitives(run_json) -> None:
    # Seed 004 q1.1: 2 x 1.41 GHz x 108 SMs x 512 TF32 FMA/clock/SM = 155.93472 TFLOP/s.
    doc = run_json("peak-flops", "--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512", "--dtype", "tf32")
    peak = doc["results"]["peak_flops"]
    assert peak["value"] == 155_934_720_000_000
    assert peak["unit"] == "FLOP/s"
    assert peak["formula"] == "2 × f × N_SM × FMA"
    assert peak["substituted"] == "2 × 1.41 GHz × 108 × 512"


def test_peak_flops_text_shows_derivation(runner) -> None:
    result = runner.invoke(app, ["peak-flops", "--clock", "1410MHz", "--sms", "108", "--fma-per-clock", "512", "--detail", "full"])
    assert result.exit_code == 0
    assert "2 × f × N_SM × FMA" in result.stdout
    assert "155.93472 TFLOP/s" in result.stdout
    assert "\x1b[" not in result.stdout  # no colour codes when stdout is not a terminal


def test_peak_flops_preset_with_datasheet_beside(run_json) -> None:
    doc = run_json("peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32")
    assert doc["settings"]["gpu"] == "a100-sxm4-80gb"
    assert doc["results"]["peak_flops"]["value"] == 155_934_720_000_000
    assert doc["results"]["datasheet_peak"]["value"] == 156_000_000_000_000  # A100 datasheet, TF32 dense
    assert doc["results"]["difference"]["value"] == pytest.approx((155.93472 - 156) / 156)
    # the resolved preset values are in the JSON, with sources
    assert doc["inputs"]["sms"]["value"] == 108
    assert "whitepaper" in doc["inputs"]["sms"]["source"]


def test_peak_flops_sparse(run_json) -> None:
    doc = run_json("peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "bf16", "--sparse")
    # 2 x 2 x 1.41e9 x 108 x 1024 = 623,738,880,000,000; datasheet: 624 TFLOPS with sparsity.
    assert doc["results"]["peak_flops"]["value"] == 623_738_880_000_000
    assert doc["results"]["datasheet_peak"]["value"] == 624e12


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--gpu", "a100"], "unknown gpu 'a100'; did you mean", id="unknown-preset"),
        pytest.param(["--gpu", "a100-sxm4-80gb", "--dtype", "fp8"], "no fp8 rate", id="dtype-not-supported"),
        pytest.param(["--gpu", "a100-sxm4-80gb"], "--dtype: required", id="dtype-missing"),
        pytest.param(["--dtype", "fp33", "--gpu", "a100-sxm4-80gb"], "unknown dtype 'fp33'", id="unknown-dtype"),
        pytest.param(["--clock", "80GX", "--sms", "1", "--fma-per-clock", "1"], "--clock: cannot read '80GX'", id="unit-mistake"),
        pytest.param(["--clock", "-1GHz", "--sms", "1", "--fma-per-clock", "1"], "--clock: '-1GHz' must not be negative", id="negative"),
        pytest.param(["--clock", "0", "--sms", "1", "--fma-per-clock", "1"], "--clock: '0' must be greater than zero", id="zero"),
        pytest.param(["--clock", "nan", "--sms", "1", "--fma-per-clock", "1"], "not a finite number", id="nan"),
        pytest.param(["--clock", "inf", "--sms", "1", "--fma-per-clock", "1"], "not a finite number", id="inf"),
        pytest.param(["--clock", "1GHz"], "missing: --sms, --fma-per-clock", id="incomplete-primitives"),
        pytest.param(["--gpu", "a100-sxm4-80gb", "--dtype", "fp64", "--sparse"], "no sparse fp64", id="no-sparse-rate"),
        pytest.param(["--bogus"], "No such option: --bogus", id="unknown-flag"),
        pytest.param(["--format", "xml", "--clock", "1GHz"], "--format", id="bad-format"),
    ],
)
def test_peak_flops_bad_input(run_error, args: list[str], fragment: str) -> None:
    assert fragment in run_error(["peak-flops", *args])


# ---------------------------------------------------------------------------------------------
# intensity


@pytest.mark.parametrize(
    ("m", "k", "n", "expected"),
    [
        # Seed 004 q1.2, derived by hand in tests/test_intensity.py: 4096/3, 31.5077, 15.9377.
        pytest.param("4096", "4096", "4096", 4096 / 3, id="square"),
        pytest.param("4096", "32", "4096", 1_073_741_824 / 34_078_720, id="outer"),
        pytest.param("32", "4096", "32", 8_388_608 / 526_336, id="inner"),
    ],
)
def test_intensity_seed004(run_json, m: str, k: str, n: str, expected: float) -> None:
    doc = run_json("intensity", "--m", m, "--k", k, "--n", n, "--dtype", "fp16")
    assert doc["results"]["intensity"]["value"] == pytest.approx(expected, rel=1e-15)
    assert doc["results"]["intensity"]["unit"] == "FLOP/B"


def test_intensity_roofline_on_gpu(run_json) -> None:
    doc = run_json("intensity", "--m", "32", "--k", "4096", "--n", "32", "--gpu", "a100-sxm4-80gb")
    # FP16 on A100: 311.86944 TFLOP/s over 2039 GB/s = ridge 152.95 FLOP/B; 15.94 < 152.95.
    assert doc["results"]["ridge"]["value"] == pytest.approx(311.86944e12 / 2039e9)
    assert doc["verdicts"][0].startswith("memory-bound")
    assert doc["results"]["time_lower_bound"]["value"] == pytest.approx(526_336 / 2039e9)


def test_intensity_explicit_roofs(run_json) -> None:
    doc = run_json("intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--peak", "100T", "--bandwidth", "1TB/s")
    assert doc["results"]["ridge"]["value"] == 100
    assert doc["verdicts"][0].startswith("compute-bound")


def test_intensity_model_table(run_json) -> None:
    doc = run_json("intensity", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb")
    rows = doc["tables"]["ops"]["rows"]
    assert [r["op"] for r in rows][:3] == ["Q = x·W^Q", "K = x·W^K", "V = x·W^V"]
    q_proj = rows[0]
    # 2 x (128 x 4096) x 4096 x 4096 = 17,592,186,044,416 FLOP
    assert q_proj["flops"] == 17_592_186_044_416
    assert q_proj["bound"] == "compute"
    assert {r["op"]: r["bound"] for r in rows}["softmax(·/√d)"] == "memory"


def test_intensity_csv_has_the_table(runner) -> None:
    result = runner.invoke(app, ["intensity", "--model", "homework-7b", "--batch", "1", "--seq-len", "128", "--format", "csv"])
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 10
    # Q projection for 128 tokens: 2 x 128 x 4096 x 4096 = 4,294,967,296 FLOP
    assert rows[0]["flops"] == "4294967296"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--m", "0", "--k", "1", "--n", "1"], "--m: '0' must be greater than zero", id="zero-m"),
        pytest.param(["--m", "1.5", "--k", "1", "--n", "1"], "whole number", id="fraction"),
        pytest.param(["--m", "4"], "missing: --k, --n", id="missing"),
        pytest.param(["--model", "homework-7b", "--m", "4"], "not both", id="both-modes"),
        pytest.param(["--model", "gpt9"], "unknown model 'gpt9'", id="unknown-model"),
        pytest.param(["--m", "4", "--k", "4", "--n", "4", "--peak", "1T"], "needs both --peak and --bandwidth", id="half-roofline"),
    ],
)
def test_intensity_bad_input(run_error, args: list[str], fragment: str) -> None:
    assert fragment in run_error(["intensity", *args])


# ---------------------------------------------------------------------------------------------
# presets


def test_presets_list_and_show(run_json) -> None:
    listing = run_json("presets", "list")
    assert set(listing["tables"]) == {"gpus", "links", "models", "worksheets", "frameworks"}
    gpus = [r["name"] for r in listing["tables"]["gpus"]["rows"]]
    assert "a100-sxm4-80gb" in gpus
    only_models = run_json("presets", "list", "models")
    assert set(only_models["tables"]) == {"models"}
    shown = run_json("presets", "show", "A100-SXM4-80GB")
    fields = {r["field"]: r for r in shown["tables"]["fields"]["rows"]}
    assert fields["sms"]["value"] == 108
    assert fields["tf32.dense_peak"]["value"] == 156e12
    assert fields["tf32.dense_peak"]["unit"] == "FLOP/s"
    assert "datasheet" in fields["tf32.dense_peak"]["source"]


def test_presets_show_model_counts_parameters(run_json) -> None:
    fields = {r["field"]: r["value"] for r in run_json("presets", "show", "homework-7b")["tables"]["fields"]["rows"]}
    assert fields["total_params"] == 6_442_450_944  # 32 x 12 x 4096^2


def test_presets_bad_input(run_error) -> None:
    assert "unknown category" in run_error(["presets", "list", "cpus"])
    assert "unknown preset 'a100x'" in run_error(["presets", "show", "a100x"])


def test_presets_dir_flag_and_hostile_yaml(run_error, runner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "evil.yaml").write_text("!!python/object/apply:os.system ['touch /tmp/pwned']\n")
    line = run_error(["peak-flops", "--gpu", "evil", "--dtype", "fp16", "--presets", str(tmp_path)])
    assert "evil.yaml" in line and "invalid YAML" in line


# ---------------------------------------------------------------------------------------------
# output files and formats


PEAK = ["peak-flops", "--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512"]


@pytest.mark.parametrize(("suffix", "check"), [
    (".json", lambda text: json.loads(text)["results"]["peak_flops"]["value"] == 155_934_720_000_000),
    (".csv", lambda text: "155934720000000" in text),
    (".md", lambda text: "155.93472\\ \\text{TFLOP/s}" in text and text.startswith("# ")),
    (".txt", lambda text: "155.93472 TFLOP/s" in text),
])  # fmt: skip
def test_output_format_follows_extension(runner, tmp_path: Path, suffix: str, check) -> None:
    target = tmp_path / f"peak{suffix}"
    result = runner.invoke(app, [*PEAK, "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert check(target.read_text())
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind


def test_unknown_extension_is_refused(run_error, tmp_path: Path) -> None:
    assert "cannot tell the format" in run_error([*PEAK, "-o", str(tmp_path / "x.docx")])


def test_missing_directory_is_refused(run_error, tmp_path: Path) -> None:
    assert "does not exist" in run_error([*PEAK, "-o", str(tmp_path / "no" / "x.json")])


def test_unwritable_directory_is_refused(run_error, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI runs as root, which writes anywhere: make the permission check see a read-only directory.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == tmp_path else real_access(path, mode))
    assert "not writable" in run_error([*PEAK, "-o", str(tmp_path / "x.json")])
    assert list(tmp_path.iterdir()) == []


def test_read_only_target_file_is_refused_and_untouched(run_error, tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("old")
    if os.geteuid() == 0:
        # root bypasses permissions: a directory in the target's place exercises the same path
        target.unlink()
        target.mkdir()
        assert "is a directory" in run_error([*PEAK, "-o", str(target)])
        return
    target.chmod(stat.S_IRUSR)
    assert "not writable" in run_error([*PEAK, "-o", str(target)])
    assert target.read_text() == "old"


def test_failed_calculation_writes_no_file(run_error, tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    run_error(["peak-flops", "--gpu", "nope", "--dtype", "tf32", "-o", str(target)])
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_markdown_to_stdout(runner) -> None:
    result = runner.invoke(app, [*PEAK, "--format", "markdown"])
    assert result.exit_code == 0
    assert "$$" in result.stdout and r"2 \times 1.41\ \text{GHz} \times 108 \times 512" in result.stdout


def test_presets_list_describes_each_preset(run_json, tmp_path) -> None:
    """Issue 28: `presets list` printed absolute paths into the package; each row now carries the preset's own name
    (a worksheet's title), the file only for a user's preset, and the listing fits 80 columns."""
    (tmp_path / "gpus").mkdir()
    mine = tmp_path / "gpus" / "my-gpu.yaml"
    mine.write_text((Path(__file__).resolve().parent.parent / "presets" / "gpus" / "h200.yaml").read_text())
    rows = {r["name"]: r for r in run_json("presets", "list", "gpus", "--presets", str(tmp_path))["tables"]["gpus"]["rows"]}
    assert rows["a100-sxm4-80gb"]["description"] == "NVIDIA A100 SXM4 80GB" and rows["a100-sxm4-80gb"]["path"] == ""
    assert rows["my-gpu"]["origin"] == "--presets" and rows["my-gpu"]["path"] == str(mine)
    worksheets = run_json("presets", "list", "worksheets")["tables"]["worksheets"]["rows"]
    assert any(r["name"] == "question1" and r["description"].startswith("Homework 2, Question 1") for r in worksheets)


# A user's preset that cannot be read: the YAML itself (an unclosed flow list), a key no GPU preset has, a model without its
# sources. Each message is the one `presets show` and a command naming the preset stop with (parcalc.strict_yaml,
# parcalc.preset_doc), less the file's path, which the listing shows in its own column.
BROKEN = {
    ("gpus", "unclosed"): ("kind: gpu\nname: [unclosed\n", "line 3: invalid YAML: did not find expected ',' or ']'"),
    ("gpus", "stray-key"): ("kind: gpu\nname: Fine-looking GPU\nbogus_key: 3\n", "key 'bogus_key': unknown key; allowed: kind, name,"),
    ("models", "no-sources"): ("kind: model\nname: m\n", "key 'sources': missing: every number needs a source"),
}


def test_presets_list_says_which_presets_are_broken(runner, run_json, run_error, tmp_path) -> None:
    """Session 21: a preset file that fails to parse was listed with an empty description (and one with a stray key under its
    own name, as if it worked); now each says it is broken and why, and `presets show` of it is one Error line, exit 2."""
    for (category, key), (text, _) in BROKEN.items():
        (tmp_path / category).mkdir(exist_ok=True)
        (tmp_path / category / f"{key}.yaml").write_text(text)
    doc = run_json("presets", "list", "--presets", str(tmp_path))
    rows = {(c, r["name"]): r for c, t in doc["tables"].items() for r in t["rows"]}
    for (category, key), (_, why) in BROKEN.items():
        row = rows[(category, key)]
        assert row["problem"].startswith(why), row
        assert row["description"].startswith("broken: ") and len(row["description"]) <= 34, row
        assert any(v.startswith(f"{category}/{key} (--presets) cannot be read: {why}") for v in doc["verdicts"]), doc["verdicts"]
        line = run_error(["presets", "show", key, "--presets", str(tmp_path)])
        assert line.startswith(f"Error: {tmp_path / category / key}.yaml: {why}"), line
    assert rows[("gpus", "h200")]["problem"] == "" and rows[("gpus", "h200")]["description"] == "NVIDIA H200 SXM 141GB"
    assert all(r["problem"] == "" for (_, name), r in rows.items() if r["origin"] == "packaged")  # every packaged preset reads
    text = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "PARCALC_PRESETS": ""}).invoke(app, ["presets", "list", "gpus", "--presets",
                                                                                               str(tmp_path)])  # fmt: skip
    assert text.exit_code == 0, text.output
    assert "broken: line 3: invalid YAML" in text.stdout and "gpus/unclosed (--presets) cannot be read" in text.stdout
    # within 80 columns but for a pair holding the file's path, which does not break (pytest's tmp_path is long)
    assert max(len(line) for line in text.stdout.splitlines() if str(tmp_path) not in line) <= 80


@pytest.mark.parametrize("args", [
    ["presets", "list", ""], ["presets", "list", "nan"], ["presets", "list", "1e308"], ["presets", "list", "-1"],
    ["presets", "show", ""], ["presets", "show", "nan"], ["presets", "show", "-1"], ["presets", "show", "1e308"],
    ["presets", "show", "../../etc/passwd"], ["presets", "show", "x" * 300], ["presets", "list", "--presets", "nan"],
    ["presets", "show", "h200", "--format", "nan"], ["presets", "list", "--format", ""],
], ids=lambda a: " ".join(a)[:40])  # fmt: skip
def test_presets_hostile_values_are_one_error_line(run_error, args) -> None:
    run_error(args)
