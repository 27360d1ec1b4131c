"""The oplib plugin of acme-ops: one op, kernels for two devices, a fake kernel.

oplib imports this module when ``oplib_core`` is imported and calls the hooks below in
phases. Nothing here imports cupy: the cuda kernel receives cupy arrays, and arithmetic on
them needs no import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.plugins import Registrar

OP = "acme::scaled_add"


@oplib.hookimpl
def oplib_define(registrar: Registrar) -> None:
    registrar.define(
        OP, "(Tensor x, Tensor y, *, float alpha=1.0) -> Tensor", tags=(oplib.Tag.pointwise,)
    )


def scaled_add_cpu(x: np.ndarray, y: np.ndarray, *, alpha: float) -> np.ndarray:
    return np.add(x, np.multiply(y, alpha, dtype=np.result_type(y, alpha)))


def scaled_add_cuda(x: Any, y: Any, *, alpha: float) -> Any:
    # x and y are cupy arrays on one device; oplib runs this under that device.
    return x + alpha * y


@oplib.hookimpl
def oplib_impl(registrar: Registrar) -> None:
    registrar.impl(OP, "cpu", scaled_add_cpu)
    # Kept even when no CUDA backend is installed; it goes live when oplib-cuda is.
    registrar.impl(OP, "cuda", scaled_add_cuda)


def scaled_add_fake(x: Any, y: Any, *, alpha: float) -> Any:
    shape = np.broadcast_shapes(tuple(x.shape), tuple(y.shape))
    dtype = np.result_type(x.dtype, y.dtype)
    return (
        oplib.empty_like(x, dtype=dtype)
        if tuple(x.shape) == shape
        else oplib.ops.oplib.empty(
            list(shape), dtype=dtype, device=x.device if hasattr(x, "device") else None
        )
    )


@oplib.hookimpl
def oplib_register_fake(registrar: Registrar) -> None:
    registrar.register_fake(OP, scaled_add_fake)
