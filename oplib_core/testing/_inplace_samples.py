"""Sample inputs of the in-place core ops, their functional companions (``clamp``,
``index_put``) and the ``out=`` overloads: ``INPLACE_MAKERS`` and ``out_samples``, which
:mod:`._core_samples` merges into ``CORE_SAMPLES``.

The tensors written in place do not require grad (a leaf that requires grad is refused by
every in-place op, as in torch); the functional companions' samples do, for gradcheck.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .._device import Device
from .._factories import tensor
from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from ..fake._arrays import FakeArray
from ._sample_data import BF16, F32, F64, I64, Maker, _Data, _t, samples_into
from ._samples import SampleInput

__all__ = ["INPLACE_MAKERS", "out_samples"]

INPLACE_MAKERS: dict[str, Maker] = {}
_samples = samples_into(INPLACE_MAKERS)


@_samples("add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor")
def _binary_(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F32, grad=False), _t(d.floats((2, 3)), dev, F32, grad=False)),
        name="float32 (2, 3)",
    )
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F64, grad=False), _t(d.floats((3,)), dev, F32, grad=False)),
        name="float64 (2, 3) by float32 (3,)",
    )
    yield SampleInput(
        (_t(d.floats((2, 2)), dev, BF16, grad=False), _t(d.floats((2, 2)), dev, BF16, grad=False)),
        name="bfloat16",
    )


@_samples("add_.Scalar", "sub_.Scalar", "mul_.Scalar", "div_.Scalar")
def _scalar_(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32, grad=False), 1.5), name="float32, 1.5")
    yield SampleInput((_t(d.floats((3,)), dev, BF16, grad=False), 2.0), name="bfloat16, 2.0")
    if not name.startswith("div_"):  # true division of an int tensor is refused
        yield SampleInput((_t(d.ints((4,)), dev, grad=False), 3), name="int64, 3")


@_samples("zero_")
def _zero_(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32, grad=False),), name="float32 (2, 3)")
    yield SampleInput((_t(d.ints((4,)), dev, grad=False),), name="int64 (4,)")


@_samples("fill_.Scalar")
def _fill_scalar(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32, grad=False), 0.25), name="float32, 0.25")
    yield SampleInput((_t(d.ints((4,)), dev, grad=False), 7), name="int64, 7")


@_samples("fill_.Tensor")
def _fill_tensor(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F32, grad=False), _t(d.floats(()), dev, F32, grad=False)),
        name="float32 (2, 3), 0-d",
    )


@_samples("clamp")
def _clamp(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F64), -1.0, 1.0), name="float64, -1, 1")
    yield SampleInput((_t(d.floats((4,)), dev, F64), 0.0), name="float64, min only")
    yield SampleInput((_t(d.floats((4,)), dev, F64), None, 0.0), name="float64, max only")
    yield SampleInput((_t(d.ints((4,)), dev), -2, 2), name="int64, -2, 2")


@_samples("clamp_")
def _clamp_(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32, grad=False), -1.0, 1.0), name="float32")
    yield SampleInput((_t(d.ints((4,)), dev, grad=False), None, 2), name="int64, max only")


def _index_args(d: _Data, dev: Device, grad: bool) -> Iterator[SampleInput]:
    rows = _t(np.array([0, 2], dtype=I64), dev)
    mask = _t(d.bools((3, 4)), dev)
    yield SampleInput(
        (
            _t(d.floats((3, 4)), dev, F64, grad=grad),
            [rows, None],
            _t(d.floats((2, 4)), dev, F64, grad=grad),
        ),
        name="rows [0, 2] of (3, 4)",
    )
    yield SampleInput(
        (_t(d.floats((3, 4)), dev, F64, grad=grad), [mask], _t(d.floats(()), dev, F64, grad=grad)),
        name="bool mask, 0-d value",
    )
    yield SampleInput(
        (
            _t(d.floats((3,)), dev, F64, grad=grad),
            [_t(np.array([1, 1, 0], dtype=I64), dev)],
            _t(d.floats((3,)), dev, F64, grad=grad),
            True,
        ),
        name="accumulate, repeated index",
    )


@_samples("index_put")
def _index_put(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    return _index_args(d, dev, grad=True)


@_samples("index_put_")
def _index_put_(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    return _index_args(d, dev, grad=False)


def _detached(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, list):
        return [_detached(v) for v in value]
    return value


def _unlike(expected: Tensor) -> Tensor:
    """An ``out`` of ``expected``'s shape, dtype and device whose every element differs
    from ``expected``'s bit for bit, so the kernel's write always shows (``new_empty``'s
    memory often held the very result just freed, and ``oplib check`` then warned that the
    kernel left ``out`` unchanged)."""
    if isinstance(expected._data, FakeArray):  # no data to differ from
        return expected.new_empty(tuple(expected.shape))
    host = np.array(expected.backend.to_host(expected._data), copy=True)
    if host.dtype == np.bool_:
        np.logical_not(host, out=host)
    else:
        bits = host.view(np.dtype(f"u{host.dtype.itemsize}"))
        np.invert(bits, out=bits)
    return tensor(host, device=expected.device)


def out_samples(functional: str, makers: Mapping[str, Maker]) -> Maker:
    """An ``out=`` overload's samples: the functional op's (``makers[functional]``, read
    per call), without grad (``out=`` refuses autograd), each with an ``out`` of the
    functional result's shape and dtype holding other values than the result."""

    def make(device: Device) -> Iterator[SampleInput]:
        op = op_named(f"oplib::{functional}")  # plugins load on first use
        for sample in makers[functional](device):
            args = tuple(_detached(a) for a in sample.args)
            kwargs = {k: _detached(v) for k, v in sample.kwargs.items()}
            out = _unlike(op(*args, **kwargs))
            yield SampleInput(args, {**kwargs, "out": out}, name=f"{sample.name}, out=")

    return make
