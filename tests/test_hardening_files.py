"""Issue #12: no input may hang, crash, overwrite what it should not, or run code.

Each test is one reproducer from the issue: bad input gives one line `Error: ...` and exit 2
(environment problems exit 1), never a traceback, and nothing on disk changes that should not.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from test_presets import GOOD_GPU  # the same minimal valid GPU preset (section 6)

from parcalc.cli import app

PEAK = ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]


def _cache_dir() -> Path:
    from parcalc import preset_cache

    folder = preset_cache.cache_dir()
    assert folder is not None  # the tests' XDG_CACHE_HOME (conftest)
    return folder


def one_line_error(result, exit_code: int = 2) -> str:
    """The single `Error:` line of a failed run (asserting the exit code and no traceback)."""
    assert result.exit_code == exit_code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. -o never replaces a device, FIFO or symlink


def test_output_into_a_fifo_writes_through_it_and_keeps_the_fifo(runner, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:  # a FIFO's writer blocks until someone reads
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    result = runner.invoke(app, [*PEAK, "-o", str(fifo)])
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert b'"command": "peak-flops"' in received[0]
    assert not list(tmp_path.glob("*.part"))


def test_output_through_a_symlink_replaces_the_target_and_keeps_the_link(runner, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    result = runner.invoke(app, [*PEAK, "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert '"command": "peak-flops"' in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_output_to_dev_null_keeps_the_device(runner) -> None:
    result = runner.invoke(app, [*PEAK, "-o", os.devnull, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_output_to_a_regular_file_leaves_no_partial_file(runner, tmp_path: Path) -> None:
    output = tmp_path / "out.json"
    output.write_text("old")
    result = runner.invoke(app, [*PEAK, "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert '"command"' in output.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_output_name_longer_than_255_bytes_is_one_line(runner, tmp_path: Path) -> None:
    line = one_line_error(runner.invoke(app, [*PEAK, "-o", str(tmp_path / ("x" * 300 + ".json"))]))
    assert "longer than 255 bytes" in line
    assert len(line) < 200


def test_output_and_pdf_no_longer_import_each_other() -> None:
    import ast
    import inspect

    import parcalc.output
    import parcalc.render.pdf

    def imported(module: object) -> set[str]:
        tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert "parcalc.output" not in imported(parcalc.render.pdf)
    assert "parcalc.files" in imported(parcalc.render.pdf)


# ---------------------------------------------------------------------------------------------
# 2. YAML and JSON bombs, and numbers Python cannot hold

BILLION_LAUGHS = "kind: gpu\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)


def gpu_preset(tmp_path: Path, text: str, name: str = "hostile") -> Path:
    folder = tmp_path / "gpus"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return tmp_path


HOSTILE_YAML = {
    "billion-laughs": (BILLION_LAUGHS, "aliases"),
    "30000-brackets": ("kind: gpu\nx: " + "[" * 30_000 + "]" * 30_000 + "\n", "nested more than 32"),
    "5000-brackets": ("kind: gpu\nx: " + "[" * 5_000 + "]" * 5_000 + "\n", "nested more than 32"),
    "unhashable-key": ("kind: gpu\n? [1, 2]\n: 3\n", "a key must be a plain value"),
    "400-digit-int": ("kind: gpu\nsms: " + "9" * 400 + "\n", "400 digits is too large"),
    "5000-digit-int": ("kind: gpu\nsms: " + "9" * 5_000 + "\n", "5000 digits is too large"),
    "float-overflow": ("kind: gpu\nsms: 1.0e+999\n", "not a finite number"),
    "int-over-64-bits": ("kind: gpu\nsms: 99999999999999999999999\n", "too large"),
}


@pytest.mark.parametrize("text, message", HOSTILE_YAML.values(), ids=HOSTILE_YAML.keys())
def test_hostile_gpu_preset_is_one_line_error(runner, tmp_path: Path, text: str, message: str) -> None:
    directory = gpu_preset(tmp_path, text)
    line = one_line_error(runner.invoke(app, [*PEAK[:1], "--presets", str(directory), "--gpu", "hostile", "--dtype", "tf32"]))
    assert message in line
    assert len(line) < 300


# Hostile power curves and framework profiles (the power_curve, power_limit, pipeline and kernels keys):
# each a copy of a packaged preset with one key broken, used through --presets DIR.
PRESETS = Path(__file__).parents[1] / "presets"
_H100_96 = (PRESETS / "gpus" / "h100-sxm5-96gb-hbm2e.yaml").read_text()
_CURVE = _H100_96[_H100_96.index("power_curve:\n") : _H100_96.index("nvlink_bandwidth_per_direction")]


def _point(power: str, scale: str) -> str:
    return f"  - {{power: {power}, tensor_scale: {scale}, source: whitepaper}}\n"


HOSTILE_CURVES = {
    "unsorted": ("power_curve:\n" + _point("700 W", "1") + _point("400 W", "0.8"), "key 'power_curve[1].power': points must ascend"),
    "duplicate-power": ("power_curve:\n" + _point("400 W", "0.8") + _point("400 W", "0.9") + _point("700 W", "1"), "must ascend"),
    "scale-above-1": ("power_curve:\n" + _point("400 W", "1.5"), "key 'power_curve[0].tensor_scale': a share of the preset's peaks, at most 1"),
    "scale-0": ("power_curve:\n" + _point("400 W", "0") + _point("700 W", "1"), "key 'power_curve[0].tensor_scale': '0' must be greater than zero"),
    "scale-negative": ("power_curve:\n" + _point("400 W", "-0.5") + _point("700 W", "1"), "must not be negative"),
    "scale-nan": ("power_curve:\n" + _point("400 W", ".nan") + _point("700 W", "1"), "'.nan' is not a finite number"),
    "scale-inf": ("power_curve:\n" + _point("400 W", ".inf") + _point("700 W", "1"), "'.inf' is not a finite number"),
    "scale-text": ("power_curve:\n" + _point("400 W", "abc") + _point("700 W", "1"), "cannot read 'abc' as fraction"),
    "scale-list": ("power_curve:\n" + _point("400 W", "[1]"), "cannot read '[1]' as fraction"),
    "power-0": ("power_curve:\n" + _point("0 W", "0.5") + _point("700 W", "1"), "key 'power_curve[0].power': '0 W' must be greater than zero"),
    "power-negative": ("power_curve:\n" + _point("-400 W", "0.5"), "must not be negative"),
    "power-nan": ("power_curve:\n" + _point("nan W", "0.5"), "'nan W' is not a finite number"),
    "power-1e309": ("power_curve:\n" + _point("1e309 W", "0.5"), "too large"),
    "power-wrong-unit": ("power_curve:\n" + _point("400 GB", "0.5"), "cannot read '400 GB' as power"),
    "power-no-unit": ("power_curve:\n" + _point("400", "0.5"), "400 has no unit"),
    "curve-text": ("power_curve: hello\n", "expected a non-empty list"),
    "curve-empty": ("power_curve: []\n", "expected a non-empty list"),
    "curve-mapping": ("power_curve: {power: 400 W, tensor_scale: 0.8, source: whitepaper}\n", "expected a non-empty list"),
    "point-extra-key": ("power_curve:\n  - {power: 400 W, tensor_scale: 0.8, source: whitepaper, x: 1}\n", "expected a mapping with the keys"),
    "source-not-text": ("power_curve:\n  - {power: 400 W, tensor_scale: 0.8, source: [whitepaper]}\n", "expected non-empty text"),
    "huge-list": ("power_curve:\n" + "".join(_point(f"{300 + i} W", f"{0.5 + i * 1e-6:.6f}") for i in range(60_000)), "too large for a preset"),
    "anchor-bomb": ("power_curve: &a [{power: 400 W, tensor_scale: 0.8, source: whitepaper}]\n"
                    + "".join(f"x{i}: &x{i} [*{'a' if i == 0 else f'x{i - 1}'}, *{'a' if i == 0 else f'x{i - 1}'}]\n" for i in range(40)), "aliases"),
    "aliased-points": ("power_curve:\n  - &p {power: 400 W, tensor_scale: 0.8, source: whitepaper}\n" + "  - *p\n" * 2000, "aliases"),
    "deep-scale": ("power_curve:\n  - {power: 400 W, tensor_scale: " + "[" * 40 + "]" * 40 + ", source: whitepaper}\n", "nested more than 32"),
}  # fmt: skip


@pytest.mark.parametrize("curve, message", HOSTILE_CURVES.values(), ids=HOSTILE_CURVES.keys())
@pytest.mark.parametrize("command", [["peak-flops", "--dtype", "bf16"], ["peak-flops", "--dtype", "bf16", "--power-limit", "450W"],
                                     ["fit", "--model", "llama3-8b", "--gpus", "8", "--power-limit", "450W"], ["presets", "show"]])  # fmt: skip
def test_hostile_power_curve_is_one_line_error(runner, tmp_path: Path, curve: str, message: str, command: list[str]) -> None:
    import time

    directory = gpu_preset(tmp_path, _H100_96.replace(_CURVE, curve))
    args = [*command, "hostile"] if command[0] == "presets" else [*command, "--gpu", "hostile"]
    started = time.perf_counter()
    line = one_line_error(runner.invoke(app, [*args, "--presets", str(directory)]))
    assert time.perf_counter() - started < 10
    assert message in line and "hostile.yaml" in line
    assert len(line) < 400


_DEEPSPEED = (PRESETS / "frameworks" / "deepspeed.yaml").read_text()
_PIPELINE = _DEEPSPEED[_DEEPSPEED.index("pipeline:  #") : _DEEPSPEED.index("kernels: {value")]
_KERNELS = _DEEPSPEED[_DEEPSPEED.index("kernels: {value") : _DEEPSPEED.index("\n", _DEEPSPEED.index("kernels: {value")) + 1]
HOSTILE_FRAMEWORKS = {
    "pipeline-null": (_PIPELINE, "pipeline:\n", "key 'pipeline': expected a mapping"),
    "pipeline-list": (_PIPELINE, "pipeline: [1, 2]\n", "key 'pipeline': expected a mapping"),
    "pipeline-unknown-key": (_PIPELINE, "pipeline:\n  overlap_grad_reduc: {value: false, source: pipe}\n", "did you mean 'overlap_grad_reduce'"),
    "pipeline-bare-value": (_PIPELINE, "pipeline:\n  overlap_grad_reduce: false\n", "key 'pipeline.overlap_grad_reduce': expected a mapping"),
    "pipeline-no-source": (_PIPELINE, "pipeline:\n  overlap_grad_reduce: {value: false}\n", "pipeline.overlap_grad_reduce.source': missing"),
    "pipeline-bool-as-int": (_PIPELINE, "pipeline:\n  overlap_grad_reduce: {value: 0, source: pipe}\n", "expected true or false, got 0"),
    "pipeline-zero-float": (_PIPELINE, "pipeline:\n  zero_stages: {value: [1.0], source: pipe}\n", "a list of ZeRO stages among 0, 1, 2, 3, got [1.0]"),
    "pipeline-zero-text": (_PIPELINE, "pipeline:\n  zero_stages: {value: '0,1', source: pipe}\n", "a list of ZeRO stages"),
    "pipeline-bytes-nan": (_PIPELINE, "pipeline:\n  bf16_grad_accumulation_bytes: {value: .nan, source: pipe}\n", "not a finite number"),
    "pipeline-bytes-huge": (_PIPELINE, "pipeline:\n  bf16_grad_accumulation_bytes: {value: 1e300, source: pipe}\n", "between 0 and 100"),
    "pipeline-bytes-unit": (_PIPELINE, "pipeline:\n  bf16_grad_accumulation_bytes: {value: 20 B, source: pipe}\n", "between 0 and 100"),
    "pipeline-deep": (_PIPELINE, "pipeline: " + "{a: " * 40 + "1" + "}" * 40 + "\n", "nested more than 32"),
    "pipeline-alias": (_PIPELINE, "pipeline:\n  overlap_grad_reduce: &x {value: false, source: pipe}\n  overlap_param_gather: *x\n", "aliases"),
    "kernels-unknown": (_KERNELS, "kernels: {value: compiled, source: kernels}\n", "key 'kernels.value': one of fused, eager, hf, got 'compiled'"),
    "kernels-null": (_KERNELS, "kernels: {value: null, source: kernels}\n", "one of fused, eager, hf, got None"),
    "kernels-list": (_KERNELS, "kernels: {value: [fused], source: kernels}\n", "one of fused, eager, hf, got ['fused']"),
    "kernels-300-characters": (_KERNELS, "kernels: {value: " + "x" * 300 + ", source: kernels}\n", "(300 characters)"),
    "kernels-bare": (_KERNELS, "kernels: eager\n", "key 'kernels': expected a mapping"),
    "kernels-no-source": (_KERNELS, "kernels: {value: eager}\n", "key 'kernels.source': missing"),
}  # fmt: skip


@pytest.mark.parametrize("old, new, message", HOSTILE_FRAMEWORKS.values(), ids=HOSTILE_FRAMEWORKS.keys())
@pytest.mark.parametrize("command", [["fit", "--tp", "2", "--pp", "4", "--dp", "2", "--zero", "1"], ["fit", "--search"], ["presets", "show"]])
def test_hostile_framework_profile_is_one_line_error(runner, tmp_path: Path, old: str, new: str, message: str, command: list[str]) -> None:
    folder = tmp_path / "frameworks"
    folder.mkdir()
    (folder / "hostile.yaml").write_text(_DEEPSPEED.replace(old, new))
    if command[0] == "presets":
        args = [*command, "hostile"]
    else:
        args = [*command, "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "32", "--framework", "hostile"]
    line = one_line_error(runner.invoke(app, [*args, "--presets", str(tmp_path)]))
    assert message in line and "hostile.yaml" in line
    assert len(line) < 400


def test_billion_laughs_worksheet_is_refused_before_it_expands(runner, tmp_path: Path) -> None:
    sheet = tmp_path / "bomb.yaml"
    sheet.write_text(BILLION_LAUGHS.replace("kind: gpu", "kind: worksheet\ntitle: t"))
    assert "aliases" in one_line_error(runner.invoke(app, ["report", str(sheet)]))


def test_deep_worksheet_is_refused(runner, tmp_path: Path) -> None:
    sheet = tmp_path / "deep.yaml"
    sheet.write_text("kind: worksheet\ntitle: " + "[" * 30_000 + "]" * 30_000 + "\n")
    assert "nested more than 32" in one_line_error(runner.invoke(app, ["report", str(sheet)]))


def test_an_invalid_preset_is_not_cached(tmp_path: Path) -> None:
    from parcalc import preset_cache
    from parcalc.errors import PresetError
    from parcalc.presets import load_gpu

    directory = gpu_preset(tmp_path, "kind: gpu\nname: x\n")
    with pytest.raises(PresetError):
        load_gpu("hostile", (directory,))
    assert preset_cache.load(directory / "gpus" / "hostile.yaml") is None


LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
         "num_hidden_layers": 32, "vocab_size": 32000, "rms_norm_eps": 1e-5}  # fmt: skip
HOSTILE_CONFIGS = {
    "hidden-size-text": ('"hidden_size": 4096', '"hidden_size": "big"', "key 'hidden_size': expected a whole number"),
    "nan": ('"hidden_size": 4096', '"hidden_size": NaN', "NaN is not a number"),
    "infinity": ('"hidden_size": 4096', '"hidden_size": Infinity', "Infinity is not a number"),
    "float-overflow": ('"hidden_size": 4096', '"hidden_size": 1e400', "not a finite number"),
    "zero-heads": ('"num_attention_heads": 32', '"num_attention_heads": 0', "key 'num_attention_heads': expected a whole number >= 1"),
    "5000-digits": ('"hidden_size": 4096', '"hidden_size": ' + "9" * 5_000, "5000 digits is too large"),
    "fractional-layers": ('"num_hidden_layers": 32', '"num_hidden_layers": 32.5', "key 'num_hidden_layers'"),
}  # fmt: skip


@pytest.mark.parametrize("old, new, message", HOSTILE_CONFIGS.values(), ids=HOSTILE_CONFIGS.keys())
def test_hostile_config_json_is_one_line_error(runner, tmp_path: Path, old: str, new: str, message: str) -> None:
    import json

    config = tmp_path / "config.json"
    text = json.dumps(LLAMA)
    assert old in text
    config.write_text(text.replace(old, new))
    line = one_line_error(runner.invoke(app, ["flops", "--model", str(config)]))
    assert message in line
    assert len(line) < 300


def test_deeply_nested_config_json_is_one_line_error(runner, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("[" * 200_000 + "]" * 200_000)
    assert "nested more than 32" in one_line_error(runner.invoke(app, ["flops", "--model", str(config)]))


def test_oversize_config_json_is_one_line_error(runner, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"pad": "' + "x" * (1 << 20) + '"}')
    assert "limit" in one_line_error(runner.invoke(app, ["flops", "--model", str(config)]))


def test_corrupted_cache_entry_of_brackets_is_rebuilt(tmp_path: Path) -> None:
    # 100,000 '[' read by marshal would be a list of 0x5b5b5b5b items (gigabytes): the entry's seal is checked first
    import marshal

    from parcalc import preset_cache
    from parcalc.strict_yaml import read_yaml

    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\n")
    read_yaml(preset)
    (entry,) = _cache_dir().glob("*.marshal")
    entry.write_text("[" * 100_000)
    assert read_yaml(preset) == {"kind": "gpu"}
    assert marshal.loads(entry.read_bytes()[preset_cache.SEAL_BYTES :])[2] == {"kind": "gpu"}  # rebuilt


# ---------------------------------------------------------------------------------------------
# 5. The preset cache: never stale, never blocking


def test_same_size_edit_with_mtime_restored_is_not_served_stale(tmp_path: Path) -> None:
    from parcalc.strict_yaml import read_yaml

    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    before = os.stat(preset)
    assert read_yaml(preset)["name"] == "A"
    preset.write_text("kind: gpu\nname: B\n")  # same size, in place (same inode)
    os.utime(preset, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p` / `rsync -t` leave it
    after = os.stat(preset)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert read_yaml(preset)["name"] == "B"


def test_cache_entry_for_other_contents_is_never_used(tmp_path: Path) -> None:
    import marshal

    from parcalc import preset_cache
    from parcalc.strict_yaml import read_yaml

    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\nname: A\n")
    read_yaml(preset)
    (entry,) = _cache_dir().glob("*.marshal")
    path, stamp, document = marshal.loads(entry.read_bytes()[preset_cache.SEAL_BYTES :])
    document["injected"] = "value the YAML does not contain"
    assert set(stamp) == {"blake2b", "size"}  # the content hash is what this test corrupts
    stamp["blake2b"] = "0" * 64
    payload = marshal.dumps((path, stamp, document))
    entry.write_bytes(preset_cache._seal(payload) + payload)  # sealed as parcalc seals: only the stamp is wrong
    assert read_yaml(preset) == {"kind": "gpu", "name": "A"}


@pytest.mark.parametrize("node", ["fifo", "directory"])
def test_fifo_or_directory_in_place_of_a_cache_entry_neither_hangs_nor_leaves_part_files(tmp_path: Path, node: str) -> None:
    from parcalc.strict_yaml import read_yaml

    preset = tmp_path / "p.yaml"
    preset.write_text("kind: gpu\n")
    read_yaml(preset)
    (entry,) = _cache_dir().glob("*.marshal")
    entry.unlink()
    if node == "fifo":
        os.mkfifo(entry)
    else:
        entry.mkdir()
    preset.write_text("kind: gpu\nname: new\n")  # a miss: read the entry, then store over it
    assert read_yaml(preset) == {"kind": "gpu", "name": "new"}  # returns, rather than blocking on the FIFO
    assert read_yaml(preset) == {"kind": "gpu", "name": "new"}
    assert not list(_cache_dir().glob("*.part"))


def test_fifo_preset_file_is_refused_without_blocking(runner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    os.mkfifo(tmp_path / "gpus" / "pipe.yaml")
    line = one_line_error(runner.invoke(app, ["peak-flops", "--presets", str(tmp_path), "--gpu", "pipe", "--dtype", "tf32"]))
    assert "not a regular file" in line or "unknown gpu" in line


# ---------------------------------------------------------------------------------------------
# 3. The TeX time limit stops TeX, all of it

FAKE_LATEXMK = """#!/bin/sh
# latexmk's stand-in: starts a "pdflatex" that never ends, and waits for it
sleep 1000 &
echo $! > "$PARCALC_TEST_CHILD_PID"
wait
"""


def fake_tex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """latexmk and pdflatex on PATH that hang; returns the file the hanging child's pid goes to."""
    import tempfile

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("latexmk", "pdflatex"):
        script = bin_dir / name
        script.write_text(FAKE_LATEXMK)
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("PARCALC_TEST_CHILD_PID", str(pid_file))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return pid_file


