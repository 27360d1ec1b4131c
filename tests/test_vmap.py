"""oplib.vmap and register_vmap (issue 31, item 9): against a Python loop over the examples,
every core op's batching rule, custom ops with and without a rule, nesting, in_dims and
out_dims, torch's errors, and vmap composed with grad."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core import Tensor
from oplib_core._opset import CORE_OPS
from oplib_core._vmap import _batched
from oplib_core._vmap._rules import install

K = oplib.ops.oplib
_rng = np.random.default_rng(0)


def T(*shape: int, low: float = -2.0, high: float = 2.0) -> Tensor:
    return oplib.tensor(_rng.uniform(low, high, size=shape))


def _select(x: Any, d: Any, i: int) -> Any:
    if d is None:
        return x
    if isinstance(d, (tuple, list)):
        return type(x)(_select(e, dd, i) for e, dd in zip(x, d, strict=True))
    return x.select(d, i)


def loop(f: Callable[..., Any], in_dims: Any, args: tuple[Any, ...], out_dims: Any = 0) -> Any:
    """What vmap must give: f on each example, stacked along out_dims."""
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    sizes = [
        a.shape[d]
        for a, d in zip(args, dims, strict=True)
        if isinstance(d, int) and isinstance(a, Tensor)
    ]
    outs = [
        f(*(_select(a, d, i) for a, d in zip(args, dims, strict=True))) for i in range(sizes[0])
    ]
    return _stack(outs, out_dims)


def _stack(outs: list[Any], od: Any) -> Any:
    first = outs[0]
    if od is None:  # the same for every example
        return first
    if isinstance(first, (tuple, list)):
        ods = od if isinstance(od, (tuple, list)) else [od] * len(first)
        return type(first)(_stack([o[k] for o in outs], ods[k]) for k in range(len(first)))
    return K.stack(list(outs), od)


def close(a: Any, b: Any) -> None:
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            close(x, y)
        return
    if not isinstance(b, Tensor):
        assert a == b
        return
    assert isinstance(a, Tensor) and type(a) is Tensor, type(a)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def check(f: Callable[..., Any], args: tuple[Any, ...], in_dims: Any = 0, out_dims: Any = 0) -> Any:
    """vmap(f) equals the loop, and no op fell back to running per example with a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = oplib.vmap(f, in_dims, out_dims)(*args)
    close(got, loop(f, in_dims, args, out_dims))
    return got


# -- every core op's rule, against the loop --------------------------------------------------
B = 3
idx = oplib.tensor(np.array([2, 0, 1]))
bidx = oplib.tensor(np.array([[0, 1, 2], [2, 2, 0], [1, 0, 0]]))  # one row per example
gidx = oplib.tensor(np.array([[[0, 1], [2, 0]], [[1, 1], [0, 2]], [[2, 0], [1, 1]]]))

