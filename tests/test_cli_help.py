"""``help(oplib.ops.ns.op)`` and ``help(oplib.ops.ns.op.overload)`` show the op (issue 32,
item 7): its schemas, tags, where it was defined and its docstring, not the internal
class; the classes keep their own docstrings."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np

import oplib_core as oplib
from oplib_core import OpOverloadPacket
from oplib_core._dispatch import OpOverload


def render(obj: object) -> str:
    plain = pydoc.plaintext  # pyright: ignore[reportAttributeAccessIssue]  # (not in the stubs)
    return pydoc.render_doc(obj, renderer=plain)


def test_help_of_a_packet_shows_every_schema_not_the_class():
    text = render(oplib.ops.oplib.add)
    assert text.startswith("Python Library Documentation: OpOverloadPacket in module")
    for name in ("add", "add.Scalar", "add.out", "add.Scalar_out"):
        schema = str(getattr(oplib.ops.oplib.add, name.partition(".")[2] or "default").schema)
        assert schema.startswith(f"oplib::{name}(") and schema in text
    assert "Tags: pointwise" in text and "Defined at " in text and "_core_plugin.py:" in text
    assert "oplib.ops.oplib.add.default, .Scalar, .out, .Scalar_out" in text
    assert "_OverloadedPacket" not in text and "Methods defined here" not in text
    assert type(oplib.ops.oplib.add).__qualname__ == "_OverloadedPacket"  # repr stays true


def test_help_of_an_overload_shows_its_schema():
    text = render(oplib.ops.oplib.add.Scalar)
    assert "Python Library Documentation: OpOverload" in text
    assert "oplib::add.Scalar(Tensor self, Scalar other) -> Tensor" in text
    assert "oplib::add(Tensor self" not in text  # only this overload
    assert "Methods defined here" not in text
    factory = render(oplib.ops.oplib.zeros.default)  # another class underneath
    assert "oplib::zeros(SymInt[] size" in factory and "_FactoryOverload" not in factory
    assert "oplib::zeros(SymInt[] size" in render(oplib.ops.oplib.zeros)


def test_help_shows_the_docstring_of_the_function_custom_op_made_the_op_from(ns):
    @oplib.custom_op(f"{ns}::scale", mutates_args=(), device_types="cpu")
    def scale(x: oplib.Tensor, factor: float) -> oplib.Tensor:
        """Multiply ``x`` by ``factor``, elementwise."""
        return x * factor

    packet = getattr(oplib.ops, ns).scale
    for text in (render(packet), render(packet.default), inspect.getdoc(packet) or ""):
        assert f"{ns}::scale(Tensor x, float factor) -> Tensor" in text
        assert "Multiply ``x`` by ``factor``, elementwise." in text
        assert f"{__file__}:" in text  # where it was defined


def test_help_shows_a_default_kernels_docstring_and_no_ufuncs(lib, ns):
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", np.negative, "CPU")  # a ufunc: its (long) docstring is not the op's
    text = render(getattr(oplib.ops, ns).twice)
    assert f"{ns}::twice(Tensor x) -> Tensor" in text and "Numerical negative" not in text

    def twice(x):
        """Double ``x``."""
        return x + x

    lib.impl("twice", twice, "CompositeExplicitAutograd")
    assert "Double ``x``." in render(getattr(oplib.ops, ns).twice)


def test_the_classes_keep_their_own_docstrings():
    assert OpOverloadPacket.__doc__ is not None
    assert OpOverloadPacket.__doc__.startswith("All overloads of ``ns::name``")
    assert OpOverload.__doc__ is not None and OpOverload.__doc__.startswith("One overload")
    assert "All overloads of" in render(OpOverloadPacket)
    # an instance's text differs from the class's: pydoc documents the instance
    assert oplib.ops.oplib.neg.__doc__ != type(oplib.ops.oplib.neg).__doc__
