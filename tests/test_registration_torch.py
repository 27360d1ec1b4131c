"""Registration as torch users write it: custom_op schema checks and redefinition, torch's
operator tags, ``impl(lib, name)``, an IMPL library's fixed dispatch key, the legacy API on
any op, ``create_unbacked_symint``, and the did-you-mean warning for device types."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import legacy
from oplib_core.errors import ArgumentTypeError, RegistrationError, SchemaError

TORCH_TAGS = [
    "needs_fixed_stride_order",
    "flexible_layout",
    "inplace_view",
    "view_copy",
    "core",
    "data_dependent_output",
    "dynamic_output_shape",
    "nondeterministic_bitwise",
    "nondeterministic_seeded",
    "pointwise",
    "pt2_compliant_tag",
    "maybe_aliasing_or_mutating",
    "reduction",
    "generated",
    "inplace",
    "out",
    "out_variant",
    "needs_exact_strides",
    "needs_contiguous_strides",
    "cudagraph_unsafe",
]


def _t(a) -> oplib.Tensor:
    return oplib.tensor(np.asarray(a, dtype=np.float64))


# -- custom_op: schema and mutates_args ---------------------------------------------------


@pytest.mark.parametrize(
    ("mutates", "schema", "differ"),
    [
        (("x",), "(Tensor x, Tensor y) -> ()", "['x']"),
        ((), "(Tensor(a!) x, Tensor y) -> ()", "['x']"),
        ((), "(Tensor! x, Tensor y) -> ()", "['x']"),
        (("y",), "(Tensor(a!) x, Tensor y) -> ()", "['x', 'y']"),
    ],
)
def test_custom_op_schema_contradicting_mutates_args_is_refused(ns, mutates, schema, differ):
    with pytest.raises(SchemaError) as e:
        oplib.custom_op(f"{ns}::m", lambda x, y: None, mutates_args=mutates, schema=schema)
    msg = str(e.value)
    assert f"custom_op('{ns}::m')" in msg and f"argument(s) {differ}" in msg
    assert "Please make these consistent" in msg  # torch's wording
    assert isinstance(e.value, ValueError)  # torch raises ValueError
    assert not hasattr(getattr(oplib.ops, ns), "m")  # nothing defined


def test_custom_op_schema_agreeing_with_mutates_args(ns, teardown):
    def f(x, y):
        x += y

    op = oplib.custom_op(f"{ns}::m", f, mutates_args=["x"], schema="(Tensor(a!) x, Tensor y) -> ()")
    teardown(op)
    x = _t([1.0])
    op(x, _t([2.0]))
    assert x.numpy().tolist() == [3.0]
    op2 = oplib.custom_op(f"{ns}::m2", f, mutates_args=["x"], schema="(Tensor! x, Tensor y) -> ()")
    teardown(op2)
    assert op2.schema.mutated_arguments == ("x",)


def test_custom_op_kwarg_only_tensor_is_refused(ns):
    def f(x: oplib.Tensor, *, y: oplib.Tensor) -> oplib.Tensor:
        return x

    with pytest.raises(NotImplementedError, match="kwarg-only Tensor args") as e:
        oplib.custom_op(f"{ns}::kw", f, mutates_args=())
    assert isinstance(e.value, SchemaError) and "['y']" in str(e.value)
    with pytest.raises(NotImplementedError):
        oplib.custom_op(
            f"{ns}::kw", f, mutates_args=(), schema="(Tensor x, *, Tensor? y=None) -> Tensor"
        )
    assert not hasattr(getattr(oplib.ops, ns), "kw")


def test_custom_op_kwarg_only_non_tensor_is_fine(ns, teardown):
    def f(x: oplib.Tensor, *, k: int = 2) -> oplib.Tensor:
        return x * k

    op = oplib.custom_op(f"{ns}::kw", f, mutates_args=())
    teardown(op)
    assert op(_t([1.0]), k=3).numpy().tolist() == [3.0]


# -- custom_op: redefinition replaces -----------------------------------------------------


def test_redefining_a_custom_op_replaces_it(ns, teardown):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    first = oplib.custom_op(f"{ns}::re", f, mutates_args=())
    teardown(first)
    first.register_fake(lambda x: x.new_empty(x.shape))

    def g(x: oplib.Tensor, n: int = 2) -> oplib.Tensor:
        return x + n

    second = oplib.custom_op(f"{ns}::re", g, mutates_args=())
    teardown(second)
    packet = getattr(oplib.ops, ns).re
    assert packet(_t([0.0])).numpy().tolist() == [2.0]
    assert second(_t([0.0])).numpy().tolist() == [2.0]
    assert str(second.schema) == f"{ns}::re(Tensor x, int n=2) -> Tensor"
    assert not second._opoverload.has_kernel("Fake")  # the old registrations went with it


def test_define_on_a_plain_name_stays_an_error_naming_both_sites(ns, teardown):
    oplib.define(f"{ns}::plain", "(Tensor x) -> Tensor")
    with pytest.raises(RegistrationError) as e:
        oplib.define(f"{ns}::plain", "(Tensor x) -> Tensor")
    msg = str(e.value)
    assert f"operator {ns}::plain is already defined at " in msg
    assert msg.count("test_registration_torch.py:") == 2

    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    # A custom_op does not replace an op defined otherwise.
    with pytest.raises(RegistrationError, match="already defined"):
        oplib.custom_op(f"{ns}::plain", f, mutates_args=())


# -- tags ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TORCH_TAGS)
def test_torch_tags_exist(name):
    assert oplib.Tag[name].value == name


def test_tags_on_define_and_custom_op(ns, teardown):
    tags = (oplib.Tag.needs_fixed_stride_order, oplib.Tag.pt2_compliant_tag)
    oplib.define(f"{ns}::d", "(Tensor x) -> Tensor", tags=tags)
    assert getattr(oplib.ops, ns).d.default.tags == tags

    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    op = oplib.custom_op(f"{ns}::c", f, mutates_args=(), tags=oplib.Tag.flexible_layout)
    teardown(op)
    assert op._opoverload.tags == (oplib.Tag.flexible_layout,)


def test_ops_show_lists_torch_tags(ns, capsys):
    oplib.define(
        f"{ns}::shown",
        "(Tensor x) -> Tensor",
        tags=(oplib.Tag.inplace_view, oplib.Tag.maybe_aliasing_or_mutating),
    )
    from oplib_core.cli import main

    assert main(["ops", "show", f"{ns}::shown"]) in (0, None)
    out = capsys.readouterr().out
    assert "inplace_view, maybe_aliasing_or_mutating" in out


# -- impl(lib, name), IMPL libraries with a key ------------------------------------------


def test_impl_library_first_form(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("f(Tensor x) -> Tensor")

    @oplib.impl(lib, "f", "CPU")
    def f(x):
        return x + 1

    assert getattr(oplib.ops, ns).f(_t([1.0])).numpy().tolist() == [2.0]
    assert f(np.zeros(1)).tolist() == [1.0]  # the decorator returns the function


def test_impl_library_first_form_default_key(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("g(Tensor x) -> Tensor")
    oplib.impl(lib, "g")(lambda x: x * 3)
    assert getattr(oplib.ops, ns).g.default.has_kernel("CompositeImplicitAutograd")


def test_impl_library_first_form_refuses_a_non_str_key(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    with pytest.raises(ArgumentTypeError):
        oplib.impl(lib, "g", lambda x: x)  # type: ignore[call-overload]


def test_impl_library_with_a_key_refuses_another(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("f(Tensor x) -> Tensor")
    ilib = oplib.Library(ns, "IMPL", "CPU")
    teardown(ilib)
    with pytest.raises(RegistrationError) as e:
        ilib.impl("f", lambda x: x, "Meta")
    assert (
        "Explicitly provided dispatch key (Meta) is inconsistent with the library's "
        "dispatch key (CPU)" in str(e.value)
    )
    ilib.impl("f", lambda x: x + 1, "cpu")  # the same key, spelled as a device type
    ilib2 = oplib.Library(ns, "IMPL", "Meta")
    teardown(ilib2)
    ilib2.impl("f", lambda x: x)  # the library's own key by default
    assert getattr(oplib.ops, ns).f(_t([1.0])).numpy().tolist() == [2.0]


def test_torch_library_impl_with_a_dispatch_key(ns):
    oplib.define(f"{ns}::k", "(Tensor x) -> Tensor")
    oplib.impl(f"{ns}::k", "CPU", lambda x: x - 1)
    assert getattr(oplib.ops, ns).k(_t([1.0])).numpy().tolist() == [0.0]


# -- legacy API on any op ----------------------------------------------------------------


def test_legacy_functions_work_on_a_library_defined_op(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("sq(Tensor x) -> Tensor")
    legacy.impl(f"{ns}::sq", device_types="cpu")(lambda x: x * x)

    @legacy.impl_abstract(f"{ns}::sq")
    def _(x):
        return x.new_empty(x.shape)

    @legacy.impl_save_for_backward(f"{ns}::sq")
    def _(inputs, output):
        return inputs.x

    @legacy.impl_backward(f"{ns}::sq")
    def _(ctx, saved, grad):
        return {"x": grad * 2 * saved}

    x = oplib.tensor(np.array([3.0]), requires_grad=True)
    y = getattr(oplib.ops, ns).sq(x)
    assert y.detach().numpy().tolist() == [9.0]
    y.backward(_t([1.0]))
    assert x.grad is not None and x.grad.numpy().tolist() == [6.0]
    meta = getattr(oplib.ops, ns).sq(oplib.empty((2,), device="meta"))
    assert meta.shape == (2,) and meta.device.type == "meta"


def test_legacy_impl_on_a_custom_op(ns, teardown):
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x

    op = oplib.custom_op(f"{ns}::c", f, mutates_args=(), device_types="cpu")
    teardown(op)
    legacy.impl_abstract(f"{ns}::c", func=lambda x: x.new_empty(x.shape))
    assert op(oplib.empty((3,), device="meta")).shape == (3,)


def test_legacy_wrapper_follows_a_redefined_op(ns):
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("w(Tensor x) -> Tensor")
    legacy.impl(f"{ns}::w", device_types="cpu", func=lambda x: x + 1)
    lib._destroy()
    # The name is free again: a legacy custom_op may take it.
    op = legacy.custom_op(f"{ns}::w", "(Tensor x) -> Tensor")
    try:
        legacy.impl(f"{ns}::w", device_types="cpu", func=lambda x: x + 5)
        assert op(_t([0.0])).numpy().tolist() == [5.0]
    finally:
        op._destroy()


def test_legacy_on_an_unknown_op_is_refused():
    with pytest.raises(oplib.UnknownOperatorError):
        legacy.impl("nosuchns_t13d::op", device_types="cpu", func=lambda x: x)


def test_legacy_get_ctx_and_create_unbacked_symint(ns, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("nz(Tensor x) -> Tensor")
    seen = []

    @legacy.impl_abstract(f"{ns}::nz")
    def _(x):
        ctx = legacy.get_ctx()
        n = ctx.create_unbacked_symint()
        seen.append(n)
        return x.new_empty((n,))

    assert legacy.get_ctx is oplib.get_ctx
    with oplib.FakeTensorMode() as mode:
        out = getattr(oplib.ops, ns).nz(mode.from_real(_t([1.0, 0.0])))
    assert str(out.shape[0]) == str(seen[0])
    assert seen[0] >= 2  # torch's older name defaults to min=2: decidable from the bound


# -- register_kernel: did-you-mean --------------------------------------------------------


def test_register_kernel_for_a_near_miss_device_warns_once(ns):
    from oplib_core import library as libmod

    libmod._checked_device_types.discard("cuda2")
    oplib.define(f"{ns}::w", "(Tensor x) -> Tensor")
    with pytest.warns(UserWarning, match=r"device type 'cuda2'.*Did you mean 'cuda'\?") as rec:
        oplib.register_kernel(f"{ns}::w", "cuda2", lambda x: x)
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oplib.register_kernel(f"{ns}::w", "cuda2", lambda x: x, allow_override=True)  # once
        oplib.register_kernel(f"{ns}::w", "mydevice", lambda x: x)  # not close: no warning
        oplib.register_kernel(f"{ns}::w", "xpu", lambda x: x)  # a known torch device type
        oplib.register_kernel(f"{ns}::w", "cpu", lambda x: x)
