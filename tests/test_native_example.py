"""examples/native_ops in process: its C source compiled in a temporary directory, its plugin
registered, its ops compared with numpy on cpu and privateuse1, under FakeTensorMode and
opcheck, from 4 threads, on Dask; its opaque class with methods, fakes and pickling."""

from __future__ import annotations

import pickle
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.backend_registration import privateuse1_backend_name

from helpers import compile_library

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "native_ops"
OPS = ("scaled_add", "sum_dim", "tile", "apply_affine", "minmax")


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """The example's plugin, registered with its library compiled here."""
    path = compile_library(
        [str(EXAMPLE / "csrc" / "native_ops.c")],
        tmp_path_factory.mktemp("native_ops"),
        "native_ops",
    )
    sys.path.insert(0, str(EXAMPLE))
    try:
        import native_ops.plugin as plugin
    finally:
        sys.path.remove(str(EXAMPLE))
    plugin.library_path = lambda: path  # the in-tree package has no compiled library
    record = oplib.plugins.register(plugin, name="native-ops-test")
    assert record.status == "loaded", record.error
    yield oplib.ops.native_ops
    oplib.plugins.unregister(plugin)
    assert path not in oplib.ops.loaded_libraries


def _rng_arrays(dtype):
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 5)).astype(dtype), rng.standard_normal((4, 5)).astype(dtype)


def _devices():
    out = ["cpu"]
    try:
        if oplib.backends.get(privateuse1_backend_name()).is_available():
            out.append(privateuse1_backend_name())
    except oplib.OplibError:
        pass
    return out


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy(native, device, dtype):
    a, b = _rng_arrays(dtype)
    ta, tb = oplib.tensor(a, device=device), oplib.tensor(b, device=device)
    tol = {"rtol": 1e-5} if dtype == np.float32 else {}

    def host(t):
        assert t.device.type == device
        return t.to("cpu").numpy()

    np.testing.assert_allclose(host(native.scaled_add(ta, tb, 0.5)), a + 0.5 * b, **tol)
    np.testing.assert_allclose(host(native.sum_dim(ta, 1)), a.sum(1), **tol)
    np.testing.assert_allclose(
        host(native.sum_dim(ta, -2, keepdim=True)), a.sum(0, keepdims=True), **tol
    )
    np.testing.assert_array_equal(host(native.tile(ta, [2, 3])), np.tile(a, (2, 3)))
    f = oplib.classes.native_ops.Affine(3.0, 0.5)
    np.testing.assert_allclose(host(native.apply_affine(f, ta)), 3.0 * a + 0.5, **tol)
    np.testing.assert_allclose(host(f.apply(ta)), 3.0 * a + 0.5, **tol)
    lo, hi = native.minmax(ta)
    assert host(lo) == a.min() and host(hi) == a.max() and lo.shape == ()
    assert host(lo).dtype == dtype


def test_native_arrays_and_strided_views(native):
    a, b = _rng_arrays(np.float32)
    out = native.scaled_add(a.T, b.T)
    assert isinstance(out, np.ndarray) and out.flags.c_contiguous
    np.testing.assert_allclose(out, a.T + b.T)
    np.testing.assert_allclose(native.sum_dim(a[::2, 1:], 0), a[::2, 1:].sum(0), rtol=1e-6)


def test_errors_name_the_op_and_library(native):
    x = np.ones((2, 2), np.float32)
    with pytest.raises(
        oplib.NativeKernelError,
        match=r"native_ops::tile shape function \(library .*native_ops\.so\): reps must "
        r"have one entry per dimension \(2\), got 1",
    ):
        native.tile(x, [2])
    with pytest.raises(oplib.NativeKernelError, match="x must be float32 or float64"):
        native.sum_dim(np.ones(3, np.int64), 0)
    with pytest.raises(ValueError, match="shapes"):  # the Python fake kernel sizes outputs
        native.scaled_add(x, np.ones(3, np.float32))
    with pytest.raises(
        oplib.NativeKernelError, match=r"Affine constructor .*scale must be non-zero"
    ):
        oplib.classes.native_ops.Affine(0.0)
    with pytest.raises(TypeError, match="native_ops::apply_affine"):
        native.apply_affine("not an Affine", x)