Case = tuple[Callable[..., Any], tuple[Any, ...], Any]
CASES: dict[str, list[Case]] = {
    "oplib::neg": [(K.neg, (T(B, 4),), 0)],
    "oplib::exp": [(K.exp, (T(4, B),), 1)],
    "oplib::log": [(K.log, (T(B, 4, low=0.5),), 0)],
    "oplib::sin": [(K.sin, (T(B),), 0)],
    "oplib::cos": [(K.cos, (T(B, 2, 2),), 0)],
    "oplib::tanh": [(K.tanh, (T(B, 4),), 0)],
    "oplib::sigmoid": [(K.sigmoid, (T(B, 4),), 0)],
    "oplib::relu": [(K.relu, (T(B, 4),), 0)],
    "oplib::abs": [(K.abs, (T(B, 4),), 0)],
    "oplib::sqrt": [(K.sqrt, (T(B, 4, low=0.1),), 0)],
    "oplib::add": [
        (K.add, (T(B, 4), T(B, 4)), 0),
        (K.add, (T(B, 3, 4), T(4, B)), (0, 1)),  # ranks differ per example
        (K.add, (T(4), T(3, 4, B)), (None, 2)),  # the unbatched one has the higher rank
        (K.add, (T(3, 4), T(B, 4)), (None, 0)),
    ],
    "oplib::sub": [(K.sub, (T(B, 4), T(4)), (0, None))],
    "oplib::mul": [(K.mul, (T(B, 1, 4), T(B, 3, 1)), 0)],
    "oplib::div": [(K.div, (T(B, 4), T(B, 4, low=0.5)), 0)],
    "oplib::pow": [(K.pow, (T(B, 4, low=0.5), T(B, 4)), 0)],
    "oplib::maximum": [(K.maximum, (T(B, 4), T(4)), (0, None))],
    "oplib::minimum": [(K.minimum, (T(4), T(B, 4)), (None, 0))],
    "oplib::add.Scalar": [(lambda x: x + 2.5, (T(B, 4),), 0)],
    "oplib::sub.Scalar": [(lambda x: x - 2, (T(B, 4),), 0)],
    "oplib::mul.Scalar": [(lambda x: x * 3, (T(B, 4),), 0)],
    "oplib::div.Scalar": [(lambda x: x / 3, (T(B, 4),), 0)],
    "oplib::pow.Scalar": [(lambda x: x**2, (T(B, 4),), 0)],
    "oplib::rsub.Scalar": [(lambda x: 2 - x, (T(B, 4),), 0)],
    "oplib::rdiv.Scalar": [(lambda x: 2 / x, (T(B, 4, low=0.5),), 0)],
    "oplib::rpow.Scalar": [(lambda x: 2**x, (T(B, 4),), 0)],
    "oplib::eq": [(K.eq, (T(B, 4), T(B, 4)), 0)],
    "oplib::ne": [(K.ne, (T(B, 4), T(4)), (0, None))],
    "oplib::lt": [(K.lt, (T(B, 4), T(B, 4)), 0)],
    "oplib::le": [(K.le, (T(B, 4), T(B, 4)), 0)],
    "oplib::gt": [(K.gt, (T(B, 4), T(B, 4)), 0)],
    "oplib::ge": [(K.ge, (T(B, 4), T(B, 4)), 0)],
    "oplib::eq.Scalar": [(lambda x: x == 0.5, (T(B, 4),), 0)],
    "oplib::ne.Scalar": [(lambda x: x != 0.5, (T(B, 4),), 0)],
    "oplib::lt.Scalar": [(lambda x: x < 0.5, (T(B, 4),), 0)],
    "oplib::le.Scalar": [(lambda x: x <= 0.5, (T(B, 4),), 0)],
    "oplib::gt.Scalar": [(lambda x: x > 0.5, (T(B, 4),), 0)],
    "oplib::ge.Scalar": [(lambda x: x >= 0.5, (T(B, 4),), 0)],
    "oplib::where": [
        (K.where, (T(B, 4) > 0, T(B, 4), T(4)), (0, 0, None)),
        (K.where, (T(4) > 0, T(3, 4), T(B)), (None, None, 0)),
    ],
    "oplib::clamp": [(lambda x: K.clamp(x, -0.5, 0.5), (T(B, 4),), 0)],
    "oplib::sum": [
        (lambda x: K.sum(x), (T(B, 3, 4),), 0),
        (lambda x: K.sum(x, [-1], True), (T(3, B, 4),), 1),
        (lambda x: K.sum(x, [0, 2]), (T(B, 3, 4, 2),), 0),
        (lambda x: K.sum(x), (T(B),), 0),  # a 0-d example
        (lambda x: K.sum(x, None, True), (T(B),), 0),
    ],
    "oplib::mean": [(lambda x: K.mean(x, [1]), (T(B, 3, 4),), 0)],
    "oplib::amax": [
        (lambda x: K.amax(x, [0]), (T(B, 3, 4),), 0),
        (lambda x: x.amax(1), (T(B, 3, 4),), 0),  # an int for the int[] dim
    ],
    "oplib::amin": [(lambda x: K.amin(x), (T(B, 3, 4),), 0)],
    "oplib::matmul": [
        (K.matmul, (T(B, 4), T(B, 4)), 0),
        (K.matmul, (T(B, 3, 4), T(4)), (0, None)),
        (K.matmul, (T(4), T(B, 4, 5)), (None, 0)),
        (K.matmul, (T(B, 3, 4), T(4, 5, B)), (0, 2)),
        (K.matmul, (T(B, 2, 3, 4), T(4, 5)), (0, None)),
        (K.matmul, (T(2, 3, 4), T(B, 4, 5)), (None, 0)),
        (K.matmul, (T(B, 4), T(2, 4, 5)), (0, None)),
    ],
    "oplib::transpose": [(lambda x: K.transpose(x, 0, -1), (T(B, 3, 4),), 0)],
    "oplib::permute": [(lambda x: K.permute(x, [2, 0, 1]), (T(3, B, 4, 2),), 1)],
    "oplib::reshape": [(lambda x: K.reshape(x, [2, -1]), (T(B, 3, 4),), 0)],
    "oplib::view": [(lambda x: K.view(x, [12]), (T(B, 3, 4),), 0)],
    "oplib::broadcast_to": [(lambda x: K.broadcast_to(x, [2, 3, 4]), (T(B, 4),), 0)],
    "oplib::expand": [(lambda x: K.expand(x, [2, -1, 4]), (T(B, 3, 1),), 0)],
    "oplib::unsqueeze": [
        (lambda x: K.unsqueeze(x, -1), (T(B, 3),), 0),
        (lambda x: K.unsqueeze(x, 0), (T(B),), 0),
    ],
    "oplib::squeeze": [
        (lambda x: K.squeeze(x), (T(B, 1, 3, 1),), 0),
        (lambda x: K.squeeze(x, [1]), (T(1, 3, B, 1),), 2),
        (lambda x: K.squeeze(x), (T(B, 3),), 0),  # nothing to squeeze
        (lambda x: K.squeeze(x), (T(1, 3),), 0),  # a batch of 1 stays
    ],
    "oplib::cat": [
        (lambda x, y: K.cat([x, y], -1), (T(B, 3, 2), T(3, 4)), (0, None)),
        (lambda x, y: K.cat([x, y]), (T(B, 3), T(2, B)), (0, 1)),
    ],
    "oplib::stack": [(lambda x, y: K.stack([x, y], 1), (T(B, 3), T(3)), (0, None))],
    "oplib::select.int": [
        (lambda x: K.select(x, 0, 1), (T(B, 3, 4),), 0),
        (lambda x: K.select(x, -1, -1), (T(B, 3, 4),), 0),
    ],
    "oplib::slice.Tensor": [
        (lambda x: K.slice(x, 0, 1, 3), (T(B, 4),), 0),
        (lambda x: K.slice(x, 1, None, None, 2), (T(3, B, 4),), 1),
    ],
    "oplib::narrow": [(lambda x: K.narrow(x, 1, 1, 2), (T(B, 3, 4),), 0)],
    "oplib::index.Tensor": [
        (lambda x: K.index(x, [idx]), (T(B, 4),), 0),
        (lambda x: K.index(x, [None, idx]), (T(B, 2, 4),), 0),
        (lambda x, i: K.index(x, [i]), (T(B, 4), bidx), (0, 0)),  # batched: per example
        (lambda x: K.index(x, [idx, None, idx]), (T(B, 3, 2, 3),), 0),  # not adjacent
    ],
    "oplib::masked_select": [(lambda x, m: K.masked_select(x, m), (T(B, 4), T(4) > 0), (0, None))],
    "oplib::index_select": [
        (lambda x: K.index_select(x, 1, idx), (T(B, 2, 4),), 0),
        (lambda x, i: K.index_select(x, 0, i), (T(B, 4), bidx), (0, 0)),
    ],
    "oplib::gather": [
        (lambda x, i: K.gather(x, 1, i), (T(B, 2, 3), gidx), (0, 0)),
        (lambda x, i: K.gather(x, 0, i), (T(3, 3), gidx), (None, 0)),
    ],
    "oplib::scatter.src": [
        (lambda x, i, s: K.scatter(x, 1, i, s), (T(B, 2, 3), gidx, T(2, 2)), (0, 0, None))
    ],
    "oplib::scatter.value": [(lambda x, i: K.scatter(x, 1, i, 7.0), (T(2, 3), gidx), (None, 0))],
    "oplib::scatter_add": [
        (lambda x, i, s: K.scatter_add(x, 1, i, s), (T(B, 2, 3), gidx, T(B, 2, 2)), 0)
    ],
    "oplib::pad": [(lambda x: K.pad(x, [1, 2]), (T(B, 3, 4),), 0)],
    "oplib::flip": [(lambda x: K.flip(x, [0, -1]), (T(B, 3, 4),), 0)],
    "oplib::roll": [
        (lambda x: K.roll(x, [1], [1]), (T(B, 3, 4),), 0),
        (lambda x: K.roll(x, [2]), (T(B, 3, 4),), 0),  # no dims: the flattened example
    ],
    "oplib::tril": [(lambda x: K.tril(x), (T(B, 3, 3),), 0)],
    "oplib::triu": [(lambda x: K.triu(x, 1), (T(3, 3, B),), 2)],
    "oplib::repeat": [(lambda x: K.repeat(x, [2, 1, 2]), (T(B, 3, 2),), 0)],
    "oplib::tile": [(lambda x: K.tile(x, [2]), (T(B, 3, 2),), 0)],
    "oplib::split.Tensor": [(lambda x: K.split(x, 2, -1), (T(B, 3, 5),), 0)],
    "oplib::split_with_sizes": [(lambda x: K.split_with_sizes(x, [1, 2], 0), (T(B, 3),), 0)],
    "oplib::chunk": [(lambda x: K.chunk(x, 2, 1), (T(B, 3, 4),), 0)],
    "oplib::tensor_split.sections": [(lambda x: K.tensor_split(x, 2, 0), (T(B, 3),), 0)],
    "oplib::tensor_split.indices": [(lambda x: K.tensor_split(x, [1, 2], 1), (T(B, 2, 4),), 0)],
    "oplib::movedim.int": [(lambda x: K.movedim(x, 0, -1), (T(B, 3, 4),), 0)],
    "oplib::movedim.intlist": [(lambda x: K.movedim(x, [0, 1], [2, 0]), (T(B, 3, 4, 2),), 0)],
    "oplib::max": [(lambda x: K.max(x), (T(B, 3, 4),), 0), (lambda x: K.max(x), (T(B),), 0)],
    "oplib::max.dim": [(lambda x: tuple(K.max(x, 1)), (T(B, 3, 4),), 0)],
    "oplib::min": [(lambda x: K.min(x), (T(B, 3, 4),), 0)],
    "oplib::min.dim": [(lambda x: tuple(K.min(x, -1, True)), (T(B, 3, 4),), 0)],
    "oplib::clone": [(K.clone, (T(B, 3),), 0)],
    "oplib::_narrow": [(lambda x: K._narrow(x, -1, 1, 2), (T(B, 2, 4),), 0)],
    "oplib::_to_copy": [(lambda x: K._to_copy(x, dtype=oplib.float32), (T(B, 3),), 0)],
    "oplib::astype": [(lambda x: K.astype(x, oplib.float32), (T(B, 3),), 0)],
    "oplib::copy_": [(lambda x, y: x.clone().copy_(y), (T(B, 3), T(3)), (0, None))],
    "oplib::add_.Tensor": [(lambda x, y: x.clone().add_(y), (T(B, 3), T(B, 3)), 0)],
    "oplib::add_.Scalar": [(lambda x: x.clone().add_(2), (T(B, 3),), 0)],
    "oplib::sub_.Tensor": [(lambda x, y: x.clone().sub_(y), (T(B, 2, 3), T(3)), (0, None))],
    "oplib::sub_.Scalar": [(lambda x: x.clone().sub_(2), (T(B, 3),), 0)],
    "oplib::mul_.Tensor": [(lambda x, y: x.clone().mul_(y), (T(B, 2, 3), T(B, 3)), 0)],
    "oplib::mul_.Scalar": [(lambda x: x.clone().mul_(2), (T(B, 3),), 0)],
    "oplib::div_.Tensor": [(lambda x, y: x.clone().div_(y), (T(B, 3), T(B, 3, low=1)), 0)],
    "oplib::div_.Scalar": [(lambda x: x.clone().div_(2), (T(B, 3),), 0)],
    "oplib::zero_": [(lambda x: x.clone().zero_(), (T(B, 3),), 0)],
    "oplib::fill_.Scalar": [(lambda x: x.clone().fill_(3), (T(B, 3),), 0)],
    "oplib::fill_.Tensor": [
        (lambda x, v: K.fill_(x.clone(), v), (T(B, 3), T(B)), 0),
        (lambda x, v: K.fill_(x.clone(), v), (T(B, 3), T()), (0, None)),
    ],
    "oplib::clamp_": [(lambda x: x.clone().clamp_(-0.5, 0.5), (T(B, 3),), 0)],
    "oplib::index_put": [
        (lambda x, v: K.index_put(x, [idx], v), (T(B, 4), T(3)), (0, None)),
        (lambda x, v: K.index_put(x, [idx], v), (T(B, 4), T(B, 3)), 0),  # per example
    ],
    "oplib::index_put_": [
        (lambda x, v: K.index_put_(x.clone(), [idx], v, True), (T(B, 4), T(3)), (0, None))
    ],
}


