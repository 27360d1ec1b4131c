"""Gradient formulas of the core op set (``oplib_core.kernels.CORE_OPS``).

Each formula is a ``(setup_context, backward)`` pair in ``register_autograd``'s form,
written with oplib ops so that ``create_graph=True`` gives higher-order gradients on every
backend. Gradients of broadcast inputs are summed back to the input's shape (``sum_to``);
the engine casts each gradient to its input's dtype.

``FORMULAS`` maps op names (``"add.Scalar"``) to their pair; ``NON_DIFFERENTIABLE`` lists
the ops whose outputs never require grad (comparisons: the Autograd key falls through);
factories take no tensors and never reach autograd; ``copy_`` mutates its input and has no
formula (calling it on a tensor that requires grad raises).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from ._engine import sum_to
from ._fusion import fusable
from ._registration import keeps

__all__ = ["FORMULAS", "NON_DIFFERENTIABLE", "narrow_fake", "narrow_kernel"]

Pair = tuple[Callable[..., Any] | None, Callable[..., Any]]


class _Ops:
    """``OPS.mul`` is the overload of ``oplib::mul``, ``OPS.add_Scalar`` that of
    ``oplib::add.Scalar``."""

    def __getattr__(self, name: str) -> Any:
        base, _, overload = name.partition("_Scalar")
        qual = f"oplib::{base}.Scalar" if name.endswith("_Scalar") else f"oplib::{name}"
        del overload
        op = op_named(qual)
        setattr(self, name, op)
        return op


OPS = _Ops()


def _narrow_dim(shape: tuple[Any, ...], dim: int, start: int, length: int) -> int:
    """``dim`` wrapped into ``range(len(shape))`` (a negative dim counts from the end, as
    in torch), after checking it and the slice as the real slice would be."""
    ndim = len(shape)
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"_narrow(): Dimension out of range (expected to be in range of [{-ndim}, "
            f"{ndim - 1}], but got {dim})"
        )
    dim %= ndim
    if start < 0 or length < 0 or start + length > shape[dim]:
        raise IndexError(
            f"_narrow(): start ({start}) + length ({length}) exceeds dimension {dim} of size "
            f"{shape[dim]}"
        )
    return dim


def narrow_kernel(self: Any, dim: int, start: int, length: int) -> Any:
    """Basic slicing, which every array library implements (a view)."""
    dim = _narrow_dim(tuple(self.shape), dim, start, length)
    # every dim indexed: the array API standard does not allow a partial multi-axis index
    rest = len(self.shape) - dim - 1
    index = (slice(None),) * dim + (slice(start, start + length),) + (slice(None),) * rest
    return self[index]


def narrow_fake(self: Any, dim: int, start: int, length: int) -> Any:
    """Fake ``_narrow``: the slice's shape, checked like the real slice would be."""
    shape = list(self.shape)
    dim = _narrow_dim(tuple(shape), dim, start, length)
    shape[dim] = length
    return self.new_empty(tuple(shape))


narrow_fake._oplib_leaf_fake = True  # type: ignore[attr-defined]  # calls no ops


def _zero(g: Tensor) -> Tensor:
    """A 0-d zero of ``g``'s dtype (a CPU scalar; the dispatcher moves it to ``g``'s device)."""
    return Tensor._wrap(OPS.zeros([], dtype=g.dtype))


def _dtype(t: Tensor) -> Any:
    return t.dtype


