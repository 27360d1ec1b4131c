"""The error of control-flow operators."""

from __future__ import annotations

from ..errors import OplibError

__all__ = ["ControlFlowError"]


class ControlFlowError(OplibError, RuntimeError):
    """A control-flow operator's functions or arguments break its contract: branches of
    ``cond`` that return different structures, shapes or dtypes, a predicate that is not a
    bool or one-element tensor, a loop body that changes its carry, mapped inputs of
    different lengths. ``op`` names the operator (``"higher_order::cond"``), ``fn`` the
    function at fault (``"true_fn"``, ``"body_fn"``...) when there is one."""

    def __init__(self, message: str, op: str, fn: str | None = None) -> None:
        self.op = op
        self.fn = fn
        super().__init__(message)
