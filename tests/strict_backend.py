"""The array API conformance backend: ``array_api_strict`` (the standard's reference
implementation) as an oplib backend named ``strict``, registered in-process.

It binds the core op set's shared kernels (``oplib.kernels.array_kernels``) to
``array_api_strict`` exactly as a shipped plugin binds them to numpy, with no adapter: when
``oplib check`` passes on it, the shared kernels use nothing outside the standard. Its dtypes
are the strict namespace's own objects, converted by ``BackendSpec.dtypes``; dtypes the
standard does not have (float16, bfloat16, the float8 formats) are skips with the reason.

Not a shipped plugin: tests (and ``python -m tests.strict_backend``, which runs ``oplib
check`` on it) install it with :func:`install`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import array_api_strict as xs
import numpy as np

import oplib_core as oplib
from oplib_core.backends import namespace_dtypes
from oplib_core.kernels import array_kernels

__all__ = ["NAME", "install", "spec"]

NAME = "strict"


def _to_host(array: Any) -> np.ndarray:
    return np.from_dlpack(array)


def _from_host(array: np.ndarray, device: oplib.Device) -> Any:
    return xs.asarray(array, copy=True)


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: oplib.Device) -> Any:
    return xs.empty(shape, dtype=namespace_dtypes(xs)[dtype])


def spec() -> oplib.BackendSpec:
    """The ``strict`` backend: array_api_strict arrays, its dtypes, its namespace."""
    return oplib.BackendSpec(
        name=NAME,
        array_type_names=("array_api_strict.Array",),
        to_host=_to_host,
        from_host=_from_host,
        empty=_empty,
        namespace=lambda: xs,
        dtypes=lambda: namespace_dtypes(xs),
        description="array_api_strict arrays: the array API conformance backend (tests only)",
    )


def install() -> Callable[[], None]:
    """Register the backend and the shared kernels bound to ``array_api_strict``; returns
    the function that removes both again."""
    undo_backend = oplib.backends.register(spec())
    lib = oplib.Library("oplib", "IMPL")
    try:
        for name, kernel in array_kernels(xs).items():
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
