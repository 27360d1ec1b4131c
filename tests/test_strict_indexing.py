"""The indexing and in-place core kernels on ``array_api_strict``: where the standard lacks
numpy's function (``pad``, indexing with slices between index arrays, ``put_along_axis``,
``add.at``, writes at index arrays) the kernels take the standard's way, and must agree with
the numpy-bound kernels element for element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_strict as xs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core.kernels import array_kernels
from tests import strict_backend

NP = array_kernels(np)
XS = array_kernels(xs)


def _strict(data: Any) -> Any:
    return xs.asarray(np.array(data), copy=True)


def _host(a: Any) -> np.ndarray:
    return np.from_dlpack(a)


def _both(name: str, make: Callable[[Any], tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Op ``name`` on numpy and on strict arrays made by ``make(asarray)``."""
    expected = NP[name](*make(np.array))  # copies: in-place kernels must not write into X
    got = XS[name](*make(_strict))
    return _host(got), np.asarray(expected)


def _agree(name: str, make: Callable[[Any], tuple[Any, ...]]) -> None:
    got, expected = _both(name, make)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


X = np.arange(12.0).reshape(3, 4)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-1, 3), min_size=2, max_size=4).filter(lambda w: len(w) % 2 == 0),
    st.sampled_from(["constant", "reflect", "replicate", "circular"]),
    st.sampled_from([np.float64, np.int64]),
)
def test_pad_without_a_namespace_pad_agrees_with_numpys(widths, mode, dtype):
    assert not hasattr(xs, "pad")
    if mode != "constant":
        widths = [max(w, 0) for w in widths]  # only constant padding crops
        if mode == "reflect":
            widths = [min(w, 2) for w in widths]  # reflect: less than the dim's size
    x = X.astype(dtype)
    _agree("pad", lambda a: (a(x), widths, mode, 1.5))


def test_pad_with_zero_widths_is_a_copy():
    x = xs.asarray(X)
    out = XS["pad"](x, [0, 0], "replicate", None)
    assert out is not x
    np.testing.assert_array_equal(_host(out), X)


@pytest.mark.parametrize(
    "key",
    [
        lambda a: [a([2, 0, 2]), None],
        lambda a: [None, a([3, -1])],
        lambda a: [a([[0], [2]]), a([1, 3, 0])],
        lambda a: [a([True, False, True])],
        lambda a: [a(X > 5)],
    ],
    ids=["rows", "columns", "broadcast", "mask", "2-d mask"],
)
def test_index_with_slices_between_index_arrays_agrees_with_numpys(key):
    _agree("index.Tensor", lambda a: (a(X), key(a)))


def test_index_out_of_bounds_names_the_dimension():
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 1 with size 4"):
        XS["index.Tensor"](xs.asarray(X), [None, xs.asarray([5])])


IDX = np.array([[1, 1, 0], [2, 2, 2]])


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("scatter.src", lambda a: (a(np.zeros((3, 4))), 1, a(IDX), a(X))),
        ("scatter.value", lambda a: (a(np.zeros((3, 4))), 0, a(IDX), 2.5)),
        ("scatter_add", lambda a: (a(X), 1, a(IDX), a(X))),
        ("scatter_add", lambda a: (a(X.astype(np.int64)), 0, a(IDX), a(X.astype(np.int64)))),
        ("gather", lambda a: (a(X), 1, a(IDX))),
    ],
    ids=["scatter.src", "scatter.value", "scatter_add", "scatter_add int64", "gather"],
)
def test_scatter_without_put_along_axis_agrees_with_numpys(name, args):
    assert not hasattr(xs, "put_along_axis") and not hasattr(xs, "bincount")
    _agree(name, args)


def test_scatter_without_put_along_axis_refuses_an_index_out_of_bounds():
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 1 with size 4"):
        XS["scatter_add"](xs.asarray(X), 1, xs.asarray([[4]]), xs.asarray(X))


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize(
    "indices",
    [
        lambda a: [a([2, 0, 2])],
        lambda a: [None, a([3, -1, 3])],
        lambda a: [a(X > 5)],
    ],
    ids=["rows", "columns", "mask"],
)
def test_index_put_without_writes_at_index_arrays_agrees_with_numpys(indices, accumulate):
    values = np.asarray(100.0)
    _agree("index_put", lambda a: (a(X), indices(a), a(values), accumulate))
    t = _strict(X)  # in place: the same array, written
    assert XS["index_put_"](t, indices(_strict), _strict(values), accumulate) is t
    np.testing.assert_array_equal(
        _host(t), NP["index_put"](X, indices(np.array), values, accumulate)
    )


def test_in_place_ops_check_dtypes_as_oplib_dtypes_on_strict():
    ints = xs.asarray([1, 2])
    with pytest.raises(RuntimeError, match="result type float64 can't be cast to the desired"):
        XS["div_.Tensor"](ints, ints)
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired"):
        XS["clamp_"](ints, 0.5, None)  # the default float dtype, as torch
    out = xs.empty((2,), dtype=xs.int64)
    with pytest.raises(RuntimeError, match="float64 can't be cast to the desired output type int"):
        XS["div.out"](ints, ints, out=out)
    _agree("clamp", lambda a: (a([1, 5]), 1.5, None))


def test_fill_with_a_tensor_of_another_dtype_casts_it():
    t = xs.asarray([1.0, 2.0])
    XS["fill_.Tensor"](t, xs.asarray(3))
    assert t.dtype == xs.float64
    np.testing.assert_array_equal(_host(t), [3.0, 3.0])


def test_index_checks_name_oplib_dtypes_on_strict():
    with pytest.raises(RuntimeError, match="expected BoolTensor for mask, got int64"):
        XS["masked_select"](xs.asarray(X), xs.asarray([1, 0, 1, 0]))
    with pytest.raises(IndexError, match="Expected dtype int32/int64 for index but got: float64"):
        XS["index_select"](xs.asarray(X), 0, xs.asarray([1.0]))
    with pytest.raises(IndexError, match="indices\\[0\\] is float64"):
        XS["index_put"](xs.asarray(X), [xs.asarray([1.0])], xs.asarray(1.0), False)


def test_reductions_with_indices_and_movedim_on_strict():
    values, indices = XS["max.dim"](_strict(X), 1, True)
    np.testing.assert_array_equal(_host(values), X[:, -1:])
    np.testing.assert_array_equal(_host(indices), [[3], [3], [3]])
    values, indices = XS["min.dim"](xs.asarray(X), 0, False)
    assert indices.dtype == xs.int64
    np.testing.assert_array_equal(_host(indices), [0, 0, 0, 0])
    _agree("movedim.intlist", lambda a: (a(np.zeros((2, 3, 4))), [0, 2], [2, 0]))


def test_tensor_setitem_and_getitem_on_strict_arrays():
    uninstall = strict_backend.install()
    try:
        t = oplib.tensor(xs.asarray(np.zeros((3, 4))))
        t[oplib.tensor(xs.asarray([2, 0, 2])), 1] = 5.0
        t[:, oplib.tensor(xs.asarray([3]))] = oplib.tensor(xs.asarray([[1], [2], [3]]))
        expected = np.zeros((3, 4))
        expected[[2, 0], 1] = 5.0
        expected[:, 3] = [1, 2, 3]
        np.testing.assert_array_equal(_host(t._data), expected)
        np.testing.assert_array_equal(
            _host(t[:, oplib.tensor(xs.asarray([1, 3]))]._data), expected[:, [1, 3]]
        )
    finally:
        uninstall()
