"""A multi-device backend whose arrays oplib recognises by type name, as it recognises cupy's:
``devicelike``, registered in-process (two devices unless asked otherwise).

What the cuda path's CPU side does per call, without a GPU: the backend is declared with
``array_type_names`` only (resolved lazily, as ``"cupy.ndarray"`` is), ``device_of`` reads
an int attribute in C as the cuda plugin's does (cupy's ``data.device_id``), and each
array's ``.device`` is a new small object with an ``id`` on every read, as cupy's
``ndarray.device`` gives a new ``cupy.cuda.Device``. Its memory is numpy's
(``DeviceArray`` is an ``ndarray`` subclass remembering a device index), so results can be
checked against numpy. Not a mock of cupy: nothing here imitates cupy's API beyond that
attribute. Not a shipped plugin: tests and ``bench/accelerator_dispatch.py`` install it
with :func:`install`.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.kernels import array_kernels

__all__ = [
    "NAME",
    "TYPE_NAME",
    "DeviceArray",
    "DeviceId",
    "current_device",
    "device",
    "install",
    "on",
    "spec",
]

NAME = "devicelike"
#: How the spec names the array class: a dotted name, resolved only once this module is
#: imported (as ``"cupy.ndarray"`` is once cupy is).
TYPE_NAME = "tests.devicelike_backend.DeviceArray"


class DeviceId:
    """What ``DeviceArray.device`` gives: the device's index as ``id``."""

    __slots__ = ("id",)

    def __init__(self, index: int) -> None:
        self.id = index

    def __repr__(self) -> str:
        return f"<DeviceId {self.id}>"


class DeviceArray(np.ndarray):
    """numpy memory standing in for device ``index``'s (0 unless set by :func:`on`)."""

    _index: int = 0

    def __array_finalize__(self, obj: Any) -> None:
        self._index = getattr(obj, "_index", 0)

    @property
    def device(self) -> DeviceId:  # type: ignore[override]  # numpy's is the str "cpu"
        return DeviceId(self._index)


def on(data: Any, index: int = 0) -> DeviceArray:
    """``data`` copied to device ``index`` of this backend."""
    out = np.array(data, copy=True).view(DeviceArray)
    out._index = index
    return out


#: The device index of an array: an int attribute read in C, as the cuda plugin's is
#: (cupy's ``data.device_id``; reading ``.device`` makes an object per read).
_device_of: Callable[[DeviceArray], int] = operator.attrgetter("_index")


def _to_host(array: DeviceArray) -> np.ndarray:
    return np.array(array.view(np.ndarray), copy=True)


def _from_host(array: np.ndarray, device: oplib.Device) -> DeviceArray:
    return on(array, device.index or 0)


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: oplib.Device) -> DeviceArray:
    return on(np.empty(shape, dtype), device.index or 0)


def _ours(value: Any, index: int) -> Any:
    """numpy results as arrays on device ``index`` (0-d scalars too)."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if type(value) is not DeviceArray:
            value = value.view(DeviceArray)
        value._index = index
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_ours(v, index) for v in value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, DeviceArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


class _Current(threading.local):
    """This thread's current device (0 until :func:`device` changes it), as a GPU
    runtime keeps one."""

    index = 0


_CURRENT = _Current()


def current_device() -> int:
    """This thread's current device index."""
    return _CURRENT.index


@contextlib.contextmanager
def device(index: int) -> Iterator[None]:
    """Make device ``index`` current while the block runs (``cupy.cuda.Device(i)``)."""
    before, _CURRENT.index = _CURRENT.index, index
    try:
        yield
    finally:
        _CURRENT.index = before


class _Namespace:
    """numpy's functions on plain views of this backend's arrays, their results on the
    current device; numpy's dtypes as they are."""

    def __getattr__(self, name: str) -> Any:
        target = getattr(np, name)
        if not callable(target) or isinstance(target, type):
            return target

        @functools.wraps(target)
        def call(*args: Any, **kwargs: Any) -> Any:
            out = target(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
            return _ours(out, _CURRENT.index)

        setattr(self, name, call)
        return call


NAMESPACE = _Namespace()


def spec(devices: int = 2) -> oplib.BackendSpec:
    """The ``devicelike`` backend: ``devices`` devices, arrays recognised by name."""
    return oplib.BackendSpec(
        name=NAME,
        array_type_names=(TYPE_NAME,),
        priority=5,  # above cpu's: its arrays are numpy arrays too
        device_count=lambda: devices,
        device_of=_device_of,
        to_host=_to_host,
        from_host=_from_host,
        empty=_empty,
        namespace=lambda: NAMESPACE,
        description="numpy memory on two pretend devices, recognised by name (tests only)",
    )


def install(devices: int = 2) -> Callable[[], None]:
    """Register the backend (with ``devices`` devices: 1 is the one-GPU machine) and the
    core op set's kernels on it, each run on its call's device by ``on_device`` as the
    cuda plugin's are; returns the function that removes both again."""
    undo_backend = oplib.backends.register(spec(devices))
    placement = DevicePlacement(
        array_type=DeviceArray,
        device_of=_device_of,
        current_device=current_device,
        device=device,
        device_count=lambda: devices,
    )
    lib = oplib.Library("oplib", "IMPL")
    try:
        for name, kernel in array_kernels(NAMESPACE).items():
            run = on_device(lambda k=kernel: k, lambda: placement, name=f"{NAME}_{name}")
            lib.impl(name, run, NAME)
    except BaseException:
        lib._destroy()
        undo_backend()
        raise

    def uninstall() -> None:
        lib._destroy()
        undo_backend()

    return uninstall
