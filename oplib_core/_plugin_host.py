"""The plugin host: the pluggy manager plus oplib's record of every plugin. It finds the
entry points of group ``oplib`` (``_discovery``), settles which distribution may load a
name or a backend, runs the hooks in phases (backends → define → impl → fake → autograd),
each plugin isolated from the others and rolled back on failure, and loads the plugins that
wait for their backends (``_backend_cache``) on first use. Internal: users and plugins
reach it through :mod:`oplib_core.plugins` (``load``, ``register``, ``list`` ...).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from . import backend_registration
from ._discovery import CORE_DISTRIBUTION, switched_on
from ._dispatch import add_note
from ._registrar import PluginRecord, PluginWarning, Registrar
from ._registry import backend_cache as _backend_cache
from ._registry.registry import REGISTRY, Handle
from ._registry.startup import (
    LOADS,
    LOCK,
    at_fork,
    commit,
    deferred,
    ensure,
    forget_imports_of,
    importing,
    released,
    wait_turn,
)
from ._version import __version__
from .backends import DISTRIBUTIONS, TABLE, BackendSpec, _clash_of
from .errors import PluginError

if TYPE_CHECKING:
    import pluggy

    from ._discovery import EntryPointInfo

__all__ = ["HOST", "INTERRUPTED_IN", "PHASES", "PluginHost"]

PHASES = (
    "oplib_backends",
    "oplib_define",
    "oplib_impl",
    "oplib_register_fake",
    "oplib_register_autograd",
)


#: The start of the note a ``KeyboardInterrupt`` raised by a plugin's code gets (the plugin's
#: name follows); loading is undone, so the note is what still names the plugin.
INTERRUPTED_IN = "oplib: raised in plugin"


#: Files a warning about a plugin skips on its way to the user's line: oplib's own, and
#: ``contextlib``'s (a plugin's failure is caught inside ``_isolated``, a context manager).
_OURS = (os.path.dirname(__file__) + os.sep, contextlib.__file__)


def _user_stacklevel() -> int:
    """``warnings.warn``'s ``stacklevel`` for the first frame outside :data:`_OURS`, from
    the function that calls this one."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OURS):
        frame, level = frame.f_back, level + 1
    return level


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

    def __dir__(self) -> list[str]:
        return [n for n in vars(self) if n != "__name__"]


def _module_of(entry_point: str) -> str:
    """The module of ``entry_point`` (``module[:attr]``)."""
    return entry_point.partition(":")[0].strip()


def _last_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[-1] if text else type(e).__name__


#: The backends of the project's own distributions: declared by them, whatever else an
#: entry point or a backend claims.
_KNOWN_BACKENDS = DISTRIBUTIONS
#: The entry point names of the project's own distributions.
_KNOWN_ENTRY_POINTS = {
    "cpu": "oplib-cpu",
    "cuda": "oplib-cuda",
    "meta": "oplib-meta",
    "privateuse": "oplib-privateuse",
    "dask": "oplib-dask",
}


def _claim_rank(record: PluginRecord, spec: BackendSpec) -> int:
    """How strongly a plugin's distribution declares the backend it returns: 2 for the
    project's own backends (:data:`_KNOWN_BACKENDS`), 1 when the plugin's entry point is
    named after the backend (``cpu = "oplib_cpu.plugin"`` declares ``cpu``), else 0."""
    if _KNOWN_BACKENDS.get(spec.name) == record.distribution:
        return 2
    return 1 if record.entry_point is not None and record.name == spec.name else 0


def _by_entry_point_name(
    eps: Iterable[EntryPointInfo],
) -> list[tuple[EntryPointInfo, list[str]]]:
    """Each entry point with the distributions it must yield its name to (empty: it may
    load). Two distributions giving the same name: the one oplib knows for that name keeps
    it; otherwise none does. Never "first found wins"."""
    eps = list(eps)
    dists: dict[str, list[str]] = {}
    for ep in eps:
        dists.setdefault(ep.name, []).append(str(ep.distribution))
    out = []
    for ep in eps:
        others = [d for d in dists[ep.name] if d != str(ep.distribution)]
        if others and _KNOWN_ENTRY_POINTS.get(ep.name) == ep.distribution:
            others = []
        out.append((ep, others))
    return out


