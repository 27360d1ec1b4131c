"""``register_autograd``: give an operator a gradient formula, as ``torch.library`` does.

The formula becomes the op's kernel for the ``Autograd`` dispatch key. When the op is called
on tensors that require grad (grad mode on), that kernel runs the op below autograd, makes
the call's graph node (which is also the ``ctx``), calls ``setup_context(ctx, inputs,
output)`` and marks the outputs as requiring grad. In the backward pass the node calls
``backward(ctx, *grads)`` and checks what it returns: one gradient (or None) per input.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dispatch import MISS, OpOverload
from .._dtypes import EXTENSION_FLOATS
from .._grad_mode import STATE as GRAD
from .._registry.entry import _location_of, origin_of
from .._registry.lookup import resolve
from .._registry.registry import AUTOGRAD, REGISTRY, Handle
from .._schema import FunctionSchema, OptionalType, SchemaType
from .._tensor.tensor import Tensor
from ..backends import dtype_of
from ..errors import UnknownOperatorError
from ..library import Library, _lib_for
from ._context import FunctionCtx
from ._engine import edge_of

__all__ = ["register_autograd"]

_new = object.__new__

# Kinds of inputs and outputs.
_OTHER, _TENSOR, _LIST = 0, 1, 2


def _kind(t: SchemaType) -> int:
    if t.is_tensor_list():
        return _LIST
    return _TENSOR if t.is_tensor_like() else _OTHER


def is_functional(schema: FunctionSchema) -> bool:
    """torch's ``is_functional_schema``: no mutated arguments, no aliased returns, at least
    one return."""
    if schema.is_mutable or not schema.returns:
        return False
    return not any(r.annotation is not None for r in schema.returns)


class Formula:
    """A registered gradient formula: the op's Autograd kernel and the backward runner."""

    __slots__ = (
        "all_tensors",
        "backward",
        "call",
        "first_only",
        "input_kinds",
        "input_names",
        "kw_form",
        "location",
        "n_inputs",
        "node_name",
        "out_kinds",
        "qualname",
        "rest",
        "setup",
        "simple",
        "tail_defaults",
        "tuple_out",
        "unary",
        "unary_simple",
    )

    def __init__(
        self,
        op: OpOverload,
        backward: Callable[..., Any],
        setup_context: Callable[..., Any] | None,
    ) -> None:
        schema = op.schema
        self.call = op
        self.qualname = op.name()
        self.backward = backward
        self.setup = setup_context
        self.location = _location_of(backward) or repr(backward)
        self.input_names = tuple(a.name for a in schema.positional)
        self.input_kinds = tuple(_kind(a.type) for a in schema.positional)
        self.n_inputs = len(self.input_names)
        self.out_kinds = tuple(_kind(r.type) for r in schema.returns)
        self.kw_form = bool(schema.kwarg_only)
        # The trailing run of positional arguments with a default, last first: a call's
        # arguments equal to their default there are not counted as passed (torch's
        # dispatcher drops them), for needs_input_grad and the count of gradients.
        tail: list[tuple[int, Any]] = []
        for i in range(self.n_inputs - 1, -1, -1):
            arg = schema.positional[i]
            if not arg.has_default:
                break
            tail.append((i, arg.default_value))
        self.tail_defaults = tuple(tail)
        # "-> ((Tensor))" (torch's Tuple[Tensor]) gives a 1-tuple: not the simple form
        self.tuple_out = schema.tuple_return
        # one plain Tensor return (a "Tensor?" one may be None: the general path takes it)
        self.simple = (
            self.out_kinds == (_TENSOR,)
            and not schema.tuple_return
            and not isinstance(schema.returns[0].type, OptionalType)
        )
        self.unary = self.input_kinds == (_TENSOR,)
        self.unary_simple = self.unary and self.simple
        # one Tensor first, then only other values (mul.Scalar, sum.dim_IntList ...): the
        # edges are that Tensor's and Nones (``rest``)
        self.first_only = (
            self.simple
            and not self.kw_form
            and self.input_kinds[:1] == (_TENSOR,)
            and all(k == _OTHER for k in self.input_kinds[1:])
        )
        self.rest = (None,) * (self.n_inputs - 1)
        self.all_tensors = all(k == _TENSOR for k in self.input_kinds)
        ns, _, rest = self.qualname.partition("::")
        name, _, overload = rest.partition(".")
        self.node_name = f"GeneratedBackwardFor_{ns}_{name}_{overload or 'default'}"

    # -- forward: the Autograd kernel -----------------------------------------------------
    def _new_ctx(self, nout: int) -> FunctionCtx:
        ctx = _new(FunctionCtx)
        ctx._formula = self
        ctx._saved = ()
        ctx._nondiff = None
        ctx._materialize = True
        ctx._npassed = self.n_inputs
        ctx._nout = nout
        ctx._outs = None
        return ctx

    def kernel_unary(self, a: Any) -> Any:
        """``kernel`` for ops taking one Tensor and nothing else and returning one Tensor:
        the same steps, without packing arguments or re-checking the call's shape."""
        if type(a) is not Tensor:
            return self.kernel(a)
        GRAD.enabled = False
        try:
            out = self.call.call_below_autograd((a,))
            if out is MISS:
                out = self.call(a)
        finally:
            GRAD.enabled = True
        data = out._data
        ctx = _new(FunctionCtx)  # _new_ctx(1), inlined
        ctx._formula = self
        ctx._saved = ()
        ctx._nondiff = None
        ctx._materialize = True
        ctx._npassed = self.n_inputs
        ctx._nout = 1
        ctx._outs = None
        # edge_of(a), inlined: this is the path of every one-Tensor op that records a node
        if a._rg:
            fn = a.grad_fn
            if fn is None:
                ctx._edges = ((a, 0),)
            else:
                ctx._edges = ((fn, 0 if fn._nout == 1 else a._out_nr),)
        else:
            ctx._edges = (None,)
        dtype = data.dtype
        if not isinstance(dtype, np.dtype):  # a library's own dtype object
            dtype = dtype_of(data)
        ctx._meta = ((data.shape, dtype),)
        if dtype.kind in "fc" or dtype in EXTENSION_FLOATS:
            out._rg = True
            out.grad_fn = ctx
            setup = self.setup
            if setup is not None:
                setup(ctx, (a,), out)
                if ctx._nondiff:
                    out._rg = False
                    out.grad_fn = None
        else:
            out._rg = False
            out.grad_fn = None
            if self.setup is not None:
                self.setup(ctx, (a,), out)
        return out

    def kernel_first(self, *args: Any, **kwargs: Any) -> Any:
        """``kernel`` for ops whose one Tensor input comes first and that return one Tensor
        (see ``first_only``): the edges without a loop over the inputs."""
        a = args[0] if args else None
        if kwargs or type(a) is not Tensor or len(args) > self.n_inputs:
            return self.kernel(*args, **kwargs)
        GRAD.enabled = False
        try:
            out = self.call.call_below_autograd(args)
            if out is MISS:
                out = self.call(*args)
        finally:
            GRAD.enabled = True
        ctx = _new(FunctionCtx)  # _new_ctx(1), inlined
        ctx._formula = self
        ctx._saved = ()
        ctx._nondiff = None
        ctx._materialize = True
        ctx._npassed = self.n_inputs
        ctx._nout = 1
        ctx._outs = None
        rest = self.rest if len(args) == self.n_inputs else self.rest[: len(args) - 1]
        if a._rg:
            fn = a.grad_fn
            if fn is None:
                ctx._edges = ((a, 0), *rest)
            else:
                ctx._edges = ((fn, 0 if fn._nout == 1 else a._out_nr), *rest)
        else:
            ctx._edges = (None, *rest)
        if self.tail_defaults:
            ctx._npassed = self._passed(args)
        data = out._data
        dtype = data.dtype
        if not isinstance(dtype, np.dtype):  # a library's own dtype object
            dtype = dtype_of(data)
        ctx._meta = ((data.shape, dtype),)
        differentiable = dtype.kind in "fc" or dtype in EXTENSION_FLOATS
        if differentiable:
            out._rg = True
            out.grad_fn = ctx
        setup = self.setup
        if setup is not None:
            setup(ctx, args, out)
            if differentiable and ctx._nondiff:
                out._rg = False
                out.grad_fn = None
        return out

    def kernel(self, *args: Any, **kwargs: Any) -> Any:
        GRAD.enabled = False
        try:
            out: Any = MISS if kwargs else self.call.call_below_autograd(args)
            if out is MISS:
                out = self.call(*args, **kwargs)
        finally:
            GRAD.enabled = True
        ctx = self._new_ctx(1 if self.simple else 0)
        ctx._edges = self._edges_of(args)
        if self.tail_defaults:
            ctx._npassed = self._passed(args)
        if self.simple:
            data = out._data
            dtype = data.dtype
            if not isinstance(dtype, np.dtype):  # a library's own dtype object
                dtype = dtype_of(data)
            ctx._meta = ((data.shape, dtype),)
            differentiable = dtype.kind in "fc" or dtype in EXTENSION_FLOATS
            if differentiable:
                out._rg = True
                out.grad_fn = ctx
            setup = self.setup
            if setup is not None:
                if self.kw_form:
                    setup(ctx=ctx, inputs=args, keyword_only_inputs=kwargs, output=out)
                else:
                    setup(ctx, args, out)
                if differentiable and ctx._nondiff:
                    out._rg = False
                    out.grad_fn = None
            return out
        flat = self._flat_outputs(out, ctx)
        ctx._nout = len(flat)
        ctx._outs = tuple(t._data for t in flat)
        ctx._meta = tuple((t._data.shape, t.dtype) for t in flat)
        for nr, t in enumerate(flat):
            if t.dtype.kind in "fc" or t.dtype in EXTENSION_FLOATS:
                t._rg = True
                t.grad_fn = ctx
                t._out_nr = nr
        if self.setup is not None:
            self._setup(ctx, args, kwargs, out)
        if ctx._nondiff:
            for nr in ctx._nondiff:
                flat[nr]._rg = False
                flat[nr].grad_fn = None
        return out

    def _passed(self, args: tuple[Any, ...]) -> int:
        """How many positional arguments count as passed: ``args`` without the trailing
        ones equal to their default (what torch's dispatcher hands a Python kernel)."""
        n = min(len(args), self.n_inputs)
        for i, default in self.tail_defaults:
            if i != n - 1:
                if i >= n:
                    continue
                break
            v = args[i]
            if not (v is default or _equal(v, default)):
                break
            n = i
        return n

    def _edges_of(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The call's edges (see ``Node``): one per positional input."""
        if self.all_tensors:  # (mul, matmul, where ...: no kinds to tell apart)
            return tuple(map(edge_of, args[: self.n_inputs]))
        edges: list[Any] = []
        for a, kind in zip(args, self.input_kinds, strict=False):
            if kind == _TENSOR:
                edges.append(edge_of(a))
            elif kind == _LIST and a is not None:
                # kept when nothing requires grad too: needs_input_grad gives one bool per
                # element of a Tensor[] input, as torch
                edges.append([edge_of(t) for t in a])
            else:
                edges.append(None)
        return tuple(edges)

    def _setup(
        self, ctx: FunctionCtx, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        setup = self.setup
        assert setup is not None
        if self.kw_form:
            setup(ctx=ctx, inputs=args, keyword_only_inputs=kwargs, output=out)
        else:
            setup(ctx, args, out)

    def _flat_outputs(self, out: Any, ctx: FunctionCtx) -> list[Tensor]:
        outs = out if len(self.out_kinds) > 1 or self.tuple_out else (out,)
        flat: list[Tensor] = []
        lens: list[int] = []
        nones: list[int] = []
        for i, (kind, o) in enumerate(zip(self.out_kinds, outs, strict=True)):
            if kind == _TENSOR:
                if o is None:  # a "Tensor?" return left out: no node, its gradient None
                    nones.append(i)
                else:
                    flat.append(o)
            elif kind == _LIST:
                flat.extend(o)
                lens.append(len(o))
        if lens:
            ctx.__dict__["_oplib_list_lens"] = tuple(lens)
        if nones:
            ctx.__dict__["_oplib_none_outs"] = frozenset(nones)
        return flat

    # -- backward ---------------------------------------------------------------------------
    def run(self, ctx: FunctionCtx, grads: list[Any]) -> tuple[Any, ...]:
        if self.simple:
            result = self.backward(ctx, grads[0])
        else:
            result = self.backward(ctx, *self._grads_per_output(ctx, grads))
        return self.check(result, ctx)

    def check(self, returned: Any, ctx: FunctionCtx) -> tuple[Any, ...]:
        """What ``backward`` returned as one gradient (or None) per input, checked."""
        result: tuple[Any, ...] = returned
        if type(returned) is not tuple:
            result = (
                tuple(returned) if type(returned) is list and self.n_inputs > 1 else (returned,)
            )
        if len(result) != self.n_inputs:
            result = self._fit_count(result, ctx._npassed)
        kinds = self.input_kinds
        for i, g in enumerate(result):
            if g is None or (type(g) is Tensor and kinds[i] == _TENSOR):
                continue
            self._check_grad(i, g)
        return result

    def _fit_count(self, result: tuple[Any, ...], passed: int) -> tuple[Any, ...]:
        """torch's rule for the count: at least one gradient per input passed; more are
        accepted when the extra ones are None. Padded (or cut) to one per input."""
        n = self.n_inputs
        got = len(result)
        if got < passed or (got > n and any(g is not None for g in result[n:])):
            names = ", ".join(self.input_names[:passed])
            left = self.input_names[passed:]
            more = (
                f"; the inputs left at their default ({', '.join(left)}) may be omitted"
                if left
                else ""
            )
            self._error(
                f"expected the backward function to return {passed} gradient(s), one per input "
                f"({names}), but got {got} (function {self.node_name} returned an incorrect "
                "number of gradients). Return a tuple with a gradient (or None) for each "
                f"input{more}"
            )
        if got > n:
            return result[:n]
        return result + (None,) * (n - got)

    def _grads_per_output(self, ctx: FunctionCtx, grads: list[Any]) -> list[Any]:
        """Gradients as ``backward`` takes them: one per return (a list for a Tensor[]
        return, None for a non-Tensor one), zeros where none arrived (unless
        ``ctx.set_materialize_grads(False)``)."""
        if ctx._materialize:
            grads = [ctx._zeros_for(nr) if g is None else g for nr, g in enumerate(grads)]
        if (
            _LIST not in self.out_kinds
            and _OTHER not in self.out_kinds
            and "_oplib_none_outs" not in ctx.__dict__
        ):
            return grads
        return self._with_lists(ctx, grads)

    def _with_lists(self, ctx: FunctionCtx, grads: list[Any]) -> list[Any]:
        """One gradient per return: a list for a Tensor[] return, None for a non-Tensor
        return and for a ``Tensor?`` return that was None (as torch gives them)."""
        lens: tuple[int, ...] = ctx.__dict__.get("_oplib_list_lens", ())
        nones: frozenset[int] = ctx.__dict__.get("_oplib_none_outs", frozenset())
        per: list[Any] = []
        pos = 0
        li = 0
        for i, kind in enumerate(self.out_kinds):
            if i in nones:
                per.append(None)
            elif kind == _TENSOR:
                per.append(grads[pos])
                pos += 1
            elif kind == _LIST:
                n = lens[li] if li < len(lens) else 0
                per.append(list(grads[pos : pos + n]))
                pos += n
                li += 1
            else:
                per.append(None)
        return per

    def _check_grad(self, i: int, g: Any) -> None:
        name = self.input_names[i]
        kind = self.input_kinds[i]
        if kind == _OTHER:
            self._error(
                f"got a {type(g).__name__} as the gradient for input {name!r} but expected "
                f"None because input {name!r} is not a Tensor"
            )
        if kind == _TENSOR:
            self._error(
                f"got an object of type {type(g).__name__} as the gradient for input {name!r}, "
                "but expected the gradient to be either None or an oplib.Tensor"
            )
        if not isinstance(g, (list, tuple)):
            self._error(
                f"for input {name!r} (a Tensor[]) expected a list of gradients but got an "
                f"object of type {type(g).__name__}"
            )
        for j, item in enumerate(g):
            if item is not None and type(item) is not Tensor:
                self._error(
                    f"for input {name!r} expected a list of None or Tensor gradients but got "
                    f"an object of type {type(item).__name__} at index {j}"
                )

    def _error(self, what: str) -> None:
        raise RuntimeError(
            f"In the backward function registered for {self.qualname} at {self.location} "
            f"(register_autograd), {what}."
        )


def register_autograd(
    op: Any,
    backward: Callable[..., Any],
    /,
    *,
    setup_context: Callable[..., Any] | None = None,
    lib: Library | None = None,
) -> None:
    """Register ``backward`` (and ``setup_context``) as the gradient formula of ``op``.

    ``setup_context(ctx, inputs, output)`` runs after the forward and saves what backward
    needs (ops with keyword-only arguments: ``setup_context(ctx, inputs,
    keyword_only_inputs, output)``); ``backward(ctx, *grads)`` gets one gradient per output
    and returns one per positional input (None where there is none). ``op`` is a custom op,
    an ``OpOverload`` or a ``"ns::name"`` string; the registration lives as long as ``lib``
    (by default: the process, or the custom op's own Library).
    """
    if (
        lib is None
        and not isinstance(op, (str, OpOverload))
        and isinstance(getattr(op, "_opoverload", None), OpOverload)
        and hasattr(op, "register_autograd")
    ):
        op.register_autograd(backward, setup_context=setup_context)
        return
    overload = resolve(op, "register_autograd")
    schema = overload.schema
    qualname = overload.name()
    if not is_functional(schema):
        raise RuntimeError(
            f"Cannot register autograd formula for non-functional operator {qualname} with "
            f"schema {schema}. Please create a functional operator (no mutated arguments, no "
            "aliased returns, at least one return) and register an autograd formula for that."
        )
    _register(overload, backward, setup_context, lib)


def _register(
    overload: OpOverload,
    backward: Callable[..., Any],
    setup_context: Callable[..., Any] | None,
    lib: Any,
) -> Handle:
    """Register without the functional-schema check (core views' formulas use it)."""
    kernel = formula_kernel(overload, backward, setup_context)
    handle = REGISTRY.add_kernel(
        overload.name(), AUTOGRAD, kernel, origin=origin_of(backward), api="register_autograd"
    )
    target = lib if lib is not None else _lib_for(overload.name(), None)
    target._register(handle)
    return handle


def formula_kernel(
    overload: OpOverload,
    backward: Callable[..., Any],
    setup_context: Callable[..., Any] | None,
) -> Callable[..., Any]:
    """The Autograd kernel of ``overload`` running ``backward`` (and ``setup_context``),
    after checking that they fit its schema."""
    schema = overload.schema
    qualname = overload.name()
    if any(_kind(a.type) != _OTHER for a in schema.kwarg_only):
        raise NotImplementedError(
            f"register_autograd(): {qualname} has kwarg-only Tensor arguments, which "
            f"register_autograd does not support. In the definition of the op, please make "
            f"your tensors not kwarg-only. Got: {schema}"
        )
    if not callable(backward):
        raise TypeError(
            f"register_autograd({qualname}): expected backward to be a function, got {backward!r}"
        )
    if setup_context is not None and not callable(setup_context):
        raise TypeError(
            f"register_autograd({qualname}): expected setup_context to be a function or None, "
            f"got {setup_context!r}"
        )
    if setup_context is not None and schema.kwarg_only:
        params = _params(setup_context)
        if params is not None and "keyword_only_inputs" not in params:
            raise ValueError(
                f"register_autograd({qualname}): the operator has keyword-only arguments "
                f"({', '.join(a.name for a in schema.kwarg_only)}), so setup_context must "
                "accept them: def setup_context(ctx, inputs, keyword_only_inputs, output). "
                f"Got setup_context with parameters {params}"
            )
    formula = Formula(overload, backward, setup_context)
    if formula.unary_simple and not formula.kw_form and len(schema.arguments) == 1:
        return formula.kernel_unary
    return formula.kernel_first if formula.first_only else formula.kernel


def _equal(value: Any, default: Any) -> bool:
    """Whether a call's argument equals its schema default (a plain value: None, a number,
    a string, a list of ints ...)."""
    if default is None or type(value) is Tensor:
        return False
    try:
        return bool(value == default)
    except Exception:  # an array compares elementwise: not a default
        return False


def _params(fn: Callable[..., Any]) -> list[str] | None:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def formula_of(op: Any) -> Formula | None:
    """The formula registered for ``op`` through ``register_autograd``, if any."""
    try:
        k = resolve(op, "formula_of").kernel(AUTOGRAD)
    except UnknownOperatorError:
        return None
    fn = getattr(k, "fn", None)
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, Formula) else None
