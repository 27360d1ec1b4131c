"""In-place ops on views: the base's history is rewritten, as torch's ``CopySlices`` does.

``v = y[:, 1:]; v.mul_(3)`` writes into ``y``'s storage, so ``y`` gets a new ``grad_fn``
and so does every view of it. Every view is placed in its base by ``P``, the flat position
in the base of each element of the view (a flat int64 tensor in the view's C order, read from
the arrays' strides and data pointers), and the write is recorded as three nodes:

- ``old``, the view's values before the write, gets the history ``AsStridedBackward0``
  (the gradient scattered into the base's shape at ``P``) over the base's old history;
- the op's functional form runs on ``old`` with autograd as any in-place op does
  (``_inplace``), so its own formula gives the gradients of ``old`` and of the other
  arguments;
- the base's new ``grad_fn`` is a :class:`CopySlices`: of the base's gradient it sends the
  part outside the view (the region zeroed) to the base's old history and the part inside
  (gathered at ``P``) through the op's form.

The written view and every other live view of the base get an ``AsStridedBackward0`` over
the base's new history (torch regenerates them the same way). Each formula is made of
oplib ops (``index``, ``index_put``, ``reshape``), so ``create_graph=True`` differentiates
it again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._grad_mode import STATE as GRAD
from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from .._tensor.views import ViewSet
from ..fake._arrays import FakeArray
from ._engine import Node, edge_of

__all__ = ["AsStridedBackward", "CopySlices", "locate", "positions", "rebase_views", "view_set"]

_INT64 = np.dtype("int64")

_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a "
    "single memory location. Please clone() the tensor before performing the operation."
)


def _op(name: str) -> Any:
    return op_named(f"oplib::{name}")


def view_set(t: Tensor) -> ViewSet[Tensor] | None:
    """The ``ViewSet`` of ``t``'s storage, None when no view of it was ever taken."""
    vc = t._vc
    if vc is None or len(vc) < 2:
        return None
    views: ViewSet[Tensor] = vc[1]
    return views


# -- where a view lies in its base ------------------------------------------------------------
def _layout(data: Any) -> tuple[int, tuple[int, ...], int] | None:
    """``(address of the first element, strides in bytes, item size)`` of a strided array
    (numpy's, cupy's, any with the array or CUDA array interface); None for others."""
    if type(data) is np.ndarray:
        return data.__array_interface__["data"][0], data.strides, data.itemsize
    for name in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(data, name, None)
        if isinstance(face, dict):
            shape = tuple(face["shape"])
            itemsize = np.dtype(face["typestr"]).itemsize
            strides = face.get("strides")
            if strides is None:  # C-contiguous
                strides = tuple(
                    int(np.prod(shape[i + 1 :], dtype=np.int64)) * itemsize
                    for i in range(len(shape))
                )
            return int(face["data"][0]), tuple(strides), itemsize
    return None


