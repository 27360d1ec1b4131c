"""opcheck passes where torch's opcheck passes: a check that cannot apply is a skip with
its reason (a kernel that refuses float64, an op that returns nothing, a numpy ``default``
kernel on a device's arrays), and the bugs the checks exist for still fail."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.testing import CHECKS, OpCheckError, run_checks

OPS = oplib.ops.oplib


def failure(op, args, **kw):
    with pytest.raises(OpCheckError) as info:
        oplib.opcheck(op, args, **kw)
    return info.value


def rows(result, check):
    return {r.backend: (r.status, r.reason) for r in result.details if r.check == check}


def only(dtype, name="ns::op"):
    """A kernel body ``3 x`` that refuses every dtype but ``dtype``, as GPU kernels do."""

    def kernel(x):
        if x.dtype != dtype:
            raise TypeError(f"{name}: expected {np.dtype(dtype)}, got {x.dtype}")
        return x * 3

    return kernel


def scale(ns, dtype, backward=lambda ctx, g: g * 3):
    q = oplib.define(f"{ns}::scale", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", only(dtype, f"{ns}::scale"))
    oplib.register_fake(q, lambda x: oplib.empty_like(x))
    oplib.register_autograd(q, backward)
    return getattr(oplib.ops, ns).scale.default


def x23(dtype, requires_grad=True):
    data = np.linspace(0.5, 3.0, 6, dtype=dtype).reshape(2, 3)
    return oplib.tensor(data, requires_grad=requires_grad)


# -- test_gradcheck: float64 where the kernel takes it, else the inputs' own dtype --------------
def test_a_float32_only_op_passes_gradcheck_in_float32(ns):
    op = scale(ns, np.float32)
    result = oplib.opcheck(op, (x23(np.float32),))
    assert dict(result) == {**{c: "SUCCESS" for c in CHECKS}, "test_backends": "SKIPPED"}
    assert rows(result, "test_gradcheck") == {"cpu": ("PASS", "")}


def test_a_float32_only_op_with_a_wrong_formula_still_fails(ns):
    op = scale(ns, np.float32, backward=lambda ctx, g: g * 2)
    e = failure(op, (x23(np.float32),))
    assert (e.check, e.backend, e.op) == ("test_gradcheck", "cpu", f"{ns}::scale")
    assert "Jacobian mismatch for output 0 with respect to input 0" in str(e)
    assert "eps=0.001" in str(e) and "atol=0.01, rtol=0.01" in str(e)


def test_an_op_that_takes_float64_is_checked_in_float64(ns):
    # 3.01 instead of 3 is within float32's tolerances (atol = rtol = 1e-2) but not
    # float64's (atol 1e-5, rtol 1e-3): the float32 input is checked in float64.
    q = oplib.define(f"{ns}::scale", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x * 3)
    oplib.register_fake(q, lambda x: oplib.empty_like(x))
    oplib.register_autograd(q, lambda ctx, g: g * 3.01)
    e = failure(getattr(oplib.ops, ns).scale.default, (x23(np.float32),))
    assert e.check == "test_gradcheck" and "eps=1e-06" in str(e)


def test_a_float16_only_op_is_a_gradcheck_skip_naming_the_refusal(ns):
    op = scale(ns, np.float16)
    result = oplib.opcheck(op, (x23(np.float16),))
    status, reason = rows(result, "test_gradcheck")["cpu"]
    assert status == "SKIP"
    assert reason.startswith(f"{ns}::scale refuses float64 (TypeError: {ns}::scale: expected")
    assert "finite differences in float16 are too coarse" in reason
    assert result["test_gradcheck"] == "SUCCESS"  # nothing to compare on cpu: not a failure


def test_mixed_float32_inputs_and_an_int_argument(ns):
    q = oplib.define(f"{ns}::axpy", "(Tensor x, Tensor y, int k) -> Tensor")

    def axpy(x, y, k):
        if x.dtype != np.float32 or y.dtype != np.float32:
            raise TypeError("float32 only")
        return x * k + y

    oplib.impl(q, "cpu", axpy)
    oplib.register_fake(q, lambda x, y, k: oplib.empty_like(x))
    oplib.register_autograd(
        q,
        lambda ctx, g: (g * ctx.k, g, None),
        setup_context=lambda ctx, inputs, output: setattr(ctx, "k", inputs[2]),
    )
    op = getattr(oplib.ops, ns).axpy.default
    result = oplib.opcheck(op, (x23(np.float32), x23(np.float32), 4))
    assert rows(result, "test_gradcheck") == {"cpu": ("PASS", "")}


# -- test_autograd_registration: only where an output would require grad -------------------------
def test_a_mutating_op_returning_nothing_needs_no_formula(ns):
    q = oplib.define(f"{ns}::add_into_", "(Tensor(a!) out, Tensor x) -> ()")

    def add_into_(out, x):
        np.add(out, x, out=out)

    oplib.impl(q, "cpu", add_into_)
    oplib.register_fake(q, lambda out, x: None)
    op = getattr(oplib.ops, ns).add_into_.default
    out = oplib.zeros(2, 3, dtype=oplib.float64)
    result = oplib.opcheck(op, (out, x23(np.float64)))
    assert dict(result) == {**{c: "SUCCESS" for c in CHECKS}, "test_backends": "SKIPPED"}
    why = f"{ns}::add_into_ returns nothing: no output could require grad"
    for check in ("test_autograd_registration", "test_gradcheck"):
        status, reason = rows(result, check)["cpu"]
        assert status == "SKIP" and reason.startswith(why), (check, reason)


def test_a_mutating_op_as_torch_code_registers_it_passes_every_check(ns, lib):
    """causal-conv1d's pattern: ``Library.define`` of ``-> ()``, one cpu kernel, no fake
    kernel and no formula, called with an input that requires grad: torch's opcheck passes."""
    lib.define("scale_into_(Tensor(a!) out, Tensor x, float alpha) -> ()")

    def scale_into_(out, x, alpha):
        np.multiply(x, alpha, out=out)

    lib.impl("scale_into_", scale_into_, "CPU")
    op = getattr(oplib.ops, ns).scale_into_.default
    out = oplib.zeros(2, 3, dtype=oplib.float32)
    result = oplib.opcheck(op, (out, x23(np.float32), 2.0))
    assert dict(result) == {**{c: "SUCCESS" for c in CHECKS}, "test_backends": "SKIPPED"}
    assert not [r for r in result.details if r.status == "FAIL"]


