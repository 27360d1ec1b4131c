"""The shape rules of the indexing and view ops (``select``, ``slice``, ``index``, ``split``
...): output shapes and torch's argument errors, written once for the kernels
(:mod:`oplib_core.kernels._index_kernels`) and the fake kernels (:mod:`.fake._index_fakes`).

Sizes are ints or ``SymInt``s; a check that needs a symbolic size's value is skipped
(``type(s) is int`` guards), as the other shape rules do. Pure: no arrays, no state.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from .fake._shapes import broadcast_shapes, reshape_shape

__all__ = [
    "advanced_index_shape",
    "chunk_sizes",
    "expand_shape",
    "flip_dims",
    "gather_check",
    "max_dim_shape",
    "movedim_perm",
    "narrow_start",
    "pad_widths",
    "repeat_shape",
    "roll_args",
    "select_index",
    "slice_bounds",
    "split_sizes",
    "tensor_split_bounds",
    "tile_reps",
    "tri_check",
    "wrap_dim",
]

Shape = tuple[Any, ...]

#: The most pieces ``tensor_split`` makes (torch would try to allocate them all).
_MAX_PIECES = 2**31 - 1

#: torch's ``pad`` modes and numpy's names for them.
PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _known(*sizes: Any) -> bool:
    return all(type(s) is int for s in sizes)


def wrap_dim(op: str, dim: int, ndim: int) -> int:
    """``dim`` in ``range(ndim)``; like torch, a 0-d tensor accepts 0 and -1."""
    n = ndim if ndim > 0 else 1
    if not -n <= dim < n:
        raise IndexError(
            f"{op}(): Dimension out of range (expected to be in range of [{-n}, {n - 1}], but "
            f"got {dim})"
        )
    return dim % n


def _no_0d(op: str, shape: Shape) -> None:
    if not shape:
        raise IndexError(f"{op}() cannot be applied to a 0-dim tensor.")


def select_index(shape: Shape, dim: int, index: Any) -> tuple[int, Any]:
    """(dim, index) of ``select(self, dim, index)``, both wrapped; torch's IndexError for an
    index out of range."""
    _no_0d("select", shape)
    dim = wrap_dim("select", dim, len(shape))
    size = shape[dim]
    if _known(size, index):
        if not -size <= index < size:
            raise IndexError(
                f"select(): index {index} out of range for tensor of size {list(shape)} at "
                f"dimension {dim}"
            )
        index %= size
    return dim, index


def slice_bounds(
    shape: Shape, dim: int, start: Any, end: Any, step: Any
) -> tuple[int, Any, Any, Any]:
    """(dim, start, end, length) of ``slice``: start and end clamped to the dim as torch
    (and Python) do; the step must be positive."""
    _no_0d("slice", shape)
    dim = wrap_dim("slice", dim, len(shape))
    if type(step) is int and step <= 0:
        raise ValueError("slice(): step must be greater than zero")
    size = shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if _known(size, start, end, step):
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, start), size)
        return dim, start, end, (end - start + step - 1) // step
    return dim, start, end, (end - start + step - 1) // step


def narrow_start(shape: Shape, dim: int, start: Any, length: Any) -> tuple[int, Any]:
    """(dim, start) of ``narrow``, wrapped and checked as torch does."""
    _no_0d("narrow", shape)
    dim = wrap_dim("narrow", dim, len(shape))
    size = shape[dim]
    if type(length) is int and length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if _known(size, start):
        if not -size <= start <= size:
            raise IndexError(
                f"start out of range (expected to be in range of [{-size}, {size}], but got "
                f"{start})"
            )
        if start < 0:
            start += size
    if _known(size, start, length) and start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return dim, start


def advanced_index_shape(
    shape: Shape, indices: Sequence[Any], masked: list[Any] | None = None
) -> Shape:
    """The shape of ``index(self, indices)`` (numpy's advanced indexing, ``None`` entries
    being full slices). ``indices`` hold (shape, dtype) pairs or None; a bool index of k
    dims becomes one dim whose size is the next entry of ``masked`` (the number of true
    elements: known to kernels, a new dynamic size to fake kernels)."""
    if len(indices) > len(shape):
        raise IndexError(
            f"too many indices for tensor of dimension {len(shape)} (got {len(indices)})"
        )
    groups: list[Shape] = []
    positions: list[int] = []
    dim = 0
    sizes = iter(masked or ())
    for entry in indices:
        if entry is None:
            dim += 1
            continue
        ishape, dtype = entry
        if dtype.kind == "b":
            k = len(ishape)
            for j, s in enumerate(ishape):
                have = shape[dim + j] if dim + j < len(shape) else None
                if have is None or (_known(s, have) and s != have):
                    raise IndexError(
                        f"The shape of the mask {list(ishape)} at index {j} does not match "
                        f"the shape of the indexed tensor {list(shape)} at index {dim + j}"
                    )
            groups.append((next(sizes),))
            positions.append(dim)
            dim += k
        elif dtype.kind in "iu":
            groups.append(tuple(ishape))
            positions.append(dim)
            dim += 1
        else:
            raise IndexError(
                f"tensors used as indices must be long, int, byte or bool tensors, got {dtype}"
            )
    if not groups:
        return tuple(shape)
    try:
        result = broadcast_shapes(*groups)
    except ValueError:
        raise IndexError(
            "shape mismatch: indexing tensors could not be broadcast together with shapes "
            + " ".join(str(list(g)) for g in groups)
        ) from None
    # numpy's rule: advanced indices next to each other put their result where they stand,
    # separated ones put it in front; ``taken`` are the dims they consume
    taken: set[int] = set()
    spans: list[tuple[int, int]] = []
    d = 0
    for entry in indices:
        k = 1 if entry is None or entry[1].kind != "b" else len(entry[0])
        if entry is not None:
            taken.update(range(d, d + k))
            spans.append((d, d + k))
        d += k
    adjacent = all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    first = positions[0]
    kept = [s for i, s in enumerate(shape) if i not in taken]
    if adjacent:
        before = sum(1 for i in range(first) if i not in taken)
        return (*kept[:before], *result, *kept[before:])
    return (*result, *kept)


def gather_check(op: str, shape: Shape, dim: int, ishape: Shape, src: Shape | None) -> int:
    """``dim`` wrapped, after torch's checks of a gather/scatter index (same number of dims;
    no larger than ``self`` outside ``dim``, nor than ``src``)."""
    dim = wrap_dim(op, dim, len(shape))
    if len(ishape) != max(len(shape), 1) and not (len(ishape) == 0 and len(shape) == 0):
        raise RuntimeError(
            f"{op}(): Index tensor must have the same number of dimensions as input tensor"
        )
    for d, (i, s) in enumerate(zip(ishape, shape, strict=False)):
        if d != dim and _known(i, s) and i > s:
            raise RuntimeError(
                f"{op}(): Size does not match at dimension {d} expected index {list(ishape)} "
                f"to be no larger than self {list(shape)} apart from dimension {dim}"
            )
    if src is not None:
        if len(ishape) != max(len(src), 1) and not (len(ishape) == 0 and len(src) == 0):
            raise RuntimeError(
                f"{op}(): Index tensor must have the same number of dimensions as src tensor"
            )
        for d, (i, s) in enumerate(zip(ishape, src, strict=False)):
            if _known(i, s) and i > s:
                raise RuntimeError(
                    f"{op}(): Expected index {list(ishape)} to be no larger than src "
                    f"{list(src)} in dimension {d}"
                )
    return dim


def pad_widths(op: str, shape: Shape, pad: Sequence[Any], mode: str) -> list[tuple[Any, Any]]:
    """torch's ``pad`` list (last dim first: ``[left, right, top, bottom, ...]``) as one
    (before, after) pair per dim of ``shape``."""
    if mode not in PAD_MODES:
        raise NotImplementedError(
            f"{op}(): unsupported padding mode {mode!r}; expected one of "
            + ", ".join(repr(m) for m in PAD_MODES)
        )
    if len(pad) % 2:
        raise RuntimeError(f"{op}(): Padding length must be divisible by 2")
    if len(pad) // 2 > len(shape):
        raise RuntimeError(
            f"{op}(): Padding length should be less than or equal to two times the input "
            f"dimension but got padding length {len(pad)} and input of dimension {len(shape)}"
        )
    widths: list[tuple[Any, Any]] = [(0, 0)] * len(shape)
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = shape[d]
        if mode != "constant" and _known(before, after) and (before < 0 or after < 0):
            raise RuntimeError(f"{op}(): negative padding is only supported in constant mode")
        if mode == "reflect" and _known(before, after, size) and max(before, after) >= size:
            raise RuntimeError(
                f"{op}(): Padding size should be less than the corresponding input dimension, "
                f"but got: padding ({before}, {after}) at dimension {d} of input {list(shape)}"
            )
        if mode == "circular" and _known(before, after, size) and max(before, after) > size:
            raise RuntimeError(
                f"{op}(): Padding value causes wrapping around more than once: padding "
                f"({before}, {after}) at dimension {d} of input {list(shape)}"
            )
        if _known(before, after, size) and size + before + after < 0:
            raise RuntimeError(
                f"{op}(): The input size {size}, plus negative padding {before} and {after} "
                "resulted in a negative output size, which is invalid. Check dimension "
                f"{d} of your input."
            )
        widths[d] = (before, after)
    return widths


def flip_dims(shape: Shape, dims: Sequence[int]) -> tuple[int, ...]:
    out = tuple(wrap_dim("flip", d, len(shape)) for d in dims)
    for d in out:
        if out.count(d) > 1:
            raise RuntimeError(f"flip(): dim {d} appears multiple times in the list of dims")
    return out if shape else ()


def roll_args(
    shape: Shape, shifts: Sequence[Any], dims: Sequence[int]
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """(shifts, dims wrapped); empty ``dims`` (one shift) rolls the flattened tensor."""
    if not shifts:
        raise RuntimeError("roll(): `shifts` required")
    if not dims and len(shifts) == 1:
        return tuple(shifts), ()
    if len(shifts) != len(dims):
        raise RuntimeError(
            f"roll(): shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
        )
    return tuple(shifts), tuple(wrap_dim("roll", d, len(shape)) for d in dims)


def tri_check(op: str, shape: Shape) -> None:
    if len(shape) < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")


def repeat_shape(shape: Shape, repeats: Sequence[Any]) -> Shape:
    if len(repeats) < len(shape):
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions "
            "of tensor"
        )
    for r in repeats:
        if type(r) is int and r < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {r}: {list(repeats)}"
            )
    padded = (1,) * (len(repeats) - len(shape)) + tuple(shape)
    return tuple(s * r for s, r in zip(padded, repeats, strict=True))


def tile_reps(shape: Shape, dims: Sequence[Any]) -> tuple[Any, ...]:
    """``tile``'s repeats as ``repeat`` takes them (ones prepended to reach ``ndim``)."""
    return (1,) * (len(shape) - len(dims)) + tuple(dims)


