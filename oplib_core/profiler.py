"""Where time goes across ops and backends (as ``torch.profiler``).

``with oplib.profile() as prof:`` records every operator call made in this thread while
the block runs: the op and overload, the dispatch key and backend that served it, where
that kernel was registered, the wall time, the input shapes and dtypes, which call it ran
inside and the thread; and every autograd backward node run in the block. Then
``print(prof.table())`` shows per op and backend counts and total/self time, and
``prof.export_chrome_trace("trace.json")`` writes a trace that Perfetto
(https://ui.perfetto.dev) and ``chrome://tracing`` open.

The profiler is a dispatch mode (``oplib.DispatchMode``): while no profile is active it
costs nothing. Calls made inside a kernel are recorded nested in the call that made
them. Dispatch modes belong to a thread, so a profile records the threads it is entered
in: a profile may be entered in several threads at once (``with prof:`` in each worker),
and each thread's calls nest separately. Modes see calls innermost first: under a mode
entered before the profile (``with FakeTensorMode(): with oplib.profile():``) calls are
recorded with that mode's class name as their key (backend None), and what the mode does
inside them is not broken down; a mode entered inside the profile handles calls before
it, and the profile records only the calls that mode makes or passes on.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from threading import get_ident
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from ._dispatch import MODES, DispatchMode
from ._higher_order._operator import HigherOrderOperator
from ._higher_order._pytree import leaves
from ._registry.entry import Origin
from ._tensor.tensor import Tensor
from .autograd import _engine
from .backends import TABLE

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._dispatch import OpOverload, Plan
    from .autograd._engine import Node

__all__ = ["Event", "OpStats", "profile", "profile_script"]

_SORT_KEYS = ("total", "self", "count", "name")


class Event:
    """One recorded call: an op call (``kind == "op"``) or a backward node (``"backward"``).

    ``name`` (``"ns::op"`` or the node's name), ``overload``, ``key`` (the dispatch key
    whose kernel ran: ``"CPU"``, ``"Autograd"``, ``"CompositeImplicitAutograd"``... or an
    outer mode's class name), ``backend`` (None when not known), ``origin`` (where that
    kernel was registered, or None), ``start_ns``/``end_ns`` (``time.perf_counter_ns``),
    ``shapes``/``dtypes`` (of the array inputs, in order), ``thread`` (the thread's
    ``get_ident()``), ``parent`` (the event this one ran inside, or None) and
    ``child_ns`` (time spent in events directly inside this one).
    """

    __slots__ = (
        "_dtypes",
        "backend",
        "child_ns",
        "end_ns",
        "key",
        "kind",
        "name",
        "origin",
        "overload",
        "parent",
        "shapes",
        "start_ns",
        "thread",
    )

    def __init__(
        self,
        kind: str,
        name: str,
        overload: str,
        parent: Event | None,
        thread: int,
        key: str = "",
        backend: str | None = None,
        origin: str | None = None,
        shapes: tuple[tuple[int, ...], ...] = (),
        dtypes: tuple[Any, ...] = (),
    ) -> None:
        self.kind = kind
        self.name = name
        self.overload = overload
        self.parent = parent
        self.thread = thread
        self.key = key
        self.backend = backend
        self.origin = origin
        self.shapes = shapes
        self._dtypes = dtypes
        self.start_ns = 0
        self.end_ns = 0
        self.child_ns = 0

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtype names of the array inputs, in order."""
        return tuple(str(d) for d in self._dtypes)

    @property
    def duration_ns(self) -> int:
        """Wall time of the call, children included."""
        return self.end_ns - self.start_ns

    @property
    def self_ns(self) -> int:
        """Wall time of the call minus the calls directly inside it."""
        return self.end_ns - self.start_ns - self.child_ns

    def __repr__(self) -> str:
        return (
            f"<Event {self.kind} {self.name} key={self.key} backend={self.backend} "
            f"{self.duration_ns / 1e3:.1f} us>"
        )


