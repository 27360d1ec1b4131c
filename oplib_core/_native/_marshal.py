"""One call of a native function: arguments to ``oplib_arg``s and DLPack views (no copies),
outputs allocated by oplib from a shape function or the op's fake kernel, the status turned
into :class:`NativeKernelError`.

A :class:`CallPlan` reads a schema once (a filler per argument); each call builds its own
ctypes buffers, so calls from many threads share nothing. ctypes releases the GIL for the
C call itself.
"""

from __future__ import annotations

import ctypes as C
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._device import Device
from .._schema import Argument, BaseType, FunctionSchema, ListType, OptionalType, SchemaType
from ..backends import TABLE
from ..errors import InvalidArgumentError, NoKernelError
from ..fake import FakeArray
from . import _abi as A
from ._classes import is_class_type
from ._dtypes import from_dl, to_dl
from ._errors import NativeKernelError

__all__ = ["CallPlan", "UnsupportedSchemaError"]

_capsule_pointer = C.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = C.c_void_p
_capsule_pointer.argtypes = (C.py_object, C.c_char_p)

_CPU_DEVICE = A.DLDevice(A.KDL_CPU, 0)
_DL_DEVICE_TYPES = {"cpu": A.KDL_CPU, "cuda": 2}
_ndarray = np.ndarray
_addressof = C.addressof
_I64 = C.c_int64
_DLTensor = A.DLTensor


class UnsupportedSchemaError(ValueError):
    """A schema a native function cannot have (the loader reports it naming the library)."""


# A filler writes one value into an Arg; ``keep`` holds what must outlive the call; it
# returns the array when the value is a Tensor (the first one decides the device).
Filler = Callable[[A.Arg, Any, list[Any]], Any]


def _numpy_data_offset() -> int | None:
    """Where an ndarray keeps its data pointer: numpy's public ``PyArrayObject_fields``
    starts with the object header and then ``char *data`` (what ``PyArray_DATA`` reads).
    Reading it costs ~0.1 us where ``__array_interface__`` costs over 1 us; it is checked
    here against ``__array_interface__`` and not used when they disagree."""
    offset = object.__basicsize__
    probe = np.arange(3.0)[1:]
    try:
        ok = (
            C.c_void_p.from_address(id(probe) + offset).value
            == (probe.__array_interface__["data"][0])
        )
    except (ValueError, OSError):  # pragma: no cover -- an exotic interpreter
        return None
    return offset if ok else None


DATA_OFFSET = _numpy_data_offset()
_void_at = C.c_void_p.from_address


def _address_space() -> memoryview | None:
    """The process's memory as native pointers: ``WORDS[address >> WORD_SHIFT]`` reads the
    pointer at ``address`` (aligned) for ~20 ns, where ``c_void_p.from_address(address)
    .value`` makes a ctypes object per read (~60 ns). The fast call reads numpy's data
    pointers through it (at ``DATA_OFFSET``, as ``numpy_data``; checked here the same
    way). None where it cannot be made or disagrees."""
    if DATA_OFFSET is None or DATA_OFFSET % C.sizeof(C.c_void_p):
        return None  # pragma: no cover -- an exotic interpreter
    try:
        size = (sys.maxsize >> 1) & ~(C.sizeof(C.c_void_p) - 1)  # whole pointers
        span = (C.c_ubyte * size).from_address(0)
        words = memoryview(span).cast("B").cast("P")
        probe = np.arange(3.0)[1:]
        found = words[(id(probe) + DATA_OFFSET) >> WORD_SHIFT]
    except (ValueError, TypeError, OverflowError, MemoryError):  # pragma: no cover
        return None
    return words if found == probe.__array_interface__["data"][0] else None


WORD_SHIFT = C.sizeof(C.c_void_p).bit_length() - 1
WORDS = _address_space()


def numpy_data(arr: np.ndarray) -> int:
    """The data pointer of a numpy array."""
    if DATA_OFFSET is not None:
        return _void_at(id(arr) + DATA_OFFSET).value or 0
    return int(arr.__array_interface__["data"][0])  # pragma: no cover


#: A numpy layout as C sees it: the shape and element-strides arrays (and their addresses),
#: the DLDataType (and its code and bits), ndim.
Layout = tuple[Any, Any, A.DLDataType, int, int, int, int, int]

# (shape, strides, dtype) -> Layout: built once per layout and shared by calls (C reads the
# arrays only).
_LAYOUTS: dict[tuple[Any, ...], Layout] = {}


