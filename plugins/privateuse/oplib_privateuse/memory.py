"""The device's memory and its array type.

Each device index has an :class:`Arena`: host-backed memory that only this device's arrays
reference. Data enters it by an explicit copy (``from_host``) or as the fresh result of a
computation on the device; it leaves by an explicit copy (``to_host``). A user's numpy array
is never adopted, and :class:`DeviceArray` refuses implicit conversion to numpy, so crossing
devices always takes ``.to(device)``. The arena accounts for what is allocated
(``memory_allocated``) and frees a buffer when the last array using it goes.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

import numpy as np

from oplib_privateuse.name import DEVICES_ENV, backend_name

__all__ = [
    "Arena",
    "DeviceArray",
    "arena",
    "check_index",
    "config_error",
    "device_count",
    "from_host",
    "to_host",
    "unwrap",
    "wrap",
]

DLPACK_EXT_DEV = 12  # DLPack's kDLExtDev


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _mark_device(capsule: Any, index: int) -> None:
    """Write this device into an unconsumed DLPack capsule's DLTensor (its ``device``
    follows the ``void *data`` pointer, as dlpack.h lays it out)."""
    address = _capsule_pointer(capsule, b"dltensor") + ctypes.sizeof(ctypes.c_void_p)
    device = _DLDevice.from_address(address)
    device.device_type = DLPACK_EXT_DEV
    device.device_id = index


DEFAULT_DEVICES = 2


def config_error() -> str | None:
    """Why ``DEVICES_ENV`` (``OPLIB_PRIVATEUSE1_DEVICES``) is unusable, or ``None``."""
    text = os.environ.get(DEVICES_ENV, "").strip()
    if text and not (text.isdigit()):
        return f"{DEVICES_ENV} must be a non-negative integer, got {text!r}"
    return None


_count: list[int] = []


def device_count() -> int:
    """Number of devices: ``DEVICES_ENV`` (default 2), read once. Never
    raises (an invalid value gives 0; ``config_error()`` says why)."""
    if not _count:
        text = os.environ.get(DEVICES_ENV, "").strip()
        _count.append(0 if config_error() else int(text) if text else DEFAULT_DEVICES)
    return _count[0]


def device_name(index: int | None = None) -> str:
    name = backend_name()
    return name if index is None else f"{name}:{index}"


def check_index(index: int) -> int:
    n = device_count()
    if not 0 <= index < n:
        raise IndexError(
            f"{device_name(index)} does not exist: there are {n} {device_name()} devices "
            f"(indices 0..{n - 1}; set {DEVICES_ENV} for more)"
        )
    return index


class Arena:
    """The memory of one device: which buffers it owns, how many bytes are in use."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.allocated = 0
        self.peak = 0

    def adopt(self, buf: np.ndarray) -> None:
        """Take ownership of ``buf``, a fresh buffer nothing outside this device references."""
        key, nbytes = id(buf), buf.nbytes
        with _lock:
            _owners[key] = self
            self.allocated += nbytes
            self.peak = max(self.peak, self.allocated)
        weakref.finalize(buf, self._free, key, nbytes)

    def _free(self, key: int, nbytes: int) -> None:
        with _lock:
            if _owners.get(key) is self:
                del _owners[key]
            self.allocated -= nbytes


_lock = threading.Lock()
_owners: dict[int, Arena] = {}  # id(live buffer) -> the arena owning it
_arenas: dict[int, Arena] = {}


def arena(index: int) -> Arena:
    """The arena of device ``index`` (``IndexError`` for a device that does not exist)."""
    found = _arenas.get(index)
    if found is None:
        check_index(index)
        with _lock:
            found = _arenas.setdefault(index, Arena(index))
    return found


def _owner(buf: Any) -> tuple[Arena | None, np.ndarray]:
    """The arena owning the memory ``buf`` views, and the deepest ndarray under ``buf``."""
    obj, deepest = buf, buf
    while obj is not None:
        owner = _owners.get(id(obj))
        if owner is not None:
            return owner, obj
        if isinstance(obj, np.ndarray):
            deepest = obj
        obj = getattr(obj, "base", None)
    return None, deepest


def wrap(result: Any, index: int) -> Any:
    """Results of a numpy call on device ``index``'s buffers as DeviceArrays: views keep
    their arena, fresh buffers are adopted by device ``index``."""
    if isinstance(result, np.generic):
        result = np.asarray(result)
    if isinstance(result, np.ndarray):
        return wrap_array(result, index)
    if isinstance(result, tuple):
        return tuple(wrap(r, index) for r in result)
    if isinstance(result, list):
        return [wrap(r, index) for r in result]
    return result


def wrap_array(buf: np.ndarray, index: int) -> DeviceArray:
    """``buf`` as a DeviceArray: a view keeps its arena, a fresh buffer is adopted by device
    ``index``."""
    owner, root = _owner(buf)
    if owner is None:
        arena(index).adopt(root)
    else:
        index = owner.index
    return DeviceArray._wrap(buf, index)


