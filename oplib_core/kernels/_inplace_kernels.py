"""Kernels of the in-place core ops (``add_``, ``mul_``, ``zero_``, ``fill_``, ``clamp_``,
``index_put_`` …) and their functional companions (``clamp``, ``index_put``), written once
against an array namespace like :func:`oplib_core.kernels.array_kernels`, which merges them.

An in-place kernel computes the out-of-place result with the functional kernel, checks it
against ``self`` as torch does (the result's dtype must cast to ``self``'s without leaving
its category, its shape must be ``self``'s: no broadcasting of the written tensor) and
writes it into ``self``'s memory. Arrays that cannot be written (immutable array types,
read-only views) raise an error saying so: an in-place op never silently returns a copy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from oplib_core._dtypes import is_floating, scalar_dtype
from oplib_core._opset import OUT_OPS

__all__ = [
    "binary_inplace",
    "check_fill_tensor",
    "check_fill_value",
    "check_inplace_result",
    "clamp_dtype",
    "index_key",
    "inplace_kernels",
    "out_kernels",
]

Kernel = Callable[..., Any]
#: ``store(op, self, result)``: an in-place kernel's last step (write, or check for fakes).
Store = Callable[[str, Any, Any], Any]


def _category(dtype: np.dtype) -> int:
    """torch's dtype categories: bool < integer < floating < complex."""
    if dtype.kind == "b":
        return 0
    if dtype.kind in "iu":
        return 1
    if dtype.kind == "c":
        return 3
    return 2 if is_floating(dtype) else 1


def check_inplace_result(op: str, self: Any, dtype: np.dtype, shape: Sequence[Any]) -> None:
    """Raise torch's errors when a result of ``dtype``/``shape`` cannot be written into
    ``self`` (an in-place op's output or an ``out=`` tensor): a dtype of a higher category
    (``float`` into ``int64``) or a shape other than ``self``'s."""
    if _category(np.dtype(dtype)) > _category(np.dtype(self.dtype)):
        raise RuntimeError(
            f"{op}: result type {np.dtype(dtype).name} can't be cast to the desired output "
            f"type {np.dtype(self.dtype).name}"
        )
    if tuple(shape) != tuple(self.shape):
        raise RuntimeError(
            f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
            f"{list(shape)}"
        )


def _write(op: str, self: Any, key: Any, value: Any) -> None:
    """``self[key] = value``, or an error naming the op when ``self`` cannot be written."""
    try:
        self[key] = value
    except TypeError as e:
        if "item assignment" not in str(e) and "immutable" not in str(e):
            raise
        raise TypeError(  # immutable array types (jax) refuse item assignment
            f"{op}: in-place ops need writable arrays, and {type(self).__module__}."
            f"{type(self).__name__} arrays are immutable; use the out-of-place op instead"
        ) from e
    except ValueError as e:
        if getattr(getattr(self, "flags", None), "writeable", True):
            raise
        raise ValueError(
            f"{op}: the tensor written in place is a read-only view (e.g. of broadcast_to, "
            "where several elements share one memory location); clone() it first"
        ) from e


def check_fill_value(op: str, dtype: np.dtype, value: Any) -> Any:
    """A scalar written into every element of a tensor of ``dtype``, as torch converts it:
    a complex into a real dtype or an int beyond a signed dtype's range is refused, a
    negative int into an unsigned dtype wraps around, a float into an int truncates."""
    dtype = np.dtype(dtype)
    kind = scalar_dtype(value).kind
    if kind == "c" and dtype.kind != "c":
        raise RuntimeError(f"{op}: value cannot be converted to type {dtype.name} without overflow")
    if dtype.kind in "iu" and kind in "iu":
        info = np.iinfo(dtype)
        if dtype.kind == "u" and info.min - info.max - 1 <= int(value) < 0:
            return int(value) % (int(info.max) + 1)
        if not info.min <= int(value) <= info.max:
            raise RuntimeError(
                f"{op}: value cannot be converted to type {dtype.name} without overflow"
            )
    return value


def check_fill_tensor(value: Any) -> None:
    """torch's check of ``fill_``'s Tensor value: 0-d."""
    if value.ndim:
        raise RuntimeError(
            "oplib::fill_: fill_ only supports 0-dimension value tensor but got tensor "
            f"with {value.ndim} dimensions."
        )


def clamp_dtype(dtype: np.dtype, lo: Any, hi: Any) -> np.dtype:
    """The dtype of ``clamp``'s result: ``self``'s promoted with the bounds as Python scalars
    are (weakly: an int tensor clamped by a float gives the default float dtype, as torch)."""
    out = np.dtype(dtype)
    for v in (lo, hi):
        if v is not None and _category(scalar_dtype(v)) > _category(out):
            out = scalar_dtype(v)
    return out


