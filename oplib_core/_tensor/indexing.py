"""``Tensor.__getitem__``: Python indices translated into the core indexing ops.

``t[i]`` is ``select``, ``t[a:b:c]`` is ``slice``, ``None`` is ``unsqueeze``, ``...`` skips
dims; integer arrays and bool masks (Tensors, lists, numpy arrays) go to one ``index`` call
made after the basic indices, as torch does. Every step is a dispatched op, so the result is
on the tensor's device and records gradients. Basic indices give views; an advanced index
gives a copy.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from .._registry.registry import op_named as _op  # the op by name
from ..fake._arrays import FakeArray, fake_array

if TYPE_CHECKING:
    from .protocol import T

__all__ = ["getitem"]


def _check_int(i: int, size: Any, dim: int) -> None:
    if type(size) is int and not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")


def _invalid(entry: object) -> IndexError:
    return IndexError(
        "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
        f"valid indices (got {type(entry).__name__})"
    )


def _as_index(t: T, entry: Any) -> T:
    """An advanced index (a Tensor, list or numpy array) as a Tensor on ``t``'s device."""
    cls = type(t)
    if isinstance(entry, cls):
        index = entry
    else:
        host = np.asarray(entry)
        # ``t[[]]`` gives a float64 array: an empty integer index
        if (host.dtype.kind in "iu" and host.dtype != np.int64) or (
            host.size == 0 and host.dtype.kind == "f"
        ):
            host = host.astype(np.int64)
        data = t._data
        if isinstance(data, FakeArray):  # a fake or meta tensor: a data-less index too
            fake: T = cls._wrap(fake_array(host.shape, host.dtype, data.device))
            return fake
        index = cls._wrap(host)
    if index.dtype.kind not in "biu":
        raise IndexError(
            f"tensors used as indices must be long, int, byte or bool tensors, got {index.dtype}"
        )
    data, into = index._data, t._data
    # one backend's arrays (not fake ones, of any device): their device indices, not two
    # Devices made and compared (~1 µs a call)
    if type(data) is type(into) and not isinstance(data, FakeArray):
        spec = index.backend.spec
        if spec.device_of is None or spec.device_of(data) == spec.device_of(into):
            return index
    return index if index.device == t.device else index.to(t.device)


def _int_tensor(key: Any, t: Any) -> bool:
    """Whether ``t[key]`` indexes with one integer tensor (``t`` not 0-d)."""
    return type(key) is type(t) and bool(t._data.shape) and key.dtype.kind in "iu"


def _consumed(entry: Any) -> int:
    """How many dims of the indexed tensor ``entry`` uses."""
    if entry is None or entry is Ellipsis or isinstance(entry, bool):
        return 0
    if isinstance(entry, (list, tuple, np.ndarray)):
        entry = np.asarray(entry)
    dtype = getattr(entry, "dtype", None)
    if dtype is not None and np.dtype(dtype).kind == "b":
        return len(entry.shape)
    return 1


def getitem(t: T, key: Any) -> T:
    """``t[key]``, as torch indexes."""
    # the common cases first (``t[i]`` and ``t[a:b]``): one integer, one slice
    if type(key) is int:
        shape = t._data.shape
        if not shape:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number"
            )
        size = shape[0]
        if type(size) is not int or not -size <= key < size:
            _check_int(key, size, 0)
        out: T = _op("oplib::select.int")(t, 0, key)
        return out
    if type(key) is slice and t._data.shape:
        step = key.step
        if (
            step is None
            and (key.start is None or type(key.start) is int)
            and (key.stop is None or type(key.stop) is int)
        ):
            out = _op("oplib::slice.Tensor")(t, 0, key.start, key.stop, 1)
            return out
    if _int_tensor(key, t):
        # t[idx], an integer index tensor (an embedding lookup): what _apply makes of it
        index: T = _op("oplib::index.Tensor")(t, [_as_index(t, key)])
        return index
    entries = list(key) if type(key) is tuple else [key]
    ndim = len(t._data.shape)
    ellipses = [i for i, e in enumerate(entries) if e is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_consumed(e) for e in entries)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    if ellipses:
        i = ellipses[0]
        entries[i : i + 1] = [slice(None)] * (ndim - used)
    return _apply(t, entries)


def _apply(t: T, entries: list[Any]) -> T:
    out = t
    dim = 0
    advanced: list[tuple[int, T]] = []
    # torch names an out-of-range int by its place in the index (each entry counts one)
    for place, entry in enumerate(entries):
        if entry is None or entry is True:
            out = _op("oplib::unsqueeze")(out, dim)
            dim += 1
        elif entry is False:
            out = _op("oplib::slice.Tensor")(_op("oplib::unsqueeze")(out, dim), dim, 0, 0, 1)
            dim += 1
        elif isinstance(entry, slice):
            start, stop, step = entry.start, entry.stop, entry.step
            if step is not None and step <= 0:
                if step == 0:
                    raise ValueError("slice step cannot be zero")
                raise ValueError("step must be greater than zero")
            if start is not None or stop is not None or (step is not None and step != 1):
                out = _op("oplib::slice.Tensor")(
                    out, dim, _int(start), _int(stop), 1 if step is None else _int(step)
                )
            dim += 1
        elif isinstance(entry, numbers.Integral) and not isinstance(entry, np.ndarray):
            i = int(entry)
            _check_int(i, out._data.shape[dim], place)
            out = _op("oplib::select.int")(out, dim, i)
        elif isinstance(entry, (list, tuple, np.ndarray, type(t))):
            index = _as_index(out, entry)
            advanced.append((dim, index))
            dim += len(index.shape) if index.dtype.kind == "b" else 1
        else:
            raise _invalid(entry)
    if not advanced:  # ``t[...]``, ``t[:]``: still a new view, as in torch
        if out is not t:
            return out
        if t._data.shape:  # a full slice: a view on every backend (dask has no ``view``)
            return _op("oplib::slice.Tensor")(t, 0, None, None, 1)  # type: ignore[no-any-return]
        return _op("oplib::view")(t, [])  # type: ignore[no-any-return]
    indices: list[T | None] = []
    cursor = 0
    for d, index in advanced:
        indices += [None] * (d - cursor)
        indices.append(index)
        cursor = d + (len(index.shape) if index.dtype.kind == "b" else 1)
    result: T = _op("oplib::index.Tensor")(out, indices)
    return result


def _int(v: Any) -> Any:
    if v is None or isinstance(v, int):
        return v
    if isinstance(v, numbers.Integral) or hasattr(v, "__index__"):
        return v.__index__()
    raise TypeError(
        f"slice indices must be integers or None or have an __index__ method, got "
        f"{type(v).__name__}"
    )
