"""Calling operators: kernel resolution (torch's resolve_key), the dispatch cache, overload
resolution, argument binding errors, devices and backends, dispatch modes, introspection."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY
from oplib_core.library import _scoped_library


def _packet(ns: str, name: str):
    return getattr(getattr(oplib.ops, ns), name)


def _define(lib, schema: str):
    qn = lib.define(schema)
    name = qn.partition("::")[2].partition(".")[0]
    return _packet(lib.ns, name)


def _marker(tag: str):
    def kernel(*args, **kwargs):
        return tag

    kernel.__name__ = f"kernel_{tag}"
    return kernel


def _first(value) -> float:
    """The first element of a native array or a CPU Tensor."""
    return float(np.asarray(value).ravel()[0])


# -- resolution order (resolve_key) --------------------------------------------------------


def test_backend_kernel_beats_composite_explicit(lib, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("cpu"), "cpu")
    lib.impl("f", _marker("default"), "CompositeExplicitAutograd")
    assert op(np.zeros(1)) == "cpu"
    assert op(toy(np.zeros(1))) == "default"


def test_composite_explicit_beats_composite_implicit(lib, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("implicit"), "CompositeImplicitAutograd")
    lib.impl("f", _marker("default"), "default")
    assert op(np.zeros(1)) == "default"
    assert op(toy(np.zeros(1))) == "default"


def test_composite_implicit_only_when_no_backend_kernel(lib, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("implicit"), "CompositeImplicitAutograd")
    lib.impl("f", _marker("cpu"), "CPU")
    assert op(np.zeros(1)) == "cpu"
    assert op(toy(np.zeros(1))) == "implicit"


def test_composite_implicit_alone_serves_every_backend(lib, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("implicit"))  # a Library's default key is CompositeImplicitAutograd
    assert op(np.zeros(1)) == "implicit"
    assert op(toy(np.zeros(1))) == "implicit"


def test_direct_kernel_of_second_backend(lib, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("implicit"), "CompositeImplicitAutograd")
    lib.impl("f", _marker("default"), "default")
    lib.impl("f", _marker("toy"), "toy")
    assert op(toy(np.zeros(1))) == "toy"
    assert op(np.zeros(1)) == "default"


def test_composite_implicit_receives_tensors_and_its_result_is_returned(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    seen = []

    def decomposition(x):
        seen.append(type(x))
        return oplib.ops.oplib.add(x, x)

    lib.impl("f", decomposition, "CompositeImplicitAutograd")
    t = oplib.tensor([1.0, 2.0])
    out = op(t)
    assert seen == [oplib.Tensor]
    assert type(out) is oplib.Tensor
    np.testing.assert_array_equal(out.numpy(), [2.0, 4.0])
    out = op(np.array([1.0]))
    assert seen[-1] is np.ndarray and type(out) is np.ndarray


# -- fallthrough ----------------------------------------------------------------------------


def test_fallthrough_backend_key_goes_to_default(lib):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", oplib.fallthrough_kernel, "cpu")
    lib.impl("f", _marker("default"), "default")
    assert op(np.zeros(1)) == "default"
    assert op(np.zeros(1)) == "default"


def test_fallthrough_alone_is_no_kernel(lib, ns):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", oplib.fallthrough_kernel, "cpu")
    with pytest.raises(oplib.NoKernelError, match=rf"{ns}::f\(\): no kernel for backend 'cpu'"):
        op(np.zeros(1))


def test_autograd_fallthrough_skips_to_backend(lib, ns):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x * 3, "cpu")
    t = oplib.tensor([1.0], requires_grad=True)
    msg = rf"Autograd has not been implemented for operator {ns}::f"
    with pytest.raises(RuntimeError, match=msg):
        op(t)
    lib.impl("f", oplib.fallthrough_kernel, "Autograd")
    out = op(t)
    assert type(out) is oplib.Tensor
    assert out.item() == 3.0
    assert out.grad_fn is None


def test_no_grad_needed_without_requires_grad(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x * 3, "cpu")
    t = oplib.tensor([1.0], requires_grad=True)
    with oplib.no_grad():
        assert op(t).item() == 3.0
    assert op(t.detach()).item() == 3.0


def test_fallthrough_kernel_is_never_called():
    with pytest.raises(NotImplementedError):
        oplib.fallthrough_kernel(1)


# -- the dispatch cache ---------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [np.asarray, oplib.tensor], ids=["native", "tensor"])
def test_cache_invalidated_by_late_registration_and_destroy(lib, ns, wrap):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "default")
    x = wrap(np.zeros(1))
    for _ in range(3):  # the first call fills the cache, the next ones use it
        assert _first(op(x)) == 1.0
    with _scoped_library(ns, "IMPL") as late:
        late.impl("f", lambda x: x + 2, "cpu")
        for _ in range(3):
            assert _first(op(x)) == 2.0
        assert _first(op.default(x)) == 2.0
    for _ in range(3):
        assert _first(op(x)) == 1.0
        assert _first(op.default(x)) == 1.0


def test_cache_of_binary_op_invalidated(lib, ns):
    op = _define(lib, "f(Tensor a, Tensor b) -> Tensor")
    lib.impl("f", lambda a, b: a + b, "cpu")
    a, b = np.ones(1), np.ones(1)
    assert op(a, b)[0] == 2.0
    assert op(a, b)[0] == 2.0
    with _scoped_library(ns, "IMPL") as late:
        late.impl("f", lambda a, b: a - b, "cpu", allow_override=True)
        assert op(a, b)[0] == 0.0
    assert op(a, b)[0] == 2.0


def test_no_kernel_then_late_registration(lib, ns):
    op = _define(lib, "f(Tensor x) -> str")
    with pytest.raises(oplib.NoKernelError):
        op(np.zeros(1))
    lib.impl("f", _marker("late"), "cpu")
    assert op(np.zeros(1)) == "late"


def test_kernel_registered_before_its_backend_goes_live(lib, teardown):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("toy"), "toy")  # no toy backend yet: kept, waiting
    assert REGISTRY.kernel_status("toy") == "waiting"
    from helpers import ToyArray, toy_spec

    undo = oplib.backends.register(toy_spec())
    teardown(undo)
    assert REGISTRY.kernel_status("toy") == "live"
    assert op(ToyArray(np.zeros(1))) == "toy"
    undo()
    with pytest.raises(TypeError, match="argument 'x' must be Tensor, got ToyArray"):
        op(ToyArray(np.zeros(1)))


def test_py_impl_for_key_overrides_table_and_invalidates_cache(lib):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("table"), "cpu")
    assert op(np.zeros(1)) == "table"
    assert op(np.zeros(1)) == "table"
    op.default.py_impl("CPU")(_marker("py"))
    assert op(np.zeros(1)) == "py"
    with pytest.raises(oplib.RegistrationError, match="already has a Python kernel"):
        op.default.py_impl("cpu")(_marker("again"))


def test_with_keyset_kernel_receives_keyset(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    seen = []

    def kernel(keyset, x):
        seen.append(keyset)
        return x

    lib.impl("f", kernel, "CPU", with_keyset=True)
    x = np.zeros(1)
    assert op(x) is x
    assert isinstance(seen[0], oplib.DispatchKeySet)
    assert "cpu" in seen[0]


# -- overload resolution ------------------------------------------------------------------------


def test_packet_picks_overload_by_arguments(lib, ns):
    lib.define("add(Tensor a, Tensor b) -> str")
    lib.define("add.Scalar(Tensor a, Scalar b) -> str")
    lib.impl("add", _marker("tensor"), "cpu")
    lib.impl("add.Scalar", _marker("scalar"), "cpu")
    add = _packet(ns, "add")
    x = np.zeros(1)
    assert add(x, x) == "tensor"
    assert add(x, 2) == "scalar"
    assert add(x, 2.5) == "scalar"
    assert add(x, x) == "tensor"  # the resolution cache keeps types apart
    assert add(x, b=x) == "tensor"
    assert add.default(x, x) == "tensor"
    assert add.Scalar(x, 1) == "scalar"
    assert add.overloads() == ["default", "Scalar"]


def test_packet_without_match_lists_schemas(lib, ns):
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.define("add.Scalar(Tensor a, Scalar b) -> Tensor")
    with pytest.raises(TypeError) as info:
        _packet(ns, "add")(np.zeros(1), "two")
    msg = str(info.value)
    assert f"{ns}::add(): no overload matches the arguments (ndarray, str)" in msg
    assert f"{ns}::add(Tensor a, Tensor b) -> Tensor" in msg
    assert f"{ns}::add.Scalar(Tensor a, Scalar b) -> Tensor" in msg


def test_packet_tries_default_first_then_definition_order(lib, ns):
    lib.define("f.int(Tensor x, int n) -> str")
    lib.define("f.float(Tensor x, float n) -> str")
    lib.impl("f.int", _marker("int"), "cpu")
    lib.impl("f.float", _marker("float"), "cpu")
    f = _packet(ns, "f")
    assert f(np.zeros(1), 3) == "int"
    assert f(np.zeros(1), 3.0) == "float"
    lib.define("f(Tensor x, float n) -> str")  # defined last, tried first
    lib.impl("f", _marker("default"), "cpu")
    assert f.overloads()[0] == "default"
    assert f(np.zeros(1), 3) == "default"


def test_ops_namespace_attribute_errors(ns):
    with pytest.raises(AttributeError, match=rf"no operator {ns}::missing is defined"):
        _packet(ns, "missing")


def test_dir_of_a_namespace_lists_its_operators(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    lib.define("f.int(Tensor x, int n) -> Tensor")
    lib.define("g(Tensor x) -> Tensor")
    assert dir(getattr(oplib.ops, ns)) == ["f", "g"]
    assert {"add", "matmul", "sum"} <= set(dir(oplib.ops.oplib))


def test_ops_iterates_namespaces(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    assert ns in list(oplib.ops)
    assert "oplib" in list(oplib.ops)


# -- binding arguments -------------------------------------------------------------------------


SIG = "f(Tensor x, int n=1, float a=1.0, *, bool flag=False) -> Tensor"


@pytest.fixture
def bound(lib, ns):
    lib.define(SIG)
    calls = []

    def kernel(x, n, a, /, *, flag):  # positional-only: positional args must come positionally
        calls.append((n, a, flag))
        return x

    lib.impl("f", kernel, "cpu")
    return _packet(ns, "f"), calls, f"{ns}::{SIG}"


def test_defaults_filled_and_kwarg_only_by_keyword(bound):
    op, calls, _ = bound
    x = np.zeros(1)
    assert op(x) is x
    op(x, 5)
    op(x, a=2.5, flag=True)
    op(x, n=7)
    assert calls == [(1, 1.0, False), (5, 1.0, False), (1, 2.5, True), (7, 1.0, False)]


def test_arguments_converted_to_schema_types(bound):
    op, calls, _ = bound
    op(np.zeros(1), np.int64(4), 2)
    n, a, _flag = calls[-1]
    assert type(n) is int and n == 4
    assert type(a) is float and a == 2.0


def test_too_many_positional_arguments(bound):
    op, _, schema = bound
    with pytest.raises(TypeError) as info:
        op(np.zeros(1), 1, 2.0, True)
    msg = str(info.value)
    assert "takes 3 positional arguments but 4 were given" in msg
    assert schema in msg


def test_wrong_argument_type(bound):
    op, calls, schema = bound
    with pytest.raises(TypeError) as info:
        op(np.zeros(1), "three")
    assert "argument 'n' must be int, got str ('three')" in str(info.value)
    assert schema in str(info.value)
    with pytest.raises(TypeError, match="argument 'n' must be int, got bool"):
        op(np.zeros(1), True)
    with pytest.raises(TypeError, match=r"argument 'n' must be int, got float \(1.5\)"):
        op(np.zeros(1), 1.5)
    with pytest.raises(TypeError, match="argument 'x' must be Tensor, got list of int"):
        op([1, 2])
    assert calls == []


def test_unknown_keyword_argument(bound):
    op, _, schema = bound
    with pytest.raises(TypeError) as info:
        op(np.zeros(1), bogus=1)
    assert "got an unexpected keyword argument 'bogus'" in str(info.value)
    assert schema in str(info.value)


def test_missing_argument(bound):
    op, _, schema = bound
    with pytest.raises(TypeError) as info:
        op()
    assert "missing required argument 'x' (Tensor)" in str(info.value)
    assert schema in str(info.value)


def test_multiple_values_for_argument(bound):
    op, _, _ = bound
    with pytest.raises(TypeError, match="got multiple values for argument 'x'"):
        op(np.zeros(1), x=np.zeros(1))


def test_missing_keyword_only_argument(lib, ns):
    op = _define(lib, "g(Tensor x, *, int k) -> Tensor")
    lib.impl("g", lambda x, *, k: x, "cpu")
    with pytest.raises(TypeError, match=r"missing required keyword-only argument 'k' \(int\)"):
        op(np.zeros(1))
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        op(np.zeros(1), 3)
    x = np.zeros(1)
    assert op(x, k=3) is x


def test_numpy_scalar_given_for_tensor_becomes_0d_array(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    seen = []
    lib.impl("f", lambda x: seen.append(x) or x, "cpu")
    op(np.float32(2.0))
    assert type(seen[0]) is np.ndarray and seen[0].shape == () and seen[0].dtype == np.float32


# -- results: native in, native out; Tensors in, Tensors out -------------------------------------


def test_native_in_native_out_tensor_in_tensor_out(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    seen = []

    def kernel(x):
        seen.append(type(x))
        return x + 1

    lib.impl("f", kernel, "cpu")
    out = op(np.zeros(2))
    assert type(out) is np.ndarray
    t = op(oplib.tensor([0.0, 1.0]))
    assert type(t) is oplib.Tensor
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    t = op(oplib.tensor([0.0, 1.0]))  # cached tensor path
    assert type(t) is oplib.Tensor
    assert seen == [np.ndarray, np.ndarray, np.ndarray]


def test_mixed_tensor_and_native_gives_tensor(lib):
    op = _define(lib, "f(Tensor a, Tensor b) -> Tensor")
    lib.impl("f", lambda a, b: a + b, "cpu")
    out = op(oplib.tensor([1.0]), np.ones(1, dtype=np.float32))
    assert type(out) is oplib.Tensor and out.item() == 2.0


def test_tuple_and_list_returns_are_wrapped(lib):
    pair = _define(lib, "pair(Tensor x) -> (Tensor, Tensor)")
    many = _define(lib, "many(Tensor x, int n) -> Tensor[]")
    count = _define(lib, "count(Tensor x) -> int")
    lib.impl("pair", lambda x: (x + 1, x + 2), "cpu")
    lib.impl("many", lambda x, n: [x + i for i in range(n)], "cpu")
    lib.impl("count", lambda x: int(x.size), "cpu")
    a, b = pair(oplib.tensor([0.0]))
    assert type(a) is oplib.Tensor and type(b) is oplib.Tensor
    assert (a.item(), b.item()) == (1.0, 2.0)
    a, b = pair(np.zeros(1))
    assert type(a) is np.ndarray
    out = many(oplib.tensor([0.0]), 3)
    assert isinstance(out, list) and [type(o) for o in out] == [oplib.Tensor] * 3
    assert [o.item() for o in out] == [0.0, 1.0, 2.0]
    assert count(oplib.tensor([1.0, 2.0])) == 2


def test_mutating_op_returns_the_same_tensor(lib):
    fill_ = _define(lib, "fill_(Tensor(a!) x, float v) -> Tensor(a!)")
    out_op = _define(lib, "twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")

    def fill_kernel(x, v):
        x[...] = v
        return x

    def twice_out(x, *, out):
        np.multiply(x, 2, out=out)
        return out

    lib.impl("fill_", fill_kernel, "cpu")
    lib.impl("twice.out", twice_out, "cpu")
    t = oplib.tensor([0.0, 0.0])
    assert fill_(t, 3.0) is t
    assert fill_(t, 4.0) is t
    np.testing.assert_array_equal(t.numpy(), [4.0, 4.0])
    dest = oplib.zeros(2)
    assert out_op.out(t, out=dest) is dest
    np.testing.assert_array_equal(dest.numpy(), [8.0, 8.0])
    a = np.zeros(2)
    assert fill_(a, 1.0) is a


# -- errors about kernels and devices -----------------------------------------------------------


def test_no_kernel_error_lists_kernels_and_backends(lib, ns, toy):
    op = _define(lib, "f(Tensor x) -> str")
    lib.impl("f", _marker("toy"), "toy")
    with pytest.raises(oplib.NoKernelError) as info:
        op(np.zeros(1))
    msg = str(info.value)
    assert f"{ns}::f(): no kernel for backend 'cpu' (dispatch key CPU)" in msg
    assert "Kernels are registered for: toy." in msg
    installed = msg.partition("Installed backends: ")[2].partition(".")[0].split(", ")
    assert {"cpu", "toy"} <= set(installed)
    assert info.value.op == f"{ns}::f"
    assert info.value.key == "CPU"
    assert isinstance(info.value, NotImplementedError)


def test_no_kernel_error_for_op_without_kernels(lib, ns):
    op = _define(lib, "f(Tensor x) -> Tensor")
    with pytest.raises(oplib.NoKernelError, match=r"Kernels are registered for: \(none\)"):
        op(np.zeros(1))


def test_device_mismatch_between_backends(lib, ns, toy):
    op = _define(lib, "f(Tensor a, Tensor b) -> str")
    lib.impl("f", _marker("cpu"), "cpu")
    lib.impl("f", _marker("toy"), "toy")
    with pytest.raises(oplib.DeviceMismatchError) as info:
        op(np.zeros(1), toy(np.zeros(1)))
    msg = str(info.value)
    assert f"{ns}::f(): expected all tensor arguments on one device" in msg
    assert "'a' on cpu" in msg and "'b' on toy:0" in msg
    assert info.value.op == f"{ns}::f"
    assert set(info.value.devices) == {"a", "b"}
    assert info.value.devices["b"] == "toy:0"
    with pytest.raises(oplib.DeviceMismatchError):
        op(oplib.tensor([1.0]), oplib.tensor(toy(np.zeros(1))))


def test_device_mismatch_between_devices_of_one_backend(lib, ns, toy):
    op = _define(lib, "f(Tensor a, Tensor b) -> str")
    lib.impl("f", _marker("toy"), "toy")
    assert op(toy(np.zeros(1), 1), toy(np.zeros(1), 1)) == "toy"
    with pytest.raises(oplib.DeviceMismatchError) as info:
        op(toy(np.zeros(1), 0), toy(np.zeros(1), 1))
    assert info.value.devices == {"a": "toy:0", "b": "toy:1"}
    assert "'a' on toy:0, 'b' on toy:1" in str(info.value)


def test_device_mismatch_in_tensor_list(lib, toy):
    op = _define(lib, "f(Tensor[] xs) -> str")
    lib.impl("f", _marker("toy"), "toy")
    with pytest.raises(oplib.DeviceMismatchError) as info:
        op([toy(np.zeros(1), 0), toy(np.zeros(1), 1)])
    assert info.value.devices == {"xs[0]": "toy:0", "xs[1]": "toy:1"}


def test_zero_dim_cpu_array_is_moved_as_a_scalar(lib, toy):
    op = _define(lib, "f(Tensor a, Tensor b) -> Tensor")
    seen = []

    def kernel(a, b):
        seen.append((type(a), type(b), b.index))
        return a

    lib.impl("f", kernel, "toy")
    a = toy(np.ones(2), 1)
    assert op(a, np.array(2.0)) is a
    assert seen == [(toy, toy, 1)]
    # a 1-d cpu array is not a scalar
    with pytest.raises(oplib.DeviceMismatchError):
        op(a, np.array([2.0]))


def test_zero_dim_cpu_arrays_alone_run_on_cpu(lib):
    op = _define(lib, "f(Tensor a, Tensor b) -> str")
    lib.impl("f", _marker("cpu"), "cpu")
    assert op(np.array(1.0), np.array(2.0)) == "cpu"


def test_backend_accepting_cpu_arrays(lib, toy_accepting_cpu):
    toy = toy_accepting_cpu
    op = _define(lib, "f(Tensor a, Tensor b) -> str")
    seen = []
    lib.impl("f", _marker("cpu"), "cpu")
    lib.impl("f", lambda a, b: seen.append((type(a), type(b))) or "toy", "toy")
    assert op(np.zeros(1), toy(np.zeros(1))) == "toy"
    assert op(toy(np.zeros(1)), np.array(1.0)) == "toy"
    assert seen == [(np.ndarray, toy), (toy, np.ndarray)]


# -- factories: dispatch on device= -------------------------------------------------------------


def test_factory_dispatches_on_device_argument(lib, ns, toy):
    make = _define(lib, "make(int n, *, Device? device=None) -> Tensor")
    seen = []
    lib.impl("make", lambda n, *, device: seen.append(("cpu", device)) or np.zeros(n), "cpu")
    lib.impl("make", lambda n, *, device: seen.append(("toy", device)) or toy(np.zeros(n)), "toy")
    # no array argument: Tensors come back, as torch gives them (issue 31)
    assert make(2).device == oplib.Device("cpu")
    assert make(2, device=None).device == oplib.Device("cpu")
    assert make(2, device="toy:1").device.type == "toy"
    assert type(make(2, device=oplib.device("cpu"))) is oplib.Tensor
    assert seen == [
        ("cpu", None),
        ("cpu", None),
        ("toy", oplib.Device("toy", 1)),
        ("cpu", oplib.Device("cpu")),
    ]
    msg = rf"{ns}::make\(\): no backend 'nope' is installed"
    with pytest.raises(oplib.BackendError, match=msg):
        make(2, device="nope")
    with pytest.raises(TypeError, match="argument 'device' must be Device"):
        make(2, device=1.5)


def test_core_factory_on_second_backend(toy):
    with _scoped_library("oplib", "IMPL") as lib:
        lib.impl(
            "zeros",
            lambda size, *, dtype, device: toy(
                np.zeros(size, dtype or np.float32), device.index or 0
            ),
            "toy",
        )
        t = oplib.zeros(2, 3, device="toy")
        assert type(t) is oplib.Tensor
        assert t.device == oplib.Device("toy", 0)
        assert t.shape == (2, 3)
        assert oplib.zeros(2).device.type == "cpu"
    with pytest.raises(oplib.NoKernelError):
        oplib.zeros(2, device="toy")


# -- dispatch modes -----------------------------------------------------------------------------


class Recorder(oplib.DispatchMode):
    def __init__(self, name: str = "rec", log: list | None = None) -> None:
        self.name = name
        self.log = [] if log is None else log

    def __oplib_dispatch__(self, op, args, kwargs):
        self.log.append((self.name, str(op)))
        return op(*args, **kwargs)


class Replacer(oplib.DispatchMode):
    def __oplib_dispatch__(self, op, args, kwargs):
        return ("replaced", str(op), args, kwargs)


def test_mode_intercepts_calls(lib, ns):
    op = _define(lib, "f(Tensor x, int n=1) -> Tensor")
    lib.impl("f", lambda x, n: x + n, "cpu")
    x = np.zeros(1)
    op(x)  # fill caches: the mode must still see the calls
    op(x, 1)
    with Recorder() as rec:
        assert op(x)[0] == 1.0
        assert op(x, 2)[0] == 2.0
        assert op.default(x, n=3)[0] == 3.0
    assert rec.log == [("rec", f"{ns}.f.default")] * 3
    op(x)
    assert len(rec.log) == 3


def test_mode_can_replace_the_result(lib, ns):
    op = _define(lib, "f(Tensor x, int n=1) -> Tensor")
    lib.impl("f", lambda x, n: x + n, "cpu")
    x = np.zeros(1)
    with Replacer():
        out = op(x, n=4)
    assert out[0] == "replaced" and out[1] == f"{ns}.f.default"
    assert out[2] == (x,) and out[3] == {"n": 4}


def test_mode_sees_core_ops_and_tensor_operators():
    t = oplib.tensor([1.0])
    with Recorder() as rec:
        t + t
        t * 2
    assert rec.log == [("rec", "oplib.add.default"), ("rec", "oplib.mul.Scalar")]


def test_nested_modes_innermost_first(lib, ns):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "cpu")
    log: list = []
    with Recorder("outer", log), Recorder("inner", log):
        op(np.zeros(1))
    assert log == [("inner", f"{ns}.f.default"), ("outer", f"{ns}.f.default")]


def test_modes_must_exit_in_order():
    outer, inner = Recorder("outer"), Recorder("inner")
    outer.__enter__()
    inner.__enter__()
    try:
        with pytest.raises(RuntimeError, match="modes must exit in the reverse order"):
            outer.__exit__(None, None, None)
    finally:
        inner.__exit__(None, None, None)
        outer.__exit__(None, None, None)
    assert oplib._dispatch.active_modes() == ()


def test_mode_is_per_thread(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, "cpu")
    results = []
    with Recorder() as rec:
        thread = threading.Thread(target=lambda: results.append(op(np.zeros(1))[0]))
        thread.start()
        thread.join()
    assert results == [1.0]
    assert rec.log == []


def test_py_impl_for_mode_class(lib, ns):
    op = _define(lib, "f(Tensor x, int n=1) -> Tensor")
    other = _define(lib, "g(Tensor x) -> Tensor")
    lib.impl("f", lambda x, n: x + n, "cpu")
    lib.impl("g", lambda x: x, "cpu")
    seen = []

    @op.default.py_impl(Recorder)
    def handler(mode, *args, **kwargs):
        seen.append((type(mode), args, kwargs))
        return op(*args, **kwargs) * 10  # the mode is inactive here: runs the kernel

    x = np.zeros(1)
    with Recorder() as rec:
        assert op(x, n=2)[0] == 20.0
        other(x)
    assert seen == [(Recorder, (x,), {"n": 2})]
    # the handler replaced the mode's generic dispatch for f only
    assert rec.log == [("rec", f"{ns}.g.default")]
    with Replacer():
        assert op(x)[0] == "replaced"
    assert op(x)[0] == 1.0


def test_py_impl_rejects_unknown_keys(lib):
    op = _define(lib, "f(Tensor x) -> Tensor")
    with pytest.raises(oplib.RegistrationError, match="unknown dispatch key 'Nope'"):
        op.default.py_impl("Nope")


# -- introspection -----------------------------------------------------------------------------


def test_repr_str_name_namespace_tags_schema(lib, ns):
    lib.define("sin(Tensor x) -> Tensor", tags=oplib.Tag.pointwise)
    lib.define("sin.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    packet = _packet(ns, "sin")
    op = packet.default
    assert repr(op) == f"<OpOverload(op='{ns}.sin', overload='default')>"
    assert str(op) == f"{ns}.sin.default"
    assert repr(packet.out) == f"<OpOverload(op='{ns}.sin', overload='out')>"
    assert str(packet.out) == f"{ns}.sin.out"
    assert repr(packet) == f"<OpOverloadPacket(op='{ns}.sin')>"
    assert str(packet) == f"{ns}.sin"
    assert op.name() == f"{ns}::sin"
    assert packet.out.name() == f"{ns}::sin.out"
    assert op.namespace == ns
    assert op.tags == (oplib.Tag.pointwise,)
    assert packet.out.tags == ()
    assert isinstance(op._schema, oplib.FunctionSchema)
    assert str(op._schema) == f"{ns}::sin(Tensor x) -> Tensor"
    assert op.overloadpacket is packet
    assert packet._qualified_op_name == f"{ns}::sin"


def test_core_op_introspection():
    add = oplib.ops.oplib.add
    assert repr(add.default) == "<OpOverload(op='oplib.add', overload='default')>"
    assert str(add.Scalar) == "oplib.add.Scalar"
    assert oplib.Tag.pointwise in add.default.tags
    assert "default" in add.overloads() and "Scalar" in add.overloads()


def test_ops_import_module(tmp_path, monkeypatch):
    from helpers import drop_namespace, unique_ns

    ns = unique_ns("imp")
    module = f"oplib_test_module_{ns}"
    (tmp_path / f"{module}.py").write_text(
        "import oplib_core as oplib\n"
        f"lib = oplib.Library({ns!r}, 'DEF')\n"
        "lib.define('hello(Tensor x) -> Tensor')\n"
        "lib.impl('hello', lambda x: x + 41, 'cpu')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        mod = oplib.ops.import_module(module)
        assert mod is sys.modules[module]
        import numpy as np_

        assert _packet(ns, "hello")(np_.ones(1))[0] == 42.0
    finally:
        sys.modules.pop(module).lib._destroy()
        drop_namespace(ns)
    assert not hasattr(getattr(oplib.ops, ns), "hello")


def test_overload_resolution_depends_on_list_contents_and_strings(lib, ns):
    # the packet caches its choice per call signature; that signature must include what
    # matching depends on, or the second call reuses the first call's overload
    lib.define("f(Tensor x, int[] dims) -> str")
    lib.define("f.tensors(Tensor x, Tensor[] others) -> str")
    lib.define("g(Tensor x, Device d) -> str")
    lib.define("g.s(Tensor x, str s) -> str")
    for name, tag in [("f", "ints"), ("f.tensors", "tensors"), ("g", "device"), ("g.s", "str")]:
        lib.impl(name, _marker(tag), "cpu")
    f, g = _packet(ns, "f"), _packet(ns, "g")
    x = np.zeros(1)
    assert f(x, [1]) == "ints"
    assert f(x, [x]) == "tensors"
    assert f(x, dims=[1]) == "ints"
    assert f(x, others=[x]) == "tensors"
    assert g(x, "cpu") == "device"
    assert g(x, "hello world") == "str"
    assert g(x, "cpu") == "device"


def test_redispatch_from_autograd_gives_backend_kernel_native_arrays(lib, ns):
    op = _define(lib, "f(Tensor x) -> Tensor")
    seen = []

    def cpu(x):
        seen.append(type(x))
        return x + 1

    def autograd(keyset, x):
        return op.default.redispatch(keyset, x)

    lib.impl("f", cpu, "cpu")
    lib.impl("f", autograd, "Autograd", with_keyset=True)
    out = op(oplib.tensor([1.0], requires_grad=True))
    assert type(out) is oplib.Tensor
    assert seen == [np.ndarray]


# -- the fast path with defaults, keyword-only defaults and int[] arguments -----------------


def _red(lib, ns, seen):
    lib.define("red(Tensor x, int[]? dim=None, bool keepdim=False, *, float scale=2.0) -> Tensor")

    def kernel(x, dim, keepdim, *, scale):
        seen.append((dim, keepdim, scale))
        return x * scale

    lib.impl("red", kernel, "CPU")
    return getattr(oplib.ops, ns).red


def test_fast_path_fills_defaults_and_keyword_only_defaults(lib, ns):
    seen: list = []
    op = _red(lib, ns, seen)
    x = np.ones(2)
    for _ in range(3):  # the first call fills the cache, the others take the fast path
        op(x)
        op(x, [0])
        op(x, (0, 1), True)
    # binding gives int[] as a list, the fast path too
    assert seen[-3:] == [(None, False, 2.0), ([0], False, 2.0), ([0, 1], True, 2.0)]


@pytest.mark.parametrize(
    "spec",
    [
        "int[] dims=[0, 1]",
        "float s=1",
        "int? k=None",
        "bool b=False",
        'str mode="x"',
        "SymInt n=0",
        "float? v=None",
        "Scalar a=2",
    ],
)
def test_a_default_reaches_the_kernel_as_binding_gives_it_on_every_path(lib, ns, spec):
    # The fast path checks a default once, when the op is planned, not per call: the
    # kernel must still get exactly what binding gives (the first call's, slow path).
    lib.define(f"d(Tensor x, {spec}) -> Tensor")
    seen: list = []
    lib.impl("d", lambda x, v: seen.append((type(v), v)) or x, "CPU")
    op = getattr(oplib.ops, ns).d
    for _ in range(3):
        op(np.ones(1))
    assert seen[0] == seen[1] == seen[2]
    with pytest.raises(TypeError):  # a given argument is still checked per call
        op(np.ones(1), object())


@pytest.mark.fastpath
def test_calls_with_defaults_are_cached(lib, ns):
    op = _red(lib, ns, [])
    op(np.ones(2))
    assert np.ndarray in op.default._opcache.by_type, "calls with defaults must be cached"


@pytest.mark.parametrize("bad", [["a"], [1.5], "0", 3.0])
def test_fast_path_still_rejects_bad_int_lists_after_the_cache_is_warm(lib, ns, bad):
    lib.define("red2(Tensor x, int[] dims) -> Tensor")
    lib.impl("red2", lambda x, dims: x, "CPU")
    op = getattr(oplib.ops, ns).red2
    op(np.ones(1), [0])  # warm
    with pytest.raises(TypeError, match=r"argument 'dims' must be int\[\]"):
        op(np.ones(1), bad)


@pytest.mark.fastpath
@pytest.mark.parametrize("given", [[1], (1,), 1], ids=["list", "tuple", "int"])
def test_an_int_list_given_as_a_list_tuple_or_int_stays_on_the_fast_path(
    lib, ns, given, monkeypatch
):
    # t.sum(0), x.mean(-1): an int for an int[] is [int] to binding, and (issue 30) no
    # reason to leave the cached call, which gave it to the slow path every time (~12 us)
    lib.define("red3(Tensor x, int[] dims, bool keep=False) -> Tensor")
    seen: list = []
    lib.impl(
        "red3",
        lambda x, dims, keep: seen.append(dims) or x.sum(axis=tuple(dims), keepdims=keep),
        "CPU",
    )
    op = getattr(oplib.ops, ns).red3
    x, t = np.ones((2, 3)), oplib.ones(2, 3)
    for arg in (x, t):
        op(arg, given)  # the first call of each class plans and caches
    slow: list = []
    overload = type(op.default)
    real = overload._call_slow
    monkeypatch.setattr(overload, "_call_slow", lambda s, a, k: slow.append(a) or real(s, a, k))
    for arg in (x, t):
        assert np.asarray(op(arg, given)).tolist() == [3.0, 3.0]
        assert np.asarray(op.default(arg, given, True)).tolist() == [[3.0], [3.0]]
    assert slow == []
    assert all(type(d) is list and d == [1] for d in seen)  # as binding gives it


@pytest.mark.fastpath
def test_a_dtype_argument_stays_on_the_fast_path(lib, ns, monkeypatch):
    # x.astype(dtype), t.to(dtype)'s cast: a positional ScalarType took the slow path on
    # every call (issue 30); one of oplib's dtypes is given to the kernel as it came
    lib.define("cast(Tensor x, ScalarType dtype) -> Tensor")
    seen: list = []
    lib.impl("cast", lambda x, dtype: seen.append(dtype) or x.astype(dtype), "CPU")
    op = getattr(oplib.ops, ns).cast
    x, t = np.ones(2, np.float32), oplib.ones(2)
    for arg in (x, t):
        op(arg, oplib.int8)  # the first call of each class plans and caches
    slow: list = []
    overload = type(op.default)
    real = overload._call_slow
    monkeypatch.setattr(overload, "_call_slow", lambda s, a, k: slow.append(a) or real(s, a, k))
    for arg in (x, t):
        for dtype in (oplib.float16, oplib.bfloat16, np.dtype(">f8")):
            assert op(arg, dtype).dtype == dtype
    assert slow == []
    assert seen[-1] == np.dtype(">f8") and seen[-1].byteorder == ">"  # as it came
    # what binding converts still goes to it, and what it refuses is refused
    assert op(x, "int16").dtype == np.int16
    assert op(x, np.float64).dtype == np.float64
    assert op(x, np.dtype("M8[s]")).dtype == np.dtype("M8[s]")
    assert len(slow) == 3
    with pytest.raises(TypeError, match="argument 'dtype' must be ScalarType"):
        op(x, 3)


def test_op_returning_nothing_called_with_tensors(lib, ns):
    lib.define("fill_(Tensor(a!) x, float v) -> ()")

    def fill(x, v):
        x[...] = v

    lib.impl("fill_", fill, "CPU")
    t = oplib.tensor([1.0, 2.0])
    assert getattr(oplib.ops, ns).fill_(t, 3.0) is None
    assert t.tolist() == [3.0, 3.0]


# -- what a BackendSpec can declare: a fallback kernel, no autograd, accelerator ------------


def test_backend_fallback_serves_ops_without_kernels_and_comes_last(lib, ns, teardown):
    from helpers import ToyArray, toy_spec

    asked = []

    def fallback(op):
        asked.append(op.name())
        if "neg" not in op.name():
            return None
        return lambda x: ToyArray(-x.data)

    undo = oplib.backends.register(
        toy_spec(name="toyfb", fallback=fallback, no_kernel_hint="Try toyfb.magic().")
    )
    teardown(undo)
    lib.define("neg(Tensor x) -> Tensor")
    lib.define("other(Tensor x) -> Tensor")
    ops = getattr(oplib.ops, ns)
    out = ops.neg(ToyArray(np.ones(2)))
    np.testing.assert_array_equal(out.data, [-1.0, -1.0])
    steps = list(ops.neg.default.resolution_steps(oplib.backends.get("toyfb")))
    assert steps[-1][0] == "ToyfbFallback" and steps[-1][2] == "taken: the backend's fallback"
    with pytest.raises(oplib.NoKernelError, match=r"Try toyfb\.magic"):
        ops.other(ToyArray(np.ones(2)))
    lib.impl("neg", lambda x: ToyArray(x.data * 0), "toyfb")  # a real kernel wins
    np.testing.assert_array_equal(ops.neg(ToyArray(np.ones(2))).data, [0.0, 0.0])
    assert f"{ns}::neg" in asked


def test_backend_without_autograd_refuses_inputs_that_require_grad(lib, ns, teardown):
    from helpers import ToyArray, toy_spec

    undo = oplib.backends.register(toy_spec(name="toyng", autograd=False))
    teardown(undo)
    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", lambda x: ToyArray(-x.data), "toyng")
    t = oplib.Tensor(ToyArray(np.ones(2))).requires_grad_()
    with pytest.raises(oplib.AutogradUnsupportedError, match="autograd does not run on toyng"):
        getattr(oplib.ops, ns).neg(t)
    with oplib.no_grad():
        assert getattr(oplib.ops, ns).neg(t).device.type == "toyng"


def test_integer_device_means_the_first_available_accelerator(teardown):
    from helpers import ToyArray

    expected = next(
        (b.name for b in oplib.backends.list() if b.spec.accelerator and b.is_available()), "cpu"
    )
    assert oplib.device(1) == oplib.Device(expected, 1)
    undo = oplib.backends.register(
        oplib.BackendSpec(name="toyacc", array_types=(ToyArray,), accelerator=True, priority=99)
    )
    teardown(undo)
    assert oplib.device(1) == oplib.Device("toyacc", 1)


@pytest.mark.fastpath
def test_cache_holds_the_kernel_itself_when_it_has_the_same_keyword_defaults(lib, ns):
    lib.define("scaled(Tensor x, *, float scale=2.0) -> Tensor")

    def same(x, *, scale=2.0):
        return x * scale

    lib.impl("scaled", same, "CPU")
    op = getattr(oplib.ops, ns).scaled.default
    x = np.ones(1)
    op(x)
    assert op._opcache.by_type[np.ndarray] is same
    np.testing.assert_array_equal(op(x), [2.0])


def test_binary_tensor_fast_path_still_checks_devices(lib, ns, toy):
    lib.define("plus(Tensor a, Tensor b) -> Tensor")
    lib.impl("plus", lambda a, b: a + b, "CPU")
    op = getattr(oplib.ops, ns).plus
    a = oplib.tensor([1.0])
    assert op(a, a).tolist() == [2.0]  # warms the Tensor cache
    assert op(a, a).tolist() == [2.0]  # served by it
    with pytest.raises(oplib.DeviceMismatchError, match="'a' on cpu"):
        op(a, oplib.Tensor(toy(np.ones(1))))


# -- a packet with several overloads: the call shape's route (issue 30) -------------------------


def _two_overloads(lib, ns):
    lib.define("mix(Tensor a, Tensor b, *, float s=1.0) -> Tensor")
    lib.define("mix.Scalar(Tensor a, Scalar b, int k=3) -> Tensor")
    lib.define("mix.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("mix", lambda a, b, *, s=1.0: a + b * s, "CPU")
    lib.impl("mix.Scalar", lambda a, b, k: a * b + k, "CPU")
    return _packet(ns, "mix")


@pytest.mark.fastpath
def test_packet_with_several_overloads_routes_a_seen_call_shape(lib, ns):
    mix = _two_overloads(lib, ns)
    x = np.ones(2)
    for _ in range(2):
        np.testing.assert_array_equal(mix(x, x), [2.0, 2.0])
        np.testing.assert_array_equal(mix(x, 2), [5.0, 5.0])  # k's default appended
    by_type, cls, tail, _, tensor = mix._routes[(np.ndarray, np.ndarray)]
    assert by_type is mix.default._opcache.by_type and cls is np.ndarray and tail == ()
    assert tensor is mix.default._opcache.tensor  # (Tensor calls, compiled)
    assert mix._routes[(np.ndarray, int)][2] == (3,)

    def refuse(*_):
        raise AssertionError("a routed call must not resolve overloads again")

    mix._pick = refuse  # the route serves the call shape alone
    np.testing.assert_array_equal(mix(x, x), [2.0, 2.0])
    t = oplib.tensor([1.0, 2.0])
    del mix._pick
    assert mix(t, t).tolist() == [2.0, 4.0]  # Tensors: through the overload's Tensor entry
    mix._pick = refuse
    assert mix(t, t).tolist() == [2.0, 4.0]


@pytest.mark.fastpath
def test_packet_route_is_not_taken_for_shapes_the_fast_path_refuses(lib, ns):
    mix = _two_overloads(lib, ns)
    x = np.ones(1)
    mix(x, oplib.tensor([1.0]))  # tensor arguments of two classes
    assert (np.ndarray, oplib.Tensor) not in mix._routes
    assert (np.ndarray, np.ndarray) not in mix._routes  # nothing else was called


def test_packet_route_gives_the_slow_paths_answers_and_errors(lib, ns):
    mix = _two_overloads(lib, ns)
    x = np.ones(1)
    calls = [(x, x), (x, 2), (x, 2.5), (x, True), (x, 2, 4)]
    for _ in range(3):  # first call resolves, later ones are routed
        for args in calls:
            expected = mix._pick(args, {})(*args)
            np.testing.assert_array_equal(mix(*args), expected)
    for _ in range(2):
        with pytest.raises(TypeError, match=r"no overload matches the arguments \(ndarray, str\)"):
            mix(x, "two")

    def broken(a, b, *, s=1.0):
        raise ValueError("boom")

    with oplib.library._scoped_library(ns, "FRAGMENT") as other:
        other.impl("mix", broken, "CPU", allow_override=True)
        notes = []
        for _ in range(2):  # the route reads the overload's cache: invalidated, then refilled
            with pytest.raises(ValueError, match="boom") as info:
                mix(x, x)
            notes.append(info.value.__notes__)
        assert notes[0] == notes[1]  # the slow path's note, then the route's: the same
        assert f"raised by the cpu kernel of {ns}::mix (" in notes[1][0]
    np.testing.assert_array_equal(mix(x, x), [2.0])  # undone: the old kernel again


def test_packet_route_yields_to_an_active_mode(lib, ns):
    mix = _two_overloads(lib, ns)
    x = np.ones(1)
    mix(x, x)
    mix(x, x)
    with Recorder() as rec:
        np.testing.assert_array_equal(mix(x, x), [2.0])
    assert rec.log == [("rec", f"{ns}.mix.default")]