def _check_clamp_bounds(lo: Any, hi: Any) -> None:
    if lo is None and hi is None:
        raise RuntimeError("oplib::clamp: At least one of 'min' or 'max' must not be None")


def index_key(op: str, indices: Sequence[Any]) -> tuple[Any, ...]:
    """``index_put``'s ``Tensor?[]`` as an index for ``a[key]``: None means a whole dim."""
    key: list[Any] = []
    for i, ix in enumerate(indices):
        if ix is None:
            key.append(slice(None))
            continue
        if ix.dtype.kind not in "biu":
            raise IndexError(
                f"{op}: tensors used as indices must be long, int, byte or bool tensors; "
                f"indices[{i}] is {ix.dtype.name}"
            )
        key.append(ix)
    return tuple(key)


def _full_index(xp: Any, shape: tuple[int, ...], key: tuple[Any, ...]) -> list[Any]:
    """``key`` (index arrays and whole-dim slices, one per dim) as one index array per dim,
    shaped so that they broadcast to the result of ``a[key]`` (numpy's placement: adjacent
    advanced indices stay in place, else they go first)."""
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
            out.append(xp.reshape(xp.where(xp.less(k, 0), xp.add(k, shape[i]), k), tuple(shape_i)))
    return out


def _add_at(xp: Any, self: Any, key: tuple[Any, ...], values: Any) -> None:
    """``self[key] += values`` with repeated positions adding up, for array libraries
    without ``add.at``: sort the targets' linear positions, sum each run of equal ones
    (differences of a cumulative sum) and add the sums at the distinct positions."""
    shape = tuple(self.shape)
    parts: list[Any] = []
    for k in key:  # bool masks as the index arrays of their true elements
        if type(k) is not slice and k.dtype.kind == "b":
            parts.extend(xp.nonzero(k))
        else:
            parts.append(k)
    key = tuple(parts) + (slice(None),) * (len(shape) - len(parts))
    index = xp.broadcast_arrays(*_full_index(xp, shape, key))
    linear = xp.zeros(index[0].shape, dtype=index[0].dtype) if index else None
    for d, ix in enumerate(index):
        linear = xp.add(xp.multiply(linear, shape[d]), ix)
    linear = xp.reshape(linear, (-1,))
    vals = xp.reshape(xp.broadcast_to(values, index[0].shape), (-1,))
    order = xp.argsort(linear)
    lin, vals = linear[order], vals[order]
    if lin.shape[0] == 0:
        return
    last = xp.concatenate([xp.not_equal(lin[1:], lin[:-1]), xp.ones((1,), dtype=bool)])
    totals = xp.cumsum(vals)[last]
    sums = xp.subtract(totals, xp.concatenate([xp.zeros((1,), dtype=totals.dtype), totals[:-1]]))
    targets = lin[last]
    where = []
    for n in reversed(shape):
        where.append(xp.remainder(targets, n))
        targets = xp.floor_divide(targets, n)
    where_t = tuple(reversed(where))
    self[where_t] = xp.add(self[where_t], sums)


def _binary_pair(name: str, functional: dict[str, Kernel], store: Store) -> list[Kernel]:
    tensor_fn, scalar_fn = functional[name], functional[f"{name}.Scalar"]
    op = f"oplib::{name}_"

    def with_tensor(self: Any, other: Any) -> Any:
        return store(op, self, tensor_fn(self, other))

    def with_scalar(self: Any, other: Any) -> Any:
        return store(op, self, scalar_fn(self, other))

    with_tensor.__doc__ = f"``self = {name}(self, other)`` in place; returns ``self``."
    with_scalar.__doc__ = with_tensor.__doc__
    return [with_tensor, with_scalar]


def binary_inplace(functional: dict[str, Kernel], store: Store) -> dict[str, Kernel]:
    """``add_``, ``sub_``, ``mul_``, ``div_`` (``.Tensor`` and ``.Scalar``): the functional
    kernel's result handed to ``store(op, self, result)``, which writes it (real kernels) or
    only checks it (fakes) and returns ``self``."""
    kernels: dict[str, Kernel] = {}
    for name in ("add", "sub", "mul", "div"):
        with_tensor, with_scalar = _binary_pair(name, functional, store)
        for overload, fn in ((f"{name}_.Tensor", with_tensor), (f"{name}_.Scalar", with_scalar)):
            fn.__qualname__ = fn.__name__ = overload
            kernels[overload] = fn
    return kernels


