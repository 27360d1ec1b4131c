"""Kernels of the indexing and view ops (``select``, ``slice``, ``index``, ``gather``,
``pad``, ``split`` ...), written once against an array namespace ``xp``.

Same calling convention as :mod:`._array_kernels`, whose ``array_kernels(xp)`` merges this
dict in, so every backend that binds the core kernels (cpu, cuda, privateuse1) gets these.
Argument checks and output shapes come from :mod:`oplib_core._index_rules`, shared with the
fake kernels. Function names are the array API standard's where it has the function
(``take``, ``take_along_axis``, ``flip``, ``roll``, ``broadcast_to``, ``reshape(copy=False)``,
``max``, ``argmax``); the rest are numpy's, which cupy and dask share (``tril``, ``pad``,
``tile``, ``put_along_axis``, ``bincount``).

Views (``Tensor(a)`` returns: ``select``, ``slice``, ``narrow``, the split family,
``expand``, ``movedim``, ``view``) return views of ``self``; every other op returns new
memory, as its schema promises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _index_rules as R

__all__ = ["index_kernels"]

_INT64 = np.dtype("int64")


def _rename_axis(err: IndexError) -> IndexError:
    """numpy's out-of-bounds message in torch's words ("dimension", not "axis")."""
    return IndexError(str(err).replace("for axis", "for dimension"))


def _crop(shape: Sequence[int], dim: int, like: Sequence[int]) -> tuple[slice, ...]:
    """The key that cuts an array of ``shape`` down to ``like`` outside ``dim`` (torch's
    gather/scatter read only the index-shaped corner of ``self`` and ``src``)."""
    return tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(like))


Fn = Callable[..., Any]


def kernel_table(
    suffix: str = "", *, leaf_fake: bool = False
) -> tuple[dict[str, Fn], Callable[[str], Callable[[Fn], Fn]]]:
    """A dict of kernels and the decorator ``@kernel(name)`` that names a function
    ``name + suffix`` and files it under ``name`` (``leaf_fake``: a fake kernel that calls
    no ops)."""
    kernels: dict[str, Fn] = {}

    def kernel(name: str) -> Callable[[Fn], Fn]:
        def register(fn: Fn) -> Fn:
            fn.__qualname__ = fn.__name__ = name + suffix
            if leaf_fake:
                fn._oplib_leaf_fake = True  # type: ignore[attr-defined]
            kernels[name] = fn
            return fn

        return register

    return kernels, kernel


def index_kernels(xp: Any) -> dict[str, Callable[..., Any]]:
    """Kernels of the indexing and view ops bound to ``xp``, keyed like
    :func:`oplib_core.kernels.array_kernels` (``"select.int"``, ``"max.dim"``)."""
    kernels, kernel = kernel_table()

    def copy(x: Any) -> Any:
        return xp.array(x, copy=True)

    def along(dim: int, key: Any) -> tuple[Any, ...]:
        # the trailing Ellipsis keeps numpy from turning a 0-d result into a scalar
        return (slice(None),) * dim + (key, Ellipsis)

    # -- views ----------------------------------------------------------------------------
    @kernel("select.int")
    def select(self: Any, dim: int, index: int) -> Any:
        """``self`` at ``index`` along ``dim``, that dim removed; a view."""
        # Complicated for better performance (``t[i]`` comes here): dim 0 and an index in
        # range skip the rules; equivalent: the two lines at the end.
        if dim == 0 and self.ndim and -self.shape[0] <= index < self.shape[0]:
            return self[index, ...]
        dim, index = R.select_index(tuple(self.shape), dim, index)
        return self[along(dim, index)]

    @kernel("slice.Tensor")
    def slice_(self: Any, dim: int, start: int | None, end: int | None, step: int) -> Any:
        """Elements ``start:end:step`` of ``dim`` (clamped as Python slices are); a view."""
        if dim == 0 and step > 0 and self.ndim:  # ``t[a:b]``: Python's slice clamps as torch
            return self[start:end:step, ...]
        dim, start, end, _ = R.slice_bounds(tuple(self.shape), dim, start, end, step)
        return self[along(dim, slice(start, end, step))]

    @kernel("narrow")
    def narrow(self: Any, dim: int, start: int, length: int) -> Any:
        """``length`` elements of ``dim`` from ``start`` (negative counts from the end); a
        view."""
        dim, start = R.narrow_start(tuple(self.shape), dim, start, length)
        return self[along(dim, slice(start, start + length))]

    def pieces(self: Any, dim: int, bounds: Sequence[tuple[int, int]]) -> list[Any]:
        return [self[along(dim, slice(a, b))] for a, b in bounds]

    def sized(self: Any, dim: int, sizes: Sequence[int]) -> list[Any]:
        bounds, start = [], 0
        for n in sizes:
            bounds.append((start, start + n))
            start += n
        return pieces(self, dim, bounds)

    @kernel("split.Tensor")
    def split(self: Any, split_size: int, dim: int) -> list[Any]:
        """Views of ``split_size`` elements along ``dim`` (the last may be smaller)."""
        dim, sizes = R.split_sizes("split", tuple(self.shape), split_size, dim)
        return sized(self, dim, sizes)

    @kernel("split_with_sizes")
    def split_with_sizes(self: Any, split_sizes: Sequence[int], dim: int) -> list[Any]:
        """Views of the given sizes along ``dim`` (they must sum to its size)."""
        dim = R.split_with_sizes_check(tuple(self.shape), split_sizes, dim)
        return sized(self, dim, split_sizes)

    @kernel("chunk")
    def chunk(self: Any, chunks: int, dim: int) -> list[Any]:
        """At most ``chunks`` views of ``ceil(size / chunks)`` elements along ``dim``."""
        dim, sizes = R.chunk_sizes(tuple(self.shape), chunks, dim)
        return sized(self, dim, sizes)

    @kernel("tensor_split.sections")
    def tensor_split_sections(self: Any, sections: int, dim: int) -> list[Any]:
        """Exactly ``sections`` views along ``dim``, the first ``size % sections`` one
        longer."""
        dim, bounds = R.tensor_split_bounds(tuple(self.shape), sections, None, dim)
        return pieces(self, dim, bounds)

    @kernel("tensor_split.indices")
    def tensor_split_indices(self: Any, indices: Sequence[int], dim: int) -> list[Any]:
        """Views cut at ``indices`` along ``dim`` (clamped as slices are)."""
        dim, bounds = R.tensor_split_bounds(tuple(self.shape), None, indices, dim)
        return pieces(self, dim, bounds)

    @kernel("expand")
    def expand(self: Any, size: Sequence[int], *, implicit: bool = False) -> Any:
        """``self`` broadcast to ``size`` (-1 keeps a dim); a read-only view."""
        return xp.broadcast_to(self, R.expand_shape(tuple(self.shape), size))

    def movedim(self: Any, source: Sequence[int], destination: Sequence[int]) -> Any:
        perm = R.movedim_perm(self.ndim, source, destination)
        return xp.transpose(self, tuple(perm)) if perm else self[...]

    @kernel("movedim.int")
    def movedim_int(self: Any, source: int, destination: int) -> Any:
        """Dim ``source`` moved to position ``destination``; a view."""
        return movedim(self, [source], [destination])

    @kernel("movedim.intlist")
    def movedim_intlist(self: Any, source: Sequence[int], destination: Sequence[int]) -> Any:
        """Dims ``source`` moved to positions ``destination``; a view."""
        return movedim(self, source, destination)

    @kernel("view")
    def view(self: Any, size: Sequence[int]) -> Any:
        """``self`` with shape ``size``, sharing its memory; torch's RuntimeError when the
        strides make that impossible (``reshape`` copies instead)."""
        shape = R.view_shape(tuple(self.shape), size)
        try:
            return xp.reshape(self, shape, copy=False)
        except TypeError:  # a reshape without ``copy`` (cupy): set the shape of a view
            out = self.view()
            try:
                out.shape = shape
            except AttributeError:
                raise RuntimeError(R.VIEW_STRIDES) from None
            return out
        except ValueError:
            raise RuntimeError(R.VIEW_STRIDES) from None

    # -- copies: advanced indexing ----------------------------------------------------------
    @kernel("index.Tensor")
    def index(self: Any, indices: Sequence[Any]) -> Any:
        """numpy's advanced indexing: integer arrays (broadcast together) and bool masks;
        ``None`` entries take the whole dim. Always a copy."""
        entries = [None if i is None else (tuple(i.shape), i.dtype) for i in indices]
        R.advanced_index_shape(tuple(self.shape), entries, [0] * len(entries))
        key = tuple(slice(None) if i is None else i for i in indices)
        try:
            out = self[key]
        except IndexError as e:
            raise _rename_axis(e) from None
        return copy(out) if all(i is None for i in indices) else out

    @kernel("masked_select")
    def masked_select(self: Any, mask: Any) -> Any:
        """The elements of ``self`` where ``mask`` (broadcast with it) holds, as a 1-d
        array."""
        if mask.dtype != np.bool_:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
        s, m = xp.broadcast_arrays(self, mask)
        return xp.reshape(s[m], (-1,))

    @kernel("index_select")
    def index_select(self: Any, dim: int, index: Any) -> Any:
        """The entries ``index`` (a 0-d or 1-d integer array) of ``dim``."""
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if index.dtype.kind not in "iu":
            raise IndexError(
                f"index_select(): Expected dtype int32/int64 for index but got: {index.dtype}"
            )
        dim = R.wrap_dim("index_select", dim, self.ndim)
        if not self.ndim:
            return xp.take(xp.reshape(self, (1,)), xp.reshape(index, (-1,)))[0, ...]
        try:
            return xp.take(self, xp.reshape(index, (-1,)), axis=dim)
        except IndexError as e:
            raise _rename_axis(e) from None

    def check_index(op: str, index: Any) -> None:
        if index.dtype.kind not in "iu":
            raise RuntimeError(f"{op}(): Expected dtype int64 for index, got {index.dtype}")

    @kernel("gather")
    def gather(self: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
        """``out[i][j] = self[index[i][j]][j]`` along ``dim`` (torch's ``gather``)."""
        check_index("gather", index)
        dim = R.gather_check("gather", tuple(self.shape), dim, tuple(index.shape), None)
        if not self.ndim:  # torch reads a 0-d tensor as one element along dim 0
            flat = xp.take(xp.reshape(self, (1,)), xp.reshape(index, (-1,)))
            return xp.reshape(flat, tuple(index.shape))
        try:
            return xp.take_along_axis(self[_crop(self.shape, dim, index.shape)], index, axis=dim)
        except IndexError as e:
            raise _rename_axis(e) from None

    def scattered(op: str, self: Any, dim: int, index: Any, values: Any, add: bool) -> Any:
        check_index(op, index)
        dim = R.gather_check(op, tuple(self.shape), dim, tuple(index.shape), tuple(values.shape))
        out = copy(self)
        if not self.ndim:
            out = xp.reshape(out, (1,))
            index = xp.reshape(index, (1,))
            values = xp.reshape(values, (1,))
        vals = values[_crop(values.shape, -1, index.shape)].astype(self.dtype, copy=False)
        target = out[_crop(out.shape, dim, index.shape)]
        try:
            if not add:
                xp.put_along_axis(target, index, vals, axis=dim)
            else:
                scatter_add_into(out, target, dim, index, vals)
        except IndexError as e:
            raise _rename_axis(e) from None
        return xp.reshape(out, self.shape)

    def scatter_add_into(out: Any, target: Any, dim: int, index: Any, vals: Any) -> None:
        ndim = index.ndim
        coords = tuple(
            index
            if d == dim
            else xp.reshape(xp.arange(index.shape[d]), [-1 if e == d else 1 for e in range(ndim)])
            for d in range(ndim)
        )
        at = getattr(getattr(xp, "add", None), "at", None)
        if at is not None:  # numpy, cupy: exact for every dtype
            at(target, coords, vals)
            return
        # namespaces without ufunc.at: a weighted bincount over flat positions (float64 sums)
        stride, pos = 1, None
        for d in range(ndim - 1, -1, -1):
            term = coords[d].astype(_INT64) * stride
            pos = term if pos is None else pos + term
            stride *= out.shape[d]
        pos = xp.reshape(xp.broadcast_to(pos, index.shape), (-1,))
        flat = xp.reshape(out, (-1,))
        weights = xp.reshape(vals, (-1,))
        n = flat.shape[0]
        if out.dtype.kind == "c":  # bincount weighs with reals: the two parts apart
            sums = xp.bincount(pos, weights=xp.real(weights), minlength=n) + 1j * xp.bincount(
                pos, weights=xp.imag(weights), minlength=n
            )
        else:
            sums = xp.bincount(pos, weights=weights, minlength=n)
        flat[...] = flat + sums.astype(out.dtype)

    @kernel("scatter.src")
    def scatter_src(self: Any, dim: int, index: Any, src: Any) -> Any:
        """A copy of ``self`` with ``src[i][j]`` written at ``index[i][j]`` along ``dim``."""
        return scattered("scatter", self, dim, index, src, add=False)

    @kernel("scatter.value")
    def scatter_value(self: Any, dim: int, index: Any, value: Any) -> Any:
        """A copy of ``self`` with ``value`` written at ``index`` along ``dim``."""
        values = xp.full(tuple(index.shape), value, dtype=self.dtype)
        return scattered("scatter", self, dim, index, values, add=False)

    @kernel("scatter_add")
    def scatter_add(self: Any, dim: int, index: Any, src: Any) -> Any:
        """A copy of ``self`` with ``src[i][j]`` added at ``index[i][j]`` along ``dim``
        (repeated indices accumulate)."""
        return scattered("scatter_add", self, dim, index, src, add=True)

    # -- copies: rearrangements ---------------------------------------------------------------
    @kernel("pad")
    def pad(self: Any, pad: Sequence[int], mode: str, value: float | None) -> Any:
        """torch's ``pad`` (``[left, right]`` of the last dim first): modes ``constant``
        (negative widths crop), ``reflect``, ``replicate``, ``circular``."""
        widths = R.pad_widths("pad", tuple(self.shape), pad, mode)
        crop = tuple(
            slice(-b if b < 0 else 0, s + a if a < 0 else s)
            for (b, a), s in zip(widths, self.shape, strict=True)
        )
        x = self[crop] if any(b < 0 or a < 0 for b, a in widths) else self
        grow = [(max(b, 0), max(a, 0)) for b, a in widths]
        np_mode = R.PAD_MODES[mode]
        if np_mode == "constant":
            return xp.pad(x, grow, mode="constant", constant_values=0 if value is None else value)
        return xp.pad(x, grow, mode=np_mode)

    @kernel("flip")
    def flip(self: Any, dims: Sequence[int]) -> Any:
        """``self`` reversed along ``dims``; a copy."""
        axes = R.flip_dims(tuple(self.shape), dims)
        return copy(xp.flip(self, axis=axes) if axes else self)

    @kernel("roll")
    def roll(self: Any, shifts: Sequence[int], dims: Sequence[int]) -> Any:
        """Elements shifted along ``dims`` with wrap-around; with no ``dims``, along the
        flattened tensor."""
        shift, axes = R.roll_args(tuple(self.shape), shifts, dims)
        if not axes:
            return xp.reshape(xp.roll(xp.reshape(self, (-1,)), shift[0]), self.shape)
        return xp.roll(self, shift, axis=axes)

    @kernel("tril")
    def tril(self: Any, diagonal: int) -> Any:
        """The lower triangle of the last two dims (the rest zeroed)."""
        R.tri_check("tril", tuple(self.shape))
        return xp.tril(self, k=diagonal)

    @kernel("triu")
    def triu(self: Any, diagonal: int) -> Any:
        """The upper triangle of the last two dims (the rest zeroed)."""
        R.tri_check("triu", tuple(self.shape))
        return xp.triu(self, k=diagonal)

    def repeated(self: Any, repeats: Sequence[int]) -> Any:
        R.repeat_shape(tuple(self.shape), repeats)
        lead = (1,) * (len(repeats) - self.ndim)
        return xp.tile(xp.reshape(self, (*lead, *self.shape)), tuple(repeats))

    @kernel("repeat")
    def repeat(self: Any, repeats: Sequence[int]) -> Any:
        """``self`` repeated ``repeats[d]`` times along each dim (torch's ``repeat``, which is
        numpy's ``tile``)."""
        return repeated(self, repeats)

    @kernel("tile")
    def tile(self: Any, dims: Sequence[int]) -> Any:
        """``repeat`` with ones prepended to ``dims`` when it has fewer than ``self.ndim``."""
        return repeated(self, R.tile_reps(tuple(self.shape), dims))

    # -- reductions with indices -----------------------------------------------------------------
    def extreme(op: str, pick: Callable[..., Any]) -> Callable[[Any], Any]:
        def fn(self: Any) -> Any:
            R.full_reduction_check(op, tuple(self.shape))
            return xp.asarray(pick(self))

        return fn

    kernel("max")(extreme("max", xp.max)).__doc__ = "The largest element (0-d); nan propagates."
    kernel("min")(extreme("min", xp.min)).__doc__ = "The smallest element (0-d); nan propagates."

    def extreme_dim(op: str, pick: Callable[..., Any], arg: Callable[..., Any]) -> Any:
        def fn(self: Any, dim: int, keepdim: bool) -> tuple[Any, Any]:
            dim, _ = R.max_dim_shape(op, tuple(self.shape), dim, keepdim)
            if not self.ndim:
                return copy(self), xp.zeros((), dtype=_INT64)
            values = pick(self, axis=dim, keepdims=keepdim)
            indices = arg(self, axis=dim, keepdims=keepdim)
            return xp.asarray(values), xp.asarray(indices).astype(_INT64, copy=False)

        return fn

    kernel("max.dim")(
        extreme_dim("max", xp.max, xp.argmax)
    ).__doc__ = "``(values, indices)`` of the largest elements along ``dim`` (first on ties)."
    kernel("min.dim")(
        extreme_dim("min", xp.min, xp.argmin)
    ).__doc__ = "``(values, indices)`` of the smallest elements along ``dim`` (first on ties)."
    return kernels
