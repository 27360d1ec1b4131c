"""The reverse-mode engine: graph nodes and an iterative backward pass.

A :class:`Node` is recorded for each operator call that needs gradients; its ``_edges`` say
where the gradient of each input goes: ``None`` (no gradient needed), ``(node, out_nr)``
(output ``out_nr`` of the node that produced the input) or ``(tensor, 0)`` (a leaf that
requires grad). Tensor[] inputs have a list of such edges. The engine counts dependencies
once, then runs nodes in topological order with an explicit stack (no recursion, so graphs
of any depth work), summing gradients that meet, checking each gradient's shape and dtype
against what it flows into, and accumulating into leaves' ``.grad`` (``backward``) or
capturing them (``grad``).

Backward passes in several threads may flow into one leaf: each addition into a leaf's
``.grad`` (a read, an op call that releases the GIL, a write) holds that leaf's lock, as
torch's ``AccumulateGrad`` holds a mutex, so the sum is exactly the serial one.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._grad_mode import STATE as GRAD
from .._registry.registry import op_named
from .._registry.startup import at_fork
from .._tensor.tensor import Tensor
from ..backends import TABLE

if TYPE_CHECKING:  # for annotations only: autograd sits above the dispatcher
    from .._dispatch import OpOverload

__all__ = ["NODE_HOOK", "Node", "backward", "edge_of", "grad", "run_backward"]

#: ``NODE_HOOK[0]``: None, or ``hook(node, grads)`` that runs each backward node in place
#: of ``node._apply(grads)`` (the profiler times nodes with it). Read once per backward
#: pass, so it costs nothing per node when unset.
NODE_HOOK: list[Any] = [None]

#: The accumulation locks, striped by the leaf's identity: one per leaf in effect (a Tensor
#: has no room for a lock of its own, and most leaves never meet a second thread).
#: Re-entrant: the addition dispatches an op, which a dispatch mode may turn into a
#: backward pass of its own.
_ACCUMULATE_LOCKS = tuple(threading.RLock() for _ in range(64))


def _reset_after_fork(me: int) -> None:
    for lock in _ACCUMULATE_LOCKS:  # (a thread adding into a leaf is gone in the child)
        if not lock._is_owned():  # type: ignore[attr-defined]
            lock._at_fork_reinit()  # type: ignore[attr-defined]


at_fork(_reset_after_fork)

_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


def _op(qualname: str) -> OpOverload:
    op: OpOverload = op_named(qualname)
    return op


class Node:
    """One recorded operator call (``tensor.grad_fn``).

    Subclasses implement ``_apply(grads)`` (one gradient per output, ``None`` where none
    arrived) returning one gradient per edge (a list for a Tensor[] input) and
    ``_input_name(i)``.
    """

    __slots__ = ("__weakref__", "_edges", "_meta", "_nout", "_outs")

    _edges: tuple[Any, ...]
    # (shape, dtype) per output; _outs: the native outputs of multi-output nodes (to make
    # zero gradients for outputs that got none), else None.
    _meta: tuple[tuple[tuple[int, ...], Any], ...]
    _nout: int
    _outs: tuple[Any, ...] | None

    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self) -> tuple[tuple[Any, int], ...]:
        """``(node or leaf tensor or None, output number)`` per input, as in torch."""
        out: list[tuple[Any, int]] = []
        for e in self._edges:
            if type(e) is list:
                out.extend(x if x is not None else (None, 0) for x in e)
            else:
                out.append(e if e is not None else (None, 0))
        return tuple(out)

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def _input_name(self, i: int) -> str:
        return str(i)

    def _apply(self, grads: list[Any]) -> Sequence[Any]:
        raise NotImplementedError

    def _release(self) -> None:
        """Free saved values (after a backward pass without ``retain_graph``)."""

    def _zeros_for(self, nr: int) -> Tensor:
        shape, dtype = self._meta[nr]
        native = self._outs[nr] if self._outs is not None else None
        device = None
        if native is not None:
            b = TABLE.for_type(type(native))
            if b is not None:
                device = b.device_of(native)
        return Tensor._wrap(_op("oplib::zeros")(list(shape), dtype=dtype, device=device))


def edge_of(t: Any) -> tuple[Any, int] | None:
    """Where ``t``'s gradient goes in backward: ``(t, 0)`` for a leaf that requires grad,
    ``(grad_fn, output number)`` for a computed Tensor, None for anything else."""
    if type(t) is not Tensor or not t._rg:
        return None
    fn = t.grad_fn
    if fn is None:
        return (t, 0)
    return (fn, 0 if fn._nout == 1 else t._out_nr)


def _expandable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``to`` (so a gradient of shape ``to`` sums to it)."""
    if len(shape) > len(to):
        return False
    lead = len(to) - len(shape)
    return all(s == 1 or s == t for s, t in zip(shape, to[lead:], strict=True))


def sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``g`` summed over the dims that broadcasting added or expanded, to ``shape``."""
    gs = tuple(g._data.shape)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    dims = list(range(lead)) + [
        lead + i for i, s in enumerate(shape) if s == 1 and gs[lead + i] != 1
    ]
    if dims:
        g = _op("oplib::sum")(g, dims, True)
    out: Tensor = _op("oplib::reshape")(g, list(shape))
    return out


def _fit(grad: Any, shape: tuple[int, ...], dtype: Any, node: Node, i: int, what: str) -> Tensor:
    """Check gradient ``grad`` (from input ``i`` of ``node``) against the ``shape``/``dtype``
    of what it flows into; sum broadcast dims and cast the dtype as torch does."""
    if type(grad) is not Tensor:
        raise TypeError(
            f"autograd: the backward of {node.name()} returned a {type(grad).__name__} as the "
            f"gradient of input {node._input_name(i)!r}; expected an oplib.Tensor or None"
        )
    g: Tensor = grad
    data = g._data
    gshape = tuple(data.shape)
    shape = tuple(shape)
    if gshape != shape:
        if not _expandable(shape, gshape):
            raise RuntimeError(
                f"autograd: the backward of {node.name()} returned an invalid gradient for "
                f"input {node._input_name(i)!r}: got shape {gshape} but expected shape "
                f"{shape} (the shape of {what}) or one that broadcasts from it"
            )
        g = sum_to(g, shape)
        data = g._data
    if data.dtype is not dtype and g.dtype != dtype:  # g.dtype: oplib's name for it
        g = _op("oplib::astype")(g, dtype)
    return g


class _Run:
    """State of one backward pass."""

    __slots__ = (
        "accumulate",
        "captured",
        "create_graph",
        "handed_out",
        "leaf_capture",
        "node_capture",
    )

    def __init__(self, create_graph: bool) -> None:
        self.create_graph = create_graph
        self.accumulate = True
        self.captured: list[Any] = []
        self.leaf_capture: dict[int, list[int]] = {}
        self.node_capture: dict[Node, list[tuple[int, int]]] = {}
        self.handed_out: set[int] = set()

    def to_leaf(self, leaf: Tensor, g: Tensor) -> None:
        if not self.accumulate:  # grad(): captured, .grad left alone
            slots = self.leaf_capture.get(id(leaf))
            if slots is not None:
                for k in slots:
                    prev = self.captured[k]
                    self.captured[k] = g if prev is None else prev + g
            return
        if not self.create_graph:
            g = _detached(g)
        with _ACCUMULATE_LOCKS[(id(leaf) >> 4) & 63]:
            old = leaf.grad
            if old is not None:
                if (
                    not self.create_graph
                    and _big(old._data)
                    and _MADE.get(id(old)) is old
                    and _sole(old)
                ):
                    _op("oplib::add_.Tensor")(old, g)  # += : nobody else can see it
                    return
                old = old + g
            elif id(g) in self.handed_out or not _owns(g._data):
                old = _op("oplib::clone")(g)
            else:
                old = g
            self.handed_out.add(id(old))
            if not self.create_graph and _big(old._data):
                _MADE[id(old)] = old
            leaf.grad = old


#: The fewest elements of a ``.grad`` accumulated into in place: below, the in-place op's
#: checks cost more than the fresh small array they save (1 element: 2.9 µs for ``add_``,
#: 1.1 µs for ``add``, numpy).
IN_PLACE_MIN = 1 << 16


def _big(data: Any) -> bool:
    n = getattr(data, "size", None)  # (None or nan for a lazy array of unknown shape)
    return type(n) is int and n >= IN_PLACE_MIN


#: The ``.grad`` tensors the engine made (by id; weak, so a dropped one leaves): only these
#: are accumulated into in place, never one the user set or made.
_MADE: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def _counts(old: Tensor) -> tuple[int, int]:
    data = old._data
    return sys.getrefcount(old), sys.getrefcount(data)


def _baseline() -> tuple[int, int]:
    """What ``_counts`` gives for a ``.grad`` held by its leaf and the caller's local alone
    (measured, not assumed: reference counts differ between Python versions)."""
    leaf = Tensor._wrap(np.zeros(1))
    leaf.grad = Tensor._wrap(np.zeros(1))
    old = leaf.grad

    def sole(old: Tensor) -> tuple[int, int]:  # called as _sole is, from a frame holding old
        return _counts(old)

    return sole(old)


_SOLE = _baseline()


def _sole(old: Tensor) -> bool:
    """Whether ``old`` (a leaf's ``.grad``, also held by the caller's local) and its array are
    held by nothing else (no user reference, no other Tensor over the array, no view of it),
    and the array owns its memory and can be written (numpy's, cupy's; not jax's)."""
    if old._rg or _counts(old) != _SOLE:
        return False
    vc = old._vc
    if vc is not None and len(vc) > 1:  # a view was taken of it
        return False
    flags = getattr(old._data, "flags", None)
    if flags is None or not getattr(flags, "owndata", False):
        return False
    return bool(getattr(flags, "writeable", True))


def _buffer_counts(prev: Tensor) -> tuple[int, int]:
    data = prev._data
    return sys.getrefcount(prev), sys.getrefcount(data)


def _buffer_baseline() -> tuple[int, int]:
    """What ``_buffer_counts`` gives for a gradient held by a node's input buffer and the
    engine's local alone (measured as the engine calls it, not assumed)."""
    buf = [Tensor._wrap(np.zeros(1))]
    prev = buf[0]

    def sole(prev: Tensor, g: Tensor) -> tuple[int, int]:  # as _sole_buffer is called
        return _buffer_counts(prev)

    return sole(prev, Tensor._wrap(np.zeros(1)))


_BUFFER_SOLE = _buffer_baseline()


def _sole_buffer(prev: Tensor, g: Tensor) -> bool:
    """Whether the gradient ``prev`` waiting in a node's input buffer may have ``g`` added
    into it in place: the engine made it and nothing else holds it or its array (not a
    caller's ``grad_outputs``, not a leaf's ``.grad``, not sent to another node too, no
    view of it), and its array owns its memory, can be written, and is of ``g``'s class."""
    if prev._rg or prev is g or _buffer_counts(prev) != _BUFFER_SOLE:
        return False
    vc = prev._vc
    if vc is not None and len(vc) > 1:
        return False
    data = prev._data
    if type(g._data) is not type(data):
        return False
    flags = getattr(data, "flags", None)
    if flags is None or not getattr(flags, "owndata", False):
        return False
    return bool(getattr(flags, "writeable", True))


def _detached(g: Tensor) -> Tensor:
    return g if g.grad_fn is None and not g._rg else Tensor._wrap(g._data)


def _owns(data: Any) -> bool:
    """False for views (broadcast results, reshapes of another gradient) that must not become
    a leaf's ``.grad`` as they are."""
    if type(data) is np.ndarray:
        return data.base is None and data.flags.writeable
    flags = getattr(data, "flags", None)
    if flags is None:
        return True
    return bool(getattr(flags, "owndata", True)) and bool(getattr(flags, "writeable", True))


def _root_grad(t: Tensor, grad: Any, i: int) -> Tensor:
    if grad is None:
        data = t._data
        if (data.size if type(data) is np.ndarray else t.numel()) != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs; output {i} has shape "
                f"{t.shape}: pass gradient= (a tensor of that shape) to backward()/grad()"
            )
        if type(data) is np.ndarray:  # the common case, without a dispatch
            one = np.empty(data.shape, data.dtype)  # (a fifth of np.ones_like's time)
            one.fill(1)
            return Tensor._wrap(one)
        # factories return native arrays
        return Tensor._wrap(_op("oplib::ones")(list(data.shape), dtype=t.dtype, device=t.device))
    g: Tensor = grad
    if type(grad) is not Tensor:
        if TABLE.for_type(type(grad)) is None:
            raise TypeError(
                f"backward(): gradient {i} must be an oplib.Tensor or a native array, got "
                f"{type(grad).__name__}"
            )
        g = Tensor._wrap(grad)
    if tuple(g._data.shape) != tuple(t._data.shape):
        raise RuntimeError(
            f"backward(): mismatch in shape: gradient {i} has shape {g.shape} but output {i} "
            f"has shape {t.shape}"
        )
    return g


