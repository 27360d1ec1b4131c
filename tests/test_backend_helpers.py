"""The public helpers a backend plugin is written with (issue 33): ``on_device`` runs a kernel
on its call's device, entering the device only when it is not the current one;
``BackendSpec.dtypes`` refusals reach a plugin's kernels as ``BackendDtypeError`` before
they run; ``FakeArray.from_parts`` builds a data-less backend's arrays (the meta plugin's).

Proved on ``placed``: a two-device backend double on numpy memory whose device context
records every entry, registered in-process; and, marked ``cuda``, on cupy itself.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import Device
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.errors import BackendDtypeError, BackendError
from oplib_core.fake import FakeArray

ROOT = Path(__file__).resolve().parents[1]
NAME = "placed"


class PlacedArray(np.ndarray):
    """numpy memory standing in for device ``index``'s."""

    index = 0


def placed(data: Any, index: int) -> PlacedArray:
    out = np.asarray(data).view(PlacedArray)
    out.index = index
    return out


class Runtime:
    """The double's device runtime: a current device, and a device context that records the
    index of every entry and whether each was left."""

    def __init__(self, count: int | None = None) -> None:
        self.current = 0
        self.count = count  # what the placement says of the device count (None: nothing)
        self.entered: list[int] = []
        self.left: list[int] = []
        self.loads = 0
        self.asked = 0  # calls of current_device()

    def current_device(self) -> int:
        self.asked += 1
        return self.current

    @contextlib.contextmanager
    def device(self, index: int) -> Iterator[None]:
        self.entered.append(index)
        before, self.current = self.current, index
        try:
            yield
        finally:
            self.current = before
            self.left.append(index)

    def placement(self) -> DevicePlacement:
        self.loads += 1
        return DevicePlacement(
            array_type=PlacedArray,
            device_of=lambda a: a.index,
            current_device=self.current_device,
            device=self.device,
            device_count=None if self.count is None else lambda: self.count,
        )


def _wrapped(rt: Runtime, fn: Callable[..., Any], name: str = "placed_op") -> Callable[..., Any]:
    """``fn`` through ``on_device``, called with the device current while it runs."""

    def kernel() -> Callable[..., Any]:
        return lambda *args, **kwargs: fn(rt.current, *args, **kwargs)

    return on_device(kernel, rt.placement, name=name)


# -- on_device, called directly ---------------------------------------------------------------


def test_an_array_on_the_current_device_runs_without_entering_it() -> None:
    rt = Runtime()
    run = _wrapped(rt, lambda cur, x: (cur, x.index))
    assert run(placed([1.0], 0)) == (0, 0)
    assert rt.entered == []


def test_an_array_on_another_device_runs_inside_that_device_and_leaves_it() -> None:
    rt = Runtime()
    run = _wrapped(rt, lambda cur, x, y: cur)
    assert run(placed([1.0], 1), placed([2.0], 1)) == 1
    assert (rt.entered, rt.left, rt.current) == ([1], [1], 0)


def test_the_first_array_decides_also_inside_a_list_argument() -> None:
    rt = Runtime()
    run = _wrapped(rt, lambda cur, *args, **kwargs: cur)
    assert run(2.0, [placed([1.0], 1), placed([1.0], 0)]) == 1
    assert run(placed([1.0], 0), (placed([1.0], 1),)) == 0
    # an array comes before a device= argument
    assert run(placed([1.0], 1), device=Device("cpu")) == 1
    assert rt.entered == [1, 1]


def test_without_an_array_the_device_argument_decides_else_the_current_device() -> None:
    rt = Runtime()
    run = _wrapped(rt, lambda cur, *args, **kwargs: cur)
    assert run([2], device=Device(NAME, 1)) == 1
    assert run([2], device=Device(NAME, 0)) == 0
    assert run([2], device=Device(NAME)) == 0  # no index: the current device
    assert run([2]) == 0
    assert rt.entered == [1]


