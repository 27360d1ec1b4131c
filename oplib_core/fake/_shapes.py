"""Shape and dtype rules of the core op set, as pure functions over shapes (tuples of ints
and ``SymInt``s) and numpy dtypes. Errors have the types numpy raises for the same inputs
(``ValueError`` for shapes that do not fit, ``IndexError`` for dims out of range), so a
fake kernel fails where the real kernel would.

Symbolic sizes follow torch's "size-oblivious" rule for size-1 checks: a symbolic size is
assumed not to be 1 when deciding broadcasting or ``squeeze`` (it is a size that came out
of data, and size-1 special cases would make the output shape depend on it).
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._dtypes import (
    EXTENSION_FLOATS,
    get_default_dtype,
    is_floating,
    promote_types,
    scalar_dtype,
)
from ._errors import DataDependentError
from ._symbolic import SymInt, undecidable

FLOAT32 = np.dtype("float32")
COMPLEX64 = np.dtype("complex64")

__all__ = [
    "arange_dtype",
    "arange_length",
    "broadcast2",
    "broadcast_shapes",
    "broadcast_to_shape",
    "cat_shape",
    "matmul_shape",
    "reduce_shape",
    "reshape_shape",
    "scalar_dtype",
    "squeeze_shape",
    "stack_shape",
    "ufunc_dtype",
    "wrap_dim",
]

_INT64 = np.dtype("int64")


def _fmt(shape: Sequence[Any]) -> str:
    return "(" + ",".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def same_size(a: Any, b: Any, context: str | Callable[[], str]) -> bool:
    """``a == b`` for sizes; raises ``DataDependentError`` naming ``context`` (a string, or a
    function making it) when symbolic sizes make it undecidable."""
    if type(a) is int and type(b) is int:
        return a == b
    try:
        return bool(a == b)
    except DataDependentError:
        text = context if isinstance(context, str) else context()
        raise undecidable(f"{a} == {b}", a, b, context=text) from None


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index in ``range(ndim)``; like torch, a 0-d array accepts 0 and -1."""
    n = ndim if ndim > 0 else 1
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def _axis(dim: int, ndim: int) -> int:
    """numpy's ``normalize_axis_index`` (``AxisError`` is both ValueError and IndexError)."""
    if not -ndim <= dim < ndim:
        raise np.exceptions.AxisError(dim, ndim)
    return dim % ndim


def broadcast_shapes(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """numpy broadcasting of ``shapes``."""
    if len(shapes) == 2:
        out2 = broadcast2(*shapes)
        if out2 is not None:
            return out2
    ndim = max(map(len, shapes))
    out: list[Any] = []
    for i in range(-ndim, 0):
        size: Any = 1
        for shape in shapes:
            if -i > len(shape):
                continue
            s = shape[i]
            if type(s) is int:
                if s == 1:
                    continue
                if type(size) is int:
                    if size == 1:
                        size = s
                    elif size != s:
                        raise _not_broadcastable(shapes)
                    continue
            if type(size) is int and size == 1:
                size = s
            elif not same_size(
                size, s, lambda: "broadcasting shapes " + " ".join(_fmt(x) for x in shapes)
            ):
                raise _not_broadcastable(shapes)
        out.append(size)
    return tuple(out)


def broadcast2(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """:func:`broadcast_shapes` of two shapes in the common case, sizes that are ints (or the
    same object); ``None`` when a symbolic size needs the general path."""
    if len(a) < len(b):
        a, b = b, a
    off = len(a) - len(b)
    out: list[Any] | None = None
    for j, s in enumerate(b):
        t = a[off + j]
        if t is s:
            continue
        if type(s) is not int or type(t) is not int:
            return None
        if s == t or s == 1:
            continue
        if t == 1:
            if out is None:
                out = list(a)
            out[off + j] = s
            continue
        raise _not_broadcastable((a, b) if off or len(a) == len(b) else (b, a))
    return a if out is None else tuple(out)


def _not_broadcastable(shapes: Sequence[tuple[Any, ...]]) -> ValueError:
    return ValueError(
        "operands could not be broadcast together with shapes " + " ".join(_fmt(x) for x in shapes)
    )


def broadcast_to_shape(shape: tuple[Any, ...], size: Sequence[Any]) -> tuple[Any, ...]:
    """``broadcast_to(x, size)``; -1 keeps an existing dim (torch's ``expand``)."""
    ndim = len(shape)
    lead = len(size) - ndim
    if lead < 0:
        raise ValueError(
            f"input operand has more dimensions than allowed by the axis remapping: cannot "
            f"broadcast shape {_fmt(shape)} to {_fmt(size)}"
        )
    out: list[Any] = []
    for i, s in enumerate(size):
        if type(s) is int and s == -1:
            if i < lead:
                raise ValueError(
                    f"broadcast_to(): -1 keeps the size of an existing dim, but size "
                    f"{list(size)} puts it at new leading dim {i} of a {ndim}-d array"
                )
            s = shape[i - lead]
        elif type(s) is int and s < 0:
            raise ValueError("all elements of broadcast shape must be non-negative")
        if i >= lead:
            have = shape[i - lead]
            if not (type(have) is int and have == 1) and not same_size(
                have, s, lambda: f"broadcasting {_fmt(shape)} to {_fmt(size)}"
            ):
                raise ValueError(
                    f"operands could not be broadcast together with remapped shapes "
                    f"[original->remapped]: {_fmt(shape)} and requested shape {_fmt(size)}"
                )
        out.append(s)
    return tuple(out)


def reduce_shape(
    shape: tuple[Any, ...], dim: Sequence[int] | None, keepdim: bool
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """(output shape, reduced axes) of a reduction over ``dim`` (None or []: every dim)."""
    ndim = len(shape)
    if dim and len(dim) == 1:  # the common case: one dim
        d = dim[0]
        if ndim and type(d) is int and -ndim <= d < ndim:
            if d < 0:
                d += ndim
            if keepdim:
                return (*shape[:d], 1, *shape[d + 1 :]), (d,)
            return shape[:d] + shape[d + 1 :], (d,)
    if not dim:
        axes = tuple(range(ndim))
    else:
        axes = tuple(wrap_dim(d, ndim) for d in dim)
        if ndim == 0:
            return (), ()
        if len(set(axes)) != len(axes):
            raise ValueError("duplicate value in 'axis'")
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape)), axes
    return tuple(s for i, s in enumerate(shape) if i not in axes), axes


def matmul_shape(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    """numpy ``matmul``: batch dims broadcast; a 1-d operand gets a dim added and removed."""
    if len(a) == 2 and len(b) == 2:  # the common case: two matrices with int sizes
        k = a[1]
        k2 = b[0]
        if k is k2 or (type(k) is int and type(k2) is int and k == k2):
            return (a[0], b[1])
    for i, s in enumerate((a, b)):
        if not s:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc "
                "core with signature (n?,k),(k,m?)->(n?,m?) requires 1)"
            )
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    k, k2 = a2[-1], b2[-2]
    if not same_size(k, k2, lambda: f"matmul of shapes {_fmt(a)} and {_fmt(b)}"):
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature (n?,k),(k,m?)->(n?,m?) (size {k2} is different from {k})"
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2]) if len(a2) > 2 or len(b2) > 2 else ()
    out: list[Any] = list(batch)
    if len(a) > 1:
        out.append(a[-2])
    if len(b) > 1:
        out.append(b[-1])
    return tuple(out)


