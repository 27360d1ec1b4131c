"""``ops.<namespace>.<name>``: operator packets with overload resolution, kept in step with
the registry (an op whose Library is destroyed disappears from here).

Type checkers see ``ops.<namespace>`` as an ``_OpNamespace``, ``ops.<namespace>.<name>`` as
an :class:`OpOverloadPacket` and ``ops.<namespace>.<name>.<overload>`` as an
:class:`~oplib_core._dispatch.OpOverload`; calling a packet or an overload returns ``Any``
(what the schema says: a Tensor, a native array, a tuple...), as torch's do. Those
``__getattr__``s exist for type checkers only: at run time a missing attribute goes
through a module-level ``__getattr__`` kept in the instance dict (PEP 562), so attributes
already found take the plain lookup.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._dispatch import (
    ACTIVE,
    COMPILED,
    FactoryFastCall,
    FactoryOverload,
    FastCall,
    OpOverload,
    Route,
    document,
    packet_text,
)
from ._native import loaded_libraries as _loaded_libraries
from ._registry.entry import OpEntry
from ._registry.registry import REGISTRY
from ._registry.startup import ensure, fork_safe
from ._tensor.pickling import Where, find, where_defined
from .errors import CallArgumentError

__all__ = ["OpOverloadPacket", "ops"]


class OpOverloadPacket(FastCall):
    """All overloads of ``ns::name``; calling it picks the first overload whose schema the
    arguments fit (the default overload first, then in definition order). Overloads are
    attributes: ``packet.default``, ``packet.out``."""

    # FastCall holds the fast path's fields (and, compiled, _routes and _routed); overloads
    # live in the instance dict. (A slot of its own makes this class the layout its
    # subclasses share, _FactoryPacket's included, whose first base FactoryFastCall adds
    # none: __class__ moves between them.)
    __slots__ = ("__dict__", "__weakref__", "_only")
    _routed: bool  # the class is _OverloadedPacket (what the compiled call asks)

    def __init__(self, ns: str, name: str) -> None:
        self._ns = ns
        self._name = name
        self._overloads: dict[str, OpOverload] = {}
        self._only: OpOverload | None = None
        self._resolved: dict[Any, OpOverload] = {}
        # call shape (argument types) → what the chosen overload's fast path runs for it
        self._routes: dict[tuple[type, ...], Route] = {}
        self._follow(None)  # no overloads yet: every call takes the slow path

    if TYPE_CHECKING:  # overloads are instance attributes: packet.default, packet.out

        def __getattr__(self, overload: str) -> OpOverload: ...

    def _set(self: OpOverloadPacket, overloads: dict[str, OpOverload]) -> None:
        for old in self._overloads:
            self.__dict__.pop(old, None)
        ordered = dict(sorted(overloads.items(), key=lambda kv: kv[0] != "default"))
        self._overloads = ordered
        self._resolved = {}
        self._routes = {}
        for name, op in ordered.items():
            self.__dict__[name] = op
            op.overloadpacket = self
        only = next(iter(ordered.values())) if len(ordered) == 1 else _only_positional(ordered)
        self._only = only
        # The class decides the call path: one overload (or one that calls without keywords
        # can reach, beside ``out=`` overloads) shares its fast path; several go through the
        # per-signature overload cache first.
        self._routed = only is None
        if only is None:
            self.__class__ = _OverloadedPacket
        elif isinstance(only, FactoryOverload):
            self.__class__ = _FactoryPacket
            self._factory = only._factory
        else:
            self.__class__ = OpOverloadPacket
        # A single overload shares its fast path: same plan, same cache dict.
        self._follow(only)

    @property
    def _qualified_op_name(self) -> str:
        return f"{self._ns}::{self._name}"

    def overloads(self) -> list[str]:
        return list(self._overloads)

    def _call_slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        op = self._only
        if op is not None and (not kwargs or len(self._overloads) == 1):
            return op._call_slow(args, kwargs)  # its fast path already said no
        return self._pick(args, kwargs)(*args, **kwargs)

    def _pick(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> OpOverload:
        sig: Any = tuple(map(type, args))
        plain = not kwargs and _NEEDS_CONTENT.isdisjoint(sig)  # the types alone decide
        if not plain:
            sig = (
                tuple(map(_match_key, args)),
                tuple((k, _match_key(v)) for k, v in kwargs.items()),
            )
        op = self._resolved.get(sig)
        if op is not None:
            return op
        for candidate in self._overloads.values():
            if candidate._binder.matches(args, kwargs):
                if len(self._resolved) < 256:
                    self._resolved[sig] = candidate
                    if plain:
                        route = candidate._route(sig)
                        if route is not None:
                            self._routes[sig] = route
                return candidate
        if not self._overloads:
            raise RuntimeError(f"operator {self._qualified_op_name} no longer exists")
        schemas = "\n".join(f"  {o.schema}" for o in self._overloads.values())
        given = [type(a).__name__ for a in args] + [f"{k}=" for k in kwargs]
        raise CallArgumentError(
            f"{self._qualified_op_name}(): no overload matches the arguments "
            f"({', '.join(given)}); tried:\n{schemas}",
            op=self._qualified_op_name,
            schema="\n".join(str(o.schema) for o in self._overloads.values()),
        )

    def __repr__(self) -> str:
        return f"<OpOverloadPacket(op='{self._ns}.{self._name}')>"

    def __str__(self) -> str:
        return f"{self._ns}.{self._name}"

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference (oplib.ops.<ns>.<name> in the receiving process), never the caches.
        first = next(iter(self._overloads.values()), None)
        where = where_defined(None if first is None else first.origin)
        return (_packet_named, (self._ns, self._name, where))


def _packet_named(ns: str, name: str, where: Where) -> OpOverloadPacket:
    """Unpickling an ``OpOverloadPacket``: this process's ``oplib.ops.<ns>.<name>``."""

    def get() -> OpOverloadPacket | None:
        try:
            return getattr(getattr(ops, ns), name)  # type: ignore[no-any-return]
        except AttributeError:
            return None

    return find("operator", f"{ns}::{name}", where, get)


