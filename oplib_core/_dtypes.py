"""dtypes are numpy dtypes; this module holds oplib's dtype names, the default floating dtype,
normalisation and torch's type promotion.

bfloat16 and the float8 formats are ``ml_dtypes``' numpy extension dtypes (the ones JAX uses):
real numpy dtypes (kind ``"V"``, with their own scalar type), so arrays of them work with numpy
ufuncs, casts and ``np.dtype("bfloat16")`` once ``ml_dtypes`` is imported, which this module does.
"""

from __future__ import annotations

import functools
import numbers
import threading
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from .errors import ArgumentTypeError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "DTYPES",
    "bfloat16",
    "bool_",
    "channels_last",
    "channels_last_3d",
    "check_layout",
    "check_memory_format",
    "complex64",
    "complex128",
    "contiguous_format",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "float64",
    "get_default_dtype",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_floating",
    "layout",
    "mean_dtype",
    "memory_format",
    "preserve_format",
    "promote_types",
    "result_type",
    "scalar_dtype",
    "set_default_dtype",
    "strided",
    "to_dtype",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")
bool_ = np.dtype("bool")
bfloat16: np.dtype = np.dtype(ml_dtypes.bfloat16)
float8_e4m3fn: np.dtype = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2: np.dtype = np.dtype(ml_dtypes.float8_e5m2)
float8_e4m3fnuz: np.dtype = np.dtype(ml_dtypes.float8_e4m3fnuz)
float8_e5m2fnuz: np.dtype = np.dtype(ml_dtypes.float8_e5m2fnuz)
float8_e8m0fnu: np.dtype = np.dtype(ml_dtypes.float8_e8m0fnu)

#: The float8 formats torch names (torch promotes none of them with any other dtype).
FLOAT8 = frozenset((float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu))
#: ml_dtypes' floating formats: kind "V" to numpy, floating to torch and to oplib. Hot paths
#: test ``dtype.kind in "fc" or dtype in EXTENSION_FLOATS`` (differentiable dtypes), so that
#: float32 pays nothing more than before.
EXTENSION_FLOATS = FLOAT8 | {bfloat16}
#: Every dtype oplib has (a backend that lacks some declares the rest: ``DTYPES -
#: {oplib.float16}``; see ``BackendSpec.dtypes``).
DTYPES = EXTENSION_FLOATS | {
    bool_,
    *(int8, int16, int32, int64, uint8, uint16, uint32, uint64),
    *(float16, float32, float64, complex64, complex128),
}


# -- layouts and memory formats (torch.layout, torch.memory_format) ---------------------------
class layout:  # torch.layout
    """A tensor's layout, as ``torch.layout``. oplib's tensors are dense arrays: ``strided``
    is the only layout there is (``Tensor.layout``); factories take ``layout=strided`` (or
    None) and refuse anything else."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"oplib.{self._name}"

    def __reduce__(self) -> str:
        return self._name  # the module global of that name: unpickles as the same object


strided = layout("strided")


class memory_format:  # torch.memory_format
    """A memory format, as ``torch.memory_format``: the order of a tensor's dimensions in
    memory, for ``Tensor.contiguous(memory_format=)`` and ``Tensor.is_contiguous``.
    ``dims_inner_first(ndim)`` lists the dimensions from the fastest-varying one, or None for
    ``preserve_format`` (no order of its own)."""

    __slots__ = ("name", "ndim")

    def __init__(self, name: str, ndim: int | None = None) -> None:
        #: torch's name (``"channels_last"``)
        self.name = name
        #: the rank the format is defined for (4 for channels_last), None for any
        self.ndim = ndim

    def dims_inner_first(self, ndim: int) -> tuple[int, ...] | None:
        if self is preserve_format:
            return None
        if self.ndim is None:  # contiguous_format: row-major
            return tuple(range(ndim - 1, -1, -1))
        return (1, *range(ndim - 1, 1, -1), 0)  # channels last: C fastest, then W, H, (D), N

    def __repr__(self) -> str:
        return f"oplib.{self.name}"

    def __reduce__(self) -> str:
        return self.name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last", 4)
channels_last_3d = memory_format("channels_last_3d", 5)


def check_layout(value: object, api: str) -> None:
    """Refuse a ``layout=`` other than None or ``strided`` (the only layout oplib has)."""
    if value is not None and value is not strided:
        raise ArgumentTypeError(
            f"{api}(): argument 'layout' must be oplib.strided, the only layout oplib has (its "
            f"tensors are dense arrays: no sparse or other layouts), got {value!r}",
            api=api,
            argument="layout",
            value=value,
        )


def check_memory_format(value: object, api: str) -> memory_format:
    """``value`` if it is a memory format, else torch's ``TypeError``."""
    if not isinstance(value, memory_format):
        raise ArgumentTypeError(
            f"{api}(): argument 'memory_format' must be oplib.memory_format, not "
            f"{type(value).__name__}",
            api=api,
            argument="memory_format",
            value=value,
        )
    return value


