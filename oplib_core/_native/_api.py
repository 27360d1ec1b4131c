"""The public entry points of native support that live above the registry:
``oplib.register_class`` and ``oplib.get_include``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .._registry.startup import ensure
from ..fake._classes import add_fake_class
from ..library import Library, _lib_for
from ._classes import add_class, check_qualname, find

__all__ = ["classes", "get_include", "register_class", "register_fake_class"]

_C = TypeVar("_C", bound=type)


def get_include() -> str:
    """The directory holding ``oplib.h``, the C header native kernels are compiled
    against (as ``numpy.get_include()``): ``cc -I$(python -c 'import oplib_core;
    print(oplib_core.get_include())') ...``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include")


@overload
def register_class(
    qualname: str, cls: None = None, /, *, lib: Library | None = None
) -> Callable[[_C], _C]: ...
@overload
def register_class(qualname: str, cls: _C, /, *, lib: Library | None = None) -> _C: ...
def register_class(
    qualname: str, cls: type | None = None, /, *, lib: Library | None = None
) -> type | Callable[[_C], _C]:
    """Make ``cls`` the class of schema type ``qualname`` (``"ns::Packed"``), so operators
    can take and return its objects (torch's ``torch.classes``); usable as a decorator.
    The registration lives as long as ``lib`` (the namespace's default Library when
    None). Fake mode needs a counterpart: :func:`oplib.register_fake_class`."""
    check_qualname(qualname, "register_class")

    def register(c: Any) -> Any:
        handle = add_class(qualname, c, api="register_class")
        _lib_for(qualname, lib)._register(handle)
        return c

    return register if cls is None else register(cls)


@overload
def register_fake_class(
    qualname: str, fake_class: None = None, /, *, lib: Library | None = None
) -> Callable[[_C], _C]: ...
@overload
def register_fake_class(qualname: str, fake_class: _C, /, *, lib: Library | None = None) -> _C: ...
def register_fake_class(
    qualname: str, fake_class: type | None = None, /, *, lib: Library | None = None
) -> type | Callable[[_C], _C]:
    """Register the fake counterpart of the class ``qualname`` (usable as a decorator), as
    torch's ``register_fake_class``. It must define ``@classmethod __obj_unflatten__(cls,
    flattened)`` taking the real object's ``__obj_flatten__()`` (``((name, value), ...)``)
    with its arrays made fake; ops taking the class then run under ``FakeTensorMode`` and
    opcheck. The registration lives as long as ``lib`` (the namespace's default Library when
    None)."""
    check_qualname(qualname, "register_fake_class")

    def register(c: Any) -> Any:
        _lib_for(qualname, lib)._register(add_fake_class(qualname, c))
        return c

    return register if fake_class is None else register(fake_class)


class _ClassNamespace:
    """``oplib.classes.<ns>``: ``oplib.classes.ns.Name`` is the class ``ns::Name``."""

    def __init__(self, ns: str) -> None:
        self._ns = ns

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        ensure()
        found = find(f"{self._ns}::{name}")
        if found is None:
            raise AttributeError(
                f"oplib.classes.{self._ns} has no class {name!r}: no class "
                f"{self._ns}::{name} is registered (oplib.register_class, or a native library)"
            )
        return found.cls

    def __repr__(self) -> str:
        return f"<oplib.classes.{self._ns}>"


class _Classes:
    """``oplib.classes``: registered opaque classes by namespace, as ``torch.classes``."""

    def __getattr__(self, ns: str) -> _ClassNamespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        return _ClassNamespace(ns)

    def __repr__(self) -> str:
        return "<oplib.classes>"


#: ``oplib.classes.ns.Name``: the class registered as ``ns::Name``.
classes = _Classes()