def run_backward(
    outputs: Sequence[Tensor],
    grad_outputs: Sequence[Any],
    *,
    retain_graph: bool,
    create_graph: bool,
    inputs: Sequence[Tensor] | None = None,
    allow_unused: bool = False,
) -> list[Any] | None:
    """Backpropagate from ``outputs``. With ``inputs`` (``autograd.grad``) return their
    gradients and leave ``.grad`` alone; without, accumulate into leaves' ``.grad``."""
    run = _Run(create_graph)
    prev = GRAD.enabled
    GRAD.enabled = create_graph
    try:
        return _run(run, outputs, grad_outputs, retain_graph, inputs, allow_unused)
    finally:
        GRAD.enabled = prev


def _run(
    run: _Run,
    outputs: Sequence[Tensor],
    grad_outputs: Sequence[Any],
    retain_graph: bool,
    inputs: Sequence[Tensor] | None,
    allow_unused: bool,
) -> list[Any] | None:
    buffers: dict[Node, list[Any]] = {}
    roots: list[Node] = []
    if inputs is not None:
        run.accumulate = False
        run.captured = [None] * len(inputs)
        for k, t in enumerate(inputs):
            if type(t) is not Tensor:
                raise TypeError(
                    f"grad(): inputs[{k}] must be an oplib.Tensor, got {type(t).__name__}"
                )
            if not t._rg:
                raise RuntimeError(
                    f"grad(): inputs[{k}] does not require grad; call requires_grad_() on it "
                    "before computing the outputs"
                )
            fn = t.grad_fn
            if fn is None:
                run.leaf_capture.setdefault(id(t), []).append(k)
            else:
                nr = 0 if fn._nout == 1 else t._out_nr
                run.node_capture.setdefault(fn, []).append((k, nr))

    pending_leaves: list[tuple[Tensor, Tensor]] = []
    for i, (t, g) in enumerate(zip(outputs, grad_outputs, strict=True)):
        if type(t) is not Tensor:
            raise TypeError(
                f"backward(): outputs[{i}] must be an oplib.Tensor, got {type(t).__name__}"
            )
        if not t._rg:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn: "
                "none of the inputs it was computed from requires grad (or it was computed "
                "under no_grad)"
            )
        given = g is not None
        g = _root_grad(t, g, i)
        if given:  # the caller's: never to become a .grad as it is (ones made here may)
            run.handed_out.add(id(g))
        fn = t.grad_fn
        if fn is None:
            pending_leaves.append((t, g))
            continue
        nr = 0 if fn._nout == 1 else t._out_nr
        buf = buffers.get(fn)
        if buf is None:
            buf = buffers[fn] = [None] * fn._nout
            roots.append(fn)
        buf[nr] = g if buf[nr] is None else buf[nr] + g

    # Pass 1: dependency counts (incoming edges from nodes reachable from the roots; a
    # root starts at 0, so that reaching it again does not walk it again).
    deps: dict[Node, int] = dict.fromkeys(roots, 0)
    stack = list(roots)
    get = deps.get
    while stack:
        node = stack.pop()
        for e in node._edges:
            if e is None:
                continue
            if type(e) is list:
                for edge in e:
                    if edge is not None and type(edge[0]) is not Tensor:
                        target = edge[0]
                        d = get(target)
                        if d is None:
                            deps[target] = 1
                            stack.append(target)
                        else:
                            deps[target] = d + 1
                continue
            target = e[0]
            if type(target) is Tensor:
                continue
            d = get(target)
            if d is None:
                deps[target] = 1
                stack.append(target)
            else:
                deps[target] = d + 1

    needed: set[Node] | None = None
    if inputs is not None:
        needed = _needed(roots, deps, run)

    for leaf, g in pending_leaves:
        run.to_leaf(leaf, g)

    # Pass 2: run nodes once all their consumers have run. A node's buffer (one gradient
    # per output) exists once a gradient reached it, so it always holds one that is not None.
    ready = [n for n in roots if not deps[n]]
    node_capture = run.node_capture
    create_graph = run.create_graph
    special = bool(node_capture) or needed is not None
    pop = ready.pop
    push = ready.append
    take = buffers.pop
    hook = NODE_HOOK[0]
    while ready:
        node = pop()
        grads = take(node, None)
        if special:
            if node_capture and grads is not None:
                for k, nr in node_capture.get(node, ()):
                    g = grads[nr]
                    if g is not None:
                        prev = run.captured[k]
                        run.captured[k] = g if prev is None else prev + g
            if needed is not None and node not in needed:
                continue
        if grads is None:
            outs = None
        elif hook is None:
            outs = node._apply(grads)
        else:
            outs = hook(node, grads)
        if not retain_graph:
            node._release()
        i = -1
        for e in node._edges:
            i += 1
            if e is None:
                continue
            g = None if outs is None else outs[i]
            if type(e) is list:
                for j, edge in enumerate(e):
                    if edge is not None:
                        _route(
                            run,
                            node,
                            i,
                            edge,
                            None if g is None else g[j],
                            buffers,
                            deps,
                            ready,
                            needed,
                        )
                continue
            target, nr = e
            if type(target) is Tensor:
                if g is not None:
                    data = target._data
                    if type(g) is not Tensor or (
                        (gd := g._data).shape != data.shape or gd.dtype is not data.dtype
                    ):
                        g = _fit(g, data.shape, target.dtype, node, i, "the input")
                    run.to_leaf(target, g)
                continue
            if g is not None:
                shape, dtype = target._meta[nr]
                if type(g) is not Tensor:
                    g = _fit(g, shape, dtype, node, i, f"output {nr} of {target.name()}")
                else:
                    data = g._data
                    if data.shape != shape or (data.dtype is not dtype and g.dtype != dtype):
                        g = _fit(g, shape, dtype, node, i, f"output {nr} of {target.name()}")
                buf = buffers.get(target)
                if buf is None:
                    if target._nout == 1:
                        buffers[target] = [g]
                    else:
                        buf = buffers[target] = [None] * target._nout
                        buf[nr] = g
                else:
                    prev = buf[nr]
                    if prev is None:
                        buf[nr] = g
                    elif create_graph or not _big(prev._data) or not _sole_buffer(prev, g):
                        buf[nr] = prev + g
                    else:  # torch's InputBuffer: += into a sum nobody else holds
                        _op("oplib::add_.Tensor")(prev, g)
            left = deps[target] - 1
            deps[target] = left
            if left == 0:
                push(target)

    if inputs is None:
        return None
    result = run.captured
    for k, g in enumerate(result):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad(): one of the differentiated tensors (inputs[{k}]) appears to not have "
                "been used in the graph. Set allow_unused=True if this is the desired behavior."
            )
        if g is not None and not run.create_graph:
            result[k] = _detached(g)
    return result


