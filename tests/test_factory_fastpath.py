"""Factories on the fast path (issue 30): ``zeros``, ``arange``, ``full``... have no tensor
argument, so the array-class cache never served them and every call was planned (bind,
place on the ``device`` argument, resolve). A call whose ``device`` an earlier call placed
now runs from the op's ``OpCache.factory``, keyword arguments and all; these tests prove
it is used, and that answers and errors are the slow path's (the tests not marked
``fastpath`` run again under ``OPLIB_DISPATCH_SLOW=1``)."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import OpOverload
from oplib_core.library import _scoped_library

OPS = oplib.ops.oplib

CALLS = [
    ("zeros", ([2, 3],), {}),
    ("zeros", ((2,),), {"dtype": oplib.int32}),
    ("zeros", ([1],), {"dtype": None, "device": None}),
    ("zeros", ([2],), {"device": oplib.Device("cpu")}),
    ("zeros", ([2],), {"device": "cpu", "dtype": "float16"}),  # converted by binding
    ("ones", ([],), {"dtype": np.dtype("bool")}),
    ("full", ([2], 7), {}),
    ("full", ([2], 1.5), {"dtype": oplib.float64}),
    ("arange", (5,), {}),
    ("arange", (2.5,), {}),
]


def _same(a, b) -> None:
    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS)
def test_factory_answers_equal_the_slow_path(name, args, kwargs):
    packet = getattr(OPS, name)
    expected = packet.default.plan_call(args, kwargs)  # what the slow path would run
    assert expected.error is None
    slow = packet.default._call_slow(args, kwargs)
    for _ in range(3):  # cold, then served
        _same(packet(*args, **kwargs), slow)
        _same(packet.default(*args, **kwargs), slow)


def test_factory_follows_the_default_dtype_set_between_calls(default_dtype):
    assert OPS.zeros([1]).dtype == oplib.get_default_dtype()
    oplib.set_default_dtype(oplib.float64)
    assert OPS.zeros([1]).dtype == oplib.float64
    assert oplib.zeros(1).dtype == oplib.float64


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"device": "nosuch"}, oplib.BackendError, "no backend 'nosuch' is installed"),
        ({"device": True}, TypeError, "argument 'device' must be Device?"),
        ({"dtype": "nosuch"}, TypeError, "argument 'dtype' must be ScalarType?"),
        ({"layout": None}, TypeError, "unexpected keyword argument 'layout'"),
    ],
)
def test_factory_errors_are_the_slow_paths_after_the_cache_is_warm(kwargs, error, words):
    OPS.zeros([1])
    OPS.zeros([1], device="cpu")
    messages = []
    for _ in range(2):
        with pytest.raises(error, match=words) as info:
            OPS.zeros([1], **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("size", [[1.5], ["a"], 2.5, [np.float32(1)]])
def test_factory_still_checks_its_positional_arguments(size):
    OPS.zeros([1])  # warm
    with pytest.raises(TypeError, match=r"argument 'size' must be SymInt\[\]"):
        OPS.zeros(size)


def test_factory_size_of_numpy_ints_and_a_single_int_bind_as_the_slow_path():
    OPS.zeros([1])  # warm
    assert OPS.zeros([np.int64(2), 3]).shape == (2, 3)
    assert OPS.zeros(4).shape == (4,)


def test_factory_refuses_a_dtype_the_backend_cannot_hold_when_warm():
    pytest.importorskip("jax")
    if oplib.backends.TABLE.find("jax") is None:
        pytest.skip("the jax backend (oplib-jax) is not installed")
    if oplib.backends.get("jax").supports_dtype(oplib.float64):
        pytest.skip("JAX's 64-bit mode is on: jax holds float64")
    assert OPS.zeros([1], dtype=oplib.float32, device="jax").dtype == np.float32
    assert OPS.zeros([1], dtype=oplib.float32, device="jax").dtype == np.float32  # served
    for _ in range(2):
        with pytest.raises(oplib.BackendDtypeError, match="backend 'jax' has no float64"):
            OPS.zeros([1], dtype=oplib.float64, device="jax")


@pytest.fixture
def factory(lib, ns):
    """``ns::make``: a factory whose cpu kernel records what it was given."""
    lib.define("make(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
    seen: list[tuple[object, ...]] = []

    def make(size, *, dtype, device):
        seen.append((size, dtype, device))
        if size == [13]:
            raise ValueError("unlucky size")
        return np.zeros(size, dtype=dtype or np.float32)

    lib.impl("make", make, "CPU")
    return getattr(oplib.ops, ns).make, seen


@pytest.mark.fastpath
def test_factory_calls_are_served_by_the_cache(factory, monkeypatch):
    make, seen = factory
    op = make.default
    make((2,), device="cpu")
    assert set(op._opcache.factory) == {"cpu"}
    make([2], dtype=oplib.int8)
    make([2], device=oplib.Device("cpu"))
    assert set(op._opcache.factory) == {"cpu", None, ("cpu", None)}

    def refuse(*_):
        raise AssertionError("a repeated factory call must not be planned")

    monkeypatch.setattr(OpOverload, "plan_call", refuse)
    assert make((3,), device="cpu").shape == (3,)
    assert op([4], dtype=oplib.int8).dtype == np.int8
    assert make([5], device=oplib.Device("cpu")).shape == (5,)
    # a tuple is given to the kernel as a list, the device as binding gives it, as before
    cpu = oplib.Device("cpu")
    assert seen[-3:] == [([3], None, cpu), ([4], np.dtype("int8"), None), ([5], None, cpu)]


@pytest.mark.fastpath
def test_factory_cache_is_forgotten_when_a_registration_changes_the_answer(factory, ns):
    make, _ = factory
    make([1])
    assert make.default._opcache.factory
    with _scoped_library(ns, "FRAGMENT") as other:
        other.impl("make", lambda size, *, dtype, device: np.ones(size), "CPU", allow_override=True)
        assert not make.default._opcache.factory
        np.testing.assert_array_equal(make([2]), [1.0, 1.0])
        np.testing.assert_array_equal(make([2]), [1.0, 1.0])
    np.testing.assert_array_equal(make([2]), [0.0, 0.0])


def test_factory_kernel_failure_carries_the_same_note_cold_and_warm(factory):
    make, _ = factory
    make([1])
    notes = []
    for _ in range(2):
        with pytest.raises(ValueError, match="unlucky size") as info:
            make([13])
        notes.append(info.value.__notes__)
    assert notes[0] == notes[1]
    assert "raised by the cpu kernel of" in notes[0][0] and "make" in notes[0][0]


def _with_entry(ns: str, lib) -> tuple[object, list, list]:
    """``ns::take``: a factory whose cpu kernel offers a ``factory_entry``; both record
    their calls, and both raise for a size of 13."""
    lib.define("take(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor")
    ran: list[tuple[object, ...]] = []
    entered: list[tuple[object, ...]] = []

    def take(size, *, dtype, device):
        ran.append((size, dtype, device))
        if size == [13]:
            raise ValueError("unlucky size")
        return np.zeros(size, dtype=dtype or oplib.get_default_dtype())

    def entry(size, dtype):
        entered.append((size, dtype))
        if size == (13,):
            raise ValueError("unlucky size, from the entry")
        return np.zeros(size, dtype=dtype)

    take.factory_entry = entry
    lib.impl("take", take, "CPU")
    return getattr(oplib.ops, ns).take, ran, entered


@pytest.mark.fastpath
def test_a_kernels_factory_entry_serves_its_cached_calls(ns, lib, default_dtype):
    take, ran, entered = _with_entry(ns, lib)
    assert take([2], device="cpu").shape == (2,)  # planned: the kernel runs
    assert (len(ran), len(entered)) == (1, 0)
    out = take((2, 3), device="cpu", dtype=oplib.int8)
    assert (out.shape, out.dtype) == ((2, 3), np.int8)
    assert entered[-1] == ((2, 3), np.dtype("int8"))  # a tuple, the dtype as given
    take([4], device="cpu")
    assert entered[-1] == ((4,), oplib.get_default_dtype())  # None: the default dtype
    oplib.set_default_dtype(oplib.float64)
    assert take([4], device="cpu").dtype == np.float64  # read per call
    assert entered[-1] == ((4,), np.dtype("float64"))
    assert len(ran) == 1  # the kernel ran once only


@pytest.mark.fastpath
def test_a_raising_factory_entry_gives_the_kernels_own_error_and_report(ns, lib):
    take, ran, entered = _with_entry(ns, lib)
    notes = []
    for size in ([13], [1], [13]):  # cold, then warm: the entry raises, then the kernel
        if size == [1]:
            take(size)
            continue
        with pytest.raises(ValueError, match="unlucky size") as info:
            take(size)
        assert info.value.args == ("unlucky size",)  # the kernel's, not the entry's
        notes.append(info.value.__notes__)
    assert notes[0] == notes[1]
    assert entered == [((13,), oplib.get_default_dtype())]
    assert [size for size, *_ in ran] == [[13], [1], [13]]


@pytest.mark.fastpath
@pytest.mark.parametrize("name", ["empty", "zeros", "ones"])
def test_numpys_creation_functions_serve_the_core_factories(name):
    op = getattr(OPS, name).default
    op([2], dtype=oplib.int16)
    served = op._opcache.factory[None]
    assert served[4] is getattr(np, name)
    out = op((2, 3), dtype=oplib.int16)
    assert (type(out), out.shape, out.dtype) == (np.ndarray, (2, 3), np.int16)
    if name != "empty":
        np.testing.assert_array_equal(out, 0 if name == "zeros" else 1)


def test_a_negative_size_is_the_same_error_cold_and_warm():
    messages = []
    for _ in range(3):
        with pytest.raises(ValueError, match="negative dimensions") as info:
            OPS.zeros([-1], dtype=oplib.float32)
        messages.append((str(info.value), getattr(info.value, "__notes__", None)))
    assert messages[0] == messages[1] == messages[2]


def test_factory_call_reaches_an_active_mode_when_the_cache_is_warm(factory):
    make, seen = factory
    make([1])
    make([1])
    n = len(seen)
    log = []

    class Record(oplib.DispatchMode):
        def __oplib_dispatch__(self, op, args, kwargs):
            log.append(str(op))
            return op(*args, **kwargs)

    with Record():
        make([1])
    assert log and log[0].endswith("make.default")
    assert len(seen) == n + 1  # the mode ran it once


@pytest.mark.fastpath
def test_explain_says_whether_the_factory_cache_serves_the_call(factory):
    make, _ = factory
    op = make.default
    assert not op.plan_call(([2],), {"device": "cpu"}).cached
    make([2], device="cpu")
    assert op.plan_call(([2],), {"device": "cpu"}).cached
    assert op.plan_call(((2, 3),), {"device": "cpu", "dtype": oplib.int8}).cached
    assert not op.plan_call(([2],), {"device": "cpu", "dtype": "int8"}).cached  # binding's
    assert op.plan_call((2,), {"device": "cpu"}).cached  # a bare int: [2], as binding's
    assert not op.plan_call(([2],), {}).cached  # device None: not seen yet


@pytest.mark.fastpath
def test_tensor_factories_pass_a_device_string_to_the_op_which_parses_it_once():
    # (issue 30: the factories parsed it themselves, then the op took a Device, whose key
    # costs two attribute reads a call)
    op = OPS.zeros.default
    oplib.zeros(2, device="cpu")
    assert "cpu" in op._opcache.factory  # the op's cache holds the string as given
    assert op.plan_call(([2],), {"device": "cpu"}).cached
    assert oplib.ones(2, device="cpu").device == oplib.device("cpu")
    for _ in range(2):
        with pytest.raises(ValueError, match=r"expected a device string like 'cpu'.*'cpu:x'"):
            oplib.zeros(2, device="cpu:x")
    assert "cpu:x" not in op._opcache.factory  # refused each time, never remembered


@pytest.mark.parametrize("call", ["packet", "overload", "tensor factory"])
def test_a_device_string_no_backend_parses_is_a_value_error_naming_the_op(call):
    make = {
        "packet": lambda: OPS.zeros([2], device="cuda:1:2"),
        "overload": lambda: OPS.zeros.default([2], device="cuda:1:2"),
        "tensor factory": lambda: oplib.zeros(2, device="cuda:1:2"),
    }[call]
    with pytest.raises(oplib.errors.InvalidDeviceError) as info:
        make()
    assert str(info.value) == (
        "oplib::zeros(): argument 'device': expected a device string like 'cpu', 'cuda' or "
        "'cuda:1', got 'cuda:1:2'"
    )
    assert isinstance(info.value, ValueError) and info.value.device == "cuda:1:2"


def test_the_tensor_factories_work_in_a_fresh_process():
    """The factories find their ops through the registry's table as it is at call time (a
    table bound when the module was imported is replaced when the registry resets)."""
    from tests.subproc import run_python

    out = run_python(
        "import oplib_core as oplib\n"
        "OUT['made'] = [oplib.zeros(2).tolist(), oplib.ones(1, 2).tolist(),\n"
        "               oplib.full([1], 3.0).tolist(), oplib.arange(3).tolist(),\n"
        "               oplib.zeros_like(oplib.ones(2)).tolist(), oplib.empty(2).shape]\n"
    )
    assert out["made"] == [[0.0, 0.0], [[1.0, 1.0]], [3.0], [0, 1, 2], [0.0, 0.0], [2]]
