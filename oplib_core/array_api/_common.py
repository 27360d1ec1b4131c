"""What every part of the namespace shares: calling a core op, checking that an argument is
a Tensor, reading ``axis`` arguments, and turning a Python scalar operand into a 0-d Tensor."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import numpy as np

from .._dtypes import scalar_dtype
from .._registry.registry import op_named
from .._tensor.tensor import Tensor

__all__ = [
    "axes",
    "call",
    "check_tensor",
    "operands",
    "reduced_size",
    "scalar_fits",
    "scalar_tensor",
    "zero_gradient",
]


def call(name: str) -> Callable[..., Tensor]:
    """The core op ``oplib::<name>``; called with Tensors it returns a Tensor (autograd,
    device and fake mode all follow dispatch)."""
    op: Callable[..., Tensor] = op_named("oplib::" + name)
    return op


def check_tensor(api: str, x: object, argument: str = "x") -> Tensor:
    """``x`` if it is a Tensor; else the ``TypeError`` the standard asks for."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"oplib.array_api.{api}(): expected an oplib Tensor for '{argument}', got "
            f"{type(x).__name__}; convert with oplib.array_api.asarray"
        )
    return x


def scalar_fits(dtype: np.dtype, value: object) -> bool:
    """Whether a Python scalar ``value`` takes the array's dtype under the standard's rules
    (bool with bool, int with integer and floating, float with floating, complex with
    complex); False for anything else."""
    kind = type(value)  # the common cases first: isinstance with the ABCs below is slower
    if kind is float:
        return dtype.kind in "fcV"
    if kind is int:
        return dtype.kind in "iufcV"
    if isinstance(value, (bool, np.bool_)):
        return dtype.kind == "b"
    if isinstance(value, numbers.Integral):
        return dtype.kind in "iufcV"
    if isinstance(value, numbers.Real):
        return dtype.kind in "fcV"
    return isinstance(value, numbers.Complex) and dtype.kind == "c"


def scalar_tensor(api: str, value: object, like: Tensor) -> Tensor:
    """``value`` (a Python scalar) as a 0-d Tensor on ``like``'s device: of ``like``'s dtype
    when the standard's scalar rules allow it, else the default dtype of the scalar's kind."""
    if not isinstance(value, (numbers.Number, np.generic)):
        raise TypeError(
            f"oplib.array_api.{api}(): expected an oplib Tensor or a Python scalar, got "
            f"{type(value).__name__}"
        )
    dtype = like.dtype
    if not scalar_fits(dtype, value):
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(
                f"oplib.array_api.{api}(): a bool scalar does not combine with a {dtype} array"
            )
        dtype = scalar_dtype(value)
    return call("full")([], value, dtype=dtype, device=like.device)


def operands(api: str, x1: object, x2: object) -> tuple[Tensor, Tensor]:
    """The two operands of a binary function as Tensors (at most one may be a Python
    scalar, which takes the other's dtype and device)."""
    if isinstance(x1, Tensor):
        if isinstance(x2, Tensor):
            return x1, x2
        return x1, scalar_tensor(api, x2, x1)
    if isinstance(x2, Tensor):
        return scalar_tensor(api, x1, x2), x2
    raise TypeError(
        f"oplib.array_api.{api}(): expected at least one oplib Tensor, got "
        f"{type(x1).__name__} and {type(x2).__name__}"
    )


def axes(api: str, axis: int | Sequence[int] | None, ndim: int) -> list[int] | None:
    """The standard's ``axis`` (None, an int or a tuple) as the core ops' ``dim`` list,
    normalised and checked (``()`` stays ``[]``: the callers treat it as no reduction)."""
    if axis is None:
        return None
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, checked as below
        return [axis % ndim]
    given = [axis] if isinstance(axis, int) else list(axis)
    out = []
    for a in given:
        if not -ndim <= a < ndim:
            raise IndexError(
                f"oplib.array_api.{api}(): axis {a} is out of bounds for an array of "
                f"dimension {ndim}"
            )
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"oplib.array_api.{api}(): repeated axis in {tuple(given)}")
    return out


def reduced_size(shape: tuple[int, ...], dims: list[int] | None) -> int:
    """How many elements each result element of a reduction over ``dims`` combines."""
    n = 1
    for i, s in enumerate(shape):
        if dims is None or i in dims:
            n *= s
    return n


def zero_gradient(out: Tensor, x: Tensor) -> Tensor:
    """``out`` (computed from ``x.detach()``) tied to ``x``'s graph with a zero gradient, as
    torch's piecewise-constant functions (``sign``, ``floor`` …): ``where`` with an all-true
    condition."""
    if not x.requires_grad:
        return out
    true = call("ones")(list(x.shape), dtype=np.dtype(np.bool_), device=x.device)
    return call("where")(true, out, x)