def process_gone(pid: int, within_s: float = 15.0) -> bool:  # 5 s was too short on a loaded 2-core machine
    """True once `pid` no longer runs (gone, or a zombie waiting for a reaper that is not us)."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stream:
                if stream.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


def test_tex_timeout_kills_tex_and_its_children(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = fake_tex(tmp_path, monkeypatch)
    monkeypatch.setenv("PARCALC_TEX_TIMEOUT", "1")
    output = tmp_path / "out.pdf"
    line = one_line_error(runner.invoke(app, [*PEAK, "-o", str(output)]), exit_code=1)
    assert "did not finish within 1 s" in line
    assert process_gone(int(pid_file.read_text()))
    assert not output.exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # TeX's temporary directory removed


def test_bad_tex_timeout_is_one_line_error(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARCALC_TEX_TIMEOUT", "soon")
    assert "PARCALC_TEX_TIMEOUT" in one_line_error(runner.invoke(app, [*PEAK, "-o", str(tmp_path / "out.pdf")]))


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_interrupted_tex_build_kills_tex_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    pid_file = fake_tex(tmp_path, monkeypatch)
    output = tmp_path / "out.pdf"
    def as_from_a_terminal() -> None:
        # parcalc as a shell in the foreground starts it: SIGINT at its default and not blocked. A process started in
        # the background of a non-interactive shell inherits SIGINT ignored (POSIX; so did this suite's CI runs: the
        # SIGINT case timed out there, SIGTERM passed), and an ignored Ctrl-C is what such a parcalc should do
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    parcalc = subprocess.Popen([sys.executable, "-m", "parcalc", *PEAK, "-o", str(output)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=os.environ.copy(), preexec_fn=as_from_a_terminal)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parcalc.send_signal(getattr(signal, signum))
    _, stderr = parcalc.communicate(timeout=30)
    assert parcalc.returncode != 0
    assert b"Traceback" not in stderr, stderr
    assert process_gone(child)
    assert not output.exists()
    assert list((tmp_path / "tmp").iterdir()) == []


# ---------------------------------------------------------------------------------------------
# 4. Templates are code: they run in Jinja's sandbox

ESCAPE_TEX = '\\VAR{ cycler.__init__.__globals__.os.system("touch %s") }\n'
ESCAPE_MD = '{{ cycler.__init__.__globals__.os.system("touch %s") }}\n'


@pytest.mark.parametrize("name, template, args", [
    ("report.tex.j2", ESCAPE_TEX, ["--format", "latex"]),
    ("report.md.j2", ESCAPE_MD, []),
    ("report.tex.j2", ESCAPE_TEX, ["-o", "out.pdf"]),
], ids=["latex", "markdown", "pdf"])  # fmt: skip
def test_template_cannot_run_a_shell_command(runner, tmp_path: Path, name: str, template: str, args: list[str]) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    witness = tmp_path / "pwned"
    (templates / name).write_text(template % witness)
    args = [str(tmp_path / a) if a.endswith(".pdf") else a for a in args]
    line = one_line_error(runner.invoke(app, ["report", "question1", "--template", str(templates), *args]))
    assert "not allowed in a template" in line
    assert not witness.exists()
    assert not (tmp_path / "out.pdf").exists()


def test_template_that_includes_itself_is_one_line_error(runner, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.tex.j2").write_text('x \\BLOCK{include "report.tex.j2"}\n')
    line = one_line_error(runner.invoke(app, ["report", "question1", "--template", str(templates), "--format", "latex"]))
    assert "includes itself" in line


# ---------------------------------------------------------------------------------------------
# 6. Preset names are names; text that reaches a terminal has no control characters

@pytest.mark.parametrize("name", ["../../../some/dir/evil", "..\\\\evil", "..", "a/b"], ids=["dotdot-slash", "backslash", "dotdot", "slash"])
def test_preset_name_with_a_path_is_refused(runner, tmp_path: Path, name: str) -> None:
    gpu_preset(tmp_path, GOOD_GPU, "evil")
    (tmp_path / "some" / "dir").mkdir(parents=True)
    (tmp_path / "some" / "dir" / "evil.yaml").write_text(GOOD_GPU)
    line = one_line_error(runner.invoke(app, ["peak-flops", "--presets", str(tmp_path), "--gpu", name, "--dtype", "fp16"]))
    assert "a preset name has no '/', '\\' or '..'" in line


def test_preset_name_with_a_path_is_refused_inside_a_worksheet(runner, tmp_path: Path) -> None:
    (tmp_path / "evil.yaml").write_text(GOOD_GPU)
    sheet = tmp_path / "sheet.yaml"
    sheet.write_text(f"""kind: worksheet
