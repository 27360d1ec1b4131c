"""``FakeArray``: an array with shape, dtype and device but no data.

Fake kernels receive and return these. ``FakeTensorMode`` makes them on the real device
type of the arrays it fakes (``cpu``, ``cuda``...); the meta backend's ``MetaArray`` is a
subclass living on device ``meta``. Reading data (``__array__``, ``item``, ``tolist``,
``__dlpack__``, ``bool(x)``) raises :class:`~oplib_core.fake.errors.DataAccessError` naming
the op whose fake kernel tried, when there is one.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from .._device import Device, parse_device
from .._dtypes import get_default_dtype, to_dtype
from ..backends import TABLE
from ._context import current_fake_op
from ._errors import DataAccessError
from ._symbolic import SymInt

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "FakeArray",
    "check_shape",
    "fake_array",
    "intern_device",
    "normalize_device",
    "numel",
]

_new = object.__new__


def check_shape(shape: Any, api: str = "FakeArray") -> tuple[Any, ...]:
    """``shape`` as a tuple of non-negative ints and ``SymInt``s (or ``ValueError``)."""
    if isinstance(shape, (numbers.Integral, SymInt)):
        shape = (shape,)
    out: list[Any] = []  # ints and SymInts
    for s in shape:
        if isinstance(s, SymInt):
            out.append(s)
        elif isinstance(s, numbers.Integral) and not isinstance(s, bool):
            if s < 0:
                raise ValueError(
                    f"{api}(): negative dimensions are not allowed, got shape {tuple(shape)}"
                )
            out.append(int(s))
        else:
            raise TypeError(f"{api}(): shape entries must be ints, got {type(s).__name__} ({s!r})")
    return tuple(out)


def numel(shape: tuple[Any, ...]) -> Any:
    """The product of ``shape`` (an ``int``, or a ``SymInt`` for symbolic shapes)."""
    n: Any = 1
    for s in shape:
        n = n * s
    return n


class FakeArray:
    """A data-less array: ``shape`` (ints and ``SymInt``s), ``dtype`` (a numpy dtype) and
    ``device``.

    ``FakeArray(shape, dtype=None, device="cpu")``; ``dtype=None`` is the default dtype.
    """

    __slots__ = ("device", "dtype", "shape")

    #: What the arrays of this class are called in messages.
    kind = "fake"

    shape: tuple[Any, ...]
    dtype: np.dtype
    device: Device

    def __init__(self, shape: Any, dtype: Any = None, device: Device | str = "cpu") -> None:
        self.shape = check_shape(shape, type(self).__name__)
        self.dtype = get_default_dtype() if dtype is None else to_dtype(dtype)
        self.device = normalize_device(
            device if isinstance(device, Device) else parse_device(device)
        )

    @classmethod
    def _make(cls, shape: tuple[Any, ...], dtype: np.dtype, device: Device) -> Self:
        """Construct without validation (fake kernels' hot path)."""
        a = _new(cls)
        a.shape = shape
        a.dtype = dtype
        a.device = device
        return a

    def _new(self, shape: tuple[Any, ...], dtype: np.dtype) -> Self:
        """An array of the same class on the same device."""
        a = _new(type(self))
        a.shape = shape
        a.dtype = dtype
        a.device = self.device
        return a

    # -- metadata -------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> Any:
        """Number of elements (a ``SymInt`` if the shape is symbolic)."""
        return numel(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> Any:
        return numel(self.shape) * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        n: int = self.shape[0]
        return n

    def new_empty(self, shape: Any, dtype: Any = None) -> Self:
        """A data-less array of ``shape`` of the same class and device (``dtype`` defaults to
        this array's)."""
        return self._new(
            check_shape(shape, "new_empty"), self.dtype if dtype is None else to_dtype(dtype)
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, device='{self.device}')"
        )

    # -- data: there is none --------------------------------------------------------------
    def _no_data(self, action: str) -> DataAccessError:
        found = current_fake_op()
        what = f"a {self.kind} array (shape {self.shape}, dtype {self.dtype}, device {self.device})"
        if found is not None:
            op, source = found
            where = f" ({source})" if source else ""
            return DataAccessError(
                f"{op}: its fake kernel{where} tried to read the data of {what} with "
                f"{action}. Fake kernels run without data: compute outputs from shapes and "
                "dtypes only (x.shape, x.dtype, oplib.empty_like(x), x.new_empty(shape)), and "
                "use oplib.get_ctx().new_dynamic_size() for sizes that depend on the data.",
                op=op,
                action=action,
            )
        return DataAccessError(
            f"cannot read the data of {what} with {action}: {self.kind} arrays carry shape, "
            "dtype and device only. Run the computation on a real device to get values.",
            action=action,
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self._no_data("__array__ (conversion to numpy)")

    def item(self) -> Any:
        raise self._no_data("item()")

    def tolist(self) -> Any:
        raise self._no_data("tolist()")

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise self._no_data("__dlpack__")

    def __dlpack_device__(self) -> tuple[int, int]:
        raise self._no_data("__dlpack_device__")

    def __bool__(self) -> bool:
        raise self._no_data("bool()")

    def __float__(self) -> float:
        raise self._no_data("float()")

    def __int__(self) -> int:
        raise self._no_data("int()")

    def __index__(self) -> int:
        raise self._no_data("__index__")

    def __iter__(self) -> Any:
        raise self._no_data("iteration")

    def __getitem__(self, key: Any) -> Any:
        raise self._no_data("indexing")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise self._no_data("item assignment")

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self.shape, str(self.dtype), str(self.device)))


def _rebuild(cls: type[FakeArray], shape: tuple[Any, ...], dtype: str, device: str) -> Any:
    return cls._make(shape, np.dtype(dtype), parse_device(device))


_devices: dict[Device, Device] = {}


def normalize_device(device: Device) -> Device:
    """``device`` as the installed backend reports its arrays' devices: no index on a
    single-device backend (``cpu``), index 0 for the current device of a multi-device one
    (or of a backend that is not installed)."""
    try:
        return _devices[device]
    except KeyError:
        pass
    backend = TABLE.find(device.type)
    if backend is not None and not backend.multi_device:
        out = Device(device.type, None)
    else:
        out = device if device.index is not None else Device(device.type, 0)
    _devices[device] = out
    return out


TABLE.add_listener(lambda event, backend: _devices.clear())

_interned: dict[Device, Device] = {}


def intern_device(device: Device) -> Device:
    """One ``Device`` object per device, so fake kernels can compare devices with ``is``."""
    return _interned.setdefault(device, device)


def fake_array(shape: tuple[Any, ...], dtype: np.dtype, device: Device | None) -> Any:
    """A data-less array on ``device`` (``None``: cpu): the backend's own data-less array
    class for a backend that only has those (``MetaArray`` on ``meta``), else a
    ``FakeArray``. ``shape`` must already be checked (:func:`check_shape`)."""
    if device is None:
        device = Device("cpu")
    backend = TABLE.find(device.type)
    if backend is not None and backend.spec.fake_kernels and backend.spec.empty is not None:
        return backend.spec.empty(shape, dtype, device)
    return FakeArray._make(shape, dtype, normalize_device(device))
