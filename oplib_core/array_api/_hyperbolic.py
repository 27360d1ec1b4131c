"""The standard's hyperbolic functions and their inverses, for real floating arrays,
composed from core ops in the forms that stay accurate where the textbook ones cancel or
overflow (the inverses through ``log1p``); each zero keeps its sign."""

from __future__ import annotations

import math

from .._dtype_info import finfo as _finfo
from .._tensor.tensor import Tensor
from ._common import call
from ._elementwise import _log1p, _real_floating

__all__ = ["acosh", "asinh", "atanh", "cosh", "sinh"]

_LOG2 = math.log(2.0)


def _const(value: float, like: Tensor) -> Tensor:
    return call("full")([], value, dtype=like.dtype, device=like.device)


def _huge(x: Tensor) -> float:
    """Beyond this, ``1 + x**2`` is ``x**2`` in ``x``'s precision (and ``x**2`` may overflow)."""
    return 1 / math.sqrt(_finfo(x.dtype).eps)


def _odd(x: Tensor, of_magnitude: Tensor) -> Tensor:
    """``f(x)`` from ``f(|x|)`` for an odd ``f`` with ``f(0) = 0``: negated below 0, and a
    zero ``x`` itself (its sign, and the gradient 1 these functions have at 0)."""
    where = call("where")
    negated = where(call("lt.Scalar")(x, 0), call("neg")(of_magnitude), of_magnitude)
    return where(call("eq.Scalar")(x, 0), x, negated)


def cosh(x: Tensor, /) -> Tensor:
    """``(e**|x| + e**-|x|) / 2``, and ``e**(|x| - log 2)`` where ``e**|x|`` alone would
    overflow but the result does not."""
    x = _real_floating("cosh", x)
    where = call("where")
    a = call("abs")(x)
    limit = math.log(_finfo(x.dtype).max)  # e**limit is the largest finite value
    moderate = call("lt.Scalar")(a, limit)  # False for inf and NaN
    e = call("exp")(where(moderate, a, _const(0, x)))
    near = call("add")(call("mul.Scalar")(e, 0.5), call("rdiv.Scalar")(e, 0.5))
    beyond = where(moderate, _const(limit, x), a)
    return where(moderate, near, call("exp")(call("sub.Scalar")(beyond, _LOG2)))


def sinh(x: Tensor, /) -> Tensor:
    """``tanh(x / 2) * (cosh(x) + 1)``: the half-angle identity, accurate near 0 (no
    ``e**x - e**-x`` cancellation) and as far as ``cosh`` goes."""
    x = _real_floating("sinh", x)
    half = call("tanh")(call("mul.Scalar")(x, 0.5))
    return call("mul")(half, call("add.Scalar")(cosh(x), 1))


def asinh(x: Tensor, /) -> Tensor:
    """``log1p(a + a**2 / (1 + sqrt(1 + a**2)))`` of ``a = |x|``, ``log(a) + log 2`` for
    huge ``a``, odd in ``x``."""
    x = _real_floating("asinh", x)
    where = call("where")
    a = call("abs")(x)
    huge = call("gt.Scalar")(a, _huge(x))
    small = where(huge, _const(0, x), a)
    square = call("mul")(small, small)
    inner = call("add")(
        small,
        call("div")(square, call("add.Scalar")(call("sqrt")(call("add.Scalar")(square, 1)), 1)),
    )
    far = call("add.Scalar")(call("log")(where(huge, a, _const(1, x))), _LOG2)
    return _odd(x, where(huge, far, _log1p(inner)))


def acosh(x: Tensor, /) -> Tensor:
    """``log1p(t + sqrt(2t + t**2))`` of ``t = x - 1`` (exact near 1), ``log(x) + log 2``
    for huge ``x``; NaN below 1."""
    x = _real_floating("acosh", x)
    where = call("where")
    huge = call("gt.Scalar")(x, _huge(x))
    t = call("sub.Scalar")(where(huge, _const(1, x), x), 1)
    root = call("sqrt")(call("add")(call("mul.Scalar")(t, 2), call("mul")(t, t)))
    far = call("add.Scalar")(call("log")(where(huge, x, _const(1, x))), _LOG2)
    out = where(huge, far, _log1p(call("add")(t, root)))
    return where(call("lt.Scalar")(x, 1), _const(math.nan, x), out)  # t(t + 2) > 0 below -1


def atanh(x: Tensor, /) -> Tensor:
    """``log1p(2a / (1 - a)) / 2`` of ``a = |x|``, odd in ``x`` (infinite at ±1, NaN
    beyond)."""
    x = _real_floating("atanh", x)
    a = call("abs")(x)
    ratio = call("div")(call("mul.Scalar")(a, 2), call("rsub.Scalar")(a, 1))
    return _odd(x, call("mul.Scalar")(_log1p(ratio), 0.5))
