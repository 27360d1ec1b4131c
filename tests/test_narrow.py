"""The private ``oplib::_narrow`` with a negative dim slices the same dimension on every
backend, as ``torch.narrow`` does (issue 13: cpu sliced dim 0 for ``dim=-1``, meta the
last one). torch 2.x: ``torch.narrow(x, 2, 0, 1)`` on a 2-d tensor raises
``IndexError: Dimension out of range (expected to be in range of [-2, 1], but got 2)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib

NARROW = oplib.ops.oplib._narrow
DEVICES = ["cpu", "meta", "privateuse1", "dask"]
X = np.arange(24.0).reshape(2, 3, 4)


def _tensor(device: str) -> oplib.Tensor:
    if device not in {b.name for b in oplib.backends.list()}:
        pytest.skip(f"{device} is not installed")
    return oplib.tensor(X).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("dim", "start", "length"), [(-1, 1, 2), (-2, 1, 2), (-3, 1, 1), (2, 0, 3), (0, 1, 1)]
)
def test_negative_dim_slices_the_same_dimension_everywhere(
    device: str, dim: int, start: int, length: int
) -> None:
    want = np.take(X, range(start, start + length), axis=dim)
    t = _tensor(device)
    for _ in range(2):  # the slow path, then the fast path's caches
        out = NARROW(t, dim, start, length)
        assert out.shape == want.shape and out.device.type == device
        if device != "meta":
            np.testing.assert_array_equal(out.to("cpu").numpy(), want)
        raw = NARROW(t.native, dim, start, length)
        assert tuple(raw.shape) == want.shape
    under_fake = oplib.FakeTensorMode()
    with under_fake:
        fake = NARROW(under_fake.from_real(t), dim, start, length)
    assert tuple(fake.shape) == want.shape


@pytest.mark.parametrize("device", ["cpu", "meta", "privateuse1"])
@pytest.mark.parametrize("dim", [3, -4])
def test_dim_out_of_range_raises_index_error_as_torch(device: str, dim: int) -> None:
    with pytest.raises(IndexError, match=r"expected to be in range of \[-3, 2\], but got"):
        NARROW(_tensor(device), dim, 0, 1)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_slice_past_the_end_raises(device: str) -> None:
    with pytest.raises(IndexError, match=r"exceeds dimension 2 of size 4"):
        NARROW(_tensor(device), -1, 3, 2)


def test_cat_gradient_along_a_negative_dim() -> None:
    a = oplib.tensor(np.ones((2, 3)), requires_grad=True)
    b = oplib.tensor(np.ones((2, 2)), requires_grad=True)
    out = oplib.ops.oplib.cat([a, b], -1)
    (out * oplib.tensor(np.arange(10.0).reshape(2, 5))).sum().backward()
    assert a.grad is not None and b.grad is not None
    np.testing.assert_array_equal(a.grad.numpy(), np.arange(10.0).reshape(2, 5)[:, :3])
    np.testing.assert_array_equal(b.grad.numpy(), np.arange(10.0).reshape(2, 5)[:, 3:])
