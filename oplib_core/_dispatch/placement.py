"""Argument placement: which arrays a call has, and which backend runs it.

``place`` unwraps Tensors into their native arrays, finds every tensor argument, and picks
the backend: the arrays' own (a backend that accepts the others' arrays when they differ),
the ``Device`` argument's for factories, ``cpu`` without either. It refuses arrays on
different devices, and moves 0-d cpu arrays (Python scalars' stand-ins) to the backend when
it does not take cpu arrays. ``wrap`` turns a kernel's native results back into Tensors.
"""

from __future__ import annotations

from typing import Any

from .._device import Device
from .._tensor import Tensor
from ..backends import TABLE, Backend
from ..errors import BackendError, CallArgumentError, DeviceMismatchError
from .binding import ReturnPlan, Signature

__all__ = ["Found", "Placement", "place", "wrap"]

#: A tensor argument after unwrapping: (name, native array, container, index), where
#: ``container[index]`` is its place in the native arguments.
Found = tuple[str, Any, Any, Any]


class Placement:
    """A call after unwrapping: the native arguments, the arrays found, the backend.

    ``nargs``/``nkwargs`` are the bound arguments with native arrays in place of Tensors
    (what a backend kernel gets); ``found`` lists the tensor arguments (``Found``);
    ``tensors_in`` whether any argument was a Tensor (results are then wrapped);
    ``requires_grad`` whether one of those requires grad; ``converted`` whether scalars
    were moved to the backend (such calls are not cached)."""

    __slots__ = ("backend", "converted", "found", "nargs", "nkwargs", "requires_grad", "tensors_in")

    def __init__(
        self,
        nargs: list[Any],
        nkwargs: dict[str, Any],
        found: list[Found],
        tensors_in: bool,
        requires_grad: bool,
        backend: Backend,
        converted: bool,
    ) -> None:
        self.nargs = nargs
        self.nkwargs = nkwargs
        self.found = found
        self.tensors_in = tensors_in
        self.requires_grad = requires_grad
        self.backend = backend
        self.converted = converted


def place(sig: Signature, qualname: str, bargs: list[Any], bkwargs: dict[str, Any]) -> Placement:
    """Unwrap Tensors, find the arrays and the backend the call runs on (bound arguments
    in; the caller's lists are not changed)."""
    nargs = list(bargs)
    nkwargs = dict(bkwargs)
    tensors_in = False
    requires_grad = False
    found: list[Found] = []
    for name, value, container, index in sig.tensor_arguments(nargs, nkwargs):
        if type(value) is Tensor:
            tensors_in = True
            requires_grad = requires_grad or value._rg
            value = value._data
            container[index] = value
        found.append((name, value, container, index))
    if found:
        backend, converted = _backend_for(sig, qualname, found)
    else:
        backend, converted = _factory_backend(sig, qualname, nargs, nkwargs), False
    return Placement(nargs, nkwargs, found, tensors_in, requires_grad, backend, converted)


def _backend_for(sig: Signature, qualname: str, found: list[Found]) -> tuple[Backend, bool]:
    """The backend of the arrays; moves 0-d cpu arrays (scalars) to it if needed."""
    for_type = TABLE.for_type
    main: list[tuple[str, Any, Backend]] = []
    scalars: list[tuple[Any, Backend, Any, Any]] = []
    for name, arr, container, index in found:
        b = for_type(type(arr))
        if b is None:
            raise CallArgumentError(
                f"{qualname}(): argument {name!r} is a {type(arr).__name__}, which no "
                f"installed backend recognises ({TABLE.names_text()})",
                op=qualname,
                schema=str(sig.binder.schema),
            )
        if b.name == "cpu" and getattr(arr, "ndim", None) == 0:
            scalars.append((arr, b, container, index))
        else:
            main.append((name, arr, b))
    if not main:
        return scalars[0][1], False
    backend = main[0][2]
    backends = {b.name: b for _, _, b in main}
    if len(backends) > 1:
        backend = _accepting_backend(qualname, backends, main)
    if backend.multi_device:
        devices = {name: backend.device_of(arr) for name, arr, b in main if b is backend}
        if len(set(devices.values())) > 1:
            raise _mismatch(qualname, {n: str(d) for n, d in devices.items()})
    if backend.name != "cpu" and scalars and "cpu" not in backend.spec.accepts:
        dev = backend.device_of(main[0][1])
        for arr, _, container, index in scalars:
            container[index] = backend.from_host(arr, dev)
        return backend, True
    return backend, False


def _accepting_backend(
    qualname: str, backends: dict[str, Backend], main: list[tuple[str, Any, Backend]]
) -> Backend:
    """Of the arrays' backends, the one that accepts all the others' arrays."""
    for b in backends.values():
        if all(o == b.name or o in b.spec.accepts for o in backends):
            return b
    raise _mismatch(qualname, {name: str(b.device_of(arr)) for name, arr, b in main})


def _mismatch(qualname: str, devices: dict[str, str]) -> DeviceMismatchError:
    listing = ", ".join(f"{n!r} on {d}" for n, d in devices.items())
    return DeviceMismatchError(
        f"{qualname}(): expected all tensor arguments on one device, got {listing}; move "
        "them with .to(device) first",
        op=qualname,
        devices=devices,
    )


def _factory_backend(
    sig: Signature, qualname: str, nargs: list[Any], nkwargs: dict[str, Any]
) -> Backend:
    """No tensor arguments: the ``Device`` argument's backend, else cpu."""
    slot = sig.device_arg
    dev: Device | None = slot.get(nargs, nkwargs) if slot is not None else None
    name = "cpu" if dev is None else dev.type
    backend = TABLE.find(name)
    if backend is None:
        raise BackendError(
            f"{qualname}(): no backend {name!r} is installed (installed: {TABLE.names_text()})"
        )
    return backend


# -- results ----------------------------------------------------------------------------------


def wrap(sig: Signature, out: Any, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
    """A kernel's native results as the caller gets them when Tensors came in: Tensors
    (a returned mutated input is that input's own Tensor)."""
    plan = sig.returns
    if not plan:  # "-> ()": the kernel returns None
        return out
    if len(plan) == 1:
        return _wrap_one(plan[0], out, bargs, bkwargs)
    return tuple(_wrap_one(p, o, bargs, bkwargs) for p, o in zip(plan, out, strict=True))


def _wrap_one(plan: ReturnPlan, value: Any, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
    kind, alias = plan
    if alias is not None:
        original = alias.get(bargs, bkwargs)
        if type(original) is Tensor and original._data is value:
            return original
    if kind == "tensor":
        return value if value is None else Tensor._wrap(value)
    if kind == "list":
        return [Tensor._wrap(v) for v in value]
    return value
