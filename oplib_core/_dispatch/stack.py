"""The per-thread stack of dispatch modes, the count of active modes, and handing a call to
the innermost mode.

The modes of a thread live on a thread-local stack (innermost last). ``ACTIVE[0]`` counts
the modes active in any thread: the fast path's only question about modes is whether that
count is zero. The mode class itself (``DispatchMode``, in ``modes``) sits above the ops,
whose slow path hands calls to it through ``call_mode`` here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["ACTIVE", "FIRST", "MODES", "ModeOp", "ModeStack", "call_mode", "pop", "push"]

#: Number of modes active in any thread (a one-element list: read without a lock).
ACTIVE = [0]
_ACTIVE_LOCK = threading.Lock()
#: Number of active modes, in any thread, marked ``_oplib_dispatch_first``: they take a call
#: before the modes entered after them (``oplib.autocast``: torch's Autocast keys sit above
#: the Python key that serves dispatch modes). While it is zero the innermost mode takes it.
FIRST = [0]


M = TypeVar("M")


class ModeStack(threading.local, Generic[M]):
    """A thread's active modes, innermost last (``MODES.stack``); ``modes`` names ``MODES``
    with the mode class it holds."""

    def __init__(self) -> None:
        self.stack: list[M] = []


#: This thread's active modes, innermost last (``MODES.stack``).
MODES: ModeStack[Any] = ModeStack()


def push(mode: Any) -> None:
    """Make ``mode`` this thread's innermost mode (``DispatchMode.__enter__``)."""
    with _ACTIVE_LOCK:
        MODES.stack.append(mode)
        ACTIVE[0] += 1


def pop() -> Any:
    """Take this thread's innermost mode off its stack (``DispatchMode.__exit__``)."""
    with _ACTIVE_LOCK:
        mode = MODES.stack.pop()
        ACTIVE[0] -= 1
        return mode


class ModeOp(Protocol):
    """What ``call_mode`` needs of an operator (an ``OpOverload``)."""

    def py_kernel(self, key: Any) -> Callable[..., Any] | None: ...


def call_mode(op: ModeOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Hand the call to this thread's innermost mode (its ``py_impl`` handler for ``op`` if
    there is one); the mode is off this thread's stack while it runs."""
    # The global count stays as it is (no lock): calls inside the handler take the slow
    # path, which finds the thread's stack without this mode.
    stack = MODES.stack
    at = _first_at(stack) if FIRST[0] else len(stack) - 1
    mode = stack.pop(at)
    try:
        handler = op.py_kernel(type(mode))
        if handler is not None:
            return handler(mode, *args, **kwargs)
        return mode.__oplib_dispatch__(op, args, kwargs)
    finally:
        stack.insert(at, mode)


def _first_at(stack: list[Any]) -> int:
    """Where the innermost mode marked ``_oplib_dispatch_first`` is (else the innermost)."""
    for at in range(len(stack) - 1, -1, -1):
        if getattr(stack[at], "_oplib_dispatch_first", False):
            return at
    return len(stack) - 1
