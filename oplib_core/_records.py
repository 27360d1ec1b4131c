"""``Record``: small immutable value types, cheap to define.

A frozen dataclass costs about a millisecond to *define* (its methods are generated with
``exec``), which adds up at ``import oplib_core``. A ``Record`` subclass declares its
fields in order as ``_fields`` (and ``__slots__ = _fields``) and optional ``_defaults``;
equality, hashing, ``repr``, pickling and ``_replace``/``_asdict`` come from here.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["Record"]


class Record:
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
                setter(self, name, self._defaults[name])
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
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())

    def _replace(self, **changes: Any) -> Any:
        return type(self)(**{**self._asdict(), **changes})

    def _asdict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self._fields}
