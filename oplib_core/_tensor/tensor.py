"""``Tensor``: a thin wrapper over one native array (numpy, cupy, meta, a vendor's).

Operators on tensors route through the core op set; a tensor carries autograd state
(``requires_grad``, ``grad``, ``grad_fn``). Kernels never see Tensors, only native arrays.
"""

from __future__ import annotations

import builtins
import importlib
import numbers
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .._device import Device
from .._dtypes import (
    bfloat16,
    check_layout,
    check_memory_format,
    contiguous_format,
    is_floating,
    strided,
    to_dtype,
)
from .._dtypes import layout as Layout
from .._dtypes import memory_format as MemoryFormat
from .._registry.registry import op_named
from ..backends import TABLE, Backend
from ..backends import device as to_device
from ..errors import BackendError
from ..fake._arrays import FakeArray
from . import indexing, pickling, setitem
from .views import ViewSet

if TYPE_CHECKING:
    from types import ModuleType, NotImplementedType

__all__ = ["Tensor"]

_new = object.__new__

#: The revisions of the array API standard ``__array_namespace__`` accepts (the last is
#: the one ``oplib.array_api`` follows; it also satisfies the earlier ones' functions).
_ARRAY_API_VERSIONS = ("2021.12", "2022.12", "2023.12")


def _init(t: Tensor, data: Any) -> None:
    """Set every slot of a new Tensor ``t`` over ``data``."""
    t._data = data
    t._rg = False
    t.grad = None
    t.grad_fn = None
    t._out_nr = 0
    t._vc = None


def bump_version(t: Tensor) -> None:
    """An in-place op wrote into ``t``'s storage: one more on the version counter it shares
    with its views (made on first use: a tensor never modified has none, version 0)."""
    vc = t._vc
    if vc is None:
        t._vc = [1]
    else:
        vc[0] += 1


def share_version(base: Tensor, view: Tensor, *, is_view: bool = True, piece: bool = False) -> None:
    """``view`` (the output of a ``Tensor(a)`` op on ``base``, or ``base.detach()``) shares
    ``base``'s storage, so it shares its version counter. A view is also recorded in the
    counter's second element, a ``ViewSet`` (autograd rewrites the base's history when a
    view is written in place, torch's ``CopySlices``); so is a ``piece``, one of several
    views an op returns (``split``), which autograd refuses to write in place."""
    vc = base._vc
    if vc is None:
        vc = base._vc = [0]
    if is_view or piece:
        if len(vc) == 1:
            vc.append(ViewSet(base))
        if piece:
            vc[1].add_piece(view)
        else:
            vc[1].add(base, view)
    view._vc = vc


# The op by name (the registry's one answer), typed with what core ops give back for
# Tensor arguments: a Tensor. Bound, not wrapped: the operators below call it per call.
_op: Callable[[str], Callable[..., Tensor]] = op_named


def _laid_out(t: Tensor, fmt: MemoryFormat) -> bool:
    """Whether ``t``'s elements lie in memory in ``fmt``'s order with no gaps, by torch's
    rule (``compute_contiguous``): dimensions of size 1 are skipped, an empty tensor is
    contiguous. An array that exposes no strides (fake, meta, jax, dask) is row-major."""
    shape = t.shape
    ndim = len(shape)
    if fmt.ndim is not None and ndim != fmt.ndim:
        return False
    data = t._data
    raw = None if isinstance(data, FakeArray) else getattr(data, "strides", None)
    if raw is not None:
        size = t.dtype.itemsize
        strides = [s // size for s in raw]
    else:  # row-major
        strides = [1] * ndim
        for d in range(ndim - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
    if 0 in shape:
        return True
    # preserve_format: torch answers as for contiguous_format
    order = fmt.dims_inner_first(ndim) or range(ndim - 1, -1, -1)
    expected = 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


_PYTHON_SCALARS = frozenset((int, float, bool, complex))


def _is_scalar(x: object) -> bool:
    if type(x) in _PYTHON_SCALARS:  # (``t * 0.99``: an ABC isinstance costs 0.2 us)
        return True
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray)


def _is_operand(x: object) -> bool:
    """A Tensor (or a subclass: vmap's BatchedTensor) or a native array: the other operand
    of a Tensor-Tensor operator."""
    return isinstance(x, Tensor) or TABLE.for_type(type(x)) is not None


def _binary(name: str, a: Tensor, b: Any) -> Tensor | NotImplementedType:
    if type(b) is Tensor:  # the common case first: not a scalar, an operand
        out: Tensor = _op("oplib::" + name)(a, b)
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


def _inplace(name: str, a: Tensor, b: Any) -> Tensor:
    """``a += b`` and friends: ``oplib::<name>`` (``add_``) with ``b`` a Tensor, a native array
    or a scalar."""
    if _is_scalar(b):
        return _op(f"oplib::{name}.Scalar")(a, b)
    if not _is_operand(b):
        return NotImplemented  # type: ignore[no-any-return]
    return _op(f"oplib::{name}.Tensor")(a, b)


def _is_dtype(x: object) -> bool:
    """A dtype as ``to()`` reads its first argument: a numpy dtype or scalar type
    (``oplib.float64``, ``np.float32``); a str there names a device, as in torch."""
    return isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic))


