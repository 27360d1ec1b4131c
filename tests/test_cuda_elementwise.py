"""oplib-cuda's own elementwise kernels (issue 30, ``oplib_cuda.elementwise``).

Here, without a GPU: which calls the own kernel takes (the choice is a pure function of the
arrays' shape, strides, dtype, pointer and device), the switch, and the generated CUDA
source run on the host through a C++ compiler (each thread of the grid in turn, with
``float4``/``__half`` stand-ins) against numpy, for every (op, dtype) and the tail sizes.

Marked ``cuda`` (skipped with the reason without cupy or a device): every (op, dtype)
through ``oplib.ops.oplib`` against cupy's own function on large aligned arrays, tails,
NaN/inf for maximum/minimum, and the calls that must fall back to cupy (a strided view, a
broadcast pair, an unaligned view, an empty array, mixed dtypes).
"""

from __future__ import annotations

import ctypes
import functools
import math
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from oplib_cuda import elementwise as ew

import oplib_core as oplib

from helpers import NUMPY_BINARY

OPS = list(ew.OPS)
DTYPES: list[np.dtype] = [np.dtype("float32"), np.dtype("float16"), np.dtype("int32")]
N = ew.MIN_ELEMENTS
SERVED = [(op, dt) for op in OPS for dt in DTYPES if ew.computes(op, dt)]
TWO_ARRAYS = [op for op, spec in ew.OPS.items() if spec.operand == "array"]
ONE_ARRAY = [op for op, spec in ew.OPS.items() if spec.operand != "array"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """The core's formula, in ``x``'s dtype step by step (as cupy runs it)."""
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e)).astype(x.dtype)