class PluginHost:
    """The pluggy manager plus what oplib records about each plugin (``records`` is filled
    on first use, by loading the plugins)."""

    _deferred = frozenset({"records", "pm"})

    def __init__(self) -> None:
        self.lock = LOCK
        self.autoload = True
        self.disabled: frozenset[str] = frozenset()
        #: Entry points loaded on first use of their backends or ops (``_backend_cache``).
        self.deferred: dict[str, tuple[EntryPointInfo, _backend_cache.DeferredPlugin]] = {}
        self._loading: dict[str, int] = {}  # plugin -> the thread loading it
        #: thread -> the plugins before its outermost open transaction (undone at a fork)
        self._transactions: dict[int, set[str]] = {}

    def _init_state(self) -> None:
        # pluggy and the entry-point scan are imported here, when the plugins load, not at
        # ``import oplib_core``.
        import pluggy

        from . import hookspecs

        self.records: dict[str, PluginRecord] = {}
        self.pm: pluggy.PluginManager = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        REGISTRY.evict = self._evict

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: if the block raises anything (``KeyboardInterrupt`` included),
        every plugin it added is rolled back and forgotten, leaving the table as before."""
        before = set(self.records)
        me = threading.get_ident()
        outermost = me not in self._transactions
        if outermost:
            self._transactions[me] = before
        try:
            yield
        except BaseException:
            if outermost:
                del self._transactions[me]
            with self.lock:
                self._roll_back_to(before)
            raise
        if outermost:
            del self._transactions[me]
            commit()  # (the start-up loader's work is in)

    def _roll_back_to(self, before: set[str]) -> None:
        for name in reversed(list(self.records)):
            if name not in before:
                self._forget(self.records[name])

    def _forget(self, record: PluginRecord) -> None:
        if record.registrar is not None:
            record.registrar._rollback()
        if record.hook_target is not None and self.pm.is_registered(record.hook_target):
            self.pm.unregister(record.hook_target)
        for key, r in list(self.records.items()):
            if r is record:
                del self.records[key]

    def _evict(self, plugin: str, error: BaseException) -> None:
        """Fail a loaded plugin after the fact (it took what another distribution owns):
        everything it registered is rolled back."""
        record = self.records.get(plugin)
        if record is None or record.status != "loaded":
            return
        if record.registrar is not None:
            record.registrar._rollback()
        self._fail(record, error)

    # -- discovery ------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Load every ``oplib`` entry point (unless ``OPLIB_PLUGINS_AUTOLOAD=0``), honouring
        ``OPLIB_DISABLE_PLUGINS``, then run the phases over all of them."""
        self.autoload = switched_on("OPLIB_PLUGINS_AUTOLOAD")
        self.disabled = frozenset(
            n.strip() for n in os.environ.get("OPLIB_DISABLE_PLUGINS", "").split(",") if n.strip()
        )
        if not self.autoload:
            return
        from ._discovery import find_entry_points

        lazy = _backend_cache.enabled()
        deferrable = _backend_cache.read(__version__) if lazy else None
        loaded: list[PluginRecord] = []
        for ep, rivals in _by_entry_point_name(find_entry_points(__version__)):
            if rivals:
                self._refuse_entry_point(ep, rivals)
                continue
            later = deferrable.get(ep.name) if deferrable else None
            if (
                later is not None
                and later.value == ep.value
                and ep.compatible
                and ep.name not in self.disabled
            ):
                self._defer(ep, later)
                continue
            record = self._load_entry_point(ep)
            if record is not None:
                loaded.append(record)
        self._run_phases(loaded)
        if lazy and deferrable is None:  # everything loaded: record what may wait next time
            _backend_cache.write(__version__, self._deferrable())

    # -- plugins loaded on first use of their backends or operators ----------------------
    def _defer(self, ep: EntryPointInfo, later: _backend_cache.DeferredPlugin) -> None:
        record = PluginRecord(
            name=ep.name,
            distribution=ep.distribution,
            version=ep.version,
            entry_point=ep.value,
            status="deferred",
        )
        load = functools.partial(self.load_deferred, ep.name)
        with self.lock:
            self.records[ep.name] = record
            self.deferred[ep.name] = (ep, later)
            for backend in later.backends:
                TABLE.defer(backend, load)
                if backend.device_module:
                    backend_registration.bind_deferred(backend.name)
            for qualname in later.ops:
                REGISTRY.ops.waiting[qualname] = load

    def load_deferred(self, name: str | None = None) -> None:
        """Load the deferred plugin ``name`` (every one when None) now, as it would have
        loaded at start-up: its failure is reported the same way. Other threads asking
        meanwhile wait for it; the loading thread's own asks go on.

        The import runs without the registration lock (released meanwhile if this thread
        holds it): a thread importing the plugin's module itself, which registers at import
        time, needs that lock. The hooks run under it, so that no thread sees the plugin's
        backend before its kernels. A thread whose own import the load would
        wait for (``_startup.wait_turn``), or that is importing the plugin's module itself
        (loading from a half-run module would miss its hooks), goes on with the table as it
        is: the plugin stays deferred and loads on the next ask."""
        me = threading.get_ident()
        for plugin in [name] if name is not None else list(self.deferred):
            if self._loading.get(plugin) == me:
                continue  # its own registrations name its backends
            with released():
                with LOADS:
                    if not wait_turn(LOADS, functools.partial(self._loading.get, plugin)):
                        continue
                    found = self.deferred.get(plugin)
                    if found is None:
                        continue  # loaded already
                    if _module_of(found[0].value) in importing():
                        continue
                    self._loading[plugin] = me
                try:
                    self._load_deferred(plugin, *found)
                finally:
                    with LOADS:
                        del self._loading[plugin]
                        LOADS.notify_all()

    def _load_deferred(
        self, plugin: str, ep: EntryPointInfo, later: _backend_cache.DeferredPlugin
    ) -> None:
        with self.lock:
            record = self.records[plugin]
            record.status = "loaded"
        try:
            loaded = self._load_entry_point(ep, record)  # the import: without the lock
            if loaded is not None:
                # The hooks hold it: a thread meeting the plugin's backend (installed first)
                # waits for its kernels. A hook should not wait for another thread.
                with self.lock:
                    self._run_phases([loaded])
        except BaseException:  # Ctrl-C: undone, deferred again
            self._defer_again(plugin, record, later)
            raise
        with self.lock:
            del self.deferred[plugin]
            for backend in later.backends:
                TABLE.undefer(backend.name)
                if backend.device_module:
                    backend_registration.unbind_deferred(backend.name)
            for qualname in later.ops:
                REGISTRY.ops.waiting.pop(qualname, None)

    def _defer_again(
        self, plugin: str, record: PluginRecord, later: _backend_cache.DeferredPlugin
    ) -> None:
        """Undo a load on first use that did not finish: the plugin waits again."""
        with self.lock:
            self._forget(record)
            record.status = "deferred"
            self.records[plugin] = record
            load = functools.partial(self.load_deferred, plugin)
            for backend in later.backends:  # (registering them ended their wait)
                TABLE.defer(backend, load)

    def _deferrable(self) -> list[_backend_cache.DeferredPlugin]:
        """The loaded entry points whose plugin may wait for first use next time: its hooks
        are ``oplib_backends``, ``oplib_define`` and ``oplib_impl`` only, and everything it
        registered is its backends, its operators and kernels under its backends' keys, to
        none of which any other plugin gave kernels."""
        touched: dict[str, set[str]] = {}  # plugin -> the keys and ops it gave kernels
        for r in self.records.values():
            if r.registrar is not None:
                touched[r.name] = {
                    name
                    for h in r.registrar._handles
                    if h.key is not None
                    for name in (h.key, h.description.partition(" kernel of ")[2])
                }
        found = []
        for r in self.records.values():
            specs = r.backends
            if (
                r.status != "loaded"
                or r.entry_point is None
                or not specs
                or not set(r.hooks)
                <= {"oplib_backends", "oplib_define", "oplib_impl", "oplib_environment"}
                or r.registrar is None
                or r.waiting
                # the private-use slot renamed: its names move when it loads
                or any(spec.name in TABLE._renames for spec in specs)
            ):
                continue
            own = {s.name for s in specs}
            mine = {f"backend {n}" for n in own}
            ops = tuple(
                h.description.removeprefix("define ")
                for h in r.registrar._handles
                if h.key is None and h.description.startswith("define ")
            )
            if any(
                (h.key not in own)
                if h.key is not None
                else (h.description not in mine and not h.description.startswith("define "))
                for h in r.registrar._handles
            ) or any(
                not (own | set(ops)).isdisjoint(names)
                for other, names in touched.items()
                if other != r.name
            ):
                continue
            module = sys.modules.get(r.entry_point.partition(":")[0].strip())
            environment = _backend_cache.declared_environment(
                i.function
                for i in self.pm.hook.oplib_environment.get_hookimpls()
                if i.plugin_name == r.name
            )
            if module is None or environment is None:
                continue
            found.append(
                _backend_cache.DeferredPlugin(
                    r.name,
                    r.entry_point,
                    _backend_cache.package_files(module),
                    tuple(
                        _backend_cache.DeferredBackend(
                            s.name,
                            s.dispatch_key,
                            (
                                *s.array_type_names,
                                *(f"{t.__module__}.{t.__qualname__}" for t in s.array_types),
                            ),
                            s.device_module is not None,
                        )
                        for s in specs
                    ),
                    ops,
                    environment,
                )
            )
        return found

    def _refuse_entry_point(self, ep: EntryPointInfo, rivals: list[str]) -> None:
        record = PluginRecord(
            name=ep.name, distribution=ep.distribution, version=ep.version, entry_point=ep.value
        )
        record.status = "failed"
        known = _KNOWN_ENTRY_POINTS.get(ep.name)
        why = f"it belongs to {known}" if known in rivals else "none of them owns it"
        record.error = (
            f"PluginError: the entry point name {ep.name!r} of {ep.distribution} is also "
            f"used by {', '.join(rivals)}; {why}"
        )
        with self.lock:
            self.records[f"{ep.name} ({ep.distribution})"] = record
        self._warn(record)

    def _load_entry_point(
        self, ep: EntryPointInfo, record: PluginRecord | None = None
    ) -> PluginRecord | None:
        if record is None:
            record = PluginRecord(
                name=ep.name,
                distribution=ep.distribution,
                version=ep.version,
                entry_point=ep.value,
            )
        with self.lock:
            if self.records.get(ep.name, record) is not record:
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
            record.registrar = Registrar(record)
        if ep.name in self.disabled:
            self.pm.set_blocked(ep.name)
            record.status = "blocked"
            return None
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
            # registrations its module makes at import time are the plugin's too
            with record.registrar._crediting():
                module = load_entry_point(ep)
        except BaseException as e:  # a plugin must never take oplib down with it
            if isinstance(e, KeyboardInterrupt):
                raise
            record.load_ms = (time.perf_counter() - start) * 1000
            record.registrar._rollback()
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
            if r.registrar is None or r.privileged:
                r.registrar = Registrar(r, allow_reserved=r.privileged)
        self._install_backends(records)
        for phase in PHASES[1:]:
            for r in records:
                if r.status != "loaded" or phase not in r.hooks:
                    continue
                start = time.perf_counter()
                self._run_hook(r, phase)
                r.load_ms += (time.perf_counter() - start) * 1000

    def _install_backends(self, records: Sequence[PluginRecord]) -> None:
        """The backends phase, in two steps so that order never matters: every plugin's
        ``oplib_backends()`` is asked first, then conflicting claims (a name, a dispatch
        key or an array type wanted by two backends) are settled by who declares the
        backend (:func:`_claim_rank`): the lower claimant fails, both when equal; only
        then are the rest installed."""
        claims: list[tuple[PluginRecord, list[BackendSpec]]] = []
        for r in records:
            if r.status != "loaded" or "oplib_backends" not in r.hooks:
                continue
            start = time.perf_counter()
            specs = self._ask_backends(r)
            r.load_ms += (time.perf_counter() - start) * 1000
            if specs is not None:
                claims.append((r, specs))
        # a plugin asked earlier may have failed since (evicted by a later one's conflict)
        claims = [(r, specs) for r, specs in claims if r.status == "loaded"]
        losers: dict[int, str] = {}
        for i, (r, specs) in enumerate(claims):
            for spec in specs:
                for installed, clash in TABLE.clashing(spec):
                    losers.setdefault(
                        i,
                        f"backend {spec.name!r} claims {clash} of the installed backend "
                        f"{installed.name!r} ({installed.distribution or installed.plugin})",
                    )
                for j, (other, other_specs) in enumerate(claims):
                    if j == i:
                        continue
                    for theirs in other_specs:
                        clash = _clash_of(spec, theirs)
                        if not clash or _claim_rank(r, spec) > _claim_rank(other, theirs):
                            continue
                        losers.setdefault(
                            i,
                            f"backend {spec.name!r} of {r.distribution or r.name} claims "
                            f"{clash} of backend {theirs.name!r} declared by "
                            f"{other.distribution or other.name}",
                        )
        for i, (r, specs) in enumerate(claims):
            if i in losers:
                if r.registrar is not None:  # what its hook did already (a rename)
                    r.registrar._rollback()
                self._fail(
                    r,
                    PluginError(f"{losers[i]}; {r.name!r} was refused", plugin=r.name),
                    during="oplib_backends",
                )
                continue
            self._register_backends(r, specs)

    def _ask_backends(self, record: PluginRecord) -> list[BackendSpec] | None:
        specs: list[BackendSpec] = []
        with self._isolated(record, "oplib_backends"):
            for impl in self._hookimpls(record, "oplib_backends"):
                returned: Any = impl.function()
                specs.extend(returned or ())
            for spec in specs:
                if not isinstance(spec, BackendSpec):
                    raise PluginError(
                        f"oplib_backends() of plugin {record.name!r} must return BackendSpec "
                        f"objects, got {type(spec).__name__}",
                        plugin=record.name,
                    )
        return specs if record.status == "loaded" else None

    def _register_backends(self, record: PluginRecord, specs: Sequence[BackendSpec]) -> None:
        registrar = record.registrar
        assert registrar is not None
        with self._isolated(record, "oplib_backends"):
            for spec in specs:
                undo = TABLE.register(
                    spec,
                    plugin=record.name,
                    distribution=record.distribution,
                    version=record.version,
                )
                registrar._register(Handle(undo, f"backend {spec.name}"))
                record.backends.append(spec)
                if spec.name == backend_registration.PRIVATEUSE1:
                    # OPLIB_PRIVATEUSE1_NAME; a bad name fails this plugin (rolled back)
                    backend_registration._rename_from_env()

    def _hookimpls(self, record: PluginRecord, phase: str) -> list[pluggy.HookImpl]:
        return [
            i
            for i in getattr(self.pm.hook, phase).get_hookimpls()
            if i.plugin is record.hook_target
        ]

    @contextlib.contextmanager
    def _isolated(self, record: PluginRecord, phase: str) -> Iterator[None]:
        """Run the block as the plugin (see ``Registrar._crediting``); if it raises, the
        plugin fails and everything it registered is rolled back, and oplib goes on. A
        ``KeyboardInterrupt`` goes up (the loading transaction undoes the whole load)."""
        registrar = record.registrar
        assert registrar is not None
        try:
            with registrar._crediting():
                yield
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                add_note(e, f"{INTERRUPTED_IN} {record.name!r}")
                raise
            registrar._rollback()
            self._fail(record, e, during=phase)

    def _run_hook(self, record: PluginRecord, phase: str) -> None:
        registrar = record.registrar
        with self._isolated(record, phase):
            for impl in self._hookimpls(record, phase):
                impl.function(**({"registrar": registrar} if impl.argnames else {}))

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
        message = (
            f"oplib: plugin {record.name!r} ({record.distribution or 'in-process'}) {what} "
            f"and was skipped: {record.error}"
        )
        # At the user's line (the call that loaded the plugins), not at oplib's own. Not
        # skip_file_prefixes: on 3.12 and 3.13 it stops at contextlib's __exit__ (which
        # threw the plugin's error into _isolated) although contextlib's file is in _OURS.
        warnings.warn(message, PluginWarning, stacklevel=_user_stacklevel())

    # -- in-process plugins -------------------------------------------------------------
    def register(
        self, plugin: Any, name: str | None = None, *, distribution: str | None = None
    ) -> PluginRecord:
        """Add ``plugin`` in-process. ``distribution``: the distribution declaring it, which
        only the core gives (``oplib-core``, for its own plugins: they alone are privileged);
        the public :func:`register` gives none."""
        name = name or str(getattr(plugin, "__name__", None) or type(plugin).__name__)
        ensure()
        if name in self.deferred:
            self.load_deferred(name)
        with self.lock, self.transaction():
            if name in self.records and self.records[name].status == "loaded":
                raise PluginError(f"a plugin named {name!r} is already registered", plugin=name)
            record = PluginRecord(
                name=name, module=getattr(plugin, "__file__", None) or repr(plugin)
            )
            if distribution == CORE_DISTRIBUTION:
                record.distribution, record.version = CORE_DISTRIBUTION, __version__
                record.privileged = True
            self.records[name] = record
            if self.pm.is_blocked(name) or name in self.disabled:
                record.status = "blocked"
                return record
            if self._register_with_pluggy(record, plugin):
                self._run_phases([record])
            return record

    def unregister(self, plugin_or_name: Any) -> None:
        ensure()
        if self.deferred:  # loaded, then undone the usual way
            self.load_deferred(plugin_or_name if isinstance(plugin_or_name, str) else None)
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


