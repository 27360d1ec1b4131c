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
from .._dtypes import get_default_dtype, layout, strided, to_dtype
from ..backends import TABLE
from ..errors import DeviceMismatchError
from . import _shapes as S
from ._context import current_fake_op
from ._errors import DataAccessError
from ._symbolic import SymInt

if TYPE_CHECKING:
    from collections.abc import Callable

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


_COMPARISONS = frozenset(
    {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal}
)


def _op(ufunc: np.ufunc, name: str, *, reverse: bool = False) -> Callable[[FakeArray, Any], Any]:
    def method(self: FakeArray, other: Any) -> Any:
        return self._binary(other, ufunc, name, reverse)

    method.__name__ = method.__qualname__ = f"__{'r' if reverse else ''}{ufunc.__name__}__"
    return method


def _sizes(args: tuple[Any, ...]) -> list[Any]:
    """torch's ``*sizes`` arguments: ``f(3, 4)`` or ``f((3, 4))``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


def _contiguous_strides(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Row-major strides in elements; a 0- or 1-long dim counts as 1, as in torch."""
    out: list[Any] = []
    step: Any = 1
    for s in reversed(shape):
        out.append(step)
        step = step * (s if isinstance(s, SymInt) or s > 1 else 1)
    return tuple(reversed(out))


def _pick_device(op: str, a: FakeArray, b: FakeArray) -> FakeArray:
    """The operand whose class and device the result takes: both on one device, or one of
    them a 0-d cpu array (a scalar), as in the dispatcher."""
    if a.device is b.device or a.device == b.device:
        return a
    if not b.shape and b.device.type == "cpu":
        return a
    if not a.shape and a.device.type == "cpu":
        return b
    devices = {"self": str(a.device), "other": str(b.device)}
    raise DeviceMismatchError(
        f"{op}: expected both fake arrays on one device, got self on {a.device} and other "
        f"on {b.device}",
        op=op,
        devices=devices,
    )


class _IntSize(int):
    """``FakeArray.size``: numpy's element count, callable as torch's ``size()``."""

    _shape: tuple[Any, ...]

    def __call__(self, dim: int | None = None) -> Any:
        if dim is None:
            return self._shape
        return self._shape[S.wrap_dim(dim, len(self._shape))]


