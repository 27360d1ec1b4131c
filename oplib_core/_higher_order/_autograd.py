"""Autograd handlers of the control-flow operators.

oplib has no tracing compiler, so a gradient comes from the parts: ``cond`` runs the branch
taken, whose ops record the graph; ``map`` and ``scan`` take their slices with ops that
record gradients (``_narrow``) and stack with ``oplib::stack``. ``while_loop`` is forward
only: its trip count depends on data, and it refuses inputs that require grad.
"""

from __future__ import annotations

from typing import Any

from .._registry.registry import AUTOGRAD
from ._control_flow import (
    WHILE,
    cond_impl,
    cond_op,
    map_impl,
    map_op,
    scan_impl,
    scan_op,
    while_loop_op,
)
from ._errors import ControlFlowError

__all__ = ["map_autograd", "scan_autograd", "while_loop_autograd"]

# The branch taken records its own graph.
cond_op.py_impl(AUTOGRAD)(cond_impl)


@map_op.py_impl(AUTOGRAD)
def map_autograd(f: Any, xs: Any, args: tuple[Any, ...]) -> Any:
    return map_impl(f, xs, args, differentiable=True)


@scan_op.py_impl(AUTOGRAD)
def scan_autograd(combine_fn: Any, init: Any, xs: Any, dim: int, reverse: bool) -> Any:
    return scan_impl(combine_fn, init, xs, dim, reverse, differentiable=True)


@while_loop_op.py_impl(AUTOGRAD)
def while_loop_autograd(cond_fn: Any, body_fn: Any, carried: tuple[Any, ...]) -> Any:
    raise ControlFlowError(
        f"{WHILE}: a carried input requires grad, but while_loop is forward-only (no "
        "gradients through a data-dependent number of iterations). Call it under "
        "oplib.no_grad() or on detached inputs; for a fixed number of steps use oplib.scan, "
        "which is differentiable.",
        op=WHILE,
        fn=None,
    )
