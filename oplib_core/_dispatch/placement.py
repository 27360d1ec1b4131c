"""Argument placement: which arrays a call has, and which backend runs it.

``place`` unwraps Tensors into their native arrays, finds every tensor argument, and picks
the backend: the arrays' own (a backend that accepts the others' arrays when they differ),
the ``Device`` argument's for factories, ``cpu`` without either. It refuses arrays on
different devices, and moves 0-d cpu arrays (Python scalars' stand-ins) to the backend when
it does not take cpu arrays. ``check_result`` holds a kernel's result to its schema (an
``oplib.Tensor`` returned for a ``Tensor`` becomes its array; a list, a Python scalar, a
tuple of the wrong length or a foreign array raises ``KernelResultError``), and ``wrap``
turns a kernel's native results back into Tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._device import Device
from .._registry.entry import OpEntry
from .._schema import OptionalType
from .._tensor.tensor import Tensor, bump_version, share_version
from ..backends import TABLE, Backend, not_installed
from ..errors import CallArgumentError, DeviceMismatchError, KernelResultError
from .binding import ReturnPlan, Signature

__all__ = ["Found", "Placement", "as_tensors", "check_result", "checking", "place", "wrap"]

#: A tensor argument after unwrapping: (name, native array, container, index), where
#: ``container[index]`` is its place in the native arguments.
Found = tuple[str, Any, Any, Any]


class Placement:
    """A call after unwrapping: the native arguments, the arrays found, the backend.

    ``nargs``/``nkwargs`` are the bound arguments with native arrays in place of Tensors
    (what a backend kernel gets); ``found`` lists the tensor arguments (``Found``);
    ``tensors_in`` whether any argument was a Tensor, or none was an array and the op
    returns Tensors then (``Signature.wrap_bare``): results are then wrapped;
    ``requires_grad`` whether one of those requires grad; ``converted`` whether scalars
    were moved to the backend (such calls are not cached); ``mixed`` whether native arrays
    came beside Tensors."""

    __slots__ = (
        "backend",
        "converted",
        "found",
        "mixed",
        "nargs",
        "nkwargs",
        "requires_grad",
        "tensors_in",
    )

    def __init__(
        self,
        nargs: list[Any],
        nkwargs: dict[str, Any],
        found: list[Found],
        tensors_in: bool,
        requires_grad: bool,
        backend: Backend,
        converted: bool,
        mixed: bool,
    ) -> None:
        self.mixed = mixed
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
    native = False
    found: list[Found] = []
    for name, value, container, index in sig.tensor_arguments(nargs, nkwargs):
        if type(value) is Tensor:
            tensors_in = True
            requires_grad = requires_grad or value._rg
            value = value._data
            container[index] = value
        else:
            native = True
        found.append((name, value, container, index))
    if found:
        backend, converted = _backend_for(sig, qualname, found)
    else:
        backend, converted = _factory_backend(sig, qualname, nargs, nkwargs), False
        tensors_in = sig.wrap_bare  # no array: a user's op returns Tensors, as torch
    mixed = tensors_in and native
    return Placement(nargs, nkwargs, found, tensors_in, requires_grad, backend, converted, mixed)


def as_tensors(
    sig: Signature, bargs: list[Any], bkwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The bound arguments with the native arrays given beside Tensors wrapped as Tensors
    that need no gradient: what formulas, which read Tensors, get for a mixed call."""
    nargs, nkwargs = list(bargs), dict(bkwargs)
    for _, value, container, index in sig.tensor_arguments(nargs, nkwargs):
        if type(value) is not Tensor:
            container[index] = Tensor._wrap(value)
    return nargs, nkwargs


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
        raise not_installed(name, qualname)
    return backend


# -- results ----------------------------------------------------------------------------------


