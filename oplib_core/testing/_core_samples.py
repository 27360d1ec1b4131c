"""Sample inputs for every op of the core op set
(``kernels.CORE_OPS``) and for ``oplib::_to_copy``.

Served by the built-in plugin ``core-samples`` (:mod:`._samples_plugin`) through the same
``oplib_sample_inputs`` hook as third-party samples. Data is
made on the host from a fixed seed, then copied to the requested device, so every device
gets the same values (data of a dtype the device's backend declares it cannot hold stays on
the host, and ``oplib check`` skips that sample). Values keep clear of the points where an
op is not differentiable (``abs`` and ``relu`` at 0, ties of ``maximum``/``amax``) and of
its domain's edges (``log``, ``sqrt``, division), so ``test_gradcheck`` is meaningful.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._device import Device
from .._dispatch import OpOverload
from .._opset import OUT_OPS
from ..kernels._inplace_kernels import functional_name
from ._index_samples import INDEX_MAKERS
from ._inplace_samples import INPLACE_MAKERS, out_samples
from ._sample_data import BF16, F16, F32, F64, I64, Maker, _Data, _t, samples_into
from ._samples import SampleInput

__all__ = ["CORE_SAMPLES"]

CORE_SAMPLES: dict[str, Maker] = {}
_samples = samples_into(CORE_SAMPLES)


# -- pointwise --------------------------------------------------------------------------------
_UNARY = ("neg", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "abs")
_INT_OK = ("neg", "relu", "abs", "add", "sub", "mul", "maximum", "minimum")


@_samples(*_UNARY, "log", "sqrt")
def _unary(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    positive = name in ("log", "sqrt")
    yield SampleInput((_t(d.floats((2, 3), positive=positive), dev, F32),), name="float32 (2, 3)")
    yield SampleInput((_t(d.floats((3,), positive=positive), dev, BF16),), name="bfloat16 (3,)")
    yield SampleInput(
        (_t(d.floats((3,), positive=positive), dev, F16, grad=False),), name="float16 (3,)"
    )
    if name in _INT_OK:
        yield SampleInput((_t(d.ints((2, 3)), dev),), name="int64 (2, 3)")


@_samples("add", "sub", "mul", "div", "pow", "maximum", "minimum")
def _binary(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    positive = name == "pow"  # d/d exponent of x**y needs log(x)
    a, b = d.floats((2, 3), positive=positive), d.floats((2, 3))
    yield SampleInput((_t(a, dev, F32), _t(b, dev, F32)), name="float32 (2, 3)")
    yield SampleInput(
        (_t(d.floats((2, 3), positive=positive), dev, F32), _t(d.floats((3,)), dev, F32)),
        name="float32 (2, 3) with (3,), broadcast",
    )
    yield SampleInput(
        (_t(d.floats((2, 3), positive=positive), dev, BF16), _t(d.floats((3,)), dev, BF16)),
        name="bfloat16 (2, 3) with (3,)",
    )
    yield SampleInput(
        (
            _t(d.floats((2, 3), positive=positive), dev, F16, grad=False),
            _t(d.floats((3,)), dev, F16, grad=False),
        ),
        name="float16 (2, 3) with (3,)",
    )
    if name != "pow":  # torch's promotion, which numpy does not have for these pairs
        yield SampleInput(
            (_t(d.floats((3,)), dev, BF16), _t(d.floats((3,)), dev, np.dtype(np.float16))),
            name="bfloat16 with float16 (float32)",
        )
    if name in _INT_OK:
        yield SampleInput((_t(d.ints((2, 3)), dev), _t(d.ints((2, 3)), dev)), name="int64 (2, 3)")


@_samples(
    "add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar", "pow.Scalar",
    "rsub.Scalar", "rdiv.Scalar", "rpow.Scalar",
)  # fmt: skip
def _scalar(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    positive = name == "pow.Scalar"
    yield SampleInput((_t(d.floats((2, 3), positive=positive), dev, F32), 1.5), name="float32, 1.5")
    yield SampleInput((_t(d.floats((3,), positive=True), dev, BF16), 1.5), name="bfloat16, 1.5")
    yield SampleInput(
        (_t(d.floats((3,), positive=True), dev, F16, grad=False), 1.5), name="float16, 1.5"
    )
    if name in ("add.Scalar", "sub.Scalar", "mul.Scalar", "rsub.Scalar"):
        yield SampleInput((_t(d.ints((2, 3)), dev), 3), name="int64, 3")


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


@_samples(*_COMPARISONS)
def _compare(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    a = d.floats((2, 3))
    b = d.floats((2, 3))
    b[0, :2] = a[0, :2]  # some equal elements
    yield SampleInput((_t(a, dev, F32), _t(b, dev, F32)), name="float32 (2, 3)")
    x, y = d.ints((2, 3)), d.ints((3,))
    yield SampleInput((_t(x, dev), _t(y, dev)), name="int64 (2, 3) with (3,)")
    yield SampleInput((_t(a, dev, BF16), _t(b, dev, BF16)), name="bfloat16 (2, 3)")
    yield SampleInput(
        (_t(a, dev, F16, grad=False), _t(b, dev, F16, grad=False)), name="float16 (2, 3)"
    )


@_samples(*(f"{c}.Scalar" for c in _COMPARISONS))
def _compare_scalar(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    a = d.floats((2, 3))
    a[0, 0] = 0.5
    yield SampleInput((_t(a, dev, F32), 0.5), name="float32, 0.5")
    yield SampleInput((_t(d.ints((2, 3)), dev), 1), name="int64, 1")


@_samples("where")
def _where(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    cond = _t(d.bools((2, 3)), dev)
    yield SampleInput(
        (cond, _t(d.floats((2, 3)), dev, F32), _t(d.floats((3,)), dev, F32)),
        name="bool, float32 (2, 3), float32 (3,)",
    )


# -- reductions -------------------------------------------------------------------------------
@_samples("sum", "mean")
def _sum_mean(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32),), name="float32 (2, 3), all")
    yield SampleInput(
        (_t(d.floats((2, 3, 2)), dev, F32), [0, 2], True), name="float32 (2, 3, 2), dims 0, 2"
    )
    yield SampleInput((_t(d.floats((2, 3)), dev, BF16), [1]), name="bfloat16 (2, 3), dim 1")
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F16, grad=False), [1]), name="float16 (2, 3), dim 1"
    )
    if name == "sum":
        yield SampleInput((_t(d.ints((2, 3)), dev), [1]), name="int64 (2, 3), dim 1")
    else:
        yield SampleInput(
            (_t(d.ints((2, 3)), dev), [1]), {"dtype": F64}, name="int64 (2, 3), dtype float64"
        )


@_samples("amax", "amin")
def _extremum(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32),), name="float32 (2, 3), all")
    yield SampleInput((_t(d.floats((2, 3)), dev, F32), [1], True), name="float32 (2, 3), dim 1")
    yield SampleInput((_t(d.ints((2, 3)), dev), [0]), name="int64 (2, 3), dim 0")
    yield SampleInput((_t(d.floats((2, 3)), dev, BF16), [0]), name="bfloat16 (2, 3), dim 0")
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F16, grad=False), [0]), name="float16 (2, 3), dim 0"
    )


# -- linear algebra ---------------------------------------------------------------------------
@_samples("matmul")
def _matmul(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F32), _t(d.floats((3, 2)), dev, F32)), name="(2, 3) @ (3, 2)"
    )
    yield SampleInput(
        (_t(d.floats((3,)), dev, F32), _t(d.floats((3, 2)), dev, F32)), name="(3,) @ (3, 2)"
    )
    yield SampleInput((_t(d.ints((2, 3)), dev), _t(d.ints((3,)), dev)), name="int64 (2, 3) @ (3,)")
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, BF16), _t(d.floats((3, 2)), dev, BF16)),
        name="bfloat16 (2, 3) @ (3, 2)",
    )
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F16, grad=False), _t(d.floats((3, 2)), dev, F16, grad=False)),
        name="float16 (2, 3) @ (3, 2)",
    )


# -- shape ops --------------------------------------------------------------------------------
@_samples("transpose")
def _transpose(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32), 0, 1), name="float32 (2, 3), 0, 1")
    yield SampleInput((_t(d.ints((2, 3, 2)), dev), -1, 0), name="int64 (2, 3, 2), -1, 0")


@_samples("_narrow")
def _narrow(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((4, 3)), dev, F32), 0, 1, 2), name="float32 (4, 3), rows 1:3")
    yield SampleInput((_t(d.floats((2, 5)), dev, F32), 1, 0, 5), name="float32 (2, 5), all columns")


@_samples("permute")
def _permute(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3, 2)), dev, F32), [2, 0, 1]), name="float32, (2, 0, 1)")


@_samples("reshape")
def _reshape(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32), [3, 2]), name="float32 (2, 3) to (3, 2)")
    yield SampleInput((_t(d.ints((2, 3)), dev), [-1]), name="int64 (2, 3) to (-1,)")
    yield SampleInput((_t(d.floats((2, 3)), dev, BF16), [3, 2]), name="bfloat16 (2, 3) to (3, 2)")
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F16, grad=False), [3, 2]), name="float16 (2, 3) to (3, 2)"
    )


@_samples("broadcast_to")
def _broadcast_to(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((3,)), dev, F32), [2, 3]), name="float32 (3,) to (2, 3)")
    yield SampleInput((_t(d.floats((2, 1)), dev, F32), [2, 3]), name="float32 (2, 1) to (2, 3)")


@_samples("unsqueeze")
def _unsqueeze(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32), 1), name="float32 (2, 3), dim 1")
    yield SampleInput((_t(d.ints((2, 3)), dev), -1), name="int64 (2, 3), dim -1")


@_samples("squeeze")
def _squeeze(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 1, 3)), dev, F32),), name="float32 (2, 1, 3), all")
    yield SampleInput((_t(d.floats((1, 3, 1)), dev, F32), [0]), name="float32 (1, 3, 1), dim 0")


@_samples("cat", "stack")
def _cat_stack(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    a, b = d.floats((2, 3)), d.floats((1 if name == "cat" else 2, 3))
    yield SampleInput(([_t(a, dev, F32), _t(b, dev, F32)],), name="float32, dim 0")
    yield SampleInput(
        ([_t(d.floats((2, 3)), dev, F32), _t(d.floats((2, 3)), dev, F32)], 1),
        name="float32, dim 1",
    )
    yield SampleInput(([_t(d.ints((2, 2)), dev), _t(d.ints((2, 2)), dev)],), name="int64")
    yield SampleInput(
        ([_t(d.floats((2, 2)), dev, BF16), _t(d.floats((2, 2)), dev, BF16)],), name="bfloat16"
    )
    yield SampleInput(
        ([_t(d.floats((2, 2)), dev, F16, grad=False), _t(d.floats((2, 2)), dev, F16, grad=False)],),
        name="float16",
    )


for _name, _make in INDEX_MAKERS.items():  # indexing and views (issue 14)
    _samples(_name)(lambda name, d, dev, _make=_make: _make(d, dev))


# -- copies -----------------------------------------------------------------------------------
@_samples("clone")
def _clone(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32),), name="float32 (2, 3)")
    yield SampleInput((_t(d.bools((2, 3)), dev),), name="bool (2, 3)")
    yield SampleInput((_t(d.floats((2, 3)), dev, BF16),), name="bfloat16 (2, 3)")
    yield SampleInput((_t(d.floats((2, 3)), dev, F16, grad=False),), name="float16 (2, 3)")


@_samples("copy_")
def _copy(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    zeros = np.zeros((2, 3), dtype=F32)
    yield SampleInput(
        (_t(zeros, dev, grad=False), _t(d.floats((2, 3)), dev, F32, grad=False)),
        name="float32 (2, 3)",
    )
    yield SampleInput(
        (_t(zeros, dev, grad=False), _t(d.ints((3,)) + 10, dev, grad=False)),
        name="float32 (2, 3) from int64 (3,)",
    )


@_samples("astype")
def _astype(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32), F64), name="float32 to float64")
    yield SampleInput((_t(d.ints((2, 3)), dev), F32), name="int64 to float32")
    # no gradcheck into bfloat16: finite differences vanish at its precision
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F32, grad=False), BF16), name="float32 to bfloat16"
    )
    yield SampleInput((_t(d.floats((2, 3)), dev, BF16), F32), name="bfloat16 to float32")
    yield SampleInput((_t(d.floats((2, 3)), dev, F32, grad=False), F16), name="float32 to float16")
    yield SampleInput((_t(d.floats((2, 3)), dev, F16, grad=False), F32), name="float16 to float32")


@_samples("_to_copy")
def _to_copy(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_t(d.floats((2, 3)), dev, F32),), name="float32 (2, 3)")
    yield SampleInput((_t(d.floats((2, 3)), dev, F32),), {"dtype": F64}, name="to float64")
    yield SampleInput(
        (_t(d.floats((2, 3)), dev, F32, grad=False),), {"dtype": BF16}, name="to bfloat16"
    )


# -- factories --------------------------------------------------------------------------------
@_samples("empty", "zeros", "ones")
def _filled(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    values = name != "empty"  # empty's values are unspecified
    yield SampleInput(([2, 3],), {"device": dev}, name="(2, 3)", compare_values=values)
    yield SampleInput(
        ([4],), {"dtype": I64, "device": dev}, name="int64 (4,)", compare_values=values
    )
    yield SampleInput(
        ([3],), {"dtype": BF16, "device": dev}, name="bfloat16 (3,)", compare_values=values
    )
    yield SampleInput(
        ([3],), {"dtype": F16, "device": dev}, name="float16 (3,)", compare_values=values
    )


@_samples("full")
def _full(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput(([2, 3], 1.5), {"device": dev}, name="(2, 3), 1.5")
    yield SampleInput(([3], 7), {"dtype": I64, "device": dev}, name="int64 (3,), 7")
    yield SampleInput(([3], 0.1), {"dtype": BF16, "device": dev}, name="bfloat16 (3,), 0.1")
    yield SampleInput(([3], 0.1), {"dtype": F16, "device": dev}, name="float16 (3,), 0.1")


@_samples("arange")
def _arange(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((5,), {"device": dev}, name="5")
    yield SampleInput((2.5,), {"dtype": F64, "device": dev}, name="2.5, float64")
    yield SampleInput((4,), {"dtype": BF16, "device": dev}, name="4, bfloat16")
    yield SampleInput((4,), {"dtype": F16, "device": dev}, name="4, float16")


@_samples("arange.start")
def _arange_start(name: str, d: _Data, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((1, 7, 2), {"device": dev}, name="1, 7, 2")
    yield SampleInput((0.0, 1.0, 0.25), {"device": dev}, name="0.0, 1.0, 0.25")


def core_sample_inputs(op: OpOverload, device: Device) -> Any:
    """The samples of a core op on ``device`` (None for other ops): what the built-in
    plugin ``core-samples`` (:mod:`._samples_plugin`) answers."""
    ns, _, name = op.name().partition("::")
    if ns != "oplib":
        return None
    maker = CORE_SAMPLES.get(name)
    return None if maker is None else list(maker(device))


CORE_SAMPLES.update(INPLACE_MAKERS)  # the in-place ops and their functional companions
for _op in OUT_OPS:  # each out= overload: its functional op's samples, with an ``out``
    CORE_SAMPLES[_op.name] = out_samples(functional_name(_op.name), CORE_SAMPLES)
