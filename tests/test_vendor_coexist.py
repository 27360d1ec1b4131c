"""Vendor backends coexist: an own-name backend gets generated Tensor methods
(``generate_methods_for_backend``), and two plugins renaming the private-use slot are a
conflict naming both, with everything each did to the slot rolled back."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import plugins

from helpers import make_plugin, toy_spec
from subproc import run_python

# -- generate_methods_for_backend ------------------------------------------------------


def test_generated_methods_for_an_own_name_backend(teardown):
    teardown(oplib.backends.register(toy_spec(name="myaccel", key="MyAccel")))
    oplib.generate_methods_for_backend("myaccel")

    def drop():
        for attr in ("myaccel", "is_myaccel"):
            if attr in vars(oplib.Tensor):
                delattr(oplib.Tensor, attr)

    teardown(drop)
    t = oplib.tensor([1.0, 2.0])
    assert t.is_myaccel is False
    moved = t.myaccel(1)
    assert moved.device == oplib.device("myaccel:1") and moved.is_myaccel
    np.testing.assert_array_equal(moved.cpu().numpy(), [1.0, 2.0])
    assert moved.myaccel(1) is moved  # already there
    with pytest.raises(oplib.errors.RegistrationError, match="already been registered"):
        oplib.generate_methods_for_backend("myaccel")


def test_generate_methods_for_backend_refuses_unknown_names_and_taken_attributes():
    with pytest.raises(oplib.errors.BackendError, match="no backend named 'nosuchaccel'"):
        oplib.generate_methods_for_backend("nosuchaccel")
    with pytest.raises(oplib.errors.RegistrationError, match="already been registered with cpu"):
        oplib.generate_methods_for_backend("cpu")
    with pytest.raises(TypeError, match="expected a backend name"):
        oplib.generate_methods_for_backend(3)  # type: ignore[arg-type]


def test_a_plugins_generated_methods_go_with_the_plugin():
    def backends():
        return [toy_spec(name="plugaccel", key="PlugAccel")]

    def impl(registrar):
        oplib.generate_methods_for_backend("plugaccel")

    rec = plugins.register(
        make_plugin("plugaccel_vendor", oplib_backends=backends, oplib_impl=impl)
    )
    try:
        assert rec.status == "loaded", rec.error
        assert oplib.tensor([1.0]).plugaccel().is_plugaccel
    finally:
        plugins.unregister(rec.name)
    assert not hasattr(oplib.Tensor, "plugaccel")
    assert not hasattr(oplib.Tensor, "is_plugaccel")


# -- the private-use slot: conflicts and rollback ----------------------------------------

_TWO_VENDORS = """
    import sys, types
    sys.path.insert(0, "tests")
    import oplib_core as oplib
    from oplib_core import backend_registration as br
    from helpers import load_batch, make_plugin

    def vendor(name, device):
        def backends():
            oplib.rename_privateuse1_backend(device)
            oplib.generate_methods_for_privateuse1_backend()
            oplib.register_device_module(device, types.SimpleNamespace(device_count=lambda: 7))
            return []
        def impl(registrar):
            registrar.impl("oplib::neg", device, lambda x: x)
        return make_plugin(name, oplib_backends=backends, oplib_impl=impl)

    def batch(*pairs):
        return load_batch(*pairs)[0]

    a, b = batch(
        (vendor("vendor_a", "accela"), "vendor-a"), (vendor("vendor_b", "accelb"), "vendor-b")
    )
    OUT["status"] = [a.status, b.status]
    OUT["errors"] = [a.error, b.error]
    OUT["name"] = br.privateuse1_backend_name()
    names = ("accela", "is_accela", "accelb", "is_accelb")
    OUT["methods"] = [hasattr(oplib.Tensor, n) for n in names]
    OUT["modules"] = [hasattr(oplib, "accela"), hasattr(oplib, "accelb")]
    OUT["backend"] = [b.name for b in oplib.backends.list()]
    OUT["pu_kernel"] = oplib.lookup("oplib::neg").has_kernel("privateuse1")
    x = oplib.tensor([1.0], device="privateuse1")
    OUT["device"] = str(x.device)
"""


def test_two_plugins_renaming_the_slot_are_both_refused_and_rolled_back():
    out = run_python(_TWO_VENDORS)
    assert out["status"] == ["failed", "failed"]
    for error in out["errors"]:
        assert "vendor-a" in error and "vendor-b" in error
        assert "one name per process" in error
    assert out["name"] == "privateuse1"  # the first one's rename was undone
    assert out["methods"] == [False, False, False, False]
    assert out["modules"] == [False, False]
    assert "privateuse1" in out["backend"]
    assert out["pu_kernel"]  # the template's kernels are back under the slot
    assert out["device"] == "privateuse1:0"


def test_a_template_copy_that_loses_its_backend_claim_undoes_its_rename():
    """The issue's scenario: a copy of the template renames the slot in oplib_backends and
    returns its own privateuse1 backend; oplib-privateuse declares that backend, so the copy
    fails, and its rename must not turn the template's device into 'myaccel'."""
    out = run_python("""
        import types, warnings
        import oplib_core as oplib
        from oplib_core import hookimpl, plugins, backend_registration as br

        def backends():
            oplib.rename_privateuse1_backend("myaccel")
            return [oplib.BackendSpec(name="privateuse1", array_type_names=("mine.Arr",))]

        ns = types.SimpleNamespace(__name__="copy")
        ns.oplib_backends = hookimpl(backends)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            rec = plugins.register(ns)
        OUT["status"] = rec.status
        OUT["error"] = rec.error
        OUT["name"] = br.privateuse1_backend_name()
        OUT["dist"] = oplib.backends.get("privateuse1").distribution
        from oplib_core.backends import TABLE
        OUT["myaccel"] = TABLE.find("myaccel") is not None
    """)
    assert out["status"] == "failed"
    assert "oplib-privateuse" in out["error"]
    assert out["name"] == "privateuse1"
    assert out["dist"] == "oplib-privateuse"
    assert out["myaccel"] is False