def wrap(sig: Signature, out: Any, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
    """A kernel's native results as the caller gets them when Tensors came in: Tensors
    (a returned mutated input is that input's own Tensor, its version bumped; a view of an
    input shares that input's version counter)."""
    plan = sig.returns
    if sig.writes:
        for slot in sig.writes:
            written = slot.get(bargs, bkwargs)
            if type(written) is Tensor:
                bump_version(written)
    if not plan:  # "-> ()": the kernel returns None
        return out
    if len(plan) == 1:
        if sig.tuple_return and type(out) is tuple:  # "-> ((Tensor))": a 1-tuple
            return (_wrap_one(plan[0], out[0], bargs, bkwargs),)
        return _wrap_one(plan[0], out, bargs, bkwargs)
    values = [_wrap_one(p, o, bargs, bkwargs) for p, o in zip(plan, out, strict=True)]
    # returns all named ("-> (Tensor values, Tensor indices)"): the op's named tuple, built
    # directly (one construction, no length check: check_result or the fake mode did it)
    return tuple(values) if sig.named is None else tuple.__new__(sig.named, values)


def _wrap_one(plan: ReturnPlan, value: Any, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
    kind, alias, written = plan
    if alias is not None:
        original = alias.get(bargs, bkwargs)
        if type(original) is Tensor:
            if kind == "list":  # the split family: pieces share the storage, not a ViewSet
                return [_piece(original, v) for v in value]
            if not written:
                return _view(original, value)
            if original._data is value:
                bump_version(original)
                return original
    if kind == "tensor":
        return value if value is None else Tensor._wrap(value)
    if kind == "list":
        return [Tensor._wrap(v) for v in value]
    return value


def _view(base: Tensor, value: Any) -> Tensor | None:
    """The output of a ``Tensor(a)`` op (a view of ``base``): it shares the version
    counter of ``base``'s storage."""
    if value is None:
        return None
    view = Tensor._wrap(value)
    share_version(base, view)
    return view


def _piece(base: Tensor, value: Any) -> Tensor:
    """One of several views an op returns (``split``): it shares ``base``'s version counter,
    so a write into it is seen by a backward that saved ``base``; it is not placed in the
    base's views (torch refuses in-place ops on it under grad mode, see autograd)."""
    piece = Tensor._wrap(value)
    share_version(base, piece, is_view=False, piece=True)
    return piece


# -- checking results -------------------------------------------------------------------------
#
# Only on the slow path (and in ``checking``'s wrapper): the fast path serves kernels whose
# result passed ``check_result`` unchanged when the slow path ran them first.


def check_result(
    sig: Signature, entry: OpEntry, key: str, fn: Callable[..., Any], backend: Backend, out: Any
) -> tuple[Any, bool]:
    """A kernel's result held to the schema's returns, as torch holds it: ``(result, clean)``.

    An ``oplib.Tensor`` where the schema has a ``Tensor`` becomes its native array, a tuple
    or list for several returns becomes a tuple, a tuple for ``Tensor[]`` a list (``clean``
    is False when anything was converted). Raises ``KernelResultError`` naming the op, the
    kernel's ``file:line``, the schema's returns and what came back, for a value ``-> ()``
    does not allow, a list, a Python scalar or a non-array where a ``Tensor`` is expected,
    a tuple of the wrong length, or an array of another backend than the call's (unless
    the op takes a ``Device``: factories and copies make arrays elsewhere)."""
    if sig.single_plain_return and TABLE.for_type(type(out)) is backend:
        return out, True  # the common case, first
    plan = sig.returns
    n = len(plan)
    if n == 0:
        if out is None:
            return None, True
        raise _bad(sig, entry, key, fn, out, "None")
    if n == 1 and not sig.tuple_return:
        return _check_one(sig, entry, key, fn, backend, 0, out)
    if type(out) is not tuple and type(out) is not sig.named:
        if not isinstance(out, (tuple, list)):
            raise _bad(sig, entry, key, fn, out, f"a tuple of {n}")
        out = tuple(out)
        clean = False
    else:
        clean = True
    if len(out) != n:
        raise _bad(sig, entry, key, fn, out, f"a tuple of {n}")
    values = []
    for i, v in enumerate(out):
        value, ok = _check_one(sig, entry, key, fn, backend, i, v)
        values.append(value)
        clean = clean and ok
    return (out, True) if clean else (tuple(values), False)


def _check_one(
    sig: Signature,
    entry: OpEntry,
    key: str,
    fn: Callable[..., Any],
    backend: Backend,
    i: int,
    value: Any,
) -> tuple[Any, bool]:
    kind = sig.returns[i][0]
    if kind == "tensor":
        return _check_array(sig, entry, key, fn, backend, i, value, None)
    if kind == "list":
        if not isinstance(value, (list, tuple)):
            raise _bad(sig, entry, key, fn, value, "a list of arrays", i)
        items = [_check_array(sig, entry, key, fn, backend, i, v, j) for j, v in enumerate(value)]
        if type(value) is list and all(ok for _, ok in items):
            return value, True
        return [v for v, _ in items], False
    return value, True


def _check_array(
    sig: Signature,
    entry: OpEntry,
    key: str,
    fn: Callable[..., Any],
    backend: Backend,
    i: int,
    value: Any,
    j: int | None,
) -> tuple[Any, bool]:
    cls = type(value)
    if cls is Tensor:
        value = value._data
        cls = type(value)
        clean = False
    else:
        clean = True
    found = TABLE.for_type(cls)
    if found is backend:
        return value, clean
    if value is None and j is None and isinstance(entry.schema.returns[i].type, OptionalType):
        return None, clean
    where = f"{backend.name} array"
    if found is None:
        raise _bad(sig, entry, key, fn, value, f"a {where}", i, j)
    if sig.device_arg is None:  # only ops that take a Device make arrays elsewhere
        raise _bad(sig, entry, key, fn, value, f"a {where} (the call ran on {backend.name})", i, j)
    return value, clean


def _bad(
    sig: Signature,
    entry: OpEntry,
    key: str,
    fn: Callable[..., Any],
    value: Any,
    wanted: str,
    i: int | None = None,
    j: int | None = None,
) -> KernelResultError:
    returns = entry.schema.returns
    expected = str(returns[0]) if len(returns) == 1 else f"({', '.join(map(str, returns))})"
    if sig.tuple_return:
        expected = f"(({returns[0]}))"
    got = _describe(value)
    part = "" if i is None or len(returns) == 1 else f"return {i} "
    if j is not None:
        part += f"item {j} " if part else f"return item {j} "
    source = kernel_source(entry, fn)
    hint = ""
    if sig.tuple_return and i is None:
        hint = "; return a 1-tuple (x,)"
    elif isinstance(value, (list, tuple)) and len(returns) == 1 and sig.returns[0][0] != "list":
        hint = "; return the array itself, not a list or tuple of it"
    elif isinstance(value, (bool, int, float, complex)):
        hint = "; return an array (e.g. xp.asarray(value)), not a scalar"
    elif not returns:
        hint = "; a '-> ()' operator's kernel returns None"
    return KernelResultError(
        f"{entry.qualname}: the {key} kernel ({source}) returned {part}{got}, but the schema "
        f"returns {expected}: expected {wanted}{hint}",
        op=entry.qualname,
        kernel=source,
        expected=expected,
        got=got,
    )


def _describe(value: Any) -> str:
    cls = type(value)
    if value is None:
        return "None"
    if cls is Tensor:
        return "an oplib.Tensor"
    if isinstance(value, (list, tuple)):
        return f"a {cls.__name__} of {len(value)}"
    if cls in (bool, int, float, complex, str):
        return f"a Python {cls.__name__} ({value!r})"
    b = TABLE.for_type(cls)
    name = f"{cls.__module__}.{cls.__qualname__}"
    return f"a {name} (a {b.name} array)" if b is not None else f"a {name}"


def kernel_source(entry: OpEntry, fn: Callable[..., Any]) -> str:
    """Where a kernel is defined: its registration's ``source`` (``file:line``), else its
    code's."""
    for stack in entry.kernels.values():
        for k in stack:
            if k.fn is fn:
                return k.origin.source
    f: Any = fn
    while True:
        if isinstance(f, functools.partial):
            f = f.func
        elif getattr(f, "__wrapped__", None) is not None:
            f = f.__wrapped__
        else:
            break
    code = getattr(f, "__code__", None) or getattr(type(f).__call__, "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename}:{code.co_firstlineno}"


def checking(
    sig: Signature, entry: OpEntry, key: str, fn: Callable[..., Any], backend: Backend
) -> Callable[..., Any]:
    """``fn`` with its result held to the schema (``check_result``) on every call: what the
    fast path serves for a kernel whose result needed converting (it returned Tensors)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        return check_result(sig, entry, key, fn, backend, fn(*args, **kwargs))[0]

    run.__wrapped__ = fn  # type: ignore[attr-defined]  # failures name fn, not this wrapper
    return run
