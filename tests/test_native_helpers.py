"""``oplib.native``: one device-generic kernel allocating and converting on its input's
device, run on cpu, privateuse1 and jax."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.errors import ArgumentTypeError

from helpers import unique_ns

DEVICES = [
    "cpu",
    "privateuse1",
    pytest.param(
        "jax",
        marks=pytest.mark.skipif(
            oplib.backends.TABLE.find("jax") is None, reason="oplib-jax not installed"
        ),
    ),
]


@pytest.fixture
def cumsum_op(teardown):
    name = f"{unique_ns()}::host_cumsum"

    @oplib.custom_op(name, mutates_args=(), device_types=None)
    def host_cumsum(x: oplib.Tensor) -> oplib.Tensor:
        out = oplib.native.new_empty(x, (x.shape[0] + 1,), x.dtype)
        assert oplib.backends.for_type(type(out)) is oplib.backends.for_type(type(x))
        host = np.concatenate([[0], np.cumsum(oplib.native.to_host(x))]).astype(x.dtype)
        return oplib.native.from_host(host, like=x)

    teardown(host_cumsum)
    return host_cumsum


@pytest.mark.parametrize("device", DEVICES)
def test_one_kernel_runs_on_every_device(cumsum_op, device):
    x = oplib.tensor([1.0, 2.0, 3.0], device=device)
    out = cumsum_op(x)
    assert out.device == x.device and out.dtype == np.dtype("float32")
    np.testing.assert_array_equal(out.to("cpu").numpy(), [0.0, 1.0, 3.0, 6.0])


@pytest.mark.parametrize("device", DEVICES)
def test_helpers_on_native_arrays(device):
    x = oplib.ones(2, 3, device=device)._data
    e = oplib.native.new_empty(x, [4], oplib.int32)
    assert e.shape == (4,) and np.dtype(e.dtype) == np.dtype("int32")
    assert oplib.tensor(e).device == oplib.tensor(x).device
    assert oplib.native.new_empty(x, (1,)).dtype == x.dtype
    host = oplib.native.to_host(x)
    assert isinstance(host, np.ndarray) and host.shape == (2, 3)
    back = oplib.native.from_host(host * 2, like=x)
    assert type(back) is type(x)


def test_helpers_refuse_what_no_backend_holds():
    with pytest.raises(ArgumentTypeError, match=r"native.to_host\(\): expected a native array"):
        oplib.native.to_host([1, 2])
    with pytest.raises(ArgumentTypeError, match=r"from_host\(\).*got str"):
        oplib.native.from_host(np.ones(2), like="x")
