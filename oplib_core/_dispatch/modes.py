"""Dispatch modes: objects that intercept every operator call in a thread while active.

``DispatchMode`` is the class a mode derives from; entering one pushes it on this thread's
mode stack (``stack``: the stack, the count of active modes and ``call_mode`` sit below the
ops, this class above them).
"""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

from .._tensor.tensor import Tensor
from .overload import OpOverload
from .stack import ACTIVE, ModeStack, call_mode, pop, push
from .stack import MODES as _MODES

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ACTIVE", "MODES", "DispatchMode", "active_modes", "call_mode", "tensor_types"]


#: This thread's active modes, innermost last (``MODES.stack``): ``stack.MODES``, typed.
MODES: ModeStack[DispatchMode] = _MODES


def active_modes() -> tuple[DispatchMode, ...]:
    """The dispatch modes active in this thread, innermost last."""
    return tuple(MODES.stack)


def tensor_types(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[type, ...]:
    """The distinct types of a call's Tensor arguments (in lists and tuples too), in order:
    the ``types`` a ``__torch_dispatch__`` receives."""
    seen: dict[type, None] = {}
    for a in (*args, *kwargs.values()):
        for x in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(x, Tensor):
                seen[type(x)] = None
    return tuple(seen)


_OplibDispatch = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


def _from_torch(raw: Any) -> _OplibDispatch:
    """An ``__oplib_dispatch__`` that calls the class's own ``__torch_dispatch__`` (``raw``,
    as its class dict holds it: a function, classmethod or staticmethod) with torch's
    arguments ``(func, types, args, kwargs)``."""
    if isinstance(raw, staticmethod):
        fn = raw.__func__

        def dispatch(self: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return fn(op, tensor_types(args, kwargs), args, kwargs)

    elif isinstance(raw, classmethod):
        cfn = raw.__func__

        def dispatch(self: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return cfn(type(self), op, tensor_types(args, kwargs), args, kwargs)

    elif isinstance(raw, FunctionType):

        def dispatch(self: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return raw(self, op, tensor_types(args, kwargs), args, kwargs)

    elif hasattr(type(raw), "__get__"):  # another descriptor

        def dispatch(self: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return raw.__get__(self, type(self))(op, tensor_types(args, kwargs), args, kwargs)

    else:  # a callable object, which an instance's attribute lookup does not bind

        def dispatch(self: Any, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return raw(op, tensor_types(args, kwargs), args, kwargs)

    dispatch.__oplib_from_torch__ = True  # type: ignore[attr-defined]
    return dispatch


def _to_torch(raw: Any) -> Callable[..., Any]:
    """A ``__torch_dispatch__`` that calls the class's own ``__oplib_dispatch__`` (``raw``),
    so that ``super().__torch_dispatch__(...)`` in a subclass reaches it."""

    def __torch_dispatch__(
        self: Any,
        func: Any,
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return raw.__get__(self, type(self))(func, tuple(args), kwargs or {})

    return __torch_dispatch__


class DispatchMode:
    """Intercepts every operator call in this thread while active (``with Mode(): ...``).

    Override ``__oplib_dispatch__(op, args, kwargs)``, or torch's
    ``__torch_dispatch__(self, func, types, args=(), kwargs=None)`` (an instance method,
    classmethod or staticmethod, as on a ``TorchDispatchMode``; ``types`` is the tuple of
    the Tensor arguments' types). Inside it the mode is inactive, so calling
    ``op(*args, **kwargs)`` runs the operator normally (or reaches the next outer mode).
    Both are called for operators and higher-order operators alike. A class defines one of
    the two; it answers to both names (``super().__torch_dispatch__`` reaches a parent's
    ``__oplib_dispatch__`` and the other way round). ``op.py_impl(ModeClass)`` gives one op
    its own handler ``fn(mode, *args, **kwargs)`` under that mode.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Which of the two a class defines is settled here, once: calls pay nothing for it.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "__torch_dispatch__" in own:
            if "__oplib_dispatch__" in own:
                raise TypeError(
                    f"{cls.__qualname__} defines both __oplib_dispatch__ and "
                    "__torch_dispatch__: define one of them (each answers to both names)"
                )
            cls.__oplib_dispatch__ = _from_torch(own["__torch_dispatch__"])  # type: ignore[method-assign,assignment]
        elif "__oplib_dispatch__" in own:
            cls.__torch_dispatch__ = _to_torch(own["__oplib_dispatch__"])  # type: ignore[method-assign]

    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return op(*args, **kwargs)

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> Self:
        push(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = MODES.stack
        if not stack or stack[-1] is not self:
            raise RuntimeError(
                f"{type(self).__name__}: modes must exit in the reverse order they entered"
            )
        pop()
