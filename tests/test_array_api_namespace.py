"""``oplib.array_api`` (``Tensor.__array_namespace__()``) against ``array-api-strict``, the
standard's reference implementation: hypothesis draws inputs within the standard's rules
(shapes, dtypes, broadcasting) and every covered function must agree with array-api-strict
in shape, dtype and values; plus the namespace's bookkeeping (which names it has, which it
lists as not covered) and the errors it raises."""

from __future__ import annotations

import math
import re
import runpy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import array_api_compat
import array_api_strict as strict
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oplib_core as oplib
from oplib_core import array_api as xp
from oplib_core.testing._checks import dtype_failure

from subproc import run_python

ROOT = Path(__file__).resolve().parent.parent
VERSION = "2023.12"

BOOL = ["bool"]
SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
INTS = SIGNED + UNSIGNED
FLOATS = ["float32", "float64"]
COMPLEX = ["complex64", "complex128"]
REAL = INTS + FLOATS
NUMERIC = REAL + COMPLEX
ALL = BOOL + NUMERIC


@contextmanager
def standard(version: str = VERSION) -> Iterator[None]:
    """array-api-strict following ``version`` of the standard (restored afterwards)."""
    with strict.ArrayAPIStrictFlags(api_version=version):
        yield


# -- drawing inputs -----------------------------------------------------------------------
def elements(dtype: np.dtype, *, finite: bool = False, bound: float | None = None) -> Any:
    if dtype.kind == "f":
        return st.floats(
            width=dtype.itemsize * 8,
            allow_nan=not finite and bound is None,
            allow_infinity=not finite and bound is None,
            allow_subnormal=False,
            min_value=None if bound is None else -bound,
            max_value=bound,
        )
    if dtype.kind == "c":
        part = np.dtype(f"float{dtype.itemsize * 4}")
        return st.builds(
            complex,
            elements(part, finite=finite, bound=bound),
            elements(part, finite=finite, bound=bound),
        )
    return None  # hypothesis's own strategy for bool and integers


def arrays(dtype: str, shape: Any = None, **kw: Any) -> Any:
    d = np.dtype(dtype)
    return hnp.arrays(
        d,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
        if shape is None
        else shape,
        elements=elements(d, **kw),
    )


def both(a: np.ndarray) -> tuple[oplib.Tensor, Any]:
    """The same data as an oplib Tensor and an array-api-strict array."""
    return oplib.tensor(a.copy()), strict.asarray(a.copy())


def host(r: Any) -> np.ndarray:
    if isinstance(r, oplib.Tensor):
        return r.detach().numpy()
    return np.asarray(r)


def rtol_of(dtype: np.dtype) -> float:
    return 1e-5 if dtype in (np.float32, np.complex64) else 1e-12


