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
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oplib_cuda import elementwise as ew

import oplib_core as oplib

OPS = list(ew.OPS)
DTYPES: list[np.dtype] = [np.dtype("float32"), np.dtype("float16"), np.dtype("int32")]
N = ew.MIN_ELEMENTS
NUMPY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


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


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_qualifies_contiguous_aligned_large_same_dtype(op: str, dtype: str) -> None:
    assert ew.qualifies(op, f((N,), dtype), f((N,), dtype))
    assert ew.qualifies(op, f((1024, 1024), dtype), f((1024, 1024), dtype, ptr=0x7F0000100000))


@pytest.mark.parametrize(
    ("why", "x", "y", "op"),
    [
        ("op not served", f((N,)), f((N,)), "div"),
        ("op not served", f((N,)), f((N,)), "add.Scalar"),
        ("float64", f((N,), "float64"), f((N,), "float64"), "add"),
        ("int64", f((N,), "int64"), f((N,), "int64"), "add"),
        ("bool", f((N,), "bool"), f((N,), "bool"), "maximum"),
        ("mixed dtypes", f((N,), "float32"), f((N,), "float16"), "add"),
        ("broadcast", f((N,)), f((1,)), "add"),
        ("broadcast 2-d", f((1024, 1024)), f((1, 1024)), "mul"),
        ("same size, other shape", f((N,)), f((1024, 1024)), "add"),
        ("too small", f((N - 1,)), f((N - 1,)), "add"),
        ("empty", f((0,)), f((0,)), "add"),
        ("x unaligned (x[1:])", f((N,), ptr=0x7F0000000004), f((N,)), "add"),
        ("y unaligned", f((N,)), f((N,), ptr=0x7F0000000008), "sub"),
        ("strided x[::2]", f((N,), strides=(8,)), f((N,)), "add"),
        ("transposed", f((1024, 1024), strides=(4, 4096)), f((1024, 1024)), "add"),
        ("reversed", f((N,), strides=(-4,)), f((N,)), "add"),
        ("broadcast view (stride 0)", f((N,)), f((N,), strides=(0,)), "add"),
        ("other device", f((N,)), f((N,), device=1), "add"),
    ],
)
def test_everything_else_falls_back(why: str, x: ew.ArrayFacts, y: ew.ArrayFacts, op: str) -> None:
    assert not ew.qualifies(op, x, y), why
    assert not ew.qualifies(op, y, x), why


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
    for name in ("div", "neg", "add.Scalar", "add.out", "sum"):
        assert ew.fast_kernel(name, cupy_add) is cupy_add


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
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
struct oplib_dim { unsigned int x; };
static oplib_dim blockIdx, blockDim, threadIdx, gridDim;
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
struct uint4 { unsigned int x, y, z, w; };
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
    parts = [_SHIM]
    for op in OPS:
        for dt in DTYPES:
            code, name = ew.source(op, dt)
            scalar = ew.DTYPES[dt][0]
            code = code.replace("#include <cuda_fp16.h>", "")
            parts.append(
                f"namespace ns_{name} {{\n{code}\n}}\n"
                f'extern "C" void run_{name}(const void* x, const void* y, void* z, '
                "long long n, unsigned blocks, unsigned threads) {\n"
                "    gridDim.x = blocks; blockDim.x = threads;\n"
                "    for (unsigned b = 0; b < blocks; ++b)\n"
                "        for (unsigned t = 0; t < threads; ++t) {\n"
                "            blockIdx.x = b; threadIdx.x = t;\n"
                f"            ns_{name}::{name}((const {scalar}*)x, (const {scalar}*)y, "
                f"({scalar}*)z, n);\n"
                "        }\n}\n"
            )
    return "\n".join(parts)


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ compiler (g++) to run the generated source on the host")
    work: Path = tmp_path_factory.mktemp("elementwise")
    (work / "k.cpp").write_text(_host_source())
    done = subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
            str(work / "k.so"),
            str(work / "k.cpp"),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode and "_Float16" in done.stderr:
        pytest.skip(f"{cxx} has no _Float16 for the float16 stand-in")
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(work / "k.so"))


