"""Gradient formulas of the indexing and view ops, merged with ``FORMULAS`` by the
``core-autograd`` plugin.

Ops that only move or copy elements (``select``, ``slice``, ``index``, ``masked_select``,
``index_select``, ``repeat``, ``tile``, ``pad`` ...) share one rule: the op is applied to
the *positions* of the input's elements (an int64 ``arange`` of its shape), and the
gradient is summed back into those positions with ``scatter_add``. Repeated elements sum,
dropped ones get zero, and broadcasting (``masked_select``'s mask) sums as it should. Every
formula is written with oplib ops, so ``create_graph=True`` differentiates it again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from ._engine import sum_to

__all__ = ["INDEX_FORMULAS"]

Pair = tuple[Callable[..., Any] | None, Callable[..., Any]]
_INT64 = np.dtype("int64")


def _op(name: str) -> Any:
    return op_named(f"oplib::{name}")


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t._data.shape)


def _zeros(shape: Sequence[int], like: Tensor) -> Tensor:
    return Tensor._wrap(_op("zeros")(list(shape), dtype=like.dtype, device=like.device))


# -- moved elements: the positions rule ---------------------------------------------------------
def _save_moved(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x = inputs[0]
    ctx.shape = _shape(x)
    ctx.rest = inputs[1:]


def _route_back(g: Tensor, shape: tuple[int, ...], positions: Tensor) -> Tensor:
    """``g`` summed into the ``positions`` it came from, as a gradient of ``shape``; position
    ``numel(shape)`` is a slot for elements that came from nowhere (padding)."""
    n = math.prod(shape)
    summed = _op("scatter_add")(
        _zeros([n + 1], g), 0, _op("reshape")(positions, [-1]), _op("reshape")(g, [-1])
    )
    out: Tensor = _op("reshape")(_op("narrow")(summed, 0, 0, n), list(shape))
    return out


def _positions(shape: tuple[int, ...], g: Tensor) -> Tensor:
    n = math.prod(shape)
    flat = Tensor._wrap(_op("arange")(n, dtype=_INT64, device=g.device))
    out: Tensor = _op("reshape")(flat, list(shape))
    return out


def _moved(
    name: str, rest: Callable[[Any, tuple[Any, ...]], tuple[Any, ...]] | None = None
) -> Pair:
    """The formula of op ``name``, which moves or copies elements of its first input; ``rest``
    turns the saved other arguments into those the positions are moved with."""

    def backward(ctx: Any, g: Tensor) -> Any:
        args = ctx.rest if rest is None else rest(ctx, ctx.rest)
        positions = _op(name)(_positions(ctx.shape, g), *args)
        return (_route_back(g, ctx.shape, positions), *([None] * len(ctx.rest)))

    backward.__name__ = f"_{name.replace('.', '_')}_backward"
    return _save_moved, backward


def _pad_rest(ctx: Any, rest: tuple[Any, ...]) -> tuple[Any, ...]:
    pad, mode = rest[0], rest[1] if len(rest) > 1 else "constant"
    # padded elements point at the spare slot numel(shape)
    return (pad, mode, float(math.prod(ctx.shape)) if mode == "constant" else None)


# -- views with their own inverse -------------------------------------------------------------
def _save_shape(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.shape = _shape(inputs[0])
    ctx.n = len(inputs) - 1


def _save_shape_kw(
    ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any
) -> None:
    _save_shape(ctx, inputs, output)


def _view_back(ctx: Any, g: Tensor) -> Any:
    return _op("reshape")(g, list(ctx.shape)), None


def _expand_back(ctx: Any, g: Tensor) -> Any:
    return sum_to(g, ctx.shape), None


def _save_movedim(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.args = inputs[1:]


def _movedim_back(ctx: Any, g: Tensor) -> Any:
    source, destination = ctx.args
    if isinstance(source, int):
        return _op("movedim.int")(g, destination, source), None, None
    return _op("movedim.intlist")(g, list(destination), list(source)), None, None


def _save_split(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x = inputs[0]
    ctx.shape = _shape(x)
    ctx.n = len(inputs) - 1
    ndim = len(ctx.shape)
    ctx.dim = (inputs[2] if len(inputs) > 2 else 0) % max(ndim, 1)
    ctx.sizes = [o._data.shape[ctx.dim] for o in output]


def _split_back(ctx: Any, grads: list[Tensor | None]) -> Any:
    """The pieces' gradients concatenated back (zeros for a piece that got none)."""
    like = next(g for g in grads if g is not None)
    parts = []
    for g, n in zip(grads, ctx.sizes, strict=True):
        if g is None:
            shape = list(ctx.shape)
            shape[ctx.dim] = n
            g = _zeros(shape, like)
        parts.append(g)
    return (_op("cat")(parts, ctx.dim), *([None] * ctx.n))


