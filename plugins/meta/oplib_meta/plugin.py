"""The ``meta`` backend: data-less arrays. Ops without a meta kernel run their fake
kernel (``BackendSpec(fake_kernels=True)``); core gives fake kernels for the whole core op
set, so the plugin itself only brings the array class, the factories, and the copy rule
(into meta drops data, out of meta is an error)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from oplib_core import BackendSpec, Device, get_default_dtype, hookimpl
from oplib_core.fake import check_shape, shapes
from oplib_core.plugins import Registrar
from oplib_meta.array import META, MetaArray, empty, from_host, to_host

META_BACKEND = BackendSpec(
    name="meta",
    key="Meta",
    array_types=(MetaArray,),
    priority=-10,
    to_host=to_host,
    from_host=from_host,
    empty=empty,
    fake_kernels=True,
    description="data-less arrays: shape and dtype only",
)


@hookimpl
def oplib_backends() -> list[BackendSpec]:
    return [META_BACKEND]


def _filled(name: str) -> Any:
    def kernel(size: Sequence[Any], *, dtype: np.dtype | None, device: Device | None) -> MetaArray:
        return MetaArray.from_parts(
            check_shape(size, name), get_default_dtype() if dtype is None else dtype, META
        )

    kernel.__name__ = kernel.__qualname__ = f"meta_{name}"
    return kernel


def meta_full(
    size: Sequence[Any], fill_value: Any, *, dtype: np.dtype | None, device: Device | None
) -> MetaArray:
    dt = shapes.scalar_dtype(fill_value) if dtype is None else dtype
    return MetaArray.from_parts(check_shape(size, "full"), dt, META)


def meta_arange(end: Any, *, dtype: np.dtype | None, device: Device | None) -> MetaArray:
    return meta_arange_start(0, end, 1, dtype=dtype, device=device)


def meta_arange_start(
    start: Any, end: Any, step: Any, *, dtype: np.dtype | None, device: Device | None
) -> MetaArray:
    n = shapes.arange_length(start, end, step)
    return MetaArray.from_parts((n,), shapes.arange_dtype(start, end, step, dtype), META)


def meta_to_copy(
    self: MetaArray, *, dtype: np.dtype | None = None, device: Device | None = None
) -> MetaArray:
    """Copies stay on meta; copying out of meta has no data to copy."""
    if device is not None and device.type != "meta":
        to_host(self)
    return MetaArray.from_parts(self.shape, self.dtype if dtype is None else dtype, META)


@hookimpl
def oplib_impl(registrar: Registrar) -> None:
    for name in ("empty", "zeros", "ones"):
        registrar.impl(f"oplib::{name}", "meta", _filled(name))
    registrar.impl("oplib::full", "meta", meta_full)
    registrar.impl("oplib::arange", "meta", meta_arange)
    registrar.impl("oplib::arange.start", "meta", meta_arange_start)
    registrar.impl("oplib::_to_copy", "meta", meta_to_copy)