def test_a_library_without_a_current_device_always_enters_the_device_named() -> None:
    rt = Runtime()
    where = rt.placement()
    nocurrent = DevicePlacement(where.array_type, where.device_of, None, where.device)
    run = on_device(lambda: lambda *a, **k: rt.current, lambda: nocurrent, name="jaxlike_zeros")
    assert run([2], device=Device(NAME, 0)) == 0
    assert run(placed([1.0], 0)) == 0
    assert rt.entered == [0, 0]


def test_kernel_and_placement_are_loaded_once_on_the_first_call() -> None:
    rt = Runtime()
    kernels: list[int] = []

    def kernel() -> Callable[..., Any]:
        kernels.append(1)
        return lambda x: x.index

    run = on_device(kernel, rt.placement, name="placed_neg")
    assert (rt.loads, kernels) == (0, [])  # loading the plugin imports nothing
    for index in (0, 1, 0, 1):
        assert run(placed([1.0], index)) == index
    assert (rt.loads, kernels) == (1, [1])


def test_a_failing_kernel_leaves_the_device_and_its_error_propagates() -> None:
    rt = Runtime()

    def fails(cur: int, x: Any) -> Any:
        raise ValueError(f"failed on device {cur}")

    run = _wrapped(rt, fails)
    with pytest.raises(ValueError, match=r"^failed on device 1$"):
        run(placed([1.0], 1))
    assert (rt.entered, rt.left, rt.current) == ([1], [1], 0)


def test_the_wrapper_is_named_as_asked() -> None:
    run = _wrapped(Runtime(), lambda cur, x: x, name="placed_add_Tensor")
    assert (run.__name__, run.__qualname__) == ("placed_add_Tensor", "placed_add_Tensor")


def test_placement_loading_errors_reach_the_caller_and_are_retried() -> None:
    calls: list[int] = []

    def unusable() -> DevicePlacement:
        calls.append(1)
        raise BackendError("the placed backend is unavailable: no driver")

    run = on_device(lambda: lambda x: x, unusable, name="placed_neg")
    for _ in range(2):
        with pytest.raises(BackendError, match="no driver"):
            run(placed([1.0], 0))
    assert calls == [1, 1]  # nothing half-bound is kept


# -- through the dispatcher: a backend whose kernels use on_device ------------------------------

HELD = frozenset(np.dtype(n) for n in ("bool", "int32", "int64", "float32"))


@pytest.fixture
def backend() -> Iterator[Runtime]:
    with _placed_backend(Runtime()) as rt:
        yield rt


@contextlib.contextmanager
def _placed_backend(rt: Runtime, devices: int = 2) -> Iterator[Runtime]:
    undo = oplib.backends.register(
        oplib.BackendSpec(
            name=NAME,
            array_types=(PlacedArray,),
            priority=5,  # above cpu's: its arrays are numpy arrays too
            device_count=lambda: devices,
            device_of=lambda a: a.index,
            to_host=lambda a: np.array(a.view(np.ndarray)),
            from_host=lambda a, d: placed(np.array(a), d.index or 0),
            dtypes=lambda: HELD,
            dtype_hint="placed holds no float64",
        )
    )
    lib = oplib.Library("oplib", "IMPL")

    def neg(cur: int, x: PlacedArray) -> PlacedArray:
        return placed(-x.view(np.ndarray), cur)

    def zeros(cur: int, size: list[int], *, dtype: Any = None, device: Any = None) -> Any:
        return placed(np.zeros(size, np.float32 if dtype is None else dtype), cur)

    def sum_(x: PlacedArray, dim: Any, keepdim: bool, *, dtype: Any = None) -> PlacedArray:
        if dim == [9]:
            raise ValueError("no dimension 9")
        return placed(np.sum(x.view(np.ndarray), keepdims=keepdim, dtype=dtype), x.index)

    try:
        lib.impl("neg", _wrapped(rt, neg, "placed_neg"), NAME)
        lib.impl("zeros", _wrapped(rt, zeros, "placed_zeros"), NAME)
        lib.impl("sum", on_device(lambda: sum_, rt.placement, name="placed_sum"), NAME)
        yield rt
    finally:
        lib._destroy()
        undo()


