"""One error hierarchy: every deliberate misuse of the registration API raises an
``OplibError`` subclass naming the kind of failure and carrying the culprit as data, and
still is the builtin exception it used to be (``except ValueError`` keeps working).

Also: core privilege (defining in the reserved ``oplib`` namespace) belongs to the core's
own plugin modules, not to any plugin that claims it."""

from __future__ import annotations

import ast
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import backend_registration, errors, hookimpl, legacy, plugins

ROOT = Path(__file__).resolve().parent.parent
THIS_FILE = Path(__file__).name


def _identity(x: Any) -> Any:
    return x


def _typed_identity(x: oplib.Tensor) -> oplib.Tensor:
    return x


def raises(
    kind: type[BaseException], builtin: type[BaseException], fn: Callable[[], Any], match: str
) -> Any:
    """``fn()`` raises ``kind``, which is an OplibError and a ``builtin``; the error."""
    with pytest.raises(kind, match=match) as info:
        fn()
    e = info.value
    assert isinstance(e, oplib.OplibError), type(e).__mro__
    assert isinstance(e, builtin), type(e).__mro__
    return e


# -- the hierarchy ----------------------------------------------------------------------------


def test_every_error_class_is_an_oplib_error_and_exported() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, oplib.OplibError), name
        assert getattr(oplib, name) is cls, f"oplib.{name} is not errors.{name}"


@pytest.mark.parametrize(
    ("cls", "builtins"),
    [
        (errors.UnknownOperatorError, (errors.RegistrationError, LookupError, RuntimeError)),
        (errors.AmbiguousOperatorError, (errors.RegistrationError, LookupError)),
        (errors.NotAnOperatorError, (errors.ArgumentTypeError, TypeError)),
        (errors.InvalidNameError, (errors.RegistrationError, ValueError)),
        (errors.ReservedNamespaceError, (errors.RegistrationError, ValueError)),
        (errors.DuplicateLibraryError, (errors.RegistrationError, ValueError)),
        (errors.UnknownDispatchKeyError, (errors.RegistrationError, ValueError)),
        (errors.LibraryDestroyedError, (errors.RegistrationError, RuntimeError)),
        (errors.InvalidArgumentError, (ValueError,)),
        (errors.ArgumentTypeError, (TypeError,)),
        (errors.BackendNameError, (errors.BackendError, ValueError, RuntimeError)),
        (errors.InvalidDeviceError, (errors.BackendError, ValueError, RuntimeError)),
        (errors.DeviceModuleError, (errors.BackendError, RuntimeError)),
    ],
)
def test_error_classes_keep_their_builtin_bases(
    cls: type[Exception], builtins: tuple[type[Exception], ...]
) -> None:
    for base in builtins:
        assert issubclass(cls, base), (cls, base)


# -- Library, define, impl ----------------------------------------------------------------


def test_library_bad_kind(ns: str) -> None:
    e = raises(
        oplib.InvalidArgumentError,
        ValueError,
        lambda: oplib.Library(ns, "BAD"),
        r"Library\(\): kind must be one of DEF, IMPL, FRAGMENT, got 'BAD'",
    )
    assert (e.api, e.argument, e.value) == ("Library", "kind", "BAD")


@pytest.mark.parametrize("bad", ["1ns", "my-ns", 3])
def test_library_bad_namespace(bad: Any) -> None:
    e = raises(
        oplib.InvalidNameError,
        ValueError,
        lambda: oplib.Library(bad, "FRAGMENT"),
        "namespace must be an identifier",
    )
    assert e.name == bad


@pytest.mark.parametrize("reserved", ["oplib", "prim"])
def test_reserved_namespace(reserved: str) -> None:
    e = raises(
        oplib.ReservedNamespaceError,
        ValueError,
        lambda: oplib.Library(reserved, "FRAGMENT"),
        f"'{reserved}' is a reserved namespace",
    )
    assert e.namespace == reserved
    e = raises(
        oplib.ReservedNamespaceError,
        ValueError,
        lambda: oplib.define(f"{reserved}::mine", "(Tensor x) -> Tensor"),
        f"define\\(\\): '{reserved}' is a reserved namespace",
    )
    assert e.namespace == reserved
    raises(
        oplib.ReservedNamespaceError,
        ValueError,
        lambda: oplib.custom_op(f"{reserved}::mine", _typed_identity, mutates_args=()),
        "reserved namespace",
    )