title: T
questions:
  - id: "1"
    title: Q
    prose: P
    calculations:
      - command: peak-flops
        inputs: {{gpu: "../../../../../../../..{tmp_path}/evil", dtype: fp16}}
""")
    line = one_line_error(runner.invoke(app, ["report", str(sheet)]))
    assert "a preset name has no" in line


LONG = "n" * 300
LONG_NAMES = {
    "gpu": ["peak-flops", "--gpu", LONG, "--dtype", "fp16"],
    "worksheet": ["report", LONG],
    "template": ["report", "question1", "--template", LONG],
    "presets-show": ["presets", "show", LONG],
    "model-config": ["flops", "--model", LONG + ".json"],
}


@pytest.mark.parametrize("args", LONG_NAMES.values(), ids=LONG_NAMES.keys())
def test_name_longer_than_255_bytes_is_one_line_error(runner, args: list[str]) -> None:
    line = one_line_error(runner.invoke(app, args))
    assert len(line) < 250  # the name is echoed cut to ~80 characters


@pytest.mark.parametrize("field, text", [
    ("name", "name: \"\\e[31mRed GPU\\e[0m\""),
    ("vendor", "vendor: \"Test\\x07\""),
    ("architecture", "architecture: \"Test\\u202e\""),
], ids=["ansi-in-name", "bell-in-vendor", "bidi-in-architecture"])  # fmt: skip
def test_control_characters_in_preset_text_are_refused(runner, tmp_path: Path, field: str, text: str) -> None:
    lines = [text if line.startswith(f"{field}:") else line for line in GOOD_GPU.splitlines()]
    gpu_preset(tmp_path, "\n".join(lines) + "\n", "ansi")
    result = runner.invoke(app, ["peak-flops", "--presets", str(tmp_path), "--gpu", "ansi", "--dtype", "fp16"])
    line = one_line_error(result)
    assert f"key '{field}': control character" in line and "ansi.yaml" in line
    assert "\x1b" not in result.output


def test_control_characters_in_worksheet_text_are_refused(runner, tmp_path: Path) -> None:
    sheet = tmp_path / "sheet.yaml"
    sheet.write_text('kind: worksheet\ntitle: "\\e[2J\\e[Hcleared"\nquestions: [{id: "1", title: Q, prose: P, calculations: [{command: flops}]}]\n')
    result = runner.invoke(app, ["report", str(sheet)])
    line = one_line_error(result)
    assert "sheet.yaml" in line and "key 'title': control character" in line
    assert "\x1b" not in result.output


def test_control_characters_in_error_messages_are_escaped(runner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["peak-flops", "--gpu", "\x1b[31mred", "--dtype", "fp16"])
    one_line_error(result)
    assert "\x1b" not in result.output


def test_preset_file_names_with_control_characters_are_not_listed(runner, tmp_path: Path) -> None:
    gpu_preset(tmp_path, GOOD_GPU, "\x1b[31mred")
    result = runner.invoke(app, ["presets", "list", "--presets", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output


def test_unreadable_preset_directory_is_one_error_line(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pathlib

    locked = tmp_path / "locked"
    (locked / "gpus").mkdir(parents=True)
    (locked / "gpus" / "a100-sxm4-80gb.yaml").write_text("kind: gpu\n")
    if os.geteuid() != 0:  # a real unreadable directory; root reads it anyway, so simulate EACCES below
        os.chmod(locked, 0)
    else:
        real_stat, real_iterdir = pathlib.Path.stat, pathlib.Path.iterdir

        def refuse(path: pathlib.Path) -> None:
            if str(path).startswith(str(locked) + os.sep):
                raise PermissionError(13, "Permission denied", str(path))

        def stat(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            refuse(self)
            return real_stat(self, *args, **kwargs)

        def iterdir(self):  # type: ignore[no-untyped-def]
            refuse(self)
            return real_iterdir(self)

        monkeypatch.setattr(pathlib.Path, "stat", stat)
        monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    try:
        # PARCALC_PRESETS names it as --presets would: one line saying it cannot be read, exit 2, no traceback (before
        # session 21 it was skipped in silence, the packaged preset standing in)
        for args in (PEAK + ["--format", "json"], ["presets", "list"]):
            result = runner.invoke(app, args, env={"PARCALC_PRESETS": str(locked)})
            assert result.exit_code == 2, result.output
            assert result.stderr.splitlines() == [f"Error: PARCALC_PRESETS: {locked}: cannot read it (Permission denied)"]
    finally:
        os.chmod(locked, 0o755)


# ---------------------------------------------------------------------------------------------
# 7. Worksheets and reports


def test_report_json_keeps_every_answer_of_a_question(runner) -> None:
    import json

    result = runner.invoke(app, ["report", "question1", "--format", "json"])
    assert result.exit_code == 0, result.output
    questions = {q["id"]: q for q in json.loads(result.stdout)["questions"]}
    answers = questions["1.2"]["answers"]
    assert [a["key"] for a in answers] == ["intensity"] * 3  # were collapsed into one by a name-keyed mapping
    assert [a["calculation"] for a in answers] == [1, 2, 3]
    assert [round(a["value"], 2) for a in answers] == [1365.33, 31.51, 15.94]
    assert all(a["label"].startswith(f"({i})") and a["unit"] == "FLOP/B" for i, a in enumerate(answers, 1))


def worksheet(tmp_path: Path, header: str, question: str, inputs: str = "{gpu: a100-sxm4-80gb, dtype: tf32}") -> Path:
    sheet = tmp_path / "sheet.yaml"
    sheet.write_text(f"""kind: worksheet
{header}
questions:
  - id: "1"
    title: First
    prose: P
    calculations:
      - command: peak-flops
        inputs: {inputs}
{question}
""")
    return sheet


def test_report_presets_flag_reaches_the_calculations(runner, tmp_path: Path) -> None:
    presets = tmp_path / "presets"
    gpu_preset(presets, GOOD_GPU, "only-here")
    sheet = worksheet(tmp_path, "title: T", "", "{gpu: only-here, dtype: fp16}")
    result = runner.invoke(app, ["report", str(sheet), "--presets", str(presets), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"Test GPU' in result.stdout or "Test GPU" in result.stdout


def test_report_json_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert '"answers": [{"key"' in readme


HOSTILE_HEADER = """title: "Title\\n\\nwith a blank line"
author: "Author\\n\\nwith a blank line"
course: "Course\\n\\n[with] a blank line"
date: 2026-11-22"""
HOSTILE_QUESTION = """  - id: "[a]"
    title: "Second\\n\\n[title]"
    prose: P
    calculations:
      - command: peak-flops
        label: "[b] the label"
        inputs: {gpu: a100-sxm4-80gb, dtype: fp16}"""


def test_blank_lines_and_brackets_in_one_line_fields_compile(runner, tmp_path: Path) -> None:
    sheet = worksheet(tmp_path, HOSTILE_HEADER, HOSTILE_QUESTION)
    tex = runner.invoke(app, ["report", str(sheet), "--format", "latex"])
    assert tex.exit_code == 0, tex.output
    assert "\\title{Title with a blank line}" in tex.stdout
    assert "\\date{2026-11-22}" in tex.stdout
    assert "{[}a{]}" in tex.stdout and "[a]" not in tex.stdout
    output = tmp_path / "sheet.pdf"
    result = runner.invoke(app, ["report", str(sheet), "-o", str(output)])
    if "no TeX engine" in result.output:
        pytest.skip("TeX is not installed")
    assert result.exit_code == 0, result.output
    assert output.read_bytes().startswith(b"%PDF")


def test_yaml_date_is_accepted_as_iso_text(runner, tmp_path: Path) -> None:
    sheet = worksheet(tmp_path, "title: T\ndate: 2026-11-22", "")
    result = runner.invoke(app, ["report", str(sheet), "--format", "latex"])
    assert result.exit_code == 0, result.output
    assert "\\date{2026-11-22}" in result.stdout


@pytest.mark.parametrize("key", ["help", "presets"])
def test_non_calculation_options_are_refused_in_worksheet_inputs(runner, tmp_path: Path, key: str) -> None:
    sheet = worksheet(tmp_path, "title: T", "", f"{{gpu: a100-sxm4-80gb, dtype: tf32, {key}: {'true' if key == 'help' else 'x'}}}")
    result = runner.invoke(app, ["report", str(sheet)])
    line = one_line_error(result)
    assert f"key 'inputs.{key}'" in line and "sheet.yaml" in line
    assert "Usage:" not in result.output


def test_an_input_the_command_does_not_take_is_named_with_the_closest_option(runner, tmp_path: Path) -> None:
    """A misspelt key got click's bare "No such option: --dtyp"; now the worksheet's own words, the
    nearest option and the command's options."""
    sheet = worksheet(tmp_path, "title: T", "", "{gpu: a100-sxm4-80gb, dtyp: tf32}")
    result = runner.invoke(app, ["report", str(sheet)])
    line = one_line_error(result)
    assert "question 1, calculation 1 (peak-flops): inputs: peak-flops has no option '--dtyp' (did you mean 'dtype'?)" in line
    assert "its options: " in line and ", gpu, " in line


