"""Dispatch modes: objects that intercept every operator call in a thread while active.

The modes of a thread live on a thread-local stack (innermost last). ``ACTIVE[0]`` counts
the modes active in any thread: the fast path's only question about modes is whether that
count is zero.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: the overload module imports this one
    from typing_extensions import Self

    from .overload import OpOverload

__all__ = ["ACTIVE", "MODES", "DispatchMode", "active_modes", "call_mode"]

#: Number of modes active in any thread (a one-element list: read without a lock).
ACTIVE = [0]
_ACTIVE_LOCK = threading.Lock()


class _ModeStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[DispatchMode] = []


#: This thread's active modes, innermost last (``MODES.stack``).
MODES = _ModeStack()


def _push(mode: DispatchMode) -> None:
    with _ACTIVE_LOCK:
        MODES.stack.append(mode)
        ACTIVE[0] += 1


def _pop() -> DispatchMode:
    with _ACTIVE_LOCK:
        mode = MODES.stack.pop()
        ACTIVE[0] -= 1
        return mode


def active_modes() -> tuple[DispatchMode, ...]:
    """The dispatch modes active in this thread, innermost last."""
    return tuple(MODES.stack)


class DispatchMode:
    """Intercepts every operator call in this thread while active (``with Mode(): ...``).

    Override ``__oplib_dispatch__(op, args, kwargs)``; inside it the mode is inactive, so
    calling ``op(*args, **kwargs)`` runs the operator normally (or reaches the next outer
    mode). ``op.py_impl(ModeClass)`` gives one op its own handler
    ``fn(mode, *args, **kwargs)`` under that mode.
    """

    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return op(*args, **kwargs)

    def __enter__(self) -> Self:
        _push(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = MODES.stack
        if not stack or stack[-1] is not self:
            raise RuntimeError(
                f"{type(self).__name__}: modes must exit in the reverse order they entered"
            )
        _pop()


def call_mode(op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Hand the call to this thread's innermost mode (its ``py_impl`` handler for ``op`` if
    there is one); the mode is off this thread's stack while it runs."""
    # The global count stays as it is (no lock): calls inside the handler take the slow
    # path, which finds the thread's stack without this mode.
    stack = MODES.stack
    mode = stack.pop()
    try:
        handler = op.py_kernel(type(mode))
        if handler is not None:
            return handler(mode, *args, **kwargs)
        return mode.__oplib_dispatch__(op, args, kwargs)
    finally:
        stack.append(mode)
