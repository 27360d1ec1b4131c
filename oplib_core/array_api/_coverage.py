"""Which names of the array API standard (2023.12) this namespace does not have yet, and why.

``tests/test_array_api_namespace.py`` checks that these are exactly the standard's names
(read from ``array-api-strict``) minus ``oplib.array_api.__all__``, and that
``docs/array-api.md`` lists each of them, so the list cannot go stale."""

from __future__ import annotations

__all__ = ["NOT_COVERED"]

_NO_OP = "no core op yet, and no accurate composition of the existing ones"
_BITS = "no bitwise core ops yet"
_COMPLEX = "no complex-part core ops (real, imag, conj) yet"
_DIVISION = "no integer division core op yet (a float composition loses int64 precision)"
_SORT = "no sorting core op yet"
_DATA_SHAPE = "data-dependent output shapes: no core op yet"

#: standard name -> why it is not here yet.
NOT_COVERED: dict[str, str] = {
    "acos": _NO_OP,
    "argsort": _SORT,
    "asin": _NO_OP,
    "atan": _NO_OP,
    "atan2": _NO_OP,
    "bitwise_and": _BITS,
    "bitwise_invert": _BITS,
    "bitwise_left_shift": _BITS,
    "bitwise_or": _BITS,
    "bitwise_right_shift": _BITS,
    "bitwise_xor": _BITS,
    "conj": _COMPLEX,
    "copysign": "needs the sign bit of zeros and NaNs: no core op yet",
    "cumulative_sum": "no cumulative core op yet",
    "floor_divide": _DIVISION,
    "imag": _COMPLEX,
    "nonzero": _DATA_SHAPE,
    "prod": "no product reduction core op yet",
    "real": _COMPLEX,
    "remainder": _DIVISION,
    "searchsorted": _SORT,
    "signbit": "needs the sign bit of zeros and NaNs: no core op yet",
    "sort": _SORT,
    "unique_all": _DATA_SHAPE,
    "unique_counts": _DATA_SHAPE,
    "unique_inverse": _DATA_SHAPE,
    "unique_values": _DATA_SHAPE,
}