def unwrap(value: Any, index: int) -> Any:
    """``value`` for a numpy call on device ``index``: DeviceArrays of that device become
    their buffers; host arrays and other devices' arrays are refused."""
    if isinstance(value, DeviceArray):
        if value._index != index:
            raise ValueError(
                f"expected arrays on {device_name(index)}, got one on "
                f"{device_name(value._index)}; copy it first with .to('{device_name(index)}')"
            )
        return value._buf
    if isinstance(value, np.ndarray):
        raise TypeError(
            f"a numpy array in host memory cannot be used on {device_name(index)}; copy it to "
            f"the device first (oplib.tensor(array, device='{device_name(index)}'))"
        )
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v, index) for v in value)
    return value


def from_host(array: np.ndarray, index: int) -> DeviceArray:
    """Copy a host array into device ``index``'s memory."""
    arena(index)
    buf = np.array(array, copy=True, order="K")
    return wrap_array(buf, index)


def to_host(array: DeviceArray) -> np.ndarray:
    """Copy a device array to a new host (numpy) array."""
    return np.array(array._buf, copy=True, order="K")


def _binary(ufunc: Any, reverse: bool = False) -> Any:
    def op(self: DeviceArray, other: Any) -> Any:
        a, b = self._buf, unwrap(other, self._index)
        return wrap(ufunc(b, a) if reverse else ufunc(a, b), self._index)

    return op


class DeviceArray:
    """An array in one device's memory. It has numpy's shape/dtype vocabulary and arithmetic,
    computed on the device; it never converts to numpy implicitly (``to_host`` copies)."""

    __slots__ = ("__weakref__", "_buf", "_index")
    __array_ufunc__ = None  # numpy operators defer to ours, which refuse host arrays

    _buf: np.ndarray
    _index: int

    def __init__(self) -> None:
        raise TypeError(
            "DeviceArray: create device arrays with oplib (oplib.tensor(data, device=...), "
            "oplib.zeros(..., device=...)), not directly"
        )

    @classmethod
    def _wrap(cls, buf: np.ndarray, index: int) -> DeviceArray:
        self = object.__new__(cls)
        self._buf = buf
        self._index = index
        return self

    @property
    def device_index(self) -> int:
        return self._index

    @property
    def dtype(self) -> np.dtype:
        return self._buf.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._buf.shape

    @property
    def ndim(self) -> int:
        return self._buf.ndim

    @property
    def size(self) -> int:
        return self._buf.size

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes

    def __len__(self) -> int:
        return len(self._buf)

    def astype(self, dtype: Any, copy: bool = True) -> DeviceArray:
        return wrap_array(self._buf.astype(dtype, copy=copy), self._index)

    def copy(self) -> DeviceArray:
        return wrap_array(self._buf.copy(), self._index)

    def __getitem__(self, key: Any) -> Any:
        return wrap(self._buf[unwrap(key, self._index)], self._index)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._buf[unwrap(key, self._index)] = unwrap(value, self._index)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            f"a {device_name(self._index)} array cannot be converted to numpy implicitly; "
            "copy it to the host with tensor.to('cpu')"
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's ``kDLExtDev`` (12), this device's index: native kernels (and other
        DLPack consumers) see this memory as the device's, not the host's."""
        return (DLPACK_EXT_DEV, self._index)

    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule of the device memory (zero-copy), marked as this device's."""
        capsule = self._buf.__dlpack__()
        _mark_device(capsule, self._index)
        return capsule

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of a {device_name(self._index)} array needs a copy to the "
            "host: use oplib.Tensor.item()"
        )

    def __repr__(self) -> str:
        body = np.array2string(self._buf, separator=", ")
        return f"DeviceArray({body}, device='{device_name(self._index)}')"

    __neg__ = lambda self: wrap(np.negative(self._buf), self._index)  # noqa: E731
    __abs__ = lambda self: wrap(np.abs(self._buf), self._index)  # noqa: E731
    __add__ = _binary(np.add)
    __radd__ = _binary(np.add, reverse=True)
    __sub__ = _binary(np.subtract)
    __rsub__ = _binary(np.subtract, reverse=True)
    __mul__ = _binary(np.multiply)
    __rmul__ = _binary(np.multiply, reverse=True)
    __truediv__ = _binary(np.true_divide)
    __rtruediv__ = _binary(np.true_divide, reverse=True)
    __pow__ = _binary(np.power)
    __rpow__ = _binary(np.power, reverse=True)
    __matmul__ = _binary(np.matmul)
    __rmatmul__ = _binary(np.matmul, reverse=True)
    __eq__ = _binary(np.equal)
    __ne__ = _binary(np.not_equal)
    __lt__ = _binary(np.less)
    __le__ = _binary(np.less_equal)
    __gt__ = _binary(np.greater)
    __ge__ = _binary(np.greater_equal)
    __hash__ = None  # type: ignore[assignment]
