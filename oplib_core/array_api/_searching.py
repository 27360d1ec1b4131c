"""The standard's ``argmax`` and ``argmin``, composed from core ops: the extreme value
along the axis (``amax``/``amin``, keeping the axis), then the smallest index where an
element equals it (NaN counts as equal to NaN, so the first NaN wins, as in numpy)."""

from __future__ import annotations

import numpy as np

from .._tensor.tensor import Tensor
from ._common import axes, call, check_tensor

__all__ = ["argmax", "argmin"]

_INT64 = np.dtype(np.int64)


def _arg(api: str, extreme: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    x = check_tensor(api, x).detach()  # indices have no gradient
    if x.dtype.kind == "c":
        raise TypeError(f"oplib.array_api.{api}(): expected a real array, got {x.dtype}")
    flat = axis is None
    data = call("reshape")(x, [x.numel()]) if flat else x
    (dim,) = axes(api, 0 if flat else axis, data.ndim) or [0]
    n = data.shape[dim]
    if n == 0:
        raise ValueError(f"oplib.array_api.{api}(): attempt to get {api} of an empty sequence")
    best = call(extreme)(data, [dim], True)
    hit = call("eq")(data, best)
    if data.dtype.kind not in "biu":  # NaN is the extreme: its first position
        hit = call("maximum")(hit, call("minimum")(call("ne")(data, data), call("ne")(best, best)))
    view = [1] * data.ndim
    view[dim] = n
    index = call("reshape")(call("arange")(n, dtype=_INT64, device=x.device), view)
    beyond = call("full")([], n, dtype=_INT64, device=x.device)
    out = call("amin")(call("where")(hit, index, beyond), [dim], keepdims or flat)
    if flat:
        return call("reshape")(out, [1] * x.ndim if keepdims else [])
    return out


def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """The index of the first maximum along ``axis`` (of the flattened array when None)."""
    return _arg("argmax", "amax", x, axis, keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """The index of the first minimum along ``axis`` (of the flattened array when None)."""
    return _arg("argmin", "amin", x, axis, keepdims)
