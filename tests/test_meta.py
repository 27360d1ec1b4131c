"""The meta device (plugins/meta, distribution oplib-meta): data-less arrays, factories,
fake kernels serving it, moving to and from it, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.fake import DataAccessError, FakeArray

oplib_meta = pytest.importorskip("oplib_meta")
MetaArray = oplib_meta.MetaArray


def test_meta_backend_is_installed_through_its_entry_point():
    backend = oplib.backends.get("meta")
    assert backend.key == "Meta"
    assert backend.spec.fake_kernels
    assert backend.distribution == "oplib-meta"
    assert issubclass(MetaArray, FakeArray)


def test_issue_example_matmul_on_meta():
    x = oplib.empty(1024, 768, device="meta")
    w = oplib.empty(768, 10, device="meta")
    y = oplib.ops.oplib.matmul(x, w)
    assert isinstance(y, oplib.Tensor)
    assert y.shape == (1024, 10)
    assert y.dtype == np.float32
    assert y.device.type == "meta"
    assert isinstance(y.native, MetaArray)


@pytest.mark.parametrize("factory", ["empty", "zeros", "ones"])
def test_factories_make_meta_arrays(factory):
    t = getattr(oplib, factory)(2, 3, dtype=np.int32, device="meta")
    assert isinstance(t.native, MetaArray)
    assert (t.shape, t.dtype) == ((2, 3), np.dtype(np.int32))


def test_full_and_arange_on_meta():
    assert oplib.full((2, 2), 1.5, device="meta").dtype == np.float32
    assert oplib.full((2,), 3, device="meta").dtype == np.int64
    a = oplib.arange(1, 2, 0.25, device="meta")
    assert (a.shape, a.dtype) == ((4,), np.dtype(np.float32))
    assert oplib.arange(10, device="meta").shape == (10,)


def test_meta_factory_kernels_are_the_plugins_own():
    shown = oplib.ops.oplib.empty.default
    keys = dict(shown.kernels())
    assert "meta" in keys
    assert keys["meta"].origin.plugin == "meta"


def test_native_meta_arrays_give_native_results():
    x = MetaArray((3, 4))
    y = oplib.ops.oplib.add(x, MetaArray((4,), "float64"))
    assert isinstance(y, MetaArray)
    assert (y.shape, y.dtype) == ((3, 4), np.dtype(np.float64))
    assert oplib.empty_like(x).shape == (3, 4)
    assert isinstance(oplib.zeros_like(x), MetaArray)


def test_operators_and_methods_on_meta_tensors():
    x = oplib.empty(2, 3, device="meta")
    assert (x + 1).shape == (2, 3)
    assert (x @ oplib.empty(3, 5, device="meta")).shape == (2, 5)
    assert x.sum(dim=[1], keepdim=True).shape == (2, 1)
    assert x.reshape(-1).shape == (6,)
    assert x.T.shape == (3, 2)
    assert (x > 0).dtype == np.bool_
    assert x.new_empty(7).shape == (7,)
    assert x.new_empty((4, 4)).device.type == "meta"


def test_zero_d_cpu_arrays_act_as_scalars_on_meta():
    x = oplib.empty(3, device="meta")
    y = oplib.ops.oplib.add(x, oplib.tensor(np.float64(2.0)))
    assert y.device.type == "meta"
    assert y.dtype == np.float64  # a 0-d array is not a weak scalar in numpy 2


def test_to_meta_drops_data():
    t = oplib.tensor(np.arange(6.0).reshape(2, 3))
    m = t.to("meta")
    assert isinstance(m.native, MetaArray)
    assert (m.shape, m.dtype) == ((2, 3), np.dtype(np.float64))
    assert m.to("meta", dtype=np.float32).dtype == np.float32


def test_meta_to_cpu_raises_clearly():
    m = oplib.empty(2, 3, device="meta")
    with pytest.raises(oplib.BackendError, match="meta tensors have no data") as info:
        m.to("cpu")
    assert isinstance(info.value, DataAccessError)


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.numpy(),
        lambda t: t.item(),
        lambda t: t.tolist(),
        np.asarray,
        lambda t: bool(t),
        lambda t: t.__dlpack__(),
    ],
)
def test_reading_meta_data_raises(read):
    t = oplib.empty(1, device="meta")
    with pytest.raises(DataAccessError, match="meta array"):
        read(t)


def test_meta_repr_shows_size_without_data():
    assert repr(oplib.empty(2, 3, device="meta")) == "tensor(..., size=(2, 3), device='meta')"
    assert repr(MetaArray((2,), "int8")) == "MetaArray(shape=(2,), dtype=int8)"


def test_shape_errors_are_raised_on_meta():
    with pytest.raises(ValueError, match="broadcast"):
        oplib.empty(2, 3, device="meta") + oplib.empty(4, device="meta")
    with pytest.raises(ValueError, match="matmul"):
        oplib.empty(2, 3, device="meta") @ oplib.empty(4, 5, device="meta")
    with pytest.raises(ValueError, match="cannot reshape"):
        oplib.empty(2, 3, device="meta").reshape(4, -1)


def test_mixing_meta_and_cpu_raises_device_mismatch():
    with pytest.raises(oplib.DeviceMismatchError):
        oplib.ops.oplib.add(oplib.empty(3, device="meta"), oplib.ones(3))


def test_custom_op_runs_its_fake_kernel_on_meta(ns):
    @oplib.custom_op(f"{ns}::double", mutates_args=())
    def double(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    @double.register_fake
    def _(x):
        return oplib.empty_like(x)

    out = double(oplib.empty(5, 2, device="meta"))
    assert out.shape == (5, 2)
    assert out.device.type == "meta"
    double._destroy()


def test_meta_kernel_wins_over_fake_kernel(lib):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x.new_empty((1,)), "Meta")
    lib._register_fake("f", lambda x: oplib.empty_like(x))
    assert getattr(oplib.ops, lib.ns).f(oplib.empty(4, device="meta")).shape == (1,)


def test_default_kernel_serves_meta_when_no_fake(lib):
    lib.define("g(Tensor x) -> Tensor")
    lib.impl("g", lambda x: oplib.empty_like(x), "CompositeExplicitAutograd")
    assert getattr(oplib.ops, lib.ns).g(oplib.empty(3, device="meta")).shape == (3,)


def test_op_without_meta_fake_or_default_kernel_says_how_to_add_one(lib):
    lib.define("h(Tensor x) -> Tensor")
    lib.impl("h", lambda x: x, "CPU")
    with pytest.raises(oplib.NoKernelError, match="register_fake") as info:
        getattr(oplib.ops, lib.ns).h(oplib.empty(3, device="meta"))
    assert info.value.key == "Meta"


def test_fake_kernel_reading_data_on_meta_names_the_op(lib):
    lib.define("peek(Tensor x) -> Tensor")

    def fake(x):
        np.asarray(x)  # not allowed: no data

    lib._register_fake("peek", fake)
    with pytest.raises(DataAccessError) as info:
        getattr(oplib.ops, lib.ns).peek(oplib.empty(3, device="meta"))
    assert info.value.op == f"{lib.ns}::peek"
    assert "test_meta.py" in str(info.value)
    assert "fake kernel" in str(info.value)