def test_second_def_library(ns: str, teardown) -> None:
    first = oplib.Library(ns, "DEF")
    teardown(first)
    e = raises(
        oplib.DuplicateLibraryError,
        ValueError,
        lambda: oplib.Library(ns, "DEF"),
        "only one DEF library may exist per namespace",
    )
    assert e.namespace == ns
    assert e.existing is not None and THIS_FILE in e.existing


@pytest.mark.parametrize(
    "call",
    [
        lambda: oplib.define("sin", "(Tensor x) -> Tensor"),
        lambda: oplib.define("::sin", "(Tensor x) -> Tensor"),
        lambda: oplib.custom_op("sin", _identity, mutates_args=()),
        lambda: legacy.custom_op("sin", "(Tensor x) -> Tensor"),
        lambda: legacy.custom_op("a::b.c", "(Tensor x) -> Tensor"),
    ],
    ids=["define", "define-empty-ns", "custom_op", "legacy", "legacy-overload"],
)
def test_qualname_without_namespace(call: Callable[[], Any]) -> None:
    e = raises(oplib.InvalidNameError, ValueError, call, "expected a qualified name|overload")
    assert isinstance(e.name, str) and e.name in str(e)


def test_library_namespace_mismatch(lib: oplib.Library) -> None:
    e = raises(
        oplib.InvalidNameError,
        ValueError,
        lambda: lib.define("other::f(Tensor x) -> Tensor"),
        "names namespace 'other'",
    )
    assert e.name == "other::f"
    e = raises(
        oplib.InvalidNameError,
        ValueError,
        lambda: lib.impl("oplib::sin", _identity, "CPU"),
        r"operator oplib::sin is not in this Library's namespace",
    )
    assert e.name == "oplib::sin"


def test_bad_dispatch_key(lib: oplib.Library) -> None:
    qn = lib.define("f(Tensor x) -> Tensor")
    e = raises(
        oplib.UnknownDispatchKeyError,
        ValueError,
        lambda: oplib.impl(qn, "NotAKey", _identity, lib=lib),
        "unknown dispatch key 'NotAKey'",
    )
    assert e.key == "NotAKey" and isinstance(e, oplib.RegistrationError)
    raises(
        oplib.UnknownDispatchKeyError,
        ValueError,
        lambda: oplib.Library(lib.ns, "IMPL", "X-Y"),
        "X-Y",
    )
    e = raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: lib.impl(qn, _identity, 3),  # type: ignore[arg-type]
        "expected a device type or dispatch key name",
    )
    assert e.value == 3


@pytest.mark.parametrize("types_", [3, [], ["cpu", 3]])
def test_bad_device_types(lib: oplib.Library, types_: Any) -> None:
    qn = lib.define("f(Tensor x) -> Tensor")
    e = raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: oplib.register_kernel(qn, types_, _identity, lib=lib),
        "expected a device type or a sequence of them",
    )
    assert (e.argument, e.value) == ("types", types_)


def test_bad_kernel_tags_and_alias_analysis(lib: oplib.Library) -> None:
    qn = lib.define("f(Tensor x) -> Tensor")
    e = raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: oplib.impl(qn, "cpu", 3, lib=lib),
        f"expected a callable kernel for {qn}, got 3",
    )
    assert (e.argument, e.value) == ("func", 3)
    e = raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: lib.define("g(Tensor x) -> Tensor", tags=("pointwise",)),  # type: ignore[arg-type]
        "tags must be oplib.Tag members",
    )
    assert e.value == "pointwise"
    e = raises(
        oplib.InvalidArgumentError,
        ValueError,
        lambda: lib.define("h(Tensor x) -> Tensor", alias_analysis="NOPE"),
        "invalid alias_analysis 'NOPE'",
    )
    assert e.value == "NOPE"


