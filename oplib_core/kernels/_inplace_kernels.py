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

from oplib_core._array_api import DtypeOf, dtype_attr, dtype_getter, dtype_map, standard_namespace
from oplib_core._dtypes import is_floating, scalar_dtype
from oplib_core._opset import OUT_OPS
from oplib_core.kernels._index_kernels import (
    full_index,
    masks_as_indices,
    scatter_flat,
    wrap_checked,
)

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


def check_inplace_result(
    op: str, self: Any, dtype: np.dtype, shape: Sequence[Any], self_dtype: np.dtype
) -> None:
    """Raise torch's errors when a result of ``dtype``/``shape`` cannot be written into
    ``self`` of ``self_dtype`` (an in-place op's output or an ``out=`` tensor; oplib dtypes):
    a dtype of a higher category (``float`` into ``int64``) or a shape other than
    ``self``'s."""
    if _category(np.dtype(dtype)) > _category(np.dtype(self_dtype)):
        raise RuntimeError(
            f"{op}: result type {np.dtype(dtype).name} can't be cast to the desired output "
            f"type {np.dtype(self_dtype).name}"
        )
    if tuple(shape) != tuple(self.shape):
        raise RuntimeError(
            f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
            f"{list(shape)}"
        )


def _writes(xp: Any) -> str:
    """What ``xp``'s arrays take as writes, tried once when the kernels are bound:
    ``"indexed"`` (also at integer index arrays, ``x[idx] = y``: numpy's), ``"slices"``
    (slices and bool masks only: the standard's ``__setitem__``) or ``"none"`` (immutable
    arrays: jax)."""
    try:
        probe = xp.zeros((2,))
        probe[xp.asarray([1])] = 1
    except TypeError as e:
        return "none" if "item assignment" in str(e) or "immutable" in str(e) else "slices"
    except Exception:  # whatever a namespace raises for it: no writes at index arrays
        return "slices"
    return "indexed"


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


def index_key(op: str, indices: Sequence[Any], dtype_of: DtypeOf = dtype_attr) -> tuple[Any, ...]:
    """``index_put``'s ``Tensor?[]`` as an index for ``a[key]``: None means a whole dim."""
    key: list[Any] = []
    for i, ix in enumerate(indices):
        if ix is None:
            key.append(slice(None))
            continue
        if dtype_of(ix).kind not in "biu":
            raise IndexError(
                f"{op}: tensors used as indices must be long, int, byte or bool tensors; "
                f"indices[{i}] is {dtype_of(ix).name}"
            )
        key.append(ix)
    return tuple(key)


def put_at(
    xp: Any,
    self: Any,
    key: tuple[Any, ...],
    values: Any,
    is_mask: Callable[[Any], bool],
    accumulate: bool,
) -> Any:
    """A copy of ``self`` with ``self[key] = values`` (``+=`` with ``accumulate``, repeated
    positions adding up) for namespaces without writes at index arrays or ``add.at`` (the
    array API standard): by the flat positions of the targets (:func:`scatter_flat`)."""
    shape = tuple(self.shape)
    index = xp.broadcast_arrays(
        *(
            wrap_checked(xp, ix, shape[d], d)
            for d, ix in enumerate(full_index(xp, shape, masks_as_indices(xp, key, is_mask)))
        )
    )
    linear = xp.zeros(index[0].shape, dtype=index[0].dtype)
    for d, ix in enumerate(index):
        linear = xp.add(xp.multiply(linear, shape[d]), ix)
    vals = xp.reshape(xp.broadcast_to(values, index[0].shape), (-1,))
    flat = xp.reshape(self, (-1,))
    out = scatter_flat(xp, flat, xp.reshape(linear, (-1,)), vals, accumulate=accumulate)
    return xp.reshape(out, shape)


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