def test_a_dispatched_op_runs_on_its_arrays_device(backend: Runtime) -> None:
    x = placed(np.array([1.0, -2.0], np.float32), 1)
    for _ in range(3):  # the slow path first, then the fast path's cache
        out = oplib.ops.oplib.neg(x)
        assert type(out) is PlacedArray and out.index == 1
        np.testing.assert_array_equal(out.view(np.ndarray), [-1.0, 2.0])
    assert backend.entered == [1, 1, 1] and backend.current == 0
    oplib.ops.oplib.neg(placed(np.ones(1, np.float32), 0))
    assert backend.entered == [1, 1, 1]


def test_a_dispatched_factory_runs_on_its_device_argument(backend: Runtime) -> None:
    out = oplib.ops.oplib.zeros([2], dtype=oplib.int32, device=Device(NAME, 1))
    assert (out.index, out.dtype) == (1, np.dtype("int32"))
    assert backend.entered == [1]


def test_a_dtype_the_backend_lacks_is_refused_before_the_kernel_runs(backend: Runtime) -> None:
    with pytest.raises(BackendDtypeError) as info:
        oplib.ops.oplib.zeros([2], dtype=oplib.float64, device=Device(NAME, 1))
    assert str(info.value) == (
        "oplib::zeros(): backend 'placed' has no float64 dtype (it holds bool, int32, int64, "
        "float32); placed holds no float64; or ask for a dtype it holds (e.g. oplib.float32), "
        "keep float64 tensors on the cpu, or use a backend that holds float64"
    )
    assert (info.value.backend, info.value.dtype) == (NAME, np.dtype("float64"))
    assert backend.entered == []  # refused before the device was entered


def test_a_same_device_cast_to_a_dtype_the_backend_lacks_is_refused_before_clone(
    backend: Runtime,
) -> None:
    """``t.to(dtype)`` on one device runs the backend's astype (one copy; it cloned and
    then cast): a dtype the backend cannot hold is refused first, named as ``_to_copy``'s,
    not after a kernel ran (nor as a missing kernel's)."""
    cloned: list[int] = []
    cast: list[int] = []
    lib = oplib.Library("oplib", "IMPL")
    lib.impl("clone", lambda x: cloned.append(x.index) or placed(np.array(x), x.index), NAME)
    lib.impl(
        "astype",
        lambda x, dtype: cast.append(x.index) or placed(np.array(x).astype(dtype), x.index),
        NAME,
    )
    try:
        t = oplib.Tensor(placed(np.ones(2, np.float32), 1))
        with pytest.raises(BackendDtypeError) as info:
            t.to(oplib.float64)
        assert str(info.value).startswith(
            "oplib::_to_copy(): backend 'placed' has no float64 dtype"
        )
        assert cloned == cast == []
        assert t.to(oplib.int32).dtype == np.dtype("int32")  # a dtype it holds: cast
        assert (cloned, cast) == ([], [1])
        assert t.to("placed:1", copy=True).dtype == np.dtype("float32")  # no cast: cloned
        assert (cloned, cast) == ([1], [1])
    finally:
        lib._destroy()


def test_a_wrapped_kernel_is_credited_to_the_plugin_line_that_wrapped_it(
    backend: Runtime,
) -> None:
    """``oplib ops show``/``explain`` and a kernel's error note give the place in the
    plugin that called ``on_device`` (the wrapper's own code is oplib's)."""
    line = _wrapped.__code__.co_firstlineno + 6  # its ``return on_device(...)``
    assert Path(__file__).read_text().splitlines()[line - 1].strip().startswith("return on_device(")
    kernel = oplib.lookup("oplib::neg").kernel(NAME)
    assert str(kernel.origin).startswith(f"{__file__}:{line}")
    shown = str(oplib.explain(oplib.ops.oplib.neg, placed(np.ones(1, np.float32), 0)))
    assert f"{Path(__file__).name}:{line}" in shown


def test_the_contract_counts_clone_and_astype_in_the_minimum_set() -> None:
    from oplib_core._contract import minimum_ops

    minimum = minimum_ops(autograd=False)
    assert minimum["oplib::clone"] == "the factories and Tensor.to"
    assert minimum["oplib::astype"] == "the factories and Tensor.to"
    with_grad = minimum_ops()["oplib::astype"]
    assert with_grad.startswith("the factories and Tensor.to; the gradients of ")