def _case_ids() -> list[tuple[str, int]]:
    return [(name, k) for name, cases in CASES.items() for k in range(len(cases))]


@pytest.mark.parametrize(("name", "k"), _case_ids(), ids=lambda v: str(v))
def test_core_rule_matches_loop(name: str, k: int) -> None:
    f, args, in_dims = CASES[name][k]
    check(f, args, in_dims)


def test_every_core_op_has_a_rule_and_a_case() -> None:
    install()
    names = {c.schema.partition("(")[0]: c for c in CORE_OPS}
    factories = {n for n, c in names.items() if any(t.value == "factory" for t in c.tags)}
    ruled = set(_batched.CORE_RULES) | _batched.PER_EXAMPLE | set(_batched.OUT_VARIANTS)
    everything = {op.name() for op in oplib.registered_ops("oplib")} | set(names)
    assert everything - factories == ruled  # every oplib:: op with a Tensor argument
    assert set(_batched.CORE_RULES) | _batched.PER_EXAMPLE == set(CASES)


@pytest.mark.parametrize("name", ["oplib::add.out", "oplib::sum.out", "oplib::mul.Scalar_out"])
def test_out_overloads_write_the_batched_out(name: str) -> None:
    x, y = T(B, 3), T(3)

    def f(x: Tensor, y: Tensor) -> Tensor:
        out = x.new_empty(3) * 0 + x  # a batched out (the empty itself is unbatched)
        if name == "oplib::add.out":
            K.add.out(x, y, out=out)
        elif name == "oplib::sum.out":
            out = x.new_empty(()) * 0 + x.sum()
            K.sum.out(x, out=out)
        else:
            K.mul.Scalar_out(x, 2.0, out=out)
        return out

    check(f, (x, y), (0, None))