def test_destroyed_and_impl_libraries(ns: str) -> None:
    impl_lib = oplib.Library(ns, "IMPL")
    raises(
        oplib.RegistrationError,
        RuntimeError,
        lambda: impl_lib.define("f(Tensor x) -> Tensor"),
        "IMPL libraries cannot define operators",
    )
    impl_lib._destroy()
    e = raises(
        oplib.LibraryDestroyedError,
        RuntimeError,
        lambda: impl_lib.impl("f", _identity, "CPU"),
        r"Library.impl\(\): this Library \(.*\) was destroyed",
    )
    assert e.namespace == ns


def test_conflicts_are_registration_errors_with_the_earlier_source(lib: oplib.Library) -> None:
    qn = lib.define("f(Tensor x) -> Tensor")
    lib.impl(qn, _identity, "CPU")
    e = raises(
        oplib.RegistrationError,
        RuntimeError,
        lambda: lib.impl(qn, _identity, "CPU"),
        "already has a kernel for 'cpu' registered at",
    )
    assert e.op == qn and e.existing is not None and THIS_FILE in e.existing


# -- legacy ---------------------------------------------------------------------------------


def test_legacy_misuse(ns: str, teardown) -> None:
    e = raises(
        oplib.InvalidArgumentError,
        ValueError,
        lambda: legacy.custom_op(f"{ns}::bad", "(Tensor(a!) x) -> ()"),
        "only supports functional operators",
    )
    assert e.argument == "schema"
    e = raises(
        oplib.InvalidArgumentError,
        ValueError,
        lambda: legacy.custom_op(f"{ns}::f")(3),
        "expected `func` to be a Python function",
    )
    assert e.value == 3
    # legacy.impl on an op defined otherwise works, as torch's does
    # (tests/test_registration_torch.py).
    made = legacy.custom_op(f"{ns}::once", "(Tensor x) -> Tensor")
    teardown(made)
    e = raises(
        oplib.RegistrationError,
        RuntimeError,
        lambda: legacy.custom_op(f"{ns}::once", "(Tensor x) -> Tensor"),
        "with the same name and overload name multiple times",
    )
    assert e.op == f"{ns}::once"
    legacy.impl_save_for_backward(f"{ns}::once")(lambda inputs, output: None)
    e = raises(
        oplib.RegistrationError,
        RuntimeError,
        lambda: legacy.impl_save_for_backward(f"{ns}::once")(lambda inputs, output: None),
        "already has a save_for_backward impl registered from Python at",
    )
    assert e.existing is not None and THIS_FILE in e.existing
    raises(
        oplib.RegistrationError,
        RuntimeError,
        lambda: legacy.impl_backward(f"{ns}::once", [True, False]),
        "expected output_differentiability",
    )


# -- backends and private use ------------------------------------------------------------


def test_backend_spec_misuse() -> None:
    e = raises(
        oplib.BackendNameError,
        ValueError,
        lambda: oplib.BackendSpec(name="Bad-Name", array_types=(bytearray,)),
        "name must be a lower-case identifier",
    )
    assert e.name == "Bad-Name"
    e = raises(
        oplib.InvalidArgumentError,
        ValueError,
        lambda: oplib.BackendSpec(name="nothing"),
        "give array_types or array_type_names",
    )
    assert e.argument == "array_types"
    e = raises(
        oplib.InvalidDeviceError,
        ValueError,
        lambda: oplib.device(-1),
        "device index must be >= 0",
    )
    assert e.device == -1


@pytest.mark.parametrize("name", ["Npu", "my-npu", "cpu", "privateuse1", "tensor"])
def test_rename_refusals_are_backend_name_errors(name: str) -> None:
    before = backend_registration.privateuse1_backend_name()
    e = raises(
        oplib.BackendNameError,
        ValueError,
        lambda: oplib.rename_privateuse1_backend(name),
        "rename_privateuse1_backend",
    )
    assert e.name == name and isinstance(e, oplib.BackendError)
    assert backend_registration.privateuse1_backend_name() == before
    e = raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: oplib.rename_privateuse1_backend(3),  # type: ignore[arg-type]
        "expected the new device name as a str",
    )
    assert e.value == 3


