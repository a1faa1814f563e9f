#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian/Ubuntu machine and runs it all, at both ends of
# the dependency ranges pyproject.toml declares (see the end of this script):
# TeX Live (with LuaLaTeX), fonts for Greek and CJK and poppler from Debian's packages (real PDFs in the
# report tests), a virtual
# environment in .venv with parcalc, its test extras and the PyTorch CPU wheel torch==2.13.0
# (ground-truth tests against real autograd and gloo collectives), then the lint and type checks
# (ruff and mypy, configured in pyproject.toml) and the tests. Exits non-zero if ruff or mypy
# finds anything, if any test fails or if no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v latexmk >/dev/null 2>&1 || missing+=(texlive-latex-recommended texlive-pictures latexmk)
# LuaLaTeX's luaotfload (Unicode worksheets) and the fallback fonts for Greek and CJK in PDFs
[ -n "$(kpsewhich luaotfload.sty 2>/dev/null)" ] || missing+=(texlive-luatex)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf ] || missing+=(fonts-dejavu-core)
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing+=(fonts-wqy-microhei)
command -v pdftotext >/dev/null 2>&1 || missing+=(poppler-utils)
# the shells whose completion scripts tests/test_conventions.py runs for real (bash is there already)
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
command -v fish >/dev/null 2>&1 || missing+=(fish)
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 1. The newest versions pyproject.toml allows (what a fresh `pip install parcalc` gets; --upgrade so that
#    an old .venv is brought up to them too): the whole suite.
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade -e ".[test,lint]" "torch==2.13.0"
.venv/bin/ruff check parcalc tests benchmarks
.venv/bin/mypy
# pytest-xdist: one worker a core, at most 4 (each worker imports PyTorch and runs its own gloo ranks and
# compilations: 4 fit in CI's 24 GiB); PARCALC_TEST_WORKERS=0 runs in this process (a debugger, pdb).
workers="${PARCALC_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" "$@"

# 2. The lowest versions it allows (uv's lowest-direct resolution: every direct dependency at its floor,
#    typer 0.16, rich 13.0, jinja2 3.1.0, pyyaml 6.0, markdown-it-py 2.2, numpy 1.24, pytest 8.0, pytest-xdist 3.5): the tests that
#    parse flags, render and read files, where those versions differ. Not when arguments pick tests.
#    docs/cli.md is generated with the newest typer and rich (its snapshot test is left out here).
if [ "$#" -eq 0 ] && [ -z "${PARCALC_SKIP_LOWEST:-}" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "uv>=0.9"
    python3 -m venv .venv-lowest
    .venv/bin/python -m uv pip install -q --python .venv-lowest/bin/python --resolution lowest-direct -e ".[test]"
    .venv-lowest/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
    echo "lowest versions: $(.venv/bin/python -m uv pip list --python .venv-lowest/bin/python 2>/dev/null \
        | grep -E '^(typer|click|rich|jinja2|pyyaml|markdown-it-py|numpy|pytest|pytest-xdist) ' | tr -s ' ' | paste -sd, -)"
    .venv-lowest/bin/python -m pytest -q -p no:cacheprovider -n "$workers" -m "not slow" \
        --deselect tests/test_docs_cli.py::test_cli_reference_is_up_to_date \
        tests/test_help.py tests/test_flags.py tests/test_cli_foundation.py tests/test_cli_comm.py tests/test_cli_memory.py \
        tests/test_cli_fit.py tests/test_cli_flops.py tests/test_cli_bubble.py tests/test_hardening_files.py \
        tests/test_hardening_cli.py tests/test_runfile.py tests/test_api.py tests/test_sweep.py tests/test_conventions.py \
        tests/test_json_schema.py tests/test_presets.py tests/test_render.py tests/test_units.py tests/test_readme_commands.py \
        tests/test_command_imports.py tests/test_hostile_options.py tests/test_named_tuple.py tests/test_code_cache.py
fi
