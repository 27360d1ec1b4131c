"""oplib-cuda's own kernels for the elementwise core ops on large contiguous arrays.

cupy's generated elementwise kernels move about 60% of an H200's copy bandwidth; a plain
``cupy.RawKernel`` that reads and writes 16 bytes at a time in a grid-stride loop moves
about 96% (issue 30). So the elementwise core ops get such a kernel, one per (op, dtype,
layout), all from one template and compiled as one module per dtype, in six families:

- unary: ``neg``, ``abs``, ``relu``, ``exp``, ``log``, ``sin``, ``cos``, ``tanh``,
  ``sigmoid``, ``sqrt``;
- binary: ``add``, ``sub``, ``mul``, ``div``, ``pow``, ``maximum``, ``minimum``, on two
  arrays of one shape, with one of them repeated along the other's leading dimensions
  (``x + bias``, ``bias - x``: the broadcast a bias or a scale makes), with one of them a
  single element (``x - x.mean()``, ``x / x.max()``: a 0-d or size-1 array), or with one
  of them a value per row of the other (``x - x.max(-1, keepdims=True)``: softmax's);
- a scalar operand: ``add.Scalar``, ``sub.Scalar``, ``mul.Scalar``, ``div.Scalar``,
  ``pow.Scalar`` (``x ** 2``), ``rsub.Scalar`` (``2.0 - x``), ``rdiv.Scalar`` (``2.0 / x``)
  and ``rpow.Scalar`` (``2.0 ** x``);
- comparisons, with bool results: ``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge`` and their
  ``.Scalar`` forms;
- bounds: ``clamp`` (``x.clamp(0, 6)``, ``x.clamp(min=-1)``), one pass where cupy's
  computation is two (``maximum``, then ``minimum``);
- select: ``where(condition, x, y)`` on a bool condition and two arrays of its shape, or
  one of them a single element (``x.where(mask, 0.0)``).

A call takes the own kernel where it is plainly the same computation as cupy's:

- every array C-contiguous and 16-byte aligned (so ``x[1:]`` of a float32 array is not),
  but a single-element or per-row operand (below), and the largest of at least
  :data:`MIN_ELEMENTS` elements (below that a call is launch-bound: what it costs the
  host decides, and cupy's call is the one measured there);
- two arrays: the same dtype and device, and the same shape; or the smaller one's shape
  (less leading 1s) the larger one's last dimensions, a whole number of 16-byte vectors
  long; or the smaller one a single element (in no more dimensions than the larger one
  has: the result has the larger one's shape), which may be strided or unaligned to 16
  bytes; or the smaller one's shape (with leading 1s up to the larger one's dimensions)
  the larger one's first dimensions and then 1s, the row (the larger one's last
  dimensions) a whole number of 16-byte vectors long, the smaller one C-contiguous but
  aligned only to its element size (no other broadcasting);
- ``where``: a bool condition of the result's shape, C-contiguous and 16-byte aligned, and
  two arrays of one dtype, each of its shape or a single element (:func:`select_layout`);
- the dtype float32 or float16, or int32 where cupy's result on int32 is int32 (not for
  ``div``, ``sigmoid`` and the transcendental functions, whose int32 results are float64,
  nor ``pow``, which cupy computes on integers by a loop of its own);
- a scalar operand: a Python ``int`` or ``float`` for float arrays (a float16 or float32 value
  that overflows where the scalar does not is left to cupy), an ``int`` within int32 for
  int32 arrays (a weak scalar, NEP 50: cupy casts it to the array's dtype first, as here);
  ``clamp``'s bounds alike, at least one of them not None (a None bound is the dtype's
  identity: -inf or +inf, int32's least or greatest value).

Every other call goes to cupy's function (the core's kernel) unchanged. The arithmetic is
cupy's own: float32 and int32 as C does it (int32 wraps in two's complement), float16
converted to float32, computed there and rounded back to float16 to nearest even (cupy's
``float16`` type does the same), each intermediate of ``sigmoid`` rounded as the core's
formula rounds it (``exp(-|x|)``, then ``1 + e``, then the quotient); ``maximum`` and
``minimum`` give NaN where either input is NaN, else CUDA's ``fmaxf``/``fminf`` (cupy's
formula); ``where`` copies the stored value it chooses (float16's bits unconverted).
``OPLIB_CUDA_FAST_ELEMENTWISE=0`` (or ``false``, ``no``, ``off``) turns the
kernels off; it is read when each op first runs.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np

from oplib_core.backends import by_size
from oplib_cuda import runtime

__all__ = [
    "ALIGNMENT",
    "DTYPES",
    "FORMULAS",
    "LAYOUTS",
    "MIN_ELEMENTS",
    "OPS",
    "SWITCH",
    "ArrayFacts",
    "Formula",
    "KernelCompileWarning",
    "Layout",
    "Op",
    "c_contiguous",
    "clamp_bounds",
    "computes",
    "enabled",
    "facts",
    "failures",
    "fast_kernel",
    "kernel_name",
    "kernels_of",
    "launches",
    "layout",
    "module_source",
    "qualifies",
    "scalar_operand",
    "serves",
    "source",
]

#: The environment variable that turns the kernels off (``0``, ``false``, ``no``, ``off``).
SWITCH = "OPLIB_CUDA_FAST_ELEMENTWISE"

#: Fewest elements a call needs for the own kernel: 16 MiB of float32, which an H200 reads
#: in about 4 µs, about what a launch costs the host. Below that a call is launch-bound and
#: cupy's call is the measured one (``bench/gpu.py``'s autograd chain, on 2**20 elements,
#: keeps it), above it the device's bandwidth decides.
MIN_ELEMENTS = 1 << 22

#: Bytes each thread reads per array per step; the data pointers must be aligned to it.
ALIGNMENT = 16

_THREADS = 256  # per block
_BLOCKS_PER_SM = 8  # issue 30's reference kernel: 132 SMs x 8 blocks x 256 threads, 96%


class Formula(NamedTuple):
    """What one element of the result is, as C expressions of ``a`` (and ``b``, ``c``)."""

    on_float: str  # a, b: float (float32, and float16 computed in float)
    on_int: str | None  # a, b: int; None: not served on int32 (see the module doc)
    predicate: bool = False  # a bool result
    # chooses one of its operands' stored values (float16's bits too, not converted)
    bits: bool = False


#: cupy compiles these as it compiles its own kernels (NVRTC, ``-ftz=true``: float32
#: subnormals flush to zero in both alike; no fast math, so ``a != a`` is true exactly for
#: NaN and division is correctly rounded). ``OPLIB_R(v)`` rounds ``v`` as the result's
#: dtype stores it: nothing for float32, to float16 and back for float16.
_NAN = "__int_as_float(0x7fffffff)"
_WRAP = "(int)((unsigned int)a {} (unsigned int)b)"  # int32 arithmetic wraps
_EXP_NEG_ABS = "OPLIB_R(expf(-fabsf(a)))"
_ONE_PLUS = f"OPLIB_R(1.0f + {_EXP_NEG_ABS})"
_MAX_AB = f"((a != a || b != b) ? {_NAN} : fmaxf(a, b))"
FORMULAS: dict[str, Formula] = {
    # unary
    "neg": Formula("-a", "(int)(0u - (unsigned int)a)"),
    "abs": Formula("fabsf(a)", "a < 0 ? (int)(0u - (unsigned int)a) : a"),
    "relu": Formula("a < 0.0f ? 0.0f : a", "a < 0 ? 0 : a"),  # -0.0 and NaN stay
    "exp": Formula("expf(a)", None),
    "log": Formula("logf(a)", None),
    "sin": Formula("sinf(a)", None),
    "cos": Formula("cosf(a)", None),
    "tanh": Formula("tanhf(a)", None),
    "sqrt": Formula("sqrtf(a)", None),
    # the core's: e = exp(-|x|); where(x >= 0, 1 / (1 + e), e / (1 + e))
    "sigmoid": Formula(
        f"a >= 0.0f ? OPLIB_R(1.0f / {_ONE_PLUS}) : OPLIB_R({_EXP_NEG_ABS} / {_ONE_PLUS})",
        None,
    ),
    # binary
    "add": Formula("a + b", _WRAP.format("+")),
    "sub": Formula("a - b", _WRAP.format("-")),
    "mul": Formula("a * b", _WRAP.format("*")),
    "div": Formula("a / b", None),
    "pow": Formula("powf(a, b)", None),  # cupy's float16 and float32 power
    "maximum": Formula(_MAX_AB[1:-1], "a > b ? a : b"),
    "minimum": Formula(f"(a != a || b != b) ? {_NAN} : fminf(a, b)", "a < b ? a : b"),
    # comparisons
    "eq": Formula("a == b", "a == b", predicate=True),
    "ne": Formula("a != b", "a != b", predicate=True),
    "lt": Formula("a < b", "a < b", predicate=True),
    "le": Formula("a <= b", "a <= b", predicate=True),
    "gt": Formula("a > b", "a > b", predicate=True),
    "ge": Formula("a >= b", "a >= b", predicate=True),
    # bounds: minimum(maximum(a, b), c), the core's clamp (b: min, c: max)
    "clamp": Formula(
        f"({_MAX_AB} != {_MAX_AB} || c != c) ? {_NAN} : fminf({_MAX_AB}, c)",
        "(a > b ? a : b) < c ? (a > b ? a : b) : c",
    ),
    # select: c (the condition's byte) ? a : b, the core's where
    "where": Formula("c ? a : b", "c ? a : b", bits=True),
}


class Op(NamedTuple):
    """A core op the own kernels serve: its formula and where its other operands come from."""

    formula: str  # a key of FORMULAS
    # unary, two arrays, an array and a scalar, an array and two scalars (clamp's bounds),
    # a bool condition choosing between two arrays (where)
    operand: Literal["none", "array", "scalar", "bounds", "select"]
    reverse: bool = False  # the scalar is the left operand (``2.0 - x``)


_UNARY = ("neg", "abs", "relu", "exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt")
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
_WITH_SCALAR = ("add", "sub", "mul", "div", "pow", *_COMPARE)

#: Each served core op (its name with overload and without namespace, as ``CORE_OPS``).
OPS: dict[str, Op] = {
    **{name: Op(name, "none") for name in _UNARY},
    **{name: Op(name, "array") for name in (*_BINARY, *_COMPARE)},
    **{f"{name}.Scalar": Op(name, "scalar") for name in _WITH_SCALAR},
    "rsub.Scalar": Op("sub", "scalar", reverse=True),
    "rdiv.Scalar": Op("div", "scalar", reverse=True),
    "rpow.Scalar": Op("pow", "scalar", reverse=True),
    "clamp": Op("clamp", "bounds"),
    "where": Op("where", "select"),
}

#: The dtypes served, each with its C storage type, 16-byte vector type and lanes per vector.
DTYPES: dict[np.dtype, tuple[str, str, int]] = {
    np.dtype("float32"): ("float", "float4", 4),
    np.dtype("int32"): ("int", "int4", 4),
    # each 32-bit word of a uint4 holds two halves: element 2k in its low 16 bits
    np.dtype("float16"): ("unsigned short", "uint4", 8),
}

_INT32 = np.dtype("int32")
_BOOL = np.dtype("bool")

_launches: Counter[str] = Counter()


def enabled() -> bool:
    """Whether the own kernels are on: ``OPLIB_CUDA_FAST_ELEMENTWISE`` is unset or not one
    of ``0``, ``false``, ``no``, ``off`` (any case), as oplib's other switches read."""
    return runtime.switched_on(SWITCH)