def test_device_module_misuse() -> None:
    e = raises(
        oplib.DeviceModuleError,
        RuntimeError,
        lambda: oplib.register_device_module("tensor", types.ModuleType("m")),
        "The runtime module of 'tensor' has already been registered",
    )
    assert e.device_type == "tensor"
    raises(
        oplib.ArgumentTypeError,
        TypeError,
        lambda: oplib.register_device_module(3, types.ModuleType("m")),  # type: ignore[arg-type]
        "expected a device type",
    )


@pytest.mark.parametrize(
    ("device", "kind", "builtin", "words"),
    [
        ("cpu:0", oplib.InvalidDeviceError, RuntimeError, "must be privateuse1 device"),
        (-1, oplib.InvalidDeviceError, ValueError, "must be >= 0"),
        (1.5, oplib.ArgumentTypeError, TypeError, "expected an index"),
    ],
)
def test_normalize_device_errors(
    device: Any, kind: type[Exception], builtin: type[Exception], words: str
) -> None:
    e = raises(
        kind, builtin, lambda: backend_registration.normalize_device(device, "privateuse1"), words
    )
    given = e.device if isinstance(e, oplib.InvalidDeviceError) else e.value
    assert given == device or str(given) == device


def test_normalize_device_is_the_seeds_helper() -> None:
    assert backend_registration.normalize_device(None, "nodevmod") == 0
    assert backend_registration.normalize_device(3, "npu") == 3
    assert backend_registration.normalize_device("npu:2", "npu") == 2
    assert backend_registration.normalize_device(oplib.Device("npu", 1), "npu") == 1
    assert backend_registration._normalization_device("npu", "npu:2") == 2
    assert (
        backend_registration._get_privateuse1_backend_name
        is backend_registration.privateuse1_backend_name
    )


# -- plugins: core privilege -------------------------------------------------------------


@pytest.fixture
def registered() -> Iterator[Callable[..., plugins.PluginRecord]]:
    names: list[str] = []

    def register(plugin: Any, name: str) -> plugins.PluginRecord:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", plugins.PluginWarning)
            rec = plugins.register(plugin, name=name)
        names.append(rec.name)
        return rec

    yield register
    for n in names:
        plugins.unregister(n)


def _definer(module_name: str, qualname: str) -> types.ModuleType:
    module = types.ModuleType(module_name)

    def oplib_define(registrar: Any) -> None:
        registrar.define(qualname, "(Tensor x) -> Tensor")

    module.oplib_define = hookimpl(oplib_define)  # type: ignore[attr-defined]
    return module


def test_plugin_claiming_core_privilege_by_attribute_is_refused(registered: Any) -> None:
    module = _definer("thirdparty_claims_core", "oplib::claimed")
    module._oplib_core_plugin = True  # type: ignore[attr-defined]  # the old marker
    rec = registered(module, "claims-core")
    assert rec.status == "failed"
    assert "ReservedNamespaceError" in rec.error and "reserved namespace" in rec.error
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.lookup("oplib::claimed")


def test_plugin_named_like_a_core_module_is_refused(registered: Any) -> None:
    # a module object that merely calls itself oplib_core._core_plugin is not that module
    module = _definer("oplib_core._core_plugin", "oplib::impostor")
    rec = registered(module, "impostor")
    assert rec.status == "failed" and "reserved namespace" in rec.error
    assert sys.modules["oplib_core._core_plugin"] is not module


def test_core_plugins_hold_the_privilege() -> None:
    core = {r.name: r for r in plugins.list()}["core"]
    assert core.status == "loaded"
    assert core.privileged and core.distribution == "oplib-core"
    assert oplib.lookup("oplib::add").origin.plugin == "core"


def test_plugin_failures_are_oplib_errors(registered: Any) -> None:
    bad = types.SimpleNamespace(__name__="bad_backends")
    bad.oplib_backends = hookimpl(lambda: ["not a spec"])
    rec = registered(bad, "bad-backends")
    assert rec.status == "failed" and rec.error.startswith("PluginError: oplib_backends()")


