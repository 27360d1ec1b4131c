"""Device-generic helpers for kernels that get native arrays.

A kernel registered for every device (``device_types=None`` or ``"default"``) gets the
native arrays of whichever backend the call runs on: numpy on ``cpu``, cupy on ``cuda``, a
vendor's arrays on ``privateuse1``, ``jax.Array`` on ``jax``. These helpers allocate and
convert on the device of an array the kernel was given, through that array's backend
(``BackendSpec.empty``, ``to_host``, ``from_host``), so one kernel runs on all of them::

    @oplib.custom_op("mylib::twice", mutates_args=())
    def twice(x: oplib.Tensor) -> oplib.Tensor:
        host = oplib.native.to_host(x) * 2          # a writable numpy copy
        return oplib.native.from_host(host, like=x)  # back on x's device
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._dtypes import to_dtype
from ._tensor.tensor import Tensor
from .backends import TABLE, Backend
from .errors import ArgumentTypeError, BackendError

__all__ = ["from_host", "new_empty", "to_host"]


def _backend(api: str, x: Any) -> tuple[Backend, Any]:
    data = x._data if isinstance(x, Tensor) else x
    backend = TABLE.for_type(type(data))
    if backend is None:
        missing = TABLE.missing_for(type(data))
        raise ArgumentTypeError(
            f"oplib.native.{api}(): expected a native array of an installed backend "
            f"({TABLE.names_text()}) or a Tensor, got {type(data).__name__}"
            + (f" ({missing})" if missing else ""),
            api=f"native.{api}",
            argument="x" if api != "from_host" else "like",
            value=x,
        )
    return backend, data


def new_empty(x: Any, shape: Sequence[int], dtype: Any = None) -> Any:
    """An uninitialised native array of ``shape`` on ``x``'s device (``dtype`` defaults to
    ``x``'s), of ``x``'s backend: what a device-generic kernel allocates its output with."""
    backend, data = _backend("new_empty", x)
    if backend.spec.empty is None:
        raise BackendError(
            f"oplib.native.new_empty(): backend {backend.name!r} cannot allocate (its "
            "BackendSpec has no empty)"
        )
    want = np.dtype(data.dtype) if dtype is None else to_dtype(dtype)
    # through the backend: a dtype it declares it lacks is a BackendDtypeError
    return backend.empty(tuple(int(s) for s in shape), want, backend.device_of(data))


def to_host(x: Any) -> np.ndarray:
    """``x``'s data as a numpy array in host memory (a copy for device memory; for ``cpu``
    arrays, ``x`` itself)."""
    backend, data = _backend("to_host", x)
    return backend.to_host(data)


def from_host(array: Any, *, like: Any) -> Any:
    """The host data ``array`` copied to the device of ``like``, as a native array of
    ``like``'s backend (a copy even on ``cpu``)."""
    backend, data = _backend("from_host", like)
    return backend.from_host(np.asarray(array), backend.device_of(data))
