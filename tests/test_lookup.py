"""``oplib.lookup``: one way to name an op, and every API that takes an op accepting and
refusing the same spellings with the same errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import drop_namespace, unique_ns

import oplib_core as oplib
from oplib_core import cli, legacy
from oplib_core.library import _scoped_library
from oplib_core.plugins import PluginRecord, Registrar


def _identity(x: Any) -> Any:
    return x


def _copy(x: Any) -> Any:
    return x.copy()


def _backward(ctx: Any, g: Any) -> Any:
    return g


# -- lookup itself ---------------------------------------------------------------------------


@pytest.fixture
def overloaded(lib: oplib.Library) -> str:
    """``ns::f`` (default overload) and ``ns::f.other``, ``ns::g.only`` (no default)."""
    lib.define("f(Tensor x) -> Tensor")
    lib.define("f.other(Tensor x, int n) -> Tensor")
    lib.define("g.only(Tensor x) -> Tensor")
    lib.define("h.a(Tensor x) -> Tensor")
    lib.define("h.b(Tensor x, int n) -> Tensor")
    return lib.ns


def test_every_spelling_of_the_default_overload(overloaded: str) -> None:
    ns = overloaded
    default = getattr(oplib.ops, ns).f.default
    assert oplib.lookup(f"{ns}::f") is default
    assert oplib.lookup(f"{ns}::f.default") is default
    assert oplib.lookup(getattr(oplib.ops, ns).f) is default  # the packet
    assert oplib.lookup(default) is default
    assert oplib.lookup(f"{ns}::f.other") is getattr(oplib.ops, ns).f.other
    assert oplib.lookup(f"{ns}::f.other").name() == f"{ns}::f.other"


def test_packet_without_default_overload(overloaded: str) -> None:
    ns = overloaded
    packet = getattr(oplib.ops, ns)
    # one overload: that one (as torch's opcheck resolves a packet) ...
    assert oplib.lookup(packet.g) is packet.g.only
    # ... but a name means the default overload, as in torch: "ns::g" names none
    with pytest.raises(oplib.UnknownOperatorError) as info:
        oplib.lookup(f"{ns}::g")
    assert info.value.suggestions == (f"{ns}::g.only",)
    # several and no default: name one
    with pytest.raises(oplib.AmbiguousOperatorError, match=r"no default overload") as amb:
        oplib.lookup(packet.h)
    assert amb.value.op == f"{ns}::h" and amb.value.overloads == ("a", "b")
    assert isinstance(amb.value, (oplib.RegistrationError, LookupError))


def test_custom_op_and_legacy_op(ns: str, teardown) -> None:
    @oplib.custom_op(f"{ns}::c", mutates_args=())
    def c(x: oplib.Tensor) -> oplib.Tensor:
        return x

    made = legacy.custom_op(f"{ns}::old", "(Tensor x) -> Tensor")
    teardown(c, made)
    assert oplib.lookup(c) is getattr(oplib.ops, ns).c.default
    assert oplib.lookup(made) is getattr(oplib.ops, ns).old.default


def test_unknown_name_error_carries_name_and_suggestions(overloaded: str) -> None:
    ns = overloaded
    with pytest.raises(oplib.UnknownOperatorError) as info:
        oplib.lookup(f"{ns}::ff")
    e = info.value
    assert e.op == f"{ns}::ff"
    assert f"{ns}::f" in e.suggestions
    assert str(e).startswith(f"lookup(): operator '{ns}::ff' does not exist.")
    assert f"Did you mean '{ns}::f'" in str(e)
    assert isinstance(e, oplib.RegistrationError) and isinstance(e, LookupError)
    assert isinstance(e, oplib.OplibError)


def test_unknown_overload_and_name_without_namespace() -> None:
    with pytest.raises(oplib.UnknownOperatorError, match=r"Did you mean 'oplib::add'") as info:
        oplib.lookup("oplib::add.nope")
    assert info.value.op == "oplib::add.nope"
    with pytest.raises(oplib.UnknownOperatorError, match="'namespace::name'") as bare:
        oplib.lookup("sin")
    assert bare.value.suggestions == ("oplib::sin", "oplib::sin.out")  # its out= overload too
    # torch's printed form
    with pytest.raises(oplib.UnknownOperatorError, match=r"Did you mean 'oplib::sin'"):
        oplib.lookup("oplib.sin.default")


def test_unknown_without_close_names_says_how_to_define(ns: str) -> None:
    with pytest.raises(oplib.UnknownOperatorError, match=r"Define it first") as info:
        oplib.lookup(f"{ns}::zzz_nothing_like_it")
    assert info.value.suggestions == ()


@pytest.mark.parametrize("value", [42, None, 1.5, object(), np.sin, b"oplib::sin"])
def test_non_operators_are_type_errors(value: Any) -> None:
    with pytest.raises(oplib.NotAnOperatorError, match="expected an operator") as info:
        oplib.lookup(value)
    assert info.value.value is value
    assert isinstance(info.value, TypeError) and isinstance(info.value, oplib.OplibError)


def test_destroyed_op_is_unknown(ns: str) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("gone(Tensor x) -> Tensor")
    packet = getattr(oplib.ops, ns).gone
    op = packet.default
    lib._destroy()
    for spelling in (op, f"{ns}::gone", packet):
        with pytest.raises(oplib.UnknownOperatorError):
            oplib.lookup(spelling)
    with pytest.raises(oplib.UnknownOperatorError, match="no longer exists"):
        oplib.lookup(op)


def test_registered_ops_and_accessors(overloaded: str) -> None:
    ns = overloaded
    ops = oplib.registered_ops(ns)
    names = ["f", "f.other", "g.only", "h.a", "h.b"]
    assert [o.name() for o in ops] == [f"{ns}::{n}" for n in names]
    assert all(isinstance(o, oplib.OpOverload) for o in ops)
    everything = {o.name() for o in oplib.registered_ops()}
    assert "oplib::sin" in everything and f"{ns}::f" in everything
    sin = oplib.lookup("oplib::sin")
    assert str(sin.schema) == "oplib::sin(Tensor self) -> Tensor"
    assert oplib.Tag.pointwise in sin.tags
    assert sin.has_kernel("cpu") and sin.has_kernel("CPU") and sin.has_kernel("Fake")
    kernel = sin.kernel("cpu")
    assert kernel is not None and kernel.origin.plugin == "cpu"
    assert sin.kernel("CompositeImplicitAutograd") is None
    assert sin.origin.plugin == "core"


# -- every API that takes an op --------------------------------------------------------------

# Each entry: an API given an op-like ``op`` (on ``ns::f``, a legacy op with a "default"
# kernel) that must resolve it to ``ns::f``; returns the qualified name it acted on.
Api = Callable[[Any, str], str]


def _via_lib(register: Callable[[Any, oplib.Library], None]) -> Api:
    def run(op: Any, ns: str) -> str:
        with _scoped_library(ns, "FRAGMENT") as lib:
            register(op, lib)
            hit = _kernels_of(f"{ns}::f")
        return hit

    return run


def _kernels_of(qualname: str) -> str:
    op = oplib.lookup(qualname)
    keys = [k for k in ("cpu", "Fake", "Autograd") if op.has_kernel(k)]
    return f"{op.name()}:{','.join(keys)}"


def _register_autograd(op: Any, lib: oplib.Library) -> None:
    oplib.register_autograd(op, _backward, lib=lib)


def _impl_abstract(op: Any, lib: oplib.Library) -> None:
    with pytest.warns(FutureWarning):
        oplib.impl_abstract(op, _identity, lib=lib)


def _explain(op: Any, ns: str) -> str:
    return oplib.explain(op, np.ones(2)).op


def _opcheck(op: Any, ns: str) -> str:
    result = oplib.opcheck(op, (np.ones(2),), test_utils=["test_schema"])
    assert result == {"test_schema": "SUCCESS"}
    return f"{ns}::f"


def _legacy_impl(op: Any, ns: str) -> str:
    legacy.impl(op, device_types="cpu")(_identity)
    return _kernels_of(f"{ns}::f")


def _legacy_impl_abstract(op: Any, ns: str) -> str:
    legacy.impl_abstract(op)(_identity)
    return _kernels_of(f"{ns}::f")


def _legacy_save(op: Any, ns: str) -> str:
    legacy.impl_save_for_backward(op)(lambda inputs, output: None)
    return _kernels_of(f"{ns}::f")


def _legacy_backward(op: Any, ns: str) -> str:
    legacy.impl_backward(op)(lambda ctx, saved, g: {"x": g})
    return _kernels_of(f"{ns}::f")


def _registrar(method: str) -> Api:
    def run(op: Any, ns: str) -> str:
        registrar = Registrar(PluginRecord("lookup-test"))
        try:
            if method == "impl":
                registrar.impl(op, "cpu", _identity)
            elif method == "register_kernel":
                registrar.register_kernel(op, "cpu", _identity)
            elif method == "register_fake":
                registrar.register_fake(op, _identity)
            else:
                registrar.register_autograd(op, _backward)
            return _kernels_of(f"{ns}::f")
        finally:
            registrar._rollback()

    return run


APIS: dict[str, tuple[Api, str]] = {
    "lookup": (lambda op, ns: oplib.lookup(op).name(), "{ns}::f"),
    "register_kernel": (
        _via_lib(lambda op, lib: oplib.register_kernel(op, "cpu", _identity, lib=lib)),
        "{ns}::f:cpu",
    ),
    "impl": (_via_lib(lambda op, lib: oplib.impl(op, "cpu", _identity, lib=lib)), "{ns}::f:cpu"),
    "register_fake": (
        _via_lib(lambda op, lib: oplib.register_fake(op, _identity, lib=lib)),
        "{ns}::f:Fake",
    ),
    "impl_abstract": (_via_lib(_impl_abstract), "{ns}::f:Fake"),
    "register_autograd": (_via_lib(_register_autograd), "{ns}::f:Autograd"),
    "Library.impl": (_via_lib(lambda op, lib: lib.impl(op, _identity, "CPU")), "{ns}::f:cpu"),
    "Library._register_fake": (
        _via_lib(lambda op, lib: lib._register_fake(op, _identity)),
        "{ns}::f:Fake",
    ),
    "explain": (_explain, "{ns}::f"),
    "opcheck": (_opcheck, "{ns}::f"),
    "legacy.impl": (_legacy_impl, "{ns}::f:cpu"),
    "legacy.impl_abstract": (_legacy_impl_abstract, "{ns}::f:Fake"),
    "legacy.impl_save_for_backward": (_legacy_save, "{ns}::f:Autograd"),
    "legacy.impl_backward": (_legacy_backward, "{ns}::f:Autograd"),
    "Registrar.impl": (_registrar("impl"), "{ns}::f:cpu"),
    "Registrar.register_kernel": (_registrar("register_kernel"), "{ns}::f:cpu"),
    "Registrar.register_fake": (_registrar("register_fake"), "{ns}::f:Fake"),
    "Registrar.register_autograd": (_registrar("register_autograd"), "{ns}::f:Autograd"),
}

SPELLINGS: dict[str, Callable[[str, Any], Any]] = {
    "'ns::f'": lambda ns, made: f"{ns}::f",
    "'ns::f.default'": lambda ns, made: f"{ns}::f.default",
    "packet": lambda ns, made: getattr(oplib.ops, ns).f,
    "OpOverload": lambda ns, made: getattr(oplib.ops, ns).f.default,
    "op object": lambda ns, made: made,
}


@pytest.fixture
def legacy_op() -> Iterator[tuple[str, Any]]:
    """``ns::f``, defined through the legacy API (so that ``legacy.*`` takes it too), with
    a ``default`` kernel (so that it runs)."""
    ns = unique_ns("lk")
    made = legacy.custom_op(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.impl(f"{ns}::f", "default", _copy, lib=made._lib)
    yield ns, made
    made._destroy()
    drop_namespace(ns)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("api", list(APIS))
def test_every_api_accepts_every_spelling(
    api: str, spelling: str, legacy_op: tuple[str, Any]
) -> None:
    ns, made = legacy_op
    run, expected = APIS[api]
    assert run(SPELLINGS[spelling](ns, made), ns) == expected.format(ns=ns)


@pytest.mark.parametrize(
    "bad",
    ["{ns}::nope", "{ns}::f.nope", "f", "{ns}.f.default"],
    ids=["unknown op", "unknown overload", "no namespace", "torch's printed form"],
)
@pytest.mark.parametrize("api", list(APIS))
def test_every_api_refuses_unknown_names_alike(
    api: str, bad: str, legacy_op: tuple[str, Any]
) -> None:
    ns, _ = legacy_op
    run, _ = APIS[api]
    name = bad.format(ns=ns)
    if api.startswith("Library.") and "::" not in name:
        # a Library's methods take names relative to its namespace, as torch's do
        if bad == "f":
            return  # that is ns::f, which exists
        name = f"{ns}::{name}"
    with pytest.raises(oplib.UnknownOperatorError) as info:
        run(bad.format(ns=ns), ns)
    assert info.value.op == name
    assert f"operator {name!r} does not exist" in str(info.value)
    if name == bad.format(ns=ns) and ("nope" not in bad or "." in bad):  # close to ns::f
        assert info.value.suggestions, info.value
    if bad.startswith("{ns}::f."):
        assert info.value.suggestions[0] == f"{ns}::f"


@pytest.mark.parametrize("api", list(APIS))
def test_every_api_refuses_non_operators_alike(api: str, legacy_op: tuple[str, Any]) -> None:
    ns, _ = legacy_op
    run, _ = APIS[api]
    with pytest.raises(oplib.NotAnOperatorError, match="expected an operator"):
        run(42, ns)


@pytest.mark.parametrize("api", list(APIS))
def test_every_api_refuses_a_destroyed_op_alike(api: str) -> None:
    ns = unique_ns("lk")
    made = legacy.custom_op(f"{ns}::f", "(Tensor x) -> Tensor")
    op = oplib.lookup(f"{ns}::f")
    made._destroy()
    run, _ = APIS[api]
    try:
        with pytest.raises(oplib.UnknownOperatorError):
            run(op, ns)
    finally:
        drop_namespace(ns)


def test_register_autograd_default_spelling_is_not_special(legacy_op: tuple[str, Any]) -> None:
    # It used to be the one API that took 'ns::op.default'; now every API does (above), and
    # they name the op alike in what they register.
    ns, made = legacy_op
    oplib.register_autograd(f"{ns}::f.default", _backward, lib=made._lib)
    assert oplib.lookup(f"{ns}::f").has_kernel("Autograd")


def test_custom_op_object_in_the_functional_api(ns: str, teardown) -> None:
    @oplib.custom_op(f"{ns}::c", mutates_args=(), device_types="cpu")
    def c(x: oplib.Tensor) -> oplib.Tensor:
        return x

    teardown(c)
    oplib.register_fake(c, _identity)
    oplib.register_autograd(c, _backward)
    oplib.register_kernel(c, "meta", _identity)
    op = oplib.lookup(c)
    assert op.has_kernel("Fake") and op.has_kernel("Autograd") and op.has_kernel("meta")
    assert oplib.explain(c, np.ones(2)).op == f"{ns}::c"
    c._destroy()
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.register_fake(c, _identity)


# -- the CLI -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "explain"])
@pytest.mark.parametrize("spelling", ["oplib::add", "oplib::add.default", "oplib::add.Scalar"])
def test_cli_takes_the_same_names(
    command: str, spelling: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["ops", command, spelling, "--json"]) == 0
    assert '"oplib::add' in capsys.readouterr().out


def test_cli_check_takes_the_same_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "oplib::neg.default", "-b", "cpu", "--json"]) == 0
    assert '"op": "oplib::neg"' in capsys.readouterr().out
    assert cli.main(["check", "oplib::ng"]) == 2
    assert "no operator 'oplib::ng'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["show", "explain"])
def test_cli_refuses_unknown_names_with_suggestions(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["ops", command, "oplib::addd"]) == 2
    err = capsys.readouterr().err
    assert "no operator 'oplib::addd'" in err and "did you mean 'oplib::add'" in err