# ---------------------------------------------------------------------------------------------
# Issue 28's fuzz findings

@pytest.mark.parametrize("value", ["34:08", "1:30.5", "-2:00"], ids=["int", "float", "negative"])
def test_a_yaml_base_60_number_is_refused_not_read_as_another_number(runner, tmp_path: Path, value: str) -> None:
    """YAML 1.1 (PyYAML) reads `seq-len: 34:08` as 34 x 60 + 8 = 2048: a typo silently became a sequence length."""
    run = tmp_path / "run.yaml"
    run.write_text(f"model: llama3-8b\nseq-len: {value}\n")
    line = one_line_error(runner.invoke(app, ["flops", "--config", str(run)]))
    assert "base-60" in line and value in line


def test_a_model_name_longer_than_a_file_name_is_one_line_error(runner) -> None:
    """A --model of 300 characters is looked up as a directory too; ENAMETOOLONG was an internal error (exit 70)."""
    result = runner.invoke(app, ["flops", "--model", "a" * 300])
    assert result.exit_code == 2
    assert "unknown model" in one_line_error(result)


def test_calibrate_nccl_on_a_fifo_without_a_writer_is_one_line_not_a_hang(runner, tmp_path: Path) -> None:
    """Issue 28: `calibrate nccl FIFO` blocked forever in read(); files are opened non-blocking and checked first."""
    fifo = tmp_path / "results.txt"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO)" in one_line_error(runner.invoke(app, ["calibrate", "nccl", str(fifo)]))


