"""oplib-cuda's own kernels for binary elementwise core ops on large contiguous arrays.

cupy's generated elementwise kernels move about 60% of an H200's copy bandwidth; a plain
``cupy.RawKernel`` that reads and writes 16 bytes at a time in a grid-stride loop moves
about 96% (issue 30). So ``add``, ``sub``, ``mul``, ``maximum`` and ``minimum`` get such a
kernel, one per (op, dtype) from one template, for the calls where it is plainly the same
computation as cupy's:

- both arrays C-contiguous, of the same shape (no broadcasting) and on the same device;
- the same dtype, float32, float16 or int32 (the result has that dtype, as cupy's has);
- both data pointers 16-byte aligned (so ``x[1:]`` of a float32 array is not);
- at least :data:`MIN_ELEMENTS` elements (below that a launch costs more than it saves).

Every other call goes to cupy's function unchanged. The arithmetic is cupy's own: float32
and int32 as C does it (int32 wraps in two's complement), float16 converted to float32,
computed there and rounded back to float16 to nearest even (cupy's ``float16`` type does
the same); ``maximum`` and ``minimum`` give NaN where either input is NaN, else CUDA's
``fmaxf``/``fminf`` (cupy's formula). ``OPLIB_CUDA_FAST_ELEMENTWISE=0`` (or ``false``,
``no``, ``off``) turns the kernels off; it is read when each op first runs.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from oplib_cuda import runtime

__all__ = [
    "ALIGNMENT",
    "DTYPES",
    "MIN_ELEMENTS",
    "OPS",
    "SWITCH",
    "ArrayFacts",
    "c_contiguous",
    "enabled",
    "facts",
    "fast_kernel",
    "launches",
    "qualifies",
    "serves",
    "source",
]

#: The environment variable that turns the kernels off (``0``, ``false``, ``no``, ``off``).
SWITCH = "OPLIB_CUDA_FAST_ELEMENTWISE"

#: Fewest elements a call needs for the own kernel.
MIN_ELEMENTS = 1 << 20

#: Bytes each thread reads per array per step; the data pointers must be aligned to it.
ALIGNMENT = 16

_THREADS = 256  # per block
_BLOCKS_PER_SM = 8  # issue 30's reference kernel: 132 SMs x 8 blocks x 256 threads, 96%

#: The expression of each op, on floats (``a``, ``b`` are ``float``) and on ints. cupy
#: compiles these as it compiles its own kernels (NVRTC, ``-ftz=true``: float32 subnormals
#: flush to zero in both alike; no fast-math, so ``a != a`` is true exactly for NaN).
_NAN = "__int_as_float(0x7fffffff)"
OPS: dict[str, tuple[str, str]] = {
    "add": ("a + b", "(int)((unsigned int)a + (unsigned int)b)"),
    "sub": ("a - b", "(int)((unsigned int)a - (unsigned int)b)"),
    "mul": ("a * b", "(int)((unsigned int)a * (unsigned int)b)"),
    "maximum": (f"(a != a || b != b) ? {_NAN} : fmaxf(a, b)", "a > b ? a : b"),
    "minimum": (f"(a != a || b != b) ? {_NAN} : fminf(a, b)", "a < b ? a : b"),
}

#: The dtypes served, each with its C storage type, 16-byte vector type and lanes per vector.
DTYPES: dict[np.dtype, tuple[str, str, int]] = {
    np.dtype("float32"): ("float", "float4", 4),
    np.dtype("int32"): ("int", "int4", 4),
    # each 32-bit word of a uint4 holds two halves: element 2k in its low 16 bits
    np.dtype("float16"): ("unsigned short", "uint4", 8),
}

_launches: Counter[str] = Counter()


def enabled() -> bool:
    """Whether the own kernels are on: ``OPLIB_CUDA_FAST_ELEMENTWISE`` is unset or not one
    of ``0``, ``false``, ``no``, ``off`` (any case), as oplib's other switches read."""
    return runtime.switched_on(SWITCH)


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


def qualifies(op: str, x: ArrayFacts, y: ArrayFacts) -> bool:
    """Whether the own kernel computes ``op(x, y)``: the conditions in the module doc."""
    if op not in OPS or x.dtype not in DTYPES or y.dtype != x.dtype:
        return False
    if x.shape != y.shape or x.device != y.device:
        return False
    if int(np.prod(x.shape, dtype=np.int64)) < MIN_ELEMENTS:
        return False
    if x.ptr % ALIGNMENT or y.ptr % ALIGNMENT:
        return False
    size = x.dtype.itemsize
    return c_contiguous(x.shape, x.strides, size) and c_contiguous(y.shape, y.strides, size)


def serves(op: str, x: Any, y: Any) -> bool:
    """Whether ``oplib.ops.oplib.<op>(x, y)`` on cupy arrays ``x``, ``y`` runs the own
    kernel (the switch on, and :func:`qualifies`); ``False`` for anything else, and where
    cupy cannot be imported."""
    if runtime.cupy_import_error() is not None:
        return False
    ndarray = runtime.cupy().ndarray
    if type(x) is not ndarray or type(y) is not ndarray:
        return False
    return enabled() and qualifies(op, facts(x), facts(y))