# -- the guard: no builtin exception raised on purpose in the registration modules ------------


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda op: op(np.zeros(1), "two"), "argument 'alpha' must be float, got str"),
        (lambda op: op(np.zeros(1), 1.0, 3), "takes 2 positional arguments but 3 were given"),
        (lambda op: op(np.zeros(1), gamma=1), "unexpected keyword argument 'gamma'"),
        (lambda op: op(), "missing required argument 'x'"),
        (lambda op: op([1.0]), "argument 'x' must be Tensor"),
        (lambda op: op(object()), "argument 'x' must be Tensor"),
    ],
)
def test_call_argument_errors_are_oplib_errors(ns: str, call: Any, words: str) -> None:
    qualname = oplib.define(f"{ns}::scale", "(Tensor x, float alpha=1.0) -> Tensor")
    oplib.register_kernel(qualname, "cpu", lambda x, alpha: x * alpha)
    op = getattr(oplib.ops, ns).scale
    for target in (op, op.default):
        with pytest.raises(oplib.CallArgumentError, match=re.escape(words)) as info:
            call(target)
        assert isinstance(info.value, TypeError) and isinstance(info.value, oplib.OplibError)
        assert info.value.op == qualname
        assert info.value.schema == f"{qualname}(Tensor x, float alpha=1.0) -> Tensor"
        assert "schema: " in str(info.value)


def test_no_matching_overload_is_a_call_argument_error(ns: str) -> None:
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.define(f"{ns}::f.int", "(Tensor x, int n) -> Tensor")
    with pytest.raises(oplib.CallArgumentError, match="no overload matches the arguments") as e:
        getattr(oplib.ops, ns).f(np.zeros(1), "n")
    assert e.value.op == f"{ns}::f" and e.value.schema.count("\n") == 1


# Raises of builtin exceptions that stay, with the reason.
_ALLOWED = {
    # dispatch skips it; calling it is a bug, not a misuse
    ("_registry/registry.py", "NotImplementedError"),
    # oplib has no storages (torch's own signature has the flag)
    ("backend_registration.py", "NotImplementedError"),
    # checks of what a legacy backward returned (at backward time), as autograd's own
    # checks of what a backward returned
    ("legacy.py", "RuntimeError"),
}
_BUILTINS = {"ValueError", "TypeError", "RuntimeError", "KeyError", "NotImplementedError"}
_MODULES = [
    "library.py",
    "custom_op.py",
    "legacy.py",
    "_registry/registry.py",
    "_registry/lookup.py",
    "backend_registration.py",
    "plugins.py",
    "backends.py",
    "_infer_schema.py",
]


@pytest.mark.parametrize("module", _MODULES)
def test_registration_modules_raise_oplib_errors(module: str) -> None:
    path = ROOT / "oplib_core" / module
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = target.id if isinstance(target, ast.Name) else None
        if name in _BUILTINS and (module, name) not in _ALLOWED:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: raise {name}")
    assert not found, "raise an OplibError subclass instead:\n" + "\n".join(found)


def test_legacy_runtime_errors_are_only_backward_checks() -> None:
    path = ROOT / "oplib_core" / "legacy.py"
    tree = ast.parse(path.read_text())
    owners = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Raise)
                    and isinstance(node.exc, ast.Call)
                    and isinstance(node.exc.func, ast.Name)
                    and node.exc.func.id == "RuntimeError"
                ):
                    owners.append(fn.name)
    assert set(owners) <= {"_make_formula", "setup_context", "_validate_grad_inputs_dict", "error"}


def test_opcheck_refuses_unknown_ops_as_registration_does() -> None:
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.opcheck("nope::x", (np.ones(2),))
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.register_fake("nope::x", _identity)


# -- errors raised inside kernels (issue 19) ---------------------------------------------------


