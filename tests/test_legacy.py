"""The legacy torch._custom_ops-style API: define, impl, impl_save_for_backward +
impl_backward with the dict-of-gradients contract and its validation."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import legacy


@pytest.fixture
def op(ns):
    qualname = f"{ns}::mul3"
    made = legacy.custom_op(qualname, "(Tensor x, Tensor y, int k) -> Tensor")

    @legacy.impl(qualname, device_types="cpu")
    def kernel(x, y, k):
        return x * y * k

    yield qualname, made
    made._destroy()


def test_schema_from_function_and_name_check(ns, teardown):
    def foo(x: oplib.Tensor) -> oplib.Tensor:
        raise NotImplementedError

    made = legacy.custom_op(f"{ns}::foo")(foo)
    teardown(made)
    assert str(made._schema) == f"{ns}::foo(Tensor x) -> Tensor"
    with pytest.raises(ValueError, match="expected `func` to have name 'bar' but got 'foo'"):
        legacy.custom_op(f"{ns}::bar")(foo)


def test_backward_with_dict_of_gradients(op):
    qualname, made = op
    legacy.impl_save_for_backward(qualname)(lambda inputs, output: (inputs.x, inputs.y, inputs.k))

    @legacy.impl_backward(qualname)
    def backward(ctx, saved, grad):
        x, y, k = saved
        return {"x": grad * y * k, "y": grad * x * k}

    x = oplib.tensor([2.0], requires_grad=True)
    y = oplib.tensor([5.0], requires_grad=True)
    made(x, y, 3).backward()
    assert x.grad.tolist() == [15.0] and y.grad.tolist() == [6.0]


def test_only_one_of_the_two_registered_raises(op):
    qualname, made = op

    @legacy.impl_backward(qualname)
    def backward(ctx, saved, grad):
        return {"x": grad, "y": grad}

    with pytest.raises(
        RuntimeError,
        match=r"found a 'backward' registration .* unable to find a 'save_for_backward'",
    ):
        made(oplib.tensor([1.0], requires_grad=True), oplib.tensor([1.0]), 1)


def test_registering_twice_raises(op):
    qualname, _ = op
    legacy.impl_save_for_backward(qualname)(lambda inputs, output: None)
    with pytest.raises(RuntimeError, match="already has a save_for_backward impl registered"):
        legacy.impl_save_for_backward(qualname)(lambda inputs, output: None)


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ((1, 2), "expected the output of the backward function to be a dict but got tuple"),
        (
            {"x": None},
            "expected the returned grad_input dict to have keys ['x', 'y'] but got ['x']",
        ),
        ({"x": None, "y": None, "k": None}, "to have keys ['x', 'y'] but got ['k', 'x', 'y']"),
        ({"x": 3.0, "y": None}, "got object of type float as the gradient for input 'x'"),
    ],
)
def test_grad_inputs_dict_validation(op, result, words):
    qualname, made = op
    legacy.impl_save_for_backward(qualname)(lambda inputs, output: None)

    def backward(ctx, saved, grad):
        return result

    legacy.impl_backward(qualname)(backward)
    out = made(oplib.tensor([1.0], requires_grad=True), oplib.tensor([1.0]), 1)
    with pytest.raises(RuntimeError) as info:
        out.backward()
    msg = str(info.value)
    assert words in msg, msg
    assert f"In the backward function defined for {qualname} at " in msg
    assert f"test_legacy.py:{backward.__code__.co_firstlineno}" in msg


def test_output_differentiability(ns, teardown):
    qualname = f"{ns}::split"
    made = legacy.custom_op(qualname, "(Tensor x) -> (Tensor, Tensor)")
    teardown(made)
    legacy.impl(qualname, device_types="cpu")(lambda x: (x * 2, x * 3))
    with pytest.raises(
        RuntimeError, match="expected output_differentiability to be a list of bools"
    ):
        legacy.impl_backward(qualname, output_differentiability=[True])
    legacy.impl_save_for_backward(qualname)(lambda inputs, output: None)
    legacy.impl_backward(qualname, output_differentiability=[True, False])(
        lambda ctx, saved, g0, g1: {"x": g0 * 2}
    )
    x = oplib.tensor([1.0], requires_grad=True)
    a, b = made(x)
    assert a.requires_grad and not b.requires_grad
    a.backward()
    assert x.grad.tolist() == [2.0]


def test_non_functional_and_conflicting_registrations(ns, teardown):
    with pytest.raises(ValueError, match="only supports functional operators"):
        legacy.custom_op(f"{ns}::bad", "(Tensor(a!) x) -> ()")
    qualname = f"{ns}::f"
    made = legacy.custom_op(qualname, "(Tensor x) -> Tensor")
    teardown(made)
    oplib.register_autograd(qualname, lambda ctx, g: g, lib=made._lib)
    with pytest.raises(RuntimeError, match="already has an Autograd kernel registered at"):
        legacy.impl_backward(qualname)(lambda ctx, saved, g: {"x": g})
    made._destroy()
    with pytest.raises(oplib.UnknownOperatorError, match=rf"operator '{qualname}' does not exist"):
        legacy.impl_backward(qualname)


def test_impl_abstract_registers_the_fake_kernel(ns, teardown):
    qualname = f"{ns}::g"
    made = legacy.custom_op(qualname, "(Tensor x) -> Tensor")
    teardown(made)
    legacy.impl_abstract(qualname)(lambda x: oplib.empty_like(x))
    assert oplib.lookup(qualname).has_kernel("Fake")
    assert np is not None