def computes(op: str, dtype: np.dtype) -> bool:
    """Whether an own kernel computes ``op`` on arrays of ``dtype``: a served dtype, and
    not int32 for the ops whose int32 results cupy gives as float64."""
    spec = OPS.get(op)
    if spec is None or dtype not in DTYPES:
        return False
    return dtype != _INT32 or FORMULAS[spec.formula].on_int is not None


class ArrayFacts(NamedTuple):
    """What the choice of kernel reads of an array."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes
    dtype: np.dtype
    ptr: int  # the address of its first element
    device: int


def facts(array: Any) -> ArrayFacts:
    """The :class:`ArrayFacts` of a cupy array."""
    return ArrayFacts(
        tuple(array.shape),
        tuple(array.strides),
        np.dtype(array.dtype),
        int(array.data.ptr),
        int(array.data.device_id),
    )


def c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether an array of ``shape`` and byte ``strides`` lies in C order without gaps
    (the stride of a dimension of length 1 does not matter)."""
    expected = itemsize
    for n, stride in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and stride != expected:
            return False
        expected *= n
    return True


def _plain(x: ArrayFacts, min_elements: int) -> bool:
    """At least ``min_elements`` elements, aligned and C-contiguous."""
    if math.prod(x.shape) < min_elements or x.ptr % ALIGNMENT:
        return False
    return c_contiguous(x.shape, x.strides, x.dtype.itemsize)


