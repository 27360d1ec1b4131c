"""torch's dtype spellings that are also Python builtins' names (``oplib.bool`` as
``torch.bool``, ``oplib.long``, ``oplib.float``...), kept in a module of their own so that no
module that uses the builtins binds them. ``oplib_core`` re-exports them outside ``__all__``
(``from oplib_core import *`` leaves the builtins alone)."""

from __future__ import annotations

from ._dtypes import bool_, complex64, complex128, float16, float32, float64, int16, int32, int64

__all__ = ["bool", "cdouble", "cfloat", "double", "float", "half", "int", "long", "short"]

bool = bool_
float = float32
double = float64
half = float16
long = int64
int = int32
short = int16
cfloat = complex64
cdouble = complex128
