"""The registration API: define / impl / register_kernel / register_fake / custom_op and
the Library lifetime rules (DEF / IMPL / FRAGMENT, reserved namespaces, destroy, gc)."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import library as libmod
from oplib_core._registry.registry import REGISTRY
from oplib_core.library import _scoped_library

from helpers import toy_spec

THIS_FILE = os.path.basename(__file__)


def _next_line() -> int:
    """The line after the caller's current line."""
    return sys._getframe(1).f_lineno + 1


def _where(fn) -> str:
    return f"{THIS_FILE}:{fn.__code__.co_firstlineno}"


def _packet(ns: str, name: str):
    return getattr(getattr(oplib.ops, ns), name)


def _has_op(ns: str, name: str) -> bool:
    return hasattr(getattr(oplib.ops, ns), name)


def _kernel_keys(qualname: str) -> set[str]:
    return set(REGISTRY.ops[qualname].kernels)


# -- define / impl (functional API) --------------------------------------------------------


def test_define_then_impl_then_call(ns):
    qn = oplib.define(f"{ns}::twice", "(Tensor x) -> Tensor")
    assert qn == f"{ns}::twice"
    oplib.impl(qn, "cpu", lambda x: x * 2)
    out = _packet(ns, "twice")(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(out, [2.0, 4.0])


def test_define_with_overload_name(ns):
    qn = oplib.define(f"{ns}::f.out", "(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    assert qn == f"{ns}::f.out"
    op = _packet(ns, "f").out
    assert op.name() == f"{ns}::f.out"
    assert str(op._schema) == f"{ns}::f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)"


def test_impl_as_decorator_returns_function(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    @oplib.impl(qn, "cpu")
    def kernel(x):
        return x + 1

    assert callable(kernel) and kernel(np.array(1.0)) == 2.0
    assert _packet(ns, "f")(np.array([1.0]))[0] == 2.0


def test_impl_accepts_opoverload_and_key_names(ns):
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    op = _packet(ns, "f").default
    oplib.impl(op, "CPU", lambda x: x + 10)
    assert _kernel_keys(f"{ns}::f") == {"cpu"}
    assert op(np.array([0.0]))[0] == 10.0


def test_impl_default_registers_composite_explicit(ns, toy):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "default", lambda x: x)
    assert _kernel_keys(qn) == {"CompositeExplicitAutograd"}
    a = toy(np.ones(2))
    assert _packet(ns, "f")(a) is a


def test_impl_of_undefined_op_names_it(ns):
    with pytest.raises(oplib.RegistrationError, match=rf"operator '{ns}::nope' does not exist"):
        oplib.impl(f"{ns}::nope", "cpu", lambda x: x)


def test_impl_unknown_key_is_an_error_naming_it(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(oplib.RegistrationError, match=r"unknown dispatch key 'NotAKey'"):
        oplib.impl(qn, "NotAKey", lambda x: x)
    assert _kernel_keys(qn) == set()


def test_a_backends_dispatch_key_names_it_only_while_it_is_installed(ns):
    # normalize_key remembers its answers (every registration asks): a backend coming or
    # going must change them
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(oplib.UnknownDispatchKeyError, match=r"unknown dispatch key 'Toy'"):
        oplib.impl(qn, "Toy", lambda x: x)
    undo = oplib.backends.register(toy_spec())
    try:
        oplib.impl(qn, "Toy", lambda x: x)
        assert _kernel_keys(qn) == {"toy"}
    finally:
        undo()
    with pytest.raises(oplib.UnknownDispatchKeyError, match=r"unknown dispatch key 'Toy'"):
        oplib.impl(qn, "Toy", lambda x: x)
    assert _kernel_keys(qn) == {"toy"}


def test_impl_non_callable_is_type_error(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(TypeError, match=rf"expected a callable kernel for {ns}::f, got 3"):
        oplib.impl(qn, "cpu", 3)


def test_define_requires_qualified_name():
    with pytest.raises(ValueError, match=r"expected a qualified name 'namespace::name', got 'sin'"):
        oplib.define("sin", "(Tensor x) -> Tensor")


def test_define_bad_schema_is_schema_error(ns):
    with pytest.raises(oplib.SchemaError):
        oplib.define(f"{ns}::f", "(Tensor x -> Tensor")
    assert not _has_op(ns, "f")


def test_define_tags(ns):
    oplib.define(f"{ns}::p", "(Tensor x) -> Tensor", tags=oplib.Tag.pointwise)
    oplib.define(f"{ns}::q", "(Tensor x) -> Tensor", tags=[oplib.Tag.pointwise])
    oplib.define(f"{ns}::r", "(Tensor x) -> Tensor")
    assert _packet(ns, "p").default.tags == (oplib.Tag.pointwise,)
    assert _packet(ns, "q").default.tags == (oplib.Tag.pointwise,)
    assert _packet(ns, "r").default.tags == ()


def test_define_rejects_non_tag(ns):
    with pytest.raises(TypeError, match=r"tags must be oplib.Tag members, got 'pointwise'"):
        oplib.define(f"{ns}::p", "(Tensor x) -> Tensor", tags=["pointwise"])
    assert not _has_op(ns, "p")


# -- duplicates name both origins ----------------------------------------------------------


def test_duplicate_define_names_both_origins(ns):
    first = _next_line()
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(oplib.RegistrationError) as info:
        second = _next_line()
        oplib.define(f"{ns}::f", "(Tensor x, int n) -> Tensor")
    msg = str(info.value)
    assert f"operator {ns}::f is already defined at " in msg
    assert f"{THIS_FILE}:{first}" in msg
    assert f"{THIS_FILE}:{second}" in msg
    assert info.value.op == f"{ns}::f"
    assert info.value.existing.endswith(f"{THIS_FILE}:{first}")
    # the first definition is untouched
    assert str(_packet(ns, "f").default._schema) == f"{ns}::f(Tensor x) -> Tensor"


def test_duplicate_kernel_names_both_origins(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    def first(x):
        return x + 1

    def second(x):
        return x + 2

    oplib.impl(qn, "cpu", first)
    with pytest.raises(oplib.RegistrationError) as info:
        oplib.impl(qn, "cpu", second)
    msg = str(info.value)
    assert qn in msg
    assert "'cpu'" in msg
    assert _where(first) in msg
    assert _where(second) in msg
    assert "allow_override=True" in msg
    assert info.value.existing.endswith(_where(first))
    # the first kernel still serves
    assert _packet(ns, "f")(np.array([0.0]))[0] == 1.0


def test_duplicate_kernel_through_key_alias_is_detected(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "cpu", lambda x: x)
    with pytest.raises(oplib.RegistrationError, match="already has a kernel for 'cpu'"):
        oplib.impl(qn, "CPU", lambda x: x)
    oplib.impl(qn, "default", lambda x: x)
    with pytest.raises(oplib.RegistrationError, match="CompositeExplicitAutograd"):
        oplib.impl(qn, "CompositeExplicitAutograd", lambda x: x)


def test_duplicate_fake_kernel_is_an_error(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    def fake1(x):
        return x

    def fake2(x):
        return x

    oplib.register_fake(qn, fake1)
    with pytest.raises(oplib.RegistrationError, match="already has a fake kernel") as info:
        oplib.register_fake(qn, fake2)
    assert _where(fake1) in str(info.value) and _where(fake2) in str(info.value)


# -- allow_override --------------------------------------------------------------------------


def test_allow_override_replaces_and_undo_restores(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "cpu", lambda x: x + 1)
    op = _packet(ns, "f")
    x = np.array([0.0])
    assert op(x)[0] == 1.0  # fills the cache
    with _scoped_library(ns, "IMPL") as override:
        override.impl("f", lambda x: x + 2, "CPU", allow_override=True)
        assert op(x)[0] == 2.0
        assert op(x)[0] == 2.0
    assert op(x)[0] == 1.0
    assert op(x)[0] == 1.0


def test_allow_override_functional_with_lib(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "cpu", lambda x: x + 1)
    override = oplib.Library(ns, "IMPL")
    oplib.register_kernel(qn, "cpu", lambda x: x + 5, lib=override, allow_override=True)
    assert _packet(ns, "f")(np.array([0.0]))[0] == 5.0
    override._destroy()
    assert _packet(ns, "f")(np.array([0.0]))[0] == 1.0


def test_removing_the_overridden_kernel_keeps_the_override(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    base = oplib.Library(ns, "IMPL")
    base.impl("f", lambda x: x + 1, "cpu")
    top = oplib.Library(ns, "IMPL")
    top.impl("f", lambda x: x + 2, "cpu", allow_override=True)
    base._destroy()
    assert _packet(ns, "f")(np.array([0.0]))[0] == 2.0
    top._destroy()
    assert _kernel_keys(qn) == set()


# -- nothing half-registers ---------------------------------------------------------------------


def test_failed_multi_key_registration_leaves_nothing(ns, toy):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "cpu", lambda x: x + 1)
    with pytest.raises(oplib.RegistrationError, match="already has a kernel for 'cpu'"):
        oplib.register_kernel(qn, ["toy", "default", "cpu"], lambda x: x)
    assert _kernel_keys(qn) == {"cpu"}
    # registering toy and default again works: nothing was left behind
    oplib.register_kernel(qn, ["toy", "default"], lambda x: x)
    assert _kernel_keys(qn) == {"cpu", "toy", "CompositeExplicitAutograd"}


def test_failed_multi_key_registration_with_bad_key_leaves_nothing(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(oplib.RegistrationError, match="'Bogus'"):
        oplib.impl(qn, ["cpu", "Bogus"], lambda x: x)
    assert _kernel_keys(qn) == set()


def test_custom_op_register_kernel_failure_leaves_nothing(ns, toy, teardown):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    teardown(f)
    with pytest.raises(oplib.RegistrationError, match="already has a kernel for 'cpu'"):
        f.register_kernel(["toy", "cpu"], lambda x: x)
    assert _kernel_keys(f"{ns}::f") == {"cpu"}
    f.register_kernel("toy", lambda x: x)
    assert _kernel_keys(f"{ns}::f") == {"cpu", "toy"}


def test_custom_op_register_kernel_over_its_own_kernel(ns, teardown):
    """torch's ``CustomOpDef.register_kernel`` replaces a device's kernel silently; oplib
    asks for ``allow_override=True`` (docs/coming-from-torch.md), and a function for every
    device (``device_types=None``) leaves each device free for a kernel of its own."""

    @oplib.custom_op(f"{ns}::both", mutates_args=(), device_types=("cpu",))
    def both(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    @oplib.custom_op(f"{ns}::every", mutates_args=())
    def every(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    teardown(both)
    teardown(every)
    x = oplib.tensor([1.0])
    with pytest.raises(
        oplib.RegistrationError, match=rf"{ns}::both already has a kernel for 'cpu'"
    ):
        both.register_kernel("cpu", lambda x: x + 2)
    both.register_kernel("cpu", lambda x: x + 3, allow_override=True)
    assert both(x).tolist() == [4.0]
    every.register_kernel("cpu", lambda x: x + 5)
    assert every(x).tolist() == [6.0]


def test_custom_op_with_bad_device_type_is_not_defined(ns):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    with pytest.raises(oplib.RegistrationError, match="'Bogus'"):
        oplib.custom_op(f"{ns}::f", f, mutates_args=(), device_types=["cpu", "Bogus"])
    assert f"{ns}::f" not in REGISTRY.ops
    assert not _has_op(ns, "f")
    # the name is free again
    op = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    op._destroy()


# -- register_kernel / register_fake / impl_abstract ---------------------------------------------


def test_register_kernel_none_means_every_device(ns, toy):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.register_kernel(qn, None, lambda x: x)
    assert _kernel_keys(qn) == {"CompositeExplicitAutograd"}
    a = toy(np.ones(1))
    assert _packet(ns, "f")(a) is a


def test_register_kernel_rejects_non_string_types(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.raises(TypeError, match="expected a device type or a sequence of them"):
        oplib.register_kernel(qn, [1], lambda x: x)
    with pytest.raises(TypeError, match="expected a device type or a sequence of them"):
        oplib.register_kernel(qn, [], lambda x: x)


def test_register_fake_decorator_and_lookup(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    @oplib.register_fake(qn)
    def fake(x):
        return x

    assert REGISTRY.ops[qn].kernel("Fake").fn is fake


def test_impl_abstract_warns_and_registers_fake(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    def fake(x):
        return x

    with pytest.warns(FutureWarning, match="register_fake"):
        oplib.impl_abstract(qn, fake)
    assert REGISTRY.ops[qn].kernel("Fake").fn is fake


def test_impl_abstract_warning_points_at_caller(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    with pytest.warns(FutureWarning) as record:
        oplib.impl_abstract(qn, lambda x: x)
    assert os.path.basename(record[0].filename) == THIS_FILE


def test_qualname_of_rejects_non_ops():
    with pytest.raises(TypeError, match="expected an operator"):
        oplib.register_fake(42, lambda x: x)


# -- Library kinds -----------------------------------------------------------------------------


def test_library_kind_must_be_valid(ns):
    with pytest.raises(ValueError, match=r"kind must be one of DEF, IMPL, FRAGMENT, got 'def'"):
        oplib.Library(ns, "def")


def test_library_namespace_must_be_identifier():
    with pytest.raises(ValueError, match=r"namespace must be an identifier, got 'a::b'"):
        oplib.Library("a::b", "FRAGMENT")


@pytest.mark.parametrize("reserved", ["oplib", "prim"])
@pytest.mark.parametrize("kind", ["DEF", "FRAGMENT"])
def test_reserved_namespaces_cannot_be_defined(reserved, kind):
    with pytest.raises(ValueError, match=rf"'{reserved}' is a reserved namespace"):
        oplib.Library(reserved, kind)


@pytest.mark.parametrize("reserved", ["oplib", "prim"])
def test_reserved_namespaces_in_functional_define(reserved):
    with pytest.raises(ValueError, match=rf"'{reserved}' is a reserved namespace"):
        oplib.define(f"{reserved}::mine", "(Tensor x) -> Tensor")
    assert f"{reserved}::mine" not in REGISTRY.ops


def test_reserved_namespace_allows_impl(toy):
    with _scoped_library("oplib", "IMPL") as lib:
        lib.impl("neg", lambda x: toy(-x.data), "toy")
        out = oplib.ops.oplib.neg(toy(np.array([1.0])))
        np.testing.assert_array_equal(out.data, [-1.0])
    assert "toy" not in _kernel_keys("oplib::neg")
    assert "cpu" in _kernel_keys("oplib::neg")


def test_custom_op_in_reserved_namespace_is_refused():
    with pytest.raises(ValueError, match="reserved namespace"):
        oplib.custom_op("oplib::mine", lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")
    assert "oplib::mine" not in REGISTRY.ops


def test_only_one_def_library_per_namespace(ns, teardown):
    line = _next_line()
    first = oplib.Library(ns, "DEF")
    teardown(first)
    with pytest.raises(ValueError, match="only one DEF library may exist") as info:
        oplib.Library(ns, "DEF")
    assert f"{THIS_FILE}:{line}" in str(info.value)
    # FRAGMENTs coexist with the DEF
    frag = oplib.Library(ns, "FRAGMENT")
    frag._destroy()
    first._destroy()
    # after the DEF is gone, a new one may be made
    again = oplib.Library(ns, "DEF")
    again._destroy()


def test_def_namespace_freed_by_gc(ns):
    first = oplib.Library(ns, "DEF")
    del first
    gc.collect()
    second = oplib.Library(ns, "DEF")
    second._destroy()


def test_impl_library_cannot_define(ns):
    with (
        _scoped_library(ns, "IMPL") as lib,
        pytest.raises(oplib.RegistrationError, match="IMPL libraries cannot define"),
    ):
        lib.define("f(Tensor x) -> Tensor")
    assert not _has_op(ns, "f")


def test_library_define_returns_qualname_and_accepts_own_namespace(lib, ns):
    assert lib.define("f(Tensor x) -> Tensor") == f"{ns}::f"
    assert lib.define(f"{ns}::g(Tensor x) -> Tensor") == f"{ns}::g"
    assert lib.define("f.Scalar(Tensor x, Scalar s) -> Tensor") == f"{ns}::f.Scalar"
    assert _packet(ns, "f").overloads() == ["default", "Scalar"]


def test_library_define_other_namespace_is_refused(lib, ns):
    msg = rf"names namespace 'other' but this Library is for '{ns}'"
    with pytest.raises(ValueError, match=msg):
        lib.define("other::f(Tensor x) -> Tensor")


def test_library_define_alias_analysis(lib):
    lib.define("a(Tensor x) -> Tensor", alias_analysis="FROM_SCHEMA")
    lib.define("b(Tensor x) -> Tensor", alias_analysis="CONSERVATIVE")
    with pytest.raises(ValueError, match="invalid alias_analysis 'PURE'"):
        lib.define("c(Tensor x) -> Tensor", alias_analysis="PURE")


def test_library_impl_other_namespace_is_refused(lib, ns):
    with pytest.raises(ValueError, match=r"operator other::f is not in this Library's namespace"):
        lib.impl("other::f", lambda x: x, "cpu")


def test_library_impl_default_key(ns, toy):
    with _scoped_library(ns, "FRAGMENT", "CPU") as lib:
        lib.define("f(Tensor x) -> Tensor")
        lib.impl("f", lambda x: x)
        assert _kernel_keys(f"{ns}::f") == {"cpu"}
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("g(Tensor x) -> Tensor")
        lib.impl("g", lambda x: x)
        assert _kernel_keys(f"{ns}::g") == {"CompositeImplicitAutograd"}


def test_library_with_bad_dispatch_key(ns):
    with pytest.raises(oplib.RegistrationError, match="unknown dispatch key 'Nope'"):
        oplib.Library(ns, "FRAGMENT", "Nope")


def test_library_register_fake(lib, ns):
    lib.define("f(Tensor x) -> Tensor")

    def fake(x):
        return x

    lib._register_fake("f", fake)
    assert REGISTRY.ops[f"{ns}::f"].kernel("Fake").fn is fake
    lib._destroy()
    assert f"{ns}::f" not in REGISTRY.ops


def test_library_repr(ns):
    with _scoped_library(ns, "IMPL", "CPU") as lib:
        assert repr(lib) == f"Library(kind=IMPL, ns={ns}, dispatch_key=CPU)"


# -- lifetime ----------------------------------------------------------------------------------


def test_destroy_removes_exactly_that_librarys_registrations(ns, toy, teardown):
    owner = oplib.Library(ns, "DEF")
    owner.define("f(Tensor x) -> Tensor")
    owner.define("g(Tensor x) -> Tensor")
    owner.impl("f", lambda x: x + 1, "cpu")
    other = oplib.Library(ns, "IMPL")
    other.impl("f", lambda x: x, "toy")
    other.impl("g", lambda x: x + 3, "cpu")
    frag = oplib.Library(ns, "FRAGMENT")
    frag.define("h(Tensor x) -> Tensor")
    teardown(frag)
    other._destroy()
    assert _kernel_keys(f"{ns}::f") == {"cpu"}
    assert _kernel_keys(f"{ns}::g") == set()
    assert _has_op(ns, "f") and _has_op(ns, "g") and _has_op(ns, "h")
    with pytest.raises(oplib.NoKernelError):
        _packet(ns, "g")(np.zeros(1))
    owner._destroy()
    assert not _has_op(ns, "f")
    assert not _has_op(ns, "g")
    assert _has_op(ns, "h")
    assert f"{ns}::f" not in REGISTRY.ops
    frag._destroy()
    assert not _has_op(ns, "h")


def test_destroy_is_idempotent(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("f(Tensor x) -> Tensor")
    lib._destroy()
    lib._destroy()
    assert not _has_op(ns, "f")


def test_destroyed_library_refuses_registrations(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib._destroy()
    with pytest.raises(RuntimeError, match=rf"this Library \({ns}\) was destroyed"):
        lib.define("f(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="was destroyed"):
        lib.impl("f", lambda x: x, "cpu")


def test_garbage_collection_removes_registrations(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "cpu")
    assert _packet(ns, "f")(np.zeros(1)).shape == (1,)
    ref = weakref.ref(lib)
    del lib
    gc.collect()
    assert ref() is None
    assert not _has_op(ns, "f")
    assert f"{ns}::f" not in REGISTRY.ops


def test_garbage_collection_of_impl_library_restores_overridden(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(qn, "cpu", lambda x: x + 1)
    lib = oplib.Library(ns, "IMPL")
    lib.impl("f", lambda x: x + 2, "cpu", allow_override=True)
    assert _packet(ns, "f")(np.zeros(1))[0] == 2.0
    del lib
    gc.collect()
    assert _packet(ns, "f")(np.zeros(1))[0] == 1.0


def test_stale_overload_after_destroy_raises(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "cpu")
    op = _packet(ns, "f").default
    packet = _packet(ns, "f")
    lib._destroy()
    with pytest.raises(RuntimeError, match=rf"operator {ns}::f no longer exists"):
        op(np.zeros(1))
    with pytest.raises(RuntimeError, match="no longer exists"):
        packet(np.zeros(1))


def test_redefine_after_destroy_gives_a_fresh_op(ns):
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("f(Tensor x) -> Tensor")
        lib.impl("f", lambda x: x + 1, "cpu")
        assert _packet(ns, "f")(np.zeros(1))[0] == 1.0
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("f(Tensor x, int n) -> Tensor")
        lib.impl("f", lambda x, n: x + n, "cpu")
        assert _packet(ns, "f")(np.zeros(1), 5)[0] == 5.0
        assert _kernel_keys(f"{ns}::f") == {"cpu"}


def test_destroying_one_overload_keeps_the_packet(ns, teardown):
    a = oplib.Library(ns, "FRAGMENT")
    a.define("f(Tensor x) -> Tensor")
    b = oplib.Library(ns, "FRAGMENT")
    b.define("f.Scalar(Tensor x, Scalar s) -> Tensor")
    teardown(a, b)
    packet = _packet(ns, "f")
    assert packet.overloads() == ["default", "Scalar"]
    b._destroy()
    assert packet.overloads() == ["default"]
    assert not hasattr(packet, "Scalar")
    assert _packet(ns, "f") is packet
    a._destroy()
    assert not _has_op(ns, "f")


def test_scoped_library_destroys_on_exception(ns):
    with pytest.raises(KeyError), _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("f(Tensor x) -> Tensor")
        assert _has_op(ns, "f")
        raise KeyError("boom")
    assert not _has_op(ns, "f")


def test_functional_api_registrations_live_in_keep_alive_library(ns):
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    assert ns in libmod._keep_alive
    gc.collect()
    assert qn in REGISTRY.ops
    libmod._keep_alive.pop(ns)._destroy()
    assert qn not in REGISTRY.ops


def test_functional_api_with_lib_uses_that_library(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    qn = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor", lib=lib)
    oplib.impl(qn, "cpu", lambda x: x, lib=lib)
    oplib.register_fake(qn, lambda x: x, lib=lib)
    assert ns not in libmod._keep_alive
    lib._destroy()
    assert qn not in REGISTRY.ops


# -- custom_op ----------------------------------------------------------------------------------


def test_custom_op_infers_schema_and_runs(ns, teardown):
    @oplib.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: oplib.Tensor, factor: float = 2.0) -> oplib.Tensor:
        return x * factor

    teardown(scale)
    assert isinstance(scale, oplib.CustomOpDef)
    assert str(scale._schema) == f"{ns}::scale(Tensor x, float factor=2.0) -> Tensor"
    assert repr(scale) == f"<CustomOpDef({ns}::scale)>"
    np.testing.assert_array_equal(scale(np.array([1.0, 2.0])), [2.0, 4.0])
    np.testing.assert_array_equal(scale(np.array([1.0]), 3.0), [3.0])
    out = scale(oplib.tensor([1.0]), factor=5.0)
    assert isinstance(out, oplib.Tensor)
    assert out.item() == 5.0
    # also reachable through ops
    np.testing.assert_array_equal(_packet(ns, "scale")(np.array([1.0])), [2.0])
    scale._destroy()
    assert not _has_op(ns, "scale")


def test_custom_op_passes_native_arrays_to_the_function(ns, teardown):
    seen = []

    def f(x: oplib.Tensor) -> oplib.Tensor:
        seen.append(type(x))
        return x + 0

    op = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    teardown(op)
    op(oplib.tensor([1.0]))
    assert seen == [np.ndarray]


def test_custom_op_keeps_function_metadata(ns, teardown):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        """Docs of f."""
        return x

    op = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    teardown(op)
    assert op.__name__ == "f"
    assert op.__doc__ == "Docs of f."
    assert op.__module__ == __name__


def test_custom_op_explicit_schema(ns, teardown):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), schema="(Tensor x, int n) -> Tensor")
    def f(x, n):
        return x + n

    teardown(f)
    assert str(f._schema) == f"{ns}::f(Tensor x, int n) -> Tensor"
    assert f(np.zeros(1), 3)[0] == 3.0
    with pytest.raises(TypeError, match="argument 'n' must be int"):
        f(np.zeros(1), 1.5)


def test_custom_op_mutates_args_in_schema(ns, teardown):
    @oplib.custom_op(f"{ns}::fill_", mutates_args={"x"})
    def fill_(x: oplib.Tensor, value: float) -> None:
        x[...] = value

    teardown(fill_)
    assert str(fill_._schema) == f"{ns}::fill_(Tensor(a0!) x, float value) -> ()"
    a = np.zeros(2)
    assert fill_(a, 7.0) is None
    np.testing.assert_array_equal(a, [7.0, 7.0])


def test_custom_op_device_types_limits_kernels(ns, toy, teardown):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    teardown(f)
    assert _kernel_keys(f"{ns}::f") == {"cpu"}
    with pytest.raises(oplib.NoKernelError, match=rf"{ns}::f\(\): no kernel for backend 'toy'"):
        f(toy(np.zeros(1)))

    @f.register_kernel("toy")
    def _(x):
        return toy(x.data + 10)

    assert f(toy(np.zeros(1))).data[0] == 10.0
    assert f(np.zeros(1))[0] == 1.0


def test_custom_op_without_device_types_serves_every_backend(ns, toy, teardown):
    @oplib.custom_op(f"{ns}::ident", mutates_args=())
    def ident(x: oplib.Tensor) -> oplib.Tensor:
        return x

    teardown(ident)
    assert _kernel_keys(f"{ns}::ident") == {"CompositeExplicitAutograd"}
    a = toy(np.zeros(1))
    assert ident(a) is a


def test_custom_op_duplicate_name(ns, teardown):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    # As torch: a second custom_op of the same name replaces the first (re-run modules).
    first = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    teardown(first)
    second = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    teardown(second)
    assert oplib.lookup(f"{ns}::f") is second._opoverload


def test_custom_op_needs_qualified_name():
    msg = r"expected a qualified name 'namespace::op_name', got 'f'"
    with pytest.raises(ValueError, match=msg):
        oplib.custom_op("f", lambda x: x, mutates_args=())


def test_custom_op_register_fake_and_toplevel_register_fake(ns, teardown):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    op = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    teardown(op)

    @op.register_fake
    def fake(x):
        return x

    assert REGISTRY.ops[f"{ns}::f"].kernel("Fake").fn is fake
    with pytest.raises(oplib.RegistrationError, match="already has a fake kernel"):
        oplib.register_fake(op, lambda x: x)
    op._destroy()
    assert f"{ns}::f" not in REGISTRY.ops


def test_toplevel_register_kernel_with_custom_op_lives_with_it(ns, toy):
    op = oplib.custom_op(
        f"{ns}::f",
        lambda x: x,
        mutates_args=(),
        device_types="cpu",
        schema="(Tensor x) -> Tensor",
    )
    oplib.register_kernel(op, "toy", lambda x: x)
    assert _kernel_keys(f"{ns}::f") == {"cpu", "toy"}
    op._destroy()
    assert f"{ns}::f" not in REGISTRY.ops
    assert ns not in libmod._keep_alive


def test_custom_op_tags(ns, teardown):
    op = oplib.custom_op(
        f"{ns}::f",
        lambda x: x,
        mutates_args=(),
        schema="(Tensor x) -> Tensor",
        tags=oplib.Tag.pointwise,
    )
    teardown(op)
    assert _packet(ns, "f").default.tags == (oplib.Tag.pointwise,)


def test_custom_op_garbage_collected_with_its_def(ns):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    op = oplib.custom_op(f"{ns}::f", f, mutates_args=())
    assert _has_op(ns, "f")
    del op
    gc.collect()
    assert not _has_op(ns, "f")
