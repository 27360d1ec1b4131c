"""Kernels of the indexing and view ops (``select``, ``slice``, ``index``, ``gather``,
``pad``, ``split`` ...), written once against an array namespace ``xp``.

Same calling convention as :mod:`._array_kernels`, whose ``array_kernels(xp)`` merges this
dict in, so every backend that binds the core kernels (cpu, cuda, privateuse1) gets these.
Argument checks and output shapes come from :mod:`oplib_core._index_rules`, shared with the
fake kernels. ``xp`` goes through :func:`~oplib_core._array_api.standard_namespace` and
dtypes through its :class:`~oplib_core._array_api.DtypeMap`, as in ``array_kernels``; the
function names are the array API standard's (``take``, ``take_along_axis``, ``flip``,
``roll``, ``tile``, ``tril``, ``permute_dims``, ``astype``, ``asarray(copy=True)``). Where
the standard has no function, a namespace's own is used when it has one, else the standard's
spelling: ``pad`` (constant widths by ``concat``, the other modes by ``take``), indexing
with slices and index arrays mixed (one broadcast index array per dim), ``scatter`` without
``put_along_axis`` and ``scatter_add`` without ``add.at`` or ``bincount``
(:func:`scatter_flat`).

Views (``Tensor(a)`` returns: ``select``, ``slice``, ``narrow``, the split family,
``expand``, ``movedim``, ``view``) return views of ``self``; every other op returns new
memory, as its schema promises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _index_rules as R
from .._array_api import dtype_getter, dtype_map, standard_namespace

__all__ = [
    "full_index",
    "index_kernels",
    "masks_as_indices",
    "scatter_flat",
    "wrap_checked",
]

_INT64 = np.dtype("int64")
# numpy 2.1 added reshape(copy=False), the view-or-raise that setting ``.shape`` was
_NUMPY_RESHAPE_COPY = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def _rename_axis(err: IndexError) -> IndexError:
    """numpy's out-of-bounds message in torch's words ("dimension", not "axis")."""
    return IndexError(str(err).replace("for axis", "for dimension"))


def _reshaped_view(a: Any, shape: tuple[int, ...]) -> Any:
    """``a`` seen with ``shape``, sharing its memory, for a namespace whose ``reshape`` has no
    ``copy`` argument; torch's RuntimeError when the strides make that impossible."""
    if isinstance(a, np.ndarray) and _NUMPY_RESHAPE_COPY:
        # numpy 2.5 deprecates setting ``ndarray.shape``; its reshape(copy=False) does the same
        try:
            return np.reshape(a, shape, copy=False)
        except ValueError:
            raise RuntimeError(R.VIEW_STRIDES) from None
    out = a.view()
    try:
        out.shape = shape  # cupy's (and numpy < 2.1's) way to reshape without a copy
    except AttributeError:
        raise RuntimeError(R.VIEW_STRIDES) from None
    return out


def _crop(shape: Sequence[int], dim: int, like: Sequence[int]) -> tuple[slice, ...]:
    """The key that cuts an array of ``shape`` down to ``like`` outside ``dim`` (torch's
    gather/scatter read only the index-shaped corner of ``self`` and ``src``)."""
    return tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(like))


def _pad_source(i: int, n: int, mode: str) -> int:
    """The position of a dim of size ``n`` that position ``i`` (``-before <= i < n +
    after``) of the padded dim copies: numpy's ``edge``, ``wrap`` and ``reflect``."""
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1)  # reflect: mirrored without repeating the edge
    j = abs(i) % period if period else 0
    return j if j < n else period - j


def masks_as_indices(xp: Any, key: Sequence[Any], is_mask: Callable[[Any], bool]) -> list[Any]:
    """``key`` with each bool mask replaced by the index arrays of its true elements (one
    per dim it covers), as numpy reads a mask."""
    parts: list[Any] = []
    for k in key:
        if is_mask(k):
            parts.extend(xp.nonzero(k))
        else:
            parts.append(k)
    return parts