def split_sizes(op: str, shape: Shape, split_size: Any, dim: int) -> tuple[int, list[Any]]:
    """(dim, sizes) of ``split(self, split_size, dim)``: pieces of ``split_size``, the last
    smaller."""
    _no_0d(op, shape)
    dim = wrap_dim(op, dim, len(shape))
    size = shape[dim]
    if type(split_size) is int and split_size < 0:
        raise RuntimeError(
            f"{op}(): split expects split_size be non-negative, but got split_size={split_size}"
        )
    if not _known(size, split_size):
        raise RuntimeError(f"{op}(): needs static sizes to know how many pieces it makes")
    if split_size == 0:
        if size != 0:
            raise RuntimeError(
                f"{op}(): split_size can only be 0 if dimension size is 0, but got dimension "
                f"size of {size}"
            )
        return dim, [0]
    n = max((size + split_size - 1) // split_size, 1)
    return dim, [min(split_size, size - i * split_size) for i in range(n)]


def split_with_sizes_check(shape: Shape, sizes: Sequence[Any], dim: int) -> int:
    _no_0d("split_with_sizes", shape)
    dim = wrap_dim("split_with_sizes", dim, len(shape))
    total: Any = 0
    for s in sizes:
        if type(s) is int and s < 0:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                f"split_sizes={list(sizes)}"
            )
        total = total + s
    if _known(total, shape[dim]) and total != shape[dim]:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {shape[dim]} (input "
            f"tensor's size at dimension {dim}), but got split_sizes={list(sizes)}"
        )
    return dim


