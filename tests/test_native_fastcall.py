"""The native fast path (``_native/_fastcall.py``): what it caches per input metadata (the
DLTensor layouts, the outputs' sizes from a Python fake kernel), when it forgets (a fake
kernel registered or removed), what it must not cache (a shape function's answer, which may
read the data), and that it gives the plain path's answers (hypothesis). Each test compiles
a small C library (skipped without a C compiler).

Every test runs twice: on the compiled fast call (``_cfastcall``, built at install where a
C compiler is) and on the generated Python one it falls back to."""

from __future__ import annotations

import gc
import sys
import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oplib_core as oplib

from helpers import c_compiler, compile_library, unique_ns
from subproc import run_python

LIB = r"""
#include "oplib.h"

static int64_t numel(const DLTensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* iota(Tensor x, int start, float step) -> Tensor: out[i] = start + i * step + x[0] over the
 * output's elements, whatever size the op's (Python) fake kernel gave it */
static int iota(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (x->dtype.code != kDLFloat || x->dtype.bits != 64) return oplib_set_error(err, "x: float64");
  double first = numel(x) ? ((const double *)((const char *)x->data + x->byte_offset))[0] : 0;
  double *o = (double *)outs[0].data;
  for (int64_t i = 0; i < numel(&outs[0]); i++)
    o[i] = (double)a[1].v.i + (double)i * a[2].v.f + first;
  return OPLIB_OK;
}

/* axpy(Tensor x, Tensor y, float a) -> Tensor: a * x + y, any strides, float32 or float64 */
static double at(const DLTensor *t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->strides[d];
    i /= t->shape[d];
  }
  const char *base = (const char *)t->data + t->byte_offset;
  return t->dtype.bits == 32 ? ((const float *)base)[off] : ((const double *)base)[off];
}
static int axpy(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor, *y = a[1].v.tensor;
  for (int64_t i = 0; i < numel(x); i++) {
    double v = a[2].v.f * at(x, i) + at(y, i);
    if (outs[0].dtype.bits == 32) ((float *)outs[0].data)[i] = (float)v;
    else ((double *)outs[0].data)[i] = v;
  }
  return OPLIB_OK;
}
static int same_shape(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                      oplib_error *err) {
  const DLTensor *x = a[0].v.tensor, *y = a[1].v.tensor;
  if (x->ndim != y->ndim) return oplib_set_error(err, "x and y differ in ndim");
  o[0].ndim = x->ndim;
  o[0].dtype = x->dtype;
  for (int32_t d = 0; d < x->ndim; d++) o[0].shape[d] = x->shape[d];
  return OPLIB_OK;
}

/* count(Tensor n) -> Tensor: data-dependent size: arange(n[0]) (its shape function reads
 * the data, so no answer of it may be remembered) */
static int count_shape(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                       oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (!x->data) return oplib_set_error(err, "count needs data");
  o[0].ndim = 1;
  o[0].dtype = x->dtype;
  o[0].shape[0] = (int64_t)((const double *)x->data)[0];
  return OPLIB_OK;
}
static int count(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  for (int64_t i = 0; i < outs[0].shape[0]; i++) ((double *)outs[0].data)[i] = (double)i;
  return OPLIB_OK;
}

/* pair(Tensor x) -> (Tensor, Tensor): (x, -x), float64, sized by a Python fake kernel */
static int pair(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (x->dtype.bits != 64) return oplib_set_error(err, "pair: float64 only, got %d bits",
                                                  (int)x->dtype.bits);
  for (int64_t i = 0; i < numel(x); i++) {
    ((double *)outs[0].data)[i] = at(x, i);
    ((double *)outs[1].data)[i] = -at(x, i);
  }
  return OPLIB_OK;
}

/* fill_(Tensor(a!) x, float v) -> (): every element of x (float64, any strides) set to v */
static int fill_(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (x->dtype.bits != 64) return oplib_set_error(err, "fill_: float64 only");
  for (int64_t i = 0; i < numel(x); i++) {
    int64_t off = 0, j = i;
    for (int32_t d = x->ndim - 1; d >= 0; d--) {
      off += (j % x->shape[d]) * x->strides[d];
      j /= x->shape[d];
    }
    ((double *)((char *)x->data + x->byte_offset))[off] = a[1].v.f;
  }
  return OPLIB_OK;
}

/* bad_ndim(Tensor x) -> Tensor: a shape function that claims 17 dimensions */
static int bad_ndim_shape(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                          oplib_error *err) {
  o[0].ndim = OPLIB_MAX_DIMS + 1;
  o[0].dtype = a[0].v.tensor->dtype;
  return OPLIB_OK;
}

OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::iota", "(Tensor x, int start, float step=1.0) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::iota", "cpu", iota)) return 1;
  if (api->define(c, "{ns}::axpy", "(Tensor x, Tensor y, float a) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::axpy", "cpu", axpy)) return 1;
  if (api->register_shape_fn(c, "{ns}::axpy", same_shape)) return 1;
  if (api->define(c, "{ns}::count", "(Tensor n) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::count", "cpu", count)) return 1;
  if (api->register_shape_fn(c, "{ns}::count", count_shape)) return 1;
  if (api->define(c, "{ns}::pair", "(Tensor x) -> (Tensor, Tensor)")) return 1;
  if (api->impl(c, "{ns}::pair", "cpu", pair)) return 1;
  if (api->define(c, "{ns}::fill_", "(Tensor(a!) x, float v) -> ()")) return 1;
  if (api->impl(c, "{ns}::fill_", "cpu", fill_)) return 1;
  if (api->define(c, "{ns}::bad_ndim", "(Tensor x) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::bad_ndim", "cpu", count)) return 1; /* never reached */
  if (api->register_shape_fn(c, "{ns}::bad_ndim", bad_ndim_shape)) return 1;
  return 0;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    ns = unique_ns("fastcall")
    path = compile_library(LIB.replace("{ns}", ns), tmp_path_factory.mktemp("fastcall"))
    oplib.ops.load_library(path)
    return ns


_OPS = ("iota", "axpy", "count", "pair", "fill_", "bad_ndim")


@pytest.fixture(scope="module", autouse=True, params=["compiled", "python"])
def implementation(request, lib):
    """Which fast call the module's kernels get: each kernel's next call makes it anew."""
    from oplib_core._native import _fastcall

    saved = _fastcall.COMPILED
    if request.param == "compiled" and saved is None:
        pytest.skip("the compiled fast call is not built (no C compiler at install)")
    if request.param == "python":
        _fastcall.COMPILED = None
    for name in _OPS:
        _kernel(lib, name).invalidate()
    yield request.param
    _fastcall.COMPILED = saved
    for name in _OPS:
        _kernel(lib, name).invalidate()


@pytest.fixture
def fakes(lib, teardown):
    """A fresh oplib.Library for this test's fake kernels of ``iota`` and ``pair``, and a
    list recording every run of them."""
    library = oplib.Library(lib, "FRAGMENT")
    teardown(library)
    runs: list[tuple] = []

    def iota_fake(x, start, step=1.0):
        runs.append(("iota", tuple(x.shape), start, step))
        return oplib.empty(3, dtype=np.float64)

    def pair_fake(x):
        runs.append(("pair", tuple(x.shape)))
        return oplib.empty_like(x), oplib.empty_like(x)

    oplib.register_fake(f"{lib}::iota", iota_fake, lib=library)
    oplib.register_fake(f"{lib}::pair", pair_fake, lib=library)
    return library, runs


def _op(ns: str, name: str):
    return getattr(getattr(oplib.ops, ns), name)


def _kernel(ns: str, name: str):
    return oplib.lookup(f"{ns}::{name}").kernel("cpu").fn


def _plain(ns: str, name: str, *args):
    """The plain path's answer (what OPLIB_DISPATCH_SLOW=1 runs)."""
    return _kernel(ns, name)._call(args, {})