def _undo_loads_after_fork(me: int) -> None:
    """In a forked child the loads other threads had under way never end: undo what they
    registered, as a failed load is undone (the start-up loader stays queued, a plugin
    loading on first use waits again), so that the child loads them afresh on first use."""
    gone = {t for t in (*HOST._transactions, *HOST._loading.values()) if t != me}
    if not gone:
        return
    forget_imports_of(gone)
    records: dict[str, PluginRecord] | None = HOST.__dict__.get("records")
    forgotten = {p for p, t in HOST._loading.items() if t in gone}
    for thread, before in HOST._transactions.items():
        if thread in gone and records is not None:
            forgotten |= {n for n in records if n not in before}
    # first the backends such a load registered without keeping the handle yet (the
    # fork fell between the two): else the child's reload finds their names taken
    TABLE.forget_plugins(forgotten)
    for plugin, thread in list(HOST._loading.items()):
        if thread in gone:
            del HOST._loading[plugin]
            found = HOST.deferred.get(plugin)
            if records is not None and found is not None and plugin in records:
                HOST._defer_again(plugin, records[plugin], found[1])
    for thread, before in list(HOST._transactions.items()):
        if thread in gone:
            del HOST._transactions[thread]
            if records is not None:
                HOST._roll_back_to(before)
    REGISTRY.forget_plugins(forgotten)  # what the rollbacks could not reach
    # A registration with pluggy whose record the gone thread had not finished (the fork
    # fell between the two) is no plugin's: drop it, or the child's reload is refused
    # ("Plugin name already registered").
    pm = HOST.__dict__.get("pm")
    if pm is not None and records is not None:
        for name, plugin in pm.list_name_plugin():
            record = records.get(name)
            if plugin is not None and (record is None or record.hook_target is not plugin):
                pm.unregister(name=name)


at_fork(_undo_loads_after_fork)
