"""The registry's table of operators, in which the core op set is built on first use.

Defining an operator parses its schema and builds its dispatcher; placing a kernel checks
ownership and tells every cache above. For the ~150 core ops and the ~900 kernels the
installed backends give them, that was most of the first op call of a program, which uses a
handful of them. So the core plugin's definitions are kept as their schema text
(:class:`PendingOp`), the kernels plugins register for such an op are kept in registration
order (:class:`QueuedKernel`), and the op is built (parsed, defined, its kernels placed)
the first time anything reads it:

* a lookup by name (``table[q]``, ``table.get(q)``) builds that op;
* reading the table as a whole (iterating it, ``keys()``, ``values()``, ``items()``)
  builds them all (and loads the plugins still waiting for their backends, see
  ``_backend_cache``); ``len`` and ``in`` count pending ops without building them.

Nothing observable differs from defining them at once: a kernel is only kept while its
(op, key) slot holds no other kernel and it is not an override, so placing it later gives
the same stack as placing it now would have; any other registration for the op builds it
first and goes the usual way (with its conflict checks). Only the core's own definitions
wait (their schemas are tested; a third party's bad schema must fail its plugin at load).
``OPLIB_LAZY_OPS=0`` builds every op at definition.

Threads read the table without the lock, so an op is published only once complete: it is
built under the registration lock, its definition is *staged* (seen only by the thread
building it, whose listeners and kernel placement read it) until its kernels are placed
and its listeners have run, then it enters the table, and only then does its pending
record go. A reader that finds neither an entry nor a record (a build that was finishing)
reads again under the lock.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, ValuesView
from typing import TYPE_CHECKING, Any

from .._discovery import switched_on
from .handle import Handle
from .startup import LOCK

if TYPE_CHECKING:
    from .._tags import Tag
    from .entry import OpEntry, Origin, PluginContext

__all__ = ["OpTable", "PendingOp", "QueuedKernel", "lazy_ops_enabled", "pending_qualname"]


def lazy_ops_enabled() -> bool:
    """Whether the core ops wait to be built until first use (``OPLIB_LAZY_OPS``, default
    on)."""
    return switched_on("OPLIB_LAZY_OPS")


def pending_qualname(text: str) -> str | None:
    """The registry name (``ns::name`` or ``ns::name.overload``) of the full schema
    ``text``, read without parsing it; None when it is not plainly spelled (the schema is
    then parsed at once, and the parser says what is wrong)."""
    head = text.partition("(")[0].strip()
    ns, sep, rest = head.partition("::")
    name, dot, overload = rest.partition(".")
    if not (sep and ns.isidentifier() and name.isidentifier()):
        return None
    if dot and (not overload.isidentifier() or overload == "default"):
        return None
    if ns.startswith("__") or name.startswith("__") or overload.startswith("__"):
        return None
    return head


def _live() -> None:
    """The ``_undo`` of an active pending handle (they undo through ``_drop``)."""


class _PendingHandle(Handle):
    """A pending record that is also the handle of its registration: ``destroy`` runs
    ``_drop`` once, under the registration lock (no undo closure per record: there are
    about a thousand of them, freed at exit)."""

    __slots__ = ()

    def __init__(self, description: str, key: str | None = None) -> None:
        super().__init__(_live, description, key)

    def destroy(self) -> None:
        with LOCK:
            if self._undo is None:
                return
            self._undo = None
            self._drop()

    def _drop(self) -> None:
        raise NotImplementedError


class QueuedKernel(_PendingHandle):
    """A plugin's kernel for a pending op, placed when the op is built; also the handle
    of its registration. ``build`` makes the kernel from the built op's entry (an
    autograd formula needs the op's schema)."""

    __slots__ = (
        "api",
        "build",
        "ctx",
        "fn",
        "lazy",
        "origin",
        "pending",
        "real",
        "slot",
        "with_keyset",
    )

    def __init__(
        self,
        pending: PendingOp,
        key: str,
        fn: Callable[..., Any] | None,
        build: Callable[[OpEntry], Callable[..., Any]] | None,
        origin: Origin | None,
        ctx: PluginContext | None,
        with_keyset: bool,
        slot: bool,
        api: str,
        lazy: bool = False,
    ) -> None:
        super().__init__(f"{key} kernel of {pending.qualname}", key)
        self.pending = pending
        self.key: str = key
        self.fn = fn
        self.build = build
        #: None: the kernel's definition, with ``ctx``'s plugin (worked out when placed).
        self.origin = origin
        self.ctx = ctx
        self.with_keyset = with_keyset
        self.slot = slot
        self.api = api
        #: Placed as a ``LazyKernel``: ``build`` makes it (and its origin) on first use.
        self.lazy = lazy
        #: The registry's handle of the placed kernel, once the op is built.
        self.real: Handle | None = None

    def kernel_fn(self, entry: OpEntry) -> Callable[..., Any]:
        """The kernel to place in the built op ``entry``."""
        if self.build is not None:
            return self.build(entry)
        assert self.fn is not None, "a kept kernel has a function or a builder"
        return self.fn

    def _drop(self) -> None:
        if self.real is not None:
            self.real.destroy()
        elif self.pending.kernels.get(self.key) is self:
            del self.pending.kernels[self.key]


