"""``dask`` kernels of the core indexing and view ops: the shared kernels
(``oplib_core.kernels.index_kernels``) bound to ``dask.array``, which maps slicing, fancy
indexing along one dim, ``pad``, ``flip``, ``roll``, ``tile``, ``tril``/``triu``,
``concatenate`` and the reductions onto chunks itself.

Left out, so they raise ``NoKernelError`` on dask arrays: ops whose output size depends on
the data (``masked_select``, a bool mask in ``index``: dask would give chunks of unknown
size), ops dask has no chunked primitive for (``gather``, ``scatter``, ``scatter_add``) and
``view`` (dask arrays share no memory to alias). Dask itself is imported on the first call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from oplib_core import NoKernelError
from oplib_core.kernels import index_kernels
from oplib_dask.meta import is_dask
from oplib_dask.shapes import lazy_kernel

__all__ = ["DASK_INDEX_OPS", "register"]

#: The indexing and view ops with a chunk-wise dask kernel.
DASK_INDEX_OPS = (
    "select.int",
    "slice.Tensor",
    "narrow",
    "index.Tensor",
    "index_select",
    "pad",
    "flip",
    "roll",
    "tril",
    "triu",
    "repeat",
    "tile",
    "split.Tensor",
    "split_with_sizes",
    "chunk",
    "tensor_split.sections",
    "tensor_split.indices",
    "expand",
    "movedim.int",
    "movedim.intlist",
    "max",
    "min",
    "max.dim",
    "min.dim",
)


class _Namespace:
    """``dask.array`` as the shared kernels use it: dask's own functions, and the array API
    standard's names dask lacks (``permute_dims``, ``astype``) from array-api-compat's
    ``dask.array`` wrapper. Dask arrays are immutable, so the copy a kernel makes to avoid
    aliasing (``asarray(x, copy=True)``) is ``x`` itself."""

    def __init__(self, da: Any, standard: Any) -> None:
        self._da = da
        self._standard = standard

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._da, name)
        except AttributeError:
            return getattr(self._standard, name)

    def asarray(self, x: Any, dtype: Any = None, copy: bool | None = None) -> Any:
        if is_dask(x) and dtype is None:
            return x
        return self._da.asarray(x, dtype=dtype)


@functools.cache
def _kernels() -> dict[str, Callable[..., Any]]:
    import array_api_compat.dask.array as standard
    import dask.array as da

    return index_kernels(_Namespace(da, standard))


def _check_index(indices: list[Any]) -> None:
    """What dask's fancy indexing takes: one integer array of at most one dim."""
    given = [i for i in indices if i is not None]
    problem = None
    if any(i.dtype.kind == "b" for i in given):
        problem = "a bool mask gives a data-dependent size, which dask cannot chunk"
    elif len(given) > 1 or any(i.ndim > 1 for i in given):
        problem = "dask indexes with one integer array of at most one dim at a time"
    if problem is not None:
        raise NoKernelError(
            f"oplib::index.Tensor(): {problem}; index in steps, or move the tensor to the cpu",
            op="oplib::index.Tensor",
            key="Dask",
        )


def _kernel(name: str) -> Callable[..., Any]:
    kernel = lazy_kernel(name, _kernels)
    if name != "index.Tensor":
        return kernel

    def dask_index(self: Any, indices: list[Any]) -> Any:
        _check_index(indices)
        return kernel(self, indices)

    dask_index.__name__ = dask_index.__qualname__ = kernel.__name__
    return dask_index


def register(registrar: Any) -> None:
    """Register the kernels (from the plugin's ``oplib_impl``)."""
    for name in DASK_INDEX_OPS:
        registrar.impl(f"oplib::{name}", "dask", _kernel(name))