def _route(
    run: _Run,
    node: Node,
    i: int,
    edge: tuple[Any, int],
    g: Any,
    buffers: dict[Node, list[Any]],
    deps: dict[Node, int],
    ready: list[Node],
    needed: set[Node] | None,
) -> None:
    target, nr = edge
    if type(target) is Tensor:
        if g is not None:
            data = target._data
            run.to_leaf(target, _fit(g, tuple(data.shape), target.dtype, node, i, "the input"))
        return
    if g is not None:
        shape, dtype = target._meta[nr]
        g = _fit(g, shape, dtype, node, i, f"output {nr} of {target.name()}")
        buf = buffers.get(target)
        if buf is None:
            buffers[target] = buf = [None] * target._nout
        prev = buf[nr]
        if prev is None:
            buf[nr] = g
        elif run.create_graph or not _big(prev._data) or not _sole_buffer(prev, g):
            buf[nr] = prev + g
        else:
            _op("oplib::add_.Tensor")(prev, g)
    left = deps[target] - 1
    deps[target] = left
    if left == 0:
        ready.append(target)


def _needed(roots: list[Node], deps: dict[Node, int], run: _Run) -> set[Node]:
    """Nodes from which some input of ``grad()`` is reachable (the rest need not run)."""
    leaf_ids = run.leaf_capture
    captured_nodes = run.node_capture
    # Topological order (consumers first) by Kahn's algorithm over the reachable graph.
    remaining = dict(deps)
    topo: list[Node] = []
    stack = [n for n in roots if not deps[n]]
    while stack:
        node = stack.pop()
        topo.append(node)
        for e in node._edges:
            if e is None:
                continue
            for edge in e if type(e) is list else (e,):
                if edge is None or type(edge[0]) is Tensor:
                    continue
                left = remaining[edge[0]] - 1
                remaining[edge[0]] = left
                if left == 0:
                    stack.append(edge[0])
    needed: set[Node] = set()
    for node in reversed(topo):
        for e in node._edges:
            if e is None:
                continue
            for edge in e if type(e) is list else (e,):
                if edge is None:
                    continue
                target = edge[0]
                if (
                    (id(target) in leaf_ids)
                    if type(target) is Tensor
                    else (target in needed or target in captured_nodes)
                ):
                    needed.add(node)
                    break
            if node in needed:
                break
    return needed


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return list(x)
    return [x]


