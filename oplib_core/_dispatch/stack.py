"""The per-thread stack of dispatch modes, the count of active modes, and handing a call to
the mode that takes it.

The modes of a thread live on a thread-local stack (innermost last), changed only through
``ModeStack``'s methods: each change also notes which mode takes the thread's calls
(``MODES.at``) and its class (``MODES.key``), so the fast path asks one question per call.
``ACTIVE[0]`` counts the modes active in any thread: while it is zero the fast path does
not look at the stack at all. The mode class itself (``DispatchMode``, in ``modes``) sits
above the ops, whose slow path hands calls to it through ``call_mode`` here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["ACTIVE", "MODES", "ModeOp", "ModeStack", "call_mode", "pop", "push"]

#: Number of modes active in any thread (a one-element list: read without a lock).
ACTIVE = [0]
_ACTIVE_LOCK = threading.Lock()


M = TypeVar("M")


class ModeStack(threading.local, Generic[M]):
    """A thread's active modes, innermost last (``MODES.stack``, a tuple: change it with
    ``push``, ``pop``, ``take`` and ``put``), and the mode that takes its calls.

    That mode is the innermost one marked ``_oplib_dispatch_first`` if any (``oplib.
    autocast``: torch's Autocast keys sit above the Python key that serves dispatch modes),
    else the innermost: ``stack[at]``, of class ``key`` (None while the stack is empty).
    """

    def __init__(self) -> None:
        self.stack: tuple[M, ...] = ()
        self.at = -1
        self.key: type | None = None

    def _set(self, stack: tuple[M, ...]) -> None:
        at = len(stack) - 1
        for i in range(at, -1, -1):
            if getattr(stack[i], "_oplib_dispatch_first", False):
                at = i
                break
        self.stack = stack
        self.at = at
        self.key = type(stack[at]) if stack else None

    def push(self, mode: M) -> None:
        """Add ``mode`` as the innermost (the count of active modes is ``push``'s)."""
        self._set((*self.stack, mode))

    def pop(self) -> M:
        """Remove the innermost mode and return it."""
        stack = self.stack
        self._set(stack[:-1])
        return stack[-1]

    def take(self, at: int) -> M:
        """Remove the mode at index ``at`` and return it (``put`` puts it back)."""
        stack = self.stack
        self._set(stack[:at] + stack[at + 1 :])
        return stack[at]

    def put(self, at: int, mode: M) -> None:
        """Insert ``mode`` at index ``at`` (where ``take`` took it)."""
        stack = self.stack
        self._set((*stack[:at], mode, *stack[at:]))


#: This thread's active modes, innermost last (``MODES.stack``).
MODES: ModeStack[Any] = ModeStack()


def push(mode: Any) -> None:
    """Make ``mode`` this thread's innermost mode (``DispatchMode.__enter__``)."""
    with _ACTIVE_LOCK:
        MODES.push(mode)
        ACTIVE[0] += 1


def pop() -> Any:
    """Take this thread's innermost mode off its stack (``DispatchMode.__exit__``)."""
    with _ACTIVE_LOCK:
        mode = MODES.pop()
        ACTIVE[0] -= 1
        return mode


class ModeOp(Protocol):
    """What ``call_mode`` needs of an operator (an ``OpOverload``)."""

    def py_kernel(self, key: Any) -> Callable[..., Any] | None: ...


def call_mode(op: ModeOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Hand the call to the mode that takes this thread's calls (``MODES.at``; its
    ``py_impl`` handler for ``op`` if there is one); the mode is off this thread's stack
    while it runs."""
    # The global count stays as it is (no lock): calls inside the handler take the slow
    # path, which finds the thread's stack without this mode.
    at = MODES.at
    mode = MODES.take(at)
    try:
        handler = op.py_kernel(type(mode))
        if handler is not None:
            return handler(mode, *args, **kwargs)
        return mode.__oplib_dispatch__(op, args, kwargs)
    finally:
        MODES.put(at, mode)
