"""Dask kernels for the core factories and shape ops: the shared core kernels
(``oplib_core.kernels.array_kernels``) bound to ``dask.array``, which has the same functions.

Factories give chunked arrays (dask's ``chunks="auto"``); shape ops stay lazy and keep the
input's chunks where dask can (``reshape`` may rechunk). dask is imported on the first call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from oplib_core.kernels import array_kernels
from oplib_core.plugins import Registrar

__all__ = ["FACTORIES", "SHAPE_OPS", "lazy_kernel", "register"]

#: Core factories served as chunked dask arrays.
FACTORIES = ("empty", "zeros", "ones", "full", "arange", "arange.start")
#: Core shape ops served lazily on dask arrays.
SHAPE_OPS = (
    "transpose",
    "permute",
    "reshape",
    "broadcast_to",
    "unsqueeze",
    "squeeze",
    "cat",
    "stack",
)


@functools.cache
def _kernels() -> dict[str, Callable[..., Any]]:
    import dask.array as da

    return array_kernels(da)


def lazy_kernel(
    name: str, table: Callable[[], dict[str, Callable[..., Any]]] = _kernels
) -> Callable[..., Any]:
    """The dask kernel of core op ``name``: ``table()[name]``, looked up on each call (the
    table imports dask when first asked)."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return table()[name](*args, **kwargs)

    kernel.__name__ = kernel.__qualname__ = f"dask_{name.replace('.', '_')}"
    return kernel


def register(registrar: Registrar) -> None:
    """Register the factories' and shape ops' dask kernels."""
    for name in (*FACTORIES, *SHAPE_OPS):
        registrar.impl(f"oplib::{name}", "dask", lazy_kernel(name))
