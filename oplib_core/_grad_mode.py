"""Grad mode: whether operators record autograd history (thread-local, on by default)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    enabled = True


STATE = _State()


def is_grad_enabled() -> bool:
    """True when operators called on tensors that require grad record history."""
    return STATE.enabled


class _GradModeContext:
    _value: bool

    def __enter__(self) -> None:
        self._prev = STATE.enabled
        STATE.enabled = self._value

    def __exit__(self, *exc: object) -> None:
        STATE.enabled = self._prev

    def __call__(self, fn: F) -> F:
        value = self._value

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(value):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class no_grad(_GradModeContext):
    """Context manager and decorator that disables gradient recording in this thread."""

    _value = False


class enable_grad(_GradModeContext):
    """Context manager and decorator that enables gradient recording in this thread."""

    _value = True


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(False)``: context manager, decorator, or (called alone) a switch."""

    def __init__(self, mode: bool) -> None:
        self._value = bool(mode)
        self._prev = STATE.enabled
        STATE.enabled = self._value

    def __enter__(self) -> None:
        pass  # __init__ already switched, as torch's set_grad_enabled does

    def __call__(self, fn: F) -> F:
        STATE.enabled = self._prev  # used as a decorator: the switch applies inside fn only
        return super().__call__(fn)
