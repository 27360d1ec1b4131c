"""The built-in control-flow operators ``cond``, ``while_loop``, ``map`` and ``scan``: their
public functions (torch's signatures) and their eager handlers.

The eager handlers are ``CompositeExplicitAutograd``: they run on any backend whose arrays
index (``x[i]``) and whose ops stack, calling the user's functions with what the caller
gave (Tensors stay Tensors, native arrays stay native). The fake handlers are in
``_fake``, the autograd handlers in ``_autograd``, Dask's in the Dask plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._registry.registry import COMPOSITE_EXPLICIT
from .._tensor.tensor import Tensor
from ..errors import ArgumentTypeError
from ._errors import ControlFlowError
from ._operator import HigherOrderOperator
from ._pytree import tree_flatten, tree_unflatten
from ._structure import length, row, stack, stack_outputs, truth

__all__ = [
    "cond",
    "cond_op",
    "map",
    "map_impl",
    "map_op",
    "scan",
    "scan_impl",
    "scan_op",
    "while_loop",
    "while_loop_impl",
    "while_loop_op",
]

cond_op = HigherOrderOperator("cond")
while_loop_op = HigherOrderOperator("while_loop")
map_op = HigherOrderOperator("map")
scan_op = HigherOrderOperator("scan")

cond_op.signature = "cond(pred, true_fn, false_fn, operands)"
while_loop_op.signature = "while_loop(cond_fn, body_fn, carried_inputs)"
map_op.signature = "map(f, xs, args)"
scan_op.signature = "scan(combine_fn, init, xs, dim, reverse)"

COND = cond_op.qualname
WHILE = while_loop_op.qualname
MAP = map_op.qualname
SCAN = scan_op.qualname


def _check_callable(api: str, name: str, fn: Any) -> None:
    if not callable(fn):
        raise ArgumentTypeError(
            f"{api}: expected {name} to be a function, got {type(fn).__name__}",
            api=api,
            argument=name,
            value=fn,
        )


def _check_sequence(api: str, name: str, value: Any) -> tuple[Any, ...]:
    if not isinstance(value, (tuple, list)):
        raise ArgumentTypeError(
            f"{api}: expected {name} to be a tuple or list of arguments, got "
            f"{type(value).__name__}",
            api=api,
            argument=name,
            value=value,
        )
    return tuple(value)


# -- public functions ---------------------------------------------------------------------------
def cond(
    pred: Any,
    true_fn: Callable[..., Any],
    false_fn: Callable[..., Any],
    operands: Sequence[Any] = (),
) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``torch.cond``.

    ``pred`` is a bool or a one-element tensor. Both branches must return the same
    structure (nested tuples, lists, dicts of tensors) with the same shapes and dtypes:
    under fake mode and on the meta device both are traced and compared, and a mismatch
    raises ``ControlFlowError`` naming the branch. Gradients flow through the branch taken.
    """
    _check_callable("cond()", "true_fn", true_fn)
    _check_callable("cond()", "false_fn", false_fn)
    if type(operands) is not tuple:
        operands = _check_sequence("cond()", "operands", operands)
    return cond_op(pred, true_fn, false_fn, operands)


def while_loop(
    cond_fn: Callable[..., Any], body_fn: Callable[..., Any], carried_inputs: Sequence[Any]
) -> tuple[Any, ...]:
    """``while cond_fn(*carried): carried = body_fn(*carried)``; returns the final carried
    values as a tuple, as ``torch._higher_order_ops.while_loop``.

    ``body_fn`` returns a tuple like ``carried_inputs`` (same length, shapes and dtypes).
    Forward only: a carried Tensor that requires grad (with grad mode on) raises
    ``ControlFlowError``. Under fake mode the trip count is unknown: carried Python ints
    come back as symbolic sizes (``get_ctx().new_dynamic_size()``).
    """
    _check_callable("while_loop()", "cond_fn", cond_fn)
    _check_callable("while_loop()", "body_fn", body_fn)
    carried = _check_sequence("while_loop()", "carried_inputs", carried_inputs)
    return while_loop_op(cond_fn, body_fn, carried)  # type: ignore[no-any-return]


def map(f: Callable[..., Any], xs: Any, *args: Any) -> Any:
    """``f`` applied to each slice of ``xs`` along its first dimension (``f(x[i], *args)``),
    the results stacked, as ``torch._higher_order_ops.map``. ``xs`` may be a nested
    structure of tensors sharing their first size; ``f`` returns tensors (nested too)."""
    _check_callable("map()", "f", f)
    return map_op(f, xs, args)


