"""Fake kernels of the indexing and view ops, merged into ``core_fake_kernels()``.

Shapes and torch's argument errors come from :mod:`oplib_core._index_rules`, the same rules
the real kernels check, so fake and real agree. ``index`` with a bool mask and
``masked_select`` have data-dependent sizes: each mask gives a new dynamic size
(``get_ctx().new_dynamic_size()``), as a custom op's fake kernel would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _index_rules as R
from ..kernels._index_kernels import kernel_table
from ._arrays import FakeArray
from ._context import get_ctx
from ._shapes import broadcast_shapes

__all__ = ["index_fake_kernels"]

_INT64 = np.dtype("int64")


def index_fake_kernels() -> dict[str, Callable[..., Any]]:
    """Fake kernels keyed like :func:`oplib_core.kernels.index_kernels`."""
    kernels, kernel = kernel_table("_fake", leaf_fake=True)

    def replaced(shape: tuple[Any, ...], dim: int, size: Any) -> tuple[Any, ...]:
        return (*shape[:dim], size, *shape[dim + 1 :])

    @kernel("select.int")
    def select(self: FakeArray, dim: int, index: Any) -> FakeArray:
        dim, _ = R.select_index(self.shape, dim, index)
        return self._new(self.shape[:dim] + self.shape[dim + 1 :], self.dtype)

    @kernel("slice.Tensor")
    def slice_(self: FakeArray, dim: int, start: Any, end: Any, step: Any) -> FakeArray:
        dim, _, _, length = R.slice_bounds(self.shape, dim, start, end, step)
        return self._new(replaced(self.shape, dim, length), self.dtype)

    @kernel("narrow")
    def narrow(self: FakeArray, dim: int, start: Any, length: Any) -> FakeArray:
        dim, _ = R.narrow_start(self.shape, dim, start, length)
        return self._new(replaced(self.shape, dim, length), self.dtype)

    def sized(self: FakeArray, dim: int, sizes: Sequence[Any]) -> list[FakeArray]:
        return [self._new(replaced(self.shape, dim, n), self.dtype) for n in sizes]

    @kernel("split.Tensor")
    def split(self: FakeArray, split_size: Any, dim: int) -> list[FakeArray]:
        dim, sizes = R.split_sizes("split", self.shape, split_size, dim)
        return sized(self, dim, sizes)

    @kernel("split_with_sizes")
    def split_with_sizes(self: FakeArray, split_sizes: Sequence[Any], dim: int) -> list[Any]:
        dim = R.split_with_sizes_check(self.shape, split_sizes, dim)
        return sized(self, dim, split_sizes)

    @kernel("chunk")
    def chunk(self: FakeArray, chunks: int, dim: int) -> list[FakeArray]:
        dim, sizes = R.chunk_sizes(self.shape, chunks, dim)
        return sized(self, dim, sizes)

    def bounded(self: FakeArray, dim: int, bounds: Sequence[tuple[Any, Any]]) -> list[Any]:
        return sized(self, dim, [b - a for a, b in bounds])

    @kernel("tensor_split.sections")
    def tensor_split_sections(self: FakeArray, sections: int, dim: int) -> list[FakeArray]:
        dim, bounds = R.tensor_split_bounds(self.shape, sections, None, dim)
        return bounded(self, dim, bounds)

    @kernel("tensor_split.indices")
    def tensor_split_indices(self: FakeArray, indices: Sequence[Any], dim: int) -> list[Any]:
        dim, bounds = R.tensor_split_bounds(self.shape, None, indices, dim)
        return bounded(self, dim, bounds)

    @kernel("expand")
    def expand(self: FakeArray, size: Sequence[Any], *, implicit: bool = False) -> FakeArray:
        return self._new(R.expand_shape(self.shape, size), self.dtype)

    def movedim(self: FakeArray, source: Sequence[int], destination: Sequence[int]) -> FakeArray:
        perm = R.movedim_perm(len(self.shape), source, destination)
        return self._new(tuple(self.shape[p] for p in perm), self.dtype)

    @kernel("movedim.int")
    def movedim_int(self: FakeArray, source: int, destination: int) -> FakeArray:
        return movedim(self, [source], [destination])

    @kernel("movedim.intlist")
    def movedim_intlist(self: FakeArray, source: Sequence[int], destination: Sequence[int]) -> Any:
        return movedim(self, source, destination)

    @kernel("view")
    def view(self: FakeArray, size: Sequence[Any]) -> FakeArray:
        # a fake array is contiguous, so every valid shape is a view of it
        return self._new(R.view_shape(self.shape, size), self.dtype)

    @kernel("index.Tensor")
    def index(self: FakeArray, indices: Sequence[Any]) -> FakeArray:
        entries = [None if i is None else (tuple(i.shape), i.dtype) for i in indices]
        masks = sum(1 for e in entries if e is not None and e[1].kind == "b")
        sizes = [get_ctx().new_dynamic_size() for _ in range(masks)]
        return self._new(R.advanced_index_shape(self.shape, entries, sizes), self.dtype)

    @kernel("masked_select")
    def masked_select(self: FakeArray, mask: FakeArray) -> FakeArray:
        if mask.dtype != np.bool_:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
        broadcast_shapes(self.shape, mask.shape)
        return self._new((get_ctx().new_dynamic_size(),), self.dtype)

    @kernel("index_select")
    def index_select(self: FakeArray, dim: int, index: FakeArray) -> FakeArray:
        if len(index.shape) > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if index.dtype.kind not in "iu":
            raise IndexError(
                f"index_select(): Expected dtype int32/int64 for index but got: {index.dtype}"
            )
        dim = R.wrap_dim("index_select", dim, len(self.shape))
        n = index.shape[0] if index.shape else 1
        return self._new(replaced(self.shape, dim, n) if self.shape else (), self.dtype)

    def check_index(op: str, index: FakeArray) -> None:
        if index.dtype.kind not in "iu":
            raise RuntimeError(f"{op}(): Expected dtype int64 for index, got {index.dtype}")

    @kernel("gather")
    def gather(
        self: FakeArray, dim: int, index: FakeArray, *, sparse_grad: bool = False
    ) -> FakeArray:
        check_index("gather", index)
        R.gather_check("gather", self.shape, dim, index.shape, None)
        return self._new(index.shape, self.dtype)

    def scattered(op: str, self: FakeArray, dim: int, index: FakeArray, src: Any) -> Any:
        check_index(op, index)
        R.gather_check(op, self.shape, dim, index.shape, src)
        return self._new(self.shape, self.dtype)

    @kernel("scatter.src")
    def scatter_src(self: FakeArray, dim: int, index: FakeArray, src: FakeArray) -> Any:
        return scattered("scatter", self, dim, index, src.shape)

    @kernel("scatter.value")
    def scatter_value(self: FakeArray, dim: int, index: FakeArray, value: Any) -> Any:
        return scattered("scatter", self, dim, index, None)

    @kernel("scatter_add")
    def scatter_add(self: FakeArray, dim: int, index: FakeArray, src: FakeArray) -> Any:
        return scattered("scatter_add", self, dim, index, src.shape)

    @kernel("pad")
    def pad(self: FakeArray, pad: Sequence[Any], mode: str, value: float | None) -> FakeArray:
        widths = R.pad_widths("pad", self.shape, pad, mode)
        shape = tuple(s + b + a for s, (b, a) in zip(self.shape, widths, strict=True))
        return self._new(shape, self.dtype)

    @kernel("flip")
    def flip(self: FakeArray, dims: Sequence[int]) -> FakeArray:
        R.flip_dims(self.shape, dims)
        return self._new(self.shape, self.dtype)

    @kernel("roll")
    def roll(self: FakeArray, shifts: Sequence[Any], dims: Sequence[int]) -> FakeArray:
        R.roll_args(self.shape, shifts, dims)
        return self._new(self.shape, self.dtype)

    def tri(name: str) -> None:
        def fn(self: FakeArray, diagonal: Any) -> FakeArray:
            R.tri_check(name, self.shape)
            return self._new(self.shape, self.dtype)

        kernel(name)(fn)

    tri("tril")
    tri("triu")

    @kernel("repeat")
    def repeat(self: FakeArray, repeats: Sequence[Any]) -> FakeArray:
        return self._new(R.repeat_shape(self.shape, repeats), self.dtype)

    @kernel("tile")
    def tile(self: FakeArray, dims: Sequence[Any]) -> FakeArray:
        return self._new(R.repeat_shape(self.shape, R.tile_reps(self.shape, dims)), self.dtype)

    def extreme(name: str) -> None:
        def fn(self: FakeArray) -> FakeArray:
            R.full_reduction_check(name, self.shape)
            return self._new((), self.dtype)

        def fn_dim(self: FakeArray, dim: int, keepdim: bool) -> tuple[FakeArray, FakeArray]:
            _, shape = R.max_dim_shape(name, self.shape, dim, keepdim)
            return self._new(shape, self.dtype), self._new(shape, _INT64)

        kernel(name)(fn)
        kernel(f"{name}.dim")(fn_dim)

    extreme("max")
    extreme("min")
    # These two ask get_ctx() for their data-dependent sizes: not leaf kernels, so that
    # FakeTensorMode gives them its context (its shape env), not the meta device's.
    for name in ("index.Tensor", "masked_select"):
        del kernels[name]._oplib_leaf_fake  # type: ignore[attr-defined]
    return kernels