def test_an_op_returning_its_mutated_input_or_integers_needs_no_formula(ns):
    q = oplib.define(f"{ns}::fill_from_", "(Tensor(a!) out, Tensor x) -> Tensor(a!)")

    def fill_from_(out, x):
        out[...] = x
        return out

    oplib.impl(q, "cpu", fill_from_)
    oplib.register_fake(q, lambda out, x: out)
    out = oplib.zeros(2, 3, dtype=oplib.float64)
    result = oplib.opcheck(getattr(oplib.ops, ns).fill_from_.default, (out, x23(np.float64)))
    assert rows(result, "test_autograd_registration")["cpu"][0] == "SKIP"

    q = oplib.define(f"{ns}::argmax", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: np.asarray(np.argmax(x), dtype=np.int64))
    oplib.register_fake(q, lambda x: x.new_empty((), dtype=np.int64))
    result = oplib.opcheck(getattr(oplib.ops, ns).argmax.default, (x23(np.float64),))
    status, reason = rows(result, "test_autograd_registration")["cpu"]
    assert status == "SKIP" and "returns no floating tensor of its own" in reason


def test_a_missing_formula_for_a_floating_output_still_fails(ns):
    q = oplib.define(f"{ns}::double", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x * 2)
    oplib.register_fake(q, lambda x: oplib.empty_like(x))
    e = failure(getattr(oplib.ops, ns).double.default, (x23(np.float64),))
    assert (e.check, e.backend) == ("test_autograd_registration", "cpu")
    assert f"at least one output of {ns}::double would require grad" in str(e)
    assert "inputs 'x' require grad) but the operator has no autograd formula" in str(e)


# -- test_backends: a numpy default kernel runs on cpu only ----------------------------------------
def numpy_default(ns, body=np.sin):
    q = oplib.define(f"{ns}::npsin", "(Tensor x) -> Tensor")
    oplib.impl(q, "default", lambda x: body(x))
    oplib.register_fake(q, lambda x: oplib.empty_like(x))
    return getattr(oplib.ops, ns).npsin.default


def test_a_numpy_default_kernel_skips_the_backends_it_cannot_take(ns):
    npu = oplib.backends.get("privateuse1").name
    op = numpy_default(ns)
    x = oplib.tensor(np.linspace(0, 1, 6, dtype=np.float32))
    result = oplib.opcheck(op, (x,))
    backends = rows(result, "test_backends")
    for name, error in ((npu, "TypeError"), ("jax", "KernelResultError")):
        status, reason = backends[name]
        assert status == "SKIP", (name, reason)
        assert reason.startswith(f"the default kernel of {ns}::npsin (")
        assert f"cannot take {name} arrays: {error}: " in reason
        assert "register it for 'cpu'" in reason
        assert not next(r for r in result.details if r.backend == name).covered
    assert backends["dask"] == ("PASS", "")  # numpy's ufuncs take dask arrays
    assert result["test_backends"] == "SUCCESS"


def test_a_default_kernel_only_on_cpu_and_unsupported_elsewhere_is_skipped(ns):
    op = numpy_default(ns)
    x = oplib.tensor(np.linspace(0, 1, 6, dtype=np.float32))
    result = oplib.opcheck(op, (x,), backends=[oplib.backends.get("privateuse1").name])
    assert result["test_backends"] == "SKIPPED"  # compared with no backend


def test_backends_that_ran_the_default_kernel_and_disagree_still_fail(ns):
    def off_on_dask(x):  # numpy's answer on cpu, one more on every other array type
        return x * 3 if isinstance(x, np.ndarray) else x * 3 + 1

    e = failure(
        numpy_default(ns, off_on_dask), (x23(np.float32, requires_grad=False),), backends=["dask"]
    )
    assert (e.check, e.backend) == ("test_backends", "dask")
    assert "output 0 differs from cpu" in str(e)


def test_a_device_kernel_that_raises_still_fails(ns):
    npu = oplib.backends.get("privateuse1").name
    op = numpy_default(ns)

    def broken(x):
        raise ValueError("npu kernel bug")

    oplib.impl(op, npu, broken)
    results = list(
        run_checks(
            op,
            (x23(np.float32, requires_grad=False),),
            test_utils="test_backends",
            backends=[npu],
        )
    )
    assert [(r.backend, r.status) for r in results] == [(npu, "FAIL")]
    assert results[0].reason == "raised ValueError: npu kernel bug"