#: How the two arrays of a binary op or comparison line up: ``"same"`` shape; one of them
#: repeated along the other's leading dimensions (``x + bias`` with ``bias`` of shape
#: ``x.shape[-k:]``: ``"repeat_y"``; ``bias - x``: ``"repeat_x"``); one of them a single
#: element, a 0-d or size-1 array, met by every element of the other (``x - x.mean()``:
#: ``"one_y"``; ``x.max() - x``: ``"one_x"``); or one of them one value per row of the
#: other, a row being the other's last dimensions, where it has 1s (``x - x.max(-1,
#: keepdims=True)``: ``"rows_y"``; ``x.sum(-1, keepdims=True) - x``: ``"rows_x"``).
Layout = Literal["same", "repeat_x", "repeat_y", "one_x", "one_y", "rows_x", "rows_y"]
LAYOUTS: tuple[Layout, ...] = (
    "same",
    "repeat_x",
    "repeat_y",
    "one_x",
    "one_y",
    "rows_x",
    "rows_y",
)


#: The layouts whose kernels take ``m`` (see :func:`source`).
_WITH_M = ("repeat_x", "repeat_y", "rows_x", "rows_y")


def _repeats(small: ArrayFacts, big: ArrayFacts) -> bool:
    """Whether ``small`` broadcast to ``big``'s shape repeats whole along ``big``'s leading
    dimensions: its shape (less leading 1s) is ``big``'s last dimensions and no more
    dimensions than ``big`` has, it is C-contiguous and 16-byte aligned, and a whole
    number of 16-byte vectors long, not empty (so each of ``big``'s vectors meets one of
    its own)."""
    if len(small.shape) > len(big.shape):
        return False
    shape = small.shape
    while shape and shape[0] == 1:
        shape = shape[1:]
    if not shape or big.shape[len(big.shape) - len(shape) :] != shape:
        return False
    size = math.prod(shape)
    lanes = DTYPES[small.dtype][2]
    return size > 0 and size % lanes == 0 and _plain(small, 0)


def _one(small: ArrayFacts, big: ArrayFacts) -> bool:
    """Whether ``small`` is one element, aligned to its size, whose broadcast to ``big``'s
    shape is ``big``'s shape (no more dimensions than ``big`` has)."""
    return (
        math.prod(small.shape) == 1
        and len(small.shape) <= len(big.shape)
        and small.ptr % small.dtype.itemsize == 0
    )


