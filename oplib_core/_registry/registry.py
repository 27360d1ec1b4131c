"""The dispatch table: operators, their kernels per dispatch key, and where each came from.

Every registration returns a :class:`Handle` that undoes exactly it. The registry never
imports the dispatcher; layers above it listen for changes (``add_listener``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import FunctionType
from typing import Any

from .._schema import FunctionSchema, parse_schema
from .._tags import Tag
from ..backends import TABLE, Backend, BackendTable
from ..errors import (
    ArgumentTypeError,
    RegistrationError,
    ReservedNamespaceError,
    UnknownDispatchKeyError,
    UnknownOperatorError,
)
from .entry import (
    Kernel,
    LazyKernel,
    Listener,
    MakeKernel,
    OpEntry,
    Origin,
    _caller_location,
    _credited,
    _location_of,
    current_plugin,
    origin_of,
)
from .handle import Handle
from .ownership import OverrideWarning, override_allowed, owner_of, party
from .startup import LOCK, at_fork, deferred, ensure
from .table import OpTable, PendingOp, QueuedKernel, pending_qualname

__all__ = [
    "ALIAS_KEYS",
    "Handle",
    "Registry",
    "op_named",
]

COMPOSITE_EXPLICIT = "CompositeExplicitAutograd"
COMPOSITE_IMPLICIT = "CompositeImplicitAutograd"
AUTOGRAD = "Autograd"
FAKE = "Fake"
ALIAS_KEYS = (COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, AUTOGRAD, FAKE)

# torch's names for backend keys; other backends use their BackendSpec.key.
_WELL_KNOWN_KEYS = {
    "CPU": "cpu",
    "CUDA": "cuda",
    "Meta": "meta",
    "PrivateUse1": "privateuse1",
    "XPU": "xpu",
    "MPS": "mps",
    "XLA": "xla",
    "HPU": "hpu",
    "Dask": "dask",
}


def _plain(who: str) -> str:
    """``plugin 'x'`` → ``x`` (the name ``OPLIB_ALLOW_OVERRIDE`` takes)."""
    return who[len("plugin '") : -1] if who.startswith("plugin '") else who


_builtin_list = list


def _checked_tags(tags: Iterable[Tag]) -> tuple[Tag, ...]:
    tags_t = tuple(tags)
    for t in tags_t:
        if not isinstance(t, Tag):
            raise ArgumentTypeError(
                f"define(): tags must be oplib.Tag members, got {t!r}",
                api="define",
                argument="tags",
                value=t,
            )
    return tags_t


def _make_lazily(make: Any, entry: OpEntry, at: Origin) -> tuple[Any, Origin]:
    """A LazyKernel's kernel and origin: where its code is, else ``at``, where it was
    registered (credited to the plugin that registered it)."""
    fn, source = make(entry)
    where = _location_of(source)
    return fn, at if where is None else at._replace(source=where)


class Registry:
    """All operators. Mutations and cache fills happen under one re-entrant lock.

    ``ops`` is filled on first use: reading it loads the plugins (see ``startup``)."""

    #: No operator may be defined there but the core's: ``oplib`` and ``prim`` hold the core
    #: op set, ``higher_order`` only ``HigherOrderOperator``s (which are not in this table).
    RESERVED_NAMESPACES = frozenset({"oplib", "prim", "higher_order"})
    _deferred = frozenset({"ops", "_renames"})

    def __init__(self, backends: BackendTable = TABLE) -> None:
        self.lock = LOCK
        self.backends = backends
        self._listeners: list[Listener] = []
        #: Set by the plugin host: ``evict(plugin, error)`` fails that plugin and rolls
        #: back everything it registered (a kernel it took from the owner).
        self.evict: Callable[[str, BaseException], None] | None = None
        #: (op, key) slots two non-owning plugins fought over: refused to any later
        #: non-owner too, so that the outcome never depends on the order.
        self._contested: dict[tuple[str, str], str] = {}
        #: Kernels that belong to a renamed slot (privateuse1): moved by ``rename_key`` or
        #: registered under the slot's old name since; ``unrename_key`` moves them back.
        self._slot_kernels: set[Kernel] = set()
        #: ``normalize_key``'s answers (every kernel registration asks), until a backend
        #: or a rename changes.
        self._normal_keys: dict[str, str] = {}
        backends.add_listener(self._on_backend_change)

    def _init_state(self) -> None:
        self.ops = OpTable(self._build)
        self.ops.complete = self.backends.all
        self._renames: dict[str, str] = {}

    # -- listeners ------------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        """``fn(event, entry)`` with event ``"defined"``, ``"undefined"`` or ``"changed"``."""
        self._listeners.append(fn)

    def _notify(self, event: str, entry: OpEntry) -> None:
        for fn in self._listeners:
            fn(event, entry)

    def _on_backend_change(self, event: str, backend: Backend) -> None:
        with self.lock:
            self._normal_keys.clear()
            for entry in self.ops.built():  # a pending op has nothing cached
                entry.invalidate()

    # -- keys -----------------------------------------------------------------------------
    def rename_key(self, old: str, new: str) -> None:
        """Make key/device name ``old`` mean ``new`` (privateuse1 → the vendor's name); kernels
        already registered under ``old`` move to ``new``, beneath kernels registered under
        ``new`` itself (as if registered first). A kernel already under ``new`` for the same
        op conflicts unless it was registered with ``allow_override=True``; on a conflict
        nothing is renamed."""
        ensure()
        with self.lock:
            for entry in self._keyed(old, new):
                moved, there = entry.kernels.get(old), entry.kernels.get(new)
                if moved and there and not there[0].allow_override:
                    raise RegistrationError(
                        f"renaming {old!r} to {new!r}: {entry.qualname} has a kernel for {old!r} "
                        f"registered at {moved[-1].origin} and one for {new!r} at "
                        f"{there[0].origin}. Register the {new!r} one with allow_override=True "
                        "to replace the other.",
                        op=entry.qualname,
                        existing=str(moved[-1].origin),
                    )
            self._renames[old] = new
            self._normal_keys.clear()
            for entry in self._keyed(old, new):
                stack = entry.kernels.pop(old, None)
                if stack:
                    self._slot_kernels.update(stack)
                    entry.kernels[new] = stack + entry.kernels.get(new, [])
                if old in entry.py_kernels:
                    entry.py_kernels.setdefault(new, entry.py_kernels.pop(old))
                entry.invalidate()
                if stack:
                    self._notify("changed", entry)

    def _keyed(self, *keys: str) -> list[OpEntry]:
        """Every op, built, to move kernels under ``keys``: the plugins still waiting load
        only if a backend of theirs is one of ``keys`` (they hold kernels under no other)."""
        for key in keys:
            self.backends.find(key)
        self.ops.build_all(complete=False)
        return list(self.ops.built())

    def unrename_key(self, old: str, new: str) -> None:
        """Undo ``rename_key(old, new)``: the slot's kernels (moved by the rename or
        registered for ``old`` since) go back under ``old``; kernels registered for ``new``
        itself stay there (waiting for a backend of that name)."""
        with self.lock:
            if self._renames.get(old) != new:
                return
            del self._renames[old]
            self._normal_keys.clear()
            for entry in self._keyed(old, new):
                stack = entry.kernels.get(new)
                if not stack:
                    continue
                mine = [k for k in stack if k in self._slot_kernels]
                if not mine:
                    continue
                rest = [k for k in stack if k not in self._slot_kernels]
                entry.kernels[old] = mine
                if rest:
                    entry.kernels[new] = rest
                else:
                    del entry.kernels[new]
                if new in entry.py_kernels:
                    entry.py_kernels.setdefault(old, entry.py_kernels.pop(new))
                entry.invalidate()
                self._notify("changed", entry)
            self._slot_kernels.clear()

    def renamed(self, key: str) -> bool:
        """Whether ``key`` names a renamed slot (``"privateuse1"`` after a rename)."""
        return _WELL_KNOWN_KEYS.get(key, key) in self._renames

    def normalize_key(self, key: str, *, api: str = "impl") -> str:
        """Map a device type, ``"default"`` or a dispatch key name to the table's key."""
        if type(key) is str:
            known = self._normal_keys.get(key)
            if known is not None:
                return known
        if not isinstance(key, str):
            raise ArgumentTypeError(
                f"{api}(): expected a device type or dispatch key name (str), got {key!r}",
                api=api,
                argument="dispatch_key",
                value=key,
            )
        if key == "default":
            return COMPOSITE_EXPLICIT
        if key in ALIAS_KEYS:
            return key
        name = _WELL_KNOWN_KEYS.get(key)
        if name is None:
            backend = self.backends.by_key(key)
            name = backend.name if backend is not None else key
        name = self._renames.get(name, name)
        if name in self.backends._pending:  # its plugin may own the slot: load it first
            self.backends.find(name)
        if not name.isidentifier() or name != name.lower():
            raise UnknownDispatchKeyError(
                f"{api}(): unknown dispatch key {key!r}; expected a device type such as 'cpu' "
                f"or 'cuda', 'default', or one of {', '.join(ALIAS_KEYS[:3])}, "
                f"{', '.join(_WELL_KNOWN_KEYS)}",
                key,
            )
        if name not in self.backends._pending:
            self._normal_keys[key] = name
        return name

    # -- definitions ----------------------------------------------------------------------
    def entry(self, qualname: str) -> OpEntry:
        ensure()
        try:
            return self.ops[qualname]
        except KeyError:
            raise _unknown_op(qualname) from None

    def define(
        self, schema: FunctionSchema, tags: Iterable[Tag] = (), *, origin: Origin | None = None
    ) -> tuple[OpEntry, Handle]:
        tags_t = _checked_tags(tags)
        origin = origin or origin_of()
        ns = schema.qualname.partition("::")[0]
        if ns in self.RESERVED_NAMESPACES:
            ctx = current_plugin.get()
            if ctx is None or not ctx.privileged:
                raise ReservedNamespaceError(
                    f"define(): {ns!r} is a reserved namespace (the core op set); "
                    f"{schema.qualname} at {origin} must use its own namespace",
                    ns,
                )
        entry = OpEntry(schema, tags_t, origin)
        ctx = current_plugin.get()
        entry.declared = ctx is not None and ctx.namespace == ns
        ensure()
        with self.lock:
            old = self.ops.get(entry.qualname)
            if old is not None and party(origin) not in (None, party(old.origin)):
                self._settle_definitions(old, entry)
                old = self.ops.get(entry.qualname)
            rival = self._contested.get((entry.qualname, "define"))
            if old is None and rival is not None and party(origin) and not entry.declared:
                raise RegistrationError(
                    f"define(): {entry.qualname} at {origin} refused: {rival} and others "
                    "defined it too and none of them owns its namespace",
                    op=entry.qualname,
                    existing=rival,
                )
            if old is not None:
                raise RegistrationError(
                    f"define(): operator {entry.qualname} is already defined at {old.origin}; "
                    f"this definition at {origin} conflicts. Use another name or overload name.",
                    op=entry.qualname,
                    existing=str(old.origin),
                )
            self.ops[entry.qualname] = entry
            self._notify("defined", entry)

        def undo() -> None:
            with self.lock:
                if self.ops.get(entry.qualname) is entry:
                    del self.ops[entry.qualname]
                    for slot in [s for s in self._contested if s[0] == entry.qualname]:
                        del self._contested[slot]
                    entry.alive = False
                    entry.invalidate()
                    self._notify("undefined", entry)

        return entry, Handle(undo, f"define {entry.qualname}")

    # -- kernels --------------------------------------------------------------------------
    def add_kernel(
        self,
        qualname: str,
        key: str,
        fn: Callable[..., Any],
        *,
        origin: Origin | None = None,
        with_keyset: bool = False,
        allow_override: bool = False,
        api: str = "impl",
    ) -> Handle:
        if not callable(fn):
            raise ArgumentTypeError(
                f"{api}(): expected a callable kernel for {qualname}, got {fn!r}",
                api=api,
                argument="func",
                value=fn,
            )
        ensure()  # before the lock: never wait for the plugins to load while holding it
        with self.lock:
            queued = self._queue(qualname, key, fn, None, origin, with_keyset, allow_override, api)
            if queued is not None:
                return queued
            origin = origin or origin_of(fn)
            entry = self.entry(qualname)
            slot = self.renamed(key)
            key = self.normalize_key(key, api=api)
            entry = self.entry(qualname)  # again: loading a waiting backend releases the lock
            kernel = Kernel(fn, key, origin, with_keyset, allow_override)
            stack = entry.kernels.setdefault(key, [])
            try:
                if party(origin) is None:
                    at = self._place_user_kernel(entry, key, kernel, api)
                else:
                    kernel, at = self._place_plugin_kernel(entry, key, kernel, api)
            except BaseException:
                if not entry.kernels.get(key):
                    entry.kernels.pop(key, None)
                raise
            stack = entry.kernels.setdefault(key, stack)
            stack.insert(at, kernel)
            if slot:
                self._slot_kernels.add(kernel)
            entry.invalidate()
            self._notify("changed", entry)

        return Handle(self._kernel_undo(entry, kernel), f"{key} kernel of {qualname}", key)

    def _kernel_undo(self, entry: OpEntry, kernel: Kernel) -> Callable[[], None]:
        def undo() -> None:
            with self.lock:
                self._slot_kernels.discard(kernel)
                # under its key, or moved by rename_key / unrename_key
                for key_now, stack in entry.kernels.items():
                    if kernel in stack:
                        stack.remove(kernel)
                        if not stack:
                            del entry.kernels[key_now]
                        entry.invalidate()
                        self._notify("changed", entry)
                        break

        return undo

    def add_kernel_built(
        self,
        qualname: str,
        key: str,
        build: Callable[[OpEntry], Callable[..., Any]],
        *,
        origin: Origin | None = None,
        api: str = "impl",
    ) -> Handle:
        """``add_kernel`` of the kernel ``build(entry)`` makes from the op's entry: made
        when a pending op is built (see ``_op_table``), else now. Without ``origin``, the
        kernel's own definition is its origin."""
        ensure()
        with self.lock:
            queued = self._queue(qualname, key, None, build, origin, False, False, api)
            if queued is not None:
                return queued
            fn = build(self.entry(qualname))
        return self.add_kernel(qualname, key, fn, origin=origin, api=api)

    def add_kernels_lazy(
        self, key: str, makes: Mapping[str, MakeKernel], *, api: str
    ) -> list[Handle]:
        """A privileged plugin's kernels under ``key``, one per op: ``makes[qualname](entry)``
        makes it (with the function whose definition is its origin) the first time anything
        reads it. Kept for a pending op and placed as a :class:`LazyKernel` when the op is
        built; made now otherwise. A kernel whose code tells no place has the registration's
        (the caller's line) as its origin."""
        site = _caller_location()
        ensure()
        handles: list[Handle] = []
        with self.lock:
            at = _credited(site, current_plugin.get())
            try:
                for qualname, make in makes.items():
                    queued = self._queue(
                        qualname, key, None, make, at, False, False, api, lazy=True
                    )
                    if queued is None:  # made now, credited as it would be when read
                        fn, origin = _make_lazily(make, self.entry(qualname), at)
                        queued = self.add_kernel(qualname, key, fn, origin=origin, api=api)
                    handles.append(queued)
            except BaseException:
                for handle in reversed(handles):
                    handle.destroy()
                raise
        return handles

    # -- pending ops (``_op_table``) ------------------------------------------------------
    def define_pending(self, text: str, tags: tuple[Tag, ...]) -> tuple[str, Handle]:
        """Define the op of the full schema ``text`` for a privileged plugin (the core's),
        built on first use (``_op_table``); at once when lazy ops are off, the name is not
        plainly spelled or already taken (the usual checks then speak)."""
        qualname = pending_qualname(text) if self.ops.lazy else None
        ensure()
        with self.lock:
            if qualname is None or qualname in self.ops:
                entry, handle = self.define(parse_schema(text), tags)
                return entry.qualname, handle
            _checked_tags(tags)
            pending = PendingOp(self.ops, qualname, text, tags, origin_of(), current_plugin.get())
            self.ops.pending[qualname] = pending
        return qualname, pending

    def _queue(
        self,
        qualname: str,
        key: str,
        fn: Callable[..., Any] | None,
        build: Callable[[OpEntry], Any] | None,
        origin: Origin | None,
        with_keyset: bool,
        allow_override: bool,
        api: str,
        *,
        lazy: bool = False,
    ) -> Handle | None:
        """Keep a plugin's kernel for a pending op when it is the first for its slot and no
        override (placing it later cannot differ from placing it now); else None. The
        origin of a plain function is worked out when it is placed (it only needs the
        function and the plugin); ``lazy``: ``build`` is a ``MakeKernel``, run on first
        use of the placed kernel."""
        pending = self.ops.pending.get(qualname)
        if pending is None or pending.building or allow_override:
            return None
        ctx = current_plugin.get()
        if origin is None:
            if ctx is None:
                return None
            if fn is not None and type(fn) is not FunctionType:
                origin = origin_of(fn)
        elif party(origin) is None:
            return None
        slot = self.renamed(key)
        key = self.normalize_key(key, api=api)
        if self.ops.pending.get(qualname) is not pending or pending.building:
            return None  # built meanwhile (loading a waiting backend released the lock)
        if key in pending.kernels:
            return None  # a second claim: built now, the usual checks decide
        queued = QueuedKernel(pending, key, fn, build, origin, ctx, with_keyset, slot, api, lazy)
        pending.kernels[key] = queued
        return queued

    def _build(self, pending: PendingOp) -> OpEntry | None:
        """Build a pending op: parse and define it as its plugin, then place its kept
        kernels in registration order. None when it was undone meanwhile. Other threads
        see the op only once it is complete (``_op_table``: it is staged until then)."""
        with self.lock:
            qualname = pending.qualname
            if self.ops.pending.get(qualname) is not pending:
                return dict.get(self.ops, qualname)  # built by another thread, or undone
            if pending.building:  # asked again while this thread builds it
                return self.ops.staged.get(qualname)
            pending.building = True
            token = current_plugin.set(pending.ctx)
            try:
                entry, pending.handle = self.define(
                    parse_schema(pending.text), pending.tags, origin=pending.origin
                )
                if entry.qualname != qualname:
                    raise RegistrationError(
                        f"oplib internal error: schema {pending.text!r} was kept as "
                        f"{qualname!r} but defines {entry.qualname!r}",
                        op=qualname,
                    )
                for queued in pending.kernels.values():
                    current_plugin.set(queued.ctx)  # the kernel's plugin, while it is made
                    kernel: Kernel
                    if queued.lazy:
                        at = queued.origin
                        assert at is not None, "a lazy kernel is kept with its registration site"
                        make = functools.partial(_make_lazily, queued.build, entry, at)
                        kernel = LazyKernel(make, queued.key, queued.with_keyset)
                    else:
                        fn = queued.kernel_fn(entry)
                        origin = queued.origin or origin_of(fn)
                        kernel = Kernel(fn, queued.key, origin, queued.with_keyset)
                    entry.kernels[queued.key] = [kernel]
                    if queued.slot:
                        self._slot_kernels.add(kernel)
                    queued.real = Handle(self._kernel_undo(entry, kernel), "")
            except BaseException:
                self._unbuild(pending)
                raise
            finally:
                current_plugin.reset(token)
            if pending.kernels:
                entry.invalidate()
                self._notify("changed", entry)
            return self.ops.publish(pending)

    def _unbuild(self, pending: PendingOp) -> None:
        """Undo a build that did not finish: the op is pending again, as before it."""
        for queued in pending.kernels.values():
            if queued.real is not None:
                queued.real.destroy()
                queued.real = None
        if pending.handle is not None:
            pending.handle.destroy()  # (finds the staged entry: still building)
            pending.handle = None
        self.ops.staged.pop(pending.qualname, None)
        pending.building = False

    def forget_plugins(self, plugins: set[str]) -> None:
        """Remove the definitions and kernels credited to ``plugins`` (built ops, and core
        ops defined but not built yet, with the kernels kept for them) that no handle
        undoes any more: in a forked child, a registration another thread had under way
        (done, its handle not yet handed to the plugin) when the process forked, once the
        plugin's load was rolled back; the child's ``_unbuild_after_fork`` has undone any
        build under way first. (A ``LazyKernel`` is the core's, and is never made here.)"""
        ops: OpTable | None = self.__dict__.get("ops")
        if ops is None:  # never filled (reading it would fill it, loading the plugins)
            return
        with self.lock:
            pending = ops.pending
            for qualname, op in _builtin_list(pending.items()):
                if op.origin.plugin in plugins:
                    del pending[qualname]  # defined, not built yet: nothing else knows it
                    continue
                for key, queued in _builtin_list(op.kernels.items()):
                    if queued.ctx is not None and queued.ctx.plugin in plugins:
                        del op.kernels[key]  # a kernel kept for it until it is built
            for entry in _builtin_list(ops.built()):
                if entry.origin.plugin in plugins:
                    del ops[entry.qualname]
                    entry.alive = False
                    entry.invalidate()
                    self._notify("undefined", entry)
                    continue
                for key, stack in _builtin_list(entry.kernels.items()):
                    kept = [
                        k
                        for k in stack
                        if isinstance(k, LazyKernel) or k.origin.plugin not in plugins
                    ]
                    if len(kept) == len(stack):
                        continue
                    if kept:
                        entry.kernels[key] = kept
                    else:
                        del entry.kernels[key]
                    entry.invalidate()
                    self._notify("changed", entry)

    def _settle_definitions(self, old: OpEntry, new: OpEntry) -> None:
        """Two plugins define one operator: the one whose entry point is named after the
        namespace keeps it (the other's plugin fails); neither or both: both fail (and any
        later claimant), whatever the order."""
        slot = (new.qualname, "define")
        if party(old.origin) is None:
            return  # defined by user code: an ordinary conflict
        if old.declared and not new.declared:
            return
        if new.declared and not old.declared:
            self._evict_definer(old, new)
            return
        self._evict_definer(old, new)
        self._contested[slot] = str(old.origin)  # after: the eviction undefines the op
        raise RegistrationError(
            f"define(): {new.qualname} is defined by {party(new.origin)} (at {new.origin}) "
            f"and by {party(old.origin)} (at {old.origin}); neither owns the namespace "
            f"{new.schema.namespace!r} (an oplib entry point of that name declares it): "
            "both are refused",
            op=new.qualname,
            existing=str(old.origin),
        )

    def _evict_definer(self, old: OpEntry, by: OpEntry) -> None:
        self._fail_plugin(
            old.origin,
            f"define(): {old.qualname} at {old.origin} is also defined by "
            f"{party(by.origin)} at {by.origin}",
            old.qualname,
            by.origin,
        )

    def _fail_plugin(self, victim: Origin, message: str, op: str, by: Origin) -> None:
        """Fail the plugin that registered at ``victim`` (all of it is rolled back)."""
        if self.evict is not None and victim.plugin is not None:
            self.evict(victim.plugin, RegistrationError(message, op=op, existing=str(by)))

    def _conflict(
        self, entry: OpEntry, key: str, current: Kernel, origin: Origin, api: str
    ) -> RegistrationError:
        what = "a fake kernel" if key == FAKE else f"a kernel for {key!r}"
        if key == AUTOGRAD:
            what = "an autograd formula"
        return RegistrationError(
            f"{api}(): {entry.qualname} already has {what} registered at {current.origin}; "
            f"the one at {origin} conflicts. Remove the earlier registration (or destroy "
            "its Library), or pass allow_override=True to replace it.",
            op=entry.qualname,
            existing=str(current.origin),
        )

    def _place_user_kernel(self, entry: OpEntry, key: str, kernel: Kernel, api: str) -> int:
        """Where a kernel registered by code that is not a plugin goes: on top, replacing
        the current one only with ``allow_override=True`` (as torch)."""
        current = entry.kernel(key)
        if current is not None and not kernel.allow_override:
            raise self._conflict(entry, key, current, kernel.origin, api)
        return len(entry.kernels[key])

    def _place_plugin_kernel(
        self, entry: OpEntry, key: str, kernel: Kernel, api: str
    ) -> tuple[Kernel, int]:
        """Where a plugin's kernel goes, decided by ownership, never by who came first:
        the owner's kernel always goes in (beneath allowed overrides), evicting the plugin
        of a non-owner's kernel; a non-owner's is refused where the owner's or anyone
        else's is; two non-owners claiming one slot are both refused; overriding a kernel
        someone else owns needs the user's leave (``OPLIB_ALLOW_OVERRIDE``)."""
        who = party(kernel.origin)
        owner = owner_of(entry.qualname, entry.origin, key, self.backends)
        stack = entry.kernels[key]
        slot = (entry.qualname, key)
        if kernel.allow_override:
            victim = owner if owner not in (None, who) else None
            if victim is None:
                victim = next(
                    (p for k in reversed(stack) if (p := party(k.origin)) not in (None, who)),
                    None,
                )
            if victim is None:
                return kernel, len(stack)
            if not override_allowed(str(who)):
                raise RegistrationError(
                    f"{api}(): {who} may not override the {key!r} kernel of {entry.qualname}, "
                    f"which belongs to {victim}; the override at {kernel.origin} was refused. "
                    f"To allow it, set OPLIB_ALLOW_OVERRIDE={_plain(str(who))}",
                    op=entry.qualname,
                    existing=str(stack[-1].origin) if stack else None,
                )
            warnings.warn(
                f"oplib: {who} overrides the {key!r} kernel of {entry.qualname} owned by "
                f"{victim} (allowed by OPLIB_ALLOW_OVERRIDE); registered at {kernel.origin}",
                OverrideWarning,
                stacklevel=2,
            )
            return kernel._replace(overrides=victim), len(stack)
        if who == owner:
            for k in _builtin_list(stack):
                if not k.allow_override and party(k.origin) not in (None, who):
                    self._evict(k, entry, key, kernel)
            stack = entry.kernels.setdefault(key, stack)
            for k in stack:
                if not k.allow_override:
                    raise self._conflict(entry, key, k, kernel.origin, api)
            return kernel, 0  # beneath any allowed override
        current = entry.kernel(key)
        if current is None:
            rival = self._contested.get(slot)
            if rival is not None:
                raise RegistrationError(
                    f"{api}(): {entry.qualname} {key!r} kernel at {kernel.origin} refused: "
                    f"{rival} and others already claimed it and none of them owns it "
                    f"(owner: {owner or 'nobody'})",
                    op=entry.qualname,
                    existing=rival,
                )
            return kernel, 0
        rival_party = party(current.origin)
        if rival_party not in (None, who, owner) and not current.allow_override:
            self._evict(current, entry, key, kernel)
            self._contested[slot] = str(current.origin)
            raise RegistrationError(
                f"{api}(): {entry.qualname} {key!r} kernel: {who} (at {kernel.origin}) and "
                f"{rival_party} (at {current.origin}) both claim it and neither owns it "
                f"(owner: {owner or 'nobody'}); both are refused",
                op=entry.qualname,
                existing=str(current.origin),
            )
        err = self._conflict(entry, key, current, kernel.origin, api)
        if owner is not None and rival_party == owner:
            err.args = (f"{err.args[0]} ({owner} owns it; {who} does not)",)
        raise err

    def _evict(self, victim: Kernel, entry: OpEntry, key: str, by: Kernel) -> None:
        self._fail_plugin(
            victim.origin,
            f"the {key!r} kernel of {entry.qualname} registered at {victim.origin} "
            f"belongs to {owner_of(entry.qualname, entry.origin, key, self.backends)}, "
            f"which registered its own at {by.origin}",
            entry.qualname,
            by.origin,
        )

    def add_py_kernel(self, qualname: str, key: Any, fn: Callable[..., Any]) -> Handle:
        ensure()  # before the lock (see add_kernel)
        with self.lock:
            entry = self.entry(qualname)
            if key in entry.py_kernels:
                raise RegistrationError(
                    f"py_impl(): {qualname} already has a Python kernel for {key!r}", op=qualname
                )
            entry.py_kernels[key] = fn
            entry.invalidate()

        def undo() -> None:
            with self.lock:
                key_now = self._renames.get(key, key) if isinstance(key, str) else key
                if entry.py_kernels.get(key_now) is fn:
                    del entry.py_kernels[key_now]
                    entry.invalidate()

        return Handle(undo, f"py_impl {key!r} of {qualname}")

    # -- introspection --------------------------------------------------------------------
    def kernel_status(self, key: str) -> str:
        """``"live"`` when the key's backend is installed (or it is an alias key), else
        ``"waiting"`` (kept until that backend registers)."""
        if key in ALIAS_KEYS or self.backends.find(key) is not None:
            return "live"
        return "waiting"

    def ops_with_kernels_for(self, backend: str) -> int:
        ensure()
        with self.lock:
            built = sum(1 for e in self.ops.built() if e.has_kernel(backend))
            return built + sum(1 for p in self.ops.pending.values() if backend in p.kernels)


