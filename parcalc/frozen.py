"""`@frozen`: `@dataclass(frozen=True)` at about half the start-up cost, with the same behaviour.

On Python 3.11 and 3.12 the dataclass decorator writes six methods of a frozen class as source
text and compiles each with its own exec() (dataclasses._create_fn): __init__, __repr__, __eq__,
__hash__, __setattr__ and __delattr__, about 80 us apiece here, ~0.55 ms a class. A one-liner
defines some twenty such classes before it computes anything (Term, Derivation, Gpu, Link,
TransformerModel, ...), ~10 ms of a ~85 ms run (benchmarks/startup.py). Here dataclasses still
writes __init__, __setattr__ and __delattr__ (frozen=True), and __repr__, __eq__ and __hash__
are closures over the field names, made without compiling anything. They do what the generated
methods do (CPython 3.11, Lib/dataclasses.py: _repr_fn, _cmp_fn, _hash_fn):

- __eq__: the tuples of the fields with compare=True, when both are of the very same class;
  NotImplemented otherwise;
- __hash__: hash of the tuple of the fields with hash=True, or hash=None and compare=True;
- __repr__: `QualName(field=value!r, ...)` over the fields with repr=True, '...' for a recursive
  reference (reprlib.recursive_repr, the same guard as dataclasses' _recursive_repr);

and `__dataclass_params__` says eq=True, repr=True as dataclass(frozen=True) does, so fields(),
replace(), asdict(), astuple(), pickling, `match` and subclassing behave the same
(tests/test_frozen.py holds each against a dataclass(frozen=True) twin). A class that defines
__eq__, __hash__ or __repr__ itself goes to the plain decorator, which keeps its own.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_OWN = ("__eq__", "__hash__", "__repr__")


def _tuple_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """self -> (self.a, self.b, ...), always a tuple (attrgetter of one name returns the value)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


# dataclass_transform: type checkers read a @frozen class as a frozen dataclass (its __init__
# from the fields, assignment refused), which is what the decorator makes of it at run time.
@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    """As `@dataclass(frozen=True)`, cheaper to define (see the module's docstring)."""
    if any(name in cls.__dict__ for name in _OWN):
        return dataclasses.dataclass(frozen=True)(cls)
    cls = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    compared = _tuple_getter([f.name for f in fields if f.compare])
    hashed = _tuple_getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    shown = tuple(f.name for f in fields if f.repr)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return self.__class__.__qualname__ + "(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in shown) + ")"

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.eq = params.repr = True
    return cls
