"""Fake kernels for every op of the core op set (``kernels.CORE_OPS``) and ``oplib::_to_copy``,
placed by the built-in plugin ``core-fake`` (``_core_fake_plugin``) as they are first read.

They receive data-less arrays (``FakeArray``, ``MetaArray``) and compute the output's
shape (:mod:`.shapes`), dtype (numpy's promotion, NEP 50: Python scalars are weak) and
device; they never touch data and never call other ops, so they are cheap. Outputs keep the
class and device of the input they derive from. ``tests/test_fake_consistency.py`` checks
them against the CPU kernels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import (
    EXTENSION_FLOATS,
    get_default_dtype,
    is_floating,
    mean_dtype,
    result_type,
    scalar_dtype,
)
from ..errors import DeviceMismatchError
from ..kernels._array_kernels import check_kernels
from . import _shapes as S
from ._arrays import FakeArray, check_shape, fake_array
from ._index_fakes import index_fake_kernels
from ._inplace_fakes import inplace_fake_kernels

__all__ = ["core_fake_kernels"]

_INT64 = np.dtype("int64")


def _is_scalar(a: FakeArray) -> bool:
    return not a.shape and a.device.type == "cpu"


def _pick(op: str, arrays: Sequence[FakeArray]) -> FakeArray:
    """The input whose class and device the output takes; inputs must share a device,
    except 0-d cpu arrays (scalars), as in the dispatcher."""
    base = None
    for a in arrays:
        if _is_scalar(a):
            continue
        if base is None:
            base = a
        elif a.device is not base.device and a.device != base.device:
            devices = {f"input {i}": str(x.device) for i, x in enumerate(arrays)}
            raise DeviceMismatchError(
                f"oplib::{op}(): expected all tensor arguments on one device, got "
                + ", ".join(f"{k} on {v}" for k, v in devices.items())
                + "; move them with .to(device) first",
                op=f"oplib::{op}",
                devices=devices,
            )
    return arrays[0] if base is None else base


def core_fake_kernels() -> dict[str, Callable[..., Any]]:
    """Fake kernels keyed like :func:`oplib_core.kernels.array_kernels` (``"add.Scalar"``)."""
    kernels: dict[str, Callable[..., Any]] = {}

    def kernel(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            fn.__qualname__ = fn.__name__ = f"{name}_fake"
            fn._oplib_leaf_fake = True  # type: ignore[attr-defined]  # calls no ops
            kernels[name] = fn
            return fn

        return register

    ufunc_dtype = S.ufunc_dtype
    ufunc_loop = S.ufunc_loop
    broadcast = S.broadcast_shapes
    broadcast2 = S.broadcast2
    reduce_shape = S.reduce_shape
    matmul_shape = S.matmul_shape
    weak = S.weak

    # Each kernel keeps its own dtype table (input dtypes -> output dtype): one dict lookup
    # on the hot path instead of building a key for the shared ufunc cache.
    def unary(name: str, ufunc: Any) -> None:
        dtypes: dict[np.dtype, np.dtype] = {}

        def fn(self: FakeArray) -> FakeArray:
            dt = self.dtype
            out = dtypes.get(dt)
            if out is None:
                out = dtypes[dt] = ufunc_dtype(ufunc, dt)
            return self._new(self.shape, out)

        kernel(name)(fn)

    def binary(name: str, ufunc: Any) -> None:
        dtypes: dict[tuple[np.dtype, np.dtype], np.dtype] = {}

        def fn(self: FakeArray, other: FakeArray) -> FakeArray:
            base = self if self.device is other.device else _pick(name, (self, other))
            key = (self.dtype, other.dtype)
            dtype = dtypes.get(key)
            if dtype is None:  # numpy checks dtypes before shapes
                dtype = dtypes[key] = ufunc_dtype(ufunc, *key)
            a, b = self.shape, other.shape
            if a is not b:
                a = broadcast2(a, b) or broadcast(a, b)
            return base._new(a, dtype)

        kernel(name)(fn)

    def scalar(name: str, ufunc: Any, *, reverse: bool = False) -> None:
        # numpy compares out-of-range Python ints fine; arithmetic casts them and refuses
        check_range = name.split(".")[0] not in ("eq", "ne", "lt", "le", "gt", "ge")
        i = 0 if reverse else 1

        # (dtype, scalar type) -> (whether the scalar is a weak int, numpy's loop)
        loops: dict[tuple[np.dtype, type], tuple[bool, tuple[np.dtype, ...]]] = {}

        def fn(self: FakeArray, other: Any) -> FakeArray:
            key = (self.dtype, type(other))
            found = loops.get(key)
            if found is None:
                w = weak(other)
                dt = self.dtype
                # a bool with bfloat16/float8 is computed in float32 like any scalar (the
                # kernels' opmath), not promoted as a bool array would be
                v = int if dt in EXTENSION_FLOATS and isinstance(other, bool) else w
                loop = ufunc_loop(ufunc, v, dt) if reverse else ufunc_loop(ufunc, dt, v)
                found = loops[key] = (w is int and check_range, loop)
            if found[0]:
                S.check_int_scalar(other, found[1][i])
            return self._new(self.shape, found[1][-1])

        kernel(name)(fn)

    # -- pointwise ----------------------------------------------------------------------
    ufunc: np.ufunc
    for name, ufunc in (
        ("neg", np.negative),
        ("exp", np.exp),
        ("log", np.log),
        ("sin", np.sin),
        ("cos", np.cos),
        ("tanh", np.tanh),
        ("abs", np.abs),
        ("sqrt", np.sqrt),
    ):
        unary(name, ufunc)

    @kernel("sigmoid")
    def sigmoid(self: FakeArray) -> FakeArray:
        dt = self.dtype
        if dt.kind != "c" and not is_floating(dt):
            dt = np.result_type(dt, np.float16)
        return self._new(self.shape, dt)

    @kernel("relu")
    def relu(self: FakeArray) -> FakeArray:
        return self._new(self.shape, self.dtype)

    for name, ufunc in (
        ("add", np.add),
        ("sub", np.subtract),
        ("mul", np.multiply),
        ("div", np.true_divide),
        ("pow", np.power),
        ("maximum", np.maximum),
        ("minimum", np.minimum),
        ("eq", np.equal),
        ("ne", np.not_equal),
        ("lt", np.less),
        ("le", np.less_equal),
        ("gt", np.greater),
        ("ge", np.greater_equal),
    ):
        binary(name, ufunc)
        if name not in ("maximum", "minimum"):
            scalar(f"{name}.Scalar", ufunc)
    scalar("rsub.Scalar", np.subtract, reverse=True)
    scalar("rdiv.Scalar", np.true_divide, reverse=True)
    scalar("rpow.Scalar", np.power, reverse=True)

    @kernel("where")
    def where(condition: FakeArray, self: FakeArray, other: FakeArray) -> FakeArray:
        base = _pick("where", (condition, self, other))
        return base._new(
            broadcast(condition.shape, self.shape, other.shape),
            result_type(self.dtype, other.dtype),
        )

    # -- reductions ---------------------------------------------------------------------
    sum_dtypes: dict[np.dtype, np.dtype] = {}  # input dtype -> sum's default output dtype

    @kernel("sum")
    def sum_(
        self: FakeArray,
        dim: Sequence[int] | None,
        keepdim: bool,
        *,
        dtype: np.dtype | None = None,
    ) -> FakeArray:
        if dtype is None:
            dtype = sum_dtypes.get(self.dtype)
            if dtype is None:
                dt = self.dtype
                if dt.kind in "bi" or (dt.kind == "u" and dt.itemsize < 8):
                    dt = _INT64
                dtype = sum_dtypes[self.dtype] = dt
        return self._new(reduce_shape(self.shape, dim, keepdim)[0], dtype)

    @kernel("mean")
    def mean(
        self: FakeArray,
        dim: Sequence[int] | None,
        keepdim: bool,
        *,
        dtype: np.dtype | None = None,
    ) -> FakeArray:
        out = mean_dtype(self.dtype, dtype)
        return self._new(reduce_shape(self.shape, dim, keepdim)[0], out)

    def extremum(name: str, what: str) -> None:
        def fn(self: FakeArray, dim: Sequence[int] | None, keepdim: bool) -> FakeArray:
            shape, axes = reduce_shape(self.shape, dim, keepdim)
            for a in axes:
                if type(self.shape[a]) is int and self.shape[a] == 0:
                    raise ValueError(
                        f"zero-size array to reduction operation {what} which has no identity"
                    )
            return self._new(shape, self.dtype)

        kernel(name)(fn)

    extremum("amax", "maximum")
    extremum("amin", "minimum")

    # -- linear algebra -----------------------------------------------------------------
    matmul_dtypes: dict[tuple[np.dtype, np.dtype], np.dtype] = {}

    @kernel("matmul")
    def matmul(self: FakeArray, other: FakeArray) -> FakeArray:
        base = self if self.device is other.device else _pick("matmul", (self, other))
        key = (self.dtype, other.dtype)
        dtype = matmul_dtypes.get(key)
        if dtype is None:
            dtype = matmul_dtypes[key] = ufunc_dtype(np.matmul, *key)
        return base._new(matmul_shape(self.shape, other.shape), dtype)

    # -- shape ops ----------------------------------------------------------------------
    @kernel("transpose")
    def transpose(self: FakeArray, dim0: int, dim1: int) -> FakeArray:
        return self._new(S.transpose_shape(self.shape, dim0, dim1), self.dtype)

    @kernel("permute")
    def permute(self: FakeArray, dims: Sequence[int]) -> FakeArray:
        return self._new(S.permute_shape(self.shape, dims), self.dtype)

    @kernel("reshape")
    def reshape(self: FakeArray, shape: Sequence[Any]) -> FakeArray:
        return self._new(S.reshape_shape(self.shape, shape), self.dtype)

    @kernel("broadcast_to")
    def broadcast_to(self: FakeArray, size: Sequence[Any]) -> FakeArray:
        return self._new(S.broadcast_to_shape(self.shape, size), self.dtype)

    @kernel("unsqueeze")
    def unsqueeze(self: FakeArray, dim: int) -> FakeArray:
        return self._new(S.unsqueeze_shape(self.shape, dim), self.dtype)

    @kernel("squeeze")
    def squeeze(self: FakeArray, dim: Sequence[int] | None) -> FakeArray:
        return self._new(S.squeeze_shape(self.shape, dim), self.dtype)

    @kernel("cat")
    def cat(tensors: Sequence[FakeArray], dim: int) -> FakeArray:
        shape = S.cat_shape([t.shape for t in tensors], dim)
        base = _pick("cat", tensors)
        return base._new(shape, result_type(*[t.dtype for t in tensors]))

    @kernel("stack")
    def stack(tensors: Sequence[FakeArray], dim: int) -> FakeArray:
        shape = S.stack_shape([t.shape for t in tensors], dim)
        base = _pick("stack", tensors)
        return base._new(shape, result_type(*[t.dtype for t in tensors]))

    # -- copies -------------------------------------------------------------------------
    @kernel("clone")
    def clone(self: FakeArray) -> FakeArray:
        return self._new(self.shape, self.dtype)

    @kernel("copy_")
    def copy_(self: FakeArray, src: FakeArray) -> FakeArray:
        _pick("copy_", (self, src))
        shape = src.shape
        while len(shape) > len(self.shape) and type(shape[0]) is int and shape[0] == 1:
            shape = shape[1:]
        try:
            S.broadcast_to_shape(shape, self.shape)
        except ValueError:
            raise ValueError(
                f"could not broadcast input array from shape {src.shape} into shape {self.shape}"
            ) from None
        return self

    @kernel("astype")
    def astype(self: FakeArray, dtype: np.dtype) -> FakeArray:
        return self._new(self.shape, dtype)

    # -- factories ------------------------------------------------------------------------
    def filled(name: str) -> None:
        def fn(size: Sequence[Any], *, dtype: np.dtype | None, device: Device | None) -> Any:
            return fake_array(
                check_shape(size, name), get_default_dtype() if dtype is None else dtype, device
            )

        kernel(name)(fn)

    for name in ("empty", "zeros", "ones"):
        filled(name)

    @kernel("full")
    def full(
        size: Sequence[Any], fill_value: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        dt = scalar_dtype(fill_value) if dtype is None else dtype
        return fake_array(check_shape(size, "full"), dt, device)

    @kernel("arange")
    def arange(end: Any, *, dtype: np.dtype | None, device: Device | None) -> Any:
        return fake_array((S.arange_length(0, end, 1),), S.arange_dtype(0, end, 1, dtype), device)

    @kernel("arange.start")
    def arange_start(
        start: Any, end: Any, step: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        return fake_array(
            (S.arange_length(start, end, step),), S.arange_dtype(start, end, step, dtype), device
        )

    kernels.update(index_fake_kernels())  # indexing and views (issue 14)
    kernels.update(inplace_fake_kernels(kernels))
    check_kernels(kernels)
    return kernels


def to_copy_fake(
    self: FakeArray, *, dtype: np.dtype | None = None, device: Device | None = None
) -> Any:
    """Fake ``_to_copy``: same shape, on ``device`` (or here) with ``dtype`` (or the same)."""
    dt = self.dtype if dtype is None else dtype
    here = self.device
    if device is None or (
        device.type == here.type and (device.index is None or device.index == here.index)
    ):
        return self._new(self.shape, dt)
    return fake_array(self.shape, dt, device)


to_copy_fake._oplib_leaf_fake = True  # type: ignore[attr-defined]


@functools.cache
def _placed() -> dict[str, Callable[..., Any]]:
    return {**core_fake_kernels(), "_to_copy": to_copy_fake}


def fake_kernel(name: str) -> Callable[..., Any]:
    """The fake kernel ``core-fake`` places for ``oplib::<name>`` (``_core_fake_plugin``):
    one function per op, the same on every read."""
    return _placed()[name]