def test_fake_kernel_sizes_and_two_outputs(lib, fakes):
    iota, pair = _op(lib, "iota"), _op(lib, "pair")
    np.testing.assert_array_equal(iota(np.full(2, 10.0), 1, 2.0), [11.0, 13.0, 15.0])
    np.testing.assert_array_equal(iota(np.full(2, 10.0), 1), [11.0, 12.0, 13.0])  # default
    x = np.arange(6.0).reshape(2, 3).T  # strided
    got = pair(x)
    assert isinstance(got, tuple) and len(got) == 2
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], -x)
    assert got[0].flags.c_contiguous and got[0].shape == (3, 2)


@pytest.mark.fastpath
def test_the_fake_kernel_runs_once_per_input_metadata_and_scalars(lib, fakes):
    _, runs = fakes
    iota = _op(lib, "iota")
    x = np.zeros(2)
    for _ in range(3):
        iota(x, 1, 2.0)
    iota(np.ones(2), 1, 2.0)  # other data, same metadata
    assert runs == [("iota", (2,), 1, 2.0)]
    iota(np.zeros(5), 1, 2.0)  # another shape
    iota(x, 2, 2.0)  # another scalar value
    _kernel(lib, "iota")(x, 1, 2)  # another scalar type: 2 == 2.0, but a fake may tell
    iota(x[::2], 1, 2.0)  # other strides
    assert len(runs) == 5


