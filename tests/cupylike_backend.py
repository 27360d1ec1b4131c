"""A backend that holds cupy's dtypes and no others, on numpy memory: ``cupylike``,
registered in-process.

cupy has no bfloat16 or float8 dtype; this stand-in computes with numpy (which has them, through
ml_dtypes) but declares cupy's dtype set in ``BackendSpec.dtypes``, exactly as the shipped cuda
plugin does, and has no dtype guard of its own. So whatever refuses bfloat16 on it is oplib's
core, and ``oplib check`` over it shows what ``oplib check --backend cuda`` does on a GPU.

Its namespace records the dtype of every array it makes (``MADE``), so a test can tell which
dtypes really ran on it. Not a shipped plugin: tests install it with :func:`install`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.kernels import array_kernels

__all__ = ["CUPY_DTYPES", "MADE", "NAME", "CupyLikeArray", "install", "spec"]

NAME = "cupylike"

#: cupy's dtypes (the cuda plugin's ``CUPY_DTYPES``): numpy's numeric and bool ones only.
CUPY_DTYPES = frozenset(
    np.dtype(n)
    for n in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)  # fmt: skip

#: The dtypes of the arrays made on this backend since the last ``MADE.clear()``.
MADE: set[np.dtype] = set()


class CupyLikeArray(np.ndarray):
    """numpy memory standing in for a device's: a class of its own, so that oplib tells it
    from the cpu backend's arrays (this backend's priority is above cpu's)."""


def _ours(value: Any) -> Any:
    """numpy results as this backend's arrays (0-d scalars too), recording their dtypes."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        MADE.add(value.dtype)
        return value if type(value) is CupyLikeArray else value.view(CupyLikeArray)
    if isinstance(value, (list, tuple)):
        return type(value)(_ours(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, CupyLikeArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


class _Namespace:
    """numpy's functions on this backend's arrays; numpy's dtypes and constants as they are."""

    def __getattr__(self, name: str) -> Any:
        target = getattr(np, name)
        if not callable(target) or isinstance(target, type):
            return target

        @functools.wraps(target)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _ours(target(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()}))

        setattr(self, name, call)
        return call


NAMESPACE = _Namespace()


def _to_host(array: CupyLikeArray) -> np.ndarray:
    return np.array(array.view(np.ndarray), copy=True)


def _from_host(array: np.ndarray, device: oplib.Device) -> CupyLikeArray:
    out: CupyLikeArray = _ours(np.array(array, copy=True))
    return out


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: oplib.Device) -> CupyLikeArray:
    out: CupyLikeArray = _ours(np.empty(shape, dtype))
    return out


def spec() -> oplib.BackendSpec:
    """The ``cupylike`` backend: cupy's dtypes declared, no guard of its own."""
    return oplib.BackendSpec(
        name=NAME,
        array_types=(CupyLikeArray,),
        priority=5,  # above cpu's: its arrays are numpy arrays too
        to_host=_to_host,
        from_host=_from_host,
        empty=_empty,
        namespace=lambda: NAMESPACE,
        dtypes=lambda: CUPY_DTYPES,
        dtypes_fixed=True,  # as oplib-cuda's
        dtype_hint="cupylike has no bfloat16 or float8 dtypes, as cupy",
        description="numpy memory holding cupy's dtypes only (tests only)",
    )


def install() -> Callable[[], None]:
    """Register the backend and the shared kernels bound to its namespace; returns the
    function that removes both again."""
    undo_backend = oplib.backends.register(spec())
    lib = oplib.Library("oplib", "IMPL")
    try:
        for name, kernel in array_kernels(NAMESPACE).items():
            lib.impl(name, kernel, NAME)
    except BaseException:
        lib._destroy()
        undo_backend()
        raise

    def uninstall() -> None:
        lib._destroy()
        undo_backend()

    return uninstall


if __name__ == "__main__":
    from oplib_core.cli import main

    _uninstall = install()  # the Library lives as long as this reference
    sys.exit(main(["check", "--backend", NAME, *sys.argv[1:]]))
