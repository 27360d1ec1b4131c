"""``__array_namespace_info__()``: what this namespace supports, on which devices."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import get_default_dtype, to_dtype
from ..backends import TABLE
from ..backends import device as to_device

__all__ = ["Info", "__array_namespace_info__"]

# The standard's dtypes by kind; oplib's extra ones (float16, bfloat16, float8) are not
# listed here (the standard's test suites would expect its operations on them).
_DTYPES: dict[str, tuple[str, ...]] = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_GROUPS = {
    "integral": ("signed integer", "unsigned integer"),
    "numeric": ("signed integer", "unsigned integer", "real floating", "complex floating"),
}


class Info:
    """The standard's inspection object (``capabilities``, ``default_device``,
    ``default_dtypes``, ``dtypes``, ``devices``)."""

    __slots__ = ()

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing (``x[mask]``, ``oplib::index``); the functions with other
        data-dependent output shapes (``nonzero``, ``unique_*``) are in ``NOT_COVERED``."""
        return {"boolean indexing": True, "data-dependent shapes": False}

    def default_device(self) -> Device:
        """The device creation functions use without ``device=``: the CPU."""
        return Device("cpu")

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """oplib's defaults: the default floating dtype (float32 unless
        ``oplib.set_default_dtype`` changed it), its complex counterpart, int64."""
        if device is not None:
            to_device(device)
        real = get_default_dtype()
        complex_ = np.dtype(np.complex128 if real == np.float64 else np.complex64)
        return {
            "real floating": real,
            "complex floating": complex_,
            "integral": np.dtype(np.int64),
            "indexing": np.dtype(np.int64),
        }

    def dtypes(
        self, *, device: Any = None, kind: str | tuple[str, ...] | None = None
    ) -> dict[str, np.dtype]:
        """The standard's dtypes by name, of one ``kind`` (or a tuple of kinds)."""
        if device is not None:
            to_device(device)
        kinds: tuple[str, ...]
        if kind is None:
            kinds = tuple(_DTYPES)
        elif isinstance(kind, str):
            kinds = (kind,)
        else:
            kinds = kind
        names: list[str] = []
        for k in kinds:
            if k in _DTYPES:
                names += _DTYPES[k]
            elif k in _GROUPS:
                names += [n for g in _GROUPS[k] for n in _DTYPES[g]]
            else:
                raise ValueError(
                    f"dtypes(): unknown kind {k!r}; expected one of "
                    f"{', '.join(map(repr, [*_DTYPES, *_GROUPS]))}"
                )
        return {n: to_dtype(n) for n in dict.fromkeys(names)}

    def devices(self) -> list[Device]:
        """Every device of the available backends (``cpu``, ``meta``, ``cuda:0`` …)."""
        out: list[Device] = []
        for b in TABLE.all():
            count = b.device_count()
            if not b.multi_device:
                if count:
                    out.append(Device(b.name))
                continue
            out += [Device(b.name, i) for i in range(count)]
        return out


def __array_namespace_info__() -> Info:
    """The inspection object of ``oplib.array_api``."""
    return Info()
