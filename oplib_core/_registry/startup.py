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

The locks, outermost first (docs/architecture.md, "Locks"): a thread takes them only in
this order. A thread waits for a plugin load in progress elsewhere with the registration
lock released, and not at all where the loading thread waits for an import this thread is
making (:func:`wait_turn`):

1. plugin loading: the start-up loaders (``_cond``, one loading thread) and a waiting
   plugin's load on first use (:data:`LOADS`, one loading thread per plugin). Claims, not
   held locks: the imports run without them, and without the registration lock
   (:func:`released`).
2. :data:`LOCK`, the registration lock (registry, backend table, plugin records).
3. the native library table (``_native``): ``load_library`` never holds it while calling
   into the registry.

After ``os.fork()`` the child resets all of them (:func:`at_fork`), as ``logging`` does
its handlers' locks: a fork while another thread loads plugins gives a usable child.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

__all__ = [
    "LOADS",
    "LOCK",
    "at_fork",
    "commit",
    "defer",
    "deferred",
    "ensure",
    "forget_imports_of",
    "fork_safe",
    "importing",
    "is_loaded",
    "released",
    "wait_turn",
]

T = TypeVar("T")

# One lock for all registration state (registry, backend table, plugins). Loading the
# plugins takes it per registration, never while importing a plugin module: a thread that
# imports that module itself (and registers at import time) holds Python's import lock of
# it and then needs this one.
LOCK = threading.RLock()
#: Who loads which waiting plugin on first use (``PluginHost.load_deferred``): guards its
#: ``_loading`` table; other threads wait on it for the load to end.
LOADS = threading.Condition(threading.Lock())
_loaders: list[Callable[[], None]] = []
_cond = threading.Condition(threading.Lock())  # guards _loaders, _loader, _done
_loader: int | None = None  # the thread running the loaders
_done = True  # nothing deferred yet
_after_fork: list[Callable[[int], None]] = []
_fork_safe: list[Any] = []  # the locks fork_safe was given
_committed = False  # the running loader's work is in (see commit)


def defer(loader: Callable[[], None]) -> None:
    """Run ``loader`` on first use of the dispatch table (or now if it is already in use)."""
    global _done
    with _cond:
        _loaders.append(loader)
        _done = False


def importing() -> set[str]:
    """The modules this thread is importing now (their imports have not finished)."""
    return _imports_in(sys._getframe(1))


def _imports_in(frame: Any) -> set[str]:
    names: set[str] = set()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen"):
            names.add(str(frame.f_locals.get("name")))
        frame = frame.f_back
    return names


def waits_for_me(thread: int, mine: set[str]) -> bool:
    """Whether ``thread`` is importing one of the modules ``mine`` that this thread is
    importing: it then waits for this thread's import to end, so this thread must not wait
    for it. (A thread that may still start such an import is asked again later.)"""
    return bool(mine) and not mine.isdisjoint(_imports_in(sys._current_frames().get(thread)))


@contextlib.contextmanager
def released() -> Iterator[None]:
    """The registration lock released for the block, however often this thread holds it,
    and taken back after (as ``threading.Condition`` does): a thread waiting for a plugin
    load elsewhere must not hold the lock that load's registrations take."""
    if not LOCK._is_owned():  # type: ignore[attr-defined]
        yield
        return
    state = LOCK._release_save()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        LOCK._acquire_restore(state)  # type: ignore[attr-defined]


def wait_turn(cond: threading.Condition, busy: Callable[[], int | None]) -> bool:
    """With ``cond`` held: wait until ``busy()`` (the thread loading, or None) is None; True
    then. False at once where waiting could deadlock: the loading thread waits for an import
    this thread is making (checked again every 50 ms, as it may start one meanwhile)."""
    mine = _imports_in(sys._getframe(1))
    while (owner := busy()) is not None:
        if waits_for_me(owner, mine):
            return False
        cond.wait(0.05 if mine else None)
    return True


L = TypeVar("L")  # a threading.Lock, RLock or Condition