def chunk_sizes(shape: Shape, chunks: int, dim: int) -> tuple[int, list[Any]]:
    _no_0d("chunk", shape)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    dim = wrap_dim("chunk", dim, len(shape))
    size = shape[dim]
    if not _known(size):
        raise RuntimeError("chunk(): needs a static size to know how many pieces it makes")
    return split_sizes("chunk", shape, (size + chunks - 1) // chunks, dim)


def tensor_split_bounds(
    shape: Shape, sections: int | None, indices: Sequence[Any] | None, dim: int
) -> tuple[int, list[tuple[Any, Any]]]:
    """(dim, [(start, end), ...]) of ``tensor_split`` by sections or by indices."""
    _no_0d("tensor_split", shape)
    dim = wrap_dim("tensor_split", dim, len(shape))
    size = shape[dim]
    if sections is not None:
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        if sections > _MAX_PIECES:  # each is a tensor: a huge count is a mistake, not a plan
            raise RuntimeError(
                f"tensor_split(): {sections} sections would make {sections} tensors; at most "
                f"{_MAX_PIECES} are allowed"
            )
        if not _known(size):
            raise RuntimeError("tensor_split(): needs a static size to split into sections")
        small, extra = divmod(size, sections)
        bounds = []
        start = 0
        for i in range(sections):
            n = small + (1 if i < extra else 0)
            bounds.append((start, start + n))
            start += n
        return dim, bounds
    assert indices is not None
    cuts = [0, *indices, size]
    out = []
    for a, b in itertools.pairwise(cuts):
        if _known(size, a, b):
            a = min(max(a + size if a < 0 else a, 0), size)
            b = min(max(b + size if b < 0 else b, a), size)
        out.append((a, b))
    return dim, out


def expand_shape(shape: Shape, size: Sequence[Any]) -> Shape:
    """``expand(self, size)`` as torch: -1 keeps a dim, new dims go in front."""
    if len(size) < len(shape):
        raise RuntimeError(
            f"expand({list(shape)}, size={list(size)}): the number of sizes provided "
            f"({len(size)}) must be greater or equal to the number of dimensions in the tensor "
            f"({len(shape)})"
        )
    lead = len(size) - len(shape)
    out: list[Any] = []
    for i, s in enumerate(size):
        if i < lead:
            if type(s) is int and s < 0:
                raise RuntimeError(
                    f"The expanded size of the tensor ({s}) isn't allowed in a leading, "
                    "non-existing dimension 0"
                )
            out.append(s)
            continue
        have = shape[i - lead]
        if type(s) is int and s == -1:
            out.append(have)
        elif _known(have, s) and have != s and have != 1:
            raise RuntimeError(
                f"The expanded size of the tensor ({s}) must match the existing size ({have}) "
                f"at non-singleton dimension {i}.  Target sizes: {list(size)}.  Tensor sizes: "
                f"{list(shape)}"
            )
        else:
            out.append(s)
    return tuple(out)


def movedim_perm(ndim: int, source: Sequence[int], destination: Sequence[int]) -> list[int]:
    """The permutation ``movedim`` applies (``permute``'s ``dims``)."""
    if len(source) != len(destination):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({list(source)} dims) should "
            f"contain the same number of dims as destination ({list(destination)} dims)"
        )
    src = [wrap_dim("movedim", d, ndim) for d in source]
    dst = [wrap_dim("movedim", d, ndim) for d in destination]
    for name, dims, given in (("source", src, source), ("destination", dst, destination)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list(given)})")
    if not ndim:
        return []
    order = [d for d in range(ndim) if d not in src]
    perm: list[int] = [-1] * ndim
    for s, d in zip(src, dst, strict=True):
        perm[d] = s
    rest = iter(order)
    return [p if p != -1 else next(rest) for p in perm]