class PendingOp(_PendingHandle):
    """A core op defined but not built yet: its schema text, tags, where it was defined
    and by which plugin, and the kernels registered for it meanwhile; also the handle of
    its definition."""

    __slots__ = (
        "base",
        "building",
        "ctx",
        "handle",
        "kernels",
        "origin",
        "qualname",
        "table",
        "tags",
        "text",
    )

    def __init__(
        self,
        table: OpTable,
        qualname: str,
        text: str,
        tags: tuple[Tag, ...],
        origin: Origin,
        ctx: PluginContext | None,
    ) -> None:
        super().__init__(f"define {qualname}")
        self.table = table
        self.qualname = qualname
        self.base = qualname.partition(".")[0]  # the packet's name, "ns::name"
        self.text = text
        self.tags = tags
        self.origin = origin
        self.ctx = ctx
        #: Keyed by dispatch key: a slot holds one kept kernel at most.
        self.kernels: dict[str, QueuedKernel] = {}
        #: The registry's handle of the definition, once built.
        self.handle: Handle | None = None
        #: Being built (by the thread holding the lock): its entry is staged meanwhile.
        self.building = False

    def _drop(self) -> None:
        if self.table.pending.get(self.qualname) is self:
            del self.table.pending[self.qualname]
        elif self.handle is not None:
            self.handle.destroy()