def _random(dtype: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Every bit pattern as likely as another: NaN, inf, subnormals, signed zeros, and
    int32 values whose sums and products wrap."""
    bits = rng.integers(0, 2**32, size=(n * dtype.itemsize + 3) // 4, dtype=np.uint32)
    out: np.ndarray = bits.view(dtype)[:n].copy()
    return out


def _host_run(lib: ctypes.CDLL, op: str, x: np.ndarray, y: np.ndarray, blocks: int) -> np.ndarray:
    z = np.full_like(x, 7)  # a sentinel: every element must be written
    fn = getattr(lib, f"run_oplib_{op}_{x.dtype.name}")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_uint, ctypes.c_uint]
    fn(x.ctypes.data, y.ctypes.data, z.ctypes.data, x.size, blocks, 4)
    return z


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 4099])
def test_generated_source_on_the_host_equals_numpy(
    host_kernels: ctypes.CDLL, op: str, dtype: np.dtype, n: int
) -> None:
    rng = np.random.default_rng(n)
    x, y = _random(dtype, n, rng), _random(dtype, n, rng)
    y[: n // 3] = x[: n // 3]  # equal pairs too (maximum/minimum of equal values)
    with np.errstate(all="ignore"):
        expected = NUMPY[op](x, y)
    for blocks in (1, 3):  # one block of 4 threads, and a grid that strides
        np.testing.assert_array_equal(_host_run(host_kernels, op, x, y, blocks), expected)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generated_source_propagates_nan_and_orders_inf(
    host_kernels: ctypes.CDLL, op: str, dtype: str
) -> None:
    v = [np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 2.0, -3.0, 5.0]
    w = [1.0, np.nan, 1.0, -1.0, np.nan, 0.0, np.inf, -np.inf, 5.0]
    x, y = np.array(v, dtype), np.array(w, dtype)
    np.testing.assert_array_equal(_host_run(host_kernels, op, x, y, 1), NUMPY[op](x, y))


def test_source_names_its_vector_type_and_lanes() -> None:
    code, name = ew.source("add", np.dtype("float16"))
    assert name == "oplib_add_float16"
    assert "#include <cuda_fp16.h>" in code and "uint4" in code and "n / 8" in code
    code, name = ew.source("maximum", np.dtype("float32"))
    assert name == "oplib_maximum_float32" and "float4" in code and "n / 4" in code
    assert "cuda_fp16" not in code
    code, _ = ew.source("mul", np.dtype("int32"))
    assert "int4" in code and "(unsigned int)a * (unsigned int)b" in code


# -- on a GPU: against cupy -----------------------------------------------------------------


@pytest.fixture
def cp() -> Any:
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    if not ew.enabled():
        pytest.skip(f"{ew.SWITCH} turns the own kernels off in this process")
    return pytest.importorskip("cupy")


CUPY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "maximum": "maximum",
    "minimum": "minimum",
}


def _cupy_pair(cp: Any, dtype: np.dtype, n: int, seed: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    x, y = _random(dtype, n, rng), _random(dtype, n, rng)
    y[: n // 5] = x[: n // 5]
    return cp.asarray(x), cp.asarray(y)


def _check(cp: Any, op: str, x: Any, y: Any, *, fast: bool) -> None:
    assert ew.serves(op, x, y) is fast
    before = ew.launches().get(f"{op} {np.dtype(x.dtype).name}", 0)
    got = getattr(oplib.ops.oplib, op)(x, y)
    after = ew.launches().get(f"{op} {np.dtype(x.dtype).name}", 0)
    expected = getattr(cp, CUPY[op])(x, y)
    assert type(got) is cp.ndarray
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(expected))
    assert after - before == (1 if fast else 0)


@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("extra", [0, 1, 3, 7])
def test_own_kernel_equals_cupy(cp: Any, op: str, dtype: np.dtype, extra: int) -> None:
    x, y = _cupy_pair(cp, dtype, N + extra, extra)
    _check(cp, op, x, y, fast=True)


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_own_kernel_nan_and_inf_like_cupy(cp: Any, op: str, dtype: str) -> None:
    v = np.array([np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 2.0, -3.0], dtype)
    w = np.array([1.0, np.nan, 1.0, -1.0, np.nan, 0.0, np.inf, -np.inf], dtype)
    x = cp.asarray(np.resize(v, N + 3))
    y = cp.asarray(np.resize(w, N + 3))
    _check(cp, op, x, y, fast=True)


@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_calls_fall_back_to_cupy(cp: Any, op: str, dtype: np.dtype) -> None:
    x, y = _cupy_pair(cp, dtype, 2 * N + 8, 1)
    _check(cp, op, x[::2], y[::2], fast=False)  # strided views
    _check(cp, op, x[: 2 * N].reshape(2, N), y[:1].reshape(1, 1), fast=False)  # broadcast
    _check(cp, op, x[:N], cp.broadcast_to(y[:1], (N,)), fast=False)  # stride 0, same shape
    _check(cp, op, x[1 : N + 1], y[1 : N + 1], fast=False)  # unaligned views
    _check(cp, op, x[:0], y[:0], fast=False)  # empty
    _check(cp, op, x[:16], y[:16], fast=False)  # small
    _check(cp, op, x[:N], y[:N].astype(np.float64), fast=False)  # mixed dtypes


@pytest.mark.cuda
@pytest.mark.parametrize("op", OPS)
def test_own_kernel_with_one_array_twice(cp: Any, op: str) -> None:
    x, _ = _cupy_pair(cp, np.dtype("float32"), N + 5, 9)
    _check(cp, op, x, x, fast=True)


@pytest.mark.cuda
def test_tensors_take_the_own_kernel(cp: Any) -> None:
    x, y = _cupy_pair(cp, np.dtype("float32"), N, 5)
    before = ew.launches().get("add float32", 0)
    out = oplib.tensor(x) + oplib.tensor(y)
    assert ew.launches().get("add float32", 0) == before + 1
    np.testing.assert_array_equal(cp.asnumpy(out.native), cp.asnumpy(cp.add(x, y)))
