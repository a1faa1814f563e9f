"""`NamedTuple`: typing.NamedTuple at a fraction of the start-up cost, making the same classes.

`class Workload(NamedTuple): ...` costs typing ~10 us a field before the class exists (CPython 3.11
Lib/typing.py, NamedTupleMeta -> _make_nmtuple): each annotation goes through _type_check, and under
`from __future__ import annotations` (every parcalc module) each is a string that typing turns into a
ForwardRef, compiling its text. A one-liner defines up to seventeen NamedTuples (comm-volume's plan,
collectives and tensors): ~1.5 ms. Here typing's own NamedTupleMeta makes the class (so it is what
typing makes on each Python: collections.namedtuple's tuple subclass, the class body's methods and
docstring, the checks on default order and reserved names), handed `object` for each string
annotation, which _type_check passes at once; the strings are put back afterwards as the class's and
its __new__'s __annotations__.

The one difference: those annotations stay strings instead of ForwardRefs of the same text, which
typing.get_type_hints resolves the same way (as it does a plain class's under the future import),
and a string that is not valid Python is not refused when the class is defined (mypy and ruff read
every one). Type checkers see typing.NamedTuple itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    import typing

    _TYPING_META = typing.NamedTupleMeta
    _TYPING_BASE = typing._NamedTuple  # what `class X(typing.NamedTuple)` has among its bases

    class _Meta(type):
        def __new__(cls, typename, bases, ns):
            bases = tuple(_TYPING_BASE if base is _Base else base for base in bases)
            if ns.get("__orig_bases__"):  # the bases as written: typing's NamedTuple, as typing's own class has
                ns["__orig_bases__"] = tuple(typing.NamedTuple if base is NamedTuple else base for base in ns["__orig_bases__"])
            annotations = ns.get("__annotations__")
            if not annotations or not all(type(a) is str for a in annotations.values()):
                return _TYPING_META.__new__(_TYPING_META, typename, bases, ns)
            ns["__annotations__"] = dict.fromkeys(annotations, object)
            made = _TYPING_META.__new__(_TYPING_META, typename, bases, ns)
            made.__annotations__ = made.__new__.__annotations__ = annotations
            return made

    _Base = type.__new__(_Meta, "NamedTuple", (), {})

    def NamedTuple(*args, **kwargs):
        """The base of `class X(NamedTuple)`; the functional form is typing's (it names the caller's module)."""
        raise TypeError("parcalc.named_tuple.NamedTuple is a base class; call typing.NamedTuple(...) for the functional form")

    NamedTuple.__mro_entries__ = lambda bases: (_Base,)