def _addresses(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The byte offset of each element of an array of ``shape`` and ``strides``."""
    out = np.zeros(shape, dtype=_INT64)
    for d, (n, s) in enumerate(zip(shape, strides, strict=True)):
        step = [1] * len(shape)
        step[d] = n
        out += (np.arange(n, dtype=_INT64) * s).reshape(step)
    return out


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], size: int) -> bool:
    step = size
    for n, st in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and st != step:
            return False
        step *= n
    return True


def injective(view: Tensor) -> bool:
    """Whether no two elements of ``view`` share memory (no stride 0 over a dim of two or
    more: an ``expand``); True for arrays without strides (their views are copies)."""
    strides = getattr(view._data, "strides", None)
    if strides is None:
        return True
    return not any(s == 0 and n > 1 for n, s in zip(view._data.shape, strides, strict=True))


def positions(base: Tensor, view: Tensor, what: str, *, written: bool) -> np.ndarray | None:
    """The flat position in ``base`` (C order) of each element of ``view`` (host int64, the
    view's shape); None when ``view`` does not lie in ``base``'s storage (its kernel made a
    copy). Raises for arrays without strides, and for a ``written`` view whose elements
    overlap (an ``expand``)."""
    b, v = _layout(base._data), _layout(view._data)
    if b is None or v is None:
        kind = type(view._data if v is None else base._data).__name__
        raise RuntimeError(
            f"{what}: an in-place operation on a view of a tensor that requires grad (or on "
            f"a tensor with views) needs the arrays' strides to place the view in its base, "
            f"and a {kind} has none (oplib rewrites the base's history as torch's "
            "CopySlices does); clone() the view and write into the clone"
        )
    (b0, bstrides, size), (v0, vstrides, _) = b, v
    vshape = tuple(view._data.shape)
    if written and not injective(view):
        raise RuntimeError(_OVERLAP)
    bshape = tuple(base._data.shape)
    addr = _addresses(vshape, vstrides) + (v0 - b0)
    n = math.prod(bshape)
    if addr.size == 0:
        return addr
    if n == 0:
        return None
    if _c_contiguous(bshape, bstrides, size):  # the common case
        pos = addr // size
        inside = (addr % size == 0) & (pos >= 0) & (pos < n)
    else:
        flat = _addresses(bshape, bstrides).reshape(-1)
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        k = np.clip(np.searchsorted(ordered, addr), 0, n - 1)
        inside = ordered[k] == addr
        pos = order[k]
    if not bool(np.all(inside)):
        return None
    return pos.astype(_INT64, copy=False)


def on_device(host: np.ndarray, like: Tensor) -> Tensor:
    """Positions made on the host, flat (a 0-d index makes ``index`` return a scalar), on
    ``like``'s device."""
    host = host.reshape(-1)
    if type(like._data) is np.ndarray:
        return Tensor._wrap(host)
    return Tensor._wrap(like.backend.from_host(host, like.device))


def locate(base: Tensor, view: Tensor, what: str, *, written: bool) -> Tensor | None:
    """``positions`` on the base's device (None: ``view`` is not in ``base``'s storage). A
    data-less (fake or meta) tensor gets positions of the right length and no values: its
    gradients have shapes only."""
    if isinstance(base._data, FakeArray) or isinstance(view._data, FakeArray):
        n = math.prod(view._data.shape)
        out = _op("empty")([n], dtype=_INT64, device=base.device)
        return out if type(out) is Tensor else Tensor._wrap(out)
    host = positions(base, view, what, written=written)
    return None if host is None else on_device(host, base)


# -- the nodes ----------------------------------------------------------------------------------
class AsStridedBackward(Node):
    """The history of a view over its base's history: the view's gradient scattered into
    the base's shape at the view's positions (torch's ``AsStridedBackward0``)."""

    __slots__ = ("_acc", "_base_meta", "_pos")

    def __init__(self, base_edge: Any, base: Tensor, view: Tensor, pos: Tensor) -> None:
        self._edges = (base_edge,)
        self._meta = ((tuple(view._data.shape), view._data.dtype),)
        self._nout = 1
        self._outs = None
        self._base_meta = (tuple(base._data.shape), base.dtype, base.device)
        self._pos = pos
        self._acc = not injective(view)  # an expanded view: its elements' gradients sum

    def name(self) -> str:
        return "AsStridedBackward0"

    def _input_name(self, i: int) -> str:
        return "self"

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        (g,) = grads
        shape, dtype, device = self._base_meta
        pos = self._pos._data
        if not GRAD.enabled and type(g._data) is np.ndarray and type(pos) is np.ndarray:
            out = np.zeros(math.prod(shape), dtype=g._data.dtype)
            if self._acc:
                np.add.at(out, pos, g._data.reshape(-1))
            else:
                out[pos] = g._data.reshape(-1)
            return (Tensor._wrap(out.reshape(shape)),)
        zeros = Tensor._wrap(_op("zeros")([math.prod(shape)], dtype=dtype, device=device))
        flat = _op("index_put")(zeros, [self._pos], _op("reshape")(g, [-1]), self._acc)
        return (_op("reshape")(flat, list(shape)),)


class CopySlices(Node):
    """The history of a base after one of its views was written in place (torch's
    ``CopySlices``): edge 0 is the base's old history (it gets the gradient outside the
    view), edge 1 the output of the op's functional form (the gradient inside the view)."""

    __slots__ = ("_pos", "_shape", "_vshape")

    def __init__(
        self, base_edge: Any, form_edge: Any, base: Tensor, view: Tensor, pos: Tensor
    ) -> None:
        self._edges = (base_edge, form_edge)
        self._meta = ((tuple(base._data.shape), base._data.dtype),)
        self._nout = 1
        self._outs = None
        self._pos = pos
        self._shape = list(base._data.shape)
        self._vshape = list(view._data.shape)

    def name(self) -> str:
        return "CopySlices"

    def _input_name(self, i: int) -> str:
        return ("self", "the value written into the view")[i]

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        (g,) = grads
        pos = self._pos._data
        if not GRAD.enabled and type(g._data) is np.ndarray and type(pos) is np.ndarray:
            data = np.array(g._data, order="C")  # (a copy: the part outside is written)
            flat_data = data.reshape(-1)
            inside_data = None
            if self._edges[1] is not None:
                inside_data = Tensor._wrap(flat_data[pos].reshape(self._vshape))
            flat_data[pos] = 0
            return (Tensor._wrap(data) if self._edges[0] is not None else None, inside_data)
        flat = _op("reshape")(g, [-1])
        inside = None
        if self._edges[1] is not None:
            inside = _op("reshape")(_op("index.Tensor")(flat, [self._pos]), self._vshape)
        outside = None
        if self._edges[0] is not None:
            zero = Tensor._wrap(_op("zeros")([], dtype=g.dtype, device=g.device))
            outside = _op("reshape")(_op("index_put")(flat, [self._pos], zero, False), self._shape)
        return (outside, inside)


# -- rewriting histories --------------------------------------------------------------------------
def _extent(data: Any) -> tuple[int, int] | None:
    """The bytes ``[start, end)`` a strided array spans; None for others."""
    layout = _layout(data)
    if layout is None:
        return None
    start, strides, size = layout
    lo = hi = start
    for n, st in zip(data.shape, strides, strict=True):
        if n == 0:
            return (start, start)
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return (lo, hi + size)


def rebase_views(
    views: ViewSet[Tensor],
    base: Tensor,
    written: Tensor | None,
    what: str,
    was_rg: bool,
) -> None:
    """Give every live view of ``base`` (but the ``written`` one) its history over
    ``base``'s current one, as torch regenerates a view's ``grad_fn`` once its base was
    written. A view that does not require grad of a base that did (``was_rg``: taken under
    no_grad) is left out: torch refuses to regenerate those. After a write into a view, a
    view in the graph whose memory lies apart from it keeps its history (still right, and
    a loop writing ``cache[i]`` beside many live views stays cheap)."""
    edge = edge_of(base)
    if edge is None:
        return
    span = None if written is None else _extent(written._data)
    for v in views.alive():
        if v is written or v is base or (was_rg and not v._rg):
            continue
        if span is not None and v._rg:
            other = _extent(v._data)
            if other is not None and (other[1] <= span[0] or span[1] <= other[0]):
                continue
        pos = locate(base, v, what, written=False)
        if pos is None:  # not a view after all (its kernel made a copy): its own history
            continue
        v.grad_fn = AsStridedBackward(edge, base, v, pos)
        v._rg = True
        v._out_nr = 0
