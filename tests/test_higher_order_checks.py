"""Higher-order operators on Dask (``oplib_dask.higher_order``), ``opcheck`` of a HOP, and
``oplib check``'s samples for the built-in control-flow operators."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.testing._runner import check_ops

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

ops = oplib.ops.oplib
HOPS = ("higher_order::cond", "higher_order::map", "higher_order::scan", "higher_order::while_loop")
_ids = itertools.count()


@pytest.fixture(autouse=True)
def threaded():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture
def xs():
    data = np.arange(24.0).reshape(8, 3)
    return data, da.from_array(data, chunks=(3, 2))


# -- Dask --------------------------------------------------------------------------------------
def test_dask_map_runs_one_task_per_block_of_rows(xs):
    data, x = xs
    out = oplib.map(lambda r, w: r * w + 1.0, x, 2.0)
    assert isinstance(out, da.Array) and out.chunks == ((3, 3, 2), (3,))
    # one task per row block (after the rechunk of the other dims), not one per row
    assert sum(1 for k in dict(out.dask) if k[0] == out.name) == 3
    np.testing.assert_array_equal(out.compute(), data * 2.0 + 1.0)


def test_dask_map_several_outputs_and_inputs(xs):
    data, x = xs
    y = da.from_array(np.ones(8), chunks=4)
    sums, scaled = oplib.map(lambda p: (ops.sum(p[0]) + p[1], p[0] * 0.5), (x, y))
    np.testing.assert_array_equal(sums.compute(), data.sum(1) + 1.0)
    np.testing.assert_array_equal(scaled.compute(), data * 0.5)


def test_dask_map_computes_dask_extra_args_once(xs):
    data, x = xs
    w = da.from_array(np.array([1.0, 0.0, -1.0]), chunks=2)
    np.testing.assert_array_equal(oplib.map(lambda r, v: r * v, x, w).compute(), data * [1, 0, -1])


def test_dask_map_first_sizes_must_agree(xs):
    _, x = xs
    with pytest.raises(oplib.ControlFlowError, match="same first size, got 8, 5"):
        oplib.map(lambda p: p[0], (x, da.ones(5)))


def test_dask_map_handler_is_credited_to_the_dask_plugin():
    k = oplib.ops.higher_order.map.handler("dask")
    assert k is not None and k.origin.plugin == "dask"
    assert oplib.ops.higher_order.cond.handler("dask").origin.plugin == "dask"


def test_dask_cond_computes_the_predicate_and_stays_lazy(xs):
    data, x = xs
    out = oplib.cond(ops.sum(x) > 0, lambda a: a * 2.0, lambda a: a, (x,))
    assert isinstance(out, da.Array)
    np.testing.assert_array_equal(out.compute(), data * 2.0)
    assert oplib.cond(False, lambda a: a * 2.0, lambda a: a - 1.0, (x,)).compute()[0, 0] == -1.0


def test_dask_scan_and_while_loop_use_the_generic_handlers(xs):
    data, x = xs
    carry, ys = oplib.scan(lambda c, r: (c + r, c * 1.0), np.zeros(3), x)
    np.testing.assert_array_equal(carry.compute(), data.sum(0))
    np.testing.assert_array_equal(ys.compute()[-1], data[:-1].sum(0))
    i, y = oplib.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + 1.0), (0, x))
    assert i == 2 and isinstance(y, da.Array)


# -- opcheck -----------------------------------------------------------------------------------
def _t(data, grad=False):
    return oplib.tensor(np.asarray(data, dtype=np.float64), requires_grad=grad)


def test_opcheck_accepts_a_hop_with_functions():
    x = _t(np.linspace(-1, 1, 6).reshape(3, 2), grad=True)
    res = oplib.opcheck(oplib.ops.higher_order.map, (lambda r: r.sin() * 2.0, x, ()))
    assert set(res) == {
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
        "test_backends",
        "test_gradcheck",
    }
    assert {r.check: r.status for r in res.details if r.backend == "cpu"}[
        "test_gradcheck"
    ] == "PASS"
    assert any(r.backend == "meta" and r.status == "PASS" for r in res.details)


def test_opcheck_of_a_hop_finds_a_wrong_fake_handler(teardown):
    hop = oplib.HigherOrderOperator(f"t_check_hop{next(_ids)}")
    teardown(hop)
    hop.py_impl("default")(lambda f, x: f(x))
    hop.py_impl("Fake")(lambda f, x: x.new_empty((1,)))  # wrong shape
    with pytest.raises(oplib.OpCheckError, match=r"test_faketensor failed.*shape \(1,\)"):
        oplib.opcheck(hop, (lambda a: a * 2.0, _t(np.ones((2, 2)))), test_utils="test_faketensor")


def test_opcheck_of_a_hop_without_autograd_handler_fails_registration(teardown):
    hop = oplib.HigherOrderOperator(f"t_check_hop{next(_ids)}")
    teardown(hop)
    hop.py_impl("default")(lambda f, x: f(x))
    res = oplib.opcheck(
        hop,
        (lambda a: a, _t([1.0], grad=True)),
        test_utils=["test_autograd_registration"],
        raise_exception=False,
    )
    assert isinstance(res["test_autograd_registration"], oplib.OpCheckError)
    assert "has no Autograd handler" in str(res["test_autograd_registration"])


def test_opcheck_of_a_hop_finds_a_backend_that_disagrees(teardown):
    hop = oplib.HigherOrderOperator(f"t_check_hop{next(_ids)}")
    teardown(hop)
    hop.py_impl("default")(lambda f, x: f(x))
    hop.py_impl("dask")(lambda f, x: f(x) + 1.0)
    with pytest.raises(
        oplib.OpCheckError, match=r"test_backends failed on backend dask: output 0 differs"
    ):
        oplib.opcheck(
            hop, (lambda a: a * 2.0, _t([1.0, 2.0])), test_utils="test_backends", backends=["dask"]
        )


def test_opcheck_gradcheck_catches_a_wrong_autograd_handler(teardown):
    hop = oplib.HigherOrderOperator(f"t_check_hop{next(_ids)}")
    teardown(hop)
    hop.py_impl("default")(lambda f, x: f(x))

    @hop.py_impl("Autograd")
    def wrong(f, x):
        return f(x.detach()) + x * 0.0  # drops the gradient through f

    with pytest.raises(oplib.OpCheckError, match="test_gradcheck failed"):
        oplib.opcheck(
            hop, (lambda a: a.sin(), _t([0.5, 1.0], grad=True)), test_utils="test_gradcheck"
        )


# -- oplib check -------------------------------------------------------------------------------
def test_check_includes_the_builtin_hops_with_samples():
    report = check_ops(HOPS, backends=["cpu", "meta", "dask"])
    statuses = {(r.op, r.backend, r.check): r.status for r in report.rows}
    assert not report.failed, [r for r in report.rows if r.status == "FAIL"]
    for name in HOPS:
        assert statuses[(name, "cpu", "test_faketensor")] == "PASS"
        assert statuses[(name, "meta", "test_faketensor")] == "PASS"
        assert statuses[(name, "dask", "test_backends")] == "PASS"
    for name in HOPS[:3]:
        assert statuses[(name, "cpu", "test_gradcheck")] == "PASS"
    assert statuses[("higher_order::while_loop", "cpu", "test_gradcheck")] == "SKIP"


def test_check_of_every_op_lists_the_hops():
    report = check_ops(None, backends=["cpu"], test_utils=["test_faketensor"])
    assert set(HOPS) <= {r.op for r in report.rows}
