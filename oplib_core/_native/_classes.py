"""Opaque classes: types a schema names as ``ns::Name`` (torch's ``torch.classes``).

A class is a Python class (registered with ``oplib.register_class``) or a native one that a
library declares through the C API (:mod:`._library` builds its Python class). Fake mode
finds a data-less counterpart registered with ``oplib.register_fake_class``
(:mod:`oplib_core.fake._classes`). Binding asks :func:`accepts` whether a value fits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from .._registry.entry import Origin, origin_of
from .._registry.registry import Handle
from .._schema import _is_class_name
from ..errors import InvalidNameError, RegistrationError, UnknownOperatorError

__all__ = ["ClassEntry", "accepts", "add_class", "class_entry", "is_class_type"]


class ClassEntry:
    """A registered class: the real class, its fake counterpart (if any) and origins."""

    __slots__ = ("cls", "fake", "fake_origin", "origin", "qualname")

    def __init__(self, qualname: str, cls: type, origin: Origin) -> None:
        self.qualname = qualname
        self.cls = cls
        self.origin = origin
        self.fake: type | None = None
        self.fake_origin: Origin | None = None

    def types(self) -> tuple[type, ...]:
        return (self.cls,) if self.fake is None else (self.cls, self.fake)


_LOCK = threading.RLock()


def _reset_after_fork() -> None:
    """A forked child has only the forking thread: a lock another thread held would never
    be released (each update under it is one dict operation, so the table is whole)."""
    global _LOCK
    _LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)

_CLASSES: dict[str, ClassEntry] = {}
#: The registered classes by name; empty means no op can take an object (fake mode's check).
CLASSES = _CLASSES


def is_class_type(name: str) -> bool:
    """Whether a schema type name is a class name (``ns::Name``)."""
    return _is_class_name(name)


def check_qualname(qualname: object, api: str) -> str:
    if not isinstance(qualname, str) or not is_class_type(qualname):
        raise InvalidNameError(
            f"{api}(): expected a class name 'namespace::Name', got {qualname!r}", str(qualname)
        )
    return qualname


def class_entry(qualname: str, api: str = "class") -> ClassEntry:
    """The entry of a registered class; an error naming the class when there is none."""
    entry = _CLASSES.get(qualname)
    if entry is None:
        raise UnknownOperatorError(
            f"{api}(): class {qualname!r} is not registered; register it first with "
            f"oplib.register_class({qualname!r}, cls) (or load the library declaring it)",
            op=qualname,
        )
    return entry


def find(qualname: str) -> ClassEntry | None:
    return _CLASSES.get(qualname)


def add_class(qualname: str, cls: type, *, api: str, origin: Origin | None = None) -> Handle:
    """Register ``cls`` under ``qualname``; the handle undoes it."""
    check_qualname(qualname, api)
    if not isinstance(cls, type):
        raise RegistrationError(
            f"{api}(): {qualname} must be registered with a class, got {cls!r}", op=qualname
        )
    origin = origin or origin_of(cls.__dict__.get("__init__"))
    entry = ClassEntry(qualname, cls, origin)
    with _LOCK:
        old = _CLASSES.get(qualname)
        if old is not None:
            raise RegistrationError(
                f"{api}(): class {qualname} is already registered at {old.origin}; this "
                f"registration at {origin} conflicts",
                op=qualname,
                existing=str(old.origin),
            )
        _CLASSES[qualname] = entry
    cls.__oplib_qualname__ = qualname  # type: ignore[attr-defined]

    def undo() -> None:
        with _LOCK:
            if _CLASSES.get(qualname) is entry:
                del _CLASSES[qualname]

    return Handle(undo, f"class {qualname}")


def converter(name: str, invalid: object) -> Callable[[Any], Any]:
    """Binding's check for an argument of class type ``name``: the object itself, or
    ``invalid`` when it is not an instance of the class (or of its fake counterpart)."""

    def convert(x: Any) -> Any:
        entry = _CLASSES.get(name)
        return x if entry is not None and isinstance(x, entry.types()) else invalid

    return convert


def accepts(name: str, value: object) -> bool:
    entry = _CLASSES.get(name)
    return entry is not None and isinstance(value, entry.types())
