"""The standard's manipulation, searching (``where``) and linear algebra functions, over the
core shape ops and ``matmul``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._tensor import Tensor
from ..fake._shapes import broadcast_shapes
from ._common import axes, call, check_tensor, operands

__all__ = [
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "matmul",
    "matrix_transpose",
    "moveaxis",
    "permute_dims",
    "reshape",
    "squeeze",
    "stack",
    "tensordot",
    "unstack",
    "vecdot",
    "where",
]


def broadcast_to(x: Tensor, /, shape: tuple[int, ...]) -> Tensor:
    """``oplib::broadcast_to``."""
    return call("broadcast_to")(check_tensor("broadcast_to", x), list(shape))


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    """Every array broadcast to their common shape."""
    ts = [check_tensor("broadcast_arrays", a, "arrays") for a in arrays]
    shape = list(broadcast_shapes(*(t.shape for t in ts)))
    return [call("broadcast_to")(t, shape) for t in ts]


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    """``oplib::cat``; ``axis=None`` joins the flattened arrays."""
    ts = [check_tensor("concat", a, "arrays") for a in arrays]
    if axis is None:
        return call("cat")([call("reshape")(t, [math.prod(t.shape)]) for t in ts], 0)
    return call("cat")(ts, axis)


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    """``oplib::stack``."""
    return call("stack")([check_tensor("stack", a, "arrays") for a in arrays], axis)


def expand_dims(x: Tensor, /, *, axis: int = 0) -> Tensor:
    """``oplib::unsqueeze``: a new axis of size 1 at ``axis`` (in ``[-ndim - 1, ndim]``)."""
    x = check_tensor("expand_dims", x)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise IndexError(
            f"oplib.array_api.expand_dims(): axis {axis} is out of bounds for a result of "
            f"dimension {x.ndim + 1}"
        )
    return call("unsqueeze")(x, axis)


def squeeze(x: Tensor, /, axis: int | tuple[int, ...]) -> Tensor:
    """``oplib::squeeze`` of the given axes, each of which must have size 1 (``ValueError``
    otherwise; torch skips them silently)."""
    x = check_tensor("squeeze", x)
    dims = axes("squeeze", axis, x.ndim) or []
    for d in dims:
        if x.shape[d] != 1:
            raise ValueError(
                f"oplib.array_api.squeeze(): axis {d} has size {x.shape[d]}, not 1 (shape "
                f"{x.shape})"
            )
    return call("squeeze")(x, dims) if dims else call("clone")(x)


def permute_dims(x: Tensor, /, axes: tuple[int, ...]) -> Tensor:
    """``oplib::permute``."""
    return call("permute")(check_tensor("permute_dims", x), list(axes))


def moveaxis(
    x: Tensor, source: int | tuple[int, ...], destination: int | tuple[int, ...], /
) -> Tensor:
    """``oplib::permute`` that puts the ``source`` axes at ``destination``."""
    x = check_tensor("moveaxis", x)
    src = axes("moveaxis", source, x.ndim) or []
    dst = axes("moveaxis", destination, x.ndim) or []
    if len(src) != len(dst):
        raise ValueError(
            "oplib.array_api.moveaxis(): source and destination must have the same number "
            f"of axes, got {len(src)} and {len(dst)}"
        )
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return call("permute")(x, order)


def reshape(x: Tensor, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Tensor:
    """``oplib::reshape``; ``copy=True`` copies (``oplib::clone``). ``copy=False`` is
    refused: the core op does not promise a view on every backend."""
    x = check_tensor("reshape", x)
    if copy is False:
        raise ValueError(
            "oplib.array_api.reshape(): copy=False is not supported (oplib::reshape does not "
            "promise a view on every backend); pass copy=None"
        )
    out = call("reshape")(x, list(shape))
    return call("clone")(out) if copy else out


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``axis``, each without that axis."""
    x = check_tensor("unstack", x)
    (dim,) = axes("unstack", axis, x.ndim) or [0]
    narrow, squeeze_ = call("_narrow"), call("squeeze")
    return tuple(squeeze_(narrow(x, dim, i, 1), [dim]) for i in range(x.shape[dim]))


