"""``MetaArray``: the meta device's array, a data-less array living on device ``meta``."""

from __future__ import annotations

from typing import Any

import numpy as np

from oplib_core import Device
from oplib_core.fake import DataAccessError, FakeArray, check_shape

__all__ = ["META", "MetaArray"]

#: The (only) meta device.
META = Device("meta")


class MetaArray(FakeArray):
    """An array with ``shape`` and ``dtype`` only: ``MetaArray((3, 4), "float32")``.

    Reading its data raises :class:`~oplib_core.fake.errors.DataAccessError`."""

    __slots__ = ()
    kind = "meta"

    def __init__(self, shape: Any, dtype: Any = None) -> None:
        super().__init__(shape, dtype, META)

    def __repr__(self) -> str:
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"


def from_host(array: np.ndarray, device: Device) -> MetaArray:
    """Moving to ``meta`` keeps shape and dtype and drops the data."""
    return MetaArray.from_parts(tuple(int(s) for s in array.shape), np.dtype(array.dtype), META)


def to_host(array: MetaArray) -> np.ndarray:
    raise DataAccessError(
        f"meta tensors have no data; a meta array (shape {array.shape}, dtype {array.dtype}) "
        "cannot be copied to another device or converted to numpy. Create the tensor on a "
        "real device (device='cpu') to compute values; use 'meta' only for shapes and dtypes.",
        action="to_host",
    )


def empty(shape: tuple[Any, ...], dtype: np.dtype, device: Device) -> MetaArray:
    return MetaArray.from_parts(check_shape(shape, "empty"), np.dtype(dtype), META)
