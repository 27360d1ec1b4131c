"""The ``ctx`` given to ``setup_context`` and ``backward``: like ``torch.autograd.Function``'s.

The ctx *is* the graph node of the call (as in torch), so recording a call allocates one
object. Tensors saved with ``save_for_backward`` are freed after a backward pass unless
``retain_graph=True``; other attributes set on ctx (``ctx.dim = 1``) stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._tensor.tensor import Tensor
from ._engine import _FREED, Node

if TYPE_CHECKING:  # for annotations only: the registration module imports this one
    from ._registration import Formula

__all__ = ["FunctionCtx"]

_new = object.__new__


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
                    return
                if t.grad_fn is not self:
                    self._saved = tensors
                    vc = t._vc
                    self._versions = None if vc is None else (vc[0],)
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
