"""Pointwise backward formulas as one elementwise kernel (issue 30,
``oplib_core.autograd._fusion``).

Proved on the host: each fused core formula's trace, run op by op on numpy, is the formula;
the C source generated from it, compiled with g++ and run in a host loop, equals the
formula's cpu result (float32, float64, and float16 through ``_Float16``); every row of the
per-op C table is exercised that way; ``hostjit``, a backend double on numpy memory whose
``elementwise_kernel`` is that host compiler (a real compiler of the same source), runs
whole backward passes fused, and counts its compiler calls to show where fusion is off
(``create_graph``, an active dispatch mode, a non-pointwise formula, dtypes, devices).
Marked ``cuda`` (skipped with the reason without cupy or a device): the same on cupy, one
kernel launch per fused node.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._tensor.tensor import Tensor
from oplib_core.autograd import _fusion
from oplib_core.autograd._formulas import FORMULAS
from oplib_core.autograd._fusion import KernelSource, NotFusable, fusable, kernel_source, trace
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.kernels import array_kernels
from oplib_core.testing import sample_inputs

ROOT = Path(__file__).resolve().parents[1]
OPS = oplib.ops.oplib
#: The core formulas that run fused: the pointwise ones that read only g and saved tensors.
FUSED = ("neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "sqrt")
DTYPES = [np.dtype("float32"), np.dtype("float64")]
TOL = {
    np.dtype("float16"): {"rtol": 2e-3, "atol": 1e-3},
    np.dtype("float32"): {"rtol": 2e-6, "atol": 1e-6},
    np.dtype("float64"): {"rtol": 1e-13, "atol": 1e-14},
}


def _raw(name: str) -> Callable[..., Any]:
    """The core formula of ``name`` itself (unwrapped when it is fused)."""
    backward = FORMULAS[name][1]
    return getattr(backward, "__wrapped__", backward)


# -- the host compiler: cupy.ElementwiseKernel's arguments, compiled with g++ ---------------

_C = {"bool": "bool", "float16": "float16", "float32": "float", "float64": "double"}
_PRELUDE = """#include <math.h>
typedef _Float16 float16;  // cupy's float16 class, on the host
"""


def _params(text: str) -> list[tuple[np.dtype, str]]:
    return [(np.dtype(t), name) for t, name in (p.split() for p in text.split(","))]


def host_function(source: KernelSource) -> str:
    """``source`` as an ``extern "C"`` host loop: ``name(inputs, out, n)`` runs the
    operation once per element, its parameters bound as cupy binds them."""
    ins = _params(source.in_params)
    ((out_dt, out),) = _params(source.out_params)
    lines = [f'extern "C" void {source.name}(void** ins, void* out, long long n) {{']
    lines.append("  for (long long i = 0; i < n; ++i) {")
    for k, (dt, p) in enumerate(ins):
        lines.append(f"    const {_C[dt.name]} {p} = ((const {_C[dt.name]}*)ins[{k}])[i];")
    lines.append(f"    {_C[out_dt.name]} {out};")
    lines.append("    {\n" + source.operation + "\n    }")
    lines.append(f"    (({_C[out_dt.name]}*)out)[i] = {out};")
    lines.append("  }\n}")
    return "\n".join(lines)


class HostCompiler:
    """Compiles kernels given as ``cupy.ElementwiseKernel``'s arguments with g++; called as
    ``BackendSpec.elementwise_kernel`` it records each kernel's name in ``calls``."""

    def __init__(self, cxx: str, work: Path, wrap: Callable[[np.ndarray], Any]) -> None:
        self.cxx, self.work, self.wrap = cxx, work, wrap
        self.calls: list[str] = []
        self.libs: list[ctypes.CDLL] = []

    def build(self, sources: list[KernelSource]) -> dict[str, Callable[..., Any]]:
        n = len(self.libs)
        cpp, so = self.work / f"k{n}.cpp", self.work / f"k{n}.so"
        cpp.write_text(_PRELUDE + "\n".join(host_function(s) for s in sources))
        done = subprocess.run(
            [self.cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(so), str(cpp)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:] + cpp.read_text()[-3000:]
        lib = ctypes.CDLL(str(so))
        self.libs.append(lib)
        return {s.name: self._runner(lib, s) for s in sources}

    def _runner(self, lib: ctypes.CDLL, source: KernelSource) -> Callable[..., Any]:
        fn = getattr(lib, source.name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        ins = _params(source.in_params)
        ((out_dt, _),) = _params(source.out_params)

        def run(*arrays: Any) -> Any:
            assert len(arrays) == len(ins)
            views = np.broadcast_arrays(*(np.asarray(a) for a in arrays))
            held = [
                np.ascontiguousarray(a, dtype=dt) for a, (dt, _) in zip(views, ins, strict=True)
            ]
            out = np.empty(views[0].shape, out_dt)
            pointers = (ctypes.c_void_p * len(held))(*(a.ctypes.data for a in held))
            fn(pointers, out.ctypes.data, out.size)
            return self.wrap(out)

        return run

    def __call__(
        self, in_params: str, out_params: str, operation: str, name: str
    ) -> Callable[..., Any]:
        self.calls.append(name)
        source = KernelSource(in_params, out_params, operation, name)
        return self.build([source])[name]


@pytest.fixture(scope="module")
def cxx() -> str:
    found = shutil.which("g++") or shutil.which("c++")
    if found is None:
        pytest.skip("needs a C++ compiler (g++) to run the generated source on the host")
    return found


@pytest.fixture(scope="module")
def host(cxx: str, tmp_path_factory: pytest.TempPathFactory) -> HostCompiler:
    return HostCompiler(cxx, tmp_path_factory.mktemp("fusion"), lambda a: a)


# -- the core formulas: trace, numpy evaluation, host C --------------------------------------


def _sample(name: str, dtype: np.dtype) -> np.ndarray:
    """The core cpu sample of ``oplib::name`` (its float32 one), in ``dtype``."""
    for s in sample_inputs(f"oplib::{name}", "cpu"):
        x = s.args[0]
        data = x._data if isinstance(x, Tensor) else np.asarray(x)
        if data.dtype == np.float32:
            return np.asarray(data).astype(dtype)
    raise AssertionError(f"no float32 sample for oplib::{name}")


def _formula_case(name: str, dtype: np.dtype) -> tuple[list[np.ndarray], np.ndarray]:
    """``[g, *saved]`` of a cpu call of ``oplib::name`` on its sample, and what the formula
    returns for them."""
    x = oplib.tensor(_sample(name, dtype), requires_grad=True)
    y = getattr(OPS, name)(x)
    ctx = y.grad_fn
    g = np.random.default_rng(0).uniform(-2, 2, y.shape).astype(dtype)
    with oplib.no_grad():
        expected = _raw(name)(ctx, Tensor._wrap(g))
        saved = [t._data for t in ctx.saved_tensors]
    return [g, *saved], np.asarray(expected._data)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", FUSED)
def test_the_trace_run_on_numpy_is_the_formula(name: str, dtype: np.dtype) -> None:
    arrays, expected = _formula_case(name, dtype)
    graph = trace(_raw(name), [a.dtype for a in arrays])
    assert graph.inputs == tuple(a.dtype for a in arrays) and graph.dtype == dtype
    got = _fusion.evaluate(graph, arrays)
    np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.fixture(scope="module")
def core_kernels(host: HostCompiler) -> dict[str, Callable[..., Any]]:
    sources = []
    for name in FUSED:
        for dt in [*DTYPES, np.dtype("float16")]:
            n_saved = 0 if name == "neg" else 1
            graph = trace(_raw(name), [dt] * (1 + n_saved))
            sources.append(kernel_source(graph, f"core_{name}_{dt.name}"))
    return host.build(sources)


@pytest.mark.parametrize("dtype", [*DTYPES, np.dtype("float16")], ids=str)
@pytest.mark.parametrize("name", FUSED)
def test_the_generated_c_on_the_host_equals_the_formula(
    core_kernels: dict[str, Callable[..., Any]], name: str, dtype: np.dtype
) -> None:
    arrays, expected = _formula_case(name, dtype)
    got = core_kernels[f"core_{name}_{dtype.name}"](*arrays)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected, **TOL[dtype])


def test_the_core_pointwise_formulas_are_the_fused_ones() -> None:
    fused = {name for name, (_, bw) in FORMULAS.items() if hasattr(bw, "fusion")}
    # the Scalar ops' formulas of more than one call fuse too: as programs only when they
    # read the scalar (tests/test_autograd_program.py)
    assert fused == {*FUSED, "pow.Scalar", "rdiv.Scalar", "rpow.Scalar"}
    for name in FUSED:  # errors and `oplib ops show` point at the formula itself
        backward = FORMULAS[name][1]
        code = _raw(name).__code__
        assert backward.__dict__["__oplib_location__"] == (
            f"{code.co_filename}:{code.co_firstlineno}"
        )


def test_the_source_computes_in_float_for_float16_and_float32_and_double_for_float64() -> None:
    for dt, compute in (("float16", "float"), ("float32", "float"), ("float64", "double")):
        src = kernel_source(trace(_raw("tanh"), [np.dtype(dt)] * 2), "k")
        assert src.in_params == f"{dt} g, {dt} s0" and src.out_params == f"{dt} grad"
        ctype = {"float16": "float16", "float32": "float", "float64": "double"}[dt]
        assert f"const {compute} v0 = ({compute})(g);" in src.operation
        assert src.operation.endswith(f"grad = ({ctype})(v4);")
        literal = "(1.0f)" if compute == "float" else "(1.0)"
        assert f"{literal} - v2" in src.operation  # rsub.Scalar's row, the scalar a literal


# -- the per-op table: every row, through a small formula, on the host ----------------------


def _s(ctx: Any) -> Any:
    return ctx.saved_tensors[0]


def _zero(g: Any) -> Tensor:
    return Tensor._wrap(OPS.zeros([], dtype=g.dtype))


#: One small formula per row of ROWS (of g and one saved tensor s, s > 0).
ROW_FORMULAS: dict[str, Callable[[Any, Any], Any]] = {
    "neg": lambda ctx, g: OPS.neg(OPS.mul(g, _s(ctx))),
    "abs": lambda ctx, g: OPS.abs(OPS.sub(g, _s(ctx))),
    "add/div": lambda ctx, g: OPS.div(OPS.add(g, _s(ctx)), _s(ctx)),
    "pow": lambda ctx, g: OPS.pow(_s(ctx), g),
    "exp/log": lambda ctx, g: OPS.mul(OPS.exp(g), OPS.log(_s(ctx))),
    "sin/cos/tanh/sqrt": lambda ctx, g: OPS.mul(
        OPS.add(OPS.sin(g), OPS.cos(_s(ctx))), OPS.tanh(OPS.sqrt(_s(ctx)))
    ),
    "scalars": lambda ctx, g: OPS.add.Scalar(
        OPS.sub.Scalar(OPS.mul.Scalar(OPS.div.Scalar(g, 4), 3), 0.25), 1
    ),
    "pow.Scalar": lambda ctx, g: OPS.pow.Scalar(_s(ctx), 1.5),
    "rsub/rdiv/rpow": lambda ctx, g: OPS.mul(
        OPS.rsub.Scalar(OPS.rdiv.Scalar(_s(ctx), 2), 1), OPS.rpow.Scalar(g, 3)
    ),
    "where/compare": lambda ctx, g: OPS.add(
        OPS.add(
            OPS.where(OPS.eq(g, _s(ctx)), g, _s(ctx)),
            OPS.where(OPS.ne(g, _s(ctx)), g, _zero(g)),
        ),
        OPS.add(
            OPS.where(OPS.lt(g, _s(ctx)), g, _s(ctx)),
            OPS.where(OPS.le(g, _s(ctx)), _s(ctx), g),
        ),
    ),
    "where/compare2": lambda ctx, g: OPS.add(
        OPS.where(OPS.gt(g, _s(ctx)), g, _s(ctx)), OPS.where(OPS.ge(g, _s(ctx)), _s(ctx), g)
    ),
    "compare.Scalar": lambda ctx, g: OPS.add(
        OPS.add(
            OPS.astype(OPS.eq.Scalar(g, 0.5), g.dtype),
            OPS.astype(OPS.ne.Scalar(g, 0.5), g.dtype),
        ),
        OPS.add(
            OPS.add(
                OPS.astype(OPS.lt.Scalar(g, 0.5), g.dtype),
                OPS.astype(OPS.le.Scalar(g, 0.5), g.dtype),
            ),
            OPS.add(
                OPS.astype(OPS.gt.Scalar(g, 0.5), g.dtype),
                OPS.astype(OPS.ge.Scalar(g, 0.5), g.dtype),
            ),
        ),
    ),
}


def _row_inputs(dtype: np.dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    g = rng.uniform(-2, 2, (4, 5)).astype(dtype)
    s = rng.uniform(0.5, 2, (4, 5)).astype(dtype)
    s[0, :2] = g[0, :2] = 0.5  # ties for the comparisons
    g[1, 0] = 0.0
    return [g, s]


@pytest.fixture(scope="module")
def row_kernels(host: HostCompiler) -> dict[str, Callable[..., Any]]:
    sources = []
    for i, formula in enumerate(ROW_FORMULAS.values()):
        for dt in DTYPES:
            graph = trace(formula, [dt, dt])
            sources.append(kernel_source(graph, f"row{i}_{dt.name}"))
    return host.build(sources)


def test_the_small_formulas_cover_every_row() -> None:
    met = set()
    for formula in ROW_FORMULAS.values():
        met |= {c.name for c in trace(formula, [np.dtype("float32")] * 2).calls}
    assert met == set(_fusion.ROWS)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("i", range(len(ROW_FORMULAS)), ids=list(ROW_FORMULAS))
def test_each_row_on_the_host_equals_its_op_on_cpu(
    row_kernels: dict[str, Callable[..., Any]], i: int, dtype: np.dtype
) -> None:
    formula = list(ROW_FORMULAS.values())[i]
    g, s = _row_inputs(dtype)

    class Ctx:
        saved_tensors = (Tensor._wrap(s),)

    with oplib.no_grad():
        expected = np.asarray(formula(Ctx(), Tensor._wrap(g))._data)
    got = row_kernels[f"row{i}_{dtype.name}"](g, s)
    np.testing.assert_allclose(got, expected, **TOL[dtype])


# -- what is not fused -------------------------------------------------------------------------


def test_a_formula_reading_ctx_beyond_saved_tensors_is_not_fused() -> None:
    with pytest.raises(NotFusable, match=r"reads ctx\.scalar"):
        trace(_raw("mul.Scalar"), [np.dtype("float32")])
    with pytest.raises(NotFusable, match=r"reads ctx\.shapes"):
        trace(_raw("mul"), [np.dtype("float32")] * 3)


def test_a_reduction_a_shape_change_or_a_read_of_data_is_not_fused() -> None:
    f32 = [np.dtype("float32")] * 2
    with pytest.raises(NotFusable, match=r"calls oplib::sum, which has no C expression"):
        trace(lambda ctx, g: OPS.mul(g, OPS.sum(_s(ctx))), f32)
    with pytest.raises(NotFusable, match=r"calls oplib::reshape"):
        trace(lambda ctx, g: OPS.reshape(OPS.mul(g, _s(ctx)), [6]), f32)

    def branches(ctx: Any, g: Any) -> Any:  # a value decides: meta stand-ins have none
        return OPS.neg(g) if g.numpy()[0, 0] > 0 else g

    with pytest.raises(NotFusable, match=r"tracing raised"):
        trace(branches, f32)
    with pytest.raises(NotFusable, match=r"returns an input as it is"):
        trace(_raw("clone"), f32[:1])
    with pytest.raises(NotFusable, match=r"returns tuple, not one Tensor \(and Nones\)"):
        trace(lambda ctx, g: (OPS.neg(g), g), f32[:1])
    graph = trace(lambda ctx, g: (OPS.neg(g), None), f32[:1])  # a Tensor and Nones: fused
    assert graph.nones == 1 and [c.name for c in graph.calls] == ["oplib::neg"]


@pytest.mark.parametrize("dtype", ["int32", "int64", "complex64", "bfloat16"])
def test_integer_complex_and_other_dtypes_are_not_fused(dtype: str) -> None:
    with pytest.raises(NotFusable, match=r"an input is .* \(fused: bool, float16/32/64\)"):
        trace(_raw("tanh"), [getattr(oplib, dtype)] * 2)


def test_a_non_finite_scalar_is_not_fused() -> None:
    with pytest.raises(NotFusable, match=r"non-finite scalar"):
        trace(lambda ctx, g: OPS.mul.Scalar(g, float("inf")), [np.dtype("float32")])


# -- whole backward passes on hostjit, a backend double compiling with g++ ------------------

NAME = "hostjit"
_NUMPY_KERNELS = array_kernels(np)


class HostArray(np.ndarray):
    """numpy memory standing in for a device's; ``index`` is its device."""

    index = 0


def _host_array(x: Any) -> Any:
    if type(x) is np.ndarray:
        return x.view(HostArray)
    if isinstance(x, (tuple, list)):
        return type(x)(_host_array(i) for i in x)
    return x


def _fallback(op: Any) -> Callable[..., Any] | None:
    fn = _NUMPY_KERNELS.get(str(op.name()).partition("::")[2])
    if fn is None:
        return None

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _host_array(fn(*args, **kwargs))

    return kernel


def _register_host(compiler: Any, **spec: Any) -> Callable[[], None]:
    """Register the ``hostjit`` backend with ``compiler`` as its ``elementwise_kernel`` (and
    ``spec``'s other fields); returns the function that removes it."""
    return oplib.backends.register(
        oplib.BackendSpec(
            name=NAME,
            array_types=(HostArray,),
            priority=5,  # above cpu's: its arrays are numpy arrays too
            fallback=_fallback,
            elementwise_kernel=compiler,
            **spec,
        )
    )


@pytest.fixture
def hostjit(cxx: str, tmp_path: Path) -> Iterator[HostCompiler]:
    compiler = HostCompiler(cxx, tmp_path, lambda a: a.view(HostArray))
    undo = _register_host(
        compiler,
        device_count=lambda: 2,
        device_of=lambda a: a.index,
        to_host=lambda a: np.array(a.view(np.ndarray)),
        from_host=lambda a, d: np.array(a).view(HostArray),
    )
    try:
        yield compiler
    finally:
        undo()


def _chain(x: Any, n: int) -> Any:
    for _ in range(n):
        x = (x * 0.99).tanh()
    return x


def _leaf(data: np.ndarray, on_host_jit: bool) -> Tensor:
    return oplib.tensor(data.view(HostArray) if on_host_jit else data, requires_grad=True)


def test_a_chain_on_hostjit_runs_one_fused_kernel_per_tanh_node(hostjit: HostCompiler) -> None:
    fusion = FORMULAS["tanh"][1].fusion
    data = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    x = _leaf(data, True)
    before = fusion.fused
    _chain(x, 5).sum().backward()
    assert fusion.fused - before == 5
    assert hostjit.calls == ["oplib_backward_tanh_float32_float32"]  # compiled once
    assert type(x.grad._data) is HostArray
    ref = _leaf(data, False)
    _chain(ref, 5).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad._data), ref.grad.numpy(), rtol=2e-6, atol=1e-7)
    before = fusion.fused  # (the numpy reference ran numpy's program of the formula)
    _chain(x, 3).sum().backward()  # the kernel is cached per (formula, dtypes)
    assert fusion.fused - before == 3 and len(hostjit.calls) == 1


