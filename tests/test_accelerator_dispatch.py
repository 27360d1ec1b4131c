"""The fast path on a backend whose arrays are recognised by type name and live on several
devices, as cupy's are (issue 30): two arrays on one device are served from the cache, the
device check is chosen once per (op, array class), and arrays on two devices, or a cpu
array beside a device array, still raise ``DeviceMismatchError`` whether the cache is warm
or not. Proved on ``devicelike`` (tests/devicelike_backend.py); the same calls under
``OPLIB_DISPATCH_SLOW=1`` give the same answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import overload
from oplib_core._dispatch.fastpath import same_device
from oplib_core.errors import DeviceMismatchError
from oplib_core.kernels import array_kernels
from tests import devicelike_backend as dl

from subproc import run_python

ops = oplib.ops.oplib


@pytest.fixture
def install() -> Iterator[Callable[[int], oplib.backends.Backend]]:
    """``install(devices)``: the ``devicelike`` backend with that many devices, removed
    after the test."""
    undo: list[Callable[[], None]] = []

    def run(devices: int) -> oplib.backends.Backend:
        undo.append(dl.install(devices))
        return oplib.backends.get(dl.NAME)

    yield run
    for fn in reversed(undo):
        fn()


def _arrays(index: int) -> tuple[dl.DeviceArray, dl.DeviceArray]:
    return dl.on(np.array([1.0, 2.0], np.float32), index), dl.on(
        np.array([3.0, 5.0], np.float32), index
    )


def test_the_backend_is_recognised_by_name_only(install):
    backend = install(2)
    assert backend.spec.array_types == ()
    assert backend.spec.array_type_names == (dl.TYPE_NAME,)
    assert oplib.backends.for_type(dl.DeviceArray) is backend
    assert backend.multi_device and backend.device_count() == 2


# -- the fast path serves two arrays on one device --------------------------------------------


@pytest.mark.fastpath
def test_one_device_two_arrays_are_served_by_the_kernel_itself(install):
    backend = install(1)
    a, b = _arrays(0)
    op = ops.add.default
    kernel = op.resolve(backend)[0]
    assert not op.plan_call((a, b), {}).cached  # nothing cached yet
    op(a, b)
    # one device: every array of the class is on it, no check is needed per call, and
    # on_device's wrapper steps aside: the kernel it wraps is served
    inner = kernel.__wrapped__
    assert kernel.fast_entry is inner
    assert op._opcache.by_type[dl.DeviceArray] is inner
    assert op.plan_call((a, b), {}).cached
    assert oplib.explain(op, a, b).cache_hit
    op(oplib.Tensor(a), oplib.Tensor(b))
    assert op._opcache.tensor[dl.DeviceArray] is inner


@pytest.mark.fastpath
def test_two_devices_two_arrays_are_served_through_the_device_check(install):
    backend = install(2)
    a, b = _arrays(1)
    op = ops.add.default
    kernel = op.resolve(backend)[0]
    out = op(a, b)
    served = op._opcache.by_type[dl.DeviceArray]
    assert served is not kernel and served.__wrapped__ is kernel
    assert served.__name__ == "same_device2"
    assert op.plan_call((a, b), {}).cached
    assert oplib.explain(op, a, b).cache_hit
    # the cached call gives what the first (slow) one gave, on the arrays' device
    again = op(a, b)
    assert type(again) is dl.DeviceArray and again._index == 1 and out._index == 1
    np.testing.assert_array_equal(again, [4.0, 7.0])
    ta, tb = oplib.Tensor(a), oplib.Tensor(b)
    op(ta, tb)
    assert op._opcache.tensor[dl.DeviceArray].__wrapped__ is kernel
    leaf = oplib.Tensor(a.copy()).requires_grad_()
    op(leaf, tb).sum().backward()
    assert op._opcache.autograd[dl.DeviceArray].__name__ == "same_device_tensors2"
    np.testing.assert_array_equal(oplib.backends.get(dl.NAME).to_host(leaf.grad._data), [1, 1])


@pytest.mark.fastpath
def test_warm_calls_never_reach_placement(install, monkeypatch):
    """Once warm, native and Tensor calls (the packet and the overload) never plan: the
    slow path's placement is where issue 30's profile found every binary call."""
    install(2)
    a, b = _arrays(1)
    ta, tb = oplib.Tensor(a), oplib.Tensor(b)
    ops.mul(a, b)
    ops.mul(ta, tb)
    placed: list[object] = []
    original = overload.place

    def counting(*args, **kwargs):
        placed.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(overload, "place", counting)
    for _ in range(3):
        np.testing.assert_array_equal(ops.mul(a, b), [3.0, 10.0])
        np.testing.assert_array_equal(ops.mul.default(a, b), [3.0, 10.0])
        np.testing.assert_array_equal(ops.mul(ta, tb)._data, [3.0, 10.0])
    assert placed == []
    with pytest.raises(DeviceMismatchError):
        ops.mul(a, _arrays(0)[1])
    assert len(placed) == 1  # a mismatch goes to the slow path, which raises


@pytest.mark.fastpath
def test_three_tensor_arguments_are_checked_at_their_positions(install):
    install(2)
    cond = dl.on(np.array([True, False]), 1)
    a, b = _arrays(1)
    op = ops.where.default
    np.testing.assert_array_equal(op(cond, a, b), [1.0, 5.0])
    assert op._opcache.by_type[dl.DeviceArray].__name__ == "same_device_n"
    np.testing.assert_array_equal(op(cond, a, b), [1.0, 5.0])
    with pytest.raises(DeviceMismatchError, match=r"'other' on devicelike:0"):
        op(cond, a, _arrays(0)[1])
    with pytest.raises(DeviceMismatchError, match=r"'condition' on devicelike:0"):
        op(dl.on(np.array([True, False]), 0), a, b)


@pytest.mark.fastpath
def test_an_op_whose_tensors_follow_a_scalar_is_checked_at_their_positions(install, lib, ns):
    install(2)
    lib.define("axpy(float alpha, Tensor x, Tensor y) -> Tensor")
    lib.impl("axpy", lambda alpha, x, y: alpha * x + y, dl.NAME)
    op = getattr(oplib.ops, ns).axpy.default
    a, b = _arrays(1)
    np.testing.assert_array_equal(op(2.0, a, b), [5.0, 9.0])
    np.testing.assert_array_equal(op(2.0, a, b), [5.0, 9.0])
    assert op._opcache.by_type[dl.DeviceArray].__name__ == "same_device_n"
    with pytest.raises(DeviceMismatchError, match=r"'x' on devicelike:1, 'y' on devicelike:0"):
        op(2.0, a, _arrays(0)[1])


def test_same_device_hands_a_mismatch_to_the_slow_path():
    seen: list[tuple[object, ...]] = []

    def slow(args, kwargs):
        seen.append(args)
        return "slow"

    def fn(*args):
        return "fast"

    guarded = same_device(fn, lambda a: a, 0, (1,), slow, False)
    assert guarded(3, 3, "rest") == "fast" and seen == []
    assert guarded(3, 4, "rest") == "slow" and seen == [(3, 4, "rest")]
    guarded_n = same_device(fn, lambda a: a, 1, (2,), slow, False)
    assert guarded_n("s", 5, 5) == "fast"
    assert guarded_n("s", 5, 6) == "slow" and seen[-1] == ("s", 5, 6)
    assert guarded.__wrapped__ is fn and guarded_n.__wrapped__ is fn


# -- arrays on two devices, cpu beside a device: the error, cold or warm -----------------------


def _mismatch_calls(a0, b1):
    """(call, names in the message) for a mismatch through every fast-path entry."""
    t0, t1 = oplib.Tensor(a0), oplib.Tensor(b1)
    leaf = oplib.Tensor(a0.copy()).requires_grad_()
    return [
        (lambda: ops.add(a0, b1), "'self' on devicelike:0, 'other' on devicelike:1"),
        (lambda: ops.add.default(b1, a0), "'self' on devicelike:1, 'other' on devicelike:0"),
        (lambda: ops.add(t0, t1), "'self' on devicelike:0, 'other' on devicelike:1"),
        (lambda: ops.add(leaf, t1), "'self' on devicelike:0, 'other' on devicelike:1"),
    ]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_arrays_on_two_devices_raise_device_mismatch(install, warm):
    install(2)
    a0, b0 = _arrays(0)
    a1, b1 = _arrays(1)
    if warm:  # every cache the calls below could use holds this op for the class
        for x, y in ((a0, b0), (a1, b1)):
            ops.add(x, y)
            ops.add(oplib.Tensor(x), oplib.Tensor(y))
            ops.add(oplib.Tensor(x.copy()).requires_grad_(), oplib.Tensor(y)).sum().backward()
    for call, listing in _mismatch_calls(a0, b1):
        with pytest.raises(DeviceMismatchError) as info:
            call()
        message = str(info.value)
        assert message == (
            f"oplib::add(): expected all tensor arguments on one device, got {listing}; move "
            "them with .to(device) first"
        )
        assert info.value.op == "oplib::add"
        assert getattr(info.value, "__notes__", []) == []  # no note blaming a kernel


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_cpu_array_beside_a_device_array_raises_device_mismatch(install, warm):
    install(2)
    a1, b1 = _arrays(1)
    if warm:
        ops.add(a1, b1)
        ops.add(oplib.Tensor(a1), oplib.Tensor(b1))
    host = np.array([1.0, 1.0], np.float32)
    for call in (
        lambda: ops.add(a1, host),
        lambda: ops.add(host, a1),
        lambda: ops.add(oplib.Tensor(a1), oplib.tensor(host)),
    ):
        with pytest.raises(DeviceMismatchError, match=r"on devicelike:1.*on cpu|on cpu.*on dev"):
            call()


@pytest.mark.fastpath
def test_a_0d_cpu_array_is_moved_to_the_device_and_not_cached(install):
    install(2)
    a1, _ = _arrays(1)
    scalar = np.array(2.0, np.float32)
    op = ops.mul.default
    for _ in range(2):
        out = op(a1, scalar)
        assert type(out) is dl.DeviceArray and out._index == 1
        np.testing.assert_array_equal(out, [2.0, 4.0])
    assert dl.DeviceArray not in op._opcache.by_type  # scalars moved: never cached


# -- the slow path gives the same answers -----------------------------------------------------

SNIPPET = """
import numpy as np
import oplib_core as oplib
from oplib_core import _dispatch
from tests import devicelike_backend as dl

