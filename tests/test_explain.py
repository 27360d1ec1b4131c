"""``oplib.explain``: the dispatch decision without running a kernel."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib


@pytest.fixture
def counted(lib, ns):
    calls = []

    def kernel(x):
        calls.append(x)
        return -x

    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", kernel, "CPU")
    return getattr(oplib.ops, ns).neg, calls


def test_explain_runs_no_kernel(counted):
    op, calls = counted
    x = np.ones(2)
    before = oplib.explain(op, x)
    assert calls == []
    assert before.backend == "cpu" and before.keys == ["CPU"]
    assert before.chosen == "cpu" and before.cache_hit is False
    assert before.steps[0][0] == "cpu" and before.steps[0][1].startswith("taken: kernel at")
    op(x)
    assert len(calls) == 1
    assert "argument x: numpy.ndarray on cpu" in str(oplib.explain(op, x))


@pytest.mark.fastpath
def test_explain_reports_the_cache(counted):
    op, calls = counted
    x = np.ones(2)
    assert oplib.explain(op, x).cache_hit is False
    op(x)
    assert oplib.explain(op, x).cache_hit is True
    assert "dispatch cache: hit" in str(oplib.explain(op, x))
    assert calls == [x]


def test_explain_shows_the_autograd_step(counted):
    op, _ = counted
    t = oplib.tensor([1.0], requires_grad=True)
    e = oplib.explain(op, t)
    assert e.keys == ["Autograd", "CPU"]
    assert e.steps == [("Autograd", "error: no formula")]
    assert "Autograd has not been implemented" in e.error
    with oplib.no_grad():
        e = oplib.explain(op, t)
    assert e.keys == ["CPU"] and ("Autograd", "skipped: grad mode is off") in e.steps


def test_explain_lists_skipped_candidates_in_order(lib, ns):
    lib.define("op(Tensor x) -> Tensor")
    lib.impl("op", oplib.fallthrough_kernel, "CPU")
    lib.impl("op", lambda x: x, "CompositeExplicitAutograd")
    e = oplib.explain(getattr(oplib.ops, ns).op, np.ones(1))
    assert e.steps[0] == ("cpu", "skipped: fallthrough_kernel")
    assert e.steps[1][0] == "CompositeExplicitAutograd" and e.steps[1][1].startswith("taken")
    assert e.chosen == "CompositeExplicitAutograd"


def test_explain_reports_no_kernel_and_device_mismatch(lib, ns, toy):
    lib.define("op(Tensor x, Tensor y) -> Tensor")
    lib.impl("op", lambda x, y: x, "CPU")
    op = getattr(oplib.ops, ns).op
    e = oplib.explain(op, toy(np.ones(2)), toy(np.ones(2)))
    assert e.chosen is None and "no kernel for backend 'toy'" in e.error
    e = oplib.explain(op, np.ones(2), toy(np.ones(2)))
    assert e.error.startswith("DeviceMismatchError")


def test_explain_rejects_bad_arguments_like_the_call(counted):
    op, _ = counted
    with pytest.raises(TypeError, match="argument 'x' must be Tensor"):
        oplib.explain(op, "nope")


def test_explain_reports_what_the_call_does_with_a_formula_and_without_autograd(lib, ns, teardown):
    from conftest import ToyArray, toy_spec

    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", lambda x: -x, "CPU")
    lib.impl("neg", lambda x: ToyArray(-x.data), "toyng2")
    oplib.register_autograd(f"{ns}::neg", lambda ctx, g: -g, lib=lib)
    op = getattr(oplib.ops, ns).neg
    e = oplib.explain(op, oplib.tensor([1.0], requires_grad=True))
    assert e.keys == ["Autograd", "CPU"] and e.chosen == f"Autograd kernel of {ns}::neg"
    assert e.steps == [("Autograd", "taken: autograd formula (or implicit composite)")]
    undo = oplib.backends.register(toy_spec(name="toyng2", autograd=False))
    teardown(undo)
    t = oplib.Tensor(ToyArray(np.ones(1))).requires_grad_()
    e = oplib.explain(op, t)
    assert e.steps == [("Autograd", "error: the backend does not record gradients")]
    assert "autograd does not run on toyng2" in e.error and e.chosen is None
    with pytest.raises(oplib.AutogradUnsupportedError):
        op(t)  # what the explanation said
