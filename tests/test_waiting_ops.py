"""A plugin's kernel for an op no installed package defines waits for the op, like a kernel
for a backend that is not installed, and goes live when the op is defined."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import _plugin_host, plugins
from oplib_core._introspect import waiting_detail
from oplib_core.cli import main

from helpers import make_plugin, unique_ns


@pytest.fixture
def registered():
    names = []

    def register(plugin):
        rec = plugins.register(plugin)
        names.append(rec.name)
        return rec

    yield register
    for n in reversed(names):
        if n in _plugin_host.HOST.records:
            plugins.unregister(n)


def _kernel_plugin(ns: str, name: str = "vendor_kernels"):
    def impl(registrar):
        registrar.impl(f"{ns}::scale", "cpu", lambda x: x * 10)
        registrar.register_kernel(f"{ns}::shift.default", "cpu", lambda x: x + 1)
        registrar.impl("oplib::neg", "toy_absent", lambda x: -x)  # the rest of the plugin

    return make_plugin(name, oplib_impl=impl)


def _definer(ns: str, name: str = "op_package"):
    def define(registrar):
        registrar.define(f"{ns}::scale(Tensor x) -> Tensor")
        registrar.define(f"{ns}::shift(Tensor x) -> Tensor")

    return make_plugin(name, oplib_define=define)


def test_kernel_for_an_undefined_op_waits_and_the_plugin_loads(registered):
    ns = unique_ns("wo")
    rec = registered(_kernel_plugin(ns))
    assert rec.status == "loaded", rec.error
    assert sorted(rec.waiting) == [f"{ns}::scale cpu", f"{ns}::shift cpu"]
    assert rec.to_json()["waiting"] == rec.waiting
    # the plugin's other kernels are registered
    assert oplib.lookup("oplib::neg").has_kernel("toy_absent")
    d = waiting_detail(f"{ns}::scale")
    assert d is not None and d["kind"] == "waiting"
    [k] = d["kernels"]
    assert (k["key"], k["status"], k["plugin"]) == ("cpu", "waiting", "vendor_kernels")


def test_waiting_kernel_goes_live_when_the_op_is_defined_later(registered):
    ns = unique_ns("wo")
    rec = registered(_kernel_plugin(ns))
    registered(_definer(ns))
    assert rec.waiting == []
    assert waiting_detail(f"{ns}::scale") is None
    out = oplib.ops.__getattr__(ns).scale(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(out, [10.0, 20.0])
    np.testing.assert_array_equal(oplib.ops.__getattr__(ns).shift(np.array([1.0])), [2.0])
    k = oplib.lookup(f"{ns}::scale").kernel("cpu")
    assert k is not None and k.origin.plugin == "vendor_kernels"


def test_waiting_kernel_waits_again_when_the_op_goes_away_and_leaves_with_its_plugin(registered):
    ns = unique_ns("wo")
    rec = registered(_kernel_plugin(ns))
    definer = registered(_definer(ns))
    plugins.unregister(definer.name)
    assert sorted(rec.waiting) == [f"{ns}::scale cpu", f"{ns}::shift cpu"]
    registered(_definer(ns, "op_package_again"))
    assert rec.waiting == []
    plugins.unregister(rec.name)
    assert not oplib.lookup(f"{ns}::scale").has_kernel("cpu")
    assert waiting_detail(f"{ns}::scale") is None


def test_op_defined_first_takes_the_kernel_at_once(registered):
    ns = unique_ns("wo")
    registered(_definer(ns))
    rec = registered(_kernel_plugin(ns))
    assert rec.waiting == []
    assert oplib.lookup(f"{ns}::scale").kernel("cpu").origin.plugin == "vendor_kernels"


def test_a_typo_in_a_namespace_in_use_still_fails_the_plugin(registered):
    def impl(registrar):
        registrar.impl("oplib::nonexistent_op", "cpu", lambda x: x)

    with pytest.warns(plugins.PluginWarning, match="nonexistent_op"):
        rec = registered(make_plugin("typo_kernels", oplib_impl=impl))
    assert rec.status == "failed"
    assert "UnknownOperatorError" in rec.error


def test_a_typo_in_a_defined_namespace_fails_with_close_names(registered):
    ns = unique_ns("wo")
    registered(_definer(ns))

    def impl(registrar):
        registrar.impl(f"{ns}::scael", "cpu", lambda x: x)

    with pytest.warns(plugins.PluginWarning, match="scale"):
        rec = registered(make_plugin("typo_kernels2", oplib_impl=impl))
    assert rec.status == "failed"


def test_conflict_when_the_op_arrives_is_reported_not_raised(registered):
    ns = unique_ns("wo")
    rec = registered(_kernel_plugin(ns))

    def define(registrar):
        registrar.define(f"{ns}::scale(Tensor x) -> Tensor")
        registrar.define(f"{ns}::shift(Tensor x) -> Tensor")

    def impl(registrar):  # the op's owner registers its own: it wins, the waiter is evicted
        registrar.impl(f"{ns}::scale", "cpu", lambda x: x * 2)

    owner = make_plugin("owner_pkg", oplib_define=define, oplib_impl=impl)
    with pytest.warns(plugins.PluginWarning):
        registered(owner)
    np.testing.assert_array_equal(
        oplib.ops.__getattr__(ns).scale(np.array([1.0])), [2.0]
    )  # the owner's
    assert _plugin_host.HOST.records[rec.name].status == "failed"  # evicted as for any kernel


def test_cli_shows_waiting_kernels(registered, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    ns = unique_ns("wo")
    registered(_kernel_plugin(ns))
    assert main(["ops", "show", f"{ns}::scale"]) == 0
    text = capsys.readouterr().out
    assert "not defined" in text and "waiting for op" in text and "vendor_kernels" in text
    assert main(["ops", "show", f"{ns}::scale", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "waiting" and d["kernels"][0]["status"] == "waiting"
    assert main(["plugins", "list"]) == 0
    assert f"waiting for op {ns}::scale cpu" in capsys.readouterr().out.replace("\n", " ")
