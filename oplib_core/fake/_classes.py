"""Fake counterparts of opaque classes (torch's ``register_fake_class``).

A real object flattens itself (``__obj_flatten__()`` -> ``((name, value), ...)``); under
``FakeTensorMode`` its arrays become fake ones and the fake class rebuilds a data-less
object from them (``FakeCls.__obj_unflatten__(flat)``, a classmethod), which the op's
fake kernel receives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._native._classes import ClassEntry, class_entry, find
from .._registry.entry import origin_of
from .._registry.registry import Handle
from .._schema import BaseType, FunctionSchema, OptionalType
from ..errors import RegistrationError

__all__ = ["add_fake_class", "class_slots", "to_fake_obj"]

_FROM_REAL = "__obj_unflatten__"


def add_fake_class(qualname: str, fake_class: type) -> Handle:
    """Register ``fake_class`` as the fake counterpart of ``qualname``; the handle undoes it."""
    entry: ClassEntry = class_entry(qualname, "register_fake_class")
    method = fake_class.__dict__.get(_FROM_REAL)
    if method is None:
        raise RegistrationError(
            f"register_fake_class(): {fake_class.__qualname__} doesn't define a classmethod "
            f"{_FROM_REAL}(cls, flattened) building the fake object for {qualname}",
            op=qualname,
        )
    if not isinstance(method, classmethod):
        raise RegistrationError(
            f"register_fake_class(): {fake_class.__qualname__}.{_FROM_REAL} is not a classmethod",
            op=qualname,
        )
    origin = origin_of(fake_class.__dict__[_FROM_REAL].__func__)
    if entry.fake is not None:
        raise RegistrationError(
            f"register_fake_class(): {qualname} already has a fake class registered at "
            f"{entry.fake_origin}; this one at {origin} conflicts",
            op=qualname,
            existing=str(entry.fake_origin),
        )
    entry.fake, entry.fake_origin = fake_class, origin

    def undo() -> None:
        if entry.fake is fake_class:
            entry.fake = entry.fake_origin = None

    return Handle(undo, f"fake class of {qualname}")


def class_slots(op: Any) -> tuple[tuple[bool, int | str, str], ...]:
    """Where ``op``'s class-typed arguments sit in bound arguments: ``(kw, index, class)``.
    Remembered per op object (hashing a schema costs microseconds; fake mode asks on every
    call); the table is bounded and the schema is checked, so a redefined op is re-read."""
    found = _SLOTS.get(op)
    schema = op.schema
    if found is None or found[0] is not schema:
        if len(_SLOTS) > 4096:
            _SLOTS.clear()
        found = _SLOTS[op] = (schema, _class_slots(schema))
    return found[1]


_SLOTS: dict[Any, tuple[FunctionSchema, tuple[tuple[bool, int | str, str], ...]]] = {}


def _class_slots(schema: FunctionSchema) -> tuple[tuple[bool, int | str, str], ...]:
    out: list[tuple[bool, int | str, str]] = []
    pos = 0
    for a in schema.arguments:
        t = a.type.elem if isinstance(a.type, OptionalType) else a.type
        if isinstance(t, BaseType) and "::" in t.name:
            out.append((a.kwarg_only, a.name if a.kwarg_only else pos, t.name))
        if not a.kwarg_only:
            pos += 1
    return tuple(out)


def to_fake_obj(value: Any, qualname: str, fake_array: Callable[[Any], Any]) -> Any:
    """The fake object of a real one (unchanged when already fake or None)."""
    entry = find(qualname)
    if value is None or entry is None or entry.fake is None or isinstance(value, entry.fake):
        if value is not None and entry is not None and entry.fake is None:
            raise RegistrationError(
                f"{qualname} has no fake class, so objects of it cannot be used under "
                f"FakeTensorMode; register one with oplib.register_fake_class({qualname!r})",
                op=qualname,
            )
        return value
    flatten = getattr(value, "__obj_flatten__", None)
    if flatten is None:
        raise RegistrationError(
            f"{type(value).__qualname__} (class {qualname}) must define __obj_flatten__() "
            "returning ((name, value), ...) so fake mode can build its fake object",
            op=qualname,
        )
    flat = tuple((name, _fake_leaf(v, fake_array)) for name, v in flatten())
    return getattr(entry.fake, _FROM_REAL)(flat)


def _fake_leaf(v: Any, fake_array: Callable[[Any], Any]) -> Any:
    if isinstance(v, (list, tuple)):
        return type(v)(_fake_leaf(e, fake_array) for e in v)
    if hasattr(v, "shape") and hasattr(v, "dtype") and hasattr(v, "ndim"):
        return fake_array(v)
    return v