def _line_of(fn: Callable[..., Any]) -> str:
    return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def _oplib_notes(e: BaseException) -> list[str]:
    return [n for n in getattr(e, "__notes__", ()) if n.startswith("oplib: ")]


def _failing_op(ns: str, schema: str = "(Tensor x, Tensor y) -> Tensor") -> Any:
    q = oplib.define(f"{ns}::f", schema)

    def kernel(*args: Any) -> Any:
        raise ZeroDivisionError("the kernel's own words")

    oplib.impl(q, "cpu", kernel)
    return getattr(oplib.ops, ns).f, kernel


@pytest.mark.parametrize("how", ["native", "tensor", "default", "kwargs"])
def test_kernel_exception_keeps_its_type_and_gains_a_note(ns: str, how: str) -> None:
    op, kernel = _failing_op(ns)
    x, y = np.zeros((2, 3)), np.ones(3, dtype=np.float32)
    calls = {
        "native": lambda: op(x, y),
        "tensor": lambda: op(oplib.tensor(x), oplib.tensor(y)),
        "default": lambda: op.default(x, y),
        "kwargs": lambda: op(x, y=y),
    }
    for _ in range(3):  # the first call plans (slow path), the next ones are cached
        with pytest.raises(ZeroDivisionError, match="the kernel's own words") as info:
            calls[how]()
        (note,) = _oplib_notes(info.value)
        assert f"the cpu kernel of {ns}::f ({_line_of(kernel)}) on backend cpu" in note
        assert "x=ndarray float64[2, 3], y=ndarray float32[3]" in note


def test_kernel_notes_on_the_one_tensor_and_many_argument_paths(ns: str) -> None:
    one, kernel = _failing_op(ns, "(Tensor x) -> Tensor")
    t = oplib.tensor(np.zeros(4))
    for _ in range(2):
        with pytest.raises(ZeroDivisionError) as info:
            one(t)
        assert f"{ns}::f ({_line_of(kernel)})" in _oplib_notes(info.value)[0]
    q = oplib.define(f"{ns}::g", "(Tensor x, Tensor y, Tensor z) -> Tensor")
    oplib.impl(q, "cpu", kernel)
    three = getattr(oplib.ops, ns).g
    for _ in range(2):
        with pytest.raises(ZeroDivisionError) as info:
            three(t, t, t)
        assert (
            "x=ndarray float64[4], y=ndarray float64[4], z=ndarray float64[4]"
            in (_oplib_notes(info.value)[0])
        )


def test_nested_ops_each_add_their_note_once(ns: str) -> None:
    inner, kernel = _failing_op(ns, "(Tensor x) -> Tensor")
    q = oplib.define(f"{ns}::outer", "(Tensor x) -> Tensor")

    def outer_kernel(x: Any) -> Any:
        return inner(x)

    oplib.impl(q, "cpu", outer_kernel)
    for _ in range(2):
        with pytest.raises(ZeroDivisionError) as info:
            getattr(oplib.ops, ns).outer(np.zeros(2))
        notes = _oplib_notes(info.value)
        assert len(notes) == 2
        assert f"kernel of {ns}::f ({_line_of(kernel)})" in notes[0]
        assert f"kernel of {ns}::outer ({_line_of(outer_kernel)})" in notes[1]


def test_core_op_broadcasting_error_names_the_op_and_the_shapes() -> None:
    a, b = np.ones((2, 3)), np.ones(4)
    for call in (lambda: oplib.ops.oplib.add(a, b), lambda: oplib.tensor(a) + oplib.tensor(b)):
        with pytest.raises(ValueError, match="could not be broadcast") as info:
            call()
        (note,) = _oplib_notes(info.value)
        assert "kernel of oplib::add" in note and "on backend cpu" in note
        assert "self=ndarray float64[2, 3], other=ndarray float64[4]" in note


def test_kernel_failure_on_the_private_use_device_names_that_backend(ns: str) -> None:
    npu = oplib.backends.get("privateuse1").name
    q = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    def kernel(x: Any) -> Any:
        raise RuntimeError("device fault")

    oplib.impl(q, npu, kernel)
    t = oplib.tensor(np.zeros(3)).to(npu)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="device fault") as info:
            getattr(oplib.ops, ns).f(t)
        (note,) = _oplib_notes(info.value)
        assert f"the {npu} kernel of {ns}::f ({_line_of(kernel)}) on backend {npu}" in note