@pytest.mark.parametrize(
    ("f", "args", "in_dims"),
    [
        (lambda x: x[1], (T(B, 3, 4),), 0),
        (lambda x: x[..., -1], (T(3, B, 4),), 1),
        (lambda x: x[None, 1:, ::2], (T(B, 3, 4),), 0),
        (lambda x: x[idx], (T(B, 4),), 0),
        (lambda x: x[:, idx], (T(B, 2, 4),), 0),
        (lambda x: x[idx, :, idx], (T(B, 3, 2, 3),), 0),  # advanced apart: dims go first
        (lambda x: x[[0, 2]], (T(B, 4),), 0),
        (lambda x, i: x[i], (T(B, 4), bidx), (0, 0)),
        (lambda x, m: x[m], (T(B, 4), T(4) > -10), (0, None)),
    ],
)
def test_indexing_matches_the_loop(f: Any, args: Any, in_dims: Any) -> None:
    check(f, args, in_dims)


def test_setitem_writes_each_example() -> None:
    def f(x: Tensor, v: Tensor) -> Tensor:
        y = x.clone()
        y[0] = v
        y[1:, 1] = 7.0
        y[idx[:2]] = v * 2
        return y

    check(f, (T(B, 3, 3), T(B, 3)), 0)
    check(f, (T(B, 3, 3), T(3)), (0, None))

    def g(x: Tensor, i: Tensor) -> Tensor:
        y = x.clone()
        y[i] = 0.0  # a batched index: example by example
        return y

    check(g, (T(B, 4), bidx), 0)


def test_out_into_an_unbatched_out_is_refused() -> None:
    out = oplib.zeros(3, dtype=oplib.float64)
    with pytest.raises(
        RuntimeError, match=r"vmap: oplib\.copy_\.default\(self, \*extra_args\) is not possible"
    ):
        oplib.vmap(lambda x: K.add.out(x, x, out=out))(T(B, 3))


def test_an_in_place_op_writes_into_the_input_and_returns_it() -> None:
    x = T(B, 3)
    before = x.numpy().copy()
    seen = []

    def f(a: Tensor) -> Tensor:
        b = a.add_(1.0)
        seen.append(b is a)
        return b

    out = oplib.vmap(f)(x)
    assert seen == [True]
    np.testing.assert_allclose(x.numpy(), before + 1)
    np.testing.assert_allclose(out.numpy(), before + 1)


def test_in_place_on_an_unbatched_self_is_refused_with_torchs_words() -> None:
    y = oplib.zeros(3, dtype=oplib.float64)
    with pytest.raises(RuntimeError, match="not possible because there exists a Tensor"):
        oplib.vmap(lambda x: y.add_(x))(T(B, 3))


def test_dim_out_of_range_is_named_per_example() -> None:
    with pytest.raises(
        IndexError,
        match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)",
    ):
        oplib.vmap(lambda x: K.sum(x, [2]))(T(B, 3, 4))


def test_data_dependent_shapes_cannot_be_stacked() -> None:
    x = oplib.tensor(np.array([[1.0, -1.0], [1.0, 1.0]]))
    with pytest.raises(RuntimeError, match="different shapes for different examples"):
        oplib.vmap(lambda a: K.masked_select(a, a > 0))(x)


# -- hypothesis: shapes and in_dims against the loop -----------------------------------------
@st.composite
def batched_pair(draw: Any) -> tuple[Tensor, Tensor, tuple[Any, Any], int, int]:
    b = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    k = draw(st.integers(0, len(shape)))
    yshape = shape[len(shape) - k :]  # broadcasts against x per example
    dims: list[Any] = []
    arrays = []
    for s in (shape, yshape):
        d = draw(st.one_of(st.none(), st.integers(-(len(s) + 1), len(s))))
        if d is None:
            arrays.append(T(*s))
        else:
            full = list(s)
            full.insert(d % (len(s) + 1), b)
            arrays.append(T(*full))
        dims.append(d)
    if dims == [None, None]:
        dims[0] = 0
        arrays[0] = T(b, *shape)
    od = draw(st.integers(-(len(shape) + 1), len(shape)))
    red = draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    return arrays[0], arrays[1], (dims[0], dims[1]), od, red


@given(batched_pair())
def test_hypothesis_elementwise_and_reductions_match_the_loop(case: Any) -> None:
    x, y, in_dims, od, red = case
    check(lambda a, b: a * b + a.exp() - b, (x, y), in_dims, od)
    check(lambda a, b: K.sum(K.where(a > b, a, b), [red]), (x, y), in_dims)
    check(lambda a, b: (K.amax(a - b), K.mean(a * b)), (x, y), in_dims, (0, 0))


@given(
    st.integers(1, 4),
    st.sampled_from([(4,), (3, 4), (2, 3, 4)]),
    st.sampled_from([(4,), (4, 5), (2, 4, 5)]),
    st.sampled_from([(0, 0), (0, None), (None, 0), (-1, 0)]),
)
def test_hypothesis_matmul_matches_the_loop(b: int, sa: Any, sb: Any, dims: Any) -> None:
    if len(sa) == 3 and len(sb) == 3:
        sb = (2, *sb[1:])
    a = (
        T(*sa)
        if dims[0] is None
        else oplib.tensor(_rng.normal(size=(*sa, b) if dims[0] == -1 else (b, *sa)))
    )
    bb = T(*sb) if dims[1] is None else T(b, *sb)
    check(K.matmul, (a, bb), dims)


# -- custom ops: with and without a rule ------------------------------------------------------
@pytest.fixture
def mysin() -> Any:
    @oplib.custom_op("vmaptest::mysin", mutates_args=())
    def op(x: Tensor) -> Tensor:
        return np.sin(x)  # type: ignore[return-value]  # kernels get (and give) numpy arrays

    _batched._WARNED.discard("vmaptest::mysin")
    yield op
    op._destroy()


