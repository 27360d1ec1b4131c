"""The standard's statistical and utility reductions over the core reductions (``sum``,
``mean``, ``amax``, ``amin``); ``axis=()`` reduces nothing, as the standard says (the core
ops read an empty ``dim`` as "every dimension", as torch does)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._dtypes import to_dtype
from .._tensor.tensor import Tensor
from ._common import axes, call, check_tensor, reduced_size

__all__ = ["all", "any", "max", "mean", "min", "std", "sum", "var"]

Axis = int | Sequence[int] | None


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    """The standard's default accumulation dtype: the default integer (int64) for bool and
    signed integers, uint64 for unsigned ones, the input's own for floating ones."""
    if dtype.kind in "bi":
        return np.dtype(np.int64)
    if dtype.kind == "u":
        return np.dtype(np.uint64)
    return dtype


def sum(x: Tensor, /, *, axis: Axis = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """``oplib::sum``, accumulating in the standard's default dtype (above) unless given."""
    x = check_tensor("sum", x)
    dims = axes("sum", axis, x.ndim)
    out_dtype = _sum_dtype(x.dtype) if dtype is None else to_dtype(dtype)
    if dims == []:
        return call("astype")(x, out_dtype)
    return call("sum")(x, dims, keepdims, dtype=out_dtype)


def mean(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """``oplib::mean`` of a floating array."""
    x = check_tensor("mean", x)
    dims = axes("mean", axis, x.ndim)
    if dims == []:
        return call("clone")(x)
    return call("mean")(x, dims, keepdims)


def _extreme(api: str, op: str, x: Tensor, axis: Axis, keepdims: bool) -> Tensor:
    x = check_tensor(api, x)
    dims = axes(api, axis, x.ndim)
    if dims == []:
        return call("clone")(x)
    if reduced_size(x.shape, dims) == 0:
        raise ValueError(f"oplib.array_api.{api}(): zero-size reduction has no identity")
    return call(op)(x, dims, keepdims)


def max(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """``oplib::amax`` (NaN propagates; a zero-size reduction raises ``ValueError``)."""
    return _extreme("max", "amax", x, axis, keepdims)


def min(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """``oplib::amin`` (NaN propagates; a zero-size reduction raises ``ValueError``)."""
    return _extreme("min", "amin", x, axis, keepdims)


def var(
    x: Tensor,
    /,
    *,
    axis: Axis = None,
    correction: int | float = 0.0,
    keepdims: bool = False,
) -> Tensor:
    """``sum((x - mean(x))**2) / (N - correction)`` of a real floating array."""
    x = check_tensor("var", x)
    if x.dtype.kind == "c":
        raise TypeError("oplib.array_api.var(): expected a real floating array, got complex")
    dims = axes("var", axis, x.ndim)
    if dims == []:  # each element alone: its own mean
        centred = call("sub")(x, x)
        return call("div.Scalar")(call("mul")(centred, centred), 1 - correction)
    centred = call("sub")(x, call("mean")(x, dims, True))
    squares = call("sum")(call("mul")(centred, centred), dims, keepdims)
    return call("div.Scalar")(squares, reduced_size(x.shape, dims) - correction)


def std(
    x: Tensor,
    /,
    *,
    axis: Axis = None,
    correction: int | float = 0.0,
    keepdims: bool = False,
) -> Tensor:
    """``sqrt(var(x))``."""
    return call("sqrt")(var(x, axis=axis, correction=correction, keepdims=keepdims))


def _count(api: str, truth: Tensor, axis: Axis, keepdims: bool) -> Tensor | None:
    """How many elements of the bool array ``truth`` are true along ``axis`` (int64), or
    None when ``axis`` is ``()``."""
    dims = axes(api, axis, truth.ndim)
    if dims == []:
        return None
    return call("sum")(truth, dims, keepdims, dtype=np.dtype(np.int64))


def all(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Whether every element along ``axis`` is true (nonzero); True for none."""
    falsy = call("eq.Scalar")(check_tensor("all", x), 0)
    count = _count("all", falsy, axis, keepdims)
    return call("eq.Scalar")(falsy if count is None else count, 0)


def any(x: Tensor, /, *, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Whether some element along ``axis`` is true (nonzero); False for none."""
    truth = call("ne.Scalar")(check_tensor("any", x), 0)
    count = _count("any", truth, axis, keepdims)
    return truth if count is None else call("gt.Scalar")(count, 0)