def _per_row(small: ArrayFacts, big: ArrayFacts) -> bool:
    """Whether ``small`` holds one value per row of ``big``: its shape (with leading 1s up to
    ``big``'s dimensions) is ``big``'s first dimensions and then 1s, at least one of each;
    the row, ``big``'s last dimensions, a whole number of 16-byte vectors long, not empty
    (so each of ``big``'s vectors lies in one row); ``small`` C-contiguous and aligned to
    its element size. (The kernel takes the row's length, ``big.size // small.size``.)"""
    if len(small.shape) > len(big.shape):
        return False
    shape = (1,) * (len(big.shape) - len(small.shape)) + small.shape
    lead = len(shape)
    while lead and shape[lead - 1] == 1:
        lead -= 1
    if lead in (0, len(shape)) or shape[:lead] != big.shape[:lead]:
        return False
    row = math.prod(big.shape[lead:])
    if row == 0 or row % DTYPES[small.dtype][2] or small.ptr % small.dtype.itemsize:
        return False
    return c_contiguous(small.shape, small.strides, small.dtype.itemsize)


#: Each broadcast of one array against a larger one that an own kernel computes, in the
#: order tried: whether ``small`` fits ``big`` so, and the layouts with the small one as
#: ``y`` and as ``x``.
_BROADCASTS: tuple[tuple[Callable[[ArrayFacts, ArrayFacts], bool], Layout, Layout], ...] = (
    (_repeats, "repeat_y", "repeat_x"),
    (_one, "one_y", "one_x"),
    (_per_row, "rows_y", "rows_x"),
)


def layout(
    op: str, x: ArrayFacts, y: ArrayFacts | None = None, *, min_elements: int = MIN_ELEMENTS
) -> Layout | None:
    """How the own kernel computes ``op`` on ``x`` (and, for a binary op or comparison of
    two arrays, ``y``): ``"same"`` (the arrays one shape, or one array), ``"repeat_x"``,
    ``"repeat_y"``, ``"one_x"``, ``"one_y"``, ``"rows_x"`` or ``"rows_y"``
    (:data:`Layout`); ``None`` where it does not (the conditions in the module doc, with
    ``min_elements`` for :data:`MIN_ELEMENTS`). A scalar operand is judged apart, by
    :func:`scalar_operand`, and ``where`` by :func:`select_layout`."""
    spec = OPS.get(op)
    if spec is None or not computes(op, x.dtype) or (y is not None) != (spec.operand == "array"):
        return None
    if spec.operand == "select":
        return None
    least = min_elements
    if y is None:
        return "same" if _plain(x, least) else None
    if y.dtype != x.dtype or y.device != x.device:
        return None
    if y.shape == x.shape:
        return "same" if _plain(x, least) and _plain(y, least) else None
    for fits, small_y, small_x in _BROADCASTS:
        if fits(y, x) and _plain(x, least):
            return small_y
        if fits(x, y) and _plain(y, least):
            return small_x
    return None


def select_layout(
    condition: ArrayFacts, x: ArrayFacts, y: ArrayFacts, *, min_elements: int = MIN_ELEMENTS
) -> Layout | None:
    """How the own kernel computes ``where(condition, x, y)``: ``"same"`` (the three arrays
    one shape), ``"one_x"`` or ``"one_y"`` (that one a single element, the other two one
    shape); ``None`` where it does not: ``condition`` a bool array, C-contiguous and
    16-byte aligned, of at least ``min_elements`` elements, ``x`` and ``y`` of one served
    dtype and its device (every other broadcast goes to cupy)."""
    if condition.dtype != _BOOL or not computes("where", x.dtype) or y.dtype != x.dtype:
        return None
    if not (condition.device == x.device == y.device and _plain(condition, min_elements)):
        return None
    shape = condition.shape
    if x.shape == shape and _plain(x, 0):
        if y.shape == shape:
            return "same" if _plain(y, 0) else None
        return "one_y" if _one(y, condition) else None
    if y.shape == shape and _plain(y, 0) and _one(x, condition):
        return "one_x"
    return None


def qualifies(
    op: str, x: ArrayFacts, y: ArrayFacts | None = None, *, min_elements: int = MIN_ELEMENTS
) -> bool:
    """Whether the own kernel computes ``op`` on ``x`` (and ``y``): :func:`layout` is not
    None."""
    return layout(op, x, y, min_elements=min_elements) is not None


def scalar_operand(dtype: np.dtype, value: object) -> np.generic | None:
    """The 32-bit kernel argument carrying Python scalar ``value`` to an own kernel on
    ``dtype`` arrays, cast as cupy casts a weak scalar (float16: its bits, as ``uint32``);
    ``None`` where the call is not plainly cupy's computation (see the module doc)."""
    if dtype == _INT32:
        if type(value) is int and -(1 << 31) <= value < (1 << 31):
            as_int32: np.generic = np.int32(value)
            return as_int32
        return None
    # (a bool, a numpy scalar, whose dtype counts, or anything else: left to cupy)
    if not isinstance(value, (int, float)) or type(value) not in (int, float):
        return None
    if dtype not in DTYPES:
        return None
    try:
        with np.errstate(over="ignore"):
            cast: np.floating[Any] = dtype.type(value)
    except OverflowError:  # an int beyond float64's range
        return None
    if not math.isfinite(cast) and math.isfinite(value):
        return None
    arg: np.generic = np.uint32(int(cast.view(np.uint16))) if dtype.itemsize == 2 else cast
    return arg