def full_index(xp: Any, shape: tuple[int, ...], key: Sequence[Any]) -> list[Any]:
    """``key`` (integer index arrays and whole-dim slices, at most one per dim; missing
    trailing dims are whole) as one index array per dim, shaped so that they broadcast to
    the result of ``a[key]`` (numpy's placement: adjacent advanced indices stay in place,
    else they go first)."""
    key = tuple(key) + (slice(None),) * (len(shape) - len(key))
    adv = [i for i, k in enumerate(key) if type(k) is not slice]
    arrays = [key[i] for i in adv]
    block = xp.broadcast_arrays(*arrays)[0].shape if arrays else ()
    adjacent = not adv or adv == list(range(adv[0], adv[-1] + 1))
    layout: list[Any] = []  # per result dim group: "block" or the dim of a whole slice
    if not adjacent:
        layout.append("block")
    for i in range(len(key)):
        if i in adv:
            if adjacent and i == adv[0]:
                layout.append("block")
        else:
            layout.append(i)
    ndim = sum(len(block) if g == "block" else 1 for g in layout)
    start: dict[Any, int] = {}
    pos = 0
    for g in layout:
        start[g] = pos
        pos += len(block) if g == "block" else 1
    out: list[Any] = []
    for i, k in enumerate(key):
        shape_i = [1] * ndim
        if type(k) is slice:
            shape_i[start[i]] = shape[i]
            out.append(xp.reshape(xp.arange(shape[i]), tuple(shape_i)))
        else:
            s = start["block"]
            shape_i[s : s + len(block)] = (1,) * (len(block) - k.ndim) + tuple(k.shape)
            out.append(xp.reshape(k, tuple(shape_i)))
    return out


def wrap_checked(xp: Any, index: Any, n: int, dim: int) -> Any:
    """Integer ``index`` into a dim of size ``n`` with negative entries counted from the end;
    numpy's ``IndexError`` when an entry is outside ``[-n, n)``."""
    bad = xp.logical_or(xp.less(index, -n), xp.greater_equal(index, n))
    try:
        outside = bool(xp.any(bad))
    except TypeError:  # a device that reads to the host only when asked: left unchecked
        outside = False
    if outside:
        first = int(xp.reshape(index[bad], (-1,))[0])
        raise IndexError(f"index {first} is out of bounds for axis {dim} with size {n}")
    return xp.where(xp.less(index, 0), xp.add(index, n), index)


