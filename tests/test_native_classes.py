"""Opaque classes in schemas (``ns::Name``, torch's ``__torch__.torch.classes.ns.Name``),
Python classes registered with ``register_class``, fake classes with
``__obj_flatten__``/``__obj_unflatten__`` under FakeTensorMode and opcheck, pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core import parse_schema


class Packed:
    """A real object: a weight matrix and a bias."""

    def __init__(self, w: np.ndarray, b: float) -> None:
        self.w = w
        self.b = b

    def __obj_flatten__(self):
        return (("w", self.w), ("b", self.b))


class FakePacked:
    def __init__(self, w, b):
        self.w = w
        self.b = b

    @classmethod
    def __obj_unflatten__(cls, flat):
        return cls(**dict(flat))


SEEN: list[type] = []


@pytest.fixture
def packed(ns, lib):
    qual = f"{ns}::Packed"
    oplib.register_class(qual, Packed, lib=lib)
    lib.define(f"linear(Tensor x, {qual} p) -> Tensor")

    @oplib.register_kernel(f"{ns}::linear", "cpu", lib=lib)
    def _(x, p):
        assert isinstance(p, Packed)
        return x @ p.w + p.b

    @oplib.register_fake(f"{ns}::linear", lib=lib)
    def _(x, p):
        SEEN.append(type(p))  # FakePacked under FakeTensorMode; the real one on meta
        return x.new_empty(x.shape[0], p.w.shape[1])

    return qual


def test_schema_class_types_in_both_spellings():
    a = parse_schema("m::f(m::Packed p, Tensor x) -> Tensor")
    b = parse_schema("m::f(__torch__.torch.classes.m.Packed p, Tensor x) -> Tensor")
    assert a == b and str(a) == "m::f(m::Packed p, Tensor x) -> Tensor"
    assert str(parse_schema("m::g(m::Packed? p=None) -> m::Packed"))
    with pytest.raises(
        oplib.SchemaError, match=r"unknown type 'Packd'.*or a class name 'ns::Name'"
    ):
        parse_schema("m::f(Packd p) -> Tensor")
    with pytest.raises(oplib.SchemaError, match="unknown type '__torch__'"):
        parse_schema("m::f(__torch__.torch.m.Packed p) -> Tensor")


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}::[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True))
def test_any_class_name_round_trips(name):
    schema = parse_schema(f"m::f({name} p, {name}? q=None) -> {name}")
    assert parse_schema(str(schema)) == schema


def test_python_class_as_argument(packed, ns):
    p = Packed(np.eye(2), 1.0)
    x = np.array([[1.0, 2.0]])
    np.testing.assert_array_equal(getattr(oplib.ops, ns).linear(x, p), x + 1.0)
    with pytest.raises(TypeError, match=f"{ns}::linear"):
        getattr(oplib.ops, ns).linear(x, "not packed")


def test_fake_mode_needs_a_fake_class_then_uses_it(packed, ns, lib):
    p = Packed(np.ones((2, 3)), 0.0)
    op = getattr(oplib.ops, ns).linear
    with (
        oplib.FakeTensorMode() as mode,
        pytest.raises(
            oplib.RegistrationError, match=f"{ns}::Packed has no fake class.*register_fake_class"
        ),
    ):
        op(mode.from_real(np.ones((4, 2))), p)
    oplib.register_fake_class(packed, FakePacked, lib=lib)
    SEEN.clear()
    with oplib.FakeTensorMode() as mode:
        out = op(mode.from_real(np.ones((4, 2))), p)
    assert out.shape == (4, 3) and [FakePacked] == SEEN
    oplib.opcheck(op, (np.ones((4, 2)), p))


def test_register_fake_class_checks_the_class(packed, lib):
    class NoUnflatten:
        pass

    class NotClassmethod:
        def __obj_unflatten__(self, flat):
            return self

    with pytest.raises(
        oplib.RegistrationError, match="doesn't define a classmethod __obj_unflatten__"
    ):
        oplib.register_fake_class(packed, NoUnflatten, lib=lib)
    with pytest.raises(oplib.RegistrationError, match="is not a classmethod"):
        oplib.register_fake_class(packed, NotClassmethod, lib=lib)
    with pytest.raises(oplib.UnknownOperatorError, match="class 'zz::Nope' is not registered"):
        oplib.register_fake_class("zz::Nope", FakePacked, lib=lib)
    oplib.register_fake_class(packed, FakePacked, lib=lib)
    with pytest.raises(
        oplib.RegistrationError,
        match=r"already has a fake class registered at .*test_native_classes\.py",
    ):
        oplib.register_fake_class(packed, FakePacked, lib=lib)


def test_a_real_object_without_obj_flatten_is_explained(ns, lib):
    class Opaque:
        pass

    qual = f"{ns}::Opaque"
    oplib.register_class(qual, Opaque, lib=lib)
    oplib.register_fake_class(qual, FakePacked, lib=lib)
    lib.define(f"use(Tensor x, {qual} o) -> Tensor")
    oplib.register_fake(f"{ns}::use", lambda x, o: x, lib=lib)
    with (
        oplib.FakeTensorMode() as mode,
        pytest.raises(oplib.RegistrationError, match="must define __obj_flatten__"),
    ):
        getattr(oplib.ops, ns).use(mode.from_real(np.ones(2)), Opaque())


def test_register_class_conflicts_and_names(ns, lib):
    oplib.register_class(f"{ns}::A", Packed, lib=lib)
    with pytest.raises(oplib.RegistrationError, match=f"class {ns}::A is already registered at"):
        oplib.register_class(f"{ns}::A", FakePacked, lib=lib)
    with pytest.raises(oplib.InvalidNameError, match="expected a class name 'namespace::Name'"):
        oplib.register_class("NoNamespace", Packed)
    assert getattr(oplib.classes, ns).A is Packed


def test_registration_ends_with_its_library(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    oplib.register_class(f"{ns}::Gone", Packed, lib=lib)
    lib._destroy()
    with pytest.raises(AttributeError, match=f"no class {ns}::Gone"):
        getattr(oplib.classes, ns).Gone  # noqa: B018


def test_python_objects_pickle_as_python_objects(packed):
    p = pickle.loads(pickle.dumps(Packed(np.ones(2), 2.0)))
    assert p.b == 2.0 and p.w.tolist() == [1.0, 1.0]


def test_a_class_as_return_type(ns, lib):
    qual = f"{ns}::Made"
    oplib.register_class(qual, Packed, lib=lib)
    lib.define(f"make(Tensor w, float b) -> {qual}")
    oplib.register_kernel(f"{ns}::make", "cpu", lambda w, b: Packed(w, b), lib=lib)
    made = getattr(oplib.ops, ns).make(np.ones(2), 3.0)
    assert isinstance(made, Packed) and made.b == 3.0
    assert isinstance(getattr(oplib.ops, ns).make(oplib.tensor([1.0]), 1.0), Packed)
