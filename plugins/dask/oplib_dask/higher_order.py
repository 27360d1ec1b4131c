"""Dask handlers of the control-flow operators (``oplib.ops.higher_order``).

- ``map`` runs chunk by chunk along the mapped (first) dimension: each task maps the
  function over the rows of one block (through oplib, on the block's numpy or cupy rows),
  so the graph has one task per block, not one per row. The other dimensions of ``xs`` are
  rechunked to one chunk. Output metadata comes from ``map``'s fake handler (the function
  traced once under ``FakeTensorMode``). A function returning several tensors runs once per
  output per block. Extra arguments (``map(f, xs, *args)``) that are dask arrays are
  computed once, up front: they are given whole to every row.
- ``cond`` needs a concrete predicate: a Python bool, or a one-element dask array, which is
  computed; the branch taken then builds its graph lazily.

``while_loop`` and ``scan`` use the operators' generic handlers (the predicate of each
``while_loop`` iteration is computed; ``scan`` builds one task per step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core import ControlFlowError, FakeTensorMode, HigherOrderOperator
from oplib_core.fake import FakeArray
from oplib_dask.meta import chunk_device, is_dask, meta_like

__all__ = ["dask_cond", "dask_map", "register"]

_GENERIC = "CompositeExplicitAutograd"


def _hop(name: str) -> HigherOrderOperator:
    hop = getattr(oplib.ops.higher_order, name)
    assert isinstance(hop, HigherOrderOperator)
    return hop


def _flat(tree: Any) -> tuple[list[Any], type | None]:
    """A single array, or one flat tuple/list of them: (leaves, container or None)."""
    if type(tree) in (tuple, list):
        return list(tree), type(tree)
    return [tree], None


def _build(leaves: list[Any], container: type | None) -> Any:
    return leaves[0] if container is None else container(leaves)


class _BlockMap:
    """One task: ``map(f, block rows, *args)``, output ``index`` of it (picklable)."""

    __slots__ = ("args", "container", "f", "index")

    def __init__(self, f: Any, args: tuple[Any, ...], container: type | None, index: int) -> None:
        self.f = f
        self.args = args
        self.container = container
        self.index = index

    def __call__(self, *blocks: Any) -> Any:
        out = _hop("map")(self.f, _build(list(blocks), self.container), self.args)
        return out if self.index < 0 else out[self.index]

    def __reduce__(self) -> Any:
        return (_BlockMap, (self.f, self.args, self.container, self.index))


def dask_map(f: Any, xs: Any, args: tuple[Any, ...]) -> Any:
    """``map`` over the blocks of the first dimension of dask arrays."""
    hop = _hop("map")
    leaves, container = _flat(xs)
    if not leaves or not all(is_dask(x) and x.ndim >= 1 for x in leaves):
        return hop.dispatch(_GENERIC, f, xs, args)
    import dask.array as da

    args = tuple(a.compute() if is_dask(a) else a for a in args)
    first = leaves[0]
    if any(x.shape[0] != first.shape[0] for x in leaves[1:]):
        sizes = ", ".join(str(x.shape[0]) for x in leaves)
        raise ControlFlowError(
            f"{hop.qualname}: every array of xs must have the same first size, got {sizes}",
            op=hop.qualname,
        )
    rows = first.chunks[0]
    leaves = [x.rechunk({0: rows, **{d: -1 for d in range(1, x.ndim)}}) for x in leaves]
    device = chunk_device(first)
    with FakeTensorMode():
        fakes = [FakeArray(tuple(int(s) for s in x.shape), x.dtype, device) for x in leaves]
        fake_args = tuple(
            FakeArray(a.shape, a.dtype, device) if isinstance(a, np.ndarray) else a for a in args
        )
        fake_out = hop(f, _build(fakes, container), fake_args)
    outs, out_container = _flat(fake_out)
    if not all(isinstance(o, FakeArray) for o in outs):
        return hop.dispatch(_GENERIC, f, xs, args)
    # blockwise: the rows' index "i" is shared; other input dims (one chunk each) are
    # contracted away, output dims after the first are new axes of one chunk.
    letters = iter("abcdefghjklmnopqrstuvwxyz")
    inputs: list[Any] = []
    for x in leaves:
        inputs += [x, "i" + "".join(next(letters) for _ in range(x.ndim - 1))]
    stacked = []
    for j, o in enumerate(outs):
        index = -1 if out_container is None else j
        new = {next(letters): int(s) for s in o.shape[1:]}
        stacked.append(
            da.blockwise(
                _BlockMap(f, args, container, index),
                "i" + "".join(new),
                *inputs,
                new_axes=new,
                concatenate=True,
                dtype=np.dtype(o.dtype),
                meta=meta_like(first, len(o.shape), o.dtype),
            )
        )
    return _build(stacked, out_container)


def dask_cond(pred: Any, true_fn: Any, false_fn: Any, operands: tuple[Any, ...]) -> Any:
    """``cond`` with a concrete predicate: a dask predicate is computed first."""
    if is_dask(pred):
        pred = pred.compute()
    return _hop("cond").dispatch(_GENERIC, pred, true_fn, false_fn, operands)


def register(registrar: Any) -> None:
    """Register the handlers (from the plugin's ``oplib_impl``)."""
    registrar.py_impl("higher_order::map", "dask", dask_map)
    registrar.py_impl("higher_order::cond", "dask", dask_cond)
