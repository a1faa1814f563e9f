"""Every option and argument of every command, one at a time, with hostile values: a loop for a QA pass, not a test.

    python scripts/hostile_sweep.py [COMMAND-PREFIX] [--more]

Each invocation runs in-process (typer's CliRunner) from a valid base, with one option or argument replaced by one
value: 0, -1, -5, 1e30, 10**40, nan, inf, -inf, '', unicode, a directory, a file without permission, a non-UTF-8 file
and an empty file (--more: -0, 1e-320, 1e308, 5e-324, NUL, an escape sequence, a newline, 400 nines, 0x10, ' ',
1e1000000, a 400-digit size, --help). Run it as a user without root's privileges, or "a file without permission" is
readable (e.g. `setpriv --reuid=65534 --regid=65534 --clear-groups python scripts/hostile_sweep.py` with HOME and
XDG_CACHE_HOME pointing at a folder that user may write).

A finding is printed with its command line: an exit other than 0, 1 or 2 (70 is parcalc's internal error), a
traceback, an exit-2 failure that is not exactly one `Error: ...` line, an exit-1 failure not ending in one, a
non-finite number printed on success, a file left behind by a failed run, a run over 20 s. The last lines count the
exits of each command. Session 22 ran it (9,531 invocations); what it found is tests/test_cli_hostile_values.py. A NUL
given as a command-line argument is a finding here only: a real command line cannot carry one (argv is C strings).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typer.testing import CliRunner  # noqa: E402

from parcalc.cli import COMMANDS, app, load_command  # noqa: E402
from tests.test_fuzz_cli import BASES, NON_FINITE  # noqa: E402

SCRATCH = Path(tempfile.mkdtemp(prefix="parcalc-sweep-"))
DIRECTORY = SCRATCH / "a-directory"
NON_UTF8 = SCRATCH / "latin1.yaml"
EMPTY = SCRATCH / "empty.yaml"
NO_PERMISSION = SCRATCH / "secret.yaml"
WORK = SCRATCH / "work"  # each run's folder: must stay empty after a failed run
FILES = (DIRECTORY, NON_UTF8, EMPTY, NO_PERMISSION)

VALUES = ["0", "-1", "-5", "1e30", str(10**40), "nan", "inf", "-inf", "", "☃ü日本", *map(str, FILES)]
MORE = ["-0", "1e-320", "1e308", "5e-324", "\x00", "\x1b[31m", "a\nb", "9" * 400, "0x10", " ", "1e1000000",
        "1" + "0" * 400 + "GB", "--help"]  # fmt: skip

FIXTURES = ROOT / "tests" / "fixtures"
OTHER_BASES: dict[str, list[str]] = {  # the commands tests/test_fuzz_cli.py leaves out
    "presets list": [],
    "presets show": ["h100-sxm5"],
    "calibrate nccl": [str(FIXTURES / "nccl" / "a100x8_nvlink_all_reduce.txt")],
    "calibrate trace": [str(FIXTURES / "h200" / "trace-llama1b-b4-s4096.json.gz")],
    "calibrate gemm": ["--device", "cpu", "--shapes", "tiny", "--peak", "2TFLOP/s"],
    "report": ["question2", "--format", "markdown"],
    "sweep": [str(ROOT / "examples" / "sweep.yaml"), "--vary", "tp=4,8", "--vary", "pp=2"],
    "schema": ["memory"],
}


def make_files() -> None:
    DIRECTORY.mkdir()
    WORK.mkdir()
    NON_UTF8.write_bytes(b"name: caf\xe9\nvalue: \xff\xfe\n")
    EMPTY.write_bytes(b"")
    NO_PERMISSION.write_text("name: x\n", encoding="utf-8")
    NO_PERMISSION.chmod(0)


def leaves() -> dict[str, object]:
    out = {}
    for name in COMMANDS:
        command = load_command(name)
        for sub_name, sub in (getattr(command, "commands", None) or {"": command}).items():
            out[f"{name} {sub_name}".strip()] = sub
    return out


def base_of(path: str) -> list[str]:
    return [*path.split(), *(BASES[path][0] if path in BASES else OTHER_BASES[path])]


def check(args: list[str], exits: dict[int, int]) -> list[str]:
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    here = os.getcwd()
    os.chdir(WORK)
    started = time.perf_counter()
    try:
        result = runner.invoke(app, args)
    finally:
        os.chdir(here)
    elapsed = time.perf_counter() - started
    exits[result.exit_code] = exits.get(result.exit_code, 0) + 1
    problems = []
    err = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code not in (0, 1, 2):
        problems.append(f"exit {result.exit_code}: {err[-1][:300] if err else result.output[-300:]!r}")
    if "Traceback" in result.output or (result.exception is not None and not isinstance(result.exception, SystemExit)):
        problems.append(f"traceback: {type(result.exception).__name__}: {str(result.exception)[:200]}")
    if result.exit_code == 0:
        found = NON_FINITE.search(result.stdout)
        if found and args[-1] not in ("nan", "inf", "-inf"):  # a name given as "nan" is echoed as a name
            problems.append(f"prints {found.group()!r}")
    elif result.exit_code in (1, 2):
        if not err or not err[-1].startswith("Error: "):
            problems.append(f"no Error line: {err[-3:]!r}")
        elif result.exit_code == 2 and len(err) != 1:
            problems.append(f"{len(err)} lines on stderr: {err[:3]!r}")
    left = list(WORK.iterdir())
    if left and result.exit_code != 0:
        problems.append(f"failed (exit {result.exit_code}) and left {sorted(p.name for p in left)}")
    for path in left:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if elapsed > 20:
        problems.append(f"slow: {elapsed:.1f} s")
    return problems


def arguments_with(path: str, position: int, value: str) -> list[str]:
    """The base with its `position`-th argument (they follow the command's words in every base) set to `value`."""
    args = base_of(path)
    at = len(path.split()) + position
    if len(args) > at and not args[at].startswith("-"):
        args[at] = value
    else:
        args.insert(at, value)
    return args


def main() -> None:
    words = [a for a in sys.argv[1:] if not a.startswith("--")]
    values = MORE if "--more" in sys.argv else VALUES
    make_files()
    total = findings = 0
    counts: dict[str, dict[int, int]] = {}
    for path, command in sorted(leaves().items()):
        if words and not path.startswith(words[0]):
            continue
        params = [p for p in command.params if p.name != "help" and not getattr(p, "is_flag", False)]
        arguments = [p for p in params if p.param_type_name == "argument"]
        for param in params:
            for value in values:
                if param.param_type_name == "argument":
                    args = arguments_with(path, arguments.index(param), value)
                else:
                    flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
                    # -o: a name with an extension, so that the value reaches the writer (the files as they are)
                    named = value if value in map(str, FILES) or not value else value + ".json"
                    args = [*base_of(path), flag, named if flag == "--output" else value]
                total += 1
                for problem in check(args, counts.setdefault(path, {})):
                    findings += 1
                    shown = " ".join(repr(a) if not a or " " in a or not a.isprintable() else a for a in args)
                    print(f"[{path}] {param.name}={value!r}: {problem}\n    parcalc {shown}", flush=True)
    print(f"{total} invocations, {findings} findings")
    for path, exits in sorted(counts.items()):
        print(f"  {path:<16} " + ", ".join(f"exit {code}: {n}" for code, n in sorted(exits.items())))
    NO_PERMISSION.chmod(0o600)
    shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
