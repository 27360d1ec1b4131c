"""The core op set, registered through the same plugin path as everyone else's ops.

Schemas (``kernels.CORE_OPS``) are defined here; backends give the kernels. The cross-device
copy ``oplib::_to_copy`` is the one op core implements itself: it only needs the backends'
host transfer functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._device import Device
from ._dispatch import OpOverload
from ._opset import CORE_OPS
from ._registry.registry import op_named
from .backends import TABLE
from .hookspecs import hookimpl
from .plugins import Registrar

TO_COPY = "oplib::_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor"


def _clone() -> OpOverload:
    op: OpOverload = op_named("oplib::clone")
    return op


def _astype() -> OpOverload:
    op: OpOverload = op_named("oplib::astype")
    return op


def to_copy(self: Any, *, dtype: np.dtype | None = None, device: Device | None = None) -> Any:
    """Copy ``self`` to ``device`` (through host memory when the backends differ) and/or
    cast to ``dtype``. Always returns a new array."""
    src = TABLE.for_type(type(self))
    assert src is not None, "the dispatcher only calls kernels with recognised arrays"
    if device is None or (
        device.type == src.name
        and (device.index is None or device.index == src.device_of(self).index)
    ):
        if dtype is None or src.dtype_of(self) == dtype:
            return _clone()(self)
        src.check_dtype(dtype, "oplib::_to_copy()")  # (astype's check would name astype)
        # astype makes the new array itself: one copy, not a clone and then a cast
        return _astype()(self, dtype)
    dst = TABLE.get(device.type)
    # refused before any data moves or the target's library is asked for its device
    dst.check_dtype(src.dtype_of(self) if dtype is None else dtype, f"copy to {device}", copy=True)
    host = src.to_host(self)
    if dtype is not None:
        host = host.astype(dtype, copy=False)
    index = device.index if device.index is not None else dst.current_index()
    return dst.from_host(host, Device(dst.name, index))


@hookimpl
def oplib_define(registrar: Registrar) -> None:
    for op in CORE_OPS:
        registrar.define(op.schema, tags=op.tags)
    registrar.define(TO_COPY)


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    registrar.impl("oplib::_to_copy", "default", to_copy)