_lock = threading.Lock()
#: The default dtype, as the one item of a list that ``set_default_dtype`` replaces (the
#: factories' cached call reads it, compiled too).
DEFAULT_DTYPE = [float32]


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
    return DEFAULT_DTYPE[0]


def set_default_dtype(dtype: DTypeLike) -> None:
    """Set the default floating dtype; like torch, only floating dtypes are accepted."""
    d = to_dtype(dtype)
    if not is_floating(d):
        raise TypeError(f"set_default_dtype(): only floating dtypes are supported, got {d}")
    with _lock:
        DEFAULT_DTYPE[0] = d


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
    if out.kind != "c" and not is_floating(out):
        which = "Input" if dtype is None else "Optional"
        raise TypeError(
            f"mean(): could not infer output dtype. {which} dtype must be either a "
            f"floating point or complex dtype. Got: {out}. Pass dtype= (for example "
            "dtype=numpy.float32) to take the mean of integer or bool input."
        )
    return out


def is_floating(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a real floating dtype: numpy's (kind ``"f"``), bfloat16 or a
    float8 format (torch's ``dtype.is_floating_point``)."""
    return dtype.kind == "f" or dtype in EXTENSION_FLOATS


# torch's categories and, within one, its order (c10's promoteTypes table): bool < integers
# < floating < complex; uint8 with int8 gives int16, float16 with bfloat16 gives float32.
_SIGNED_LADDER = (int8, int16, int32, int64)
_BIG_UNSIGNED = frozenset((uint16, uint32, uint64))


def _category(d: np.dtype) -> int:
    if d.kind == "b":
        return 0
    if d.kind in "iu":
        return 1
    return 3 if d.kind == "c" else 2


def promote_types(type1: DTypeLike, type2: DTypeLike) -> np.dtype:
    """torch's ``promote_types``: the smallest dtype both ``type1`` and ``type2`` convert to
    without leaving their category (bool < integer < floating < complex).

    As torch: bfloat16 with float16 gives float32, an integer with bfloat16 gives bfloat16,
    uint8 with int8 gives int16; float8 formats promote only with themselves, and uint16,
    uint32, uint64 only with themselves and floating dtypes (``TypeError`` otherwise). Where
    numpy's ``np.promote_types`` differs is listed in ``docs/coming-from-torch.md``."""
    a, b = to_dtype(type1), to_dtype(type2)
    if a == b:
        return a
    if a in FLOAT8 or b in FLOAT8:
        raise TypeError(
            f"Promotion for Float8 Types is not supported, attempted to promote {a} and {b}"
        )
    if (a in _BIG_UNSIGNED and not is_floating(b)) or (b in _BIG_UNSIGNED and not is_floating(a)):
        raise TypeError(
            "Promotion for uint16, uint32, uint64 types is not supported, "
            f"attempted to promote {a} and {b}"
        )
    for d in (a, b):
        if not (d.kind in "biuc" or is_floating(d)):
            raise TypeError(
                f"promote_types(): {d} is not a bool, integer, floating or complex dtype"
            )
    ca, cb = _category(a), _category(b)
    if ca != cb:
        low, high = (a, b) if ca < cb else (b, a)
        if high.kind == "c" and low == float64:
            return complex128
        return high
    if ca == 1:  # integers: bool-free, unsigned only uint8 here
        if uint8 in (a, b):
            other = b if a == uint8 else a
            return int16 if other == int8 else other
        return _SIGNED_LADDER[max(_SIGNED_LADDER.index(a), _SIGNED_LADDER.index(b))]
    if ca == 2 and {a, b} == {float16, bfloat16}:
        return float32
    return a if a.itemsize >= b.itemsize else b


def result_type(*dtypes: np.dtype) -> np.dtype:
    """The dtype the core kernels compute ``dtypes`` together in: numpy's ``result_type``,
    but torch's ``promote_types`` when a bfloat16/float8 dtype is among them."""
    if any(d in EXTENSION_FLOATS for d in dtypes):
        return functools.reduce(promote_types, dtypes)
    return np.result_type(*dtypes)
