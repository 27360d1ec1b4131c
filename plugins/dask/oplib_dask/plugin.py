"""The ``dask`` backend: dask arrays, and generic chunk-wise kernels for the ops it can map.

Nothing here imports dask: arrays are recognised by name (``dask.array.core.Array`` is
``"dask.Array"``: module root plus class name), and the spec's callables import it on use.

The backend serves ops through its *fallback* (``BackendSpec.fallback``), which dispatch
asks after every registered kernel: ops tagged ``Tag.pointwise`` or ``Tag.reduction``,
``oplib::matmul`` and the core copies ``clone``/``astype`` get a generic chunk-wise kernel
(:func:`kind_of`), whenever they were defined. A ``dask`` kernel an op author registers
(``register_kernel(op, "dask")``) simply comes first. Every other op raises
``NoKernelError`` on dask arrays, pointing at ``oplib_dask.single_chunk`` (rechunk to one
chunk) as the explicit fallback.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

import oplib_core
from oplib_core import BackendSpec, Device, OpOverload, Tag, hookimpl
from oplib_dask import higher_order, indexing, shapes
from oplib_dask.kernels import make_kernel

__all__ = ["DASK", "kind_of"]

KEY = "Dask"
_PER_CHUNK = frozenset({"oplib::clone", "oplib::astype"})


def _status() -> str | None:
    if importlib.util.find_spec("dask") is None:  # does not import dask
        return "dask is not installed (pip install 'dask[array]')"
    return None


def _to_host(array: Any) -> np.ndarray:
    out = array.compute()
    backend = oplib_core.backends.for_type(type(out))
    return np.asarray(out) if backend is None else backend.to_host(out)


def _from_host(array: np.ndarray, device: Device) -> Any:
    import dask.array as da

    return da.from_array(np.array(array, copy=True), chunks="auto")


def _empty(shape: tuple[int, ...], dtype: np.dtype, device: Device) -> Any:
    import dask.array as da

    return da.empty(shape, dtype=dtype)


def _namespace() -> Any:
    import dask.array as da

    return da


def kind_of(op: OpOverload) -> str | None:
    """How the dask backend maps ``op`` onto chunks, or ``None`` if it does not."""
    qualname = op.name()
    if qualname == "oplib::matmul":
        return "matmul"
    if Tag.pointwise in op.tags or qualname in _PER_CHUNK:
        return "pointwise"
    if Tag.reduction in op.tags:
        return "reduction"
    return None


def _fallback(op: OpOverload) -> Any:
    """The generic chunk-wise kernel for ``op``, or None when dask cannot map it."""
    kind = kind_of(op)
    return None if kind is None else make_kernel(op.name(), kind)


DASK = BackendSpec(
    name="dask",
    key=KEY,
    array_type_names=("dask.Array",),
    priority=-5,
    status=_status,
    to_host=_to_host,
    from_host=_from_host,
    empty=_empty,
    namespace=_namespace,
    accepts=("cpu",),
    fallback=_fallback,
    no_kernel_hint=(
        "Or run it on one chunk: oplib.register_kernel(op, 'dask', "
        "oplib_dask.single_chunk(op)) (the whole array must fit in one worker's memory)."
    ),
    autograd=False,
    description="dask arrays (numpy or cupy chunks), computed lazily, chunk by chunk",
)


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [DASK]


@hookimpl
def oplib_impl(registrar: Any) -> None:
    """Dask's handlers of the control-flow operators (``map`` by blocks, ``cond``), and
    the factories' and shape ops' kernels (``shapes``), and its kernels of the indexing and
    view ops (``indexing``)."""
    higher_order.register(registrar)
    shapes.register(registrar)
    indexing.register(registrar)