def clamp_bounds(dtype: np.dtype, lo: object, hi: object) -> tuple[np.generic, np.generic] | None:
    """The two kernel arguments carrying ``clamp``'s bounds ``lo`` and ``hi`` to an own
    kernel on ``dtype`` arrays: each as :func:`scalar_operand` casts it, a None bound the
    dtype's identity (-inf or +inf, int32's least or greatest value: ``maximum`` and
    ``minimum`` with it change nothing); ``None`` where both bounds are None (the core's
    kernel raises) or either is not plainly cupy's computation."""
    if lo is None and hi is None:
        return None
    low, high = (-math.inf, math.inf) if dtype != _INT32 else (-(1 << 31), (1 << 31) - 1)
    a = scalar_operand(dtype, low if lo is None else lo)
    b = scalar_operand(dtype, high if hi is None else hi)
    return None if a is None or b is None else (a, b)


def serves(op: str, x: Any, *others: Any) -> bool:
    """Whether ``oplib.ops.oplib.<op>`` on cupy array ``x`` and ``others``, as the op
    takes them (a cupy array, a Python scalar, ``clamp``'s two bounds; ``where``'s
    condition as ``x``, then its two arrays), runs the own kernel: the switch on, and the
    conditions in the module doc (a missing argument counts as None, as the op's defaults
    make it). ``False`` for anything else, where CUDA is unusable
    (:func:`oplib_cuda.runtime.status`), and on a dtype whose own kernels did not compile
    (:func:`failures`)."""
    if op not in OPS or runtime.status() is not None or not enabled():
        return False
    wanted = _OTHERS[OPS[op].operand]
    if len(others) > wanted:
        return False
    others += (None,) * (wanted - len(others))
    return _plan(op, x, others, runtime.cupy().ndarray, MIN_ELEMENTS) is not None


def _plan(
    op: str, x: Any, others: tuple[Any, ...], ndarray: Any, min_elements: int
) -> tuple[tuple[Any, ...], Layout] | None:
    """What the own kernel of ``op`` takes beside ``x`` (the other array, the scalars'
    kernel arguments, or nothing) and its layout, for a call on ``x`` and ``others`` (the
    op's other arguments); ``None`` where cupy's function computes it: the module doc's
    conditions, with ``min_elements`` for :data:`MIN_ELEMENTS`, and a dtype whose module
    compiled (:func:`failures`)."""
    if type(x) is not ndarray:
        return None
    operand = OPS[op].operand
    if operand == "select":  # x: the condition
        a, b = others
        if type(a) is not ndarray or type(b) is not ndarray or np.dtype(a.dtype) in _failed:
            return None
        how = select_layout(facts(x), facts(a), facts(b), min_elements=min_elements)
        return None if how is None else ((a, b), how)
    dtype = np.dtype(x.dtype)
    if dtype in _failed:
        return None
    if operand == "array":
        (other,) = others
        if type(other) is not ndarray:
            return None
        how = layout(op, facts(x), facts(other), min_elements=min_elements)
        return None if how is None else ((other,), how)
    second: tuple[Any, ...] | None = ()
    if operand == "scalar":
        s = scalar_operand(dtype, *others)
        second = None if s is None else (s,)
    elif operand == "bounds":
        second = clamp_bounds(dtype, *others)
    if second is None or not qualifies(op, facts(x), min_elements=min_elements):
        return None
    return second, "same"


def launches() -> dict[str, int]:
    """How many times each own kernel (``"add float32"``, ``"lt.Scalar int32"`` ...) ran in
    this process."""
    return dict(_launches)


def _elements(vector: str, scalar: str) -> list[str]:
    """The C expressions of the elements of 16-byte vector variable ``vector``, in order."""
    if scalar == "unsigned short":
        return [
            f"(unsigned short)({vector}.{c}{part})"
            for c in "xyzw"
            for part in (" & 0xffffu", " >> 16")
        ]
    return [f"{vector}.{c}" for c in "xyzw"]


def _packed(calls: list[str], scalar: str, vector: str, predicate: bool) -> tuple[str, list[str]]:
    """The result vector's C type and the statements setting ``r`` from the lanes' values
    (``vector``: the inputs' 16-byte type, the result's too unless ``predicate``)."""
    if predicate:  # one byte per lane: 4 lanes in a 32-bit word, 8 in two
        words = [
            " | ".join(f"((unsigned int){c} << {8 * k})" for k, c in enumerate(calls[i : i + 4]))
            for i in range(0, len(calls), 4)
        ]
        if len(words) == 1:
            return "unsigned int", [f"r = {words[0]};"]
        return "uint2", [f"r.x = {words[0]};", f"r.y = {words[1]};"]
    if scalar == "unsigned short":
        return vector, [
            f"r.{c} = (unsigned int){calls[2 * k]} | ((unsigned int){calls[2 * k + 1]} << 16);"
            for k, c in enumerate("xyzw")
        ]
    return vector, [f"r.{c} = {call};" for c, call in zip("xyzw", calls, strict=True)]


def kernel_name(op: str, dtype: np.dtype, how: Layout = "same") -> str:
    """The name of the kernel for ``op`` on ``dtype`` arrays laid out ``how``."""
    suffix = "" if how == "same" else f"_{how}"
    return f"oplib_{op.replace('.', '_')}_{np.dtype(dtype).name}{suffix}"


