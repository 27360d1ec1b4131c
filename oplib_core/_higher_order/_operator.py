"""``HigherOrderOperator``: an operator whose arguments include functions, with one Python
handler per dispatch key (torch's ``torch._ops.HigherOrderOperator``).

A call computes its keys from the tensors found anywhere in the arguments (``_keys``):
the innermost dispatch mode first, then ``Autograd`` (grad mode on and a Tensor requires
grad), then the backend's key. A backend key is served by its own handler, else by the
``Fake`` handler on a data-less backend (meta), else by ``CompositeExplicitAutograd``; a
handler registered as ``fallthrough_kernel`` skips its key. Handlers get the arguments as
given (Tensors stay Tensors), as torch's do; a mode's handler gets the mode first.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from .._dispatch import ACTIVE, MODES, DispatchMode
from .._registry.entry import Kernel, Origin, current_plugin, fallthrough_kernel, origin_of
from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, FAKE, REGISTRY, Handle
from .._registry.startup import LOCK
from .._tensor.pickling import Where, find, where_defined
from ..backends import TABLE, Backend
from ..errors import InvalidNameError, NoKernelError, RegistrationError, UnknownOperatorError
from ..ops import ops
from ._keys import call_keys, describe_arrays
from ._pytree import tree_map

__all__ = [
    "HOPS",
    "NAMESPACE",
    "HigherOrderOperator",
    "HopTable",
    "Step",
    "hop_handle",
    "resolve_hop",
]

#: The namespace of every higher-order operator, as in torch (``ops.higher_order.cond``).
NAMESPACE = "higher_order"

_F = TypeVar("_F", bound=Callable[..., Any])
#: A resolution step: (key, the handler it gives or None, why it was taken or skipped).
Step = tuple[str, "Callable[..., Any] | None", str]
_NONE = object()


class HigherOrderOperator:
    """An operator that takes functions, with a Python handler per dispatch key.

    ``hop = oplib.HigherOrderOperator("my_hop")`` defines ``oplib.ops.higher_order.my_hop``
    (a second definition of a name raises ``RegistrationError`` naming the first).
    ``@hop.py_impl(key)`` registers a handler for a backend key or device type
    (``"CPU"``, ``"cuda"``), ``"Autograd"``, ``"Fake"``, ``"CompositeExplicitAutograd"``
    (``"default"``) or a ``DispatchMode`` subclass (called as ``fn(mode, *args,
    **kwargs)``); ``hop.fallthrough(key)`` (or ``py_impl(key)(fallthrough_kernel)``) makes
    dispatch skip a key. ``hop.dispatch(key, *args, **kwargs)`` runs the handler serving
    ``key``, for a handler that goes one key down.
    """

    def __init__(self, name: str, *, cacheable: bool = False) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidNameError(
                f"HigherOrderOperator(): expected a Python identifier as the name, got {name!r}",
                name,
            )
        self._name = name
        self.__name__ = name
        self.cacheable = cacheable
        self.origin: Origin = _definition_origin()
        self._handlers: dict[Any, Kernel] = {}
        # (backend, whether Autograd is among the keys) -> the handler; the registry's lock
        # guards writes, registration clears it.
        self._chosen: dict[tuple[Backend, bool], Callable[..., Any]] = {}
        #: A readable signature, for ``explain`` and ``oplib ops`` (the built-ins set theirs).
        self.signature = f"{name}(*args, **kwargs)"
        self._handle = HOPS.add(self)

    # -- identity ---------------------------------------------------------------------------
    def name(self) -> str:
        """The name given (``"cond"``), as torch's ``HigherOrderOperator.name()``."""
        return self._name

    @property
    def namespace(self) -> str:
        return NAMESPACE

    @property
    def qualname(self) -> str:
        """``"higher_order::<name>"``: how ``oplib ops`` and ``explain`` name it."""
        return f"{NAMESPACE}::{self._name}"

    @property
    def defined(self) -> bool:
        """False once the operator was removed (its defining plugin rolled back)."""
        return HOPS.get(self._name) is self

    def __repr__(self) -> str:
        return f"<HigherOrderOperator(op='{NAMESPACE}.{self._name}')>"

    def __str__(self) -> str:
        return f"{NAMESPACE}.{self._name}"

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference (oplib.ops.higher_order.<name> in the receiving process), never the
        # handlers.
        return (_hop_named, (self._name, where_defined(self.origin)))

    # -- registration -----------------------------------------------------------------------
    def py_impl(self, key: str | type[DispatchMode]) -> Callable[[_F], _F]:
        """Decorator: ``fn`` handles calls whose dispatch reaches ``key``. A key that already
        has a handler raises ``RegistrationError`` naming where the first came from."""
        norm = _normalize(key)

        def inner(fn: _F) -> _F:
            self._register(norm, fn)
            return fn

        return inner

    def fallthrough(self, key: str) -> None:
        """Make dispatch skip ``key`` for this operator (torch's ``fallthrough``)."""
        self._register(_normalize(key), fallthrough_kernel)

    def _register_key(self, key: Any, fn: Callable[..., Any]) -> Handle:
        return self._register(_normalize(key), fn)

    def _register(self, key: Any, fn: Callable[..., Any]) -> Handle:
        if not callable(fn):
            raise RegistrationError(
                f"{self.qualname}.py_impl({_key_name(key)!r}): expected a function, got "
                f"{type(fn).__name__}",
                op=self.qualname,
            )
        with LOCK:
            origin = origin_of(fn)
            old = self._handlers.get(key)
            if old is not None:
                raise RegistrationError(
                    f"{self.qualname}: a handler for key {_key_name(key)!r} is already "
                    f"registered at {old.origin}; the second one, at {origin}, is refused. "
                    "Remove the first (its plugin or the code that registered it) instead "
                    "of registering a second one",
                    op=self.qualname,
                    existing=str(old.origin),
                )
            k = Kernel(fn, _key_name(key), origin)
            self._handlers[key] = k
            self._chosen.clear()

        def undo() -> None:
            with LOCK:
                if self._handlers.get(key) is k:
                    del self._handlers[key]
                    self._chosen.clear()

        return Handle(
            undo,
            f"{self.qualname} handler for {_key_name(key)}",
            key if isinstance(key, str) else None,
        )

    def _destroy(self) -> None:
        """Remove the operator (its definition's undo; tests and plugin rollback)."""
        self._handle.destroy()

    def _invalidate(self) -> None:
        with LOCK:
            self._chosen.clear()

    # -- read-only accessors ------------------------------------------------------------------
    def handler(self, key: str | type[DispatchMode]) -> Kernel | None:
        """The handler registered for ``key`` (a ``Kernel`` record: ``fn``, ``key``,
        ``origin``; a fallthrough's ``fn`` is ``fallthrough_kernel``), or None."""
        return self._handlers.get(_normalize(key))

    def handlers(self) -> list[tuple[str | type[DispatchMode], Kernel]]:
        """``(key, handler)`` for every registered handler, a mode's under its class."""
        with LOCK:
            return list(self._handlers.items())

    def py_kernel(self, key: str | type[DispatchMode]) -> Callable[..., Any] | None:
        """The callable handling ``key`` (None for none or a fallthrough)."""
        k = self._handlers.get(key) if not isinstance(key, str) else self.handler(key)
        if k is None or k.is_fallthrough:
            return None
        return k.fn

    def resolution_steps(self, backend: Backend) -> Iterator[Step]:
        """The keys tried for ``backend`` in order, as ``(key, handler or None, why)``; the
        first with a handler is the one dispatch takes."""
        keys = [backend.name]
        if backend.spec.fake_kernels:
            keys.append(FAKE)
        keys.append(COMPOSITE_EXPLICIT)
        for key in keys:
            k = self._handlers.get(key)
            if k is None:
                yield key, None, "skipped: no handler"
            elif k.is_fallthrough:
                yield key, None, "skipped: fallthrough"
            else:
                yield key, k.fn, f"taken: handler at {k.origin}"
                return

    def autograd_step(self) -> Step:
        """The Autograd key's step: its handler, a fallthrough, or none (an error)."""
        k = self._handlers.get(AUTOGRAD)
        if k is None:
            return AUTOGRAD, None, "error: no handler"
        if k.is_fallthrough:
            return AUTOGRAD, None, "skipped: fallthrough"
        return AUTOGRAD, k.fn, f"taken: handler at {k.origin}"

    def decide(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Decision:
        """What a call with these arguments does below the modes, without running it: the
        keys, each step with why it was taken or skipped, the handler chosen or the
        error. ``explain(hop, ...)`` reports it."""
        backend, autograd = call_keys(args, kwargs)
        d = Decision(backend, describe_arrays(args, kwargs))
        d.keys = [AUTOGRAD, backend.key] if autograd else [backend.key]
        d.cached = (backend, autograd) in self._chosen
        if autograd:
            step = self.autograd_step()
            d.steps.append(step)
            if step[1] is not None:
                d.chosen = f"{AUTOGRAD} handler of {self.qualname}"
                return d
            if self._handlers.get(AUTOGRAD) is None:
                d.error = str(self._no_handler(AUTOGRAD, "an input requires grad"))
                return d
        for step in self.resolution_steps(backend):
            d.steps.append(step)
            if step[1] is not None:
                d.chosen = step[0]
                return d
        d.error = str(self._no_handler(backend.key, f"the inputs are {backend.name} arrays"))
        return d

    # -- calling ----------------------------------------------------------------------------
    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        if ACTIVE[0] and MODES.stack:
            return self._call_mode(args, kwargs)
        backend, autograd = call_keys(args, kwargs)
        fn = self._chosen.get((backend, autograd))
        if fn is None:
            fn = self._choose(backend, autograd)
        return fn(*args, **kwargs)

    def _choose(self, backend: Backend, autograd: bool) -> Callable[..., Any]:
        fn = None
        if autograd:
            fn = self.autograd_step()[1]
            if fn is None and self._handlers.get(AUTOGRAD) is None:
                raise self._no_handler(AUTOGRAD, f"an input requires grad (on {backend.name})")
        if fn is None:
            fn = next((s[1] for s in self.resolution_steps(backend) if s[1] is not None), None)
        if fn is None:
            raise self._no_handler(backend.key, f"the inputs are {backend.name} arrays")
        with LOCK:
            if len(self._chosen) < 64:
                self._chosen[(backend, autograd)] = fn
        return fn

    def dispatch(self, key: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run the handler serving ``key`` (a key name or device type) on the arguments,
        skipping the keys above it: ``"Autograd"``, ``"Fake"`` and
        ``"CompositeExplicitAutograd"`` run their own handler; a backend key resolves as a
        call on that backend does (its handler, ``Fake`` on a data-less backend, then
        ``CompositeExplicitAutograd``)."""
        norm = _normalize(key)
        if norm in (AUTOGRAD, FAKE, COMPOSITE_EXPLICIT):
            fn = self.py_kernel(norm)
            if fn is None:
                raise self._no_handler(norm, "dispatch() asked for it")
            return fn(*args, **kwargs)
        backend = TABLE.get(norm)
        for _, fn, _ in self.resolution_steps(backend):
            if fn is not None:
                return fn(*args, **kwargs)
        raise self._no_handler(backend.key, "dispatch() asked for it")

    def _call_mode(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Hand the call to this thread's innermost mode: its handler for this operator if
        registered, else the mode's ``__oplib_dispatch__``; the mode is off the stack while
        it runs (as for ops: ``_dispatch.modes.call_mode``)."""
        mode = MODES.pop()
        try:
            k = self._handlers.get(type(mode))
            if k is not None and not k.is_fallthrough:
                return k.fn(mode, *args, **kwargs)
            handler = HOPS.mode_handler(self, mode)
            if handler is not None:
                return handler(mode, *args, **kwargs)
            # The functions among the arguments run under the mode again, so it sees the
            # operators they call (as torch's modes trace into a cond's branches).
            args, kwargs = tree_map(lambda v: _under(mode, v), (args, kwargs))
            return mode.__oplib_dispatch__(self, args, kwargs)  # type: ignore[arg-type]
        finally:
            MODES.push(mode)

    def _no_handler(self, key: str, why: str) -> NoKernelError:
        have = sorted(k.key for k in self._handlers.values() if not k.is_fallthrough)
        return NoKernelError(
            f"{self.qualname}: no handler for dispatch key {key!r} ({why}). Handlers are "
            f"registered for: {', '.join(have) or '(none)'}. Register one with "
            f"@ops.higher_order.{self._name}.py_impl({key!r}), or a "
            f"'CompositeExplicitAutograd' handler that serves every backend.",
            op=self.qualname,
            key=key,
        )


_HERE = os.path.dirname(os.path.abspath(__file__))
# Frames in these files define operators for someone else (the constructor, a registrar).
_SKIP = frozenset(
    {os.path.abspath(__file__), os.path.join(os.path.dirname(_HERE), "_registrar.py")}
)


def _definition_origin() -> Origin:
    """Where ``HigherOrderOperator(...)`` was called, credited to the running plugin."""
    frame = sys._getframe(2)
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename) in _SKIP:
        frame = frame.f_back
    source = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    ctx = current_plugin.get()
    if ctx is None:
        return Origin(source)
    return Origin(source, ctx.plugin, ctx.distribution, ctx.version)


class Decision:
    """``HigherOrderOperator.decide``'s answer: ``backend``, ``arrays`` (where each array
    of the call is), ``keys``, ``steps`` (``(key, handler or None, why)``), ``chosen`` (the
    key whose handler runs), ``error`` (what the call raises instead), ``cached``."""

    def __init__(self, backend: Backend, arrays: dict[str, str]) -> None:
        self.backend = backend
        self.arrays = arrays
        self.keys: list[str] = []
        self.steps: list[Step] = []
        self.chosen: str | None = None
        self.error: str | None = None
        self.cached = False


def _under(mode: DispatchMode, v: Any) -> Any:
    """``v`` if it is not a function, else ``v`` run with ``mode`` active."""
    if not callable(v) or isinstance(v, (type, HigherOrderOperator)):
        return v

    @functools.wraps(v)
    def run(*args: Any, **kwargs: Any) -> Any:
        with mode:
            return v(*args, **kwargs)

    return run


def _normalize(key: Any) -> Any:
    if isinstance(key, type) and issubclass(key, DispatchMode):
        return key
    if key == "Meta":  # the meta backend's key, as a name the table knows without loading
        return "meta"
    # anything else that is not a str raises ArgumentTypeError there, naming py_impl
    return REGISTRY.normalize_key(cast(str, key), api="py_impl")


def _key_name(key: Any) -> str:
    return key if isinstance(key, str) else key.__name__


#: The fallback handler for a mode class that registered no handler of its own:
#: ``fn(hop, mode) -> handler or None`` (FakeTensorMode runs the Fake handler).
ModeFallback = Callable[[HigherOrderOperator, DispatchMode], "Callable[..., Any] | None"]


class HopTable:
    """Every higher-order operator by name; definitions are undone by their handles."""

    def __init__(self) -> None:
        self._ops: dict[str, HigherOrderOperator] = {}
        self._mode_fallbacks: list[tuple[type[DispatchMode], ModeFallback]] = []
        self._lock = LOCK

    def add(self, hop: HigherOrderOperator) -> Handle:
        with self._lock:
            old = self._ops.get(hop.name())
            if old is not None:
                raise RegistrationError(
                    f"HigherOrderOperator({hop.name()!r}): {old.qualname} is already defined "
                    f"at {old.origin}; this definition at {hop.origin} conflicts. Choose "
                    "another name.",
                    op=old.qualname,
                    existing=str(old.origin),
                )
            self._ops[hop.name()] = hop
            setattr(ops.higher_order, hop.name(), hop)

        def undo() -> None:
            with self._lock:
                if self._ops.get(hop.name()) is hop:
                    del self._ops[hop.name()]
                    ops.higher_order.__dict__.pop(hop.name(), None)

        return Handle(undo, f"definition of {hop.qualname}")

    def get(self, name: str) -> HigherOrderOperator | None:
        """By name, ``"cond"`` or ``"higher_order::cond"``."""
        prefix = f"{NAMESPACE}::"
        return self._ops.get(name[len(prefix) :] if name.startswith(prefix) else name)

    def all(self) -> list[HigherOrderOperator]:
        with self._lock:
            return sorted(self._ops.values(), key=lambda h: h.name())

    def add_mode_fallback(self, mode: type[DispatchMode], fallback: ModeFallback) -> None:
        self._mode_fallbacks.append((mode, fallback))

    def mode_handler(
        self, hop: HigherOrderOperator, mode: DispatchMode
    ) -> Callable[..., Any] | None:
        for cls, fallback in self._mode_fallbacks:
            if isinstance(mode, cls):
                return fallback(hop, mode)
        return None


HOPS = HopTable()


def hop_handle(hop: HigherOrderOperator) -> Handle:
    """The handle that removes ``hop``'s definition (a registrar keeps it for rollback)."""
    return hop._handle


def _hop_named(name: str, where: Where) -> HigherOrderOperator:
    """Unpickling a ``HigherOrderOperator``: this process's one of that name."""
    return find("higher-order operator", f"{NAMESPACE}::{name}", where, lambda: HOPS.get(name))


def resolve_hop(hop: HigherOrderOperator | str, api: str) -> HigherOrderOperator:
    """A higher-order operator, or the one of that name (``"cond"``,
    ``"higher_order::cond"``); ``UnknownOperatorError`` for none."""
    if isinstance(hop, HigherOrderOperator):
        return hop
    found = HOPS.get(hop) if isinstance(hop, str) else None
    if found is None:
        names = ", ".join(h.qualname for h in HOPS.all())
        raise UnknownOperatorError(
            f"{api}(): no higher-order operator {hop!r}; defined: {names}",
            op=str(hop),
        )
    return found


def _on_backend_change(event: str, backend: Backend) -> None:
    for hop in HOPS.all():
        hop._invalidate()


TABLE.add_listener(_on_backend_change)
