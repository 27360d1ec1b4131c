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
