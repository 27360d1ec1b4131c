"""Sample inputs of the indexing and view ops, merged into ``CORE_SAMPLES`` by
:mod:`._core_samples` (same seeded host data, copied to each device).

Each maker takes the op's seeded data source ``d`` (``floats``/``ints``/``bools``) and the
device. Float inputs require grad, so ``test_gradcheck`` checks every formula; index
tensors are int64 and never require grad. ``max``/``min`` samples have no ties.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import bfloat16
from .._factories import tensor
from .._tensor.tensor import Tensor
from ._samples import SampleInput

__all__ = ["INDEX_MAKERS"]

F32 = np.dtype(np.float32)

Maker = Callable[[Any, Device], Iterator[SampleInput]]
INDEX_MAKERS: dict[str, Maker] = {}


def _makes(*names: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        for name in names:
            INDEX_MAKERS[name] = fn
        return fn

    return register


def _f(d: Any, shape: tuple[int, ...], dev: Device, dtype: Any = F32) -> Tensor:
    return tensor(d.floats(shape).astype(dtype), device=dev, requires_grad=True)


def _i(values: Any, dev: Device) -> Tensor:
    return tensor(np.asarray(values, dtype=np.int64), device=dev)


@_makes("select.int")
def _select(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (3, 4), dev), 1, -1), name="float32 (3, 4), dim 1, -1")
    yield SampleInput((_f(d, (3,), dev), 0, 2), name="float32 (3,) to 0-d")
    yield SampleInput((tensor(d.ints((2, 3)), device=dev), 0, 1), name="int64 (2, 3)")


@_makes("slice.Tensor")
def _slice(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (5, 3), dev), 0, 1, None, 2), name="float32 (5, 3), 1::2")
    yield SampleInput((_f(d, (2, 6), dev), -1, -4, 100, 1), name="float32 (2, 6), clamped")
    yield SampleInput((_f(d, (4,), dev, bfloat16), 0, 1, 3, 1), name="bfloat16 (4,), 1:3")


@_makes("narrow")
def _narrow(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (4, 3), dev), 0, 1, 2), name="float32 (4, 3), rows 1:3")
    yield SampleInput((_f(d, (2, 5), dev), -1, -3, 2), name="float32 (2, 5), negative start")


@_makes("index.Tensor")
def _index(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (4, 3), dev), [_i([3, 0, 3], dev)]), name="rows [3, 0, 3]")
    yield SampleInput(
        (_f(d, (3, 4), dev), [None, _i([[0, 1], [3, 3]], dev)]), name="columns, 2-d index"
    )
    yield SampleInput(
        (_f(d, (2, 3, 4), dev), [_i([1, 0], dev), None, _i([2, 3], dev)]),
        name="separated indices (result dims first)",
    )
    mask = tensor(np.array([True, False, True]), device=dev)
    yield SampleInput((_f(d, (3, 2), dev), [mask]), name="bool mask")


@_makes("masked_select")
def _masked_select(d: Any, dev: Device) -> Iterator[SampleInput]:
    mask = tensor(d.bools((2, 3)), device=dev)
    yield SampleInput((_f(d, (2, 3), dev), mask), name="float32 (2, 3)")
    row = tensor(np.array([True, False, True]), device=dev)
    yield SampleInput((_f(d, (2, 3), dev), row), name="mask (3,) broadcast")


@_makes("index_select")
def _index_select(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (3, 4), dev), 1, _i([3, 0, 0], dev)), name="dim 1, repeated")
    yield SampleInput((_f(d, (3, 2), dev), 0, _i(2, dev)), name="0-d index")


@_makes("gather")
def _gather(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput(
        (_f(d, (3, 4), dev), 1, _i([[0, 0], [3, 1], [2, 2]], dev)), name="dim 1, repeated"
    )
    yield SampleInput((_f(d, (3, 4), dev), 0, _i([[2, 1, 0]], dev)), name="smaller index")


def _scattered(d: Any, dev: Device, index: list[list[int]]) -> Iterator[SampleInput]:
    yield SampleInput(
        (_f(d, (2, 4), dev), 1, _i(index, dev), _f(d, (2, 3), dev)), name="dim 1, larger src"
    )
    yield SampleInput((_f(d, (3, 2), dev), 0, _i([[2, 0]], dev), _f(d, (1, 2), dev)), name="dim 0")


@_makes("scatter.src")
def _scatter(d: Any, dev: Device) -> Iterator[SampleInput]:
    # duplicate targets have no defined winner in scatter: distinct ones
    return _scattered(d, dev, [[0, 2], [3, 1]])


@_makes("scatter_add")
def _scatter_add(d: Any, dev: Device) -> Iterator[SampleInput]:
    return _scattered(d, dev, [[0, 0], [3, 3]])  # duplicates sum


@_makes("scatter.value")
def _scatter_value(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 4), dev), 1, _i([[0, 2], [3, 1]], dev), 1.5), name="1.5")


@_makes("pad")
def _pad(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), [1, 2]), name="constant, last dim")
    yield SampleInput((_f(d, (2, 3), dev), [1, -1, 0, 1], "constant", 0.5), name="crop, 0.5")
    yield SampleInput((_f(d, (2, 4), dev), [2, 1], "reflect"), name="reflect")
    yield SampleInput((_f(d, (2, 3), dev), [1, 2, 1, 0], "replicate"), name="replicate")
    yield SampleInput((_f(d, (2, 3), dev), [2, 1], "circular"), name="circular")


@_makes("flip")
def _flip(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), [0, 1]), name="both dims")
    yield SampleInput((_f(d, (2, 3), dev), [-1]), name="last dim")


@_makes("roll")
def _roll(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), [1]), name="flattened")
    yield SampleInput((_f(d, (2, 3), dev), [1, -2], [0, 1]), name="both dims")


@_makes("tril", "triu")
def _tri(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (3, 4), dev),), name="(3, 4)")
    yield SampleInput((_f(d, (2, 3, 3), dev), -1), name="batched, diagonal -1")


@_makes("repeat")
def _repeat(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), [2, 1]), name="(2, 3) by (2, 1)")
    yield SampleInput((_f(d, (3,), dev), [2, 2]), name="new leading dim")


@_makes("tile")
def _tile(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), [2]), name="short dims")


@_makes("split.Tensor")
def _split(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (5, 2), dev), 2), name="(5, 2) by 2")
    yield SampleInput((_f(d, (2, 4), dev), 3, 1), name="dim 1")


@_makes("split_with_sizes")
def _split_with_sizes(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (5, 2), dev), [1, 4]), name="[1, 4]")


@_makes("chunk")
def _chunk(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (5, 2), dev), 3), name="5 in 3 chunks")


@_makes("tensor_split.sections")
def _tensor_split_sections(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 5), dev), 3, 1), name="5 in 3 sections")


@_makes("tensor_split.indices")
def _tensor_split_indices(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (6, 2), dev), [1, 4]), name="cuts at 1, 4")


@_makes("expand")
def _expand(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (3, 1), dev), [2, -1, 4]), name="(3, 1) to (2, 3, 4)")


@_makes("movedim.int")
def _movedim_int(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3, 4), dev), 0, -1), name="0 to -1")


@_makes("movedim.intlist")
def _movedim_intlist(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3, 4), dev), [0, 1], [2, 0]), name="[0, 1] to [2, 0]")


@_makes("view")
def _view(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 6), dev), [3, -1]), name="(2, 6) as (3, 4)")


@_makes("max", "min")
def _extreme(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev),), name="float32 (2, 3)")
    yield SampleInput((tensor(d.ints((4,)), device=dev),), name="int64 (4,)")


@_makes("max.dim", "min.dim")
def _extreme_dim(d: Any, dev: Device) -> Iterator[SampleInput]:
    yield SampleInput((_f(d, (2, 3), dev), 1), name="dim 1")
    yield SampleInput((_f(d, (3, 2), dev), 0, True), name="dim 0, keepdim")
