"""The private-use backend: ``privateuse1`` (key ``PrivateUse1``) until renamed; in a copy,
the backend named by ``name.NAME``.

Copy this plugin to write a backend for your device (``docs/writing-a-backend.md``):
a ``BackendSpec`` saying how to recognise the device's arrays, move them to and from the
host and count devices; the core op set's kernels bound to the device's array namespace;
and a device module. ``OPLIB_PRIVATEUSE1_NAME=npu`` renames the backend when it loads (the
core applies it when this plugin registers the ``privateuse1`` backend). A copy with a name
of its own (``name.NAME = "myaccel"``) generates ``Tensor.myaccel()`` and ``Tensor.is_myaccel``
when it loads; for the slot, users call ``generate_methods_for_privateuse1_backend()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from oplib_core import BackendSpec, Device, get_default_dtype, hookimpl
from oplib_core.backend_registration import generate_methods_for_backend
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.errors import BackendError
from oplib_core.kernels import CORE_OPS, array_kernels
from oplib_core.plugins import Registrar
from oplib_privateuse import device as device_module
from oplib_privateuse import memory
from oplib_privateuse.memory import DeviceArray
from oplib_privateuse.name import DEVICES_ENV, KEY, NAME, NAMESPACE, SLOT
from oplib_privateuse.namespace import bind, namespace


def _status() -> str | None:
    problem = memory.config_error()
    if problem is not None:
        return problem
    if memory.device_count() == 0:
        return f"no {memory.device_name()} device ({DEVICES_ENV}=0)"
    return None


def _index(device: Device | None) -> int:
    index = (
        device_module.current_device() if device is None or device.index is None else (device.index)
    )
    return _checked(index)


def _checked(index: int) -> int:
    """``index`` when that device exists, else ``BackendError`` saying how many do."""
    try:
        return memory.check_index(index)
    except IndexError as e:
        raise BackendError(str(e)) from None


def _from_host(array: np.ndarray, device: Device) -> DeviceArray:
    return memory.from_host(array, _index(device))


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> DeviceArray:
    array: DeviceArray = namespace(_index(device)).empty(shape, dtype=dtype)
    return array


def _device_of(array: DeviceArray) -> int:
    return array._index


def _namespace() -> Any:
    return namespace(device_module.current_device())


SPEC = BackendSpec(
    name=NAME,
    accelerator=True,
    key=KEY,
    array_types=(DeviceArray,),
    priority=5,
    status=_status,
    device_count=memory.device_count,
    device_of=_device_of,
    to_host=memory.to_host,
    from_host=_from_host,
    empty=_empty,
    namespace=_namespace,
    device_module=device_module,
    description="software device: host-backed memory per device index",
)

# -- kernels --------------------------------------------------------------------------

_core_kernels = bind(array_kernels)  # array_kernels(DeviceNamespace(i)), once per device


@contextlib.contextmanager
def _current(index: int) -> Iterator[None]:
    """Device ``index`` made this thread's current device for the length of a call."""
    _checked(index)
    before = device_module.current_device()
    device_module.set_device(index)
    try:
        yield
    finally:
        device_module.set_device(before)


#: How the kernels find their call's device (its first DeviceArray, else its ``device=``)
#: and make it current (``on_device``); the kernels run on the current device.
PLACEMENT = DevicePlacement(
    array_type=DeviceArray,
    device_of=_device_of,
    current_device=device_module.current_device,
    device=_current,
    device_count=device_module.device_count,  # one device: kernels run without the wrapper
)


def _on_device(name: str) -> Any:
    def bound() -> Any:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            return _core_kernels(device_module.current_device())[name](*args, **kwargs)

        return kernel

    return on_device(bound, lambda: PLACEMENT, name=f"{NAME}_{name.replace('.', '_')}")


RAND = f"{NAMESPACE}::rand(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor"
RANDN = (
    f"{NAMESPACE}::randn(SymInt[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor"
)


def _random_dtype(dtype: np.dtype | None, op: str) -> np.dtype:
    dtype = get_default_dtype() if dtype is None else np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{op}(): dtype must be float32 or float64, got {dtype}")
    return dtype


def rand(size: list[int], *, dtype: np.dtype | None = None, device: Device | None = None) -> Any:
    """Uniform samples in [0, 1) from the device's generator."""
    index = _index(device)
    sample = device_module.generator(index).random(tuple(size), dtype=_random_dtype(dtype, "rand"))
    return memory.wrap(sample, index)


def randn(size: list[int], *, dtype: np.dtype | None = None, device: Device | None = None) -> Any:
    """Standard normal samples from the device's generator."""
    index = _index(device)
    gen = device_module.generator(index)
    return memory.wrap(gen.standard_normal(tuple(size), dtype=_random_dtype(dtype, "randn")), index)


# -- hooks ----------------------------------------------------------------------------


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [SPEC]


@hookimpl
def oplib_define(registrar: Registrar) -> None:
    registrar.define(RAND)
    registrar.define(RANDN)


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for op in CORE_OPS:
        registrar.impl(f"oplib::{op.name}", KEY, _on_device(op.name))
    registrar.impl(f"{NAMESPACE}::rand", KEY, rand)
    registrar.impl(f"{NAMESPACE}::randn", KEY, randn)
    if not SLOT:  # the slot's methods wait for its user-given name
        generate_methods_for_backend(NAME)