def layout(key: tuple[Any, ...]) -> Layout:
    found = _LAYOUTS.get(key)
    if found is not None:
        return found
    shape, strides, dtype = key
    item = dtype.itemsize
    if any(s % item for s in strides):
        raise TypeError("the array's strides are not a multiple of its item size")
    nd = len(shape)
    sh = (_I64 * nd)(*shape)
    st = (_I64 * nd)(*[s // item for s in strides])
    dt = to_dl(dtype)
    found = (sh, st, dt, nd, C.addressof(sh), C.addressof(st), dt.code, dt.bits)
    if len(_LAYOUTS) < 4096:
        _LAYOUTS[key] = found
    return found


def _dl_of(arr: Any, keep: list[Any]) -> A.DLTensor:
    """A ``DLTensor`` viewing ``arr``'s memory: numpy through its data pointer and strides
    (strided views and read-only arrays included), anything else through ``__dlpack__``
    (its device from ``__dlpack_device__``)."""
    if type(arr) is _ndarray:
        lay = layout((arr.shape, arr.strides, arr.dtype))
        return _DLTensor(numpy_data(arr), _CPU_DEVICE, lay[3], lay[2], lay[0], lay[1], 0)
    dl = _DLTensor()
    _fill_dl(dl, arr, keep)
    return dl


def _fill_dl(dl: A.DLTensor, arr: Any, keep: list[Any]) -> None:
    """Fill ``dl`` from ``arr`` (see :func:`_dl_of`)."""
    if type(arr) is _ndarray:
        C.pointer(dl)[0] = _dl_of(arr, keep)
        return
    if isinstance(arr, FakeArray):  # a shape function in fake mode: metadata only
        nd = arr.ndim
        if not all(type(d) is int for d in arr.shape):
            raise TypeError("a native shape function needs concrete sizes, got symbolic ones")
        sh = (_I64 * nd)(*arr.shape)
        st = (_I64 * nd)(*_contiguous(arr.shape))
        dl.data = None
        dl.device = A.DLDevice(_DL_DEVICE_TYPES.get(arr.device.type, A.KDL_EXT_DEV), 0)
        dl.ndim = nd
        dl.dtype = to_dl(arr.dtype)
        dl.shape = sh
        dl.strides = st
        keep.append(sh)
        keep.append(st)
        return
    dlpack = getattr(arr, "__dlpack__", None)
    if dlpack is None:
        raise _NoDLPack(type(arr))
    device = arr.__dlpack_device__()
    capsule = dlpack()
    keep.append(capsule)  # owns shape/strides; its destructor frees the export
    src = A.DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    C.pointer(dl)[0] = src
    dl.device = A.DLDevice(int(device[0]), int(device[1]))
    if not src.strides:
        st = (_I64 * src.ndim)(*_contiguous(tuple(src.shape[: src.ndim])))
        dl.strides = st
        keep.append(st)


class _NoDLPack(TypeError):
    def __init__(self, cls: type) -> None:
        self.cls = cls
        super().__init__(cls.__name__)


def _contiguous(shape: Sequence[int]) -> list[int]:
    out = [1] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= max(int(shape[i]), 1)
    return out


def _tensor(arg: A.Arg, v: Any, keep: list[Any]) -> Any:
    dl = _dl_of(v, keep)
    keep.append(dl)
    arg.v.i = _addressof(dl)  # the union's pointer member, written through its int view
    return v


class _ReadOnly(Exception):
    """A written argument's array is read-only (``CallPlan.fill`` names the op)."""


def _written_tensor(arg: A.Arg, v: Any, keep: list[Any]) -> Any:
    """A ``Tensor(a!)``: the kernel writes through the view, so numpy's read-only arrays
    (broadcasts, views of read-only memory) are refused as numpy refuses them as ``out=``."""
    if isinstance(v, np.ndarray) and not v.flags.writeable:
        raise _ReadOnly
    return _tensor(arg, v, keep)


def _int(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    i = int(v)
    if not _INT64_MIN <= i <= _INT64_MAX:  # ctypes would wrap it silently
        raise OverflowError(f"{i} does not fit in a C int64_t")
    arg.v.i = i


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _float(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    arg.v.f = float(v)


def _str(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    b = str(v).encode()
    keep.append(b)
    arg.v.s = b


def _scalar_type(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    arg.v.dtype = to_dl(np.dtype(v))


def _device(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    d: Device = v
    arg.v.device = A.DLDevice(_DL_DEVICE_TYPES.get(d.type, A.KDL_EXT_DEV), d.index or 0)


def _ints(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    ints = [int(e) for e in v]
    if ints and not (min(ints) >= _INT64_MIN and max(ints) <= _INT64_MAX):
        raise OverflowError(f"{ints} does not fit in C int64_t values")
    buf = (_I64 * len(ints))(*ints)
    keep.append(buf)
    arg.v.ints.data = buf
    arg.v.ints.size = len(v)


def _floats(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    buf = (C.c_double * len(v))(*[float(e) for e in v])
    keep.append(buf)
    arg.v.floats.data = buf
    arg.v.floats.size = len(v)


def _tensors(arg: A.Arg, v: Any, keep: list[Any]) -> Any:
    n = len(v)
    dls = (A.DLTensor * n)()
    ptrs = (C.c_void_p * n)()
    first = None
    for j, t in enumerate(v):
        if t is None:
            continue
        _fill_dl(dls[j], t, keep)
        ptrs[j] = _addressof(dls[j])
        first = t if first is None else first
    keep.append(dls)
    keep.append(ptrs)
    arg.v.tensors.data = C.cast(ptrs, C.POINTER(C.POINTER(A.DLTensor)))
    arg.v.tensors.size = n
    return first


def _object(arg: A.Arg, v: Any, keep: list[Any]) -> None:
    handle = getattr(v, "_oplib_handle", None)
    if handle is None and keep and keep[0] is _FAKE_OBJECTS:
        return  # a fake object reaching a shape function: NULL
    if handle is None:
        raise TypeError(
            f"native kernels take objects of native classes; got a {type(v).__name__} "
            "(a Python class, or a fake object outside a shape function)"
        )
    keep.append(v)
    arg.v.object = handle


_SCALARS: dict[str, Filler] = {
    "Tensor": _tensor,
    "int": _int,
    "SymInt": _int,
    "bool": _int,
    "float": _float,
    "Scalar": _float,
    "str": _str,
    "ScalarType": _scalar_type,
    "Device": _device,
}
_LISTS: dict[str, Filler] = {
    "int": _ints,
    "SymInt": _ints,
    "bool": _ints,
    "float": _floats,
    "Tensor": _tensors,
}


def _optional(inner: Filler) -> Filler:
    def fill(arg: A.Arg, v: Any, keep: list[Any]) -> Any:
        if v is None:
            arg.is_none = 1
            return None
        return inner(arg, v, keep)

    return fill


def filler(t: SchemaType, where: str, written: bool = False) -> Filler:
    """How a value of schema type ``t`` is passed to C (see the table in oplib.h);
    ``written``: the argument is annotated ``(a!)``."""
    if isinstance(t, OptionalType):
        return _optional(filler(t.elem, where, written))
    if isinstance(t, ListType):
        elem = t.elem.elem if isinstance(t.elem, OptionalType) else t.elem
        name = elem.name if isinstance(elem, BaseType) else ""
        found = _LISTS.get(name)
        if found is None or (elem is not t.elem and name != "Tensor"):
            raise UnsupportedSchemaError(f"{where}: type {t} cannot be passed to native code")
        return found
    assert isinstance(t, BaseType)
    if is_class_type(t.name):
        return _object
    if written and t.name == "Tensor":
        return _written_tensor
    found = _SCALARS.get(t.name)
    if found is None:
        raise UnsupportedSchemaError(f"{where}: type {t} cannot be passed to native code")
    return found


class CallPlan:
    """A schema read once for native calls: a filler per argument, defaults, outputs."""

    __slots__ = ("args", "defaults", "fillers", "kw_names", "library", "nargs", "nouts", "op")

    def __init__(self, schema: FunctionSchema, op: str, library: str) -> None:
        self.op = op
        self.library = library
        self.args: tuple[Argument, ...] = schema.arguments
        self.fillers = tuple(
            filler(a.type, f"{op}: argument {a.name!r}", a.is_write) for a in self.args
        )
        self.defaults = tuple(a.default_value if a.has_default else _MISSING for a in self.args)
        self.nargs = len(self.args)
        for r in schema.returns:
            if str(r.type) != "Tensor" or r.annotation is not None:
                raise UnsupportedSchemaError(
                    f"{op}: native kernels return new Tensors only; the schema returns "
                    f"{schema._returns_str()}"
                )
        self.nouts = len(schema.returns)

    def values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The call's arguments in schema order, defaults filled in."""
        n = len(args)
        if n == self.nargs:
            return list(args)
        out = list(args)
        for i in range(n, self.nargs):
            a = self.args[i]
            v = kwargs.get(a.name, self.defaults[i])
            if v is _MISSING:
                raise TypeError(f"{self.op}: missing argument {a.name!r}")
            out.append(v)
        return out

    def fill(
        self, values: list[Any], keep: list[Any], *, fake_objects: bool = False
    ) -> tuple[Any, Any]:
        """The ``oplib_arg`` array of a call, and its first array (the device's).
        ``fake_objects``: objects without a native handle pass as NULL (shape functions
        under fake mode)."""
        cargs = (A.Arg * self.nargs)()
        if fake_objects:
            keep.append(_FAKE_OBJECTS)
        first = None
        i = 0
        try:
            for i, (fill, v) in enumerate(zip(self.fillers, values, strict=True)):
                got = fill(cargs[i], v, keep)
                if first is None and got is not None:
                    first = got
        except _ReadOnly:
            name = self.args[i].name
            raise InvalidArgumentError(
                f"{self.op}: argument {name!r} is written by the native kernel of library "
                f"{self.library} ({self.args[i]}), but its array is read-only "
                f"(a broadcast, or a view of read-only memory); pass a writable copy",
                api=self.op,
                argument=name,
                value=values[i],
            ) from None
        except OverflowError as e:
            raise OverflowError(
                f"{self.op}: argument {self.args[i].name!r} of the native kernel of library "
                f"{self.library}: {e}"
            ) from None
        except _NoDLPack as e:
            backend = TABLE.for_type(e.cls)
            name = backend.name if backend is not None else e.cls.__name__
            raise NoKernelError(
                f"{self.op}: the native kernel of library {self.library} needs arrays that "
                f"expose a data pointer through DLPack (__dlpack__); {name} arrays "
                f"({e.cls.__name__}) do not",
                op=self.op,
                key=name,
            ) from None
        return cargs, first

    def check(self, status: int, err: A.Error, what: str = "") -> None:
        if status != A.OK:
            message = err.message.decode(errors="replace") or f"status {status}"
            raise NativeKernelError(
                f"{self.op}{what} (library {self.library}): {message}",
                op=self.op,
                library=self.library,
                status=status,
            )


_MISSING: Any = object()
_FAKE_OBJECTS: Any = object()  # first in ``keep``: the call is a shape function's


def metas_from_shape_fn(
    plan: CallPlan, fn: Any, cargs: Any
) -> list[tuple[tuple[int, ...], np.dtype]]:
    metas = (A.TensorMeta * plan.nouts)()
    err = A.Error()
    plan.check(fn(cargs, plan.nargs, metas, plan.nouts, C.byref(err)), err, " shape function")
    return [meta_of(plan, m.ndim, m.dtype, m.shape) for m in metas]


def meta_of(
    plan: CallPlan, ndim: int, dtype: A.DLDataType, dims: Sequence[int]
) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype one ``oplib_tensor_meta`` of a shape function describes."""
    if not 0 <= ndim <= A.MAX_DIMS:
        raise NativeKernelError(
            f"{plan.op} shape function (library {plan.library}): ndim {ndim} is out "
            f"of range 0..{A.MAX_DIMS}",
            op=plan.op,
            library=plan.library,
            status=A.OK,
        )
    return tuple(dims[:ndim]), from_dl(dtype)


def allocate(
    plan: CallPlan, first: Any, metas: list[tuple[tuple[int, ...], np.dtype]], keep: list[Any]
) -> tuple[list[Any], Any]:
    """Output arrays on ``first``'s device and their DLTensor array."""
    outs: list[Any] = []
    if first is None or type(first) is _ndarray:
        outs = [np.empty(shape, dtype) for shape, dtype in metas]
    else:
        backend = TABLE.for_type(type(first))
        empty = backend.spec.empty if backend is not None else None
        if backend is None or empty is None:
            raise NoKernelError(
                f"{plan.op}: oplib cannot allocate outputs for the native kernel of library "
                f"{plan.library} on {type(first).__name__} arrays (their backend has no "
                "empty())",
                op=plan.op,
                key=backend.name if backend is not None else type(first).__name__,
            )
        device = backend.device_of(first)
        outs = [empty(shape, dtype, device) for shape, dtype in metas]
    couts = (A.DLTensor * plan.nouts)(*[_dl_of(arr, keep) for arr in outs])
    return outs, couts


def fake_of(value: Any, device_of: Callable[[Any], Device]) -> Any:
    """A FakeArray with ``value``'s metadata (for calling the op's fake kernel)."""
    return FakeArray._make(tuple(value.shape), np.dtype(value.dtype), device_of(value))


def result(outs: list[Any]) -> Any:
    if len(outs) == 1:
        return outs[0]
    return tuple(outs) if outs else None
