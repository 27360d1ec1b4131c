"""``Tensor.__setitem__``: a Python index translated into one in-place op.

``t[...] = v`` and ``t[:] = v`` (every element) are ``fill_`` (a scalar) or ``copy_`` (a
tensor). Everything else is ``oplib::index_put_(t, indices, values)`` with one index (or
None, a whole dim) per dim of ``t``:

- with whole-dim slices and either ints or index arrays (not both), the items go as they
  are (ints as 0-d index arrays, bool masks as masks): numpy's placement of the advanced
  block is then torch's;
- otherwise every dim gets an index array shaped to its own dims of the result (slices
  become ``arange`` runs, bool masks their ``nonzero()``, ints 0-d arrays), laid out as
  torch does: ints select first (they are not advanced indices in torch, unlike numpy),
  None adds a dim, and the advanced indices' block stays in place when they are adjacent
  in what remains, else goes first.

The index arrays are built on the host and moved to the tensor's device.
"""

from __future__ import annotations

import builtins
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from .._registry.registry import op_named as _op  # the op by name
from ..fake._arrays import FakeArray

if TYPE_CHECKING:
    from .protocol import T, TensorLike

__all__ = ["setitem"]

_INT64 = np.dtype("int64")


def _native_item(t: TensorLike, item: Any) -> Any:
    """An index item with Tensors and Python sequences as arrays, checked."""
    if item is None or item is Ellipsis or type(item) is slice:
        return item
    if isinstance(item, (bool, np.bool_)):
        raise IndexError(
            "Tensor.__setitem__: a Python bool as an index is not supported; use a bool "
            "tensor (a mask)"
        )
    if isinstance(item, numbers.Integral):
        return builtins.int(item)
    if type(item) is type(t):
        item = item._data
    elif isinstance(item, (list, tuple)):
        item = np.asarray(item)
        if item.size == 0:
            item = item.astype(_INT64)
    if not hasattr(item, "dtype") or not hasattr(item, "shape"):
        raise IndexError(
            "Tensor.__setitem__: only integers, slices (`:`), ellipsis (`...`), None and "
            f"integer or boolean tensors are valid indices (got {type(item).__name__})"
        )
    dtype = _dtype(t, item)
    if dtype.kind not in "biu":
        raise IndexError(
            "Tensor.__setitem__: tensors used as indices must be long, int, byte or bool "
            f"tensors (got {dtype})"
        )
    return item


def _dtype(t: TensorLike, array: Any) -> np.dtype:
    """The oplib dtype of ``array`` (numpy's, or ``t``'s backend's name for its own)."""
    d = array.dtype
    return d if isinstance(d, np.dtype) else t.backend.dtype_of(array)


def _dims_of(t: TensorLike, item: Any) -> int:
    if item is None or item is Ellipsis:
        return 0
    if hasattr(item, "dtype") and _dtype(t, item).kind == "b":
        return builtins.int(item.ndim)
    return 1


