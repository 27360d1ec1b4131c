"""The ``cuda`` backend: cupy arrays, and the core op set's kernels bound to cupy.

Nothing here imports cupy at load time: arrays are recognised by the name
``"cupy.ndarray"``, and the kernels are small wrappers that import cupy on their first
call, bind ``array_kernels(cupy)`` once, and run each call under ``cupy.cuda.Device(i)``
for the device ``i`` its arrays (or its ``device=`` argument) are on.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core import BackendSpec, Device, hookimpl
from oplib_core.kernels import CORE_OPS, array_kernels
from oplib_core.plugins import Registrar
from oplib_cuda import device as device_module
from oplib_cuda import runtime

KEY = "CUDA"
_KDL_CUDA = 2  # DLPack device type of CUDA memory


#: ml_dtypes' formats, which cupy has no dtype for (it refuses them with "Unsupported dtype").
_NO_CUPY_DTYPES = frozenset(
    (
        oplib.bfloat16,
        oplib.float8_e4m3fn,
        oplib.float8_e5m2,
        oplib.float8_e4m3fnuz,
        oplib.float8_e5m2fnuz,
        oplib.float8_e8m0fnu,
    )
)


def check_dtype(dtype: Any, what: str) -> None:
    """``TypeError`` for a dtype cupy cannot hold (bfloat16, float8), saying what to do."""
    if dtype is not None and np.dtype(dtype) in _NO_CUPY_DTYPES:
        raise TypeError(
            f"{what}: the cuda backend (cupy) has no {np.dtype(dtype)} dtype; keep "
            f"{np.dtype(dtype)} tensors on the cpu, or convert them first, e.g. "
            "t.to(oplib.float16).to('cuda')"
        )


def _device_of(array: Any) -> int:
    return int(array.device.id)


def _to_host(array: Any) -> np.ndarray:
    host: np.ndarray = runtime.cupy().asnumpy(array)
    return host


def _index(device: Device | None) -> int | None:
    return None if device is None else device.index


def _from_host(array: np.ndarray, device: Device) -> Any:
    check_dtype(array.dtype, f"copy to {device}")
    cp = runtime.cupy()
    with cp.cuda.Device(_index(device)):
        return cp.asarray(array)


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> Any:
    check_dtype(dtype, f"empty on {device}")
    cp = runtime.cupy()
    with cp.cuda.Device(_index(device)):
        return cp.empty(shape, dtype=dtype)


def _namespace() -> Any:
    return runtime.cupy()


def _from_dlpack(obj: Any) -> Any:
    return runtime.cupy().from_dlpack(obj)


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
    device_module=device_module,
    description="cupy arrays on NVIDIA GPUs",
)


_DTYPE_ARGUMENT = frozenset(("empty", "zeros", "ones", "full", "arange", "arange.start", "astype"))


@functools.cache
def _kernels() -> dict[str, Any]:
    return array_kernels(runtime.cupy())


def _call_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The CUDA device a call runs on: its first cupy array's, else its ``device=``
    argument's index, else ``None`` (the current device)."""
    for a in args:
        dev = getattr(a, "device", None)
        if dev is not None and hasattr(dev, "id"):
            return int(dev.id)
        if isinstance(a, (list, tuple)):
            for item in a:
                dev = getattr(item, "device", None)
                if dev is not None and hasattr(dev, "id"):
                    return int(dev.id)
    target = kwargs.get("device")
    return target.index if isinstance(target, Device) else None


def _on_device(name: str) -> Any:
    takes_dtype = name in _DTYPE_ARGUMENT

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if takes_dtype:  # factories and astype: the dtype asked for
            check_dtype(args[1] if name == "astype" else kwargs.get("dtype"), f"oplib::{name}")
        fn = _kernels()[name]  # imports cupy on the first call
        with runtime.cupy().cuda.Device(_call_device(args, kwargs)):
            return fn(*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = f"cuda_{name.replace('.', '_')}"
    return kernel


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [CUDA]


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for op in CORE_OPS:
        registrar.impl(f"oplib::{op.name}", KEY, _on_device(op.name))