undo = dl.install(2)  # the Library lives as long as this reference
ops = oplib.ops.oplib
def f32(v, i):
    return dl.on(np.array(v, np.float32), i)
a0, b0, a1, b1 = f32([1, 2], 0), f32([3, 5], 0), f32([1, 2], 1), f32([3, 5], 1)
rows = []
for _ in range(3):  # the first call of each fills the caches (when there are caches)
    for x, y in ((a0, b0), (a1, b1)):
        for out in (ops.add(x, y), ops.mul(x, y), ops.matmul(x, y), ops.where(x > 1, x, y)):
            rows.append([out.tolist(), out._index])
        t = ops.mul(oplib.Tensor(x), oplib.Tensor(y))
        rows.append([t._data.tolist(), t._data._index])
        leaf = oplib.Tensor(x.copy()).requires_grad_()
        ops.mul(leaf, oplib.Tensor(y)).sum().backward()
        rows.append([leaf.grad._data.tolist(), leaf.grad._data._index])
    for call in (
        lambda: ops.add(a0, b1),
        lambda: ops.add(oplib.Tensor(b1), oplib.Tensor(a0)),
        lambda: ops.add(oplib.Tensor(a1.copy()).requires_grad_(), oplib.Tensor(b0)),
        lambda: ops.where(a1 > 1, a1, b0),
        lambda: ops.add(a1, np.ones(2, np.float32)),
    ):
        rows.append(catch(call))
