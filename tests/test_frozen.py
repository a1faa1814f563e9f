"""parcalc.frozen.frozen against dataclass(frozen=True): the same behaviour, field by field.

Each check builds the same class twice, once with each decorator, and compares what a user of
the class can observe (CPython's Lib/dataclasses.py is the reference: _repr_fn, _cmp_fn, _hash_fn,
_frozen_get_del_attr)."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar  # noqa: F401 - a string "ClassVar[int]" names it here: dataclasses looks it up in this module

import pytest

from parcalc.frozen import frozen


def _pair(body: Callable[[], dict], name: str = "Point") -> tuple[type, type]:
    """(class made by dataclass(frozen=True), class made by frozen) from the same namespace."""
    made = []
    for decorate in (dataclass(frozen=True), frozen):
        namespace = {"__module__": __name__, "__qualname__": name, **body()}
        made.append(decorate(type(name, (), namespace)))
    return made[0], made[1]


def POINT() -> dict:
    return {
        "__annotations__": {"x": "int", "y": "float", "note": "str", "tags": "tuple"},
        "note": field(default="", compare=False),
        "tags": field(default=(), repr=False),
    }


def test_equality_hash_and_repr_are_those_of_a_frozen_dataclass() -> None:
    plain, fast = _pair(POINT)
    for args in [(1, 2.0), (1, 2.0, "a"), (1, 2.0, "b", ("t",)), (3, float("nan"))]:
        a, b = plain(*args), fast(*args)
        assert repr(b) == repr(a)
        assert hash(b) == hash(a)
        assert (b == fast(*args)) == (a == plain(*args))
    # compare=False leaves `note` out of == and hash; repr=False leaves `tags` out of repr
    assert fast(1, 2.0, "a") == fast(1, 2.0, "b")
    assert hash(fast(1, 2.0, "a")) == hash(fast(1, 2.0, "b"))
    assert fast(1, 2.0) != fast(1, 3.0)
    assert repr(fast(1, 2.0, "n", ("t",))) == "Point(x=1, y=2.0, note='n')"
    # another class with the same fields is not equal: NotImplemented, then identity
    assert fast(1, 2.0) != plain(1, 2.0)
    assert fast(1, 2.0).__eq__(plain(1, 2.0)) is NotImplemented


def test_frozen_errors_replace_fields_asdict_pickle_and_match() -> None:
    plain, fast = _pair(POINT)
    point = fast(1, 2.0, "n")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del point.y
    assert dataclasses.replace(point, x=7) == fast(7, 2.0, "n")
    assert [f.name for f in dataclasses.fields(point)] == [f.name for f in dataclasses.fields(plain)]
    assert dataclasses.asdict(point) == dataclasses.asdict(plain(1, 2.0, "n"))
    assert fast.__match_args__ == plain.__match_args__ == ("x", "y", "note", "tags")
    assert fast.__dataclass_params__.__repr__() == plain.__dataclass_params__.__repr__()
    assert "eq=True" in repr(fast.__dataclass_params__) and "frozen=True" in repr(fast.__dataclass_params__)
    globals()["Point"] = fast  # pickle finds classes by module and name
    assert pickle.loads(pickle.dumps(point)) == point
    match point:
        case fast(x=1, y=y):
            assert y == 2.0
        case _:
            pytest.fail("match did not take the class's fields")


def test_one_field_and_no_field_hash_as_tuples_and_a_subclass_still_works() -> None:
    one_plain, one_fast = _pair(lambda: {"__annotations__": {"v": "int"}}, "One")
    assert hash(one_fast(3)) == hash(one_plain(3)) == hash((3,))
    empty_plain, empty_fast = _pair(lambda: {"__annotations__": {}}, "Empty")
    assert empty_fast() == empty_fast() and hash(empty_fast()) == hash(empty_plain()) == hash(())
    assert repr(empty_fast()) == "Empty()"

    @dataclass(frozen=True)
    class Sub(one_fast):  # type: ignore[valid-type, misc]
        w: int = 0

    assert Sub(1, 2) == Sub(1, 2) and Sub(1, 2) != Sub(1, 3)
    assert repr(Sub(1, 2)) == "test_one_field_and_no_field_hash_as_tuples_and_a_subclass_still_works.<locals>.Sub(v=1, w=2)"


def test_recursive_repr_and_methods_of_its_own() -> None:
    _, fast = _pair(lambda: {"__annotations__": {"items": "list"}}, "Box")
    box = fast([])
    box.items.append(box)
    assert repr(box) == "Box(items=[...])"

    @frozen
    class Own:
        a: int

        def __repr__(self) -> str:
            return "mine"

    assert repr(Own(1)) == "mine" and Own(1) == Own(1) and hash(Own(1)) == hash((1,))


def test_parcalc_values_use_it() -> None:
    # the classes every one-liner defines at start-up: the reason this module exists
    from parcalc.core.hardware import Gpu, Link, Sourced
    from parcalc.derivation import Derivation, Term

    for cls in (Term, Derivation, Sourced, Gpu, Link):
        assert cls.__eq__.__module__ == "parcalc.frozen", cls
    link = Link("l", "L", Sourced(1.0, "B/s", "s"), Sourced(0.0, "s", "s"))
    assert link == Link("l", "L", Sourced(1.0, "B/s", "s"), Sourced(0.0, "s", "s"))
    assert repr(Sourced(1.0, "B/s", "s")) == "Sourced(value=1.0, unit='B/s', source='s')"


def FACTORY() -> dict:
    return {
        "__annotations__": {"self": "int", "items": "list[int]", "scale": "float", "name": "str"},
        "items": field(default_factory=list),
        "scale": 1.0,
        "name": field(default="n", repr=False),
        "__doc__": "A point with a factory.",
    }


def test_init_is_the_one_dataclass_writes() -> None:
    # CPython 3.11 Lib/dataclasses.py, _init_fn / _field_init / _init_param: the same text, so the
    # same signature (defaults, the <factory> marker, the '__dataclass_self__' name when a field is
    # called self), annotations, argument errors and default_factory calls
    import inspect
    import typing

    plain, fast = _pair(FACTORY, "Box")
    assert str(inspect.signature(fast)) == str(inspect.signature(plain)) == \
        "(self: 'int', items: 'list[int]' = <factory>, scale: 'float' = 1.0, name: 'str' = 'n') -> None"
    assert fast.__init__.__annotations__ == plain.__init__.__annotations__
    assert typing.get_type_hints(fast.__init__) == typing.get_type_hints(plain.__init__)
    assert fast.__init__.__qualname__ == plain.__init__.__qualname__ == "Box.__init__"
    a, b = fast(1), fast(1)
    assert a.items == [] and a.items is not b.items  # the factory is called once per instance
    assert fast(1, [2], 3.0, "m") != fast(1, [2], 3.0, "x")  # name: repr=False only, still compared
    assert repr(fast(1, [2], 3.0, "m")) == repr(plain(1, [2], 3.0, "m")) == "Box(self=1, items=[2], scale=3.0)"
    with pytest.raises(TypeError) as fast_error:
        fast()
    with pytest.raises(TypeError) as plain_error:
        plain()
    assert str(fast_error.value) == str(plain_error.value) == "Box.__init__() missing 1 required positional argument: 'self'"
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        fast(1, nope=2)


def test_init_is_compiled_when_first_looked_up_and_post_init_runs() -> None:
    calls: list[str] = []

    def body() -> dict:
        return {"__annotations__": {"x": "int"}, "__doc__": "One field.",
                "__post_init__": lambda self: calls.append(f"post {self.x}")}  # fmt: skip

    plain, fast = _pair(body, "Lazy")
    assert type(fast.__dict__["__init__"]).__name__ == "_LazyInit"  # nothing compiled at definition
    assert fast(3).x == 3 and plain(3).x == 3 and calls == ["post 3", "post 3"]
    assert callable(fast.__dict__["__init__"]) and fast.__dict__["__init__"].__name__ == "__init__"  # now the function

    # a plain subclass made first compiles the base's __init__ (for the base), and still works
    _, base = _pair(lambda: {"__annotations__": {"v": "int"}, "__doc__": "Base."}, "Base")

    class Child(base):  # type: ignore[valid-type, misc]
        pass

    assert Child(4).v == 4 and type(base.__dict__["__init__"]).__name__ == "function"
    # the same via inspect before any instance: the signature of the real __init__
    import inspect

    _, other = _pair(lambda: {"__annotations__": {"v": "int"}, "__doc__": "Other."}, "Other")
    assert str(inspect.signature(other)) == "(v: 'int') -> None"


def test_what_it_does_not_write_goes_to_dataclass() -> None:
    # a default before a field without one: dataclass's error, at definition as dataclass raises it
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        frozen(type("Bad", (), {"__module__": __name__, "__annotations__": {"x": "int", "y": "int"}, "x": 0}))
    # the class's own __init__ stays
    own = frozen(type("Own", (), {"__module__": __name__, "__annotations__": {"x": "int"},
                                  "__init__": lambda self: object.__setattr__(self, "x", 9)}))  # fmt: skip
    assert own().x == 9
    # its own __setattr__: dataclass(frozen=True) refuses it
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):
        frozen(type("Guarded", (), {"__module__": __name__, "__annotations__": {"x": "int"},
                                    "__setattr__": lambda self, n, v: None}))  # fmt: skip
    # field(init=False) and KW_ONLY: dataclass's own __init__, with the same signature as the twin's
    import inspect

    def special() -> dict:
        return {"__annotations__": {"x": "int", "_": dataclasses.KW_ONLY, "y": "int", "z": "int"},
                "z": field(default=5, init=False)}

    plain, fast = _pair(special, "Special")
    assert str(inspect.signature(fast)) == str(inspect.signature(plain)) == "(x: 'int', *, y: 'int') -> None"
    assert fast(1, y=2) == fast(1, y=2) and fast(1, y=2).z == 5
    assert fast.__doc__ == plain.__doc__ == "Special(x: 'int', *, y: 'int')"


def test_a_class_without_a_docstring_gets_dataclass_s() -> None:
    plain, fast = _pair(POINT)
    assert fast.__doc__ == plain.__doc__ == "Point(x: 'int', y: 'float', note: 'str' = '', tags: 'tuple' = ())"


def test_fields_keep_their_annotations_and_a_class_variable_is_no_field() -> None:
    """_collect_fields hands dataclasses `object` for each string annotation (no ClassVar / InitVar / KW_ONLY parse):
    each field keeps its string, and where an annotation names ClassVar dataclasses reads the strings itself."""
    plain, fast = _pair(POINT)
    assert [(f.name, f.type) for f in dataclasses.fields(fast)] == [(f.name, f.type) for f in dataclasses.fields(plain)] == [
        ("x", "int"), ("y", "float"), ("note", "str"), ("tags", "tuple")]  # fmt: skip
    assert fast.__annotations__ == plain.__annotations__ == {"x": "int", "y": "float", "note": "str", "tags": "tuple"}

    def counted() -> dict:
        return {"__annotations__": {"x": "int", "made": "ClassVar[int]"}, "made": 0}

    plain, fast = _pair(counted, "Counted")
    assert [f.name for f in dataclasses.fields(fast)] == [f.name for f in dataclasses.fields(plain)] == ["x"]
    assert fast(3) == fast(3) and fast.made == 0 and repr(fast(3)) == "Counted(x=3)"


# A class with a docstring whose fields all take dataclasses' defaults (the classes of parcalc: plain defaults, no
# field()) is made without dataclasses at definition (parcalc.frozen._defer_fields); dataclasses collects its fields
# when something asks for them. Such a class behaves as its dataclass(frozen=True) twin before and after that.
def PLAIN() -> dict:
    return {"__doc__": "A point on a plane, in metres.", "__annotations__": {"x": "int", "y": "float", "label": "str"}, "label": "origin"}


def _deferred(cls: type) -> bool:
    return type(cls.__dict__.get("__dataclass_fields__")).__name__ == "_LazyFields"


def test_a_plain_class_is_made_without_dataclasses_and_behaves_as_a_frozen_dataclass() -> None:
    import inspect

    plain, fast = _pair(PLAIN, "Spot")
    assert _deferred(fast), "defined through dataclasses: the start-up this path saves is lost"
    a, b = plain(1, 2.0), fast(1, 2.0)
    assert (repr(b), hash(b), b == fast(1, 2.0), b == fast(1, 3.0)) == (repr(a), hash(a), True, False)
    assert repr(b) == "Spot(x=1, y=2.0, label='origin')"
    assert str(inspect.signature(fast)) == str(inspect.signature(plain)) == "(x: 'int', y: 'float', label: 'str' = 'origin') -> None"
    assert fast.__doc__ == plain.__doc__ and fast.__match_args__ == plain.__match_args__ == ("x", "y", "label")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        b.x = 5
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'y'"):
        fast(1)
    assert _deferred(fast), "made, compared and shown without its dataclass fields"
    # then whatever asks for the fields gets dataclasses' own, as the twin's
    assert dataclasses.is_dataclass(fast) and not _deferred(fast)
    assert [(f.name, f.type, f.default) for f in dataclasses.fields(fast)] == [(f.name, f.type, f.default) for f in dataclasses.fields(plain)]
    assert fast.__dataclass_params__.__repr__() == plain.__dataclass_params__.__repr__()
    assert dataclasses.replace(b, y=5.0) == fast(1, 5.0) and dataclasses.asdict(b) == dataclasses.asdict(a)
    globals()["Spot"] = fast  # pickle finds classes by module and name
    assert pickle.loads(pickle.dumps(b)) == b
    match b:
        case fast(x=1, y=y):
            assert y == 2.0
        case _:
            pytest.fail("match did not take the class's fields")


@pytest.mark.parametrize("ask", ["fields", "params", "replace", "subclass", "dataclass subclass", "instance attribute", "copy.replace"])
def test_each_way_of_asking_for_a_plain_class_s_fields_gets_dataclasses_own(ask: str) -> None:
    plain, fast = _pair(PLAIN, "Spot")
    if ask == "fields":
        got = [f.name for f in dataclasses.fields(fast)]
    elif ask == "params":
        got = repr(fast.__dataclass_params__)
    elif ask == "replace":
        got = dataclasses.replace(fast(1, 2.0), label="x")
    elif ask == "instance attribute":
        got = list(fast(1, 2.0).__dataclass_fields__)
    elif ask == "copy.replace":  # Python 3.13's copy.replace takes dataclasses' __replace__; before it, the attribute is absent
        import copy
        import sys

        if sys.version_info < (3, 13):
            assert not hasattr(plain, "__replace__") and not hasattr(fast, "__replace__")
            pytest.skip("copy.replace is Python 3.13's")
        got = copy.replace(fast(1, 2.0), y=3.0)  # type: ignore[attr-defined]
        assert got == fast(1, 3.0)
    elif ask == "dataclass subclass":

        @dataclass(frozen=True)
        class Lifted(fast):  # type: ignore[valid-type, misc]
            z: int = 0

        got = Lifted(1, 2.0, "a", 3)
        assert got == Lifted(1, 2.0, "a", 3) and got.z == 3
    else:

        @frozen
        class Sub(fast):  # type: ignore[valid-type, misc]
            """A point with a height."""

            z: int = 0

        got = Sub(1, 2.0, "a", 3)
        assert repr(got) == "test_each_way_of_asking_for_a_plain_class_s_fields_gets_dataclasses_own.<locals>.Sub(x=1, y=2.0, label='a', z=3)"
    assert got is not None and not _deferred(fast)
    assert fast.__dataclass_fields__.keys() == plain.__dataclass_fields__.keys()
    assert repr(fast.__dataclass_params__) == repr(plain.__dataclass_params__)


def test_a_plain_class_refuses_what_dataclass_refuses_when_it_is_defined() -> None:
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        _pair(lambda: {"__doc__": "d", "__annotations__": {"x": "int", "y": "int"}, "x": 0}, "Bad")
    with pytest.raises(ValueError, match="mutable default <class 'list'> for field x is not allowed"):
        _pair(lambda: {"__doc__": "d", "__annotations__": {"x": "list"}, "x": []}, "Bad")


def test_parcalc_s_one_liner_classes_are_deferred() -> None:
    # the reason for the path: Term and Derivation are defined by every one-liner (~35 us each through dataclasses), in
    # a fresh interpreter (this one's other tests may have asked for their fields)
    import subprocess
    import sys

    script = """
from parcalc.derivation import Derivation, Term
print(*(type(vars(c)["__dataclass_fields__"]).__name__ for c in (Term, Derivation)))
term = Term("k", "k", "k", 1.0, "B", "d")
print(type(vars(Term)["__dataclass_fields__"]).__name__, term == Term("k", "k", "k", 1.0, "B", "d"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["_LazyFields", "_LazyFields", "_LazyFields", "True"]  # made and compared, never asked
    from parcalc.derivation import Term

    assert [f.name for f in dataclasses.fields(Term)][:2] == ["key", "symbol"]