def launches() -> dict[str, int]:
    """How many times each own kernel (``"add float32"`` ...) ran in this process."""
    return dict(_launches)


def source(op: str, dtype: np.dtype) -> tuple[str, str]:
    """The CUDA source of the kernel for ``op`` on ``dtype`` and its name.

    ``name(x, y, z, n)`` writes ``z[i] = op(x[i], y[i])`` for ``i < n``: 16-byte vector
    loads and stores over the first ``n // lanes`` vectors in a grid-stride loop, then the
    last ``n % lanes`` elements one by one."""
    scalar, vector, lanes = DTYPES[np.dtype(dtype)]
    on_float, on_int = OPS[op]
    name = f"oplib_{op}_{np.dtype(dtype).name}"
    if scalar == "unsigned short":  # float16: through float, rounded to nearest even
        head = f"""#include <cuda_fp16.h>

__device__ __forceinline__ float oplib_f(float a, float b) {{ return {on_float}; }}

__device__ __forceinline__ unsigned short oplib_op(unsigned short a, unsigned short b) {{
    const float r = oplib_f(__half2float(__ushort_as_half(a)), __half2float(__ushort_as_half(b)));
    return __half_as_ushort(__float2half_rn(r));
}}

__device__ __forceinline__ unsigned int oplib_lane(unsigned int a, unsigned int b) {{
    const unsigned int lo = oplib_op((unsigned short)(a & 0xffffu), (unsigned short)(b & 0xffffu));
    const unsigned int hi = oplib_op((unsigned short)(a >> 16), (unsigned short)(b >> 16));
    return lo | (hi << 16);
}}
"""
    else:
        expr = on_float if scalar == "float" else on_int
        head = f"""__device__ __forceinline__ {scalar} oplib_op({scalar} a, {scalar} b) {{
    return {expr};
}}

__device__ __forceinline__ {scalar} oplib_lane({scalar} a, {scalar} b) {{
    return oplib_op(a, b);
}}
"""
    body = f"""
extern "C" __global__ void {name}(const {scalar}* __restrict__ x,
                                  const {scalar}* __restrict__ y,
                                  {scalar}* __restrict__ z, const long long n) {{
    const long long start = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long vectors = n / {lanes};
    const {vector}* xv = reinterpret_cast<const {vector}*>(x);
    const {vector}* yv = reinterpret_cast<const {vector}*>(y);
    {vector}* zv = reinterpret_cast<{vector}*>(z);
    for (long long i = start; i < vectors; i += stride) {{
        const {vector} p = xv[i];
        const {vector} q = yv[i];
        {vector} r;
        r.x = oplib_lane(p.x, q.x);
        r.y = oplib_lane(p.y, q.y);
        r.z = oplib_lane(p.z, q.z);
        r.w = oplib_lane(p.w, q.w);
        zv[i] = r;
    }}
    for (long long i = vectors * {lanes} + start; i < n; i += stride) {{
        z[i] = oplib_op(x[i], y[i]);
    }}
}}
"""
    return head + body, name


@functools.cache
def _raw_kernel(op: str, dtype: np.dtype) -> Any:
    code, name = source(op, dtype)
    return runtime.cupy().RawKernel(code, name)  # compiled on first launch, per device


@functools.cache
def _blocks_most(device: int) -> int:
    sms = int(runtime.cupy().cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])
    return sms * _BLOCKS_PER_SM


def _launch(op: str, x: Any, y: Any) -> Any:
    """``op(x, y)`` by the own kernel, on the current device (the caller's: the plugin's
    kernels make the arrays' device current)."""
    cp = runtime.cupy()
    dtype = np.dtype(x.dtype)
    n = int(x.size)
    z = cp.empty(x.shape, dtype=dtype)
    vectors = n // DTYPES[dtype][2]
    blocks = max(1, min(_blocks_most(int(x.data.device_id)), -(-vectors // _THREADS)))
    _raw_kernel(op, dtype)((blocks,), (_THREADS,), (x, y, z, np.int64(n)))
    _launches[f"{op} {dtype.name}"] += 1
    return z


def fast_kernel(name: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The cuda kernel of core op ``name``: ``fallback`` (cupy's) itself when ``name`` is
    not one of :data:`OPS` or the switch is off; else a kernel that runs the own kernel
    where :func:`qualifies` and ``fallback`` for every other call."""
    if name not in OPS or not enabled():
        return fallback
    ndarray: Any = None
    # what the fast path would call in place of ``fallback`` (cupy's function itself)
    other_calls: Callable[..., Any] = getattr(fallback, "fast_entry", fallback)

    def kernel(self: Any, other: Any) -> Any:
        nonlocal ndarray
        if self.size >= MIN_ELEMENTS:  # one attribute read for the small calls
            if ndarray is None:
                ndarray = runtime.cupy().ndarray
            if (
                type(self) is ndarray
                and type(other) is ndarray
                and qualifies(name, facts(self), facts(other))
            ):
                return _launch(name, self, other)
        return other_calls(self, other)

    kernel.__name__ = kernel.__qualname__ = getattr(fallback, "__name__", name)
    kernel.__doc__ = fallback.__doc__
    return kernel