def _kind(x: object) -> str:
    return "dtype" if _is_dtype(x) else type(x).__name__


def _to_args(args: tuple[Any, ...], device: Any, dtype: Any) -> tuple[Any, Any]:
    """``Tensor.to``'s positional forms, as torch: ``(dtype)``, ``(device, dtype=None)``,
    ``(tensor)``; returns the (device, dtype) they name."""
    first, rest = args[0], args[1:]
    if isinstance(first, Tensor):
        if not rest and device is None and dtype is None:
            return first.device, first.dtype
    elif _is_dtype(first):
        if not rest and dtype is None:
            return device, first
    elif device is None and (not rest or (len(rest) == 1 and dtype is None)):
        return first, rest[0] if rest else dtype
    given = [_kind(a) for a in args]
    named = (("device", device), ("dtype", dtype))
    given += [f"{k}={_kind(v)}" for k, v in named if v is not None]
    raise TypeError(
        f"to() received an invalid combination of arguments - got ({', '.join(given)}), but "
        "expected one of:\n * (Device device=None, dtype dtype=None, *, bool copy=False)\n"
        " * (dtype dtype, *, bool copy=False)\n * (Tensor tensor, *, bool copy=False)"
    )


def _one_element(t: Tensor) -> Any:
    """The Python scalar of a one-element tensor, for ``float(t)`` and ``int(t)`` (torch's
    error otherwise)."""
    if t.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars")
    return t.item()


def _sizes(args: tuple[Any, ...]) -> list[Any]:
    """torch's size arguments: ``f(2, 3)`` or ``f((2, 3))``/``f([2, 3])``."""
    if len(args) == 1 and not isinstance(args[0], (builtins.int, np.integer)):
        return list(args[0])
    return list(args)


def _extreme(t: Tensor, name: str, pairwise: str, dim: Any, keepdim: builtins.bool) -> Any:
    if dim is None:
        return _op(f"oplib::{name}")(t)
    if isinstance(dim, Tensor):
        return _op(f"oplib::{pairwise}")(t, dim)
    return _op(f"oplib::{name}.dim")(t, dim, keepdim)