@pytest.mark.fastpath
def test_a_re_registered_fake_kernel_is_used_at_once_and_its_removal_too(lib, fakes, teardown):
    iota = _op(lib, "iota")
    x = np.zeros(2)
    assert iota(x, 0).shape == (3,)
    other = oplib.Library(lib, "FRAGMENT")
    teardown(other)
    oplib.register_fake(
        f"{lib}::iota", lambda x, start, step=1.0: oplib.empty(5, dtype=np.float64),
        lib=other, allow_override=True,
    )  # fmt: skip
    np.testing.assert_array_equal(iota(x, 0), np.arange(5.0))
    other._destroy()  # the first fake kernel serves again
    np.testing.assert_array_equal(iota(x, 0), np.arange(3.0))
    fakes[0]._destroy()  # no fake kernel, no shape function: the error names both ways
    with pytest.raises(oplib.NativeKernelError, match="register a shape function"):
        iota(x, 0)


@pytest.mark.fastpath
def test_the_fast_path_serves_plain_calls_and_declines_the_others(lib, fakes):
    from oplib_core._native import _fastcall

    def declining(name: str) -> tuple[Any, list[tuple[Any, ...]]]:
        """The kernel's fast call, recording (instead of running) what it declines."""
        kernel = _kernel(lib, name)
        assert isinstance(kernel.fast, _fastcall.FastCall)
        declined: list[tuple[Any, ...]] = []
        fast = _fastcall.FastCall(kernel.plan, kernel.fast.address, kernel, declined.append)
        return fast.call, declined

    axpy, declined = declining("axpy")
    x = np.arange(3.0)
    np.testing.assert_array_equal(axpy(x, x, 2.0), 3 * x)
    axpy(x.view(np.ma.MaskedArray), x, 2.0)
    axpy(x, x, np.float64(2.0))
    axpy(x, x)  # arity: the plain path fills defaults
    assert [len(a) for a in declined] == [3, 3, 2]
    assert type(declined[0][0]) is np.ma.MaskedArray
    iota, declined = declining("iota")
    iota(x, 2**70, 1.0)  # beyond int64
    assert declined == [(x, 2**70, 1.0)]


def test_the_dispatcher_calls_a_native_kernel_through_its_fast_entry(lib, fakes):
    from oplib_core._native import _fastcall

    kernel = _kernel(lib, "axpy")
    op = oplib.lookup(f"{lib}::axpy")
    x = np.arange(3.0)
    op(x, x, 2.0)
    if isinstance(kernel.fast, _fastcall.FastCall):  # (not under OPLIB_DISPATCH_SLOW=1)
        assert op._opcache.by_type[np.ndarray] is kernel.fast.call
    kernel.invalidate()  # the dispatcher forgets the entry with the kernel's caches
    assert np.ndarray not in op._opcache.by_type
    np.testing.assert_array_equal(op(x, x, 2.0), 3 * x)


