"""The standard's rounding functions (``trunc``, ``floor``, ``ceil``, ``round``), composed
from core ops: a float whose magnitude is below ``2**mantissa_bits`` goes through int64
and back (above that every float is already an integer; NaN and infinities pass through).
Zeros keep the sign of their input (``floor(-0.0)``, ``trunc(-0.5)`` and ``round(-0.4)`` are
``-0.0``), and, as torch's, the gradient is zero everywhere."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._dtype_info import finfo as _finfo
from .._tensor.tensor import Tensor
from ._common import call, check_tensor, zero_gradient

__all__ = ["ceil", "floor", "round", "trunc"]

_INT64 = np.dtype(np.int64)


class _Parts:
    """A floating ``x`` split for rounding: ``small`` where ``|x| < 2**mantissa_bits``,
    ``safe`` (``x`` there, 0 elsewhere: no NaN or infinity reaches a cast) and ``whole``
    (``safe`` truncated through int64)."""

    __slots__ = ("safe", "small", "whole", "x")

    def __init__(self, x: Tensor) -> None:
        self.x = x
        self.small = call("lt.Scalar")(call("abs")(x), 1 / _finfo(x.dtype).eps)
        zero = call("full")([], 0, dtype=x.dtype, device=x.device)
        self.safe = call("where")(self.small, x, zero)
        self.whole = call("astype")(call("astype")(self.safe, _INT64), x.dtype)

    def finish(self, rounded: Tensor) -> Tensor:
        """``rounded`` (of ``safe``) where ``x`` is small, each zero with the sign of ``x``
        (``safe * 0`` is such a zero); ``x`` itself elsewhere."""
        where = call("where")
        zero = call("eq.Scalar")(rounded, 0)
        return where(self.small, where(zero, call("mul.Scalar")(self.safe, 0), rounded), self.x)


def _trunc(x: Tensor) -> Tensor:
    """Each element's integer part, toward zero (integer input: a copy)."""
    p = _Parts(x)
    return p.finish(p.whole)


def _floor(x: Tensor) -> Tensor:
    """The largest integer not above each element (integer input: a copy)."""
    p = _Parts(x)
    below = call("sub.Scalar")(p.whole, 1)
    return p.finish(call("where")(call("gt")(p.whole, p.safe), below, p.whole))


def _ceil(x: Tensor) -> Tensor:
    """The smallest integer not below each element (integer input: a copy)."""
    p = _Parts(x)
    above = call("add.Scalar")(p.whole, 1)
    return p.finish(call("where")(call("lt")(p.whole, p.safe), above, p.whole))


def _round(x: Tensor) -> Tensor:
    """The nearest integer, ties to even (integer input: a copy)."""
    p = _Parts(x)
    frac = call("abs")(call("sub")(p.safe, p.whole))  # exact
    half = call("astype")(call("astype")(call("mul.Scalar")(p.whole, 0.5), _INT64), x.dtype)
    odd = call("ne")(p.whole, call("mul.Scalar")(half, 2))
    tie = call("eq.Scalar")(frac, 0.5)
    up = call("maximum")(call("gt.Scalar")(frac, 0.5), call("minimum")(tie, odd))
    step = call("where")(
        call("lt.Scalar")(p.safe, 0),
        call("full")([], -1, dtype=x.dtype, device=x.device),
        call("full")([], 1, dtype=x.dtype, device=x.device),
    )
    return p.finish(call("where")(up, call("add")(p.whole, step), p.whole))


def _rounding(api: str, fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    def rounded(x: Tensor, /) -> Tensor:
        x = check_tensor(api, x)
        if x.dtype.kind == "c":
            raise TypeError(
                f"oplib.array_api.{api}(): expected a real array, got {x.dtype} (the standard "
                "defines it for real numbers)"
            )
        if x.dtype.kind in "biu":  # already integers: a copy, as the standard says
            return call("clone")(x)
        return zero_gradient(fn(x.detach()), x)

    rounded.__name__ = rounded.__qualname__ = api
    rounded.__doc__ = fn.__doc__
    return rounded


trunc = _rounding("trunc", _trunc)
floor = _rounding("floor", _floor)
ceil = _rounding("ceil", _ceil)
round = _rounding("round", _round)