def ufunc_inplace(library: Any, kernels: dict[str, Kernel]) -> dict[str, Kernel]:
    """``add_``, ``sub_`` and ``mul_`` of two arrays of one dtype and shape written by the
    library's ufunc straight into ``self`` (``np.add(self, other, out=self)``; cupy's ufuncs
    take ``out=`` too), where ``kernels``' versions compute a new array and copy it in: half
    the memory traffic, no temporary (the autograd engine accumulates gradients this way).
    Other calls (another dtype or shape, a scalar, ml_dtypes' formats, whose opmath is the
    functional kernel's, bool) keep ``kernels``' version. Empty for other libraries (dask's
    and jax's look like ufuncs but do not write into ``out=`` arrays)."""
    if getattr(library, "__name__", None) not in ("numpy", "cupy"):
        return {}
    # numpy's ufuncs read overlapping inputs before writing; cupy's kernels do not, so a
    # shifted view of self (x[1:] += x[:-1]) keeps the copying path there
    overlaps = None if library.__name__ == "numpy" else library.may_share_memory
    fast: dict[str, Kernel] = {}
    for name, ufunc_name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply")):
        ufunc = getattr(library, ufunc_name)
        overload = f"{name}_.Tensor"
        fast[overload] = _written_by(ufunc, library.ndarray, kernels[overload], overload, overlaps)
    return fast


def _written_by(
    ufunc: Any,
    array: Any,
    plain: Kernel,
    overload: str,
    overlaps: Callable[[Any, Any], bool] | None,
) -> Kernel:
    def direct(self: Any, other: Any) -> Any:
        if (
            type(self) is array  # (a vendor's wrapper over numpy keeps the copying path)
            and type(other) is array
            and other.dtype == self.dtype
            and self.dtype.kind in "iufc"
            and other.shape == self.shape
            and getattr(self.flags, "writeable", True)  # (cupy's arrays are always writable)
            and (overlaps is None or other is self or not overlaps(self, other))
        ):
            ufunc(self, other, out=self)
            return self
        return plain(self, other)

    direct.__qualname__ = direct.__name__ = overload
    direct.__doc__ = plain.__doc__
    return direct


