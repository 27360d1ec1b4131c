"""Autograd of the in-place core ops, and the formulas of their functional companions.

An in-place op ``self.add_(other)`` on tensors that require grad is recorded as torch does:

1. a leaf that requires grad is refused (``a leaf Variable that requires grad is being used
   in an in-place operation.``), and so is a view of one; a write into another view
   rewrites its base's history (torch's ``CopySlices``, see ``_copy_slices``), and a write
   into a base regenerates its views' histories;
2. the op's functional form (``add(self, other)``) runs with autograd on ``old``, a Tensor
   standing for ``self`` before the write (same data, same history): its node is the new
   ``grad_fn`` of ``self``, so gradients flow to ``self``'s old history and to ``other``;
   when that node saved ``old`` (``mul_``, ``div_``, ``clamp_`` need the old values), the
   saved data is a copy taken before the write (torch's ``original_self``);
3. the real in-place op then runs below autograd: it checks, writes, and bumps ``self``'s
   version (so anything that saved ``self`` before raises at backward).

``FORMS`` maps each in-place op to its functional form; ``FORMULAS`` holds the formulas of
``clamp`` and ``index_put`` (whose gradient for ``values`` gathers with ``oplib::index``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._grad_mode import STATE as GRAD
from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from .._tensor.views import ViewSet
from ._copy_slices import AsStridedBackward, CopySlices, locate, rebase_views
from ._engine import edge_of, sum_to
from ._formulas import OPS

__all__ = [
    "FORMS",
    "FORMULAS",
    "inplace_kernel",
    "out_kernel",
]

_LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
_VIEW_OF_LEAF = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation."
)

_NO_GRAD_VIEW = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
    "can clarify your code by moving both the view and the inplace either both inside the "
    "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
    "want the inplace to be tracked)."
)
_MULTI_VIEW = (
    "Output {nr} of {name} is a view and is being modified inplace. This view is the output "
    "of a function that returns multiple views. Such functions do not allow the output views "
    "to be modified inplace. You should replace the inplace operation by an out-of-place one."
)

#: torch's words for a write with an argument that requires grad into one of several views
#: of a tensor that does not require grad (checked on torch 2.13)
_NO_GRAD_MULTI_VIEW = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. This view is the output of a function that returns multiple views. Such "
    "functions do not allow the output views to be modified inplace. You should replace the "
    "inplace operation by an out-of-place one."
)


def _zero(g: Tensor) -> Tensor:
    return Tensor._wrap(OPS.zeros([], dtype=g.dtype))


# -- functional forms of the in-place ops (recorded on ``old``; values come from the op) ---
def _times_zero(old: Tensor) -> Tensor:
    out: Tensor = OPS.mul_Scalar(old, 0)
    return out


def _cast_to(t: Tensor, like: Tensor) -> Tensor:
    if type(t) is not Tensor:
        t = Tensor(t)
    if t.dtype != like.dtype:
        t = OPS.astype(t, like.dtype)
    return t


Form = Callable[..., Tensor]

FORMS: dict[str, Form] = {
    "add_.Tensor": lambda old, other: OPS.add(old, other),
    "add_.Scalar": lambda old, other: OPS.add_Scalar(old, other),
    "sub_.Tensor": lambda old, other: OPS.sub(old, other),
    "sub_.Scalar": lambda old, other: OPS.sub_Scalar(old, other),
    "mul_.Tensor": lambda old, other: OPS.mul(old, other),
    "mul_.Scalar": lambda old, other: OPS.mul_Scalar(old, other),
    "div_.Tensor": lambda old, other: OPS.div(old, other),
    "div_.Scalar": lambda old, other: OPS.div_Scalar(old, other),
    "zero_": _times_zero,
    "fill_.Scalar": lambda old, value: _times_zero(old),
    "fill_.Tensor": lambda old, value: OPS.add(_times_zero(old), _cast_to(value, old)),
    "copy_": lambda old, src: OPS.add(_times_zero(old), _cast_to(src, old)),
    "clamp_": lambda old, min=None, max=None: OPS.clamp(old, min, max),
    "index_put_": lambda old, indices, values, accumulate=False: OPS.index_put(
        old, indices, values, accumulate
    ),
}


def _refuse(self: Tensor) -> None:
    """torch's refusals of an in-place op on a leaf that requires grad, and on one of several
    views an op returns (the ``split`` family: the ``ViewSet`` holds them as pieces, not
    views, so no ``CopySlices`` places a write through them in their base)."""
    fn = self.grad_fn
    if self._rg and fn is None:
        raise RuntimeError(_LEAF)
    vc = self._vc
    if vc is not None and len(vc) > 1 and vc[1].is_piece(self):
        if fn is None:  # a piece of a tensor outside the graph, given a value in it
            raise RuntimeError(_NO_GRAD_MULTI_VIEW)
        raise RuntimeError(_MULTI_VIEW.format(nr=self._out_nr, name=fn.name()))


def _saves(node: Any, t: Tensor) -> bool:
    saved = getattr(node, "_saved", None)
    return bool(saved) and any(s is t for s in saved)  # type: ignore[union-attr]


def _record(op: Any, form: Form, self: Tensor, old: Tensor, args: Any, kwargs: Any) -> Any:
    """Run ``form`` on ``old`` (``self`` before the write) with autograd, then the op on
    ``self`` below autograd: ``(result, output of the form)``."""
    out = form(old, *args, **kwargs)
    node = out.grad_fn
    if node is not None and _saves(node, old):
        old._data = OPS.clone(Tensor._wrap(self._data))._data
    GRAD.enabled = False
    try:
        result = op(self, *args, **kwargs)
    finally:
        GRAD.enabled = True
    return result, out


def _write_shared(
    qualname: str, op: Any, form: Form, self: Tensor, views: ViewSet[Tensor], args: Any, kwargs: Any
) -> Any:
    """An in-place op on storage that views share: on a view, the base's history is
    rewritten (``CopySlices``); on the base, its history as usual; then every other live
    view's history is made over the base's new one."""
    base = views.base()
    if base is None or base is self or not views.is_view(self):
        _refuse(self)  # the base itself (or a detach() of it, or a view whose base is gone)
        was_rg = self._rg
        result = _plain(op, form, self, args, kwargs)
        if base is self:
            rebase_views(views, self, None, qualname, was_rg)
        return result
    if base._rg and base.grad_fn is None:
        raise RuntimeError(_VIEW_OF_LEAF)
    if base._rg and not self._rg:  # a view of a tensor in the graph, taken under no_grad
        raise RuntimeError(_NO_GRAD_VIEW)
    pos = locate(base, self, qualname, written=True)
    if pos is None:  # a "view" its kernel copied: writing it leaves the base alone
        return _plain(op, form, self, args, kwargs)
    was_rg = base._rg
    base_edge = edge_of(base)
    old = Tensor._wrap(self._data)
    if base_edge is not None:
        old._rg = True
        old.grad_fn = AsStridedBackward(base_edge, base, self, pos)
    result, out = _record(op, form, self, old, args, kwargs)
    cs = CopySlices(base_edge, edge_of(out), base, self, pos)
    base.grad_fn, base._rg, base._out_nr = cs, True, 0
    self.grad_fn = AsStridedBackward((cs, 0), base, self, pos)
    self._rg, self._out_nr = True, 0
    rebase_views(views, base, self, qualname, was_rg)
    return result


def _plain(op: Any, form: Form, self: Tensor, args: Any, kwargs: Any) -> Any:
    old = Tensor._wrap(self._data)
    old._rg, old.grad_fn, old._out_nr = self._rg, self.grad_fn, self._out_nr
    result, out = _record(op, form, self, old, args, kwargs)
    node = out.grad_fn
    if node is not None:
        self.grad_fn = node
        self._rg = True
        self._out_nr = out._out_nr
    return result


def inplace_kernel(qualname: str, form: Form) -> Callable[..., Any]:
    """The Autograd kernel of the in-place op ``qualname`` with functional form ``form``."""
    op = op_named(qualname)

    def kernel(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self) is not Tensor:
            raise RuntimeError(
                f"{qualname}: the tensor written in place must be an oplib.Tensor when an "
                f"argument requires grad, got {type(self).__name__}"
            )
        vc = self._vc
        if vc is not None and len(vc) > 1:  # views share the storage
            return _write_shared(qualname, op, form, self, vc[1], args, kwargs)
        _refuse(self)
        return _plain(op, form, self, args, kwargs)

    kernel.__name__ = kernel.__qualname__ = f"{qualname.partition('::')[2]}_autograd"
    return kernel


def out_kernel(qualname: str) -> Callable[..., Any]:
    """The Autograd kernel of an ``out=`` overload: refused as torch refuses it (it runs only
    when grad mode is on and an argument requires grad)."""
    base = qualname.partition("::")[2].partition(".")[0]

    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{base}(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad."
        )

    kernel.__name__ = kernel.__qualname__ = f"{qualname.partition('::')[2]}_autograd"
    return kernel


# -- formulas of the functional companions -------------------------------------------------
def _save_clamp(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    bounds = [*inputs[1:3], None, None]
    ctx.bounds = (bounds[0], bounds[1])
    ctx.save_for_backward(inputs[0])


def _clamp(ctx: Any, g: Tensor) -> Any:
    """The gradient passes where ``min <= x <= max`` (the bounds included, as torch)."""
    (x,) = ctx.saved_tensors
    lo, hi = ctx.bounds
    zero = _zero(g)
    if lo is not None:
        g = OPS.where(OPS.ge_Scalar(x, lo), g, zero)
    if hi is not None:
        g = OPS.where(OPS.le_Scalar(x, hi), g, zero)
    return g, None, None


def _save_index_put(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, indices, values, *rest = inputs
    ctx.indices = [None if i is None else (i if type(i) is Tensor else Tensor(i)) for i in indices]
    ctx.values_shape = tuple(values._data.shape)
    ctx.accumulate = bool(rest[0]) if rest else False


def _index_put(ctx: Any, g: Tensor) -> Any:
    need_self, _, need_values = ctx.needs_input_grad[:3]
    gs = gv = None
    if need_self:
        gs = g if ctx.accumulate else OPS.index_put(g, ctx.indices, _zero(g), False)
    if need_values:
        index = op_named("oplib::index.Tensor")
        indices = ctx.indices
        if all(i is not None and i._data.ndim == 0 for i in indices):
            # one element (``t[0, 1] = v``): the kernel would return a scalar, not an array
            one = [OPS.reshape(i, [1]) for i in indices]
            gv = sum_to(OPS.reshape(index(g, one), []), ctx.values_shape)
        else:
            gv = sum_to(index(g, indices), ctx.values_shape)
    return gs, None, gv, None


#: op name -> (setup_context, backward), as ``_formulas.FORMULAS``
FORMULAS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "clamp": (_save_clamp, _clamp),
    "index_put": (_save_index_put, _index_put),
}
