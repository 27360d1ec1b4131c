"""``oplib.autograd.grad`` called inside ``oplib.vmap``: per-example gradients.

The graph is recorded on the batched values (batch dim first). ``grad`` inside a level
unwraps that level's BatchedTensors, seeds each per-example output with its own gradient,
and asks the engine on the values (with the level off the mode stack, so the backward
formulas run on plain arrays). An unbatched input that requires grad was expanded to the
batch where an op first used it inside the level (``VmapLevel.expand``), so its gradient is
taken at that copy: one gradient per example, not their sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._factories import ones_like
from .._tensor.tensor import Tensor
from ..autograd import grad as engine_grad
from ._batched import BatchedTensor, current_levels, wrap

__all__ = ["batched_backward", "batched_grad"]


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def batched_grad(
    outputs: Sequence[Any],
    inputs: Sequence[Any],
    grad_outputs: Any,
    retain_graph: bool | None,
    create_graph: bool,
    allow_unused: bool,
) -> tuple[Any, ...]:
    """``grad()`` whose outputs or inputs hold BatchedTensors (the engine hands it here)."""
    levels = current_levels()
    if not levels:
        raise RuntimeError(
            "grad(): got a BatchedTensor outside the oplib.vmap call that made it; a batched "
            "value must not escape its vmap (return it from the vmapped function instead)"
        )
    level = levels[-1]
    lv = level.level
    grads = [None] * len(outputs) if grad_outputs is None else _as_list(grad_outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(
            f"grad(): got {len(grads)} grad_outputs for {len(outputs)} outputs; pass one per output"
        )
    with level.popped():
        outs: list[Any] = []
        gouts: list[Any] = []
        g: Any
        for i, (o, g) in enumerate(zip(outputs, grads, strict=True)):
            if type(o) is BatchedTensor and o._level == lv:
                v = o._value
                if g is None:
                    if o.ndim != 0:
                        raise RuntimeError(
                            f"grad can be implicitly created only for scalar outputs; output "
                            f"{i} has shape {o.shape} (per example, inside vmap): pass "
                            "grad_outputs= (a tensor of that shape)"
                        )
                    g = ones_like(v)
                elif type(g) is BatchedTensor and g._level == lv:
                    g = g._value
                elif isinstance(g, Tensor):
                    g = g.unsqueeze(0).expand([level.batch_size, *g.shape])
                outs.append(v)
                gouts.append(g)
            else:
                outs.append(o)
                gouts.append(g)
        ins: list[Any] = []
        batched: list[bool] = []
        for x in inputs:
            if type(x) is BatchedTensor and x._level == lv:
                ins.append(x._value)
                batched.append(True)
                continue
            hit = level.expanded.get(id(x))
            if hit is not None and hit[0] is x:
                ins.append(hit[1])
                batched.append(True)
            else:
                ins.append(x)
                batched.append(False)
        result = engine_grad(
            outs,
            ins,
            gouts,
            retain_graph=retain_graph,
            create_graph=create_graph,
            allow_unused=allow_unused,
        )
    return tuple(
        wrap(r, lv) if b and r is not None else r for r, b in zip(result, batched, strict=True)
    )


def batched_backward(*_: Any, **__: Any) -> None:
    """``backward()`` on a BatchedTensor: refused, as torch refuses it inside a transform."""
    raise RuntimeError(
        "backward() called inside oplib.vmap. This is not supported: per-example .grad has "
        "no place to go. Use oplib.autograd.grad inside the vmapped function, or call "
        "backward() outside vmap."
    )


# the engine asks a Tensor subclass for these (autograd._engine._transform_hook)
BatchedTensor.__oplib_grad__ = staticmethod(batched_grad)  # type: ignore[attr-defined]
BatchedTensor.__oplib_backward__ = staticmethod(batched_backward)  # type: ignore[attr-defined]
