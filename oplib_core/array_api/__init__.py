"""``oplib.array_api``: oplib's namespace for the Python array API standard (2023.12).

What ``Tensor.__array_namespace__()`` returns, so code written against the standard
(``xp = x.__array_namespace__()``, then ``xp.sum(xp.exp(x), axis=0)``) runs on oplib Tensors.
Every function dispatches through oplib's core ops, or composes them: the results are
Tensors on the inputs' device, with autograd. The standard's names that are not here yet
are the keys of ``NOT_COVERED`` (with the reason); asking for one raises an
``AttributeError`` that gives it. See ``docs/array-api.md``.
"""

from __future__ import annotations

import importlib as _importlib
import math as _math
from typing import TYPE_CHECKING

from .._dtypes import bool_ as bool
from .._dtypes import (
    complex64,
    complex128,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ._coverage import NOT_COVERED as NOT_COVERED  # public, outside __all__ (not a standard name)

if TYPE_CHECKING:  # at run time, the first name read imports them all (see __getattr__)
    from ._creation import (
        arange,
        asarray,
        empty,
        empty_like,
        eye,
        from_dlpack,
        full,
        full_like,
        linspace,
        meshgrid,
        ones,
        ones_like,
        tril,
        triu,
        zeros,
        zeros_like,
    )
    from ._dtype_functions import astype, can_cast, finfo, iinfo, isdtype, result_type
    from ._elementwise import (
        abs,
        add,
        clip,
        cos,
        divide,
        equal,
        exp,
        expm1,
        greater,
        greater_equal,
        hypot,
        isfinite,
        isinf,
        isnan,
        less,
        less_equal,
        log,
        log1p,
        log2,
        log10,
        logaddexp,
        logical_and,
        logical_not,
        logical_or,
        logical_xor,
        maximum,
        minimum,
        multiply,
        negative,
        not_equal,
        positive,
        pow,
        sign,
        sin,
        sqrt,
        square,
        subtract,
        tan,
        tanh,
    )
    from ._hyperbolic import acosh, asinh, atanh, cosh, sinh
    from ._info import __array_namespace_info__
    from ._manipulation import (
        broadcast_arrays,
        broadcast_to,
        concat,
        expand_dims,
        flip,
        matmul,
        matrix_transpose,
        moveaxis,
        permute_dims,
        repeat,
        reshape,
        roll,
        squeeze,
        stack,
        take,
        tensordot,
        tile,
        unstack,
        vecdot,
        where,
    )
    from ._rounding import ceil, floor, round, trunc
    from ._searching import argmax, argmin
    from ._statistical import all, any, max, mean, min, std, sum, var

#: The modules defining the functions, imported when one of their names is first read:
#: ``import oplib_core`` binds this namespace, and a program may never use it.
_MODULES = (
    "_creation",
    "_dtype_functions",
    "_elementwise",
    "_hyperbolic",
    "_info",
    "_manipulation",
    "_rounding",
    "_searching",
    "_statistical",
)
_loaded = False


def _load() -> None:
    global _loaded
    g = globals()
    for sub in _MODULES:
        module = _importlib.import_module(f"{__name__}.{sub}")
        for name in __all__:
            if name not in g and hasattr(module, name):
                g[name] = getattr(module, name)
    _loaded = True


#: The revision of the standard this namespace follows.
__array_api_version__ = "2023.12"

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

del _math

__all__ = [
    "__array_api_version__",
    "__array_namespace_info__",
    "abs",
    "acosh",
    "add",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "asarray",
    "asinh",
    "astype",
    "atanh",
    "bool",
    "broadcast_arrays",
    "broadcast_to",
    "can_cast",
    "ceil",
    "clip",
    "complex64",
    "complex128",
    "concat",
    "cos",
    "cosh",
    "divide",
    "e",
    "empty",
    "empty_like",
    "equal",
    "exp",
    "expand_dims",
    "expm1",
    "eye",
    "finfo",
    "flip",
    "float32",
    "float64",
    "floor",
    "from_dlpack",
    "full",
    "full_like",
    "greater",
    "greater_equal",
    "hypot",
    "iinfo",
    "inf",
    "int8",
    "int16",
    "int32",
    "int64",
    "isdtype",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "linspace",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "matmul",
    "matrix_transpose",
    "max",
    "maximum",
    "mean",
    "meshgrid",
    "min",
    "minimum",
    "moveaxis",
    "multiply",
    "nan",
    "negative",
    "newaxis",
    "not_equal",
    "ones",
    "ones_like",
    "permute_dims",
    "pi",
    "positive",
    "pow",
    "repeat",
    "reshape",
    "result_type",
    "roll",
    "round",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "subtract",
    "sum",
    "take",
    "tan",
    "tanh",
    "tensordot",
    "tile",
    "tril",
    "triu",
    "trunc",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unstack",
    "var",
    "vecdot",
    "where",
    "zeros",
    "zeros_like",
]


def __getattr__(name: str) -> object:
    """The namespace's functions, imported on first read; a standard name this namespace
    lacks says so, and why."""
    if not _loaded:
        _load()
        if name in globals():
            return globals()[name]
    reason = NOT_COVERED.get(name)
    if reason is not None:
        raise AttributeError(
            f"oplib.array_api has no {name!r} yet ({reason}); see NOT_COVERED and docs/array-api.md"
        )
    raise AttributeError(f"module 'oplib_core.array_api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
