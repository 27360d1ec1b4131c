"""``oplib.Tensor`` and the factories: metadata, dtypes, conversions, operators, DLPack."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib

F32 = np.dtype("float32")
F64 = np.dtype("float64")
I64 = np.dtype("int64")


# -- construction and dtypes -----------------------------------------------------------------


def test_python_floats_become_float32():
    assert oplib.tensor([1.0, 2.0]).dtype == F32
    assert oplib.tensor(1.5).dtype == F32
    assert oplib.tensor([[1, 2.5]]).dtype == F32
    assert oplib.tensor([]).dtype == F32


def test_python_ints_and_bools():
    assert oplib.tensor([1, 2]).dtype == I64
    assert oplib.tensor(True).dtype == np.dtype(bool)


def test_python_complex_uses_default_dtype_precision(default_dtype):
    # as torch: complex Python numbers follow the default dtype (float32 -> complex64)
    assert oplib.tensor(1 + 2j).dtype == np.dtype("complex64")
    assert oplib.tensor([1.0, 2j]).dtype == np.dtype("complex64")
    oplib.set_default_dtype(oplib.float64)
    assert oplib.tensor([1j]).dtype == np.dtype("complex128")


def test_arrays_and_numpy_scalars_keep_their_dtype():
    a = np.array([1.0, 2.0])  # float64
    t = oplib.tensor(a)
    assert t.dtype == F64
    assert t.native is a  # wrapped without a copy
    assert oplib.tensor(np.float64(1.5)).dtype == F64
    assert oplib.tensor(np.arange(3, dtype=np.int32)).dtype == np.dtype("int32")


def test_tensor_dtype_and_device_arguments():
    t = oplib.tensor([1, 2], dtype=oplib.float64)
    assert t.dtype == F64
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    a = np.array([1.0], dtype=np.float32)
    t = oplib.tensor(a, dtype="float32", device="cpu")
    assert t.native is a


def test_tensor_of_tensor_shares_data():
    t = oplib.tensor([1.0])
    assert oplib.tensor(t).native is t.native


def test_set_default_dtype(default_dtype):
    oplib.set_default_dtype(np.float64)
    assert oplib.get_default_dtype() == F64
    assert oplib.tensor([1.0]).dtype == F64
    assert oplib.zeros(2).dtype == F64
    assert oplib.arange(0.0, 1.0, 0.5).dtype == F64
    assert oplib.tensor(np.array([1.0], dtype=np.float32)).dtype == F32
    oplib.set_default_dtype("float16")
    assert oplib.ones(1).dtype == np.dtype("float16")


def test_set_default_dtype_rejects_non_float(default_dtype):
    with pytest.raises(TypeError, match="only floating dtypes are supported, got int64"):
        oplib.set_default_dtype(np.int64)
    assert oplib.get_default_dtype() == F32


def test_tensor_rejects_non_numeric_data():
    with pytest.raises(TypeError, match=r"cannot make a tensor from str data"):
        oplib.tensor("abc")
    with pytest.raises(TypeError, match=r"cannot make a tensor from NoneType data"):
        oplib.tensor(None)


def test_tensor_constructor_needs_native_array():
    a = np.zeros(2)
    assert oplib.Tensor(a).native is a
    with pytest.raises(TypeError, match=r"expected a native array of an installed backend"):
        oplib.Tensor([1.0, 2.0])


# -- metadata ---------------------------------------------------------------------------------


def test_attributes():
    t = oplib.tensor(np.zeros((2, 3), dtype=np.float32))
    assert t.shape == (2, 3)
    assert t.size() == (2, 3) and t.size(1) == 3
    assert t.ndim == 2 and t.dim() == 2
    assert t.numel() == 6
    assert len(t) == 2
    assert t.dtype == F32
    assert t.device.type == "cpu"
    assert t.device == oplib.Device("cpu")
    assert str(t.device) == "cpu"
    assert t.requires_grad is False
    assert t.grad is None and t.grad_fn is None
    assert t.is_leaf
    assert t.backend.name == "cpu"


def test_len_of_0d_tensor():
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(oplib.tensor(1.0))


def test_repr():
    assert repr(oplib.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(oplib.tensor(np.array([1.0]))) == "tensor([1.], dtype=float64)"
    assert repr(oplib.tensor([1.0], requires_grad=True)) == "tensor([1.], requires_grad=True)"
    assert repr(oplib.tensor([1, 2])) == "tensor([1, 2])"


# -- requires_grad ------------------------------------------------------------------------------


def test_requires_grad_only_for_floating_dtypes():
    t = oplib.tensor([1.0], requires_grad=True)
    assert t.requires_grad
    assert oplib.tensor([1j]).requires_grad_().requires_grad
    msg = r"only tensors of floating point or complex dtype.*int64"
    with pytest.raises(RuntimeError, match=msg):
        oplib.tensor([1, 2], requires_grad=True)
    i = oplib.tensor([1])
    with pytest.raises(RuntimeError, match="floating point"):
        i.requires_grad = True
    assert not i.requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        oplib.ones(2, dtype=oplib.int64, requires_grad=True)
    assert oplib.zeros(2, requires_grad=True).requires_grad


def test_detach_shares_data_without_grad():
    t = oplib.tensor([1.0], requires_grad=True)
    d = t.detach()
    assert d.native is t.native
    assert not d.requires_grad
    assert d is not t


# -- factories ----------------------------------------------------------------------------------


def test_factories_shapes_and_dtypes():
    assert oplib.zeros(2, 3).shape == (2, 3)
    assert oplib.zeros((2, 3)).shape == (2, 3)
    assert oplib.zeros([4]).shape == (4,)
    assert oplib.zeros(()).shape == ()
    assert oplib.empty(3).shape == (3,) and oplib.empty(3).dtype == F32
    np.testing.assert_array_equal(oplib.zeros(2).numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(oplib.ones(2).numpy(), [1.0, 1.0])
    assert oplib.zeros(2).dtype == F32
    assert oplib.ones(2, dtype=oplib.int64).dtype == I64
    assert type(oplib.zeros(1)) is oplib.Tensor


def test_full_infers_dtype_from_fill_value():
    assert oplib.full((2,), 1.5).dtype == F32
    assert oplib.full((2,), 3).dtype == I64
    assert oplib.full((2,), True).dtype == np.dtype(bool)
    np.testing.assert_array_equal(oplib.full((2,), 7, dtype=np.float64).numpy(), [7.0, 7.0])


def test_arange():
    t = oplib.arange(4)
    assert t.dtype == I64
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
    t = oplib.arange(0.0, 1.0, 0.25)
    assert t.dtype == F32
    np.testing.assert_array_equal(t.numpy(), [0.0, 0.25, 0.5, 0.75])
    t = oplib.arange(1, 7, 2, dtype=np.float64)
    assert t.dtype == F64
    np.testing.assert_array_equal(t.numpy(), [1.0, 3.0, 5.0])


def test_like_factories_keep_dtype_and_shape():
    base = oplib.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    for fn, value in ((oplib.zeros_like, 0), (oplib.ones_like, 1)):
        t = fn(base)
        assert type(t) is oplib.Tensor
        assert t.shape == (2, 3) and t.dtype == np.dtype("int32")
        assert (t.numpy() == value).all()
    e = oplib.empty_like(base, dtype=np.float64)
    assert e.shape == (2, 3) and e.dtype == F64
    assert oplib.zeros_like(oplib.tensor([1.0]), requires_grad=True).requires_grad


def test_like_factories_on_native_arrays_give_native_arrays():
    out = oplib.zeros_like(np.ones(3, dtype=np.float32))
    assert type(out) is np.ndarray and out.dtype == F32 and (out == 0).all()
    with pytest.raises(TypeError, match="expected a Tensor or a native array"):
        oplib.zeros_like([1.0])


# -- conversions ---------------------------------------------------------------------------------


def test_to_same_device_and_dtype_returns_self():
    t = oplib.tensor([1.0])
    assert t.to("cpu") is t
    assert t.to("cpu:0") is t
    assert t.to(dtype=np.float32) is t
    assert t.cpu() is t
    c = t.to("cpu", copy=True)
    assert c is not t and not np.shares_memory(c.numpy(), t.numpy())


def test_to_dtype_copies():
    t = oplib.tensor([1.5, 2.5])
    d = t.to(dtype=np.float64)
    assert d.dtype == F64
    np.testing.assert_array_equal(d.numpy(), [1.5, 2.5])
    assert t.dtype == F32


def test_to_another_backend_and_back(toy):
    t = oplib.tensor([1.0, 2.0])
    moved = t.to("toy:1")
    assert type(moved.native) is toy
    assert moved.device == oplib.Device("toy", 1)
    assert moved.device.type == "toy"
    assert moved.item() if moved.numel() == 1 else True
    assert moved.tolist() == [1.0, 2.0]
    back = moved.to("cpu")
    assert back.device.type == "cpu"
    np.testing.assert_array_equal(back.numpy(), [1.0, 2.0])
    made = oplib.tensor([3.0], device="toy")
    assert type(made.native) is toy and made.item() == 3.0


def test_numpy_and_array_on_another_backend_refuse(toy):
    t = oplib.tensor(toy(np.zeros(2)))
    assert t.device.type == "toy"
    with pytest.raises(TypeError, match="copy it to the host first"):
        t.numpy()
    with pytest.raises(TypeError, match=r"use tensor.to\('cpu'\) first"):
        np.asarray(t)


def test_numpy_shares_memory():
    t = oplib.tensor([1.0, 2.0])
    n = t.numpy()
    n[0] = 10.0
    assert t.item() if t.numel() == 1 else t.tolist() == [10.0, 2.0]
    assert np.shares_memory(n, t.native)


def test_numpy_refuses_tensor_requiring_grad():
    t = oplib.tensor([1.0], requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match=r"^Can't call numpy\(\) on Tensor that requires grad\. Use tensor.detach\(\)",
    ):
        t.numpy()
    assert t.detach().numpy()[0] == 1.0


def test_array_protocol():
    t = oplib.tensor([1.0, 2.0])
    a = np.asarray(t)
    assert np.shares_memory(a, t.native)
    b = np.array(t, dtype=np.float64)
    assert b.dtype == F64 and not np.shares_memory(b, t.native)
    c = np.array(t)  # numpy's default is to copy
    assert c.dtype == F32
    np.testing.assert_array_equal(c, [1.0, 2.0])


def test_item_and_python_conversions():
    assert oplib.tensor(2.5).item() == 2.5
    assert type(oplib.tensor(2.5).item()) is float
    assert type(oplib.tensor([3]).item()) is int
    assert float(oplib.tensor([2.5])) == 2.5
    assert int(oplib.tensor(7)) == 7
    assert bool(oplib.tensor(True)) is True
    with pytest.raises(RuntimeError, match=r"a Tensor with 2 elements cannot be converted"):
        oplib.tensor([1.0, 2.0]).item()  # torch's error
    assert oplib.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]


# -- DLPack ---------------------------------------------------------------------------------------


def test_dlpack_to_numpy_shares_memory():
    t = oplib.tensor([1.0, 2.0, 3.0])
    a = np.from_dlpack(t)
    assert a.dtype == F32
    assert np.shares_memory(a, t.native)
    a[1] = 20.0
    assert t.tolist() == [1.0, 20.0, 3.0]


def test_from_dlpack_of_numpy_shares_memory():
    a = np.arange(4, dtype=np.float64)
    t = oplib.from_dlpack(a)
    assert type(t) is oplib.Tensor
    assert t.dtype == F64 and t.device.type == "cpu"
    assert np.shares_memory(t.native, a)
    a[0] = 9.0
    assert t.tolist()[0] == 9.0


def test_from_dlpack_round_trip():
    t = oplib.tensor([[1, 2], [3, 4]])
    back = oplib.from_dlpack(t)
    assert np.shares_memory(back.native, t.native)
    assert back.tolist() == [[1, 2], [3, 4]]


def test_from_dlpack_unknown_device_type():
    class OnHexagon:
        def __dlpack_device__(self):
            return (16, 0)  # kDLHexagon: no backend here imports it

        def __dlpack__(self, **kwargs):
            raise AssertionError("never called")

    assert not any(b.spec.dlpack_device_type == 16 for b in oplib.backends.list())
    msg = "no installed backend imports DLPack device type 16"
    with pytest.raises(oplib.BackendError, match=msg):
        oplib.from_dlpack(OnHexagon())


# -- operators ------------------------------------------------------------------------------------


def _check(t, expected, dtype=F32):
    assert type(t) is oplib.Tensor
    assert t.dtype == dtype, (t.dtype, dtype)
    np.testing.assert_allclose(t.numpy(), expected)


def test_arithmetic_with_scalars_keeps_float32():
    t = oplib.tensor([1.0, 2.0])
    _check(t + 1, [2.0, 3.0])
    _check(1 + t, [2.0, 3.0])
    _check(t + 0.5, [1.5, 2.5])
    _check(t - 1, [0.0, 1.0])
    _check(3 - t, [2.0, 1.0])
    _check(t * 2, [2.0, 4.0])
    _check(2.0 * t, [2.0, 4.0])
    _check(t / 2, [0.5, 1.0])
    _check(2 / t, [2.0, 1.0])
    _check(t**2, [1.0, 4.0])
    _check(2**t, [2.0, 4.0])
    _check(-t, [-1.0, -2.0])
    _check(abs(-t), [1.0, 2.0])
    _check(t + np.float64(1.0), [2.0, 3.0])


def test_arithmetic_between_tensors():
    a = oplib.tensor([1.0, 2.0])
    b = oplib.tensor([3.0, 5.0])
    _check(a + b, [4.0, 7.0])
    _check(a - b, [-2.0, -3.0])
    _check(a * b, [3.0, 10.0])
    _check(b / a, [3.0, 2.5])
    _check(a**b, [1.0, 32.0])
    m = oplib.tensor([[1.0, 2.0], [3.0, 4.0]])
    _check(m @ m, [[7.0, 10.0], [15.0, 22.0]])
    _check(m @ a, [5.0, 11.0])


def test_arithmetic_with_numpy_arrays_gives_tensors():
    t = oplib.tensor([1.0, 2.0])
    a = np.array([1.0, 1.0], dtype=np.float32)
    _check(t + a, [2.0, 3.0])
    _check(a + t, [2.0, 3.0])
    _check(a - t, [0.0, -1.0])
    _check(a * t, [1.0, 2.0])
    m = np.eye(2, dtype=np.float32)
    _check(m @ t, [1.0, 2.0])


def test_integer_arithmetic_stays_integer():
    t = oplib.tensor([1, 2])
    _check(t + 1, [2, 3], I64)
    _check(t * t, [1, 4], I64)
    _check(-t, [-1, -2], I64)


def test_comparisons():
    t = oplib.tensor([1.0, 2.0, 3.0])
    u = oplib.tensor([3.0, 2.0, 1.0])
    boolean = np.dtype(bool)
    _check(t == 2, [False, True, False], boolean)
    _check(t != 2, [True, False, True], boolean)
    _check(t < 2, [True, False, False], boolean)
    _check(t <= 2, [True, True, False], boolean)
    _check(t > 2, [False, False, True], boolean)
    _check(t >= 2, [False, True, True], boolean)
    _check(t == u, [False, True, False], boolean)
    _check(t < u, [True, False, False], boolean)
    _check(2 < t, [False, False, True], boolean)  # noqa: SIM300 - the reflected form


def test_tensors_are_hashable_by_identity():
    a, b = oplib.tensor([1.0]), oplib.tensor([1.0])
    assert len({a, b}) == 2


def test_methods():
    t = oplib.tensor([[1.0, 2.0], [3.0, 4.0]])
    _check(t.sum(), 10.0)
    _check(t.sum(0), [4.0, 6.0])
    _check(t.mean(), 2.5)
    _check(t.reshape(4), [1.0, 2.0, 3.0, 4.0])
    _check(t.reshape(1, 4), [[1.0, 2.0, 3.0, 4.0]])
    _check(t.T, [[1.0, 3.0], [2.0, 4.0]])
    _check(t.transpose(0, 1), [[1.0, 3.0], [2.0, 4.0]])
    c = t.clone()
    assert not np.shares_memory(c.numpy(), t.numpy())
    _check(oplib.tensor([0.0]).exp(), [1.0])


def test_operators_with_unsupported_operands():
    t = oplib.tensor([1.0, 2.0])
    assert (t == None) is False  # noqa: E711 - Python falls back to identity, as in torch
    assert (t != None) is True  # noqa: E711
    assert (t == "a") is False
    with pytest.raises(TypeError, match="unsupported operand"):
        t + "a"
    with pytest.raises(TypeError, match="unsupported operand"):
        "a" - t
    with pytest.raises(TypeError):
        _ = t < object()
