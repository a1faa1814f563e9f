"""The wheel carries presets and templates: build it, install it in a fresh venv, run it elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheelhouse), str(ROOT)],
        check=True,
        timeout=300,
    )
    wheel = next(wheelhouse.glob("parcalc-*.whl"))

    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    # A plain, non-editable install of the wheel and its runtime dependencies from the package index.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=600)  # fmt: skip

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PARCALC_PRESETS")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    parcalc = environment / "bin" / "parcalc"

    def run(*args: str) -> str:
        done = subprocess.run([str(parcalc), *args], cwd=outside, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    where = subprocess.run([str(python), "-c", "import parcalc, sys; print(parcalc.__file__)"],
                           cwd=outside, env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert str(environment) in where.stdout, "parcalc must come from the installed wheel, not the source tree"

    listing = json.loads(run("presets", "list", "--format", "json"))
    packaged = {category: {row["name"] for row in table["rows"]} for category, table in listing["tables"].items()}
    for category in ("gpus", "links", "models"):
        expected = {p.stem for p in (ROOT / "presets" / category).glob("*.yaml")}
        assert packaged[category] == expected
    assert all(row["origin"] == "packaged" and row["description"] for t in listing["tables"].values() for row in t["rows"])
    for name in ("a100-sxm4-80gb", "nvlink4", "llama3-8b", "hf", "question1"):  # each category's file comes from the wheel
        shown = json.loads(run("presets", "show", name, "--format", "json"))
        assert str(environment) in shown["settings"]["path"], shown["settings"]["path"]

    peak = json.loads(run("peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32", "--format", "json"))
    assert peak["results"]["peak_flops"]["value"] == 155_934_720_000_000

    templates = subprocess.run(
        [str(python), "-c", "from parcalc.resources import data_dir; print(sorted(p.name for p in data_dir('templates').iterdir()))"],
        cwd=outside, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    expected_templates = sorted(p.name for p in (ROOT / "templates").iterdir())
    assert templates.stdout.strip() == str(expected_templates)

    # issue #15, item 7: PEP 561's marker, the licence, the version from its one source, the metadata
    metadata = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json, parcalc, pathlib; d = m.distribution('parcalc'); "
         "print(json.dumps({'typed': (pathlib.Path(parcalc.__file__).parent / 'py.typed').is_file(), 'version': d.version, "
         "'init': parcalc.__version__, 'license': d.metadata['License'], 'classifiers': d.metadata.get_all('Classifier'), "
         "'urls': d.metadata.get_all('Project-URL'), 'files': [str(f) for f in d.files]}))"],
        cwd=outside, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    facts = json.loads(metadata.stdout)
    assert facts["typed"], "parcalc/py.typed is missing from the wheel"
    assert facts["version"] == facts["init"] and run("--version") == f"parcalc {facts['init']}\n"
    assert facts["license"] == "MIT" and "License :: OSI Approved :: MIT License" in facts["classifiers"]
    assert "Typing :: Typed" in facts["classifiers"]
    assert {url.split(",")[0] for url in facts["urls"]} >= {"Homepage", "Repository", "Issues"}
    assert any(f.endswith("LICENSE") and ".dist-info/" in f for f in facts["files"]), facts["files"]
