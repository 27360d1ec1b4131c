"""Fake handlers of the control-flow operators: shapes and dtypes without data.

They serve the ``Fake`` key (the meta device) and ``FakeTensorMode`` (which runs an
operator's ``Fake`` handler, under the mode, when the operator has no handler for the mode
itself). ``cond`` traces both branches and compares them; ``while_loop`` traces one
iteration and checks that the body keeps the carry; ``map`` and ``scan`` trace one step.
Outputs are new data-less arrays, so nothing aliases an input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._dispatch import DispatchMode
from .._registry.registry import FAKE
from .._tensor.tensor import Tensor
from ..fake._arrays import FakeArray
from ..fake._context import STATE, FakeKernelContext, get_ctx
from ..fake._mode import FakeTensorMode
from ..fake._symbolic import DEFAULT_ENV
from ._control_flow import COND, MAP, SCAN, WHILE, cond_op, map_op, scan_op, while_loop_op
from ._errors import ControlFlowError
from ._operator import HOPS, HigherOrderOperator
from ._pytree import tree_flatten, tree_map, tree_unflatten
from ._structure import check_pred, check_same, length, native

__all__ = ["cond_fake", "map_fake", "scan_fake", "while_loop_fake"]


def _fresh(x: Any, shape: tuple[Any, ...] | None = None) -> Any:
    """A new data-less array like ``x`` (with ``shape`` if given); a Tensor for a Tensor."""
    data = native(x)
    if not isinstance(data, FakeArray):
        return x
    new = data.new_empty(tuple(data.shape) if shape is None else shape)
    return Tensor._wrap(new) if type(x) is Tensor else new


def _without(x: Any, dim: int) -> Any:
    shape = tuple(native(x).shape)
    return _fresh(x, shape[:dim] + shape[dim + 1 :])


def _with(op: str, fn: str, x: Any, dim: int, n: Any) -> Any:
    data = native(x)
    if not isinstance(data, FakeArray):
        raise ControlFlowError(
            f"{op}: {fn} must return tensors (nested in tuples, lists, dicts), got "
            f"{type(x).__name__}",
            op=op,
            fn=fn,
        )
    shape = tuple(data.shape)
    return _fresh(x, (*shape[:dim], n, *shape[dim:]))


@contextmanager
def _context(op: str) -> Iterator[None]:
    """A fake-kernel context for ``get_ctx()`` (the mode's, or the default shape env)."""
    outer = STATE.ctx
    if outer is None:
        STATE.ctx = FakeKernelContext(op, DEFAULT_ENV)
    try:
        yield
    finally:
        STATE.ctx = outer


@cond_op.py_impl(FAKE)
def cond_fake(pred: Any, true_fn: Any, false_fn: Any, operands: tuple[Any, ...]) -> Any:
    check_pred(COND, pred)
    t = true_fn(*operands)
    f = false_fn(*operands)
    check_same(COND, t, f, ("true_fn", "false_fn"), "false_fn")
    return tree_map(_fresh, t)


@while_loop_op.py_impl(FAKE)
def while_loop_fake(cond_fn: Any, body_fn: Any, carried: tuple[Any, ...]) -> tuple[Any, ...]:
    check_pred(WHILE, cond_fn(*carried), "cond_fn")
    out = body_fn(*carried)
    if type(out) is not tuple or len(out) != len(carried):
        raise ControlFlowError(
            f"{WHILE}: body_fn must return a tuple of {len(carried)} values, like "
            f"carried_inputs; got {type(out).__name__}",
            op=WHILE,
            fn="body_fn",
        )
    check_same(WHILE, carried, out, ("carried_inputs", "body_fn's result"), "body_fn")
    with _context(WHILE):  # the trip count is unknown: carried ints become symbols
        return tuple(get_ctx().new_dynamic_size() if type(c) is int else _fresh(c) for c in carried)


@map_op.py_impl(FAKE)
def map_fake(f: Any, xs: Any, args: tuple[Any, ...]) -> Any:
    leaves, spec = tree_flatten(xs)
    n = length(MAP, leaves, 0, "xs")
    out = f(tree_unflatten([_without(x, 0) for x in leaves], spec), *args)
    return tree_map(lambda y: _with(MAP, "f", y, 0, n), out)


@scan_op.py_impl(FAKE)
def scan_fake(combine_fn: Any, init: Any, xs: Any, dim: int, reverse: bool) -> tuple[Any, Any]:
    leaves, spec = tree_flatten(xs)
    ndim = len(native(leaves[0]).shape) if leaves else 0
    d = dim + ndim if dim < 0 else dim
    n = length(SCAN, leaves, d, "xs")
    out = combine_fn(init, tree_unflatten([_without(x, d) for x in leaves], spec))
    if type(out) is not tuple or len(out) != 2:
        raise ControlFlowError(
            f"{SCAN}: combine_fn must return a tuple (next_carry, y), got {type(out).__name__}",
            op=SCAN,
            fn="combine_fn",
        )
    check_same(SCAN, init, out[0], ("init", "combine_fn's next carry"), "combine_fn")
    return tree_map(_fresh, init), tree_map(lambda y: _with(SCAN, "combine_fn", y, d, n), out[1])


def _under_fake_mode(hop: HigherOrderOperator, mode: DispatchMode) -> Callable[..., Any] | None:
    """FakeTensorMode's handler for an operator with none of its own: the ``Fake`` handler
    run under the mode (the functions' ops run fake), with the mode's shape env."""
    fake = hop.py_kernel(FAKE)
    if fake is None:
        error = hop._no_handler(FAKE, "FakeTensorMode is active and has no handler of its own")

        def missing(mode: DispatchMode, *args: Any, **kwargs: Any) -> Any:
            raise error

        return missing

    def handler(mode: FakeTensorMode, *args: Any, **kwargs: Any) -> Any:
        outer = STATE.ctx
        STATE.ctx = FakeKernelContext(hop.qualname, mode.shape_env)
        try:
            with mode:
                return fake(*args, **kwargs)
        finally:
            STATE.ctx = outer

    return handler


HOPS.add_mode_fallback(FakeTensorMode, _under_fake_mode)
