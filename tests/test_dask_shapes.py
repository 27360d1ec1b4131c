"""The dask backend's factory and shape-op kernels (``oplib_dask/shapes.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib

da = pytest.importorskip("dask.array")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: oplib.zeros(2, 3, device="dask"), np.zeros((2, 3), np.float32)),
        (lambda: oplib.ones(2, device="dask", dtype=oplib.int32), np.ones(2, np.int32)),
        (lambda: oplib.full([2], 7, device="dask"), np.full(2, 7, np.int64)),
        (lambda: oplib.arange(4, device="dask"), np.arange(4)),
        (lambda: oplib.arange(1.0, 2.0, 0.5, device="dask"), np.array([1.0, 1.5], np.float32)),
    ],
)
def test_factories_give_dask_arrays(make, expected):
    t = make()
    assert isinstance(t._data, da.Array) and t.device.type == "dask"
    got = t.to("cpu").numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_empty_is_chunked_lazily():
    t = oplib.empty(8000, 8000, device="dask", dtype=oplib.float64)
    assert isinstance(t._data, da.Array) and len(t._data.chunks[0]) > 1  # not one block


def test_shape_ops_stay_lazy_and_match_cpu():
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = oplib.tensor(da.from_array(host, chunks=(1, 3, 2)))
    cases = [
        (x.reshape([6, 4]), host.reshape(6, 4)),
        (x.transpose(0, 2), host.swapaxes(0, 2)),
        (x.permute([2, 0, 1]), host.transpose(2, 0, 1)),
        (x.unsqueeze(1), host[:, None]),
        (x.unsqueeze(0).squeeze([0]), host),
        (x.broadcast_to([5, 2, 3, 4]), np.broadcast_to(host, (5, 2, 3, 4))),
        (oplib.ops.oplib.cat([x, x], 1), np.concatenate([host, host], 1)),
        (oplib.ops.oplib.stack([x, x], 0), np.stack([host, host])),
    ]
    for got, want in cases:
        assert isinstance(got._data, da.Array)
        np.testing.assert_array_equal(got.to("cpu").numpy(), want)


def test_shape_op_errors_are_the_core_kernels():
    x = oplib.zeros(2, 3, device="dask")
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.transpose(0, 5)


@pytest.fixture
def two_outputs(lib, ns):
    """``ns::split_sign(x, y) -> (Tensor, Tensor)``, pointwise, with a fake kernel."""
    lib.define("split_sign(Tensor x, Tensor y) -> (Tensor, Tensor)", tags=(oplib.Tag.pointwise,))

    def kernel(x, y):
        return np.abs(x) + y, (np.sign(x) * y).astype(np.int32)

    lib.impl("split_sign", kernel, "CPU")

    def fake(x, y):
        out = oplib.empty_like(x + y)
        return out, oplib.empty_like(out, dtype=oplib.int32)

    oplib.register_fake(f"{ns}::split_sign", fake, lib=lib)
    return getattr(oplib.ops, ns).split_sign, kernel


def test_multi_output_pointwise_runs_chunk_wise(two_outputs):
    op, kernel = two_outputs
    host = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    x = da.from_array(host, chunks=(1, 2))
    y = da.ones(4, dtype=np.float32, chunks=2)
    a, b = op(x, y)
    assert isinstance(a, da.Array) and isinstance(b, da.Array)
    assert a.chunks == b.chunks == ((1, 1, 1), (2, 2))
    assert (a.dtype, b.dtype) == (np.float32, np.int32)
    want_a, want_b = kernel(host, np.ones(4, np.float32))
    np.testing.assert_array_equal(a.compute(), want_a)
    np.testing.assert_array_equal(b.compute(), want_b)


def test_multi_output_needs_aligned_outputs(lib, ns):
    lib.define("and_total(Tensor x) -> (Tensor, Tensor)", tags=(oplib.Tag.pointwise,))
    lib.impl("and_total", lambda x: (x, x.sum(keepdims=True)), "CPU")
    oplib.register_fake(
        f"{ns}::and_total", lambda x: (oplib.empty_like(x), x.new_empty((1,))), lib=lib
    )
    with pytest.raises(oplib.NoKernelError, match="aligned with the broadcast input"):
        getattr(oplib.ops, ns).and_total(da.ones(4, chunks=2))


def test_multi_output_needs_a_fake_kernel(lib, ns):
    lib.define("pair(Tensor x) -> (Tensor, Tensor)", tags=(oplib.Tag.pointwise,))
    lib.impl("pair", lambda x: (x, -x), "CPU")
    with pytest.warns(Warning), pytest.raises(oplib.NoKernelError, match="register_fake"):
        getattr(oplib.ops, ns).pair(da.ones(4, chunks=2))