def agree(actual: Any, expected: Any, *, atol: float = 0.0, rtol: float | None = None) -> None:
    """Same shape, dtype and values (within a tolerance for floats; NaN equals NaN)."""
    a, e = host(actual), host(expected)
    assert isinstance(actual, oplib.Tensor), type(actual)
    assert a.shape == e.shape, (a.shape, e.shape)
    assert a.dtype == e.dtype, (a.dtype, e.dtype)
    if a.dtype.kind in "fc":
        tol = rtol_of(a.dtype) if rtol is None else rtol
        np.testing.assert_allclose(a, e, rtol=tol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(a, e)


def quiet(fn: Callable[[], Any]) -> Any:
    """``fn()`` without numpy's floating-point warnings (overflow, division by zero, too few
    degrees of freedom): inputs at the edges are the point."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn()


# -- elementwise --------------------------------------------------------------------------
UNARY: dict[str, list[str]] = {
    "acosh": FLOATS,
    "asinh": FLOATS,
    "atanh": FLOATS,
    "abs": NUMERIC,
    "cos": FLOATS + COMPLEX,
    "cosh": FLOATS,
    "exp": FLOATS + COMPLEX,
    "expm1": FLOATS,
    "isfinite": NUMERIC,
    "isinf": NUMERIC,
    "isnan": NUMERIC,
    "log": FLOATS + COMPLEX,
    "log2": FLOATS,
    "log10": FLOATS,
    "log1p": FLOATS,
    "logical_not": BOOL,
    "negative": NUMERIC,
    "positive": NUMERIC,
    "sign": NUMERIC,
    "sin": FLOATS + COMPLEX,
    "sinh": FLOATS,
    "sqrt": FLOATS + COMPLEX,
    "square": NUMERIC,
    "tan": FLOATS,
    "tanh": FLOATS + COMPLEX,
}
# complex transcendental functions: numpy's complex loops differ from a composition near
# branch cuts and overflow, so complex inputs stay finite and moderate
MODERATE = {"cos", "exp", "log", "sin", "sqrt", "tanh"}


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_unary_agrees_with_array_api_strict(name: str, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(UNARY[name]), label="dtype")
    bound = 50.0 if dtype in COMPLEX and name in MODERATE else None
    a = data.draw(arrays(dtype, bound=bound), label="x")
    mine, ref = both(a)
    with standard():
        expected = quiet(lambda: getattr(strict, name)(ref))
    actual = quiet(lambda: getattr(xp, name)(mine))
    agree(actual, expected, atol=1e-6 if dtype in ("float32", "complex64") else 1e-14)


@pytest.mark.parametrize("name", ["trunc", "floor", "ceil", "round"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_rounding_agrees_with_array_api_strict(name: str, data: st.DataObject) -> None:
    """Values, and the sign of every zero (``floor(-0.0)``, ``round(-0.4)`` are -0.0)."""
    dtype = data.draw(st.sampled_from(REAL), label="dtype")
    a = data.draw(arrays(dtype), label="x")
    if dtype in FLOATS:  # halves and near-halves, where rounding goes wrong
        a = a / 2 if data.draw(st.booleans(), label="halve") else a
    mine, ref = both(a)
    with standard():
        expected = quiet(lambda: getattr(strict, name)(ref))
    actual = getattr(xp, name)(mine)
    agree(actual, expected, rtol=0.0)
    np.testing.assert_array_equal(np.signbit(host(actual)), np.signbit(host(expected)))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_argmax_argmin_agree_with_array_api_strict(name: str, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(REAL), label="dtype")
    a = data.draw(arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)), label="x")
    axis = data.draw(st.none() | st.integers(-a.ndim, a.ndim - 1) if a.ndim else st.none())
    keepdims = data.draw(st.booleans(), label="keepdims")
    mine, ref = both(a)
    with standard():
        expected = getattr(strict, name)(ref, axis=axis, keepdims=keepdims)
    agree(getattr(xp, name)(mine, axis=axis, keepdims=keepdims), expected)


BINARY: dict[str, list[str]] = {
    "add": NUMERIC,
    "subtract": NUMERIC,
    "multiply": NUMERIC,
    "divide": FLOATS + COMPLEX,
    "pow": FLOATS,  # complex: numpy's power of complex zeros and infinities is its own
    "maximum": REAL,
    "minimum": REAL,
    "equal": ALL,
    "not_equal": ALL,
    "less": REAL,
    "less_equal": REAL,
    "greater": REAL,
    "greater_equal": REAL,
    "logical_and": BOOL,
    "logical_or": BOOL,
    "logical_xor": BOOL,
    "hypot": FLOATS,
    "logaddexp": FLOATS,
}


def promotable(dtypes: list[str]) -> Any:
    """Two dtypes of ``dtypes`` that the standard promotes together."""

    def ok(pair: tuple[str, str]) -> bool:
        try:
            strict.result_type(getattr(strict, pair[0]), getattr(strict, pair[1]))
        except TypeError:
            return False
        return True

    return st.tuples(st.sampled_from(dtypes), st.sampled_from(dtypes)).filter(ok)


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_binary_agrees_with_array_api_strict(name: str, data: st.DataObject) -> None:
    d1, d2 = data.draw(promotable(BINARY[name]), label="dtypes")
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    bound = 20.0 if name == "pow" else None
    a = data.draw(arrays(d1, shapes.input_shapes[0], bound=bound), label="x1")
    b = data.draw(arrays(d2, shapes.input_shapes[1], bound=bound), label="x2")
    (m1, r1), (m2, r2) = both(a), both(b)
    with standard():
        expected = quiet(lambda: getattr(strict, name)(r1, r2))
    actual = quiet(lambda: getattr(xp, name)(m1, m2))
    agree(actual, expected, atol=1e-6 if "32" in d1 + d2 or "64" in d1 + d2 else 0.0)


@pytest.mark.parametrize(
    "name", ["add", "subtract", "multiply", "divide", "pow", "maximum", "less", "greater_equal"]
)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_python_scalar_operand_takes_the_array_dtype(name: str, data: st.DataObject) -> None:
    """A Python scalar on either side takes the array's dtype (the 2024.12 rule)."""
    dtypes = ["float32", "float64"] if name in ("divide", "pow") else ["int8", "int64", "uint8"]
    dtype = data.draw(st.sampled_from(dtypes + FLOATS))
    a = data.draw(arrays(dtype, finite=True, bound=10.0 if dtype in FLOATS else None))
    small = st.integers(0, 10 if name == "pow" else 100)
    scalar = data.draw(small if dtype in INTS else small | st.floats(-10, 10))
    mine, ref = both(a)
    for args_mine, args_ref in (((mine, scalar), (ref, scalar)), ((scalar, mine), (scalar, ref))):
        with standard("2024.12"):
            expected = quiet(lambda a=args_ref: getattr(strict, name)(*a))
        agree(quiet(lambda a=args_mine: getattr(xp, name)(*a)), expected)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_clip_agrees_with_array_api_strict(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(REAL))
    a = data.draw(arrays(dtype, finite=True))
    lo = data.draw(st.none() | st.integers(0, 50))
    hi = data.draw(st.none() | st.integers(60, 120))
    mine, ref = both(a)
    with standard():
        expected = strict.clip(ref, lo, hi)
    agree(xp.clip(mine, lo, hi), expected)


# -- statistical and utility ------------------------------------------------------------------
def axis_args(data: st.DataObject, ndim: int) -> Any:
    return data.draw(
        st.none()
        | (st.integers(-ndim, ndim - 1) if ndim else st.nothing())
        | hnp.valid_tuple_axes(ndim),
        label="axis",
    )


def nonempty_reduction(shape: tuple[int, ...], axis: Any) -> bool:
    dims = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    return all(shape[d] for d in dims)


REDUCTIONS: dict[str, tuple[list[str], bool, dict[str, Any]]] = {
    # name: (dtypes, needs a non-empty reduction, extra keyword strategies)
    "sum": (NUMERIC, False, {}),
    "mean": (FLOATS, True, {}),
    "max": (REAL, True, {}),
    "min": (REAL, True, {}),
    "var": (FLOATS, True, {"correction": st.sampled_from([0, 1, 0.5])}),
    "std": (FLOATS, True, {"correction": st.sampled_from([0, 1])}),
    "all": (ALL, False, {}),
    "any": (ALL, False, {}),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_reduction_agrees_with_array_api_strict(name: str, data: st.DataObject) -> None:
    dtypes, nonempty, extra = REDUCTIONS[name]
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    a = data.draw(arrays(dtype, bound=100.0 if dtype in FLOATS + COMPLEX else None), label="x")
    axis = axis_args(data, a.ndim)
    assume(not nonempty or nonempty_reduction(a.shape, axis))
    kwargs = {"axis": axis, "keepdims": data.draw(st.booleans(), label="keepdims")}
    kwargs.update({k: data.draw(v, label=k) for k, v in extra.items()})
    mine, ref = both(a)
    with standard():
        expected = quiet(lambda: getattr(strict, name)(ref, **kwargs))
    n = max(a.size, 1)
    agree(quiet(lambda: getattr(xp, name)(mine, **kwargs)), expected, atol=1e-3 * n)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_sum_with_dtype_agrees(data: st.DataObject) -> None:
    a = data.draw(arrays(data.draw(st.sampled_from(INTS))))
    out = data.draw(st.sampled_from(["int64", "float64"]))
    mine, ref = both(a)
    with standard():
        expected = strict.sum(ref, dtype=getattr(strict, out))
    agree(xp.sum(mine, dtype=getattr(xp, out)), expected)


# -- creation -------------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(
    start=st.integers(-20, 20),
    stop=st.none() | st.integers(-20, 20),
    step=st.integers(-5, 5).filter(bool),
    dtype=st.sampled_from(["int32", "int64", "float32", "float64"]),
)
def test_arange_agrees(start: int, stop: int | None, step: int, dtype: str) -> None:
    with standard():
        expected = strict.arange(start, stop, step, dtype=getattr(strict, dtype))
    agree(xp.arange(start, stop, step, dtype=getattr(xp, dtype)), expected)


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(0, 5),
    cols=st.none() | st.integers(0, 5),
    k=st.integers(-6, 6),
    dtype=st.sampled_from(ALL),
)
def test_eye_agrees(rows: int, cols: int | None, k: int, dtype: str) -> None:
    with standard():
        expected = strict.eye(rows, cols, k=k, dtype=getattr(strict, dtype))
    agree(xp.eye(rows, cols, k=k, dtype=getattr(xp, dtype)), expected)