def test_a_compiler_backend_runs_formulas_that_read_a_scalar_as_they_are(
    hostjit: HostCompiler,
) -> None:
    x = oplib.tensor(np.linspace(0.5, 2, 12, dtype=np.float32).view(HostArray), requires_grad=True)
    (x**3.0).sum().backward()
    assert hostjit.calls == []  # one C compile per scalar would cost more than it saves
    assert x.grad is not None
    np.testing.assert_allclose(np.asarray(x.grad._data), 3 * np.asarray(x._data) ** 2, rtol=1e-6)


def test_a_kernel_behind_on_device_runs_without_its_wrapper_on_one_device(
    cxx: str, tmp_path: Path
) -> None:
    # as the cuda plugin's compiler wraps cupy's kernels: on one device the wrapper asks
    # for the current device on the first call only
    host = HostCompiler(cxx, tmp_path, lambda a: a.view(HostArray))
    asked: list[int] = []

    def current() -> int:
        asked.append(0)
        return 0

    placement = DevicePlacement(
        array_type=HostArray,
        device_of=lambda a: 0,
        current_device=current,
        device=lambda i: contextlib.nullcontext(),
        device_count=lambda: 1,
    )

    def compiler(*source: str) -> Any:
        return on_device(lambda: host(*source), lambda: placement, name=source[3])

    undo = _register_host(
        compiler,
        to_host=lambda a: np.array(a.view(np.ndarray)),
        from_host=lambda a, d: np.array(a).view(HostArray),
    )
    try:
        fusion = FORMULAS["tanh"][1].fusion
        before = fusion.fused
        x = _leaf(np.linspace(-2, 2, 6, dtype=np.float32), True)
        _chain(x, 4).sum().backward()
        assert fusion.fused - before == 4
        assert len(asked) == 1
    finally:
        undo()


