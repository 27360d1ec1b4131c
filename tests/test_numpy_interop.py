"""numpy functions on Tensors (issue 14): those with a core op dispatch it and keep the
graph and the device; the others compute in numpy only when that loses nothing.

torch 2.13 for comparison (no ``__array_ufunc__``, an ``__array_wrap__``): ``np.sin(t)`` on
a tensor that requires grad raises "Can't call numpy() on Tensor that requires grad. Use
tensor.detach().numpy() instead.", on a plain one returns a Tensor without graph;
``np.sum(t)`` raises "sum() got an unexpected keyword argument 'axis'";
``np.concatenate([t, u])`` returns an ndarray; ``np.float64(2) * t`` is a Tensor;
``np.asarray(t, dtype=np.float64, copy=False)`` on float32 raises ValueError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oplib_core as oplib
from oplib_core._opset import CORE_OPS
from oplib_core._tensor import numpy_interop as interop

A = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)
B = np.array([[1.0, 2.0, -0.5], [0.5, -2.0, 3.0]], dtype=np.float32)


def _leaf(data: np.ndarray = A) -> oplib.Tensor:
    return oplib.tensor(data.copy(), requires_grad=True)


def _device(name: str) -> str:
    if name not in {b.name for b in oplib.backends.list()}:
        pytest.skip(f"{name} is not installed")
    return name


# -- the tables -----------------------------------------------------------------------------
def test_every_mapped_op_is_a_core_op() -> None:
    names = {op.name for op in CORE_OPS}
    mapped: set[str] = set()
    for entry in interop.UFUNCS.values():
        mapped.update([entry] if isinstance(entry, str) else entry.ops())
    mapped.update(interop.REDUCTIONS.values())
    mapped.update(f.op for f in interop.FUNCTIONS.values())
    assert mapped <= names, mapped - names
    for name in interop.UFUNCS:
        assert isinstance(getattr(np, name), np.ufunc)


def test_the_docs_list_every_mapped_numpy_function() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "numpy-interop.md").read_text()
    names = [f"np.{name}" for name in interop.UFUNCS]
    names += [f"np.{name}.reduce" for name in interop.REDUCTIONS]
    names += [interop._numpy_name(fn) for fn in interop.FUNCTIONS]
    missing = [name for name in names if f"`{name}`" not in doc and f"`{name}(" not in doc]
    assert not missing


def _ufunc_inputs(name: str) -> list[tuple[Any, Any]]:
    if name == "matmul":
        return [(A, B.T)]
    pos_a, pos_b = np.abs(A) + 0.5, np.abs(B) + 0.5  # log, sqrt, power stay real
    return [(pos_a, pos_b), (pos_a, 1.5), (2.0, pos_b), (np.float32(3.0), pos_b)]


@pytest.mark.parametrize("name", sorted(interop.UFUNCS))
def test_every_ufunc_agrees_with_numpy_and_returns_a_tensor(name: str) -> None:
    ufunc = getattr(np, name)
    for a, b in _ufunc_inputs(name):
        if ufunc.nin == 1 and not isinstance(a, np.ndarray):
            continue
        args = (a,) if ufunc.nin == 1 else (a, b)
        want = ufunc(*args)
        got = ufunc(*(oplib.tensor(x) if isinstance(x, np.ndarray) else x for x in args))
        assert type(got) is oplib.Tensor, name
        assert got.dtype == want.dtype, (name, args)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


# -- gradients --------------------------------------------------------------------------------
def test_np_sin_keeps_the_graph() -> None:
    t = _leaf()
    y = np.sin(t)
    assert type(y) is oplib.Tensor and y.grad_fn is not None
    np.sum(y).backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), np.cos(A), rtol=1e-6)


def test_np_add_and_reflected_operators_keep_the_graph() -> None:
    t, u = _leaf(A), _leaf(B)
    y = np.add(t, u) + np.add(t, 1) + np.float64(2) * t - np.subtract(1.0, u)
    assert type(y) is oplib.Tensor
    y.sum().backward()
    assert t.grad is not None and u.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), np.full_like(A, 4.0))
    np.testing.assert_allclose(u.grad.numpy(), np.full_like(B, 2.0))


def test_np_sum_axis_keepdims_dtype() -> None:
    t = _leaf()
    s = np.sum(t, axis=1, keepdims=True)
    assert s.shape == (2, 1) and s.grad_fn is not None
    (s * oplib.tensor([[1.0], [3.0]])).sum().backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), [[1.0] * 3, [3.0] * 3])
    assert np.sum(t, dtype=np.float64).dtype == np.float64
    np.testing.assert_allclose(np.sum(t, axis=(0, 1)).item(), A.sum(), rtol=1e-6)
    assert np.add.reduce(t).shape == (3,)  # ufunc.reduce's axis defaults to 0
    np.testing.assert_allclose(np.maximum.reduce(t, axis=None).item(), A.max())


def test_np_concatenate_and_stack_keep_the_graph() -> None:
    t, u = _leaf(A), _leaf(B)
    c = np.concatenate([t, u], axis=1)
    assert c.shape == (2, 6) and c.grad_fn is not None
    weights = oplib.tensor(np.arange(12.0, dtype=np.float32).reshape(2, 6))
    (c * weights).sum().backward()
    assert t.grad is not None and u.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), weights.numpy()[:, :3])
    np.testing.assert_allclose(u.grad.numpy(), weights.numpy()[:, 3:])
    assert np.concatenate([t, u], axis=None).shape == (12,)  # numpy flattens first
    assert np.stack([t, u], axis=-1).shape == (2, 3, 2)


def test_shape_functions_map_to_core_ops() -> None:
    t = _leaf()
    cases = [
        (np.transpose(t), np.transpose(A)),
        (np.transpose(t, (1, 0)), np.transpose(A, (1, 0))),
        (np.permute_dims(t), np.permute_dims(A)),
        (np.swapaxes(t, 0, 1), np.swapaxes(A, 0, 1)),
        (np.reshape(t, (3, 2)), np.reshape(A, (3, 2))),
        (np.reshape(t, -1), np.reshape(A, -1)),
        (np.squeeze(np.expand_dims(t, 0)), A),
        (np.expand_dims(t, (0, -1)), np.expand_dims(A, (0, -1))),
        (np.broadcast_to(t, (4, 2, 3)), np.broadcast_to(A, (4, 2, 3))),
        (np.mean(t, axis=0), np.mean(A, axis=0)),
        (np.max(t, axis=1), np.max(A, axis=1)),
        (np.amin(t), np.amin(A)),
        (np.where(t > 0, t, 0.0), np.where(A > 0, A, 0.0)),
        (np.where(t > 0, 1.0, t), np.where(A > 0, 1.0, A)),
        (np.copy(t), A),
        (np.linalg.matmul(t, np.transpose(t)), A @ A.T),
        (np.maximum(t, 0), np.maximum(A, 0)),
    ]
    for got, want in cases:
        assert type(got) is oplib.Tensor and got.grad_fn is not None
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-6)
    assert np.astype(t, np.float64).dtype == np.float64


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: np.sin(x) * np.add(x, y),
        lambda x, y: np.sum(np.concatenate([x, y], axis=1), axis=0),
        lambda x, y: np.maximum(x, 0.1) + np.where(y > 0, y, 2.0),
        lambda x, y: np.float64(3) / np.sqrt(np.abs(x) + 1) - np.ones((2, 3)) * y,
        lambda x, y: np.matmul(x, np.transpose(y)),
    ],
)
def test_gradcheck_through_numpy_calls(fn: Any) -> None:
    x, y = (oplib.tensor(a.astype(np.float64), requires_grad=True) for a in (A, B))
    assert oplib.autograd.gradcheck(fn, [x, y])


@given(
    data=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1),
        elements=st.floats(-1e3, 1e3, width=32),
    ),
    fn=st.sampled_from([np.sum, np.mean, np.max, np.amin]),
    keepdims=st.booleans(),
    choose=st.data(),
)
def test_reductions_agree_with_numpy(
    data: np.ndarray, fn: Any, keepdims: bool, choose: st.DataObject
) -> None:
    dims = list(range(-data.ndim, data.ndim))
    axis = choose.draw(
        st.none()
        | st.sampled_from(dims)
        | st.lists(st.sampled_from(range(data.ndim)), min_size=1, unique=True).map(tuple)
    )
    want = fn(data, axis=axis, keepdims=keepdims)
    got = fn(oplib.tensor(data), axis=axis, keepdims=keepdims)
    assert type(got) is oplib.Tensor and got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-3)


# -- reflected operators stay Tensors ----------------------------------------------------------
def test_numpy_on_the_left_gives_a_tensor_not_an_object_array() -> None:
    t = oplib.tensor([1.0, 2.0, 3.0])
    for got, want in [
        (np.float64(2) * t, [2.0, 4.0, 6.0]),
        (np.float32(1) - t, [0.0, -1.0, -2.0]),
        (np.float64(6) / t, [6.0, 3.0, 2.0]),
        (np.float64(2) ** t, [2.0, 4.0, 8.0]),
        (np.ones(3) + t, [2.0, 3.0, 4.0]),
        (np.ones(3) - t, [0.0, -1.0, -2.0]),
        (np.ones(3) * t, [1.0, 2.0, 3.0]),
        (np.ones(3) @ t, 6.0),
        (np.float64(2) < t, [False, False, True]),
        (np.ones(3) == t, [True, False, False]),
    ]:
        assert type(got) is oplib.Tensor, got
        np.testing.assert_allclose(got.numpy(), want)
    # numpy scalars are weak, as Python scalars: float32 stays float32
    assert (np.float64(2) * t).dtype == np.float32
    assert (np.ones(3) + t).dtype == np.float64  # an array promotes as in numpy


def test_numpy_in_place_into_an_ndarray_still_works() -> None:
    nd = np.ones(3)
    nd += oplib.tensor([1.0, 2.0, 3.0])
    assert type(nd) is np.ndarray
    np.testing.assert_array_equal(nd, [2.0, 3.0, 4.0])


def test_operands_oplib_does_not_know_are_left_to_numpy() -> None:
    t = oplib.tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        np.add(t, "x")  # type: ignore[call-overload]


# -- devices and data-less tensors ---------------------------------------------------------
@pytest.mark.parametrize("device", ["privateuse1", "meta", "dask"])
def test_results_stay_on_the_device(device: str) -> None:
    t = oplib.tensor(A).to(_device(device))
    calls = [
        ("sin", lambda: np.sin(t)),
        ("add.Scalar", lambda: np.add(t, 1)),
        ("add.Scalar", lambda: np.add(1, t)),
        ("mul.Scalar", lambda: np.float64(2) * t),
        ("maximum", lambda: np.maximum(t, 0)),
        ("sum", lambda: np.sum(t, axis=0)),
        ("where", lambda: np.where(t > 0, t, 0.0)),
        ("permute", lambda: np.transpose(t)),
        ("cat", lambda: np.concatenate([t, t])),
    ]
    lacking = {"dask": {"permute", "cat"}}.get(device, set())  # no dask kernels for these
    ran = [call() for op, call in calls if op not in lacking]
    for got in ran:
        assert type(got) is oplib.Tensor and got.device.type == device
    if device != "meta":
        np.testing.assert_allclose(np.sin(t).to("cpu").numpy(), np.sin(A), rtol=1e-6)
    assert np.shape(t) == A.shape and np.ndim(t) == 2 and np.size(t) == 6
    assert np.size(t, 1) == 3 and np.result_type(t, np.float64) == np.float64


def test_gradient_on_privateuse1() -> None:
    t = oplib.tensor(A).to(_device("privateuse1")).requires_grad_()
    np.sum(np.sin(t)).backward()
    assert t.grad is not None and t.grad.device.type == "privateuse1"
    np.testing.assert_allclose(t.grad.to("cpu").numpy(), np.cos(A), rtol=1e-6)


def test_fake_tensors() -> None:
    mode = oplib.FakeTensorMode()
    with mode:
        f = mode.from_real(oplib.tensor(A))
        out = np.concatenate([np.sin(f), np.add(f, 1)], axis=0)
        assert type(out) is oplib.Tensor and out.shape == (4, 3)
        assert "FakeTensor" in repr(np.sum(f))
        with pytest.raises(oplib.DataAccessError, match=r"np\.cumsum\(\), which has no oplib op"):
            np.cumsum(f)


# -- numpy functions without an oplib op -----------------------------------------------------
def test_without_an_op_plain_cpu_tensors_convert() -> None:
    t = oplib.tensor([1.0, 2.0, 3.0])
    cumsum = np.cumsum(t)
    assert type(cumsum) is np.ndarray
    np.testing.assert_array_equal(cumsum, [1.0, 3.0, 6.0])
    tan = np.tan(t)  # a ufunc: back as a Tensor, as torch's __array_wrap__ does
    assert type(tan) is oplib.Tensor
    np.testing.assert_allclose(tan.numpy(), np.tan([1.0, 2.0, 3.0]), rtol=1e-6)
    assert type(np.add.accumulate(t)) is oplib.Tensor


def test_without_an_op_a_tensor_that_requires_grad_raises() -> None:
    t = _leaf()
    with pytest.raises(
        RuntimeError,
        match=r"^np\.cumsum\(\) has no oplib op, so it would run in numpy on the data and drop "
        r"the autograd graph: Can't call numpy\(\) on Tensor that requires grad",
    ):
        np.cumsum(t)
    with pytest.raises(RuntimeError, match=r"^np\.tan\(\) has no oplib op"):
        np.tan(t)
    with pytest.raises(RuntimeError, match=r"^np\.add\.accumulate\(\) has no oplib op"):
        np.add.accumulate(t)
    with pytest.raises(RuntimeError, match=r"^np\.cumsum\(\) has no oplib op"):
        np.cumsum(oplib.tensor(A) * t)  # a non-leaf too


@pytest.mark.parametrize("device", ["privateuse1", "meta"])
def test_without_an_op_off_the_cpu_raises(device: str) -> None:
    t = oplib.tensor(A).to(_device(device))
    error = TypeError if device == "privateuse1" else oplib.DataAccessError
    with pytest.raises(error, match=r"np\.cumsum\(\), which has no oplib op"):
        np.cumsum(t)
    with pytest.raises(error, match=r"np\.tan\(\), which has no oplib op"):
        np.tan(t)


# -- arguments that do not map ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "api", "argument"),
    [
        (lambda t: np.sum(t, where=np.array([True, False, True])), "np.sum", "where"),
        (lambda t: np.sum(t, initial=1.0), "np.sum", "initial"),
        (lambda t: np.mean(t, out=np.empty(())), "np.mean", "out"),
        (lambda t: np.max(t, initial=0.0), "np.max", "initial"),
        (lambda t: np.add(t, 1, out=(t,)), "np.add", "out"),
        (lambda t: np.sin(t, where=np.array([True, False, True])), "np.sin", "where"),
        (lambda t: np.add(t, t, casting="unsafe"), "np.add", "casting"),
        (lambda t: np.matmul(t, t, axes=[(0,), (0,), ()]), "np.matmul", "axes"),
        (lambda t: np.add.reduce(t, initial=1.0), "np.add", "initial"),
        (lambda t: np.maximum.reduce(t, dtype=np.float64), "np.maximum", "dtype"),
        (lambda t: np.reshape(t, (3,), order="F"), "np.reshape", "order"),
        (lambda t: np.concatenate([t, t], dtype=np.float64), "np.concatenate", "dtype"),
        (lambda t: np.where(t > 0), "np.where", "x"),
        (lambda t: np.copy(t, order="F"), "np.copy", "order"),
    ],
)
def test_unsupported_arguments_name_the_function_and_the_argument(
    call: Any, api: str, argument: str
) -> None:
    t = oplib.tensor([1.0, 2.0, 3.0])
    with pytest.raises(
        oplib.ArgumentTypeError, match=rf"^{api}\(\): argument '{argument}' .* is not supported"
    ) as info:
        call(t)
    assert info.value.api == api and info.value.argument == argument
    assert isinstance(info.value, TypeError)


def test_default_values_given_explicitly_are_accepted() -> None:
    t = oplib.tensor([1.0, 2.0, 3.0])
    assert np.sum(t, out=None, keepdims=False).shape == ()
    assert np.add(t, 1, casting="same_kind", where=True, out=None).shape == (3,)
    assert np.reshape(t, (3, 1), order="C").shape == (3, 1)
    assert np.sin(t, dtype=np.float64).dtype == np.float64  # dtype: a cast first


# -- np.asarray and __array__ ----------------------------------------------------------------
def test_asarray_of_a_tensor_that_requires_grad_raises_as_numpy_does() -> None:
    t = _leaf()
    message = r"^Can't call numpy\(\) on Tensor that requires grad\. Use tensor\.detach\(\)"
    with pytest.raises(RuntimeError, match=message):
        np.asarray(t)
    with pytest.raises(RuntimeError, match=message):
        t.numpy()
    with pytest.raises(RuntimeError, match=message):
        np.array(t)
    np.testing.assert_array_equal(np.asarray(t.detach()), A)


def test_asarray_without_grad_follows_numpy_2s_copy_contract() -> None:
    t = oplib.tensor(A)
    shared = np.asarray(t)
    assert np.shares_memory(shared, t.native)
    assert np.shares_memory(np.asarray(t, copy=False), t.native)
    copied = np.array(t, copy=True)
    assert not np.shares_memory(copied, t.native)
    np.testing.assert_array_equal(copied, A)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.asarray(t, dtype=np.float64, copy=False)


@pytest.mark.parametrize("device", ["privateuse1", "meta"])
def test_asarray_off_the_cpu_raises(device: str) -> None:
    t = oplib.tensor(A).to(_device(device))
    error = TypeError if device == "privateuse1" else oplib.DataAccessError
    with pytest.raises(error, match=r"Tensor\.__array__"):
        np.asarray(t)
