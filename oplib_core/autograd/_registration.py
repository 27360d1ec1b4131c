"""``register_autograd``: give an operator a gradient formula, as ``torch.library`` does,
and the ``ctx`` given to ``setup_context`` and ``backward`` (like ``torch.autograd.Function``'s).

The formula becomes the op's kernel for the ``Autograd`` dispatch key. When the op is called
on tensors that require grad (grad mode on), that kernel runs the op below autograd, makes
the call's graph node (which is also the ``ctx``), calls ``setup_context(ctx, inputs,
output)`` and marks the outputs as requiring grad. In the backward pass the node calls
``backward(ctx, *grads)`` and checks what it returns: one gradient (or None) per input.

The ctx *is* the graph node of the call (as in torch), so recording a call allocates one
object: the :class:`Formula` builds it and the node runs it, one concept in one module.
Tensors saved with ``save_for_backward`` are freed after a backward pass unless
``retain_graph=True``; other attributes set on ctx (``ctx.dim = 1``) stay.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._dispatch import ACTIVE, MISS, OpOverload
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
from ._engine import _FREED, Node, edge_of

__all__ = ["FunctionCtx", "register_autograd"]

_new = object.__new__
_make_tensor = Tensor._wrap
_NO_KERNELS: dict[type, Callable[..., Any]] = {}  # (never filled: Formula.below of a custom op)


class _SavedOutput:
    """An output of the ctx's own node, saved without a reference cycle (tensor → node →
    tensor): rebuilt with ``grad_fn`` set when unpacked. Keeps the output's version counter
    and its version when saved."""

    __slots__ = ("data", "nr", "vc", "version")

    def __init__(self, t: Tensor, nr: int) -> None:
        self.data = t._data
        self.nr = nr
        vc = t._vc
        if vc is None:  # made here: the output shares it from now on
            vc = t._vc = [0]
        self.vc = vc
        self.version = vc[0]


def _modified(data: Any, what: str, now: int, expected: int) -> RuntimeError:
    """torch's error for a saved tensor that an in-place op changed after it was saved."""
    shape = list(data.shape)
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [oplib.{data.dtype} {shape}]{what}, is at version {now}; "
        f"expected version {expected} instead. Hint: the tensor was saved for backward and "
        "then written in place (an in-place op, t[...] = v, or out=); clone() it before "
        "the in-place op, or do the op out of place."
    )


