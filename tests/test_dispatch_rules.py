"""``oplib.register_dispatch_rule``: torch's ``torch.library.register_torch_dispatch``."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import oplib_core as oplib


class Plus1Mode(oplib.DispatchMode):
    pass


class Other(oplib.DispatchMode):
    pass


def _op(lib: oplib.Library, ns: str, name: str = "foo") -> oplib.OpOverload:
    lib.define(f"{name}(Tensor x) -> Tensor")
    lib.impl(name, lambda x: x.copy(), "default")
    return oplib.lookup(f"{ns}::{name}")


def test_rule_runs_under_its_mode_only(lib, ns):
    op = _op(lib, ns)
    calls = []

    # torch's docstring example, with oplib's names
    def rule(mode, func, types, args, kwargs):
        calls.append((type(mode), func, types, args, kwargs))
        (x,) = args
        return func(x) + 1  # the mode is inactive here: runs the kernel

    handle = oplib.register_dispatch_rule(f"{ns}::foo", Plus1Mode, rule, lib=lib)
    assert isinstance(handle, oplib.library.Handle) and handle.active
    x = oplib.tensor(np.zeros(2))
    assert np.array_equal(op(x).numpy(), [0.0, 0.0])
    with Plus1Mode():
        y = op(x)
    assert np.array_equal(y.numpy(), [1.0, 1.0])
    assert calls == [(Plus1Mode, op, (oplib.Tensor,), (x,), {})]
    with Other():  # another mode class: its generic dispatch
        assert np.array_equal(op(x).numpy(), [0.0, 0.0])
    handle.destroy()
    with Plus1Mode():
        assert np.array_equal(op(x).numpy(), [0.0, 0.0])


def test_decorator_form_accepts_any_operator_form(lib, ns):
    op = _op(lib, ns)

    @oplib.register_dispatch_rule(oplib.ops.__getattr__(ns).foo, Plus1Mode)
    def rule(mode, func, types, args, kwargs):
        return func(*args, **kwargs) + 1

    assert callable(rule) and rule.__name__ == "rule"  # returned unchanged
    with Plus1Mode():
        assert op(np.zeros(1))[0] == 1.0


def test_custom_op(ns):
    @oplib.custom_op(f"{ns}::cube", mutates_args=())
    def cube(x: oplib.Tensor) -> oplib.Tensor:
        return x**3  # kernels receive native arrays

    @oplib.register_dispatch_rule(cube, Plus1Mode)
    def _(mode, func, types, args, kwargs):
        return func(*args, **kwargs) + 1

    with Plus1Mode():
        assert cube(oplib.tensor(np.full(1, 2.0))).numpy()[0] == 9.0


def test_lib_owns_the_rule(lib, ns):
    op = _op(lib, ns)
    with oplib.library._scoped_library(ns, "FRAGMENT") as owner:
        oplib.register_dispatch_rule(op, Plus1Mode, lambda m, f, t, a, k: "rule", lib=owner)
        with Plus1Mode():
            assert op(np.zeros(1)) == "rule"
    with Plus1Mode():  # gone with the Library
        assert op(np.zeros(1))[0] == 0.0
    # and registrable again
    oplib.register_dispatch_rule(op, Plus1Mode, lambda m, f, t, a, k: "again", lib=lib)
    with Plus1Mode():
        assert op(np.zeros(1)) == "again"


def test_unknown_op(ns):
    with pytest.raises(oplib.UnknownOperatorError, match="register_dispatch_rule"):
        oplib.register_dispatch_rule(f"{ns}::nope", Plus1Mode, lambda *a: None)
    with pytest.raises(oplib.UnknownOperatorError):

        @oplib.register_dispatch_rule(f"{ns}::nope", Plus1Mode)
        def _(mode, func, types, args, kwargs): ...


def test_mode_must_be_a_dispatch_mode_class(lib, ns):
    _op(lib, ns)
    with pytest.raises(TypeError, match="DispatchMode subclass"):
        oplib.register_dispatch_rule(f"{ns}::foo", Plus1Mode(), lambda *a: None)  # type: ignore[arg-type]


def test_second_rule_for_op_and_mode_names_the_first(lib, ns):
    op = _op(lib, ns)

    def first(mode, func, types, args, kwargs):
        return "first"

    line = first.__code__.co_firstlineno
    oplib.register_dispatch_rule(op, Plus1Mode, first, lib=lib)
    with pytest.raises(oplib.RegistrationError) as info:
        oplib.register_dispatch_rule(op, Plus1Mode, lambda *a: "second", lib=lib)
    assert f"{__file__}:{line}" in str(info.value)
    assert info.value.existing == f"{__file__}:{line}"
    with Plus1Mode():  # the first stays
        assert op(np.zeros(1)) == "first"
    # another mode class is not a conflict
    oplib.register_dispatch_rule(op, Other, lambda *a: "other", lib=lib)
    with Other():
        assert op(np.zeros(1)) == "other"


def test_conflict_with_py_impl(lib, ns):
    op = _op(lib, ns)
    op.py_impl(Plus1Mode)(lambda mode, *a, **k: "py_impl")
    with pytest.raises(oplib.RegistrationError, match="py_impl"):
        oplib.register_dispatch_rule(op, Plus1Mode, lambda *a: None, lib=lib)


def test_exported():
    assert "register_dispatch_rule" in oplib.__all__
    assert oplib.library.register_dispatch_rule is oplib.register_dispatch_rule
    assert sys.modules["oplib_core.library"].register_dispatch_rule is oplib.register_dispatch_rule
