"""Binding call arguments to a schema: defaults, validation, conversion (the slow path).

``Binder(schema)`` is built once per operator; ``bind(args, kwargs)`` returns the kernel's
positional arguments (defaults filled in) and keyword-only arguments, or raises
``TypeError`` quoting the schema.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ._device import Device
from ._schema import Argument, BaseType, FunctionSchema, ListType, OptionalType
from ._tensor import Tensor
from .backends import TABLE
from .backends import device as to_device
from .fake._arrays import FakeArray

__all__ = ["Binder", "is_array"]

_INVALID = object()
Converter = Callable[[Any], Any]


def is_array(x: object) -> bool:
    """A Tensor or a native array of an installed backend."""
    return type(x) is Tensor or TABLE.for_type(type(x)) is not None


def _tensor(x: Any) -> Any:
    if type(x) is Tensor or TABLE.for_type(type(x)) is not None or isinstance(x, FakeArray):
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    return _INVALID


def _int(x: Any) -> Any:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    if hasattr(x, "__oplib_symint__"):
        return x
    return _INVALID


def _float(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return _INVALID
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, (int, np.integer)):
        return float(x)
    return _INVALID


def _bool(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    return _INVALID


def _str(x: Any) -> Any:
    return x if isinstance(x, str) else _INVALID


def _scalar(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, numbers.Number):
        return x
    return _INVALID


def _scalar_type(x: Any) -> Any:
    if isinstance(x, (str, np.dtype)) or (isinstance(x, type) and issubclass(x, np.generic)):
        try:
            return np.dtype(x)
        except TypeError:
            return _INVALID
    if isinstance(x, type) and x in (float, int, bool, complex):
        return np.dtype(x)
    return _INVALID


def _device(x: Any) -> Any:
    if isinstance(x, (Device, str)) or (isinstance(x, int) and not isinstance(x, bool)):
        try:
            return to_device(x)
        except (TypeError, ValueError):
            return _INVALID
    return _INVALID


def _anything(x: Any) -> Any:
    return x


_BASE: dict[str, Converter] = {
    "Tensor": _tensor,
    "int": _int,
    "SymInt": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "Scalar": _scalar,
    "ScalarType": _scalar_type,
    "Device": _device,
    "Layout": _anything,
    "MemoryFormat": _anything,
    "Generator": _anything,
}


def converter(t: Any) -> Converter:
    """A function mapping a call argument to the kernel's value, or ``_INVALID``."""
    if isinstance(t, BaseType):
        return _BASE[t.name]
    if isinstance(t, OptionalType):
        inner = converter(t.elem)
        return lambda x: None if x is None else inner(x)
    if isinstance(t, ListType):
        inner = converter(t.elem)
        size = t.size
        single_ok = not (isinstance(t.elem, BaseType) and t.elem.name == "Tensor")

        def convert_list(x: Any) -> Any:
            if isinstance(x, (list, tuple)):
                out = [inner(v) for v in x]
                if any(v is _INVALID for v in out):
                    return _INVALID
                if size is not None and len(out) != size:
                    return _INVALID
                return out
            if single_ok:
                v = inner(x)
                if v is not _INVALID:
                    return [v] * (size or 1)
            return _INVALID

        return convert_list
    raise TypeError(f"unsupported schema type {t}")


class Binder:
    """Validates and normalises call arguments for one schema."""

    __slots__ = ("_converters", "_kw", "_names", "_pos", "qualname", "schema")

    def __init__(self, schema: FunctionSchema, qualname: str) -> None:
        self.schema = schema
        self.qualname = qualname
        self._pos: tuple[Argument, ...] = tuple(a for a in schema.arguments if not a.kwarg_only)
        self._kw: tuple[Argument, ...] = tuple(a for a in schema.arguments if a.kwarg_only)
        self._names = {a.name for a in schema.arguments}
        self._converters = {a.name: converter(a.type) for a in schema.arguments}

    def _error(self, message: str) -> TypeError:
        return TypeError(f"{self.qualname}(): {message}\n  schema: {self.schema}")

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        pos = self._pos
        if len(args) > len(pos):
            raise self._error(
                f"takes {len(pos)} positional argument{'s' if len(pos) != 1 else ''} but "
                f"{len(args)} were given"
            )
        for name in kwargs:
            if name not in self._names:
                raise self._error(f"got an unexpected keyword argument {name!r}")
        out_args: list[Any] = []
        for i, a in enumerate(pos):
            if i < len(args):
                if a.name in kwargs:
                    raise self._error(f"got multiple values for argument {a.name!r}")
                out_args.append(self._convert(a, args[i]))
            elif a.name in kwargs:
                out_args.append(self._convert(a, kwargs[a.name]))
            elif a.has_default:
                out_args.append(a.default_value)
            else:
                raise self._error(f"missing required argument {a.name!r} ({a.type})")
        out_kwargs: dict[str, Any] = {}
        for a in self._kw:
            if a.name in kwargs:
                out_kwargs[a.name] = self._convert(a, kwargs[a.name])
            elif a.has_default:
                out_kwargs[a.name] = a.default_value
            else:
                raise self._error(f"missing required keyword-only argument {a.name!r} ({a.type})")
        return out_args, out_kwargs

    def matches(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        try:
            self.bind(args, kwargs)
        except TypeError:
            return False
        return True

    def _convert(self, a: Argument, value: Any) -> Any:
        out = self._converters[a.name](value)
        if out is _INVALID:
            raise self._error(f"argument {a.name!r} must be {a.type}, got {_describe(value)}")
        return out


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(sorted({type(v).__name__ for v in value})) or "empty"
        return f"{type(value).__name__} of {inner}"
    return (
        f"{type(value).__name__} ({value!r})"
        if isinstance(value, (int, float, str))
        else (type(value).__name__)
    )
