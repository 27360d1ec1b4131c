"""The standard's elementwise functions: a core op each, or a composition of core ops (so
the result keeps its autograd graph and stays on its device).

Binary functions take two Tensors, or a Tensor and a Python scalar (which takes the
Tensor's dtype, the rule of the 2024.12 revision); the dtypes of two Tensors combine as the
core ops combine them (numpy's promotion, torch's for bfloat16 and float8)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._numpy_interop import UFUNCS, NumpyBinary
from .._tensor import Tensor
from ._common import call, check_tensor, operands, scalar_fits, scalar_tensor

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
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log2",
    "log10",
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
    """``x - x == 0``: False for NaN and either infinity (in either part of a complex
    ``x``), True for every integer."""
    x = check_tensor("isfinite", x)
    return call("eq.Scalar")(call("sub")(x, x), 0)


def isinf(x: Tensor, /) -> Tensor:
    """``|x| == inf`` (a complex ``x`` with an infinite part, whatever the other one is);
    for complex ``x`` also not finite, since ``|x|`` of huge finite parts overflows."""
    x = check_tensor("isinf", x)
    infinite = call("eq.Scalar")(call("abs")(x), math.inf)
    if x.dtype.kind != "c":
        return infinite
    return call("minimum")(infinite, call("ne.Scalar")(call("sub")(x, x), 0))


def sign(x: Tensor, /) -> Tensor:
    """-1, 0 or 1 by the sign of a real ``x`` (NaN stays NaN, a zero keeps its sign);
    ``x / |x|`` (0 at 0) for a complex ``x``. Its gradient is 0 everywhere, as torch's."""
    x = check_tensor("sign", x)
    where = call("where")
    zeros = call("mul.Scalar")(x, 0)  # 0 or -0 as x, NaN for NaN: no gradient flows
    if x.dtype.kind == "c":
        zero = call("eq.Scalar")(x, 0)
        safe = where(zero, scalar_tensor("sign", 1, x), x)
        return where(zero, zeros, call("div")(safe, call("abs")(safe)))
    out = where(call("gt.Scalar")(x, 0), scalar_tensor("sign", 1, x), zeros)
    if x.dtype.kind == "u":
        return out
    return where(call("lt.Scalar")(x, 0), scalar_tensor("sign", -1, x), out)


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