# -- unary ------------------------------------------------------------------------------------
@keeps("input")
def _save_input(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


@keeps("output")
def _save_output(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(output)


def _neg(ctx: Any, g: Tensor) -> Any:
    return OPS.neg(g)


def _exp(ctx: Any, g: Tensor) -> Any:
    (out,) = ctx.saved_tensors
    return OPS.mul(g, out)


def _log(ctx: Any, g: Tensor) -> Any:
    (x,) = ctx.saved_tensors
    return OPS.div(g, x)


def _sin(ctx: Any, g: Tensor) -> Any:
    (x,) = ctx.saved_tensors
    return OPS.mul(g, OPS.cos(x))


def _cos(ctx: Any, g: Tensor) -> Any:
    (x,) = ctx.saved_tensors
    return OPS.neg(OPS.mul(g, OPS.sin(x)))


def _tanh(ctx: Any, g: Tensor) -> Any:
    (out,) = ctx.saved_tensors
    return OPS.mul(g, OPS.rsub_Scalar(OPS.mul(out, out), 1))


def _sigmoid(ctx: Any, g: Tensor) -> Any:
    (out,) = ctx.saved_tensors
    return OPS.mul(g, OPS.mul(out, OPS.rsub_Scalar(out, 1)))


def _relu(ctx: Any, g: Tensor) -> Any:
    # torch's threshold_backward: zero where the output is <= 0 (a NaN passes g on)
    (out,) = ctx.saved_tensors
    return OPS.where(OPS.le_Scalar(out, 0), _zero(g), g)


def _abs(ctx: Any, g: Tensor) -> Any:
    (x,) = ctx.saved_tensors
    dt = _dtype(g)
    sign = OPS.sub(OPS.astype(OPS.gt_Scalar(x, 0), dt), OPS.astype(OPS.lt_Scalar(x, 0), dt))
    return OPS.mul(g, sign)


def _sqrt(ctx: Any, g: Tensor) -> Any:
    (out,) = ctx.saved_tensors
    return OPS.div(g, OPS.mul_Scalar(out, 2))


# -- binary (broadcasting) --------------------------------------------------------------------
def _save_binary(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    a, b = inputs
    ctx.shapes = (tuple(a._data.shape), tuple(b._data.shape))
    ctx.save_for_backward(a, b)


def _shapes_only(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.shapes = (tuple(inputs[0]._data.shape), tuple(inputs[1]._data.shape))


def _pair(
    ctx: Any, ga: Tensor | Callable[[], Tensor], gb: Tensor | Callable[[], Tensor]
) -> tuple[Tensor | None, Tensor | None]:
    """The gradients of a broadcasting binary op, each summed back to its input's shape;
    a gradient given as a function is computed only when its input needs it."""
    sa, sb = ctx.shapes
    need_a, need_b = ctx.needs_input_grad
    return (
        sum_to(ga() if callable(ga) else ga, sa) if need_a else None,
        sum_to(gb() if callable(gb) else gb, sb) if need_b else None,
    )


def _add(ctx: Any, g: Tensor) -> Any:
    return _pair(ctx, g, g)


def _sub(ctx: Any, g: Tensor) -> Any:
    return _pair(ctx, g, lambda: OPS.neg(g))


def _mul(ctx: Any, g: Tensor) -> Any:
    a, b = ctx.saved_tensors
    return _pair(ctx, lambda: OPS.mul(g, b), lambda: OPS.mul(g, a))


def _div(ctx: Any, g: Tensor) -> Any:
    a, b = ctx.saved_tensors
    return _pair(ctx, lambda: OPS.div(g, b), lambda: OPS.neg(OPS.div(OPS.mul(g, a), OPS.mul(b, b))))


def _pow(ctx: Any, g: Tensor) -> Any:
    a, b = ctx.saved_tensors

    def ga() -> Any:
        d = OPS.mul(b, OPS.pow(a, OPS.sub_Scalar(b, 1)))
        return OPS.mul(g, OPS.where(OPS.eq_Scalar(b, 0), _zero(g), d))

    def gb() -> Any:
        # d/db a**b = a**b * log(a); 0 where a == 0 (torch's convention)
        d = OPS.mul(OPS.pow(a, b), OPS.log(a))
        return OPS.mul(g, OPS.where(OPS.eq_Scalar(a, 0), _zero(g), d))

    return _pair(ctx, ga, gb)


def _save_minmax(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _save_binary(ctx, inputs, output)


def _minmax(pick: str) -> Callable[[Any, Tensor], Any]:
    def backward(ctx: Any, g: Tensor) -> Any:
        a, b = ctx.saved_tensors
        dt = _dtype(g)
        # the gradient goes to the chosen input; ties split it evenly (as torch does)
        wins = OPS.astype(getattr(OPS, pick)(a, b), dt)
        ties = OPS.mul_Scalar(OPS.astype(OPS.eq(a, b), dt), 0.5)
        share_a = OPS.add(wins, ties)
        return _pair(
            ctx, lambda: OPS.mul(g, share_a), lambda: OPS.mul(g, OPS.rsub_Scalar(share_a, 1))
        )

    backward.__name__ = f"_{pick}_backward"
    return backward


# -- with a Scalar --------------------------------------------------------------------------
@keeps("scalar")
def _save_scalar(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.scalar = inputs[1]


def _save_scalar_x(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.scalar = inputs[1]
    ctx.save_for_backward(inputs[0])


def _save_scalar_out(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.scalar = inputs[1]
    ctx.save_for_backward(output)


def _add_s(ctx: Any, g: Tensor) -> Any:
    return g, None


def _neg_s(ctx: Any, g: Tensor) -> Any:
    return OPS.neg(g), None


def _mul_s(ctx: Any, g: Tensor) -> Any:
    return OPS.mul_Scalar(g, ctx.scalar), None


def _div_s(ctx: Any, g: Tensor) -> Any:
    return OPS.div_Scalar(g, ctx.scalar), None


def _pow_s(ctx: Any, g: Tensor) -> Any:
    # (x alone is saved, as torch: the output may be written in place, y = x ** 2; y += 1)
    (x,) = ctx.saved_tensors
    s = ctx.scalar
    if s == 0:
        return OPS.mul_Scalar(g, 0), None
    return OPS.mul(g, OPS.mul_Scalar(OPS.pow_Scalar(x, s - 1), s)), None


def _rdiv_s(ctx: Any, g: Tensor) -> Any:
    # d/dx (s / x) = -s / x**2, from x alone (torch's reciprocal-and-mul saves no output of
    # the op's: z = 2.0 / x; z *= 3 is allowed)
    (x,) = ctx.saved_tensors
    return OPS.neg(OPS.div(OPS.mul_Scalar(g, ctx.scalar), OPS.mul(x, x))), None


def _rpow_s(ctx: Any, g: Tensor) -> Any:
    # d/dx (s ** x) = s ** x * log(s), from the output (as torch's pow_backward_exponent)
    (out,) = ctx.saved_tensors
    s = ctx.scalar
    if s == 0:  # torch: zero where x >= 0 (out is 0 or 1), out * log(0) = -inf elsewhere
        return OPS.where(
            OPS.le_Scalar(out, 1), _zero(g), OPS.mul_Scalar(OPS.mul(g, out), -math.inf)
        ), None
    log_s = math.log(s) if s > 0 else math.nan
    return OPS.mul_Scalar(OPS.mul(g, out), log_s), None


# -- where --------------------------------------------------------------------------------------
def _save_where(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    cond, a, b = inputs
    ctx.shapes = (tuple(a._data.shape), tuple(b._data.shape))
    ctx.save_for_backward(cond)


def _where(ctx: Any, g: Tensor) -> Any:
    (cond,) = ctx.saved_tensors
    sa, sb = ctx.shapes
    _, need_a, need_b = ctx.needs_input_grad
    zero = _zero(g)
    ga = sum_to(OPS.where(cond, g, zero), sa) if need_a else None
    gb = sum_to(OPS.where(cond, zero, g), sb) if need_b else None
    return None, ga, gb


# -- reductions -------------------------------------------------------------------------------
def _reduced_shape(shape: tuple[int, ...], dim: Any) -> tuple[list[int], int]:
    """The keepdim shape of a reduction of ``shape`` over ``dim`` and the element count."""
    ndim = len(shape)
    axes = set(range(ndim)) if not dim or ndim == 0 else {d % ndim for d in dim}
    kept = [1 if i in axes else s for i, s in enumerate(shape)]
    count = 1
    for i in axes:
        count *= shape[i]
    return kept, count


def _save_reduction(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dim = inputs[0], inputs[1]
    ctx.shape = tuple(x._data.shape)
    ctx.kept, ctx.count = _reduced_shape(ctx.shape, dim)


def _save_reduction_kw(
    ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any
) -> None:
    _save_reduction(ctx, inputs, output)


def _expand_back(ctx: Any, g: Tensor) -> Tensor:
    expanded: Tensor = OPS.broadcast_to(OPS.reshape(g, ctx.kept), list(ctx.shape))
    return expanded


def _sum(ctx: Any, g: Tensor) -> Any:
    return _expand_back(ctx, g), None, None


def _mean(ctx: Any, g: Tensor) -> Any:
    return OPS.div_Scalar(_expand_back(ctx, g), max(ctx.count, 1)), None, None


def _save_amax(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _save_reduction(ctx, inputs, output)
    ctx.dim = inputs[1]
    ctx.save_for_backward(inputs[0], output)


def _amax(ctx: Any, g: Tensor) -> Any:
    # the gradient is shared evenly between the elements equal to the extremum
    x, out = ctx.saved_tensors
    mask = OPS.astype(OPS.eq(x, OPS.reshape(out, ctx.kept)), _dtype(g))
    count = OPS.sum(mask, ctx.dim, True)
    return OPS.mul(mask, OPS.div(OPS.reshape(g, ctx.kept), count)), None, None


# -- matmul -----------------------------------------------------------------------------------
def _matmul(ctx: Any, g: Tensor) -> Any:
    a, b = ctx.saved_tensors
    sa, sb = ctx.shapes
    need_a, need_b = ctx.needs_input_grad
    a1 = OPS.unsqueeze(a, 0) if len(sa) == 1 else a
    b1 = OPS.unsqueeze(b, -1) if len(sb) == 1 else b
    g1 = g
    if len(sb) == 1:
        g1 = OPS.unsqueeze(g1, -1)
    if len(sa) == 1:
        g1 = OPS.unsqueeze(g1, -2)
    ga = gb = None
    if need_a:
        ga1 = OPS.matmul(g1, OPS.transpose(b1, -1, -2))
        ga = OPS.reshape(sum_to(ga1, tuple(a1._data.shape)), list(sa))
    if need_b:
        gb1 = OPS.matmul(OPS.transpose(a1, -1, -2), g1)
        gb = OPS.reshape(sum_to(gb1, tuple(b1._data.shape)), list(sb))
    return ga, gb


# -- shape ops --------------------------------------------------------------------------------
def _save_shape(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.shape = tuple(inputs[0]._data.shape)


def _reshape_back(ctx: Any, g: Tensor) -> Any:
    return OPS.reshape(g, list(ctx.shape)), None


def _squeeze_back(ctx: Any, g: Tensor) -> Any:
    return OPS.reshape(g, list(ctx.shape)), None


def _broadcast_back(ctx: Any, g: Tensor) -> Any:
    return sum_to(g, ctx.shape), None


def _save_transpose(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.dims = (inputs[1], inputs[2])


def _transpose(ctx: Any, g: Tensor) -> Any:
    d0, d1 = ctx.dims
    return OPS.transpose(g, d0, d1), None, None


def _save_permute(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    dims = inputs[1]
    n = len(dims)
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[d % n if n else 0] = i
    ctx.inverse = inverse


def _permute(ctx: Any, g: Tensor) -> Any:
    return OPS.permute(g, ctx.inverse), None


def _save_cat(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    tensors, dim = inputs
    ndim = output._data.ndim
    ctx.dim = dim % ndim if ndim else 0
    ctx.sizes = [t._data.shape[ctx.dim] if t._data.ndim else 0 for t in tensors]


def _cat(ctx: Any, g: Tensor) -> Any:
    grads = []
    start = 0
    for size in ctx.sizes:
        grads.append(OPS._narrow(g, ctx.dim, start, size))
        start += size
    return grads, None


def _save_stack(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    tensors, dim = inputs
    ndim = output._data.ndim
    ctx.dim = dim % ndim
    ctx.shapes = [list(t._data.shape) for t in tensors]


def _stack(ctx: Any, g: Tensor) -> Any:
    return [
        OPS.reshape(OPS._narrow(g, ctx.dim, i, 1), shape) for i, shape in enumerate(ctx.shapes)
    ], None


def _save_narrow(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dim, start, length = inputs
    ctx.shape = tuple(x._data.shape)
    ctx.dim, ctx.start, ctx.length = dim, start, length


def _narrow(ctx: Any, g: Tensor) -> Any:
    """The gradient of a slice: ``g`` padded with zeros to the input's shape."""
    shape, dim, start = list(ctx.shape), ctx.dim, ctx.start
    after = shape[dim] - start - ctx.length
    pieces = []
    device = g.device
    for n in (start, None, after):
        if n is None:
            pieces.append(g)
        elif n > 0:
            size = [*shape[:dim], n, *shape[dim + 1 :]]
            pieces.append(Tensor._wrap(OPS.zeros(size, dtype=_dtype(g), device=device)))
    return (OPS.cat(pieces, dim) if len(pieces) > 1 else pieces[0]), None, None, None


# -- copies -----------------------------------------------------------------------------------
def _identity(ctx: Any, g: Tensor) -> Any:
    return g


def _save_astype(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.dtype = inputs[0].dtype


def _astype(ctx: Any, g: Tensor) -> Any:
    return OPS.astype(g, ctx.dtype), None


def _save_to_copy(
    ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any
) -> None:
    x = inputs[0]
    ctx.dtype = x.dtype
    ctx.device = x.device


def _to_copy(ctx: Any, g: Tensor) -> Any:
    """The gradient goes back to the source's device and dtype."""
    return OPS._to_copy(g, dtype=ctx.dtype, device=ctx.device)


#: op name (as in ``CoreOp.name``) -> (setup_context, backward)
FORMULAS: dict[str, Pair] = {
    # pointwise functions of (g, saved tensors): one elementwise kernel each where the
    # backend compiles them (BackendSpec.elementwise_kernel; see _fusion), one program of
    # its kernels where it has direct_kernels (when there are two op calls or more); a
    # Scalar op's formulas of more than one call become programs too, one per scalar
    # (mul.Scalar's and div.Scalar's one call costs less through the dispatcher)
    "neg": (None, fusable(_neg)),
    "exp": (_save_output, fusable(_exp)),
    "log": (_save_input, fusable(_log)),
    "sin": (_save_input, fusable(_sin)),
    "cos": (_save_input, fusable(_cos)),
    "tanh": (_save_output, fusable(_tanh)),
    "sigmoid": (_save_output, fusable(_sigmoid)),
    "relu": (_save_output, fusable(_relu)),
    "abs": (_save_input, fusable(_abs)),
    "sqrt": (_save_output, fusable(_sqrt)),
    "add": (_shapes_only, _add),
    "sub": (_shapes_only, _sub),
    "mul": (_save_binary, _mul),
    "div": (_save_binary, _div),
    "pow": (_save_binary, _pow),
    "maximum": (_save_minmax, _minmax("gt")),
    "minimum": (_save_minmax, _minmax("lt")),
    "add.Scalar": (None, _add_s),
    "sub.Scalar": (None, _add_s),
    "mul.Scalar": (_save_scalar, _mul_s),
    "div.Scalar": (_save_scalar, _div_s),
    "pow.Scalar": (_save_scalar_x, fusable(_pow_s, values=("scalar",))),
    "rsub.Scalar": (None, _neg_s),
    "rdiv.Scalar": (_save_scalar_x, fusable(_rdiv_s, values=("scalar",))),
    "rpow.Scalar": (_save_scalar_out, fusable(_rpow_s, values=("scalar",))),
    "where": (_save_where, _where),
    "sum": (_save_reduction_kw, _sum),
    "mean": (_save_reduction_kw, _mean),
    "amax": (_save_amax, _amax),
    "amin": (_save_amax, _amax),
    "matmul": (_save_binary, _matmul),
    "transpose": (_save_transpose, _transpose),
    "permute": (_save_permute, _permute),
    "reshape": (_save_shape, _reshape_back),
    "broadcast_to": (_save_shape, _broadcast_back),
    "unsqueeze": (_save_shape, _reshape_back),
    "squeeze": (_save_shape, _squeeze_back),
    "cat": (_save_cat, _cat),
    "stack": (_save_stack, _stack),
    "clone": (None, _identity),
    "astype": (_save_astype, _astype),
    "_to_copy": (_save_to_copy, _to_copy),
    "_narrow": (_save_narrow, _narrow),
}

#: Ops whose outputs never require grad: the Autograd key falls through for them.
NON_DIFFERENTIABLE: tuple[str, ...] = tuple(
    f"{name}{suffix}" for name in ("eq", "ne", "lt", "le", "gt", "ge") for suffix in ("", ".Scalar")
)
