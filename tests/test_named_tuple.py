"""parcalc.named_tuple.NamedTuple against typing.NamedTuple: the same class, made without compiling its annotations.

Each check builds the same class twice, once on each base (CPython's Lib/typing.py NamedTupleMeta and
Lib/collections/__init__.py namedtuple are the reference), and compares what a user of the class can observe."""

from __future__ import annotations

import builtins
import inspect
import pickle
import typing
from pathlib import Path

import pytest

from parcalc.named_tuple import NamedTuple


class Plain(typing.NamedTuple):
    """A call's size and count."""

    size: float
    count: int = 1
    label: str | None = None

    @property
    def total(self) -> float:
        return self.size * self.count


class Fast(NamedTuple):
    """A call's size and count."""

    size: float
    count: int = 1
    label: str | None = None

    @property
    def total(self) -> float:
        return self.size * self.count


def test_the_class_is_typing_s_namedtuple() -> None:
    assert Fast.__mro__[1:] == Plain.__mro__[1:] == (tuple, object)
    assert type(Fast) is type(Plain) is type
    assert Fast._fields == Plain._fields == ("size", "count", "label")
    assert Fast._field_defaults == Plain._field_defaults == {"count": 1, "label": None}
    assert Fast.__doc__ == Plain.__doc__ == "A call's size and count."
    assert Fast.__match_args__ == Plain.__match_args__
    assert Fast.__orig_bases__ == Plain.__orig_bases__ == (typing.NamedTuple,)  # type: ignore[attr-defined]
    assert sorted(vars(Fast)) == sorted(vars(Plain))
    # the annotations stay the strings written (typing turns each into a ForwardRef of that text), and read the same
    assert Fast.__annotations__ == {"size": "float", "count": "int", "label": "str | None"}
    assert Fast.__new__.__annotations__ is Fast.__annotations__
    assert typing.get_type_hints(Fast) == typing.get_type_hints(Plain) == {"size": float, "count": int, "label": str | None}
    assert [(p.name, p.default) for p in inspect.signature(Fast).parameters.values()] == [
        (p.name, p.default) for p in inspect.signature(Plain).parameters.values()
    ]


def test_instances_behave_alike() -> None:
    fast, plain = Fast(2.0, 3), Plain(2.0, 3)
    assert repr(fast) == repr(plain).replace("Plain", "Fast") == "Fast(size=2.0, count=3, label=None)"
    assert fast == plain == (2.0, 3, None) and hash(fast) == hash(plain)
    assert fast.total == 6.0 and fast._replace(count=4).total == 8.0
    assert fast._asdict() == plain._asdict() and Fast._make([1.0, 2, "x"]) == Fast(1.0, 2, "x")
    assert pickle.loads(pickle.dumps(fast)) == fast and type(pickle.loads(pickle.dumps(fast))) is Fast
    match fast:
        case Fast(size, count):
            assert (size, count) == (2.0, 3)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'size'"):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        fast.size = 1.0  # type: ignore[misc]


def test_typing_s_checks_still_apply() -> None:
    with pytest.raises(TypeError, match="Non-default namedtuple field b cannot follow default field a"):

        class Bad(NamedTuple):
            a: int = 0
            b: int

    with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _replace"):

        class Reserved(NamedTuple):
            a: int

            def _replace(self) -> None: ...

    with pytest.raises(TypeError, match="functional form"):
        NamedTuple("Point", [("x", int)])


def test_defining_one_compiles_no_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    """What it saves: typing compiles each string annotation (ForwardRef), ~10 us a field; here none."""
    compiled: list[str] = []
    real = builtins.compile

    def counting(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        compiled.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)

    class TypingPoint(typing.NamedTuple):
        x: int
        y: float

    assert compiled == ["int", "float"]
    compiled.clear()

    class Point(NamedTuple):
        x: int
        y: float

    assert compiled == [] and Point(1, 2.0) == TypingPoint(1, 2.0)


def test_parcalc_s_named_tuples_use_it() -> None:
    """Every `class X(NamedTuple)` of parcalc is made by this base (a one-liner defines up to 17 of them)."""
    package = Path(__file__).resolve().parent.parent / "parcalc"
    typing_ones = [str(p.relative_to(package)) for p in package.rglob("*.py")
                   if p.name != "named_tuple.py" and "(NamedTuple)" in (text := p.read_text())
                   and "from parcalc.named_tuple import NamedTuple" not in text]  # fmt: skip
    assert typing_ones == []
    from parcalc.core.comm.plan import Workload

    assert Workload.__orig_bases__ == (typing.NamedTuple,) and Workload.__annotations__["seq_len"] == "int"  # type: ignore[attr-defined]
