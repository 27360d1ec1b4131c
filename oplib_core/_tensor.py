"""``Tensor``: a thin wrapper over one native array (numpy, cupy, meta, a vendor's).

Operators on tensors route through the core op set; a tensor carries autograd state
(``requires_grad``, ``grad``, ``grad_fn``). Kernels never see Tensors, only native arrays.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ._device import Device
from ._dtypes import bfloat16, is_floating
from ._registry import REGISTRY
from .backends import TABLE, Backend
from .backends import device as to_device
from .errors import BackendError
from .fake._arrays import FakeArray

if TYPE_CHECKING:
    from types import NotImplementedType

__all__ = ["Tensor"]

_new = object.__new__


def _init(t: Tensor, data: Any) -> None:
    """Set every slot of a new Tensor ``t`` over ``data``."""
    t._data = data
    t._rg = False
    t.grad = None
    t.grad_fn = None
    t._out_nr = 0


def _op(qualname: str) -> Callable[..., Tensor]:
    # The one place that says what core ops give back for Tensor arguments: a Tensor.
    op: Callable[..., Tensor] = REGISTRY.ops[qualname].overload
    return op


def _is_dtype(x: object) -> bool:
    """A dtype given where ``to`` expects a device: a numpy dtype or scalar type
    (``oplib.bfloat16``, ``np.float32``); strings stay devices."""
    return isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic))


def _is_scalar(x: object) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray)


def _is_operand(x: object) -> bool:
    """A Tensor or a native array: the other operand of a Tensor-Tensor operator."""
    return type(x) is Tensor or TABLE.for_type(type(x)) is not None


def _binary(name: str, a: Tensor, b: Any) -> Tensor | NotImplementedType:
    if type(b) is Tensor:  # the common case first: not a scalar, an operand
        out: Tensor = REGISTRY.ops["oplib::" + name].overload(a, b)
        return out
    if _is_scalar(b):
        return _op(f"oplib::{name}.Scalar")(a, b)
    if not _is_operand(b):
        # ``t == None`` is False, ``t + "x"`` a plain TypeError. (mypy reads NotImplemented
        # as Any outside the operator methods themselves.)
        return NotImplemented  # type: ignore[no-any-return]
    return _op(f"oplib::{name}")(a, b)


def _reverse(name: str, rname: str, a: Tensor, b: Any) -> Tensor | NotImplementedType:
    """``b <op> a`` where ``a`` is the Tensor (``__rsub__`` and friends)."""
    if _is_scalar(b):
        return _op(f"oplib::{rname}.Scalar")(a, b)
    if not _is_operand(b):
        return NotImplemented  # type: ignore[no-any-return]
    return _op(f"oplib::{name}")(b, a)


class Tensor:
    """A wrapper over one native array of an installed backend.

    Create tensors with :func:`oplib_core.tensor` and the factories; ops called with
    Tensors return Tensors (with autograd), called with native arrays return native arrays.
    """

    # Every slot is set in one place, ``_init``: by ``_wrap`` (how the core makes Tensors)
    # and by ``__init__`` (which checks its argument first). ``_out_nr`` is which output of
    # its ``grad_fn`` the tensor is (0 unless a multi-output autograd node made it).
    __slots__ = ("__weakref__", "_data", "_out_nr", "_rg", "grad", "grad_fn")
    __array_priority__ = 1000  # numpy defers binary operators to us

    _data: Any
    _rg: bool
    grad: Tensor | None
    grad_fn: Any
    _out_nr: int

    def __init__(self, data: Any, *, requires_grad: bool = False) -> None:
        if isinstance(data, Tensor):
            data = data._data
        if TABLE.for_type(type(data)) is None:
            raise TypeError(
                f"Tensor(): expected a native array of an installed backend "
                f"({TABLE.names_text()}), got {type(data).__name__}; use oplib.tensor(data) "
                "to convert Python data"
            )
        _init(self, data)
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _wrap(data: Any) -> Tensor:
        """A Tensor over ``data`` (not checked): no grad, no history. The one way the core
        makes Tensors; callers that record autograd set ``_rg``/``grad_fn`` afterwards."""
        # Complicated for better performance (one call less on every op that returns a
        # Tensor); equivalent: ``t = _new(Tensor); _init(t, data); return t``.
        # tests/test_fastpath.py checks that every slot is set.
        t = _new(Tensor)
        t._data = data
        t._rg = False
        t.grad = None
        t.grad_fn = None
        t._out_nr = 0
        return t

    # -- metadata -------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        b = TABLE.for_type(type(self._data))
        if b is None:
            raise BackendError(
                f"the backend of this tensor's {type(self._data).__name__} array is no longer "
                "installed"
            )
        return b

    @property
    def device(self) -> Device:
        if isinstance(self._data, FakeArray):  # fake tensors keep their own device
            return self._data.device
        return self.backend.device_of(self._data)

    @property
    def dtype(self) -> np.dtype:
        dtype: np.dtype = np.dtype(self._data.dtype)
        return dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @overload
    def size(self, dim: None = None) -> tuple[int, ...]: ...
    @overload
    def size(self, dim: int) -> int: ...
    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.shape if dim is None else self.shape[dim]

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for s in self._data.shape:
            n *= s
        return n

    def __len__(self) -> int:
        if not self._data.shape:
            raise TypeError("len() of a 0-d tensor")
        n: int = self._data.shape[0]
        return n

    @property
    def native(self) -> Any:
        """The wrapped native array (shares memory; no autograd)."""
        return self._data

    # -- autograd state -------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and not (self.dtype.kind == "c" or is_floating(self.dtype)):
            raise RuntimeError(
                f"only tensors of floating point or complex dtype can require gradients, "
                f"got {self.dtype}"
            )
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf tensors; use detach() to get "
                "a tensor without history"
            )
        self._rg = bool(requires_grad)
        return self

    def backward(
        self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False
    ) -> None:
        """Accumulate the gradient of this tensor w.r.t. the graph's leaves into their
        ``.grad`` (``gradient`` is required unless this tensor has one element)."""
        from .autograd._engine import backward  # the engine imports this module

        backward([self], [gradient], retain_graph=retain_graph, create_graph=create_graph)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """An uninitialised tensor of ``size`` with this tensor's dtype and device (unless
        given); on a fake or meta tensor, a data-less one."""
        if len(size) == 1 and not isinstance(size[0], int) and hasattr(size[0], "__iter__"):
            size = tuple(size[0])
        dev = self.device if device is None else to_device(device)
        dt = self.dtype if dtype is None else dtype
        out = _op("oplib::empty")(list(size), dtype=dt, device=dev)
        return Tensor._wrap(out)

    def detach(self) -> Tensor:
        """A new tensor sharing this one's data, outside the autograd graph."""
        return Tensor._wrap(self._data)

    # -- conversions ----------------------------------------------------------------------
    def to(self, device: Any = None, dtype: Any = None, *, copy: bool = False) -> Tensor:
        """Copy to ``device`` and/or cast to ``dtype``; returns ``self`` when nothing changes
        and ``copy`` is false. ``t.to(dtype)`` casts on the same device, as in torch."""
        if dtype is None and _is_dtype(device):
            device, dtype = None, device
        from_device = self.device
        target = None if device is None else to_device(device)
        same_device = target is None or (
            target.type == from_device.type
            and (
                target.index is None
                or from_device.index is None  # a single-device backend: "cpu" is "cpu:0"
                or target.index == from_device.index
            )
        )
        same_dtype = dtype is None or np.dtype(dtype) == self.dtype
        if same_device and same_dtype and not copy:
            return self
        return _op("oplib::_to_copy")(self, dtype=dtype, device=target)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    # -- dtype conversions (the dtypes slice) ---------------------------------------------
    def bfloat16(self) -> Tensor:
        """``self.to(oplib.bfloat16)``."""
        return self.to(dtype=bfloat16)

    def numpy(self) -> np.ndarray:
        """The data as a numpy array (shared memory); CPU tensors only."""
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.numpy()")
        if self._rg:
            raise RuntimeError(
                "can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()"
            )
        if self.backend.name != "cpu":
            raise TypeError(
                f"can't convert a {self.device} tensor to numpy; copy it to the host first "
                "with tensor.to('cpu')"
            )
        array: np.ndarray = self._data
        return array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.__array__ (conversion to numpy)")
        if self.backend.name != "cpu":
            raise TypeError(
                f"can't convert a {self.device} tensor to a numpy array implicitly; use "
                "tensor.to('cpu') first"
            )
        if copy:
            return np.array(self._data, dtype=dtype, copy=True)
        return np.asarray(self._data, dtype=dtype)

    def tolist(self) -> Any:
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.tolist()")
        return self.backend.to_host(self._data).tolist()

    def item(self) -> Any:
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.item()")
        if self.numel() != 1:
            raise ValueError(
                f"item(): only a tensor with one element can be converted to a Python scalar, "
                f"this one has shape {self.shape}"
            )
        return self.backend.to_host(self._data).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self._data.__dlpack_device__()
        return device

    def __repr__(self) -> str:
        extra = ""
        dev = self.device
        if dev.type != "cpu":
            extra += f", device='{dev}'"
        if self.dtype not in (np.dtype("float32"), np.dtype("int64"), np.dtype("bool")):
            extra += f", dtype={self.dtype}"
        if self.grad_fn is not None:
            name = getattr(self.grad_fn, "name", None)
            label = name() if callable(name) else type(self.grad_fn).__name__
            extra += f", grad_fn=<{label}>"
        elif self._rg:
            extra += ", requires_grad=True"
        if isinstance(self._data, FakeArray):
            name = "tensor" if dev.type == "meta" else "FakeTensor"
            return f"{name}(..., size={self.shape}{extra})"
        try:
            host = self.backend.to_host(self._data)
            body = np.array2string(host, separator=", ", prefix="tensor(")
        except Exception:
            body = f"..., size={self.shape}"
        return f"tensor({body}{extra})"

    __hash__ = object.__hash__

    # -- operators (routed through the core op set) ---------------------------------------
    def __add__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = REGISTRY.ops["oplib::add"].overload(self, other)
            return out
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _reverse("add", "add", self, other)

    def __sub__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = REGISTRY.ops["oplib::sub"].overload(self, other)
            return out
        return _binary("sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _reverse("sub", "rsub", self, other)

    def __mul__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = REGISTRY.ops["oplib::mul"].overload(self, other)
            return out
        return _binary("mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _reverse("mul", "mul", self, other)

    def __truediv__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = REGISTRY.ops["oplib::div"].overload(self, other)
            return out
        return _binary("div", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _reverse("div", "rdiv", self, other)

    def __pow__(self, other: Any) -> Tensor:
        return _binary("pow", self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _reverse("pow", "rpow", self, other)

    def __matmul__(self, other: Any) -> Tensor:
        return _op("oplib::matmul")(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _op("oplib::matmul")(other, self)

    def __neg__(self) -> Tensor:
        return _op("oplib::neg")(self)

    def __abs__(self) -> Tensor:
        return _op("oplib::abs")(self)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _binary("eq", self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _binary("ne", self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _binary("lt", self, other)

    def __le__(self, other: Any) -> Tensor:
        return _binary("le", self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _binary("gt", self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _binary("ge", self, other)

    # -- common methods -------------------------------------------------------------------
    def sum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _op("oplib::sum")(self, dim, keepdim, dtype=dtype)

    def mean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        return _op("oplib::mean")(self, dim, keepdim, dtype=dtype)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        return _op("oplib::reshape")(self, list(shape))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return _op("oplib::transpose")(self, dim0, dim1)

    @property
    def T(self) -> Tensor:
        return _op("oplib::permute")(self, list(range(self.ndim - 1, -1, -1)))

    def clone(self) -> Tensor:
        return _op("oplib::clone")(self)

    def exp(self) -> Tensor:
        return _op("oplib::exp")(self)

    def log(self) -> Tensor:
        return _op("oplib::log")(self)

    def sin(self) -> Tensor:
        return _op("oplib::sin")(self)

    def cos(self) -> Tensor:
        return _op("oplib::cos")(self)

    def relu(self) -> Tensor:
        return _op("oplib::relu")(self)
