"""Issue #15, item 5: the conventions of a command-line tool. --version, shell completion (bash,
zsh, fish), NO_COLOR / FORCE_COLOR, "did you mean" for a mistyped command, a warning for a
--presets directory that gives nothing, --model DIR, and exit codes as the README documents them.
Expected values come from the conventions named in each test (no-color.org, force-color.org,
click's completion protocol) or from parcalc's own files (pyproject.toml, presets/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import parcalc
from parcalc.cli import app

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "hf"
PEAK = ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]
ESC = "\x1b["


def _parcalc(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter, stdout a pipe; colour variables only as given."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "PARCALC_PRESETS")}
    return subprocess.run([sys.executable, "-m", "parcalc", *args], capture_output=True, text=True, timeout=60,
                          env={**base, **(env or {})}, cwd=cwd, check=False)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# --version: one source, parcalc/__init__.py's __version__, which pyproject.toml reads


def test_version_prints_the_package_version(runner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"parcalc {parcalc.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", parcalc.__version__)


def test_the_version_has_one_source() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "parcalc/__init__.py"
    # the installed metadata (built by hatchling from that path) says the same
    assert importlib.metadata.version("parcalc") == parcalc.__version__


# ---------------------------------------------------------------------------------------------
# Shell completion


@pytest.mark.parametrize(("shell", "marker"), [("bash", "_PARCALC_COMPLETE=complete_bash"), ("zsh", "_PARCALC_COMPLETE=complete_zsh"),
                                               ("fish", "_PARCALC_COMPLETE=complete_fish")])  # fmt: skip
def test_show_completion_prints_the_script_of_each_shell(runner, shell: str, marker: str) -> None:
    result = runner.invoke(app, ["--show-completion", shell])
    assert result.exit_code == 0, result.output
    assert marker in result.stdout and "parcalc" in result.stdout
    assert "not supported" not in result.output


@pytest.mark.parametrize("shell", ["tcsh", "", "BASH-"])
def test_show_completion_of_an_unknown_shell_is_one_error_line(run_error, shell: str) -> None:
    line = run_error(["--show-completion", shell])
    assert line.startswith("Error: --show-completion: no completion for the shell") and "bash, zsh, fish" in line


def _complete(shell: str, words: str) -> list[str]:
    """What parcalc answers a shell's completion request for the command line `words` (the
    variables each script of --show-completion sets: typer/_completion_shared.py)."""
    env = {"_PARCALC_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        parts = words.split(" ")
        env |= {"COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    else:
        env |= {"_TYPER_COMPLETE_ARGS": words, "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    done = _parcalc(env=env)
    assert done.returncode == 0, done.stderr
    assert "not supported" not in done.stderr
    return done.stdout.splitlines()


def test_bash_completes_commands_flags_and_preset_names() -> None:
    assert _complete("bash", "parcalc me") == ["memory"]
    assert _complete("bash", "parcalc comm") == ["comm-volume"]
    assert "--gpu" in _complete("bash", "parcalc peak-flops --g")
    gpus = sorted(p.stem for p in (ROOT / "presets" / "gpus").glob("h100*.yaml"))
    assert _complete("bash", "parcalc peak-flops --gpu h100") == gpus
    models = sorted(p.stem for p in (ROOT / "presets" / "models").glob("gpt3*.yaml"))
    assert models and _complete("bash", "parcalc comm-volume --model gpt3") == models
    links = sorted(p.stem for p in (ROOT / "presets" / "links").glob("nvlink*.yaml"))
    assert links and _complete("bash", "parcalc comm-volume --link nvlink") == links
    assert _complete("bash", "parcalc fit --inter-node-link ib-n") == sorted(p.stem for p in (ROOT / "presets" / "links").glob("ib-n*.yaml"))
    # issue 28: positional preset names and categories complete too
    assert _complete("bash", "parcalc presets show h1") == gpus
    assert _complete("bash", "parcalc presets show llama3-7") == ["llama3-70b"]
    assert _complete("bash", "parcalc presets list g") == ["gpus"]


def test_zsh_and_fish_complete_too() -> None:
    zsh = "\n".join(_complete("zsh", "parcalc peak-flops --gpu a100-sxm4-8"))
    assert zsh.startswith("_arguments") and '"a100-sxm4-80gb"' in zsh
    assert "memory" in "\n".join(_complete("zsh", "parcalc mem"))
    fish = _complete("fish", "parcalc peak-flops --gpu a100-sxm4-8")
    assert fish == ["a100-sxm4-80gb"]
    assert any(line.startswith("memory\t") for line in _complete("fish", "parcalc mem"))  # with its help text


def test_completion_sees_the_presets_flag(tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "zz-test-gpu.yaml").write_text("kind: gpu\n")
    assert _complete("bash", f"parcalc peak-flops --presets {tmp_path} --gpu zz") == ["zz-test-gpu"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_bash_script_works_in_bash() -> None:
    """The script sourced in a real bash, its function called as bash's Tab would call it."""
    script = ('source <(parcalc --show-completion bash); COMP_WORDS=(parcalc peak-flops --gpu a100-sxm4-4); COMP_CWORD=3; '
              '_parcalc_completion parcalc; echo "${COMPREPLY[@]}"')  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a100-sxm4-40gb"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="needs fish (Debian package fish)")
