"""`@frozen`: `@dataclass(frozen=True)` at a fraction of the start-up cost, with the same behaviour.

On Python 3.11 and 3.12 the dataclass decorator writes six methods of a frozen class as source
text and compiles each with its own exec() (dataclasses._create_fn): __init__, __repr__, __eq__,
__hash__, __setattr__ and __delattr__, about 80 us apiece here, ~0.55 ms a class. A one-liner
defines twenty to forty such classes before it computes anything (Term, Derivation, Gpu, Link,
TransformerModel, the timing model's specs, ...), and about half of them it never instantiates.
Here dataclasses only collects the fields (dataclass(init=False, eq=False, repr=False): it
compiles nothing then; handed `object` for each string annotation where none can name ClassVar,
InitVar or KW_ONLY, so that it does not parse each one three times to ask: _collect_fields), and
for a class with a docstring whose fields all take dataclass's defaults (parcalc's value classes:
no field(), no ClassVar) not even that until something asks for the fields, fields() or replace()
say (_defer_fields, _LazyFields: ~35 us a class, 0.6-1.3 ms of a one-liner, whose classes are
nearly all never asked); and:

- __eq__, __hash__, __repr__, __setattr__ and __delattr__ are closures over the field names,
  made without compiling anything. They do what the generated methods do (CPython 3.11,
  Lib/dataclasses.py: _cmp_fn, _hash_fn, _repr_fn, _frozen_get_del_attr):
  - __eq__: the tuples of the fields with compare=True, when both are of the very same class;
    NotImplemented otherwise;
  - __hash__: hash of the tuple of the fields with hash=True, or hash=None and compare=True;
  - __repr__: `QualName(field=value!r, ...)` over the fields with repr=True, '...' for a
    recursive reference (reprlib.recursive_repr, the same guard as dataclasses' _recursive_repr);
  - __setattr__ / __delattr__: FrozenInstanceError("cannot assign to field 'x'") on an instance
    of the class itself or for a field's name, else the base class's;
- __init__ is the very function dataclasses writes (_init_fn, _field_init, _init_param: the
  same text, so the same signature, defaults, `<factory>` marker, annotations and errors),
  compiled when the class's __init__ is first looked up (the first instance, or
  inspect.signature, help(), a subclass's super().__init__), so a class the run never makes pays
  nothing for it. Until then a descriptor (_LazyInit) stands in the class's __dict__. The text's
  code object is kept between runs (parcalc.code_cache), so a run compiles only what no earlier
  one did.

`__dataclass_params__` says init=True, eq=True, repr=True, frozen=True as dataclass(frozen=True)
does, so fields(), replace(), asdict(), astuple(), pickling, `match` and subclassing behave the
same (tests/test_frozen.py holds each against a dataclass(frozen=True) twin). What this does not
write goes to the plain decorator, which keeps its own behaviour: a class that defines __eq__,
__hash__ or __repr__ (dataclass(frozen=True) entirely), or __setattr__ / __delattr__ (an error
there, as dataclass raises), one with a dataclass base, InitVar or KW_ONLY annotations, or
field(init=False) / field(kw_only=True) (dataclass(frozen=True) writes __init__ and the frozen
guards; the closures above replace only __eq__, __hash__ and __repr__).
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from operator import attrgetter
from types import MemberDescriptorType
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_OWN = ("__eq__", "__hash__", "__repr__")
_GUARDS = ("__setattr__", "__delattr__")
# dataclasses' marker for a default_factory in a signature (shown `<factory>`): the same object,
# so that inspect.signature reads the same; a look-alike where a Python lacks it
_HAS_DEFAULT_FACTORY: Any = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", None)
if _HAS_DEFAULT_FACTORY is None:  # pragma: no cover - every CPython 3.11-3.13 has it

    class _Factory:
        def __repr__(self) -> str:
            return "<factory>"

    _HAS_DEFAULT_FACTORY = _Factory()


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
    if any(name in cls.__dict__ for name in (*_OWN, *_GUARDS)):
        return dataclasses.dataclass(frozen=True)(cls)
    if _writes_own_init(cls):
        cls = dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
    else:
        plain = _plain_fields(cls) if cls.__dict__.get("__doc__") else None
        if plain is not None:
            return _defer_fields(cls, plain)
        undocumented = not cls.__dict__.get("__doc__")
        cls = _collect_fields(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        _refuse_default_order(fields)
        _set_guards(cls, tuple(f.name for f in fields))
        if "__init__" not in cls.__dict__:  # a class's own __init__ stays, as dataclass leaves it
            type.__setattr__(cls, "__init__", _LazyInit(cls))
        if undocumented:  # dataclass wrote the doc from a signature without the __init__: again, with it
            import inspect  # here: only a class without a docstring needs it (dataclasses imports it anyway)

            cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    _set_comparisons(cls)
    _mark_frozen(cls)
    return cls


def _mark_frozen(cls: type) -> None:
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init = params.eq = params.repr = params.frozen = True


# A plain field: (name, its annotation's text, its default or dataclasses.MISSING).
_Plain = tuple[str, str, Any]


def _plain_fields(cls: type) -> list[_Plain] | None:
    """The fields of a class that dataclasses would make with every option at its default (init, repr, compare, hash
    from compare, not keyword-only, no default_factory), from its annotations and class attributes as
    dataclasses._process_class / _get_field read them; None where dataclasses must look itself: an annotation not a
    string or naming ClassVar, a dataclasses.Field anywhere in the class, __slots__, or a default it refuses (mutable:
    unhashable) or reads as none (a slot's member descriptor)."""
    annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063 - what dataclass reads
    if annotations is None or "__slots__" in cls.__dict__:
        return None
    if any(isinstance(value, dataclasses.Field) for value in cls.__dict__.values()):
        return None
    plain: list[_Plain] = []
    for name, annotation in annotations.items():
        if type(annotation) is not str or "ClassVar" in annotation:
            return None
        default = getattr(cls, name, dataclasses.MISSING)
        refused = type(default).__hash__ is None or isinstance(default, (dataclasses.Field, MemberDescriptorType))
        if default is not dataclasses.MISSING and refused:
            return None
        plain.append((name, annotation, default))
    return plain


def _defer_fields(cls: type[T], plain: list[_Plain]) -> type[T]:
    """The class as frozen() makes it, its fields not yet collected: everything else frozen() writes is made from
    `plain` (the guards and comparisons over every field, __match_args__, the lazy __init__), and dataclasses collects
    the fields when something first asks for them (__dataclass_fields__ or __dataclass_params__: fields(), replace(),
    asdict(), is_dataclass(), a subclass): _LazyFields. A one-liner defines 17 to 40 @frozen classes, about half of
    which it never asks (~35 us a class of dataclasses' own work, 0.6-1.3 ms of a one-liner)."""
    seen_default = False
    for name, _, default in plain:  # dataclass's check at class definition (_process_class -> _init_fn)
        if default is not dataclasses.MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    names = tuple(name for name, _, _ in plain)
    _set_guards(cls, names)
    if "__init__" not in cls.__dict__:
        init_fields = [(name, annotation, default, dataclasses.MISSING) for name, annotation, default in plain]
        type.__setattr__(cls, "__init__", _LazyInit(cls, init_fields))
    if "__match_args__" not in cls.__dict__:  # dataclasses._set_new_attribute: a class's own stays
        type.__setattr__(cls, "__match_args__", names)
    _set_comparisons(cls, (names, names, names))
    for attribute in _LazyFields.ATTRIBUTES:
        if attribute not in cls.__dict__:  # a class's own __replace__ stays, as dataclasses leaves it (_set_new_attribute)
            type.__setattr__(cls, attribute, _LazyFields(cls, attribute))
    return cls


class _LazyFields:
    """What dataclasses writes into a class of _defer_fields' (__dataclass_fields__, __dataclass_params__ and, from
    Python 3.13, __replace__), until one of them is first looked up: then dataclasses collects the fields
    (_collect_fields, as for every other @frozen class), which puts the real ones in the class in place of every
    stand-in, and the one asked for is returned (a method bound to the instance it is asked of)."""

    ATTRIBUTES = ("__dataclass_fields__", "__dataclass_params__", *(("__replace__",) if sys.version_info >= (3, 13) else ()))
    __slots__ = ("attribute", "owner")

    def __init__(self, owner: type, attribute: str) -> None:
        self.owner, self.attribute = owner, attribute

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        cls = self.owner
        if isinstance(cls.__dict__.get(self.attribute), _LazyFields):  # the first look-up
            for attribute in self.ATTRIBUTES:
                type.__delattr__(cls, attribute)
            _collect_fields(cls)
            _mark_frozen(cls)
        value = cls.__dict__[self.attribute]
        bind = getattr(type(value), "__get__", None)
        return value if bind is None else bind(value, instance, owner)


def _collect_fields(cls: type[T]) -> type[T]:
    """dataclass(init=False, eq=False, repr=False)(cls): the fields collected, nothing compiled.

    dataclasses asks of every string annotation, three times, whether it names ClassVar, InitVar or
    KW_ONLY (dataclasses._get_field -> _is_type: a regular expression and a look-up in the class's
    module, ~5 us a field). InitVar and KW_ONLY never come here (_writes_own_init); where no
    annotation mentions ClassVar either, the answers are known, so dataclasses is handed `object`
    for each annotation, which it checks by identity, and each field gets its string back."""
    annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063 - what dataclass reads
    if not annotations or not all(type(a) is str and "ClassVar" not in a for a in annotations.values()):
        return dataclasses.dataclass(init=False, eq=False, repr=False)(cls)
    type.__setattr__(cls, "__annotations__", dict.fromkeys(annotations, object))
    try:
        cls = dataclasses.dataclass(init=False, eq=False, repr=False)(cls)
    finally:
        type.__setattr__(cls, "__annotations__", annotations)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        f.type = annotations[f.name]
    return cls


def _writes_own_init(cls: type) -> bool:
    """Whether the class needs dataclasses' own __init__ and frozen guards: a dataclass base (whose
    fields and frozenness dataclass checks), InitVar / KW_ONLY annotations, or a field() that
    leaves __init__ or takes a keyword only, which _init_source does not write."""
    if any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        return True
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 - what dataclass reads
        if isinstance(annotation, str):
            if "InitVar" in annotation or "KW_ONLY" in annotation:
                return True
        elif annotation is dataclasses.KW_ONLY or annotation is dataclasses.InitVar or isinstance(annotation, dataclasses.InitVar):
            return True
        default = cls.__dict__.get(name)
        if isinstance(default, dataclasses.Field) and (not default.init or default.kw_only is True):
            return True
    return False


def _refuse_default_order(fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """dataclass's check at class definition (dataclasses._init_fn), kept there although the
    __init__ is compiled later."""
    seen_default = False
    for f in fields:
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")


def _set_guards(cls: type, names: tuple[str, ...]) -> None:
    """__setattr__ and __delattr__ as dataclasses._frozen_get_del_attr writes them."""
    FrozenInstanceError = dataclasses.FrozenInstanceError
    owner: Any = cls  # Any: `type(self) is owner` would narrow a `type` to what super() refuses

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    for method in (__setattr__, __delattr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        type.__setattr__(cls, method.__name__, method)


def _set_comparisons(cls: type, names: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None) -> None:
    """__eq__, __hash__ and __repr__ as closures (see the module's docstring); `names`: the fields compared, hashed and
    shown (default: from the class's dataclass fields)."""
    if names is None:
        fields = dataclasses.fields(cls)
        hashing = (f for f in fields if (f.compare if f.hash is None else f.hash))
        names = (tuple(f.name for f in fields if f.compare), tuple(f.name for f in hashing), tuple(f.name for f in fields if f.repr))
    compared = _tuple_getter(list(names[0]))
    hashed = _tuple_getter(list(names[1]))
    shown = names[2]

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
        type.__setattr__(cls, method.__name__, method)


class _LazyInit:
    """A @frozen class's __init__ until it is first looked up: then the real one is compiled, put
    in the class in its place, and returned (bound to the instance being made, when there is one)."""

    __slots__ = ("fields", "owner")

    def __init__(self, owner: type, fields: list[_InitField] | None = None) -> None:
        self.owner, self.fields = owner, fields  # a deferred class's fields (_defer_fields); None: its dataclass fields

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        init: Any = self.owner.__dict__["__init__"]
        if init is self:  # the first look-up
            fields = self.fields
            if fields is None:
                fields = [(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(self.owner)]
            init = _compile_init(self.owner, fields)
            type.__setattr__(self.owner, "__init__", init)
        return init if instance is None else init.__get__(instance, owner)


# What __init__ is written from, a field at a time: (name, annotation, default, default_factory), MISSING where none.
_InitField = tuple[str, Any, Any, Any]


def _compile_init(cls: type, fields: list[_InitField]) -> Callable[..., None]:
    """The __init__ dataclass(frozen=True) writes for these fields (CPython 3.11 Lib/dataclasses.py,
    _init_fn / _field_init / _init_param / _create_fn): each field set through object.__setattr__,
    a default as `_dflt_<name>`, a default_factory called when its parameter is the `<factory>`
    marker, then __post_init__ when the class has one."""
    names = {name for name, _, _, _ in fields}
    self_name = "__dataclass_self__" if "self" in names else "self"
    local: dict[str, Any] = {f"_type_{name}": annotation for name, annotation, _, _ in fields}
    local.update({"MISSING": dataclasses.MISSING, "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY,
                  "__dataclass_builtins_object__": object})  # fmt: skip
    params, body = [self_name], []
    for name, _, default_value, factory in fields:
        default = f"_dflt_{name}"
        if factory is not dataclasses.MISSING:
            local[default] = factory
            value = f"{default}() if {name} is _HAS_DEFAULT_FACTORY else {name}"
            params.append(f"{name}:_type_{name}=_HAS_DEFAULT_FACTORY")
        elif default_value is not dataclasses.MISSING:
            local[default] = default_value
            value = name
            params.append(f"{name}:_type_{name}={default}")
        else:
            value = name
            params.append(f"{name}:_type_{name}")
        body.append(f"__dataclass_builtins_object__.__setattr__({self_name},{name!r},{value})")
    if hasattr(cls, "__post_init__"):
        body.append(f"{self_name}.__post_init__()")
    local["_return_type"] = None
    text = "\n".join(f"  {line}" for line in body or ["pass"])
    text = f" def __init__({','.join(params)})->_return_type:\n{text}"
    text = f"def __create_fn__({', '.join(local)}):\n{text}\n return __init__"
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    from parcalc.code_cache import compiled

    # compiled as dataclasses compiles it (dont_inherit: not under this module's `from __future__ import
    # annotations`, which would make every annotation of __init__ a string of its _type_ name), once:
    # an earlier run's code object for the same text when there is one (parcalc.code_cache)
    code = compiled(text)
    exec(code, module.__dict__ if module is not None else {}, namespace)  # noqa: S102 - dataclasses' own method
    init: Callable[..., None] = namespace["__create_fn__"](**local)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