def test_dtypes_is_every_oplib_dtype_to_subtract_from() -> None:
    from oplib_core.backends import DTYPES

    named = {
        getattr(oplib, n)
        for n in dir(oplib)
        if isinstance(getattr(oplib, n, None), np.dtype) and n not in ("dtype",)
    }
    assert named == DTYPES and len(DTYPES) == 20
    assert oplib.bfloat16 in DTYPES and oplib.float8_e4m3fn in DTYPES
    undo = oplib.backends.register(
        oplib.BackendSpec(
            name="nohalf",
            array_type_names=("tests.NoHalfArray",),
            dtypes=lambda: DTYPES - {oplib.float16},
        )
    )
    try:
        nohalf = oplib.backends.get("nohalf")
        assert [d for d in DTYPES if not nohalf.supports_dtype(d)] == [oplib.float16]
    finally:
        undo()


@pytest.mark.fastpath
def test_on_one_device_the_fast_path_calls_the_kernel_without_the_wrapper() -> None:
    # The wrapper asks for the current device on each call it runs; with one device it
    # runs the first call only, and the fast path calls the kernel after that.
    with _placed_backend(Runtime(count=1), devices=1) as rt:
        x = placed(np.array([1.0, -2.0], np.float32), 0)
        for _ in range(4):
            out = oplib.ops.oplib.neg(x)
            assert type(out) is PlacedArray and out.view(np.ndarray).tolist() == [-1.0, 2.0]
            total = oplib.ops.oplib.sum(x)  # a keyword-only default (dtype) the kernel has
            assert float(total.view(np.ndarray)) == -1.0
        assert rt.asked == 2  # neg's first call and sum's
        wrapper = oplib.lookup("oplib::neg").kernel(NAME).fn
        assert wrapper.fast_entry is wrapper.__wrapped__  # type: ignore[attr-defined]


@pytest.mark.fastpath
def test_on_one_device_a_cached_factory_call_runs_the_kernel_behind_the_dtype_guard() -> None:
    with _placed_backend(Runtime(count=1), devices=1) as rt:
        dev = Device(NAME, 0)
        for _ in range(3):
            out = oplib.ops.oplib.zeros([2], dtype=oplib.int32, device=dev)
            assert (type(out), out.index, out.dtype) == (PlacedArray, 0, np.dtype("int32"))
        assert rt.asked == 1  # the wrapper ran the first call only
        with pytest.raises(BackendDtypeError, match="has no float64 dtype"):
            oplib.ops.oplib.zeros([2], dtype=oplib.float64, device=dev)  # a cached device


def test_with_two_devices_every_call_goes_through_the_wrapper(backend: Runtime) -> None:
    x = placed(np.array([1.0], np.float32), 0)
    for _ in range(4):
        oplib.ops.oplib.neg(x)
    assert backend.asked == 4
    assert not hasattr(oplib.lookup("oplib::neg").kernel(NAME).fn, "fast_entry")


def test_a_kernel_called_without_its_wrapper_is_still_credited_to_the_plugin_line() -> None:
    with _placed_backend(Runtime(count=1), devices=1):
        x = placed(np.ones(2, np.float32), 0)
        oplib.ops.oplib.sum(x, [0])
        oplib.ops.oplib.sum(x, [0])  # served by the fast path: the kernel itself
        with pytest.raises(ValueError, match="no dimension 9") as info:
            oplib.ops.oplib.sum(x, [9])
        origin = str(oplib.lookup("oplib::sum").kernel(NAME).origin)
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert f"raised by the {NAME} kernel of oplib::sum ({origin.split(' ')[0]}" in notes