def test_a_preset_linking_out_of_its_folder_is_not_read(runner, tmp_path: Path) -> None:
    """Issue 28: `--presets DIR` followed DIR/gpus/x.yaml -> a file elsewhere, and a parse error quoted its first line."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2: the first line of a private file\n")
    (tmp_path / "presets" / "gpus").mkdir(parents=True)
    (tmp_path / "presets" / "gpus" / "evil.yaml").symlink_to(secret)
    line = one_line_error(runner.invoke(app, ["peak-flops", "--presets", str(tmp_path / "presets"), "--gpu", "evil"]))
    assert "links outside" in line and "hunter2" not in line
    listing = runner.invoke(app, ["presets", "list", "gpus", "--presets", str(tmp_path / "presets")])
    assert listing.exit_code == 0 and "evil" not in listing.stdout


def test_a_preset_linking_within_its_folder_is_read(runner, tmp_path: Path) -> None:
    folder = tmp_path / "presets" / "gpus"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text((Path(__file__).resolve().parent.parent / "presets" / "gpus" / "h100-sxm5.yaml").read_text())
    (folder / "alias.yaml").symlink_to(folder / "mine.yaml")
    result = runner.invoke(app, ["peak-flops", "--presets", str(tmp_path / "presets"), "--gpu", "alias", "--dtype", "bf16"])
    assert result.exit_code == 0, result.output


# Issue 28: bounds on what a template costs, and on what the TeX it writes may do

@pytest.mark.parametrize("template, said", [
    ('\\VAR{ "x" * 10**9 }\n', "items (at most"),
    ('\\VAR{ 2 ** 99999999 }\n', "power of more than"),
], ids=["huge-string", "huge-power"])  # fmt: skip
def test_a_template_cannot_allocate_gigabytes(runner, tmp_path: Path, template: str, said: str) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.tex.j2").write_text(template)
    result = runner.invoke(app, ["report", "question1", "--template", str(templates), "-o", str(tmp_path / "out.tex")])
    assert said in one_line_error(result)
    assert not (tmp_path / "out.tex").exists()


def test_a_loop_that_prints_nothing_is_stopped_by_the_deadline(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("parcalc.render.template_sandbox.RENDER_SECONDS", 0.5)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.tex.j2").write_text("\\BLOCK{for i in range(99999)}\\BLOCK{for j in range(99999)}\\BLOCK{endfor}\\BLOCK{endfor}\n")
    result = runner.invoke(app, ["report", "question1", "--template", str(templates), "--format", "latex"])
    assert "ran longer than 0.5 s" in one_line_error(result)


LUA_READS_A_FILE = r"""\documentclass{article}
\begin{document}
\ifdefined\directlua\directlua{local f = io.open('SECRET'); tex.print(f and 'LEAKED:' .. f:read('*l') or 'BLOCKED')}\else NOLUA\fi
\end{document}
"""


@pytest.mark.skipif(not shutil.which("pdflatex"), reason="needs pdfLaTeX")
def test_a_user_template_is_typeset_without_lua(runner, tmp_path: Path) -> None:
    """Issue 28: LuaLaTeX ran a --template's \\directlua, which read any file into the PDF (openin_any does not
    reach Lua, and --safer stops luaotfload). A user's template is built by pdfLaTeX, which has no Lua."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.tex.j2").write_text(LUA_READS_A_FILE.replace("SECRET", str(secret)))
    result = runner.invoke(app, ["report", "question1", "--template", str(templates), "-o", str(tmp_path / "out.pdf")])
    assert result.exit_code == 0, result.output
    import subprocess

    text = subprocess.run(["pdftotext", str(tmp_path / "out.pdf"), "-"], capture_output=True, text=True, check=True).stdout
    assert "NOLUA" in text and "hunter2" not in text


