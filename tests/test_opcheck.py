"""opcheck: each check catches a planted bug and passes on correct ops; skips are skips;
sample inputs come from plugins and cover the core op set."""

from __future__ import annotations

import re

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import plugins
from oplib_core._opset import CORE_OPS
from oplib_core._registry.registry import REGISTRY
from oplib_core.testing import CHECKS, OpCheckError, SampleInput, run_checks, sample_inputs

OPS = oplib.ops.oplib


def x23(requires_grad=True):
    return oplib.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=requires_grad)


def scale_op(ns, *, kernel=None, fake=None, backward=None, autograd=True):
    """``ns::scale(x) = 3 x`` with a cpu kernel, a fake kernel and a formula, each
    replaceable by a buggy one."""
    q = oplib.define(f"{ns}::scale", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", kernel or (lambda x: x * 3))
    oplib.register_fake(q, fake or (lambda x: oplib.empty_like(x)))
    if autograd:
        oplib.register_autograd(q, backward or (lambda ctx, g: g * 3))
    return getattr(oplib.ops, ns).scale.default


def cpu_only(result):
    """An op with only a cpu kernel: every check succeeds on cpu, and ``test_backends``,
    which had no other backend to compare, is SKIPPED, never a success."""
    return dict(result) == {**{c: "SUCCESS" for c in CHECKS}, "test_backends": "SKIPPED"}


def failure(op, args, kwargs=None, **kw):
    with pytest.raises(OpCheckError) as info:
        oplib.opcheck(op, args, kwargs, **kw)
    return info.value


# -- correct ops pass ------------------------------------------------------------------------
def test_correct_custom_op_passes_every_check(ns):
    op = scale_op(ns)
    result = oplib.opcheck(op, (x23(),))
    assert cpu_only(result)
    assert result.checked
    outcomes = result.backends
    assert outcomes["cpu"].status == "PASS" and outcomes["meta"].status == "PASS"
    npu = outcomes[oplib.backends.get("privateuse1").name]
    assert (npu.status, npu.reason) == ("SKIP", f"no kernel for backend {npu.backend!r}")
    seen = {(r.check, r.backend, r.status) for r in result.details}
    assert ("test_faketensor", "meta", "PASS") in seen  # the meta device, against cpu
    assert ("test_gradcheck", "cpu", "PASS") in seen


def test_core_op_passes_with_packet_and_kwargs():
    x = oplib.tensor(np.linspace(0.5, 2.0, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    assert set(oplib.opcheck(OPS.sum, (x, [1]), {"keepdim": True}).values()) == {"SUCCESS"}
    assert set(oplib.opcheck("oplib::mul.Scalar", (x, 2.0)).values()) == {"SUCCESS"}


def test_custom_op_def_is_accepted(ns):
    @oplib.custom_op(f"{ns}::twice", mutates_args=(), device_types="cpu")
    def twice(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    twice.register_fake(lambda x: oplib.empty_like(x))
    twice.register_autograd(lambda ctx, g: g * 2)
    assert cpu_only(oplib.opcheck(twice, (x23(),)))


def test_native_arrays_are_accepted(ns):
    op = scale_op(ns)
    result = oplib.opcheck(op, (np.ones((2, 2)),))
    assert cpu_only(result)
    assert any(r.reason == "no input requires grad" for r in result.details)


# -- test_schema ----------------------------------------------------------------------------
def test_schema_catches_mutation_of_an_immutable_input(ns):
    def kernel(x):
        x += 1
        return x * 3

    e = failure(scale_op(ns, kernel=kernel), (x23(),))
    assert (e.check, e.backend, e.op) == ("test_schema", "cpu", f"{ns}::scale")
    assert "argument 'x' was mutated" in str(e) and "6 of 6 elements changed" in str(e)
    assert "Tensor(a!) x" in str(e)


def test_schema_catches_an_output_aliasing_an_input(ns):
    e = failure(scale_op(ns, kernel=lambda x: x), (x23(),))
    assert e.check == "test_schema" and "output 0 aliases input 'x'" in str(e)


def test_schema_catches_a_view_returned_as_a_new_tensor(ns):
    e = failure(scale_op(ns, kernel=lambda x: x.reshape(-1).reshape(x.shape)), (x23(),))
    assert "aliases input 'x'" in str(e)


def test_schema_allows_declared_views_and_requires_declared_mutations(ns):
    q = oplib.define(f"{ns}::view", "(Tensor(a) x) -> Tensor(a)")
    oplib.impl(q, "cpu", lambda x: x.reshape(-1))
    op = getattr(oplib.ops, ns).view.default
    assert oplib.opcheck(op, (x23(False),), test_utils="test_schema") == {"test_schema": "SUCCESS"}


def test_schema_warns_on_a_declared_mutation_that_does_not_happen(ns):
    # torch's opcheck accepts over-declaration (flash-attention declares outputs it may
    # not write): a warning, not a failure.
    q = oplib.define(f"{ns}::fill_", "(Tensor(a!) x) -> Tensor(a!)")
    oplib.impl(q, "cpu", lambda x: x)  # does not write for this sample
    with pytest.warns(UserWarning, match="declares argument 'x' mutable") as record:
        result = oplib.opcheck(
            getattr(oplib.ops, ns).fill_.default, (x23(False),), test_utils="test_schema"
        )
    assert result == {"test_schema": "SUCCESS"}
    assert any("left it unchanged" in str(w.message) for w in record)

    # optional outputs an op may or may not write, as flash-attention declares them
    q = oplib.define(f"{ns}::maybe_out", "(Tensor x, Tensor(a!) out, bool write) -> Tensor")

    def maybe_out(x, out, write):
        if write:
            out[...] = x * 2  # kernels see numpy arrays
        return x * 3

    oplib.impl(q, "cpu", maybe_out)
    op = getattr(oplib.ops, ns).maybe_out.default
    with pytest.warns(UserWarning, match="declares argument 'out' mutable"):
        oplib.opcheck(op, (x23(False), oplib.zeros(2, 3), False), test_utils="test_schema")
    assert oplib.opcheck(op, (x23(False), oplib.zeros(2, 3), True), test_utils="test_schema") == {
        "test_schema": "SUCCESS"
    }


def test_schema_undeclared_mutation_and_aliasing_still_fail(ns):
    q = oplib.define(f"{ns}::sneaky", "(Tensor x, Tensor(a!) out) -> Tensor")

    def sneaky(x, out):  # writes the declared out and the undeclared x
        out[...] = x
        x *= 2
        return x * 1

    oplib.impl(q, "cpu", sneaky)
    e = failure(
        getattr(oplib.ops, ns).sneaky.default,
        (x23(False), oplib.zeros(2, 3)),
        test_utils="test_schema",
    )
    assert "argument 'x' was mutated" in str(e)
    q = oplib.define(f"{ns}::alias", "(Tensor x, Tensor(a!) out) -> Tensor")

    def alias(x, out):  # returns the mutated out, undeclared as an alias
        out[...] = x
        return out

    oplib.impl(q, "cpu", alias)
    e = failure(
        getattr(oplib.ops, ns).alias.default,
        (x23(False), oplib.zeros(2, 3)),
        test_utils="test_schema",
    )
    assert "aliases" in str(e)


def test_schema_catches_wrong_return_types_and_devices(ns, toy):
    q = oplib.define(f"{ns}::pair", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: (x * 1, x * 2))
    e = failure(getattr(oplib.ops, ns).pair.default, (x23(False),), test_utils=["test_schema"])
    assert e.check == "test_schema"
    assert "the cpu kernel" in str(e) and "returned a tuple of 2" in str(e)
    assert "the schema returns Tensor" in str(e)

    q = oplib.define(f"{ns}::home", "(Tensor x) -> Tensor")
    oplib.impl(q, "toy", lambda x: np.array(x.data))  # a numpy array from a toy kernel
    x = oplib.tensor(np.ones(3)).to("toy")
    e = failure(getattr(oplib.ops, ns).home.default, (x,), test_utils=["test_schema"])
    assert e.backend == "toy" and "the toy kernel" in str(e)
    assert "(a cpu array)" in str(e) and "expected a toy array" in str(e)


# -- test_autograd_registration ----------------------------------------------------------------
def test_autograd_registration_catches_a_missing_formula(ns):
    e = failure(scale_op(ns, autograd=False), (x23(),))
    assert e.check == "test_autograd_registration"
    assert "'x' require grad) but" in str(e) and "no autograd formula" in str(e)
    assert f"oplib.register_autograd('{ns}::scale'" in str(e)


def test_autograd_registration_skips_without_grad_and_accepts_implicit_composites(ns, lib):
    result = oplib.opcheck(scale_op(ns, autograd=False), (x23(False),))
    assert cpu_only(result)

    lib.define("decomposed(Tensor x) -> Tensor")
    lib.impl("decomposed", lambda x: OPS.mul(x, x), "CompositeImplicitAutograd")
    op = getattr(oplib.ops, ns).decomposed.default
    assert set(oplib.opcheck(op, (x23(),)).values()) == {"SUCCESS"}  # runs on every backend


# -- test_faketensor -----------------------------------------------------------------------------
def test_faketensor_catches_a_wrong_shape(ns):
    e = failure(scale_op(ns, fake=lambda x: x.new_empty((3,))), (x23(),))
    assert e.check == "test_faketensor" and e.backend == "cpu"
    assert "gives shape (3,), the real cpu kernel (2, 3)" in str(e)
    assert "fake kernel (" in str(e)  # names where it was registered


def test_faketensor_catches_a_wrong_dtype_on_meta(ns):
    op = scale_op(ns, fake=lambda x: oplib.empty_like(x, dtype=np.float32))
    results = list(run_checks(op, (x23(),), backend="meta", test_utils=["test_faketensor"]))
    assert [(r.backend, r.status) for r in results] == [("meta", "FAIL")]
    assert "gives dtype float32, the real cpu kernel float64" in results[0].reason


def test_faketensor_catches_a_missing_fake_kernel(ns):
    q = oplib.define(f"{ns}::nofake", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", lambda x: x + 1)
    e = failure(getattr(oplib.ops, ns).nofake.default, (x23(False),))
    assert e.check == "test_faketensor" and "has no fake kernel" in str(e)


# -- test_backends ---------------------------------------------------------------------------------
def test_backends_catches_a_wrong_result(ns, toy):
    op = scale_op(ns)
    oplib.impl(op, "toy", lambda x: toy(x.data * 3 + (x.data > 5), x.index))
    e = failure(op, (x23(),))
    assert (e.check, e.backend) == ("test_backends", "toy")
    assert "output 0 differs from cpu: 1 of 6 elements" in str(e)
    assert "first at index (1, 2): 19.0 on toy vs 18.0 on cpu" in str(e)


def test_backends_without_a_kernel_are_skipped_not_failed(ns, toy):
    result = oplib.opcheck(scale_op(ns), (x23(),))
    assert result["test_backends"] == "SKIPPED"  # compared with no backend: not a success
    assert result.backends["toy"].status == "SKIP"
    toy_row = next(r for r in result.details if r.backend == "toy")
    assert toy_row.status == "SKIP" and toy_row.reason == "no kernel for backend 'toy'"


def test_backends_pass_on_the_private_use_device():
    npu = oplib.backends.get("privateuse1")
    x = oplib.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    result = oplib.opcheck(OPS.tanh.default, (x,), test_utils="test_backends")
    assert ("test_backends", npu.name, "PASS") in {
        (r.check, r.backend, r.status) for r in result.details
    }


def test_backends_catch_mutation_of_an_immutable_input_on_the_private_use_device(ns):
    """The mutation check reads every backend's arrays through its host transfer: a
    private-use kernel that writes its input fails even though its result matches cpu."""
    npu = oplib.backends.get("privateuse1").name
    op = scale_op(ns)

    def kernel(x):
        out = x * 3
        x[0] = 0
        return out

    oplib.impl(op, npu, kernel)
    e = failure(op, (x23(),))
    assert (e.check, e.backend, e.op) == ("test_backends", npu, f"{ns}::scale")
    assert "argument 'x' was mutated" in str(e) and "3 of 6 elements changed" in str(e)
    assert "Tensor(a!) x" in str(e)
    # the same kernel checked where it runs
    x = x23(requires_grad=False).to(npu)
    e = failure(op, (x,), test_utils="test_schema")
    assert (e.check, e.backend) == ("test_schema", npu)
    assert "argument 'x' was mutated" in str(e)


def test_backends_accept_a_declared_mutation_on_another_backend(ns, toy):
    q = oplib.define(f"{ns}::fill_", "(Tensor(a!) x) -> ()")
    oplib.impl(q, "cpu", lambda x: x.__setitem__(..., 1.0))
    oplib.impl(q, "toy", lambda x: x.data.__setitem__(..., 1.0))
    result = oplib.opcheck(
        getattr(oplib.ops, ns).fill_.default, (x23(False),), test_utils="test_backends"
    )
    assert ("toy", "PASS") in {(r.backend, r.status) for r in result.details}


# -- test_gradcheck --------------------------------------------------------------------------------
def test_gradcheck_catches_a_wrong_formula(ns):
    e = failure(scale_op(ns, backward=lambda ctx, g: g * 2), (x23(),))
    assert e.check == "test_gradcheck"
    assert "Jacobian mismatch for output 0 with respect to input 0" in str(e)
    assert re.search(r"is (np.float64\()?2\.0\)? by the autograd formula", str(e))


def test_raise_exception_false_returns_the_errors(ns):
    result = oplib.opcheck(
        scale_op(ns, backward=lambda ctx, g: g * 2), (x23(),), raise_exception=False
    )
    assert isinstance(result["test_gradcheck"], OpCheckError)
    assert {k for k, v in result.items() if v == "SUCCESS"} == set(CHECKS) - {
        "test_gradcheck",
        "test_backends",
    }
    assert result["test_backends"] == "SKIPPED"


def test_unknown_test_util_and_op():
    with pytest.raises(ValueError, match="unknown test_util 'test_nope'"):
        oplib.opcheck(OPS.neg.default, (x23(),), test_utils=["test_nope"])
    with pytest.raises(oplib.UnknownOperatorError, match="operator 'nope::x' does not exist"):
        oplib.opcheck("nope::x", (x23(),))


# -- sample inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta", "privateuse1"])
def test_core_samples_cover_every_core_op(device):
    names = [f"oplib::{core.name}" for core in CORE_OPS] + ["oplib::_to_copy"]
    for name in names:
        samples = sample_inputs(REGISTRY.ops[name].overload, device)
        assert samples, name
        assert all(isinstance(s, SampleInput) and s.name for s in samples)


def test_a_plugin_adds_samples_for_its_ops(ns):
    op = scale_op(ns)

    class Samples:
        @oplib.hookimpl
        def oplib_sample_inputs(self, op, device):
            if op.name() != f"{ns}::scale":
                return None
            yield ((oplib.ones(2, device=device, requires_grad=True),), {})
            yield SampleInput((oplib.zeros(3, device=device),), name="zeros")

    plugins.register(Samples(), name=f"{ns}-samples")
    try:
        samples = sample_inputs(op, "cpu")
        assert [s.name for s in samples] == ["", "zeros"]
        assert sample_inputs(OPS.neg.default, "cpu")  # core samples still there
    finally:
        plugins.unregister(f"{ns}-samples")
    assert sample_inputs(op, "cpu") == []


def test_narrow_has_a_fake_kernel():
    x = oplib.tensor(np.ones((4, 3)), requires_grad=True)
    oplib.opcheck(OPS._narrow.default, (x, 0, 1, 2))


def test_schema_finds_aliasing_on_a_device_whose_memory_it_cannot_inspect(ns):
    """The private-use device's arrays are opaque: aliasing is found by writing to the
    output and watching the input."""
    npu = oplib.backends.get("privateuse1").name
    reshape = OPS.reshape.default
    q = oplib.define(f"{ns}::flat_view", "(Tensor x) -> Tensor")
    oplib.impl(q, npu, lambda x: reshape(reshape(x, [-1]), list(x.shape)))
    x = oplib.tensor(np.ones((2, 2))).to(npu)
    e = failure(getattr(oplib.ops, ns).flat_view.default, (x,), test_utils="test_schema")
    assert e.backend == npu and "output 0 aliases input 'x'" in str(e)
