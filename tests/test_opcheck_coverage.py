"""opcheck tells the truth about coverage: a backend without a kernel for the op is a
skip, never a success; per-backend outcomes; gradcheck skips when the formula needs an op
the backend has no kernel for."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.testing import BackendOutcome, run_checks
from oplib_core.testing._checks import UNCHECKED

from helpers import ToyArray


def _cpu_op(ns: str):
    q = oplib.define(f"{ns}::twice", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x * 2)
    oplib.register_fake(q, lambda x: oplib.empty_like(x))
    oplib.register_autograd(q, lambda ctx, g: g * 2)
    return oplib.lookup(q)


def test_inputs_on_a_backend_without_a_kernel_check_nothing(ns):
    op = _cpu_op(ns)
    x = oplib.tensor(np.ones(3), device="privateuse1")
    result = oplib.opcheck(op, (x,))
    assert set(result.values()) == {"SKIPPED"}
    assert result.checked is False
    [(name, outcome)] = result.backends.items()
    assert isinstance(outcome, BackendOutcome)
    assert (name, outcome.status) == (x.device.type, "SKIP")
    assert outcome.reason == f"no kernel for backend {x.device.type!r}"
    assert len(outcome.results) == 5


def test_a_failure_is_the_backends_outcome(ns):
    q = oplib.define(f"{ns}::bad", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x * 2)
    oplib.register_fake(q, lambda x: oplib.empty(1))  # wrong shape
    result = oplib.opcheck(q, (oplib.tensor(np.ones(3)),), raise_exception=False)
    assert result.backends["cpu"].status == "FAIL"
    assert "shape" in result.backends["cpu"].reason
    assert result.checked


def test_unchecked_handler_is_called_only_when_nothing_was_checked(ns):
    op = _cpu_op(ns)
    calls = []
    token = UNCHECKED.set(lambda backend, reason: calls.append((backend, reason)))
    try:
        oplib.opcheck(op, (oplib.tensor(np.ones(3)),))
        assert calls == []
        x = oplib.tensor(np.ones(3), device="privateuse1")
        oplib.opcheck(op, (x,))
    finally:
        UNCHECKED.reset(token)
    assert calls == [
        (x.device.type, f"opcheck({ns}::twice): no kernel for backend {x.device.type!r}")
    ]


@pytest.fixture
def toy_grad(teardown):
    """A ``toygrad`` backend with data (to and from the host), registered for the test."""
    spec = oplib.BackendSpec(
        name="toygrad",
        array_types=(ToyArray,),
        to_host=lambda a: a.data,
        from_host=lambda a, d: ToyArray(np.array(a, copy=True)),
    )
    teardown(oplib.backends.register(spec))


def test_gradcheck_skips_when_the_formula_needs_an_op_without_a_kernel(ns, toy_grad, teardown):
    """The formula of ``ns::cube`` uses ``oplib::mul``, which toygrad has no kernel for:
    gradcheck there is a SKIP naming the op, not a FAIL; on cpu it passes."""
    q = oplib.define(f"{ns}::cube", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x**3)
    oplib.impl(q, "toygrad", lambda x: ToyArray(x.data**3))
    oplib.register_fake(q, lambda x: oplib.empty_like(x))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * x * 3

    oplib.register_autograd(q, backward, setup_context=setup_context)
    # gradcheck copies its inputs on the device: give toygrad that much
    lib = oplib.Library("oplib", "IMPL")
    teardown(lib)
    lib.impl("clone", lambda x, **kw: ToyArray(x.data.copy()), "toygrad")
    x = oplib.tensor(np.array([0.5, 1.5]), requires_grad=True)
    [cpu] = run_checks(q, (x,), test_utils="test_gradcheck", backend="cpu")
    assert cpu.status == "PASS"
    [toy] = run_checks(q, (x,), test_utils="test_gradcheck", backend="toygrad")
    assert toy.status == "SKIP", toy.reason
    assert toy.reason == (
        f"checking the gradients of {ns}::cube needs oplib::mul, which has no kernel for "
        "backend 'toygrad'"
    )


def test_a_hop_compared_with_no_backend_is_skipped_not_a_success(toy_grad, teardown):
    """A higher-order operator with a cpu handler only: against the one other backend,
    ``test_backends`` is SKIPPED, and that backend's outcome is a skip."""
    hop = oplib.HigherOrderOperator("t_cov_hop")
    teardown(hop)
    hop.py_impl("cpu")(lambda f, x: f(x))
    hop.py_impl("Fake")(lambda f, x: f(x))
    res = oplib.opcheck(
        hop, (lambda a: a * 2.0, oplib.tensor(np.ones((2, 2)))), backends=["toygrad"]
    )
    assert res["test_backends"] == "SKIPPED"
    outcome = res.backends["toygrad"]
    assert (outcome.status, outcome.reason) == ("SKIP", "no handler for backend 'toygrad'")
    assert res.backends["cpu"].status == "PASS"
