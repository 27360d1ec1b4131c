"""The contract that fake kernels are right: every core op, run on CPU arrays and on meta
arrays (and under FakeTensorMode) built from the same shapes and dtypes, gives outputs of
the same shape and dtype, or fails with the same kind of error."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._opset import CORE_OPS
from oplib_core.kernels._inplace_kernels import functional_name

pytest.importorskip("oplib_meta")

f16, f32, f64 = np.float16, np.float32, np.float64
i8, i32, i64, u8, u64 = np.int8, np.int32, np.int64, np.uint8, np.uint64
b, c64 = np.bool_, np.complex64

SHAPES = [(), (3,), (2, 3), (0, 4), (2, 1, 3)]
DTYPES = [f32, f64, f16, i8, i32, i64, u8, b, c64]
BINARY_SHAPES = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((2, 1), (1, 4)),
    ((), (2, 3)),
    ((3,), ()),
    ((), ()),
    ((4, 1, 3), (2, 1)),
    ((0, 3), (1, 3)),
    ((2, 3), (4,)),
    ((2, 3), (3, 2)),
]
BINARY_DTYPES = [
    (f32, f32),
    (f32, f64),
    (i32, f32),
    (i8, u8),
    (b, i32),
    (f16, i64),
    (b, b),
    (i64, f32),
    (c64, f64),
    (u8, u8),
]
SCALARS = [2, 2.5, True, -3, 1j, 0]


def arr(shape: tuple[int, ...], dtype: Any = f32) -> np.ndarray:
    return np.ones(shape, dtype=dtype)


Case = tuple[tuple[Any, ...], dict[str, Any]]


def unary_cases() -> Iterator[Case]:
    for shape, dtype in itertools.product(SHAPES, DTYPES):
        yield (arr(shape, dtype),), {}


def binary_cases() -> Iterator[Case]:
    for (s1, s2), (d1, d2) in itertools.product(BINARY_SHAPES, BINARY_DTYPES):
        yield (arr(s1, d1), arr(s2, d2)), {}


def scalar_cases(name: str) -> Iterator[Case]:
    for shape, dtype, value in itertools.product(SHAPES[:3], DTYPES, SCALARS):
        if "pow" in name and isinstance(value, int) and value < 0:
            continue  # integer to a negative power raises on data, not on shapes
        yield (arr(shape, dtype), value), {}


def where_cases() -> Iterator[Case]:
    for cs, s1, s2 in [
        ((2, 3), (2, 3), (2, 3)),
        ((3,), (2, 1), ()),
        ((2, 1), (3,), (4, 1, 3)),
        ((2,), (3,), ()),
    ]:
        for d1, d2 in BINARY_DTYPES[:6]:
            yield (arr(cs, b), arr(s1, d1), arr(s2, d2)), {}


def reduction_cases(name: str) -> Iterator[Case]:
    dims = [None, [], [0], [-1], [0, 1], [0, 0], [2], [-3]]
    dtypes = [f32, f16, i32, b, u8, u64, c64] if name != "amax" and name != "amin" else [f32, i8, b]
    for shape, dim, keepdim, dtype in itertools.product(
        [(), (3,), (2, 3), (2, 0, 4)], dims, [False, True], dtypes
    ):
        kwargs: dict[str, Any] = {}
        yield (arr(shape, dtype), dim, keepdim), kwargs
    if name in ("sum", "mean"):
        for dtype, out in itertools.product([f32, i32, b], [np.dtype(f64), np.dtype(i64)]):
            yield (arr((2, 3), dtype), [1], False), {"dtype": out}


def matmul_cases() -> Iterator[Case]:
    shapes = [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((5, 1, 2, 3), (4, 3, 2)),
        ((2, 3), (4, 5)),
        ((), (3,)),
        ((3,), ()),
        ((0, 3), (3, 2)),
        ((1, 3), (5, 3, 2)),
        ((3,), (2, 3, 4)),
        ((2, 2, 3), (3,)),
        ((2, 2, 3), (3, 3, 1)),
    ]
    for (s1, s2), (d1, d2) in itertools.product(shapes, [(f32, f32), (i32, f64), (b, b), (i8, i8)]):
        yield (arr(s1, d1), arr(s2, d2)), {}


def transpose_cases() -> Iterator[Case]:
    for shape in [(), (3,), (2, 3), (2, 3, 4)]:
        for d0, d1 in [(0, 1), (-1, 0), (0, 0), (1, 2), (0, -3), (3, 0)]:
            yield (arr(shape), d0, d1), {}


def permute_cases() -> Iterator[Case]:
    for shape, dims in [
        ((2, 3, 4), [2, 0, 1]),
        ((2, 3, 4), [-1, 0, 1]),
        ((2, 3, 4), [0, 0, 1]),
        ((2, 3, 4), [0, 1]),
        ((), []),
        ((2, 3), [1, 0]),
        ((2, 3), [0, 5]),
    ]:
        yield (arr(shape), dims), {}


def reshape_cases() -> Iterator[Case]:
    for shape, new in [
        ((2, 3), [6]),
        ((2, 3), [-1]),
        ((2, 3), [3, -1]),
        ((2, 3), [-1, 2, 3]),
        ((2, 3), [4, -1]),
        ((2, 3), [-1, -1]),
        ((2, 3), [0, -1]),
        ((0, 4), [-1, 2]),
        ((0, 4), [-1, 0]),
        ((), [1]),
        ((), [-1]),
        ((), []),
        ((3,), []),
        ((2, 3), [3, 2]),
        ((2, 3), [5]),
    ]:
        yield (arr(shape, i32), new), {}


def broadcast_to_cases() -> Iterator[Case]:
    for shape, size in [
        ((3,), [2, 3]),
        ((1, 3), [4, 3]),
        ((2, 1), [2, 5]),
        ((2, 1), [-1, 4]),
        ((3,), [4]),
        ((2, 3), [3]),
        ((), [2, 2]),
        ((2, 1), [3, -1, 4]),
        ((2, 1), [-1, -1]),
    ]:
        yield (arr(shape), size), {}


def unsqueeze_cases() -> Iterator[Case]:
    for shape in [(), (2, 3)]:
        for dim in range(-4, 4):
            yield (arr(shape), dim), {}


def squeeze_cases() -> Iterator[Case]:
    for shape, dim in [
        ((1, 3, 1), None),
        ((1, 3, 1), [0]),
        ((1, 3, 1), [1]),
        ((1, 3, 1), [-1]),
        ((1, 3, 1), [0, 2]),
        ((), None),
        ((), [0]),
        ((3,), [0]),
        ((1,), [0]),
        ((1, 1), [5]),
    ]:
        yield (arr(shape), dim), {}


def cat_cases(stack: bool) -> Iterator[Case]:
    lists = [
        [(2, 3), (4, 3)],
        [(2, 3), (2, 1)],
        [(2, 3), (2, 3)],
        [(2, 3), (2, 3, 1)],
        [(), ()],
        [(2, 3)],
        [(0, 3), (2, 3)],
    ]
    for shapes, dim, (d1, d2) in itertools.product(
        lists, [0, 1, -1, 2, -3], [(f32, f32), (i32, f16), (b, u8)]
    ):
        yield ([arr(shapes[0], d1), *[arr(s, d2) for s in shapes[1:]]], dim), {}
    yield ([], 0), {}


def copy_cases() -> Iterator[Case]:
    for s1, s2 in [
        ((2, 3), (2, 3)),
        ((2, 3), (3,)),
        ((2, 3), ()),
        ((2, 3), (1, 2, 3)),
        ((2, 3), (2,)),
        ((3,), (2, 3)),
    ]:
        for d1, d2 in [(f32, f64), (i32, f32), (b, b)]:
            yield (arr(s1, d1), arr(s2, d2)), {}


def fill_cases() -> Iterator[Case]:
    for shape, dtype in itertools.product(SHAPES[:3], DTYPES):
        yield (arr(shape, dtype), 2), {}
    for vshape in [(), (1,), (2,)]:
        yield (arr((2, 3), f32), arr(vshape, f64)), {}


def clamp_cases() -> Iterator[Case]:
    for shape, dtype in itertools.product(SHAPES[:3], DTYPES):
        for lo, hi in [(0, 1), (None, 0.5), (-1.5, None), (None, None)]:
            yield (arr(shape, dtype), lo, hi), {}


def index_put_cases() -> Iterator[Case]:
    rows = np.array([0, 1], dtype=np.int64)
    for vshape, vdtype in [((2, 3), f32), ((3,), f32), ((), f32), ((2, 3), f64)]:
        yield (arr((2, 3), f32), [rows, None], arr(vshape, vdtype), False), {}
    yield (arr((2, 3), f32), [np.array([0.5])], arr((), f32), False), {}


def astype_cases() -> Iterator[Case]:
    for shape, dtype, to in itertools.product(SHAPES, [f32, i32, b], [f64, i8, b, c64]):
        yield (arr(shape, dtype), np.dtype(to)), {}


def factory_cases(name: str) -> Iterator[Case]:
    sizes = [[], [0], [2, 3], [4]]
    if name in ("empty", "zeros", "ones"):
        for size, dtype in itertools.product(sizes, [None, np.dtype(i32), np.dtype(b)]):
            yield (size,), {"dtype": dtype}
    elif name == "full":
        for size, fill, dtype in itertools.product(
            sizes, [1, 1.5, True, 2j], [None, np.dtype(f64)]
        ):
            yield (size, fill), {"dtype": dtype}
    elif name == "arange":
        for end, dtype in itertools.product([5, 5.0, 0, -2, 2.5], [None, np.dtype(f64)]):
            yield (end,), {"dtype": dtype}
    else:
        for (start, end, step), dtype in itertools.product(
            [(0, 10, 3), (1, 2, 0.25), (5, 0, -1), (0, 5, 0), (1.5, 7, 2), (0, 1, 0.1), (3, 3, 1)],
            [None, np.dtype(i32)],
        ):
            yield (start, end, step), {"dtype": dtype}


UNARY = {"neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "sqrt"}
BINARY = {
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
}
FACTORIES = {"empty", "zeros", "ones", "full", "arange", "arange.start"}


# -- indexing and views (issue 14): int indices only (a bool mask's size is dynamic when
# fake; tests/test_indexing.py checks those) -------------------------------------------------
IDX_DTYPES = [f32, i64, b, c64]
IDX_SHAPES = [(2, 3), (0, 4), (2, 1, 3), (3,), ()]
FULL_SHAPES = [(2, 3), (2, 1, 3), (3,), ()]


def _ix(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _each(*rest: Any, shapes: list[tuple[int, ...]] = IDX_SHAPES) -> Iterator[Case]:
    for shape, dtype in itertools.product(shapes, IDX_DTYPES):
        yield (arr(shape, dtype), *rest), {}


def index_cases(name: str) -> Iterator[Case]:
    base = name.split(".")[0]
    if base == "select":
        for d, i in [(0, 1), (-1, -1), (1, 5), (3, 0)]:
            yield from _each(d, i)
    elif base == "slice":
        for args in [(0, 1, None, 1), (-1, -2, 100, 2), (1, None, None, 3), (0, 0, 0, 0)]:
            yield from _each(*args)
    elif base == "narrow":
        for args in [(0, 0, 1), (-1, -2, 2), (0, 1, 5)]:
            yield from _each(*args)
    # index values are 0 and no dim is empty: an out-of-range index is a data-dependent
    # error, which no fake kernel can see (as in torch)
    elif base == "index":
        for idx in [[_ix([0, 0])], [None, _ix([[0, 0]])], [_ix([0]), None, _ix([0, 0])]]:
            yield from _each(idx, shapes=FULL_SHAPES)
    elif base == "masked_select":
        yield from _each(arr((3,), i64))  # not a bool mask: both raise
    elif base == "index_select":
        for d, idx in [(0, _ix([0, 0, 0])), (-1, _ix(0)), (0, _ix([[0]]))]:
            yield from _each(d, idx, shapes=FULL_SHAPES)
    elif base in ("gather", "scatter", "scatter_add"):
        for d, idx in [(0, _ix([[0, 0, 0]])), (1, _ix([[0], [0]])), (0, _ix([0]))]:
            extra: tuple[Any, ...] = ()
            if name == "scatter.value":
                extra = (1.5,)
            elif base != "gather":
                extra = (arr((2, 3), f32),)
            yield from _each(d, idx, *extra, shapes=FULL_SHAPES)
    elif base == "pad":
        pads: list[tuple[Any, ...]] = [
            ([1, 2],), ([1, -1, 0, 1],), ([1, 1], "reflect"), ([2, 0], "circular"), ([1],),
            ([1, 1], "replicate"), ([5, 5], "reflect"), ([1, 1], "edge"),
        ]  # fmt: skip
        for args in pads:
            yield from _each(*args)
    elif base == "flip":
        for dims in [[0], [-1, 0], [0, 0], []]:
            yield from _each(dims)
    elif base == "roll":
        for args in [([1],), ([1, -1], [0, 1]), ([1], [0, 1])]:
            yield from _each(*args)
    elif base in ("tril", "triu"):
        for k in [0, -1, 2]:
            yield from _each(k)
    elif base in ("repeat", "tile"):
        for reps in [[2, 1], [1, 2, 3], [2], [0, 1]]:
            yield from _each(reps)
    elif base == "split" or base == "split_with_sizes":
        sizes = [[1, 1], [2], 1] if base == "split_with_sizes" else [1, 2, 5]
        for size in sizes:
            if base == "split_with_sizes" and not isinstance(size, list):
                continue
            yield from _each(size)
            yield from _each(size, -1)
    elif base == "chunk":
        for n in [1, 2, 3, 0]:
            yield from _each(n)
    elif base == "tensor_split":
        arg: list[Any] = [2, 3, 0] if name.endswith("sections") else [[1], [0, 2], [-1, 5]]
        for a in arg:
            yield from _each(a)
            yield from _each(a, -1)
    elif base == "expand":
        for size in [[2, 2, 3], [-1, 3], [4, -1, -1, -1], [3, 5]]:
            yield from _each(size)
    elif base == "movedim":
        pairs: list[Any] = [(0, -1), (1, 0), (3, 0)] if name.endswith(".int") else [
            ([0, 1], [1, 0]), ([0], [0, 1]), ([0, 0], [1, 0])]  # fmt: skip
        for src, dst in pairs:
            yield from _each(src, dst)
    elif base == "view":
        for size in [[-1], [3, 2], [1, -1, 1], [7]]:
            yield from _each(size)
    elif base in ("max", "min"):
        if name.endswith(".dim"):
            for d, keep in [(0, False), (-1, True), (2, False)]:
                yield from _each(d, keep)
        else:
            yield from _each()
    else:
        raise KeyError(name)


INDEX_OPS = {
    "select", "slice", "narrow", "index", "masked_select", "index_select", "gather",
    "scatter", "scatter_add", "pad", "flip", "roll", "tril", "triu", "repeat", "tile",
    "split", "split_with_sizes", "chunk", "tensor_split", "expand", "movedim", "view",
    "max", "min",
}  # fmt: skip


def out_cases(name: str) -> list[Case]:
    """An out= overload's cases: its functional op's, with an ``out`` of the result's shape
    and dtype where the functional op succeeds on the CPU."""
    functional = functional_name(name)
    cases: list[Case] = []
    for args, kwargs in cases_for(functional):
        status, out = run(lambda a=args, k=kwargs: overload(functional)(*a, **k))
        if status == "error":
            continue
        cases.append((args, {**kwargs, "out": np.empty(out.shape, out.dtype)}))
    return cases


def cases_for(name: str) -> list[Case]:
    base = name.split(".")[0]
    if name.endswith("out"):
        return out_cases(name)
    if name in UNARY:
        return list(unary_cases())
    if name in BINARY:
        return list(binary_cases())
    if name.endswith(".Scalar"):
        return list(scalar_cases(name))
    if name in FACTORIES:
        return list(factory_cases(name))
    if base in INDEX_OPS:
        return list(index_cases(name))
    table = {
        "where": where_cases,
        "sum": lambda: reduction_cases("sum"),
        "mean": lambda: reduction_cases("mean"),
        "amax": lambda: reduction_cases("amax"),
        "amin": lambda: reduction_cases("amin"),
        "matmul": matmul_cases,
        "transpose": transpose_cases,
        "permute": permute_cases,
        "reshape": reshape_cases,
        "broadcast_to": broadcast_to_cases,
        "unsqueeze": unsqueeze_cases,
        "squeeze": squeeze_cases,
        "cat": lambda: cat_cases(False),
        "stack": lambda: cat_cases(True),
        "clone": unary_cases,
        "copy_": copy_cases,
        "astype": astype_cases,
        "add_": binary_cases,
        "sub_": binary_cases,
        "mul_": binary_cases,
        "div_": binary_cases,
        "zero_": unary_cases,
        "fill_": fill_cases,
        "clamp": clamp_cases,
        "clamp_": clamp_cases,
        "index_put": index_put_cases,
        "index_put_": index_put_cases,
    }
    return list(table[base]())


def overload(name: str) -> Any:
    op, _, ovl = name.partition(".")
    return getattr(getattr(oplib.ops.oplib, op), ovl or "default")


META = oplib.backends.get("meta") if oplib.backends.TABLE.find("meta") else None


def to_meta(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return META.from_host(x, oplib.device("meta"))
    if isinstance(x, list):
        return [to_meta(v) for v in x]
    return x


def run(fn: Any) -> tuple[str, Any]:
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except Exception as e:  # the contract compares failures too
        return "error", e
    return "ok", out


def describe(out: Any) -> Any:
    if isinstance(out, (list, tuple)):  # Tensor[] and (values, indices) returns
        return [describe(o) for o in out]
    return tuple(out.shape), np.dtype(out.dtype)


def check_case(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], variant: str
) -> str | None:
    """None when CPU and the fake variant agree, else a description of the difference."""
    op = overload(name)
    if name in FACTORIES:
        cpu = run(lambda: op(*args, **kwargs))
    else:
        cpu = run(
            lambda: op(*[a.copy() if isinstance(a, np.ndarray) else a for a in args], **kwargs)
        )
    if variant == "meta":
        if name in FACTORIES:
            fake = run(lambda: op(*args, **kwargs, device=oplib.device("meta")))
        else:
            fake = run(
                lambda: op(*to_meta(list(args)), **{k: to_meta(v) for k, v in kwargs.items()})
            )
    else:

        def under_mode() -> Any:
            with oplib.FakeTensorMode() as mode:

                def conv(x: Any) -> Any:
                    if isinstance(x, np.ndarray):
                        return mode.from_real(x)
                    if isinstance(x, list):
                        return [conv(v) for v in x]
                    return x

                out = op(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
                if isinstance(out, (list, tuple)):
                    return [o.native if isinstance(o, oplib.Tensor) else o for o in out]
                return out.native if isinstance(out, oplib.Tensor) else out

        fake = run(under_mode)

    def brief(a: Any) -> Any:
        if isinstance(a, list):
            return [brief(v) for v in a]
        return f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else a

    where = f"{name}{tuple(brief(a) for a in args)} {kwargs}"
    if cpu[0] == "error":
        if fake[0] == "ok":
            return f"{where}: cpu raised {cpu[1]!r} but {variant} gave {describe(fake[1])}"
        if not isinstance(fake[1], type(cpu[1])):
            return f"{where}: cpu raised {cpu[1]!r} but {variant} raised {fake[1]!r}"
        return None
    if fake[0] == "error":
        return f"{where}: cpu gave {describe(cpu[1])} but {variant} raised {fake[1]!r}"
    if describe(cpu[1]) != describe(fake[1]):
        return f"{where}: cpu gave {describe(cpu[1])}, {variant} gave {describe(fake[1])}"
    if variant == "meta" and isinstance(fake[1], (list, tuple)):
        fake = ("ok", fake[1][0]) if fake[1] else fake
    if variant == "meta" and fake[1] != [] and type(fake[1]).__name__ != "MetaArray":
        return f"{where}: meta gave a {type(fake[1]).__name__}"
    return None


ALL_OPS = [op.name for op in CORE_OPS]


def test_every_core_op_has_cases():
    for name in ALL_OPS:
        assert cases_for(name), name


@pytest.mark.parametrize("variant", ["meta", "fake_mode"])
@pytest.mark.parametrize("name", ALL_OPS)
def test_fake_kernel_agrees_with_cpu(name, variant):
    problems = []
    for args, kwargs in cases_for(name):
        problem = check_case(name, args, kwargs, variant)
        if problem:
            problems.append(problem)
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:15])


def test_to_copy_agrees_with_cpu():
    x = arr((2, 3), f32)
    for dtype in (None, np.dtype(f64), np.dtype(i8)):
        out = oplib.ops.oplib._to_copy(x, dtype=dtype)
        meta = oplib.ops.oplib._to_copy(to_meta(x), dtype=dtype)
        assert describe(meta) == describe(out)
        with oplib.FakeTensorMode() as mode:
            fake = oplib.ops.oplib._to_copy(mode.from_real(x), dtype=dtype)
        assert describe(fake) == describe(out)
        assert fake.device == oplib.tensor(out).device