def test_the_fish_script_works_in_fish() -> None:
    script = ('parcalc --show-completion fish | source; complete -C "parcalc peak-flops --gpu a100-sxm4-8"; '
              'complete -C "parcalc comm-volume --li"')  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["fish", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["a100-sxm4-80gb", "--link\tLink preset within a node (default nvlink3)."]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh (Debian package zsh)")
def test_the_zsh_script_works_in_zsh() -> None:
    """zsh's completion widget needs a terminal; its function is called with the words it would get,
    and _arguments (which would offer the candidates) prints what it was given."""
    script = ('autoload -Uz compinit; compinit -u; eval "$(parcalc --show-completion zsh)"; '
              '_arguments() { print -r -- "$@"; }; words=(parcalc peak-flops --gpu a100-sxm4-8); CURRENT=4; _parcalc_completion')  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '*: :(("a100-sxm4-80gb"))'


# ---------------------------------------------------------------------------------------------
# NO_COLOR and FORCE_COLOR (no-color.org, force-color.org: any non-empty value counts)


@pytest.mark.parametrize(
    ("env", "coloured"),
    [
        pytest.param({}, False, id="pipe-plain"),
        pytest.param({"FORCE_COLOR": "1"}, True, id="force-colour-into-a-pipe"),
        pytest.param({"FORCE_COLOR": "0"}, True, id="force-colour-any-non-empty-value"),
        pytest.param({"FORCE_COLOR": ""}, False, id="force-colour-empty-is-unset"),
        pytest.param({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, id="no-colour-wins"),
        pytest.param({"FORCE_COLOR": "1", "TERM": "dumb"}, False, id="dumb-terminal"),
        pytest.param({"NO_COLOR": ""}, False, id="no-colour-empty-is-unset"),
    ],
)  # fmt: skip
def test_colour_follows_no_color_and_force_color(env: dict[str, str], coloured: bool) -> None:
    done = _parcalc(*PEAK, env=env)
    assert done.returncode == 0, done.stderr
    assert (ESC in done.stdout) is coloured
    assert "155.93472 TFLOP/s" in re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)


# ---------------------------------------------------------------------------------------------
# "did you mean" for a command


@pytest.mark.parametrize(
    ("typed", "line"),
    [
        ("memroy", "Error: no command 'memroy'; did you mean 'memory'?"),
        ("MEMORY", "Error: no command 'MEMORY'; did you mean 'memory'?"),
        ("comm", "Error: no command 'comm'; did you mean 'comm-volume'?"),
        ("peakflops", "Error: no command 'peakflops'; did you mean 'peak-flops'?"),
        ("bubbel", "Error: no command 'bubbel'; did you mean 'bubble'?"),
    ],
)
def test_a_mistyped_command_gets_the_nearest_one(run_error, typed: str, line: str) -> None:
    assert run_error([typed, "--batch", "8"]) == line


def test_a_command_like_nothing_lists_the_commands(run_error) -> None:
    line = run_error(["zzz"])
    assert line.startswith("Error: no command 'zzz'; the commands are analyze, bubble,") and "(see 'parcalc --help')" in line


def test_a_mistyped_command_in_a_real_process_is_one_line_exit_2() -> None:
    done = _parcalc("memroy")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "Error: no command 'memroy'; did you mean 'memory'?\n"


# ---------------------------------------------------------------------------------------------
# --presets DIR that gives nothing: a directory the user named is bad input (one line, exit 2, nothing written)


def test_a_presets_directory_that_does_not_exist_is_one_error_line(run_error, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    assert run_error([*PEAK, "--presets", str(missing)]) == f"Error: --presets {missing}: no such directory"


def test_a_presets_directory_without_preset_folders_is_one_error_line(run_error, tmp_path: Path) -> None:
    (tmp_path / "gpu").mkdir()  # singular: not a folder parcalc reads
    assert run_error([*PEAK, "--presets", str(tmp_path)]) == (
        f"Error: --presets {tmp_path} holds none of gpus/, links/, models/, worksheets/, frameworks/: no presets from it"
    )


def test_a_preset_folder_given_as_presets_names_its_parent(run_error, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    assert run_error([*PEAK, "--presets", str(tmp_path / "gpus")]) == (
        f"Error: --presets {tmp_path / 'gpus'} is itself a preset folder: --presets {tmp_path} (the folder that holds gpus/)"
    )


# PARCALC_PRESETS names directories as --presets does, once for every run: one that gives nothing is the same error, naming
# the variable (before session 21 it was skipped in silence, the packaged preset's numbers then standing in for the user's)


def test_a_presets_variable_naming_a_missing_directory_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    out = tmp_path / "peak.json"
    done = _parcalc(*PEAK, "-o", str(out), env={"PARCALC_PRESETS": str(missing)})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"Error: PARCALC_PRESETS: {missing}: no such directory\n"
    assert not out.exists()


@pytest.mark.parametrize("what", ["file", "empty", "folder"])
def test_a_presets_variable_that_gives_nothing_is_the_presets_flags_error(runner, tmp_path: Path, what: str) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "gpus" / "x.yaml").write_text("kind: gpu\n")
    named = {"file": tmp_path / "gpus" / "x.yaml", "empty": tmp_path / "empty", "folder": tmp_path / "gpus"}[what]
    expected = {"file": f"{named}: not a directory; PARCALC_PRESETS takes the folder that holds gpus/, links/, models/, worksheets/, "
                        "frameworks/ (a preset file goes in one of them)",
                "empty": f"{named} holds none of gpus/, links/, models/, worksheets/, frameworks/: no presets from it",
                "folder": f"{named} is itself a preset folder: PARCALC_PRESETS={tmp_path} (the folder that holds gpus/)"}[what]  # fmt: skip
    for args in (PEAK, ["presets", "list"], ["presets", "show", "h100-sxm5"]):
        result = runner.invoke(app, args, env={"PARCALC_PRESETS": str(named)})
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.splitlines() == [f"Error: PARCALC_PRESETS: {expected}"], (args, result.stderr)
        assert result.stdout == ""


def test_a_presets_variable_of_good_and_empty_parts_is_read(runner, tmp_path: Path) -> None:
    """Empty parts (a trailing ':', '::') name nothing and are passed over; a good directory is read as before."""
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "my-gpu.yaml").write_text("kind: gpu\n")  # listed (as broken: presets list reads it)
    result = runner.invoke(app, ["presets", "list", "gpus", "--format", "json"],
                           env={"PARCALC_PRESETS": os.pathsep + str(tmp_path) + os.pathsep + os.pathsep})
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["tables"]["gpus"]["rows"]
    assert [r["origin"] for r in rows if r["name"] == "my-gpu"] == ["PARCALC_PRESETS"]
    result = runner.invoke(app, PEAK, env={"PARCALC_PRESETS": ""})
    assert result.exit_code == 0, result.output


def test_a_presets_file_is_one_error_line_and_nothing_written(tmp_path: Path) -> None:
    """A preset file named where its folder belongs: refused before the run, the -o file not created."""
    afile = tmp_path / "file.yaml"
    afile.write_text("kind: gpu\n")
    out = tmp_path / "fit.json"
    done = _parcalc("fit", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8", "--presets", str(afile), "-o", str(out))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"Error: --presets {afile}: not a directory; --presets takes the folder that holds gpus/, links/, "
                           "models/, worksheets/, frameworks/ (a preset file goes in one of them)\n")  # fmt: skip
    assert not out.exists()


def test_a_good_presets_directory_is_silent(runner, tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    result = runner.invoke(app, ["presets", "show", "a100-sxm4-80gb", "--presets", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: gpu\nname: [x\n", "bad.yaml: line 3: invalid YAML: did not find expected ',' or ']'"),
        ("kind: gpu\nname: My GPU\nvendor: nvidia\n", "bad.yaml: key 'sources': missing: every number needs a source"),
    ],
    ids=["yaml-syntax", "fails-validation"],
)
def test_a_bad_preset_in_a_presets_directory_is_one_error_line(run_error, tmp_path: Path, text: str, message: str) -> None:
    """The file a command reads from --presets DIR: a YAML error or a preset that fails validation names file and key."""
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "bad.yaml").write_text(text)
    line = run_error(["peak-flops", "--gpu", "bad", "--dtype", "bf16", "--presets", str(tmp_path)])
    assert line.startswith("Error: ") and line.endswith(message), line


# ---------------------------------------------------------------------------------------------
# --model DIR: a Hugging Face model directory


def test_model_directory_reads_its_config_json(run_json) -> None:
    from_dir = run_json("flops", "--model", str(HF / "mixtral-8x7b"), "--batch", "8", "--seq-len", "4096")
    from_file = run_json("flops", "--model", str(HF / "mixtral-8x7b" / "config.json"), "--batch", "8", "--seq-len", "4096")
    assert from_dir["results"] == from_file["results"]
    # Mixtral 8x7B: 46.7 B parameters (mistral.ai's announcement, "46.7B total parameters")
    params = next(v["value"] for k, v in from_dir["results"].items() if "param" in k)
    assert abs(params - 46.7e9) / 46.7e9 < 0.01


def test_model_directory_by_bare_name_when_no_preset_has_it(run_json, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(HF / "mixtral-8x7b", tmp_path / "My-Mixtral")
    monkeypatch.chdir(tmp_path)
    bare = run_json("flops", "--model", "My-Mixtral", "--batch", "8", "--seq-len", "4096")
    path = run_json("flops", "--model", str(HF / "mixtral-8x7b"), "--batch", "8", "--seq-len", "4096")
    assert bare["results"] == path["results"]


def test_model_directory_without_config_json_is_one_error_line(run_error, tmp_path: Path) -> None:
    line = run_error(["flops", "--model", str(tmp_path), "--batch", "8", "--seq-len", "4096"])
    assert line == f"Error: --model: the directory {str(tmp_path)!r} holds no config.json (a Hugging Face model directory has one)"


# ---------------------------------------------------------------------------------------------
# Exit codes: the README's table is what the CLI does


def test_readme_documents_the_exit_codes_the_cli_uses() -> None:
    from parcalc import cli
    from parcalc.errors import InfeasibleError, InputError

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("### Exit codes") :].split("\n\n")[1]
    codes = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert codes == [0, 1, 2, 70, 130]
    assert (InfeasibleError.exit_code, InputError.exit_code, cli.INTERNAL_ERROR_EXIT, cli.INTERRUPTED_EXIT) == (1, 2, 70, 130)


def test_infeasible_exits_1_and_bad_input_2() -> None:
    # GPT-3 175B's weights and optimizer states alone are ~2.8 TB: no split of 8 A100 80GB holds them
    done = _parcalc("fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--batch", "8", "--seq-len", "2048", "--search")
    assert done.returncode == 1 and done.stderr.startswith("Error: nothing fits")
    assert _parcalc("peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf33").returncode == 2


# ---------------------------------------------------------------------------------------------
# None of this is paid for by a one-liner


def test_a_one_liner_loads_no_completion_docs_or_openssl() -> None:
    script = f"""
import sys
sys.argv = ["parcalc", *{PEAK!r}]
from parcalc.__main__ import main
try:
    main()
except SystemExit:
    pass
print(",".join(m for m in ("parcalc.completion", "parcalc.docs_cli", "_hashlib", "importlib.metadata", "typer.testing")
               if m in sys.modules), file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stderr.strip().splitlines()[-1:] in ([], [""]), done.stderr