@settings(max_examples=50, deadline=None)
@given(
    start=st.floats(-100, 100),
    stop=st.floats(-100, 100),
    num=st.integers(0, 12),
    endpoint=st.booleans(),
    dtype=st.sampled_from(FLOATS),
)
def test_linspace_agrees(start: float, stop: float, num: int, endpoint: bool, dtype: str) -> None:
    with standard():
        expected = strict.linspace(
            start, stop, num, dtype=getattr(strict, dtype), endpoint=endpoint
        )
    actual = xp.linspace(start, stop, num, dtype=getattr(xp, dtype), endpoint=endpoint)
    agree(actual, expected, atol=1e-4)


@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
@settings(max_examples=20, deadline=None)
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0), dtype=st.sampled_from(ALL))
def test_filled_factories_agree(name: str, shape: tuple[int, ...], dtype: str) -> None:
    with standard():
        expected = getattr(strict, name)(shape, dtype=getattr(strict, dtype))
        like = getattr(strict, name + "_like")(expected)
    actual = getattr(xp, name)(shape, dtype=getattr(xp, dtype))
    actual_like = getattr(xp, name + "_like")(actual)
    if name == "empty":  # no values to compare
        expected, like = strict.zeros_like(expected), strict.zeros_like(like)
        actual, actual_like = xp.zeros_like(actual), xp.zeros_like(actual_like)
    agree(actual, expected)
    agree(actual_like, like)


@settings(max_examples=30, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0),
    fill=st.integers(-5, 5),
    dtype=st.sampled_from(["int8", "int64", "float32", "float64", "complex128"]),
)
def test_full_agrees(shape: tuple[int, ...], fill: int, dtype: str) -> None:
    with standard():
        expected = strict.full(shape, fill, dtype=getattr(strict, dtype))
        like = strict.full_like(expected, fill + 1)
    actual = xp.full(shape, fill, dtype=getattr(xp, dtype))
    agree(actual, expected)
    agree(xp.full_like(actual, fill + 1), like)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), indexing=st.sampled_from(["xy", "ij"]), n=st.integers(1, 3))
def test_meshgrid_agrees(data: st.DataObject, indexing: str, n: int) -> None:
    dtype = data.draw(st.sampled_from(REAL))
    arrs = [
        data.draw(arrays(dtype, (data.draw(st.integers(0, 4)),), finite=True)) for _ in range(n)
    ]
    pairs = [both(a) for a in arrs]
    with standard():
        expected = strict.meshgrid(*(r for _, r in pairs), indexing=indexing)
    actual = xp.meshgrid(*(m for m, _ in pairs), indexing=indexing)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        agree(a, e)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_asarray_agrees(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(ALL))
    a = data.draw(arrays(dtype, finite=True))
    with standard():
        expected = strict.asarray(a.tolist(), dtype=getattr(strict, dtype))
    agree(xp.asarray(a.tolist(), dtype=getattr(xp, dtype)), expected)


