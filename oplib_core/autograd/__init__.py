"""Reverse-mode automatic differentiation for oplib operators.

``Tensor.backward()``, :func:`grad`, :func:`register_autograd` (gradient formulas for
operators), the ``ctx`` of formulas (:class:`FunctionCtx`), custom functions
(:class:`Function`, :func:`once_differentiable`), :func:`gradcheck` and
:func:`gradgradcheck`, and :func:`to_dot` to draw a recorded graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from ._engine import Node, backward, grad
from ._function import Function, once_differentiable
from ._gradcheck import GradcheckError, gradcheck, gradgradcheck
from ._registration import FunctionCtx, register_autograd

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._tensor.tensor import Tensor

__all__ = [
    "Function",
    "FunctionCtx",
    "GradcheckError",
    "Node",
    "backward",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "is_grad_enabled",
    "no_grad",
    "once_differentiable",
    "register_autograd",
    "set_grad_enabled",
    "to_dot",
]


def to_dot(outputs: Tensor | Sequence[Tensor], name: str = "autograd") -> str:
    """The graph backward would walk from ``outputs``: one box per recorded op
    (``grad_fn``), one per leaf Tensor that requires grad, arrows from inputs to the ops
    that used them, as Graphviz ``dot`` text (render it with ``dot -Tsvg``).

    Raises ``ValueError`` when no output has a graph (none requires grad)."""
    from ._dot import draw  # drawing is rare: kept off ``import oplib_core``

    return draw(outputs, name)
