"""The vendor's oplib plugin (entry point ``npu`` in group ``oplib``).

- ``oplib_backends``: rename the private-use backend to ``npu`` (the backend itself comes
  from oplib-privateuse; whichever plugin runs first, the rename applies to it).
- ``oplib_define``/``oplib_impl``: a vendor op ``vendor_npu::softplus`` with kernels for
  ``npu`` (on the device's arrays) and ``cpu``.
"""

from __future__ import annotations

import numpy as np
from oplib_privateuse.memory import DeviceArray
from oplib_privateuse.namespace import namespace

import oplib_core as oplib
from oplib_core.plugins import Registrar


def softplus_npu(x: DeviceArray) -> DeviceArray:
    """``log(1 + exp(x))`` computed on the npu device that holds ``x``."""
    xp = namespace(x.device_index)
    return xp.logaddexp(x, 0.0)


def softplus_cpu(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.logaddexp(x, 0.0))


@oplib.hookimpl
def oplib_backends() -> list[oplib.BackendSpec]:
    oplib.rename_privateuse1_backend("npu")
    return []


@oplib.hookimpl
def oplib_define(registrar: Registrar) -> None:
    registrar.define("vendor_npu::softplus(Tensor x) -> Tensor", tags=(oplib.Tag.pointwise,))


@oplib.hookimpl
def oplib_impl(registrar: Registrar) -> None:
    registrar.register_kernel("vendor_npu::softplus", "npu", softplus_npu)
    registrar.register_kernel("vendor_npu::softplus", "cpu", softplus_cpu)
