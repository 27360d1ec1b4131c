"""Plugins in-process: phases, isolation, rollback, conflicts, waiting kernels, provenance."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import hookimpl, plugins
from oplib_core._introspect import op_detail
from oplib_core.errors import NoKernelError

from helpers import ToyArray
from helpers import toy_spec as conftest_toy_spec


def toy_spec(name: str = "toy") -> oplib.BackendSpec:
    return conftest_toy_spec(name=name, device_of=None, device_count=lambda: 1)


def make_plugin(name: str, **hooks) -> types.SimpleNamespace:
    ns = types.SimpleNamespace(__name__=name)
    for hook, fn in hooks.items():
        setattr(ns, hook, hookimpl(fn))
    return ns


@pytest.fixture
def registered():
    names = []

    def register(plugin, name=None):
        rec = plugins.register(plugin, name=name)
        names.append(rec.name)
        return rec

    yield register
    for n in names:
        try:
            plugins.unregister(n)
        except oplib.PluginError:
            pass


def test_cpu_plugin_discovered_through_its_entry_point():
    rec = {r.name: r for r in plugins.list()}["cpu"]
    assert rec.status == "loaded"
    assert rec.distribution == "oplib-cpu"
    assert rec.entry_point == "oplib_cpu.plugin"
    assert rec.module.endswith("oplib_cpu/plugin.py")
    assert set(rec.hooks) == {"oplib_backends", "oplib_impl"}
    assert oplib.backends.get("cpu").distribution == "oplib-cpu"


def test_phases_let_a_plugin_implement_an_op_defined_by_a_later_plugin(registered):
    # Both registered in one pass: the impl plugin comes first in load order.
    impl_plugin = make_plugin(
        "impl_first",
        oplib_impl=lambda registrar: registrar.impl("phased::double", "cpu", lambda x: x * 2),
    )
    def_plugin = make_plugin(
        "def_second",
        oplib_define=lambda registrar: registrar.define("phased::double", "(Tensor x) -> Tensor"),
    )
    recs = [plugins.PluginRecord(name=n) for n in ("impl_first", "def_second")]
    host = plugins.HOST
    for rec, p in zip(recs, (impl_plugin, def_plugin), strict=True):
        host.records[rec.name] = rec
        assert host._register_with_pluggy(rec, p)
    try:
        host._run_phases(recs)
        assert [r.status for r in recs] == ["loaded", "loaded"]
        np.testing.assert_array_equal(oplib.ops.phased.double(np.ones(2)), [2.0, 2.0])
    finally:
        for r in recs:
            plugins.unregister(r.name)


def test_registrations_are_credited_to_the_plugin(registered):
    def define(registrar):
        registrar.define("credited::op", "(Tensor x) -> Tensor")

    def impl(registrar):
        registrar.impl("credited::op", "cpu", np.negative)

    registered(make_plugin("creditor", oplib_define=define, oplib_impl=impl))
    d = op_detail("credited::op")
    assert d["plugin"] == "creditor"
    assert d["defined_at"].startswith(__file__)
    [k] = d["kernels"]
    assert k["plugin"] == "creditor" and k["key"] == "cpu" and k["status"] == "live"


def test_raising_hook_rolls_back_everything_that_plugin_registered(registered):
    def define(registrar):
        registrar.define("broken::a", "(Tensor x) -> Tensor")
        registrar.define("broken::b", "(Tensor x) -> Tensor")

    def impl(registrar):
        registrar.impl("broken::a", "cpu", np.negative)
        raise RuntimeError("boom in impl")

    with pytest.warns(plugins.PluginWarning, match="'broken_plugin'.*boom in impl"):
        rec = registered(make_plugin("broken_plugin", oplib_define=define, oplib_impl=impl))
    assert rec.status == "failed"
    assert rec.error == "RuntimeError: boom in impl in oplib_impl()"
    assert "Traceback" in rec.traceback
    assert "broken::a" not in oplib_core_ops() and "broken::b" not in oplib_core_ops()
    with pytest.raises(AttributeError):
        oplib.ops.broken.a  # noqa: B018


def oplib_core_ops():
    from oplib_core._registry import REGISTRY

    return REGISTRY.ops


def test_conflict_between_two_plugins_names_both_and_keeps_the_first(registered):
    def define(registrar):
        registrar.define("clash::op", "(Tensor x) -> Tensor")

    def impl_a(registrar):
        registrar.impl("clash::op", "cpu", np.negative)

    def impl_b(registrar):
        registrar.impl("clash::op", "cpu", np.positive)

    registered(make_plugin("clash_a", oplib_define=define, oplib_impl=impl_a))
    with pytest.warns(plugins.PluginWarning):
        rec_b = registered(make_plugin("clash_b", oplib_impl=impl_b))
    assert rec_b.status == "failed"
    assert "already has a kernel for 'cpu' registered at" in rec_b.error
    assert "plugin 'clash_a'" in rec_b.traceback and "plugin 'clash_b'" in rec_b.traceback
    np.testing.assert_array_equal(oplib.ops.clash.op(np.ones(1)), [-1.0])


def test_kernel_waits_for_missing_backend_then_goes_live(registered):
    def define(registrar):
        registrar.define("waiting::op", "(Tensor x) -> Tensor")

    def impl(registrar):
        registrar.impl("waiting::op", "toyw", lambda x: ToyArray(x.data + 1))

    registered(make_plugin("waiter", oplib_define=define, oplib_impl=impl))
    [k] = op_detail("waiting::op")["kernels"]
    assert k["key"] == "toyw" and k["status"] == "waiting"
    registered(make_plugin("toyw_backend", oplib_backends=lambda: [toy_spec("toyw")]))
    [k] = op_detail("waiting::op")["kernels"]
    assert k["status"] == "live"
    out = oplib.ops.waiting.op(ToyArray(np.zeros(2)))
    np.testing.assert_array_equal(out.data, [1.0, 1.0])
    with pytest.raises(NoKernelError, match="no kernel for backend 'cpu'"):
        oplib.ops.waiting.op(np.zeros(2))


def test_backend_registered_at_runtime_makes_waiting_kernel_live(teardown):
    with oplib.library._scoped_library("rt", "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", lambda x: ToyArray(x.data * 3), "toyrt")
        undo = oplib.backends.register(toy_spec("toyrt"))
        teardown(undo)
        np.testing.assert_array_equal(oplib.ops.rt.op(ToyArray(np.ones(1))).data, [3.0])


def test_unknown_hook_name_fails_the_plugin(registered):
    bad = make_plugin("typo_plugin", oplib_defin=lambda registrar: None)
    with pytest.warns(plugins.PluginWarning, match="unknown hook"):
        rec = registered(bad)
    assert rec.status == "failed" and "oplib_defin" in rec.error


def test_hook_with_wrong_argument_name_is_rejected_by_pluggy(registered):
    bad = make_plugin("argname_plugin", oplib_define=lambda registry: None)
    with pytest.warns(plugins.PluginWarning):
        rec = registered(bad)
    assert rec.status == "failed" and "registry" in rec.error


def test_backend_hook_must_return_backend_specs(registered):
    with pytest.warns(plugins.PluginWarning, match="must return BackendSpec"):
        rec = registered(make_plugin("badspec", oplib_backends=lambda: ["cpu"]))
    assert rec.status == "failed"


def test_unregister_removes_everything(registered):
    def define(registrar):
        registrar.define("gone::op", "(Tensor x) -> Tensor")

    plugins.register(make_plugin("leaving", oplib_define=define))
    assert oplib.ops.gone.op.default.name() == "gone::op"
    plugins.unregister("leaving")
    with pytest.raises(AttributeError):
        oplib.ops.gone.op  # noqa: B018
    assert "leaving" not in {r.name for r in plugins.list()}


def test_registering_the_same_plugin_name_twice_is_an_error(registered):
    registered(make_plugin("twice"))
    with pytest.raises(oplib.PluginError, match="already registered"):
        plugins.register(make_plugin("twice"))


def test_plugin_cannot_define_in_reserved_namespace(registered):
    def define(registrar):
        registrar.define("oplib::mine", "(Tensor x) -> Tensor")

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        rec = registered(make_plugin("reserved_user", oplib_define=define))
    assert rec.status == "failed" and "reserved namespace" in rec.error