OUT["slow"] = _dispatch.SLOW
OUT["rows"] = rows
OUT["cached"] = dl.DeviceArray in ops.add.default._opcache.by_type
"""


def test_the_slow_path_gives_the_same_answers():
    fast = run_python(SNIPPET)
    slow = run_python(SNIPPET, env={"OPLIB_DISPATCH_SLOW": "1"})
    assert fast["slow"] is False and slow["slow"] is True
    assert fast["cached"] is True and slow["cached"] is False
    assert fast["rows"] == slow["rows"]
    errors = [r for r in fast["rows"] if r and r[0] == "DeviceMismatchError"]
    assert len(errors) == 15  # five mismatches, three rounds: each raised every time


@pytest.mark.fastpath
def test_a_kernel_failing_behind_the_device_check_is_named_not_the_check(install, lib, ns):
    install(2)
    lib.define("picky(Tensor x, Tensor y) -> Tensor")

    def picky(x, y):
        if (x > 100).any():
            raise ValueError("too large")
        return x + y

    lib.impl("picky", picky, dl.NAME)
    op = getattr(oplib.ops, ns).picky.default
    a, b = _arrays(1)
    op(a, b)
    assert op._opcache.by_type[dl.DeviceArray].__name__ == "same_device2"
    with pytest.raises(ValueError, match="too large") as info:
        op(dl.on(np.array([500.0, 1.0], np.float32), 1), b)
    (note,) = info.value.__notes__
    assert f"the {dl.NAME} kernel of {ns}::picky" in note, note
    assert "test_accelerator_dispatch.py" in note and "same_device" not in note


# -- array_kernels(xp): no asarray per call where the namespace's functions return arrays ------


def _counting_strict() -> tuple[ModuleType, list[object]]:
    """``array_api_strict`` as a module of its own whose ``asarray`` records its calls."""
    xs = pytest.importorskip("array_api_strict")
    module = ModuleType("counting_strict")
    module.__dict__.update({k: v for k, v in vars(xs).items() if not k.startswith("__")})
    module.__array_api_version__ = xs.__array_api_version__  # type: ignore[attr-defined]
    calls: list[object] = []

    def asarray(obj: object, /, **kwargs: object) -> object:
        calls.append(obj)
        return xs.asarray(obj, **kwargs)

    module.asarray = asarray  # type: ignore[attr-defined]
    return module, calls


def test_kernels_of_a_library_namespace_call_its_functions_directly():
    xs, calls = _counting_strict()
    k = array_kernels(xs)
    x = xs.__dict__["asarray"](2.0, dtype=xs.float32)  # a 0-d array
    calls.clear()
    results = {
        "neg": k["neg"](x),
        "add": k["add"](x, x),
        "mul.Scalar": k["mul.Scalar"](x, 3),
        "rsub.Scalar": k["rsub.Scalar"](x, 1),  # the scalar first
        "sum": k["sum"](x, None, False, dtype=None),
    }
    assert calls == [], "the hot kernels of a library namespace must not call asarray"
    expected = {"neg": -2.0, "add": 4.0, "mul.Scalar": 6.0, "rsub.Scalar": -1.0, "sum": 2.0}
    for name, out in results.items():
        assert type(out) is type(x), name  # arrays of the namespace, never scalars
        assert float(out) == expected[name] and out.dtype == xs.float32, name


class _VendorNumpy:
    """A vendor's namespace object that hands numpy's functions on as they are (numpy
    returns scalars for 0-d results): its kernels keep asarray."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