def source(op: str, dtype: np.dtype, how: Layout = "same") -> tuple[str, str]:
    """The CUDA source of the kernel for ``op`` on ``dtype`` arrays laid out ``how`` (a
    :data:`Layout`; ``"same"`` for unary and scalar ops) and its name.

    ``name(x, [y | s,] z, n)`` writes ``z[i] = op(x[i][, y[i] | s])`` for ``i < n``
    (``op(s, x[i])`` for the reversed scalar ops): 16-byte vector loads over the first
    ``n // lanes`` vectors in a grid-stride loop, stores of the matching width (a bool per
    lane for comparisons), then the last ``n % lanes`` elements one by one. A scalar
    operand ``s`` comes as a 32-bit value (float16: its bits in the low half). The repeat
    layouts take ``m`` too, the repeated array's size (a whole number of vectors, not 0),
    and read its element ``i % m``: ``name(x, y, z, n, m)``. The one-element layouts read
    that array's element once per thread: ``z[i] = op(x[0], y[i])`` (``"one_x"``, ``n``
    the size of ``y``) or ``op(x[i], y[0])``. The row layouts take ``m``, the length of a
    row (a whole number of vectors, not 0), and read the smaller array's element
    ``i / m``."""
    dtype = np.dtype(dtype)
    spec, scalar = OPS[op], DTYPES[dtype][0]
    if how not in _LAYOUTS_OF[spec.operand]:
        raise ValueError(f"{op} has no {how} layout: it takes {_LAYOUTS_OF[spec.operand]}")
    formula = FORMULAS[spec.formula]
    vector = DTYPES[dtype][1]
    result = "bool" if formula.predicate else scalar
    name = kernel_name(op, dtype, how)
    operands = ("a", "b", "c")[: 1 + _OTHERS[spec.operand]]
    if formula.bits:  # the condition's byte first, then the stored values chosen among
        head = f"""#define OPLIB_R(v) (v)

__device__ __forceinline__ {result} oplib_op(unsigned char c, {scalar} a, {scalar} b) {{
    return {formula.on_float if scalar != "int" else formula.on_int};
}}
"""
    elif scalar == "unsigned short":  # float16: through float
        in_float = ", ".join(f"float {v}" for v in operands)
        in_half = ", ".join(f"unsigned short {v}" for v in operands)
        converted = ", ".join(f"__half2float(__ushort_as_half({v}))" for v in operands)
        done = "r" if formula.predicate else "__half_as_ushort(__float2half_rn(r))"
        head = f"""#include <cuda_fp16.h>

#define OPLIB_R(v) __half2float(__float2half_rn(v))

__device__ __forceinline__ {"bool" if formula.predicate else "float"} oplib_f({in_float}) {{
    return {formula.on_float};
}}

__device__ __forceinline__ {result} oplib_op({in_half}) {{
    const auto r = oplib_f({converted});
    return {done};
}}
"""
    else:
        expr = formula.on_float if scalar == "float" else formula.on_int
        params = ", ".join(f"{scalar} {v}" for v in operands)
        head = f"""#define OPLIB_R(v) (v)

__device__ __forceinline__ {result} oplib_op({params}) {{
    return {expr};
}}
"""
    lanes = DTYPES[dtype][2]
    # each operand of oplib_op: a vector loaded per step (its lanes, and its element i for
    # the tail) or one value for every element (s)
    setup: list[str] = []
    loads: list[str] = []

    def loaded(array: str, at: str = "i", element: str = "i") -> tuple[list[str], str]:
        setup.append(f"const {vector}* {array}v = reinterpret_cast<const {vector}*>({array});")
        loads.append(f"const {vector} {array}_i = {array}v[{at}];")
        return _elements(f"{array}_i", scalar), f"{array}[{element}]"

    def one(value: str, name: str = "s") -> tuple[list[str], str]:
        setup.append(f"const {scalar} {name} = {value};")
        return [name] * lanes, name

    advance: list[str] = []  # statements ending each step of the vector loop
    if spec.operand == "none":
        args = [loaded("x")]
    elif spec.operand == "scalar":
        args = [loaded("x"), one(f"({scalar})s_arg")]
        if spec.reverse:
            args.reverse()
    elif spec.operand == "bounds":
        args = [loaded("x"), one(f"({scalar})lo_arg", "lo"), one(f"({scalar})hi_arg", "hi")]
    elif spec.operand == "select":
        # the condition's bytes, a byte a lane: 4 in a 32-bit word, 8 in two
        words = "unsigned int" if lanes == 4 else "uint2"
        setup.append(f"const {words}* cv = reinterpret_cast<const {words}*>(c);")
        loads.append(f"const {words} c_i = cv[i];")
        parts = ["c_i"] if lanes == 4 else ["c_i.x", "c_i.y"]
        condition = [f"(unsigned char)({w} >> {8 * k})" for w in parts for k in range(4)], "c[i]"
        x_arg = one("x[0]", "s_x") if how == "one_x" else loaded("x")
        y_arg = one("y[0]", "s_y") if how == "one_y" else loaded("y")
        args = [condition, x_arg, y_arg]
    elif how == "one_x":  # x is one element: y is the large one
        args = [one("x[0]"), loaded("y")]
    elif how == "one_y":
        args = [loaded("x"), one("y[0]")]
    elif how in ("rows_x", "rows_y"):
        # the row of the step's vector, k, kept as i strides with o, the vector's place in
        # its row: one division per thread, none per step
        setup += [
            f"const long long mv = m / {lanes};",
            "const long long step_k = stride / mv, step_o = stride % mv;",
            "long long k = start / mv, o = start % mv;",
        ]
        advance = ["o += step_o;", "k += step_k;", "if (o >= mv) { o -= mv; ++k; }"]
        small = "x" if how == "rows_x" else "y"
        loads.append(f"const {scalar} s = {small}[k];")
        per_row = (["s"] * lanes, f"{small}[i / m]")
        args = [per_row, loaded("y")] if how == "rows_x" else [loaded("x"), per_row]
    else:
        if how != "same":
            # one array repeats: its vector i % mv, kept in j as i strides (a 64-bit % per
            # step would cost more than the step's traffic), its element i % m in the tail
            setup += [
                f"const long long mv = m / {lanes};",
                "const long long step = stride % mv;",
                "long long j = start % mv;",
            ]
            advance = ["j += step;", "if (j >= mv) j -= mv;"]
        repeat = ("j", "i % m")
        args = [
            loaded("x", *repeat) if how == "repeat_x" else loaded("x"),
            loaded("y", *repeat) if how == "repeat_y" else loaded("y"),
        ]
    calls = [f"oplib_op({', '.join(lane)})" for lane in zip(*(o[0] for o in args), strict=True)]
    tail = f"oplib_op({', '.join(o[1] for o in args)})"
    out_vector, packing = _packed(calls, scalar, vector, formula.predicate)
    arg = "unsigned int" if scalar == "unsigned short" else scalar  # a scalar's 32 bits
    first = f"const {scalar}* __restrict__ x, "
    if spec.operand == "select":
        first = f"const unsigned char* __restrict__ c, {first}"
    second = {
        "none": "",
        "array": f"const {scalar}* __restrict__ y, ",
        "scalar": f"const {arg} s_arg, ",
        "bounds": f"const {arg} lo_arg, const {arg} hi_arg, ",
        "select": f"const {scalar}* __restrict__ y, ",
    }[spec.operand]
    m_param = ", const long long m" if how in _WITH_M else ""
    indent = "\n    "
    kernel = f"""
extern "C" __global__ void {name}({first}{second}{result}* __restrict__ z,
                                  const long long n{m_param}) {{
    const long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long vectors = n / {lanes};
    {indent.join(setup)}
    {out_vector}* zv = reinterpret_cast<{out_vector}*>(z);
    for (long long i = start; i < vectors; i += stride) {{
        {(indent + "    ").join(loads)}
        {out_vector} r;
        {(indent + "    ").join(packing)}
        zv[i] = r;{"".join(indent + "    " + a for a in advance)}
    }}
    for (long long i = vectors * {lanes} + start; i < n; i += stride) {{
        z[i] = {tail};
    }}
}}
"""
    return head + kernel, name


