"""Tensor factories: ``tensor``, ``empty``, ``zeros``, ``ones``, ``full``, ``arange``, the
``*_like`` forms, and ``from_dlpack``. They call the core factory ops, so every backend's
kernels serve them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from ._dispatch import ACTIVE, DEVICE_KEYS, MODES, sized_tensor
from ._dtypes import check_layout, get_default_dtype, to_dtype
from ._registry.registry import op_named
from ._tensor.tensor import Tensor
from .backends import TABLE, Backend, not_installed
from .backends import device as to_device
from .errors import ArgumentTypeError, BackendError
from .fake._arrays import FakeArray

__all__ = [
    "arange",
    "empty",
    "empty_like",
    "from_dlpack",
    "full",
    "ones",
    "tensor",
    "zeros",
    "zeros_like",
]


_wrap = Tensor._wrap


def _made(
    qualname: str, args: tuple[Any, ...], dtype: Any, device: Any, requires_grad: bool
) -> Tensor:
    """Factory op ``qualname`` on ``args`` as a Tensor, ``dtype`` and ``device`` passed only
    when given: the op's defaults, and the common cases of its cached call (issue 30: a
    keyword dict built and trimmed per call, a device string parsed here, and a helper
    call each for the op and the Tensor cost about a microsecond)."""
    op = op_named(qualname)
    # None, a str, an int or a Device go to the op as given: its cache holds them so (and
    # it parses a str once per string); anything else is made a Device here
    if type(device) not in DEVICE_KEYS:
        device = to_device(device)
    if dtype is None:
        data = op(*args) if device is None else op(*args, device=device)
    else:
        data = op(*args, dtype=dtype) if device is None else op(*args, dtype=dtype, device=device)
    t = _wrap(data)
    if requires_grad:
        t.requires_grad_(True)
    return t


#: The factory ops ``_sized`` calls, by name, each looked up once (core ops: never replaced).
_SIZED_OPS: dict[str, Any] = {}


def _sized(
    qualname: str, size: tuple[Any, ...], dtype: Any, layout: Any, device: Any, requires_grad: bool
) -> Tensor:
    """``empty``, ``zeros`` and ``ones``: factory op ``qualname`` on the shape ``*size``
    gives, as a Tensor. Where the dispatcher's cached call is compiled, its common case (no
    ``layout``, no grad, a device as the op's cache holds it) is one call in C
    (``sized_tensor``: the op's call and the Tensor; issue 30, ``oplib.zeros(1,
    dtype=..., device="cuda")`` within +1.5 µs of ``cupy.zeros``)."""
    if sized_tensor is not None and layout is None and not requires_grad:
        op = _SIZED_OPS.get(qualname)
        if op is None:
            op = _SIZED_OPS[qualname] = op_named(qualname)
        t = sized_tensor(op, size, dtype, device)
        if t is not None:
            return t
    if layout is not None:
        check_layout(layout, qualname.partition("::")[2])
    return _made(qualname, (_size(size),), dtype, device, requires_grad)


def _size(size: tuple[Any, ...]) -> list[Any]:
    """The shape of ``zeros(2, 3)``, ``zeros(4)``, ``zeros((2, 3))``, ``zeros([2, 3])``."""
    if len(size) != 1 or type(size[0]) is int:
        return list(size)
    first = size[0]
    if isinstance(first, (Sequence, np.ndarray)) and not isinstance(first, str):
        return list(first)
    return list(size)


def tensor(
    data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A Tensor from Python data or a native array of any installed backend.

    Native arrays are wrapped without a copy when neither ``dtype`` nor ``device`` asks for a
    change (a cupy array becomes a ``cuda`` tensor, a dask array a ``dask`` tensor). Python
    floats become the default dtype (float32), as in torch.
    """
    if isinstance(data, Tensor):
        data = data._data
    backend = TABLE.for_type(type(data))
    if backend is None:
        arr = np.asarray(data)
        if not isinstance(data, (np.ndarray, np.generic)):
            if dtype is not None and arr.dtype.kind in "biufcO":
                # straight to the asked dtype, not through the default one or numpy's guess
                # (float32 would round 16777217.0, float64 2**63 + 1, before the cast)
                arr = np.asarray(data, dtype=to_dtype(dtype))
            # Python floats (and, as in torch, complex numbers) follow the default dtype
            elif arr.dtype == np.float64:
                arr = arr.astype(get_default_dtype())
            elif arr.dtype == np.complex128:
                arr = arr.astype(np.result_type(get_default_dtype(), np.complex64))
        if arr.dtype.kind in "OUS" or arr.dtype.type is np.void:  # not bfloat16/float8
            raise TypeError(
                f"tensor(): cannot make a tensor from {type(data).__name__} data ({arr.dtype})"
            )
        data = arr
        if TABLE.find("cpu") is None:
            raise not_installed("cpu", "tensor")
    t = Tensor._wrap(data)
    if ACTIVE[0] and MODES.stack:
        t = _under_fake_mode(t)
    if dtype is not None or device is not None:
        t = t.to(device, dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _under_fake_mode(t: Tensor) -> Tensor:
    """``t`` made fake by the innermost FakeTensorMode of this thread, if there is one (as
    ``torch.tensor`` under the mode); data given to ``tensor()`` is real, not an op's result."""
    from .fake._mode import FakeTensorMode

    for mode in reversed(MODES.stack):
        if isinstance(mode, FakeTensorMode):
            return mode.from_real(t)
    return t


def empty(
    *size: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """An uninitialised tensor of ``size`` (ints, or one sequence)."""
    return _sized("oplib::empty", size, dtype, layout, device, requires_grad)


def zeros(
    *size: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _sized("oplib::zeros", size, dtype, layout, device, requires_grad)


def ones(
    *size: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    return _sized("oplib::ones", size, dtype, layout, device, requires_grad)


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    if layout is not None:
        check_layout(layout, "full")
    return _made("oplib::full", (list(size), fill_value), dtype, device, requires_grad)


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``arange(end)`` or ``arange(start, end, step)``; ints give int64, floats the default
    dtype."""
    if layout is not None:
        check_layout(layout, "arange")
    if end is None:
        return _made("oplib::arange", (start,), dtype, device, requires_grad)
    return _made("oplib::arange.start", (start, end, step), dtype, device, requires_grad)


def _like(name: str, other: Any, dtype: Any, device: Any, requires_grad: bool) -> Any:
    """``*_like`` of a Tensor gives a Tensor; of a native array (as in kernels and fake
    kernels), a native array of the same backend."""
    native = not isinstance(other, Tensor)
    if isinstance(other, FakeArray):
        if device is None and name == "empty":  # a data-less array like another: no op needed
            return other._new(tuple(other.shape), other.dtype if dtype is None else to_dtype(dtype))
        here = other.device  # fake arrays know their device (FakeTensorMode)
    elif native:
        backend = TABLE.for_type(type(other))
        if backend is None:
            raise TypeError(
                f"{name}_like(): expected a Tensor or a native array of an installed backend, "
                f"got {type(other).__name__}"
            )
        here = backend.device_of(other)
    else:
        here = other.device
    dev = device if device is not None else here
    shape = (list(other.shape),)
    made = _made(f"oplib::{name}", shape, dtype or other.dtype, dev, requires_grad and not native)
    return made._data if native else made


@overload
def empty_like(
    other: Tensor,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor: ...
@overload
def empty_like(
    other: FakeArray,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> FakeArray: ...
@overload
def empty_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any: ...
def empty_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    if layout is not None:
        check_layout(layout, "empty_like")
    return _like("empty", other, dtype, device, requires_grad)


@overload
def zeros_like(
    other: Tensor,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor: ...
@overload
def zeros_like(
    other: FakeArray,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> FakeArray: ...
@overload
def zeros_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any: ...
def zeros_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    if layout is not None:
        check_layout(layout, "zeros_like")
    return _like("zeros", other, dtype, device, requires_grad)


@overload
def ones_like(
    other: Tensor,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor: ...
@overload
def ones_like(
    other: FakeArray,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> FakeArray: ...
@overload
def ones_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any: ...
def ones_like(
    other: Any,
    *,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Any:
    if layout is not None:
        check_layout(layout, "ones_like")
    return _like("ones", other, dtype, device, requires_grad)


#: DLPack's device types (dlpack.h's ``DLDeviceType``), named in ``from_dlpack``'s errors.
DLPACK_DEVICE_TYPES = {
    1: "CPU",
    2: "CUDA",
    3: "CUDA pinned host",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    11: "ROCm pinned host",
    12: "extension device",
    13: "CUDA managed",
    14: "oneAPI",
    15: "WebGPU",
    16: "Hexagon",
    17: "MAIA",
}
#: Memory of another type that the importers of these types can read when no installed
#: backend declares its type: pinned host memory is host memory (numpy's ``from_dlpack``
#: takes it), managed memory is readable on its GPU and on the host.
_READABLE_AS = {3: (1,), 11: (1,), 13: (2, 1)}


def _dlpack_device(obj: Any) -> tuple[int, int]:
    ask = getattr(obj, "__dlpack_device__", None)
    if ask is None:
        raise ArgumentTypeError(
            "from_dlpack(): expected a DLPack producer (an object with __dlpack__ and "
            f"__dlpack_device__: a torch, cupy, jax or numpy array), got {type(obj).__name__}",
            api="from_dlpack",
            argument="obj",
            value=obj,
        )
    kind, index = ask()
    return int(kind), int(index)


def _memory_text(kind: int, index: int) -> str:
    """``"CUDA memory of device 1 (DLPack device type 2)"``."""
    name = DLPACK_DEVICE_TYPES.get(kind)
    return f"{name + ' ' if name else ''}memory of device {index} (DLPack device type {kind})"


def from_dlpack(obj: Any) -> Tensor:
    """Zero-copy import of any DLPack producer (torch, jax, cupy, numpy arrays, a Tensor) as
    a Tensor on the backend that owns its memory, on the device that holds it.

    The array's own library's backend comes first: a jax array stays on ``jax``, on its
    own device (``jax:k``), CPU or GPU alike; a Tensor's array returns to its backend.
    Any other producer goes by its ``__dlpack_device__()`` (type, id): to the
    highest-priority available backend that imports that type (``BackendSpec.
    dlpack_device_type``), on device ``id``: a torch CUDA tensor or a cupy array on GPU
    ``k`` to ``cuda:k``, host memory of another library (numpy, a torch cpu tensor) to
    ``cpu``; pinned host memory is host memory. ``BackendError`` when no installed backend
    can import it, naming the memory and what would."""
    if isinstance(obj, Tensor):
        obj = obj._data
    own = TABLE.for_type(type(obj))
    if own is not None and own.spec.from_dlpack is not None:
        return Tensor._wrap(own.spec.from_dlpack(obj))
    kind, index = _dlpack_device(obj)
    importers = [
        (b, b.spec.from_dlpack)
        for k in (kind, *_READABLE_AS.get(kind, ()))
        for b in TABLE.all()
        if b.spec.dlpack_device_type == k and b.spec.from_dlpack is not None
    ]
    for b, take in importers:
        if b.is_available():
            return _imported(b, take(obj), kind, index)
    what = _memory_text(kind, index)
    if importers:
        reasons = "; ".join(f"the {b.name} backend: {b.status()}" for b, _ in importers)
        raise BackendError(f"from_dlpack(): cannot import {what}: {reasons}")
    known = ", ".join(
        f"{b.name} (type {b.spec.dlpack_device_type}, "
        f"{DLPACK_DEVICE_TYPES.get(b.spec.dlpack_device_type, 'unnamed')})"
        for b in TABLE.all()
        if b.spec.dlpack_device_type is not None and b.spec.from_dlpack is not None
    )
    raise BackendError(
        f"from_dlpack(): no installed backend imports DLPack device type {kind}: the array "
        f"is in {what}, and the installed backends import {known or 'none'}; copy the array "
        "to the host in its own library first"
    )


def _imported(b: Backend, data: Any, kind: int, index: int) -> Tensor:
    """``data`` (what ``b`` imported) as a Tensor, checked to be where the producer said: a
    multi-device backend importing its own memory type must keep the device id."""
    if kind == b.spec.dlpack_device_type and b.multi_device:
        got = b.device_of(data)
        if got.index != index:
            source = f" ({b.distribution})" if b.distribution else ""
            raise BackendError(
                f"from_dlpack(): the {b.name} backend{source} imported "
                f"{_memory_text(kind, index)} as {got}, not {b.name}:{index}: its "
                "BackendSpec.from_dlpack must keep the producer's device"
            )
    return Tensor._wrap(data)
