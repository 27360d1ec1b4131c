"""dtypes are numpy dtypes; this module holds the default floating dtype and normalisation."""

from __future__ import annotations

import threading

import numpy as np

__all__ = [
    "bool_",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "int32",
    "int64",
    "set_default_dtype",
    "to_dtype",
]

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
bool_ = np.dtype("bool")

_lock = threading.Lock()
_default = [float32]


def to_dtype(dtype: object) -> np.dtype:
    """Normalise anything numpy accepts as a dtype (``"float32"``, ``np.float32``, a dtype)."""
    try:
        return np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as e:
        raise TypeError(
            f"expected a dtype (numpy dtype, scalar type or name), got {dtype!r}"
        ) from e


def get_default_dtype() -> np.dtype:
    """The floating dtype factories and Python floats given to ``tensor`` use (float32)."""
    return _default[0]


def set_default_dtype(dtype: object) -> None:
    """Set the default floating dtype; like torch, only floating dtypes are accepted."""
    d = to_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype(): only floating dtypes are supported, got {d}")
    with _lock:
        _default[0] = d
