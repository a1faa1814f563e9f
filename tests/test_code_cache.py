"""The cache of compiled @frozen __init__s (parcalc.code_cache): the very code compile() makes, kept between runs,
one file a text, and never in the way (a damaged, foreign or mismatched entry is a miss)."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parcalc import code_cache

TEXT = "def __create_fn__(x):\n def __init__(self, a:x)->None:\n  self.a = a\n return __init__"

# A run that makes one instance of a @frozen class and says how many texts parcalc compiled for it.
_RUN = """
import builtins, sys
from parcalc.frozen import frozen
compiled = []
real = builtins.compile
def counting(source, *args, **kwargs):
    if sys._getframe(1).f_globals.get("__name__", "").startswith("parcalc"):
        compiled.append(source)
    return real(source, *args, **kwargs)
builtins.compile = counting

@frozen
class Probe:
    '''A class no other run defines.'''
    left: int
    right: str = "r"

probe = Probe(1)  # its first instance: the __init__ is made now
print(len(compiled), probe, Probe.__init__.__code__.co_varnames[:3])
"""


def _run(cache: Path, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, check=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache), **env})  # fmt: skip
    return done.stdout.strip()


def _entry(cache: Path) -> Path:
    (entry,) = (cache / "parcalc" / "code").glob("*/*.marshal")  # the Probe's __init__ only
    return entry


def test_the_second_run_compiles_nothing(tmp_path: Path) -> None:
    first, second = _run(tmp_path), _run(tmp_path)
    assert first == "1 Probe(left=1, right='r') ('self', 'left', 'right')"  # compiled, then kept at exit
    assert second == "0 Probe(left=1, right='r') ('self', 'left', 'right')"  # the same __init__, from its file
    entry = _entry(tmp_path)
    from importlib.util import MAGIC_NUMBER

    assert entry.parent.name == MAGIC_NUMBER.hex()  # another bytecode, another folder
    assert entry.stat().st_mode & 0o077 == 0  # this user's alone, as the preset cache's entries


def test_a_kept_code_object_is_what_compile_makes(tmp_path: Path) -> None:
    _run(tmp_path)
    text, code = marshal.loads(_entry(tmp_path).read_bytes()[32:])  # after the BLAKE2b seal
    assert "__dataclass_builtins_object__.__setattr__(self,'left',left)" in text  # dataclasses' own text
    # code objects compare by what they run: bytecode, constants (the nested __init__ too), names, flags, positions
    assert code == compile(text, "<string>", "exec", dont_inherit=True)


def test_a_damaged_or_foreign_entry_is_a_miss(tmp_path: Path) -> None:
    _run(tmp_path)
    entry = _entry(tmp_path)
    sealed = bytearray(entry.read_bytes())
    sealed[-5] ^= 0xFF  # one byte of the payload: the seal no longer matches, marshal never reads it
    entry.write_bytes(bytes(sealed))
    assert _run(tmp_path).startswith("1 ")  # compiled again (and the entry written anew)
    assert _run(tmp_path).startswith("0 ")
    _entry(tmp_path).chmod(0o666)  # others may write it: not used
    assert _run(tmp_path).startswith("1 ")


def test_cache_can_be_turned_off(tmp_path: Path) -> None:
    assert _run(tmp_path, PARCALC_NO_CACHE="1").startswith("1 ")
    assert _run(tmp_path, PARCALC_NO_CACHE="1").startswith("1 ")
    assert not (tmp_path / "parcalc" / "code").exists()


def test_an_entry_is_used_for_its_own_text_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(code_cache, "_folder", [])
    monkeypatch.setattr(code_cache, "_fresh", {})
    code = code_cache.compiled(TEXT)
    assert code == compile(TEXT, "<string>", "exec", dont_inherit=True)
    code_cache._save()
    path = code_cache._entry(TEXT)
    assert path is not None and code_cache._read(path, TEXT) == code
    other = TEXT.replace("self.a", "self.b")
    from parcalc.sealed_file import write_sealed

    write_sealed(path, marshal.dumps((other, compile(other, "<string>", "exec", dont_inherit=True))))
    assert code_cache._read(path, TEXT) is None  # the file holds another text's code (a digest collision): a miss
    assert code_cache.compiled(TEXT) == code
