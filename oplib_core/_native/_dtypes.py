"""numpy dtypes <-> DLPack's ``DLDataType`` (code, bits, lanes)."""

from __future__ import annotations

import numpy as np

from .._dtypes import bfloat16
from ._abi import DLDataType

__all__ = ["from_dl", "to_dl"]

# DLDataTypeCode
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_CODES = {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX, "b": _BOOL}
_KINDS = {v: k for k, v in _CODES.items()}

_to_cache: dict[np.dtype, tuple[int, int]] = {}


def code_bits(dtype: np.dtype) -> tuple[int, int]:
    """``(code, bits)`` of a numpy dtype; ``TypeError`` for dtypes DLPack cannot describe."""
    found = _to_cache.get(dtype)
    if found is not None:
        return found
    if dtype == bfloat16:
        found = (_BFLOAT, 16)
    elif dtype.kind in _CODES and dtype.isnative and dtype.type.__module__ == "numpy":
        found = (_CODES[dtype.kind], dtype.itemsize * 8)
    else:
        raise TypeError(f"dtype {dtype} has no DLPack equivalent")
    _to_cache[dtype] = found
    return found


def to_dl(dtype: np.dtype) -> DLDataType:
    code, bits = code_bits(dtype)
    return DLDataType(code, bits, 1)


def from_dl(dt: DLDataType) -> np.dtype:
    """The numpy dtype of a ``DLDataType`` a shape function returned."""
    code, bits, lanes = int(dt.code), int(dt.bits), int(dt.lanes)
    if lanes != 1 or bits % 8:
        raise TypeError(f"DLDataType(code={code}, bits={bits}, lanes={lanes}) is not supported")
    if code == _BFLOAT and bits == 16:
        return bfloat16
    kind = _KINDS.get(code)
    if kind is None:
        raise TypeError(f"DLDataType code {code} is not supported")
    if kind == "b":
        return np.dtype(bool)
    return np.dtype(f"{kind}{bits // 8}")
