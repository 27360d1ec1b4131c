"""The private-use software device (oplib-privateuse), unrenamed: ``privateuse1``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from oplib_privateuse import DeviceArray
from oplib_privateuse import device as pu

import oplib_core as oplib
from oplib_core import backend_registration as br
from oplib_core._introspect import backend_rows
from oplib_core.errors import BackendError, DeviceMismatchError

from subproc import ROOT, run_python

pytestmark = pytest.mark.skipif(
    br._get_privateuse1_backend_name() != "privateuse1" or pu.device_count() < 2,
    reason="needs the private-use backend unrenamed, with its default 2 devices",
)

P0, P1 = "privateuse1:0", "privateuse1:1"


@pytest.fixture(autouse=True)
def _current_device_zero():
    yield
    pu.set_device(0)


def host(t: oplib.Tensor) -> np.ndarray:
    return t.to("cpu").numpy()


# -- the backend ------------------------------------------------------------------------


def test_backend_is_listed_with_devices():
    b = oplib.backends.get("privateuse1")
    assert b.key == "PrivateUse1"
    assert b.distribution == "oplib-privateuse"
    row = next(r for r in backend_rows() if r["name"] == "privateuse1")
    assert row["available"] is True and row["reason"] is None
    assert row["device_count"] == 2
    assert row["ops"] >= 60  # the whole core op set + rand/randn


@pytest.mark.parametrize(
    ("value", "count", "reason"),
    [
        ("3", 3, None),
        ("0", 0, "no privateuse1 device (OPLIB_PRIVATEUSE1_DEVICES=0)"),
        ("lots", 0, "OPLIB_PRIVATEUSE1_DEVICES must be a non-negative integer, got 'lots'"),
    ],
)
def test_device_count_from_environment(value, count, reason):
    out = run_python(
        """
        import oplib_core as oplib
        b = oplib.backends.get("privateuse1")
        OUT["count"] = b.device_count()
        OUT["reason"] = b.status()
        OUT["module_count"] = oplib.privateuse1.device_count()
        OUT["last"] = catch(oplib.zeros, 1, device="privateuse1:2")
    """,
        env={"OPLIB_PRIVATEUSE1_DEVICES": value},
    )
    assert out["count"] == out["module_count"] == count
    assert out["reason"] == reason
    if count == 3:
        assert out["last"] is None
    else:
        assert out["last"][0] == "BackendError" and "privateuse1:2 does not exist" in out["last"][1]


# -- ops on the device match the CPU ----------------------------------------------------

_A = np.array([[0.5, -1.0, 2.0], [3.0, 0.25, -4.0]], dtype=np.float32)
_B = np.array([[1.0, 2.0, -0.5], [0.5, 4.0, 1.0]], dtype=np.float32)

CASES = {
    "neg": lambda a, b: -a,
    "exp": lambda a, b: a.exp(),
    "sigmoid": lambda a, b: oplib.ops.oplib.sigmoid(a),
    "relu": lambda a, b: a.relu(),
    "abs": lambda a, b: abs(a),
    "add": lambda a, b: a + b,
    "sub_scalar": lambda a, b: a - 2.0,
    "rsub": lambda a, b: 2.0 - a,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: abs(a) ** 1.5,
    "maximum": lambda a, b: oplib.ops.oplib.maximum(a, b),
    "lt": lambda a, b: a < b,
    "where": lambda a, b: oplib.ops.oplib.where(a > b, a, b),
    "sum_all": lambda a, b: a.sum(),
    "sum_dim": lambda a, b: a.sum([1], keepdim=True),
    "mean": lambda a, b: a.mean([0]),
    "amax": lambda a, b: oplib.ops.oplib.amax(a, [1]),
    "matmul": lambda a, b: a @ b.T,
    "transpose": lambda a, b: a.transpose(0, 1),
    "reshape": lambda a, b: a.reshape(3, 2),
    "unsqueeze": lambda a, b: oplib.ops.oplib.unsqueeze(a, 0),
    "broadcast": lambda a, b: oplib.ops.oplib.broadcast_to(a, [2, 2, 3]),
    "cat": lambda a, b: oplib.ops.oplib.cat([a, b], 1),
    "stack": lambda a, b: oplib.ops.oplib.stack([a, b]),
    "clone": lambda a, b: a.clone(),
    "astype": lambda a, b: oplib.ops.oplib.astype(a, np.dtype("int32")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_core_ops_on_device_match_cpu(name):
    fn = CASES[name]
    expected = fn(oplib.tensor(_A), oplib.tensor(_B))
    a, b = oplib.tensor(_A, device=P1), oplib.tensor(_B, device=P1)
    got = fn(a, b)
    assert got.device == oplib.device(P1)
    assert isinstance(got.native, DeviceArray)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(host(got), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    ("factory", "kwargs"),
    [
        (oplib.zeros, {}),
        (oplib.ones, {"dtype": np.int32}),
        (oplib.empty, {}),
    ],
)
def test_factories_honour_the_device_index(factory, kwargs):
    t = factory(2, 3, device=P1, **kwargs)
    assert t.device == oplib.device(P1) and t.shape == (2, 3)
    pu.set_device(1)
    assert factory(2, device="privateuse1", **kwargs).device == oplib.device(P1)
    assert oplib.arange(4, device=P1).tolist() == [0, 1, 2, 3]
    assert oplib.full([2], 7.0, device=P0).tolist() == [7.0, 7.0]


def test_native_device_arrays_in_native_arrays_out():
    a = oplib.tensor(_A, device=P0).native
    out = oplib.ops.oplib.add(a, a)
    assert isinstance(out, DeviceArray) and out.device_index == 0
    assert "DeviceArray(" in repr(out) and "privateuse1:0" in repr(out)


def test_third_party_kernel_for_privateuse1(ns):
    oplib.define(f"{ns}::twice", "(Tensor x) -> Tensor")
    seen = []

    @oplib.register_kernel(f"{ns}::twice", "privateuse1")
    def twice(x):
        seen.append(type(x))
        return x * 2

    out = getattr(oplib.ops, ns).twice(oplib.tensor([1.0, 2.0], device=P1))
    assert seen == [DeviceArray]
    assert out.device == oplib.device(P1) and out.tolist() == [2.0, 4.0]


# -- memory is the device's own ----------------------------------------------------------


def test_device_memory_is_separate_from_host_arrays():
    src = np.array([1.0, 2.0], dtype=np.float32)
    t = oplib.tensor(src, device=P0)
    src[0] = 100.0
    assert t.tolist() == [1.0, 2.0]  # copied in
    back = host(t)
    back[1] = -5.0
    assert t.tolist() == [1.0, 2.0]  # copied out
    with pytest.raises(TypeError, match="cannot be converted to numpy implicitly"):
        np.asarray(t.native)
    with pytest.raises(TypeError, match="can't convert a privateuse1:0 tensor to numpy"):
        t.numpy()
    with pytest.raises(TypeError, match="copy it to the device first"):
        _ = t.native + src
    with pytest.raises(TypeError, match="copy it to the device first"):
        _ = src + t.native
    with pytest.raises(TypeError, match="not directly"):
        DeviceArray()


def test_memory_accounting_per_device():
    before0, before1 = pu.memory_allocated(0), pu.memory_allocated(1)
    t = oplib.zeros(1000, dtype=np.float64, device=P1)
    assert pu.memory_allocated(1) == before1 + 8000
    assert pu.memory_allocated(0) == before0
    view = t.reshape(10, 100)  # a view: no new memory
    assert pu.memory_allocated(1) == before1 + 8000
    assert pu.max_memory_allocated(1) >= before1 + 8000
    del t
    assert pu.memory_allocated(1) == before1 + 8000  # the view keeps it alive
    del view
    assert pu.memory_allocated(1) == before1


def test_mixed_devices_raise():
    c = oplib.tensor([1.0, 2.0])
    p0 = oplib.tensor([1.0, 2.0], device=P0)
    p1 = oplib.tensor([1.0, 2.0], device=P1)
    with pytest.raises(DeviceMismatchError, match="expected all tensor arguments on one device"):
        _ = c + p0
    with pytest.raises(DeviceMismatchError) as info:
        _ = p0 + p1
    assert info.value.devices == {"self": P0, "other": P1}
    with pytest.raises(ValueError, match="expected arrays on privateuse1:0, got one on"):
        _ = p0.native + p1.native
    # 0-d CPU tensors are scalars and move to the device
    assert (p1 + oplib.tensor(1.0)).device == oplib.device(P1)


def test_to_round_trips():
    c = oplib.tensor(_A)
    p0 = c.to(P0)
    p1 = p0.to(P1)
    assert p0.device == oplib.device(P0) and p1.device == oplib.device(P1)
    np.testing.assert_array_equal(host(p1), _A)
    assert p1.to(P1) is p1
    assert p1.to("privateuse1", copy=True) is not p1
    d = p1.to(P0, np.float64)
    assert d.device == oplib.device(P0) and d.dtype == np.float64
    np.testing.assert_array_equal(host(d), _A.astype(np.float64))
    assert p0.sum().item() == pytest.approx(float(_A.sum()))


def test_factory_on_missing_device_index():
    with pytest.raises(BackendError, match=r"privateuse1:5 does not exist: there are 2"):
        oplib.tensor([1.0], device="privateuse1:5")


# -- device module -----------------------------------------------------------------------


def test_device_module_api():
    assert oplib.privateuse1 is pu
    assert pu.is_available() is True
    assert pu.device_count() == 2
    assert pu.current_device() == 0
    pu.set_device("privateuse1:1")
    assert pu.current_device() == 1
    pu.set_device(0)
    with pytest.raises(IndexError, match="privateuse1:2 does not exist"):
        pu.set_device(2)
    with pytest.raises(RuntimeError, match="must be privateuse1 device"):
        pu.set_device("cpu")
    pu.synchronize()
    pu.synchronize(1)
    with pytest.raises(IndexError, match="does not exist"):
        pu.synchronize(7)
    assert np.dtype(np.float16) in pu.get_amp_supported_dtype()
    assert pu._is_in_bad_fork() is False
    assert br._get_custom_mod_func("current_device")() == 0


def _rand(device: str, n: int = 4) -> np.ndarray:
    return host(oplib.tensor(oplib.ops.privateuse.rand([n], device=device)))


def test_rng_reproducible_per_device():
    pu.manual_seed_all(123)
    a0, a1 = _rand(P0), _rand(P1)
    np.testing.assert_array_equal(a0, a1)  # same seed on every device
    pu.manual_seed_all(123)
    np.testing.assert_array_equal(_rand(P0), a0)
    # devices have their own state: drawing on 0 does not move 1
    pu.manual_seed_all(5)
    _rand(P0), _rand(P0)
    first1 = _rand(P1)
    pu.manual_seed_all(5)
    np.testing.assert_array_equal(_rand(P1), first1)
    # manual_seed seeds only the current device
    pu.manual_seed_all(1)
    seed1 = _rand(P0)
    pu.manual_seed_all(1)
    pu.set_device(1)
    pu.manual_seed(9)
    np.testing.assert_array_equal(_rand(P0), seed1)  # device 0 untouched
    assert not np.array_equal(_rand(P1), seed1)  # device 1 reseeded with 9


def test_rng_state_round_trip():
    pu.manual_seed_all(0)
    state = pu.get_rng_state(1)
    assert state.dtype == np.uint8 and state.shape == (37,)
    first = _rand(P1)
    pu.set_rng_state(state, "privateuse1:1")
    np.testing.assert_array_equal(_rand(P1), first)
    with pytest.raises(ValueError, match="uint8 array of 37 bytes"):
        pu.set_rng_state(np.zeros(3, np.uint8))
    with pytest.raises(TypeError, match="expected an int seed"):
        pu.manual_seed_all(1.5)  # type: ignore[arg-type]


def test_randn_dtype_and_device():
    r = oplib.tensor(oplib.ops.privateuse.randn([3, 2], dtype=np.float64, device=P1))
    assert r.device == oplib.device(P1) and r.dtype == np.float64 and r.shape == (3, 2)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        oplib.ops.privateuse.rand([2], dtype=np.int32, device=P0)


# -- a vendor package, installed for real ------------------------------------------------


@pytest.mark.slow
def test_vendor_package_in_fresh_virtualenv(tmp_path):
    """examples/vendor_npu renames privateuse1 to npu and adds a kernel through entry points;
    installed with oplib-core, oplib-cpu and oplib-privateuse into a new virtualenv."""
    start = time.monotonic()
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=60
    )
    py = venv / "bin" / "python"
    vendor = tmp_path / "vendor_npu"
    shutil.copytree(
        ROOT / "examples" / "vendor_npu",
        vendor,
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTHON"))}
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # setuptools' editable builds without build isolation need the wheel package and
    # setuptools>=77 (PEP 639 license expressions); rich (the oplib command), ml_dtypes
    # (bfloat16/float8) and array-api-compat (the core kernels) are core's dependencies the
    # system site may lack
    subprocess.run(
        [*pip, "wheel", "setuptools>=77", "rich", "ml_dtypes", "array-api-compat"],
        check=True,
        timeout=120,
        env=env,
    )
    subprocess.run(
        [
            *pip,
            "--no-build-isolation",
            "--no-deps",
            "-e",
            str(ROOT),
            "-e",
            str(ROOT / "plugins" / "cpu"),
            "-e",
            str(ROOT / "plugins" / "privateuse"),
            "-e",
            str(vendor),
        ],
        check=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    proc = subprocess.run(
        [str(py), str(vendor / "use_npu.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "devices: 2 current: 0" in proc.stdout
    assert "device='npu:1'" in proc.stdout
    assert proc.stdout.strip().endswith("npu OK")
    listing = subprocess.run(
        [str(venv / "bin" / "oplib"), "backends", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    assert "npu" in listing.stdout and "privateuse1" not in listing.stdout
    assert time.monotonic() - start < 120
