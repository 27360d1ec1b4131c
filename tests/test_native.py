"""Native libraries: load_library, the ABI check, atomic registration, calling kernels on
DLPack views, argument types, and libraries that fail safely. Each test compiles a small C
library in a temporary directory (skipped without a C compiler)."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._native import _abi

from helpers import compile_library, unique_ns

HEADER = os.path.join(oplib.get_include(), "oplib.h")

# One library template: {ns} is replaced so every test gets fresh operator names.
ECHO_LIB = r"""
#include "oplib.h"
#include <string.h>

/* out = x * k + sum(ints) + (w ? w[0] : 0) + strlen(s) + (flag ? 1000 : 0) */
static int mix(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (x->dtype.code != kDLFloat || x->dtype.bits != 64)
    return oplib_set_error(err, "x must be float64");
  double add = a[1].v.f * 0;
  for (int64_t i = 0; i < a[2].v.ints.size; i++) add += (double)a[2].v.ints.data[i];
  if (!a[3].is_none) add += ((const double *)a[3].v.tensor->data)[0];
  add += (double)strlen(a[4].v.s);
  if (a[5].v.i) add += 1000;
  int64_t total = 1;
  for (int32_t d = 0; d < x->ndim; d++) total *= x->shape[d];
  for (int64_t i = 0; i < total; i++) {
    int64_t rest = i, off = 0;
    for (int32_t d = x->ndim - 1; d >= 0; d--) {
      off += (rest % x->shape[d]) * x->strides[d];
      rest /= x->shape[d];
    }
    const double *px = (const double *)((const char *)x->data + x->byte_offset);
    ((double *)outs[0].data)[i] = px[off] * a[1].v.f + add;
  }
  return OPLIB_OK;
}

static int mix_shape(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                     oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  o[0].ndim = x->ndim;
  o[0].dtype = x->dtype;
  for (int32_t d = 0; d < x->ndim; d++) o[0].shape[d] = x->shape[d];
  return OPLIB_OK;
}

/* total(Tensor[] xs) -> Tensor: the sum of every element of every tensor (0-d) */
static int total(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  double acc = 0;
  for (int64_t t = 0; t < a[0].v.tensors.size; t++) {
    const DLTensor *x = a[0].v.tensors.data[t];
    int64_t m = 1;
    for (int32_t d = 0; d < x->ndim; d++) m *= x->shape[d];
    for (int64_t i = 0; i < m; i++) acc += ((const double *)x->data)[i];
  }
  ((double *)outs[0].data)[0] = acc;
  return OPLIB_OK;
}

/* fill_(Tensor(a!) x, float v, ScalarType? dtype=None) -> (): writes in place */
static int fill_(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (!a[2].is_none && a[2].v.dtype.bits != x->dtype.bits)
    return oplib_set_error(err, "dtype bits %d do not match", (int)a[2].v.dtype.bits);
  int64_t m = 1;
  for (int32_t d = 0; d < x->ndim; d++) m *= x->shape[d];
  for (int64_t i = 0; i < m; i++) ((double *)x->data)[i] = a[1].v.f;
  return OPLIB_OK;
}

static int fails(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  return oplib_set_error(err, "the kernel says no: %d", 42);
}

/* plain(Tensor x, int n, float k, bool flag, Scalar s) -> Tensor: x * k + n + s (+1000) */
static int plain(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  double add = (double)a[1].v.i + a[4].v.f + (a[3].v.i ? 1000 : 0);
  for (int64_t i = 0; i < x->shape[0]; i++)
    ((double *)outs[0].data)[i] = ((const double *)x->data)[i * x->strides[0]] * a[2].v.f + add;
  return OPLIB_OK;
}

OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::plain", "(Tensor x, int n, float k, bool flag, Scalar s) -> Tensor"))
    return 1;
  if (api->impl(c, "{ns}::plain", "cpu", plain)) return 1;
  if (api->register_shape_fn(c, "{ns}::plain", mix_shape)) return 1;
  if (api->define(c, "{ns}::mix", "(Tensor x, float k, int[] ints, Tensor? w=None, "
                  "str s=\"ab\", *, bool flag=False) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::mix", "cpu", mix)) return 1;
  if (api->register_shape_fn(c, "{ns}::mix", mix_shape)) return 1;
  if (api->define(c, "{ns}::total", "(Tensor[] xs) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::total", "default", total)) return 1;
  if (api->define(c, "{ns}::fill_", "(Tensor(a!) x, float v, ScalarType? dtype=None) -> ()"))
    return 1;
  if (api->impl(c, "{ns}::fill_", "cpu", fill_)) return 1;
  if (api->define(c, "{ns}::fails", "(Tensor x) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::fails", "cpu", fails)) return 1;
  if (api->register_shape_fn(c, "{ns}::fails", mix_shape)) return 1;
  return 0;
}
"""


def _load(tmp_path, source: str = ECHO_LIB, name: str = "lib") -> tuple[str, str]:
    ns = unique_ns("native")
    path = compile_library(source.replace("{ns}", ns), tmp_path, name)
    oplib.ops.load_library(path)
    return ns, path


def _packet(ns: str, name: str):
    return getattr(getattr(oplib.ops, ns), name)


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("echo"))


# -- the header and the ctypes mirror ----------------------------------------------------


def test_get_include_holds_the_versioned_header():
    with open(HEADER) as f:
        text = f.read()
    assert os.path.dirname(HEADER) == oplib.get_include()
    major = re.search(r"#define OPLIB_ABI_VERSION_MAJOR (\d+)", text)
    minor = re.search(r"#define OPLIB_ABI_VERSION_MINOR (\d+)", text)
    assert major and minor
    assert (int(major.group(1)), int(minor.group(1))) == (_abi.ABI_MAJOR, _abi.ABI_MINOR)
    assert "Apache License 2.0" in text and "dmlc/dlpack" in text  # vendored with attribution


def test_ctypes_layout_matches_the_header(tmp_path):
    """A C probe prints sizeof/offsetof of the ABI structs; ctypes must agree."""
    probe = textwrap.dedent("""
        #include "oplib.h"
        #include <stddef.h>
        #include <stdio.h>
        int main(void) {
          printf("%zu %zu %zu %zu %zu %zu %zu %zu\\n", sizeof(DLTensor), offsetof(DLTensor, ndim),
                 offsetof(DLTensor, shape), offsetof(DLTensor, byte_offset), sizeof(oplib_arg),
                 sizeof(oplib_tensor_meta), sizeof(oplib_api), offsetof(oplib_api, last_error));
          return 0;
        }
    """)
    (tmp_path / "probe.c").write_text(probe)
    cc = compile_library.__globals__["c_compiler"]()
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "probe"
    subprocess.run(
        [cc, "-I", oplib.get_include(), str(tmp_path / "probe.c"), "-o", str(exe)], check=True
    )
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    expected = [
        ctypes.sizeof(_abi.DLTensor),
        _abi.DLTensor.ndim.offset,
        _abi.DLTensor.shape.offset,
        _abi.DLTensor.byte_offset.offset,
        ctypes.sizeof(_abi.Arg),
        ctypes.sizeof(_abi.TensorMeta),
        ctypes.sizeof(_abi.Api),
        _abi.Api.last_error.offset,
    ]
    assert [int(g) for g in got] == expected


# -- loading -------------------------------------------------------------------------------


def test_load_registers_ops_with_the_library_as_origin(echo):
    ns, path = echo
    assert path in oplib.ops.loaded_libraries
    op = oplib.lookup(f"{ns}::mix")
    assert str(op.schema).startswith(f"{ns}::mix(Tensor x, float k, int[] ints")
    assert op.kernel("cpu").origin.source == path
    assert op.origin.source == path
    assert op.kernel("Fake") is not None  # the shape function serves fake mode


def test_loading_the_same_path_twice_is_a_no_op(echo):
    _, path = echo
    before = len(oplib.registered_ops())
    oplib.ops.load_library(path)
    oplib.ops.load_library(os.path.join(os.path.dirname(path), ".", os.path.basename(path)))
    assert len(oplib.registered_ops()) == before


def test_oplib_ops_show_names_the_library(echo):
    ns, path = echo
    code = (
        "import oplib_core as oplib, sys;"
        f"oplib.ops.load_library({path!r});"
        "from oplib_core.cli import main;"
        f"sys.exit(main(['ops', 'show', '{ns}::mix']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert path in out.stdout


# -- calling -------------------------------------------------------------------------------


def test_all_argument_types_reach_c(echo):
    ns, _ = echo
    x = np.arange(6.0).reshape(2, 3)
    got = _packet(ns, "mix")(x, 2.0, [1, 2], np.array([10.0]), "abcd", flag=True)
    np.testing.assert_array_equal(got, x * 2 + 3 + 10 + 4 + 1000)
    got = _packet(ns, "mix")(x, 1.0, [])  # defaults: w=None, s="ab", flag=False
    np.testing.assert_array_equal(got, x + 2)


def test_strided_and_offset_views_are_read_without_copies(echo):
    ns, _ = echo
    base = np.arange(24.0).reshape(4, 6)
    for view in (base.T, base[1:, ::2], base[::-1], np.broadcast_to(base[0], (3, 6))):
        np.testing.assert_array_equal(_packet(ns, "mix")(view, 1.0, []), view + 2)


def test_outputs_are_sized_by_a_python_fake_kernel_when_there_is_no_shape_function(echo):
    ns, _ = echo
    xs = [np.ones(3), np.full((2, 2), 2.0)]
    if oplib.lookup(f"{ns}::total").kernel("Fake") is None:
        with pytest.raises(
            oplib.NativeKernelError, match="cannot size the outputs: register a shape function"
        ):
            _packet(ns, "total")(xs)
        oplib.register_fake(f"{ns}::total", lambda xs: xs[0].new_empty(()))
    assert float(_packet(ns, "total")(xs)) == 11.0


def test_tensor_lists_mutation_and_optional_scalar_type(echo):
    ns, _ = echo
    xs = [np.ones(3), np.full((2, 2), 2.0)]
    if oplib.lookup(f"{ns}::total").kernel("Fake") is None:
        oplib.register_fake(f"{ns}::total", lambda xs: xs[0].new_empty(()))
    assert float(_packet(ns, "total")(xs)) == 11.0
    x = np.zeros(4)
    assert _packet(ns, "fill_")(x, 7.0) is None
    np.testing.assert_array_equal(x, 7.0)
    _packet(ns, "fill_")(x, 3.0, dtype=oplib.float64)
    np.testing.assert_array_equal(x, 3.0)


def test_a_kernel_error_names_the_op_and_the_library(echo):
    ns, path = echo
    with pytest.raises(
        oplib.NativeKernelError,
        match=f"{ns}::fails .*library {re.escape(path)}.*the kernel says no: 42",
    ) as e:
        _packet(ns, "fails")(np.ones(2))
    assert e.value.op == f"{ns}::fails" and e.value.library == path and e.value.status == 1
    with pytest.raises(oplib.NativeKernelError, match="dtype bits 32 do not match"):
        _packet(ns, "fill_")(np.zeros(2), 1.0, dtype=oplib.float32)
    with pytest.raises(oplib.NativeKernelError, match="x must be float64"):
        _packet(ns, "mix")(np.zeros(2, np.float32), 1.0, [])


def test_tensors_and_fake_mode(echo):
    ns, _ = echo
    t = oplib.tensor(np.arange(3.0))
    out = _packet(ns, "mix")(t, 1.0, [1])
    assert isinstance(out, oplib.Tensor) and out.tolist() == [3.0, 4.0, 5.0]
    with oplib.FakeTensorMode() as mode:
        fake = _packet(ns, "mix")(mode.from_real(np.ones((2, 5))), 1.0, [])
    assert fake.shape == (2, 5) and fake.dtype == np.float64


def test_a_backend_without_dlpack_gets_no_kernel_error(echo, toy):
    ns, path = echo
    with pytest.raises(oplib.NoKernelError, match=f"{ns}::total: .*{re.escape(path)}.*DLPack.*toy"):
        _packet(ns, "total")([toy(np.ones(2))])


def test_kernels_release_the_gil(tmp_path):
    """A kernel that sleeps 0.2 s, called from 4 threads, takes far less than 0.8 s."""
    import threading
    import time

    src = textwrap.dedent("""
        #include "oplib.h"
        #include <time.h>
        static int nap(const oplib_arg *a, int64_t n, DLTensor *o, int64_t no, oplib_error *e) {
          struct timespec ts = {0, 200000000};
          nanosleep(&ts, NULL);
          return 0;
        }
        OPLIB_LIBRARY_INIT(api) {
          if (api->define(api->ctx, "{ns}::nap", "(Tensor x) -> ()")) return 1;
          return api->impl(api->ctx, "{ns}::nap", "cpu", nap);
        }
    """)
    ns, _ = _load(tmp_path, src)
    x = np.ones(1)
    threads = [threading.Thread(target=_packet(ns, "nap"), args=(x,)) for _ in range(4)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert time.perf_counter() - start < 0.6


# -- bad libraries fail safely ---------------------------------------------------------------


def _ops_in(ns: str) -> list[str]:
    return [n for n in (op.name() for op in oplib.registered_ops()) if n.startswith(f"{ns}::")]


def test_missing_path(tmp_path):
    path = str(tmp_path / "nope.so")
    with pytest.raises(oplib.LibraryLoadError, match=f"{re.escape(path)} does not exist") as e:
        oplib.ops.load_library(path)
    assert e.value.library == path and isinstance(e.value, OSError)


def test_not_a_shared_library(tmp_path):
    path = tmp_path / "text.so"
    path.write_text("hello")
    with pytest.raises(oplib.LibraryLoadError, match="is not a shared library") as e:
        oplib.ops.load_library(path)
    assert e.value.library == str(path) and str(path) in str(e.value)
    assert str(path) not in oplib.ops.loaded_libraries


def test_missing_entry_symbol(tmp_path):
    path = compile_library("int unrelated(void) { return 1; }\n", tmp_path)
    with pytest.raises(oplib.LibraryLoadError, match=r"not an oplib library.*OPLIB_LIBRARY_INIT"):
        oplib.ops.load_library(path)


def test_abi_major_mismatch_is_refused_before_any_code_runs(tmp_path):
    marker = tmp_path / "ran"
    src = textwrap.dedent(f"""
        #include <stdint.h>
        #include <stdio.h>
        __attribute__((visibility("default")))
        const uint32_t oplib_library_abi_version = (7u << 16) | 3u;
        __attribute__((visibility("default"))) int oplib_library_init(const void *api) {{
          FILE *f = fopen("{marker}", "w"); if (f) fclose(f);
          return 0;
        }}
    """)
    path = compile_library(src, tmp_path)
    with pytest.raises(
        oplib.LibraryLoadError,
        match=r"built for oplib ABI 7\.3, but this oplib implements ABI 1\.0",
    ):
        oplib.ops.load_library(path)
    assert not marker.exists()
    assert path not in oplib.ops.loaded_libraries


_BAD_TAIL = r"""
static int k(const oplib_arg *a, int64_t n, DLTensor *o, int64_t no, oplib_error *e) { return 0; }
OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::good", "(Tensor x) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::good", "cpu", k)) return 1;
  %s
  return 0;
}
"""


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('if (api->define(c, "{ns}::bad", "(Tensor x -> Tensor")) return 1;', "expected"),
        ('if (api->impl(c, "{ns}::good", "cpu", k)) return 1;', "already has a kernel for 'cpu'"),
        ('if (api->impl(c, "{ns}::missing", "cpu", k)) return 1;', "does not exist"),
        ('if (api->define(c, "oplib::mine", "(Tensor x) -> Tensor")) return 1;', "reserved"),
        (
            'if (api->define(c, "{ns}::gen", "(Generator g) -> Tensor")) return 1;',
            "cannot be passed to native code",
        ),
        ('api->define(c, "{ns}::late", "(Tensor x) -> Tensor"); return 3;', "returned 3"),
        (
            'api->define(c, "{ns}::bad2", "(Tensor x) -> Tensor(a)"); return 0;',
            "native kernels return new Tensors",
        ),
        (
            'if (api->define_tagged(c, "{ns}::t", "(Tensor x) -> Tensor", "pointy")) return 1;',
            r"unknown tag\(s\) pointy for {ns}::t; expected oplib.Tag names",
        ),
        ('if (api->impl(c, "{ns}::good", "meta", NULL)) return 1;', "NULL function pointer"),
        ('if (api->register_shape_fn(c, "{ns}::nope", NULL)) return 1;', "NULL function pointer"),
        (
            'if (api->register_method(c, "{ns}::Nope", "m", "({ns}::Nope self) -> ()", k)) '
            "return 1;",
            "class '{ns}::Nope' is not registered",
        ),
        (
            'static const oplib_class_def d = {"{ns}::C", "(Tensor x) -> Tensor", NULL, NULL};'
            "if (api->register_class(c, &d)) return 1;",
            "init_schema must return",
        ),
        (
            'static const oplib_class_def d = {"{ns}::C", "() -> ()", NULL, NULL};'
            "if (api->register_class(c, &d)) return 1;",
            "needs both create and destroy",
        ),
    ],
)
def test_a_failing_init_leaves_nothing_registered(tmp_path, bad, message):
    ns = unique_ns("bad")
    src = '#include "oplib.h"\n' + (_BAD_TAIL % bad).replace("{ns}", ns)
    path = compile_library(src, tmp_path)
    with pytest.raises(oplib.LibraryLoadError, match=message.replace("{ns}", ns)) as e:
        oplib.ops.load_library(path)
    assert re.escape(path) and path in str(e.value)
    assert _ops_in(ns) == []
    assert path not in oplib.ops.loaded_libraries


def test_the_registrar_credits_the_plugin_and_rolls_back(tmp_path):
    ns = unique_ns("plug")
    src = '#include "oplib.h"\n' + (_BAD_TAIL % "").replace("{ns}", ns)
    path = compile_library(src, tmp_path)

    class Plugin:
        @oplib.hookimpl
        def oplib_define(self, registrar):
            registrar.load_library(path)

        @oplib.hookimpl
        def oplib_impl(self, registrar):
            raise RuntimeError("a later hook fails")

    with pytest.warns(UserWarning):
        record = oplib.plugins.register(Plugin(), name=f"{ns}-plugin")
    assert record.status == "failed"
    assert _ops_in(ns) == [] and path not in oplib.ops.loaded_libraries


_CLASS_THEN_FAIL = r"""
#include "oplib.h"
#include <stdlib.h>
static void *mk(const oplib_arg *a, int64_t n, oplib_error *e) { return malloc(1); }
static void rm(void *p) { free(p); }
static int k(const oplib_arg *a, int64_t n, DLTensor *o, int64_t no, oplib_error *e) { return 0; }
OPLIB_LIBRARY_INIT(api) {
  static const oplib_class_def d = {"{ns}::Obj", "() -> ()", mk, rm};
  if (api->register_class(api->ctx, &d)) return 1;
  if (api->register_method(api->ctx, "{ns}::Obj", "poke", "({ns}::Obj self) -> ()", k)) return 1;
  return api->register_shape_fn(api->ctx, "{ns}::Obj.nothing", NULL) ? 1 : 0;
}
"""


def test_classes_and_methods_are_undone_with_the_library(tmp_path):
    ns = unique_ns("cls")
    path = compile_library(_CLASS_THEN_FAIL.replace("{ns}", ns), tmp_path)
    with pytest.raises(oplib.LibraryLoadError, match="NULL function pointer"):
        oplib.ops.load_library(path)
    with pytest.raises(AttributeError, match=f"no class {ns}::Obj"):
        getattr(oplib.classes, ns).Obj  # noqa: B018


def test_plain_scalars_numpy_scalars_and_strided_arrays_give_one_answer(echo):
    # Calls with numpy arrays and Python scalars take a packed fast path, other arrays the
    # plain one (OPLIB_DISPATCH_SLOW=1 runs everything plainly).
    ns, _ = echo
    plain = _packet(ns, "plain")
    x = np.arange(4.0)
    want = x * 2 + 3 + 0.5 + 1000
    np.testing.assert_array_equal(plain(x, 3, 2.0, True, 0.5), want)
    np.testing.assert_array_equal(
        plain(x, np.int64(3), np.float32(2.0), np.bool_(True), np.float64(0.5)), want
    )
    np.testing.assert_array_equal(plain(x, 3, 2, False, 1), x * 2 + 4)  # ints as floats
    np.testing.assert_array_equal(plain(x[::2], 0, 1.0, False, 0), x[::2])
    with oplib.FakeTensorMode():
        fake = plain(oplib.empty(5, dtype=np.float64), 1, 1.0, False, 0)
    assert fake.shape == (5,)


def test_ints_beyond_int64_are_refused_not_wrapped(echo):
    ns, path = echo
    x = np.arange(2.0)
    with pytest.raises(OverflowError, match=rf"{ns}::plain: argument 'n' .*{re.escape(path)}"):
        _packet(ns, "plain")(x, 2**70, 1.0, False, 0)
    with pytest.raises(OverflowError, match=r"argument 'ints'.*does not fit"):
        _packet(ns, "mix")(x, 1.0, [1, -(2**64)])


@pytest.mark.fastpath
def test_plain_calls_take_the_packed_path_and_others_fall_back(echo, monkeypatch):
    from oplib_core._native import _fastcall

    ns, _ = echo
    kernel = oplib.lookup(f"{ns}::plain").kernel("cpu").fn
    fast = kernel.fast
    assert isinstance(fast, _fastcall.FastCall)
    mix = oplib.lookup(f"{ns}::mix").kernel("cpu").fn.fast
    assert isinstance(mix, _fastcall.NoFastCall)  # int[]: plain path only
    declined = []
    real = fast.slow
    monkeypatch.setattr(fast, "slow", lambda args: declined.append(args) or real(args))
    kernel.invalidate()  # the fast call is generated anew, with the recording ``slow``
    x = np.arange(3.0)
    _packet(ns, "plain")(x, 1, 1.0, False, 0)
    assert declined == []
    _packet(ns, "plain")(x.view(np.ma.MaskedArray), 1, 1.0, False, 0)  # not exactly ndarray
    assert len(declined) == 1 and type(declined[0][0]) is np.ma.MaskedArray
