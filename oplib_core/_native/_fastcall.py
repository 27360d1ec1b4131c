"""The fast path of a native call, kept in one room: calls whose arguments are numpy arrays
and plain scalars (``Tensor``, ``int``, ``SymInt``, ``bool``, ``float``, ``Scalar``).

Instead of one ctypes object per argument and per ``DLTensor`` (each costs hundreds of ns),
the call's ``oplib_arg`` array and ``DLTensor``s are written into one buffer with a
precompiled ``struct`` format, and the C function is called through a prototype taking
plain addresses. The plain equivalent, used for every other call, is::

    cargs, first = plan.fill(values, keep)                 # _marshal.CallPlan.fill
    metas = kernel._metas(values, cargs)
    outs, couts = allocate(plan, first, metas, keep)       # _marshal.allocate
    plan.check(kernel.fn(cargs, n, couts, nouts, byref(err)), err)

``tests/test_native*.py`` run under both (``OPLIB_DISPATCH_SLOW=1`` turns this path off).
"""

from __future__ import annotations

import ctypes as C
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dispatch import SLOW
from .._schema import BaseType
from . import _abi as A
from ._marshal import CallPlan, layout, numpy_data

__all__ = ["MISS", "FastCall", "fast_call_for"]

MISS: Any = object()

_ARG = {"t": "iiQ8x", "i": "iiq8x", "f": "iid8x"}  # oplib_arg: is_none, reserved, union
_DL = "QiiiBBHQQQ"  # DLTensor: data, device, ndim, dtype, shape, strides, byte_offset
_ARG_SIZE = C.sizeof(A.Arg)
_DL_SIZE = C.sizeof(A.DLTensor)
_KINDS = {
    "Tensor": "t",
    "int": "i",
    "SymInt": "i",
    "bool": "i",
    "float": "f",
    "Scalar": "f",
}

_ONE_DL = struct.Struct("=" + _DL)
RawKernel = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int64, C.c_void_p, C.c_int64, C.c_void_p)
_ndarray = np.ndarray
_addressof = C.addressof
assert struct.calcsize("=" + _ARG["t"]) == _ARG_SIZE and struct.calcsize("=" + _DL) == _DL_SIZE


class FastCall:
    """A kernel's fast path: ``__call__(values, metas)`` returns its result, or ``MISS``
    when an argument is not a numpy array or a plain scalar."""

    __slots__ = ("args_view", "buf", "err_at", "fn", "head", "kinds", "nargs", "nouts", "ntensors")

    def __init__(self, plan: CallPlan, address: int) -> None:
        self.kinds = tuple(_KINDS[a.type.name] for a in plan.args)  # type: ignore[union-attr]
        self.nargs = plan.nargs
        self.nouts = plan.nouts
        self.ntensors = self.kinds.count("t")
        args = "".join(_ARG[k] for k in self.kinds)
        self.head = struct.Struct("=" + args + _DL * self.ntensors)
        # the buffer: oplib_arg[nargs], the inputs' DLTensors, the outputs', oplib_error
        self.err_at = self.head.size + _DL_SIZE * self.nouts
        self.buf = C.c_char * (self.err_at + C.sizeof(A.Error))
        self.args_view = A.Arg * self.nargs
        self.fn = RawKernel(address)

    def __call__(
        self,
        values: list[Any],
        metas: Callable[[list[Any], Any], list[tuple[tuple[int, ...], np.dtype]]],
        plan: CallPlan,
    ) -> Any:
        buf = self.buf()
        base = _addressof(buf)
        head: list[Any] = []
        dls: list[Any] = []
        dl_at = base + self.nargs * _ARG_SIZE
        for kind, v in zip(self.kinds, values, strict=True):
            if kind == "t":
                if type(v) is not _ndarray:
                    return MISS
                lay = layout((v.shape, v.strides, v.dtype))
                head += (0, 0, dl_at)
                dls += (numpy_data(v), A.KDL_CPU, 0, lay[3], lay[6], lay[7], 1, lay[4], lay[5], 0)
                dl_at += _DL_SIZE
            else:
                t = type(v)
                if t is not int and t is not bool and (kind == "i" or t is not float):
                    return MISS  # numpy scalars, floats for ints, ...: the plain path
                head += (0, 0, v)
        try:
            self.head.pack_into(buf, 0, *head, *dls)
        except struct.error:  # an int beyond 64 bits: the plain path says what it does
            return MISS
        outs: list[Any] = []
        if self.nouts:
            at = self.head.size
            for shape, dtype in metas(values, self.args_view.from_buffer(buf)):
                out = np.empty(shape, dtype)
                lay = layout((out.shape, out.strides, out.dtype))
                outs.append(out)
                _ONE_DL.pack_into(
                    buf, at, numpy_data(out), A.KDL_CPU, 0, lay[3], lay[6], lay[7], 1, lay[4],
                    lay[5], 0,
                )  # fmt: skip
                at += _DL_SIZE
        err_at = self.err_at
        status = self.fn(base, self.nargs, base + self.head.size, self.nouts, base + err_at)
        if status:
            plan.check(status, A.Error.from_buffer(buf, err_at))
        if len(outs) == 1:
            return outs[0]
        return tuple(outs) if outs else None


def fast_call_for(plan: CallPlan, address: int) -> FastCall | None:
    """The fast path of a kernel, or None when its schema has other argument types (or
    ``OPLIB_DISPATCH_SLOW=1``)."""
    if SLOW:
        return None
    for a in plan.args:
        if not isinstance(a.type, BaseType) or a.type.name not in _KINDS:
            return None
    return FastCall(plan, address)
