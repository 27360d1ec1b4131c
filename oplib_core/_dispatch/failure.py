"""What a kernel's failure says: run only after a kernel raised, never on a call that works.

Every place that calls a kernel wraps the call in ``try``/``except`` (free in CPython 3.11
while nothing raises) and hands the exception to ``kernel_failed``, which looks at the
arguments only then:

- an array argument whose dtype no backend computes with (object, str, bytes, datetime,
  timedelta, structured) turns the failure into an ``UnsupportedDtypeError`` (a
  ``TypeError``) naming the op, the argument and the dtype, chained to the kernel's error;
- a ``TypeError`` (numpy's "no loop", "unsupported in linalg", a promotion error) from a
  kernel given a bfloat16/float8 array does too, suggesting a cast to float32: numpy
  computes most ufuncs for these ``ml_dtypes`` dtypes, but not everything (``linalg``,
  ``fft``, mixed float8 dtypes); a ``BackendDtypeError`` (a backend refusing a dtype it
  declares it cannot hold, ``BackendSpec.dtypes``) says all that already: it passes as is;
- any other exception keeps its type and gains a PEP 678 note naming the op, the kernel's
  key and ``file:line``, the backend, and the arguments' shapes and dtypes (which is what a
  numpy broadcasting error leaves out); a ``DeviceMismatchError`` (placement's, reached
  from a cached kernel's device check) passes as is.

A kernel that accepts such an array (numpy adds object arrays of ints) is not second-
guessed: checking dtypes before every call would cost every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._dtypes import EXTENSION_FLOATS
from .._registry.entry import OpEntry
from .._tensor.tensor import Tensor
from ..backends import TABLE, Backend
from ..errors import BackendDtypeError, DeviceMismatchError, UnsupportedDtypeError
from .placement import kernel_source

__all__ = ["add_note", "kernel_failed"]

#: numpy dtype kinds that no backend computes with (ml_dtypes' bfloat16/float8 are mostly
#: kind "V" too, but with their own scalar type: only ``np.void`` itself is structured/raw).
_UNSUPPORTED_KINDS = frozenset("OSUMm")


def kernel_failed(
    exc: Exception,
    entry: OpEntry,
    fn: Callable[..., Any],
    args: Any,
    kwargs: dict[str, Any] | None = None,
    backend: Backend | None = None,
) -> None:
    """After kernel ``fn`` of ``entry`` raised ``exc`` on ``args``/``kwargs`` (inside the
    ``except`` block, before a bare ``raise``): raise ``UnsupportedDtypeError`` from
    ``exc`` when an argument's dtype explains it, else note on ``exc`` what ran."""
    if isinstance(exc, (BackendDtypeError, DeviceMismatchError)):
        # a backend refusing a dtype it declares it cannot hold, or placement's device check
        # (which a cached kernel's ``same_device`` hands to the slow path): the message
        # names the op and what was wrong; a note blaming the kernel would mislead
        return
    named = list(_named_arrays(entry, args, kwargs or {}))
    for name, array in () if isinstance(exc, UnsupportedDtypeError) else named:
        dtype = _dtype_of(array)
        if dtype is None:
            continue
        if dtype in EXTENSION_FLOATS and isinstance(exc, TypeError):
            key, _ = _kernel_record(entry, fn)
            message = (
                f"the {key} kernel raised {type(exc).__name__} on argument {name!r} of dtype "
                f"{dtype}: {exc}. numpy lacks some functions for {dtype}: cast it first, e.g. "
                "with .to(oplib.float32)"
            )
        elif _unsupported(dtype):
            message = (
                f"argument {name!r} has dtype {dtype} ({_kind_name(dtype)}), which no oplib "
                "backend computes with; convert it to a numeric or bool dtype (the kernel "
                f"raised {type(exc).__name__}: {exc})"
            )
        else:
            continue
        raise UnsupportedDtypeError(
            f"{entry.qualname}(): {message}",
            op=entry.qualname,
            schema=str(entry.schema),
            argument=name,
            dtype=dtype,
        ) from exc
    if backend is None:
        backend = next((b for _, a in named if (b := TABLE.for_type(type(a))) is not None), None)
    key, source = _kernel_record(entry, fn)
    shown = ", ".join(f"{name}={_describe(a)}" for name, a in named) or "no arrays"
    where = f" on backend {backend.name}" if backend is not None else ""
    add_note(
        exc,
        f"oplib: raised by the {key} kernel of {entry.qualname} ({source}){where}; "
        f"arguments: {shown}",
    )


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` once (PEP 678; ``__notes__`` by hand on Python 3.10)."""
    notes: list[str] | None = getattr(exc, "__notes__", None)
    if notes is not None and note in notes:
        return
    add: Callable[[str], None] | None = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
    else:  # pragma: no cover - Python 3.10
        setattr(exc, "__notes__", [*(notes or ()), note])  # noqa: B010 (3.10's types lack it)


def _named_arrays(entry: OpEntry, args: Any, kwargs: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(argument name, array) for every array among the tensor arguments (Tensors
    unwrapped, the items of lists as ``name[i]``)."""
    tensor_slots = {a.name for a in entry.schema.arguments if a.type.is_tensor_like()}
    params = entry.schema.arguments
    pairs = [(params[i].name if i < len(params) else f"#{i}", v) for i, v in enumerate(args)]
    pairs.extend(kwargs.items())
    pairs = [(name, v) for name, v in pairs if name in tensor_slots]
    for name, value in pairs:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                array = _array(item)
                if array is not None:
                    yield f"{name}[{i}]", array
        else:
            array = _array(value)
            if array is not None:
                yield name, array


def _array(value: Any) -> Any:
    if type(value) is Tensor:
        return value._data
    return value if hasattr(value, "shape") and hasattr(value, "dtype") else None


def _dtype_of(array: Any) -> np.dtype[Any] | None:
    dtype = getattr(array, "dtype", None)
    return dtype if isinstance(dtype, np.dtype) else None


def _unsupported(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in _UNSUPPORTED_KINDS or dtype.type is np.void


def _kind_name(dtype: np.dtype[Any]) -> str:
    if dtype.type is np.void:
        return "a structured dtype" if dtype.names else "raw bytes"
    return {
        "O": "Python objects",
        "S": "bytes",
        "U": "str",
        "M": "datetime",
        "m": "timedelta",
    }[dtype.kind]


def _kernel_record(entry: OpEntry, fn: Callable[..., Any]) -> tuple[str, str]:
    """The key ``fn`` is registered under and its ``file:line`` (through the wrappers the
    dispatcher adds: bound keyword defaults, result checking; or the kernel's
    ``fast_entry``, which the fast path calls in its place)."""
    f: Any = fn
    while True:
        for key, stack in entry.kernels.items():
            for k in stack:
                if any(e is f for e in _entries(k.fn)):
                    return key, k.origin.source
        if isinstance(f, functools.partial):
            f = f.func
        elif getattr(f, "__wrapped__", None) is not None:
            f = f.__wrapped__
        else:
            return "backend", kernel_source(entry, fn)


def _entries(fn: Any) -> Iterator[Any]:
    """``fn`` and the ``fast_entry`` chain the fast path follows from it."""
    for _ in range(8):  # (as the fast path's own bound: longer is a cycle or a mistake)
        yield fn
        fn = getattr(fn, "fast_entry", None)
        if fn is None:
            return


def _describe(array: Any) -> str:
    shape = getattr(array, "shape", None)
    try:
        dims = ", ".join(str(d) for d in shape) if shape is not None else "?"
    except TypeError:  # a dask array of unknown chunk sizes
        dims = "?"
    return f"{type(array).__name__} {getattr(array, 'dtype', '?')}[{dims}]"
