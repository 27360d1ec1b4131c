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

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["LOCK", "defer", "deferred", "ensure", "is_loaded"]

T = TypeVar("T")

# One lock for all registration state (registry, backend table, plugins). Loading the
# plugins takes it per registration, never while importing a plugin module: a thread that
# imports that module itself (and registers at import time) holds Python's import lock of
# it and then needs this one.
LOCK = threading.RLock()
_loaders: list[Callable[[], None]] = []
_cond = threading.Condition(threading.Lock())  # guards _loaders, _loader, _done
_loader: int | None = None  # the thread running the loaders
_done = True  # nothing deferred yet


def defer(loader: Callable[[], None]) -> None:
    """Run ``loader`` on first use of the dispatch table (or now if it is already in use)."""
    global _done
    with _cond:
        _loaders.append(loader)
        _done = False


def _must_not_wait() -> bool:
    """Whether this thread would deadlock waiting for another one's loading: it holds the
    registration lock (the loader needs it), or it is importing a module (the loader may be
    about to import that very module, and waits for this thread's import to finish). It
    then goes on with the table as it is."""
    if LOCK._is_owned():  # type: ignore[attr-defined]
        return True
    frame: Any = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen"):
            return True
        frame = frame.f_back
    return False


def ensure() -> None:
    """Run the deferred loaders once. Re-entrant: a loader touching the table itself (it
    registers into it) goes on; other threads wait until the loaders are done (except where
    waiting could deadlock, see :func:`_must_not_wait`). A loader that raises (a
    ``KeyboardInterrupt`` too) has undone its work and stays queued: the next use runs it
    again."""
    global _done, _loader
    if _done:
        return
    me = threading.get_ident()
    if _loader == me:  # the loaders' own registrations (only this thread sets it to me)
        return
    with _cond:
        while True:
            if _done or _loader == me:
                return
            if _loader is None:
                _loader = me
                break
            if _must_not_wait():
                return
            _cond.wait()
    try:
        while _loaders:
            _loaders[0]()
            _loaders.pop(0)  # only once it ran to its end
    finally:
        with _cond:
            _loader = None
            _done = not _loaders
            _cond.notify_all()


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