REGISTRY = deferred(Registry)()


def op_named(qualname: str) -> Any:
    """The overload (an ``OpOverload``, callable) registered as ``qualname``, the table's
    key: ``"ns::op"`` for a default overload, ``"ns::op.overload"`` for another; a pending
    op is built, a waiting plugin loaded. The core's one answer to "the op by name": every
    module that calls an op it knows by name asks here, and the public ``oplib.lookup``
    (which takes every spelling a user writes) ends here for a name.

    Raises :class:`UnknownOperatorError` when no operator is registered as ``qualname``.
    """
    try:
        return REGISTRY.ops[qualname].overload
    except KeyError:
        raise _unknown_op(qualname) from None


def _unknown_op(qualname: str) -> UnknownOperatorError:
    """The error for an operator name nothing defines (``entry``, ``op_named``)."""
    return UnknownOperatorError(
        f"operator {qualname!r} does not exist; define it first "
        f"(oplib.define({qualname!r}, '(...) -> ...'))",
        op=qualname,
    )


def _unbuild_after_fork(me: int) -> None:
    # In a forked child, an op another thread was building stays half-built: undo it.
    ops: OpTable | None = REGISTRY.__dict__.get("ops")
    for pending in _builtin_list(ops.pending.values()) if ops is not None else ():
        if pending.building:
            REGISTRY._unbuild(pending)


at_fork(_unbuild_after_fork)