def scan(
    combine_fn: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any,
    *,
    dim: int = 0,
    reverse: bool = False,
) -> tuple[Any, Any]:
    """``carry, y = combine_fn(carry, x)`` over the slices ``x`` of ``xs`` along ``dim``,
    starting from ``init``; returns the final carry and the ``y``s stacked along ``dim``,
    as ``torch._higher_order_ops.scan``. ``reverse=True`` walks from the last slice, and
    ``ys[i]`` still belongs to ``xs[i]``. The carry keeps its structure, shapes and dtypes
    (checked under fake mode)."""
    _check_callable("scan()", "combine_fn", combine_fn)
    if type(dim) is not int:
        raise ArgumentTypeError(
            f"scan(): expected dim to be an int, got {type(dim).__name__}",
            api="scan()",
            argument="dim",
            value=dim,
        )
    return scan_op(combine_fn, init, xs, dim, bool(reverse))  # type: ignore[no-any-return]


# -- eager handlers -----------------------------------------------------------------------------
@cond_op.py_impl(COMPOSITE_EXPLICIT)
def cond_impl(pred: Any, true_fn: Any, false_fn: Any, operands: tuple[Any, ...]) -> Any:
    return (true_fn if truth(COND, pred) else false_fn)(*operands)


@while_loop_op.py_impl(COMPOSITE_EXPLICIT)
def while_loop_impl(cond_fn: Any, body_fn: Any, carried: tuple[Any, ...]) -> tuple[Any, ...]:
    n = len(carried)
    while truth(WHILE, cond_fn(*carried), "cond_fn"):
        out = body_fn(*carried)
        if type(out) is not tuple or len(out) != n:
            raise ControlFlowError(
                f"{WHILE}: body_fn must return a tuple of {n} values, like carried_inputs; "
                f"got {type(out).__name__}"
                + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""),
                op=WHILE,
                fn="body_fn",
            )
        carried = out
    return carried


def map_impl(f: Any, xs: Any, args: tuple[Any, ...], *, differentiable: bool = False) -> Any:
    """``map`` on any backend: rows by indexing (or, ``differentiable``, by ops that record
    gradients), outputs stacked with ``oplib::stack``."""
    leaves, spec = tree_flatten(xs)
    n = length(MAP, leaves, 0, "xs")
    if n == 0:
        raise ControlFlowError(
            f"{MAP}: xs has no rows; map needs at least one to know f's output", op=MAP, fn="f"
        )
    if spec is None and not differentiable:
        # one tensor, the common case: the loop a user would write (bench/higher_order.py)
        x = leaves[0]
        if type(x) is Tensor:
            a, wrap = x._data, Tensor._wrap
            outs = [f(wrap(a[i, ...]), *args) for i in range(n)]
        elif not args:
            outs = [f(x[i, ...]) for i in range(n)]
        else:
            outs = [f(x[i, ...], *args) for i in range(n)]
    elif spec is None:
        x = leaves[0]
        outs = [f(row(x, 0, i, differentiable), *args) for i in range(n)]
    else:
        outs = [
            f(tree_unflatten([row(x, 0, i, differentiable) for x in leaves], spec), *args)
            for i in range(n)
        ]
    if tree_flatten(outs[0])[1] is None:
        return stack(outs, 0)
    return stack_outputs(MAP, outs, 0, "f")


map_op.py_impl(COMPOSITE_EXPLICIT)(map_impl)


def scan_impl(
    combine_fn: Any,
    init: Any,
    xs: Any,
    dim: int,
    reverse: bool,
    *,
    differentiable: bool = False,
) -> tuple[Any, Any]:
    """``scan`` on any backend (rows and stacking as ``map_impl``)."""
    leaves, spec = tree_flatten(xs)
    ndim = len(getattr(leaves[0], "shape", ())) if leaves else 0
    d = dim + ndim if dim < 0 else dim
    n = length(SCAN, leaves, d, "xs")
    if n == 0:
        raise ControlFlowError(
            f"{SCAN}: xs has no elements along dim {dim}; scan needs at least one to know "
            "combine_fn's output",
            op=SCAN,
            fn="combine_fn",
        )
    carry = init
    ys: list[Any] = [None] * n
    for i in range(n - 1, -1, -1) if reverse else range(n):
        out = combine_fn(
            carry, tree_unflatten([row(x, d, i, differentiable) for x in leaves], spec)
        )
        if type(out) is not tuple or len(out) != 2:
            raise ControlFlowError(
                f"{SCAN}: combine_fn must return a tuple (next_carry, y), got {type(out).__name__}",
                op=SCAN,
                fn="combine_fn",
            )
        carry, ys[i] = out
    return carry, stack_outputs(SCAN, ys, d, "combine_fn")


scan_op.py_impl(COMPOSITE_EXPLICIT)(scan_impl)
