"""The cache of parsed presets (marshal, sealed by a digest): hits, invalidation, and never in the way."""

from __future__ import annotations

from pathlib import Path

import pytest

from parcalc import preset_cache
from parcalc.strict_yaml import read_yaml


def test_second_read_comes_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    assert read_yaml(preset) == {"kind": "gpu", "name": "A"}
    assert preset_cache.load(preset) == {"kind": "gpu", "name": "A"}

    def no_yaml(path: Path) -> dict:
        raise AssertionError("the YAML parser must not run on a cache hit")

    monkeypatch.setattr("parcalc.strict_yaml._parse_yaml", no_yaml)
    assert read_yaml(preset) == {"kind": "gpu", "name": "A"}


def test_a_changed_file_is_parsed_again(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    read_yaml(preset)
    preset.write_text("kind: gpu\nname: Bee\n")  # other size and mtime
    assert read_yaml(preset)["name"] == "Bee"


def test_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARCALC_NO_CACHE", "1")
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\n")
    read_yaml(preset)
    assert preset_cache.load(preset) is None


def test_unwritable_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir below a file fails
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\n")
    assert read_yaml(preset) == {"kind": "gpu"}
    assert preset_cache.load(preset) is None


def test_corrupt_cache_entry_is_ignored(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\n")
    read_yaml(preset)
    folder = preset_cache.cache_dir()
    assert folder is not None
    for entry in folder.glob("*.marshal"):
        entry.write_text("{not json")
    assert read_yaml(preset) == {"kind": "gpu"}


def test_values_marshal_cannot_write_are_not_cached(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nreleased: 2020-05-14\n")  # YAML date
    assert str(read_yaml(preset)["released"]) == "2020-05-14"
    assert preset_cache.load(preset) is None


def _only_entry() -> Path:
    folder = preset_cache.cache_dir()
    assert folder is not None
    (entry,) = folder.glob("*.marshal")
    return entry


def test_an_entry_whose_document_was_edited_is_not_used(tmp_path: Path) -> None:
    """Issue 28: an entry edited in place (its stamp kept) overrode the YAML it stands for. The edit
    leaves the entry's seal (the digest of its payload) wrong, so marshal never reads it."""
    import marshal

    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    read_yaml(preset)
    entry = _only_entry()
    sealed = entry.read_bytes()
    seal, payload = sealed[: preset_cache.SEAL_BYTES], sealed[preset_cache.SEAL_BYTES :]
    path, stamp, document = marshal.loads(payload)
    assert document == {"kind": "gpu", "name": "A"}
    entry.write_bytes(seal + marshal.dumps((path, stamp, {**document, "name": "Tampered"})))
    assert preset_cache.load(preset) is None
    assert read_yaml(preset)["name"] == "A"


def test_a_one_liner_reads_the_cache_without_json(tmp_path: Path) -> None:
    """marshal, not json: `import json` is ~1 ms of every one-liner that reads a preset (parcalc.preset_cache)."""
    import subprocess
    import sys

    script = ("import sys\nfrom parcalc.presets import load_gpu, load_model\nload_gpu('a100-sxm4-80gb')\n"
              "load_model('gpt3-175b')\nprint('json' in sys.modules, 'yaml' in sys.modules)")  # fmt: skip
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]  # fmt: skip
    assert runs[1] == ["False", "False"]  # the second run, from the cache the first one wrote


def test_an_entry_others_may_write_is_not_used(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    read_yaml(preset)
    entry = _only_entry()
    assert preset_cache.load(preset) == {"kind": "gpu", "name": "A"}
    entry.chmod(0o666)
    assert preset_cache.load(preset) is None
