"""Plugin discovery and loading: entry points of group ``oplib``, merged by pluggy, run in
phases (backends → define → impl → fake → autograd), each plugin isolated from the others.

``register(obj)`` adds a plugin in-process (tests, notebooks); ``list()`` reports every
plugin with its status (``loaded``, ``blocked``, ``failed``, ``incompatible``).
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, overload

from . import backend_registration
from ._lookup import resolve
from ._native._library import load_library
from ._registry import REGISTRY, Handle, PluginContext, current_plugin
from ._schema import parse_schema, parse_signature
from ._startup import LOCK, deferred, ensure
from ._tags import Tag
from ._version import __version__
from .autograd._registration import register_autograd
from .backends import TABLE, BackendSpec
from .errors import InvalidNameError, PluginError, ReservedNamespaceError
from .library import (
    _KernelT,
    _normalize_types,
    _register_many,
    _split,
    register_fake,
    register_kernel,
)

if TYPE_CHECKING:
    import pluggy

    from ._discovery import EntryPointInfo

__all__ = [
    "PluginRecord",
    "PluginWarning",
    "Registrar",
    "list",
    "load",
    "register",
    "unregister",
]

_builtin_list = list  # ``list`` below is this module's function, also in annotations

PHASES = (
    "oplib_backends",
    "oplib_define",
    "oplib_impl",
    "oplib_register_fake",
    "oplib_register_autograd",
)


#: The core's own plugin modules (``oplib_core._load_plugins`` registers them). Only they may
#: define operators in the reserved namespaces (``oplib``, ``prim``): the privilege goes to
#: these module objects themselves, found by identity in ``sys.modules``, never to anything
#: a plugin could set on itself.
_CORE_PLUGIN_MODULES = (
    "oplib_core._core_plugin",
    "oplib_core.autograd._core_formulas",
    "oplib_core.fake._core_fakes",
    "oplib_core.testing._core_samples",
)


def _is_core_plugin(plugin: object) -> bool:
    return isinstance(plugin, ModuleType) and any(
        sys.modules.get(name) is plugin for name in _CORE_PLUGIN_MODULES
    )


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
        self.hooks: _builtin_list[str] = []
        self.status = status
        self.error: str | None = None
        self.traceback: str | None = None
        self.load_ms = 0.0
        self.plugin: Any = None
        self.hook_target: Any = None  # what pluggy holds: the plugin, or its hooks' view
        self.registrar: Registrar | None = None

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
        }


class Registrar:
    """Passed to a plugin's registration hooks; everything registered through it is
    credited to the plugin and undone together if one of its hooks raises."""

    def __init__(self, record: PluginRecord, *, allow_reserved: bool = False) -> None:
        self._record = record
        self._allow_reserved = allow_reserved
        self._handles: _builtin_list[Handle] = []

    @property
    def plugin_name(self) -> str:
        return self._record.name

    def _register(self, handle: Handle) -> None:
        self._handles.append(handle)

    def define(
        self, qualname: str, schema: str | None = None, *, tags: Iterable[Tag] | Tag = ()
    ) -> str:
        """``define("ns::op", "(Tensor x) -> Tensor")``, or one full schema string
        ``define("ns::op(Tensor x) -> Tensor")``."""
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
            raise ReservedNamespaceError(
                f"define(): {ns!r} is a reserved namespace; use your own namespace", ns
            )
        tag_tuple = (tags,) if isinstance(tags, Tag) else tuple(tags)
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
            name = resolve(qualname, "impl").name()
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
        # A Registrar stands in for a Library (it owns the handles); func may be None.
        return register_kernel(op, device_types, func, lib=self, allow_override=allow_override)  # type: ignore[call-overload]

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

    def load_library(self, path: str | os.PathLike[str]) -> None:
        """``oplib.ops.load_library(path)`` for a library the plugin ships: its operators and
        kernels are credited to the plugin and unloaded from the registry if a hook of the
        plugin fails."""
        load_library(path, _sink=self)

    def _rollback(self, mark: int = 0) -> None:
        while len(self._handles) > mark:
            self._handles.pop().destroy()


def _hook_view(plugin: Any) -> Any:
    """What pluggy registers for ``plugin``: for a module, an object holding only its
    hook implementations. pluggy inspects every attribute of what it registers (about a
    millisecond for a module with a few dozen names, on every start); the functions it
    would pick are the same ones (routines carrying the ``oplib_impl`` marker)."""
    if not isinstance(plugin, ModuleType):
        return plugin
    hooks = {
        name: value
        for name, value in vars(plugin).items()
        if isinstance(getattr(value, "oplib_impl", None), dict) and inspect.isroutine(value)
    }
    return _HookView(plugin.__name__, hooks)


class _HookView(SimpleNamespace):
    """A module's hooks as pluggy sees them; ``dir()`` lists only them (pluggy inspects
    every name ``dir()`` gives)."""

    def __init__(self, name: str, hooks: dict[str, Any]) -> None:
        super().__init__(**hooks)
        self.__name__ = name

    def __dir__(self) -> _builtin_list[str]:
        return [n for n in vars(self) if n != "__name__"]


def _last_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[-1] if text else type(e).__name__


class PluginHost:
    """The pluggy manager plus what oplib records about each plugin (``records`` is filled
    on first use, by loading the plugins)."""

    _deferred = frozenset({"records", "pm"})

    def __init__(self) -> None:
        self.lock = LOCK
        self.autoload = True
        self.disabled: frozenset[str] = frozenset()

    def _init_state(self) -> None:
        # pluggy and the entry-point scan are imported here, when the plugins load, not at
        # ``import oplib_core``.
        import pluggy

        from . import hookspecs

        self.records: dict[str, PluginRecord] = {}
        self.pm: pluggy.PluginManager = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)

    # -- discovery ------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Load every ``oplib`` entry point (unless ``OPLIB_PLUGINS_AUTOLOAD=0``), honouring
        ``OPLIB_DISABLE_PLUGINS``, then run the phases over all of them."""
        self.autoload = os.environ.get("OPLIB_PLUGINS_AUTOLOAD", "1").strip().lower() not in (
            "0",
            "false",
            "no",
            "off",
        )
        self.disabled = frozenset(
            n.strip() for n in os.environ.get("OPLIB_DISABLE_PLUGINS", "").split(",") if n.strip()
        )
        if not self.autoload:
            return
        from ._discovery import find_entry_points

        loaded: _builtin_list[PluginRecord] = []
        for ep in find_entry_points(__version__):
            record = self._load_entry_point(ep)
            if record is not None:
                loaded.append(record)
        self._run_phases(loaded)

    def _load_entry_point(self, ep: EntryPointInfo) -> PluginRecord | None:
        record = PluginRecord(
            name=ep.name,
            distribution=ep.distribution,
            version=ep.version,
            entry_point=ep.value,
        )
        with self.lock:
            if ep.name in self.records:
                other = self.records[ep.name]
                record.status = "failed"
                record.error = (
                    f"an entry point named {ep.name!r} is already provided by "
                    f"{other.distribution or other.entry_point}"
                )
                self.records[f"{ep.name} ({record.distribution})"] = record
                self._warn(record)
                return None
            self.records[ep.name] = record
        if ep.name in self.disabled:
            self.pm.set_blocked(ep.name)
            record.status = "blocked"
            return None
        from ._discovery import CORE_DISTRIBUTION
        from ._discovery import load as load_entry_point

        if not ep.compatible:
            record.status = "incompatible"
            record.error = (
                f"incompatible: needs {ep.requirement}, have {CORE_DISTRIBUTION} {__version__}"
            )
            self._warn(record)
            return None
        start = time.perf_counter()
        try:
            module = load_entry_point(ep)
        except BaseException as e:  # a plugin must never take oplib down with it
            if isinstance(e, KeyboardInterrupt):
                raise
            record.load_ms = (time.perf_counter() - start) * 1000
            self._fail(record, e)
            return None
        record.load_ms = (time.perf_counter() - start) * 1000
        record.module = getattr(module, "__file__", None) or repr(module)
        if not self._register_with_pluggy(record, module):
            return None
        return record

    def _register_with_pluggy(self, record: PluginRecord, plugin: Any) -> bool:
        target = _hook_view(plugin)
        try:
            self.pm.register(target, name=record.name)
        except BaseException as e:
            self._fail(record, e)
            return False
        unknown = [
            caller.name for caller in (self.pm.get_hookcallers(target) or []) if caller.spec is None
        ]
        if unknown:
            from . import hookspecs

            self.pm.unregister(target)
            self._fail(
                record,
                PluginError(
                    f"plugin {record.name!r} implements unknown hook(s) "
                    f"{', '.join(unknown)}; known hooks: "
                    f"{', '.join(n for n in dir(hookspecs) if n.startswith('oplib_'))}",
                    plugin=record.name,
                ),
            )
            return False
        record.plugin = plugin
        record.hook_target = target
        record.hooks = sorted(c.name for c in self.pm.get_hookcallers(target) or [])
        return True

    # -- phases ---------------------------------------------------------------------------
    def _run_phases(self, records: Sequence[PluginRecord]) -> None:
        for r in records:
            r.registrar = Registrar(r, allow_reserved=_is_core_plugin(r.plugin))
        for phase in PHASES:
            for r in records:
                if r.status != "loaded" or phase not in r.hooks:
                    continue
                start = time.perf_counter()
                self._run_hook(r, phase)
                r.load_ms += (time.perf_counter() - start) * 1000

    def _run_hook(self, record: PluginRecord, phase: str) -> None:
        registrar = record.registrar
        assert registrar is not None
        impls = [
            i
            for i in getattr(self.pm.hook, phase).get_hookimpls()
            if i.plugin is record.hook_target
        ]
        token = current_plugin.set(PluginContext(record.name, record.distribution, record.version))
        try:
            if phase == "oplib_backends":
                specs = [s for impl in impls for s in (impl.function() or ())]
                for spec in specs:
                    if not isinstance(spec, BackendSpec):
                        raise PluginError(
                            f"oplib_backends() of plugin {record.name!r} must return BackendSpec "
                            f"objects, got {type(spec).__name__}",
                            plugin=record.name,
                        )
                    undo = TABLE.register(
                        spec,
                        plugin=record.name,
                        distribution=record.distribution,
                        version=record.version,
                    )
                    registrar._register(Handle(undo, f"backend {spec.name}"))
                    if spec.name == backend_registration.PRIVATEUSE1:
                        # OPLIB_PRIVATEUSE1_NAME; a bad name fails this plugin (rolled back)
                        backend_registration._rename_from_env()
            else:
                for impl in impls:
                    impl.function(**({"registrar": registrar} if impl.argnames else {}))
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            registrar._rollback()
            self._fail(record, e, during=phase)
        finally:
            current_plugin.reset(token)

    def _fail(self, record: PluginRecord, e: BaseException, during: str | None = None) -> None:
        record.status = "failed"
        where = f" in {during}()" if during else ""
        record.error = f"{_last_line(e)}{where}"
        import traceback

        record.traceback = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        if record.hook_target is not None and self.pm.is_registered(record.hook_target):
            self.pm.unregister(record.hook_target)
        self._warn(record)

    @staticmethod
    def _warn(record: PluginRecord) -> None:
        what = "is incompatible" if record.status == "incompatible" else "failed to load"
        warnings.warn(
            f"oplib: plugin {record.name!r} ({record.distribution or 'in-process'}) {what} "
            f"and was skipped: {record.error}",
            PluginWarning,
            stacklevel=2,
        )

    # -- in-process plugins -------------------------------------------------------------
    def register(self, plugin: Any, name: str | None = None) -> PluginRecord:
        name = name or str(getattr(plugin, "__name__", None) or type(plugin).__name__)
        ensure()
        with self.lock:
            if name in self.records and self.records[name].status == "loaded":
                raise PluginError(f"a plugin named {name!r} is already registered", plugin=name)
            record = PluginRecord(
                name=name, module=getattr(plugin, "__file__", None) or repr(plugin)
            )
            self.records[name] = record
            if self.pm.is_blocked(name) or name in self.disabled:
                record.status = "blocked"
                return record
            if self._register_with_pluggy(record, plugin):
                self._run_phases([record])
            return record

    def unregister(self, plugin_or_name: Any) -> None:
        ensure()
        with self.lock:
            record = self._find(plugin_or_name)
            if record.registrar is not None:
                record.registrar._rollback()
            if record.hook_target is not None and self.pm.is_registered(record.hook_target):
                self.pm.unregister(record.hook_target)
            del self.records[record.name]

    def _find(self, plugin_or_name: Any) -> PluginRecord:
        for r in self.records.values():
            if r.name == plugin_or_name or (r.plugin is not None and r.plugin is plugin_or_name):
                return r
        raise PluginError(f"no plugin {plugin_or_name!r} is registered", plugin=str(plugin_or_name))


HOST = deferred(PluginHost)()


def load() -> None:
    """Load the installed plugins now. They otherwise load on first use of the dispatch
    table (an op lookup, a registration, a device or backend query), not on
    ``import oplib_core``; call this to pay that cost (and see plugin warnings) up front."""
    ensure()


def register(plugin: Any, name: str | None = None) -> PluginRecord:
    """Add a plugin in-process and run its hooks now (all phases). Returns its record; a
    failing plugin is rolled back and its record says why (status ``failed``)."""
    return HOST.register(plugin, name)


def unregister(plugin_or_name: Any) -> None:
    """Remove an in-process or entry-point plugin and everything it registered."""
    HOST.unregister(plugin_or_name)


def list() -> _builtin_list[PluginRecord]:
    """Every plugin oplib knows of, loaded or not, in load order."""
    ensure()
    return _builtin_list(HOST.records.values())