# -- manipulation, searching, linear algebra -------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_shape_functions_agree(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(ALL), label="dtype")
    a = data.draw(arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=4, max_side=3)), label="x")
    mine, ref = both(a)
    nd = a.ndim
    perm = data.draw(st.permutations(range(nd)), label="perm")
    src = data.draw(hnp.valid_tuple_axes(nd, min_size=1), label="source")
    dst = data.draw(st.permutations(range(nd)), label="dst")[: len(src)]
    axis = data.draw(st.integers(-nd, nd - 1), label="axis")
    ones = tuple(d for d in range(nd) if a.shape[d] == 1)
    target = data.draw(st.permutations(a.shape), label="reshape")
    cases: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("permute_dims", (tuple(perm),), {}),
        ("moveaxis", (src, tuple(dst)), {}),
        ("expand_dims", (), {"axis": data.draw(st.integers(-nd - 1, nd), label="new axis")}),
        ("reshape", (tuple(target),), {}),
        ("reshape", ((-1,),), {}),
        ("unstack", (), {"axis": axis}),
        ("broadcast_to", ((2, *a.shape),), {}),
    ]
    shift = data.draw(st.integers(-4, 4), label="shift")
    reps = data.draw(st.integers(0, 2), label="repeats")
    cases += [
        ("flip", (), {}),
        ("flip", (), {"axis": axis}),
        ("roll", (shift,), {}),
        ("roll", ((shift, 1),), {"axis": (axis, 0)}),
        ("tile", (tuple(data.draw(st.integers(0, 2), label="tile") for _ in range(nd)),), {}),
        ("repeat", (reps,), {}),
        ("repeat", (reps,), {"axis": axis}),
    ]
    if ones:
        cases.append(("squeeze", (ones,), {}))
    if nd >= 2:
        cases.append(("matrix_transpose", (), {}))
        k = data.draw(st.integers(-2, 2), label="k")
        cases += [("tril", (), {"k": k}), ("triu", (), {"k": k})]
    if a.shape[axis]:
        index = data.draw(
            hnp.arrays(np.int64, st.integers(0, 4), elements=st.integers(0, a.shape[axis] - 1)),
            label="indices",
        )
        counts = data.draw(
            hnp.arrays(np.int64, a.shape[axis], elements=st.integers(0, 2)), label="counts"
        )
        for name, arg in (("take", index), ("repeat", counts)):
            with standard():
                expected = getattr(strict, name)(ref, strict.asarray(arg), axis=axis)
            agree(getattr(xp, name)(mine, xp.asarray(arg), axis=axis), expected)
    for name, args, kwargs in cases:
        with standard():
            expected = getattr(strict, name)(ref, *args, **kwargs)
        actual = getattr(xp, name)(mine, *args, **kwargs)
        if isinstance(expected, tuple):
            assert isinstance(actual, tuple) and len(actual) == len(expected), name
            for x, y in zip(actual, expected, strict=True):
                agree(x, y)
        else:
            agree(actual, expected)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_joining_agrees(data: st.DataObject) -> None:
    d1, d2 = data.draw(promotable(ALL), label="dtypes")
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3), label="shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    other = list(shape)
    other[axis] = data.draw(st.integers(0, 3), label="size")
    (m1, r1), (m2, r2) = (
        both(data.draw(arrays(d1, shape))),
        both(data.draw(arrays(d2, tuple(other)))),
    )
    with standard():
        cat, flat = strict.concat([r1, r2], axis=axis), strict.concat([r1, r2], axis=None)
    agree(xp.concat([m1, m2], axis=axis), cat)
    agree(xp.concat([m1, m2], axis=None), flat)
    (m3, r3) = both(data.draw(arrays(d1, shape)))
    with standard():
        stacked = strict.stack([r1, r3], axis=axis)
    agree(xp.stack([m1, m3], axis=axis), stacked)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_broadcast_arrays_and_where_agree(data: st.DataObject) -> None:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    d1, d2 = data.draw(promotable(NUMERIC), label="dtypes")
    cond = both(data.draw(arrays("bool", shapes.input_shapes[0])))
    x1 = both(data.draw(arrays(d1, shapes.input_shapes[1])))
    x2 = both(data.draw(arrays(d2, shapes.input_shapes[2])))
    with standard():
        expected = strict.where(cond[1], x1[1], x2[1])
        bcast = strict.broadcast_arrays(cond[1], x1[1], x2[1])
    agree(xp.where(cond[0], x1[0], x2[0]), expected)
    for a, e in zip(xp.broadcast_arrays(cond[0], x1[0], x2[0]), bcast, strict=True):
        agree(a, e)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_linear_algebra_agrees(data: st.DataObject) -> None:
    d1, d2 = data.draw(promotable(REAL), label="dtypes")
    shapes = data.draw(
        hnp.mutually_broadcastable_shapes(signature="(m,n),(n,p)->(m,p)", max_side=3, max_dims=4)
    )
    bound = 10.0
    (m1, r1) = both(data.draw(arrays(d1, shapes.input_shapes[0], bound=bound)))
    (m2, r2) = both(data.draw(arrays(d2, shapes.input_shapes[1], bound=bound)))
    with standard():
        expected = quiet(lambda: strict.matmul(r1, r2))
    agree(quiet(lambda: xp.matmul(m1, m2)), expected, atol=1e-3)

    # tensordot: the last k axes of a with the first k of b
    k = data.draw(st.integers(0, 2), label="k")
    sa = data.draw(hnp.array_shapes(min_dims=k, max_dims=3, min_side=0, max_side=3))
    tail = sa[len(sa) - k :]
    sb = tail + data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    (a, ra), (b, rb) = (
        both(data.draw(arrays(d1, sa, bound=bound))),
        both(data.draw(arrays(d2, sb, bound=bound))),
    )
    with standard():
        expected = quiet(lambda: strict.tensordot(ra, rb, axes=k))
    agree(quiet(lambda: xp.tensordot(a, b, axes=k)), expected, atol=1e-3)

    # vecdot over a shared last axis, with broadcasting
    vs = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=3)
    )
    n = data.draw(st.integers(0, 4), label="n")
    (v1, rv1) = both(data.draw(arrays(d1, (*vs.input_shapes[0][:-1], n), bound=bound)))
    (v2, rv2) = both(data.draw(arrays(d2, (*vs.input_shapes[1][:-1], n), bound=bound)))
    with standard():
        expected = quiet(lambda: strict.vecdot(rv1, rv2))
    agree(quiet(lambda: xp.vecdot(v1, v2)), expected, atol=1e-3)


# -- data type functions ---------------------------------------------------------------------
@pytest.mark.parametrize("to", ALL)
@pytest.mark.parametrize("from_", ALL)
def test_dtype_functions_agree(from_: str, to: str) -> None:
    s_from, s_to, o_from, o_to = (
        getattr(strict, from_),
        getattr(strict, to),
        getattr(xp, from_),
        getattr(xp, to),
    )
    with standard():
        assert xp.can_cast(o_from, o_to) == strict.can_cast(s_from, s_to)
        try:
            expected = strict.result_type(s_from, s_to)
        except TypeError:
            expected = None
        if expected is not None:
            assert xp.result_type(o_from, o_to) == np.dtype(str(expected).rsplit(".", 1)[-1])
        mine, ref = both(np.array([0, 1, 2], dtype=from_))
        if from_ in COMPLEX and to not in COMPLEX:
            return  # the standard forbids it; oplib casts as numpy does (the real part)
        agree(xp.astype(mine, o_to), strict.astype(ref, s_to))