@pytest.mark.parametrize("xp", [np, _VendorNumpy()], ids=["numpy", "vendor object"])
def test_kernels_turn_numpys_scalars_into_arrays(xp):
    k = array_kernels(xp)
    x = np.asarray(2.0)
    for out in (k["neg"](x), k["add"](x, x), k["mul.Scalar"](x, 3), k["sum"](x, None, False)):
        assert type(out) is np.ndarray and out.shape == ()


@pytest.mark.fastpath
def test_a_list_of_tensors_is_served_with_one_device(install):
    install(1)
    a, b = _arrays(0)
    for _ in range(2):
        np.testing.assert_array_equal(ops.cat([a, b]), [1.0, 2.0, 3.0, 5.0])
    assert ops.cat.default._opcache.by_type.get(dl.DeviceArray) is not None


@pytest.mark.fastpath
def test_a_list_of_tensors_on_several_devices_is_placed_however_warm(install):
    # cat's cached call compares no devices: with several it is not remembered, and
    # placement raises for tensors on two devices
    install(2)
    a, b = _arrays(1)
    for _ in range(2):
        np.testing.assert_array_equal(ops.cat([a, b]), [1.0, 2.0, 3.0, 5.0])
    assert ops.cat.default._opcache.by_type.get(dl.DeviceArray) is None
    with pytest.raises(DeviceMismatchError, match="devicelike:0"):
        ops.cat([a, _arrays(0)[1]])


def test_an_index_tensor_on_another_device_is_moved_to_the_indexed_ones(install):
    install(2)
    t = oplib.Tensor(dl.on(np.array([1.0, 2.0, 3.0], np.float32), 1))
    for where in (1, 0):  # the same device: used as it is; another: copied there first
        i = oplib.Tensor(dl.on(np.array([2, 0]), where))
        out = t[i]
        assert out._data._index == 1
        np.testing.assert_array_equal(np.asarray(out._data), [3.0, 1.0])