def fork_safe(lock: L) -> L:
    """``lock``, made afresh in a forked child (unless the forking thread holds it): for a
    module's lock that a registration holds while it calls into the registry, which a
    plugin load in another thread may be doing when the process forks."""
    _fork_safe.append(lock)
    return lock


def at_fork(reset: Callable[[int], None]) -> None:
    """Call ``reset(thread)`` in a forked child, after oplib's locks are reset; ``thread``
    is the one thread the child has (state kept for other threads is stale there)."""
    _after_fork.append(reset)


def _reset_after_fork() -> None:
    """In the child of ``os.fork()``: only the forking thread exists, so a lock another
    thread held (loading plugins, registering) would never be released. Reset them, and
    forget loads in progress elsewhere: a loader that did not finish stays queued and runs
    again on first use, as after a failed load."""
    global _loader, _done
    if not LOCK._is_owned():  # type: ignore[attr-defined]  # (the forking thread's stays)
        LOCK._at_fork_reinit()  # type: ignore[attr-defined]
    LOADS._at_fork_reinit()  # type: ignore[attr-defined]
    _cond._at_fork_reinit()  # type: ignore[attr-defined]
    for lock in _fork_safe:
        if not getattr(lock, "_is_owned", lambda: False)():
            lock._at_fork_reinit()
    for obj, lazy, names in _lazy:
        if type(obj) is lazy:  # its state was half built by a thread the child lacks
            for name in names:
                obj.__dict__.pop(name, None)
    me = threading.get_ident()
    if _loader is not None and _loader != me:
        forget_imports_of({_loader})
        if _committed and _loaders:
            _loaders.pop(0)  # it was only finishing
        _loader = None
        _done = not _loaders
    for reset in _after_fork:
        reset(me)


def commit() -> None:
    """Called by the loading thread when a loader's work is in (its plugin transaction
    ended): a fork from then on counts that loader as run, rather than running it again in
    the child over what it registered."""
    global _committed
    if _loader == threading.get_ident():
        _committed = True


def forget_imports_of(threads: set[int]) -> None:
    """In a forked child: the imports that ``threads`` (oplib's loading threads, gone in
    the child) had under way never finish, and Python's lock of each such module would
    hang the child's first import of it. Drop those locks and the half-run modules, so
    that the child imports them afresh (their registrations were rolled back)."""
    import importlib._bootstrap as bootstrap  # (CPython keeps these locks per module)

    locks: dict[str, Any] = getattr(bootstrap, "_module_locks", {})
    for name, ref in list(locks.items()):
        lock = ref()
        if lock is None or getattr(lock, "owner", None) not in threads:
            continue
        del locks[name]
        module = sys.modules.get(name)
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            del sys.modules[name]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def ensure() -> None:
    """Run the deferred loaders once, without the registration lock (released meanwhile
    if this thread holds it). Re-entrant: a loader touching the table itself (it registers
    into it) goes on; other threads wait until the loaders are done, except where waiting
    could deadlock (:func:`wait_turn`: the loader waits for this thread's import), which
    go on with the table as it is. A loader that raises (a ``KeyboardInterrupt`` too) has
    undone its work and stays queued: the next use runs it again."""
    global _done, _loader, _committed
    if _done:
        return
    me = threading.get_ident()
    if _loader == me:  # the loaders' own registrations (only this thread sets it to me)
        return
    with released():
        with _cond:
            if not wait_turn(_cond, lambda: None if _done or _loader is None else _loader):
                return
            if _done:
                return
            _loader = me
        try:
            while _loaders:
                _committed = False
                _loaders[0]()
                _loaders.pop(0)  # only once it ran to its end
        finally:
            with _cond:
                _committed = False
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

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        _lazy.append((self, lazy, names))

    namespace = {
        "__getattr__": __getattr__,
        "__init__": __init__,
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
    }
    lazy = type(cls.__name__, (cls,), namespace)
    return cast("type[T]", lazy)


#: Every instance of a :func:`deferred` class, with its lazy class and deferred names: a
#: forked child drops the state a thread it lacks was building (it is built again there).
_lazy: list[tuple[Any, type, frozenset[str]]] = []