class OpTable(dict[str, "OpEntry"]):
    """``qualname -> OpEntry`` of the built ops, plus the pending ones (``pending``), which
    any read builds (see the module docstring). ``build(pending)`` is the registry's."""

    def __init__(self, build: Callable[[PendingOp], OpEntry | None]) -> None:
        super().__init__()
        self.pending: dict[str, PendingOp] = {}
        self._build = build
        #: ``OPLIB_LAZY_OPS``, read when the table is made (as the plugins load).
        self.lazy = lazy_ops_enabled()
        #: Operators of plugins that wait for first use (``_backend_cache``): name ->
        #: the function loading the plugin, which defines it.
        self.waiting: dict[str, Callable[[], object]] = {}
        #: Called before the table is read whole: loads the plugins still waiting for
        #: their backends (``_backend_cache``), whose kernels a whole read must show.
        self.complete: Callable[[], object] = lambda: None
        #: The entries of ops being built, not published yet: read only by the thread
        #: building them (it holds the lock; any other thread waits for it).
        self.staged: dict[str, OpEntry] = {}

    # -- one op -----------------------------------------------------------------------
    def __missing__(self, qualname: str) -> OpEntry:
        entry = self._made(qualname)
        if entry is None:  # (or undone by another thread meanwhile)
            raise KeyError(qualname)
        return entry

    def get(self, qualname: str, default: Any = None) -> Any:
        entry = dict.get(self, qualname)
        if entry is not None:
            return entry
        entry = self._made(qualname)
        return default if entry is None else entry

    def _made(self, qualname: str) -> OpEntry | None:
        """The op ``qualname`` once built, or defined by its waiting plugin; None if none."""
        pending = self.pending.get(qualname)
        if pending is None and qualname not in self.waiting:
            with LOCK:  # a miss: another thread may have been publishing it
                entry = dict.get(self, qualname)
                if entry is not None:
                    return entry
                pending = self.pending.get(qualname)
                if pending is None:
                    return None
        if pending is not None:
            return self._build(pending)  # (waits for a build in progress elsewhere)
        load = self.waiting.get(qualname)
        if load is None:  # its plugin loaded meanwhile
            built: OpEntry | None = self.get(qualname)
            return built
        load()  # (a no-op in the thread loading it: its own definition asks)
        return dict.get(self, qualname)

    def __setitem__(self, qualname: str, entry: OpEntry) -> None:
        pending = self.pending.get(qualname)
        if pending is not None and pending.building:
            self.staged[qualname] = entry  # published by the build, once complete
        else:
            dict.__setitem__(self, qualname, entry)

    def __delitem__(self, qualname: str) -> None:
        if self.staged.pop(qualname, None) is None:
            dict.__delitem__(self, qualname)

    def publish(self, pending: PendingOp) -> OpEntry:
        """Make the staged entry of ``pending`` (complete now) the table's, and drop the
        record (in this order: a reader always finds one of the two)."""
        entry = self.staged.pop(pending.qualname)
        dict.__setitem__(self, pending.qualname, entry)
        pending.building = False
        del self.pending[pending.qualname]
        return entry

    def __contains__(self, qualname: object) -> bool:
        return (
            dict.__contains__(self, qualname)
            or qualname in self.pending
            or qualname in self.waiting
        )

    def named(self, base: str) -> list[OpEntry]:
        """The overloads of ``ns::name`` (its packet), built (with an op being built, to the
        thread building it)."""
        for pending in [p for p in self.pending.values() if p.base == base]:
            self.get(pending.qualname)
        for qualname in [q for q in self.waiting if q.partition(".")[0] == base]:
            self.get(qualname)
        entries = list(dict.values(self))
        if self.staged and LOCK._is_owned():  # type: ignore[attr-defined]
            entries += self.staged.values()
        return [e for e in entries if e.schema.qualname == base]

    # -- the whole table ----------------------------------------------------------------
    def names(self) -> set[str]:
        """Every op's qualname, built or not (nothing is built, no plugin loads)."""
        return set(dict.keys(self)) | set(self.pending) | set(self.waiting)

    def built(self) -> ValuesView[OpEntry]:
        """The ops built so far (caches only exist for these)."""
        return dict.values(self)

    def build_all(self, *, complete: bool = True) -> None:
        """Build every pending op; with ``complete``, load the waiting plugins first."""
        if complete:
            self.complete()
        mine = LOCK._is_owned()  # type: ignore[attr-defined]  # (then no other thread builds)
        while todo := [q for q, p in self.pending.items() if not (p.building and mine)]:
            for qualname in todo:  # (an op this thread is building stays staged)
                self.get(qualname)

    def __iter__(self) -> Iterator[str]:
        self.build_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        return dict.__len__(self) + len(self.pending) + len(self.waiting)

    def keys(self) -> KeysView[str]:  # type: ignore[override]
        self.build_all()
        return dict.keys(self)

    def values(self) -> ValuesView[OpEntry]:  # type: ignore[override]
        self.build_all()
        return dict.values(self)

    def items(self) -> ItemsView[str, OpEntry]:  # type: ignore[override]
        self.build_all()
        return dict.items(self)