def test_ints_beyond_int64_are_refused_through_a_fake_kernel_too(lib, fakes):
    with pytest.raises(OverflowError, match=f"{lib}::iota: argument 'start'"):
        _op(lib, "iota")(np.zeros(1), 2**63, 1.0)


def test_a_shape_function_is_asked_on_every_call(lib):
    # count's size depends on the data: nothing of the shape function's answer is cached
    count = _op(lib, "count")
    for n in (3.0, 5.0, 0.0, 2.0):
        np.testing.assert_array_equal(count(np.array([n])), np.arange(n))


def test_errors_from_the_fast_path_name_the_op_and_a_reused_buffer_is_clean(lib, fakes):
    pair = _op(lib, "pair")
    for _ in range(2):
        with pytest.raises(oplib.NativeKernelError, match=rf"{lib}::pair .*32 bits"):
            pair(np.zeros(2, np.float32))
        np.testing.assert_array_equal(pair(np.ones(2))[1], [-1.0, -1.0])
    with pytest.raises(oplib.NativeKernelError, match="x and y differ in ndim"):
        _op(lib, "axpy")(np.zeros(2), np.zeros((2, 1)), 1.0)


def test_a_written_argument_must_be_writable(lib):
    fill_ = _op(lib, "fill_")
    x = np.zeros((2, 3))
    for _ in range(2):  # the first call, then the fast path
        assert fill_(x[:, ::2], 7.0) is None
    np.testing.assert_array_equal(x, [[7.0, 0.0, 7.0]] * 2)
    base = np.zeros(1)
    locked = np.ones(3)
    locked.flags.writeable = False
    for ro in (np.broadcast_to(base, (3,)), locked, locked):  # locked twice: cached
        with pytest.raises(oplib.InvalidArgumentError) as e:
            fill_(ro, 5.0)
        assert f"{lib}::fill_: argument 'x' is written" in str(e.value)
        assert "(Tensor(a!) x), but its array is read-only" in str(e.value)
        assert e.value.argument == "x" and e.value.value is ro
    np.testing.assert_array_equal(base, [0.0])
    np.testing.assert_array_equal(locked, [1.0, 1.0, 1.0])


def test_a_shape_function_out_of_range_ndim_is_refused(lib):
    with pytest.raises(oplib.NativeKernelError, match=rf"{lib}::bad_ndim shape function .*ndim 17"):
        _op(lib, "bad_ndim")(np.zeros(2))


def test_threads_share_the_caches_safely(lib, fakes):
    axpy, pair = _op(lib, "axpy"), _op(lib, "pair")
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            for _ in range(200):
                x = rng.standard_normal(int(rng.integers(1, 5)))
                np.testing.assert_array_equal(axpy(x, x, 2.0), 3 * x)
                np.testing.assert_array_equal(pair(x)[1], -x)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


_dtypes = st.sampled_from([np.float32, np.float64])
_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def _arrays(draw, shape):
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    x = np.asarray(rng.standard_normal(tuple(2 * d for d in shape))).astype(draw(_dtypes))
    if draw(st.booleans()):  # a strided view (``...``: a 0-d view stays an array)
        return x[(*(slice(None, None, 2) for _ in shape), ...)]
    return x[(*(slice(0, d) for d in shape), ...)].copy()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), shape=_shapes, a=st.one_of(st.floats(-4, 4), st.integers(-3, 3)))
