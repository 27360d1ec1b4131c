"""The standard's creation functions, over the core factory ops (``device=`` chooses the
backend, as everywhere in oplib; the default floating dtype is oplib's, float32)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _factories
from .._dtypes import get_default_dtype, scalar_dtype, to_dtype
from .._tensor.tensor import Tensor
from ._common import call, check_tensor

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "from_dlpack",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]

Shape = int | Sequence[int]


def _shape(shape: Shape) -> list[int]:
    return [shape] if isinstance(shape, int) else list(shape)


def asarray(
    obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None
) -> Tensor:
    """A Tensor from a Tensor (itself when nothing changes and ``copy`` is not True; a cast
    or move stays in the graph), a native array of any backend, or Python data."""
    if isinstance(obj, Tensor):
        moved = obj.to(device=device, dtype=dtype)
        if moved is not obj:
            if copy is False:
                raise ValueError(
                    "oplib.array_api.asarray(): copy=False, but a copy is needed to change "
                    "the dtype or device"
                )
            return moved
        return call("clone")(obj) if copy else obj
    if copy is False:
        raise ValueError(
            f"oplib.array_api.asarray(): copy=False cannot wrap a {type(obj).__name__} "
            "without copying; pass copy=None"
        )
    out = _factories.tensor(obj, dtype=dtype, device=device)
    # a native array may be wrapped as it is: copy=True promises a copy
    return call("clone")(out) if copy else out


def arange(
    start: int | float,
    /,
    stop: int | float | None = None,
    step: int | float = 1,
    *,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """``oplib::arange``."""
    if stop is None:
        start, stop = 0, start
    return _factories.arange(start, stop, step, dtype=dtype, device=device)


def empty(shape: Shape, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``oplib::empty``."""
    return _factories.empty(_shape(shape), dtype=dtype, device=device)


def zeros(shape: Shape, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``oplib::zeros``."""
    return _factories.zeros(_shape(shape), dtype=dtype, device=device)


def ones(shape: Shape, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``oplib::ones``."""
    return _factories.ones(_shape(shape), dtype=dtype, device=device)


def full(shape: Shape, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``oplib::full``; without ``dtype``, the default dtype of ``fill_value``'s kind."""
    return _factories.full(_shape(shape), fill_value, dtype=dtype, device=device)


def _like(api: str, x: Tensor, dtype: Any, device: Any) -> tuple[list[int], Any, Any]:
    x = check_tensor(api, x)
    return (
        list(x.shape),
        x.dtype if dtype is None else dtype,
        x.device if device is None else device,
    )


def empty_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``empty`` of ``x``'s shape, dtype and device (unless given)."""
    shape, dt, dev = _like("empty_like", x, dtype, device)
    return _factories.empty(shape, dtype=dt, device=dev)


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``zeros`` of ``x``'s shape, dtype and device (unless given)."""
    shape, dt, dev = _like("zeros_like", x, dtype, device)
    return _factories.zeros(shape, dtype=dt, device=dev)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``ones`` of ``x``'s shape, dtype and device (unless given)."""
    shape, dt, dev = _like("ones_like", x, dtype, device)
    return _factories.ones(shape, dtype=dt, device=dev)


def full_like(x: Tensor, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``full`` of ``x``'s shape, dtype and device (unless given)."""
    shape, dt, dev = _like("full_like", x, dtype, device)
    return _factories.full(shape, fill_value, dtype=dt, device=dev)


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """Ones on the ``k``-th diagonal: ``arange(n_rows)[:, None] + k == arange(n_cols)``,
    cast to ``dtype`` (the default floating dtype)."""
    cols = n_rows if n_cols is None else n_cols
    rows = call("unsqueeze")(_factories.arange(0, n_rows, 1, device=device), 1)
    on = call("eq")(call("add.Scalar")(rows, k), _factories.arange(0, cols, 1, device=device))
    return call("astype")(on, get_default_dtype() if dtype is None else to_dtype(dtype))


def linspace(
    start: int | float | complex,
    stop: int | float | complex,
    /,
    num: int,
    *,
    dtype: Any = None,
    device: Any = None,
    endpoint: bool = True,
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when ``endpoint``):
    ``start + arange(num) * step``, the last one exactly ``stop``."""
    if num < 0:
        raise ValueError(f"oplib.array_api.linspace(): num must be non-negative, got {num}")
    if dtype is None:
        dtype = scalar_dtype(complex(start) if isinstance(stop, complex) else start)
        dtype = dtype if dtype.kind in "fc" else get_default_dtype()
    dtype = to_dtype(dtype)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    index = _factories.arange(0, num, 1, dtype=dtype, device=device)
    out = call("add.Scalar")(call("mul.Scalar")(index, step), start)
    if endpoint and num > 1:
        last = call("eq.Scalar")(index, num - 1)
        out = call("where")(last, call("full")([], stop, dtype=dtype, device=out.device), out)
    return out


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids from 1-d arrays (``"xy"``: the first two axes swapped, as numpy),
    each a broadcast (``oplib::reshape`` then ``oplib::broadcast_to``)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(
            f"oplib.array_api.meshgrid(): indexing must be 'xy' or 'ij', got {indexing!r}"
        )
    ts = [check_tensor("meshgrid", a, "arrays") for a in arrays]
    for t in ts:
        if t.ndim != 1:
            raise ValueError(
                f"oplib.array_api.meshgrid(): expected 1-d arrays, got one of shape {t.shape}"
            )
    shape = [t.shape[0] for t in ts]
    axis_of = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axis_of[0], axis_of[1] = 1, 0
    out = []
    for t, axis in zip(ts, axis_of, strict=True):
        view = [1] * len(ts)
        view[axis] = t.shape[0]
        out.append(call("broadcast_to")(call("reshape")(t, view), shape))
    return out


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A Tensor sharing the memory of any DLPack producer (``oplib.from_dlpack``); with
    ``device`` or ``copy=True``, a copy there."""
    t = _factories.from_dlpack(x)
    if device is not None or copy:
        return t.to(device=device, copy=bool(copy))
    return t


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    """``oplib::tril``: the lower triangle of the last two axes (below diagonal ``k``)."""
    return call("tril")(check_tensor("tril", x), k)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    """``oplib::triu``: the upper triangle of the last two axes (above diagonal ``k``)."""
    return call("triu")(check_tensor("triu", x), k)