def test_sigterm_while_a_file_is_written_leaves_no_part_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: SIGTERM while `-o out.json` was written left `.out.json.*.part` behind (the default
    handler ends Python on the spot); now it raises SystemExit(143) and the temporary file goes."""
    import signal

    from parcalc import files

    real_fdopen = os.fdopen

    class Stream:
        def __init__(self, stream) -> None:
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.stream.close()

        def write(self, payload: bytes) -> None:
            self.stream.write(payload[:10])
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-write
            self.stream.write(payload[10:])

    monkeypatch.setattr(files.os, "fdopen", lambda handle, mode: Stream(real_fdopen(handle, mode)))
    with pytest.raises(SystemExit) as stopped:
        files.write_atomically(tmp_path / "out.json", "x" * 100)
    assert stopped.value.code == 143
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_a_toml_run_file_with_a_5000_digit_number_is_one_line(runner, tmp_path: Path) -> None:
    """Issue 28: tomllib's int() of 5,000 digits raised Python's int-str limit error: an internal error."""
    run = tmp_path / "run.toml"
    run.write_text(f'model = "llama3-8b"\nseq-len = {"9" * 5000}\n')
    assert "a number too large for any flag" in one_line_error(runner.invoke(app, ["flops", "--config", str(run)]))


@pytest.mark.parametrize("value", ["9" * 5000, "1e999"], ids=["5000-digits", "overflowing-float"])
def test_a_sweep_value_no_number_can_hold_is_an_error_row_in_json(runner, tmp_path: Path, value: str) -> None:
    """Issue 28: under -f json such a --vary value was an internal error (int() of 5,000 digits; inf in JSON)."""
    import json

    run = tmp_path / "run.yaml"
    run.write_text("command: flops\nmodel: llama3-8b\n")
    result = runner.invoke(app, ["sweep", str(run), "--vary", f"seq-len={value}", "-f", "json"])
    assert result.exit_code == 2, result.output  # no point succeeded, none infeasible: 2 (README)
    (row,) = json.loads(result.stdout)["rows"]
    assert row["status"] == "error" and row["point"]["seq-len"] == value
