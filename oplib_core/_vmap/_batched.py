"""Batched values and the vmap interpreter: a dispatch mode active only inside a vmap call.

A :class:`BatchedTensor` of level ``L`` stands for ``batch_size`` examples at once: its
``_value`` holds them with the batch dim first (the value may itself be batched at an outer
level). Inside ``oplib.vmap`` the function sees only the per-example (logical) shape. The
level's :class:`VmapLevel` mode sees every op call made there: an op with a batching rule
runs the rule once on the values, an op without one runs once per example (results
stacked, a warning once per op). Calls the rule or the loop makes reach the outer levels'
modes, so nested vmaps compose. Outside a vmap nothing of this runs.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._dispatch import MODES, DispatchMode, OpOverload
from .._dtypes import contiguous_format
from .._grad_mode import is_grad_enabled
from .._tensor.tensor import Tensor
from ..ops import ops

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "BatchedTensor",
    "VmapInfo",
    "VmapLevel",
    "call_rule",
    "current_levels",
    "functional",
    "per_example",
    "wrap",
]

_new = object.__new__


class VmapInfo(NamedTuple):
    """What a batching rule may need besides its arguments (torch's ``VmapInfo``)."""

    batch_size: int
    randomness: str


class BatchedTensor(Tensor):
    """``batch_size`` examples of one logical Tensor, seen inside ``oplib.vmap``.

    Its shape, ``ndim`` and ``numel`` are one example's; operators called on it run the
    op's batching rule. Reading its data (``item()``, ``bool()``, ``numpy()``) is refused
    as in torch: one example's value is not known to the function being vmapped."""

    __slots__ = ("_level", "_value")
    _level: int
    _value: Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape[1:]

    @property
    def ndim(self) -> int:
        return self._value.ndim - 1

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    # -- autograd state: the value's (the graph is recorded on the values) ----------------
    @property
    def requires_grad(self) -> bool:
        return self._value.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        self._value.requires_grad_(requires_grad)
        self._rg = self._value._rg
        return self

    @property
    def grad_fn(self) -> Any:
        return self._value.grad_fn

    @grad_fn.setter
    def grad_fn(self, fn: Any) -> None:
        pass  # Tensor's slots are set once by wrap(); the value owns the history

    @property
    def is_leaf(self) -> bool:
        return self._value.is_leaf

    def detach(self) -> Tensor:
        return wrap(self._value.detach(), self._level)

    def _new_like(
        self, op: str, size: tuple[Any, ...], *args: Any, dtype: Any, device: Any
    ) -> Tensor:
        # new_empty/new_zeros/new_ones/new_full: one per example (functorch's rules), so
        # that writing an example into it in place works
        if len(size) == 1 and not isinstance(size[0], int) and hasattr(size[0], "__iter__"):
            size = tuple(size[0])
        level = _level_of(self)
        with level.popped():
            out = self._value._new_like(
                op, (level.batch_size, *size), *args, dtype=dtype, device=device
            )
        return wrap(out, level.level)

    def contiguous(self, memory_format: Any = contiguous_format) -> Tensor:
        # the value row-major, batch dim first: each example is row-major too
        if memory_format is not contiguous_format:
            raise NotImplementedError(
                f"vmap: contiguous(memory_format={memory_format}) inside vmap; only the "
                "default (row-major) layout is supported"
            )
        level = _level_of(self)
        with level.popped():
            return wrap(self._value.contiguous(), level.level)

    # -- data access is per example: refused, with torch's words -------------------------
    def item(self) -> Any:
        raise RuntimeError(
            "vmap: It looks like you're calling .item() on a Tensor. We don't support vmap "
            "over calling .item() on a Tensor, please try to rewrite what you're doing with "
            "other operations."
        )

    def _data_dependent(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError(
            "vmap: It looks like you're attempting to use a Tensor in some data-dependent "
            "control flow. We don't support that: compute both branches and pick with "
            "oplib.ops.oplib.where, or move the decision out of the vmapped function."
        )

    __bool__ = _data_dependent
    __float__ = _data_dependent
    __int__ = _data_dependent
    __index__ = _data_dependent
    tolist = _data_dependent
    numpy = _data_dependent
    __array__ = _data_dependent

    def __repr__(self) -> str:
        return f"BatchedTensor(lvl={self._level}, bdim=0, value=\n    {self._value!r}\n)"

    # -- indexing: the value indexed behind a leading full slice (the batch dim) ----------
    def __getitem__(self, key: Any) -> Tensor:
        level = _level_of(self)
        entries = key if type(key) is tuple else (key,)
        with level.popped():
            if _sliceable(entries, level.level):
                full = (slice(None), *entries)
                return wrap(self._value[full], level.level)
            # batched indices, or advanced ones apart: each example on its own
            rows = [
                self._value.select(0, i)[_pick_key(entries, level.level, i)]
                for i in range(level.batch_size)
            ]
            return wrap(_STACK(rows, 0), level.level)

    def __setitem__(self, key: Any, value: Any) -> None:
        level = _level_of(self)
        entries = key if type(key) is tuple else (key,)
        with level.popped():
            if _sliceable(entries, level.level):
                full = (slice(None), *entries)
                if type(value) is BatchedTensor and value._level == level.level:
                    region = self._value[full]
                    v = value._value
                    value = v.reshape([v.shape[0], *([1] * (region.ndim - v.ndim)), *v.shape[1:]])
                self._value[full] = value
                return
            for i in range(level.batch_size):
                row = self._value.select(0, i)
                v = value
                if type(value) is BatchedTensor and value._level == level.level:
                    v = value._value.select(0, i)
                row[_pick_key(entries, level.level, i)] = v


def _level_of(t: BatchedTensor) -> VmapLevel:
    for level in current_levels():
        if level.level == t._level:
            return level
    raise RuntimeError(
        "vmap: this BatchedTensor escaped the oplib.vmap call that made it (a closure or a "
        "global kept it); return batched values from the vmapped function instead"
    )


def _advanced(e: Any) -> bool:
    return isinstance(e, (Tensor, list, np.ndarray))


def _sliceable(entries: tuple[Any, ...], level: int) -> bool:
    """Whether ``value[:, *entries]`` indexes every example as ``example[entries]`` does:
    no index batched at this level, and the advanced ones next to each other (else torch's
    rule would move their dims before the batch dim)."""
    where = [i for i, e in enumerate(entries) if _advanced(e)]
    if any(type(entries[i]) is BatchedTensor and entries[i]._level == level for i in where):
        return False
    return not where or where[-1] - where[0] + 1 == len(where)


def _pick_key(entries: tuple[Any, ...], level: int, i: int) -> tuple[Any, ...]:
    return tuple(
        _SELECT(e._value, 0, i) if type(e) is BatchedTensor and e._level == level else e
        for e in entries
    )


def wrap(value: Tensor, level: int) -> BatchedTensor:
    """``value`` (batch dim first) as a BatchedTensor of ``level``."""
    t = _new(BatchedTensor)
    t._data = value._data
    t._rg = value._rg
    t.grad = None
    t._out_nr = value._out_nr
    t._vc = value._vc
    t._value = value
    t._level = level
    return t


# -- levels -------------------------------------------------------------------------------
def current_levels() -> list[VmapLevel]:
    """This thread's active vmap levels, outermost first."""
    return [m for m in MODES.stack if isinstance(m, VmapLevel)]


class VmapLevel(DispatchMode):
    """The dispatch mode of one vmap call: runs the ops called on its BatchedTensors."""

    def __init__(self, level: int, batch_size: int, randomness: str) -> None:
        self.level = level
        self.batch_size = batch_size
        self.randomness = randomness
        #: Unbatched Tensors that require grad, met by an op inside this level: id ->
        #: (the tensor, its copy expanded to the batch). Every use here goes through the
        #: copy, so grad() inside the level gives per-example gradients for them.
        self.expanded: dict[int, tuple[Tensor, Tensor]] = {}

    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if MODES.stack:  # outer levels or other modes: they see the calls the rule makes
            return run_op(self, op, args, kwargs)
        # The only mode of this thread: off the global count as well while the rule runs,
        # so that the ops it calls on plain arrays take the fast path. (Through the public
        # enter/exit, which hold the count's lock; call_mode puts the mode back after.)
        MODES.push(self)
        DispatchMode.__exit__(self)
        try:
            return run_op(self, op, args, kwargs)
        finally:
            DispatchMode.__enter__(self)
            MODES.pop()

    def expand(self, t: Tensor) -> Tensor:
        """``t``'s copy expanded to the batch (a view recorded by autograd), made once."""
        hit = self.expanded.get(id(t))
        if hit is not None:
            return hit[1]
        v = t.unsqueeze(0).expand([self.batch_size, *t.shape])
        self.expanded[id(t)] = (t, v)
        return v

    def popped(self) -> _Popped:
        """A context in which this level is off the thread's mode stack (as inside
        ``__oplib_dispatch__``): calls reach the outer levels."""
        return _Popped(self)


class _Popped:
    __slots__ = ("index", "mode")

    def __init__(self, mode: DispatchMode) -> None:
        self.mode = mode
        self.index = -1

    def __enter__(self) -> None:
        stack = MODES.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self.mode:
                MODES.take(i)
                self.index = i
                return

    def __exit__(self, *exc: object) -> None:
        if self.index >= 0:
            MODES.put(self.index, self.mode)


# -- one op call at one level -------------------------------------------------------------
#: Batching rules of users' ops (register_vmap): qualified name -> rule.
USER_RULES: dict[str, Callable[..., Any]] = {}
#: The core ops' rules (filled by ``_rules``): qualified name -> rule.
CORE_RULES: dict[str, Callable[..., Any]] = {}
#: Core ops whose rule runs them per example on purpose (no warning): qualified names.
PER_EXAMPLE: set[str] = set()
#: ``ns::op.out`` overloads -> the functional overload whose rule they reuse.
OUT_VARIANTS: dict[str, str] = {}
#: Ops already warned about (the per-example fallback warns once per op).
_WARNED: set[str] = set()


def _unwrap(level: VmapLevel, a: Any, grad_on: bool) -> tuple[Any, Any]:
    """(value, in_dim) of one argument at ``level``: lists element by element."""
    if isinstance(a, Tensor):
        if type(a) is BatchedTensor and a._level == level.level:
            return a._value, 0
        if grad_on and a.requires_grad:
            return level.expand(a), 0
        return a, None
    if (type(a) is list or type(a) is tuple) and any(isinstance(x, Tensor) for x in a):
        pairs = [_unwrap(level, x, grad_on) for x in a]  # Tensor[]: a dim per element
        return type(a)(p[0] for p in pairs), [p[1] for p in pairs]
    return a, None


def _any_dim(d: Any) -> bool:
    if type(d) is list:
        return any(x is not None for x in d)
    return d is not None


def run_op(level: VmapLevel, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``op(*args, **kwargs)`` at ``level`` (its mode is off the stack while this runs)."""
    grad_on = is_grad_enabled()
    lv = level.level
    batched = False
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            if (type(a) is BatchedTensor and a._level == lv) or (grad_on and a.requires_grad):
                batched = True
                break
        elif (type(a) is list or type(a) is tuple) and any(
            isinstance(x, Tensor)
            and ((type(x) is BatchedTensor and x._level == lv) or (grad_on and x.requires_grad))
            for x in a
        ):
            batched = True
            break
    if not batched:
        return op(*args, **kwargs)
    if not isinstance(op, OpOverload):  # a higher-order operator (cond, map, ...)
        return per_example(level, op, args, kwargs, warn=True)
    name = op.name()
    out_of = OUT_VARIANTS.get(name)
    if out_of is not None and "out" in kwargs:
        # f.out(..., out=o): the functional overload's rule, then a batched copy into o
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        result = run_op(level, functional(out_of), args, rest)
        return run_op(level, functional("oplib::copy_"), (kwargs["out"], result), {})
    rule = USER_RULES.get(name)
    if rule is None:
        rule = CORE_RULES.get(name)
    if rule is None:
        return per_example(level, op, args, kwargs, warn=name not in PER_EXAMPLE)
    pos, kw = _bind(op, name, args, kwargs)
    for k, v in kw.items():
        if isinstance(v, BatchedTensor) and v._level == lv:
            raise NotImplementedError(
                f"vmap: {name} got a batched Tensor for its keyword-only argument {k!r}; "
                "batching rules take batched Tensors as positional arguments only (as "
                "torch's register_vmap)"
            )
    pairs = [_unwrap(level, a, grad_on) for a in pos]
    values = [p[0] for p in pairs]
    in_dims = tuple(p[1] for p in pairs)
    info = VmapInfo(level.batch_size, level.randomness)
    result = call_rule(rule, name, info, in_dims, values, kw)
    originals = {id(v): a for v, a in zip(values, pos, strict=True) if isinstance(a, Tensor)}
    return _wrap_result(level, name, result[0], result[1], originals)


def _stand_in(a: Any, back: dict[int, Any]) -> Any:
    if isinstance(a, Tensor) and type(a) is not Tensor:
        p = Tensor._wrap(a._data)
        back[id(p)] = a
        return p
    if type(a) is list or type(a) is tuple:
        return type(a)(_stand_in(x, back) for x in a)
    return a


def _restore(a: Any, back: dict[int, Any]) -> Any:
    if type(a) is Tensor:
        return back.get(id(a), a)
    if type(a) is list or type(a) is tuple:
        return type(a)(_restore(x, back) for x in a)
    return a


_REQUIRED = object()
#: Per op name: its schema, the defaults of its positional arguments (``_REQUIRED`` where
#: there is none) and which of them are int lists. The schema is compared: an op defined
#: again may differ.
_POSITIONAL: dict[str, tuple[object, tuple[Any, ...], tuple[bool, ...]]] = {}


def _positional(op: OpOverload, name: str) -> tuple[tuple[Any, ...], tuple[bool, ...]]:
    schema = op.schema
    hit = _POSITIONAL.get(name)
    if hit is not None and hit[0] is schema:
        return hit[1], hit[2]
    pos = [a for a in schema.arguments if not a.kwarg_only]
    defaults = tuple((a.default_value if a.has_default else _REQUIRED) for a in pos)
    int_lists = tuple(str(a.type).rstrip("?") in ("int[]", "SymInt[]") for a in pos)
    _POSITIONAL[name] = (schema, defaults, int_lists)
    return defaults, int_lists


def _bind(
    op: OpOverload, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``op.bind`` for arguments that hold BatchedTensors (the binder takes plain Tensors:
    each goes in as a stand-in over its data and comes back out)."""
    if not kwargs:  # positional only (most calls): fill the defaults, the op checks the rest
        defaults, int_lists = _positional(op, name)
        n = len(args)
        if n <= len(defaults) and _REQUIRED not in defaults[n:]:
            pos = [*args, *(list(d) if type(d) is list else d for d in defaults[n:])]
            for i in range(n):
                if int_lists[i] and isinstance(args[i], (int, np.integer)):
                    pos[i] = [int(args[i])]  # an int for an int[] (``sum(x, 1)``)
            return pos, {}
    back: dict[int, Any] = {}
    pos, kw = op.bind(
        tuple(_stand_in(a, back) for a in args), {k: _stand_in(v, back) for k, v in kwargs.items()}
    )
    if not back:
        return pos, kw
    return [_restore(a, back) for a in pos], {k: _restore(v, back) for k, v in kw.items()}


def call_rule(
    rule: Callable[..., Any],
    name: str,
    info: VmapInfo,
    in_dims: tuple[Any, ...],
    values: list[Any],
    kw: dict[str, Any],
) -> tuple[Any, Any]:
    """The rule's ``(output, out_dims)``, checked to be a pair."""
    result = rule(info, in_dims, *values, **kw)
    base = (
        f"vmap: the batching rule of {name} must return two things, an output and out_dims "
        "with a structure compatible with the output (as torch's register_vmap). "
    )
    if not isinstance(result, tuple):
        raise RuntimeError(base + f"Got a {type(result).__name__} instead")
    if len(result) != 2:
        raise RuntimeError(base + f"Got {len(result)} returns instead")
    return result


def structure(x: Any) -> str:
    """A short picture of a nested output or dims structure: ``(*, [*, *])``."""
    if type(x) is tuple or (isinstance(x, tuple) and hasattr(x, "_fields")):
        inner = ", ".join(structure(e) for e in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if type(x) is list:
        return "[" + ", ".join(structure(e) for e in x) + "]"
    if type(x) is dict:
        return "{" + ", ".join(f"{k!r}: {structure(v)}" for k, v in x.items()) + "}"
    return "*"


def _bad_out_dims(name: str, out: Any, out_dims: Any) -> RuntimeError:
    return RuntimeError(
        f"vmap: the batching rule of {name} returned an incompatible (output, out_dims) "
        f"tuple. Expected out_dims={out_dims!r} to be compatible with the structure of "
        f"`output`. out_dims has structure {structure(out_dims)} but output has structure "
        f"{structure(out)}."
    )


def _wrap_result(
    level: VmapLevel, name: str, out: Any, out_dims: Any, originals: dict[int, Any]
) -> Any:
    if not (out_dims is None or type(out_dims) is int or isinstance(out_dims, (list, tuple))):
        raise _bad_out_dims(name, out, out_dims)
    return _wrap_one(level, name, out, out_dims, originals, (out, out_dims))


def _wrap_one(
    level: VmapLevel,
    name: str,
    o: Any,
    d: Any,
    originals: dict[int, Any],
    whole: tuple[Any, Any],
) -> Any:
    if isinstance(o, (list, tuple)):
        if isinstance(d, (list, tuple)):
            if len(d) != len(o):
                raise _bad_out_dims(name, *whole)
            items = [
                _wrap_one(level, name, x, y, originals, whole) for x, y in zip(o, d, strict=True)
            ]
        else:
            items = [_wrap_one(level, name, x, d, originals, whole) for x in o]
        return type(o)(*items) if hasattr(o, "_fields") else type(o)(items)
    if isinstance(d, (list, tuple)):
        raise _bad_out_dims(name, *whole)
    if d is None:
        return o
    if not isinstance(o, Tensor):
        raise RuntimeError(
            f"vmap: the batching rule of {name} returned a {type(o).__name__} with "
            f"out_dim {d}; only Tensors have a batch dim (give None as its out_dim)"
        )
    nd = o.ndim
    if not -nd <= d < nd:
        raise RuntimeError(
            f"vmap: the batching rule of {name} returned out_dim {d} for an output of "
            f"{nd} dims; expected -{nd} <= out_dim < {nd}"
        )
    if d < 0:
        d += nd
    if o.shape[d] != level.batch_size:
        raise RuntimeError(
            f"vmap: the batching rule of {name} returned an output of shape "
            f"{tuple(o.shape)} whose out_dim {d} has size {o.shape[d]}, not the batch "
            f"size {level.batch_size}"
        )
    orig = originals.get(id(o))
    if orig is not None and d == 0 and type(orig) is BatchedTensor:
        return orig  # an in-place op's result is its (batched) input, as torch keeps it
    if d != 0:
        o = o.movedim(d, 0)
    return wrap(o, level.level)


def functional(qualname: str) -> OpOverload:
    ns, _, rest = qualname.partition("::")
    op, _, overload = rest.partition(".")
    packet = getattr(getattr(ops, ns), op)
    ov: OpOverload = getattr(packet, overload or "default")
    return ov


class _Lazy:
    """An op fetched on first use (the core ops are built on first use)."""

    __slots__ = ("_name", "_op")

    def __init__(self, name: str) -> None:
        self._name = name
        self._op: OpOverload | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        op = self._op
        if op is None:
            op = self._op = functional(self._name)
        return op(*args, **kwargs)


_SELECT = _Lazy("oplib::select.int")
_STACK = _Lazy("oplib::stack")


def per_example(
    level: VmapLevel, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, warn: bool
) -> Any:
    """``op`` run once per example and the results stacked (the fallback for an op without
    a batching rule: ``warn`` says so once per op)."""
    is_op = isinstance(op, OpOverload)
    name = op.name() if is_op or hasattr(op, "name") else repr(op)
    if warn and name not in _WARNED:
        _WARNED.add(name)
        fix = (
            "register one with oplib.library.register_vmap"
            if is_op
            else "it is a higher-order operator, whose functions run per example too"
        )
        warnings.warn(
            f"vmap: there is no batching rule for {name}, so it runs once per example "
            f"({level.batch_size} calls) and the results are stacked; {fix} (there is a "
            "performance drop because the op has no batching rule)",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
    grad_on = is_grad_enabled()
    results = []
    firsts = []
    for i in range(level.batch_size):
        args_i = tuple(_pick(level, a, i, grad_on) for a in args)
        kwargs_i = {k: _pick(level, v, i, grad_on) for k, v in kwargs.items()}
        results.append(op(*args_i, **kwargs_i))
        firsts.append(args_i[0] if args_i else None)
    if results and all(r is f for r, f in zip(results, firsts, strict=True)):
        return args[0]  # an in-place op wrote each example into its view of the input
    return _stack_results(level, name, results)


def _pick(level: VmapLevel, a: Any, i: int, grad_on: bool) -> Any:
    """Argument ``a`` for example ``i`` (its batched Tensors selected at ``i``)."""
    if isinstance(a, Tensor):
        if type(a) is BatchedTensor and a._level == level.level:
            return _SELECT(a._value, 0, i)
        if grad_on and a.requires_grad:
            return _SELECT(level.expand(a), 0, i)
        return a
    if type(a) is list or type(a) is tuple:
        return type(a)(_pick(level, x, i, grad_on) for x in a)
    return a


def _stack_results(level: VmapLevel, name: str, results: list[Any]) -> Any:
    first = results[0]
    if isinstance(first, (list, tuple)):
        items = [_stack_results(level, name, [r[k] for r in results]) for k in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    if first is None:
        return None
    if not isinstance(first, Tensor):
        if all(r == first for r in results):
            return first
        raise RuntimeError(
            f"vmap: {name} returned a different {type(first).__name__} for each example "
            f"({results[:3]}...): vmap can only stack Tensors"
        )
    shapes = {tuple(r.shape) for r in results}
    if len(shapes) > 1:
        raise RuntimeError(
            f"vmap: {name} returned outputs of different shapes for different examples "
            f"({sorted(shapes)[:3]}); vmap cannot stack them (an output whose shape depends "
            "on the data cannot be batched)"
        )
    return wrap(_STACK(list(results), 0), level.level)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside oplib_core (the user's op call)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def reset_warnings() -> None:
    """Forget which ops were warned about (the fallback warns once per op per process)."""
    _WARNED.clear()