def _clamp(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    """The core's clamp: ``maximum`` with ``lo``, then ``minimum`` with ``hi``, each where
    not None."""
    if lo is not None:
        x = np.maximum(x, lo)
    return x if hi is None else np.minimum(x, hi)


#: numpy's computation of each formula (the core's kernels on numpy arrays compute these).
NUMPY: dict[str, Any] = {
    "neg": np.negative,
    "abs": np.abs,
    "relu": lambda x: np.where(x < 0, np.zeros_like(x), x),
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "sigmoid": _sigmoid,
    **NUMPY_BINARY,
    "clamp": _clamp,
    "where": np.where,
}
#: the formulas whose host results may differ from numpy's in the last place (a C library's
#: ``expf`` is not numpy's); on a GPU every formula is held to cupy's results exactly
INEXACT_ON_HOST = {"exp", "log", "sin", "cos", "tanh", "sigmoid", "pow"}
#: the ops whose scalar is the left operand
REVERSED = {"rsub.Scalar", "rdiv.Scalar", "rpow.Scalar"}


def f(
    shape: tuple[int, ...], dtype: str = "float32", ptr: int = 0x7F0000000000, **kw: Any
) -> ew.ArrayFacts:
    """ArrayFacts of a C-contiguous array, with fields overridden by ``kw``."""
    dt = np.dtype(dtype)
    strides = [dt.itemsize] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return ew.ArrayFacts(shape, tuple(strides), dt, ptr, 0)._replace(**kw)


# -- the choice ---------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "dtype"), SERVED, ids=str)
def test_qualifies_contiguous_aligned_large_same_dtype(op: str, dtype: np.dtype) -> None:
    if ew.OPS[op].operand == "select":
        assert ew.select_layout(f((N,), "bool"), f((N,), dtype), f((N,), dtype)) == "same"
    elif op in TWO_ARRAYS:
        assert ew.qualifies(op, f((N,), dtype), f((N,), dtype))
        assert ew.qualifies(op, f((2048, 2048), dtype), f((2048, 2048), dtype, ptr=0x7F0001000000))
    else:
        assert ew.qualifies(op, f((N,), dtype))
        assert ew.qualifies(op, f((2048, 2048), dtype))


def test_every_served_op_is_a_core_op_and_the_families_are_whole() -> None:
    from oplib_core.kernels import CORE_OPS

    assert set(ew.OPS) <= {op.name for op in CORE_OPS}
    assert {"neg", "sigmoid", "add", "div", "mul.Scalar", "rsub.Scalar", "lt", "ge.Scalar"} <= set(
        ew.OPS
    )
    # int32: what cupy keeps int32 is served, what it gives as float64 is not
    int32 = np.dtype("int32")
    assert all(ew.computes(op, int32) for op in ("neg", "abs", "relu", "add", "lt.Scalar"))
    for op in ("exp", "tanh", "sigmoid", "sqrt", "div", "div.Scalar", "rdiv.Scalar", "pow"):
        assert not ew.computes(op, int32), op
        assert ew.computes(op, np.dtype("float16")), op
    assert not ew.computes("add", np.dtype("float64")) and not ew.computes("pow", int32)


@pytest.mark.parametrize(
    ("why", "x", "y", "op"),
    [
        ("int32 pow (cupy's own loop)", f((N,), "int32"), f((N,), "int32"), "pow"),
        ("op not served", f((N,)), f((N,)), "atan2"),
        ("op not served", f((N,)), f((N,)), "where"),
        ("float64", f((N,), "float64"), f((N,), "float64"), "add"),
        ("int64", f((N,), "int64"), f((N,), "int64"), "add"),
        ("bool", f((N,), "bool"), f((N,), "bool"), "maximum"),
        ("int32 true division", f((N,), "int32"), f((N,), "int32"), "div"),
        ("mixed dtypes", f((N,), "float32"), f((N,), "float16"), "add"),
        ("mixed dtypes, comparison", f((N,), "float32"), f((N,), "int32"), "lt"),
        ("one element in more dimensions", f((N,)), f((1, 1)), "add"),
        ("one element, unaligned to its size", f((N,)), f((1,), ptr=0x7F0000000002), "add"),
        ("one element, other dtype", f((N,)), f((), "float16"), "mul"),
        ("one element, other device", f((N,)), f((), device=1), "mul"),
        ("one element, the large one strided", f((N,), strides=(8,)), f(()), "sub"),
        ("one element, the large one too small", f((N - 1,)), f(()), "sub"),
        ("per row, not a whole number of vectors", f((2048, 2050)), f((2048, 1)), "mul"),
        ("per row and repeated", f((4, 2048, 2048)), f((2048, 1)), "mul"),
        ("per row, more dimensions", f((2048, 2048)), f((1, 2048, 1)), "mul"),
        ("per row, strided", f((2048, 2048)), f((2048, 1), strides=(8, 4)), "mul"),
        ("per row, unaligned", f((2048, 2048)), f((2048, 1), ptr=0x7F0000000002), "mul"),
        ("per row, other dtype", f((2048, 2048)), f((2048, 1), "float16"), "mul"),
        ("along a middle dimension", f((8, 512, 1024)), f((8, 1, 1024)), "add"),
        ("an outer product", f((2048, 1)), f((1, 2048)), "mul"),
        ("repeated, not a whole number of vectors", f((2048, 2050)), f((2050,)), "add"),
        ("repeated, unaligned", f((2048, 2048)), f((2048,), ptr=0x7F0000000004), "add"),
        ("repeated, strided", f((2048, 2048)), f((2048,), strides=(8,)), "add"),
        ("repeated, more dimensions", f((2048, 2048)), f((1, 1, 2048)), "add"),
        ("repeated, other dtype", f((2048, 2048)), f((2048,), "float16"), "add"),
        ("repeated, the large one strided", f((2048, 2048), strides=(16384, 4)), f((2048,)), "add"),
        ("same size, other shape", f((N,)), f((2048, 2048)), "add"),
        ("too small", f((N - 1,)), f((N - 1,)), "add"),
        ("empty", f((0,)), f((0,)), "eq"),
        ("x unaligned (x[1:])", f((N,), ptr=0x7F0000000004), f((N,)), "add"),
        ("y unaligned", f((N,)), f((N,), ptr=0x7F0000000008), "sub"),
        ("strided x[::2]", f((N,), strides=(8,)), f((N,)), "add"),
        ("transposed", f((2048, 2048), strides=(4, 8192)), f((2048, 2048)), "ge"),
        ("reversed", f((N,), strides=(-4,)), f((N,)), "add"),
        ("broadcast view (stride 0)", f((N,)), f((N,), strides=(0,)), "add"),
        ("other device", f((N,)), f((N,), device=1), "add"),
    ],
)
def test_everything_else_falls_back(why: str, x: ew.ArrayFacts, y: ew.ArrayFacts, op: str) -> None:
    assert not ew.qualifies(op, x, y), why
    assert not ew.qualifies(op, y, x), why


@pytest.mark.parametrize(
    ("x", "y", "how"),
    [
        (f((2048, 2048)), f((2048,)), "repeat_y"),  # x + bias
        (f((2048, 2048)), f((1, 2048)), "repeat_y"),
        (f((4, 1024, 1024)), f((1024, 1024)), "repeat_y"),
        (f((4, 1024, 1024)), f((1, 1, 1024)), "repeat_y"),
        (f((2048,)), f((2048, 2048)), "repeat_x"),  # bias - x
        (f((2048, 2048)), f(()), "one_y"),  # x - x.mean()
        (f((2048, 2048)), f((1,)), "one_y"),
        (f((2048, 2048)), f((1, 1)), "one_y"),
        (f((2048, 2048)), f((1,), ptr=0x7F0000000004), "one_y"),  # 4-byte aligned will do
        (f((2048, 2048)), f((1, 1), strides=(64, 12)), "one_y"),  # so will any strides
        (f(()), f((2048, 2048)), "one_x"),  # x.max() - x
        (f((1, 1)), f((2048, 2048)), "one_x"),
        (f((2048, 2048)), f((2048, 1)), "rows_y"),  # x - x.max(-1, keepdims=True)
        (f((4, 1024, 1024)), f((4, 1, 1)), "rows_y"),
        (f((4, 1024, 1024)), f((4, 1024, 1)), "rows_y"),
        (f((1, 2048, 2048)), f((2048, 1)), "rows_y"),
        (f((2048, 2048)), f((2048, 1), ptr=0x7F0000000004), "rows_y"),  # 4-byte aligned
        (f((2048, 1)), f((2048, 2048)), "rows_x"),  # x.sum(-1, keepdims=True) - x
        (f((2048, 2048)), f((2048, 2048), ptr=0x7F0001000000), "same"),
    ],
)
@pytest.mark.parametrize("op", ["add", "sub", "div", "minimum", "lt", "ne"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_one_array_repeated_along_the_others_leading_dimensions(
    x: ew.ArrayFacts, y: ew.ArrayFacts, how: str, op: str, dtype: str
) -> None:
    dt = np.dtype(dtype)
    x = x._replace(dtype=dt, strides=tuple(s // 4 * dt.itemsize for s in x.strides))
    y = y._replace(dtype=dt, strides=tuple(s // 4 * dt.itemsize for s in y.strides))
    assert ew.layout(op, x, y) == how
    assert ew.qualifies(op, x, y)


def test_int32_repeats_where_cupy_keeps_int32() -> None:
    x, y = f((2048, 2048), "int32"), f((2048,), "int32")
    assert ew.layout("mul", x, y) == "repeat_y" and ew.layout("ge", y, x) == "repeat_x"
    assert ew.layout("div", x, y) is None
    one = f((), "int32")
    assert ew.layout("sub", x, one) == "one_y" and ew.layout("lt", one, x) == "one_x"
    assert ew.layout("div", x, one) is None


def test_softmax_and_a_layer_norm_take_the_own_kernel_at_every_full_size_step() -> None:
    """``scipy.special.softmax``'s body (``x - max(x, keepdims=True)``, ``exp``, ``/ sum(...,
    keepdims=True)``) and a layer norm's (``(x - mean) / sqrt(var + eps) * weight + bias``)
    over the last axis of a 2048 x 2048 float32 array, each step's arrays as numpy makes
    them (cupy's reductions with ``keepdims`` make the same shapes, C-contiguous): every
    elementwise step on the full array takes an own kernel; the per-row steps (``var +
    eps``, ``sqrt``) are small and go to cupy."""
    x = np.ones((2048, 2048), np.float32)
    peak = np.max(x, axis=-1, keepdims=True)
    assert ew.layout("sub", _facts(x), _facts(peak)) == "rows_y"
    shifted = x - peak
    assert ew.layout("exp", _facts(shifted)) == "same"
    e = np.exp(shifted)
    assert ew.layout("div", _facts(e), _facts(np.sum(e, axis=-1, keepdims=True))) == "rows_y"

    weight, bias = np.ones(2048, np.float32), np.zeros(2048, np.float32)
    mean = np.mean(x, axis=-1, keepdims=True)
    assert ew.layout("sub", _facts(x), _facts(mean)) == "rows_y"
    centred = x - mean
    assert ew.layout("mul", _facts(centred), _facts(centred)) == "same"
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    assert ew.layout("add.Scalar", _facts(var)) is None  # 2048 elements: cupy's
    scale = np.sqrt(var + 1e-5)
    assert ew.layout("div", _facts(centred), _facts(scale)) == "rows_y"
    normed = centred / scale
    assert ew.layout("mul", _facts(normed), _facts(weight)) == "repeat_y"
    assert ew.layout("add", _facts(normed * weight), _facts(bias)) == "repeat_y"


@pytest.mark.parametrize("least", [0, 1])
def test_one_element_each_side_at_min_elements_0(least: int) -> None:
    """Both arrays one element: the result has the one of more dimensions' shape."""
    assert ew.layout("add", f(()), f(()), min_elements=least) == "same"
    assert ew.layout("add", f((1,)), f((1, 1)), min_elements=least) == "one_x"
    assert ew.layout("add", f((1, 1)), f(()), min_elements=least) == "one_y"
    assert ew.layout("add", f((1, 1)), f(()), min_elements=2) is None
    # an empty array repeats nothing (the kernel divides by the repeated size)
    assert ew.layout("add", f((5, 0)), f((0,)), min_elements=least) is None


@pytest.mark.parametrize(
    ("why", "x", "op"),
    [
        ("float64", f((N,), "float64"), "neg"),
        ("int32 exp is float64", f((N,), "int32"), "exp"),
        ("int32 sigmoid is float64", f((N,), "int32"), "sigmoid"),
        ("int32 true division", f((N,), "int32"), "div.Scalar"),
        ("too small", f((N - 1,)), "tanh"),
        ("empty", f((0,)), "mul.Scalar"),
        ("unaligned", f((N,), ptr=0x7F0000000004), "relu"),
        ("strided", f((N,), strides=(8,)), "lt.Scalar"),
        ("Fortran order", f((2048, 2048), strides=(4, 8192)), "rsub.Scalar"),
    ],
)
def test_one_array_forms_fall_back(why: str, x: ew.ArrayFacts, op: str) -> None:
    assert not ew.qualifies(op, x), why


@pytest.mark.parametrize(
    ("c", "x", "y", "how"),
    [
        (f((N,), "bool"), f((N,)), f((N,)), "same"),
        (f((2048, 2048), "bool"), f((2048, 2048), "float16"), f((2048, 2048), "float16"), "same"),
        (f((N,), "bool"), f((N,), "int32"), f((N,), "int32"), "same"),
        (f((N,), "bool"), f((N,)), f(()), "one_y"),  # x.where(mask, 0.0)
        (f((N,), "bool"), f((1,), ptr=0x7F0000000004), f((N,)), "one_x"),
        (f((N,), "bool"), f((N,)), f((N,), ptr=0x7F0001000000), "same"),
    ],
)
def test_where_on_a_bool_condition_and_arrays_of_its_shape_or_one_element(
    c: ew.ArrayFacts, x: ew.ArrayFacts, y: ew.ArrayFacts, how: str
) -> None:
    assert ew.select_layout(c, x, y) == how
    assert ew.layout("where", x, y) is None  # (judged by select_layout alone)


@pytest.mark.parametrize(
    ("why", "c", "x", "y"),
    [
        ("a condition not bool", f((N,), "uint8"), f((N,)), f((N,))),
        ("a condition broadcast", f((1,), "bool"), f((N,)), f((N,))),
        ("a condition along the last dimension", f((2048, 1), "bool"), f((2048, 2048)), f(())),
        ("a strided condition", f((N,), "bool", strides=(2,)), f((N,)), f((N,))),
        ("an unaligned condition", f((N,), "bool", ptr=0x7F0000000004), f((N,)), f((N,))),
        ("too small", f((N - 1,), "bool"), f((N - 1,)), f((N - 1,))),
        ("mixed dtypes", f((N,), "bool"), f((N,)), f((N,), "float16")),
        ("float64", f((N,), "bool"), f((N,), "float64"), f((N,), "float64")),
        ("x strided", f((N,), "bool"), f((N,), strides=(8,)), f((N,))),
        ("y unaligned", f((N,), "bool"), f((N,)), f((N,), ptr=0x7F0000000004)),
        ("x repeated (a bias)", f((2048, 2048), "bool"), f((2048,)), f((2048, 2048))),
        ("both one element", f((N,), "bool"), f(()), f(())),
        ("other device", f((N,), "bool"), f((N,)), f((N,), device=1)),
    ],
)
def test_where_falls_back_for_everything_else(
    why: str, c: ew.ArrayFacts, x: ew.ArrayFacts, y: ew.ArrayFacts
) -> None:
    assert ew.select_layout(c, x, y) is None, why


def test_the_operands_must_be_the_ops_own() -> None:
    """A binary op needs its second array; a unary or scalar op takes none."""
    assert not ew.qualifies("add", f((N,)))
    assert not ew.qualifies("neg", f((N,)), f((N,)))
    assert not ew.qualifies("mul.Scalar", f((N,)), f((N,)))


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        ("float32", 2.5, np.float32(2.5)),
        ("float32", 3, np.float32(3.0)),
        ("float32", 0.1, np.float32(0.1)),  # cast to float32, as cupy casts a weak scalar
        ("float32", 1 << 40, np.float32(1 << 40)),
        ("float32", float("inf"), np.float32("inf")),
        ("float32", -0.0, np.float32(-0.0)),
        ("int32", 7, np.int32(7)),
        ("int32", -(1 << 31), np.int32(-(1 << 31))),
        ("int32", (1 << 31) - 1, np.int32((1 << 31) - 1)),
    ],
)
def test_scalar_operand_casts_as_cupy(dtype: str, value: object, expected: np.generic) -> None:
    got = ew.scalar_operand(np.dtype(dtype), value)
    assert got is not None and got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()


def test_a_float16_scalar_travels_as_its_bits() -> None:
    got = ew.scalar_operand(np.dtype("float16"), 0.1)
    assert got is not None and got.dtype == np.uint32
    assert int(got) == int(np.float16(0.1).view(np.uint16))
    nan = ew.scalar_operand(np.dtype("float16"), float("nan"))
    assert nan is not None and np.isnan(np.uint16(nan).view(np.float16))


@pytest.mark.parametrize(
    ("why", "dtype", "value"),
    [
        ("overflows float16 where the scalar does not", "float16", 70000),
        ("overflows float32", "float32", 1e39),
        ("beyond float64", "float32", 1 << 1100),
        ("beyond int32", "int32", 1 << 31),
        ("below int32", "int32", -(1 << 31) - 1),
        ("a float with int32 (float64 result)", "int32", 2.5),
        ("bool", "float32", True),
        ("bool", "int32", False),
        ("complex", "float32", 1j),
        ("a numpy scalar (not weak)", "float32", np.float64(2.0)),
        ("a numpy int32 scalar", "int32", np.int32(2)),
        ("an array", "float32", np.ones(3, np.float32)),
        ("float64 arrays", "float64", 2.0),
    ],
)
def test_scalar_operand_leaves_everything_else_to_cupy(why: str, dtype: str, value: object) -> None:
    assert ew.scalar_operand(np.dtype(dtype), value) is None, why


def test_clamp_bounds_cast_as_scalars_and_none_is_the_identity() -> None:
    f32, f16, i32 = np.dtype("float32"), np.dtype("float16"), np.dtype("int32")
    assert ew.clamp_bounds(f32, 0, 6.5) == (np.float32(0), np.float32(6.5))
    assert ew.clamp_bounds(f32, None, 1) == (np.float32(-np.inf), np.float32(1))
    assert ew.clamp_bounds(f32, -1, None) == (np.float32(-1), np.float32(np.inf))
    lo, hi = ew.clamp_bounds(f16, None, 0.5) or ()
    assert lo == np.uint32(0xFC00) and hi == np.uint32(0x3800)  # -inf and 0.5, as bits
    assert ew.clamp_bounds(i32, None, 3) == (np.int32(-(1 << 31)), np.int32(3))
    assert ew.clamp_bounds(i32, -3, None) == (np.int32(-3), np.int32((1 << 31) - 1))


@pytest.mark.parametrize(
    ("why", "dtype", "lo", "hi"),
    [
        ("both None: the core raises", "float32", None, None),
        ("int32 with a float bound: a float result", "int32", 0.5, None),
        ("int32 bound out of range", "int32", None, 1 << 31),
        ("overflows float16", "float16", -1e6, None),
        ("a numpy scalar", "float32", np.float32(0), 1.0),
        ("a bool", "float32", 0.0, True),
        ("a 0-d array", "float32", np.zeros(()), None),
    ],
)
def test_clamp_bounds_leave_everything_else_to_cupy(why: str, dtype: str, lo: Any, hi: Any) -> None:
    assert ew.clamp_bounds(np.dtype(dtype), lo, hi) is None, why


def test_c_contiguous_ignores_strides_of_length_one_dimensions() -> None:
    assert ew.c_contiguous((N, 1), (4, 12345), 4)
    assert ew.c_contiguous((1, N), (0, 4), 4)
    assert ew.c_contiguous((2, 3, 4), (48, 16, 4), 4)
    assert not ew.c_contiguous((2, 3, 4), (48, 16, 8), 4)
    assert not ew.c_contiguous((3, 2), (4, 12), 4)  # Fortran order


# -- the switch ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "No", " OFF "])
def test_switch_off_binds_cupys_kernel_itself(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ew.SWITCH, value)

    def cupy_add(self: Any, other: Any) -> Any:
        return self + other

    assert not ew.enabled()
    assert ew.fast_kernel("add", cupy_add) is cupy_add


@pytest.mark.parametrize("value", [None, "1", "yes", "on"])
def test_switch_on_wraps_the_served_ops_only(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(ew.SWITCH, raising=False)
    else:
        monkeypatch.setenv(ew.SWITCH, value)

    def cupy_add(self: Any, other: Any) -> Any:
        """cupy's."""
        return self + other

    assert ew.enabled()
    wrapped = ew.fast_kernel("add", cupy_add)
    assert wrapped is not cupy_add
    assert wrapped.__name__ == "cupy_add" and wrapped.__doc__ == "cupy's."
    for name in (
        "neg",
        "div",
        "pow",
        "add.Scalar",
        "rpow.Scalar",
        "ge.Scalar",
        "eq",
        "clamp",
        "where",
    ):
        assert ew.fast_kernel(name, cupy_add) is not cupy_add, name
    for name in ("clamp_", "add.out", "mul_.Tensor", "sum", "matmul", "atan2"):
        assert ew.fast_kernel(name, cupy_add) is cupy_add, name


@pytest.mark.parametrize("op", ["add", "neg", "mul.Scalar", "lt"])
def test_min_elements_moves_the_threshold_and_nothing_else(op: str) -> None:
    small, aligned_off = f((4,)), f((4,), ptr=0x7F0000000004)
    y = small if op in TWO_ARRAYS else None
    assert not ew.qualifies(op, small, y)  # MIN_ELEMENTS by default
    assert ew.qualifies(op, small, y, min_elements=4)
    assert not ew.qualifies(op, small, y, min_elements=5)
    assert ew.layout(op, f((0,)), f((0,)) if y else None, min_elements=0) == "same"
    assert not ew.qualifies(op, aligned_off, y, min_elements=0)  # the rest still holds
    if y is not None:
        assert ew.layout(op, f((4, 4)), f((4,), ptr=0x7F0000001000), min_elements=16) == (
            "repeat_y"
        )
        assert ew.layout(op, f((4, 4)), f((4,), ptr=0x7F0000001000), min_elements=17) is None


@pytest.mark.parametrize("least", [-1, 2.0, "1", None])
def test_fast_kernel_refuses_a_bad_min_elements(least: Any) -> None:
    with pytest.raises(ValueError, match=f"min_elements must be an int >= 0, got {least!r}"):
        ew.fast_kernel("add", np.add, min_elements=least)


def test_fast_kernel_routes_by_its_own_min_elements() -> None:
    calls = []

    def cupy_neg(self: Any) -> Any:
        calls.append(self.size)
        return -self

    kernel = ew.fast_kernel("neg", cupy_neg, min_elements=8)
    assert kernel.min_size == 8  # type: ignore[attr-defined]
    kernel(np.ones(7))
    assert calls == [7]
    # 8 elements reach the choice of kernel, which needs cupy (or says why it cannot)
    if ew.runtime.status() is not None:
        with pytest.raises(oplib.errors.BackendError, match="the cuda backend is unavailable"):
            kernel(np.ones(8))
    else:  # numpy's arrays are not cupy's: the fallback
        kernel(np.ones(8))
        assert calls == [7, 8]


def test_serves_only_cupy_arrays() -> None:
    a = np.ones(N, np.float32)
    assert not ew.serves("add", a, a)  # numpy arrays, with or without cupy here


def test_small_calls_go_to_cupys_kernel_without_looking_further() -> None:
    # below MIN_ELEMENTS only ``size`` is read: numpy arrays stand in for small cupy arrays
    calls = []

    def cupy_mul(self: Any, other: Any) -> Any:
        calls.append((self, other))
        return self * other

    a, b = np.arange(3.0), np.arange(3.0)
    out = ew.fast_kernel("mul", cupy_mul)(a, b)
    np.testing.assert_array_equal(out, a * b)
    assert calls == [(a, b)]


@pytest.mark.parametrize(
    ("op", "args"),
    [("tanh", ()), ("mul.Scalar", (2.0,)), ("lt.Scalar", (1,)), ("clamp", (0.0, None))],
)
def test_small_unary_and_scalar_calls_go_to_cupys_kernel(op: str, args: tuple[Any, ...]) -> None:
    calls = []

    def cupy_kernel(*given: Any) -> Any:
        calls.append(given)
        return given[0]

    a = np.arange(3.0)
    assert ew.fast_kernel(op, cupy_kernel)(a, *args) is a
    assert calls == [(a, *args)]


def test_a_binary_call_whose_second_array_is_large_looks_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``bias - x``: the large array second still reaches the choice of kernel, which asks
    for cupy's array type (here a type no array has: numpy's arrays then go to the
    fallback); two small arrays never do."""
    asked = []

    class Library:
        @property
        def ndarray(self) -> type:
            asked.append("ndarray")
            return type("NoArray", (), {})

    monkeypatch.setattr(ew.runtime, "cupy", Library)
    calls = []

    def cupy_sub(self: Any, other: Any) -> Any:
        calls.append("fallback")
        return self - other

    kernel = ew.fast_kernel("sub", cupy_sub)
    bias, x = np.ones(4, np.float32), np.ones(N, np.float32)
    kernel(bias, bias)
    assert asked == [] and calls == ["fallback"]
    np.testing.assert_array_equal(kernel(bias.reshape(1, 4), x.reshape(-1, 4)), 0)
    assert asked == ["ndarray"] and calls == ["fallback"] * 2
    assert ew.fast_kernel("mul.Scalar", cupy_sub).among == 1  # type: ignore[attr-defined]


def test_small_calls_skip_a_kernel_whose_fast_entry_is_cupys_function() -> None:
    """The plugin's fallback is the core's kernel, which offers cupy's function as its
    ``fast_entry``: small calls call that function, one frame less."""
    calls = []

    def cupy_multiply(self: Any, other: Any) -> Any:
        calls.append("function")
        return self * other

    def kernel(self: Any, other: Any) -> Any:
        calls.append("kernel")
        return cupy_multiply(self, other)

    kernel.fast_entry = cupy_multiply  # type: ignore[attr-defined]
    a = np.arange(3.0)
    np.testing.assert_array_equal(ew.fast_kernel("mul", kernel)(a, a), a * a)
    assert calls == ["function"]


# -- the generated CUDA source, run on the host ---------------------------------------------

_SHIM = r"""
#include <cmath>
#include <math.h>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
struct oplib_dim { unsigned int x; };
static oplib_dim blockIdx, blockDim, threadIdx, gridDim;
// aligned as CUDA aligns them, so that the sanitizer below catches a misaligned vector load
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
typedef _Float16 oplib_half;
static inline float __int_as_float(int i) { float v; std::memcpy(&v, &i, 4); return v; }
static inline oplib_half __ushort_as_half(unsigned short u) {
    oplib_half h; std::memcpy(&h, &u, 2); return h;
}
static inline unsigned short __half_as_ushort(oplib_half h) {
    unsigned short u; std::memcpy(&u, &h, 2); return u;
}
static inline float __half2float(oplib_half h) { return (float)h; }
static inline oplib_half __float2half_rn(float v) { return (oplib_half)v; }
"""


def _host_source() -> str:
    """Every own kernel, from the modules the plugin compiles (``module_source``), each with
    ``run_<name>(x, y, s, z, n, m, blocks, threads)`` running every thread of the grid in
    turn (``y``: the second array, ``s``: a pointer to the scalar's 32-bit argument, to
    clamp's two or to where's condition, ``m``: the repeated array's size or a row's
    length; each used only by the kernels taking it)."""
    parts = [_SHIM]
    for dt in DTYPES:
        parts.append(ew.module_source(dt).replace("#include <cuda_fp16.h>", ""))
        for op, how in ew.kernels_of(dt):
            name = ew.kernel_name(op, dt, how)
            spec, scalar = ew.OPS[op], ew.DTYPES[dt][0]
            result = "bool" if ew.FORMULAS[spec.formula].predicate else scalar
            arg = "unsigned int" if dt.itemsize == 2 else scalar
            x, y = f"(const {scalar}*)x", f"(const {scalar}*)y"
            operands = {
                "none": [x],
                "array": [x, y],
                "scalar": [x, f"*(const {arg}*)s"],
                "bounds": [x, f"((const {arg}*)s)[0]", f"((const {arg}*)s)[1]"],
                "select": ["(const unsigned char*)s", x, y],  # the condition at s
            }[spec.operand]
            m = ["m"] if how.startswith(("repeat", "rows")) else []
            call = ", ".join([*operands, f"({result}*)z", "n", *m])
            parts.append(
                f'extern "C" void run_{name}(const void* x, const void* y, const void* s, '
                "void* z, long long n, long long m, unsigned blocks, unsigned threads) {\n"
                "    gridDim.x = blocks; blockDim.x = threads;\n"
                "    for (unsigned b = 0; b < blocks; ++b)\n"
                "        for (unsigned t = 0; t < threads; ++t) {\n"
                "            blockIdx.x = b; threadIdx.x = t;\n"
                f"            ns_{name}::{name}({call});\n"
                "        }\n}\n"
            )
    return "\n".join(parts)


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler (g++) to run the generated source on the host")
    work: Path = tmp_path_factory.mktemp("elementwise")
    # UBSan's options (read as its runtime loads): its reports to files of work's
    options = f"log_path={work / 'ubsan'}:halt_on_error=0"
    hook = f'extern "C" const char* __ubsan_default_options() {{ return "{options}"; }}\n'
    (work / "k.cpp").write_text(_host_source() + hook)
    command = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(work / "k.so")]
    # UBSan, where the compiler has it: a misaligned vector load, a signed overflow or a
    # division by zero in a kernel fails the test that ran it, with UBSan's report (on a
    # GPU, a misaligned load is a sticky CUDA error failing every later test of the process)
    done = subprocess.run(
        [*command, "-fsanitize=undefined", str(work / "k.cpp")], capture_output=True, text=True
    )
    sanitized = done.returncode == 0
    if not sanitized:
        done = subprocess.run([*command, str(work / "k.cpp")], capture_output=True, text=True)
    if done.returncode and "_Float16" in done.stderr:
        pytest.skip(f"{cxx} has no _Float16 for the float16 stand-in")
    assert done.returncode == 0, done.stderr[-3000:]
    lib = ctypes.CDLL(str(work / "k.so"))
    _UBSAN_REPORTS[lib._name] = work if sanitized else None
    return lib


#: where each host library's UBSan writes its reports (None: built without UBSan)
_UBSAN_REPORTS: dict[str, Path | None] = {}


def _undefined_behaviour(lib: ctypes.CDLL) -> str:
    """What UBSan reported for ``lib`` since the last call (the reports are removed)."""
    work = _UBSAN_REPORTS.get(lib._name)
    found = [] if work is None else sorted(work.glob("ubsan*"))
    text = "".join(f.read_text() for f in found)
    for f in found:
        f.unlink()
    return text


def _random(dtype: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Every bit pattern as likely as another: NaN, inf, subnormals, signed zeros, and
    int32 values whose sums and products wrap; but each NaN quiet. (CUDA has no signaling
    NaN: ``powf(NaN, 0)`` is 1 for every NaN there, where the host's ``powf`` and numpy's
    float16 loop give NaN for a signaling one.)"""
    bits = rng.integers(0, 2**32, size=(n * dtype.itemsize + 3) // 4, dtype=np.uint32)
    out: np.ndarray = bits.view(dtype)[:n].copy()
    if dtype.kind == "f":
        quiet = {2: 0x0200, 4: 0x00400000}[dtype.itemsize]  # the top bit of the fraction
        as_bits = out.view(f"u{dtype.itemsize}")
        as_bits[np.isnan(out)] |= quiet
    return out


def _host_run(
    lib: ctypes.CDLL,
    op: str,
    x: np.ndarray,
    other: Any = None,
    blocks: int = 1,
    how: ew.Layout = "same",
) -> np.ndarray:
    """The generated kernel of ``op`` on ``x`` (and ``other``: an array, a Python scalar,
    clamp's bounds as a pair, or where's condition and other array) run on the host in
    layout ``how``, which must be the one ``layout`` (``select_layout``) gives for arrays
    of these shapes; the result's every element must have been written."""
    spec = ew.OPS[op]
    predicate = ew.FORMULAS[spec.formula].predicate
    y = other if spec.operand == "array" else None
    shape = x.shape
    m = 0  # the repeated array's size, or the length of a row
    s = None
    if spec.operand == "select":
        s, y = other
        assert s.dtype == np.bool_
        if how != "same":
            assert ew.select_layout(_facts(s), _facts(x), _facts(y), min_elements=0) == how
        shape = s.shape
    elif y is not None:
        if how != "same":  # (numpy's empty arrays have stride 0: not C-contiguous to layout)
            assert ew.layout(op, _facts(x), _facts(y), min_elements=0) == how
        shape = np.broadcast_shapes(x.shape, y.shape)
        small = x if how.endswith("_x") else y
        if how.startswith("repeat"):
            m = small.size
        elif how.startswith("rows"):
            m = math.prod(shape) // small.size
    # a sentinel: 7 is neither a bool's byte nor (for the tests' inputs) a likely result
    z = np.full(shape, 7, np.uint8 if predicate else x.dtype)
    if spec.operand == "scalar":
        s = np.array(ew.scalar_operand(x.dtype, other))
    elif spec.operand == "bounds":
        s = np.array(ew.clamp_bounds(x.dtype, *other))
    assert s is None or s.dtype != object
    fn = getattr(lib, f"run_{ew.kernel_name(op, x.dtype, how)}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_longlong] * 2 + [ctypes.c_uint] * 2
    fn(
        x.ctypes.data,
        None if y is None else y.ctypes.data,
        None if s is None else s.ctypes.data,
        z.ctypes.data,
        z.size,
        m,
        blocks,
        4,
    )
    reported = _undefined_behaviour(lib)
    assert not reported, f"undefined behaviour in {ew.kernel_name(op, x.dtype, how)}: {reported}"
    if predicate:
        assert set(np.unique(z)) <= {0, 1}, "an element was not written"
        return z.view(np.bool_)
    return z


def _facts(a: np.ndarray) -> ew.ArrayFacts:
    """A numpy array's :class:`ArrayFacts`, as ``facts`` reads a cupy array's."""
    return ew.ArrayFacts(a.shape, a.strides, a.dtype, a.ctypes.data, 0)


def _expected(op: str, x: np.ndarray, other: Any = None) -> np.ndarray:
    """numpy's result for ``op`` as cupy computes it (a scalar cast to ``x``'s dtype first)."""
    spec = ew.OPS[op]
    fn = NUMPY[spec.formula]
    with np.errstate(all="ignore"):
        if spec.operand == "none":
            return np.asarray(fn(x))
        if spec.operand == "array":
            return np.asarray(fn(x, other))
        if spec.operand == "bounds":
            return np.asarray(fn(x, *(None if b is None else x.dtype.type(b) for b in other)))
        if spec.operand == "select":
            condition, y = other
            return np.asarray(np.where(condition, x, y))
        s = x.dtype.type(other)
        return np.asarray(fn(s, x) if op in REVERSED else fn(x, s))


def _assert_like(op: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if ew.OPS[op].formula in INEXACT_ON_HOST:
        rtol = 2e-3 if got.dtype == np.float16 else 4e-6
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=0)
        # the same NaN, inf and sign wherever numpy's result is one
        assert np.array_equal(np.isnan(got), np.isnan(expected))
        assert np.array_equal(np.isinf(got) & (got > 0), np.isinf(expected) & (expected > 0))
    else:
        np.testing.assert_array_equal(got, expected)


_SCALARS: dict[str, list[Any]] = {
    "float": [2.5, -0.0, 0.1, 3, -1e-3, float("inf"), float("nan")],
    "int": [0, 7, -3, (1 << 31) - 1, -(1 << 31)],
}
#: clamp's (min, max): either None, min above max (max wins, as the core's order makes it)
_BOUNDS: dict[str, list[tuple[Any, Any]]] = {
    "float": [
        (0.0, 6.0),
        (None, 1.5),
        (-2.5, None),
        (5.0, 3.0),
        (-0.0, 0.0),
        (0.1, None),
        (float("nan"), None),
        (None, float("nan")),
        (-float("inf"), float("inf")),
    ],
    "int": [(0, 6), (None, 3), (-5, None), (5, 3), (-(1 << 31), (1 << 31) - 1)],
}


@pytest.mark.parametrize(("op", "dtype"), SERVED, ids=str)
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 4099])
def test_generated_source_on_the_host_equals_numpy(
    host_kernels: ctypes.CDLL, op: str, dtype: np.dtype, n: int
) -> None:
    rng = np.random.default_rng(n)
    x = _random(dtype, n, rng)
    spec = ew.OPS[op]
    if spec.operand == "array":
        others: list[Any] = [_random(dtype, n, rng)]
        others[0][: n // 3] = x[: n // 3]  # equal pairs too (maximum, eq, le of equal values)
    elif spec.operand == "scalar":
        others = _SCALARS["int" if dtype == np.int32 else "float"]
        x[: n // 4] = x.dtype.type(others[0])  # elements equal to the scalar too
    elif spec.operand == "bounds":
        others = _BOUNDS["int" if dtype == np.int32 else "float"]
        x[: n // 4] = x.dtype.type(6)  # elements equal to a bound too
    elif spec.operand == "select":
        others = [(rng.random(n) < 0.5, _random(dtype, n, rng))]
    else:
        others = [None]
    for other in others:
        expected = _expected(op, x, other)
        for blocks in (1, 3):  # one block of 4 threads, and a grid that strides
            _assert_like(op, _host_run(host_kernels, op, x, other, blocks), expected)


@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dt) for op, dt in SERVED if op in TWO_ARRAYS], ids=str
)
@pytest.mark.parametrize(
    ("big", "small", "kind"),
    [
        ((8,), (8,), "same"),
        ((5, 16), (16,), "repeat"),
        ((3, 2, 8), (2, 8), "repeat"),
        ((4, 24), (1, 24), "repeat"),
        # 10 float32 vectors (5 of float16) repeat, where a grid of 4 or 12 threads strides
        # past the repeated array's end to a different vector of it
        ((7, 40), (40,), "repeat"),
        ((5, 16), (5, 1), "rows"),
        ((3, 4, 8), (3, 1, 1), "rows"),
        ((3, 4, 8), (3, 4, 1), "rows"),
        ((1, 5, 16), (5, 1), "rows"),
        # rows of 10 float32 vectors (5 of float16), a grid striding past a row's end
        ((7, 40), (7, 1), "rows"),
        # rows of one float16 vector (two of float32): a step crosses several rows
        ((40, 8), (40, 1), "rows"),
    ],
)
def test_generated_broadcast_layouts_on_the_host_equal_numpy(
    host_kernels: ctypes.CDLL,
    op: str,
    dtype: np.dtype,
    big: tuple[int, ...],
    small: tuple[int, ...],
    kind: str,
) -> None:
    """One array repeated along the other's leading dimensions (``x + bias``, ``bias - x``)
    or one value per row of the other (``x - x.max(-1, keepdims=True)``), on either side:
    numpy's broadcasting."""
    rng = np.random.default_rng(len(big))
    x = _random(dtype, math.prod(big), rng).reshape(big)
    y = _random(dtype, math.prod(small), rng).reshape(small)
    flat = x.reshape(-1)
    if kind == "rows":  # equal pairs too: each row's first element its row's value
        flat[:: x.size // y.size] = y.reshape(-1)
    else:
        flat[: y.size] = y.reshape(-1)
    for a, b, side in ((x, y, "y"), (y, x, "x")):
        expected = _expected(op, a, b)
        how = cast(ew.Layout, "same" if kind == "same" else f"{kind}_{side}")
        for blocks in (1, 3):
            _assert_like(op, _host_run(host_kernels, op, a, b, blocks, how), expected)


@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dt) for op, dt in SERVED if op in TWO_ARRAYS], ids=str
)
@pytest.mark.parametrize(
    ("big", "one"), [((37,), ()), ((3, 8), (1,)), ((2, 4, 3), (1, 1)), ((1,), ())]
)
def test_generated_one_element_layouts_on_the_host_equal_numpy(
    host_kernels: ctypes.CDLL,
    op: str,
    dtype: np.dtype,
    big: tuple[int, ...],
    one: tuple[int, ...],
) -> None:
    """One array a single element, on either side (``x - x.mean()``, ``x.max() - x``), each
    of several values (NaN, inf, 0, an element of the other array): numpy's broadcasting."""
    rng = np.random.default_rng(len(big))
    x = _random(dtype, math.prod(big), rng).reshape(big)
    values = [*_random(dtype, 3, rng), x.reshape(-1)[-1]]
    if dtype.kind == "f":
        values += [dtype.type(v) for v in (np.nan, np.inf, -0.0)]
    for value in values:
        y = np.full(one, value, dtype)
        for a, b, how in ((x, y, "one_y"), (y, x, "one_x")):
            expected = _expected(op, a, b)
            for blocks in (1, 3):
                _assert_like(op, _host_run(host_kernels, op, a, b, blocks, how), expected)


def _offset(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` one element past an aligned allocation's start: aligned to its
    element size, not to 16 bytes."""
    buffer = np.empty(a.size + 1, a.dtype)
    out = buffer[1:].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % ew.ALIGNMENT
    return out


@pytest.mark.parametrize(("op", "dtype"), [("sub", dt) for dt in DTYPES], ids=str)
@pytest.mark.parametrize(
    ("big", "small", "kind"),
    [((64,), (1,), "one"), ((4, 16), (), "one"), ((8, 16), (8, 1), "rows")],
)
def test_generated_layouts_read_an_operand_aligned_to_its_element_alone(
    host_kernels: ctypes.CDLL,
    op: str,
    dtype: np.dtype,
    big: tuple[int, ...],
    small: tuple[int, ...],
    kind: str,
) -> None:
    """A single element or a value per row may be aligned to its element size alone: the
    kernels read it element by element (a 16-byte load of it would stop the sanitized
    host run)."""
    rng = np.random.default_rng(3)
    x = _random(dtype, math.prod(big), rng).reshape(big)
    y = _offset(_random(dtype, max(1, math.prod(small)), rng).reshape(small))
    for a, b, side in ((x, y, "y"), (y, x, "x")):
        how = cast(ew.Layout, f"{kind}_{side}")
        _assert_like(op, _host_run(host_kernels, op, a, b, 3, how), _expected(op, a, b))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 9, 64, 4099])
def test_generated_where_with_one_element_on_either_side_equals_numpy(
    host_kernels: ctypes.CDLL, dtype: np.dtype, n: int
) -> None:
    """``x.where(mask, 0.0)`` and ``where(mask, 0.0, y)``: the single element's stored value
    (float16 NaN and -0.0 bits too) wherever the condition picks it."""
    rng = np.random.default_rng(n)
    condition, x = rng.random(n) < 0.5, _random(dtype, n, rng)
    for value in _random(dtype, 4, rng):
        one = np.full((), value, dtype)
        for a, b, how in ((x, one, "one_y"), (one, x, "one_x")):
            got = _host_run(host_kernels, "where", a, (condition, b), 3, how)
            expected = _expected("where", a, (condition, b))
            np.testing.assert_array_equal(
                got.view(f"u{dtype.itemsize}"), expected.view(f"u{dtype.itemsize}")
            )


@pytest.mark.parametrize("op", ["maximum", "minimum", "lt", "ge", "eq", "ne"])
@pytest.mark.parametrize("dtype", [np.dtype("float32"), np.dtype("float16")], ids=str)
def test_generated_source_propagates_nan_and_orders_inf(
    host_kernels: ctypes.CDLL, op: str, dtype: np.dtype
) -> None:
    v = [np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 2.0, -3.0, 5.0]
    w = [1.0, np.nan, 1.0, -1.0, np.nan, 0.0, np.inf, -np.inf, 5.0]
    x, y = np.array(v, dtype), np.array(w, dtype)
    _assert_like(op, _host_run(host_kernels, op, x, y), _expected(op, x, y))


@pytest.mark.parametrize("dtype", [np.dtype("float32"), np.dtype("float16")], ids=str)
def test_generated_sigmoid_and_relu_keep_the_core_formulas_edges(
    host_kernels: ctypes.CDLL, dtype: np.dtype
) -> None:
    x = np.array([-np.inf, -100.0, -20.0, -1.0, -0.0, 0.0, 1.0, 20.0, 100.0, np.inf, np.nan], dtype)
    got = _host_run(host_kernels, "sigmoid", x)
    _assert_like("sigmoid", got, _sigmoid(x))
    assert got[0] == 0 and got[9] == 1 and got[4] == 0.5 and np.isnan(got[10])
    relu = _host_run(host_kernels, "relu", x)
    np.testing.assert_array_equal(relu, np.where(x < 0, 0, x).astype(dtype))
    assert np.signbit(relu[4])  # -0.0 is not below 0: kept, as the core's where keeps it


@pytest.mark.parametrize("op", sorted(op for op in INEXACT_ON_HOST if ew.OPS[op].operand == "none"))
def test_generated_float16_source_rounds_as_cupy_on_every_float16_value(
    host_kernels: ctypes.CDLL, op: str
) -> None:
    """Every float16 value: the results equal numpy's (float32 math, each step rounded to
    float16 as cupy's float16 rounds it) but for the few where the host's ``expf`` and
    numpy's differ by a float32 ulp across a float16 rounding boundary. Leaving out a step's
    rounding (sigmoid's ``1 + e``) changes thousands."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got, expected = _host_run(host_kernels, op, x), _expected(op, x)
    differ = ~((got == expected) | (np.isnan(got) & np.isnan(expected)))
    assert differ.sum() <= 8, x[differ][:20]
    ulps = np.abs(got[differ].view(np.int16).astype(np.int32) - expected[differ].view(np.int16))
    assert (ulps <= 1).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_generated_clamp_keeps_every_value_a_none_bound_does_not_limit(
    host_kernels: ctypes.CDLL, dtype: np.dtype
) -> None:
    """A None bound changes nothing: the extremes (int32's least and greatest, -inf and
    +inf) and NaN come through."""
    if dtype == np.int32:
        x = np.array([-(1 << 31), (1 << 31) - 1, -1, 0, 1, 2, 3, 4, 5], dtype)
    else:
        x = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, -1, 1, 2, 3], dtype)
    for bounds in ((None, 1), (-1, None)):
        got = _host_run(host_kernels, "clamp", x, bounds)
        _assert_like("clamp", got, _expected("clamp", x, bounds))
    np.testing.assert_array_equal(_host_run(host_kernels, "clamp", x, (None, 1))[[0, 2]], x[[0, 2]])
    np.testing.assert_array_equal(
        _host_run(host_kernels, "clamp", x, (-1, None))[[1, 2]], x[[1, 2]]
    )


def test_generated_source_of_int32_wraps_as_cupy(host_kernels: ctypes.CDLL) -> None:
    lo, hi = -(1 << 31), (1 << 31) - 1
    x = np.array([lo, hi, -1, 0, 5, lo, hi, 3, 4], np.int32)
    np.testing.assert_array_equal(_host_run(host_kernels, "neg", x), -x)
    np.testing.assert_array_equal(_host_run(host_kernels, "abs", x), np.abs(x))
    got = _host_run(host_kernels, "add.Scalar", x, 1)
    np.testing.assert_array_equal(got, x + np.int32(1))
    np.testing.assert_array_equal(_host_run(host_kernels, "rsub.Scalar", x, 0), np.int32(0) - x)


def test_source_names_its_vector_types_and_lanes() -> None:
    code, name = ew.source("add", np.dtype("float16"))
    assert name == "oplib_add_float16"
    assert "#include <cuda_fp16.h>" in code and "uint4" in code and "n / 8" in code
    code, name = ew.source("maximum", np.dtype("float32"))
    assert name == "oplib_maximum_float32" and "float4" in code and "n / 4" in code
    assert "cuda_fp16" not in code
    code, _ = ew.source("mul", np.dtype("int32"))
    assert "int4" in code and "(unsigned int)a * (unsigned int)b" in code
    # comparisons store a bool per lane: 4 bytes per float4 read, 8 per float16 uint4
    code, name = ew.source("lt.Scalar", np.dtype("float32"))
    assert name == "oplib_lt_Scalar_float32"
    assert (
        "unsigned int* zv" in code
        and "bool* __restrict__ z" in code
        and "const float s_arg" in code
    )
    code, _ = ew.source("ge", np.dtype("float16"))
    assert "uint2* zv" in code
    code, _ = ew.source("rdiv.Scalar", np.dtype("float16"))
    assert "const unsigned int s_arg" in code and "oplib_op(s, x[i])" in code
    code, _ = ew.source("exp", np.dtype("float32"))
    assert "oplib_op(x_i.x)" in code and "expf(a)" in code
    # one element read once per thread, the other array's vectors the loop's
    code, name = ew.source("sub", np.dtype("float32"), "one_x")
    assert name == "oplib_sub_float32_one_x" and "const float s = x[0];" in code
    assert "oplib_op(s, y_i.w)" in code and "xv" not in code and "long long m" not in code
    code, _ = ew.source("div", np.dtype("float16"), "one_y")
    assert "const unsigned short s = y[0];" in code and "oplib_op(x[i], s)" in code


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to compile the CUDA source")
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_module_compiles_with_nvcc_and_loads_16_bytes_at_a_time(
    tmp_path: Path, dtype: np.dtype
) -> None:
    """The true CUDA compiler (for sm_90, as cupy would for an H100/H200) on the module the
    plugin compiles for ``dtype``: every kernel in it, each loading 16-byte vectors (the
    bandwidth the kernels are for) and storing vectors or packed words."""
    path = tmp_path / "k.cu"
    path.write_text(ew.module_source(dtype))
    ptx = path.with_suffix(".ptx")
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-ftz=true", "-ptx", "-o", str(ptx), str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in done.stderr, done.stderr[-3000:]
    entries = ptx.read_text().split(".entry")[1:]
    names = {entry.split("(", 1)[0].strip() for entry in entries}
    assert names == {ew.kernel_name(op, dtype, how) for op, how in ew.kernels_of(dtype)}
    for entry in entries:
        assert "ld.global.nc.v4" in entry, entry[:200]
        assert "st.global.v" in entry or "st.global.u32" in entry, entry[:200]
        # the vector loop keeps its indices by adding: an integer division or remainder
        # per 16-byte step costs more than the step's traffic (the tail may divide)
        for block in re.split(r"\n\$L__BB\d+_\d+:", entry):
            if "ld.global.nc.v4" in block:
                assert not re.search(r"\b(rem|div)\.[su](32|64)\b", block), entry[:200]


# -- on a GPU: against cupy -----------------------------------------------------------------


@pytest.fixture
def cp() -> Any:
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    if not ew.enabled():
        pytest.skip(f"{ew.SWITCH} turns the own kernels off in this process")
    return pytest.importorskip("cupy")


def _reference(cp: Any, op: str) -> Any:
    """The core's kernel of ``op`` on cupy arrays: what the call computes without the own
    kernel (cupy's function, or the core's formula of cupy's functions)."""
    return _core_kernels(cp)[op]


@functools.cache
def _core_kernels(cp: Any) -> dict[str, Any]:
    from oplib_core.kernels import array_kernels

    return array_kernels(cp)  # (made once: every test reads it)


def _cupy_operands(cp: Any, op: str, dtype: np.dtype, n: int, seed: int) -> tuple[Any, Any]:
    """A random cupy array of ``n`` elements and the op's other operand (an array, a Python
    scalar, clamp's bounds as a pair, or None); for ``where``, a random condition and the
    two arrays as a pair."""
    rng = np.random.default_rng(seed)
    x = _random(dtype, n, rng)
    spec = ew.OPS[op]
    if spec.operand == "array":
        y = _random(dtype, n, rng)
        y[: n // 5] = x[: n // 5]
        return cp.asarray(x), cp.asarray(y)
    if spec.operand == "scalar":
        s = _SCALARS["int" if dtype == np.int32 else "float"][seed % 5]
        x[: n // 5] = x.dtype.type(s)
        return cp.asarray(x), s
    if spec.operand == "bounds":
        bounds = _BOUNDS["int" if dtype == np.int32 else "float"][seed % 5]
        return cp.asarray(x), bounds
    if spec.operand == "select":
        condition = rng.random(n) < 0.5
        return cp.asarray(condition), (cp.asarray(x), cp.asarray(_random(dtype, n, rng)))
    return cp.asarray(x), None


def _others(op: str, other: Any) -> tuple[Any, ...]:
    """The op's arguments after ``x``, from :func:`_cupy_operands`'s ``other``."""
    return {"none": (), "bounds": other, "select": other}.get(ew.OPS[op].operand, (other,))


def _same(cp: Any, got: Any, expected: Any) -> None:
    """``got`` equals ``expected`` element for element, NaN where it has NaN (compared on the
    device: the arrays are tens of MiB; numpy's report only where they differ)."""
    assert type(got) is cp.ndarray
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if not bool(cp.array_equal(got, expected, equal_nan=got.dtype.kind == "f")):
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(expected))


def _check(cp: Any, op: str, x: Any, other: Any, *, fast: bool, how: str = "same") -> None:
    args = _others(op, other)
    assert ew.serves(op, x, *args) is fast
    data = args[0] if ew.OPS[op].operand == "select" else x  # (where's x: the condition)
    key = f"{op} {np.dtype(data.dtype).name}" + ("" if how == "same" else f" {how}")
    before = ew.launches().get(key, 0)
    got = _call(op, x, *args)
    after = ew.launches().get(key, 0)
    _same(cp, got, _reference(cp, op)(x, *args))
    assert after - before == (1 if fast else 0)


def _call(op: str, *args: Any) -> Any:
    """``oplib.ops.oplib.<op>`` (its overload ``add.Scalar`` ...) called with ``args``."""
    name, _, overload = op.partition(".")
    packet = getattr(oplib.ops.oplib, name)
    return getattr(packet, overload)(*args) if overload else packet(*args)


@pytest.mark.cuda
@pytest.mark.parametrize(("op", "dtype"), SERVED, ids=str)
@pytest.mark.parametrize("extra", [0, 5])  # 5: a tail past the last float4 and uint4
def test_own_kernel_equals_cupy(cp: Any, op: str, dtype: np.dtype, extra: int) -> None:
    x, other = _cupy_operands(cp, op, dtype, N + extra, extra)
    _check(cp, op, x, other, fast=True)


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["maximum", "minimum", "lt", "ne"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_own_kernel_nan_and_inf_like_cupy(cp: Any, op: str, dtype: str) -> None:
    v = np.array([np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 2.0, -3.0], dtype)
    w = np.array([1.0, np.nan, 1.0, -1.0, np.nan, 0.0, np.inf, -np.inf], dtype)
    x = cp.asarray(np.resize(v, N + 3))
    y = cp.asarray(np.resize(w, N + 3))
    _check(cp, op, x, y, fast=True)


#: one op of each family on each dtype it takes: which calls fall back is decided by
#: ``qualifies``, a pure function tested above for every op (each case here compiles cupy
#: kernels, seconds on a fresh GPU machine)
FAMILIES = [
    (op, dt)
    for op, dt in SERVED
    if op in ("add", "neg", "sigmoid", "mul.Scalar", "rsub.Scalar", "lt", "ge.Scalar", "clamp")
]


@pytest.mark.cuda
@pytest.mark.parametrize(("op", "dtype"), FAMILIES, ids=str)
def test_other_calls_fall_back_to_cupy(cp: Any, op: str, dtype: np.dtype) -> None:
    x, other = _cupy_operands(cp, op, dtype, 2 * N + 8, 1)
    two = ew.OPS[op].operand == "array"

    def pair(a: Any, b: Any) -> None:
        _check(cp, op, a, b if two else other, fast=False)

    pair(x[::2], other[::2] if two else None)  # strided views
    pair(x[1 : N + 1], other[1 : N + 1] if two else None)  # unaligned views
    pair(x[:0], other[:0] if two else None)  # empty
    pair(x[:16], other[:16] if two else None)  # small
    if two:
        pair(x[: 2 * N].reshape(N, 2), other[:N].reshape(N, 1))  # per row, rows of 2
        pair(x[:N], cp.broadcast_to(other[:1], (N,)))  # stride 0, same shape
        pair(x[:N], other[:N].astype(np.float64))  # mixed dtypes
    elif ew.OPS[op].operand == "scalar":
        # a value cupy casts otherwise (float64 for int32 arrays, an overflow of the dtype),
        # and whatever cupy does with it, raising included, oplib does
        s = 2.5 if dtype == np.int32 else 1e39
        assert not ew.serves(op, x[:N], s)
        try:
            expected = _reference(cp, op)(x[:N], s)
        except Exception as exc:
            with pytest.raises(type(exc)):
                _call(op, x[:N], s)
        else:
            _same(cp, _call(op, x[:N], s), expected)
    elif ew.OPS[op].operand == "bounds":
        with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
            _call(op, x[:N], None, None)
        # int32 with a float bound (a float result); a numpy scalar, whose dtype counts
        bounds = (0.5, None) if dtype == np.int32 else (np.float64(-1.0), None)
        _check(cp, op, x[:N], bounds, fast=False)


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dt) for op, dt in SERVED if op in TWO_ARRAYS], ids=str
)
def test_a_repeated_array_equals_cupy(cp: Any, op: str, dtype: np.dtype) -> None:
    """``x + bias`` and ``bias - x``: the bias repeated along x's leading dimensions."""
    rows, cols = N // 4096, 4096
    x, y = _cupy_operands(cp, op, dtype, N, 3)
    x = x.reshape(rows, cols)
    bias = y[:cols].copy()  # its own allocation: aligned
    _check(cp, op, x, bias, fast=True, how="repeat_y")
    _check(cp, op, bias.reshape(1, cols), x, fast=True, how="repeat_x")


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dt) for op, dt in SERVED if op in TWO_ARRAYS], ids=str
)
def test_a_one_element_array_equals_cupy(cp: Any, op: str, dtype: np.dtype) -> None:
    """``x - x.mean()`` and ``x.max() - x``: a 0-d or size-1 array against every element,
    a strided view of one element too."""
    x, y = _cupy_operands(cp, op, dtype, N + 5, 6)
    _check(cp, op, x, y[7:8].reshape(()), fast=True, how="one_y")
    _check(cp, op, y[3:4], x, fast=True, how="one_x")
    _check(cp, op, x.reshape(1, N + 5), y[::4][:1].reshape(1, 1), fast=True, how="one_y")


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dt) for op, dt in SERVED if op in TWO_ARRAYS], ids=str
)
def test_one_value_per_row_equals_cupy(cp: Any, op: str, dtype: np.dtype) -> None:
    """``x - x.max(-1, keepdims=True)`` and ``x.sum(-1, keepdims=True) - x``: one value per
    row of x, on either side; rows of 2**12 elements and of one 16-byte vector."""
    x, y = _cupy_operands(cp, op, dtype, N, 8)
    lanes = ew.DTYPES[dtype][2]
    for row in (4096, lanes):
        big = x.reshape(N // row, row)
        per_row = y[: N // row].reshape(N // row, 1)
        _check(cp, op, big, per_row, fast=True, how="rows_y")
        _check(cp, op, per_row, big, fast=True, how="rows_x")
    _check(cp, op, x.reshape(16, 64, -1), y[:16].reshape(16, 1, 1), fast=True, how="rows_y")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_where_with_one_element_and_its_other_calls_like_cupy(cp: Any, dtype: np.dtype) -> None:
    """A single element on either side takes the own kernel; a broadcast condition, a
    strided array, mixed dtypes and small arrays go to cupy."""
    condition, (x, y) = _cupy_operands(cp, "where", dtype, N + 5, 2)
    zero = y[3:4].reshape(())
    _check(cp, "where", condition, (x, zero), fast=True, how="one_y")
    _check(cp, "where", condition, (zero, x), fast=True, how="one_x")
    _check(cp, "where", condition[::2], (x[::2], y[::2]), fast=False)
    _check(cp, "where", condition, (x, y.astype(np.float64)), fast=False)
    _check(cp, "where", condition[:1], (x, y), fast=False)  # the condition broadcast
    _check(cp, "where", condition[:16], (x[:16], y[:16]), fast=False)


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "div", "rdiv.Scalar"])
def test_int32_results_cupy_gives_as_float64_fall_back(cp: Any, op: str) -> None:
    x, other = _cupy_operands(cp, op, np.dtype("int32"), N, 2)
    if ew.OPS[op].operand == "scalar":
        other = 3
    _check(cp, op, x, other, fast=False)


@pytest.mark.cuda
@pytest.mark.parametrize("op", TWO_ARRAYS)
def test_own_kernel_with_one_array_twice(cp: Any, op: str) -> None:
    x, _ = _cupy_operands(cp, op, np.dtype("float32"), N + 5, 9)
    _check(cp, op, x, x, fast=True)


@pytest.mark.cuda
def test_tensors_take_the_own_kernel(cp: Any) -> None:
    x, y = _cupy_operands(cp, "add", np.dtype("float32"), N, 5)
    counts = ew.launches()
    tx, ty = oplib.tensor(x), oplib.tensor(y)
    out = tx + ty
    scaled = tx * 2.0
    squared = tx**2
    clipped = tx.clamp(-1, 1)
    masked = tx.where(tx < ty, 0.0)
    below = tx < ty
    act = oplib.ops.oplib.sigmoid(tx)
    biased = tx.reshape(N // 1024, 1024) + oplib.tensor(y[:1024].copy())
    centred = tx - tx.max()
    rows = tx.reshape(N // 1024, 1024)
    shifted = rows - rows.max(-1, keepdim=True).values
    after = ew.launches()
    for key in (
        "add float32",
        "mul.Scalar float32",
        "pow.Scalar float32",
        "clamp float32",
        "where float32 one_y",
        "lt float32",
        "sigmoid float32",
        "add float32 repeat_y",
        "sub float32 one_y",
        "sub float32 rows_y",
    ):
        assert after.get(key, 0) == counts.get(key, 0) + 1, key
    _same(cp, out.native, cp.add(x, y))
    _same(cp, scaled.native, x * 2.0)
    _same(cp, squared.native, cp.power(x, 2))  # (the core's pow: cupy.power, powf)
    _same(cp, clipped.native, cp.minimum(cp.maximum(x, -1.0), 1.0))
    _same(cp, masked.native, cp.where(x < y, x, cp.float32(0)))
    _same(cp, below.native, x < y)
    assert act.dtype == oplib.float32
    _same(cp, biased.native, x.reshape(N // 1024, 1024) + y[:1024])
    _same(cp, centred.native, x - x.max())
    r = x.reshape(N // 1024, 1024)
    _same(cp, shifted.native, r - r.max(-1, keepdims=True))


@pytest.mark.cuda
def test_serves_reads_a_missing_argument_as_none(cp: Any) -> None:
    x, y = _cupy_operands(cp, "add", np.dtype("float32"), N, 1)
    assert ew.serves("clamp", x, 0) and ew.serves("clamp", x, 0, None)
    assert not ew.serves("clamp", x) and not ew.serves("clamp", x, None, None)
    assert not ew.serves("add", x) and not ew.serves("mul.Scalar", x)
    assert not ew.serves("neg", x, y) and not ew.serves("add", x, y, y)


@pytest.mark.cuda
def test_softmax_on_tensors_takes_the_own_kernels(cp: Any) -> None:
    """scipy's softmax written with Tensors, over the last axis of a 2048 x 2048 array."""
    x = cp.asarray(np.random.default_rng(0).standard_normal((2048, 2048), np.float32))
    keys = ("sub float32 rows_y", "exp float32", "div float32 rows_y")
    before = ew.launches()
    t = oplib.tensor(x)
    e = (t - t.amax(-1, keepdim=True)).exp()
    out = e / e.sum(-1, keepdim=True)
    after = ew.launches()
    assert [after.get(k, 0) - before.get(k, 0) for k in keys] == [1, 1, 1]
    ce = cp.exp(x - x.max(-1, keepdims=True))
    cp.testing.assert_allclose(out.native, ce / ce.sum(-1, keepdims=True), rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "op", ["add", "neg", "tanh", "mul.Scalar", "rsub.Scalar", "lt", "clamp", "where"]
)
@pytest.mark.parametrize("n", [1, 5, 4099])
def test_own_kernel_on_small_arrays_with_min_elements_0(cp: Any, op: str, n: int) -> None:
    """What ``bench/gpu.py`` times against cupy at every size: ``min_elements=0``."""
    x, other = _cupy_operands(cp, op, np.dtype("float32"), n, n)
    args = _others(op, other)
    key = f"{op} float32"
    before = ew.launches().get(key, 0)
    got = ew.fast_kernel(op, _reference(cp, op), min_elements=0)(x, *args)
    assert ew.launches().get(key, 0) == before + 1
    _same(cp, got, _reference(cp, op)(x, *args))


@pytest.fixture
def broken_float32(monkeypatch: pytest.MonkeyPatch) -> Iterator[np.dtype]:
    """float32's module made of source NVRTC rejects, compiled afresh; put back after."""
    float32 = np.dtype("float32")
    source = ew.module_source

    def clear() -> None:
        ew._module.cache_clear()
        ew._raw_kernel.cache_clear()
        ew._failed.pop(float32, None)

    def broken(dtype: np.dtype) -> str:
        return "this is not CUDA" if np.dtype(dtype) == float32 else source(dtype)

    clear()
    monkeypatch.setattr(ew, "module_source", broken)
    yield float32
    monkeypatch.undo()
    clear()


@pytest.mark.cuda
def test_a_module_that_does_not_compile_falls_back_to_cupy_once_warned(
    cp: Any, broken_float32: np.dtype
) -> None:
    x, y = _cupy_operands(cp, "add", broken_float32, N, 4)
    with pytest.warns(ew.KernelCompileWarning, match="for float32 did not compile or load") as w:
        got = _call("add", x, y)
    (warned,) = [str(m.message) for m in w if m.category is ew.KernelCompileWarning]
    assert "CompileException" in warned and f"{ew.SWITCH}=0" in warned
    _same(cp, got, cp.add(x, y))
    assert list(ew.failures()) == ["float32"] and "CompileException" in ew.failures()["float32"]
    assert not ew.serves("add", x, y) and not ew.serves("neg", x)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")  # warned once: no second compile, no second warning
        _same(cp, _call("neg", x), cp.negative(x))
        _same(cp, _call("mul.Scalar", x, 2.0), x * 2.0)
    assert not [m for m in later if m.category is ew.KernelCompileWarning]
    # the other dtypes' modules are unaffected
    h, k = _cupy_operands(cp, "add", np.dtype("float16"), N, 4)
    _check(cp, "add", h, k, fast=True)
