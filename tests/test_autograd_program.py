"""Pointwise backward formulas on numpy as one program of numpy's kernels (issue 30 on CPU:
``BackendSpec.direct_kernels``, ``oplib_core.autograd._program``).

Each fused core formula, and each row of the per-op table through a small formula, gives
bit for bit what the formula gives op by op, on every float dtype, 0-d, one element, small,
large (written in place) and strided inputs; tanh's large backward makes one array where
the formula makes two; a plugin's override of a kernel is what the program calls; the
formula itself runs where fusion is off (dispatch modes, ``create_graph``), and the saved
tensors' version checks hold.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_autograd_fusion import (
    FUSED,
    NAME,
    ROW_FORMULAS,
    HostArray,
    _raw,
    _register_host,
)
from test_threads import run_threads

import oplib_core as oplib
from oplib_core._dispatch import DispatchMode
from oplib_core._registry.registry import op_named
from oplib_core._tensor.tensor import Tensor
from oplib_core.autograd import _fusion
from oplib_core.autograd._formulas import FORMULAS
from oplib_core.autograd._fusion import VALUED_KERNELS, NotFusable, fusable, trace
from oplib_core.autograd._program import IN_PLACE_MIN, direct_kernel

OPS = oplib.ops.oplib
FLOATS = [np.dtype("float16"), np.dtype("float32"), np.dtype("float64")]
#: The fused formulas of one op call, which stay formulas on numpy (the dispatcher is cheaper).
ONE_CALL = ("neg", "exp", "log")
#: () and (1,): the kernels as they are; (5,): the ufuncs; (4, 8) and strided: in place.
SHAPES = {"0-d": (), "one": (1,), "small": (5,), "large": (4, 8), "strided": "strided"}


def _array(shape: Any, dtype: np.dtype, seed: int, low: float, high: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if shape == "strided":  # every other element of a row-major block: not contiguous
        return rng.uniform(low, high, (6, 10)).astype(dtype)[:, ::2]
    return np.asarray(rng.uniform(low, high, shape).astype(dtype))


def _node(name: str, x: np.ndarray) -> Any:
    """The backward node of ``oplib::name`` called on ``x`` (a leaf requiring grad)."""
    y = getattr(OPS, name)(oplib.tensor(x, requires_grad=True))
    return y.grad_fn


def _same(got: Tensor, expected: Tensor) -> None:
    g, e = np.asarray(got._data), np.asarray(expected._data)
    assert type(got._data) is np.ndarray and g.dtype == e.dtype and g.shape == e.shape
    np.testing.assert_array_equal(g, e)  # (nan where nan: log and sqrt below 0)


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", FUSED)
def test_each_core_formula_as_a_program_is_the_formula_bit_for_bit(
    name: str, dtype: np.dtype, shape: Any
) -> None:
    x = _array(shape, dtype, 0, -2, 2)
    if x.ndim:
        x[..., :1] = 0  # relu's and abs's edge
    with np.errstate(all="ignore"):  # (log and sqrt of negatives: nan, as numpy)
        ctx = _node(name, x)
    g = Tensor._wrap(_array(shape, dtype, 1, -2, 2))
    backward = FORMULAS[name][1]
    fusion = backward.fusion  # type: ignore[attr-defined]
    before = fusion.fused
    with oplib.no_grad(), np.errstate(all="ignore"):
        got = backward(ctx, g)
        if name in ONE_CALL:  # the dispatcher serves one call for less: declined once
            assert fusion.fused == before and fusion.declined == [_fusion.COMPILERS[np.ndarray][0]]
            assert set(fusion.reasons.values()) == {_fusion.ONE_CALL}
        else:
            assert fusion.fused == before + 1, fusion.reasons
        _same(got, _raw(name)(ctx, g))


@oplib.no_grad()
@pytest.mark.parametrize("shape", [(), (3,), (4, 5)], ids=["0-d", "small", "large"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("row", list(ROW_FORMULAS))
def test_every_row_of_the_table_runs_in_a_program_as_its_op(
    row: str, dtype: np.dtype, shape: tuple[int, ...]
) -> None:
    formula = ROW_FORMULAS[row]
    rng = np.random.default_rng(1)
    g = np.asarray(rng.uniform(-2, 2, shape).astype(dtype))
    s = np.asarray(rng.uniform(0.5, 2, shape).astype(dtype))
    if shape:
        s.flat[0] = g.flat[0] = 0.5  # ties for the comparisons
    ctx = _Saved(Tensor._wrap(s))
    backward = fusable(formula)
    got = backward(ctx, Tensor._wrap(g))
    fusion = backward.fusion  # type: ignore[attr-defined]
    if len(trace(formula, [dtype, dtype]).calls) == 1:  # pow.Scalar's row: one call
        assert fusion.fused == 0 and list(fusion.reasons.values()) == [_fusion.ONE_CALL]
    else:
        assert fusion.fused == 1 and not fusion.reasons
    with np.errstate(all="ignore"):
        _same(got, formula(ctx, Tensor._wrap(g)))


class _Saved:
    """A ctx with ``saved_tensors`` only (what a fused formula may read)."""

    def __init__(self, *saved: Tensor) -> None:
        self.saved_tensors = saved


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["tanh", "sigmoid", "sin", "cos", "exp"]),
    x=hnp.arrays(
        st.sampled_from(FLOATS),  # type: ignore[arg-type]
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=24),
        elements={"min_value": -20, "max_value": 20, "allow_nan": False},
    ),
)
def test_programs_equal_their_formulas_on_any_values(name: str, x: np.ndarray) -> None:
    with np.errstate(all="ignore"):  # (exp of 20 overflows float16: inf, as numpy)
        ctx = _node(name, x)
    g = Tensor._wrap(np.full(x.shape, 0.75, x.dtype))
    with oplib.no_grad(), np.errstate(all="ignore"):
        _same(FORMULAS[name][1](ctx, g), _raw(name)(ctx, g))


def test_a_large_tanh_backward_makes_one_array_where_the_formula_makes_two() -> None:
    n = 1 << 16
    assert n >= IN_PLACE_MIN
    ctx = _node("tanh", np.linspace(-2, 2, n, dtype=np.float32))
    g = Tensor._wrap(np.ones(n, np.float32))
    oplib.set_grad_enabled(False)
    FORMULAS["tanh"][1](ctx, g)  # made and proven

    def peak(run: Callable[[], Any]) -> int:
        tracemalloc.start()
        try:
            start = tracemalloc.get_traced_memory()[0]
            out = run()
            del out
            return tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()

    nbytes = n * 4
    program = peak(lambda: FORMULAS["tanh"][1](ctx, g))
    formula = peak(lambda: _raw("tanh")(ctx, g))
    oplib.set_grad_enabled(True)
    assert nbytes <= program < 1.5 * nbytes  # its result, written in place twice
    assert formula >= 2 * nbytes  # out * out and 1 - that, alive together


@pytest.fixture
def counted_mul() -> Iterator[list[int]]:
    """``oplib::mul``'s cpu kernel overridden by one that counts its calls."""
    calls: list[int] = []

    def mul(self: Any, other: Any) -> Any:
        calls.append(1)
        return np.asarray(np.multiply(self, other))

    lib = oplib.Library("oplib", "IMPL")
    lib.impl("mul", mul, "cpu", allow_override=True)
    try:
        yield calls
    finally:
        lib._destroy()


