"""Output metadata from fake kernels: dask's ``meta`` without calling kernels on empty arrays.

The op's fake kernel runs under ``FakeTensorMode`` on data-less stand-ins for the call's
arrays (a dask array becomes a fake array on its chunks' device: ``cpu`` for numpy chunks,
``cuda`` for cupy), giving the output's dtype, ndim and shape. An op without a fake kernel
gets ``None`` here, and dask guesses (calling the kernel on empty chunks) after a
:class:`~oplib_dask.errors.DaskMetaWarning`, issued once per op.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any

import numpy as np

from oplib_core import Device, FakeTensorMode, NoKernelError, backends
from oplib_core.fake import FakeArray
from oplib_dask.errors import DaskMetaWarning

__all__ = ["MetaGuessWarnings", "chunk_device", "fake_output", "is_dask", "meta_like"]

#: ``NoKernelError.key`` when an op has no fake kernel (the ``"Fake"`` dispatch key).
FAKE_KEY = "Fake"


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a dask array, without importing dask."""
    cls = type(x)
    return cls.__name__ == "Array" and cls.__module__.partition(".")[0] == "dask"


def chunk_device(x: Any) -> Device:
    """The device of a dask array's chunks (from its ``_meta``): ``cpu``, ``cuda``..."""
    backend = backends.for_type(type(x._meta))
    if backend is None:
        installed = ", ".join(b.name for b in backends.list()) or "(none)"
        raise TypeError(
            f"dask array with {type(x._meta).__name__} chunks: no installed oplib backend "
            f"recognises them ({installed})"
        )
    return Device(backend.name)


def _fake(x: Any, device: Device) -> Any:
    if is_dask(x):
        # unknown (nan) chunk sizes: 1 broadcasts against anything
        shape = tuple(1 if math.isnan(s) else int(s) for s in x.shape)
        return FakeArray(shape, x.dtype, device)
    if isinstance(x, np.ndarray):
        return FakeArray(x.shape, x.dtype, Device("cpu") if x.ndim == 0 else device)
    if isinstance(x, (list, tuple)):
        return type(x)(_fake(v, device) for v in x)
    return x


class MetaGuessWarnings:
    """Remembers the ops already warned about (one warning per op and process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def warn(self, qualname: str) -> None:
        with self._lock:
            if qualname in self._warned:
                return
            self._warned.add(qualname)
        warnings.warn(
            f"{qualname}: no fake kernel, so dask guesses the output dtype by calling the "
            "kernel on empty chunks (which may run side effects or guess the dtype wrong). "
            f"Register one with oplib.register_fake({qualname!r}) to give dask the output "
            "metadata directly.",
            DaskMetaWarning,
            stacklevel=5,
        )


GUESSES = MetaGuessWarnings()


def fake_output(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: Device) -> Any:
    """The op's fake output for a call with these (dask/numpy/scalar) arguments, on
    ``device``; ``None`` (after a once-per-op warning) when the op has no fake kernel."""
    fargs = tuple(_fake(a, device) for a in args)
    fkwargs = {k: _fake(v, device) for k, v in kwargs.items()}
    try:
        with FakeTensorMode():
            return op(*fargs, **fkwargs)
    except NoKernelError as e:
        if e.key != FAKE_KEY or e.op != op.name():
            raise
    GUESSES.warn(op.name())
    return None


def meta_like(x: Any, ndim: int, dtype: Any) -> Any:
    """A zero-size array of ``x``'s chunk type (numpy, cupy) with ``ndim`` and ``dtype``."""
    from dask.array.utils import meta_from_array

    return meta_from_array(x._meta, ndim=ndim, dtype=dtype)