def kernels_of(dtype: np.dtype) -> list[tuple[str, Layout]]:
    """Every (op, layout) the own kernels compute on ``dtype`` arrays, in one order."""
    dtype = np.dtype(dtype)
    return [
        (op, how)
        for op, spec in OPS.items()
        if computes(op, dtype)
        for how in _LAYOUTS_OF[spec.operand]
    ]


#: How many arguments each kind of op (:data:`Op`'s ``operand``) takes after its first.
_OTHERS: dict[str, int] = {"none": 0, "array": 1, "scalar": 1, "bounds": 2, "select": 2}

#: The layouts of each kind of op.
_LAYOUTS_OF: dict[str, tuple[Layout, ...]] = {
    "none": ("same",),
    "array": LAYOUTS,
    "scalar": ("same",),
    "bounds": ("same",),
    "select": ("same", "one_x", "one_y"),
}


def module_source(dtype: np.dtype) -> str:
    """The CUDA source of every own kernel on ``dtype`` (:func:`kernels_of`), one module:
    each kernel's helpers in a namespace of its own, its ``extern "C"`` name unique."""
    parts = ["#include <cuda_fp16.h>"]
    for op, how in kernels_of(dtype):
        code, name = source(op, dtype, how)
        code = code.replace("#include <cuda_fp16.h>", "")
        parts.append(f"namespace ns_{name} {{\n#undef OPLIB_R\n{code}\n}}  // {name}")
    return "\n".join(parts)


class KernelCompileWarning(RuntimeWarning):
    """oplib-cuda's own elementwise kernels for a dtype did not compile or load on this
    machine (cupy's error in the message); its calls go to cupy's functions instead."""


_failed: dict[np.dtype, str] = {}  # dtype: cupy's error, once its module failed


def failures() -> dict[str, str]:
    """The dtypes (``"float16"`` ...) whose own kernels did not compile or load in this
    process, each with cupy's error; calls on them go to cupy's functions."""
    return {dtype.name: why for dtype, why in _failed.items()}


@functools.cache
def _module(dtype: np.dtype) -> Any:
    # one compile per dtype (NVRTC's cost is mostly per call: headers), cached by cupy
    return runtime.cupy().RawModule(code=module_source(dtype))


@functools.cache
def _raw_kernel(op: str, dtype: np.dtype, how: Layout) -> Any:
    return _module(dtype).get_function(kernel_name(op, dtype, how))  # compiled on first use