class OpStats:
    """Totals for one (name, backend) row of ``profile.table()``: ``name``, ``backend``,
    ``kind``, ``count``, ``total_ns`` (children included), ``self_ns``."""

    __slots__ = ("backend", "count", "kind", "name", "self_ns", "total_ns")

    def __init__(self, name: str, backend: str | None, kind: str) -> None:
        self.name = name
        self.backend = backend
        self.kind = kind
        self.count = 0
        self.total_ns = 0
        self.self_ns = 0

    def __repr__(self) -> str:
        return (
            f"<OpStats {self.name} backend={self.backend} count={self.count} "
            f"total={self.total_ns / 1e3:.1f} us self={self.self_ns / 1e3:.1f} us>"
        )


class _Open(threading.local):
    """This thread's open events of one profile, innermost last."""

    def __init__(self) -> None:
        self.stack: list[Event] = []


# Profiles active in any thread: the autograd engine's node hook is set while there are.
_ACTIVE_PROFILES = [0]
_HOOK_LOCK = threading.Lock()


def _time_node(node: Node, grads: list[Any]) -> Sequence[Any]:
    """The autograd engine's node hook: run ``node`` as a timed event of this thread's
    innermost profile (untimed when this thread has none)."""
    for mode in reversed(MODES.stack):
        if type(mode) is profile:
            return mode._node(node, grads)
    return node._apply(grads)


def _inputs(found: list[Any]) -> tuple[tuple[tuple[int, ...], ...], tuple[Any, ...]]:
    # dtypes stay objects here (``str`` of a dtype costs a microsecond): ``Event.dtypes``
    # turns them into names when read.
    return tuple([f[1].shape for f in found]), tuple([f[1].dtype for f in found])


def _origin_text(op: OpOverload, key: str) -> str | None:
    if op.py_kernel(key) is not None:
        return "py_impl"
    k = op.kernel(key)
    if k is None:
        return None
    origin = k.origin
    return str(origin) if isinstance(origin, Origin) else None