def inplace_kernels(xp: Any, functional: dict[str, Kernel]) -> dict[str, Kernel]:
    """The in-place kernels for ``xp`` (plus ``clamp`` and ``index_put``), built on the
    functional kernels ``functional`` (``array_kernels``' dict) so that dtype handling
    (bfloat16's opmath, promotion) is the functional op's."""
    kernels: dict[str, Kernel] = {}

    def kernel(name: str) -> Callable[[Kernel], Kernel]:
        def register(fn: Kernel) -> Kernel:
            fn.__qualname__ = fn.__name__ = name
            kernels[name] = fn
            return fn

        return register

    def store(op: str, self: Any, result: Any) -> Any:
        check_inplace_result(op, self, result.dtype, result.shape)
        _write(op, self, ..., result)
        return self

    kernels.update(binary_inplace(functional, store))

    @kernel("zero_")
    def zero_(self: Any) -> Any:
        """Zeros into every element of ``self``; returns ``self``."""
        _write("oplib::zero_", self, ..., 0)
        return self

    @kernel("fill_.Scalar")
    def fill_scalar(self: Any, value: Any) -> Any:
        """``value`` (converted to ``self``'s dtype, as torch) into every element."""
        _write("oplib::fill_", self, ..., check_fill_value("oplib::fill_", self.dtype, value))
        return self

    @kernel("fill_.Tensor")
    def fill_tensor(self: Any, value: Any) -> Any:
        """The one element of the 0-d ``value`` into every element of ``self``."""
        check_fill_tensor(value)
        _write("oplib::fill_", self, ..., value)
        return self

    @kernel("clamp")
    def clamp(self: Any, min: Any, max: Any) -> Any:
        """``self`` limited to ``[min, max]`` (either may be None, not both); NaN stays NaN.
        An int tensor clamped by a float bound gives a float result, as torch."""
        _check_clamp_bounds(min, max)
        dtype = clamp_dtype(self.dtype, min, max)
        out = self if self.dtype == dtype else self.astype(dtype)
        if min is not None:
            out = xp.maximum(out, xp.asarray(min, dtype=dtype))
        if max is not None:
            out = xp.minimum(out, xp.asarray(max, dtype=dtype))
        return xp.asarray(out)

    @kernel("clamp_")
    def clamp_(self: Any, min: Any, max: Any) -> Any:
        """``clamp`` in place; an int tensor with a float bound is refused, as torch."""
        _check_clamp_bounds(min, max)
        check_inplace_result("oplib::clamp_", self, clamp_dtype(self.dtype, min, max), self.shape)
        return store("oplib::clamp_", self, clamp(self, min, max))

    @kernel("index_put_")
    def index_put_(self: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
        """``self[indices] = values`` (``+=`` with ``accumulate``, repeated indices adding
        up); None in ``indices`` takes a whole dim; bool indices are masks."""
        op = "oplib::index_put_"
        if values.dtype != self.dtype:
            raise RuntimeError(
                f"{op}: Index put requires the source and destination dtypes match, got "
                f"{self.dtype.name} for the destination and {values.dtype.name} for the source."
            )
        key = index_key(op, indices)
        if accumulate:
            add_at = getattr(getattr(xp, "add", None), "at", None)
            if add_at is None:
                _add_at(xp, self, key, values)
            else:
                add_at(self, key, values)
            return self
        _write(op, self, key, values)
        return self

    @kernel("index_put")
    def index_put(self: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
        """``index_put_`` on a copy of ``self``."""
        return index_put_(functional["clone"](self), indices, values, accumulate)

    kernels.update(out_kernels(functional | kernels, xp))
    return kernels


def functional_name(out_name: str) -> str:
    """The op an ``out=`` overload writes the result of: ``add.out`` → ``add``,
    ``add.Scalar_out`` → ``add.Scalar``."""
    base, _, overload = out_name.partition(".")
    return base if overload == "out" else f"{base}.{overload.removesuffix('_out')}"


def out_kernels(functional: dict[str, Kernel], xp: Any = None) -> dict[str, Kernel]:
    """A kernel per ``out=`` overload (:data:`~oplib_core._opset.OUT_OPS`): the functional
    kernel's result, checked against ``out`` as torch does (dtype category; shape: ``out``
    must already have the result's shape) and written into it. ``xp`` None: fake kernels
    (nothing is written)."""
    kernels: dict[str, Kernel] = {}
    for op in OUT_OPS:
        kernels[op.name] = _out_kernel(op.name, functional[functional_name(op.name)], xp)
    return kernels


def _out_kernel(name: str, fn: Kernel, xp: Any) -> Kernel:
    qualname = f"oplib::{name}"

    def kernel(*args: Any, out: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        check_inplace_result(qualname, out, result.dtype, result.shape)
        if xp is not None:
            _write(qualname, out, ..., result)
        return out

    kernel.__name__ = kernel.__qualname__ = name
    # the schema's parameters, as every kernel has them: the functional op's, then ``out``
    sig = inspect.signature(fn)
    params = [*sig.parameters.values(), inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY)]
    kernel.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return kernel
