"""The standard's data type functions and dtype objects: ``astype``, ``can_cast``,
``finfo``, ``iinfo``, ``isdtype``, ``result_type``. dtypes are oplib's (numpy dtypes, plus
bfloat16 and the float8 formats through ml_dtypes, which count as real floating)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _dtype_info
from .._dtypes import is_floating, to_dtype
from .._dtypes import result_type as _core_result_type
from .._tensor.tensor import Tensor
from ._common import call, check_tensor

__all__ = [
    "astype",
    "can_cast",
    "finfo",
    "finfo_object",
    "iinfo",
    "iinfo_object",
    "isdtype",
    "result_type",
]


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """``x`` cast to ``dtype`` (``oplib::astype``, in the graph) and moved to ``device``; with
    ``copy=False``, ``x`` itself when nothing changes."""
    x = check_tensor("astype", x)
    d = to_dtype(dtype)
    out = x if d == x.dtype and not copy else call("astype")(x, d)
    return out if device is None else out.to(device)


def _category(d: np.dtype) -> int:
    """The standard's promotion lattices: bool, integers, floating (real and complex)."""
    if d.kind == "b":
        return 0
    if d.kind in "iu":
        return 1
    return 2


def _dtype_of(api: str, value: object) -> np.dtype:
    if isinstance(value, Tensor):
        return value.dtype
    try:
        return to_dtype(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"oplib.array_api.{api}(): expected an oplib Tensor or a dtype, got "
            f"{type(value).__name__}"
        ) from None


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype the core ops give these arrays and dtypes together (the standard's
    promotion table within a kind; numpy's across kinds, torch's for bfloat16/float8)."""
    if not arrays_and_dtypes:
        raise ValueError("oplib.array_api.result_type(): at least one array or dtype is required")
    return _core_result_type(*(_dtype_of("result_type", a) for a in arrays_and_dtypes))


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` promotes to ``to`` under the standard's rules: both in one lattice
    (bool; integers; floating, real and complex) and ``result_type(from_, to) == to``."""
    a, b = _dtype_of("can_cast", from_), _dtype_of("can_cast", to)
    if _category(a) != _category(b):
        return False
    try:
        return bool(_core_result_type(a, b) == b)
    except TypeError:
        return False


class finfo_object:
    """The standard's ``finfo`` result: ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal`` (floats) and ``dtype`` (the dtype object)."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "smallest_normal")

    def __init__(self, dtype: np.dtype) -> None:
        info = _dtype_info.finfo(dtype)
        self.bits, self.eps, self.max, self.min = info.bits, info.eps, info.max, info.min
        self.smallest_normal = info.smallest_normal
        self.dtype = dtype

    def __repr__(self) -> str:
        return (
            f"finfo_object(bits={self.bits}, eps={self.eps:g}, max={self.max:g}, "
            f"min={self.min:g}, smallest_normal={self.smallest_normal:g}, dtype={self.dtype})"
        )


class iinfo_object:
    """The standard's ``iinfo`` result: ``bits``, ``max``, ``min`` and ``dtype``."""

    __slots__ = ("bits", "dtype", "max", "min")

    def __init__(self, dtype: np.dtype) -> None:
        info = _dtype_info.iinfo(dtype)
        self.bits, self.max, self.min = info.bits, info.max, info.min
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"iinfo_object(bits={self.bits}, max={self.max}, min={self.min}, dtype={self.dtype})"


def finfo(type: Any, /) -> finfo_object:
    """Limits of a floating dtype (a complex one: of its real component), or of an
    array's dtype."""
    d = _dtype_of("finfo", type)
    if not (d.kind == "c" or is_floating(d)):
        raise TypeError(f"oplib.array_api.finfo(): expected a floating dtype, got {d}")
    return finfo_object(d)


def iinfo(type: Any, /) -> iinfo_object:
    """Limits of an integer dtype, or of an array's dtype."""
    d = _dtype_of("iinfo", type)
    if d.kind not in "iu":
        raise TypeError(f"oplib.array_api.iinfo(): expected an integer dtype, got {d}")
    return iinfo_object(d)


_KINDS = {
    "bool": lambda d: d.kind == "b",
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": is_floating,
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iuc" or is_floating(d),
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype, one of the standard's kind names
    (``"bool"``, ``"signed integer"``, ``"unsigned integer"``, ``"integral"``,
    ``"real floating"``, ``"complex floating"``, ``"numeric"``), or a tuple of those."""
    if not isinstance(dtype, np.dtype):
        raise TypeError(f"oplib.array_api.isdtype(): expected a dtype, got {type(dtype).__name__}")
    if isinstance(kind, tuple):
        if any(isinstance(k, tuple) for k in kind):
            raise TypeError("oplib.array_api.isdtype(): kind tuples cannot be nested")
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        test = _KINDS.get(kind)
        if test is None:
            raise ValueError(
                f"oplib.array_api.isdtype(): unknown kind {kind!r}; expected one of "
                f"{', '.join(map(repr, _KINDS))}"
            )
        return bool(test(dtype))
    if isinstance(kind, np.dtype):
        return dtype == kind
    raise TypeError(
        f"oplib.array_api.isdtype(): kind must be a dtype, a kind name or a tuple, got "
        f"{type(kind).__name__}"
    )
