"""Which fake kernel is running: ``get_ctx()`` and the op named in data-access errors.

``FakeTensorMode`` records the op whose fake kernel it runs (a thread-local, cheap), except
on its fast path, where a kernel is run by a frame that knows it (a code object registered
in ``SERVED``) and nothing is recorded per call. On the meta device the dispatcher calls
fake kernels directly. When nothing is recorded, the call stack is searched for such a
frame or a registered fake kernel's code object; that only happens on error paths and in
``get_ctx()``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from .._registry.entry import OpEntry
from .._registry.registry import FAKE, REGISTRY
from ..backends import TABLE, Backend
from ._errors import FakeTensorError
from ._symbolic import DEFAULT_ENV, ShapeEnv, SymInt

__all__ = ["FakeKernelContext", "current_fake_op", "get_ctx"]


class FakeKernelContext:
    """What ``get_ctx()`` returns inside a fake kernel."""

    __slots__ = ("op", "shape_env", "source")

    def __init__(self, op: str, shape_env: ShapeEnv, source: str | None = None) -> None:
        self.op = op
        self.shape_env = shape_env
        self.source = source

    def new_dynamic_size(self, *, min: int = 0, max: int | None = None) -> int | SymInt:
        """A new symbolic size (``u0``, ``u1``...) for an output whose size depends on the
        input data, with ``min <= size <= max`` (``max=None``: unbounded)."""
        return self.shape_env.new_symbol(min, max)

    def create_unbacked_symint(self, *, min: int = 2, max: int | None = None) -> int | SymInt:
        """torch's older name of :meth:`new_dynamic_size` (with torch's default ``min=2``)."""
        return self.new_dynamic_size(min=min, max=max)

    def __repr__(self) -> str:
        return f"<FakeKernelContext op={self.op}>"


#: How many kernel contexts are recorded now (``STATE.ctx`` not None), in all threads: while
#: none is, a kernel FakeTensorMode serves needs none recorded (``get_ctx()`` finds it from
#: its frame, and no recorded one nearer can hide it).
RECORDING = [0]
_RECORDING_LOCK = threading.Lock()


class _State(threading.local):
    def __init__(self) -> None:
        self._ctx: FakeKernelContext | None = None

    @property
    def ctx(self) -> FakeKernelContext | None:
        """The context of the fake kernel running in this thread, when one is recorded."""
        return self._ctx

    @ctx.setter
    def ctx(self, value: FakeKernelContext | None) -> None:
        change = (value is not None) - (self._ctx is not None)
        self._ctx = value
        if change:
            with _RECORDING_LOCK:
                RECORDING[0] += change


STATE = _State()

#: code object of a frame that may run a fake kernel without recording it in ``STATE`` ->
#: the context of the kernel that frame runs, or None when it runs none (FakeTensorMode's
#: fast path registers its own).
SERVED: dict[Any, Callable[[FrameType], FakeKernelContext | None]] = {}


class _KernelIndex:
    """code object → (op qualname, source) of every fake kernel and meta-device kernel;
    rebuilt lazily after the registry changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index: dict[Any, tuple[str, str]] | None = None
        REGISTRY.add_listener(self._changed)
        TABLE.add_listener(self._changed)

    def _changed(self, event: str, what: OpEntry | Backend) -> None:
        self._index = None

    def get(self) -> dict[Any, tuple[str, str]]:
        index = self._index
        if index is not None:
            return index
        keys = {FAKE} | {b.name for b in TABLE.all() if b.spec.fake_kernels}
        index = {}
        with REGISTRY.lock:
            for entry in REGISTRY.ops.values():
                for key in keys:
                    for k in entry.kernels.get(key, ()):
                        code = getattr(k.fn, "__code__", None)
                        if code is not None:
                            index.setdefault(code, (entry.qualname, k.origin.source))
        with self._lock:
            self._index = index
        return index


_INDEX = _KernelIndex()


def _fake_kernel_on_stack() -> FakeKernelContext | tuple[str, str] | None:
    """The innermost fake kernel running in this thread, found on the call stack: the
    context its runner gives (``SERVED``), or ``(qualname, source)`` of a registered fake
    kernel's code (on the meta device)."""
    index = _INDEX.get()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        served = SERVED.get(code)
        if served is not None:
            ctx = served(frame)
            if ctx is not None:
                return ctx
        found = index.get(code)
        if found is not None:
            caller = frame.f_back  # a kernel run by a runner that knows it: the runner's
            served = None if caller is None else SERVED.get(caller.f_code)
            ctx = None if served is None or caller is None else served(caller)
            return found if ctx is None else ctx
        frame = frame.f_back
    return None


def current_fake_op() -> tuple[str, str | None] | None:
    """``(qualname, source or None)`` of the fake kernel running in this thread, if any."""
    ctx = STATE.ctx
    if ctx is None:
        found = _fake_kernel_on_stack()
        if not isinstance(found, FakeKernelContext):
            return found
        ctx = found
    return ctx.op, ctx.source


def get_ctx() -> FakeKernelContext:
    """Inside a fake kernel: its context (``new_dynamic_size``). Anywhere else: an error."""
    ctx = STATE.ctx
    if ctx is not None:
        return ctx
    found = _fake_kernel_on_stack()
    if isinstance(found, FakeKernelContext):
        return found
    if found is not None:
        return FakeKernelContext(found[0], DEFAULT_ENV, found[1])
    raise FakeTensorError(
        "get_ctx() was called outside a fake kernel: it is only available while a fake "
        "kernel (registered with oplib.register_fake) runs, under FakeTensorMode or on the "
        "meta device"
    )