@pytest.mark.parametrize("name", FUSED)
def test_every_fused_core_formula_gives_the_cpu_gradient_on_hostjit(
    hostjit: HostCompiler, name: str
) -> None:
    fusion = FORMULAS[name][1].fusion
    for dtype in DTYPES:
        data = _sample(name, dtype)
        x, ref = _leaf(data, True), _leaf(data, False)
        before = fusion.fused
        OPS.sum(getattr(OPS, name)(x)).backward()
        assert fusion.fused - before == 1
        OPS.sum(getattr(OPS, name)(ref)).backward()
        np.testing.assert_allclose(np.asarray(x.grad._data), ref.grad.numpy(), **TOL[dtype])


def test_a_lambda_formula_gets_a_kernel_name_that_is_a_c_identifier(
    hostjit: HostCompiler,
) -> None:
    backward = fusable(lambda ctx, g: OPS.mul(g, OPS.cos(ctx.saved_tensors[0])))
    x = np.linspace(-1, 1, 4, dtype=np.float32).view(HostArray)
    with oplib.no_grad():
        out = backward(_Ctx(Tensor._wrap(x)), Tensor._wrap(np.ones(4, np.float32).view(HostArray)))
    np.testing.assert_allclose(np.asarray(out._data), np.cos(x), rtol=1e-6)
    assert hostjit.calls == ["oplib_backward_lambda_float32_float32"]