def test_a_program_calls_the_kernel_a_plugin_put_in_place_and_forgets_it_after(
    counted_mul: list[int],
) -> None:
    fusion = FORMULAS["tanh"][1].fusion  # type: ignore[attr-defined]
    x = oplib.tensor(np.linspace(-1, 1, 40, dtype=np.float32), requires_grad=True)
    before = fusion.fused
    x.tanh().sum().backward()
    # tanh's formula multiplies twice: both calls are the override's, in the program
    assert fusion.fused == before + 1 and len(counted_mul) == 2
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(x.detach().numpy()) ** 2, rtol=1e-6)


def test_the_core_kernel_serves_again_once_the_override_is_gone() -> None:
    calls: list[int] = []
    lib = oplib.Library("oplib", "IMPL")

    def mul(a: Any, b: Any) -> Any:
        calls.append(1)
        return np.asarray(np.multiply(a, b))

    lib.impl("mul", mul, "cpu", allow_override=True)
    x = oplib.tensor(np.linspace(-1, 1, 40, dtype=np.float32), requires_grad=True)
    x.tanh().sum().backward()
    lib._destroy()
    seen = len(calls)
    x.tanh().sum().backward()
    assert seen == 2 and len(calls) == seen  # the program made again calls numpy's own


class _Ops(DispatchMode):
    def __init__(self) -> None:
        self.names: list[str] = []

    def __oplib_dispatch__(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.names.append(str(op.name()))
        return op(*args, **kwargs)


def test_a_dispatch_mode_sees_the_formulas_op_calls() -> None:
    x = oplib.tensor(np.linspace(-1, 1, 40, dtype=np.float32), requires_grad=True)
    y = x.tanh().sum()
    fusion = FORMULAS["tanh"][1].fusion  # type: ignore[attr-defined]
    before = fusion.fused
    with _Ops() as mode:
        y.backward()
    assert fusion.fused == before
    assert mode.names[-3:] == ["oplib::mul", "oplib::rsub.Scalar", "oplib::mul"]


def test_create_graph_runs_the_formula_so_that_it_is_differentiable() -> None:
    data = np.linspace(-1, 1, 40)
    x = oplib.tensor(data, requires_grad=True)
    (g,) = oplib.autograd.grad(x.tanh().sum(), x, create_graph=True)
    assert g.grad_fn is not None
    g.sum().backward()
    t = np.tanh(data)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), -2 * t * (1 - t**2), rtol=1e-12)