def inplace_kernels(xp: Any, functional: dict[str, Kernel]) -> dict[str, Kernel]:
    """The in-place kernels for ``xp`` (plus ``clamp`` and ``index_put``), built on the
    functional kernels ``functional`` (``array_kernels``' dict) so that dtype handling
    (bfloat16's opmath, promotion) is the functional op's."""
    kernels: dict[str, Kernel] = {}
    library = xp
    xp = standard_namespace(xp)
    dmap = dtype_map(xp)
    native = dmap.native
    odtype = dtype_getter(dmap)

    def is_mask(k: Any) -> bool:
        return type(k) is not slice and odtype(k) == np.bool_

    add_at = getattr(getattr(xp, "add", None), "at", None)  # numpy's ufunc.at (cupy's too)
    writes = _writes(xp)
    # numpy's dtypes: its writes cast as torch's do; the standard's take one dtype only
    cast_writes = not dmap.identity

    def kernel(name: str) -> Callable[[Kernel], Kernel]:
        def register(fn: Kernel) -> Kernel:
            fn.__qualname__ = fn.__name__ = name
            kernels[name] = fn
            return fn

        return register

    def store(op: str, self: Any, result: Any) -> Any:
        check_inplace_result(op, self, odtype(result), result.shape, odtype(self))
        _write(op, self, ..., result)
        return self

    kernels.update(binary_inplace(functional, store))
    if writes != "none":
        kernels.update(ufunc_inplace(library, kernels))

    @kernel("zero_")
    def zero_(self: Any) -> Any:
        """Zeros into every element of ``self``; returns ``self``."""
        _write("oplib::zero_", self, ..., 0)
        return self

    @kernel("fill_.Scalar")
    def fill_scalar(self: Any, value: Any) -> Any:
        """``value`` (converted to ``self``'s dtype, as torch) into every element."""
        _write("oplib::fill_", self, ..., check_fill_value("oplib::fill_", odtype(self), value))
        return self

    @kernel("fill_.Tensor")
    def fill_tensor(self: Any, value: Any) -> Any:
        """The one element of the 0-d ``value`` into every element of ``self``."""
        check_fill_tensor(value)
        if cast_writes and value.dtype != self.dtype:
            value = xp.astype(value, self.dtype)
        _write("oplib::fill_", self, ..., value)
        return self

    @kernel("clamp")
    def clamp(self: Any, min: Any, max: Any) -> Any:
        """``self`` limited to ``[min, max]`` (either may be None, not both); NaN stays NaN.
        An int tensor clamped by a float bound gives a float result, as torch."""
        _check_clamp_bounds(min, max)
        dtype = native(clamp_dtype(odtype(self), min, max))
        out = self if self.dtype == dtype else xp.astype(self, dtype)
        if min is not None:
            out = xp.maximum(out, xp.asarray(min, dtype=dtype))
        if max is not None:
            out = xp.minimum(out, xp.asarray(max, dtype=dtype))
        return xp.asarray(out)

    @kernel("clamp_")
    def clamp_(self: Any, min: Any, max: Any) -> Any:
        """``clamp`` in place; an int tensor with a float bound is refused, as torch."""
        _check_clamp_bounds(min, max)
        own = odtype(self)
        check_inplace_result("oplib::clamp_", self, clamp_dtype(own, min, max), self.shape, own)
        return store("oplib::clamp_", self, clamp(self, min, max))

    @kernel("index_put_")
    def index_put_(self: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
        """``self[indices] = values`` (``+=`` with ``accumulate``, repeated indices adding
        up); None in ``indices`` takes a whole dim; bool indices are masks."""
        op = "oplib::index_put_"
        key = index_put_key(self, indices, values)
        if accumulate and add_at is not None:
            add_at(self, key, values)
        elif accumulate or writes != "indexed":
            _write(op, self, ..., put_at(xp, self, key, values, is_mask, accumulate))
        else:
            _write(op, self, key, values)
        return self

    @kernel("index_put")
    def index_put(self: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
        """``index_put_`` on a copy of ``self`` (immutable arrays: computed without writes)."""
        if writes == "none":
            key = index_put_key(self, indices, values)
            return put_at(xp, self, key, values, is_mask, accumulate)
        return index_put_(functional["clone"](self), indices, values, accumulate)

    def index_put_key(self: Any, indices: Sequence[Any], values: Any) -> tuple[Any, ...]:
        op = "oplib::index_put_"
        if values.dtype != self.dtype:
            raise RuntimeError(
                f"{op}: Index put requires the source and destination dtypes match, got "
                f"{odtype(self).name} for the destination and {odtype(values).name} for the "
                "source."
            )
        return index_key(op, indices, odtype)

    kernels.update(out_kernels(functional | kernels, xp, odtype))
    return kernels


def functional_name(out_name: str) -> str:
    """The op an ``out=`` overload writes the result of: ``add.out`` → ``add``,
    ``add.Scalar_out`` → ``add.Scalar``."""
    base, _, overload = out_name.partition(".")
    return base if overload == "out" else f"{base}.{overload.removesuffix('_out')}"


def out_kernels(
    functional: dict[str, Kernel], xp: Any = None, dtype_of: DtypeOf = dtype_attr
) -> dict[str, Kernel]:
    """A kernel per ``out=`` overload (:data:`~oplib_core._opset.OUT_OPS`): the functional
    kernel's result, checked against ``out`` as torch does (dtype category; shape: ``out``
    must already have the result's shape) and written into it. ``xp`` None: fake kernels
    (nothing is written)."""
    kernels: dict[str, Kernel] = {}
    for op in OUT_OPS:
        kernels[op.name] = _out_kernel(op.name, functional[functional_name(op.name)], xp, dtype_of)
    return kernels


def _out_kernel(name: str, fn: Kernel, xp: Any, dtype_of: DtypeOf) -> Kernel:
    return _OutKernel(name, fn, xp, dtype_of)


class _OutKernel:
    """The kernel of the ``out=`` overload ``name`` over the functional kernel ``fn``. Its
    signature (the functional op's parameters, then ``out``, as every kernel has the
    schema's) is made when asked: the 43 overloads on each backend would otherwise cost a
    few milliseconds of ``inspect.signature`` at start-up. (No ``__slots__``: kernels take
    attributes, as functions do.)"""

    def __init__(self, name: str, fn: Kernel, xp: Any, dtype_of: DtypeOf) -> None:
        self.__name__ = self.__qualname__ = name
        self._op = f"oplib::{name}"
        self._fn = fn
        self._xp = xp
        self._dtype_of = dtype_of

    def __call__(self, *args: Any, out: Any, **kwargs: Any) -> Any:
        result = self._fn(*args, **kwargs)
        dtype_of = self._dtype_of
        check_inplace_result(self._op, out, dtype_of(result), result.shape, dtype_of(out))
        if self._xp is not None:
            _write(self._op, out, ..., result)
        return out

    @property
    def __signature__(self) -> inspect.Signature:
        sig = inspect.signature(self._fn)
        out = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY)
        return sig.replace(parameters=[*sig.parameters.values(), out])

    def __repr__(self) -> str:
        return f"<out= kernel {self._op}>"
