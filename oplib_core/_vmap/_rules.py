"""Batching rules of the core ops (``oplib::*``).

A rule gets the op's arguments bound to its schema (defaults filled in) with each batched
Tensor's batch dim first (``in_dims`` says which are batched: 0 or None) and returns
``(output, out_dims)``. Most are one line, since the ops broadcast: pad the batched
arguments to one rank (size-1 dims after the batch dim) and call the op. Reductions and
shape ops shift their dim arguments by one. A few ops run once per example on purpose
(data-dependent shapes, indices that are batched themselves): ``PER_EXAMPLE``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._opset import CORE_OPS
from .._tensor.tensor import Tensor
from ._batched import (
    CORE_RULES,
    OUT_VARIANTS,
    PER_EXAMPLE,
    BatchedTensor,
    VmapInfo,
    VmapLevel,
    current_levels,
    functional,
    per_example,
    wrap,
)

__all__ = ["install"]

Rule = Callable[..., tuple[Any, Any]]


# -- helpers ------------------------------------------------------------------------------
def _rank(x: Any, d: Any) -> int:
    """The logical rank of argument ``x`` with in_dim ``d`` (-1 for a non-Tensor)."""
    if not isinstance(x, Tensor):
        return -1
    return x.ndim - 1 if d is not None else x.ndim


def _pad(x: Tensor, r: int) -> Tensor:
    """Batched ``x`` (batch dim first) with size-1 dims after the batch dim to logical rank
    ``r``, so that it broadcasts per example against the others."""
    lr = x.ndim - 1
    if lr >= r:
        return x
    shape = x.shape
    return x.reshape([shape[0], *([1] * (r - lr)), *shape[1:]])


def _batch(x: Tensor, d: Any, b: int) -> Tensor:
    """``x`` batched: itself when it is, else expanded to the batch (a view)."""
    if d is not None:
        return x
    return x.unsqueeze(0).expand([b, *x.shape])


def _dim(d: int, r: int, name: str) -> int:
    """Logical dim ``d`` of a rank-``r`` argument as a physical dim (batch dim first)."""
    lo, hi = (-1, 0) if r == 0 else (-r, r - 1)
    if not lo <= d <= hi:
        raise IndexError(
            f"{name}: Dimension out of range (expected to be in range of [{lo}, {hi}], but got {d})"
        )
    return (d + r if d < 0 else d) + 1 if r else 1


def _dims(ds: Sequence[int], r: int, name: str) -> list[int]:
    return [_dim(d, r, name) for d in ds]


# -- families -----------------------------------------------------------------------------
def broadcasting(op: Any) -> Rule:
    """Elementwise ops (the op broadcasts): pad batched arguments to one rank, call."""

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        r = max(_rank(a, d) for a, d in zip(args, in_dims, strict=True))
        args = tuple(
            _pad(a, r) if d is not None and isinstance(a, Tensor) else a
            for a, d in zip(args, in_dims, strict=True)
        )
        return op(*args, **kw), 0

    return rule


def inplace(op: Any) -> Rule:
    """In-place ops: ``self`` must be batched when anything else is (torch's rule)."""
    bcast = broadcasting(op)
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        if in_dims[0] is None:
            raise RuntimeError(
                f"vmap: {name}(self, *extra_args) is not possible because there exists a "
                "Tensor in extra_args that has more elements than `self`. This happened due "
                "to it being vmapped over but `self` not being vmapped over in a vmap. "
                "Please try to use out-of-place operators instead of inplace arithmetic."
            )
        return bcast(info, in_dims, *args, **kw)

    return rule


def same(op: Any) -> Rule:
    """Ops that act on the last dims or elementwise with one Tensor: call as is."""

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        return op(*args, **kw), 0

    return rule


def reduction(op: Any) -> Rule:
    """``op(self, dim=None, keepdim=False, ...)``: dims shifted past the batch dim."""
    name = str(op)

    def rule(
        info: VmapInfo,
        in_dims: tuple[Any, ...],
        x: Tensor,
        dim: Any,
        keepdim: bool,
        *rest: Any,
        **kw: Any,
    ) -> tuple[Any, Any]:
        r = x.ndim - 1
        if r == 0:
            # a 0-d example: reduce a size-1 dim (dims [] would reduce the batch too)
            if dim is not None and len(dim) > 0:
                _dims(dim, 0, name)
            out = op(x.unsqueeze(1), [1], keepdim, *rest, **kw)
            return (out.reshape([x.shape[0]]) if keepdim else out), 0
        dims = list(range(1, r + 1)) if dim is None or len(dim) == 0 else _dims(dim, r, name)
        return op(x, dims, keepdim, *rest, **kw), 0

    return rule


def one_dim(op: Any, pos: int = 1, extra: int = 0) -> Rule:
    """``op(self, ..., dim, ...)`` with one int dim at position ``pos`` (counting self);
    ``extra`` more dims of range (``stack``/``unsqueeze`` take rank + 1)."""
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        x = args[0]
        r = x.ndim - 1 + extra
        a = list(args)
        a[pos] = _dim(a[pos], r, name) if r else 1
        return op(*a, **kw), 0

    return rule


def dim_list(op: Any, pos: int = 1) -> Rule:
    """``op(self, dims, ...)`` with a list of dims at ``pos``."""
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        a = list(args)
        a[pos] = _dims(a[pos], args[0].ndim - 1, name)
        return op(*a, **kw), 0

    return rule


def all_batched_dim(op: Any, pos: int) -> Rule:
    """gather/scatter: every Tensor argument batched (unbatched ones expanded), dim shifted."""
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any, **kw: Any) -> tuple[Any, Any]:
        b = info.batch_size
        a: list[Any] = [
            _batch(x, d, b) if isinstance(x, Tensor) else x
            for x, d in zip(args, in_dims, strict=True)
        ]
        a[pos] = _dim(a[pos], a[0].ndim - 1, name)
        return op(*a, **kw), 0

    return rule