@pytest.mark.parametrize("name", ["tanh", "sin"])  # a saved output, a saved input
def test_a_saved_tensor_written_in_place_is_refused_as_before(name: str) -> None:
    x = oplib.tensor(np.linspace(-1, 1, 40, dtype=np.float32), requires_grad=True)
    a = x * 1.0
    y = getattr(OPS, name)(a)
    z = y.sum()
    (y if name == "tanh" else a).add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_a_kernel_that_is_not_the_backends_own_is_not_called_directly() -> None:
    cpu = oplib.backends.get("cpu")
    assert direct_kernel(cpu, op_named("oplib::mul")) is not None
    refused = r"oplib::_narrow runs its 'CompositeExplicitAutograd' kernel on cpu"
    with pytest.raises(NotFusable, match=refused):
        direct_kernel(cpu, op_named("oplib::_narrow"))


def test_a_backend_whose_kernels_come_from_its_fallback_runs_the_formula() -> None:
    undo = _register_host(None, direct_kernels=True)
    try:
        assert _fusion.COMPILERS[np.ndarray][0] != _fusion.COMPILERS[HostArray][0]
        backward = fusable(_raw("sin"))
        x = np.linspace(-1, 1, 20, dtype=np.float32).view(HostArray)
        with oplib.no_grad():
            out = backward(
                _Saved(Tensor._wrap(x)), Tensor._wrap(np.ones(20, np.float32).view(HostArray))
            )
        np.testing.assert_allclose(np.asarray(out._data), np.cos(x), rtol=1e-6)
        fusion = backward.fusion  # type: ignore[attr-defined]
        (reason,) = fusion.reasons.values()
        assert fusion.fused == 0 and f"kernel on {NAME}" in reason
    finally:
        undo()


# -- the Scalar ops' formulas: one program per scalar ------------------------------------------
SCALARS = [2, 3.0, 0.5, -1.5, 0, True]


@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["pow", "rpow", "rdiv"])
def test_a_scalar_ops_formula_is_a_program_per_scalar_and_the_formula_bit_for_bit(
    name: str, dtype: np.dtype, scalar: Any
) -> None:
    x = oplib.tensor(_array((4, 8), dtype, 2, 0.25, 2), requires_grad=True)
    with np.errstate(all="ignore"):
        y = getattr(OPS, name).Scalar(x, scalar)
    ctx = y.grad_fn
    g = Tensor._wrap(_array((4, 8), dtype, 3, -2, 2))
    backward = FORMULAS[f"{name}.Scalar"][1]
    fusion = backward.fusion  # type: ignore[attr-defined]
    with oplib.no_grad(), np.errstate(all="ignore"):
        backward(ctx, g)  # a value met once is not worth a program: met twice, it is
        got = backward(ctx, g)
        expected = _raw(f"{name}.Scalar")(ctx, g)
    assert type(got) is tuple and got[1:] == (None,) and expected[1:] == (None,)
    _same(got[0], expected[0])
    key = (np.ndarray, dtype, *(t._data.dtype for t in ctx.saved_tensors))
    key = (*key, scalar, type(scalar)) if fusion.values else key
    reason = fusion.reasons.get(key)
    # rpow's formula of a negative base multiplies by nan (log of it): not fused, as nan is
    # no literal; pow's of 0 is one call (g * 0)
    assert (fusion.kernels[key] is None) == (reason is not None), reason


def test_two_scalars_that_are_equal_in_python_get_programs_of_their_own() -> None:
    fusion = FORMULAS["pow.Scalar"][1].fusion  # type: ignore[attr-defined]
    x = oplib.tensor(np.linspace(0.5, 2, 20), requires_grad=True)
    for s in (2, 2.0, 2, 2.0):
        (x**s).sum().backward()
    keys = [k for k in fusion.kernels if k[0] is np.ndarray and k[1] == np.float64 and k[-2] == 2]
    assert {k[-1] for k in keys} >= {int, float}
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), 4 * (2 * x.detach().numpy()))


