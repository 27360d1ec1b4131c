"""dtypes are numpy dtypes; this module holds the default floating dtype and normalisation."""

from __future__ import annotations

import numbers
import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "bool_",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "int32",
    "int64",
    "mean_dtype",
    "scalar_dtype",
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


def to_dtype(dtype: DTypeLike) -> np.dtype:
    """Normalise anything numpy accepts as a dtype (``"float32"``, ``np.float32``, a dtype)."""
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise TypeError(
            f"expected a dtype (numpy dtype, scalar type or name), got {dtype!r}"
        ) from e


def get_default_dtype() -> np.dtype:
    """The floating dtype factories and Python floats given to ``tensor`` use (float32)."""
    return _default[0]


def set_default_dtype(dtype: DTypeLike) -> None:
    """Set the default floating dtype; like torch, only floating dtypes are accepted."""
    d = to_dtype(dtype)
    if d.kind != "f":
        raise TypeError(f"set_default_dtype(): only floating dtypes are supported, got {d}")
    with _lock:
        _default[0] = d


def scalar_dtype(value: object) -> np.dtype:
    """torch's dtype inference for ``full``/``arange``: bool → bool, int → int64, float →
    the default dtype, complex → the default dtype's complex counterpart."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, numbers.Integral):
        return int64
    if isinstance(value, numbers.Real):
        return get_default_dtype()
    if isinstance(value, numbers.Complex):
        return np.result_type(get_default_dtype(), np.complex64)
    raise TypeError(f"expected a Scalar (bool, int, float or complex), got {type(value).__name__}")


def mean_dtype(input_dtype: np.dtype, dtype: np.dtype | None) -> np.dtype:
    """The result dtype of ``mean``; like torch it must be floating or complex."""
    out = input_dtype if dtype is None else dtype
    if out.kind not in "fc":
        which = "Input" if dtype is None else "Optional"
        raise TypeError(
            f"mean(): could not infer output dtype. {which} dtype must be either a "
            f"floating point or complex dtype. Got: {out}. Pass dtype= (for example "
            "dtype=numpy.float32) to take the mean of integer or bool input."
        )
    return out