def test_the_fast_path_gives_the_plain_paths_answers(lib, fakes, data, shape, a):
    x, y = data.draw(_arrays(shape)), data.draw(_arrays(shape))
    axpy = _op(lib, "axpy")
    got, want = axpy(x, y, a), _plain(lib, "axpy", x, y, a)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    x64 = x.astype(np.float64)[(*(slice(None, None, -1) for _ in shape), ...)]
    for g, w in zip(_op(lib, "pair")(x64), _plain(lib, "pair", x64), strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(10.0)[3:],
        lambda: np.ones((4, 4), np.float32)[:, 1],
        lambda: np.empty((0, 3)),
        lambda: np.array(2.5),
        lambda: np.zeros(7, np.int8)[::-2],
        lambda: np.broadcast_to(np.arange(3), (2, 3)),
    ],
    ids=["offset view", "strided column", "empty", "0-d", "negative stride", "read-only"],
)
def test_fast_path_reads_numpys_data_pointer(make: Any) -> None:
    from oplib_core._native._marshal import DATA_OFFSET, WORD_SHIFT, WORDS, numpy_data

    if WORDS is None or DATA_OFFSET is None:
        pytest.skip("this interpreter's ndarray layout is not the one the fast path reads")
    arr = make()
    expected = arr.__array_interface__["data"][0]
    assert WORDS[(id(arr) + DATA_OFFSET) >> WORD_SHIFT] == expected == numpy_data(arr)
    try:
        from oplib_core._native import _cfastcall
    except ImportError:
        return
    writeable = arr.flags.writeable
    assert _cfastcall.probe(arr) == (expected, arr.shape, arr.strides, writeable, arr.dtype)


def test_a_fast_call_takes_positional_arguments_only(lib, fakes):
    x = np.arange(3.0)
    _op(lib, "axpy")(x, x, 2.0)
    with pytest.raises(TypeError):
        _kernel(lib, "axpy").fast.call(x, x, a=2.0)


def test_no_references_are_lost_or_kept(lib, fakes):
    """Every path of a call (served, declined, a kernel's error, a shape function's error)
    gives back what it borrowed: the arguments' counts are the same after 6000 calls, and
    the outputs are freed."""
    axpy, pair, count = _op(lib, "axpy"), _op(lib, "pair"), _op(lib, "count")
    x, f32, n, a = np.arange(3.0), np.zeros(2, np.float32), np.array([2.0]), 2.5
    for _ in range(2):  # the caches filled, the fast calls made
        axpy(x, x, a), pair(x), count(n), axpy(x.view(np.ma.MaskedArray), x, a)
    from oplib_core._native import _fastcall

    fast = _kernel(lib, "axpy").fast  # what axpy's calls read (none under the slow path)
    entry = next(iter(fast.cache.values())) if isinstance(fast, _fastcall.FastCall) else object()
    before = [sys.getrefcount(v) for v in (x, f32, n, a, entry)]

    def calls(times: int) -> None:
        for _ in range(times):
            axpy(x, x, a)
            pair(x)
            count(n)
            axpy(x.view(np.ma.MaskedArray), x, a)
            with pytest.raises(oplib.NativeKernelError):
                pair(f32)
            with pytest.raises(oplib.NativeKernelError):
                _op(lib, "bad_ndim")(x)

    calls(1)
    tracemalloc.start()
    try:
        gc.collect()  # (an error's traceback holds a cycle)
        start = tracemalloc.get_traced_memory()[0]
        calls(1000)  # 6000 outputs made and dropped, 2000 of them on an error path
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(v) for v in (x, f32, n, a, entry)] == before
    assert grown < 60_000, f"{grown} bytes kept by 6000 calls"  # (20 kB: the allocator's)


def test_the_compiled_fast_call_is_built_where_a_c_compiler_is(monkeypatch):
    if c_compiler() is None:
        pytest.skip("no C compiler: the install built no compiled fast call")
    from oplib_core._native import _cfastcall, _fastcall

    monkeypatch.delenv("OPLIB_NATIVE_SPEEDUPS", raising=False)  # (a run may turn it off)
    assert _fastcall._compiled() is _cfastcall


def test_oplib_native_speedups_0_turns_the_compiled_fast_call_off():
    code = "from oplib_core._native import _fastcall\nOUT['compiled'] = _fastcall.COMPILED"
    assert run_python(code, env={"OPLIB_NATIVE_SPEEDUPS": "0"}) == {"compiled": None}
