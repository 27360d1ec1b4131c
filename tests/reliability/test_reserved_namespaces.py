"""The reserved namespaces (``oplib``, ``prim``, ``higher_order``) hold against a plugin that
makes itself look like the core: rebinding ``sys.modules['oplib_core._core_plugin']`` (or its
own module's entry) to another module object, or registering the core's own module object
under another name. Only the plugins oplib-core registers itself are privileged; that is
decided when a plugin is registered, from who declared it (the core, or the distribution of
the entry point), never from module identity. Every refusal names the plugin, its
distribution and the namespace (or the op). ``higher_order`` holds HigherOrderOperators
only: no operator may be defined there."""

from __future__ import annotations

import json
import subprocess
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from plugin_dists import clean_env, write_dist

import oplib_core as oplib
from oplib_core import hookimpl, plugins

CORE_MODULES = (
    "oplib_core._core_plugin",
    "oplib_core.autograd._core_autograd_plugin",
    "oplib_core.fake._core_fake_plugin",
    "oplib_core.testing._samples_plugin",
)


@pytest.fixture
def registered() -> Iterator[Callable[[Any, str], plugins.PluginRecord]]:
    """``registered(plugin, name)``: ``plugins.register``, the plugin removed after the test."""
    names: list[str] = []

    def register(plugin: Any, name: str) -> plugins.PluginRecord:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", plugins.PluginWarning)
            rec = plugins.register(plugin, name=name)
        names.append(name)
        return rec

    yield register
    for name in names:
        if plugins.get(name) is not None:
            plugins.unregister(name)


def _plugin(name: str, **hooks: Callable[..., object]) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(module, hook, hookimpl(fn))
    return module


def _unknown(qualname: str) -> bool:
    try:
        oplib.lookup(qualname)
    except oplib.UnknownOperatorError:
        return True
    return False


def test_the_core_plugins_alone_are_privileged() -> None:
    records = {r.name: r for r in plugins.list()}
    for name in ("core", "core-fake", "core-autograd", "core-samples"):
        assert records[name].privileged and records[name].distribution == "oplib-core", name
    assert not any(r.privileged for n, r in records.items() if not n.startswith("core"))
    assert oplib.lookup("oplib::add").origin.plugin == "core"


@pytest.mark.parametrize("core_module", CORE_MODULES)
@pytest.mark.parametrize("ns", ["oplib", "prim", "higher_order"])
def test_rebinding_a_core_module_gives_no_reserved_namespace(
    registered: Callable[[Any, str], plugins.PluginRecord],
    monkeypatch: pytest.MonkeyPatch,
    core_module: str,
    ns: str,
) -> None:
    oplib.plugins.load()
    module = _plugin(
        "rebinder",
        oplib_define=lambda registrar: registrar.define(f"{ns}::hijacked", "(Tensor x) -> Tensor"),
    )
    monkeypatch.setitem(sys.modules, core_module, module)  # the one-line rebinding
    rec = registered(module, "rebinder")
    assert rec.status == "failed" and not rec.privileged
    assert rec.distribution is None  # not credited to oplib-core either
    assert rec.error is not None
    assert rec.error.startswith("ReservedNamespaceError:")
    assert f"{ns!r} is a reserved namespace" in rec.error
    assert "plugin 'rebinder' (in-process)" in rec.error and f"{ns}::hijacked" in rec.error
    assert _unknown(f"{ns}::hijacked")


def test_rebinding_through_the_functional_api_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    oplib.plugins.load()
    module = _plugin(
        "rebinder_fn",
        oplib_define=lambda registrar: oplib.define("oplib::hijacked2", "(Tensor x) -> Tensor"),
    )
    monkeypatch.setitem(sys.modules, "oplib_core._core_plugin", module)
    try:
        with pytest.warns(plugins.PluginWarning) as caught:
            rec = plugins.register(module, name="rebinder_fn")
    finally:
        plugins.unregister("rebinder_fn")
    assert rec.status == "failed" and not rec.privileged and rec.error is not None
    assert "ReservedNamespaceError" in rec.error
    assert "'oplib' is a reserved namespace" in rec.error
    (warning,) = (str(w.message) for w in caught if "rebinder_fn" in str(w.message))
    assert "plugin 'rebinder_fn' (in-process) failed to load" in warning
    assert "'oplib' is a reserved namespace" in warning
    assert _unknown("oplib::hijacked2")