KINDS = [
    "bool",
    "signed integer",
    "unsigned integer",
    "integral",
    "real floating",
    "complex floating",
    "numeric",
]


@pytest.mark.parametrize("name", ALL)
def test_isdtype_finfo_iinfo_agree(name: str) -> None:
    mine, ref = getattr(xp, name), getattr(strict, name)
    with standard():
        for kind in KINDS:
            assert xp.isdtype(mine, kind) == strict.isdtype(ref, kind), kind
        assert xp.isdtype(mine, (mine, "bool")) and xp.isdtype(mine, mine)
        if name in FLOATS + COMPLEX:
            f, g = xp.finfo(mine), strict.finfo(ref)
            assert (f.bits, f.eps, f.max, f.min, f.smallest_normal) == (
                g.bits,
                g.eps,
                g.max,
                g.min,
                g.smallest_normal,
            )
            assert f.dtype == mine
        if name in INTS:
            i, j = xp.iinfo(mine), strict.iinfo(ref)
            assert (i.bits, i.max, i.min, i.dtype) == (j.bits, j.max, j.min, mine)


# -- the namespace's bookkeeping -------------------------------------------------------------
STRICT_ONLY = {
    # array-api-strict's own helpers, and the optional extensions (not provided by oplib)
    "ArrayAPIStrictFlags",
    "Device",
    "get_array_api_strict_flags",
    "set_array_api_strict_flags",
    "reset_array_api_strict_flags",
    "__version__",
    "fft",
    "linalg",
}


def _since(fn: object) -> str | None:
    """The revision array-api-strict's ``requires_api_version`` wrapper gives ``fn``."""
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None)
    if code is None or closure is None or "version" not in code.co_freevars:
        return None
    since: str = closure[code.co_freevars.index("version")].cell_contents
    return since


def standard_names() -> set[str]:
    """The main namespace of the standard's 2023.12 revision, read from array-api-strict."""
    return {
        n
        for n in strict.__all__
        if n not in STRICT_ONLY and (_since(getattr(strict, n)) or VERSION) <= VERSION
    }


def test_standard_names_are_read_right() -> None:
    names = standard_names()
    assert {"clip", "hypot", "unstack", "searchsorted", "__array_namespace_info__"} <= names
    assert not names & {"diff", "count_nonzero", "reciprocal", "take_along_axis", "isin"}


def test_namespace_covers_its_list_and_not_covered_is_the_rest() -> None:
    covered = set(xp.__all__)
    assert covered <= standard_names(), covered - standard_names()
    for name in covered:
        assert hasattr(xp, name), name
    assert set(xp.NOT_COVERED) == standard_names() - covered
    assert not covered & set(xp.NOT_COVERED)


