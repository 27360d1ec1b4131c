"""Plugins in-process: phases, isolation, rollback, conflicts, waiting kernels, provenance."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import _plugin_host, plugins
from oplib_core._introspect import op_detail
from oplib_core.errors import NoKernelError

from helpers import ToyArray, load_batch, make_plugin
from helpers import toy_spec as conftest_toy_spec


def toy_spec(name: str = "toy") -> oplib.BackendSpec:
    return conftest_toy_spec(name=name, device_of=None, device_count=lambda: 1)


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
    host = _plugin_host.HOST
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
    from oplib_core._registry.registry import REGISTRY

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


# -- ownership: conflicts never depend on the order plugins load in ------------------------


_batch = load_batch


@pytest.fixture
def batch():
    made = []

    def run(*plugins_and_dists, entry_points=False):
        recs, caught = _batch(*plugins_and_dists, entry_points=entry_points)
        made.extend(recs)
        return recs, caught

    yield run
    for r in made:
        if r.name in _plugin_host.HOST.records:
            plugins.unregister(r.name)


def _owner_and_squatter(ns):
    def define(registrar):
        registrar.define(f"{ns}::op", "(Tensor x) -> Tensor")

    owner = make_plugin(
        f"{ns}_owner",
        oplib_define=define,
        oplib_impl=lambda registrar: registrar.impl(f"{ns}::op", "cpu", np.negative),
    )
    squatter = make_plugin(
        f"{ns}_squatter",
        oplib_impl=lambda registrar: registrar.impl(f"{ns}::op", "cpu", np.positive),
    )
    return owner, squatter


@pytest.mark.parametrize("squatter_first", [True, False])
def test_the_op_owner_keeps_its_kernel_whatever_the_order(batch, ns, squatter_first):
    owner, squatter = _owner_and_squatter(ns)
    order = [(squatter, "dist-squat"), (owner, "dist-owner")]
    recs, caught = batch(*(order if squatter_first else order[::-1]))
    status = {r.distribution: r for r in recs}
    assert status["dist-owner"].status == "loaded"
    assert status["dist-squat"].status == "failed"
    error = status["dist-squat"].error
    assert "dist-owner" in error and f"{ns}::op" in error
    assert any("dist-squat" in str(w.message) for w in caught)
    np.testing.assert_array_equal(getattr(oplib.ops, ns).op(np.ones(1)), [-1.0])
    [k] = op_detail(f"{ns}::op")["kernels"]
    assert k["distribution"] == "dist-owner"


@pytest.mark.parametrize("reverse", [False, True])
def test_two_plugins_that_do_not_own_a_slot_are_both_refused(batch, ns, reverse):
    definer = make_plugin(
        f"{ns}_def",
        oplib_define=lambda registrar: registrar.define(f"{ns}::op", "(Tensor x) -> Tensor"),
    )
    one = make_plugin(
        f"{ns}_one", oplib_impl=lambda registrar: registrar.impl(f"{ns}::op", "cpu", np.negative)
    )
    two = make_plugin(
        f"{ns}_two", oplib_impl=lambda registrar: registrar.impl(f"{ns}::op", "cpu", np.positive)
    )
    three = make_plugin(
        f"{ns}_three", oplib_impl=lambda registrar: registrar.impl(f"{ns}::op", "cpu", np.abs)
    )
    squatters = [(one, "dist-one"), (two, "dist-two"), (three, "dist-three")]
    recs, _ = batch((definer, "dist-def"), *(squatters[::-1] if reverse else squatters))
    assert [r.status for r in recs] == ["loaded", "failed", "failed", "failed"]
    assert "neither owns it" in " ".join(str(r.error) for r in recs)
    with pytest.raises(NoKernelError):
        getattr(oplib.ops, ns).op(np.ones(1))


def test_a_plugin_cannot_take_a_core_kernel_from_the_cpu_backend(registered):
    squat = make_plugin(
        "mul_squatter", oplib_impl=lambda registrar: registrar.impl("oplib::mul", "cpu", np.add)
    )
    with pytest.warns(plugins.PluginWarning, match="mul_squatter"):
        rec = registered(squat)
    assert rec.status == "failed"
    assert "oplib-cpu owns it" in rec.error
    np.testing.assert_array_equal(oplib.ops.oplib.mul(np.full(2, 3.0), np.full(2, 3.0)), [9, 9])


def test_overriding_another_distributions_kernel_needs_the_users_leave(registered, monkeypatch):
    monkeypatch.delenv("OPLIB_ALLOW_OVERRIDE", raising=False)

    def hijack(registrar):
        registrar.impl("oplib::add", "cpu", lambda a, b: np.zeros_like(a), allow_override=True)

    with pytest.warns(plugins.PluginWarning, match="OPLIB_ALLOW_OVERRIDE=hijacker"):
        rec = registered(make_plugin("hijacker", oplib_impl=hijack))
    assert rec.status == "failed"
    assert "may not override the 'cpu' kernel of oplib::add, which belongs to oplib-cpu" in (
        rec.error
    )
    np.testing.assert_array_equal(oplib.ops.oplib.add(np.ones(2), np.ones(2)), [2.0, 2.0])


def test_an_allowed_override_is_announced_and_marked(registered, monkeypatch):
    monkeypatch.setenv("OPLIB_ALLOW_OVERRIDE", "other,allowed_hijacker")

    def hijack(registrar):
        registrar.impl("oplib::add", "cpu", lambda a, b: np.zeros_like(a), allow_override=True)

    with pytest.warns(plugins.OverrideWarning, match="overrides the 'cpu' kernel of oplib::add"):
        rec = registered(make_plugin("allowed_hijacker", oplib_impl=hijack))
    assert rec.status == "loaded"
    assert rec.overrides == ["oplib::add cpu (owned by oplib-cpu)"]
    assert rec.to_json()["overrides"] == rec.overrides
    top = op_detail("oplib::add")["kernels"]
    marked = [k for k in top if k["plugin"] == "allowed_hijacker"]
    assert marked and marked[0]["overrides"]
    np.testing.assert_array_equal(oplib.ops.oplib.add(np.ones(2), np.ones(2)), [0.0, 0.0])
    plugins.unregister("allowed_hijacker")
    np.testing.assert_array_equal(oplib.ops.oplib.add(np.ones(2), np.ones(2)), [2.0, 2.0])


@pytest.mark.parametrize("override_first", [True, False])
def test_an_allowed_override_wins_over_its_owner_in_any_order(
    batch, ns, monkeypatch, override_first
):
    monkeypatch.setenv("OPLIB_ALLOW_OVERRIDE", "dist-over")
    owner, _ = _owner_and_squatter(ns)
    over = make_plugin(
        f"{ns}_over",
        oplib_impl=lambda registrar: registrar.impl(
            f"{ns}::op", "cpu", np.abs, allow_override=True
        ),
    )
    order = [(over, "dist-over"), (owner, "dist-owner")]
    recs, caught = batch(*(order if override_first else order[::-1]))
    assert [r.status for r in recs] == ["loaded", "loaded"]
    assert any(issubclass(w.category, plugins.OverrideWarning) for w in caught)
    np.testing.assert_array_equal(getattr(oplib.ops, ns).op(np.full(1, -2.0)), [2.0])
    plugins.unregister(f"{ns}_over")
    np.testing.assert_array_equal(getattr(oplib.ops, ns).op(np.full(1, -2.0)), [2.0])
    np.testing.assert_array_equal(getattr(oplib.ops, ns).op(np.full(1, 2.0)), [-2.0])


def test_user_code_may_still_override_a_plugins_kernel(teardown):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lib = oplib.Library("oplib", "IMPL")
        teardown(lib)
        lib.impl("add", lambda a, b: np.zeros_like(a), "CPU", allow_override=True)
    np.testing.assert_array_equal(oplib.ops.oplib.add(np.ones(1), np.ones(1)), [0.0])


@pytest.mark.parametrize(
    ("spec", "claim"),
    [
        ({"name": "cpu", "array_types": (ToyArray,)}, "the name"),
        ({"name": "cpuish", "key": "CPU", "array_types": (ToyArray,)}, "dispatch key 'CPU'"),
        ({"name": "npgrab", "array_types": (np.ndarray,)}, "array type numpy.ndarray"),
        ({"name": "npgrab2", "array_type_names": ("numpy.ndarray",)}, "numpy.ndarray"),
    ],
)
def test_a_plugin_cannot_take_an_installed_backend(registered, spec, claim):
    grab = make_plugin("grabber", oplib_backends=lambda: [oplib.BackendSpec(**spec)])
    with pytest.warns(plugins.PluginWarning, match="grabber"):
        rec = registered(grab)
    assert rec.status == "failed" and claim in rec.error and "oplib-cpu" in rec.error
    assert oplib.backends.get("cpu").distribution == "oplib-cpu"
    assert oplib.backends.for_type(np.ndarray).name == "cpu"


@pytest.mark.parametrize("squatter_first", [True, False])
def test_backend_claims_are_settled_by_who_declares_them(batch, squatter_first):
    # the entry point named after the backend declares it
    owner = make_plugin("toyown", oplib_backends=lambda: [toy_spec("toyown")])
    squatter = make_plugin("toysquat", oplib_backends=lambda: [toy_spec("toyown")])
    order = [(squatter, "dist-squat"), (owner, "dist-own")]
    recs, _ = batch(*(order if squatter_first else order[::-1]), entry_points=True)
    by = {r.distribution: r for r in recs}
    assert by["dist-own"].status == "loaded"
    assert by["dist-squat"].status == "failed"
    assert "declared by dist-own" in by["dist-squat"].error
    assert oplib.backends.get("toyown").distribution == "dist-own"


def test_two_undeclared_claims_of_one_backend_both_fail(batch):
    recs, _ = batch(
        (make_plugin("claim_a", oplib_backends=lambda: [toy_spec("toyx")]), "dist-a"),
        (make_plugin("claim_b", oplib_backends=lambda: [toy_spec("toyx")]), "dist-b"),
    )
    assert [r.status for r in recs] == ["failed", "failed"]
    with pytest.raises(oplib.BackendError):
        oplib.backends.get("toyx")


def test_entry_point_names_are_kept_by_the_known_distribution_only():
    from oplib_core._discovery import EntryPointInfo

    def ep(name, dist):
        return EntryPointInfo(name, f"{dist}.plugin", dist, "1", None, True)

    for eps in (
        [ep("cpu", "evil"), ep("cpu", "oplib-cpu")],
        [ep("cpu", "oplib-cpu"), ep("cpu", "evil")],
    ):
        verdict = {e.distribution: rivals for e, rivals in _plugin_host._by_entry_point_name(eps)}
        assert verdict == {"oplib-cpu": [], "evil": ["oplib-cpu"]}
    verdict = _plugin_host._by_entry_point_name([ep("x", "a"), ep("x", "b"), ep("y", "c")])
    assert [r for _, r in verdict] == [["b"], ["a"], []]


# -- everything registered while a hook runs is the plugin's --------------------------------


def _global_api_hook(ns, fail):
    def impl():
        oplib.define(f"{ns}::g", "(Tensor x) -> Tensor")
        oplib.impl(f"{ns}::g", "cpu", np.negative)
        lib = oplib.Library(ns, "FRAGMENT")
        lib.define("h(Tensor x) -> Tensor")
        lib.impl("h", np.negative, "CPU")
        _KEEP.append(lib)

        @oplib.custom_op(f"{ns}::c", mutates_args=())
        def c(x: np.ndarray) -> np.ndarray:
            return -x

        _KEEP.append(c)
        if fail:
            raise RuntimeError("after global registrations")

    return make_plugin(f"{ns}_global", oplib_impl=impl)


_KEEP: list = []


def test_global_api_registrations_in_a_failing_hook_are_rolled_back(registered, ns):
    with pytest.warns(plugins.PluginWarning, match="after global registrations"):
        rec = registered(_global_api_hook(ns, fail=True))
    assert rec.status == "failed"
    for name in ("g", "h", "c"):
        with pytest.raises(oplib.UnknownOperatorError):
            oplib.lookup(f"{ns}::{name}")
    _KEEP.clear()


def test_global_api_registrations_belong_to_the_plugin(ns):
    rec = plugins.register(_global_api_hook(ns, fail=False))
    try:
        assert rec.status == "loaded"
        for name in ("g", "h", "c"):
            detail = op_detail(f"{ns}::{name}")
            assert detail["plugin"] == rec.name
            assert all(k["plugin"] == rec.name for k in detail["kernels"])
    finally:
        plugins.unregister(rec.name)
        _KEEP.clear()
    for name in ("g", "h", "c"):
        with pytest.raises(oplib.UnknownOperatorError):
            oplib.lookup(f"{ns}::{name}")


def test_keyboard_interrupt_in_a_hook_leaves_nothing_behind(ns):
    def define(registrar):
        registrar.define(f"{ns}::k", "(Tensor x) -> Tensor")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plugins.register(make_plugin(f"{ns}_ki", oplib_define=define))
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.lookup(f"{ns}::k")
    assert f"{ns}_ki" not in {r.name for r in plugins.list()}


def test_reserved_namespaces_are_refused_by_every_route(teardown):
    from oplib_core._registry.registry import REGISTRY
    from oplib_core._schema import parse_schema

    with pytest.raises(oplib.ReservedNamespaceError, match="reserved namespace"):
        REGISTRY.define(parse_schema("oplib::sneaky(Tensor x) -> Tensor"))
    with pytest.raises(oplib.ReservedNamespaceError):
        oplib.custom_op("prim::sneaky", lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")
    with pytest.raises(oplib.ReservedNamespaceError):
        oplib.define("oplib::sneaky", "(Tensor x) -> Tensor")
    with pytest.raises(oplib.ReservedNamespaceError):
        oplib.Library("prim", "FRAGMENT")


def test_ctrl_c_during_first_use_loading_leaves_the_table_as_before_and_reloads():
    from subproc import run_python

    out = run_python(
        """
        import numpy as np
        import oplib_core as oplib
        from oplib_core import _plugin_host, plugins
        from oplib_core._registry import startup as _startup
        from oplib_core._registry.registry import REGISTRY

        real = _plugin_host.PluginHost._run_hook
        hits = []

        def interrupted(self, record, phase):
            if record.name == "cpu" and phase == "oplib_impl" and not hits:
                hits.append(1)
                raise KeyboardInterrupt
            return real(self, record, phase)

        _plugin_host.PluginHost._run_hook = interrupted
        OUT["first"] = catch(oplib.plugins.load)
        OUT["loaded_after_interrupt"] = _startup.is_loaded()
        OUT["ops_left"] = len(vars(REGISTRY).get("ops", {}))
        OUT["records_left"] = len(vars(_plugin_host.HOST).get("records", {}))
        OUT["backends_left"] = len(vars(oplib.backends.TABLE).get("_backends", {}))
        OUT["add"] = oplib.ops.oplib.add(np.ones(2), np.ones(2)).tolist()
        OUT["statuses"] = sorted({r.status for r in plugins.list()})
        OUT["cpu"] = oplib.backends.get("cpu").distribution
    """,
        env={"OPLIB_LAZY_BACKENDS": "0"},
    )  # the start-up's loading (see test_lazy_backends)
    assert out["first"][0] == "KeyboardInterrupt"
    assert out["loaded_after_interrupt"] is False
    assert (out["ops_left"], out["records_left"], out["backends_left"]) == (0, 0, 0)
    assert out["add"] == [2.0, 2.0]
    assert out["statuses"] == ["loaded"] and out["cpu"] == "oplib-cpu"


def test_the_cli_marks_an_allowed_override(registered, monkeypatch, capsys):
    from oplib_core import cli

    monkeypatch.setenv("OPLIB_ALLOW_OVERRIDE", "cli_hijacker")
    monkeypatch.setenv("COLUMNS", "300")  # the status cell whole, not cut to fit

    def hijack(registrar):
        registrar.impl("oplib::sub", "cpu", np.subtract, allow_override=True)

    with pytest.warns(plugins.OverrideWarning):
        registered(make_plugin("cli_hijacker", oplib_impl=hijack))
    assert cli.main(["ops", "show", "oplib::sub"]) == 0
    assert "(overrides oplib-cpu)" in capsys.readouterr().out
    assert cli.main(["plugins", "list"]) == 0
    assert "overrides oplib::sub cpu (owned by oplib-cpu)" in capsys.readouterr().out


def test_a_runtime_backend_cannot_claim_numpy_arrays_either():
    spec = oplib.BackendSpec(name="npx", array_types=(np.ndarray,))
    with pytest.raises(oplib.BackendError, match=r"array type numpy\.ndarray of backend 'cpu'"):
        oplib.backends.register(spec)
    assert oplib.backends.for_type(np.ndarray).name == "cpu"


def _definer_plugin(name, qualname):
    return make_plugin(
        name, oplib_define=lambda registrar: registrar.define(qualname, "(Tensor x) -> Tensor")
    )


@pytest.mark.parametrize("squatter_first", [True, False])
def test_the_plugin_named_after_a_namespace_keeps_its_ops(batch, squatter_first, ns):
    owner = _definer_plugin(ns, f"{ns}::op")  # entry point name == namespace: declares it
    squatter = _definer_plugin(f"{ns}_squat", f"{ns}::op")
    order = [(squatter, "dist-squat"), (owner, "dist-own")]
    recs, _ = batch(*(order if squatter_first else order[::-1]), entry_points=True)
    by = {r.distribution: r for r in recs}
    assert by["dist-own"].status == "loaded" and by["dist-squat"].status == "failed"
    assert "dist-own" in by["dist-squat"].error or "dist-own" in by["dist-squat"].traceback
    assert oplib.lookup(f"{ns}::op").origin.distribution == "dist-own"


@pytest.mark.parametrize("reverse", [False, True])
def test_plugins_defining_one_op_outside_their_namespace_are_all_refused(batch, ns, reverse):
    squatters = [(_definer_plugin(f"{ns}_{i}", f"{ns}::op"), f"dist-{i}") for i in ("a", "b", "c")]
    recs, _ = batch(*(squatters[::-1] if reverse else squatters))
    assert [r.status for r in recs] == ["failed"] * 3
    assert "neither owns the namespace" in " ".join(str(r.error) for r in recs)
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.lookup(f"{ns}::op")


def test_the_public_module_holds_the_plugin_authors_side_and_the_host_is_private():
    """``oplib_core.plugins`` gives what a plugin author and a user take (``Registrar``,
    ``PluginRecord``, ``load`` ...); the host that loads plugins is ``_plugin_host``."""
    from oplib_core import _registrar

    assert plugins.Registrar is _registrar.Registrar
    assert plugins.PluginRecord is _registrar.PluginRecord
    assert plugins.PluginWarning is _registrar.PluginWarning
    assert not hasattr(plugins, "PluginHost") and not hasattr(plugins, "HOST")
    assert isinstance(_plugin_host.HOST, _plugin_host.PluginHost)
    assert all(hasattr(plugins, name) for name in plugins.__all__)
