"""The ``dask`` backend (``oplib-dask``) on dask's threaded scheduler: generic chunk-wise
kernels for pointwise ops, reductions and matmul, meta from fake kernels, errors.

The worker-process tests (``distributed.LocalCluster``) are in ``test_dask_distributed.py``.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import oplib_core as oplib

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
oplib_dask = pytest.importorskip("oplib_dask")

from oplib_dask import DaskMetaWarning, DaskWorkerError  # noqa: E402
from oplib_dask.oprefs import OpRef, Provider  # noqa: E402

from subproc import run_python  # noqa: E402

core = oplib.ops.oplib


@pytest.fixture(autouse=True)
def threaded():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture
def x():
    rng = np.random.default_rng(0)
    return da.from_array(rng.standard_normal((100, 60)).astype(np.float32), chunks=(30, 25))


def _define(ns, name, schema, tags=(), cpu=None, fake=None):
    qualname = f"{ns}::{name}"
    oplib.define(qualname, schema, tags=tags)
    if cpu is not None:
        oplib.register_kernel(qualname, "cpu", cpu)
    if fake is not None:
        oplib.register_fake(qualname, fake)
    return getattr(getattr(oplib.ops, ns), name).default


# -- the backend ------------------------------------------------------------------------------
def test_import_does_not_import_dask():
    out = run_python(
        """
        import sys, oplib_core as oplib
        OUT["dask"] = [m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")]
        OUT["backends"] = [b.name for b in oplib.backends.list()]
        OUT["status"] = oplib.backends.get("dask").status()
        """
    )
    assert out["dask"] == []
    assert "dask" in out["backends"]
    assert out["status"] is None


def test_backend_recognises_dask_arrays_and_tensor_wraps_them(x):
    backend = oplib.backends.get("dask")
    assert backend.key == "Dask"
    assert backend.recognises(type(x))
    t = oplib.tensor(x)
    assert t._data is x
    assert t.device == oplib.Device("dask")
    assert t.shape == (100, 60)
    np.testing.assert_array_equal(t.to("cpu").numpy(), x.compute())
    back = oplib.tensor(x.compute()).to("dask")
    assert back.device.type == "dask"
    np.testing.assert_array_equal(back._data.compute(), x.compute())


def test_core_ops_are_served_by_the_backend_fallback():
    dask_backend = oplib.backends.get("dask")
    for name in ("sin", "add", "add.Scalar", "sum", "matmul", "astype"):
        packet, _, overload = name.partition(".")
        op = getattr(getattr(core, packet), overload or "default")
        assert "dask" not in dict(op.kernels()), name  # nothing registered per op
        steps = list(op.resolution_steps(dask_backend))
        key, fn, why = steps[-1]
        assert key == "DaskFallback" and fn is not None and why.startswith("taken"), name
    # shape ops and factories have registered dask kernels (oplib_dask/shapes.py)
    assert "dask" in dict(core.transpose.default.kernels())
    copy_ = core.copy_.default
    key, fn, why = list(copy_.resolution_steps(dask_backend))[-1]
    assert fn is None and "does not cover" in why


# -- pointwise --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["neg", "exp", "sin", "tanh", "sigmoid", "relu", "abs"])
def test_unary_pointwise_matches_numpy(x, name):
    y = getattr(core, name)(x)
    assert isinstance(y, da.Array)
    assert y.chunks == x.chunks
    expected = getattr(core, name)(x.compute())
    np.testing.assert_allclose(y.compute(), expected, rtol=1e-6)
    assert y.dtype == expected.dtype


def test_binary_pointwise_broadcasts_dask_and_numpy_operands(x):
    xn = x.compute()
    row = np.arange(60, dtype=np.float32)
    np.testing.assert_allclose(core.add(x, row).compute(), xn + row)
    np.testing.assert_allclose(core.sub(row, x).compute(), row - xn)
    a = da.from_array(np.arange(60.0).reshape(1, 60), chunks=(1, 25))
    b = da.from_array(np.arange(100.0).reshape(100, 1), chunks=(30, 1))
    out = core.mul(a, b)
    assert out.shape == (100, 60)
    np.testing.assert_allclose(out.compute(), a.compute() * b.compute())
    y = da.from_array(xn * 2, chunks=(50, 20))  # different chunking: dask aligns
    np.testing.assert_allclose(core.maximum(x, y).compute(), np.maximum(xn, xn * 2))


def test_scalars_and_zero_d_arrays(x):
    xn = x.compute()
    y = core.mul.Scalar(x, 2.5)
    assert y.dtype == np.float32  # weak Python scalar, as on numpy
    np.testing.assert_allclose(y.compute(), xn * np.float32(2.5))
    np.testing.assert_allclose(core.add(x, np.float32(3.0)).compute(), xn + 3)
    np.testing.assert_allclose(core.rsub.Scalar(x, 1.0).compute(), 1.0 - xn)
    mask = core.gt.Scalar(x, 0.0)
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask.compute(), xn > 0)
    w = core.where(mask, x, np.zeros((), np.float32))
    np.testing.assert_allclose(w.compute(), np.where(xn > 0, xn, 0))


def test_tensor_operators_on_dask_tensors(x):
    t = oplib.tensor(x)
    u = core.sin(t * 2 + 1)
    assert u.device.type == "dask"
    assert isinstance(u._data, da.Array)
    np.testing.assert_allclose(u.to("cpu").numpy(), np.sin(x.compute() * 2 + 1), rtol=1e-5)


def test_astype_and_clone_run_per_chunk(x):
    y = core.astype(x, np.dtype("float64"))
    assert y.dtype == np.float64 and y.chunks == x.chunks
    np.testing.assert_array_equal(y.compute(), x.compute().astype(np.float64))
    np.testing.assert_array_equal(core.clone(x).compute(), x.compute())


# -- reductions -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize(
    ("dim", "keepdim"), [(None, False), ([], True), ([1], False), ([0], True), ([-1, 0], False)]
)
def test_core_reductions_match_numpy(x, name, dim, keepdim):
    y = getattr(core, name)(x, dim, keepdim)
    assert isinstance(y, da.Array)
    expected = getattr(core, name)(x.compute(), dim, keepdim)
    assert y.shape == expected.shape
    assert y.dtype == expected.dtype
    np.testing.assert_allclose(y.compute(), expected, rtol=1e-5, atol=1e-5)


def test_reduction_dtypes_follow_the_fake_kernels():
    xi = da.arange(1000, chunks=100, dtype=np.int32).reshape(10, 100)
    s = core.sum(xi, [1], False)
    assert s.dtype == np.int64  # as torch: integer sums accumulate in int64
    np.testing.assert_array_equal(s.compute(), xi.compute().sum(1, dtype=np.int64))
    m = core.mean(xi, None, False, dtype=np.dtype("float64"))
    assert m.dtype == np.float64
    assert m.compute() == pytest.approx(499.5)
    with pytest.raises(TypeError, match="mean"):
        core.mean(xi, None, False)  # the fake kernel refuses at graph-build time
    with pytest.raises(IndexError, match="out of range"):
        core.sum(xi, [2], False)


def test_many_chunk_reduction_uses_a_tree():
    xs = da.ones((4000,), chunks=10, dtype=np.float64)
    y = core.sum(xs, None, False)
    assert y.compute() == 4000.0
    assert any("partial" in str(name) for name in y.dask.layers)


# -- matmul -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ashape", "achunks", "bshape", "bchunks"),
    [
        ((50, 40), (20, 15), (40, 30), (15, 10)),
        ((50, 40), (20, 15), (40,), (15,)),
        ((40,), (15,), (40, 30), (15, 10)),
        ((40,), (15,), (40,), (15,)),
        ((3, 50, 40), (1, 20, 15), (40, 30), (15, 10)),
        ((3, 50, 40), (2, 20, 15), (1, 40, 30), (1, 16, 30)),
    ],
)
def test_matmul_matches_numpy(ashape, achunks, bshape, bchunks):
    rng = np.random.default_rng(1)
    an, bn = rng.standard_normal(ashape), rng.standard_normal(bshape)
    out = core.matmul(da.from_array(an, chunks=achunks), da.from_array(bn, chunks=bchunks))
    expected = an @ bn
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.compute(), expected, rtol=1e-10)


def test_matmul_with_a_numpy_operand():
    an = np.arange(12.0).reshape(3, 4)
    b = da.from_array(np.arange(20.0).reshape(4, 5), chunks=2)
    np.testing.assert_allclose(core.matmul(an, b).compute(), an @ b.compute())


# -- meta from fake kernels -------------------------------------------------------------------
def test_graph_build_runs_no_kernel_and_meta_comes_from_the_fake_kernel(ns, x):
    seen = []

    def cpu(x, t):
        seen.append(x.shape)
        return (np.tanh(x / t) * t).astype(np.float16)

    op = _define(
        ns,
        "clip16",
        "(Tensor x, float t) -> Tensor",
        (oplib.Tag.pointwise,),
        cpu,
        lambda x, t: x.new_empty(x.shape, np.float16),
    )
    y = op(x, 0.5)
    assert seen == []  # lazy: nothing ran, not even on empty arrays
    assert y.dtype == np.float16
    assert type(y._meta) is np.ndarray and y._meta.dtype == np.float16 and y._meta.ndim == 2
    out = y.compute()
    assert len(seen) == x.npartitions and all(0 not in s for s in seen)
    np.testing.assert_allclose(out, np.tanh(x.compute() / 0.5) * 0.5, atol=1e-3)


def test_op_without_fake_kernel_lets_dask_guess_with_one_warning(ns, x):
    op = _define(ns, "twice", "(Tensor x) -> Tensor", (oplib.Tag.pointwise,), lambda x: x * 2)
    with pytest.warns(DaskMetaWarning, match=f"{ns}::twice: no fake kernel"):
        y = op(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op(x)  # once per op
    np.testing.assert_allclose(y.compute(), x.compute() * 2)


def test_fake_kernel_errors_surface_at_graph_build(x):
    with pytest.raises(Exception, match="broadcast"):
        core.add(x, da.ones((7,), chunks=3))


# -- ops defined later, overrides, other ops --------------------------------------------------
def test_custom_op_defined_after_load_gets_a_dask_kernel(ns, x):
    @oplib.custom_op(
        f"{ns}::softsign", mutates_args=(), device_types="cpu", tags=(oplib.Tag.pointwise,)
    )
    def softsign(x: np.ndarray) -> np.ndarray:
        return x / (1 + np.abs(x))

    @softsign.register_fake
    def _(x):
        return oplib.empty_like(x)

    y = softsign(x)
    assert isinstance(y, da.Array)
    xn = x.compute()
    np.testing.assert_allclose(y.compute(), xn / (1 + np.abs(xn)), rtol=1e-6)
    steps = getattr(oplib.ops, ns).softsign.default.resolution_steps(oplib.backends.get("dask"))
    assert [key for key, fn, _ in steps if fn is not None] == ["DaskFallback"]


def test_generic_reduction_for_a_tagged_third_party_op(ns, x):
    def l2(x, dim, keepdim):
        return np.sqrt((x * x).sum(axis=tuple(dim), keepdims=keepdim))

    def fake(x, dim, keepdim):
        dims = {d % x.ndim for d in dim}
        keep = [1 if i in dims else s for i, s in enumerate(x.shape)]
        return x.new_empty(keep if keepdim else [s for i, s in enumerate(x.shape) if i not in dims])

    op = _define(
        ns,
        "l2",
        "(Tensor x, int[] dim, bool keepdim=False) -> Tensor",
        (oplib.Tag.reduction,),
        l2,
        fake,
    )
    xn = x.compute()
    y = op(x, [1])
    assert y.shape == (100,) and y.chunks == ((30, 30, 30, 10),)
    np.testing.assert_allclose(y.compute(), np.sqrt((xn * xn).sum(1)), rtol=1e-5)
    z = op(x, [0], True)
    assert z.shape == (1, 60)
    np.testing.assert_allclose(z.compute(), np.sqrt((xn * xn).sum(0, keepdims=True)), rtol=1e-5)


def test_an_author_kernel_comes_before_the_generic_one(ns, x):
    op = _define(
        ns,
        "plus1",
        "(Tensor x) -> Tensor",
        (oplib.Tag.pointwise,),
        lambda x: x + 1,
        lambda x: oplib.empty_like(x),
    )
    generic = op(x)
    assert generic.name.startswith(f"{ns}.plus1-")  # the chunk-wise fallback built this graph
    calls = []

    def own(arr):
        calls.append(arr)
        return arr + 1

    oplib.register_kernel(op, "dask", own)
    np.testing.assert_allclose(op(x).compute(), x.compute() + 1)
    assert len(calls) == 1


def test_untagged_op_without_dask_kernel_says_how_to_get_one(ns, x):
    op = _define(
        ns,
        "sortrows",
        "(Tensor x) -> Tensor",
        (),
        lambda x: np.sort(x, axis=1),
        lambda x: oplib.empty_like(x),
    )
    with pytest.raises(oplib.NoKernelError, match=r"register_kernel\('.*sortrows', 'dask'\)") as e:
        op(x)
    assert "oplib_dask.single_chunk(op)" in str(e.value)
    y = oplib_dask.single_chunk(op)(x)  # the explicit fallback
    assert y.numblocks == (1, 1)
    np.testing.assert_array_equal(y.compute(), np.sort(x.compute(), axis=1))
    oplib.register_kernel(op, "dask", oplib_dask.single_chunk(op))
    np.testing.assert_array_equal(op(x).compute(), np.sort(x.compute(), axis=1))


def test_op_without_kernel_for_the_chunks_fails_at_graph_build(ns, x):
    op = _define(
        ns,
        "fakeonly",
        "(Tensor x) -> Tensor",
        (oplib.Tag.pointwise,),
        None,
        lambda x: oplib.empty_like(x),
    )
    with pytest.raises(oplib.NoKernelError, match="chunks are cpu arrays"):
        op(x)


# -- autograd ---------------------------------------------------------------------------------
def test_dask_tensor_requiring_grad_is_a_clear_error(x):
    t = oplib.tensor(x, requires_grad=True)
    with pytest.raises(oplib.AutogradUnsupportedError, match="autograd does not run on dask") as e:
        core.sin(t)
    assert e.value.op == "oplib::sin" and e.value.backend == "dask"
    with oplib.no_grad():
        assert core.sin(t).device.type == "dask"
    assert core.sin(t.detach()).device.type == "dask"


# -- graphs and pickling ----------------------------------------------------------------------
def test_graph_keys_are_deterministic_and_named_after_the_op(x):
    a, b = core.sin(x), core.sin(x)
    assert a.name == b.name and a.name.startswith("oplib.sin-")
    assert core.mul.Scalar(x, 2.0).name != core.mul.Scalar(x, 3.0).name


def test_tasks_pickle_ops_by_reference(x):
    y = core.exp(x)
    ref = pickle.loads(pickle.dumps(OpRef("oplib::exp", (), core.exp.default)))
    assert ref._op is None and ref.get() is core.exp.default
    assert len(pickle.dumps(ref)) < 200
    layer = dict(y.dask.layers[y.name])  # 12 tasks, each carrying the op by name
    assert len(pickle.dumps(layer)) < 12 * 400


def test_worker_without_the_op_gets_a_clear_error():
    ref = OpRef("nowhere::op", (Provider("not_a_module_anywhere"),))
    with pytest.raises(DaskWorkerError, match="cannot import module 'not_a_module_anywhere'"):
        ref.get()
    with pytest.raises(DaskWorkerError, match="not defined in this dask worker"):
        OpRef("nowhere::op").get()


def test_cupy_chunks_run_the_cuda_kernel():
    cp = pytest.importorskip("cupy")
    if oplib.backends.get("cuda").status() is not None:
        pytest.skip("no CUDA device")
    xc = da.from_array(cp.arange(20.0), chunks=5, asarray=False)
    y = core.sin(xc)
    assert type(y._meta).__module__.startswith("cupy")
    np.testing.assert_allclose(cp.asnumpy(y.compute()), np.sin(np.arange(20.0)))
