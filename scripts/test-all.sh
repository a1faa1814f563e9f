#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian/Ubuntu machine and runs it all:
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

python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,lint]" "torch==2.13.0"
.venv/bin/ruff check parcalc tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
