"""Kernels for every op in :data:`oplib_core.kernels.CORE_OPS`, written once against an array
namespace (numpy, cupy, or anything that mirrors numpy's API).

Calling convention (the contract with the dispatcher): a kernel takes the schema's positional
arguments positionally, with defaults filled in, and every keyword-only argument by keyword;
parameter names are the schema's argument names. ``Tensor`` arguments are native arrays of
``xp``, ``Tensor[]`` a list of them, ``ScalarType`` a ``numpy.dtype`` or ``None``, ``Device``
an :class:`~oplib_core.device.Device` or ``None``, ``Scalar`` a Python int, float or bool.
Kernels return native arrays, never scalars (full reductions give 0-d arrays).

Type promotion is numpy's (NEP 50: Python scalars are weak, so float32 + 2.0 stays float32).
Where torch and numpy differ the docstring of the kernel says which one it follows. With
bfloat16 or float8 operands (``ml_dtypes``) binary ops follow torch instead: mixed dtypes are
cast to ``promote_types`` first (numpy has no common dtype for bfloat16 and float16, and takes
float64 for bfloat16 with int64), and with a Python scalar they compute in float32 and round
back, as torch's "opmath" does (numpy would give float32 for ``bfloat16 * 2.0``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from oplib_core._device import Device
from oplib_core._dtypes import (
    EXTENSION_FLOATS,
    get_default_dtype,
    is_floating,
    mean_dtype,
    promote_types,
    result_type,
    scalar_dtype,
)
from oplib_core._opset import CORE_OPS, CoreOp
from oplib_core.kernels._inplace_kernels import inplace_kernels

__all__ = ["array_kernels", "check_kernels"]

_INT64 = np.dtype("int64")
_FLOAT32 = np.dtype("float32")


def _promoted(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` (one of them bfloat16/float8, dtypes differ) cast to torch's
    ``promote_types``; ``TypeError`` for float8 with another dtype, as torch."""
    d = promote_types(a.dtype, b.dtype)
    return a.astype(d, copy=False), b.astype(d, copy=False)


def _opmath(ufunc: Callable[..., Any], self: Any, other: Any, reverse: bool) -> Any:
    """``ufunc`` of a bfloat16/float8 array and a Python scalar as torch computes it: in
    float32, rounded back to ``self``'s dtype (bool and complex results are kept)."""
    x = self.astype(_FLOAT32)
    out = ufunc(other, x) if reverse else ufunc(x, other)
    return out.astype(self.dtype) if out.dtype == _FLOAT32 else out


def _common(arrays: Sequence[Any]) -> list[Any]:
    """``arrays`` as a list; cast to torch's promotion when their dtypes differ and one of
    them is bfloat16/float8 (numpy has no bfloat16/float16 pair, takes float64 for
    bfloat16 with int64)."""
    arrays = list(arrays)
    dtypes = [a.dtype for a in arrays]
    if any(d in EXTENSION_FLOATS for d in dtypes) and len(set(dtypes)) > 1:
        d = result_type(*dtypes)
        arrays = [a.astype(d, copy=False) for a in arrays]
    return arrays


def check_kernels(
    kernels: Mapping[str, Callable[..., Any]], ops: Sequence[CoreOp] = CORE_OPS
) -> None:
    """Raise ``ValueError`` unless ``kernels`` has exactly one kernel per op of ``ops``, keyed
    by :attr:`CoreOp.name` (``"add.Scalar"``): no op left without a kernel, no stray kernel."""
    expected = {op.name for op in ops}
    missing = sorted(expected - kernels.keys())
    extra = sorted(kernels.keys() - expected)
    if missing or extra:
        raise ValueError(
            "check_kernels(): expected one kernel per core op; "
            f"ops without a kernel: {missing or 'none'}; kernels without an op: {extra or 'none'}"
        )