def scatter_flat(xp: Any, flat: Any, positions: Any, values: Any, *, accumulate: bool) -> Any:
    """A copy of the 1-d ``flat`` with ``values`` written at ``positions`` (1-d, in range;
    repeated positions: the last value wins, or with ``accumulate`` they add up), in the
    array API standard's functions only (no ``put_along_axis``, ``add.at`` or writes at
    index arrays): the values sorted by position, and for every position the run of them
    that targets it found by ``searchsorted``; sums are differences of a cumulative sum
    (floats: rounding of the running total, not of each run)."""
    if positions.shape[0] == 0:
        return xp.asarray(flat, copy=True)
    order = xp.argsort(positions, stable=True)
    lin = xp.take(positions, order)
    vals = xp.take(values, order)
    targets = xp.arange(flat.shape[0], dtype=lin.dtype)
    left = xp.searchsorted(lin, targets, side="left")
    right = xp.searchsorted(lin, targets, side="right")
    if accumulate:
        sums = xp.cumulative_sum(vals, dtype=vals.dtype, include_initial=True)
        added = xp.subtract(xp.take(sums, right), xp.take(sums, left))
        return xp.astype(xp.add(flat, added), flat.dtype, copy=False)
    last = xp.take(vals, xp.clip(xp.subtract(right, 1), min=0))
    return xp.where(xp.greater(right, left), last, flat)


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
    xp = standard_namespace(xp)
    dmap = dtype_map(xp)
    int64 = dmap.native(_INT64)
    odtype = dtype_getter(dmap)

    def copy(x: Any) -> Any:
        return xp.asarray(x, copy=True)

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
        return xp.permute_dims(self, tuple(perm)) if perm else self[...]

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
        except TypeError:  # a reshape without ``copy`` (cupy, numpy < 2.1)
            return _reshaped_view(self, shape)
        except ValueError:
            raise RuntimeError(R.VIEW_STRIDES) from None

    # -- copies: advanced indexing ----------------------------------------------------------
    @kernel("index.Tensor")
    def index(self: Any, indices: Sequence[Any]) -> Any:
        """numpy's advanced indexing: integer arrays (broadcast together) and bool masks;
        ``None`` entries take the whole dim. Always a copy."""
        entries = [None if i is None else (tuple(i.shape), odtype(i)) for i in indices]
        # (checks only: a mask counts as size 1, which broadcasts with any index array; its
        # true count is data, and a real mismatch raises when indexing below)
        R.advanced_index_shape(tuple(self.shape), entries, [1] * len(entries))
        key = tuple(slice(None) if i is None else i for i in indices)
        try:
            try:
                out = self[key]
            except IndexError:  # (also out of bounds, which raises again below)
                # the standard's integer array indexing takes one index array per dim
                try:
                    out = self[per_dim_index(tuple(self.shape), key)]
                except ValueError as e:  # index arrays (a mask's true count) do not broadcast
                    raise IndexError(
                        f"shape mismatch: indexing tensors could not be broadcast together ({e})"
                    ) from None
        except IndexError as e:
            raise _rename_axis(e) from None
        return copy(out) if all(i is None for i in indices) else out

    def is_mask(k: Any) -> bool:
        return type(k) is not slice and odtype(k) == np.bool_

    def per_dim_index(shape: tuple[int, ...], key: tuple[Any, ...]) -> tuple[Any, ...]:
        """``key`` (index arrays, bool masks, whole-dim slices) as one index array per dim
        that select what numpy's advanced indexing would."""
        return tuple(full_index(xp, shape, masks_as_indices(xp, key, is_mask)))

    @kernel("masked_select")
    def masked_select(self: Any, mask: Any) -> Any:
        """The elements of ``self`` where ``mask`` (broadcast with it) holds, as a 1-d
        array."""
        if odtype(mask) != np.bool_:
            raise RuntimeError(
                f"masked_select: expected BoolTensor for mask, got {odtype(mask).name}"
            )
        s, m = xp.broadcast_arrays(self, mask)
        return xp.reshape(s[m], (-1,))

    @kernel("index_select")
    def index_select(self: Any, dim: int, index: Any) -> Any:
        """The entries ``index`` (a 0-d or 1-d integer array) of ``dim``."""
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        if odtype(index).kind not in "iu":
            raise IndexError(
                "index_select(): Expected dtype int32/int64 for index but got: "
                f"{odtype(index).name}"
            )
        dim = R.wrap_dim("index_select", dim, self.ndim)
        if not self.ndim:
            return xp.take(xp.reshape(self, (1,)), xp.reshape(index, (-1,)))[0, ...]
        try:
            return xp.take(self, xp.reshape(index, (-1,)), axis=dim)
        except IndexError as e:
            raise _rename_axis(e) from None

    def check_index(op: str, index: Any) -> None:
        if odtype(index).kind not in "iu":
            raise RuntimeError(f"{op}(): Expected dtype int64 for index, got {odtype(index).name}")

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

    put_along_axis = getattr(xp, "put_along_axis", None)  # numpy's; not the standard's
    add_at = getattr(getattr(xp, "add", None), "at", None)  # numpy's ufunc.at (cupy's too)
    bincount = getattr(xp, "bincount", None)

    def scattered(op: str, self: Any, dim: int, index: Any, values: Any, add: bool) -> Any:
        check_index(op, index)
        dim = R.gather_check(op, tuple(self.shape), dim, tuple(index.shape), tuple(values.shape))
        out = copy(self)
        if not self.ndim:
            out = xp.reshape(out, (1,))
            index = xp.reshape(index, (1,))
            values = xp.reshape(values, (1,))
        vals = xp.astype(values[_crop(values.shape, -1, index.shape)], self.dtype, copy=False)
        target = out[_crop(out.shape, dim, index.shape)]
        try:
            if not add and put_along_axis is not None:
                put_along_axis(target, index, vals, axis=dim)
            elif add and add_at is not None:  # exact for every dtype
                add_at(target, coords_along(dim, index), vals)
            else:
                out = scattered_flat(out, dim, index, vals, add)
        except IndexError as e:
            raise _rename_axis(e) from None
        return xp.reshape(out, self.shape)

    def coords_along(dim: int, index: Any) -> tuple[Any, ...]:
        """The position of every element of ``index`` in ``out``: ``index`` itself along
        ``dim``, its own coordinates along the other dims (shaped to broadcast)."""
        ndim = index.ndim
        return tuple(
            index
            if d == dim
            else xp.reshape(
                xp.arange(index.shape[d]), tuple(-1 if e == d else 1 for e in range(ndim))
            )
            for d in range(ndim)
        )

    def scattered_flat(out: Any, dim: int, index: Any, vals: Any, add: bool) -> Any:
        """``scatter``/``scatter_add`` on namespaces without ``put_along_axis``/``add.at``:
        by the flat positions of the targets, summed by a weighted ``bincount`` (float64
        sums) where the namespace has one, else by :func:`scatter_flat`."""
        if not add or bincount is None:
            index = wrap_checked(xp, index, out.shape[dim], dim)
        coords = coords_along(dim, index)
        stride, pos = 1, None
        for d in range(index.ndim - 1, -1, -1):
            term = xp.astype(coords[d], int64) * stride
            pos = term if pos is None else pos + term
            stride *= out.shape[d]
        pos = xp.reshape(xp.broadcast_to(pos, index.shape), (-1,))
        flat = xp.reshape(out, (-1,))
        weights = xp.reshape(vals, (-1,))
        if not add or bincount is None:
            return scatter_flat(xp, flat, pos, weights, accumulate=add)
        n = flat.shape[0]
        if odtype(out).kind == "c":  # bincount weighs with reals: the two parts apart
            sums = bincount(pos, weights=xp.real(weights), minlength=n) + 1j * bincount(
                pos, weights=xp.imag(weights), minlength=n
            )
        else:
            sums = bincount(pos, weights=weights, minlength=n)
        return flat + xp.astype(sums, out.dtype)

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
        fill = 0 if value is None else value
        if native_pad is None:
            return standard_pad(x, grow, np_mode, fill)
        if np_mode == "constant":
            return native_pad(x, grow, mode="constant", constant_values=fill)
        return native_pad(x, grow, mode=np_mode)

    native_pad = getattr(xp, "pad", None)  # numpy's (cupy, dask, jax have it too)

    def standard_pad(x: Any, grow: Sequence[tuple[int, int]], mode: str, fill: Any) -> Any:
        """``pad`` in the standard's functions: constant borders joined by ``concat``, the
        other modes as a ``take`` of the positions they copy, one dim at a time."""
        kind = odtype(x).kind
        fill = bool(fill) if kind == "b" else int(fill) if kind in "iu" else fill
        out = x
        for d, (b, a) in enumerate(grow):
            if not b and not a:
                continue
            n = out.shape[d]
            if mode == "constant":
                parts = [
                    xp.full((*out.shape[:d], w, *out.shape[d + 1 :]), fill, dtype=out.dtype)
                    for w in (b, a)
                ]
                out = xp.concat([parts[0], out, parts[1]], axis=d)
                continue
            positions = [_pad_source(i, n, mode) for i in range(-b, n + a)]
            out = xp.take(out, xp.asarray(positions, dtype=int64), axis=d)
        return copy(out) if out is x else out  # new memory, as the schema promises

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
                return copy(self), xp.zeros((), dtype=int64)
            values = pick(self, axis=dim, keepdims=keepdim)
            indices = arg(self, axis=dim, keepdims=keepdim)
            return xp.asarray(values), xp.astype(xp.asarray(indices), int64, copy=False)

        return fn

    kernel("max.dim")(
        extreme_dim("max", xp.max, xp.argmax)
    ).__doc__ = "``(values, indices)`` of the largest elements along ``dim`` (first on ties)."
    kernel("min.dim")(
        extreme_dim("min", xp.min, xp.argmin)
    ).__doc__ = "``(values, indices)`` of the smallest elements along ``dim`` (first on ties)."
    return kernels