def test_an_op_without_a_rule_runs_per_example_and_warns_once(mysin: Any) -> None:
    x = T(B, 4)
    with pytest.warns(
        UserWarning,
        match=r"no batching rule for vmaptest::mysin, so it runs once per example \(3 calls\)",
    ) as rec:
        out = oplib.vmap(mysin)(x)
    assert rec[0].filename == __file__  # the user's line, not oplib's
    np.testing.assert_allclose(out.numpy(), np.sin(x.numpy()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oplib.vmap(mysin)(x)  # once per op: no second warning


def test_a_rule_runs_once_on_the_batch(mysin: Any) -> None:
    calls: list[Any] = []

    @mysin.register_vmap
    def rule(info: Any, in_dims: Any, x: Tensor) -> Any:
        calls.append((info.batch_size, info.randomness, in_dims, x.shape))
        return mysin(x), in_dims[0]

    x = T(4, B)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = oplib.vmap(mysin, in_dims=1, randomness="same")(x)
    assert calls == [(B, "same", (0,), (B, 4))]
    np.testing.assert_allclose(out.numpy(), np.sin(x.numpy()).T)


def test_a_rule_may_return_the_batch_dim_anywhere(mysin: Any) -> None:
    @mysin.register_vmap
    def rule(info: Any, in_dims: Any, x: Tensor) -> Any:
        return mysin(x.movedim(0, -1)), -1  # batch dim last

    x = T(B, 2, 4)
    check(mysin, (x,)) if False else None
    out = oplib.vmap(mysin)(x)
    np.testing.assert_allclose(out.numpy(), np.sin(x.numpy()))


def test_a_later_custom_op_rule_replaces_the_earlier(mysin: Any) -> None:
    mysin.register_vmap(lambda info, in_dims, x: (mysin(x) * 0, 0))
    mysin.register_vmap(lambda info, in_dims, x: (mysin(x), 0))
    x = T(B, 2)
    np.testing.assert_allclose(oplib.vmap(mysin)(x).numpy(), np.sin(x.numpy()))


def test_a_rule_with_unbatched_inputs_is_skipped(mysin: Any) -> None:
    calls: list[Any] = []
    mysin.register_vmap(lambda info, in_dims, x: calls.append(1) or (mysin(x), 0))
    w = T(4)
    out = oplib.vmap(lambda x: mysin(w) + x)(T(B, 4))
    assert calls == []  # as torch: a rule runs only when something is batched
    assert out.shape == (B, 4)


@pytest.mark.parametrize(
    ("ret", "match"),
    [
        (lambda x: x, r"must return two things.*Got a Tensor instead"),
        (lambda x: (x, 0, 0), r"must return two things.*Got 3 returns instead"),
        (
            lambda x: (x, (0, 0)),
            r"incompatible \(output, out_dims\) tuple\. Expected out_dims=\(0, 0\)",
        ),
        (lambda x: (x, "a"), r"incompatible \(output, out_dims\) tuple"),
        (lambda x: (x, 5), r"returned out_dim 5 for an output of 2 dims"),
        (lambda x: (x[0], 0), r"out_dim 0 has size 2, not the batch size 3"),
        (lambda x: (3.0, 0), r"returned a float with out_dim 0"),
    ],
)
def test_a_rule_returning_the_wrong_structure_is_named(mysin: Any, ret: Any, match: str) -> None:
    mysin.register_vmap(lambda info, in_dims, x: ret(x))
    with pytest.raises(RuntimeError, match=match) as e:
        oplib.vmap(mysin)(T(B, 2))
    assert "vmaptest::mysin" in str(e.value)


def test_register_vmap_by_name_returns_a_handle_and_refuses_a_second() -> None:
    lib = oplib.Library("vmaptest2", "FRAGMENT")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        oplib.impl("vmaptest2::twice", "cpu", lambda x: x * 2, lib=lib)
        calls: list[int] = []

        def rule(info: Any, in_dims: Any, x: Tensor) -> Any:
            calls.append(1)
            return K.mul(x, 2.0), 0

        handle = oplib.library.register_vmap("vmaptest2::twice", rule, lib=lib)
        x = T(B, 2)
        np.testing.assert_allclose(oplib.vmap(oplib.ops.vmaptest2.twice)(x).numpy(), x.numpy() * 2)
        assert calls == [1]
        with pytest.raises(
            oplib.RegistrationError,
            match=r"vmaptest2::twice already has a vmap rule, registered at .*test_vmap\.py:\d+",
        ):
            oplib.library.register_vmap("vmaptest2::twice", rule, lib=lib)
        handle.destroy()
        _batched._WARNED.discard("vmaptest2::twice")
        with pytest.warns(UserWarning, match="no batching rule for vmaptest2::twice"):
            oplib.vmap(oplib.ops.vmaptest2.twice)(x)
        assert calls == [1]
        oplib.library.register_vmap("vmaptest2::twice", lib=lib)(rule)  # decorator form
        oplib.vmap(oplib.ops.vmaptest2.twice)(x)
        assert calls == [1, 1]
    finally:
        lib._destroy()
    assert "vmaptest2::twice" not in _batched.USER_RULES  # the Library took its rule along


def test_register_vmap_refuses_keyword_only_tensors_as_torch() -> None:
    lib = oplib.Library("vmaptest3", "FRAGMENT")
    try:
        lib.define("f(Tensor x, *, Tensor y) -> Tensor")
        with pytest.raises(
            NotImplementedError, match="register_vmap with kwarg-only Tensor args"
        ) as e:
            oplib.library.register_vmap("vmaptest3::f", lambda *a: a, lib=lib)
        assert isinstance(e.value, oplib.SchemaError)
    finally:
        lib._destroy()


# -- nesting, in_dims, out_dims ---------------------------------------------------------------
def test_nested_vmap_matches_nested_loops() -> None:
    x, y = T(2, 3, 4), T(3, 4)
    got = oplib.vmap(oplib.vmap(lambda a, b: (a * b).sum() + a.max()), in_dims=(0, None))(x, y)
    want = np.array(
        [
            [(x.numpy()[i, j] * y.numpy()[j]).sum() + x.numpy()[i, j].max() for j in range(3)]
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(got.numpy(), want)


def test_nested_vmap_over_different_dims_with_a_custom_rule(mysin: Any) -> None:
    levels: list[int] = []

    @mysin.register_vmap
    def rule(info: Any, in_dims: Any, x: Tensor) -> Any:
        levels.append(info.batch_size)
        return mysin(x), 0

    x = T(2, 3, 4)
    out = oplib.vmap(oplib.vmap(mysin, in_dims=1), in_dims=0)(x)
    assert levels == [4, 2]  # the inner level first, then the outer on its values
    np.testing.assert_allclose(out.numpy(), np.sin(x.numpy()).transpose(0, 2, 1))


def test_in_dims_nested_tuples_lists_and_dicts() -> None:
    x, y, z = T(B, 2), T(2, B), T(2)
    f = lambda pair, d: pair[0] * pair[1] + d["z"]  # noqa: E731
    got = oplib.vmap(f, in_dims=((0, 1), {"z": None}))((x, y), {"z": z})
    want = x.numpy() * y.numpy().T + z.numpy()
    np.testing.assert_allclose(got.numpy(), want)
    got = oplib.vmap(lambda pair: pair[0] - pair[1], in_dims=(0,))([x, T(B, 2)])
    assert got.shape == (B, 2)


def test_out_dims_per_output_and_none() -> None:
    x = T(B, 2)
    c = T(2)
    a, b, same = oplib.vmap(lambda v: (v, v * 2, c), out_dims=(0, 1, None))(x)
    assert a.shape == (B, 2) and b.shape == (2, B) and same is c
    assert oplib.vmap(lambda v: c)(x).shape == (B, 2)  # unbatched output: broadcast
    assert oplib.vmap(lambda v: v, out_dims=-1)(T(B, 2, 4)).shape == (2, 4, B)


def test_native_arrays_in_native_arrays_out() -> None:
    x = np.arange(6.0).reshape(B, 2)
    out = oplib.vmap(lambda v: v * 2)(x)
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, x * 2)


def test_keyword_arguments_pass_unbatched() -> None:
    x = T(B, 2)
    out = oplib.vmap(lambda v, *, k: v * k)(x, k=3.0)
    np.testing.assert_allclose(out.numpy(), x.numpy() * 3)


def test_chunk_size_gives_the_same_result() -> None:
    x, y = T(7, 3), T(3)
    f = lambda a, b: (a * b).sum() + a  # noqa: E731
    full = oplib.vmap(f, in_dims=(0, None))(x, y)
    for chunk in (1, 2, 3, 7, 10):
        part = oplib.vmap(f, in_dims=(0, None), chunk_size=chunk)(x, y)
        np.testing.assert_allclose(part.numpy(), full.numpy())


def test_the_function_sees_one_examples_shape() -> None:
    seen: list[Any] = []

    def f(v: Tensor) -> Tensor:
        seen.append((v.shape, v.ndim, v.numel(), len(v), v.size(1), v.dtype))
        return v

    oplib.vmap(f, in_dims=1)(T(3, B, 4))
    assert seen == [((3, 4), 2, 12, 3, 4, np.dtype("float64"))]


# -- errors, in torch's words ------------------------------------------------------------------
def _f(a: Any, b: Any) -> Any:
    return a + b


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda: oplib.vmap(_f, in_dims=(0,))(T(B), T(B)),
            ValueError,
            (
                r"vmap\(_f, in_dims=\(0,\), \.\.\.\)\(<inputs>\): in_dims is not compatible with"
                r" the structure of `inputs`\. in_dims has structure \(\*,\) but inputs has "
                r"structure \(\*, \*\)\."
            ),
        ),
        (
            lambda: oplib.vmap(_f)(T(3), T(5)),
            ValueError,
            (
                r"vmap: Expected all tensors to have the same size in the mapped dimension, got "
                r"sizes \[3, 5\] for the mapped dimension"
            ),
        ),
        (
            lambda: oplib.vmap(_f, in_dims=2)(T(3, 4), T(3, 4)),
            ValueError,
            (
                r"Got in_dim=2 for some input, but that input is a Tensor of dimensionality 2 so"
                r" expected in_dim to satisfy -2 <= in_dim < 2\."
            ),
        ),
        (
            lambda: oplib.vmap(_f, in_dims=[0, 0])(T(3), T(3)),
            ValueError,
            (
                r"expected `in_dims` to be int or a \(potentially nested\) tuple matching the "
                r"structure of inputs, got: <class 'list'>\."
            ),
        ),
        (lambda: oplib.vmap(_f, in_dims=None)(T(3), T(3)), ValueError, r"got: <class 'NoneType'>"),
        (
            lambda: oplib.vmap(_f)(T(3), 1.0),
            ValueError,
            (
                r"Got in_dim=0 for an input but the input is of type <class 'float'>\. We cannot"
                r" vmap over non-Tensor arguments, please use None as the respective in_dim"
            ),
        ),
        (
            lambda: oplib.vmap(_f, in_dims=(None, None))(T(3), T(3)),
            ValueError,
            r"vmap: Expected at least one Tensor to vmap over",
        ),
        (
            lambda: oplib.vmap(_f)(),
            ValueError,
            r"vmap\(_f\)\(<inputs>\): got no inputs\. Maybe you forgot to add inputs",
        ),
        (
            lambda: oplib.vmap(lambda a: a, out_dims=(0, 0))(T(3)),
            ValueError,
            (
                r"out_dims is not compatible with the structure of `outputs`\. out_dims has "
                r"structure \(\*, \*\) but outputs has structure \*\."
            ),
        ),
        (
            lambda: oplib.vmap(lambda a: a, out_dims="a")(T(3)),
            ValueError,
            r"`out_dims` must be an int, None or a python collection of ints",
        ),
        (
            lambda: oplib.vmap(lambda a: a, out_dims=2)(T(3, 4)),
            IndexError,
            r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)",
        ),
        (
            lambda: oplib.vmap(lambda a: 1.0)(T(3)),
            ValueError,
            (
                r"`<lambda>` must only return Tensors, got type <class 'float'>\. Did you mean "
                r"to set out_dims= to None for output\?"
            ),
        ),
        (
            lambda: oplib.vmap(lambda a: a, out_dims=None)(T(3)),
            ValueError,
            r"`<lambda>` can not return a BatchedTensor when out_dim is None",
        ),
        (
            lambda: oplib.vmap(lambda a: a, chunk_size=0)(T(3)),
            ValueError,
            r"vmap: chunk_size should be None or greater than 0\. \(got 0\)",
        ),
        (
            lambda: oplib.vmap(lambda a: a, randomness="x")(T(3)),
            RuntimeError,
            r"Only allowed values for randomness are 'error', 'different', or 'same'\. Got x",
        ),
        (
            lambda: oplib.vmap(lambda a: a.sum().item())(T(3, 2)),
            RuntimeError,
            r"vmap: It looks like you're calling \.item\(\) on a Tensor",
        ),
        (
            lambda: oplib.vmap(lambda a: a if bool(a.sum() > 0) else -a)(T(3, 2)),
            RuntimeError,
            r"data-dependent control flow",
        ),
    ],
)
def test_errors(call: Callable[[], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


# -- vmap and grad -----------------------------------------------------------------------------
def test_per_sample_gradients_inside_vmap_match_the_loop() -> None:
    w = oplib.tensor(_rng.normal(size=4), requires_grad=True)
    X, Y = T(5, 4), T(5)

    def loss_grad(w: Tensor, x: Tensor, y: Tensor) -> Tensor:
        loss = ((x @ w - y) ** 2) + 0.1 * (w * w).sum()  # the penalty: an unbatched path
        (g,) = oplib.autograd.grad(loss, w)
        return g

    got = oplib.vmap(loss_grad, in_dims=(None, 0, 0))(w, X, Y)
    want = np.stack([loss_grad(w, X[i], Y[i]).numpy() for i in range(5)])
    assert got.shape == (5, 4)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert w.grad is None


def test_grad_of_a_batched_input_inside_vmap() -> None:
    X = T(B, 3)

    def f(x: Tensor) -> Tensor:
        x = x.detach().requires_grad_()
        (g,) = oplib.autograd.grad((x.sin() * x).sum(), x)
        return g

    got = oplib.vmap(f)(X)
    x = X.numpy()
    np.testing.assert_allclose(got.numpy(), np.cos(x) * x + np.sin(x))


def test_grad_around_vmap_flows_through_the_batch() -> None:
    w = oplib.tensor(_rng.normal(size=4), requires_grad=True)
    X = T(5, 4)
    out = oplib.vmap(lambda w, x: (x * w).sum().tanh(), in_dims=(None, 0))(w, X).sum()
    (g,) = oplib.autograd.grad(out, w)
    x, wn = X.numpy(), w.detach().numpy()
    want = ((1 - np.tanh(x @ wn) ** 2)[:, None] * x).sum(0)
    np.testing.assert_allclose(g.numpy(), want)


def test_grad_inside_a_nested_vmap() -> None:
    w = oplib.tensor(_rng.normal(size=3), requires_grad=True)
    X = T(2, 4, 3)

    def g(w: Tensor, x: Tensor) -> Tensor:
        return oplib.autograd.grad((x * w).sum() ** 2, w)[0]

    got = oplib.vmap(oplib.vmap(g, in_dims=(None, 0)), in_dims=(None, 0))(w, X)
    x, wn = X.numpy(), w.detach().numpy()
    want = 2 * (x @ wn)[..., None] * x
    np.testing.assert_allclose(got.numpy(), want)


def test_grad_with_grad_outputs_inside_vmap() -> None:
    X = T(B, 3)

    def f(x: Tensor) -> Tensor:
        x = x.detach().requires_grad_()
        return oplib.autograd.grad(x * x, x, grad_outputs=oplib.ones(3, dtype=oplib.float64))[0]

    np.testing.assert_allclose(oplib.vmap(f)(X).numpy(), 2 * X.numpy())


def test_grad_of_a_non_scalar_example_needs_grad_outputs() -> None:
    def f(x: Tensor) -> Tensor:
        x = x.detach().requires_grad_()
        return oplib.autograd.grad(x * x, x)[0]

    with pytest.raises(
        RuntimeError,
        match=(
            r"grad can be implicitly created only for scalar outputs; output 0 has shape "
            r"\(3,\) \(per example, inside vmap\)"
        ),
    ):
        oplib.vmap(f)(T(B, 3))


def test_backward_inside_vmap_is_refused() -> None:
    X = T(B, 3, requires_grad=True) if False else T(B, 3)
    X.requires_grad_()
    with pytest.raises(
        RuntimeError, match=r"backward\(\) called inside oplib\.vmap\. This is not supported"
    ):
        oplib.vmap(lambda x: x.sum().backward())(X)


def test_no_mode_is_left_behind_and_no_cost_outside() -> None:
    from oplib_core._dispatch.modes import ACTIVE

    before = ACTIVE[0]
    with pytest.raises(ValueError):
        oplib.vmap(lambda a: 1.0)(T(3))
    assert ACTIVE[0] == before
    assert not _batched.current_levels()


# -- the register_vmap rules of torch's custom-op test database (tests/ports/custom_op_db.py) --
PORTS = str(Path(__file__).parent / "ports")


@pytest.fixture(scope="module")
def custom_op_db() -> Any:
    """The port, imported fresh and destroyed after (tests/ports/test_custom_op_db.py
    imports it too, and other tests count the registry's ops)."""
    sys.modules.pop("custom_op_db", None)
    sys.path.insert(0, PORTS)
    try:
        module = importlib.import_module("custom_op_db")
    finally:
        sys.path.remove(PORTS)
    yield module
    for value in list(vars(module).values()):
        if isinstance(value, oplib.CustomOpDef):
            value._destroy()
    sys.modules.pop("custom_op_db", None)


def _batch_of(samples: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Two samples of one shape stacked along a new dim 0 (lists element by element)."""

    def stack(items: list[Any]) -> Any:
        if isinstance(items[0], Tensor):
            return K.stack([t.detach() for t in items], 0)
        if isinstance(items[0], list):
            return [stack([it[k] for it in items]) for k in range(len(items[0]))]
        return items[0]

    first = samples[0]
    args = tuple(
        stack([(s.input, *s.args)[k] for s in samples]) for k in range(1 + len(first.args))
    )
    return args, first.kwargs


def _dims_of(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        0
        if isinstance(a, Tensor)
        else ([0] * len(a) if isinstance(a, list) and isinstance(a[0], Tensor) else None)
        for a in args
    )


DB_RULES = [
    ("NumpyCubeCustomOp", 0),
    ("NumpyMulCustomOp", 0),
    ("NumpyMulScalarCustomOp", 0),
    ("NumpySortCustomOp", 0),
    ("NumpyTakeCustomOp", 0),
    ("NumpyViewCopyCustomOp", 0),
    ("NumpySplitCopyCustomOp", 0),
    ("NumpySplitCopyWithIntCustomOp", (0, None)),
]


@pytest.mark.parametrize(("name", "out_dims"), DB_RULES)
def test_custom_op_db_rules_match_the_loop(custom_op_db: Any, name: str, out_dims: Any) -> None:
    info = {i.name: i for i in custom_op_db.custom_op_db}[name]
    op = info.op
    qualname = oplib.lookup(op).name()
    assert qualname in _batched.USER_RULES  # the port registered its rule
    runs = [list(info.sample_inputs_func(info, "cpu", np.float64, False)) for _ in range(2)]
    assert runs[0]
    for samples in zip(*runs, strict=True):
        args, kwargs = _batch_of(list(samples))
        in_dims = _dims_of(args)

        def f(*a: Any, kwargs: dict[str, Any] = kwargs) -> Any:
            out = op(*a, **kwargs)
            return tuple(out) if isinstance(out, tuple) else out

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the rule ran, not the per-example fallback
            got = oplib.vmap(f, in_dims, out_dims)(*args)
        close(got, loop(f, in_dims, args, out_dims))


@pytest.mark.parametrize("name", ["NumpyNonzeroCustomOp", "NumpyNMSCustomOp"])
def test_custom_op_db_data_dependent_rules_refuse(custom_op_db: Any, name: str) -> None:
    info = {i.name: i for i in custom_op_db.custom_op_db}[name]
    sample = next(iter(info.sample_inputs_func(info, "cpu", np.float64, False)))
    args = (sample.input, *sample.args)
    batched = tuple(K.stack([a, a], 0) if isinstance(a, Tensor) else a for a in args)
    with pytest.raises(
        NotImplementedError, match="Operator is data-dependent and cannot be vmapped"
    ):
        oplib.vmap(info.op, _dims_of(batched))(*batched)


def test_custom_op_db_cat_rule_fails_as_in_torch(custom_op_db: Any) -> None:
    # torch's numpy_cat_vmap unpacks one in_dim for its two arguments (xs, dim): it raises
    # there too (ported as written)
    xs = [T(B, 2, 3), T(B, 4, 3)]
    with pytest.raises(ValueError, match="too many values to unpack"):
        oplib.vmap(lambda a, b: custom_op_db.numpy_cat([a, b], 0))(*xs)


def test_a_higher_order_operator_runs_per_example_with_the_warning() -> None:
    _batched._WARNED.discard("cond")
    x = oplib.tensor(np.arange(6.0).reshape(3, 2))

    def f(v: Tensor) -> Tensor:
        return oplib.cond(v.sum() > 3, lambda a: a * 2, lambda a: a - 1, (v,))

    with pytest.warns(UserWarning, match="no batching rule for cond.*higher-order operator"):
        got = oplib.vmap(f)(x)
    np.testing.assert_allclose(got.numpy(), [[-1.0, 0.0], [4.0, 6.0], [8.0, 10.0]])


def test_a_batched_value_that_escapes_its_vmap_is_refused() -> None:
    leak: list[Tensor] = []
    oplib.vmap(lambda v: leak.append(v) or v)(T(B, 2))
    (escaped,) = leak
    with pytest.raises(oplib.CallArgumentError, match="BatchedTensor, which no installed backend"):
        K.sin(escaped)
    with pytest.raises(RuntimeError, match=r"escaped the oplib\.vmap call that made it"):
        escaped[0]


def test_an_op_defined_again_with_other_defaults_binds_the_new_ones() -> None:
    seen: list[Any] = []
    for default in (1, 2):
        lib = oplib.Library("vmaptest4", "FRAGMENT")
        try:
            lib.define(f"f(Tensor x, int k={default}) -> Tensor")
            oplib.impl("vmaptest4::f", "cpu", lambda x, k: x * k, lib=lib)

            def rule(info: Any, in_dims: Any, x: Tensor, k: int) -> Any:
                seen.append(k)
                return K.mul(x, float(k)), 0

            oplib.library.register_vmap("vmaptest4::f", rule, lib=lib)
            oplib.vmap(oplib.ops.vmaptest4.f)(T(B, 2))
        finally:
            lib._destroy()
    assert seen == [1, 2]


def test_vmap_under_fake_tensor_mode_and_on_meta() -> None:
    x = T(B, 4)
    with oplib.FakeTensorMode() as mode:
        out = oplib.vmap(lambda a, w: (a * w).sum() + a.amax(), in_dims=(0, None))(
            mode.from_real(x), mode.from_real(T(4))
        )
    assert out.shape == (B,) and type(out.native).__name__ == "FakeArray"
    meta = oplib.empty(B, 4, 2, device="meta")
    assert oplib.vmap(lambda a: a.sum(0) @ a.T, in_dims=1)(meta).shape == (4, B)


TENSOR_METHODS: dict[str, Callable[[Tensor], Any]] = {
    "float": lambda a: a.float(),
    "to": lambda a: a.to(oplib.float32),
    "cpu": lambda a: a.cpu(),
    "type_as": lambda a: a.type_as(a),
    "contiguous": lambda a: a.T.contiguous(),
    "T": lambda a: a.T,
    "mT": lambda a: a.mT,
    "reshape": lambda a: a.reshape(-1),
    "view": lambda a: a.view(8),
    "expand": lambda a: a[None].expand(2, 4, 2),
    "permute": lambda a: a.permute(1, 0),
    "split": lambda a: a.split(2)[0],
    "max": lambda a: a.max(0)[0],
    "iter": lambda a: list(a)[1],
    "where": lambda a: a.where(a > 0.5, 0.0),
    "operators": lambda a: 1 - (-a) / 2 + abs(a) ** 2 + 2**a,
    "matmul": lambda a: a @ a.T,
    "iadd": lambda a: a.clone().__iadd__(1),
    "len": lambda a: a * len(a),
    "size": lambda a: a.sum() * a.size(0) * a.numel(),
    "roll": lambda a: a.roll(1),
    "repeat": lambda a: a.repeat(2, 1),
    "chunk": lambda a: a.chunk(2)[1],
    "squeeze": lambda a: a[None].squeeze(),
    "mean": lambda a: a.mean(0),
    "new_tensor": lambda a: a + a.new_tensor([1.0, 2.0]),
    "new_zeros": lambda a: a.new_zeros(4, 2).copy_(a) + a.new_ones((2,)) + a.new_full([2], 3.0),
    "new_empty": lambda a: a.new_empty(2).copy_(a[0]),
    "narrow": lambda a: a.narrow(0, 1, 2),
    "index_select": lambda a: a.index_select(0, oplib.tensor(np.array([0, 2]))),
}


@pytest.mark.parametrize("name", list(TENSOR_METHODS))
def test_tensor_methods_act_per_example(name: str) -> None:
    check(TENSOR_METHODS[name], (T(B, 4, 2),))


def test_new_factories_are_one_per_example() -> None:
    seen: list[Any] = []

    def f(a: Tensor) -> Tensor:
        z = a.new_zeros(3)
        seen.append((type(z).__name__, z.shape))
        z[0] = a.sum()  # an example written into its own row
        return z

    out = oplib.vmap(f)(T(B, 2))
    assert seen == [("BatchedTensor", (3,))]
    assert out.shape == (B, 3)