# -- one-offs -----------------------------------------------------------------------------
def _matmul(op: Any) -> Rule:
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], a: Tensor, b: Tensor) -> tuple[Any, Any]:
        # both batched (an unbatched one gets a size-1 batch dim, which broadcasts)
        if in_dims[0] is None:
            a = a.unsqueeze(0)
        if in_dims[1] is None:
            b = b.unsqueeze(0)
        ra, rb = a.ndim - 1, b.ndim - 1
        if ra == 0 or rb == 0:
            raise RuntimeError(
                f"matmul: both arguments need at least 1 dimension, got {ra}D and {rb}D tensors"
            )
        squeeze = []
        if ra == 1:
            a = a.unsqueeze(1)  # [B, 1, n]
            squeeze.append(-2)
        if rb == 1:
            b = b.unsqueeze(2)  # [B, n, 1]
            squeeze.append(-1)
        r = max(a.ndim, b.ndim) - 1
        out = op(_pad(a, r), _pad(b, r))
        for d in squeeze:
            out = out.squeeze([d])
        return out, 0

    return rule


def _view_like(op: Any) -> Rule:  # reshape/view(self, shape)
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, shape: Any) -> tuple[Any, Any]:
        return op(x, [x.shape[0], *shape]), 0

    return rule


def _expand_like(op: Any) -> Rule:  # broadcast_to/expand(self, size, ...)
    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, size: Any, *rest: Any, **kw: Any
    ) -> tuple[Any, Any]:
        x = _pad(x, len(size))
        return op(x, [x.shape[0], *size], *rest, **kw), 0

    return rule


def _permute(op: Any) -> Rule:
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, dims: Any) -> tuple[Any, Any]:
        return op(x, [0, *_dims(dims, x.ndim - 1, name)]), 0

    return rule


def _transpose(op: Any) -> Rule:
    name = str(op)

    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, d0: int, d1: int
    ) -> tuple[Any, Any]:
        r = x.ndim - 1
        return op(x, _dim(d0, r, name), _dim(d1, r, name)), 0

    return rule


def _squeeze(op: Any) -> Rule:
    name = str(op)

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, dim: Any) -> tuple[Any, Any]:
        r = x.ndim - 1
        if dim is None:
            dims = [i + 1 for i, s in enumerate(x.shape[1:]) if s == 1]
        else:
            dims = [] if r == 0 else [d for d in _dims(dim, r, name) if x.shape[d] == 1]
        if not dims:
            return x.reshape(list(x.shape)), 0  # a view, nothing to squeeze
        return op(x, dims), 0

    return rule


def _cat_like(op: Any, extra: int) -> Rule:  # cat/stack(tensors, dim)
    name = str(op)

    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], tensors: list[Tensor], dim: int
    ) -> tuple[Any, Any]:
        b = info.batch_size
        ts = [_batch(t, d, b) for t, d in zip(tensors, in_dims[0], strict=True)]
        r = ts[0].ndim - 1 + extra
        return op(ts, _dim(dim, r, name) if r else 1), 0

    return rule


