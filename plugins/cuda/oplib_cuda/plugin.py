"""The ``cuda`` backend: cupy arrays, and the core op set's kernels bound to cupy.

Nothing here imports cupy at load time: arrays are recognised by the name
``"cupy.ndarray"``, and the kernels are small wrappers (``oplib_core.backends.on_device``)
that import cupy on their first call, bind their ``array_kernels(cupy)`` kernel once, and run
each call on the device ``i`` its arrays (or its ``device=`` argument) are on, entering
``cupy.cuda.Device(i)`` only when ``i`` is not the current device.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core import BackendSpec, Device, hookimpl
from oplib_core.backends import DevicePlacement, on_device
from oplib_core.kernels import CORE_OPS, array_kernels
from oplib_core.plugins import Registrar
from oplib_cuda import device as device_module
from oplib_cuda import elementwise, fusion, runtime

KEY = "CUDA"
_KDL_CUDA = 2  # DLPack device type of CUDA memory


#: The dtypes cupy's arrays hold: numpy's numeric and bool dtypes, none of ml_dtypes' formats
#: (bfloat16, float8). Fixed by cupy, so it is declared here without importing cupy.
CUPY_DTYPES = frozenset(
    (
        oplib.bool_,
        oplib.int8,
        oplib.int16,
        oplib.int32,
        oplib.int64,
        oplib.uint8,
        oplib.uint16,
        oplib.uint32,
        oplib.uint64,
        oplib.float16,
        oplib.float32,
        oplib.float64,
        oplib.complex64,
        oplib.complex128,
    )
)

#: What to do about the dtypes cupy lacks (quoted by errors and by ``oplib check``'s skips).
DTYPE_HINT = (
    "cupy has no bfloat16 or float8 dtypes (the jax backend, oplib-jax, holds bfloat16 on the GPU)"
)


def _dtypes() -> frozenset[np.dtype]:
    return CUPY_DTYPES


#: A cupy array's device index. ``array.device`` makes a new ``cupy.cuda.Device`` on each
#: read (``ndarray.device`` is ``self.data.device``, which is ``Device(self.data.
#: device_id)``); the dispatcher reads this per call with several GPUs (issue 30), so it
#: reads the memory pointer's int, in C, without a Python frame.
_device_of: Callable[[Any], int] = operator.attrgetter("data.device_id")


def _to_host(array: Any) -> np.ndarray:
    host: np.ndarray = runtime.cupy().asnumpy(array)
    return host


def _index(device: Device | None) -> int | None:
    return None if device is None else device.index


def _from_host(array: np.ndarray, device: Device) -> Any:
    cp = runtime.cupy()
    with cp.cuda.Device(_index(device)):
        return cp.asarray(array)


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> Any:
    cp = runtime.cupy()
    with cp.cuda.Device(_index(device)):
        return cp.empty(shape, dtype=dtype)


def _namespace() -> Any:
    return runtime.cupy()


def _from_dlpack(obj: Any) -> Any:
    return runtime.cupy().from_dlpack(obj)


def _placement() -> DevicePlacement:
    """cupy's arrays, their device, this thread's current device and ``cupy.cuda.Device``
    (imports cupy: ``BackendError`` when it is unusable)."""
    cp = runtime.cupy()
    return DevicePlacement(
        array_type=cp.ndarray,
        device_of=_device_of,
        current_device=cp.cuda.runtime.getDevice,
        device=cp.cuda.Device,
        device_count=runtime.device_count,  # one GPU: the kernels run without the wrapper
    )


CUDA = BackendSpec(
    name="cuda",
    accelerator=True,
    key=KEY,
    array_type_names=("cupy.ndarray",),
    priority=10,
    status=runtime.status,
    device_count=runtime.device_count,
    device_of=_device_of,
    to_host=_to_host,
    from_host=_from_host,
    empty=_empty,
    namespace=_namespace,
    from_dlpack=_from_dlpack,
    dlpack_device_type=_KDL_CUDA,
    dtypes=_dtypes,
    dtypes_fixed=True,  # (a dtype asked is looked up without a call: issue 30)
    dtype_hint=DTYPE_HINT,
    device_module=device_module,
    description="cupy arrays on NVIDIA GPUs",
    # pointwise backward formulas as one ElementwiseKernel each (OPLIB_CUDA_FUSED_BACKWARD)
    elementwise_kernel=fusion.compiler(_placement),
)


@functools.cache
def _kernels() -> dict[str, Any]:
    return array_kernels(runtime.cupy())


def _on_device(name: str) -> Any:
    """The cuda kernel of core op ``name``: ``array_kernels(cupy)[name]``, bound on the
    first call, run on the call's device (``on_device``: ``cupy.cuda.Device(i)`` is entered
    only when ``i`` is not this thread's current device). Issue 30: the elementwise ops
    (``elementwise.OPS``: unary, binary, a scalar operand, comparisons, clamp, where) on
    large contiguous arrays run oplib-cuda's own vectorized kernel, the rest cupy's
    (``OPLIB_CUDA_FAST_ELEMENTWISE=0``: off)."""
    return on_device(
        lambda: elementwise.fast_kernel(name, _kernels()[name]),
        _placement,
        name=f"cuda_{name.replace('.', '_')}",
    )


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [CUDA]


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for op in CORE_OPS:
        registrar.impl(f"oplib::{op.name}", KEY, _on_device(op.name))