def _one_per(outs: list[Any], given: Any, api: str, what: str, each: str) -> list[Any]:
    """The gradients given for ``outs`` (None for each when none were given), one per
    output or an error saying so."""
    grads = [None] * len(outs) if given is None else _as_list(given)
    if len(grads) != len(outs):
        raise RuntimeError(
            f"{api}: got {len(grads)} {what} for {len(outs)} {each}s; pass one per {each}"
        )
    return grads


def _transform_hook(t: Tensor, name: str) -> Any:
    """The hook a Tensor subclass made by a function transform (``oplib.vmap``) gives the
    engine for ``grad()``/``backward()`` on it: a static method of that class, or None."""
    return getattr(type(t), name, None)


def backward(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
) -> None:
    """Accumulate the gradients of ``tensors`` (w.r.t. the graph's leaves) into ``.grad``."""
    if retain_graph is None:
        retain_graph = create_graph
    for t in tensors if isinstance(tensors, (list, tuple)) else (tensors,):
        if type(t) is not Tensor and isinstance(t, Tensor):
            hook = _transform_hook(t, "__oplib_backward__")
            if hook is not None:  # a transform's Tensor (vmap's BatchedTensor) refuses
                hook()
    if type(tensors) is list and type(grad_tensors) is list and len(tensors) == len(grad_tensors):
        outs, grads = tensors, grad_tensors  # (Tensor.backward's call; only read)
    else:
        outs = _as_list(tensors)
        grads = _one_per(outs, grad_tensors, "backward()", "gradients", "tensor")
    run_backward(outs, grads, retain_graph=retain_graph, create_graph=create_graph)


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Any, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (a tuple, one per input),
    without touching ``.grad``. ``create_graph=True`` records the backward pass so the result
    can be differentiated again."""
    outs = _as_list(outputs)
    ins = _as_list(inputs)
    for t in (*outs, *ins):
        if type(t) is not Tensor and isinstance(t, Tensor):
            hook = _transform_hook(t, "__oplib_grad__")
            if hook is not None:  # a transform's Tensor (vmap's BatchedTensor) answers
                answer: tuple[Any, ...] = hook(
                    outs, ins, grad_outputs, retain_graph, create_graph, allow_unused
                )
                return answer
    grads = _one_per(outs, grad_outputs, "grad()", "grad_outputs", "output")
    if retain_graph is None:
        retain_graph = create_graph
    result = run_backward(
        outs,
        grads,
        retain_graph=retain_graph,
        create_graph=create_graph,
        inputs=ins,
        allow_unused=allow_unused,
    )
    assert result is not None
    return tuple(result)