def test_a_formula_that_met_many_scalars_keeps_a_bounded_number_of_programs() -> None:
    fusion = FORMULAS["rpow.Scalar"][1].fusion  # type: ignore[attr-defined]
    x = oplib.tensor(np.linspace(0.5, 2, 20), requires_grad=True)
    for k in range(VALUED_KERNELS + 20):
        s = 1.0 + k / 1000
        for _ in range(2):  # met twice: worth a program, while there is room
            x.grad = None
            OPS.rpow.Scalar(x, s).sum().backward()
            assert x.grad is not None
            np.testing.assert_allclose(x.grad.numpy(), s ** x.detach().numpy() * np.log(s))
    assert len(fusion.kernels) == VALUED_KERNELS
    built = fusion.compiled
    for _ in range(20):  # full: a value met again and again costs no trace
        OPS.rpow.Scalar(x, 7.5).sum().backward()
    assert fusion.compiled == built and len(fusion.reasons) <= VALUED_KERNELS


def test_a_scalar_that_changes_every_step_costs_no_trace() -> None:
    fusion = FORMULAS["pow.Scalar"][1].fusion  # type: ignore[attr-defined]
    p = oplib.tensor(np.linspace(0.05, 0.95, 64), requires_grad=True)
    built = fusion.compiled
    for step in range(50):  # an annealed exponent (focal loss's gamma)
        gamma = 2.0 * step / 50 + 0.001
        ((1.0 - p) ** gamma * p.log()).mean().backward()
    assert fusion.compiled == built


@pytest.mark.parametrize("scalar", [float("inf"), float("nan")])
def test_a_scalar_that_is_not_finite_runs_the_formula(scalar: float) -> None:
    fusion = FORMULAS["pow.Scalar"][1].fusion  # type: ignore[attr-defined]
    x = oplib.tensor(np.linspace(0.5, 2, 20), requires_grad=True)
    before = (fusion.fused, len(fusion.kernels))
    with np.errstate(all="ignore"):
        (x**scalar).sum().backward()
    assert (fusion.fused, len(fusion.kernels)) == before


@pytest.mark.parametrize("scalar", [1 + 2j, np.float64(2.0), "2", None])
def test_only_a_finite_bool_int_or_float_keys_a_program(scalar: Any) -> None:
    fusion = FORMULAS["pow.Scalar"][1].fusion  # type: ignore[attr-defined]
    ctx = _Saved()
    ctx.scalar = scalar  # type: ignore[attr-defined]
    assert fusion._valued(ctx, (np.ndarray,)) is None
    ctx.scalar = 2  # type: ignore[attr-defined]
    assert fusion._valued(ctx, (np.ndarray,)) == (np.ndarray, 2, int)


def test_threads_making_and_running_programs_at_once_get_the_serial_gradients() -> None:
    def grads(seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for dtype in FLOATS:
            x = oplib.tensor(rng.uniform(0.2, 2, 40).astype(dtype), requires_grad=True)
            y = ((x * 0.5).tanh().sigmoid() ** 3 + x.sin().cos().sqrt()).sum()
            y.backward()
            assert x.grad is not None
            out.append(x.grad.numpy())
        return out

    expected = [grads(seed) for seed in range(8)]
    _fusion._forget("test", None)  # every program made again, by the threads at once
    got: dict[int, list[np.ndarray]] = {}

    def work(seed: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(5):
                got[seed] = grads(seed)

        return run

    errors = run_threads([work(seed) for seed in range(8)])
    assert not errors, errors
    for seed in range(8):
        for g, e in zip(got[seed], expected[seed], strict=True):
            np.testing.assert_array_equal(g, e)
    assert FORMULAS["tanh"][1].fusion.kernels  # type: ignore[attr-defined]


def test_a_kernel_that_gives_no_array_is_refused_as_the_dispatcher_refuses_it() -> None:
    lib = oplib.Library("oplib", "IMPL")
    # a plugin's rsub.Scalar giving numpy's scalar for 0-d input (np.subtract does)
    lib.impl(
        "rsub.Scalar", lambda self, other: np.subtract(other, self), "cpu", allow_override=True
    )
    try:
        for _ in range(2):  # the program, made and proven on a 1-d call, then the 0-d one
            x = oplib.tensor(np.linspace(-1, 1, 4, dtype=np.float32), requires_grad=True)
            x.tanh().sum().backward()
        x = oplib.tensor(np.array(0.5, np.float32), requires_grad=True)
        y = x.tanh()
        with pytest.raises(oplib.errors.KernelResultError, match=r"returned a numpy\.float32"):
            y.backward()
    finally:
        lib._destroy()