def _compile_errors() -> tuple[type[BaseException], ...]:
    """What cupy raises for a module NVRTC rejects, and for one the driver cannot load (a
    driver older than the NVRTC that compiled it)."""
    cp = runtime.cupy()
    return (cp.cuda.compiler.CompileException, cp.cuda.driver.CUDADriverError)


def _kernel(op: str, dtype: np.dtype, how: Layout) -> Any:
    """The compiled kernel, or ``None`` where ``dtype``'s module did not compile or load:
    then one :class:`KernelCompileWarning` per dtype, and no second attempt (a compile
    costs seconds)."""
    if dtype in _failed:
        return None
    try:
        return _raw_kernel(op, dtype, how)
    except _compile_errors() as e:
        _failed[dtype] = why = f"{type(e).__name__}: {e}"
        warnings.warn(
            f"oplib-cuda's own elementwise kernels for {dtype.name} did not compile or load "
            f"({why[:2000]}); {dtype.name} calls go to cupy's functions, which compute the "
            f"same at about 60% of the bandwidth. {SWITCH}=0 turns the own kernels off.",
            KernelCompileWarning,
            stacklevel=2,
        )
        return None


@functools.cache
def _blocks_most(device: int) -> int:
    sms = int(runtime.cupy().cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])
    return sms * _BLOCKS_PER_SM


def _launch(op: str, x: Any, second: tuple[Any, ...], how: Layout = "same") -> Any:
    """``op`` on ``x`` (and ``second``: the other array, the scalars' kernel arguments, or
    nothing; for ``where``, ``x`` is the condition and ``second`` the two arrays) by the own
    kernel for layout ``how``, on the current device (the caller's: the
    plugin's kernels make the arrays' device current); ``None`` where that kernel did not
    compile (:func:`failures`)."""
    select = OPS[op].operand == "select"  # x: the condition, second: the two arrays
    dtype = np.dtype((second[0] if select else x).dtype)
    kernel = _kernel(op, dtype, how)
    if kernel is None:
        return None
    # the result's shape: the larger array's (x the small one: "repeat_x" ...)
    big = second[0] if how.endswith("_x") and not select else x
    n = int(big.size)
    predicate = FORMULAS[OPS[op].formula].predicate
    z = runtime.cupy().empty(big.shape, dtype=_BOOL if predicate else dtype)
    vectors = n // DTYPES[dtype][2]
    blocks = max(1, min(_blocks_most(int(x.data.device_id)), -(-vectors // _THREADS)))
    tail: tuple[Any, ...] = (np.int64(n),)
    if how in _WITH_M:  # the repeated array's size, or the length of a row
        small = int((x if big is not x else second[0]).size)
        tail += (np.int64(small if how.startswith("repeat") else n // small),)
    kernel((blocks,), (_THREADS,), (x, *second, z, *tail))
    _launches[f"{op} {dtype.name}" + ("" if how == "same" else f" {how}")] += 1
    return z


def fast_kernel(
    name: str, fallback: Callable[..., Any], *, min_elements: int = MIN_ELEMENTS
) -> Callable[..., Any]:
    """The cuda kernel of core op ``name``: ``fallback`` (cupy's) itself when ``name`` is
    not one of :data:`OPS` or the switch is off; else a kernel that runs the own kernel
    where the module doc's conditions hold (at least ``min_elements`` elements) and
    ``fallback`` for every other call, and where the own kernel did not compile
    (:func:`failures`). Calls on arrays of fewer than ``min_elements`` (both arrays, for
    a binary op) go to ``fallback`` with no Python frame between
    (``oplib_core.backends.by_size``): the small calls are the launch-bound ones. The
    plugin uses :data:`MIN_ELEMENTS`; ``bench/gpu.py`` passes 0 to time the own kernels
    against cupy's at every size."""
    spec = OPS.get(name)
    if spec is None or not enabled():
        return fallback
    if type(min_elements) is not int or min_elements < 0:
        raise ValueError(f"min_elements must be an int >= 0, got {min_elements!r}")
    least = min_elements
    # what the fast path would call in place of ``fallback`` (cupy's function itself)
    other_calls: Callable[..., Any] = getattr(fallback, "fast_entry", fallback)

    @functools.cache
    def ndarray() -> Any:
        return runtime.cupy().ndarray

    def own(self: Any, *others: Any) -> Any:
        """The own kernel's result, or ``None`` where cupy's function computes the call."""
        plan = _plan(name, self, others, ndarray(), least)
        return None if plan is None else _launch(name, self, *plan)

    def unary(self: Any) -> Any:
        z = own(self)
        return other_calls(self) if z is None else z

    def binary(self: Any, other: Any) -> Any:
        z = own(self, other)
        return other_calls(self, other) if z is None else z

    def bounded(self: Any, lo: Any = None, hi: Any = None) -> Any:
        z = own(self, lo, hi)
        return other_calls(self, lo, hi) if z is None else z

    def select(condition: Any, self: Any, other: Any) -> Any:
        z = own(condition, self, other)
        return other_calls(condition, self, other) if z is None else z

    forms: dict[str, Callable[..., Any]] = {"none": unary, "bounds": bounded, "select": select}
    large = forms.get(spec.operand, binary)
    large.__doc__ = fallback.__doc__
    return by_size(
        other_calls,
        large,
        least,
        name=getattr(fallback, "__name__", name),
        arguments=2 if spec.operand == "array" else 1,  # (bias - x: the large one second)
    )
