"""Sample inputs of the built-in control-flow operators, for ``oplib check``.

Functions are part of a higher-order operator's arguments; the samples use module-level
ones built from core ops, so every backend with those ops runs them. Data comes from the
same seeded host data as the core op set's samples (``_sample_data``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._device import Device
from .._higher_order._operator import HigherOrderOperator
from .._tensor.tensor import Tensor
from ._sample_data import F64, _Data, _t
from ._samples import SampleInput

__all__ = ["HOP_SAMPLES", "hop_samples"]


def _sin(x: Tensor) -> Tensor:
    return x.sin()


def _cos_times_two(x: Tensor) -> Tensor:
    return x.cos() * 2.0


def _weighted_sum(row: Tensor, w: Tensor) -> Tensor:
    return (row * w).sum()


def _running(carry: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    return carry * 0.5 + x, carry * x


def _below_three(i: int, x: Tensor) -> bool:
    return i < 3


def _double(i: int, x: Tensor) -> tuple[int, Tensor]:
    return i + 1, x * 2.0


def _cond(data: _Data, device: Device) -> Iterator[SampleInput]:
    x = _t(data.floats((2, 3)), device, F64)
    for flag in (True, False):
        pred = _t(np.array(flag), device)
        yield SampleInput((pred, _sin, _cos_times_two, (x,)), name=f"pred={flag} (2, 3)")
    yield SampleInput((True, _sin, _cos_times_two, (x,)), name="Python bool")


def _map(data: _Data, device: Device) -> Iterator[SampleInput]:
    xs = _t(data.floats((4, 3)), device, F64)
    w = _t(data.floats((3,)), device, F64)
    yield SampleInput((_weighted_sum, xs, (w,)), name="(4, 3) rows, weights (3,)")


def _scan(data: _Data, device: Device) -> Iterator[SampleInput]:
    init = _t(data.floats((3,)), device, F64)
    xs = _t(data.floats((4, 3)), device, F64)
    for reverse in (False, True):
        yield SampleInput((_running, init, xs, 0, reverse), name=f"dim 0 reverse={reverse}")
    ys = _t(data.floats((3, 4)), device, F64)
    yield SampleInput((_running, init, ys, 1, False), name="dim 1")


def _while_loop(data: _Data, device: Device) -> Iterator[SampleInput]:
    x = _t(data.floats((2, 2)), device, F64, grad=False)  # forward-only
    yield SampleInput((_below_three, _double, (0, x)), name="3 iterations")


HOP_SAMPLES: dict[str, Callable[[_Data, Device], Iterator[SampleInput]]] = {
    "cond": _cond,
    "map": _map,
    "scan": _scan,
    "while_loop": _while_loop,
}


def hop_samples(hop: HigherOrderOperator, device: Device) -> list[SampleInput]:
    """The samples of a built-in control-flow operator on ``device`` (none for others)."""
    make: Any = HOP_SAMPLES.get(hop.name())
    return [] if make is None else list(make(_Data(hop.name()), device))
