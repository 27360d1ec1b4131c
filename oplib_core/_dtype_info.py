"""``oplib.finfo`` and ``oplib.iinfo``: the numeric limits of a dtype, with torch's attributes.

Backed by ``ml_dtypes.finfo``/``iinfo`` (numpy's, extended to bfloat16 and the float8 formats).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import ml_dtypes

from ._dtypes import get_default_dtype, is_floating, to_dtype

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["finfo", "iinfo"]


class finfo:
    """Limits of a floating dtype (a complex dtype gives its component's), as
    ``torch.finfo``: ``bits``, ``eps``, ``max``, ``min``, ``tiny`` (= ``smallest_normal``),
    ``resolution`` and ``dtype`` (the dtype's name). ``finfo()`` describes the default dtype."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "resolution", "smallest_normal", "tiny")

    bits: int
    eps: float
    max: float
    min: float
    tiny: float
    smallest_normal: float
    resolution: float
    dtype: str

    def __init__(self, type: DTypeLike | None = None) -> None:
        d = get_default_dtype() if type is None else to_dtype(type)
        if d.kind == "c":
            d = to_dtype(f"float{d.itemsize * 4}")
        if not is_floating(d):
            raise TypeError(
                f"finfo() requires a floating point input type, got {d}. "
                "Use oplib.iinfo to handle integer types"
            )
        info = ml_dtypes.finfo(d)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        # torch's resolution is 10 ** -digits10 (digits10 = floor(mantissa bits * log10 2)),
        # numpy's is 10 ** -precision computed from eps: they differ for float8 and bfloat16
        self.resolution = 10.0 ** -math.floor(int(info.nmant) * math.log10(2))
        self.dtype = d.name

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
            f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, "
            f"dtype={self.dtype})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, finfo) and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("finfo", self.dtype))


class iinfo:
    """Limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``max``, ``min`` and
    ``dtype`` (the dtype's name). bool is refused, as in torch."""

    __slots__ = ("bits", "dtype", "max", "min")

    bits: int
    max: int
    min: int
    dtype: str

    def __init__(self, type: DTypeLike) -> None:
        d = to_dtype(type)
        if d.kind == "b":
            raise TypeError("bool is not supported by oplib.iinfo")
        if d.kind not in "iu":
            raise TypeError(
                f"iinfo() requires an integer input type, got {d}. "
                "Use oplib.finfo to handle floating types"
            )
        info = ml_dtypes.iinfo(d)
        self.bits = int(info.bits)
        self.max = int(info.max)
        self.min = int(info.min)
        self.dtype = d.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max:g}, dtype={self.dtype})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, iinfo) and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("iinfo", self.dtype))
