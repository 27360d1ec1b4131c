"""The CUDA backend (oplib-cuda). What needs no device runs everywhere; tests marked
``cuda`` need cupy and a GPU and are skipped, with the reason, without them."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from oplib_cuda import device as cuda_device
from oplib_cuda import runtime

import oplib_core as oplib
from oplib_core import backend_registration as br
from oplib_core._device import Device
from oplib_core._opset import CORE_OPS
from oplib_core._registry.registry import REGISTRY
from oplib_core.errors import BackendError

from subproc import run_python

HAS_CUPY = importlib.util.find_spec("cupy") is not None
STATUS = oplib.backends.get("cuda").status()
needs_no_cupy = pytest.mark.skipif(HAS_CUPY, reason="cupy is installed here")
gpu_present = pytest.mark.skipif(STATUS is not None, reason=f"cuda unavailable: {STATUS}")


# -- discovery and availability ---------------------------------------------------------


def test_backend_is_discovered_with_lazy_recognition():
    b = oplib.backends.get("cuda")
    assert b.key == "CUDA"
    assert b.distribution == "oplib-cuda"
    assert b.spec.array_type_names == ("cupy.ndarray",)
    assert b.spec.array_types == ()
    assert b.spec.dlpack_device_type == 2
    assert oplib.cuda is cuda_device


def test_every_core_op_has_a_cuda_kernel():
    assert REGISTRY.ops_with_kernels_for("cuda") == len(CORE_OPS)
    kernel = REGISTRY.ops["oplib::add"].kernel("cuda")
    assert kernel.origin.plugin == "cuda" and kernel.origin.distribution == "oplib-cuda"


def test_status_never_raises_and_is_consistent():
    b = oplib.backends.get("cuda")
    reason = b.status()
    assert reason is None or isinstance(reason, str)
    assert b.is_available() is (reason is None)
    assert cuda_device.is_available() is (reason is None)
    if reason is not None:
        assert b.device_count() == 0 and cuda_device.device_count() == 0


@needs_no_cupy
def test_unavailable_without_cupy_says_why():
    assert runtime.status().startswith("cupy not installed")
    assert runtime.device_count() == 0
    row = run_python("""
        import json, io, contextlib
        from oplib_core.cli import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(["backends", "list", "--json"])
        OUT["rows"] = json.loads(buf.getvalue())
    """)["rows"]
    cuda = next(r for r in row if r["name"] == "cuda")
    assert cuda["available"] is False
    assert cuda["reason"].startswith("cupy not installed")
    assert cuda["device_count"] == 0
    # every core op has a cuda kernel; _to_copy and _narrow are served by "default"
    # kernels
    assert cuda["ops"] == len(CORE_OPS) + 2


@needs_no_cupy
def test_using_cuda_without_cupy_raises_backend_error():
    with pytest.raises(BackendError, match="the cuda backend is unavailable: cupy not installed"):
        oplib.zeros(2, device="cuda")
    with pytest.raises(BackendError, match="cupy not installed"):
        oplib.tensor([1.0, 2.0], device="cuda:1")
    with pytest.raises(BackendError, match="cupy not installed"):
        cuda_device.current_device()
    with pytest.raises(BackendError, match="cupy not installed"):
        cuda_device.manual_seed_all(0)
    assert cuda_device._is_in_bad_fork() is False


def test_rng_state_is_explained_not_supported():
    with pytest.raises(NotImplementedError, match=r"use oplib\.cuda\.manual_seed_all"):
        cuda_device.get_rng_state()
    with pytest.raises(NotImplementedError, match="does not expose the state"):
        cuda_device.set_rng_state(np.zeros(4, np.uint8))


def test_import_never_touches_cupy():
    """Loading oplib and every plugin, listing backends and registering cuda kernels must
    not even try to import cupy; asking for availability does."""
    out = run_python("""
        import sys
        attempts = []
        class Recorder:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] == "cupy":
                    attempts.append(name)
                return None
        sys.meta_path.insert(0, Recorder())
        import oplib_core as oplib
        names = [b.name for b in oplib.backends.list()]
        oplib.define("thirdparty::f", "(Tensor x) -> Tensor")
        oplib.register_kernel("thirdparty::f", "cuda", lambda x: x)
        oplib.cuda  # the device module
        OUT["loaded"] = "cupy" in sys.modules
        OUT["attempts_before"] = list(attempts)
        OUT["names"] = names
        OUT["status"] = oplib.backends.get("cuda").status()
        OUT["attempted_after"] = "cupy" in attempts
    """)
    assert "cuda" in out["names"]
    assert out["loaded"] is False
    assert out["attempts_before"] == []
    assert out["attempted_after"] is True
    assert out["status"] is None or isinstance(out["status"], str)


# -- third-party kernels and devices ------------------------------------------------------


def test_third_party_cuda_kernel_waits_for_the_backend():
    out = run_python(
        """
        import oplib_core as oplib
        from oplib_core._introspect import op_detail
        from oplib_core._registry.registry import REGISTRY
        import oplib_cuda.plugin
        oplib.define("thirdparty::f", "(Tensor x) -> Tensor")
        oplib.register_kernel("thirdparty::f", "cuda", lambda x: x)
        OUT["before"] = REGISTRY.kernel_status("cuda")
        OUT["names_before"] = [b.name for b in oplib.backends.list()]
        oplib.plugins.register(oplib_cuda.plugin, name="cuda-late")
        OUT["after"] = REGISTRY.kernel_status("cuda")
        detail = op_detail("thirdparty::f")
        OUT["kernels"] = [(k["key"], k["status"]) for k in detail["kernels"]]
    """,
        env={"OPLIB_DISABLE_PLUGINS": "cuda"},
    )
    assert "cuda" not in out["names_before"]
    assert out["before"] == "waiting"
    assert out["after"] == "live"
    assert ["cuda", "live"] in out["kernels"]


def test_cuda_key_names_map_to_the_cuda_backend(ns):
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(f"{ns}::f", "CUDA", lambda x: x)
    assert sorted(REGISTRY.ops[f"{ns}::f"].kernels) == ["cuda"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("cuda", Device("cuda")), ("cuda:1", Device("cuda", 1)), (" cuda:0 ", Device("cuda", 0))],
)
def test_cuda_device_strings(text, expected):
    assert oplib.device(text) == expected


@pytest.mark.parametrize("text", ["cuda:-1", "cuda:x", "cuda:1:2", "cu da"])
def test_bad_cuda_device_strings(text):
    with pytest.raises(ValueError, match="expected a device string like"):
        oplib.device(text)


def test_device_strings_parse_once_and_bad_ones_raise_every_time(monkeypatch):
    """A device string is parsed once (``x.to("cuda")`` in every step of a loop) and gives
    the same Device after; a bad one raises on every call; at most ``_MAX_PARSED`` are
    kept, and those beyond still parse."""
    from oplib_core import _device

    monkeypatch.setattr(_device, "_PARSED", {})
    first = oplib.device("cuda:1")
    assert oplib.device("cuda:1") is first and first == Device("cuda", 1)
    assert oplib.device("cuda", 1) == first  # (an index given: not from the cache)
    for _ in range(2):
        with pytest.raises(ValueError, match="expected a device string like"):
            oplib.device("cuda:x")
    many = [oplib.device(f"cuda:{i}") for i in range(2 * _device._MAX_PARSED)]
    assert many == [Device("cuda", i) for i in range(2 * _device._MAX_PARSED)]
    assert len(_device._PARSED) == _device._MAX_PARSED


def test_cuda_device_index_normalisation():
    assert br._normalization_device("cuda", "cuda:1") == 1
    assert br._normalization_device("cuda", 2) == 2
    with pytest.raises(RuntimeError, match="Invalid device, must be cuda device"):
        br._normalization_device("cuda", "privateuse1:1")


# -- with a GPU ---------------------------------------------------------------------------


@pytest.fixture
def cp():
    return runtime.cupy()


@pytest.mark.cuda
@gpu_present
def test_tensor_on_cuda_and_back(cp):
    x = oplib.tensor([1.0, 2.0], device="cuda")
    assert isinstance(x.native, cp.ndarray)
    assert x.device.type == "cuda"
    y = (x * 2.0 + 1.0).exp().sum()
    expected = np.exp(np.array([1.0, 2.0], np.float32) * 2 + 1).sum()
    np.testing.assert_allclose(y.to("cpu").numpy(), expected, rtol=1e-5)
    assert isinstance(x.to("cpu").numpy(), np.ndarray)


@pytest.mark.cuda
@gpu_present
def test_cupy_arrays_dispatch_to_cuda_kernels(cp):
    a = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    out = oplib.ops.oplib.matmul(a, a.T)
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out), cp.asnumpy(a) @ cp.asnumpy(a).T)


@pytest.mark.cuda
@gpu_present
def test_third_party_kernel_runs_on_cuda(ns, cp):
    oplib.define(f"{ns}::twice", "(Tensor x) -> Tensor")
    oplib.register_kernel(f"{ns}::twice", "cuda", lambda x: x * 2)
    out = getattr(oplib.ops, ns).twice(oplib.tensor([1.0, 3.0], device="cuda"))
    assert out.device.type == "cuda" and out.tolist() == [2.0, 6.0]


@pytest.mark.cuda
@gpu_present
def test_dlpack_round_trip(cp):
    a = cp.arange(4, dtype=cp.float32)
    t = oplib.from_dlpack(a)
    assert t.device.type == "cuda" and isinstance(t.native, cp.ndarray)
    back = cp.from_dlpack(t)
    assert back.data.ptr == a.data.ptr


@pytest.mark.cuda
@gpu_present
def test_second_device_is_honoured(cp):
    if cuda_device.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    x = oplib.zeros(3, device="cuda:1")
    assert x.native.device.id == 1 and x.device == Device("cuda", 1)
    y = x + 1.0
    assert y.native.device.id == 1
    z = x.to("cuda:0")
    assert z.native.device.id == 0