def _expand(t: TensorLike, key: Any) -> list[Any]:
    """The key as a list with ``...`` expanded and whole-dim slices appended: one item per
    dim of ``t`` (plus the Nones)."""
    items = [_native_item(t, k) for k in (key if type(key) is tuple else (key,))]
    ndim = t._data.ndim
    used = sum(_dims_of(t, k) for k in items)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    ellipses = [i for i, k in enumerate(items) if k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [slice(None)] * (ndim - used)
    if ellipses:
        i = ellipses[0]
        return items[:i] + fill + items[i + 1 :]
    return items + fill


def _is_whole(item: Any) -> bool:
    return type(item) is slice and item == slice(None)


def _host(t: TensorLike, array: Any) -> np.ndarray:
    if type(array) is np.ndarray:
        return array
    if isinstance(array, FakeArray):
        raise RuntimeError(
            "Tensor.__setitem__: a bool mask mixed with slices or None on a data-less (fake "
            "or meta) tensor: the indexed positions depend on the mask's data"
        )
    return np.asarray(t.backend.to_host(array))


def _index_tensor(t: T, host: np.ndarray) -> T:
    """``host`` (an index array) on ``t``'s device; a data-less one for a fake or meta
    ``t`` (fake kernels read only its shape and dtype)."""
    if isinstance(t._data, FakeArray):
        out: T = _op("oplib::empty")(list(host.shape), dtype=host.dtype, device=t.device)
        return out
    out = type(t)._wrap(t.backend.from_host(host, t.device))
    return out


def _all_advanced(t: TensorLike, items: list[Any]) -> list[np.ndarray]:
    """One host index array per dim of ``t``, shaped so that they broadcast to the result
    of indexing ``t`` with ``items`` (see the module docstring)."""
    shape = tuple(t._data.shape)
    # items as (kind, value): "slice" (an index run), "adv" (arrays, one per dim), "none"
    parts: list[tuple[str, list[np.ndarray]]] = []
    dim = 0
    for item in items:
        if item is None:
            parts.append(("none", []))
        elif type(item) is slice:
            parts.append(("slice", [np.arange(*item.indices(shape[dim]))]))
            dim += 1
        elif type(item) is builtins.int:  # torch selects first: no dim, not advanced
            parts.append(("int", [np.asarray(item, dtype=_INT64)]))
            dim += 1
        else:
            host = _host(t, item)
            if host.dtype.kind == "b":
                parts.append(("adv", list(np.nonzero(host))))
                dim += host.ndim
            else:
                parts.append(("adv", [host]))
                dim += 1
    adv = [a for kind, arrays in parts if kind == "adv" for a in arrays]
    block = np.broadcast_shapes(*(a.shape for a in adv)) if adv else ()
    # adjacency of the advanced items in the view after the ints' selects (torch's order)
    view = [kind for kind, _ in parts if kind != "int"]
    where = [j for j, kind in enumerate(view) if kind == "adv"]
    adjacent = not where or where == list(range(where[0], where[-1] + 1))
    first_adv = next((i for i, (kind, _) in enumerate(parts) if kind == "adv"), -1)
    # the result's dims: a dim per slice or None, the advanced block once (at its place
    # when the advanced items are adjacent, else first)
    layout: list[tuple[str, int]] = []  # (kind, part index); "block" for the advanced one
    if not adjacent:
        layout.append(("block", -1))
    for i, (kind, _) in enumerate(parts):
        if kind == "adv":
            if adjacent and i == first_adv:
                layout.append(("block", -1))
        elif kind != "int":
            layout.append((kind, i))
    ndim_out = sum(len(block) if kind == "block" else 1 for kind, _ in layout)
    start: dict[Any, int] = {}
    pos = 0
    for kind, i in layout:
        start["block" if kind == "block" else i] = pos
        pos += len(block) if kind == "block" else 1
    out: list[np.ndarray] = []
    for i, (kind, arrays) in enumerate(parts):
        if kind == "none":
            continue
        for a in arrays:
            if kind == "int":  # as many dims as the result (its Nones included), all 1
                out.append(a.reshape([1] * ndim_out))
                continue
            if kind == "slice":
                shape_a = [1] * ndim_out
                shape_a[start[i]] = a.shape[0]
            else:
                padded = (1,) * (len(block) - a.ndim) + a.shape
                shape_a = [1] * ndim_out
                s = start["block"]
                shape_a[s : s + len(block)] = padded
            out.append(a.reshape(shape_a))
    return out


def _values(t: T, value: Any) -> T:
    """``value`` as a Tensor of ``t``'s dtype (torch casts what is assigned)."""
    out: T
    if isinstance(value, (numbers.Number, np.generic)):
        out = _op("oplib::full")([], value, dtype=t.dtype, device=t.device)
        return out
    out = value if type(value) is type(t) else type(t)(value)
    if out._data.dtype != t._data.dtype:
        out = _op("oplib::astype")(out, t.dtype)
    return out


def setitem(t: TensorLike, key: Any, value: Any) -> None:
    """``t[key] = value`` through ``fill_``, ``copy_`` or ``index_put_``."""
    items = _expand(t, key)
    if all(_is_whole(k) for k in items):
        if isinstance(value, (numbers.Number, np.generic)):
            _op("oplib::fill_.Scalar")(t, value)
        else:
            _op("oplib::copy_")(t, value if type(value) is type(t) else type(t)(value))
        return
    wrap = type(t)._wrap
    ints = any(type(k) is builtins.int for k in items)
    arrays = any(hasattr(k, "dtype") for k in items)
    plain = not (ints and arrays) and all(
        k is not None and (type(k) is not slice or _is_whole(k)) for k in items
    )
    indices: list[Any]
    if plain:
        indices = []
        for k in items:
            if type(k) is slice:
                indices.append(None)
            elif type(k) is builtins.int:
                indices.append(_index_tensor(t, np.asarray(k, dtype=_INT64)))
            elif type(k) is np.ndarray and type(t._data) is not np.ndarray:
                indices.append(_index_tensor(t, k))
            else:
                indices.append(wrap(k))
    else:
        indices = [_index_tensor(t, a) for a in _all_advanced(t, items)]
    _op("oplib::index_put_")(t, indices, _values(t, value), False)
