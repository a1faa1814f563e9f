"""parcalc.preset_verdicts: `presets list` validates a preset again only when its bytes or parcalc's code changed
(session 22, QA: the listing validated every packaged preset on every run, 0.26 -> 0.56 s in session 21)."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from parcalc import preset_verdicts
from parcalc.results.presets import list_result


def _counting(row: tuple[str, str]) -> tuple[list[int], object]:
    calls = [0]

    def make() -> tuple[str, str]:
        calls[0] += 1
        return row

    return calls, make


def test_a_row_is_made_once_and_read_back_while_the_file_and_code_stay(tmp_path: Path) -> None:
    preset = tmp_path / "x.yaml"
    preset.write_text("name: X\n", encoding="utf-8")
    calls, make = _counting(("X", ""))
    assert preset_verdicts.cached_row(preset, make) == ("X", "")
    assert preset_verdicts.cached_row(preset, make) == ("X", "")
    assert calls == [1]  # the second run's row is the first's


def test_an_edited_preset_is_read_again(tmp_path: Path) -> None:
    preset = tmp_path / "x.yaml"
    preset.write_text("name: X\n", encoding="utf-8")
    calls, make = _counting(("X", ""))
    preset_verdicts.cached_row(preset, make)
    preset.write_text("name: Y\n", encoding="utf-8")  # same size, other bytes: the digest tells them apart
    preset_verdicts.cached_row(preset, make)
    assert calls == [2]


def test_a_changed_module_of_parcalc_makes_the_row_again(tmp_path: Path) -> None:
    preset = tmp_path / "x.yaml"
    preset.write_text("name: X\n", encoding="utf-8")
    calls, make = _counting(("X", ""))
    preset_verdicts.cached_row(preset, make)
    entry = preset_verdicts._entry(preset)
    assert entry is not None
    cached = entry[0]
    payload = cached.read_bytes()[32:]
    resolved, stamp, code, row = marshal.loads(payload)
    # the validators were loaded when the row was made: their stamps are in the entry
    assert any(file.endswith("preset_verdicts.py") for file, _, _ in code)
    file, mtime, size = code[0]
    changed = ((file, mtime + 1, size), *code[1:])  # as if that module had been edited since
    from parcalc.sealed_file import write_sealed

    write_sealed(cached, marshal.dumps((resolved, stamp, changed, row)))
    preset_verdicts.cached_row(preset, make)
    assert calls == [2]
    preset_verdicts.cached_row(preset, make)  # and the rewritten entry holds again
    assert calls == [2]


def test_no_cache_makes_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARCALC_NO_CACHE", "1")
    preset = tmp_path / "x.yaml"
    preset.write_text("name: X\n", encoding="utf-8")
    calls, make = _counting(("X", ""))
    preset_verdicts.cached_row(preset, make)
    preset_verdicts.cached_row(preset, make)
    assert calls == [2]


def test_the_listing_from_the_cache_is_the_listing_read_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a user's broken GPU preset beside the packaged ones: the second (cached) listing says what the first did, and
    # fixing the file clears its problem at once
    gpus = tmp_path / "presets" / "gpus"
    gpus.mkdir(parents=True)
    bad = gpus / "mygpu.yaml"
    bad.write_text("name: My GPU\nvendor: Nobody\nsurprise: 1\n", encoding="utf-8")
    first = list_result("gpus", [tmp_path / "presets"]).to_dict()
    second = list_result("gpus", [tmp_path / "presets"]).to_dict()
    assert first == second
    rows = {row["name"]: row for row in first["tables"]["gpus"]["rows"]}
    assert rows["mygpu"]["description"].startswith("broken: ") and "surprise" in rows["mygpu"]["problem"]
    assert rows["h200"]["description"] == "NVIDIA H200 SXM 141GB" and rows["h200"]["problem"] == ""  # presets/gpus/h200.yaml's name
    bad.write_text(Path(__file__).parent.parent.joinpath("presets", "gpus", "h200.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    fixed = {row["name"]: row for row in list_result("gpus", [tmp_path / "presets"]).to_dict()["tables"]["gpus"]["rows"]}
    assert fixed["mygpu"]["description"] == "NVIDIA H200 SXM 141GB" and fixed["mygpu"]["problem"] == ""
    bad.write_text("name: My GPU\nvendor: Nobody\nsurprise: 1\n", encoding="utf-8")
    monkeypatch.setenv("PARCALC_NO_CACHE", "1")
    assert list_result("gpus", [tmp_path / "presets"]).to_dict() == first  # the same rows with no cache at all


def test_a_link_to_a_preset_has_its_own_row(tmp_path: Path) -> None:
    # the row is the preset's as found: a link by another name (another key, which a problem line may name) is not
    # served the row of the file it leads to
    target = tmp_path / "x.yaml"
    target.write_text("name: X\n", encoding="utf-8")
    link = tmp_path / "y.yaml"
    link.symlink_to(target)
    calls, make = _counting(("X", ""))
    preset_verdicts.cached_row(target, make)
    preset_verdicts.cached_row(link, make)
    assert calls == [2]
    preset_verdicts.cached_row(link, make)
    assert calls == [2]