def test_unregistering_the_renaming_plugin_gives_the_slot_back():
    out = run_python("""
        import types
        import numpy as np
        import oplib_core as oplib
        from oplib_core import hookimpl, plugins, backend_registration as br

        def backends():
            oplib.rename_privateuse1_backend("accelx")
            return []

        ns = types.SimpleNamespace(__name__="renamer")
        ns.oplib_backends = hookimpl(backends)
        rec = plugins.register(ns)
        x = oplib.tensor([1.0], device="accelx")
        OUT["during"] = [br.privateuse1_backend_name(), str(x.device)]
        OUT["npu_kernel"] = oplib.lookup("oplib::add").has_kernel("accelx")
        plugins.unregister("renamer")
        OUT["after"] = br.privateuse1_backend_name()
        OUT["kernel_back"] = oplib.lookup("oplib::add").has_kernel("privateuse1")
        OUT["device"] = str(oplib.tensor([1.0], device="privateuse1").device)
        OUT["again"] = catch(oplib.rename_privateuse1_backend, "npu")
        OUT["renamed_again"] = br.privateuse1_backend_name()
    """)
    assert out["during"] == ["accelx", "accelx:0"]
    assert out["npu_kernel"]
    assert out["after"] == "privateuse1"
    assert out["kernel_back"]
    assert out["device"] == "privateuse1:0"
    assert out["again"] is None and out["renamed_again"] == "npu"


def test_user_rename_after_a_plugin_rename_names_the_plugin():
    out = run_python("""
        import types
        import oplib_core as oplib
        from oplib_core import hookimpl, plugins

        def backends():
            oplib.rename_privateuse1_backend("accely")
            return []

        ns = types.SimpleNamespace(__name__="renamer_y")
        ns.oplib_backends = hookimpl(backends)
        plugins.register(ns)
        OUT["err"] = catch(oplib.rename_privateuse1_backend, "other")
    """)
    kind, message = out["err"]
    assert kind == "BackendNameError"
    assert "already renamed to 'accely' by plugin 'renamer_y'" in message


def test_a_plugin_refused_its_backend_claim_undoes_its_rename():
    """Two plugins claim one backend name in one pass: both lose the claim; the one that
    renamed the slot in its hook has the rename rolled back."""
    out = run_python("""
        import sys
        sys.path.insert(0, "tests")
        import oplib_core as oplib
        from oplib_core import backend_registration as br
        from helpers import load_batch, make_plugin

        def claimant(name, rename):
            def backends():
                if rename:
                    oplib.rename_privateuse1_backend("accelz")
                return [oplib.BackendSpec(name="zzslot", array_type_names=(f"{name}.Arr",))]
            return make_plugin(name, oplib_backends=backends)

        recs, _ = load_batch(
            (claimant("claim_a", True), "dist-a"), (claimant("claim_b", False), "dist-b")
        )
        OUT["status"] = [r.status for r in recs]
        OUT["error"] = recs[0].error
        OUT["name"] = br.privateuse1_backend_name()
    """)
    assert out["status"] == ["failed", "failed"]
    assert "dist-b" in out["error"]
    assert out["name"] == "privateuse1"


def test_the_users_env_name_is_not_a_plugins_rename():
    """OPLIB_PRIVATEUSE1_NAME is the user's rename: a plugin renaming the slot otherwise
    is named in the error of the plugin the variable is applied for, and only that one
    plugin fails (no conflict between two plugins)."""
    out = run_python(
        """
        import sys
        sys.path.insert(0, "tests")
        import oplib_core as oplib
        from oplib_core import backend_registration as br
        from helpers import load_batch, make_plugin

        def backends():
            oplib.rename_privateuse1_backend("accelq")
            return []

        def slot():
            return [oplib.BackendSpec(name="privateuse1", key="PrivateUse1",
                                      array_type_names=("qq.Arr",))]

        recs, _ = load_batch(
            (make_plugin("renamer_q", oplib_backends=backends), "dist-q"),
            (make_plugin("slot_q", oplib_backends=slot), "dist-slot"),
        )
        OUT["status"] = [r.status for r in recs]
        OUT["error"] = recs[1].error
        OUT["name"] = br.privateuse1_backend_name()
        """,
        env={"OPLIB_PRIVATEUSE1_NAME": "npu", "OPLIB_DISABLE_PLUGINS": "privateuse"},
    )
    assert out["status"] == ["loaded", "failed"]
    assert "already renamed to 'accelq' by dist-q" in out["error"]
    assert out["name"] == "accelq"