class profile(DispatchMode):
    """Record operator calls and backward nodes while active (``with oplib.profile() as
    prof:``); see the module's documentation. ``record_shapes=False`` skips the input
    shapes and dtypes. ``events()`` lists what was recorded, ``key_averages()`` the
    per op and backend totals, ``table()`` prints them, ``export_chrome_trace(path)``
    writes the trace."""

    def __init__(self, *, record_shapes: bool = True) -> None:
        self.record_shapes = record_shapes
        self._events: list[Event] = []
        self._open = _Open()
        self._origins: dict[tuple[OpOverload, str], str | None] = {}
        # cached kernel -> (name, overload, key, backend, origin) of the calls it serves
        self._fast: dict[Any, tuple[str, str, str, str | None, str | None]] = {}
        self._threads: dict[int, str] = {}
        self._t0 = perf_counter_ns()

    def __repr__(self) -> str:
        return f"<oplib.profile: {len(self._events)} events>"

    # -- entering and leaving ---------------------------------------------------------------
    def __enter__(self) -> Self:
        t = threading.current_thread()
        self._threads.setdefault(t.ident or 0, t.name)
        with _HOOK_LOCK:
            _ACTIVE_PROFILES[0] += 1
            _engine.NODE_HOOK[0] = _time_node
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)  # raises, leaving the profile active, when out of order
        with _HOOK_LOCK:
            _ACTIVE_PROFILES[0] -= 1
            if not _ACTIVE_PROFILES[0]:
                _engine.NODE_HOOK[0] = None

    # -- recording ----------------------------------------------------------------------------
    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        modes = MODES.stack  # this profile is off it while we are here
        opened = self._open.stack
        parent = opened[-1] if opened else None
        if isinstance(op, HigherOrderOperator):
            return self._higher_order(op, args, kwargs, parent, opened, modes)
        if modes:
            # An outer mode decides how the call runs: record it as that mode's call.
            event = Event("op", *self._names(op), parent, get_ident())
            event.key = type(modes[-1]).__name__
            return self._timed(event, opened, op, args, kwargs)
        route = op.route(args, kwargs)
        if route is None:  # what the fast path does not serve: plan it, as the slow path
            return self._planned(op, args, kwargs, parent, opened)
        # Complicated for speed (budget: 2 us per call): a call the fast path serves runs
        # through it; what dispatch chose for its cached kernel is planned once.
        run, bargs, kernel, key_pos = route
        info = self._fast.get(kernel)
        if info is None:
            plan = op.plan_call(args, kwargs)
            info = self._fast[kernel] = (*self._names(op), *self._chosen(op, plan))
        if self.record_shapes:
            shapes = []
            dtypes = []
            for i in key_pos:
                a = bargs[i]
                if type(a) is Tensor:
                    a = a._data
                shapes.append(a.shape)
                dtypes.append(a.dtype)
            event = Event(
                "op",
                info[0],
                info[1],
                parent,
                get_ident(),
                info[2],
                info[3],
                info[4],
                tuple(shapes),
                tuple(dtypes),
            )
        else:
            event = Event("op", info[0], info[1], parent, get_ident(), info[2], info[3], info[4])
        self._events.append(event)
        opened.append(event)
        # Back on the stack while the kernel runs, so the calls it makes are recorded too.
        MODES.push(self)
        event.start_ns = perf_counter_ns()
        try:
            return run(*bargs)
        finally:
            self._close(event, opened)
            MODES.pop()

    def _planned(
        self,
        op: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent: Event | None,
        opened: list[Event],
    ) -> Any:
        plan = op.plan_call(args, kwargs)
        key, backend, origin = self._chosen(op, plan)
        event = Event("op", *self._names(op), parent, get_ident(), key, backend, origin)
        call = plan.placement
        if call is not None and self.record_shapes:
            event.shapes, event._dtypes = _inputs(call.found)
        MODES.push(self)
        try:  # run as the slow path runs it (calls of the fast path's shape fill its caches)
            return self._timed(event, opened, op.run_plan, (plan,), {})
        finally:
            MODES.pop()

    def _higher_order(
        self,
        op: HigherOrderOperator,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent: Event | None,
        opened: list[Event],
        modes: tuple[DispatchMode, ...],
    ) -> Any:
        """A higher-order operator's call: recorded with the handler its dispatch chooses,
        then run below this profile; the functions among its arguments run under the
        profile again (the operator wraps them), so their op calls nest inside it."""
        event = Event("op", op.qualname, "", parent, get_ident())
        if modes:
            event.key = type(modes[-1]).__name__
        else:
            d = op.decide(args, kwargs)
            event.backend = d.backend.name
            chosen = [s for s in d.steps if s[1] is not None]
            if chosen:
                event.key = str(chosen[-1][0])
                k = op.handler(chosen[-1][0])
                event.origin = None if k is None else str(k.origin)
        if self.record_shapes:
            data = [v._data if type(v) is Tensor else v for v in leaves((args, kwargs))]
            arrays = [a for a in data if TABLE.for_type(type(a)) is not None]
            event.shapes = tuple(tuple(a.shape) for a in arrays)
            event._dtypes = tuple(a.dtype for a in arrays)
        return self._timed(event, opened, op, args, kwargs)

    def _timed(
        self,
        event: Event,
        opened: list[Event],
        fn: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        self._events.append(event)
        opened.append(event)
        event.start_ns = perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._close(event, opened)

    @staticmethod
    def _names(op: OpOverload) -> tuple[str, str]:
        return op.name().partition(".")[0], op._overloadname

    def _chosen(self, op: OpOverload, plan: Plan) -> tuple[str, str | None, str | None]:
        """(key, backend, origin of the kernel) of a plan."""
        key = plan.key
        backend = plan.backend.name if plan.backend is not None else None
        if key is None:
            return "", backend, None
        found = (op, key)
        try:
            origin = self._origins[found]
        except KeyError:
            origin = self._origins[found] = _origin_text(op, key)
        return key, backend, origin

    def _node(self, node: Node, grads: list[Any]) -> Sequence[Any]:
        opened = self._open.stack
        parent = opened[-1] if opened else None
        event = Event("backward", node.name(), "", parent, get_ident(), "Autograd")
        self._events.append(event)
        opened.append(event)
        event.start_ns = perf_counter_ns()
        try:
            return node._apply(grads)
        finally:
            self._close(event, opened)

    @staticmethod
    def _close(event: Event, opened: list[Event]) -> None:
        event.end_ns = end = perf_counter_ns()
        opened.pop()
        parent = event.parent
        if parent is not None:
            parent.child_ns += end - event.start_ns

    # -- results ------------------------------------------------------------------------------
    def events(self) -> list[Event]:
        """The recorded events in the order the calls started (finished calls only while
        the profile is still active)."""
        return [e for e in self._events if e.end_ns]

    def key_averages(self) -> list[OpStats]:
        """Totals per (name, backend), in first-call order."""
        rows: dict[tuple[str, str | None], OpStats] = {}
        for e in self.events():
            row = rows.get((e.name, e.backend))
            if row is None:
                row = rows[e.name, e.backend] = OpStats(e.name, e.backend, e.kind)
            row.count += 1
            row.total_ns += e.duration_ns
            row.self_ns += e.self_ns
        return list(rows.values())

    def table(self, sort_by: str = "total", row_limit: int | None = None) -> str:
        """Per op and backend: calls, total time (children included), self time and time per
        call, as plain text; ``sort_by`` is ``"total"``, ``"self"`` (largest first),
        ``"count"`` (most first) or ``"name"``; ``row_limit`` keeps the first rows."""
        if sort_by not in _SORT_KEYS:
            raise ValueError(
                f"profile.table(sort_by={sort_by!r}): expected one of "
                f"{', '.join(map(repr, _SORT_KEYS))}"
            )
        rows = self.key_averages()
        if sort_by == "name":
            rows.sort(key=lambda r: (r.name, r.backend or ""))
        else:
            attr = {"total": "total_ns", "self": "self_ns", "count": "count"}[sort_by]
            rows.sort(key=lambda r: getattr(r, attr), reverse=True)
        if row_limit is not None:
            rows = rows[:row_limit]
        header = ("name", "backend", "calls", "total ms", "self ms", "us/call")
        body = [
            (
                r.name if r.kind == "op" else f"{r.name} (backward)",
                r.backend or "-",
                str(r.count),
                f"{r.total_ns / 1e6:.3f}",
                f"{r.self_ns / 1e6:.3f}",
                f"{r.total_ns / r.count / 1e3:.1f}",
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]

        def line(cells: Sequence[str]) -> str:
            left = [c.ljust(w) for c, w in zip(cells[:2], widths[:2], strict=True)]
            right = [c.rjust(w) for c, w in zip(cells[2:], widths[2:], strict=True)]
            return "  ".join(left + right).rstrip()

        rule = "  ".join("-" * w for w in widths)
        total = sum(e.self_ns for e in self.events())
        lines = [line(header), rule, *(line(row) for row in body), rule]
        lines.append(f"{len(self.events())} events, {total / 1e6:.3f} ms in recorded calls")
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        """The Trace Event Format object ``export_chrome_trace`` writes: one complete
        (``"ph": "X"``) event per call, ``ts``/``dur`` in microseconds from the profile's
        creation, one ``tid`` per thread (events nest by time within a thread)."""
        pid = os.getpid()
        t0 = self._t0
        trace: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
            for tid, name in self._threads.items()
        ]
        for e in self.events():
            args: dict[str, Any] = {"key": e.key}
            if e.kind == "op":
                args["overload"] = e.overload
            if e.backend is not None:
                args["backend"] = e.backend
            if e.origin is not None:
                args["origin"] = e.origin
            if e.shapes:
                args["shapes"] = [list(s) for s in e.shapes]
                args["dtypes"] = list(e.dtypes)
            trace.append(
                {
                    "name": e.name,
                    "cat": e.kind,
                    "ph": "X",
                    "ts": (e.start_ns - t0) / 1e3,
                    "dur": e.duration_ns / 1e3,
                    "pid": pid,
                    "tid": e.thread,
                    "args": args,
                }
            )
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the trace (``chrome_trace()``) as JSON to ``path``."""
        import json  # only when writing a trace

        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)


def profile_script(path: str | os.PathLike[str], argv: Sequence[str] = ()) -> profile:
    """Run the Python script at ``path`` as ``__main__`` (``sys.argv`` is ``[path, *argv]``
    meanwhile) under a profile and return it: what ``oplib profile script.py`` runs. The
    script's exceptions propagate (``SystemExit`` with status 0 or None is a normal end)."""
    import runpy  # only for scripts: ``import oplib_core`` stays light

    script = os.fspath(path)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    prof = profile()
    try:
        with prof:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return prof