def test_docs_list_every_not_covered_name_and_no_covered_one() -> None:
    text = (ROOT / "docs" / "array-api.md").read_text()
    section = text.split("## Not yet covered", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(\w+)`", section))
    assert listed >= set(xp.NOT_COVERED), set(xp.NOT_COVERED) - listed
    assert not listed & set(xp.__all__), listed & set(xp.__all__)


def test_a_missing_standard_name_says_why() -> None:
    with pytest.raises(AttributeError, match=r"no 'sort' yet \(no sorting"):
        _ = xp.sort
    with pytest.raises(AttributeError, match="has no attribute 'no_such_function'"):
        _ = xp.no_such_function


def test_array_namespace_and_version() -> None:
    t = oplib.tensor([1.0, 2.0])
    assert t.__array_namespace__() is xp is oplib.array_api
    assert t.__array_namespace__(api_version="2023.12") is xp
    assert xp.__array_api_version__ == "2023.12"
    with pytest.raises(ValueError, match=r"api_version='2024.12' is not supported"):
        t.__array_namespace__(api_version="2024.12")


def test_constants_and_dtypes() -> None:
    assert (xp.e, xp.pi, xp.inf) == (math.e, math.pi, math.inf)
    assert math.isnan(xp.nan) and xp.newaxis is None
    assert xp.bool == oplib.bool_ and xp.float32 == oplib.float32 and xp.uint64 == oplib.uint64


def test_info() -> None:
    info = xp.__array_namespace_info__()
    assert info.capabilities() == {"boolean indexing": True, "data-dependent shapes": False}
    x = xp.asarray([1.0, -2.0, 3.0])
    agree_values = x[xp.greater(x, 0.0)].tolist()  # what "boolean indexing" promises
    assert agree_values == [1.0, 3.0]
    assert info.default_device() == oplib.device("cpu")
    assert info.default_dtypes()["real floating"] == oplib.get_default_dtype()
    assert info.default_dtypes()["indexing"] == xp.int64
    assert xp.full((), 1.5).dtype == info.default_dtypes()["real floating"]
    assert info.dtypes(kind="integral") == {n: getattr(xp, n) for n in INTS}
    assert set(info.dtypes()) == set(ALL)
    assert info.dtypes(kind=("bool", "complex floating")) == {
        "bool": xp.bool,
        "complex64": xp.complex64,
        "complex128": xp.complex128,
    }
    with pytest.raises(ValueError, match="unknown kind 'reals'"):
        info.dtypes(kind="reals")
    assert oplib.device("cpu") in info.devices() and oplib.device("meta") in info.devices()


def test_default_dtype_follows_set_default_dtype(default_dtype: Any) -> None:
    oplib.set_default_dtype(oplib.float64)
    info = xp.__array_namespace_info__()
    assert info.default_dtypes()["complex floating"] == xp.complex128
    assert xp.linspace(0, 1, 3).dtype == xp.float64 == xp.eye(2).dtype


# -- autograd and devices: the functions dispatch core ops --------------------------------------
COMPOSITES: list[tuple[str, Callable[[Any], Any]]] = [
    ("expm1", xp.expm1),
    ("tan", xp.tan),
    ("cosh", xp.cosh),
    ("asinh", xp.asinh),
    ("acosh", lambda x: xp.acosh(xp.add(x, 1.5))),
    ("atanh", xp.atanh),
    ("log1p", xp.log1p),
    ("logaddexp", lambda x: xp.logaddexp(x, xp.matrix_transpose(x))),
    ("sinh", xp.sinh),
    ("hypot", lambda x: xp.hypot(x, xp.matrix_transpose(x))),
    ("log2", xp.log2),
    ("square", xp.square),
    ("positive", xp.positive),
    ("var", lambda x: xp.var(x, axis=0, correction=1)),
    ("std", lambda x: xp.std(x, axis=1)),
    ("clip", lambda x: xp.clip(x, 0.25, 0.75)),
    ("tensordot", lambda x: xp.tensordot(x, x, axes=1)),
    ("vecdot", lambda x: xp.vecdot(x, x)),
    ("moveaxis", lambda x: xp.moveaxis(x, 0, 1)),
    ("concat", lambda x: xp.concat([x, x], axis=None)),
    ("unstack", lambda x: xp.unstack(x, axis=1)[1]),
    ("where", lambda x: xp.where(x > 0.45, x, 2.0)),
    ("sign", xp.sign),
]


@pytest.mark.parametrize(("name", "fn"), COMPOSITES, ids=[n for n, _ in COMPOSITES])
def test_composites_keep_autograd(name: str, fn: Callable[[Any], Any]) -> None:
    x = oplib.tensor(np.linspace(0.1, 0.9, 9).reshape(3, 3), dtype=oplib.float64)
    x.requires_grad_(True)
    out = fn(x)
    assert isinstance(out, oplib.Tensor) and out.grad_fn is not None, name
    assert oplib.autograd.gradcheck(fn, (x,))


def test_results_stay_on_the_inputs_device() -> None:
    x = oplib.empty((2, 3), device="meta")
    for out in (
        xp.expm1(x),
        xp.var(x, axis=1),
        xp.tensordot(x, xp.matrix_transpose(x), axes=1),
        xp.clip(x, 0, 1),
        xp.add(x, 1.0),
        xp.isinf(x),
        xp.eye(3, device="meta"),
        xp.linspace(0, 1, 4, device="meta"),
        xp.asarray(x, dtype=xp.float64),
    ):
        assert out.device.type == "meta", out
    assert xp.var(x, axis=1).shape == (2,)
    assert xp.zeros(2).to_device("meta").device.type == "meta"


def test_under_fake_mode() -> None:
    with oplib.FakeTensorMode():
        x = oplib.empty((4, 2))
        out = xp.std(xp.expm1(x), axis=0)
        assert out.shape == (2,) and out.dtype == xp.float32


# -- errors ------------------------------------------------------------------------------------
def test_errors_name_the_function_and_the_problem() -> None:
    x = oplib.tensor([[1.0, 2.0]])
    with pytest.raises(
        TypeError, match=r"array_api.exp\(\): expected an oplib Tensor for 'x', got list"
    ):
        xp.exp([1.0])
    with pytest.raises(TypeError, match=r"array_api.add\(\): expected at least one oplib Tensor"):
        xp.add(1, 2)
    with pytest.raises(
        TypeError, match=r"add\(\): expected an oplib Tensor or a Python scalar, got str"
    ):
        xp.add(x, "a")
    with pytest.raises(TypeError, match="a bool scalar does not combine with a float32 array"):
        xp.add(x, True)
    with pytest.raises(TypeError, match=r"logical_and\(\): expected a bool array, got float32"):
        xp.logical_and(x, x)
    with pytest.raises(ValueError, match=r"squeeze\(\): axis 1 has size 2, not 1"):
        xp.squeeze(x, axis=1)
    with pytest.raises(
        IndexError, match=r"sum\(\): axis 2 is out of bounds for an array of dimension 2"
    ):
        xp.sum(x, axis=2)
    with pytest.raises(ValueError, match=r"sum\(\): repeated axis"):
        xp.sum(x, axis=(0, -2))
    with pytest.raises(ValueError, match="zero-size reduction"):
        xp.max(xp.zeros((0, 2)), axis=0)
    with pytest.raises(ValueError, match="copy=False is not supported"):
        xp.reshape(x, (2,), copy=False)
    with pytest.raises(ValueError, match="copy=False, but a copy is needed"):
        xp.asarray(x, dtype=xp.float64, copy=False)
    with pytest.raises(ValueError, match=r"matrix_transpose\(\): expected at least 2 dimensions"):
        xp.matrix_transpose(xp.zeros(3))
    with pytest.raises(ValueError, match="contracted axes 1 of x1 \\(size 2\\) and 0 of x2"):
        xp.tensordot(x, x, axes=1)
    with pytest.raises(TypeError, match="complex arrays are not supported yet"):
        xp.vecdot(xp.zeros(2, dtype=xp.complex64), xp.zeros(2, dtype=xp.complex64))
    with pytest.raises(ValueError, match="indexing must be 'xy' or 'ij'"):
        xp.meshgrid(xp.zeros(2), indexing="yx")
    with pytest.raises(ValueError, match="unknown kind 'floats'"):
        xp.isdtype(xp.float32, "floats")
    with pytest.raises(TypeError, match="kind tuples cannot be nested"):
        xp.isdtype(xp.float32, (("bool",),))
    with pytest.raises(TypeError, match="expected a floating dtype, got int32"):
        xp.finfo(xp.int32)
    with pytest.raises(TypeError, match="expected an integer dtype, got float32"):
        xp.iinfo(xp.float32)
    with pytest.raises(ValueError, match=r"argmax\(\): attempt to get argmax of an empty"):
        xp.argmax(xp.zeros((2, 0)), axis=1)
    with pytest.raises(TypeError, match=r"atanh\(\): expected a real floating array, got complex"):
        xp.atanh(xp.zeros(2, dtype=xp.complex128))
    with pytest.raises(TypeError, match=r"cosh\(\): expected a real floating array, got int8"):
        xp.cosh(xp.zeros(2, dtype=xp.int8))
    with pytest.raises(TypeError, match=r"hypot\(\): expected real floating arrays, got int64"):
        xp.hypot(xp.zeros(2), xp.zeros(2, dtype=xp.int64))
    with pytest.raises(TypeError, match=r"round\(\): expected a real array, got complex64"):
        xp.round(xp.zeros(2, dtype=xp.complex64))
    with pytest.raises(ValueError, match="oplib has no streams"):
        x.to_device("cpu", stream=1)


def test_asarray_keeps_the_tensor_unless_asked() -> None:
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    assert xp.asarray(x) is x
    copied = xp.asarray(x, copy=True)
    assert copied is not x and copied.grad_fn is not None
    cast = xp.asarray(x, dtype=xp.float64)
    assert cast.dtype == xp.float64 and cast.grad_fn is not None
    assert xp.astype(x, xp.float32, copy=False) is x


def test_python_data_takes_the_asked_dtype_directly() -> None:
    """Not through float32 (the default dtype) first: 2**24 + 1 survives as float64."""
    assert oplib.tensor(16777217.0, dtype=oplib.float64).item() == 16777217.0
    assert oplib.tensor([2**63 + 1], dtype=oplib.uint64).item() == 2**63 + 1
    assert oplib.tensor(16777217.0).dtype == oplib.float32


def test_typing_example_runs() -> None:
    # mypy and basedpyright check it with the project (pyproject.toml includes tests/typing)
    runpy.run_path(str(ROOT / "tests" / "typing" / "array_api_examples.py"))


DEVICE_CASES: list[tuple[str, Callable[[Any], Any]]] = [
    ("expm1", xp.expm1),
    ("sign", xp.sign),
    ("isfinite", xp.isfinite),
    ("add scalar", lambda x: xp.add(2.0, x)),
    ("clip", lambda x: xp.clip(x, -0.5, 0.5)),
    ("sum", lambda x: xp.sum(x, axis=1)),
    ("var", lambda x: xp.var(x, axis=0, correction=1)),
    ("any", lambda x: xp.any(x > 0, axis=())),
    ("max", lambda x: xp.max(x, keepdims=True)),
    ("moveaxis", lambda x: xp.moveaxis(x, 0, -1)),
    ("unstack", lambda x: xp.unstack(x)[1]),
    ("concat", lambda x: xp.concat([x, x], axis=None)),
    ("where", lambda x: xp.where(x > 0, x, 0.0)),
    ("tensordot", lambda x: xp.tensordot(x, x, axes=([0], [0]))),
    ("vecdot", lambda x: xp.vecdot(x, x, axis=0)),
    ("zeros_like", xp.zeros_like),
    ("eye", lambda x: xp.eye(3, dtype=x.dtype, device=x.device)),
    ("linspace", lambda x: xp.linspace(0, 1, 4, dtype=x.dtype, device=x.device)),
    ("astype", lambda x: xp.astype(x, xp.float64)),
    ("round", lambda x: xp.round(xp.multiply(x, 2.5))),
    ("argmax", lambda x: xp.argmax(x, axis=1, keepdims=True)),
    ("flip", lambda x: xp.flip(x, axis=1)),
    ("roll", lambda x: xp.roll(x, 2)),
    ("tile", lambda x: xp.tile(x, (2, 1))),
    ("repeat", lambda x: xp.repeat(x, 2, axis=1)),
    ("tril", lambda x: xp.tril(x, k=1)),
    ("take", lambda x: xp.take(x, xp.asarray([2, 0], device=x.device), axis=1)),
]


@pytest.mark.parametrize(("name", "fn"), DEVICE_CASES, ids=[n for n, _ in DEVICE_CASES])
def test_functions_run_on_every_backend(
    oplib_device: Any, name: str, fn: Callable[[Any], Any]
) -> None:
    """The same results on every backend, on that backend (values: those that have data)."""
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    x = oplib.tensor(a, device=oplib_device)
    expected = fn(oplib.tensor(a))
    backend = oplib.backends.get(oplib_device.type)
    try:
        out = fn(x)
    except TypeError as e:  # a dtype this backend cannot hold (JAX without its 64-bit mode)
        reason = dtype_failure(backend, e)
        if reason is None:
            raise
        pytest.skip(reason)
    assert out.device.type == oplib_device.type, name
    assert (out.shape, out.dtype) == (expected.shape, expected.dtype), name
    if oplib_device.type != "meta":
        np.testing.assert_allclose(out.to("cpu").numpy(), expected.numpy(), rtol=1e-6)


def _standardize(x: Any) -> Any:
    """Library-agnostic code, written against the standard only."""
    xp_ = array_api_compat.array_namespace(x)
    centred = xp_.subtract(x, xp_.mean(x, axis=-1, keepdims=True))
    scale = xp_.sqrt(xp_.add(xp_.var(x, axis=-1, keepdims=True, correction=1), 1e-6))
    clipped = xp_.clip(xp_.divide(centred, scale), -2.0, 2.0)
    return xp_.sum(xp_.square(clipped), axis=-1)


def test_array_api_compat_finds_the_namespace_and_generic_code_runs() -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4) ** 1.5
    t = oplib.tensor(a, requires_grad=True)
    assert array_api_compat.array_namespace(t) is xp
    assert array_api_compat.array_namespace(t, t, api_version="2023.12") is xp
    assert array_api_compat.is_array_api_obj(t)
    mine, ref = _standardize(t), _standardize(strict.asarray(a))
    agree(mine, ref)
    mine.sum().backward()
    assert t.grad is not None and t.grad.shape == (3, 4)


def test_oplib_array_api_is_there_before_and_after_the_plugins_load() -> None:
    """``import oplib_core`` does not import the namespace; ``oplib.array_api`` imports it
    when asked before the plugins load, and is an attribute once they have loaded."""
    before = run_python(
        "import sys, oplib_core as oplib\n"
        "OUT['imported'] = 'oplib_core.array_api' in sys.modules\n"
        "OUT['name'] = oplib.array_api.__name__"
    )
    assert before == {"imported": False, "name": "oplib_core.array_api"}
    after = run_python(
        "import oplib_core as oplib\n"
        "oplib.plugins.load()\n"
        "OUT['version'] = oplib.array_api.__array_api_version__"
    )
    assert after == {"version": "2023.12"}


def test_from_dlpack_shares_memory_unless_asked_to_copy() -> None:
    a = np.arange(4.0)
    shared, copied = xp.from_dlpack(a), xp.from_dlpack(a, copy=True)
    moved = xp.from_dlpack(a, device="meta")
    a[0] = 7.0
    assert shared.numpy()[0] == 7.0 and copied.numpy()[0] == 0.0
    assert moved.device.type == "meta" and moved.shape == (4,)
    with standard():
        agree(xp.from_dlpack(a), strict.from_dlpack(a))


def test_a_scalar_of_another_kind_takes_its_default_dtype(default_dtype: Any) -> None:
    """Outside the standard's rules (a float with an integer array): the default dtype of the
    scalar's kind, then the ops' promotion."""
    x = xp.asarray([1, 2], dtype=xp.int8)
    assert xp.add(x, 2.5).dtype == xp.float32 == xp.maximum(1.5, x).dtype
    assert xp.where(x > 1, x, 0.5).dtype == xp.float32
    oplib.set_default_dtype(oplib.float64)
    assert xp.multiply(x, 0.5).dtype == xp.float64
    assert xp.add(x, 2).dtype == xp.int8  # an int fits: the array's dtype


SPECIAL: dict[str, list[Any]] = {
    "float64": [math.inf, -math.inf, math.nan, 0.0, -0.0, 1e308, -1e-310, 2.5, -3.5],
    "float32": [math.inf, -math.inf, math.nan, 0.0, -0.0, 3e38, -1e-40, 2.5, -3.5],
    "complex128": [complex(math.inf, math.nan), 1e308 + 1e308j, complex(math.nan, 1), 0j, 1j],
    "int8": [-128, -1, 0, 5, 127],
    "uint64": [0, 1, 2**64 - 1],
    "bool": [True, False],
}
NO_WARNING_CASES: dict[str, list[str]] = {
    **UNARY,
    **{name: REAL for name in ("trunc", "floor", "ceil", "round", "argmax", "argmin")},
    **{name: REAL for name in ("max", "min", "sum", "all", "any")},
    "hypot": FLOATS,
    "logaddexp": FLOATS,
    "maximum": REAL,
    "clip": REAL,
}


@pytest.mark.parametrize("name", sorted(NO_WARNING_CASES))
def test_no_floating_point_warning_where_the_reference_gives_none(name: str) -> None:
    """Special values (NaN, infinities, signed zeros, extremes) warn no more than in
    array-api-strict: a composition's masked-out branches do not leak numpy warnings."""
    for dtype, values in SPECIAL.items():
        if dtype not in NO_WARNING_CASES[name]:
            continue
        mine, ref = both(np.array(values, dtype=dtype))
        args_mine: tuple[Any, ...] = (mine,)
        fn_mine, fn_ref = getattr(xp, name), getattr(strict, name)
        if name in ("hypot", "logaddexp", "maximum"):
            flipped = np.array(values[::-1], dtype=dtype)
            args_mine, args_ref = (mine, oplib.tensor(flipped)), (ref, strict.asarray(flipped))
        elif name == "clip":
            args_mine, args_ref = (mine, 0, 5), (ref, 0, 5)
        else:
            args_ref = (ref,)
        with warnings.catch_warnings(), standard():
            warnings.simplefilter("error", RuntimeWarning)
            try:
                fn_ref(*args_ref)
            except RuntimeWarning:
                continue  # the reference warns too
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            fn_mine(*args_mine)


def test_log1p_and_logaddexp_gradients_are_accurate_at_their_edges() -> None:
    """log1p's gradient is 1 / (1 + x) where 1 + x rounds (a naive composition's is off by
    up to half); logaddexp's at equal arguments is a half to each."""
    x = oplib.tensor([3e-16, -3e-16, 1e-300, 0.5, -0.5], dtype=oplib.float64, requires_grad=True)
    xp.sum(xp.log1p(x)).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 1 / (1 + x.detach().numpy()), rtol=1e-12)
    a = oplib.tensor([1.0, -2.0], dtype=oplib.float64, requires_grad=True)
    b = oplib.tensor([1.0, 3.0], dtype=oplib.float64, requires_grad=True)
    xp.sum(xp.logaddexp(a, b)).backward()
    assert a.grad is not None and b.grad is not None
    expected = 1 / (1 + np.exp(np.array([0.0, 5.0])))  # sigmoid(a - b)
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), 1 - expected, rtol=1e-12)


def test_asarray_copy_of_a_native_array_and_complex_linspace() -> None:
    a = np.zeros(3)
    shared, copied = xp.asarray(a), xp.asarray(a, copy=True)
    a[0] = 1.0
    assert shared.numpy()[0] == 1.0 and copied.numpy()[0] == 0.0
    with pytest.raises(ValueError, match="copy=False cannot wrap a list"):
        xp.asarray([1.0], copy=False)
    with standard():
        expected = strict.linspace(1 + 2j, 3 - 1j, 5, dtype=strict.complex128)
    agree(xp.linspace(1 + 2j, 3 - 1j, 5, dtype=xp.complex128), expected)
    assert xp.linspace(0, 1j, 3).dtype == xp.complex64  # the default complex dtype
