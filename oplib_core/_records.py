"""``Record``: small immutable value types, cheap to define.

A frozen dataclass costs about a millisecond to *define* (its methods are generated with
``exec``), which adds up at ``import oplib_core``. A ``Record`` subclass is written like a
frozen dataclass, and type checkers read it as one (``dataclass_transform``)::

    class Origin(Record):
        source: str
        plugin: str | None = None
        _cache: object = field(init=False)  # a slot set in __post_init__, not an argument

Creating the class only reads its annotations: the fields become ``_fields`` (in order)
and ``__slots__``, their defaults ``_defaults``. Equality, hashing, ``repr``, pickling,
``_replace``/``_asdict`` and ``inspect.signature`` come from here; ``__post_init__`` runs
after ``__init__`` when defined. ``class Kernel(Record, eq=False)`` compares by identity,
as ``dataclass(eq=False)`` does. (A subclass may still spell ``_fields``, ``__slots__``
and ``_defaults`` out itself: then its annotations are left alone, but type checkers
cannot see its defaults.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from inspect import Signature

    from typing_extensions import Self, dataclass_transform
elif sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the decorator only marks the class for type checkers

    def dataclass_transform(**kwargs: Any) -> Callable[[type], type]:
        return lambda cls: cls


__all__ = ["Record", "field"]


class _Field:
    """What :func:`field` returns: read, and removed, when the class is created."""

    __slots__ = ("default_factory", "init")

    def __init__(self, default_factory: Callable[[], Any] | None, init: bool) -> None:
        self.default_factory = default_factory
        self.init = init


class _Factory:
    """A default made fresh for each record (``field(default_factory=...)``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return "<factory>"


def field(*, default_factory: Callable[[], Any] | None = None, init: bool = True) -> Any:
    """A field with a default made per record (``default_factory=dict``), or, with
    ``init=False``, a slot that is not an argument (set it in ``__post_init__`` with
    ``object.__setattr__``)."""
    return _Field(default_factory, init)


def _is_classvar(annotation: object) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


class _RecordMeta(type):
    """Turns a class body's annotations into ``_fields``, ``_defaults`` and ``__slots__``.
    (A plain loop over a dict: no code is generated, unlike ``dataclasses``.)"""

    def __new__(
        mcls,
        name: str,
        bases: tuple[type, ...],
        ns: dict[str, Any],
        *,
        eq: bool = True,
        **kwargs: Any,
    ) -> _RecordMeta:
        if not eq:  # compared by identity, as dataclass(eq=False)
            ns.setdefault("__eq__", object.__eq__)
            ns.setdefault("__hash__", object.__hash__)
        if "_fields" not in ns and bases:
            if "__annotations__" in ns:
                annotations: dict[str, Any] = ns["__annotations__"]
            elif "__annotate__" in ns:
                raise TypeError(
                    f"Record subclass {name}: its module needs "
                    "'from __future__ import annotations' (its fields are read from the "
                    "annotations as the class is created)"
                )
            else:
                annotations = {}
            inherited: tuple[str, ...] = ()
            defaults: dict[str, Any] = {}
            for base in reversed(bases):
                if isinstance(base, _RecordMeta):
                    inherited = base._fields  # type: ignore[attr-defined]
                    defaults.update(base._defaults)  # type: ignore[attr-defined]
            fields = list(inherited)
            slots = []
            for attr, annotation in annotations.items():
                if _is_classvar(annotation):
                    continue
                slots.append(attr)
                if attr not in ns:
                    if defaults:
                        raise TypeError(
                            f"Record subclass {name}: field {attr!r} without a default "
                            "follows fields with defaults"
                        )
                    fields.append(attr)
                    continue
                value = ns.pop(attr)
                if isinstance(value, _Field):
                    if not value.init:
                        continue
                    if value.default_factory is not None:
                        value = _Factory(value.default_factory)
                fields.append(attr)
                defaults[attr] = value
            ns["_fields"] = tuple(fields)
            ns["_defaults"] = defaults
            ns.setdefault("__slots__", tuple(slots))
        return super().__new__(mcls, name, bases, ns, **kwargs)

    @property
    def __signature__(cls) -> Signature | None:
        """The fields as ``inspect.signature`` shows them (None for a class with its own
        ``__init__``: inspect then reads that)."""
        if cls is Record or cls.__init__ is not Record.__init__:  # type: ignore[misc]
            return None
        import inspect  # not at import time: inspect is a heavy import

        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        empty = inspect.Parameter.empty
        defaults: dict[str, Any] = cls._defaults  # type: ignore[attr-defined]
        annotations = {}
        for klass in reversed(cls.__mro__):
            annotations.update(inspect.get_annotations(klass))
        return inspect.Signature(
            [
                inspect.Parameter(
                    n, kind, default=defaults.get(n, empty), annotation=annotations.get(n, empty)
                )
                for n in cls._fields  # type: ignore[attr-defined]
            ],
            return_annotation=None,
        )


@dataclass_transform(eq_default=True, frozen_default=True, field_specifiers=(field,))
class Record(metaclass=_RecordMeta):
    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _post_init: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self._fields
        setter = object.__setattr__
        if not kwargs and len(args) == len(names):
            for name, value in zip(names, args, strict=True):
                setter(self, name, value)
        else:
            self._init_general(args, kwargs)
        if self._post_init:
            self.__post_init__()  # type: ignore[attr-defined]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._post_init = hasattr(cls, "__post_init__")

    def _init_general(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        names = self._fields
        cls = type(self).__name__
        if len(args) > len(names):
            raise TypeError(f"{cls}() takes {len(names)} arguments but {len(args)} were given")
        setter = object.__setattr__
        for name, value in zip(names, args, strict=False):
            setter(self, name, value)
        for name in names[len(args) :]:
            if name in kwargs:
                setter(self, name, kwargs.pop(name))
            elif name in self._defaults:
                value = self._defaults[name]
                setter(self, name, value.fn() if type(value) is _Factory else value)
            else:
                raise TypeError(f"{cls}() missing required argument {name!r}")
        if kwargs:
            raise TypeError(f"{cls}() got unexpected arguments {', '.join(map(repr, kwargs))}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use _replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())

    def _replace(self, **changes: Any) -> Self:
        return type(self)(**{**self._asdict(), **changes})

    def _asdict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self._fields}
