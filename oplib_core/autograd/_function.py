"""``oplib.autograd.Function``: custom autograd functions written as in torch.

A subclass gives static ``forward`` (``forward(ctx, *args)``, or ``forward(*args)`` with a
separate ``setup_context(ctx, inputs, output)``) and ``backward(ctx, *grads)``, and is
called through ``apply``. The forward runs under ``no_grad`` (it may call any op, mutating
custom ops included); when grad mode is on and a Tensor argument requires grad, the call
becomes one graph node (``<Name>Backward``), which is also the ``ctx``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from .._dtypes import EXTENSION_FLOATS
from .._grad_mode import STATE as GRAD
from .._tensor.tensor import Tensor
from ._engine import Node, edge_of
from ._registration import FunctionCtx

__all__ = ["Function", "once_differentiable"]

_new = object.__new__
_F = TypeVar("_F", bound=Callable[..., Any])


class _FunctionBackward(FunctionCtx):
    """The node (and ctx) of one ``Function.apply`` call; subclassed per Function as
    ``<Name>Backward``."""

    __slots__ = ("_dirty", "_forwarding", "_marked", "_n_args", "_tensor_args")

    _fn: ClassVar[type[Function]]
    _dirty: tuple[Tensor, ...]
    _marked: list[Tensor]
    _forwarding: bool
    _n_args: int
    _tensor_args: tuple[bool, ...]

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Inputs the forward modified in place; they must be returned as outputs."""
        for t in tensors:
            if type(t) is not Tensor:
                raise RuntimeError(
                    f"mark_dirty only accepts variable arguments, but got {type(t).__name__}"
                )
        self._dirty = tensors

    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        if not self._forwarding:
            FunctionCtx.mark_non_differentiable(self, *outputs)
            return
        for t in outputs:  # the outputs are not wired yet: remember them by identity
            if type(t) is not Tensor:
                raise RuntimeError(
                    "mark_non_differentiable only accepts variable arguments, but got "
                    f"{type(t).__name__} ({self.name()}); pass outputs of the function "
                    "(oplib.Tensor)"
                )
        self._marked.extend(outputs)

    def name(self) -> str:
        return type(self).__name__

    def _input_name(self, i: int) -> str:
        return str(i)

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        fn = type(self)._fn
        if fn.backward is Function.backward:
            raise NotImplementedError(
                "You must implement either the backward or vjp method for your custom "
                "autograd.Function to use it with backward mode AD."
            )
        if self._materialize:
            grads = [self._zeros_for(nr) if g is None else g for nr, g in enumerate(grads)]
        layout: tuple[int, tuple[int, ...]] | None = self.__dict__.get("_oplib_out_pos")
        if layout is not None:  # one gradient per output: None for non-Tensor ones
            per: list[Any] = [None] * layout[0]
            for nr, pos in enumerate(layout[1]):
                per[pos] = grads[nr]
            grads = per
        result: tuple[Any, ...] = fn.backward(self, *grads)
        if type(result) is not tuple:
            result = (result,)
        n = self._n_args
        got = len(result)
        if got > n and all(g is None for g in result[n:]):
            result = result[:n]
        if len(result) != n:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients (expected "
                f"{n}, got {got})"
            )
        tensor_args = self._tensor_args
        for i, g in enumerate(result):
            if g is None:
                continue
            if not tensor_args[i]:
                raise RuntimeError(
                    f"function {self.name()} returned a gradient different than None at "
                    f"position {i + 1}, but the corresponding forward input was not a Variable"
                )
            if type(g) is not Tensor:
                raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")
        return result