def _wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index in ``range(ndim)``; like torch, a 0-d array accepts 0 and -1."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def _reduce_axes(ndim: int, dim: Sequence[int] | None) -> tuple[int, ...] | None:
    """``dim`` as numpy's ``axis``: None or [] mean every axis."""
    if not dim:
        return None
    axes = tuple(_wrap_dim(d, ndim) for d in dim)
    return axes if ndim else None


def array_kernels(xp: Any) -> dict[str, Callable[..., Any]]:
    """Kernels for every core op, bound to the array namespace ``xp`` (``numpy``, ``cupy``, or
    any object with their functions, as a vendor's per-device namespace).

    Returns a dict keyed by op name with overload and without namespace (``"add"``,
    ``"add.Scalar"``, ``"arange.start"``); see the module docstring for the calling convention.
    Only functions that numpy and cupy both provide are used.
    """
    kernels: dict[str, Callable[..., Any]] = {}
    asarray = xp.asarray

    def kernel(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            fn.__qualname__ = fn.__name__ = name
            kernels[name] = fn
            return fn

        return register

    # numpy ufuncs return numpy scalars for 0-d inputs; kernels must return arrays.
    def unary(name: str, ufunc: Callable[..., Any], doc: str) -> None:
        def fn(self: Any) -> Any:
            return asarray(ufunc(self))

        fn.__doc__ = doc
        kernel(name)(fn)

    # bfloat16/float8 (numpy's kind "V", but "f" for float8_e5m2): a set lookup on the hot
    # path, and torch's promotion only for them (see the module docstring)
    def binary(name: str, ufunc: Callable[..., Any], doc: str) -> None:
        def fn(self: Any, other: Any) -> Any:
            sd, od = self.dtype, other.dtype
            if sd is not od and (sd in EXTENSION_FLOATS or od in EXTENSION_FLOATS):
                self, other = _promoted(self, other)
            return asarray(ufunc(self, other))

        fn.__doc__ = doc
        kernel(name)(fn)

    def scalar(name: str, ufunc: Callable[..., Any], doc: str, *, reverse: bool = False) -> None:
        def fn(self: Any, other: Any) -> Any:
            if self.dtype in EXTENSION_FLOATS:
                return asarray(_opmath(ufunc, self, other, reverse))
            return asarray(ufunc(other, self) if reverse else ufunc(self, other))

        fn.__doc__ = doc
        kernel(name)(fn)

    def power(name: str, doc: str) -> None:
        def fn(self: Any, exponent: Any) -> Any:
            if (
                self.dtype in EXTENSION_FLOATS
                or getattr(exponent, "dtype", None) in EXTENSION_FLOATS
            ):
                if not hasattr(exponent, "dtype"):
                    return asarray(_opmath(xp.power, self, exponent, False))
                if self.dtype is not exponent.dtype:
                    self, exponent = _promoted(self, exponent)
            return asarray(xp.power(self, exponent))

        fn.__doc__ = doc
        kernel(name)(fn)

    # -- unary pointwise ----------------------------------------------------------------
    unary("neg", xp.negative, "``-self``.")
    unary("exp", xp.exp, "``e ** self`` (integer input gives numpy's float dtype).")
    unary("log", xp.log, "Natural logarithm (nan for negative input, -inf for 0).")
    unary("sin", xp.sin, "Sine.")
    unary("cos", xp.cos, "Cosine.")
    unary("tanh", xp.tanh, "Hyperbolic tangent.")
    unary("abs", xp.abs, "Absolute value, same dtype as ``self``.")
    unary("sqrt", xp.sqrt, "Square root (nan for negative input).")

    @kernel("sigmoid")
    def sigmoid(self: Any) -> Any:
        """``1 / (1 + exp(-self))``, computed so that no intermediate overflows for large
        ``|self|``; float dtypes are kept, integer input gives numpy's float dtype for ``exp``."""
        if self.dtype.kind == "c":
            return asarray(1 / (1 + xp.exp(-self)))
        if self.dtype in EXTENSION_FLOATS:  # in float32, rounded once (as torch)
            return sigmoid(self.astype(_FLOAT32)).astype(self.dtype)
        x = self
        if not is_floating(x.dtype):
            # result_type with float16 is the float dtype numpy's exp loop would choose.
            x = x.astype(np.result_type(x.dtype, np.float16))
        e = xp.exp(-xp.abs(x))
        return asarray(xp.where(x >= 0, 1 / (1 + e), e / (1 + e)))

    @kernel("relu")
    def relu(self: Any) -> Any:
        """``max(self, 0)`` elementwise, same dtype as ``self``; nan stays nan."""
        return asarray(xp.maximum(self, self.dtype.type(0)))

    # -- binary pointwise ---------------------------------------------------------------
    binary("add", xp.add, "``self + other`` with numpy broadcasting and promotion.")
    binary("sub", xp.subtract, "``self - other``.")
    binary("mul", xp.multiply, "``self * other``.")
    binary(
        "div",
        xp.true_divide,
        "True division ``self / other``. Follows numpy, not torch: int / int gives float64.",
    )
    power("pow", "``self ** exponent``; integer to a negative integer power raises.")
    binary("maximum", xp.maximum, "Elementwise maximum; nan propagates.")
    binary("minimum", xp.minimum, "Elementwise minimum; nan propagates.")
    scalar("add.Scalar", xp.add, "``self + other``; the Python scalar is weak (NEP 50).")
    scalar("sub.Scalar", xp.subtract, "``self - other``; the Python scalar is weak.")
    scalar("mul.Scalar", xp.multiply, "``self * other``; the Python scalar is weak.")
    scalar(
        "div.Scalar",
        xp.true_divide,
        "``self / other``; the Python scalar is weak, int / int gives float64 (numpy).",
    )
    power("pow.Scalar", "``self ** exponent``; the Python scalar is weak.")
    scalar("rsub.Scalar", xp.subtract, "``other - self`` (for ``2.0 - t``).", reverse=True)
    scalar("rdiv.Scalar", xp.true_divide, "``other / self`` (for ``2.0 / t``).", reverse=True)
    scalar("rpow.Scalar", xp.power, "``other ** self`` (for ``2.0 ** t``).", reverse=True)

    for cmp_name, ufunc, symbol in (
        ("eq", xp.equal, "=="),
        ("ne", xp.not_equal, "!="),
        ("lt", xp.less, "<"),
        ("le", xp.less_equal, "<="),
        ("gt", xp.greater, ">"),
        ("ge", xp.greater_equal, ">="),
    ):
        binary(cmp_name, ufunc, f"``self {symbol} other`` as a bool array.")
        scalar(f"{cmp_name}.Scalar", ufunc, f"``self {symbol} other`` as a bool array.")

    @kernel("where")
    def where(condition: Any, self: Any, other: Any) -> Any:
        """``self`` where ``condition`` holds, else ``other``; all three broadcast together."""
        sd, od = self.dtype, other.dtype
        if sd is not od and (sd in EXTENSION_FLOATS or od in EXTENSION_FLOATS):
            self, other = _promoted(self, other)
        return asarray(xp.where(condition, self, other))

    # -- reductions ---------------------------------------------------------------------
    @kernel("sum")
    def sum_(
        self: Any, dim: Sequence[int] | None, keepdim: bool, *, dtype: np.dtype | None = None
    ) -> Any:
        """Sum over ``dim`` (None or [] for all). Like torch, with ``dtype=None`` bool and
        integer input accumulate in int64 (uint64 stays uint64); floats keep their dtype
        (bfloat16/float8 accumulate in float32)."""
        if dtype is None and (
            self.dtype.kind in "bi" or (self.dtype.kind == "u" and self.dtype.itemsize < 8)
        ):
            dtype = _INT64
        axis = _reduce_axes(self.ndim, dim)
        if dtype is None and self.dtype in EXTENSION_FLOATS:  # accumulate in float32 (torch)
            out = xp.sum(self, axis=axis, dtype=_FLOAT32, keepdims=keepdim)
            return asarray(out).astype(self.dtype)
        return asarray(xp.sum(self, axis=axis, dtype=dtype, keepdims=keepdim))

    @kernel("mean")
    def mean(
        self: Any, dim: Sequence[int] | None, keepdim: bool, *, dtype: np.dtype | None = None
    ) -> Any:
        """Mean over ``dim`` (None or [] for all). Like torch, the result dtype must be
        floating or complex: integer or bool input raises ``TypeError`` unless a floating
        ``dtype=`` is given."""
        mean_dtype(self.dtype, dtype)
        axis = _reduce_axes(self.ndim, dim)
        if dtype is None and self.dtype in EXTENSION_FLOATS:  # accumulate in float32 (torch)
            out = xp.mean(self, axis=axis, dtype=_FLOAT32, keepdims=keepdim)
            return asarray(out).astype(self.dtype)
        return asarray(xp.mean(self, axis=axis, dtype=dtype, keepdims=keepdim))

    @kernel("amax")
    def amax(self: Any, dim: Sequence[int] | None, keepdim: bool) -> Any:
        """Maximum over ``dim`` (None or [] for all); nan propagates; empty input raises."""
        return asarray(xp.amax(self, axis=_reduce_axes(self.ndim, dim), keepdims=keepdim))

    @kernel("amin")
    def amin(self: Any, dim: Sequence[int] | None, keepdim: bool) -> Any:
        """Minimum over ``dim`` (None or [] for all); nan propagates; empty input raises."""
        return asarray(xp.amin(self, axis=_reduce_axes(self.ndim, dim), keepdims=keepdim))

    # -- linear algebra -----------------------------------------------------------------
    @kernel("matmul")
    def matmul(self: Any, other: Any) -> Any:
        """Matrix product with numpy's ``matmul`` rules (batch dims broadcast, 1-d operands
        are promoted to matrices and the added dim removed). bfloat16/float8 operands give
        torch's ``promote_types`` dtype (numpy's matmul would give float32)."""
        sd, od = self.dtype, other.dtype
        if sd in EXTENSION_FLOATS or od in EXTENSION_FLOATS:
            d = promote_types(sd, od)
            return asarray(
                xp.matmul(self.astype(d, copy=False), other.astype(d, copy=False))
            ).astype(d, copy=False)
        return asarray(xp.matmul(self, other))

    # -- shape ops (may return views of self) -------------------------------------------
    @kernel("transpose")
    def transpose(self: Any, dim0: int, dim1: int) -> Any:
        """Swap dims ``dim0`` and ``dim1``; returns a view."""
        dim0, dim1 = _wrap_dim(dim0, self.ndim), _wrap_dim(dim1, self.ndim)
        return xp.swapaxes(self, dim0, dim1) if self.ndim else self[...]

    @kernel("permute")
    def permute(self: Any, dims: Sequence[int]) -> Any:
        """Reorder dims (``dims`` is a permutation of all of them); returns a view."""
        return xp.transpose(self, tuple(dims))

    @kernel("reshape")
    def reshape(self: Any, shape: Sequence[int]) -> Any:
        """Give ``self`` a new shape (one entry may be -1); a view where numpy can make one,
        else a copy."""
        return xp.reshape(self, tuple(shape))

    @kernel("broadcast_to")
    def broadcast_to(self: Any, size: Sequence[int]) -> Any:
        """Broadcast to ``size``; as in torch's ``expand``, -1 keeps an existing dim's size.
        Returns a read-only view."""
        lead = len(size) - self.ndim
        shape = []
        for i, s in enumerate(size):
            if s == -1:
                if i < lead:
                    raise ValueError(
                        f"broadcast_to(): -1 keeps the size of an existing dim, but size "
                        f"{list(size)} puts it at new leading dim {i} of a {self.ndim}-d array"
                    )
                s = self.shape[i - lead]
            shape.append(s)
        return xp.broadcast_to(self, tuple(shape))

    @kernel("unsqueeze")
    def unsqueeze(self: Any, dim: int) -> Any:
        """Insert a dim of size 1 at ``dim`` (negative counts from the new end); a view."""
        return xp.expand_dims(self, dim)

    @kernel("squeeze")
    def squeeze(self: Any, dim: Sequence[int] | None) -> Any:
        """Remove dims of size 1: all of them for ``dim=None``, else those in ``dim`` that have
        size 1 (others are left alone, as in torch); returns a view."""
        if dim is None:
            return xp.squeeze(self)
        axes = {_wrap_dim(d, self.ndim) for d in dim}
        if not self.ndim:
            return self[...]
        return xp.squeeze(self, axis=tuple(sorted(a for a in axes if self.shape[a] == 1)))

    @kernel("cat")
    def cat(tensors: Sequence[Any], dim: int) -> Any:
        """Concatenate along an existing dim; dtypes promote as in numpy (as torch with a
        bfloat16/float8 among them)."""
        return xp.concatenate(_common(tensors), axis=dim)

    @kernel("stack")
    def stack(tensors: Sequence[Any], dim: int) -> Any:
        """Stack equal-shaped arrays along a new dim ``dim``."""
        return xp.stack(_common(tensors), axis=dim)

    # -- copies -------------------------------------------------------------------------
    @kernel("clone")
    def clone(self: Any) -> Any:
        """A new array with the same data and layout; never shares memory with ``self``."""
        return xp.array(self, copy=True)

    @kernel("copy_")
    def copy_(self: Any, src: Any) -> Any:
        """Write ``src`` (broadcast to ``self``'s shape, cast to its dtype) into ``self`` in
        place and return ``self``."""
        self[...] = src
        return self

    @kernel("astype")
    def astype(self: Any, dtype: np.dtype) -> Any:
        """A copy of ``self`` converted to ``dtype`` (always a new array, as the schema
        promises no aliasing)."""
        return self.astype(dtype, copy=True)

    # -- factories (``device`` is the binding plugin's business) --------------------------
    @kernel("empty")
    def empty(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """An uninitialised array of shape ``size``; ``dtype=None`` is the default dtype."""
        return xp.empty(tuple(size), dtype=get_default_dtype() if dtype is None else dtype)

    @kernel("zeros")
    def zeros(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """Zeros of shape ``size``; ``dtype=None`` is the default dtype."""
        return xp.zeros(tuple(size), dtype=get_default_dtype() if dtype is None else dtype)

    @kernel("ones")
    def ones(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """Ones of shape ``size``; ``dtype=None`` is the default dtype."""
        return xp.ones(tuple(size), dtype=get_default_dtype() if dtype is None else dtype)

    @kernel("full")
    def full(
        size: Sequence[int], fill_value: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        """``fill_value`` repeated to shape ``size``. As in torch, ``dtype=None`` infers from
        the fill: bool → bool, int → int64, float → the default dtype."""
        if dtype is None:
            dtype = scalar_dtype(fill_value)
        return xp.full(tuple(size), fill_value, dtype=dtype)

    def _arange(start: Any, end: Any, step: Any, dtype: np.dtype | None) -> Any:
        if dtype is None:
            dtypes = [scalar_dtype(v) for v in (start, end, step)]
            floating = any(d.kind == "c" or is_floating(d) for d in dtypes)  # bfloat16 default
            dtype = get_default_dtype() if floating else _INT64
        return xp.arange(start, end, step, dtype=dtype)

    @kernel("arange")
    def arange(end: Any, *, dtype: np.dtype | None, device: Device | None) -> Any:
        """``0, 1, ..., end - 1``. As in torch, ``dtype=None`` gives int64 for int ``end`` and
        the default dtype for a float one."""
        return _arange(0, end, 1, dtype)

    @kernel("arange.start")
    def arange_start(
        start: Any, end: Any, step: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        """``start, start + step, ...`` up to but excluding ``end``. As in torch,
        ``dtype=None`` gives int64 if all three are ints, else the default dtype."""
        return _arange(start, end, step, dtype)

    kernels.update(inplace_kernels(xp, kernels))
    return kernels