def test_fake_mode_uses_shape_functions_and_the_fake_class(native):
    a, _ = _rng_arrays(np.float32)
    f = oplib.classes.native_ops.Affine(2.0)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(a)
        assert native.scaled_add(x, x).shape == (4, 5)
        assert native.sum_dim(x, 0).shape == (5,)
        assert native.tile(x, [1, 2]).shape == (4, 10)
        assert native.apply_affine(f, x).shape == (4, 5)
        lo, hi = native.minmax(x)
        assert lo.shape == () and hi.dtype == np.float32


def test_opcheck_passes_for_every_op(native):
    from oplib_core.testing import sample_inputs

    for name in OPS:
        op = oplib.lookup(f"native_ops::{name}")
        samples = list(sample_inputs(op, oplib.device("cpu")))
        assert samples, name
        for s in samples:
            oplib.opcheck(op, s.args, s.kwargs)


def test_four_threads_at_once(native):
    a = np.random.default_rng(1).standard_normal((64, 257)).astype(np.float32)
    expected = native.sum_dim(a, 1)
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(50):
                np.testing.assert_array_equal(native.sum_dim(a, 1), expected)
                np.testing.assert_allclose(native.scaled_add(a, a, 2.0), 3 * a, rtol=1e-6)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_native_objects_pickle_by_their_constructor_arguments(native):
    f = oplib.classes.native_ops.Affine(2.0, shift=1.0)
    g = pickle.loads(pickle.dumps(f))
    assert type(g) is type(f) and g._oplib_handle != f._oplib_handle
    x = np.arange(3.0)
    np.testing.assert_array_equal(g.apply(x), f.apply(x))
    assert f.__obj_flatten__() == (("scale", 2.0), ("shift", 1.0))


def test_the_class_is_a_schema_type_and_has_a_documented_method(native):
    op = oplib.lookup("native_ops::apply_affine")
    assert str(op.schema) == "native_ops::apply_affine(native_ops::Affine f, Tensor x) -> Tensor"
    cls = oplib.classes.native_ops.Affine
    assert (
        "native_ops::Affine.apply(native_ops::Affine self, Tensor x) -> Tensor" in cls.apply.__doc__
    )
    with pytest.raises(AttributeError, match="no class 'Nope'"):
        oplib.classes.native_ops.Nope  # noqa: B018


def test_runs_on_dask(native):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    a = np.random.default_rng(2).standard_normal((40, 30)).astype(np.float32)
    x = oplib.tensor(da.from_array(a, chunks=(10, 30)))
    f = oplib.classes.native_ops.Affine(2.0)
    with dask.config.set(scheduler="threads"):
        out = native.apply_affine(f, native.scaled_add(x, x, 0.5))  # pointwise: per chunk
        assert out.device.type == "dask" and out._data.numblocks == (4, 1)
        np.testing.assert_allclose(out.to("cpu").numpy(), 3.0 * a, rtol=1e-6)
        with pytest.raises(oplib.NoKernelError, match="native_ops::sum_dim"):
            native.sum_dim(x, 1)  # not pointwise: Dask needs a kernel for it


def test_runs_on_dask_in_one_chunk(native, teardown):
    oplib_dask = pytest.importorskip("oplib_dask")
    da = pytest.importorskip("dask.array")
    a = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    lib = oplib.Library("native_ops", "IMPL")
    teardown(lib)
    lib.impl("sum_dim", oplib_dask.single_chunk("native_ops::sum_dim"), "dask")
    out = native.sum_dim(oplib.tensor(da.from_array(a, chunks=10)), 1)
    np.testing.assert_allclose(out.to("cpu").numpy(), a.sum(1), rtol=1e-5)
