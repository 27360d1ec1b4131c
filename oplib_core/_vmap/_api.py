"""``oplib.vmap``: a function over one example run over a batch at once (torch.func.vmap)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._tensor.tensor import Tensor
from ..backends import TABLE
from ..ops import ops
from . import _grad as _grad  # gives BatchedTensor its grad()/backward() hooks
from ._batched import BatchedTensor, VmapLevel, current_levels, structure, wrap
from ._rules import install

__all__ = ["vmap"]

_RANDOMNESS = ("error", "different", "same")


def vmap(
    func: Callable[..., Any],
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable[..., Any]:
    """``func``, which takes and returns one example, made to take and return a batch.

    ``in_dims`` says which dim of each input is the batch dim: an int for every input, or a
    tuple with one entry per positional input (an int, None for an input that is not
    batched, or a nested tuple/list/dict matching a nested input). ``out_dims`` says where
    the batch dim goes in each output, the same way. Inside, ``func`` sees one example's
    shape; each op it calls runs its batching rule once on the whole batch (ops without a
    rule run once per example, with a warning). ``chunk_size`` runs the batch in chunks of
    that many examples. ``randomness`` is handed to batching rules (``info.randomness``).

    Keyword arguments of the returned function are passed to ``func`` unbatched, as torch
    does. ``oplib.autograd.grad`` may be called inside ``func`` (per-example gradients) and
    around the vmapped function; see docs/vmap.md for what is not supported.
    """
    if randomness not in _RANDOMNESS:
        raise RuntimeError(
            "Only allowed values for randomness are 'error', 'different', or 'same'. "
            f"Got {randomness}"
        )
    if chunk_size is not None and (type(chunk_size) is not int or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
    _check_out_dims_type(func, out_dims)

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return _call(func, in_dims, out_dims, randomness, chunk_size, args, kwargs)

    return wrapped


def _name(func: Any) -> str:
    return getattr(func, "__name__", None) or repr(func)


def _dims_ok(d: Any) -> bool:
    if d is None or type(d) is int:
        return True
    if isinstance(d, (tuple, list)):
        return all(_dims_ok(x) for x in d)
    return False


def _check_out_dims_type(func: Any, out_dims: Any) -> None:
    if not _dims_ok(out_dims):
        raise ValueError(
            f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must be an int, None "
            "or a python collection of ints representing where in the outputs the vmapped "
            "dimension should appear."
        )


def _is_array(x: Any) -> bool:
    return isinstance(x, Tensor) or TABLE.for_type(type(x)) is not None


def _leaves(x: Any, d: Any, out: list[tuple[Any, Any]], bad: Callable[[], Exception]) -> None:
    """Collect ``(leaf, in_dim)`` of input ``x`` whose dims are ``d``."""
    if d is None or type(d) is int:
        if isinstance(x, (tuple, list)):
            for e in x:
                _leaves(e, d, out, bad)
        elif type(x) is dict:
            for e in x.values():
                _leaves(e, d, out, bad)
        else:
            out.append((x, d))
        return
    if isinstance(d, (tuple, list)) and isinstance(x, (tuple, list)) and len(d) == len(x):
        for e, dd in zip(x, d, strict=True):
            _leaves(e, dd, out, bad)
        return
    if type(d) is dict and type(x) is dict and d.keys() == x.keys():
        for k in x:
            _leaves(x[k], d[k], out, bad)
        return
    raise bad()


def _rebuild(x: Any, leaf: Callable[[Any], Any]) -> Any:
    """``x`` with each leaf replaced by ``leaf(it)`` (leaves in ``_leaves``' order)."""
    if isinstance(x, (tuple, list)):
        items = [_rebuild(e, leaf) for e in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if type(x) is dict:
        return {k: _rebuild(v, leaf) for k, v in x.items()}
    return leaf(x)


def _call(
    func: Callable[..., Any],
    in_dims: Any,
    out_dims: Any,
    randomness: str,
    chunk_size: int | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    name = _name(func)

    def where() -> str:  # made only for an error message
        return f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"

    if not args:
        raise ValueError(
            f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add inputs, or you "
            "are trying to vmap over a function with no inputs. The latter is unsupported."
        )
    if not (type(in_dims) is int or type(in_dims) is tuple):
        raise ValueError(
            f"{where()}: expected `in_dims` to be int or a (potentially nested) tuple matching "
            f"the structure of inputs, got: {type(in_dims)}."
        )

    def bad() -> ValueError:
        return ValueError(
            f"{where()}: in_dims is not compatible with the structure of `inputs`. in_dims has "
            f"structure {structure(in_dims)} but inputs has structure {structure(args)}."
        )

    leaves: list[tuple[Any, Any]] = []
    if type(in_dims) is tuple and len(in_dims) != len(args):
        raise bad()
    _leaves(args, in_dims, leaves, bad)
    sizes = []
    native = True
    dims: list[Any] = []
    for x, d in leaves:
        if d is None:
            dims.append(None)
            continue
        if not _is_array(x):
            raise ValueError(
                f"{where()}: Got in_dim={d} for an input but the input is of type {type(x)}. We "
                "cannot vmap over non-Tensor arguments, please use None as the respective in_dim"
            )
        native = native and not isinstance(x, Tensor)
        nd = x.ndim
        if not -nd <= d < nd:
            raise ValueError(
                f"{where()}: Got in_dim={d} for some input, but that input is a Tensor of "
                f"dimensionality {nd} so expected in_dim to satisfy -{nd} <= in_dim < {nd}."
            )
        d = d + nd if d < 0 else d
        dims.append(d)
        sizes.append(x.shape[d])
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            "vmap: Expected all tensors to have the same size in the mapped dimension, got "
            f"sizes {sizes} for the mapped dimension"
        )
    batch = sizes[0]
    if chunk_size is not None and chunk_size < batch:
        return _chunked(
            func, name, leaves, dims, args, kwargs, out_dims, randomness, batch, chunk_size, native
        )
    return _once(func, name, dims, args, kwargs, out_dims, randomness, batch, native)


def _once(
    func: Callable[..., Any],
    name: str,
    dims: list[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out_dims: Any,
    randomness: str,
    batch: int,
    native: bool,
) -> Any:
    install()
    level = len(current_levels()) + 1
    it = iter(dims)

    def batched(x: Any) -> Any:
        d = next(it)
        if d is None:
            return x
        t = x if isinstance(x, Tensor) else Tensor._wrap(x)
        return wrap(t if d == 0 else t.movedim(d, 0), level)

    new_args = _rebuild(args, batched)
    mode = VmapLevel(level, batch, randomness)
    with mode:
        out = func(*new_args, **kwargs)
    return _outputs(out, out_dims, name, level, batch, native)


class _Out:
    """What unwrapping one vmap call's outputs needs (no closures: a recursive closure is a
    reference cycle, and the outputs would wait for the garbage collector)."""

    __slots__ = ("batch", "level", "name", "native", "out", "out_dims")

    def __init__(
        self, out: Any, out_dims: Any, name: str, level: int, batch: int, native: bool
    ) -> None:
        self.out = out
        self.out_dims = out_dims
        self.name = name
        self.level = level
        self.batch = batch
        self.native = native

    def bad(self) -> ValueError:
        return ValueError(
            f"vmap({self.name}, ..., out_dims={self.out_dims})(<inputs>): out_dims is not "
            "compatible with the structure of `outputs`. out_dims has structure "
            f"{structure(self.out_dims)} but outputs has structure {structure(self.out)}."
        )

    def one(self, o: Any, d: Any) -> Any:
        name = self.name
        if isinstance(d, (tuple, list)):
            if not isinstance(o, (tuple, list)) or len(o) != len(d):
                raise self.bad()
            items = [self.one(x, y) for x, y in zip(o, d, strict=True)]
            return type(o)(*items) if hasattr(o, "_fields") else type(o)(items)
        if isinstance(o, (tuple, list)):
            items = [self.one(x, d) for x in o]
            return type(o)(*items) if hasattr(o, "_fields") else type(o)(items)
        if type(o) is dict:
            return {k: self.one(v, d) for k, v in o.items()}
        ours = type(o) is BatchedTensor and o._level == self.level
        if d is None:
            if ours:
                raise ValueError(
                    f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim "
                    "is None"
                )
            return o
        if not isinstance(o, Tensor):
            raise ValueError(
                f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(o)}. "
                "Did you mean to set out_dims= to None for output?"
            )
        nd = o.ndim + 1
        if not -nd <= d < nd:
            raise IndexError(
                f"vmap({name}, ..., out_dims={self.out_dims}): Dimension out of range "
                f"(expected to be in range of [{-nd}, {nd - 1}], but got {d})"
            )
        d = d + nd if d < 0 else d
        if type(o) is BatchedTensor and o._level == self.level:
            v = o._value
            r = v if d == 0 else v.movedim(0, d)
        else:  # the same for every example: broadcast it along the batch dim
            v = o.unsqueeze(d)
            size = list(v.shape)
            size[d] = self.batch
            r = v.expand(size)
        return r.native if self.native else r


def _outputs(out: Any, out_dims: Any, name: str, level: int, batch: int, native: bool) -> Any:
    return _Out(out, out_dims, name, level, batch, native).one(out, out_dims)


def _chunked(
    func: Callable[..., Any],
    name: str,
    leaves: list[tuple[Any, Any]],
    dims: list[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out_dims: Any,
    randomness: str,
    batch: int,
    chunk_size: int,
    native: bool,
) -> Any:
    """Run the batch ``chunk_size`` examples at a time and join the outputs."""
    results = []
    for start in range(0, batch, chunk_size):
        n = min(chunk_size, batch - start)
        it = iter(dims)

        def part(x: Any, start: int = start, n: int = n, it: Any = it) -> Any:
            d = next(it)
            if d is None:
                return x
            t = x if isinstance(x, Tensor) else Tensor._wrap(x)
            return t.narrow(d, start, n)

        chunk_args = _rebuild(args, part)
        results.append(_once(func, name, dims, chunk_args, kwargs, out_dims, randomness, n, False))
    return _join(results, out_dims, native)


def _join(results: list[Any], out_dims: Any, native: bool) -> Any:
    cat = ops.oplib.cat
    first = results[0]
    if isinstance(first, (tuple, list)):
        dims = out_dims if isinstance(out_dims, (tuple, list)) else [out_dims] * len(first)
        items = [_join([r[k] for r in results], dims[k], native) for k in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    if type(first) is dict:
        return {k: _join([r[k] for r in results], out_dims, native) for k in first}
    if out_dims is None:
        return first
    out = cat(list(results), out_dims)
    return out.native if native else out
