"""What the core op set's sample modules share: the seeded host data (``_Data``), the
tensor maker that copies it to a device (``_t``), the dtypes the samples use, and the
decorator that files a maker under the names of its ops (``samples_into``).

:mod:`._core_samples` gathers the makers into ``CORE_SAMPLES``; :mod:`._inplace_samples`
and :mod:`._hop_samples` build theirs from the same pieces, so every module of samples
imports this one and none imports another to reach them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .._device import Device
from .._dtypes import bfloat16
from .._factories import tensor
from .._tensor.tensor import Tensor
from ..backends import TABLE
from ._samples import SampleInput

__all__: list[str] = []

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BF16 = bfloat16
#: float16 samples sit beside the bfloat16 ones: the half-precision float every backend with
#: a GPU library holds (cupy has no bfloat16). No gradcheck in it: its precision is too low.
F16 = np.dtype(np.float16)

#: An op's samples on a device.
Maker = Callable[[Device], Iterator[SampleInput]]
#: A maker as written: ``fn(name, data, device)``, shared by several ops.
MakerFn = Callable[..., Iterator[SampleInput]]


class _Data:
    """Host data from a seed fixed per op, so samples are the same on every device."""

    def __init__(self, name: str) -> None:
        self.rng = np.random.default_rng(sum(name.encode()) * 7919)

    def floats(self, shape: tuple[int, ...], *, positive: bool = False) -> np.ndarray:
        """Magnitudes in [0.5, 2): away from 0; distinct, so no ties."""
        mag = self.rng.uniform(0.5, 2.0, size=shape)
        if positive:
            return mag
        signed: np.ndarray = mag * self.rng.choice([-1.0, 1.0], size=shape)
        return signed

    def ints(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.integers(-5, 6, size=shape).astype(np.int64)

    def bools(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.integers(0, 2, size=shape).astype(bool)


def _t(
    data: np.ndarray, device: Device, dtype: np.dtype | None = None, grad: bool = True
) -> Tensor:
    arr = data if dtype is None else data.astype(dtype)
    backend = TABLE.find(device.type)
    if backend is not None and backend.dtype_problem(arr.dtype) is not None:
        device = Device("cpu")  # the backend cannot hold it: ``oplib check`` skips the sample
    return tensor(arr, device=device, requires_grad=grad and arr.dtype.kind == "f")


def samples_into(
    table: dict[str, Maker],
) -> Callable[..., Callable[[MakerFn], MakerFn]]:
    """The decorator ``@samples(*names)`` that files a maker ``fn(name, data, device)``
    in ``table`` under each of ``names``, with the op's own seeded data."""

    def samples(*names: str) -> Callable[[MakerFn], MakerFn]:
        def register(fn: MakerFn) -> MakerFn:
            for name in names:

                def make(device: Device, _n: str = name) -> Iterator[SampleInput]:
                    return fn(_n, _Data(_n), device)

                table[name] = make
            return fn

        return register

    return samples