class Function:
    """Base class of custom autograd functions, as ``torch.autograd.Function``.

    Override the static methods ``forward`` and ``backward`` (and optionally
    ``setup_context``), then call ``MyFunction.apply(*args)``::

        class Exp(oplib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = oplib.ops.oplib.exp(x)
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y

    ``ctx`` offers ``save_for_backward``/``saved_tensors``, ``needs_input_grad`` (one bool
    per argument of ``apply``), ``mark_dirty``, ``mark_non_differentiable`` and
    ``set_materialize_grads``; other attributes may be set freely.
    """

    _backward_cls: ClassVar[type[_FunctionBackward]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(
            f"{cls.__name__}Backward", (_FunctionBackward,), {"__slots__": (), "_fn": cls}
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{type(self).__name__} should not be instantiated: the methods of autograd "
            f"functions are all static, call {type(self).__name__}.apply(...) instead"
        )

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        """``forward(ctx, *args)``, or ``forward(*args)`` when ``setup_context`` is given."""
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        """Optional: save what ``backward`` needs, given the inputs and the output."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        """One gradient per output in, one per argument of ``apply`` out (None for
        arguments that need none)."""
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run the function, recording a graph node when an argument requires grad."""
        separate = cls.setup_context is not Function.setup_context
        if separate:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
            kwargs = bound.kwargs
        # Tensors given by keyword are inputs too, after the positional ones (as torch)
        inputs = (*args, *kwargs.values()) if kwargs else args
        ctx = _new(cls._backward_cls)
        ctx._saved = ()
        ctx._nondiff = None
        ctx._materialize = True
        ctx._n_args = ctx._npassed = len(inputs)
        ctx._nout = 0
        ctx._outs = None
        ctx._dirty = ()
        ctx._marked = []
        ctx._forwarding = True
        ctx._tensor_args = tuple(type(a) is Tensor for a in inputs)
        record = False
        if GRAD.enabled:
            ctx._edges = tuple(edge_of(a) for a in inputs)
            record = any(e is not None for e in ctx._edges)
        else:
            ctx._edges = (None,) * len(inputs)
        prev = GRAD.enabled
        GRAD.enabled = False
        try:
            if separate:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        finally:
            GRAD.enabled = prev
        ctx._forwarding = False
        return _wire(ctx, inputs, out, record)


def _wire(ctx: _FunctionBackward, args: tuple[Any, ...], out: Any, record: bool) -> Any:
    """Make the outputs of ``Function.apply`` outputs of its node (torch's
    ``_wrap_outputs``)."""
    dirty = ctx._dirty
    if type(out) is Tensor and not dirty and not ctx._marked:  # one output, nothing marked
        for a in args:
            if a is out:
                break
        else:
            if not record:
                return out
            data = out._data
            ctx._nout = 1
            ctx._meta = ((data.shape, out.dtype),)
            if out.dtype.kind in "fc" or out.dtype in EXTENSION_FLOATS:
                out._rg = True
                out.grad_fn = ctx
                _resave(ctx)
            return out
    is_tuple = type(out) is tuple
    outs = list(out) if is_tuple else [out]
    ids_out = {id(o) for o in outs}
    if any(id(d) not in ids_out for d in dirty):
        raise RuntimeError(
            "Some elements marked as dirty during the forward method were not returned as "
            "output. The inputs that are modified inplace must all be outputs of the Function."
        )
    if not record:  # inputs returned as they are come back as new Tensors (aliases)
        dirty_ids = {id(d) for d in dirty}
        for k, o in enumerate(outs):
            if type(o) is Tensor and id(o) not in dirty_ids and any(o is a for a in args):
                outs[k] = Tensor._wrap(o._data)
        return tuple(outs) if is_tuple else outs[0]
    for d in dirty:
        if d._rg and d.grad_fn is None:
            raise RuntimeError(
                "a leaf Variable that requires grad has been used in an in-place operation."
            )
    dirty_ids = {id(d) for d in dirty}
    input_ids = {id(a) for a in args if type(a) is Tensor}
    marked = {id(t) for t in ctx._marked}
    flat: list[Tensor] = []
    positions: list[int] = []
    for k, o in enumerate(outs):
        if type(o) is not Tensor:
            continue
        if id(o) in input_ids and id(o) not in dirty_ids:
            o = outs[k] = Tensor._wrap(o._data)  # an input returned as is: a new alias
        flat.append(o)
        positions.append(k)
    nout = len(flat)
    ctx._nout = nout
    ctx._meta = tuple((t._data.shape, t.dtype) for t in flat)
    if nout != 1:
        ctx._outs = tuple(t._data for t in flat)
    if nout != len(outs):
        ctx.__dict__["_oplib_out_pos"] = (len(outs), tuple(positions))
    nondiff: set[int] = set()
    for nr, t in enumerate(flat):
        if id(t) in marked:
            nondiff.add(nr)
        if (t.dtype.kind in "fc" or t.dtype in EXTENSION_FLOATS) and nr not in nondiff:
            t._rg = True
            t.grad_fn = ctx
            t._out_nr = nr
        elif id(t) in dirty_ids:  # modified in place into a non-differentiable value
            t._rg = False
            t.grad_fn = None
    if nondiff:
        ctx._nondiff = nondiff
    _resave(ctx)
    return tuple(outs) if is_tuple else outs[0]


def _resave(ctx: _FunctionBackward) -> None:
    """Outputs saved during forward (before they were outputs of the node) are saved
    again, now without a reference cycle (tensor → node → tensor)."""
    saved = ctx._saved
    if type(saved) is tuple:
        for s in saved:
            if type(s) is Tensor and s.grad_fn is ctx:
                ctx.save_for_backward(*saved)
                return


class _DelayedError(Node):
    """The node of gradients computed by a ``once_differentiable`` backward with
    ``create_graph=True``: differentiating them again raises."""

    __slots__ = ()

    def name(self) -> str:
        return "DelayedError"

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        raise RuntimeError(
            "trying to differentiate twice a function that was marked with @once_differentiable"
        )


def once_differentiable(fn: _F) -> _F:
    """Decorate a ``backward`` that is not itself differentiable (written with native
    array code, say): it runs under ``no_grad``, and differentiating its gradients again
    (``create_graph=True``) raises, as with torch's decorator of this name."""

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        prev = GRAD.enabled
        GRAD.enabled = False
        try:
            outputs = fn(ctx, *args)
        finally:
            GRAD.enabled = prev
        if not prev:
            return outputs
        edges = [e for e in map(edge_of, args) if e is not None]
        if not edges:
            return outputs
        node = _new(_DelayedError)
        node._edges = tuple(edges)
        node._outs = None
        many = type(outputs) is tuple
        outs = list(outputs) if many else [outputs]
        node._nout = len(outs)
        node._meta = tuple(
            (o._data.shape, o.dtype) if type(o) is Tensor else ((), None) for o in outs
        )
        for nr, o in enumerate(outs):
            if type(o) is Tensor and (o.dtype.kind in "fc" or o.dtype in EXTENSION_FLOATS):
                t = Tensor._wrap(o._data)
                t._rg = True
                t.grad_fn = node
                t._out_nr = nr
                outs[nr] = t
        return tuple(outs) if many else outs[0]

    return wrapper  # type: ignore[return-value]