def test_create_graph_runs_the_formula(hostjit: HostCompiler) -> None:
    x = _leaf(np.linspace(-1, 1, 6, dtype=np.float32), True)
    (gx,) = oplib.autograd.grad(OPS.sum(OPS.tanh(x)), [x], create_graph=True)
    assert hostjit.calls == [] and gx.requires_grad  # op by op: differentiable again
    (ggx,) = oplib.autograd.grad(OPS.sum(gx), [x])
    t = np.tanh(np.linspace(-1, 1, 6, dtype=np.float32))
    np.testing.assert_allclose(np.asarray(ggx._data), -2 * t * (1 - t * t), rtol=1e-5)


def test_an_active_dispatch_mode_sees_the_formulas_ops(hostjit: HostCompiler) -> None:
    seen: list[str] = []

    class Log(oplib.DispatchMode):
        def __oplib_dispatch__(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            seen.append(str(op.name()))
            return op(*args, **kwargs)

    x = _leaf(np.linspace(-1, 1, 6, dtype=np.float32), True)
    y = OPS.sum(OPS.tanh(x))
    with Log():
        y.backward()
    assert hostjit.calls == [] and "oplib::rsub.Scalar" in seen
    t = np.tanh(np.linspace(-1, 1, 6, dtype=np.float32))
    np.testing.assert_allclose(np.asarray(x.grad._data), 1 - t * t, rtol=1e-6)


def test_a_non_pointwise_formula_falls_back_and_is_remembered(hostjit: HostCompiler) -> None:
    runs = [0]

    def scaled_by_sum(ctx: Any, g: Any) -> Any:
        runs[0] += 1
        (x,) = ctx.saved_tensors
        return OPS.mul(g, OPS.sum(x))

    backward = fusable(scaled_by_sum)
    ctx = _Ctx(Tensor._wrap(np.ones(3, np.float32).view(HostArray)))
    g = Tensor._wrap(np.full(3, 2.0, np.float32).view(HostArray))
    for _ in range(3):
        with oplib.no_grad():  # as in a backward pass without create_graph
            out = backward(ctx, g)
        np.testing.assert_array_equal(np.asarray(out._data), [6.0, 6.0, 6.0])
    assert runs[0] == 1 + 3  # traced once, then the formula each time
    fusion = backward.fusion  # type: ignore[attr-defined]
    ((key, reason),) = fusion.reasons.items()
    assert key == (HostArray, np.dtype("float32"), np.dtype("float32"))
    assert "oplib::sum" in reason and fusion.kernels[key] is None
    assert hostjit.calls == [] and fusion.fused == 0


class _Ctx:
    def __init__(self, *saved: Tensor) -> None:
        self.saved_tensors = saved


@oplib.no_grad()
def test_arrays_on_two_devices_run_the_formula(hostjit: HostCompiler) -> None:
    backward = fusable(_raw("sin"))
    fusion = backward.fusion  # type: ignore[attr-defined]
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    g0 = Tensor._wrap(np.ones(4, np.float32).view(HostArray))
    on_1 = x.copy().view(HostArray)
    on_1.index = 1
    out = backward(_Ctx(Tensor._wrap(on_1)), g0)
    np.testing.assert_allclose(np.asarray(out._data), np.cos(x), rtol=1e-6)
    assert fusion.fused == 0 and len(hostjit.calls) == 1  # compiled, not run
    out = backward(_Ctx(Tensor._wrap(x.view(HostArray))), g0)  # one device: fused
    np.testing.assert_allclose(np.asarray(out._data), np.cos(x), rtol=1e-6)
    assert fusion.fused == 1 and len(hostjit.calls) == 1


def test_a_compiler_that_fails_leaves_the_formula_and_is_remembered(cxx: str) -> None:
    asked: list[str] = []

    def refuses(in_params: str, out_params: str, operation: str, name: str) -> Any:
        asked.append(name)
        raise RuntimeError("nvrtc: error: identifier is undefined")

    def fails_on_first_call(in_params: str, out_params: str, operation: str, name: str) -> Any:
        asked.append(name)

        def launch(*arrays: Any) -> Any:
            raise RuntimeError("compile error on first launch")

        return launch

    x = np.linspace(-1, 1, 4, dtype=np.float32).view(HostArray)
    g = Tensor._wrap(np.ones(4, np.float32).view(HostArray))
    for compiler, said in ((refuses, "the compiler raised"), (fails_on_first_call, "first call")):
        undo = _register_host(compiler)
        try:
            backward = fusable(_raw("sin"))
            for _ in range(2):
                with oplib.no_grad():
                    out = backward(_Ctx(Tensor._wrap(x)), g)
                np.testing.assert_allclose(np.asarray(out._data), np.cos(x), rtol=1e-6)
        finally:
            undo()
        (reason,) = backward.fusion.reasons.values()  # type: ignore[attr-defined]
        assert said in reason
    assert len(asked) == 2  # each compiler asked once: the refusal is remembered


def test_the_compiler_table_forgets_a_backend_that_goes(cxx: str, tmp_path: Path) -> None:
    compiler = HostCompiler(cxx, tmp_path, lambda a: a)
    undo = oplib.backends.register(
        oplib.BackendSpec(
            name=NAME, array_types=(HostArray,), priority=5, elementwise_kernel=compiler
        )
    )
    try:
        assert _fusion.COMPILERS[HostArray] == (_fusion.Builder(compiler), None)
    finally:
        undo()
    # a HostArray is a cpu array now: numpy's kernels, in a program (direct_kernels)
    cpu = oplib.backends.get("cpu")
    assert _fusion.COMPILERS[HostArray] == (_fusion.Builder(None, cpu), None)


@pytest.mark.parametrize("devices", [1, 2])
def test_fused_nodes_check_devices_only_on_a_backend_with_several(
    cxx: str, tmp_path: Path, devices: int
) -> None:
    """As the dispatcher's fast path: with one device every array is on it, so a fused node
    reads no array's device (no ``device_of`` in the compiler table); with several it
    checks that the gradient and the saved arrays are on one (else the formula runs, op
    by op)."""
    compiler = HostCompiler(cxx, tmp_path, lambda a: a.view(HostArray))

    def device_of(a: Any) -> int:
        return 0

    undo = _register_host(
        compiler,
        device_count=lambda: devices,
        device_of=device_of,
        to_host=lambda a: np.array(a.view(np.ndarray)),
        from_host=lambda a, d: np.array(a).view(HostArray),
    )
    try:
        build, check = _fusion.COMPILERS[HostArray]
        assert build == _fusion.Builder(compiler)
        assert check is (device_of if devices > 1 else None)
        fusion = FORMULAS["tanh"][1].fusion
        before = fusion.fused
        x = _leaf(np.linspace(-2, 2, 6, dtype=np.float32), True)
        _chain(x, 3).sum().backward()
        assert fusion.fused - before == 3
    finally:
        undo()


# -- the cuda plugin's compiler and its switch ------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "No", " OFF "])
def test_the_switch_turns_the_cuda_compiler_off(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from oplib_cuda import fusion

    monkeypatch.setenv(fusion.SWITCH, value)
    assert not fusion.enabled() and fusion.compiler(lambda: None) is None  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("value", [None, "1", "yes", "on"])
def test_the_cuda_compiler_is_on_by_default(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    from oplib_cuda import fusion

    if value is None:
        monkeypatch.delenv(fusion.SWITCH, raising=False)
    else:
        monkeypatch.setenv(fusion.SWITCH, value)
    assert fusion.enabled() and callable(fusion.compiler(lambda: None))  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_cuda_backend_reads_the_switch_when_it_loads_without_importing_cupy(
    value: str,
) -> None:
    code = (
        "import sys, oplib_core as oplib\n"
        "spec = oplib.backends.get('cuda').spec\n"
        "print(spec.elementwise_kernel is None, 'cupy' in sys.modules)\n"
    )
    env = {**os.environ, "OPLIB_CUDA_FUSED_BACKWARD": value}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(value == "0"), "False"]


# -- on a GPU: cupy's ElementwiseKernel -------------------------------------------------------


@pytest.fixture
def cp() -> Any:
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    from oplib_cuda import fusion

    if oplib.backends.get("cuda").spec.elementwise_kernel is None:
        pytest.skip(f"{fusion.SWITCH} turns fused backward kernels off in this process")
    return pytest.importorskip("cupy")


class _PassThrough(oplib.DispatchMode):
    """Any active mode runs the formulas op by op: the unfused gradients, same process."""


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_cupy_chain_fused_equals_unfused_one_launch_per_node(cp: Any, dtype: str) -> None:
    from oplib_cuda import fusion

    data = cp.linspace(-2, 2, 4099, dtype=dtype)
    fused_x = oplib.tensor(data, requires_grad=True)
    plain_x = oplib.tensor(data.copy(), requires_grad=True)
    name = f"oplib_backward_tanh_{dtype}_{dtype}"
    y = _chain(fused_x, 10).sum()
    before = fusion.launches().get(name, 0)
    fused_before = FORMULAS["tanh"][1].fusion.fused
    y.backward()
    # each tanh node: one launch of its kernel, and none of the formula's three ops
    assert fusion.launches()[name] - before == 10
    assert FORMULAS["tanh"][1].fusion.fused - fused_before == 10
    y = _chain(plain_x, 10).sum()
    with _PassThrough():
        y.backward()
    assert fusion.launches()[name] - before == 10
    # float16: the fused kernel rounds once per node, the formula once per op
    tol = {"rtol": 1e-2, "atol": 5e-3} if dtype == "float16" else TOL[np.dtype(dtype)]
    np.testing.assert_allclose(
        cp.asnumpy(fused_x.grad._data), cp.asnumpy(plain_x.grad._data), **tol
    )


@pytest.mark.cuda
@pytest.mark.parametrize("name", FUSED)
def test_cupy_every_fused_formula_equals_cpu(cp: Any, name: str) -> None:
    fusion = FORMULAS[name][1].fusion
    for dtype in DTYPES:
        data = _sample(name, dtype)
        x, ref = oplib.tensor(cp.asarray(data), requires_grad=True), _leaf(data, False)
        before = fusion.fused
        OPS.sum(getattr(OPS, name)(x)).backward()
        assert fusion.fused - before == 1, fusion.reasons
        OPS.sum(getattr(OPS, name)(ref)).backward()
        np.testing.assert_allclose(cp.asnumpy(x.grad._data), ref.grad.numpy(), **TOL[dtype])


def test_the_gpu_bench_prints_the_chain_with_fusion_on_and_off(
    monkeypatch: pytest.MonkeyPatch, hostjit: HostCompiler
) -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "bench" / "gpu.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_bench", bench)  # its dataclasses look it up
    spec.loader.exec_module(bench)
    # the second, unfused process is started only where the arrays' backend fuses
    assert bench.fused(np.ones(2).view(HostArray)) and not bench.fused(np.ones(2))
    chain = {"oplib fwd+bwd": 3.0, "oplib fwd": 1.0, "cupy fwd": 0.9, "torch fwd+bwd": 3.1}
    data = {"sizes": {"chain_n": 1 << 20}, "autograd_ms": chain}
    (line,) = bench.summary(data)
    assert "oplib 3.0 ms (fusion off in this run), torch 3.1 ms: 0.97x torch" in line
    chain["oplib fwd+bwd, fusion off"] = 9.3
    (line,) = bench.summary(data)
    assert "oplib 3.0 ms (fusion off: 9.3 ms, 3.00x torch), torch 3.1 ms: 0.97x torch" in line


def test_a_gradient_that_is_not_a_tensor_goes_to_the_formula() -> None:
    got: list[Any] = []
    backward = fusable(lambda ctx, g: got.append(g) or "formula")
    with oplib.no_grad():
        assert backward(_Ctx(), None) == "formula"
    assert got == [None]