class Tensor:
    """A wrapper over one native array of an installed backend.

    Create tensors with :func:`oplib_core.tensor` and the factories; ops called with
    Tensors return Tensors (with autograd), called with native arrays return native arrays.
    """

    # Every slot is set in one place, ``_init``: by ``_wrap`` (how the core makes Tensors)
    # and by ``__init__`` (which checks its argument first). ``_out_nr`` is which output of
    # its ``grad_fn`` the tensor is (0 unless a multi-output autograd node made it).
    # ``_vc`` is the version counter of its storage: None until an in-place op or a view
    # needs one, then a one-element list shared with its views (``bump_version``).
    __slots__ = ("__weakref__", "_data", "_out_nr", "_rg", "_vc", "grad", "grad_fn")
    # numpy calls __array_ufunc__ (below) for its operators; the priority is for array
    # libraries that still read it
    __array_priority__ = 1000

    _data: Any
    _rg: bool
    grad: Tensor | None
    grad_fn: Any
    _out_nr: int
    _vc: list[Any] | None  # [version] or [version, ViewSet]

    if TYPE_CHECKING:
        # What ``methods.install`` sets at import: a method per core op (generated
        # from the op set; tests/test_tensor_methods.py checks these declarations against
        # it) and ``new_tensor``.
        def neg(self) -> Tensor: ...
        def exp(self) -> Tensor: ...
        def log(self) -> Tensor: ...
        def sin(self) -> Tensor: ...
        def cos(self) -> Tensor: ...
        def tanh(self) -> Tensor: ...
        def sigmoid(self) -> Tensor: ...
        def relu(self) -> Tensor: ...
        def abs(self) -> Tensor: ...
        def sqrt(self) -> Tensor: ...
        def add(self, other: Any) -> Tensor: ...
        def sub(self, other: Any) -> Tensor: ...
        def mul(self, other: Any) -> Tensor: ...
        def div(self, other: Any) -> Tensor: ...
        def pow(self, exponent: Any) -> Tensor: ...
        def maximum(self, other: Tensor) -> Tensor: ...
        def minimum(self, other: Tensor) -> Tensor: ...
        def eq(self, other: Any) -> Tensor: ...
        def ne(self, other: Any) -> Tensor: ...
        def lt(self, other: Any) -> Tensor: ...
        def le(self, other: Any) -> Tensor: ...
        def gt(self, other: Any) -> Tensor: ...
        def ge(self, other: Any) -> Tensor: ...
        def amax(self, dim: Any = None, keepdim: bool = False) -> Tensor: ...
        def amin(self, dim: Any = None, keepdim: bool = False) -> Tensor: ...
        def matmul(self, other: Any) -> Tensor: ...
        def transpose(self, dim0: int, dim1: int) -> Tensor: ...
        def broadcast_to(self, size: Any) -> Tensor: ...
        def unsqueeze(self, dim: int) -> Tensor: ...
        def squeeze(self, dim: Any = None) -> Tensor: ...
        def clone(self) -> Tensor: ...
        def copy_(self, src: Any) -> Tensor: ...
        def add_(self, other: Any) -> Tensor: ...
        def sub_(self, other: Any) -> Tensor: ...
        def mul_(self, other: Any) -> Tensor: ...
        def div_(self, other: Any) -> Tensor: ...
        def zero_(self) -> Tensor: ...
        def fill_(self, value: Any) -> Tensor: ...
        def clamp(self, min: Any = None, max: Any = None) -> Tensor: ...
        def clamp_(self, min: Any = None, max: Any = None) -> Tensor: ...
        def index_put(self, indices: Any, values: Any, accumulate: bool = False) -> Tensor: ...
        def index_put_(self, indices: Any, values: Any, accumulate: bool = False) -> Tensor: ...
        def astype(self, dtype: Any) -> Tensor: ...
        # indexing and views (issue 14)
        def select(self, dim: int, index: Any) -> Tensor: ...
        def narrow(self, dim: int, start: Any, length: Any) -> Tensor: ...
        def masked_select(self, mask: Tensor) -> Tensor: ...
        def index_select(self, dim: int, index: Tensor) -> Tensor: ...
        def gather(self, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor: ...
        def scatter(self, dim: int, index: Tensor, src: Any) -> Tensor: ...
        def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor: ...
        def tril(self, diagonal: Any = 0) -> Tensor: ...
        def triu(self, diagonal: Any = 0) -> Tensor: ...
        def split_with_sizes(self, split_sizes: Any, dim: int = 0) -> list[Tensor]: ...
        def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]: ...
        def movedim(self, source: Any, destination: Any) -> Tensor: ...
        def new_tensor(self, data: Any, *, dtype: Any = None, device: Any = None) -> Tensor: ...

    def __init__(self, data: Any, *, requires_grad: bool = False) -> None:
        if isinstance(data, Tensor):
            data = data._data
        if TABLE.for_type(type(data)) is None:
            missing = TABLE.missing_for(type(data))
            raise TypeError(
                f"Tensor(): expected a native array of an installed backend "
                f"({TABLE.names_text()}), got {type(data).__name__}"
                + (f": {missing}" if missing else "; use oplib.tensor(data) to convert Python data")
            )
        _init(self, data)
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _wrap(data: Any) -> Tensor:
        """A Tensor over ``data`` (not checked): no grad, no history. The one way the core
        makes Tensors; callers that record autograd set ``_rg``/``grad_fn`` afterwards."""
        # Complicated for better performance (one call less on every op that returns a
        # Tensor); equivalent: ``t = _new(Tensor); _init(t, data); return t``. Where the
        # dispatcher's compiled call is built, fastpath.py replaces this with its ``wrap``,
        # the same in C (``TENSOR_SLOTS`` there lists the slots it sets).
        # tests/test_fastpath.py checks that every slot is set.
        t = _new(Tensor)
        t._data = data
        t._rg = False
        t.grad = None
        t.grad_fn = None
        t._out_nr = 0
        t._vc = None
        return t

    # -- metadata -------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        b = TABLE.for_type(type(self._data))
        if b is None:
            missing = TABLE.missing_for(type(self._data))
            raise BackendError(
                f"this tensor's {type(self._data).__name__} array has no backend: "
                + (missing or "its backend is no longer installed")
            )
        return b

    @property
    def device(self) -> Device:
        if isinstance(self._data, FakeArray):  # fake tensors keep their own device
            return self._data.device
        return self.backend.device_of(self._data)

    @property
    def dtype(self) -> np.dtype:
        dtype = self._data.dtype
        if isinstance(dtype, np.dtype):
            return dtype
        # a library with its own dtype objects (array_api_strict, torch): its BackendSpec
        # converts them to oplib's
        return self.backend.dtype_of(self._data)

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
        from ..autograd._engine import backward  # the engine imports this module

        backward([self], [gradient], retain_graph=retain_graph, create_graph=create_graph)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def _new_like(
        self, op: str, size: tuple[Any, ...], *args: Any, dtype: Any, device: Any
    ) -> Tensor:
        # ``new_zeros(2, 3)`` and ``new_zeros((2, 3))`` alike, as torch
        if len(size) == 1 and not isinstance(size[0], int) and hasattr(size[0], "__iter__"):
            size = tuple(size[0])
        dev = self.device if device is None else to_device(device)
        dt = self.dtype if dtype is None else dtype
        return Tensor._wrap(_op(op)(list(size), *args, dtype=dt, device=dev))

    def new_empty(
        self, *size: Any, dtype: Any = None, layout: Any = None, device: Any = None
    ) -> Tensor:
        """An uninitialised tensor of ``size`` with this tensor's dtype and device (unless
        given); on a fake or meta tensor, a data-less one."""
        if layout is not None:
            check_layout(layout, "new_empty")
        return self._new_like("oplib::empty", size, dtype=dtype, device=device)

    def new_zeros(
        self, *size: Any, dtype: Any = None, layout: Any = None, device: Any = None
    ) -> Tensor:
        """Zeros of ``size`` with this tensor's dtype and device (unless given)."""
        if layout is not None:
            check_layout(layout, "new_zeros")
        return self._new_like("oplib::zeros", size, dtype=dtype, device=device)

    def new_ones(
        self, *size: Any, dtype: Any = None, layout: Any = None, device: Any = None
    ) -> Tensor:
        """Ones of ``size`` with this tensor's dtype and device (unless given)."""
        if layout is not None:
            check_layout(layout, "new_ones")
        return self._new_like("oplib::ones", size, dtype=dtype, device=device)

    def new_full(
        self,
        size: Any,
        fill_value: Any,
        *,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
    ) -> Tensor:
        """``fill_value`` in every element of ``size``, with this tensor's dtype and device
        (unless given)."""
        if layout is not None:
            check_layout(layout, "new_full")
        return self._new_like("oplib::full", (size,), fill_value, dtype=dtype, device=device)

    def detach(self) -> Tensor:
        """A new tensor sharing this one's data (and, as torch, its version counter: writing
        into it in place invalidates what autograd saved of this one), outside the graph."""
        out = Tensor._wrap(self._data)
        share_version(self, out, is_view=False)
        return out

    # -- conversions ----------------------------------------------------------------------
    def to(self, *args: Any, device: Any = None, dtype: Any = None, copy: bool = False) -> Tensor:
        """Copy to a device and/or cast to a dtype: ``t.to(dtype)``, ``t.to(device)``,
        ``t.to(device, dtype)``, ``t.to(other)`` (``other``'s device and dtype) or by keyword;
        returns ``self`` when nothing changes and ``copy`` is false."""
        if args:
            device, dtype = _to_args(args, device, dtype)
        target = None if device is None else to_device(device)
        same_device = target is None  # (t.to(dtype) reads no device: ~0.5 µs a call)
        if target is not None:
            here = self.device
            same_device = target.type == here.type and (
                target.index is None
                or here.index is None  # a single-device backend: "cpu" is "cpu:0"
                or target.index == here.index
            )
        if dtype is not None:
            dtype = to_dtype(dtype)
        if same_device and (dtype is None or dtype == self.dtype) and not copy:
            return self
        return _op("oplib::_to_copy")(self, dtype=dtype, device=target)

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor with ``other``'s dtype and device (``self`` when they already match)."""
        return self.to(other)

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
            from .numpy_interop import REQUIRES_GRAD_MESSAGE

            raise RuntimeError(REQUIRES_GRAD_MESSAGE)
        if self.backend.name != "cpu":
            raise TypeError(
                f"can't convert a {self.device} tensor to numpy; copy it to the host first "
                "with tensor.to('cpu')"
            )
        array: np.ndarray = self._data
        return array

    # -- numpy protocols: functions with a core op dispatch it (numpy_interop.py) ---------
    # (imported when numpy first meets a Tensor: its tables are not needed to run ops)
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        from .numpy_interop import to_numpy

        return to_numpy(self, dtype, copy)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from .numpy_interop import array_ufunc

        return array_ufunc(self, ufunc, method, inputs, kwargs)

    def __array_function__(
        self, func: Any, types: tuple[type, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        from .numpy_interop import array_function

        return array_function(self, func, types, args, kwargs)

    # -- the array API standard (oplib.array_api) ---------------------------------------------
    def __array_namespace__(self, *, api_version: str | None = None) -> ModuleType:
        """``oplib.array_api``, the namespace of the array API standard (2023.12) whose
        functions dispatch through oplib's ops."""
        if api_version is not None and api_version not in _ARRAY_API_VERSIONS:
            raise ValueError(
                f"__array_namespace__(): oplib.array_api follows the array API standard "
                f"{_ARRAY_API_VERSIONS[-1]}; api_version={api_version!r} is not supported "
                f"(expected None or one of {', '.join(_ARRAY_API_VERSIONS)})"
            )
        # imported on first use: the namespace sits above Tensor in the module graph
        return importlib.import_module("oplib_core.array_api")

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """The array API standard's ``to_device``: ``self.to(device)`` (``stream`` must be
        None: oplib has no streams)."""
        if stream is not None:
            raise ValueError("to_device(): oplib has no streams; pass stream=None")
        return self.to(device)

    def tolist(self) -> Any:
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.tolist()")
        return self.backend.to_host(self._data).tolist()

    def item(self) -> Any:
        """The one element as a Python scalar."""
        if isinstance(self._data, FakeArray):
            raise self._data._no_data("Tensor.item()")
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self.backend.to_host(self._data).item()

    def __float__(self) -> builtins.float:
        return builtins.float(_one_element(self))

    def __int__(self) -> builtins.int:
        return builtins.int(_one_element(self))

    def __index__(self) -> builtins.int:
        if self.numel() != 1 or self.dtype.kind not in "biu":
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return builtins.int(self.item())

    def __bool__(self) -> builtins.bool:
        n = self.numel()
        if n != 1:
            amount = "no values" if n == 0 else "more than one value"
            raise RuntimeError(f"Boolean value of Tensor with {amount} is ambiguous")
        return builtins.bool(self.item())

    def __format__(self, format_spec: str) -> str:
        """``f"{t:.2f}"`` formats a one-element tensor's value; other tensors take only the
        empty format (``f"{t}"``, their repr)."""
        if format_spec and self.numel() == 1:  # a fake tensor's item() says it has no data
            return format(self.item(), format_spec)
        return object.__format__(self, format_spec)

    def __iter__(self) -> Iterator[Tensor]:
        """The tensor's rows (along the first dimension): views from ``oplib::select``,
        which records gradients."""
        if not self._data.shape:
            raise TypeError("iteration over a 0-d tensor")
        select = _op("oplib::select.int")
        return (select(self, 0, i) for i in range(self._data.shape[0]))

    def __getitem__(self, key: Any) -> Tensor:
        """``t[i]``, ``t[a:b:c]``, ``t[..., None]``, ``t[idx]``, ``t[mask]`` and tuples of
        them, through the core indexing ops (``indexing.py``): basic indices give views,
        integer-array and bool-mask indices a copy."""
        return indexing.getitem(self, key)

    def __contains__(self, element: Any) -> builtins.bool:
        """``element in t``: whether any element equals ``element`` (a scalar or Tensor)."""
        if not (_is_scalar(element) or isinstance(element, Tensor)):
            raise RuntimeError(
                "Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                f"{type(element)}."
            )
        return builtins.bool((self == element).sum().item() > 0)

    # -- storage facts ----------------------------------------------------------------------
    @property
    def is_cuda(self) -> builtins.bool:
        return self.device.type == "cuda"

    @property
    def is_meta(self) -> builtins.bool:
        return self.device.type == "meta"

    def element_size(self) -> builtins.int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> builtins.int:
        return self.numel() * self.dtype.itemsize

    def stride(self, dim: builtins.int | None = None) -> Any:
        """torch's strides, in elements, of backends whose arrays have strides (numpy's and
        cupy's ``strides`` in bytes, a fake array's contiguous ones); ``stride(dim)`` one."""
        data = self._data
        if isinstance(data, FakeArray):
            return data.stride(dim)
        strides = getattr(data, "strides", None)
        if strides is None:
            raise RuntimeError(
                f"stride(): tensors on the {self.device} device have no strides (the "
                f"{type(data).__name__} arrays of backend {self.backend.name!r} do not expose "
                "a memory layout)"
            )
        elements = tuple(s // self.dtype.itemsize for s in strides)
        if dim is None:
            return elements
        if not -len(elements) <= dim < len(elements):
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-len(elements)}, "
                f"{len(elements) - 1}], but got {dim})"
            )
        return elements[dim]

    @property
    def layout(self) -> Layout:
        """``oplib.strided``: every oplib tensor is a dense array (torch's ``Tensor.layout``)."""
        return strided

    def is_contiguous(self, memory_format: MemoryFormat = contiguous_format) -> builtins.bool:
        """Whether the elements lie in memory in ``memory_format``'s order with no gaps
        (row-major for ``contiguous_format``; dimensions of size 1 and empty tensors count
        as torch counts them). Arrays without a memory layout of their own (fake, meta, jax)
        are contiguous; ``channels_last`` asks a 4-d tensor, ``channels_last_3d`` a 5-d
        one, and is False for any other rank."""
        fmt = check_memory_format(memory_format, "is_contiguous")
        return _laid_out(self, fmt)

    def contiguous(self, memory_format: MemoryFormat = contiguous_format) -> Tensor:
        """This tensor if it is contiguous in ``memory_format`` (see ``is_contiguous``), else
        a copy that is, in the autograd graph as torch's ``contiguous()`` is (gradients flow
        back to this tensor)."""
        fmt = check_memory_format(memory_format, "contiguous")
        if fmt.ndim is not None and self.ndim != fmt.ndim:
            raise RuntimeError(f"required rank {fmt.ndim} tensor to use {fmt.name} format")
        if _laid_out(self, fmt):
            return self
        order = fmt.dims_inner_first(self.ndim)
        if order is None:
            raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
        # A row-major buffer of the dimensions in memory order (outermost first), seen back
        # in this tensor's order: for channels_last, NHWC memory behind an NCHW tensor.
        outer_first = list(reversed(order))
        moved = outer_first != list(range(self.ndim))
        src = self.permute(outer_first) if moved else self
        buf = Tensor._wrap(
            _op("oplib::empty")(list(src.shape), dtype=self.dtype, device=self.device)
        )
        buf.copy_(src)
        return buf.permute([outer_first.index(d) for d in range(self.ndim)]) if moved else buf

    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule of this tensor's memory, from its array's own ``__dlpack__``
        (the arguments, ``stream``, ``dl_device``, ``copy`` ..., pass through)."""
        return self._dlpack_method("__dlpack__")(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(DLPack device type, device id)`` of the memory itself, as its array reports it:
        ``(1, 0)`` on cpu, ``(2, k)`` for a cupy array or a jax array on CUDA GPU ``k``."""
        kind, index = self._dlpack_method("__dlpack_device__")()
        return int(kind), int(index)

    def _dlpack_method(self, name: str) -> Any:
        method = getattr(self._data, name, None)
        if method is None:
            raise BufferError(
                f"{name}(): the {self.backend.name} backend's arrays "
                f"({type(self._data).__name__}) do not support DLPack; copy the tensor to the "
                "host first with tensor.cpu()"
            )
        return method

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        # pickle and deepcopy: refused for a tensor with a grad_fn (its graph would travel)
        return pickling.tensor_state(self)

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
            out: Tensor = _op("oplib::add")(self, other)
            return out
        if type(other) in _PYTHON_SCALARS:  # a Python number: the .Scalar overload, at once
            out = _op("oplib::add.Scalar")(self, other)
            return out
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _reverse("add", "add", self, other)

    def __sub__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = _op("oplib::sub")(self, other)
            return out
        if type(other) in _PYTHON_SCALARS:  # a Python number: the .Scalar overload, at once
            out = _op("oplib::sub.Scalar")(self, other)
            return out
        return _binary("sub", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _reverse("sub", "rsub", self, other)

    def __mul__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = _op("oplib::mul")(self, other)
            return out
        if type(other) in _PYTHON_SCALARS:  # a Python number: the .Scalar overload, at once
            out = _op("oplib::mul.Scalar")(self, other)
            return out
        return _binary("mul", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _reverse("mul", "mul", self, other)

    def __truediv__(self, other: Any) -> Tensor:
        if type(other) is Tensor:  # what backward formulas do: no scalar checks
            out: Tensor = _op("oplib::div")(self, other)
            return out
        if type(other) in _PYTHON_SCALARS:  # a Python number: the .Scalar overload, at once
            out = _op("oplib::div.Scalar")(self, other)
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

    # -- in-place operators and assignment (in-place ops bump the storage's version) ------
    @property
    def _version(self) -> builtins.int:
        """How many times this tensor's storage (shared with its views) was written in place,
        as torch's ``Tensor._version``."""
        vc = self._vc
        return 0 if vc is None else vc[0]

    def __iadd__(self, other: Any) -> Tensor:
        return _inplace("add_", self, other)

    def __isub__(self, other: Any) -> Tensor:
        return _inplace("sub_", self, other)

    def __imul__(self, other: Any) -> Tensor:
        return _inplace("mul_", self, other)

    def __itruediv__(self, other: Any) -> Tensor:
        return _inplace("div_", self, other)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[key] = value`` as torch: ints, slices, ``...``, None, integer-array and bool-mask
        indices; ``value`` a scalar or a tensor that broadcasts to the indexed shape (cast to
        this tensor's dtype). An in-place op (``oplib::index_put_``) with autograd."""
        setitem.setitem(self, key, value)

    # -- common methods -------------------------------------------------------------------
    def sum(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        if dtype is None:  # (a call without keywords takes the dispatcher's fast path)
            return _op("oplib::sum")(self, dim, keepdim)
        return _op("oplib::sum")(self, dim, keepdim, dtype=dtype)

    def mean(self, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
        if dtype is None:
            return _op("oplib::mean")(self, dim, keepdim)
        return _op("oplib::mean")(self, dim, keepdim, dtype=dtype)

    def reshape(self, *shape: Any) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        return _op("oplib::reshape")(self, list(shape))

    def permute(self, *dims: Any) -> Tensor:
        """``t.permute(1, 0)`` or ``t.permute((1, 0))``, as torch."""
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        return _op("oplib::permute")(self, list(dims))

    def where(self, condition: Any, other: Any) -> Tensor:
        """``self`` where ``condition`` holds, else ``other`` (torch's ``Tensor.where``; the
        op's own argument order is ``where(condition, self, other)``)."""
        if _is_scalar(other):  # a 0-d tensor of the promoted dtype (a Python scalar is weak)
            dtype = np.result_type(self.dtype, other)
            other = _op("oplib::full")([], other, dtype=dtype, device=self.device)
        return _op("oplib::where")(condition, self, other)

    # -- indexing and views with torch's calling conventions (issue 14) ---------------------
    def view(self, *size: Any) -> Tensor:
        """This tensor's data seen with shape ``size`` (``t.view(2, 3)``, ``t.view((2, 3))``);
        never copies: torch's error when the strides do not allow it (use ``reshape``)."""
        return _op("oplib::view")(self, _sizes(size))

    def expand(self, *size: Any) -> Tensor:
        """A broadcast view with shape ``size`` (-1 keeps a dim), as torch."""
        return _op("oplib::expand")(self, _sizes(size))

    def repeat(self, *repeats: Any) -> Tensor:
        """A copy repeated ``repeats[d]`` times along each dim (``t.repeat(2, 1)``)."""
        return _op("oplib::repeat")(self, _sizes(repeats))

    def tile(self, *dims: Any) -> Tensor:
        """``repeat`` with ones prepended when ``dims`` is shorter than ``ndim``."""
        return _op("oplib::tile")(self, _sizes(dims))

    def flip(self, *dims: Any) -> Tensor:
        """A copy reversed along ``dims`` (``t.flip(0)``, ``t.flip(0, 1)``, ``t.flip((0, 1))``)."""
        return _op("oplib::flip")(self, _sizes(dims))

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        """A copy shifted with wrap-around; without ``dims`` along the flattened tensor."""
        shifts = [shifts] if isinstance(shifts, builtins.int) else list(shifts)
        dims = [] if dims is None else [dims] if isinstance(dims, builtins.int) else list(dims)
        return _op("oplib::roll")(self, shifts, dims)

    def split(self, split_size_or_sections: Any, dim: builtins.int = 0) -> list[Tensor]:
        """Views of ``split_size`` along ``dim``, or of the given sizes for a list."""
        if isinstance(split_size_or_sections, builtins.int):
            return _op("oplib::split.Tensor")(self, split_size_or_sections, dim)  # type: ignore[return-value]
        return _op("oplib::split_with_sizes")(self, list(split_size_or_sections), dim)  # type: ignore[return-value]

    def tensor_split(self, indices_or_sections: Any, dim: builtins.int = 0) -> list[Tensor]:
        """``sections`` views (an int), or views cut at ``indices`` (a list), along ``dim``."""
        if isinstance(indices_or_sections, builtins.int):
            return _op("oplib::tensor_split.sections")(self, indices_or_sections, dim)  # type: ignore[return-value]
        return _op("oplib::tensor_split.indices")(self, list(indices_or_sections), dim)  # type: ignore[return-value]

    def max(self, dim: Any = None, keepdim: builtins.bool = False) -> Any:
        """The largest element (``t.max()``), ``(values, indices)`` along ``dim``
        (``t.max(1)``), or the elementwise maximum with a tensor (``t.max(other)``)."""
        return _extreme(self, "max", "maximum", dim, keepdim)

    def min(self, dim: Any = None, keepdim: builtins.bool = False) -> Any:
        """The smallest element, ``(values, indices)`` along ``dim``, or the elementwise
        minimum with a tensor, as :meth:`max`."""
        return _extreme(self, "min", "minimum", dim, keepdim)

    @property
    def T(self) -> Tensor:
        """The dimensions reversed (torch warns for other than 2-d; oplib does not)."""
        return _op("oplib::permute")(self, list(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        """The last two dimensions swapped (a batch of matrices transposed)."""
        if self.ndim < 2:
            raise RuntimeError(
                "tensor.mT is only supported on matrices or batches of matrices. Got "
                f"{self.ndim}-D tensor."
            )
        return _op("oplib::transpose")(self, -2, -1)

    # -- torch's casts --------------------------------------------------------------------
    # Last in the class: type checkers read ``int``/``float``/``bool`` in annotations after
    # these as the methods (write ``builtins.int`` there for the type).
    def float(self) -> Tensor:
        return self.to(dtype=np.float32)

    def double(self) -> Tensor:
        return self.to(dtype=np.float64)

    def half(self) -> Tensor:
        return self.to(dtype=np.float16)

    def long(self) -> Tensor:
        return self.to(dtype=np.int64)

    def int(self) -> Tensor:
        return self.to(dtype=np.int32)

    def bool(self) -> Tensor:
        return self.to(dtype=np.bool_)
