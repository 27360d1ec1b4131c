"""The private-use slot and device modules (``oplib_core.backend_registration``).

Renaming is once per process, so every test that renames (or generates Tensor methods)
runs in a fresh interpreter; the rest runs in process against the unrenamed
``privateuse1`` backend of oplib-privateuse.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import backend_registration as br
from oplib_core._device import Device

from subproc import run_python

pytestmark = pytest.mark.skipif(
    br._get_privateuse1_backend_name() != "privateuse1",
    reason="the private-use backend is renamed in this process (OPLIB_PRIVATEUSE1_NAME?)",
)


@pytest.fixture
def current_device_restored():
    yield
    oplib.privateuse1.set_device(0)


# -- rename_privateuse1_backend ---------------------------------------------------------


def test_rename_renames_backend_key_and_device_module():
    out = run_python("""
        import oplib_core as oplib
        from oplib_core import backend_registration as br
        import oplib_privateuse.device as devmod
        OUT["before"] = br._get_privateuse1_backend_name()
        oplib.rename_privateuse1_backend("npu")
        OUT["after"] = br._get_privateuse1_backend_name()
        OUT["names"] = [b.name for b in oplib.backends.list()]
        OUT["key"] = oplib.backends.get("npu").key
        OUT["alias"] = oplib.backends.get("privateuse1").name
        OUT["module"] = oplib.npu is devmod
        OUT["again"] = catch(oplib.rename_privateuse1_backend, "npu")
        OUT["other"] = catch(oplib.rename_privateuse1_backend, "xpu9")
        OUT["name_kept"] = br._get_privateuse1_backend_name()
        t = oplib.tensor([1.0, 2.0], device="npu:1")
        OUT["device"] = str(t.device)
        OUT["sum"] = (t + t).sum().item()
    """)
    assert out["before"] == "privateuse1"
    assert out["after"] == "npu"
    assert "npu" in out["names"] and "privateuse1" not in out["names"]
    assert out["key"] == "PrivateUse1"
    assert out["alias"] == "npu"
    assert out["module"] is True
    assert out["again"] is None
    assert out["other"][0] == "BackendNameError"  # a BackendError and a ValueError
    assert "already renamed to 'npu'" in out["other"][1] and "only once" in out["other"][1]
    assert out["name_kept"] == "npu"
    assert out["device"] == "npu:1"
    assert out["sum"] == 6.0


def test_rename_rejects_bad_names_and_leaves_state_alone():
    out = run_python("""
        import oplib_core as oplib
        from oplib_core import backend_registration as br
        oplib.backends.register(oplib.BackendSpec(name="toyx", array_types=(bytearray,)))
        for name in ["Npu", "my-npu", "1npu", "cpu", "cuda", "privateuse1", "default",
                     "toyx", "tensor", 3]:
            OUT[str(name)] = catch(oplib.rename_privateuse1_backend, name)
        OUT["still"] = br._get_privateuse1_backend_name()
        OUT["later_ok"] = catch(oplib.rename_privateuse1_backend, "npu")
    """)
    for name in ("Npu", "my-npu", "1npu"):
        assert out[name][0] == "BackendNameError"
        assert "lower-case Python identifier" in out[name][1]
    for name in ("cpu", "cuda", "default"):
        assert out[name][0] == "BackendNameError" and "well-known backend" in out[name][1]
    assert out["privateuse1"][0] == "BackendNameError"
    assert "slot's own name" in out["privateuse1"][1]
    assert out["toyx"][0] == "BackendNameError" and "already installed" in out["toyx"][1]
    assert out["tensor"][0] == "BackendNameError" and "oplib_core.tensor" in out["tensor"][1]
    assert out["3"][0] == "ArgumentTypeError"
    assert out["still"] == "privateuse1"
    assert out["later_ok"] is None


def test_rename_moves_kernels_and_maps_key_names():
    out = run_python("""
        import oplib_core as oplib
        from oplib_core._registry.registry import REGISTRY
        oplib.define("vend::f", "(Tensor x) -> Tensor")
        oplib.define("vend::g", "(Tensor x) -> Tensor")
        h = oplib.impl("vend::f", "PrivateUse1", lambda x: x + 1)
        oplib.register_kernel("vend::g", "npu", lambda x: x * 10)
        OUT["f_before"] = sorted(REGISTRY.ops["vend::f"].kernels)
        OUT["g_before"] = REGISTRY.kernel_status("npu")
        oplib.rename_privateuse1_backend("npu")
        OUT["f_after"] = sorted(REGISTRY.ops["vend::f"].kernels)
        OUT["g_after"] = REGISTRY.kernel_status("npu")
        x = oplib.tensor([1.0, 2.0], device="npu:0")
        OUT["f"] = oplib.ops.vend.f(x).tolist()
        OUT["g"] = oplib.ops.vend.g(x).tolist()
        oplib.define("vend::k", "(Tensor x) -> Tensor")
        oplib.impl("vend::k", "privateuse1", lambda x: x)
        OUT["k_keys"] = sorted(REGISTRY.ops["vend::k"].kernels)
        h = [k for k in REGISTRY.ops["vend::f"].kernels["npu"]]
    """)
    assert out["f_before"] == ["privateuse1"]
    assert out["g_before"] == "waiting"
    assert out["f_after"] == ["npu"]
    assert out["g_after"] == "live"
    assert out["f"] == [2.0, 3.0]
    assert out["g"] == [10.0, 20.0]
    assert out["k_keys"] == ["npu"]


def test_kernel_handle_still_undoes_after_rename():
    out = run_python("""
        import oplib_core as oplib
        from oplib_core._registry.registry import REGISTRY
        lib = oplib.Library("vend", "DEF")
        lib.define("f(Tensor x) -> Tensor")
        lib.impl("f", lambda x: x, "PrivateUse1")
        oplib.rename_privateuse1_backend("npu")
        OUT["before"] = sorted(REGISTRY.ops["vend::f"].kernels)
        lib._destroy()
        OUT["gone"] = "vend::f" not in REGISTRY.ops
        lib2 = oplib.Library("vend2", "FRAGMENT")
        lib2.define("h(Tensor x) -> Tensor")
        h = oplib.impl("vend2::h", "privateuse1", lambda x: x, lib=lib2)
        OUT["h"] = sorted(REGISTRY.ops["vend2::h"].kernels)
    """)
    assert out["before"] == ["npu"]
    assert out["gone"] is True
    assert out["h"] == ["npu"]


def test_rename_conflict_names_both_kernels_and_changes_nothing():
    out = run_python("""
        import oplib_core as oplib
        from oplib_core import backend_registration as br
        from oplib_core._registry.registry import REGISTRY
        oplib.define("vend::f", "(Tensor x) -> Tensor")
        oplib.impl("vend::f", "PrivateUse1", lambda x: x + 1)
        oplib.impl("vend::f", "npu", lambda x: x + 2)
        OUT["err"] = catch(oplib.rename_privateuse1_backend, "npu")
        OUT["name"] = br._get_privateuse1_backend_name()
        OUT["keys"] = sorted(REGISTRY.ops["vend::f"].kernels)
        OUT["backend"] = oplib.backends.get("privateuse1").name
        oplib.define("vend::g", "(Tensor x) -> Tensor")
        oplib.impl("vend::g", "PrivateUse1", lambda x: x + 1)
        oplib.register_kernel("vend::g", "npu2", lambda x: x + 2, allow_override=True)
        oplib.rename_privateuse1_backend("npu2")
        OUT["g"] = oplib.ops.vend.g(oplib.tensor([0.0], device="npu2:0")).tolist()
    """)
    err_type, msg = out["err"]
    assert err_type == "RegistrationError"
    assert "vend::f" in msg and "allow_override=True" in msg and msg.count("<string>:") == 2
    assert out["name"] == "privateuse1"
    assert out["keys"] == ["npu", "privateuse1"]
    assert out["backend"] == "privateuse1"
    assert out["g"] == [2.0]  # the override registered for the new name serves


def test_rename_before_the_backend_registers_applies_to_it():
    out = run_python("""
        import oplib_core as oplib
        import oplib_privateuse.plugin as pu
        oplib.plugins.unregister("privateuse")
        OUT["gone"] = [b.name for b in oplib.backends.list()]
        oplib.rename_privateuse1_backend("npu")
        oplib.plugins.register(pu, name="privateuse-again")
        OUT["names"] = [b.name for b in oplib.backends.list()]
        OUT["value"] = oplib.tensor([3.0], device="npu").tolist()
    """)
    assert "privateuse1" not in out["gone"]
    assert "npu" in out["names"] and "privateuse1" not in out["names"]
    assert out["value"] == [3.0]


def test_env_var_renames_at_plugin_load():
    out = run_python(
        """
        import oplib_core as oplib
        import oplib_privateuse.device as devmod
        OUT["names"] = [b.name for b in oplib.backends.list()]
        OUT["module"] = oplib.npu is devmod
        OUT["alias"] = oplib.privateuse1 is devmod  # renamed before it registered
        OUT["count"] = oplib.npu.device_count()
    """,
        env={"OPLIB_PRIVATEUSE1_NAME": "npu"},
    )
    assert "npu" in out["names"] and "privateuse1" not in out["names"]
    assert out["module"] is True
    assert out["alias"] is True
    assert out["count"] == 2


def test_bad_env_name_fails_the_plugin_not_the_import():
    out = run_python(
        """
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import oplib_core as oplib
            oplib.plugins.load()  # plugins load on first use; their warnings come then
        rec = {r.name: r for r in oplib.plugins.list()}["privateuse"]
        OUT["status"] = rec.status
        OUT["error"] = rec.error
        OUT["names"] = [b.name for b in oplib.backends.list()]
        OUT["warned"] = any("privateuse" in str(x.message) for x in w)
    """,
        env={"OPLIB_PRIVATEUSE1_NAME": "Not-A-Name"},
    )
    assert out["status"] == "failed"
    assert "lower-case Python identifier" in out["error"]
    assert "privateuse1" not in out["names"] and "cpu" in out["names"]
    assert out["warned"] is True


def test_core_applies_env_name_to_any_plugins_privateuse1_backend():
    # The shipped template no longer reads OPLIB_PRIVATEUSE1_NAME: the core applies it when
    # a plugin's oplib_backends returns a backend named privateuse1, whoever wrote it.
    code = """
        import warnings
        import oplib_core as oplib

        class Arr:
            pass

        class Vendor:
            __name__ = "vendor"

            @oplib.hookimpl
            def oplib_backends(self):
                return [oplib.BackendSpec(name="privateuse1", key="PrivateUse1",
                                          array_types=(Arr,))]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rec = oplib.plugins.register(Vendor(), name="vendor")
        OUT["status"] = rec.status
        OUT["error"] = rec.error
        OUT["names"] = [b.name for b in oplib.backends.list()]
        OUT["name"] = oplib.backend_registration.privateuse1_backend_name()
    """
    env = {"OPLIB_DISABLE_PLUGINS": "privateuse"}
    out = run_python(code, env={**env, "OPLIB_PRIVATEUSE1_NAME": "npu"})
    assert out["status"] == "loaded" and "npu" in out["names"] and out["name"] == "npu"
    out = run_python(code, env={**env, "OPLIB_PRIVATEUSE1_NAME": "Not-A-Name"})
    assert out["status"] == "failed" and "BackendNameError" in out["error"]
    assert "privateuse1" not in out["names"] and out["name"] == "privateuse1"  # rolled back
    out = run_python(code, env=env)  # unset: the slot keeps its name
    assert out["status"] == "loaded" and "privateuse1" in out["names"]


# -- generated methods ----------------------------------------------------------------


def test_generated_tensor_methods():
    out = run_python("""
        import oplib_core as oplib
        import numpy as np
        oplib.rename_privateuse1_backend("npu")
        oplib.generate_methods_for_privateuse1_backend()
        t = oplib.tensor([1.0, 2.0])
        OUT["is_cpu_npu"] = t.is_npu
        OUT["dev"] = str(t.npu().device)
        OUT["dev1"] = str(t.npu(1).device)
        OUT["dev1s"] = str(t.npu("npu:1").device)
        oplib.npu.set_device(1)
        OUT["current"] = str(t.npu().device)
        u = t.npu(1)
        OUT["is_npu"] = u.is_npu
        OUT["same"] = u.npu(1) is u
        OUT["values"] = u.tolist()
        OUT["wrong"] = catch(t.npu, "cpu")
        OUT["twice"] = catch(oplib.generate_methods_for_privateuse1_backend)
        OUT["name"] = oplib.Tensor.npu.__name__
    """)
    assert out["is_cpu_npu"] is False
    assert out["dev"] == "npu:0"
    assert out["dev1"] == out["dev1s"] == "npu:1"
    assert out["current"] == "npu:1"
    assert out["is_npu"] is True and out["same"] is True
    assert out["values"] == [1.0, 2.0]
    assert out["wrong"][0] == "InvalidDeviceError" and "must be npu device" in out["wrong"][1]
    assert out["twice"][0] == "RegistrationError"
    assert "already been registered with is_npu" in out["twice"][1]
    assert out["name"] == "npu"


def test_generated_methods_unrenamed_unsupported_dtype_and_storage():
    out = run_python("""
        import warnings
        import oplib_core as oplib
        import numpy as np
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            oplib.generate_methods_for_privateuse1_backend(
                for_storage=True, unsupported_dtype=[np.float64]
            )
        OUT["warned"] = [(w.category.__name__, str(w.message)) for w in record]
        OUT["ok"] = str(oplib.tensor([1.0]).privateuse1().device)
        OUT["refused"] = catch(oplib.tensor(np.array([1.0])).privateuse1)
    """)
    [(category, message)] = out["warned"]
    assert category == "UserWarning" and "no Storage" in message and "for_storage" in message
    assert out["ok"] == "privateuse1:0"
    assert out["refused"][0] == "BackendError" and "float64" in out["refused"][1]


def test_generate_never_half_registers():
    out = run_python("""
        import oplib_core as oplib
        oplib.rename_privateuse1_backend("numpy")  # Tensor.numpy() exists already
        OUT["err"] = catch(oplib.generate_methods_for_privateuse1_backend)
        OUT["is_attr"] = hasattr(oplib.Tensor, "is_numpy")
    """)
    assert out["err"][0] == "RegistrationError" and "registered with numpy" in out["err"][1]
    assert out["is_attr"] is False


# -- device modules ---------------------------------------------------------------------


def test_register_device_module(teardown, toy):
    mod = types.ModuleType("toy_module")
    mod.device_count = lambda: 7
    undo = oplib.register_device_module("toy", mod)  # an installed backend's name
    teardown(undo)
    assert oplib.toy is mod
    from oplib_core import toy

    assert toy.device_count() == 7
    with pytest.raises(RuntimeError, match="runtime module of 'toy' has already been"):
        oplib.register_device_module("toy", types.ModuleType("other"))
    with pytest.raises(RuntimeError, match="runtime module of 'tensor'"):
        oplib.register_device_module("tensor", types.ModuleType("other"))
    with pytest.raises(RuntimeError, match="runtime module of 'cuda'"):
        oplib.register_device_module("cuda", types.ModuleType("other"))
    with pytest.raises(TypeError, match="expected a device type"):
        oplib.register_device_module(3, mod)
    undo()
    with pytest.raises(AttributeError, match="no attribute 'toy'"):
        _ = oplib.toy


def test_register_device_module_refuses_unknown_device_types():
    # torch: torch.device("mydev") raises RuntimeError "Expected one of cpu, cuda, ...
    # device type at start of device string: mydev"
    with pytest.raises(oplib.DeviceModuleError) as info:
        oplib.register_device_module("mydev", types.ModuleType("m"))
    assert isinstance(info.value, RuntimeError)
    assert "device type at start of device string: mydev" in str(info.value)
    assert "Expected one of" in str(info.value) and "privateuse1" in str(info.value)
    assert info.value.device_type == "mydev"
    assert not hasattr(oplib, "mydev")


def test_register_device_module_replaces_the_privateuse_template(teardown):
    import oplib_privateuse.device

    mod = types.ModuleType("vendor_device")
    mod.device_count = lambda: 5
    with pytest.warns(UserWarning, match="oplib_privateuse.device") as record:
        undo = oplib.register_device_module("privateuse1:0", mod)
    teardown(undo)
    assert "replaced it with 'vendor_device'" in str(record[0].message)
    assert oplib.privateuse1 is mod
    assert br._get_custom_mod_func("device_count")() == 5
    with pytest.raises(RuntimeError, match="runtime module of 'privateuse1' has already"):
        oplib.register_device_module("privateuse1", types.ModuleType("again"))
    undo()
    assert oplib.privateuse1 is oplib_privateuse.device


def test_backend_device_modules_are_attributes():
    import oplib_cuda.device
    import oplib_privateuse.device

    assert oplib.privateuse1 is oplib_privateuse.device
    assert oplib.cuda is oplib_cuda.device
    with pytest.raises(AttributeError):
        _ = oplib.no_such_device


def test_get_custom_mod_func():
    assert br._get_custom_mod_func("device_count")() == oplib.privateuse1.device_count()
    with pytest.raises(RuntimeError) as info:
        br._get_custom_mod_func("no_such_fn")
    msg = str(info.value)
    assert "oplib_core.privateuse1.no_such_fn" in msg
    assert "register_device_module('privateuse1', BackendModule)" in msg
    assert "`no_such_fn(*args, **kwargs)`" in msg
    with pytest.raises(AssertionError, match="func_name must be `str`"):
        br._get_custom_mod_func(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (None, 0),
        (0, 0),
        (3, 3),
        (np.int64(1), 1),
        ("privateuse1", 0),
        ("privateuse1:1", 1),
        (Device("privateuse1", 1), 1),
        (Device("privateuse1"), 0),
    ],
)
def test_normalization_device(device, expected):
    assert br._normalization_device("privateuse1", device) == expected


def test_normalization_device_uses_current_device(current_device_restored):
    oplib.privateuse1.set_device(1)
    assert br._normalization_device("privateuse1") == 1
    assert br._normalization_device("privateuse1", "privateuse1") == 1
    assert br._normalization_device("privateuse1", Device("privateuse1", 0)) == 0
    # a backend without a device module: index 0
    assert br._normalization_device("nodevmod") == 0


@pytest.mark.parametrize(
    ("device", "exc", "words"),
    [
        ("cpu", RuntimeError, "Invalid device, must be privateuse1 device; got 'cpu'"),
        (Device("cuda", 1), RuntimeError, "must be privateuse1 device; got 'cuda:1'"),
        (1.5, TypeError, "must be privateuse1 device: expected an index (int)"),
        (True, TypeError, "got bool"),
        (-1, ValueError, "must be >= 0"),
        ("privateuse1:x", ValueError, "expected a device string"),
    ],
)
def test_normalization_device_errors(device, exc, words):
    with pytest.raises(exc) as info:
        br._normalization_device("privateuse1", device)
    assert words in str(info.value)


def test_check_register_once():
    class Holder:
        taken = 1

    br._check_register_once(Holder, "free")
    with pytest.raises(RuntimeError, match="has already been registered with taken"):
        br._check_register_once(Holder, "taken")


def test_methods_generated_right_after_import_use_the_name_a_plugin_gives():
    # Plugins load on first use; the rename happens then, so generating the methods must
    # load the plugins first (as examples/vendor_npu/use_npu.py does right after import).
    out = run_python(
        """
        import oplib_core as oplib
        oplib.generate_methods_for_privateuse1_backend()
        OUT["is_npu"] = hasattr(oplib.Tensor, "is_npu")
        OUT["is_privateuse1"] = hasattr(oplib.Tensor, "is_privateuse1")
        OUT["module"] = oplib.npu.device_count()
        """,
        env={"OPLIB_PRIVATEUSE1_NAME": "npu"},
    )
    assert out == {"is_npu": True, "is_privateuse1": False, "module": 2}