class _SymSize(SymInt):
    """``FakeArray.size`` of a symbolic shape: the ``SymInt`` count, callable like
    :class:`_IntSize`."""

    __slots__ = ("_shape",)
    _shape: tuple[Any, ...]

    __call__ = _IntSize.__call__


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
    def from_parts(cls, shape: tuple[Any, ...], dtype: np.dtype, device: Device) -> Self:
        """An array of this class from parts already checked, without checking them again
        (the constructor of fake kernels and of a data-less backend's kernels, which run
        per call): ``shape`` a tuple of ints and ``SymInt``s (:func:`check_shape`'s
        result), ``dtype`` a numpy dtype, ``device`` a ``Device`` as the backend reports
        its arrays' devices. ``MetaArray.from_parts((3, 4), np.dtype("float32"), META)``.
        ``FakeArray(shape, dtype, device)`` checks and converts each part."""
        a = _new(cls)
        a.shape = shape
        a.dtype = dtype
        a.device = device
        return a

    @classmethod
    def _make(cls, shape: tuple[Any, ...], dtype: np.dtype, device: Device) -> Self:
        """:meth:`from_parts`, under the core's own spelling (a copy, not an alias: an
        alias of a ``Self`` classmethod is ambiguous to mypy, and a call through would
        cost the hot path a frame)."""
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
        """numpy's number of elements (an ``int``, a ``SymInt`` if the shape is symbolic) that
        is also torch's method: ``x.size()`` is the shape, ``x.size(d)`` the size of dim
        ``d``. ``x.size == 6`` and ``x.size * 2`` read it as numpy does."""
        n = numel(self.shape)
        if type(n) is int:
            out = _IntSize(n)
            out._shape = self.shape
            return out
        sym = object.__new__(_SymSize)
        sym._terms, sym._hash = n._terms, n._hash
        sym._shape = self.shape
        return sym

    def dim(self) -> int:
        """The number of dimensions (torch's ``dim()``; numpy's ``ndim``)."""
        return len(self.shape)

    def numel(self) -> Any:
        """The number of elements (an ``int``, or a ``SymInt`` for symbolic shapes)."""
        return numel(self.shape)

    def stride(self, dim: int | None = None) -> Any:
        """torch's strides in elements. Fake arrays carry no memory layout, so these are
        always the contiguous (row-major) strides of the shape."""
        strides = _contiguous_strides(self.shape)
        return strides if dim is None else strides[S.wrap_dim(dim, len(self.shape))]

    @property
    def layout(self) -> layout:
        """``oplib.strided``, as every oplib array's."""
        return strided

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Always ``True``: fake arrays carry no memory layout (see :meth:`stride`)."""
        return True

    def contiguous(self, memory_format: Any = None) -> Self:
        return self

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        return self.device.type == "meta"

    def element_size(self) -> int:
        return self.dtype.itemsize

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

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Self:
        """A data-less array of the given size on this array's device (or ``device``) with
        this array's dtype (or ``dtype``): torch's ``x.new_empty(3, 4)`` and
        ``x.new_empty((3, 4), dtype=...)``; numpy-style ``x.new_empty(shape, dtype)`` too."""
        return self._new_like("new_empty", size, dtype, device)

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Self:
        """Like :meth:`new_empty` (a fake array has no values to fill)."""
        return self._new_like("new_zeros", size, dtype, device)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None) -> Self:
        """Like :meth:`new_empty` (a fake array has no values to fill)."""
        return self._new_like("new_ones", size, dtype, device)

    def new_full(
        self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None
    ) -> Self:
        """Like :meth:`new_empty` (a fake array has no values to fill)."""
        return self._new_like("new_full", (size,), dtype, device)

    def _new_like(self, api: str, size: tuple[Any, ...], dtype: Any, device: Any) -> Self:
        if len(size) == 1 or (len(size) == 2 and not isinstance(size[0], (int, SymInt))):
            if len(size) == 2:  # numpy-style positional dtype: new_empty(shape, dtype)
                if dtype is not None:
                    raise TypeError(f"{api}() got the dtype twice")
                dtype = size[1]
            size = size[0]
        shape = check_shape(size, api)
        dt = self.dtype if dtype is None else to_dtype(dtype)
        if device is None:
            return self._new(shape, dt)
        dev = device if isinstance(device, Device) else parse_device(str(device))
        if dev.type == self.device.type and (dev.index is None or dev == self.device):
            return self._new(shape, dt)
        out: Self = fake_array(shape, dt, dev)  # another device: its own array class
        return out

    def clone(self, memory_format: Any = None) -> Self:
        return self._new(self.shape, self.dtype)

    def view(self, *shape: Any) -> Any:
        """torch's ``view(*shape)`` (one entry may be -1), or ``view(dtype)`` of a dtype of
        the same item size."""
        if len(shape) == 1 and not isinstance(shape[0], (int, SymInt, tuple, list)):
            dt = to_dtype(shape[0])
            if dt.itemsize != self.dtype.itemsize:
                raise RuntimeError(
                    f"view(dtype): {self.dtype} and {dt} differ in element size; fake arrays "
                    "support only views between dtypes of the same size"
                )
            return self._new(self.shape, dt)
        return self._new(S.reshape_shape(self.shape, _sizes(shape)), self.dtype)

    def reshape(self, *shape: Any) -> Self:
        """torch's ``reshape(*shape)`` or ``reshape(shape)`` (one entry may be -1)."""
        return self._new(S.reshape_shape(self.shape, _sizes(shape)), self.dtype)

    def transpose(self, dim0: int, dim1: int) -> Self:
        """torch's ``transpose(dim0, dim1)`` (swaps two dims)."""
        return self._new(S.transpose_shape(self.shape, dim0, dim1), self.dtype)

    def expand(self, *sizes: Any) -> Self:
        """torch's ``expand(*sizes)``: broadcast to ``sizes`` (-1 keeps a dim)."""
        return self._new(S.broadcast_to_shape(self.shape, _sizes(sizes)), self.dtype)

    # -- operators: result shapes (broadcasting) and dtypes (numpy's promotion) -----------
    def _binary(self, other: Any, ufunc: np.ufunc, name: str, reverse: bool = False) -> Any:
        if isinstance(other, FakeArray):
            dt = S.ufunc_dtype(
                ufunc, *((other.dtype, self.dtype) if reverse else (self.dtype, other.dtype))
            )
            base = _pick_device(name, self, other)
            shape = (
                self.shape
                if other.shape is self.shape
                else S.broadcast_shapes(self.shape, other.shape)
            )
            return base._new(shape, dt)
        if isinstance(other, np.generic):
            w: Any = other.dtype
        elif isinstance(other, (int, float, complex)):
            w = S.weak(other)
            if w is int and ufunc not in _COMPARISONS:
                S.check_int_scalar(other, self.dtype)
        else:
            return NotImplemented
        dt = S.ufunc_dtype(ufunc, *((w, self.dtype) if reverse else (self.dtype, w)))
        return self._new(self.shape, dt)

    def _unary(self, ufunc: np.ufunc) -> Self:
        return self._new(self.shape, S.ufunc_dtype(ufunc, self.dtype))

    def __matmul__(self, other: Any) -> Any:
        if not isinstance(other, FakeArray):
            return NotImplemented
        dt = S.ufunc_dtype(np.matmul, self.dtype, other.dtype)
        base = _pick_device("matmul", self, other)
        return base._new(S.matmul_shape(self.shape, other.shape), dt)

    def __rmatmul__(self, other: Any) -> Any:
        if not isinstance(other, FakeArray):
            return NotImplemented
        return other.__matmul__(self)

    def __neg__(self) -> Self:
        return self._unary(np.negative)

    def __pos__(self) -> Self:
        return self._unary(np.positive)

    def __abs__(self) -> Self:
        return self._unary(np.absolute)

    def __invert__(self) -> Self:
        return self._unary(np.invert)

    __add__ = _op(np.add, "add")
    __radd__ = _op(np.add, "add", reverse=True)
    __sub__ = _op(np.subtract, "sub")
    __rsub__ = _op(np.subtract, "sub", reverse=True)
    __mul__ = _op(np.multiply, "mul")
    __rmul__ = _op(np.multiply, "mul", reverse=True)
    __truediv__ = _op(np.true_divide, "div")
    __rtruediv__ = _op(np.true_divide, "div", reverse=True)
    __floordiv__ = _op(np.floor_divide, "floor_divide")
    __rfloordiv__ = _op(np.floor_divide, "floor_divide", reverse=True)
    __mod__ = _op(np.remainder, "remainder")
    __rmod__ = _op(np.remainder, "remainder", reverse=True)
    __pow__ = _op(np.power, "pow")
    __rpow__ = _op(np.power, "pow", reverse=True)
    __and__ = _op(np.bitwise_and, "bitwise_and")
    __rand__ = _op(np.bitwise_and, "bitwise_and", reverse=True)
    __or__ = _op(np.bitwise_or, "bitwise_or")
    __ror__ = _op(np.bitwise_or, "bitwise_or", reverse=True)
    __xor__ = _op(np.bitwise_xor, "bitwise_xor")
    __rxor__ = _op(np.bitwise_xor, "bitwise_xor", reverse=True)
    __lt__ = _op(np.less, "lt")
    __le__ = _op(np.less_equal, "le")
    __gt__ = _op(np.greater, "gt")
    __ge__ = _op(np.greater_equal, "ge")
    __eq__ = _op(np.equal, "eq")
    __ne__ = _op(np.not_equal, "ne")
    __hash__ = object.__hash__

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
    return cls.from_parts(shape, np.dtype(dtype), parse_device(device))


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
    return FakeArray.from_parts(shape, dtype, normalize_device(device))