def _only_positional(overloads: dict[str, OpOverload]) -> OpOverload | None:
    """The one overload a call without keyword arguments can match, when every other one
    has a keyword-only argument without a default (``exp`` beside ``exp.out``), else None."""
    free = [
        op
        for op in overloads.values()
        if not any(a.kwarg_only and not a.has_default for a in op.schema.arguments)
    ]
    return free[0] if len(free) == 1 else None


# Matching depends on more than the type for these (see _match_key).
_NEEDS_CONTENT = frozenset({list, tuple, str})


class _OverloadedPacket(OpOverloadPacket):
    """A packet with several overloads (``add`` and ``add.Scalar``)."""

    __slots__ = ()

    # Complicated for better performance: a call shape seen before runs the kernel its
    # overload's fast path would run (FastCall._route, decided once per shape) without
    # calling the overload; the plain equivalent:
    #
    #     return self._pick(args, kwargs)(*args, **kwargs)
    #
    # Compiled (oplib_core/_dispatch/_ccall.c, routed_call), the first case runs in C, which
    # hands every other call to this method as it came; without it, this is __call__.
    def _call_py(self, /, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            n = len(args)  # the key of the common arities built without map() (-160 ns)
            if n == 2:
                sig: tuple[type, ...] = (type(args[0]), type(args[1]))
            elif n == 1:
                sig = (type(args[0]),)
            else:
                sig = tuple(map(type, args))
            route = self._routes.get(sig)
            if route is not None and not ACTIVE[0]:
                by_type, t, tail, cache, _ = route
                fn = by_type.get(t)
                if fn is not None:
                    args += tail
                    try:
                        return fn(*args)
                    except Exception as e:
                        cache.failed(e, fn, args)
                        raise
            op = self._resolved.get(sig)
            if op is not None:
                return op(*args)
        return self._pick(args, kwargs)(*args, **kwargs)

    if not COMPILED:
        __call__ = _call_py


class _FactoryPacket(FactoryFastCall, OpOverloadPacket):
    """A packet whose one overload is a factory (``zeros``): ``FactoryFastCall`` serves
    its calls, without a call of the overload between."""

    __slots__ = ()


# help(packet): every overload's schema, origin and docstring (not on the call path)
document(OpOverloadPacket, packet_text)
document(_OverloadedPacket, packet_text, public=OpOverloadPacket)
document(_FactoryPacket, packet_text, public=OpOverloadPacket)


def _match_key(value: Any) -> Any:
    """What overload matching depends on: the type, plus the element types of a list (int[]
    vs Tensor[], fixed sizes) and the text of a str (a Device or ScalarType name vs a str)."""
    t = type(value)
    if t is list or t is tuple:
        return (t, tuple(map(_match_key, value)))
    if t is str:
        return (t, value)
    return t


class _OpNamespace(ModuleType):
    """``ops.mylib``: packets are cached as attributes and dropped when their ops go.

    Missing attributes are resolved through a module-level ``__getattr__`` (PEP 562) kept in
    the instance dict, so that found attributes take the plain, fast module lookup. The
    object holds nothing else under a non-dunder name, so that every operator name (``name``,
    ``_ops`` ...) reaches its packet.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"oplib_core.ops.{name}")
        self.__dict__["__getattr__"] = functools.partial(_packet_of, name, self)
        self.__dict__["__dir__"] = functools.partial(_op_names, name)  # dir(ops.mylib)

    if TYPE_CHECKING:

        def __getattr__(self, op_name: str) -> OpOverloadPacket: ...


def _op_names(ns: str) -> list[str]:
    """The names of the operators defined in namespace ``ns``."""
    ensure()
    prefix = f"{ns}::"
    with REGISTRY.lock:
        return sorted(
            {
                q[len(prefix) :].partition(".")[0]
                for q in REGISTRY.ops.names()
                if q.startswith(prefix)
            }
        )


def _packet_of(ns: str, namespace: _OpNamespace, op_name: str) -> OpOverloadPacket:
    if op_name.startswith("__"):
        raise AttributeError(op_name)
    ensure()
    loaded = namespace.__dict__.get(op_name)  # set while the plugins loaded (a HOP they define)
    if loaded is not None:
        return loaded  # type: ignore[no-any-return]
    with REGISTRY.lock:
        overloads = _overloads_of(ns, op_name)
        if not overloads:
            raise AttributeError(
                f"'_OpNamespace' '{ns}' object has no attribute '{op_name}': no "
                f"operator {ns}::{op_name} is defined"
            )
        packet = OpOverloadPacket(ns, op_name)
        packet._set(overloads)
        setattr(namespace, op_name, packet)
        return packet


def _overloads_of(ns: str, name: str) -> dict[str, OpOverload]:
    return {
        entry.schema.overload_name or "default": entry.overload
        for entry in REGISTRY.ops.named(f"{ns}::{name}")
    }


class _Ops(ModuleType):
    """The root: ``ops.mylib`` is created on first access, like torch.ops."""

    def __init__(self) -> None:
        super().__init__("oplib_core.ops")
        self._lock = fork_safe(threading.Lock())
        self.__dict__["__getattr__"] = self._missing

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> _OpNamespace: ...

    def _missing(self, name: str) -> _OpNamespace:
        if name.startswith("__"):
            raise AttributeError(name)
        with self._lock:
            ns = self.__dict__.get(name)
            if ns is None:
                ns = _OpNamespace(name)
                setattr(self, name, ns)
            return ns

    #: The real paths of the native libraries loaded with :meth:`load_library`.
    loaded_libraries = _loaded_libraries

    def load_library(self, path: str | os.PathLike[str]) -> None:
        """Load a native library of operators (``torch.ops.load_library``): a shared
        object built against ``oplib.h`` (``oplib.get_include()``). The file is checked and
        its ABI version read before any of its code runs, it is opened with ``RTLD_LOCAL``
        (it resolves its own symbols), and what
        its ``oplib_library_init`` declares is registered with the library's path as
        origin, all or nothing (:class:`oplib.LibraryLoadError` otherwise). Loading the
        same path again does nothing. See docs/native-kernels.md."""
        from ._native._library import load_library  # the ctypes layer, on first use

        ensure()
        load_library(path)

    def import_module(self, module: str) -> ModuleType:
        """Import a Python module that registers operators (torch.ops.import_module)."""
        return importlib.import_module(module)

    def __iter__(self) -> Iterator[str]:
        """The namespaces that have operators."""
        return iter(sorted({q.partition("::")[0] for q in REGISTRY.ops.names()}))


ops = _Ops()


def _sync(event: str, entry: OpEntry) -> None:
    if event not in ("defined", "undefined"):
        return
    ns_name, _, name = entry.schema.qualname.partition("::")
    ns = ops.__dict__.get(ns_name)
    if ns is None:
        return
    packet = ns.__dict__.get(name)
    if not isinstance(packet, OpOverloadPacket):  # none yet, or a HigherOrderOperator
        return
    overloads = _overloads_of(ns_name, name)
    packet._set(overloads)
    if not overloads:
        delattr(ns, name)


REGISTRY.add_listener(_sync)
