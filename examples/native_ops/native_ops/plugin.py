"""The oplib plugin of native-ops: loads the C library, adds a Python fake kernel for the
one op whose library gives no shape function, a fake class for ``Affine``, and sample
inputs for ``oplib check``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.plugins import Registrar
from oplib_core.testing import SampleInput

from . import library_path


@oplib.hookimpl
def oplib_define(registrar: Registrar) -> None:
    # Defines the ops, their kernels and shape functions, and the Affine class.
    registrar.load_library(library_path())


@oplib.hookimpl
def oplib_register_fake(registrar: Registrar) -> None:
    @registrar.register_fake("native_ops::scaled_add")
    def _(a: Any, b: Any, alpha: float = 1.0) -> Any:
        if tuple(a.shape) != tuple(b.shape):
            raise ValueError(f"scaled_add: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
        return oplib.empty_like(a)

    oplib.register_fake_class("native_ops::Affine", FakeAffine)


class FakeAffine:
    """Affine under FakeTensorMode: no native handle, only its parameters."""

    def __init__(self, scale: float, shift: float) -> None:
        self.scale = scale
        self.shift = shift

    @classmethod
    def __obj_unflatten__(cls, flattened: tuple[tuple[str, Any], ...]) -> FakeAffine:
        return cls(**dict(flattened))


def _floats(shape: tuple[int, ...], dtype: Any, device: Any, seed: int) -> oplib.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return oplib.tensor(data, device=device)


@oplib.hookimpl
def oplib_sample_inputs(op: Any, device: Any) -> Iterator[SampleInput] | None:
    name = op.name()
    if not name.startswith("native_ops::"):
        return None
    return _samples(name, device)


def _samples(name: str, device: Any) -> Iterator[SampleInput]:
    for dtype in (np.float32, np.float64):
        x = _floats((3, 4), dtype, device, 0)
        if name == "native_ops::scaled_add":
            yield SampleInput((x, _floats((3, 4), dtype, device, 1)), {"alpha": 0.5})
        elif name == "native_ops::sum_dim":
            yield SampleInput((x, 1))
            yield SampleInput((x, -2), {"keepdim": True})
        elif name == "native_ops::tile":
            yield SampleInput((x, [2, 1]))
        elif name == "native_ops::apply_affine":
            affine = oplib.classes.native_ops.Affine(2.0, -1.0)
            yield SampleInput((affine, x))
        elif name == "native_ops::minmax":
            yield SampleInput((x,))
