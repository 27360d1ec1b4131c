"""Deferred start-up: the dispatch table is filled on first use, not on ``import oplib_core``.

Loading the plugins (importing their modules, parsing the core schemas, registering a few
hundred kernels) costs tens of milliseconds. A program that imports oplib and never calls
an op should not pay it, so ``import oplib_core`` only records *what* to load
(:func:`defer`); the first touch of the registry's or the backend table's contents runs it
(:func:`ensure`).

Two mechanisms make sure nothing reads a half-filled table:

* :func:`deferred`: the registry, the backend table and the plugin host create their
  contents on first attribute access, which runs the loaders first. This catches every
  reader.
* :func:`ensure` at the public entry points (op lookup, registration, backend queries,
  ``oplib.plugins``): another thread arriving while the loaders run waits for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["LOCK", "defer", "deferred", "ensure", "is_loaded"]

T = TypeVar("T")

# One lock for all registration state (registry, backend table, plugins): the loaders take
# it and register under it, so a second lock could only add lock-order deadlocks.
LOCK = threading.RLock()
_loaders: list[Callable[[], None]] = []
_running = False
_done = True  # nothing deferred yet


def defer(loader: Callable[[], None]) -> None:
    """Run ``loader`` on first use of the dispatch table (or now if it is already in use)."""
    global _done
    with LOCK:
        _loaders.append(loader)
        _done = False


def ensure() -> None:
    """Run the deferred loaders once. Re-entrant: a loader touching the table itself (it
    registers into it) goes on; other threads wait until the loaders are done."""
    global _done, _running
    if _done:
        return
    with LOCK:
        if _done or _running:
            return
        _running = True
        try:
            while _loaders:
                _loaders.pop(0)()
        finally:
            _running = False
            _done = not _loaders


def is_loaded() -> bool:
    """Whether the deferred loaders have run (the plugins are loaded)."""
    return _done


def deferred(cls: type[T]) -> type[T]:
    """``cls`` whose instances fill in lazily: the attributes named in ``cls._deferred`` do
    not exist until first read; the first read creates them (``cls._init_state``), turns the
    instance into a plain ``cls`` and runs :func:`ensure`. From then on no ``__getattr__``
    is left on its class, so its attributes cost what any attribute costs (a class with a
    ``__getattr__`` makes every read slower, found or not)."""
    names: frozenset[str] = cls._deferred  # type: ignore[attr-defined]

    def __getattr__(self: Any, name: str) -> Any:
        if name not in names:
            raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
        with LOCK:
            if type(self) is not cls:
                self._init_state()
                self.__class__ = cls
        ensure()
        return getattr(self, name)

    namespace = {"__getattr__": __getattr__, "__module__": cls.__module__, "__doc__": cls.__doc__}
    return cast("type[T]", type(cls.__name__, (cls,), namespace))