def reshape_shape(shape: tuple[Any, ...], new: Sequence[Any]) -> tuple[Any, ...]:
    """``reshape`` to ``new`` (one entry may be -1)."""
    n: Any = 1
    for s in shape:
        n = n * s
    unknown = [i for i, s in enumerate(new) if type(s) is int and s == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    for s in new:
        if type(s) is int and s < -1:
            raise ValueError(f"cannot reshape array of size {n} into shape {_fmt(new)}")
    known: Any = 1
    for s in new:
        if not (type(s) is int and s == -1):
            known = known * s

    def context() -> str:
        return f"reshaping {_fmt(shape)} to {_fmt(new)}"

    if unknown:
        if same_size(known, 0, context) or not same_size(n % known, 0, context):
            raise ValueError(f"cannot reshape array of size {n} into shape {_fmt(new)}")
        out = list(new)
        out[unknown[0]] = n // known
        return tuple(out)
    if not same_size(known, n, context):
        raise ValueError(f"cannot reshape array of size {n} into shape {_fmt(new)}")
    return tuple(new)


def squeeze_shape(shape: tuple[Any, ...], dim: Sequence[int] | None) -> tuple[Any, ...]:
    """Drop dims of size 1 (all, or those in ``dim`` that have size 1)."""
    if dim is None:
        return tuple(s for s in shape if not (type(s) is int and s == 1))
    axes = {wrap_dim(d, len(shape)) for d in dim}
    if not shape:
        return ()
    return tuple(s for i, s in enumerate(shape) if not (i in axes and type(s) is int and s == 1))


def unsqueeze_shape(shape: tuple[Any, ...], dim: int) -> tuple[Any, ...]:
    d = _axis(dim, len(shape) + 1)
    return (*shape[:d], 1, *shape[d:])


def permute_shape(shape: tuple[Any, ...], dims: Sequence[int]) -> tuple[Any, ...]:
    if len(dims) != len(shape):
        raise ValueError("axes don't match array")
    axes = [_axis(d, len(shape)) for d in dims]
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis in transpose")
    return tuple(shape[a] for a in axes)


def transpose_shape(shape: tuple[Any, ...], dim0: int, dim1: int) -> tuple[Any, ...]:
    d0, d1 = wrap_dim(dim0, len(shape)), wrap_dim(dim1, len(shape))
    if not shape:
        return ()
    out = list(shape)
    out[d0], out[d1] = out[d1], out[d0]
    return tuple(out)


def cat_shape(shapes: Sequence[tuple[Any, ...]], dim: int) -> tuple[Any, ...]:
    """``concatenate`` along ``dim``."""
    if not shapes:
        raise ValueError("need at least one array to concatenate")
    ndim = len(shapes[0])
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = _axis(dim, ndim)
    for i, s in enumerate(shapes):
        if len(s) != ndim:
            raise ValueError(
                f"all the input arrays must have same number of dimensions, but the array at "
                f"index 0 has {ndim} dimension(s) and the array at index {i} has {len(s)} "
                "dimension(s)"
            )
    total: Any = 0
    for i, s in enumerate(shapes):
        for d in range(ndim):
            if d != axis and not same_size(s[d], shapes[0][d], "concatenating"):
                raise ValueError(
                    f"all the input array dimensions except for the concatenation axis must "
                    f"match exactly, but along dimension {d}, the array at index 0 has size "
                    f"{shapes[0][d]} and the array at index {i} has size {s[d]}"
                )
        total = total + s[axis]
    out = list(shapes[0])
    out[axis] = total
    return tuple(out)


def stack_shape(shapes: Sequence[tuple[Any, ...]], dim: int) -> tuple[Any, ...]:
    """``stack`` along a new dim ``dim``."""
    if not shapes:
        raise ValueError("need at least one array to stack")
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or not all(
            same_size(x, y, "stacking") for x, y in zip(s, first, strict=True)
        ):
            raise ValueError("all input arrays must have the same shape")
    axis = _axis(dim, len(first) + 1)
    return (*first[:axis], len(shapes), *first[axis:])


# -- dtypes -----------------------------------------------------------------------------

_ufunc_cache: dict[tuple[Any, ...], tuple[np.dtype, ...]] = {}
_cache_lock = threading.Lock()


def weak(value: Any) -> Any:
    """What a Python scalar stands for in numpy's promotion (NEP 50): ``int``/``float``/
    ``complex`` are weak; ``bool`` is numpy's bool."""
    if isinstance(value, bool):
        return np.dtype(bool)
    if isinstance(value, numbers.Integral):
        return int
    if isinstance(value, numbers.Real):
        return float
    if isinstance(value, numbers.Complex):
        return complex
    raise TypeError(f"expected a Scalar (bool, int, float or complex), got {type(value).__name__}")


def ufunc_loop(ufunc: np.ufunc, *inputs: Any) -> tuple[np.dtype, ...]:
    """The dtypes of the loop numpy's ``ufunc`` picks for ``inputs`` (dtypes, or ``int``/
    ``float``/``complex`` for weak Python scalars), outputs last; raises numpy's error when
    no loop exists."""
    key = (ufunc, *inputs)
    try:
        return _ufunc_cache[key]
    except KeyError:
        pass
    loop = _extension_loop(ufunc, inputs) or tuple(ufunc.resolve_dtypes((*inputs, None)))
    with _cache_lock:
        _ufunc_cache[key] = loop
    return loop


def _extension_loop(ufunc: np.ufunc, inputs: tuple[Any, ...]) -> tuple[np.dtype, ...] | None:
    """The loop the core kernels use for a binary op with a bfloat16/float8 operand: torch's
    ``promote_types`` for two arrays, the array's dtype with a weak real scalar (complex
    gives complex64), bool for comparisons; None for everything else (numpy's loop)."""
    if len(inputs) != 2 or not any(d in EXTENSION_FLOATS for d in inputs):
        return None
    a, b = inputs
    if isinstance(a, np.dtype) and isinstance(b, np.dtype):
        d = promote_types(a, b)
    else:
        d = COMPLEX64 if complex in inputs else (a if isinstance(a, np.dtype) else b)
    out = ufunc.resolve_dtypes((FLOAT32, FLOAT32, None))[-1]
    return (d, d, out if out.kind == "b" else d)


def ufunc_dtype(ufunc: np.ufunc, *inputs: Any) -> np.dtype:
    """The output dtype of :func:`ufunc_loop`."""
    return ufunc_loop(ufunc, *inputs)[-1]


def check_int_scalar(value: Any, dtype: np.dtype) -> None:
    """numpy (NEP 50) refuses a Python int that does not fit the integer dtype it is cast
    to: ``uint8_array + -3`` raises ``OverflowError``."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise OverflowError(f"Python integer {value} out of bounds for {dtype}")


def arange_dtype(start: Any, end: Any, step: Any, dtype: np.dtype | None) -> np.dtype:
    if dtype is not None:
        return dtype
    if any(d.kind == "c" or is_floating(d) for d in map(scalar_dtype, (start, end, step))):
        return get_default_dtype()
    return _INT64


def arange_length(start: Any, end: Any, step: Any) -> int:
    """The number of elements of ``arange(start, end, step)``, as numpy computes it."""
    if step == 0:
        raise ZeroDivisionError("arange(): step must be nonzero")
    if all(isinstance(v, numbers.Integral) for v in (start, end, step)):
        return max(0, -((int(start) - int(end)) // int(step)))
    length: int = math.ceil((end - start) / step)
    return max(0, length)


def is_symbolic_shape(shape: tuple[Any, ...]) -> bool:
    return any(isinstance(s, SymInt) for s in shape)
