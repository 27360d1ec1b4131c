"""The ``cpu`` backend: numpy arrays, and the core op set's kernels bound to numpy."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from oplib_core import BackendSpec, Device, hookimpl
from oplib_core.kernels import array_kernels
from oplib_core.plugins import Registrar


def _from_host(array: np.ndarray, device: Device) -> np.ndarray:
    return np.array(array, copy=True)


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def _namespace() -> ModuleType:
    return np


CPU = BackendSpec(
    name="cpu",
    key="CPU",
    array_types=(np.ndarray,),
    priority=0,
    to_host=np.asarray,
    from_host=_from_host,
    empty=_empty,
    namespace=_namespace,
    from_dlpack=np.from_dlpack,
    dlpack_device_type=1,  # kDLCPU
    description="numpy arrays in host memory",
    # numpy kernels take and give numpy arrays: the pointwise backward formulas run as
    # programs of them, without dispatch (BackendSpec.direct_kernels)
    direct_kernels=True,
)


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [CPU]


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for name, kernel in array_kernels(np).items():
        registrar.impl(f"oplib::{name}", "cpu", kernel)