def _versions_of(tensors: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(0 if t is None or t._vc is None else t._vc[0] for t in tensors)


def _check_versions(node: Node, saved: tuple[Any, ...], versions: tuple[int, ...] | None) -> None:
    for i, t in enumerate(saved):
        if t is not None:
            v = 0 if versions is None else versions[i]
            vc = t._vc
            if vc is not None and vc[0] != v:
                fn = t.grad_fn
                what = "" if fn is None else f", which is output {t._out_nr} of {fn.name()}"
                raise _modified(t._data, what, vc[0], v)


class FunctionCtx(Node):
    """Context of one call of an operator with an autograd formula.

    ``save_for_backward(*tensors)`` / ``saved_tensors``, ``needs_input_grad`` (one bool per
    input), ``mark_non_differentiable(*outputs)``, ``set_materialize_grads(bool)``; any other
    attribute may be set freely.
    """

    __slots__ = (
        "__dict__",
        "_formula",
        "_materialize",
        "_nondiff",
        "_npassed",
        "_saved",
        "_versions",
        "scalar",  # (what a keeps("scalar") setup sets: a slot, not a dict per node)
    )

    _formula: Formula
    # Output numbers marked non-differentiable (None: none).
    _nondiff: set[int] | None
    _materialize: bool
    # How many positional inputs were passed (torch's count: trailing arguments equal to
    # their default are left out); ``needs_input_grad`` has that many entries.
    _npassed: int
    # The saved values: a tuple of Tensors and None, or a list when it holds outputs of this
    # node (``_SavedOutput``s, rebuilt by ``saved_tensors``); None once freed.
    _saved: tuple[Any, ...] | list[Any] | None
    # The version of each saved input when saved, checked when backward unpacks them; None
    # when none had a counter then (all at version 0). Set by save_for_backward.
    _versions: tuple[int, ...] | None

    if TYPE_CHECKING:  # formulas keep their own values on ctx (``ctx.beta = beta``)

        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Save tensors (inputs or outputs of the op, or None) for ``backward``."""
        if len(tensors) == 1:  # the common case: one input, or the node's one output
            t = tensors[0]
            if type(t) is Tensor:
                if t.grad_fn is self and self._nout == 1:
                    self._keep_output(t)
                    return
                if t.grad_fn is not self:
                    self._keep_input(t)
                    return
        counted = False
        for t in tensors:
            if t is not None:
                if type(t) is not Tensor or t.grad_fn is self:
                    break
                if t._vc is not None:
                    counted = True
        else:  # inputs and None only: kept as they are
            self._saved = tensors
            # (the common case, no counters, costs no tuple)
            self._versions = _versions_of(tensors) if counted else None
            return
        saved: list[Any] = []
        versions: list[int] = []
        counted = False
        for i, t in enumerate(tensors):
            if t is None:
                saved.append(None)
            elif type(t) is Tensor:
                if t.grad_fn is self:
                    nr = 0 if self._nout == 1 else t._out_nr
                    saved.append(_SavedOutput(t, nr))
                    versions.append(0)  # _SavedOutput keeps its own
                    continue
                saved.append(t)
            else:
                raise TypeError(
                    f"save_for_backward can only save tensors (oplib.Tensor) or None, but "
                    f"argument {i} is of type {type(t).__name__}; store other values as "
                    "attributes of ctx (ctx.name = value)"
                )
            if t is None or t._vc is None:
                versions.append(0)
            else:
                versions.append(t._vc[0])
                counted = True
        self._saved = saved
        self._versions = tuple(versions) if counted else None

    def _keep_output(self, t: Tensor) -> None:
        """``save_for_backward(t)`` of the node's one output ``t``."""
        s = _new(_SavedOutput)  # _SavedOutput(t, 0), without the call
        s.data = t._data
        s.nr = 0
        vc = t._vc
        if vc is None:
            vc = t._vc = [0]
        s.vc = vc
        s.version = vc[0]
        self._saved = [s]
        self._versions = None

    def _keep_input(self, t: Tensor) -> None:
        """``save_for_backward(t)`` of one Tensor that is not an output of this node."""
        self._saved = (t,)
        vc = t._vc
        self._versions = None if vc is None else (vc[0],)

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:  # None where None was saved, as torch
        saved = self._saved
        if type(saved) is tuple:
            for t in saved:  # a counter made or bumped since? (a scan is all it costs)
                if t is not None and t._vc is not None:
                    _check_versions(self, saved, self._versions)
                    break
            return saved
        if saved is None:
            raise RuntimeError(_FREED)
        if len(saved) == 1 and self._nondiff is None:  # the node's one output, alone
            s = saved[0]
            if s.vc[0] != s.version:
                raise _modified(
                    s.data, f", which is output {s.nr} of {self.name()}", s.vc[0], s.version
                )
            t = Tensor._wrap(s.data)
            t._rg = True
            t.grad_fn = self
            t._out_nr = s.nr
            return (t,)
        out: list[Any] = []
        check = False
        for s in saved:
            if type(s) is _SavedOutput:
                if s.vc[0] != s.version:
                    what = f", which is output {s.nr} of {self.name()}"
                    raise _modified(s.data, what, s.vc[0], s.version)
                t = Tensor._wrap(s.data)
                nondiff = self._nondiff
                if nondiff is None or s.nr not in nondiff:
                    t._rg = True
                    t.grad_fn = self
                    if self._nout != 1:
                        t._out_nr = s.nr
                s = t
            elif s is not None and s._vc is not None:
                check = True
            out.append(s)
        if check:  # an input saved beside the outputs has a counter: compare its version
            inputs = tuple(None if type(x) is _SavedOutput else x for x in saved)
            _check_versions(self, inputs, self._versions)
        return tuple(out)

    def _saved_data(self) -> tuple[Any, ...] | None:
        """The arrays of ``saved_tensors`` in its commonest cases (nothing, one input, or
        the node's one output), their versions checked as it checks them, without making
        Tensors; None for ``saved_tensors`` to answer (and raise what it raises)."""
        saved = self._saved
        if type(saved) is tuple:
            if not saved:
                return ()
            if len(saved) == 1 and self._versions is None:
                t = saved[0]
                if type(t) is Tensor and t._vc is None:
                    return (t._data,)
        elif type(saved) is list and len(saved) == 1 and self._nondiff is None:
            s = saved[0]
            if s.vc[0] == s.version:
                return (s.data,)
        return None

    @property
    def needs_input_grad(self) -> tuple[Any, ...]:
        """One bool per positional input passed (a list of bools for a ``Tensor[]``
        input), as in torch: trailing arguments left at their default are not counted."""
        return tuple(
            [x is not None for x in e] if type(e) is list else e is not None
            for e in self._edges[: self._npassed]
        )

    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        """Outputs that get no gradient: they do not require grad, and their gradient in
        ``backward`` is zeros (or None without materialization).

        As in torch, any Tensor is accepted: outputs with an integer or bool dtype (which
        never require grad) and tensors that are not outputs of this call are ignored."""
        marked: set[int] | None = None
        for t in outputs:
            if type(t) is not Tensor:
                raise RuntimeError(
                    "mark_non_differentiable only accepts variable arguments, but got "
                    f"{type(t).__name__} ({self.name()}); pass outputs of the operator "
                    "(oplib.Tensor)"
                )
            if t.grad_fn is self:
                if marked is None:
                    marked = set(self._nondiff or ())
                marked.add(0 if self._nout == 1 else t._out_nr)
        if marked is not None:
            self._nondiff = marked

    def set_materialize_grads(self, value: bool) -> None:
        """With False, ``backward`` gets None (instead of zeros) for outputs that received
        no gradient."""
        self._materialize = bool(value)

    # -- engine interface -------------------------------------------------------------------
    def name(self) -> str:
        return self._formula.node_name

    def _input_name(self, i: int) -> str:
        return self._formula.input_names[i]

    def _release(self) -> None:
        if self._saved:
            self._saved = None

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        formula = self._formula
        if formula.simple:  # one output: formula.run's first case, inlined
            result = formula.backward(self, grads[0])
            if type(result) is Tensor:
                if formula.unary:  # no checks for a Tensor result
                    return (result,)
            elif (  # (Tensor, None) for (Tensor, Scalar) inputs: what check() accepts as is
                type(result) is tuple
                and len(result) == 2 == formula.n_inputs
                and formula.first_only
                and result[1] is None
                and type(result[0]) is Tensor
            ):
                return result
            return formula.check(result, self)
        return formula.run(self, grads)


#: The attribute of a ``setup_context`` that does nothing but
#: ``ctx.save_for_backward(output)`` (``"output"``), ``(inputs[0])`` (``"input"``), or
#: ``ctx.scalar = inputs[1]`` (``"scalar"``): the Autograd kernel of one Tensor in does it
#: itself, without the call (see :func:`keeps`).
KEEPS = "__oplib_keeps__"


def keeps(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a ``setup_context`` as one that saves the op's output (``"output"``), its
    first input (``"input"``), or keeps its second argument as ``ctx.scalar``
    (``"scalar"``), and nothing else."""
    if what not in ("output", "input", "scalar"):
        raise ValueError(f"keeps(): 'output', 'input' or 'scalar', got {what!r}")

    def mark(setup: Callable[..., Any]) -> Callable[..., Any]:
        setattr(setup, KEEPS, what)
        return setup

    return mark


#: numpy dtype -> whether an output of it records gradients (floating, complex, bfloat16
#: and float8), filled as met: one dict lookup per recorded node (``isinstance`` of a numpy
#: dtype alone costs 80 ns).
_DIFFERENTIABLE: dict[Any, bool] = {}


def _differentiable(data: Any) -> tuple[Any, bool]:
    """``(oplib dtype, records gradients)`` of array ``data``; a numpy dtype's answer is
    kept in ``_DIFFERENTIABLE`` (a library's own dtype object is converted every time)."""
    dtype = data.dtype
    if not isinstance(dtype, np.dtype):
        dtype = dtype_of(data)
        return dtype, dtype.kind in "fc" or dtype in EXTENSION_FLOATS
    differentiable = dtype.kind in "fc" or dtype in EXTENSION_FLOATS
    _DIFFERENTIABLE[dtype] = differentiable
    return dtype, differentiable


_NOT_GIVEN = object()

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
        "below",
        "call",
        "first_only",
        "input_kinds",
        "input_names",
        "keeps",
        "keeps_scalar",
        "kw_defaults",
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
        built_in: bool = False,
    ) -> None:
        schema = op.schema
        self.call = op
        # the kernels below (OpOverload.tensor_kernels) that a core op's Autograd kernel of
        # one Tensor calls itself, with grad mode as it is, as torch's built-in ops' kernels
        # do (its autograd kernel excludes the autograd keys below it, leaving GradMode
        # alone); none for a custom op, whose kernel runs through call_below_autograd with
        # grad mode off (torch.library.custom_op's forward runs under no_grad)
        self.below = op.tensor_kernels if built_in else _NO_KERNELS
        self.qualname = op.name()
        self.backward = backward
        self.setup = setup_context
        # what the setup does when it says so (keeps()), done without calling it: the one
        # Tensor it saves ("output" or "input", for one Tensor in), or ctx.scalar
        kept = getattr(setup_context, KEEPS, None)
        self.keeps = kept if kept != "scalar" else None
        self.keeps_scalar = kept == "scalar"
        self.location = _location_of(backward) or repr(backward)
        self.input_names = tuple(a.name for a in schema.positional)
        self.input_kinds = tuple(_kind(a.type) for a in schema.positional)
        self.n_inputs = len(self.input_names)
        self.out_kinds = tuple(_kind(r.type) for r in schema.returns)
        self.kw_form = bool(schema.kwarg_only)
        self.kw_defaults = {a.name: a.default_value for a in schema.kwarg_only if a.has_default}
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

    def _call_below(self, args: tuple[Any, ...]) -> Any:
        """The op on ``args`` below its Autograd kernel, with grad mode off: the kernel the
        fast path holds (``call_below_autograd``), else the full call (which grad mode off
        sends past this kernel)."""
        GRAD.enabled = False
        try:
            out = self.call.call_below_autograd(args)
            if out is MISS:
                out = self.call(*args)
        finally:
            GRAD.enabled = True
        return out

    def kernel_unary(self, a: Any) -> Any:
        """``kernel`` for ops taking one Tensor and nothing else and returning one Tensor:
        the same steps, without packing arguments or re-checking the call's shape."""
        if type(a) is not Tensor:
            return self.kernel(a)
        data = a._data
        fn = None if ACTIVE[0] else self.below.get(type(data))
        if fn is None:
            out = self._call_below((a,))
        else:
            try:
                out = _make_tensor(fn(data))
            except Exception as e:
                self.call.kernel_failed(e, fn, (data,))
                raise
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
        differentiable = _DIFFERENTIABLE.get(dtype)
        if differentiable is None:  # met for the first time, or a library's own dtype
            dtype, differentiable = _differentiable(data)
        ctx._meta = ((data.shape, dtype),)
        if differentiable:
            out._rg = True
            out.grad_fn = ctx
            keeps = self.keeps
            if keeps is not None:  # the setup's one save_for_backward, without the calls
                if keeps == "output":
                    ctx._keep_output(out)
                else:
                    ctx._keep_input(a)
                return out
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

    def kernel_first(self, a: Any = MISS, /, *others: Any, **kwargs: Any) -> Any:
        """``kernel`` for ops whose one Tensor input comes first and that return one Tensor
        (see ``first_only``): the edges without a loop over the inputs. (The Tensor apart
        from the rest: the fast path calls ``kernel_first(t, 0.99)``, and a tuple of every
        argument is only made for a setup to read.)"""
        n = self.n_inputs
        if kwargs or type(a) is not Tensor or len(others) >= n:
            args = others if a is MISS else (a, *others)
            return self.kernel(*args, **kwargs)
        data = a._data
        fn = None if ACTIVE[0] else self.below.get(type(data))
        if fn is None or len(others) != n - 1:
            out = self._call_below((a, *others))
        else:
            try:
                out = _make_tensor(fn(data, *others))
            except Exception as e:
                self.call.kernel_failed(e, fn, (data, *others))
                raise
        ctx = _new(FunctionCtx)  # _new_ctx(1), inlined
        ctx._formula = self
        ctx._saved = ()
        ctx._nondiff = None
        ctx._materialize = True
        ctx._npassed = n
        ctx._nout = 1
        ctx._outs = None
        rest = self.rest if len(others) == n - 1 else self.rest[: len(others)]
        if a._rg:
            node = a.grad_fn
            if node is None:
                ctx._edges = ((a, 0), *rest)
            else:
                ctx._edges = ((node, 0 if node._nout == 1 else a._out_nr), *rest)
        else:
            ctx._edges = (None, *rest)
        if self.tail_defaults:
            ctx._npassed = self._passed((a, *others))
        data = out._data
        dtype = data.dtype
        differentiable = _DIFFERENTIABLE.get(dtype)
        if differentiable is None:  # met for the first time, or a library's own dtype
            dtype, differentiable = _differentiable(data)
        ctx._meta = ((data.shape, dtype),)
        if differentiable:
            out._rg = True
            out.grad_fn = ctx
        if self.keeps_scalar and others:  # the setup, without the call
            ctx.scalar = others[0]
            return out
        setup = self.setup
        if setup is not None:
            setup(ctx, (a, *others), out)
            if differentiable and ctx._nondiff:
                out._rg = False
                out.grad_fn = None
        return out

    def kernel(self, *args: Any, **kwargs: Any) -> Any:
        # keyword-only arguments at their defaults (the fast path passes them so: sum's
        # dtype=None) are left out below, so that the call below is a fast path's call
        below = {} if kwargs and self._at_defaults(kwargs) else kwargs
        GRAD.enabled = False
        try:
            out: Any = MISS if below else self.call.call_below_autograd(args)
            if out is MISS:
                out = self.call(*args, **below)
        finally:
            GRAD.enabled = True
        ctx = self._new_ctx(1 if self.simple else 0)
        ctx._edges = self._edges_of(args)
        if self.tail_defaults:
            ctx._npassed = self._passed(args)
        if self.simple:
            data = out._data
            dtype = data.dtype
            differentiable = _DIFFERENTIABLE.get(dtype)
            if differentiable is None:  # met for the first time, or a library's own dtype
                dtype, differentiable = _differentiable(data)
            ctx._meta = ((data.shape, dtype),)
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

    def _at_defaults(self, kwargs: dict[str, Any]) -> bool:
        """Whether ``kwargs`` are the op's keyword-only arguments, each its default object
        (by identity: numpy's dtype('float64') == None holds)."""
        defaults = self.kw_defaults
        return len(kwargs) == len(defaults) and all(
            v is defaults.get(k, _NOT_GIVEN) for k, v in kwargs.items()
        )

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
    built_in: bool = False,
) -> Callable[..., Any]:
    """The Autograd kernel of ``overload`` running ``backward`` (and ``setup_context``),
    after checking that they fit its schema; ``built_in`` for the core's formulas (see
    ``Formula.below``)."""
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
    formula = Formula(overload, backward, setup_context, built_in)
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