def _movedim(op: Any, many: bool) -> Rule:
    name = str(op)

    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, src: Any, dst: Any
    ) -> tuple[Any, Any]:
        r = x.ndim - 1
        if many:
            return op(x, _dims(src, r, name), _dims(dst, r, name)), 0
        return op(x, _dim(src, r, name), _dim(dst, r, name)), 0

    return rule


def _roll(op: Any) -> Rule:
    name = str(op)

    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, shifts: Any, dims: Any
    ) -> tuple[Any, Any]:
        if len(dims) == 0:  # roll the flattened example, keep its shape
            flat = x.reshape([x.shape[0], -1])
            return op(flat, shifts, [1]).reshape(list(x.shape)), 0
        return op(x, shifts, _dims(dims, x.ndim - 1, name)), 0

    return rule


def _repeat(op: Any, tile: bool) -> Rule:
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, reps: Any) -> tuple[Any, Any]:
        reps = list(reps)
        r = x.ndim - 1
        if tile and len(reps) < r:
            reps = [1] * (r - len(reps)) + reps
        x = _pad(x, len(reps))
        return op(x, [1, *reps]), 0

    return rule


def _max_all(amax: Any) -> Rule:  # max/min(self): amax/amin over the example's dims
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor) -> tuple[Any, Any]:
        r = x.ndim - 1
        if r == 0:
            return x.clone(), 0
        return amax(x, list(range(1, r + 1))), 0

    return rule


def _fill_tensor(op: Any) -> Rule:  # fill_.Tensor(self, value): value 0-d per example
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, v: Tensor) -> tuple[Any, Any]:
        if in_dims[0] is None:
            return inplace(op)(info, in_dims, x, v)
        if in_dims[1] is None:
            return op(x, v), 0
        x.copy_(v.reshape([v.shape[0], *([1] * (x.ndim - 1))]))
        return x, 0

    return rule


def _adjacent(indices: Sequence[Any]) -> bool:
    """Whether the non-None indices are next to each other (then ``x[:, *indices]`` puts
    their result dims where ``x[*indices]`` does, after the batch dim)."""
    where = [i for i, t in enumerate(indices) if t is not None]
    return not where or where[-1] - where[0] + 1 == len(where)


def _index(op: Any) -> Rule:  # index.Tensor(self, indices)
    def rule(info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, indices: Any) -> tuple[Any, Any]:
        unbatched = not any(d is not None for d in in_dims[1])
        if in_dims[0] is not None and unbatched and _adjacent(indices):
            return op(x, [None, *indices]), 0
        return per_example_rule(op)(info, in_dims, x, indices)

    return rule


def _index_put(op: Any, inplace_: bool) -> Rule:  # index_put(self, indices, values, acc)
    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, indices: Any, values: Any, acc: bool
    ) -> tuple[Any, Any]:
        if inplace_ and in_dims[0] is None:
            return inplace(op)(info, in_dims, x, indices, values, acc)
        unbatched = not any(d is not None for d in in_dims[1]) and in_dims[2] is None
        if in_dims[0] is not None and unbatched and _adjacent(indices):
            return op(x, [None, *indices], values, acc), 0
        return per_example_rule(op)(info, in_dims, x, indices, values, acc)

    return rule


def _index_select(op: Any) -> Rule:
    name = str(op)

    def rule(
        info: VmapInfo, in_dims: tuple[Any, ...], x: Tensor, dim: int, index: Tensor
    ) -> tuple[Any, Any]:
        if in_dims[2] is None and in_dims[0] is not None:
            return op(x, _dim(dim, x.ndim - 1, name), index), 0
        return per_example_rule(op)(info, in_dims, x, dim, index)

    return rule


def per_example_rule(op: Any) -> Rule:
    """A rule that runs ``op`` once per example on the values (rebatched first)."""

    def rule(info: VmapInfo, in_dims: tuple[Any, ...], *args: Any) -> tuple[Any, Any]:
        # The values are batch-first; run them as a level of their own, just below this one.
        level = VmapLevel(-1 - len(current_levels()), info.batch_size, info.randomness)

        wrapped = tuple(_rewrap(a, d, level.level) for a, d in zip(args, in_dims, strict=True))
        out = per_example(level, op, wrapped, {}, warn=False)
        return _values(out, level.level), 0

    return rule


def _rewrap(a: Any, d: Any, level: int) -> Any:
    if type(d) is list:
        return type(a)(_rewrap(x, y, level) for x, y in zip(a, d, strict=True))
    return wrap(a, level) if d is not None else a


def _values(out: Any, level: int) -> Any:
    if isinstance(out, (list, tuple)):
        return type(out)(_values(o, level) for o in out)
    if type(out) is BatchedTensor and out._level == level:
        return out._value
    return out


