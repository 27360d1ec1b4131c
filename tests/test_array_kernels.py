"""The core op set's array kernels, bound to numpy, against plain numpy expressions."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from oplib_core._device import Device
from oplib_core._dtypes import get_default_dtype, set_default_dtype
from oplib_core._opset import CORE_OPS
from oplib_core._schema import parse_schema
from oplib_core._tags import Tag
from oplib_core.kernels import array_kernels, check_kernels

from helpers import NUMPY_BINARY

K = array_kernels(np)
F32 = np.float32


def _name_from_text(schema: str) -> str:
    m = re.fullmatch(r"oplib::([\w.]+)\(.*", schema)
    assert m is not None, schema
    return m.group(1)


@pytest.fixture
def float64_default():
    set_default_dtype(np.float64)
    yield
    set_default_dtype(np.float32)


# -- the table and the kernels correspond ---------------------------------------------------


def test_schemas_and_kernels_correspond_one_to_one():
    names = [_name_from_text(op.schema) for op in CORE_OPS]
    assert len(names) == len(set(names))
    assert set(names) == set(K)
    assert [op.name for op in CORE_OPS] == names
    check_kernels(K)


def test_check_kernels_names_missing_and_extra():
    broken = dict(K)
    del broken["add.Scalar"]
    broken["frobnicate"] = K["add"]
    with pytest.raises(ValueError, match=r"add\.Scalar.*frobnicate"):
        check_kernels(broken)


@pytest.mark.parametrize("op", CORE_OPS, ids=lambda op: op.name)
def test_kernel_parameters_match_schema_arguments(op):
    args = parse_schema(op.schema).arguments
    params = list(inspect.signature(K[op.name]).parameters.values())
    assert [p.name for p in params] == [a.name for a in args]
    for p, a in zip(params, args, strict=True):
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if a.kwarg_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        assert p.kind is kind, p.name


def test_tags():
    by_name = {op.name: op for op in CORE_OPS}
    assert Tag.pointwise in by_name["add.Scalar"].tags
    assert Tag.pointwise in by_name["where"].tags
    assert Tag.reduction in by_name["sum"].tags
    assert Tag.factory in by_name["arange.start"].tags
    assert by_name["matmul"].tags == ()
    assert "_to_copy" not in by_name
    assert "Tensor(a) self" in by_name["reshape"].schema


# -- pointwise --------------------------------------------------------------------------------

UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "abs": np.abs,
    "sqrt": np.sqrt,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary(name, dtype):
    x = np.array([[0.5, 1.0, 2.0], [3.0, 0.25, 4.0]], dtype)
    if name in ("neg", "sin", "cos", "tanh", "abs", "relu", "sigmoid"):
        x = x - 2
    out = K[name](x)
    assert isinstance(out, np.ndarray)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, UNARY[name](x), rtol=1e-6)


def test_unary_on_0d_returns_array_not_scalar():
    out = K["exp"](np.array(0.0, F32))
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == F32


def test_relu_keeps_integer_dtype():
    out = K["relu"](np.array([-2, 0, 3], np.int32))
    assert out.dtype == np.int32
    assert out.tolist() == [0, 0, 3]
    assert np.isnan(K["relu"](np.array([np.nan]))[0])


def test_sigmoid_is_stable_for_large_inputs():
    x = np.array([-1000.0, -80.0, 0.0, 80.0, 1000.0], F32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        out = K["sigmoid"](x)
    assert out.dtype == F32
    np.testing.assert_allclose(out, [0.0, np.exp(-80.0), 0.5, 1.0, 1.0], rtol=1e-6)
    assert out[1] > 0  # no underflow to 0 through 1 / (1 + inf)


@pytest.mark.parametrize("name", sorted(NUMPY_BINARY))
def test_binary_broadcasts_and_promotes_like_numpy(name):
    a = np.arange(1, 7, dtype=F32).reshape(2, 3)
    b = np.array([1.0, 2.0, 3.0], np.float64)
    out = K[name](a, b)
    want = NUMPY_BINARY[name](a, b)
    assert out.shape == (2, 3)
    assert out.dtype == want.dtype
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_return_bool(name):
    a = np.array([1, 2, 3], np.int32)
    assert K[name](a, np.array([2, 2, 2], np.int8)).dtype == np.bool_
    out = K[f"{name}.Scalar"](a, 2)
    assert out.dtype == np.bool_
    assert out.tolist() == NUMPY_BINARY[name](a, 2).tolist()


def test_scalar_forms_keep_float32():
    x = np.array([1.0, 2.0, 4.0], F32)
    for name in ("add", "sub", "mul", "div", "pow", "rsub", "rdiv", "rpow"):
        assert K[f"{name}.Scalar"](x, 2.0).dtype == F32, name


def test_reversed_scalar_forms():
    x = np.array([1.0, 2.0, 4.0], F32)
    np.testing.assert_allclose(K["rsub.Scalar"](x, 2.0), 2.0 - x)
    np.testing.assert_allclose(K["rdiv.Scalar"](x, 2.0), 2.0 / x)
    np.testing.assert_allclose(K["rpow.Scalar"](x, 2.0), 2.0**x)
    np.testing.assert_allclose(K["sub.Scalar"](x, 2.0), x - 2.0)
    np.testing.assert_allclose(K["pow.Scalar"](x, 2.0), x**2.0)


def test_integer_promotion_follows_numpy():
    i32 = np.array([1, 2, 3], np.int32)
    i64 = np.array([4, 5, 6], np.int64)
    assert K["add"](i32, i64).dtype == np.int64
    assert K["add.Scalar"](np.array([1, 2], np.int8), 3).dtype == np.int8
    assert K["add.Scalar"](i32, 0.5).dtype == np.float64
    assert K["add"](i32, np.array([1.0], F32)).dtype == np.float64
    # div is numpy's true division: int / int -> float64
    out = K["div"](np.array([1, 3]), np.array([2, 2]))
    assert out.dtype == np.float64 and out.tolist() == [0.5, 1.5]
    assert K["div.Scalar"](i32, 2).dtype == np.float64


def test_where():
    cond = np.array([True, False, True])
    a = np.ones((2, 3), F32)
    b = np.zeros(3, F32)
    out = K["where"](cond, a, b)
    assert out.dtype == F32
    np.testing.assert_array_equal(out, np.where(cond, a, b))


# -- reductions -------------------------------------------------------------------------------

X = np.arange(24, dtype=F32).reshape(2, 3, 4)


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("mean", np.mean)])
@pytest.mark.parametrize(
    "dim,keepdim",
    [
        (None, False),
        ([], False),
        ([], True),
        ([0], False),
        ([-1], True),
        ([0, 2], False),
        ([-1, -3], True),
        ([1], True),
    ],
)
def test_sum_and_mean(name, ref, dim, keepdim):
    out = K[name](X, dim, keepdim, dtype=None)
    axis = tuple(dim) if dim else None
    want = ref(X, axis=axis, keepdims=keepdim)
    assert isinstance(out, np.ndarray)
    assert out.dtype == F32
    assert out.shape == np.shape(want)
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize("name,ref", [("amax", np.amax), ("amin", np.amin)])
@pytest.mark.parametrize("dim,keepdim", [(None, False), ([], True), ([1], False), ([-1, 0], True)])
def test_amax_amin(name, ref, dim, keepdim):
    out = K[name](X, dim, keepdim)
    axis = tuple(dim) if dim else None
    want = ref(X, axis=axis, keepdims=keepdim)
    assert isinstance(out, np.ndarray) and out.dtype == F32
    np.testing.assert_array_equal(out, want)


def test_full_reduction_returns_0d_array():
    out = K["sum"](X, None, False, dtype=None)
    assert isinstance(out, np.ndarray) and out.shape == ()
    assert K["sum"](np.array(3.0, F32), [0], False, dtype=None).shape == ()
    with pytest.raises(IndexError, match="Dimension out of range"):
        K["sum"](np.array(3.0, F32), [1], False, dtype=None)


def test_sum_integer_and_bool_accumulate_in_int64():
    assert K["sum"](np.ones(3, np.int8), None, False, dtype=None).dtype == np.int64
    assert K["sum"](np.ones(3, np.int32), [0], False, dtype=None).dtype == np.int64
    out = K["sum"](np.array([True, True, False]), None, False, dtype=None)
    assert out.dtype == np.int64 and out == 2
    assert K["sum"](np.full(300, 1, np.uint8), None, False, dtype=None) == 300


def test_sum_with_dtype():
    out = K["sum"](np.ones(3, np.int32), None, False, dtype=np.dtype(np.float64))
    assert out.dtype == np.float64 and out == 3.0


def test_mean_of_integer_input_needs_dtype():
    x = np.arange(4, dtype=np.int64)
    with pytest.raises(TypeError, match=r"mean\(\).*floating point.*Got: int64.*dtype="):
        K["mean"](x, None, False, dtype=None)
    with pytest.raises(TypeError, match=r"mean\(\).*Got: bool"):
        K["mean"](np.array([True]), None, False, dtype=None)
    with pytest.raises(TypeError, match=r"Optional dtype.*Got: int32"):
        K["mean"](x, None, False, dtype=np.dtype(np.int32))
    out = K["mean"](x, None, False, dtype=np.dtype(F32))
    assert out.dtype == F32 and out == 1.5


# -- matmul -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((5, 1, 2, 3), (7, 3, 4)),
    ],
)
def test_matmul(sa, sb):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(F32)
    b = rng.standard_normal(sb).astype(F32)
    out = K["matmul"](a, b)
    want = np.matmul(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == F32 and out.shape == np.shape(want)
    np.testing.assert_allclose(out, want, rtol=1e-5)


# -- shape ops --------------------------------------------------------------------------------


def test_transpose_permute():
    assert K["transpose"](X, 0, -1).shape == (4, 3, 2)
    np.testing.assert_array_equal(K["transpose"](X, 0, 2), np.swapaxes(X, 0, 2))
    np.testing.assert_array_equal(K["permute"](X, [2, 0, 1]), np.transpose(X, (2, 0, 1)))
    assert K["transpose"](np.array(1.0), 0, -1).shape == ()


def test_reshape():
    assert K["reshape"](X, [6, -1]).shape == (6, 4)
    assert K["reshape"](X, [-1]).shape == (24,)
    assert np.shares_memory(K["reshape"](X, [4, 6]), X)  # a view where numpy makes one


def test_broadcast_to():
    x = np.arange(3, dtype=F32)
    out = K["broadcast_to"](x, [2, 3])
    np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 3)))
    assert K["broadcast_to"](np.ones((1, 3)), [4, 2, -1, 3]).shape == (4, 2, 1, 3)
    with pytest.raises(ValueError, match="-1"):
        K["broadcast_to"](x, [-1, 3])


def test_unsqueeze_squeeze():
    x = np.zeros((1, 2, 1), F32)
    assert K["unsqueeze"](x, 0).shape == (1, 1, 2, 1)
    assert K["unsqueeze"](x, -1).shape == (1, 2, 1, 1)
    assert K["squeeze"](x, None).shape == (2,)
    assert K["squeeze"](x, [0]).shape == (2, 1)
    assert K["squeeze"](x, [-1]).shape == (1, 2)
    assert K["squeeze"](x, [1]).shape == (1, 2, 1)  # size != 1: left alone, as in torch
    assert K["squeeze"](x, []).shape == (1, 2, 1)
    with pytest.raises(IndexError):
        K["squeeze"](x, [3])


def test_cat_stack():
    a = np.ones((2, 3), F32)
    b = np.zeros((1, 3), np.float64)
    out = K["cat"]([a, b], 0)
    assert out.shape == (3, 3) and out.dtype == np.float64
    assert K["cat"]([a, a], -1).shape == (2, 6)
    assert K["stack"]([a, a], 0).shape == (2, 2, 3)
    assert K["stack"]([a, a], -1).shape == (2, 3, 2)


# -- copies -----------------------------------------------------------------------------------


def test_clone_never_aliases():
    for x in (X, X.transpose(2, 0, 1), np.array(2.0, F32)):
        out = K["clone"](x)
        assert isinstance(out, np.ndarray)
        assert not np.shares_memory(out, x)
        np.testing.assert_array_equal(out, x)
        assert out.dtype == x.dtype


def test_copy_writes_in_place_with_broadcasting():
    dst = np.zeros((2, 3), F32)
    src = np.array([1, 2, 3], np.int64)
    out = K["copy_"](dst, src)
    assert out is dst
    np.testing.assert_array_equal(dst, [[1, 2, 3], [1, 2, 3]])
    assert dst.dtype == F32


def test_astype_copies():
    out = K["astype"](X, np.dtype(F32))
    assert out.dtype == F32 and not np.shares_memory(out, X)
    assert K["astype"](X, np.dtype(np.int16)).dtype == np.int16


# -- factories --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["empty", "zeros", "ones"])
def test_empty_zeros_ones(name):
    out = K[name]([2, 3], dtype=None, device=None)
    assert out.shape == (2, 3) and out.dtype == get_default_dtype() == F32
    out = K[name]((4,), dtype=np.dtype(np.int32), device=Device("cpu"))
    assert out.shape == (4,) and out.dtype == np.int32
    if name != "empty":
        assert (out == (0 if name == "zeros" else 1)).all()


def test_factories_follow_default_dtype(float64_default):
    assert K["zeros"]([1], dtype=None, device=None).dtype == np.float64
    assert K["full"]([1], 1.5, dtype=None, device=None).dtype == np.float64
    assert K["arange"](2.0, dtype=None, device=None).dtype == np.float64


@pytest.mark.parametrize(
    "fill,dtype", [(True, np.bool_), (3, np.int64), (2.5, np.float32), (1 + 2j, np.complex64)]
)
def test_full_infers_dtype_from_fill(fill, dtype):
    out = K["full"]([2, 2], fill, dtype=None, device=None)
    assert out.dtype == dtype and (out == fill).all()
    given = np.dtype(np.complex128 if isinstance(fill, complex) else np.float64)
    assert K["full"]([2], fill, dtype=given, device=None).dtype == given


def test_arange():
    out = K["arange"](5, dtype=None, device=None)
    assert out.dtype == np.int64 and out.tolist() == [0, 1, 2, 3, 4]
    assert K["arange"](3.0, dtype=None, device=None).dtype == F32
    out = K["arange.start"](1, 7, 2, dtype=None, device=None)
    assert out.dtype == np.int64 and out.tolist() == [1, 3, 5]
    out = K["arange.start"](0, 1, 0.25, dtype=None, device=None)
    assert out.dtype == F32 and out.tolist() == [0.0, 0.25, 0.5, 0.75]
    assert K["arange.start"](0, 4, 1, dtype=np.dtype(np.int32), device=None).dtype == np.int32


def test_core_op_writes_names_the_ops_that_write_into_an_argument():
    writes = {op.name for op in CORE_OPS if op.writes}
    assert {"copy_", "add_.Tensor", "zero_", "index_put_", "add.out"} <= writes
    assert not writes & {"add", "index_put", "clamp", "reshape", "select.int"}
    assert all(op.name.endswith(("_", "out")) or "_." in op.name for op in CORE_OPS if op.writes)


# -- the fast path's entry: the namespace's own function where a kernel is exactly it -----------


def test_a_unary_kernel_on_a_namespace_returning_arrays_offers_its_function_to_the_fast_path():
    """On namespaces whose functions return arrays (cupy, jax, array_api_strict...), a unary
    pointwise kernel is exactly ``fn(x)``: the fast path may call ``fn`` in its place."""
    xs = pytest.importorskip("array_api_strict")
    kernels = array_kernels(xs)
    assert kernels["neg"].fast_entry is xs.negative  # type: ignore[attr-defined]
    assert kernels["exp"].fast_entry is xs.exp  # type: ignore[attr-defined]
    x = xs.asarray([1.0, -2.0])
    assert xs.all(kernels["neg"](x) == kernels["neg"].fast_entry(x))  # type: ignore[attr-defined]
    # binary kernels promote bfloat16/float8 operands first: only cupy's (which has no such
    # dtypes) are exactly its function
    assert not hasattr(kernels["add"], "fast_entry")
    # numpy's give 0-d results as numpy scalars: its kernels make them arrays, no entry
    assert not hasattr(K["neg"], "fast_entry") and not hasattr(K["add"], "fast_entry")


@pytest.mark.fastpath
def test_the_fast_path_calls_the_namespace_function_and_errors_still_name_the_kernel():
    """The dispatcher follows the kernel's ``fast_entry``; an exception raised there gets
    the note naming the registered kernel, as one raised by the kernel itself would."""
    import oplib_core as oplib
    from tests import strict_backend

    xs = pytest.importorskip("array_api_strict")
    uninstall = strict_backend.install()
    try:
        op = oplib.ops.oplib.neg.default
        x = xs.asarray([1.0, -2.0])
        assert xs.all(op(x) == xs.asarray([-1.0, 2.0]))
        assert op._opcache.by_type[type(x)] is xs.negative
        with pytest.raises(TypeError) as info:
            op(xs.asarray([True, False]))  # the standard's negative takes numbers only
        notes = info.value.__notes__
        assert any("by the strict kernel of oplib::neg" in note for note in notes), notes
    finally:
        uninstall()
