"""``HigherOrderOperator``: definition, handlers per key, keys from nested arguments,
``dispatch``, modes, plugins (provenance, rollback, conflicts), ``explain`` and the
introspection rows the CLI prints."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import test_plugins
from test_plugins import make_plugin

import oplib_core as oplib
from oplib_core import plugins
from oplib_core._introspect import op_detail, op_rows
from oplib_core.errors import NoKernelError, RegistrationError, UnknownOperatorError

from helpers import ToyArray

_ids = itertools.count()


@pytest.fixture
def hop(teardown):
    """A fresh higher-order operator, removed after the test."""
    h = oplib.HigherOrderOperator(f"t_hop{next(_ids)}")
    teardown(h)
    return h


def _tag(name):
    return lambda *args, **kwargs: (name, args, kwargs)


# -- definition ------------------------------------------------------------------------------
def test_defined_in_the_higher_order_namespace_like_torch(hop):
    assert hop.namespace == "higher_order"
    assert hop.name() == hop.__name__ and hop.name().startswith("t_hop")
    assert hop.qualname == f"higher_order::{hop.name()}"
    assert getattr(oplib.ops.higher_order, hop.name()) is hop
    assert str(hop) == f"higher_order.{hop.name()}"

    line = sys._getframe().f_lineno + 1
    here = oplib.HigherOrderOperator(f"t_hop{next(_ids)}")
    here._destroy()
    assert here.origin.source == f"{__file__}:{line}"


def test_builtins_live_in_ops_higher_order():
    for name in ("cond", "while_loop", "map", "scan"):
        h = getattr(oplib.ops.higher_order, name)
        assert isinstance(h, oplib.HigherOrderOperator) and h.name() == name


def test_a_second_definition_of_a_name_names_the_first(hop):
    with pytest.raises(
        RegistrationError, match=r"higher_order::t_hop\d+ is already defined at"
    ) as e:
        oplib.HigherOrderOperator(hop.name())
    assert e.value.existing == str(hop.origin)


def test_destroy_removes_it_and_frees_the_name(hop):
    name = hop.name()
    hop._destroy()
    assert not hop.defined
    assert name not in oplib.ops.higher_order.__dict__
    again = oplib.HigherOrderOperator(name)
    again._destroy()


@pytest.mark.parametrize("bad", ["", "has space", "a::b", 3])
def test_name_must_be_an_identifier(bad):
    with pytest.raises(oplib.InvalidNameError, match="expected a Python identifier"):
        oplib.HigherOrderOperator(bad)


# -- handlers and keys -----------------------------------------------------------------------
def test_backend_handler_serves_arrays_of_that_backend(hop):
    hop.py_impl("CPU")(_tag("cpu"))
    assert hop(np.ones(2))[0] == "cpu"
    assert hop.handler("cpu").origin.source.endswith(".py:" + str(_tag.__code__.co_firstlineno + 1))


def test_composite_serves_backends_without_their_own_handler(hop, toy):
    hop.py_impl("CompositeExplicitAutograd")(_tag("composite"))
    hop.py_impl("cpu")(_tag("cpu"))
    assert hop(np.ones(2))[0] == "cpu"
    assert hop(ToyArray(np.ones(2)))[0] == "composite"


def test_keys_come_from_tensors_nested_anywhere(hop, toy):
    hop.py_impl("toy")(_tag("toy"))
    hop.py_impl("cpu")(_tag("cpu"))
    nested = ({"a": [1, (ToyArray(np.ones(1)),)]},)
    assert hop(len, nested)[0] == "toy"
    assert hop(kw={"deep": [oplib.tensor(ToyArray(np.ones(1)))]})[0] == "toy"
    assert hop(len, 3)[0] == "cpu"  # no tensors: cpu, as factories


def test_a_0d_cpu_predicate_defers_to_the_other_device(hop, toy):
    hop.py_impl("toy")(_tag("toy"))
    hop.py_impl("cpu")(_tag("cpu"))
    assert hop(np.array(True), (ToyArray(np.ones(2)),))[0] == "toy"


def test_autograd_comes_first_when_an_input_requires_grad(hop):
    hop.py_impl("Autograd")(_tag("autograd"))
    hop.py_impl("default")(_tag("default"))
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    assert hop([x])[0] == "autograd"
    with oplib.no_grad():
        assert hop([x])[0] == "default"
    assert hop([x.detach()])[0] == "default"


def test_missing_handler_lists_the_keys_that_have_one(hop):
    hop.py_impl("cpu")(_tag("cpu"))
    hop.py_impl("Fake")(_tag("fake"))
    x = oplib.tensor([1.0], requires_grad=True)
    with pytest.raises(NoKernelError, match=r"no handler for dispatch key 'Autograd'") as e:
        hop(x)
    assert "registered for: Fake, cpu" in str(e.value)
    assert e.value.op == hop.qualname and e.value.key == "Autograd"


def test_no_handler_for_the_backend(hop, toy):
    hop.py_impl("cpu")(_tag("cpu"))
    with pytest.raises(
        NoKernelError, match=r"no handler for dispatch key 'Toy' \(the inputs are toy"
    ):
        hop(ToyArray(np.ones(1)))


def test_fallthrough_skips_its_key(hop):
    hop.py_impl("default")(_tag("default"))
    hop.fallthrough("Autograd")
    assert hop(oplib.tensor([1.0], requires_grad=True))[0] == "default"


def test_fallthrough_kernel_as_a_handler_skips_the_backend_key(hop):
    hop.py_impl("cpu")(oplib.fallthrough_kernel)
    hop.py_impl("default")(_tag("default"))
    assert hop(np.ones(1))[0] == "default"


def test_meta_arrays_take_the_fake_handler(hop):
    hop.py_impl("Fake")(_tag("fake"))
    hop.py_impl("default")(_tag("default"))
    assert hop(oplib.empty(2, device="meta"))[0] == "fake"
    hop.py_impl("Meta")(_tag("meta"))
    assert hop(oplib.empty(2, device="meta"))[0] == "meta"


def test_second_handler_for_a_key_is_refused_naming_the_first(hop):
    hop.py_impl("cpu")(_tag("a"))
    with pytest.raises(RegistrationError, match=r"already registered at .*test_higher_order.py"):
        hop.py_impl("CPU")(_tag("b"))
    assert hop(np.ones(1))[0] == "a"


def test_handler_must_be_callable(hop):
    with pytest.raises(RegistrationError, match="expected a function, got int"):
        hop.py_impl("cpu")(3)


def test_unknown_key_is_refused(hop):
    with pytest.raises(oplib.UnknownDispatchKeyError, match="unknown dispatch key 'NotAKey!'"):
        hop.py_impl("NotAKey!")


def test_handler_registered_later_replaces_the_cached_choice(hop):
    hop.py_impl("default")(_tag("default"))
    assert hop(np.ones(1))[0] == "default"
    hop.py_impl("cpu")(_tag("cpu"))
    assert hop(np.ones(1))[0] == "cpu"


def test_dispatch_runs_the_handler_of_a_key_below(hop):
    calls = []

    @hop.py_impl("Autograd")
    def autograd(x):
        calls.append("autograd")
        return hop.dispatch("CPU", x)

    hop.py_impl("default")(_tag("default"))
    out = hop(oplib.tensor([1.0], requires_grad=True))
    assert calls == ["autograd"] and out[0] == "default"
    assert hop.dispatch("CompositeExplicitAutograd", 1)[0] == "default"
    with pytest.raises(NoKernelError, match="no handler for dispatch key 'Fake'"):
        hop.dispatch("Fake", 1)


# -- modes -----------------------------------------------------------------------------------
class Logging(oplib.DispatchMode):
    def __init__(self):
        self.seen = []

    def __oplib_dispatch__(self, op, args, kwargs):
        self.seen.append(op.name())
        return op(*args, **kwargs)


def test_a_mode_sees_hop_calls_through_oplib_dispatch():
    x = oplib.tensor([1.0, -2.0])
    with Logging() as mode:
        out = oplib.cond(True, lambda a: a.relu(), lambda a: -a, (x,))
    assert mode.seen == ["cond", "oplib::relu"]
    np.testing.assert_array_equal(out.numpy(), [1.0, 0.0])


def test_a_mode_handler_takes_precedence(hop):
    hop.py_impl("default")(_tag("default"))

    @hop.py_impl(Logging)
    def under_logging(mode, *args):
        mode.seen.append("handler")
        return hop(*args)  # the mode is off the stack while its handler runs

    with Logging() as mode:
        out = hop(1)
    assert mode.seen == ["handler"] and out[0] == "default"


def test_fake_mode_without_a_fake_handler_says_so(hop):
    hop.py_impl("default")(_tag("default"))
    with (
        oplib.FakeTensorMode(),
        pytest.raises(NoKernelError, match="no handler for dispatch key 'Fake'"),
    ):
        hop(1)


# -- plugins ---------------------------------------------------------------------------------
registered = test_plugins.registered  # the fixture: registers plugins, unregisters after


def test_plugin_defines_a_hop_and_handlers_credited_to_it(registered, toy):
    def define(registrar):
        registrar.define_higher_order("plugged_hop")

    def impl(registrar):
        registrar.py_impl("plugged_hop", "toy", _tag("toy"))
        registrar.py_impl("higher_order::plugged_hop", "default")(_tag("default"))

    registered(make_plugin("hop_plugin", oplib_define=define, oplib_impl=impl))
    h = oplib.ops.higher_order.plugged_hop
    assert h.origin.plugin == "hop_plugin"
    assert h.handler("toy").origin.plugin == "hop_plugin"
    assert h(ToyArray(np.ones(1)))[0] == "toy" and h(np.ones(1))[0] == "default"


def test_plugin_handler_for_a_backend_it_does_not_own(registered, toy):
    def impl(registrar):
        registrar.py_impl(oplib.ops.higher_order.map, "toy", _tag("toy map"))

    registered(make_plugin("toy_map_plugin", oplib_impl=impl))
    assert oplib.map(abs, ToyArray(np.ones(2)))[0] == "toy map"
    assert oplib.ops.higher_order.map.handler("toy").origin.plugin == "toy_map_plugin"


def test_failing_plugin_rolls_back_its_hop_and_handlers(registered):
    def define(registrar):
        registrar.define_higher_order("doomed_hop")

    def impl(registrar):
        registrar.py_impl("doomed_hop", "cpu", _tag("cpu"))
        registrar.py_impl("cond", "privateuse1", _tag("pu"))
        raise RuntimeError("boom")

    with pytest.warns(plugins.PluginWarning, match="boom"):
        registered(make_plugin("doomed", oplib_define=define, oplib_impl=impl))
    assert "doomed_hop" not in oplib.ops.higher_order.__dict__
    assert oplib.ops.higher_order.cond.handler("privateuse1") is None


def test_two_plugins_giving_one_key_conflict_naming_both(registered):
    def define(registrar):
        registrar.define_higher_order("clash_hop")

    def impl_a(registrar):
        registrar.py_impl("clash_hop", "cpu", _tag("a"))

    def impl_b(registrar):
        registrar.py_impl("clash_hop", "cpu", _tag("b"))

    registered(make_plugin("clash_hop_a", oplib_define=define, oplib_impl=impl_a))
    with pytest.warns(plugins.PluginWarning, match="already registered at"):
        registered(make_plugin("clash_hop_b", oplib_impl=impl_b))
    rec = next(r for r in plugins.list() if r.name == "clash_hop_b")
    assert rec.status == "failed"
    assert "plugin 'clash_hop_a'" in rec.error and "plugin 'clash_hop_b'" in rec.error
    assert oplib.ops.higher_order.clash_hop(np.ones(1))[0] == "a"


def test_registrar_refuses_an_unknown_hop(registered):
    def impl(registrar):
        registrar.py_impl("no_such_hop", "cpu", _tag("x"))

    with pytest.warns(plugins.PluginWarning, match="no higher-order operator 'no_such_hop'"):
        registered(make_plugin("unknown_hop_plugin", oplib_impl=impl))


def test_resolve_of_an_unknown_name_is_an_unknown_operator_error():
    from oplib_core._higher_order._operator import resolve_hop

    with pytest.raises(UnknownOperatorError, match=r"defined: .*higher_order::cond"):
        resolve_hop("higher_order::nope", "py_impl")


# -- explain and introspection ---------------------------------------------------------------
def test_explain_shows_keys_steps_and_the_handler():
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    e = oplib.explain(oplib.ops.higher_order.cond, True, abs, abs, (x,))
    assert e.op == "higher_order::cond"
    assert e.schema == "cond(pred, true_fn, false_fn, operands)"
    assert e.keys == ["Autograd", "CPU"]
    assert e.steps[0][0] == "Autograd" and e.steps[0][1].startswith("taken: handler at")
    assert e.chosen == "Autograd handler of higher_order::cond"
    assert "args[3][0]" in e.arrays and "requires grad" in e.arrays["args[3][0]"]
    text = str(e)
    assert "dispatch keys: Autograd > CPU" in text


def test_explain_reports_the_missing_handler(hop):
    hop.py_impl("cpu")(_tag("cpu"))
    e = oplib.explain(hop, oplib.tensor([1.0], requires_grad=True))
    assert e.chosen is None and "no handler for dispatch key 'Autograd'" in e.error
    e = oplib.explain(hop, np.ones(1))
    assert e.chosen == "cpu" and e.steps == [("cpu", e.steps[0][1])]
    with oplib.no_grad():
        e = oplib.explain(hop, oplib.empty(1, device="meta"))
    assert [k for k, _ in e.steps] == ["meta", "Fake", "CompositeExplicitAutograd"]
    assert "no handler for dispatch key 'Meta'" in e.error


def test_op_rows_mark_hops_and_ops():
    rows = op_rows()
    kinds = {r["qualname"]: r["kind"] for r in rows}
    assert kinds["oplib::add"] == "op" and kinds["higher_order::cond"] == "hop"
    cond = next(r for r in rows if r["qualname"] == "higher_order::cond")
    assert cond == {
        "kind": "hop",
        "qualname": "higher_order::cond",
        "schema": "cond(pred, true_fn, false_fn, operands)",
        "keys": ["CompositeExplicitAutograd", "dask"],
        "fake": True,
        "autograd": True,
        "tags": [],
    }
    only = op_rows("higher_order")
    assert {r["kind"] for r in only} == {"hop"}
    assert "dask" in next(r for r in only if r["qualname"] == "higher_order::map")["keys"]


def test_op_detail_of_a_hop_lists_handlers_with_origins(hop):
    hop.py_impl("cpu")(_tag("cpu"))
    hop.py_impl(Logging)(_tag("logging"))
    hop.py_impl("Fake")(_tag("fake"))
    d = op_detail(hop.qualname)
    assert d["kind"] == "hop" and d["qualname"] == hop.qualname
    assert d["defined_at"] == str(hop.origin)
    keys = {k["key"]: k for k in d["kernels"]}
    assert set(keys) == {"cpu", "Logging"}
    assert keys["Logging"]["status"] == "live"
    assert keys["cpu"]["source"].endswith(
        f"test_higher_order.py:{_tag.__code__.co_firstlineno + 1}"
    )
    assert d["fake"]["key"] == "Fake" and d["autograd"] is None
    assert op_detail("oplib::add")["kind"] == "op"


def test_a_fake_mode_handler_replaces_the_fake_handler(hop):
    hop.py_impl("Fake")(_tag("fake"))

    @hop.py_impl(oplib.FakeTensorMode)
    def under_fake(mode, *args):
        assert isinstance(mode, oplib.FakeTensorMode)
        return "mode handler"

    with oplib.FakeTensorMode():
        assert hop(1) == "mode handler"
    assert [k.key for _, k in hop.handlers()] == ["Fake", "FakeTensorMode"]


def test_fake_mode_runs_the_fake_handler_with_the_mode_active(hop):
    @hop.py_impl("Fake")
    def fake(f, x):
        return f(x)

    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones((2, 3)))
        out = hop(lambda a: oplib.ops.oplib.sum(a, [0]), x)
    assert out.shape == (3,) and "FakeTensor" in repr(out)


def test_a_plugin_cannot_redefine_a_builtin(registered):
    def define(registrar):
        registrar.define_higher_order("cond")

    with pytest.warns(plugins.PluginWarning, match=r"higher_order::cond is already defined at"):
        registered(make_plugin("cond_again", oplib_define=define))
    assert oplib.ops.higher_order.cond is oplib._higher_order.cond_op


def test_map_is_public_but_a_star_import_keeps_the_builtin():
    assert oplib.map is oplib._higher_order.map
    assert "map" not in oplib.__all__ and {"cond", "scan", "while_loop"} <= set(oplib.__all__)
    scope: dict[str, object] = {}
    exec("from oplib_core import *", scope)
    assert "map" not in scope and scope["cond"] is oplib.cond


def test_typing_example_of_higher_order_operators_runs():
    import subprocess
    from pathlib import Path

    script = Path(__file__).parent / "typing" / "higher_order_examples.py"
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