# -- elementwise rearrangements with an exact inverse --------------------------------------------
def _save_args(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.args = inputs[1:]


def _flip_back(ctx: Any, g: Tensor) -> Any:
    return _op("flip")(g, ctx.args[0]), None


def _roll_back(ctx: Any, g: Tensor) -> Any:
    shifts, dims = ctx.args
    return _op("roll")(g, [-s for s in shifts], dims), None, None


def _tri(name: str) -> Pair:
    def backward(ctx: Any, g: Tensor) -> Any:
        return _op(name)(g, ctx.args[0]), None

    return _save_args, backward


# -- gather and scatter ---------------------------------------------------------------------------
def _save_indexed(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.shape = _shape(inputs[0])
    ctx.dim = inputs[1]
    ctx.index = inputs[2]
    last = inputs[3] if len(inputs) > 3 else None
    ctx.src_shape = _shape(last) if isinstance(last, Tensor) else None


def _save_indexed_kw(
    ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any
) -> None:
    _save_indexed(ctx, inputs, output)


def _pad_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` padded with zeros at the end of each dim to ``shape``."""
    have = _shape(t)
    if have == shape:
        return t
    pad: list[int] = []
    for h, s in zip(reversed(have), reversed(shape), strict=True):
        pad += [0, s - h]
    out: Tensor = _op("pad")(t, pad, "constant", 0.0)
    return out


def _gather_back(ctx: Any, g: Tensor) -> Any:
    return _op("scatter_add")(_zeros(ctx.shape, g), ctx.dim, ctx.index, g), None, None


def _scatter_src_back(ctx: Any, g: Tensor) -> Any:
    need_self, _, _, need_src = ctx.needs_input_grad
    gs = _op("scatter.value")(g, ctx.dim, ctx.index, 0) if need_self else None
    gsrc = _pad_to(_op("gather")(g, ctx.dim, ctx.index), ctx.src_shape) if need_src else None
    return gs, None, None, gsrc


def _scatter_value_back(ctx: Any, g: Tensor) -> Any:
    return _op("scatter.value")(g, ctx.dim, ctx.index, 0), None, None, None


def _scatter_add_back(ctx: Any, g: Tensor) -> Any:
    need_src = ctx.needs_input_grad[3]
    gsrc = _pad_to(_op("gather")(g, ctx.dim, ctx.index), ctx.src_shape) if need_src else None
    return g, None, None, gsrc


# -- max and min --------------------------------------------------------------------------------
def _save_extreme(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], output)


def _extreme_back(ctx: Any, g: Tensor) -> Any:
    """Shared evenly between the elements equal to the extremum (torch's rule for max())."""
    x, out = ctx.saved_tensors
    mask = _op("astype")(_op("eq")(x, out), g.dtype)
    return _op("mul")(mask, _op("div")(g, _op("sum")(mask, None, False)))


def _save_extreme_dim(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dim = inputs[0], inputs[1]
    ctx.shape = _shape(x)
    ctx.dim = dim % max(len(ctx.shape), 1)
    ctx.keepdim = inputs[2] if len(inputs) > 2 else False
    ctx.save_for_backward(output[1])
    ctx.mark_non_differentiable(output[1])


def _extreme_dim_back(ctx: Any, g: Tensor, g_indices: Any) -> Any:
    """The gradient goes to the element each index names."""
    (indices,) = ctx.saved_tensors
    if not ctx.shape:
        return g, None, None
    if not ctx.keepdim:
        g = _op("unsqueeze")(g, ctx.dim)
        indices = _op("unsqueeze")(indices, ctx.dim)
    return _op("scatter.src")(_zeros(ctx.shape, g), ctx.dim, indices, g), None, None


#: op name (as in ``CoreOp.name``) -> (setup_context, backward)
INDEX_FORMULAS: dict[str, Pair] = {
    "select.int": _moved("select.int"),
    "slice.Tensor": _moved("slice.Tensor"),
    "narrow": _moved("narrow"),
    "index.Tensor": _moved("index.Tensor"),
    "masked_select": _moved("masked_select"),
    "index_select": _moved("index_select"),
    "repeat": _moved("repeat"),
    "tile": _moved("tile"),
    "pad": _moved("pad", _pad_rest),
    "gather": (_save_indexed_kw, _gather_back),
    "scatter.src": (_save_indexed, _scatter_src_back),
    "scatter.value": (_save_indexed, _scatter_value_back),
    "scatter_add": (_save_indexed, _scatter_add_back),
    "flip": (_save_args, _flip_back),
    "roll": (_save_args, _roll_back),
    "tril": _tri("tril"),
    "triu": _tri("triu"),
    "split.Tensor": (_save_split, _split_back),
    "split_with_sizes": (_save_split, _split_back),
    "chunk": (_save_split, _split_back),
    "tensor_split.sections": (_save_split, _split_back),
    "tensor_split.indices": (_save_split, _split_back),
    "expand": (_save_shape_kw, _expand_back),
    "movedim.int": (_save_movedim, _movedim_back),
    "movedim.intlist": (_save_movedim, _movedim_back),
    "view": (_save_shape, _view_back),
    "max": (_save_extreme, _extreme_back),
    "min": (_save_extreme, _extreme_back),
    "max.dim": (_save_extreme_dim, _extreme_dim_back),
    "min.dim": (_save_extreme_dim, _extreme_dim_back),
}
