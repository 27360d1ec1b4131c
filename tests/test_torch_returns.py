"""Kernel results held to the schema, as torch holds them (issue 13).

torch 2.x, checked with a CPU wheel: a kernel returning a list or a Python scalar for
``-> Tensor`` raises ``RuntimeError: Unable to cast [tensor(...)] to Tensor``; a value
for ``-> ()`` raises "Expected ... to return None but it returned something else
instead"; a list of the right length for ``-> (Tensor, Tensor)`` is accepted (as a tuple);
``-> (Tensor)`` is ``-> Tensor``. oplib raises ``KernelResultError`` (a ``TypeError`` and,
as in torch, a ``RuntimeError``) at the call, naming the op, the kernel's ``file:line``,
the schema's returns and what came back. A kernel returning an ``oplib.Tensor`` (torch
users' ``return torch.empty(..., device=x.device)``) gives its native array.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from oplib_meta import MetaArray
from oplib_privateuse import DeviceArray

import oplib_core as oplib
from oplib_core import errors
from oplib_core._dispatch.resolution import DispatchKeySet
from oplib_core.errors import KernelResultError, OplibError

HERE = __file__


def _line(fn) -> str:
    return f"{HERE}:{inspect.getsourcelines(fn)[1]}"


def _op(lib, schema: str):
    qn = lib.define(schema)
    name = qn.partition("::")[2].partition("(")[0].partition(".")[0]
    return getattr(getattr(oplib.ops, lib.ns), name)


def _raises(fn, *args) -> KernelResultError:
    with pytest.raises(KernelResultError) as info:
        fn(*args)
    return info.value


# -- the error type ---------------------------------------------------------------------------


def test_kernel_result_error_is_exported_and_a_type_and_runtime_error() -> None:
    assert oplib.KernelResultError is KernelResultError is errors.KernelResultError
    assert "KernelResultError" in oplib.__all__ and "KernelResultError" in errors.__all__
    assert issubclass(KernelResultError, OplibError)
    assert issubclass(KernelResultError, TypeError)
    assert issubclass(KernelResultError, RuntimeError)  # what torch raises


# -- a Tensor returned by a kernel gives its native array --------------------------------------


@pytest.mark.parametrize("device", ["cpu", "meta", "privateuse1"])
def test_kernel_returning_an_oplib_tensor_gives_its_array(lib, device: str) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")

    def kernel(x):
        return oplib.zeros(tuple(x.shape), dtype=x.dtype, device=device)  # torch users' way

    lib.impl("f", kernel, device)
    native_cls = {"cpu": np.ndarray, "meta": MetaArray, "privateuse1": DeviceArray}[device]
    t = oplib.ones((2, 3), device=device)
    for _ in range(3):  # the first call fills the fast path's caches; later ones use them
        out = op(t)
        assert type(out) is oplib.Tensor and type(out.native) is native_cls
        assert out.shape == (2, 3) and out.device.type == device
        raw = op(t.native)
        assert type(raw) is native_cls and raw.shape == (2, 3)


def test_fake_kernel_returning_an_oplib_tensor_serves_meta(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x * 2, "cpu")
    oplib.register_fake(
        f"{lib.ns}::f", lambda x: oplib.empty((x.shape[0], 4), dtype=x.dtype, device="meta")
    )
    for _ in range(2):
        out = op(oplib.ones((3, 2), device="meta"))
        assert type(out.native) is MetaArray and out.shape == (3, 4)


def test_tensors_inside_tuples_and_lists_become_arrays(lib) -> None:
    pair = _op(lib, "pair(Tensor x) -> (Tensor, Tensor)")
    many = _op(lib, "many(Tensor x) -> Tensor[]")
    lib.impl("pair", lambda x: (oplib.tensor(x), x + 1), "cpu")
    lib.impl("many", lambda x: (oplib.tensor(x), x + 1), "cpu")
    x = np.zeros(2)
    for _ in range(2):
        a, b = pair(x)
        assert type(a) is np.ndarray and type(b) is np.ndarray
        got = many(x)
        assert type(got) is list and [type(v) for v in got] == [np.ndarray, np.ndarray]
        ta, tb = pair(oplib.tensor(x))
        assert type(ta) is oplib.Tensor and type(ta.native) is np.ndarray
        assert np.array_equal(tb.numpy(), [1.0, 1.0])


def test_list_for_several_returns_is_accepted_as_a_tuple_as_torch_does(lib) -> None:
    pair = _op(lib, "pair(Tensor x) -> (Tensor, Tensor)")
    lib.impl("pair", lambda x: [x + 1, x + 2], "cpu")
    for _ in range(2):
        out = pair(np.zeros(2))
        assert type(out) is tuple and len(out) == 2
        tout = pair(oplib.zeros((2,)))
        assert type(tout) is tuple and all(type(t) is oplib.Tensor for t in tout)


def test_optional_tensor_return_may_be_none(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor?")
    lib.impl("f", lambda x: None, "cpu")
    assert op(np.zeros(1)) is None and op(oplib.zeros((1,))) is None


def test_op_with_a_device_argument_may_return_another_backends_array(lib) -> None:
    op = _op(lib, "to(Tensor x, Device device) -> Tensor")
    lib.impl("to", lambda x, device: oplib.tensor(x).to(device).native, "cpu")
    out = op(oplib.ones((2,)), oplib.device("meta"))
    assert type(out.native) is MetaArray


# -- arity --------------------------------------------------------------------------------------


def test_parenthesised_single_return_is_a_single_tensor_as_in_torch(lib) -> None:
    # torch: Library.define("one(Tensor x) -> (Tensor)") is "-> Tensor"; the call returns
    # the Tensor, and a kernel returning a 1-tuple fails ("Unable to cast (tensor(...),)").
    op = _op(lib, "one(Tensor x) -> (Tensor)")
    lib.impl("one", lambda x: x + 1, "cpu")
    out = op(oplib.zeros((2,)))
    assert type(out) is oplib.Tensor

    bad = _op(lib, "bad(Tensor x) -> (Tensor)")

    def kernel(x):
        return (x + 1,)

    lib.impl("bad", kernel, "cpu")
    e = _raises(bad, np.zeros(2))
    assert "returned a tuple of 1" in str(e) and "not a list or tuple" in str(e)


def test_empty_returns_give_none_and_refuse_a_value(lib) -> None:
    op = _op(lib, "fill_(Tensor(a!) x) -> ()")

    def kernel(x):
        x[...] = 1

    lib.impl("fill_", kernel, "cpu")
    t = oplib.zeros((2,))
    assert op(t) is None and op(t.native) is None
    assert np.array_equal(t.numpy(), [1.0, 1.0])

    bad = _op(lib, "bad_(Tensor(a!) x) -> ()")

    def returns_it(x):
        x[...] = 2
        return x

    lib.impl("bad_", returns_it, "cpu")
    e = _raises(bad, np.zeros(2))
    assert e.op == f"{lib.ns}::bad_" and e.expected == "()"
    assert e.kernel == _line(returns_it)
    assert "a '-> ()' operator's kernel returns None" in str(e)
    assert "returned a numpy.ndarray (a cpu array)" in str(e)


def test_wrong_number_of_returns_raises(lib) -> None:
    pair = _op(lib, "pair(Tensor x) -> (Tensor, Tensor)")

    def kernel(x):
        return (x, x, x)

    lib.impl("pair", kernel, "cpu")
    e = _raises(pair, oplib.zeros((2,)))
    assert e.expected == "(Tensor, Tensor)" and e.got == "a tuple of 3"
    assert "expected a tuple of 2" in str(e) and e.kernel == _line(kernel)

    single = _op(lib, "single(Tensor x) -> (Tensor, Tensor)")
    lib.impl("single", lambda x: x, "cpu")
    e = _raises(single, np.zeros(2))
    assert "returned a numpy.ndarray (a cpu array)" in str(e) and "a tuple of 2" in str(e)


# -- wrong values fail at the call, naming the op and the kernel -----------------------------


def test_list_for_a_tensor_fails_at_the_call(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")

    def kernel(x):
        return [x]

    lib.impl("f", kernel, "cpu")
    for arg in (np.zeros(2), oplib.zeros((2,))):
        e = _raises(op, arg)
        assert isinstance(e, TypeError) and isinstance(e, RuntimeError)
        assert e.op == f"{lib.ns}::f" and e.expected == "Tensor" and e.got == "a list of 1"
        assert e.kernel == _line(kernel)
        message = str(e)
        assert message.startswith(f"{lib.ns}::f: the cpu kernel ({_line(kernel)}) returned")
        assert "the schema returns Tensor" in message and "expected a cpu array" in message


@pytest.mark.parametrize("value", [3.0, 2, True])
def test_python_scalar_for_a_tensor_fails(lib, value) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: value, "cpu")
    e = _raises(op, oplib.zeros((2,)))
    assert e.got == f"a Python {type(value).__name__} ({value!r})"
    assert "not a scalar" in str(e)


def test_numpy_scalar_for_a_tensor_fails(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: np.sum(x), "cpu")  # a numpy.float64, not an array
    e = _raises(op, np.ones(2))
    assert e.got == "a numpy.float64" and "xp.asarray(value)" in str(e)


def test_array_of_another_backend_fails(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")

    def kernel(x):
        return np.zeros(tuple(x.shape))  # a numpy array from a meta kernel

    lib.impl("f", kernel, "meta")
    e = _raises(op, oplib.zeros((2,), device="meta"))
    assert "the meta kernel" in str(e) and e.kernel == _line(kernel)
    assert "returned a numpy.ndarray (a cpu array)" in str(e)
    assert "expected a meta array (the call ran on meta)" in str(e)


def test_privateuse1_kernel_returning_a_numpy_array_fails(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: np.zeros(2), "privateuse1")
    e = _raises(op, oplib.zeros((2,), device="privateuse1"))
    assert "the privateuse1 kernel" in str(e) and "expected a privateuse1 array" in str(e)


def test_tensor_list_items_are_checked(lib) -> None:
    many = _op(lib, "many(Tensor x) -> Tensor[]")
    lib.impl("many", lambda x: [x, 1.0], "cpu")
    e = _raises(many, np.zeros(2))
    assert "returned return item 1 a Python float (1.0)" in str(e)

    single = _op(lib, "single(Tensor x) -> Tensor[]")
    lib.impl("single", lambda x: x, "cpu")
    e = _raises(single, np.zeros(2))
    assert "expected a list of arrays" in str(e)


def test_composite_explicit_kernel_is_checked_on_every_backend(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: [x], "CompositeExplicitAutograd")
    for device in ("cpu", "meta", "privateuse1"):
        e = _raises(op, oplib.zeros((2,), device=device))
        assert "the CompositeExplicitAutograd kernel" in str(e)


def test_custom_op_returning_a_list_names_the_op_and_its_function(ns) -> None:
    @oplib.custom_op(f"{ns}::listy", mutates_args=())
    def listy(x: oplib.Tensor) -> oplib.Tensor:
        return [x]  # type: ignore[return-value]

    e = _raises(listy, oplib.zeros((2,)))
    assert e.op == f"{ns}::listy" and HERE in e.kernel


def test_redispatch_checks_the_result(lib) -> None:
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: oplib.tensor(x), "cpu")
    out = op.default.redispatch(DispatchKeySet(("CPU",)), np.zeros(2))
    assert type(out) is np.ndarray


# -- opcheck blames the fake kernel only for what happens in it ------------------------------


def _fake_checked_op(lib, fake):
    op = _op(lib, "f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x * 2, "cpu")
    oplib.register_fake(f"{lib.ns}::f", fake)
    return op.default


def test_opcheck_does_not_blame_the_fake_kernel_for_an_oplib_fault(lib, monkeypatch) -> None:
    op = _fake_checked_op(lib, lambda x: x.new_empty(tuple(x.shape)))

    dispatch = oplib.FakeTensorMode.__oplib_dispatch__

    def broken(self, op, args, kwargs):  # oplib failing after the fake kernel returned
        dispatch(self, op, args, kwargs)
        raise TypeError("'NoneType' object is not iterable")

    monkeypatch.setattr(oplib.FakeTensorMode, "__oplib_dispatch__", broken)
    with pytest.raises(oplib.OpCheckError) as info:
        oplib.opcheck(op, (oplib.ones((2, 3)),), test_utils=["test_faketensor"])
    message = str(info.value)
    assert "FakeTensorMode raised TypeError: 'NoneType' object is not iterable" in message
    assert "an oplib fault, not the fake kernel's" in message
    assert "the real cpu kernel did not" not in message


def test_opcheck_still_blames_a_fake_kernel_that_raises(lib) -> None:
    def fake(x):
        raise TypeError("my mistake")

    op = _fake_checked_op(lib, fake)
    with pytest.raises(oplib.OpCheckError) as info:
        oplib.opcheck(op, (oplib.ones((2, 3)),), test_utils=["test_faketensor"])
    message = str(info.value)
    assert f"the fake kernel ({_line(fake)}) raised TypeError: my mistake" in message
    assert "the real cpu kernel did not" in message