#: torch's error for a ``view`` the strides do not allow.
VIEW_STRIDES = (
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces). Use .reshape(...) instead."
)


def view_shape(shape: Shape, size: Sequence[Any]) -> Shape:
    """The shape ``view(self, size)`` gives (one -1 inferred); torch's error otherwise."""
    try:
        return reshape_shape(shape, size)
    except ValueError:
        n: Any = 1
        for s in shape:
            n = n * s
        raise RuntimeError(f"shape '{list(size)}' is invalid for input of size {n}") from None


def max_dim_shape(op: str, shape: Shape, dim: int, keepdim: bool) -> tuple[int, Shape]:
    """(dim, output shape) of ``max.dim``/``min.dim``; the reduced dim must not be empty."""
    dim = wrap_dim(op, dim, len(shape))
    if not shape:
        return 0, ()
    if type(shape[dim]) is int and shape[dim] == 0:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")
    if keepdim:
        return dim, (*shape[:dim], 1, *shape[dim + 1 :])
    return dim, (*shape[:dim], *shape[dim + 1 :])


def full_reduction_check(op: str, shape: Shape) -> None:
    n: Any = 1
    for s in shape:
        n = n * s
    if type(n) is int and n == 0:
        raise RuntimeError(
            f"{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify "
            "the reduction dim with the 'dim' argument."
        )
