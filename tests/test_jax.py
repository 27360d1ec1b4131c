"""The jax backend (``plugins/jax``, oplib-jax) in process, with jax[cpu] installed."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.errors import BackendDtypeError, NoKernelError
from oplib_core.testing._runner import check_ops

from subproc import run_python

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from oplib_jax.plugin import JaxDtypeError  # noqa: E402  (after the importorskip)

pytestmark = pytest.mark.skipif(jax.config.jax_enable_x64, reason="these tests pin x64 off")


def test_backend_is_listed_with_jax_devices():
    b = oplib.backends.get("jax")
    assert b.is_available() and b.distribution == "oplib-jax"
    assert b.device_count() == len(jax.devices())
    assert oplib.backends.for_type(type(jnp.ones(2))) is b


def test_core_ops_and_autograd_on_jax_arrays():
    x = oplib.tensor([1.0, 2.0, 3.0], device="jax", requires_grad=True)
    assert isinstance(x._data, jax.Array) and x.device == oplib.device("jax:0")
    y = (x * x).sum()
    y.backward()
    assert isinstance(x.grad._data, jax.Array)
    np.testing.assert_allclose(x.grad.to("cpu").numpy(), [2.0, 4.0, 6.0])


def test_native_jax_arrays_in_native_arrays_out():
    out = oplib.ops.oplib.add(jnp.ones(3), jnp.arange(3, dtype=jnp.float32))
    assert isinstance(out, jax.Array)
    np.testing.assert_array_equal(np.asarray(out), [1.0, 2.0, 3.0])


def test_dlpack_in_and_out():
    # wherever JAX's arrays live (cpu, or a GPU where it is JAX's default platform)
    x = jnp.arange(4, dtype=jnp.float32)
    (dev,) = x.devices()
    t = oplib.from_dlpack(x)
    assert t.device == oplib.device("jax", jax.devices().index(dev))  # its own backend
    assert t.__dlpack_device__() == tuple(int(v) for v in x.__dlpack_device__())
    np.testing.assert_array_equal(t.cpu().numpy(), [0, 1, 2, 3])
    back = jnp.from_dlpack(oplib.ones(2, device="jax"))
    assert isinstance(back, jax.Array) and back.devices() == {jax.devices()[0]}
    assert oplib.from_dlpack(oplib.tensor(x)).device.type == "jax"  # a Tensor too
    # a host capsule of another library stays on cpu (jax is below cpu in priority)
    assert oplib.from_dlpack(np.ones(2, np.float32)).device.type == "cpu"


def test_64_bit_mode_is_read_never_switched():
    assert not jax.config.jax_enable_x64
    dtypes = oplib.backends.get("jax").spec.dtypes()
    assert np.dtype("float64") not in dtypes and np.dtype("int64") not in dtypes
    assert np.dtype("float32") in dtypes and oplib.bfloat16 in dtypes
    # (copies are refused by core, from BackendSpec.dtypes, quoting the backend's hint)
    with pytest.raises(BackendDtypeError, match=r"no float64 dtype.*64-bit mode is off.*x64"):
        oplib.tensor(np.ones(2), device="jax")
    # (and so are dtype arguments, by core for every backend: one BackendDtypeError)
    with pytest.raises(BackendDtypeError, match=r"oplib::zeros\(\): backend 'jax' has no int64"):
        oplib.zeros(2, dtype=oplib.int64, device="jax")
    # a 64-bit default chosen inside the kernel (torch's int64 arange) is an error, not
    # JAX's silent truncation to int32
    with pytest.raises(JaxDtypeError, match="would be int64") as info:
        oplib.arange(3, device="jax")
    assert info.value.dtype == np.dtype("int64")
    assert isinstance(info.value, BackendDtypeError) and info.value.backend == "jax"
    assert oplib.arange(3, dtype=oplib.int32, device="jax").dtype == np.dtype("int32")
    assert not jax.config.jax_enable_x64


def test_in_place_ops_say_jax_arrays_are_immutable():
    x = oplib.zeros(2, device="jax")
    with pytest.raises(NoKernelError, match="JAX arrays are immutable"):
        x.copy_(oplib.ones(2, device="jax"))


def test_oplib_check_passes_with_unsupported_dtypes_skipped():
    report = check_ops(backends=["jax"])
    assert not report.failed, [r.reason for r in report.rows if r.status == "FAIL"]
    reasons = {r.reason for r in report.rows if r.status == "SKIP"}
    assert any("does not support dtype float64" in r for r in reasons)
    assert sum(r.status == "PASS" for r in report.rows) > 200


def test_missing_jax_backend_is_named(monkeypatch):
    from oplib_core import backends

    jax_backend = backends.TABLE.find("jax")
    monkeypatch.setattr(backends.TABLE, "find", lambda n: None if n == "jax" else jax_backend)
    assert backends.TABLE.missing_for(type(jnp.ones(1))) == (
        "the jax backend (oplib-jax) is not installed"
    )


def test_integer_sums_would_be_int64_so_they_raise():
    x = oplib.tensor(np.arange(3, dtype=np.int32), device="jax")
    with pytest.raises(JaxDtypeError, match="oplib::sum on jax: the result would be int64"):
        x.sum()
    assert x.sum(dtype=oplib.int32).item() == 3


def test_device_index_out_of_range():
    n = len(jax.devices())
    with pytest.raises(oplib.errors.BackendError, match=rf"jax:{n}: JAX reports {n} device"):
        oplib.zeros(2, device=f"jax:{n}")


def test_a_jax_tensor_round_trips_through_the_host():
    t = oplib.tensor([1.5, 2.5], device="jax")
    host = t.to("cpu").numpy()
    host[0] = 9.0  # a writable copy, not JAX's read-only buffer
    assert t.to("cpu").numpy().tolist() == [1.5, 2.5]
    assert oplib.tensor(host).to("jax").device.type == "jax"


def test_loading_the_plugin_does_not_import_jax():
    out = run_python("""
        import sys
        import oplib_core as oplib
        oplib.plugins.load()
        (oplib.tensor([1.0]) + 1).sum()
        OUT["listed"] = "jax" in [b.name for b in oplib.backends.list()]
        OUT["imported"] = "jax" in sys.modules
    """)
    assert out == {"listed": True, "imported": False}


def test_backends_list_does_not_import_jax_unless_asked_to_probe():
    out = run_python("""
        import sys
        from oplib_core import _introspect
        row = next(r for r in _introspect.backend_rows() if r["name"] == "jax")
        OUT["lazy"] = [row["available"], row["device_count"], "jax" in sys.modules]
        OUT["reason"] = row["reason"]
        row = next(r for r in _introspect.backend_rows(probe=True) if r["name"] == "jax")
        OUT["probed"] = [row["available"], row["device_count"], "jax" in sys.modules]
    """)
    assert out["lazy"] == [None, None, False]
    assert out["reason"] == "not probed (jax is not imported yet; --probe imports it)"
    assert out["probed"][0] is True and out["probed"][1] >= 1 and out["probed"][2] is True


def test_with_x64_on_every_dtype_works():
    out = run_python(
        """
        import numpy as np, jax, oplib_core as oplib
        t = oplib.tensor(np.ones(2), device="jax")
        OUT["dtype"] = str(t.dtype)
        OUT["arange"] = str(oplib.arange(3, device="jax").dtype)
        OUT["float64"] = np.dtype("float64") in oplib.backends.get("jax").spec.dtypes()
        """,
        env={"JAX_ENABLE_X64": "1"},
    )
    assert out == {"dtype": "float64", "arange": "int64", "float64": True}


def test_opcheck_skips_jax_for_a_dtype_it_cannot_hold():
    x = oplib.tensor(np.linspace(0.5, 1.5, 3), requires_grad=True)  # float64, on cpu
    res = oplib.opcheck(oplib.ops.oplib.sin.default, (x,))
    (row,) = [r for r in res.details if r.backend == "jax"]
    assert row.check == "test_backends" and row.status == "SKIP"
    assert "does not support dtype float64" in row.reason


def test_the_mode_is_read_at_each_call_when_the_user_switches_it():
    out = run_python("""
        import numpy as np, jax, oplib_core as oplib
        OUT["before"] = catch(oplib.tensor, np.ones(2), device="jax")[0]
        jax.config.update("jax_enable_x64", True)  # the user's own decision
        OUT["after"] = str(oplib.tensor(np.ones(2), device="jax").dtype)
    """)
    assert out == {"before": "BackendDtypeError", "after": "float64"}


# -- JAX beside cupy and torch on one GPU: no preallocation of 75% behind the user's back ----

MEMORY_SETTINGS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)


def memory_settings_after(first: str, **given: str) -> dict:
    """In a fresh interpreter with none of JAX's memory variables but ``given`` (conftest
    sets one for the suite's own processes): run ``first``, then let oplib-jax import jax;
    the variables then, and whether jax was imported before oplib-jax imported it."""
    return run_python(f"""
        import os, sys
        for name in {MEMORY_SETTINGS!r}:
            os.environ.pop(name, None)
        os.environ.update({given!r})
        {first}
        import oplib_core as oplib
        OUT["imported_before"] = "jax" in sys.modules
        oplib.zeros(2, device="jax")
        OUT["env"] = {{n: os.environ[n] for n in {MEMORY_SETTINGS!r} if n in os.environ}}
    """)


def test_importing_jax_through_oplib_turns_preallocation_off():
    out = memory_settings_after("")
    assert out["imported_before"] is False
    assert out["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    # an empty value is no choice (JAX reads it as unset)
    assert memory_settings_after("", XLA_PYTHON_CLIENT_PREALLOCATE="")["env"] == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false"
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
        ("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5"),
        ("XLA_CLIENT_MEM_FRACTION", ".5"),
        ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
    ],
)
def test_a_memory_setting_of_the_user_is_kept(name, value):
    assert memory_settings_after("", **{name: value})["env"] == {name: value}


def test_a_user_who_imported_jax_first_keeps_jax_defaults():
    out = memory_settings_after("import jax")
    assert out["imported_before"] is True and out["env"] == {}


def test_jax_reads_the_setting_as_no_preallocation():
    # the variable and value are the ones JAX's GPU client is made with (read on a CPU too)
    xla_client = pytest.importorskip("jaxlib.xla_client")
    if not hasattr(xla_client, "generate_pjrt_gpu_plugin_options"):
        pytest.skip("this jaxlib makes its GPU client options elsewhere")
    out = run_python("""
        import os
        os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
        import oplib_core as oplib
        oplib.zeros(2, device="jax")
        from jaxlib import xla_client
        OUT["preallocate"] = xla_client.generate_pjrt_gpu_plugin_options().get("preallocate")
    """)
    assert out["preallocate"] is False


@pytest.mark.cuda
def test_jax_through_oplib_leaves_the_gpu_to_others():
    if jax.default_backend() != "gpu":
        pytest.skip(f"JAX's default platform is {jax.default_backend()}, not a GPU")
    cp = pytest.importorskip("cupy")
    out = run_python("""
        import os
        os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
        import cupy as cp
        import oplib_core as oplib
        free_before, total = cp.cuda.runtime.memGetInfo()
        x = oplib.ones(1024, device="jax")  # JAX's GPU client starts here
        float(x.sum().item())
        free_after, _ = cp.cuda.runtime.memGetInfo()
        OUT["taken"] = (free_before - free_after) / total
        OUT["env"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    """)
    assert cp.cuda.runtime.getDeviceCount() >= 1
    assert out["env"] == "false"
    assert out["taken"] < 0.1, f"JAX took {out['taken']:.0%} of the GPU"