def test_the_core_module_given_a_plugin_hook_is_not_privileged(
    registered: Callable[[Any, str], plugins.PluginRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the very module object the core registered, under another name: identity proves
    # nothing (the core's own registration keeps the hooks it had)
    oplib.plugins.load()
    core = sys.modules["oplib_core._core_plugin"]

    def oplib_define(registrar: Any) -> None:
        registrar.define("oplib::taken_over", "(Tensor x) -> Tensor")

    monkeypatch.setattr(core, "oplib_define", hookimpl(oplib_define))
    rec = registered(core, "impostor")
    assert rec.status == "failed" and not rec.privileged and rec.distribution is None
    assert rec.error is not None and "'oplib' is a reserved namespace" in rec.error
    assert "plugin 'impostor' (in-process)" in rec.error
    assert _unknown("oplib::taken_over")
    assert oplib.lookup("oplib::add").origin.plugin == "core"


def test_rebinding_gives_no_ownership_of_core_kernels(
    registered: Callable[[Any, str], plugins.PluginRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    oplib.plugins.load()
    before = oplib.lookup("oplib::sin").kernel("Fake")
    assert before is not None

    def fake(x: Any) -> Any:
        return x

    module = _plugin(
        "fake_owner",
        oplib_register_fake=lambda registrar: registrar.register_fake("oplib::sin", fake),
    )
    monkeypatch.setitem(sys.modules, "oplib_core.fake._core_fake_plugin", module)
    rec = registered(module, "fake_owner")
    assert rec.status == "failed" and rec.error is not None
    assert "oplib::sin" in rec.error and "plugin 'fake_owner'" in rec.error
    assert "oplib-core owns it" in rec.error
    after = oplib.lookup("oplib::sin").kernel("Fake")
    assert after is not None and after.fn is before.fn


def test_rebinding_gives_no_leave_to_override(
    registered: Callable[[Any, str], plugins.PluginRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    oplib.plugins.load()
    monkeypatch.delenv("OPLIB_ALLOW_OVERRIDE", raising=False)

    def fake(x: Any) -> Any:
        return x

    module = _plugin(
        "fake_overrider",
        oplib_register_fake=lambda registrar: registrar.impl(
            "oplib::cos", "Fake", fake, allow_override=True
        ),
    )
    monkeypatch.setitem(sys.modules, "oplib_core.fake._core_fake_plugin", module)
    rec = registered(module, "fake_overrider")
    assert rec.status == "failed" and rec.error is not None
    assert "plugin 'fake_overrider' may not override" in rec.error
    assert "oplib::cos" in rec.error and "belongs to oplib-core" in rec.error
    kernel = oplib.lookup("oplib::cos").kernel("Fake")
    assert kernel is not None and kernel.origin.plugin == "core-fake"


def test_a_rebinding_plugin_cannot_redefine_a_higher_order_operator(
    registered: Callable[[Any, str], plugins.PluginRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    oplib.plugins.load()
    cond = oplib.ops.higher_order.cond

    def define(registrar: Any) -> None:
        oplib.HigherOrderOperator("cond")

    module = _plugin("hop_taker", oplib_define=define)
    monkeypatch.setitem(sys.modules, "oplib_core._core_plugin", module)
    rec = registered(module, "hop_taker")
    assert rec.status == "failed" and rec.error is not None
    assert "higher_order::cond is already defined" in rec.error
    assert oplib.ops.higher_order.cond is cond


def test_higher_order_holds_higher_order_operators_only(teardown: Any) -> None:
    # an operator defined there clashed with ops.higher_order's own (and half-registered)
    cond = oplib.ops.higher_order.cond
    attempts: list[Callable[[], object]] = [
        lambda: oplib.define("higher_order::cond", "(Tensor x) -> Tensor"),
        lambda: oplib.define("higher_order::mine", "(Tensor x) -> Tensor"),
        lambda: oplib.Library("higher_order", "DEF"),
        lambda: oplib.Library("higher_order", "FRAGMENT"),
    ]
    for attempt in attempts:
        with pytest.raises(
            oplib.ReservedNamespaceError, match="'higher_order' is a reserved"
        ) as info:
            attempt()
        assert info.value.namespace == "higher_order"
    assert _unknown("higher_order::cond") and _unknown("higher_order::mine")
    assert oplib.ops.higher_order.cond is cond
    hop = oplib.HigherOrderOperator("reserved_ns_test_hop")  # HOPs are made as before
    teardown(hop)
    assert oplib.ops.higher_order.reserved_ns_test_hop is hop


# -- installed distributions ------------------------------------------------------------------

_REBIND_CORE = """\
import sys
from oplib_core import hookimpl

sys.modules["oplib_core._core_plugin"] = sys.modules[__name__]  # look like the core


@hookimpl
def oplib_define(registrar):
    registrar.define("oplib::hijacked", "(Tensor x) -> Tensor")
"""

_REBIND_OWN = """\
import sys
import oplib_core
from oplib_core import hookimpl


@hookimpl
def oplib_define(registrar):
    oplib_core.define("prim::hijacked", "(Tensor x) -> Tensor")


# the entry point now resolves to the core's module, given this hook
core = sys.modules["oplib_core._core_plugin"]
core.oplib_define = oplib_define
sys.modules[__name__] = core
"""

_PROBE = """\
import json, warnings
import numpy as np
import oplib_core as oplib

warnings.simplefilter("ignore")
oplib.plugins.load()
out = {"plugins": {}, "defined": [], "add": oplib.ops.oplib.add(np.ones(2), np.ones(2)).tolist()}
for r in oplib.plugins.list():
    out["plugins"][r.name] = [r.status, r.distribution, r.privileged, r.error]
for q in ("oplib::hijacked", "prim::hijacked"):
    try:
        oplib.lookup(q)
        out["defined"].append(q)
    except oplib.UnknownOperatorError:
        pass
print(json.dumps(out))
"""


def test_installed_plugins_rebinding_modules_get_no_reserved_namespace(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_dist(site, "oplib-rebind-core", "rebind_core", _REBIND_CORE)
    write_dist(site, "oplib-rebind-own", "rebind_own", _REBIND_OWN)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(PYTHONPATH=str(site), OPLIB_ENTRY_POINT_CACHE="0"),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["defined"] == [] and out["add"] == [2.0, 2.0]
    status, dist, privileged, error = out["plugins"]["rebind_core"]
    assert (status, dist, privileged) == ("failed", "oplib-rebind-core", False)
    assert "'oplib' is a reserved namespace" in error
    assert "plugin 'rebind_core' (oplib-rebind-core)" in error and "oplib::hijacked" in error
    status, dist, privileged, error = out["plugins"]["rebind_own"]
    assert (status, dist, privileged) == ("failed", "oplib-rebind-own", False)
    assert "ReservedNamespaceError" in error and "'prim' is a reserved namespace" in error
    assert out["plugins"]["core"][:3] == ["loaded", "oplib-core", True]
    assert out["plugins"]["cpu"][0] == "loaded"
