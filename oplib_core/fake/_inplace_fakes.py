"""Fake kernels of the in-place core ops and their functional companions (``clamp``,
``index_put``): the checks of the real kernels (torch's dtype and shape rules for the
written tensor) on data-less arrays. In-place fakes return ``self``, as the real ones do.
:func:`oplib_core.fake._core_fakes.core_fake_kernels` merges them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..kernels._inplace_kernels import (
    binary_inplace,
    check_fill_tensor,
    check_fill_value,
    check_inplace_result,
    clamp_dtype,
    index_key,
    out_kernels,
)
from ._arrays import FakeArray

__all__ = ["inplace_fake_kernels"]

Kernel = Callable[..., Any]


def inplace_fake_kernels(functional: dict[str, Kernel]) -> dict[str, Kernel]:
    """The fakes, built on the functional ops' fakes ``functional`` (for the result's dtype
    and broadcast shape)."""
    kernels: dict[str, Kernel] = {}

    def kernel(name: str) -> Callable[[Kernel], Kernel]:
        def register(fn: Kernel) -> Kernel:
            fn.__qualname__ = fn.__name__ = f"{name}_fake"
            fn._oplib_leaf_fake = True  # type: ignore[attr-defined]  # calls no ops
            kernels[name] = fn
            return fn

        return register

    def check(op: str, self: FakeArray, result: FakeArray) -> FakeArray:
        check_inplace_result(op, self, result.dtype, result.shape, self.dtype)
        return self

    for name, fn in binary_inplace(functional, check).items():
        kernel(name)(fn)

    @kernel("zero_")
    def zero_(self: FakeArray) -> FakeArray:
        return self

    @kernel("fill_.Scalar")
    def fill_scalar(self: FakeArray, value: Any) -> FakeArray:
        check_fill_value("oplib::fill_", self.dtype, value)
        return self

    @kernel("fill_.Tensor")
    def fill_tensor(self: FakeArray, value: FakeArray) -> FakeArray:
        check_fill_tensor(value)
        return self

    @kernel("clamp")
    def clamp(self: FakeArray, min: Any, max: Any) -> FakeArray:
        if min is None and max is None:
            raise RuntimeError("oplib::clamp: At least one of 'min' or 'max' must not be None")
        return self._new(self.shape, clamp_dtype(self.dtype, min, max))

    @kernel("clamp_")
    def clamp_(self: FakeArray, min: Any, max: Any) -> FakeArray:
        out = clamp(self, min, max)
        check_inplace_result("oplib::clamp_", self, out.dtype, out.shape, self.dtype)
        return self

    @kernel("index_put_")
    def index_put_(
        self: FakeArray, indices: Sequence[Any], values: FakeArray, accumulate: bool
    ) -> FakeArray:
        if values.dtype != self.dtype:
            raise RuntimeError(
                "oplib::index_put_: Index put requires the source and destination dtypes "
                f"match, got {self.dtype.name} for the destination and {values.dtype.name} "
                "for the source."
            )
        index_key("oplib::index_put_", indices)
        return self

    @kernel("index_put")
    def index_put(
        self: FakeArray, indices: Sequence[Any], values: FakeArray, accumulate: bool
    ) -> FakeArray:
        index_put_(self, indices, values, accumulate)
        return self._new(self.shape, self.dtype)

    kernels.update(out_kernels(functional | kernels))
    for fn in kernels.values():
        fn._oplib_leaf_fake = True  # type: ignore[attr-defined]  # calls no ops
    return kernels
