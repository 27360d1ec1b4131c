"""The standard's elementwise functions: a core op each, or a composition of core ops (so
the result keeps its autograd graph and stays on its device).

Binary functions take two Tensors, or a Tensor and a Python scalar (which takes the
Tensor's dtype, the rule of the 2024.12 revision); the dtypes of two Tensors combine as the
core ops combine them (numpy's promotion, torch's for bfloat16 and float8)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import is_floating, result_type
from .._tensor.numpy_interop import UFUNCS, NumpyBinary
from .._tensor.tensor import Tensor
from ._common import call, check_tensor, operands, scalar_fits, scalar_tensor, zero_gradient

__all__ = [
    "abs",
    "add",
    "clip",
    "cos",
    "divide",
    "equal",
    "exp",
    "expm1",
    "greater",
    "greater_equal",
    "hypot",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "positive",
    "pow",
    "sign",
    "sin",
    "sqrt",
    "square",
    "subtract",
    "tan",
    "tanh",
]


def _unary(api: str, op: str) -> Callable[[Tensor], Tensor]:
    def fn(x: Tensor, /) -> Tensor:
        return call(op)(check_tensor(api, x))

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = f"The standard's ``{api}``: ``oplib::{op}``."
    return fn


def _binary(api: str, ufunc: str) -> Callable[[Any, Any], Tensor]:
    """The standard's binary function ``api`` through the core ops numpy's ``ufunc`` maps
    to (``_numpy_interop.UFUNCS``, the one table of them): a Python scalar of the array's
    kind goes to the op's ``.Scalar`` overload (or its reflection when on the left), any
    other first becomes a 0-d Tensor."""
    spec = UFUNCS[ufunc]
    assert isinstance(spec, NumpyBinary), ufunc
    op, scalar, reflected = spec.op, spec.scalar, spec.reflected

    def fn(x1: Any, x2: Any, /) -> Tensor:
        if isinstance(x1, Tensor):
            if scalar is not None and not isinstance(x2, Tensor) and scalar_fits(x1.dtype, x2):
                return call(scalar)(x1, x2)
        elif reflected is not None and isinstance(x2, Tensor) and scalar_fits(x2.dtype, x1):
            return call(reflected)(x2, x1)
        return call(op)(*operands(api, x1, x2))

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = f"The standard's ``{api}``: ``oplib::{op}`` (one side may be a Python scalar)."
    return fn


abs = _unary("abs", "abs")
cos = _unary("cos", "cos")
exp = _unary("exp", "exp")
log = _unary("log", "log")
negative = _unary("negative", "neg")
sin = _unary("sin", "sin")
sqrt = _unary("sqrt", "sqrt")
tanh = _unary("tanh", "tanh")

add = _binary("add", "add")
subtract = _binary("subtract", "subtract")
multiply = _binary("multiply", "multiply")
divide = _binary("divide", "divide")
pow = _binary("pow", "power")
maximum = _binary("maximum", "maximum")
minimum = _binary("minimum", "minimum")
equal = _binary("equal", "equal")
not_equal = _binary("not_equal", "not_equal")
less = _binary("less", "less")
less_equal = _binary("less_equal", "less_equal")
greater = _binary("greater", "greater")
greater_equal = _binary("greater_equal", "greater_equal")


def positive(x: Tensor, /) -> Tensor:
    """``+x``: a copy (``oplib::clone``), in the graph."""
    return call("clone")(check_tensor("positive", x))


def square(x: Tensor, /) -> Tensor:
    """``x * x``."""
    x = check_tensor("square", x)
    return call("mul")(x, x)


def tan(x: Tensor, /) -> Tensor:
    """``sin(x) / cos(x)``."""
    x = check_tensor("tan", x)
    return call("div")(call("sin")(x), call("cos")(x))


def expm1(x: Tensor, /) -> Tensor:
    """``exp(x) - 1`` without the cancellation near 0: ``tanh(x / 2) * (exp(x) + 1)``
    (the same identity, exact in real arithmetic, accurate to a few ulp everywhere)."""
    x = check_tensor("expm1", x)
    half = call("tanh")(call("mul.Scalar")(x, 0.5))
    return call("mul")(half, call("add.Scalar")(call("exp")(x), 1))


def _real_floating(api: str, x: Tensor) -> Tensor:
    x = check_tensor(api, x)
    if not is_floating(x.dtype):
        raise TypeError(
            f"oplib.array_api.{api}(): expected a real floating array, got {x.dtype} (complex "
            "arrays are not supported yet)"
        )
    return x


def _log1p(x: Tensor) -> Tensor:
    """``log1p`` of a real floating ``x``: ``log(u) - ((u - 1) - x) / u`` with ``u = 1 + x``
    (the rounding error of ``1 + x``, corrected to first order: accurate near 0, and so is
    its gradient, ``1/u`` plus a term of the rounding error's size); -1, +inf and zeros are
    exact."""
    where = call("where")
    u = call("add.Scalar")(x, 1)
    minus_one = call("eq.Scalar")(u, 0)
    exact = call("maximum")(
        call("maximum")(minus_one, call("eq.Scalar")(x, math.inf)), call("eq.Scalar")(x, 0)
    )
    zero = call("full")([], 0, dtype=x.dtype, device=x.device)
    us = where(exact, call("add.Scalar")(zero, 1), u)  # no 0/0 or inf - inf where exact
    xs = where(exact, zero, x)
    correction = call("div")(call("sub")(call("sub.Scalar")(us, 1), xs), us)
    value = call("sub")(call("log")(us), correction)
    return where(exact, where(minus_one, call("add.Scalar")(zero, -math.inf), x), value)


def log1p(x: Tensor, /) -> Tensor:
    """``log(1 + x)``, accurate for ``x`` near 0 (see ``_log1p``); real floating arrays."""
    return _log1p(_real_floating("log1p", x))


def logaddexp(x1: Any, x2: Any, /) -> Tensor:
    """``log(exp(x1) + exp(x2))`` without overflow: ``max + log1p(exp(-|x1 - x2|))``;
    where ``x1 == x2`` (infinities included), ``(x1 + x2) / 2 + log 2`` (half the gradient
    to each); real floating arrays."""
    a, b = operands("logaddexp", x1, x2)
    a, b = _real_floating("logaddexp", a), _real_floating("logaddexp", b)
    where = call("where")
    tie = call("eq")(a, b)
    zero = call("full")([], 0, dtype=result_type(a.dtype, b.dtype), device=a.device)
    a_apart, b_apart = where(tie, zero, a), where(tie, zero, b)  # no inf - inf
    a_tie, b_tie = where(tie, a, zero), where(tie, b, zero)
    gap = call("exp")(call("neg")(call("abs")(call("sub")(a_apart, b_apart))))
    apart = call("add")(call("maximum")(a, b), _log1p(gap))
    mid = call("add")(call("mul.Scalar")(a_tie, 0.5), call("mul.Scalar")(b_tie, 0.5))
    return where(tie, call("add.Scalar")(mid, math.log(2.0)), apart)


def log2(x: Tensor, /) -> Tensor:
    """``log(x) / log(2)``."""
    return call("div.Scalar")(call("log")(check_tensor("log2", x)), math.log(2.0))


def log10(x: Tensor, /) -> Tensor:
    """``log(x) / log(10)``."""
    return call("div.Scalar")(call("log")(check_tensor("log10", x)), math.log(10.0))


def isnan(x: Tensor, /) -> Tensor:
    """``x != x``: True exactly where ``x`` (or a complex ``x``'s real or imaginary part) is
    NaN."""
    x = check_tensor("isnan", x)
    return call("ne")(x, x)


def isfinite(x: Tensor, /) -> Tensor:
    """``|x| < inf`` for a real ``x`` (False for NaN and either infinity, True for every
    integer); ``x - x == 0`` for a complex one (``|x|`` of huge finite parts overflows)."""
    x = check_tensor("isfinite", x)
    if x.dtype.kind != "c":
        return call("lt.Scalar")(call("abs")(x), math.inf)
    with np.errstate(invalid="ignore"):  # inf - inf is the NaN asked for (numpy arrays)
        return call("eq.Scalar")(call("sub")(x, x), 0)


def isinf(x: Tensor, /) -> Tensor:
    """``|x| == inf``: for a complex ``x``, an infinite part, whatever the other one is
    (and not finite, since ``|x|`` of huge finite parts overflows)."""
    x = check_tensor("isinf", x)
    if x.dtype.kind != "c":
        return call("eq.Scalar")(call("abs")(x), math.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        infinite = call("eq.Scalar")(call("abs")(x), math.inf)
    return call("minimum")(infinite, call("eq.Scalar")(isfinite(x), False))


def sign(x: Tensor, /) -> Tensor:
    """-1, 0 or 1 by the sign of a real ``x`` (NaN stays NaN, a zero keeps its sign);
    ``x / |x|`` (0 at 0) for a complex ``x``. Its gradient is 0 everywhere, as torch's."""
    x = check_tensor("sign", x)
    d = x.detach()
    where = call("where")
    if d.dtype.kind == "c":
        zero = call("eq.Scalar")(d, 0)
        safe = where(zero, scalar_tensor("sign", 1, d), d)
        return zero_gradient(where(zero, d, call("div")(safe, call("abs")(safe))), x)
    out = where(call("gt.Scalar")(d, 0), scalar_tensor("sign", 1, d), d)
    if d.dtype.kind != "u":
        out = where(call("lt.Scalar")(d, 0), scalar_tensor("sign", -1, d), out)
    return zero_gradient(out, x)


def hypot(x1: Any, x2: Any, /) -> Tensor:
    """``sqrt(x1**2 + x2**2)`` of real floating arrays without overflow or underflow in
    between: ``m * sqrt(1 + (n / m)**2)`` with ``m, n`` the larger and smaller magnitude;
    an infinite side gives ``inf`` even against NaN, as the standard says."""
    a, b = operands("hypot", x1, x2)
    for t in (a, b):
        if not is_floating(t.dtype):
            raise TypeError(
                f"oplib.array_api.hypot(): expected real floating arrays, got {t.dtype}"
            )
    where, either = call("where"), call("maximum")
    a, b = call("abs")(a), call("abs")(b)
    big, small = either(a, b), call("minimum")(a, b)
    # where big is 0, inf or NaN the result is big (or inf): no ratio there (no 0/0, inf/inf)
    plain = either(
        either(call("eq.Scalar")(big, 0), call("eq.Scalar")(big, math.inf)), call("ne")(big, big)
    )
    zero = call("full")([], 0, dtype=big.dtype, device=big.device)
    ratio = where(plain, zero, call("div")(small, where(plain, call("add.Scalar")(zero, 1), big)))
    out = call("mul")(big, call("sqrt")(call("add.Scalar")(call("mul")(ratio, ratio), 1)))
    infinite = either(call("eq.Scalar")(a, math.inf), call("eq.Scalar")(b, math.inf))
    return where(infinite, call("add.Scalar")(zero, math.inf), out)


def _bools(api: str, x: Tensor) -> Tensor:
    x = check_tensor(api, x)
    if x.dtype.kind != "b":
        raise TypeError(f"oplib.array_api.{api}(): expected a bool array, got {x.dtype}")
    return x


def logical_not(x: Tensor, /) -> Tensor:
    """``x == False`` of a bool array."""
    return call("eq.Scalar")(_bools("logical_not", x), False)


def logical_and(x1: Any, x2: Any, /) -> Tensor:
    """The minimum of two bool arrays."""
    a, b = operands("logical_and", x1, x2)
    return call("minimum")(_bools("logical_and", a), _bools("logical_and", b))


def logical_or(x1: Any, x2: Any, /) -> Tensor:
    """The maximum of two bool arrays."""
    a, b = operands("logical_or", x1, x2)
    return call("maximum")(_bools("logical_or", a), _bools("logical_or", b))


def logical_xor(x1: Any, x2: Any, /) -> Tensor:
    """``x1 != x2`` of two bool arrays."""
    a, b = operands("logical_xor", x1, x2)
    return call("ne")(_bools("logical_xor", a), _bools("logical_xor", b))


def clip(x: Tensor, /, min: Any = None, max: Any = None) -> Tensor:
    """``minimum(maximum(x, min), max)``; ``min``/``max`` are Python scalars or arrays, the
    result has ``x``'s dtype (NaN propagates)."""
    x = check_tensor("clip", x)
    out = x
    for bound, op in ((min, "maximum"), (max, "minimum")):
        if bound is None:
            continue
        b = bound if isinstance(bound, Tensor) else scalar_tensor("clip", bound, x)
        out = call(op)(out, b)
    if out is x:
        return call("clone")(x)
    if out.dtype != x.dtype:
        out = call("astype")(out, x.dtype)
    return out
