"""What the control-flow operators share: unwrapping leaves, predicates, lengths along a
dimension, rows of an array, stacking outputs, and comparing two outputs' structure and
metadata (for the errors that name the function at fault)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._grad_mode import STATE as GRAD
from .._tensor.tensor import Tensor
from ..backends import TABLE
from ..fake import DataDependentError
from ..ops import ops
from ._errors import ControlFlowError
from ._pytree import Spec, describe, tree_flatten, tree_unflatten

__all__ = [
    "check_pred",
    "check_same",
    "length",
    "native",
    "row",
    "stack",
    "stack_outputs",
    "truth",
]


def native(x: Any) -> Any:
    return x._data if type(x) is Tensor else x


def _shape(x: Any) -> tuple[Any, ...] | None:
    shape = getattr(native(x), "shape", None)
    return None if shape is None else tuple(shape)


def check_pred(op: str, pred: Any, fn: str | None = None) -> None:
    """A predicate must be a Python bool/int/float or a one-element tensor."""
    if isinstance(pred, (bool, int, float)):
        return
    shape = _shape(pred)
    if shape is None:
        raise _bad_pred(op, pred, fn)
    try:
        if math.prod(shape) == 1:
            return
    except DataDependentError:
        return  # a symbolic size: it may be one at run time
    raise _bad_pred(op, pred, fn)


def _bad_pred(op: str, pred: Any, fn: str | None) -> ControlFlowError:
    shape = _shape(pred)
    got = f"a tensor of shape {shape}" if shape is not None else f"{type(pred).__name__}"
    where = f"{fn} returned" if fn else "got"
    return ControlFlowError(
        f"{op}: expected the predicate to be a bool or a one-element tensor, but {where} "
        f"{got}. Reduce it first (x.sum() > 0, (x > 0).all()...).",
        op=op,
        fn=fn,
    )


def truth(op: str, pred: Any, fn: str | None = None) -> bool:
    """The predicate's value (reads the one element of a tensor predicate)."""
    if type(pred) is bool:
        return pred
    check_pred(op, pred, fn)
    data = native(pred)
    if type(data) is np.ndarray or isinstance(data, (bool, int, float)):
        return bool(data)
    backend = TABLE.for_type(type(data))
    if backend is None:
        return bool(data)
    return bool(backend.to_host(data))  # a device array's value is read on the host


def length(op: str, leaves: list[Any], dim: int, what: str) -> int:
    """The common size of ``leaves`` along ``dim``; they must all have it."""
    sizes = []
    for leaf in leaves:
        shape = _shape(leaf)
        if shape is None or not -len(shape) <= dim < len(shape):
            raise ControlFlowError(
                f"{op}: every leaf of {what} must be a tensor with a dimension {dim}, got "
                f"{type(leaf).__name__}" + (f" of shape {shape}" if shape is not None else ""),
                op=op,
            )
        sizes.append(shape[dim])
    if not sizes:
        raise ControlFlowError(f"{op}: {what} has no tensors to iterate over", op=op)
    if any(s is not sizes[0] and s != sizes[0] for s in sizes[1:]):
        raise ControlFlowError(
            f"{op}: every leaf of {what} must have the same size along dimension {dim}, got "
            f"{', '.join(str(s) for s in sizes)}",
            op=op,
        )
    return sizes[0]  # type: ignore[no-any-return]


def row(x: Any, dim: int, i: int, differentiable: bool) -> Any:
    """Element ``i`` of ``x`` along ``dim`` (``dim`` already non-negative). With
    ``differentiable``, a Tensor's row comes from ops that record gradients."""
    if type(x) is Tensor:
        if differentiable:
            return ops.oplib.squeeze(ops.oplib._narrow(x, dim, i, 1), [dim])
        return Tensor._wrap(x._data[(slice(None),) * dim + (i, ...)])
    return x[(slice(None),) * dim + (i, ...)]


def stack_outputs(op: str, outs: list[Any], dim: int, fn: str) -> Any:
    """One output per step stacked along ``dim``, leaf by leaf (``oplib::stack``, which
    records gradients for Tensors)."""
    flats = [tree_flatten(o) for o in outs]
    spec = flats[0][1]
    for i, (_, s) in enumerate(flats):
        if s != spec:
            raise ControlFlowError(
                f"{op}: {fn} must return the same structure at every step; step 0 returned "
                f"{describe(spec)}, step {i} returned {describe(s)}",
                op=op,
                fn=fn,
            )
    stacked = [stack([f[0][j] for f in flats], dim) for j in range(len(flats[0][0]))]
    return tree_unflatten(stacked, spec)


def stack(values: list[Any], dim: int) -> Any:
    """``values`` stacked along ``dim``: through ``oplib::stack`` when a Tensor records
    gradients, else with the array namespace's ``stack`` of the arrays' backend (dask's
    included, which has no ``oplib::stack`` kernel)."""
    classes = {type(v) for v in values}
    wrapped = Tensor in classes
    if wrapped:
        if GRAD.enabled and any(type(v) is Tensor and v._rg for v in values):
            return ops.oplib.stack(values, dim)
        values = [native(v) for v in values]
        classes = {type(v) for v in values}
    found = {TABLE.for_type(c) for c in classes}
    others = [b for b in found if b is None or b.name != "cpu"]
    backend = others[0] if len(others) == 1 else TABLE.find("cpu") if not others else None
    if backend is not None and backend.spec.namespace is not None:
        # numpy arrays mix with another backend's as they do in its ops (0-d scalars, an
        # initial carry): that backend's stack takes them
        out = backend.namespace().stack(values, axis=dim)
        return Tensor._wrap(out) if wrapped else out
    return ops.oplib.stack(values, dim)


def _meta(x: Any) -> str:
    shape = _shape(x)
    if shape is None:
        return type(x).__name__
    return f"shape {shape} {native(x).dtype}"


def check_same(op: str, a: Any, b: Any, names: tuple[str, str], fn: str) -> None:
    """``a`` and ``b`` (what ``names`` returned) must have the same structure, and their
    tensors the same shapes and dtypes; else a ``ControlFlowError`` blaming ``fn``."""
    fa, sa = tree_flatten(a)
    fb, sb = tree_flatten(b)
    if sa != sb:
        raise ControlFlowError(
            f"{op}: {names[0]} and {names[1]} must have the same structure; {names[0]} is "
            f"{describe(sa)}, {names[1]} is {describe(sb)}",
            op=op,
            fn=fn,
        )
    for i, (x, y) in enumerate(zip(fa, fb, strict=True)):
        if _same(x, y):
            continue
        where = f"output {i}" if not _single(sa) else "the output"
        raise ControlFlowError(
            f"{op}: {names[0]} and {names[1]} must give tensors of the same shape and dtype; "
            f"{where}: {names[0]} is {_meta(x)}, {names[1]} is {_meta(y)}",
            op=op,
            fn=fn,
        )


def _single(spec: Spec) -> bool:
    return spec is None


def _same(x: Any, y: Any) -> bool:
    sx, sy = _shape(x), _shape(y)
    if sx is None or sy is None:
        return sx is None and sy is None
    if native(x).dtype != native(y).dtype or len(sx) != len(sy):
        return False
    try:
        return all(p is q or bool(p == q) for p, q in zip(sx, sy, strict=True))
    except DataDependentError:
        return False
