"""The standard's manipulation, searching (``where``) and linear algebra functions, over the
core shape ops and ``matmul``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _factories
from .._tensor.tensor import Tensor
from ..fake._shapes import broadcast_shapes
from ._common import axes, call, check_tensor, operands

__all__ = [
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "matmul",
    "matrix_transpose",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "take",
    "tensordot",
    "tile",
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
    """The slices of ``x`` along ``axis``, each without that axis (``oplib::select``)."""
    x = check_tensor("unstack", x)
    (dim,) = axes("unstack", axis, x.ndim) or [0]
    select = call("select.int")
    return tuple(select(x, dim, i) for i in range(x.shape[dim]))


def flip(x: Tensor, /, *, axis: int | tuple[int, ...] | None = None) -> Tensor:
    """``oplib::flip`` along ``axis`` (every axis when None)."""
    x = check_tensor("flip", x)
    dims = axes("flip", axis, x.ndim)
    return call("flip")(x, list(range(x.ndim)) if dims is None else dims)


def roll(
    x: Tensor,
    /,
    shift: int | tuple[int, ...],
    *,
    axis: int | tuple[int, ...] | None = None,
) -> Tensor:
    """``oplib::roll``; ``axis=None`` rolls the flattened array and restores the shape."""
    x = check_tensor("roll", x)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    if axis is None:
        flat = call("reshape")(x, [math.prod(x.shape)])
        return call("reshape")(call("roll")(flat, shifts, [0]), list(x.shape))
    dims = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) != len(dims):
        raise ValueError(
            f"oplib.array_api.roll(): shift and axis must have the same length, got "
            f"{len(shifts)} and {len(dims)}"
        )
    return call("roll")(x, shifts, dims)


def tile(x: Tensor, repetitions: tuple[int, ...], /) -> Tensor:
    """``oplib::tile``."""
    return call("tile")(check_tensor("tile", x), list(repetitions))


def take(x: Tensor, indices: Tensor, /, *, axis: int | None = None) -> Tensor:
    """``oplib::index_select`` of the 1-d integer ``indices`` along ``axis`` (which the
    standard requires when ``x`` has more than one dimension)."""
    x = check_tensor("take", x)
    indices = check_tensor("take", indices, "indices")
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"oplib.array_api.take(): axis is required for a {x.ndim}-d array")
        axis = 0
    (dim,) = axes("take", axis, x.ndim) or [0]
    return call("index_select")(x, dim, indices)


def repeat(x: Tensor, repeats: int | Tensor, /, *, axis: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``axis`` (the flattened array when
    None), as numpy's ``repeat`` (torch's ``repeat_interleave``, not ``Tensor.repeat``): an
    int by ``unsqueeze``/``broadcast_to``/``reshape``; a Tensor of counts, one per element
    along ``axis``, by ``index_select`` (its values are read, so not on data-less arrays)."""
    x = check_tensor("repeat", x)
    if axis is None:
        x, dim = call("reshape")(x, [math.prod(x.shape)]), 0
    else:
        (dim,) = axes("repeat", axis, x.ndim) or [0]
    n = x.shape[dim]
    if isinstance(repeats, Tensor):
        counts = [int(c) for c in repeats.to("cpu").tolist()]
        if len(counts) == 1:
            counts *= n
        if len(counts) != n or any(c < 0 for c in counts):
            raise ValueError(
                f"oplib.array_api.repeat(): repeats must hold one non-negative count per "
                f"element along axis {dim} ({n}), got {counts}"
            )
        index = [i for i, c in enumerate(counts) for _ in range(c)]
        idx = _factories.tensor(index, dtype=np.int64, device=x.device)
        return call("index_select")(x, dim, idx)
    if not isinstance(repeats, int) or repeats < 0:
        raise ValueError(f"oplib.array_api.repeat(): repeats must be >= 0, got {repeats!r}")
    shape = list(x.shape)
    wide = call("unsqueeze")(x, dim + 1)
    wide = call("broadcast_to")(wide, [*shape[: dim + 1], repeats, *shape[dim + 1 :]])
    return call("reshape")(wide, [*shape[:dim], n * repeats, *shape[dim + 1 :]])


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
