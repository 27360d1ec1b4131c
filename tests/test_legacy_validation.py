"""The legacy API's validation, as torch's ``torch._custom_ops`` (issue 31, item 8), and the
gradient count ``register_autograd`` checks. Messages quote torch 2.13's
(``torch/_custom_op/impl.py``: ``validate_schema``, ``parse_qualname``,
``_check_can_register_backward``, ``_check_doesnt_have_library_autograd_impl``)."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

import oplib_core as oplib
from oplib_core import legacy


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def _gone(qualname: str) -> None:
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.lookup(qualname)


# -- custom_op: what torch's validate_schema refuses ----------------------------------------------
@pytest.mark.parametrize(
    "schema",
    ["(Tensor(a!) x) -> Tensor", "(Tensor(a) x) -> Tensor(a)", "(Tensor x) -> ()"],
    ids=["mutates", "returns-a-view", "returns-nothing"],
)
def test_a_non_functional_schema_is_refused_and_nothing_is_defined(ns, teardown, schema):
    qualname = f"{ns}::bad"
    with pytest.raises(ValueError) as info:
        legacy.custom_op(qualname, schema)
    # torch: "custom_op only supports functional operators (ops that do not mutate any
    # inputs, do not return views of the inputs, and has at least one return). Got the
    # following non-functional schema: bad(Tensor(a!) x) -> Tensor"
    assert str(info.value) == (
        f"custom_op({qualname!r}): custom_op only supports functional operators (ops that do "
        "not mutate any inputs, do not return views of the inputs, and has at least one "
        f"return). Got the following non-functional schema: bad{schema}"
    )
    assert isinstance(info.value, oplib.InvalidArgumentError)
    _gone(qualname)
    teardown(legacy.custom_op(qualname, "(Tensor x) -> Tensor"))  # the name is still free


def test_a_function_returning_none_is_refused(ns):
    def nothing(x: oplib.Tensor) -> None:
        raise NotImplementedError

    with pytest.raises(ValueError, match=r"non-functional schema: nothing\(Tensor x\) -> \(\)$"):
        legacy.custom_op(f"{ns}::nothing")(nothing)
    _gone(f"{ns}::nothing")


def test_an_argument_named_self_is_refused(ns):
    with pytest.raises(ValueError) as info:
        legacy.custom_op(f"{ns}::d", "(Tensor self) -> Tensor")
    # torch: "custom_op does not support arguments named 'self'. Please rename your
    # argument. Got: d(Tensor self) -> Tensor"
    assert str(info.value) == (
        f"custom_op('{ns}::d'): custom_op does not support arguments named 'self'. Please "
        "rename your argument. Got: d(Tensor self) -> Tensor"
    )
    _gone(f"{ns}::d")

    def d(self: oplib.Tensor) -> oplib.Tensor:
        raise NotImplementedError

    with pytest.raises(ValueError, match="does not support arguments named 'self'"):
        legacy.custom_op(f"{ns}::d")(d)
    _gone(f"{ns}::d")


def test_an_overload_name_is_refused(ns):
    # torch: "The torch.custom_ops APIs do not handle overloads, i.e. operator names with
    # '.' in them. Please name your operator something like ns::foo. Got: ns::e.ovl"
    words = re.escape(
        "do not handle overloads, i.e. operator names with '.' in them. Please name your "
        f"operator something like ns::foo. Got: {ns}::e.ovl"
    )
    with pytest.raises(oplib.InvalidNameError, match=words):
        legacy.custom_op(f"{ns}::e.ovl", "(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match=words):
        legacy.custom_op(f"{ns}::e.ovl")
    _gone(f"{ns}::e")


def test_defining_an_op_twice_names_both_definitions(ns, teardown):
    qualname = f"{ns}::twice"
    first = legacy.custom_op(qualname, "(Tensor x) -> Tensor")
    first_line = _line() - 1
    teardown(first)
    with pytest.raises(oplib.RegistrationError) as info:
        legacy.custom_op(qualname, "(Tensor x) -> Tensor")
    second_line = _line() - 1
    here = __file__
    # torch: "Tried to register an operator (ns::twice(Tensor x) -> Tensor) with the same
    # name and overload name multiple times. ... Duplicate registration: registered at ...
    # Original registration: registered at ..."
    assert str(info.value) == (
        f"custom_op(): tried to register an operator ({qualname}(Tensor x) -> Tensor) with the "
        "same name and overload name multiple times. Each overload's schema should only be "
        "registered with a single call to custom_op (or define). Duplicate registration: "
        f"registered at {here}:{second_line}. Original registration: registered at "
        f"{here}:{first_line}"
    )
    assert info.value.existing == f"{here}:{first_line}"
    legacy.impl(qualname, device_types="cpu")(lambda x: x * 2)
    assert first(oplib.tensor([1.0])).tolist() == [2.0]  # the first op is untouched


def test_an_op_defined_otherwise_is_named_too(lib, ns):
    lib.define("other(Tensor x) -> Tensor")
    defined_at = f"{__file__}:{_line() - 1}"
    with pytest.raises(oplib.RegistrationError, match=re.escape(f"registered at {defined_at}")):
        legacy.custom_op(f"{ns}::other", "(Tensor x) -> Tensor")


# -- impl_save_for_backward / impl_backward: torch's _check_can_register_backward ------------------
@pytest.mark.parametrize(
    ("schema", "detail"),
    [
        ("(Tensor(a!) x) -> Tensor", "non-functional operator"),
        ("(Tensor(a) x) -> Tensor(a)", "operator that returns views"),
        ("(Tensor x) -> ()", "operator with no returns"),
    ],
)
@pytest.mark.parametrize("api", ["impl_save_for_backward", "impl_backward"])
def test_backward_refused_for_ops_it_cannot_apply_to(lib, ns, schema, detail, api):
    lib.define(f"op{schema}")
    qualname = f"{ns}::op"
    with pytest.raises(oplib.RegistrationError) as info:
        getattr(legacy, api)(qualname)(lambda *a: None)
    # torch: "Cannot use torch._custom_ops APIs to register backward formula for
    # non-functional operator. Got operator ns::op with schema: ..."
    assert str(info.value).startswith(
        "Cannot use legacy.impl_save_for_backward/impl_backward to register a backward "
        f"formula for {detail}. Got operator {qualname} with schema: "
    )
    assert info.value.op == qualname
    assert not oplib.lookup(qualname).has_kernel("Autograd")


@pytest.mark.parametrize("api", ["impl_save_for_backward", "impl_backward"])
def test_backward_refused_for_a_composite_implicit_op(lib, ns, api):
    lib.define("comp(Tensor x) -> Tensor")
    lib.impl("comp", lambda x: x * 2, "CompositeImplicitAutograd")
    with pytest.raises(oplib.RegistrationError) as info:
        getattr(legacy, api)(f"{ns}::comp")(lambda *a: None)
    message = str(info.value)
    assert message.startswith(
        f"impl_backward/impl_save_for_backward: the operator {ns}::comp already has an "
        "implementation via a pre-existing registration to CompositeImplicitAutograd (at "
        f"{__file__}:"
    )
    assert message.endswith(
        "CompositeImplicitAutograd operators do not need an autograd formula; instead, the "
        "operator will decompose into its constituents and those can have autograd formulas "
        "defined on them."
    )
    assert not oplib.lookup(f"{ns}::comp").has_kernel("Autograd")


@pytest.mark.parametrize("api", ["impl_save_for_backward", "impl_backward"])
def test_backward_refused_for_an_op_with_an_autograd_kernel(lib, ns, api):
    lib.define("ag(Tensor x) -> Tensor")
    lib.impl("ag", lambda x: x * 2, "cpu")
    oplib.register_autograd(f"{ns}::ag", lambda ctx, g: g * 2, lib=lib)
    with pytest.raises(oplib.RegistrationError, match="already has an Autograd kernel registered"):
        getattr(legacy, api)(f"{ns}::ag")(lambda *a: None)


# -- backward results: the wrong number of gradients -----------------------------------------------
def _two_input_op(ns: str, name: str, backward) -> tuple[Any, str]:
    op = oplib.custom_op(
        f"{ns}::{name}",
        lambda x, y: x * y,
        mutates_args=(),
        schema="(Tensor x, Tensor y) -> Tensor",
    )
    op.register_autograd(backward)
    return op, f"{__file__}:{backward.__code__.co_firstlineno}"


@pytest.mark.parametrize(
    ("name", "backward", "got"),
    [
        ("one", lambda ctx, g: g, 1),
        ("none", lambda ctx, g: None, 1),
        ("three", lambda ctx, g: (g, g, g), 3),
        ("short_list", lambda ctx, g: [g], 1),
    ],
)
def test_register_autograd_refuses_the_wrong_number_of_gradients(ns, teardown, name, backward, got):
    op, where = _two_input_op(ns, name, backward)
    teardown(op)
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        op(x, x).sum().backward()
    # torch: "function GeneratedBackwardFor_ns_one_defaultBackward returned an incorrect
    # number of gradients (expected 3, got 2)" (torch counts a hidden argument)
    message = str(info.value)
    assert message.startswith(
        f"In the backward function registered for {ns}::{name} at {where} (register_autograd), "
        f"expected the backward function to return 2 gradient(s), one per input (x, y), but "
        f"got {got} (function "
    )
    assert "returned an incorrect number of gradients" in message


def test_register_autograd_takes_extra_nones_as_torch_does(ns, teardown):
    op, _ = _two_input_op(ns, "extra_none", lambda ctx, g: (g, g, None))
    teardown(op)
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    op(x, x).sum().backward()  # torch 2.13 accepts it too
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0]


def test_a_legacy_backward_returning_no_dict_names_the_op_and_formula(ns, teardown):
    qualname = f"{ns}::nod"
    made = legacy.custom_op(qualname, "(Tensor x) -> Tensor")
    teardown(made)
    legacy.impl(qualname, device_types="cpu")(lambda x: x * 2)
    legacy.impl_save_for_backward(qualname)(lambda inputs, output: None)

    def backward(ctx, saved, grad):
        return None

    legacy.impl_backward(qualname)(backward)
    x = oplib.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        made(x).backward()
    assert str(info.value) == (
        f"In the backward function defined for {qualname} at {__file__}:"
        f"{backward.__code__.co_firstlineno} using the legacy CustomOp API (impl_backward), "
        "expected the output of the backward function to be a dict but got NoneType"
    )


# -- torch.library.custom_op, unlike torch._custom_ops, takes an overload name --------------------
def test_custom_op_with_an_overload_name_joins_the_packet(ns, teardown):
    # torch: custom_op("ns::g") and custom_op("ns::g.ovl") -> torch.ops.ns.g.overloads() ==
    # ['default', 'ovl'], the packet picking one by the arguments
    plain = oplib.custom_op(
        f"{ns}::g", lambda x: x.copy(), mutates_args=(), schema="(Tensor x) -> Tensor"
    )
    teardown(plain)
    two = oplib.custom_op(
        f"{ns}::g.ovl", lambda x, y: x + y, mutates_args=(), schema="(Tensor x, Tensor y) -> Tensor"
    )
    teardown(two)
    packet = oplib.ops.__getattr__(ns).g
    assert sorted(packet.overloads()) == ["default", "ovl"]
    x = oplib.tensor([1.0])
    assert packet(x).tolist() == [1.0] and packet(x, x).tolist() == [2.0]
    assert repr(two) == f"<CustomOpDef({ns}::g.ovl)>"
    # defining the overload again replaces it alone, as for a plain name
    again = oplib.custom_op(
        f"{ns}::g.ovl", lambda x, y: x - y, mutates_args=(), schema="(Tensor x, Tensor y) -> Tensor"
    )
    teardown(again)
    assert packet(x, x).tolist() == [0.0] and plain(x).tolist() == [1.0]


def test_custom_op_decorator_with_an_overload_name(ns, teardown):
    @oplib.custom_op(f"{ns}::h.two", mutates_args=())
    def h(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    teardown(h)
    assert h(oplib.tensor([1.0])).tolist() == [2.0]
    assert oplib.ops.__getattr__(ns).h.overloads() == ["two"]
