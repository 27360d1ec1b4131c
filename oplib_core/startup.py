"""Deferred start-up: the dispatch table is filled on first use, not on ``import oplib_core``.

Loading the plugins (importing their modules, parsing the core schemas, registering a few
hundred kernels) costs tens of milliseconds. A program that imports oplib and never calls
an op should not pay it, so ``import oplib_core`` only records *what* to load
(:func:`defer`); the first touch of the registry's or the backend table's contents runs it
(:func:`ensure`).

Two mechanisms make sure nothing reads a half-filled table:

* :class:`DeferredState`: the registry and the backend table create their contents on
  first attribute access, which runs the loaders first. This catches every reader.
* :func:`ensure` at the public entry points (op lookup, registration, backend queries,
  ``oplib.plugins``): another thread arriving while the loaders run waits for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["LOCK", "DeferredState", "defer", "ensure", "is_loaded"]

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


class DeferredState:
    """Mixin: the attributes named in ``_deferred`` do not exist until first read; the
    first read creates them (``_init_state``) and runs :func:`ensure`. After that they are
    plain instance attributes, so reading them costs nothing extra."""

    _deferred: ClassVar[frozenset[str]] = frozenset()

    def _init_state(self) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._deferred:
            with LOCK:
                if name not in self.__dict__:
                    self._init_state()
            ensure()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
