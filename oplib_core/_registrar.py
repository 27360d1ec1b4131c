"""What a plugin meets: the :class:`Registrar` its registration hooks receive, the
:class:`PluginRecord` oplib keeps about it, and :class:`PluginWarning`. Public through
:mod:`oplib_core.plugins`; the host that loads plugins and fills the records is
:mod:`._plugin_host`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from ._higher_order._operator import HigherOrderOperator, hop_handle, resolve_hop
from ._registry.entry import MakeKernel, PluginContext, current_plugin, origin_of
from ._registry.lookup import qualname_of
from ._registry.registry import REGISTRY, Handle
from ._registry.waiting import WAITING
from ._schema import parse_schema, parse_signature
from ._tags import Tag
from .autograd._registration import register_autograd
from .backends import BackendSpec
from .errors import InvalidNameError, ReservedNamespaceError, UnknownOperatorError
from .library import (
    _KernelT,
    _normalize_types,
    _register_many,
    _split,
    register_fake,
    register_kernel,
)

__all__ = ["PluginRecord", "PluginWarning", "Registrar"]


class PluginWarning(UserWarning):
    """A plugin failed to load; the others still did. ``oplib plugins list`` has details."""


class PluginRecord:
    """What oplib knows about one plugin."""

    def __init__(
        self,
        name: str,
        distribution: str | None = None,
        version: str | None = None,
        module: str | None = None,
        entry_point: str | None = None,
        status: str = "loaded",
    ) -> None:
        self.name = name
        self.distribution = distribution
        self.version = version
        self.module = module
        self.entry_point = entry_point
        self.hooks: list[str] = []
        self.status = status
        self.error: str | None = None
        self.traceback: str | None = None
        self.load_ms = 0.0
        self.plugin: Any = None
        self.hook_target: Any = None  # what pluggy holds: the plugin, or its hooks' view
        self.registrar: Registrar | None = None
        self.backends: list[BackendSpec] = []  # the backends it installed
        #: Whether it may define operators in the reserved namespaces (``oplib``, ``prim``):
        #: only the plugins oplib-core registers itself (``oplib_core._load_plugins``). Set
        #: when the plugin is registered, from who declared it, never from the plugin's
        #: module or anything it can rebind (``sys.modules``) or set on itself.
        self.privileged = False

    @property
    def overrides(self) -> list[str]:
        """The kernels of other distributions this plugin overrides (the user allowed it by
        name, ``OPLIB_ALLOW_OVERRIDE``): ``"ns::op key (owned by dist)"``."""
        with REGISTRY.lock:
            return [
                f"{entry.qualname} {k.key} (owned by {k.overrides})"
                for entry in REGISTRY.ops.values()
                for stack in entry.kernels.values()
                for k in stack
                if k.overrides is not None and k.origin.plugin == self.name
            ]

    @property
    def waiting(self) -> list[str]:
        """The plugin's kernels for ops no installed package defines (they go live when
        one does): ``"ns::op key"``, or ``"ns::op key (refused: why)"`` after a conflict."""
        return [
            f"{w.qualname} {w.key}" + (f" (refused: {w.error})" if w.error else "")
            for w in WAITING.of_plugin(self.name)
        ]

    def __repr__(self) -> str:
        return f"<PluginRecord {self.name!r} {self.status} ({self.distribution or 'in-process'})>"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "entry_point": self.entry_point,
            "hooks": self.hooks,
            "status": self.status,
            "error": self.error,
            "traceback": self.traceback,
            "load_ms": round(self.load_ms, 3),
            "overrides": self.overrides,
            "waiting": self.waiting,
        }


class Registrar:
    """Passed to a plugin's registration hooks; everything registered through it is
    credited to the plugin and undone together if one of its hooks raises."""

    def __init__(self, record: PluginRecord, *, allow_reserved: bool = False) -> None:
        self._record = record
        self._allow_reserved = allow_reserved
        self._handles: list[Handle] = []

    @property
    def plugin_name(self) -> str:
        return self._record.name

    def _register(self, handle: Handle) -> None:
        self._handles.append(handle)

    def _register_lazily(self, key: str, makes: Mapping[str, MakeKernel], api: str) -> None:
        """The core's kernels made on first use (``Registry.add_kernels_lazy``), credited
        to the plugin."""
        self._handles.extend(REGISTRY.add_kernels_lazy(key, makes, api=api))

    def define(
        self, qualname: str, schema: str | None = None, *, tags: Iterable[Tag] | Tag = ()
    ) -> str:
        """``define("ns::op", "(Tensor x) -> Tensor")``, or one full schema string
        ``define("ns::op(Tensor x) -> Tensor")``."""
        tag_tuple = (tags,) if isinstance(tags, Tag) else tuple(tags)
        if schema is None and self._allow_reserved:  # the core's ops: built on first use
            name, handle = REGISTRY.define_pending(qualname, tag_tuple)
            self._handles.append(handle)
            return name
        if schema is None:
            parsed = parse_schema(qualname)
        else:
            _split(qualname, "define")
            name, _, overload = qualname.partition(".")
            parsed = parse_signature(schema, name=name, overload_name=overload)
        ns = parsed.namespace
        if not ns:
            raise InvalidNameError(
                f"define(): expected a qualified name 'namespace::name', got {parsed.name!r}",
                parsed.name,
            )
        if ns in REGISTRY.RESERVED_NAMESPACES and not self._allow_reserved:
            r = self._record
            raise ReservedNamespaceError(
                f"define(): {ns!r} is a reserved namespace (the core op set): plugin "
                f"{r.name!r} ({r.distribution or 'in-process'}) may not define "
                f"{parsed.qualname} there; use your own namespace",
                ns,
            )
        entry, handle = REGISTRY.define(parsed, tag_tuple)
        self._handles.append(handle)
        return entry.qualname

    @overload
    def impl(
        self,
        qualname: Any,
        types: str | Sequence[str],
        func: None = None,
        *,
        allow_override: bool = False,
    ) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def impl(
        self,
        qualname: Any,
        types: str | Sequence[str],
        func: _KernelT,
        *,
        allow_override: bool = False,
    ) -> _KernelT: ...
    def impl(
        self,
        qualname: Any,
        types: str | Sequence[str],
        func: Callable[..., Any] | None = None,
        *,
        allow_override: bool = False,
    ) -> Any:
        keys = _normalize_types(types, "impl")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            try:
                name = qualname_of(qualname, "impl")
            except UnknownOperatorError as e:  # its package may not be installed: wait
                self._wait(qualname, e, keys, fn, allow_override, "impl")
                return fn
            _register_many(name, keys, fn, self, "impl", allow_override)  # type: ignore[arg-type]
            return fn

        return register if func is None else register(func)

    @overload
    def register_kernel(
        self,
        op: Any,
        device_types: str | Sequence[str] | None,
        func: None = None,
        /,
        *,
        allow_override: bool = False,
    ) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def register_kernel(
        self,
        op: Any,
        device_types: str | Sequence[str] | None,
        func: _KernelT,
        /,
        *,
        allow_override: bool = False,
    ) -> _KernelT: ...
    def register_kernel(
        self,
        op: Any,
        device_types: str | Sequence[str] | None,
        func: Callable[..., Any] | None = None,
        /,
        *,
        allow_override: bool = False,
    ) -> Any:
        if isinstance(op, str):
            try:
                qualname_of(op, "register_kernel")
            except UnknownOperatorError as e:  # its package may not be installed: wait
                keys = _normalize_types(device_types, "register_kernel")
                error = e

                def wait(fn: Callable[..., Any]) -> Callable[..., Any]:
                    self._wait(op, error, keys, fn, allow_override, "register_kernel")
                    return fn

                return wait if func is None else wait(func)
        # A Registrar stands in for a Library (it owns the handles); func may be None.
        return register_kernel(op, device_types, func, lib=self, allow_override=allow_override)  # type: ignore[call-overload]

    def _wait(
        self,
        op: Any,
        error: UnknownOperatorError,
        keys: tuple[str, ...],
        fn: Callable[..., Any],
        allow_override: bool,
        api: str,
    ) -> None:
        """Keep ``fn`` for the undefined ``op`` until a package defines it (``oplib ops
        show`` and ``oplib plugins list`` say what waits); a typo raises ``error``."""
        qualname = WAITING.waiting_name(op, error)
        origin = origin_of(fn)
        for key in keys:
            self._handles.append(
                WAITING.add(qualname, key, fn, origin, allow_override=allow_override, api=api)
            )

    @overload
    def register_fake(self, op: Any, func: None = None, /) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def register_fake(self, op: Any, func: _KernelT, /) -> _KernelT: ...
    def register_fake(self, op: Any, func: Callable[..., Any] | None = None, /) -> Any:
        return register_fake(op, func, lib=self)  # type: ignore[call-overload]

    def register_autograd(
        self,
        op: Any,
        backward: Callable[..., Any],
        /,
        *,
        setup_context: Callable[..., Any] | None = None,
    ) -> None:
        register_autograd(op, backward, setup_context=setup_context, lib=self)  # type: ignore[arg-type]

    def define_higher_order(self, name: str) -> HigherOrderOperator:
        """``oplib.HigherOrderOperator(name)``, credited to the plugin and removed if one
        of its hooks raises (from ``oplib_define``)."""
        hop = HigherOrderOperator(name)
        self._handles.append(hop_handle(hop))
        return hop

    @overload
    def py_impl(
        self, hop: HigherOrderOperator | str, key: Any, func: None = None
    ) -> Callable[[_KernelT], _KernelT]: ...
    @overload
    def py_impl(self, hop: HigherOrderOperator | str, key: Any, func: _KernelT) -> _KernelT: ...
    def py_impl(
        self, hop: HigherOrderOperator | str, key: Any, func: Callable[..., Any] | None = None
    ) -> Any:
        """``hop.py_impl(key)(func)`` for a higher-order operator (or its name, ``"cond"``
        or ``"higher_order::cond"``), credited to the plugin and undone if one of its hooks
        raises (from ``oplib_impl``). ``key`` may name a backend the plugin does not own."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._handles.append(resolve_hop(hop, "py_impl")._register_key(key, fn))
            return fn

        return register if func is None else register(func)

    def load_library(self, path: str | os.PathLike[str]) -> None:
        """``oplib.ops.load_library(path)`` for a library the plugin ships: its operators and
        kernels are credited to the plugin and unloaded from the registry if a hook of the
        plugin fails."""
        from ._native._library import load_library  # the ctypes layer, on first use

        load_library(path, _sink=self)

    def _rollback(self, mark: int = 0) -> None:
        while len(self._handles) > mark:
            self._handles.pop().destroy()

    @contextlib.contextmanager
    def _crediting(self) -> Iterator[None]:
        """Everything registered meanwhile in this thread, by any route (this registrar,
        ``oplib.impl``, ``define``, ``custom_op``, a ``Library``), is the plugin's: credited
        to it, rolled back with it, removed by ``unregister``."""
        r = self._record
        ctx = PluginContext(
            r.name,
            r.distribution,
            r.version,
            self,
            self._allow_reserved,
            r.name if r.entry_point is not None else None,
        )
        token = current_plugin.set(ctx)
        try:
            yield
        finally:
            current_plugin.reset(token)