def test_keyboard_interrupt_in_a_kernel_is_left_alone(ns: str) -> None:
    q = oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    def kernel(x: Any) -> Any:
        raise KeyboardInterrupt

    oplib.impl(q, "cpu", kernel)
    with pytest.raises(KeyboardInterrupt) as info:
        getattr(oplib.ops, ns).f(np.zeros(1))
    assert not _oplib_notes(info.value)


@pytest.mark.parametrize(
    ("array", "words"),
    [
        (np.array([1, 2], dtype=object), "dtype object (Python objects)"),
        (np.array(["a", "b"]), "dtype <U1 (str)"),
        (np.array([b"a", b"b"]), "dtype |S1 (bytes)"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "dtype datetime64[D] (datetime)"),
        (np.array([1], dtype="timedelta64[s]"), "dtype timedelta64[s] (timedelta)"),
        (np.zeros(2, dtype="i4,f4"), "(a structured dtype)"),
        (np.zeros(2, dtype="V4"), "(raw bytes)"),
    ],
)
def test_unsupported_dtypes_that_fail_a_kernel_name_op_argument_and_dtype(
    array: np.ndarray, words: str
) -> None:
    for call in (lambda: oplib.ops.oplib.exp(array), lambda: oplib.ops.oplib.exp(array)):
        e = raises(oplib.UnsupportedDtypeError, TypeError, call, r"oplib::exp\(\): argument 'self'")
        assert words in str(e) and "convert it to a numeric or bool dtype" in str(e)
        assert (e.op, e.argument, e.dtype) == ("oplib::exp", "self", array.dtype)
        assert isinstance(e, oplib.CallArgumentError)
        assert e.__cause__ is not None and "the kernel raised" in str(e)


def test_unsupported_dtype_in_the_second_argument_and_in_a_list() -> None:
    e = raises(
        oplib.UnsupportedDtypeError,
        TypeError,
        lambda: oplib.ops.oplib.mul(np.ones(2), np.array(["a", "b"])),
        "argument 'other'",
    )
    assert e.argument == "other"
    e = raises(
        oplib.UnsupportedDtypeError,
        TypeError,
        lambda: oplib.ops.oplib.cat([np.ones(2), np.array(["2020-01-01"], dtype="datetime64[D]")]),
        r"argument 'tensors\[1\]'",
    )
    assert e.argument == "tensors[1]"


def test_a_kernel_that_handles_an_odd_dtype_is_not_second_guessed() -> None:
    """Only a failure is diagnosed (checking every call would cost every call): numpy adds
    object arrays of ints, and so does the cpu kernel."""
    out = oplib.ops.oplib.add(np.array([1, 2], dtype=object), np.array([3, 4], dtype=object))
    assert out.tolist() == [4, 6]


def test_bfloat16_failures_are_not_called_unsupported(ns: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    op, _ = _failing_op(ns, "(Tensor x) -> Tensor")
    with pytest.raises(ZeroDivisionError) as info:
        op(np.zeros(2, dtype=ml_dtypes.bfloat16))
    assert "x=ndarray bfloat16[2]" in _oplib_notes(info.value)[0]


def test_an_unsupported_dtype_found_by_an_inner_op_is_reported_once(ns: str) -> None:
    q = oplib.define(f"{ns}::outer", "(Tensor x) -> Tensor")

    def outer_kernel(x: Any) -> Any:
        return oplib.ops.oplib.exp(x)

    oplib.impl(q, "cpu", outer_kernel)
    e = raises(
        oplib.UnsupportedDtypeError,
        TypeError,
        lambda: getattr(oplib.ops, ns).outer(np.array(["a"])),
        r"oplib::exp\(\): argument 'self'",
    )
    assert e.op == "oplib::exp"
    assert any(f"kernel of {ns}::outer" in n for n in _oplib_notes(e))