def where(condition: Tensor, x1: Any, x2: Any, /) -> Tensor:
    """``oplib::where``: ``x1`` where ``condition`` holds, else ``x2`` (one of them may be a
    Python scalar)."""
    condition = check_tensor("where", condition, "condition")
    a, b = operands("where", x1, x2)
    return call("where")(condition, a, b)


def matmul(x1: Tensor, x2: Tensor, /) -> Tensor:
    """``oplib::matmul``."""
    return call("matmul")(check_tensor("matmul", x1, "x1"), check_tensor("matmul", x2, "x2"))


def matrix_transpose(x: Tensor, /) -> Tensor:
    """The last two axes swapped (``oplib::transpose``)."""
    x = check_tensor("matrix_transpose", x)
    if x.ndim < 2:
        raise ValueError(
            f"oplib.array_api.matrix_transpose(): expected at least 2 dimensions, got {x.ndim}"
        )
    return call("transpose")(x, -2, -1)


def tensordot(
    x1: Tensor, x2: Tensor, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2
) -> Tensor:
    """Contract ``x1``'s axes with ``x2``'s (the last ``axes`` of ``x1`` with the first of
    ``x2``, or the two given sequences): permute, reshape to matrices, ``oplib::matmul``."""
    a = check_tensor("tensordot", x1, "x1")
    b = check_tensor("tensordot", x2, "x2")
    if isinstance(axes, int):
        if axes < 0 or axes > min(a.ndim, b.ndim):
            raise ValueError(
                f"oplib.array_api.tensordot(): axes={axes} must be in [0, "
                f"{min(a.ndim, b.ndim)}] for arrays of dimensions {a.ndim} and {b.ndim}"
            )
        ca, cb = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ca = [d % a.ndim for d in axes[0]] if a.ndim else list(axes[0])
        cb = [d % b.ndim for d in axes[1]] if b.ndim else list(axes[1])
    for i, j in zip(ca, cb, strict=True):
        if a.shape[i] != b.shape[j]:
            raise ValueError(
                f"oplib.array_api.tensordot(): contracted axes {i} of x1 (size {a.shape[i]}) "
                f"and {j} of x2 (size {b.shape[j]}) differ"
            )
    fa = [d for d in range(a.ndim) if d not in ca]
    fb = [d for d in range(b.ndim) if d not in cb]
    k = math.prod(a.shape[d] for d in ca)
    am = call("reshape")(call("permute")(a, fa + ca), [math.prod(a.shape[d] for d in fa), k])
    bm = call("reshape")(call("permute")(b, cb + fb), [k, math.prod(b.shape[d] for d in fb)])
    shape = [a.shape[d] for d in fa] + [b.shape[d] for d in fb]
    return call("reshape")(call("matmul")(am, bm), shape)


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """``sum(x1 * x2, axis)`` after broadcasting, for real arrays (a complex ``x1`` needs a
    conjugate, which the core op set lacks: ``TypeError``)."""
    a = check_tensor("vecdot", x1, "x1")
    b = check_tensor("vecdot", x2, "x2")
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        raise TypeError(
            "oplib.array_api.vecdot(): complex arrays are not supported yet (no conjugate op "
            "in the core op set)"
        )
    if not -min(a.ndim, b.ndim) <= axis < 0 and not 0 <= axis < min(a.ndim, b.ndim):
        raise ValueError(f"oplib.array_api.vecdot(): axis {axis} is out of bounds")
    if a.shape[axis] != b.shape[axis]:
        raise ValueError(
            f"oplib.array_api.vecdot(): the contracted axis has size {a.shape[axis]} in x1 "
            f"and {b.shape[axis]} in x2"
        )
    product = call("mul")(a, b)
    dim = axis if axis >= 0 else product.ndim + axis
    return call("sum")(product, [dim], False, dtype=product.dtype)