def test_keyword_defaults_a_wrapped_kernel_applies_itself_are_not_bound_per_call() -> None:
    from oplib_core._dispatch.fastpath import with_kwdefaults

    def kernel(x: Any, *, dtype: Any = None) -> Any:
        return dtype

    @functools.wraps(kernel)
    def passes_on(*args: Any, **kwargs: Any) -> Any:  # as on_device's wrapper
        return kernel(*args, **kwargs)

    @functools.wraps(kernel)
    def needs_it(*args: Any, dtype: Any) -> Any:  # a keyword-only argument of its own
        return kernel(*args, dtype=dtype)

    assert with_kwdefaults(passes_on, {"dtype": None}) is passes_on
    bound = with_kwdefaults(needs_it, {"dtype": None})
    assert bound is not needs_it and bound(1) is None
    other = with_kwdefaults(passes_on, {"dtype": np.float32})  # not the kernel's default
    assert other is not passes_on and other(1) is np.float32


# -- the template (privateuse1) through on_device ------------------------------------------------


def test_privateuse1_runs_on_the_arrays_device_and_keeps_the_current_one() -> None:
    dev = oplib.privateuse1
    x = oplib.tensor([1.0, -2.0], device="privateuse1:1")
    assert dev.current_device() == 0
    out = -x
    assert out.device == Device("privateuse1", 1)
    np.testing.assert_array_equal(out.to("cpu").numpy(), [-1.0, 2.0])
    assert dev.current_device() == 0


def test_privateuse1_refuses_a_device_argument_beyond_its_devices() -> None:
    count = oplib.privateuse1.device_count()
    with pytest.raises(BackendError, match=rf"\b{count}\b"):
        oplib.ops.oplib.zeros([2], device=Device("privateuse1", count))
    assert oplib.privateuse1.current_device() == 0


def test_no_plugin_writes_its_own_device_wrapper_or_reaches_for_fake_array_make() -> None:
    """cuda, privateuse1 and jax place their kernels with ``on_device``; no plugin or
    example calls the private ``FakeArray._make`` (``from_parts`` is the public one)."""
    sources = [
        p
        for d in ("plugins", "examples")
        for p in sorted((ROOT / d).rglob("*.py"))
        if "build" not in p.parts and "tests" not in p.parts
    ]
    makes = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in sources
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, ast.Attribute) and node.attr == "_make"
    ]
    assert makes == []
    for plugin in ("cuda/oplib_cuda", "privateuse/oplib_privateuse", "jax/oplib_jax"):
        text = (ROOT / "plugins" / plugin / "plugin.py").read_text()
        assert re.search(r"\bon_device\(", text), plugin


# -- FakeArray.from_parts -----------------------------------------------------------------------


def test_from_parts_builds_an_array_of_the_class_from_checked_parts() -> None:
    shape = (3, 4)
    a = FakeArray.from_parts(shape, np.dtype("float16"), Device("cpu"))
    assert type(a) is FakeArray
    assert a.shape is shape  # taken as given: no copy, no check (the hot path)
    assert (a.dtype, a.device) == (np.dtype("float16"), Device("cpu"))
    with pytest.raises(ValueError):  # the public constructor checks what from_parts takes
        FakeArray((-1,), "float16")


def test_from_parts_gives_the_subclass_the_meta_plugin_returns() -> None:
    from oplib_meta import MetaArray

    m = MetaArray.from_parts((2,), np.dtype("int32"), Device("meta"))
    assert type(m) is MetaArray
    assert repr(m) == "MetaArray(shape=(2,), dtype=int32)"
    made = oplib.ops.oplib.full([2, 3], 1.5, device=Device("meta"))
    assert type(made) is MetaArray and made.shape == (2, 3)
    assert oplib.empty(4, device="meta").native.shape == (4,)


# -- on cupy ------------------------------------------------------------------------------------


@pytest.fixture
def cp() -> Any:
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    return pytest.importorskip("cupy")


@pytest.mark.cuda
def test_cuda_runs_on_the_arrays_device_and_keeps_the_current_one(cp: Any) -> None:
    last = cp.cuda.runtime.getDeviceCount() - 1
    x = oplib.tensor([1.0, -2.0], device=f"cuda:{last}")
    out = (-x).native
    assert isinstance(out, cp.ndarray) and out.device.id == last
    assert cp.cuda.runtime.getDevice() == 0
    np.testing.assert_array_equal(cp.asnumpy(out), [-1.0, 2.0])
    z = oplib.zeros(2, device=f"cuda:{last}").native
    assert z.device.id == last and cp.cuda.runtime.getDevice() == 0