# -- the table ----------------------------------------------------------------------------
def _op(qualname: str) -> Any:
    return functional(qualname)


_SPECIAL: dict[str, Callable[[Any], Rule]] = {
    "oplib::matmul": _matmul,
    "oplib::transpose": _transpose,
    "oplib::permute": _permute,
    "oplib::reshape": _view_like,
    "oplib::view": _view_like,
    "oplib::broadcast_to": _expand_like,
    "oplib::expand": _expand_like,
    "oplib::unsqueeze": lambda op: one_dim(op, 1, extra=1),
    "oplib::squeeze": _squeeze,
    "oplib::cat": lambda op: _cat_like(op, 0),
    "oplib::stack": lambda op: _cat_like(op, 1),
    "oplib::select.int": one_dim,
    "oplib::slice.Tensor": one_dim,
    "oplib::narrow": one_dim,
    "oplib::index.Tensor": _index,
    "oplib::index_select": _index_select,
    "oplib::gather": lambda op: all_batched_dim(op, 1),
    "oplib::scatter.src": lambda op: all_batched_dim(op, 1),
    "oplib::scatter.value": lambda op: all_batched_dim(op, 1),
    "oplib::scatter_add": lambda op: all_batched_dim(op, 1),
    "oplib::pad": same,
    "oplib::tril": same,
    "oplib::triu": same,
    "oplib::clone": same,
    "oplib::astype": same,
    "oplib::flip": dim_list,
    "oplib::roll": _roll,
    "oplib::repeat": lambda op: _repeat(op, tile=False),
    "oplib::tile": lambda op: _repeat(op, tile=True),
    "oplib::split.Tensor": lambda op: one_dim(op, 2),
    "oplib::split_with_sizes": lambda op: one_dim(op, 2),
    "oplib::chunk": lambda op: one_dim(op, 2),
    "oplib::tensor_split.sections": lambda op: one_dim(op, 2),
    "oplib::tensor_split.indices": lambda op: one_dim(op, 2),
    "oplib::movedim.int": lambda op: _movedim(op, many=False),
    "oplib::movedim.intlist": lambda op: _movedim(op, many=True),
    "oplib::max": lambda op: _max_all(_op("oplib::amax")),
    "oplib::min": lambda op: _max_all(_op("oplib::amin")),
    "oplib::max.dim": one_dim,
    "oplib::min.dim": one_dim,
    "oplib::sum": reduction,
    "oplib::mean": reduction,
    "oplib::amax": reduction,
    "oplib::amin": reduction,
    "oplib::fill_.Tensor": _fill_tensor,
    "oplib::index_put": lambda op: _index_put(op, inplace_=False),
    "oplib::index_put_": lambda op: _index_put(op, inplace_=True),
}

#: oplib:: ops the dispatcher layer defines outside CORE_OPS.
_EXTRA: dict[str, Callable[[Any], Rule]] = {"oplib::_narrow": one_dim, "oplib::_to_copy": same}

#: Ops that run once per example on purpose: their output shape depends on the data.
_LOOPED = ("oplib::masked_select",)


class _LazyRule:
    """A rule made on first use (making it looks the op up, which builds it)."""

    __slots__ = ("_make", "_name", "_rule")

    def __init__(self, name: str, make: Callable[[Any], Rule]) -> None:
        self._name = name
        self._make = make
        self._rule: Rule | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        rule = self._rule
        if rule is None:
            rule = self._rule = self._make(_op(self._name))
        return rule(*args, **kwargs)


def _name_of(schema: str) -> str:
    return schema.partition("(")[0]


def install() -> None:
    """Fill the core rule table (once, on the first vmap call)."""
    if CORE_RULES:
        return
    for core in CORE_OPS:
        name = _name_of(core.schema)
        if core.schema.find("Tensor(a!) out") >= 0 and "out" in name.rpartition(".")[2]:
            base, _, overload = name.rpartition(".")
            OUT_VARIANTS[name] = base if overload == "out" else f"{base}.{overload[:-4]}"
            continue
        if name in _LOOPED:
            PER_EXAMPLE.add(name)
            continue
        make = _SPECIAL.get(name)
        if make is None:
            tags = {t.value for t in core.tags}
            if "factory" in tags:
                continue  # no Tensor argument: never batched
            if "(a!)" in core.schema:
                make = inplace
            elif "pointwise" in tags:
                make = broadcasting
            else:  # a core op added without a rule: it runs per example, with the warning
                continue
        CORE_RULES[name] = _LazyRule(name, make)
    for name, make in _EXTRA.items():
        CORE_RULES[name] = _LazyRule(name, make)
