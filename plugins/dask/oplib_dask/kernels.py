"""The ``dask`` kernels: not per-op code, but graph builders that map any op onto chunks.

A kernel made by :func:`make_kernel` receives the call's native arguments (dask arrays,
numpy arrays, scalars) and returns a lazy dask array whose tasks call the op again,
through oplib's dispatcher, on each chunk:

- ``pointwise``: ``blockwise`` over the broadcast output, one task per output block;
- ``reduction`` (core ``sum``/``mean``/``amax``/``amin``): ``dask.array.reduction`` with the
  op as chunk step and a combine/aggregate step (``mean`` sums, then divides once);
- ``reduction`` (any other op tagged ``Tag.reduction``): the reduced dims are rechunked to
  one chunk and the op runs per block;
- ``matmul``: dask's blocked algorithm, each task summing products of block pairs.

Output ``meta`` comes from the op's fake kernel (:mod:`.meta`), so kernels never run on
empty arrays. Dask itself is imported inside the builders, never at module import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import oplib_core
from oplib_core import NoKernelError, OpOverload, backends
from oplib_dask.meta import chunk_device, fake_output, is_dask, meta_like
from oplib_dask.oprefs import OpRef, providers_of

__all__ = ["CORE_REDUCTIONS", "KINDS", "make_kernel", "single_chunk"]

#: Core reductions with a known combine step.
CORE_REDUCTIONS = ("oplib::sum", "oplib::mean", "oplib::amax", "oplib::amin")
KINDS = ("pointwise", "reduction", "matmul")


# -- what runs in the tasks -------------------------------------------------------------------
def _kwargs_token(kwargs: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in kwargs.items()))


class ChunkCall:
    """``op(*blocks, **kwargs)`` on one block of each input (pointwise, per-block)."""

    __slots__ = ("kwargs", "op")

    def __init__(self, op: OpRef, kwargs: dict[str, Any]) -> None:
        self.op = op
        self.kwargs = kwargs

    def __call__(self, *blocks: Any) -> Any:
        return self.op.get()(*blocks, **self.kwargs)

    def __reduce__(self) -> Any:
        return (ChunkCall, (self.op, self.kwargs))

    def __dask_tokenize__(self) -> Any:
        return ("oplib-chunk", self.op.qualname, _kwargs_token(self.kwargs))


class Item:
    """Output ``index`` of a multi-output op's block (a tuple of arrays), as a block."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, outputs: Any) -> Any:
        return outputs[self.index]

    def __reduce__(self) -> Any:
        return (Item, (self.index,))

    def __dask_tokenize__(self) -> Any:
        return ("oplib-item", self.index)


class Reduce:
    """A chunk/combine/aggregate step of a core reduction: ``op(block, axis, keepdims)``.

    ``computing_meta=True`` (dask asking for the output type) returns ``meta`` without
    calling the op on an empty array."""

    __slots__ = ("kwargs", "meta", "op")

    def __init__(self, op: OpRef, kwargs: dict[str, Any], meta: Any) -> None:
        self.op = op
        self.kwargs = kwargs
        self.meta = meta

    def __call__(
        self, block: Any, axis: tuple[int, ...], keepdims: bool, computing_meta: bool = False
    ) -> Any:
        if computing_meta:
            return self.meta
        return self.op.get()(block, list(axis), keepdims, **self.kwargs)

    def __reduce__(self) -> Any:
        return (Reduce, (self.op, self.kwargs, self.meta))

    def __dask_tokenize__(self) -> Any:
        return ("oplib-reduce", self.op.qualname, _kwargs_token(self.kwargs))


class MeanAggregate(Reduce):
    """``mean``'s last step: sum the partial sums, divide by the element count, cast."""

    __slots__ = ("cast", "count", "div", "dtype")

    def __init__(
        self, op: OpRef, meta: Any, count: int, dtype: np.dtype, div: OpRef, cast: OpRef
    ) -> None:
        super().__init__(op, {}, meta)
        self.count = count
        self.dtype = dtype
        self.div = div
        self.cast = cast

    def __call__(
        self, block: Any, axis: tuple[int, ...], keepdims: bool, computing_meta: bool = False
    ) -> Any:
        if computing_meta:
            return self.meta
        total = self.op.get()(block, list(axis), keepdims)
        out = self.div.get()(total, self.count)
        return out if out.dtype == self.dtype else self.cast.get()(out, self.dtype)

    def __reduce__(self) -> Any:
        return (MeanAggregate, (self.op, self.meta, self.count, self.dtype, self.div, self.cast))

    def __dask_tokenize__(self) -> Any:
        return ("oplib-mean", self.count, str(self.dtype))


class MatmulBlocks:
    """One output block of a blocked matmul: the sum over the contracted dim of
    ``matmul(a_k, b_k)``, with ``add`` accumulating."""

    __slots__ = ("add", "op")

    def __init__(self, op: OpRef, add: OpRef) -> None:
        self.op = op
        self.add = add

    def __call__(self, a_blocks: Any, b_blocks: Any) -> Any:
        if not isinstance(a_blocks, list):
            a_blocks, b_blocks = [a_blocks], [b_blocks]
        matmul, add = self.op.get(), self.add.get()
        out = matmul(a_blocks[0], b_blocks[0])
        for a, b in zip(a_blocks[1:], b_blocks[1:], strict=True):
            out = add(out, matmul(a, b))
        return out

    def __reduce__(self) -> Any:
        return (MatmulBlocks, (self.op, self.add))

    def __dask_tokenize__(self) -> Any:
        return ("oplib-matmul", self.op.qualname)


# -- graph construction -----------------------------------------------------------------------
class Plan:
    """One op as the dask backend sees it: the overload, and what a task must carry."""

    __slots__ = ("_refs", "kind", "qualname")

    def __init__(self, qualname: str, kind: str) -> None:
        self.qualname = qualname
        self.kind = kind
        self._refs: dict[str, OpRef] = {}

    @property
    def op(self) -> OpOverload:
        return oplib_core.lookup(self.qualname)

    def ref(self, device_type: str, qualname: str | None = None) -> OpRef:
        """The ``OpRef`` tasks call for chunks on ``device_type`` (an error now, not on the
        worker, if no kernel serves those chunks)."""
        qualname = qualname or self.qualname
        key = f"{qualname}@{device_type}"
        op = oplib_core.lookup(qualname)
        ref = self._refs.get(key)
        if ref is None or ref.get() is not op:  # redefined since: plan again
            backend = backends.get(device_type)
            kernels = tuple(fn for _, fn, _ in op.resolution_steps(backend) if fn is not None)
            if not kernels:
                raise NoKernelError(
                    f"{qualname}(): dask array chunks are {device_type} arrays, but the op has "
                    f"no kernel for {device_type!r}, so its chunks cannot be computed. Register "
                    f"one with oplib.register_kernel({qualname!r}, {device_type!r}).",
                    op=qualname,
                    key=backend.key,
                )
            ref = self._refs[key] = OpRef(qualname, providers_of(op, kernels), op)
        return ref

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        build = _BUILDERS[self.kind]
        if self.kind == "reduction" and self.qualname not in CORE_REDUCTIONS:
            build = _generic_reduction
        return build(self, args, kwargs)


def _first_dask(qualname: str, values: Any) -> Any:
    for v in values:
        if is_dask(v):
            return v
        if isinstance(v, (list, tuple)):
            for item in v:
                if is_dask(item):
                    return item
    raise TypeError(f"{qualname}(): the dask backend was called without a dask array")


def _as_dask(x: Any) -> Any:
    """A dask array for an array argument (numpy arrays become one-chunk dask arrays)."""
    if is_dask(x):
        return x
    import dask.array as da

    return da.from_array(x, chunks=x.shape)


def _is_array(x: Any) -> bool:
    return is_dask(x) or (isinstance(x, np.ndarray) and x.ndim > 0)


def _tensor_returns(plan: Plan, what: str) -> int:
    """How many Tensors the op returns, when it returns one or more plain ``Tensor``s (what
    pointwise mapping can split per block), else ``NoKernelError``."""
    returns = plan.op.schema.returns
    if not returns or any(str(r.type) != "Tensor" for r in returns):
        raise NoKernelError(
            f"{plan.qualname}(): the dask backend maps {what} ops returning Tensors onto "
            f"chunks; this one returns ({', '.join(str(r.type) for r in returns)}). Register "
            f"a dask kernel with oplib.register_kernel({plan.qualname!r}, 'dask').",
            op=plan.qualname,
            key="Dask",
        )
    return len(returns)


def _single_tensor_return(plan: Plan, what: str) -> None:
    returns = plan.op.schema.returns
    if len(returns) != 1 or str(returns[0].type) != "Tensor":
        raise NoKernelError(
            f"{plan.qualname}(): the dask backend maps {what} ops returning one Tensor onto "
            f"chunks; this one returns ({', '.join(str(r.type) for r in returns)}). Register "
            f"a dask kernel with oplib.register_kernel({plan.qualname!r}, 'dask').",
            op=plan.qualname,
            key="Dask",
        )


def _check_ndim(plan: Plan, fake: Any, ndim: int, what: str) -> None:
    if fake is not None and len(fake.shape) != ndim:
        raise ValueError(
            f"{plan.qualname}(): its fake kernel gives a {len(fake.shape)}-d output, but as "
            f"a {what} op its output must be {ndim}-d; check its tags (Tag.{what}) or its fake "
            "kernel"
        )


def _pointwise(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import dask.array as da

    qualname = plan.qualname
    nout = _tensor_returns(plan, "pointwise")
    if any(_is_array(v) for v in kwargs.values()):
        raise NoKernelError(
            f"{qualname}(): the dask backend maps pointwise ops whose keyword-only arguments "
            f"are not arrays; register a dask kernel with oplib.register_kernel({qualname!r}, "
            "'dask')",
            op=qualname,
            key="Dask",
        )
    first = _first_dask(qualname, args)
    device = chunk_device(first)
    ndim = max(a.ndim for a in args if _is_array(a))
    pairs: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)) and any(_is_array(v) for v in a):
            raise NoKernelError(
                f"{qualname}(): the dask backend maps pointwise ops over Tensor arguments, "
                "not Tensor[] lists; register a dask kernel with "
                f"oplib.register_kernel({qualname!r}, 'dask')",
                op=qualname,
                key="Dask",
            )
        if _is_array(a):
            a = _as_dask(a)
            pairs += [a, tuple(range(ndim - a.ndim, ndim))]
        else:
            pairs += [a, None]
    fake = fake_output(plan.op, args, kwargs, device)
    if nout > 1:
        return _pointwise_outputs(plan, first, ndim, pairs, kwargs, fake)
    _check_ndim(plan, fake, ndim, "pointwise")
    meta = None if fake is None else meta_like(first, ndim, fake.dtype)
    return da.blockwise(
        ChunkCall(plan.ref(device.type), kwargs),
        tuple(range(ndim)),
        *pairs,
        dtype=None if fake is None else fake.dtype,
        meta=meta,
        token=_token(qualname),
    )


def _pointwise_outputs(
    plan: Plan, first: Any, ndim: int, pairs: list[Any], kwargs: dict[str, Any], fake: Any
) -> tuple[Any, ...]:
    """A multi-output pointwise op chunk-wise: one task per block computes every output
    (a tuple), and each output is that tuple's item, block by block. Every output must be
    aligned with the broadcast input (the fake kernel's shapes say so)."""
    import dask.array as da

    qualname = plan.qualname
    if fake is None:
        raise NoKernelError(
            f"{qualname}(): the dask backend maps an op with several outputs onto chunks "
            "only with each output's dtype and shape from its fake kernel; register one with "
            f"oplib.register_fake({qualname!r})",
            op=qualname,
            key="Fake",
        )
    shapes = {tuple(f.shape) for f in fake}
    if len(shapes) != 1:
        raise NoKernelError(
            f"{qualname}(): its outputs have shapes {sorted(shapes)} by its fake kernel; the "
            "dask backend maps a multi-output op onto chunks only when every output is "
            "aligned with the broadcast input. Register a dask kernel with "
            f"oplib.register_kernel({qualname!r}, 'dask').",
            op=qualname,
            key="Dask",
        )
    for f in fake:
        _check_ndim(plan, f, ndim, "pointwise")
    ind = tuple(range(ndim))
    blocks = da.blockwise(
        ChunkCall(plan.ref(chunk_device(first).type), kwargs),
        ind,
        *pairs,
        meta=np.empty((0,) * ndim, dtype=object),
        token=_token(qualname),
    )
    return tuple(
        da.blockwise(
            Item(i),
            ind,
            blocks,
            ind,
            dtype=f.dtype,
            meta=meta_like(first, ndim, f.dtype),
            token=f"{_token(qualname)}-{i}",
        )
        for i, f in enumerate(fake)
    )


def _token(qualname: str) -> str:
    return qualname.replace("::", ".")


def _axes(qualname: str, dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return tuple(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    n = max(ndim, 1)
    for d in dims:
        if not -n <= d < n:
            raise IndexError(
                f"{qualname}(): dimension out of range (expected to be in range of "
                f"[{-n}, {n - 1}], but got {d})"
            )
    return tuple(sorted({d % n for d in dims})) if ndim else ()


def _core_reduction(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import dask.array as da

    qualname = plan.qualname
    x, dim, keepdim = args
    x = _as_dask(x)
    device = chunk_device(x)
    fake = fake_output(plan.op, (x, dim, keepdim), kwargs, device)
    axes = _axes(qualname, dim, x.ndim)
    if fake is None:  # core ops have fake kernels; this is a core op without one
        raise NoKernelError(
            f"{qualname}(): the dask backend needs its fake kernel", op=qualname, key="Fake"
        )
    out_dtype = fake.dtype
    meta = meta_like(x, len(fake.shape), out_dtype)
    block_meta = meta_like(x, x.ndim, out_dtype)
    if qualname == "oplib::mean":
        total = plan.ref(device.type, "oplib::sum")
        count = 1
        for a in axes:
            count *= int(x.shape[a])
        chunk = Reduce(total, {"dtype": kwargs.get("dtype")}, block_meta)
        combine: Reduce = Reduce(total, {}, block_meta)
        aggregate: Reduce = MeanAggregate(
            total,
            meta,
            count,
            out_dtype,
            plan.ref(device.type, "oplib::div.Scalar"),
            plan.ref(device.type, "oplib::astype"),
        )
    else:
        ref = plan.ref(device.type)
        chunk = Reduce(ref, dict(kwargs), block_meta)
        combine = aggregate = Reduce(ref, {"dtype": None} if kwargs else {}, block_meta)
    return da.reduction(
        x,
        chunk,
        aggregate,
        combine=combine,
        axis=axes,
        keepdims=keepdim,
        dtype=out_dtype,
        meta=meta,
        name=_token(qualname),
    )


def _generic_reduction(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Any op tagged ``Tag.reduction``: rechunk the reduced dims to one chunk, then run the
    op per block (correct for every reduction; memory per task grows with those dims)."""
    import dask.array as da

    qualname = plan.qualname
    _single_tensor_return(plan, "reduction")
    schema = plan.op.schema
    names = [a.name for a in schema.arguments if not a.kwarg_only]
    bound = dict(zip(names, args, strict=False)) | kwargs
    if "dim" not in bound:
        raise NoKernelError(
            f"{qualname}(): the dask backend maps Tag.reduction ops with a 'dim' argument "
            f"(and optionally 'keepdim'); this schema has neither. Register a dask kernel "
            f"with oplib.register_kernel({qualname!r}, 'dask').",
            op=qualname,
            key="Dask",
        )
    arrays = [i for i, a in enumerate(args) if _is_array(a)]
    if len(arrays) != 1 or any(_is_array(v) for v in kwargs.values()):
        raise NoKernelError(
            f"{qualname}(): the dask backend maps Tag.reduction ops over one array argument; "
            f"register a dask kernel with oplib.register_kernel({qualname!r}, 'dask').",
            op=qualname,
            key="Dask",
        )
    x = _as_dask(args[arrays[0]])
    device = chunk_device(x)
    axes = _axes(qualname, bound["dim"], x.ndim)
    keepdim = bool(bound.get("keepdim", False))
    fake = fake_output(plan.op, args, kwargs, device)
    out_ndim = x.ndim if keepdim else x.ndim - len(axes)
    _check_ndim(plan, fake, out_ndim, "reduction")
    x = x.rechunk({a: -1 for a in axes})
    in_ind = tuple(range(x.ndim))
    out_ind = in_ind if keepdim else tuple(i for i in in_ind if i not in axes)
    pairs: list[Any] = []
    for i, a in enumerate(args):
        pairs += [x, in_ind] if i == arrays[0] else [a, None]
    return da.blockwise(
        ChunkCall(plan.ref(device.type), kwargs),
        out_ind,
        *pairs,
        concatenate=True,
        adjust_chunks={a: 1 for a in axes} if keepdim else None,
        dtype=None if fake is None else fake.dtype,
        meta=None if fake is None else meta_like(x, out_ndim, fake.dtype),
        token=_token(qualname),
    )


def _matmul(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import dask.array as da

    qualname = plan.qualname
    a, b = (_as_dask(v) if _is_array(v) else v for v in args)
    if not (is_dask(a) and is_dask(b)) or a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{qualname}(): both arguments must be arrays of at least one dim")
    device = chunk_device(a)
    fake = fake_output(plan.op, (a, b), kwargs, device)
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = a[None, :]
    if b_vec:
        b = b[:, None]
    n = max(a.ndim, b.ndim)
    i, k, j = n - 2, n - 1, n
    a_ind = (*range(n - a.ndim, n - 2), i, j)
    b_ind = (*range(n - b.ndim, n - 2), j, k)
    dtype = None if fake is None else fake.dtype
    out = da.blockwise(
        MatmulBlocks(plan.ref(device.type), plan.ref(device.type, "oplib::add")),
        tuple(range(n)),
        a,
        a_ind,
        b,
        b_ind,
        concatenate=False,
        dtype=dtype,
        meta=None if fake is None else meta_like(a, n, dtype),
        token=_token(qualname),
    )
    if a_vec:
        out = out[..., 0, :]
    if b_vec:
        out = out[..., 0]
    return out


_BUILDERS: dict[str, Callable[[Plan, tuple[Any, ...], dict[str, Any]], Any]] = {
    "pointwise": _pointwise,
    "reduction": _core_reduction,
    "matmul": _matmul,
}


def make_kernel(qualname: str, kind: str) -> Callable[..., Any]:
    """The ``dask`` kernel of op ``qualname`` as an op of ``kind`` (see :data:`KINDS`)."""
    if kind not in KINDS:
        raise ValueError(f"make_kernel(): kind must be one of {KINDS}, got {kind!r}")
    plan = Plan(qualname, kind)

    def dask_kernel(*args: Any, **kwargs: Any) -> Any:
        return plan(*args, **kwargs)

    dask_kernel.__name__ = dask_kernel.__qualname__ = f"dask_{kind}_kernel"
    return dask_kernel


# -- the explicit fallback --------------------------------------------------------------------
def single_chunk(op: Any) -> Callable[..., Any]:
    """A ``dask`` kernel for any single-output ``op`` (any spelling ``oplib.lookup`` takes:
    ``"ns::op[.overload]"``, an ``OpOverload``, a packet, a custom op): every dask input is
    rechunked to one chunk and the op runs once, in one task, on whole arrays. Its output
    shape comes from the op's fake kernel, which is required.

    Use it explicitly, for ops the generic kernels do not cover::

        y = oplib_dask.single_chunk("mylib::sort_rows")(x)          # one call
        oplib.register_kernel("mylib::sort_rows", "dask",
                              oplib_dask.single_chunk("mylib::sort_rows"))  # every call

    The whole array must fit in one worker's memory. A name no operator goes by raises
    ``oplib.UnknownOperatorError`` here, not at the first call."""
    qualname = oplib_core.lookup(op).name()
    plan = Plan(qualname, "pointwise")

    def dask_single_chunk_kernel(*args: Any, **kwargs: Any) -> Any:
        import dask.array as da

        _single_tensor_return(plan, "single-chunk")
        first = _first_dask(qualname, list(args) + list(kwargs.values()))
        device = chunk_device(first)
        fake = fake_output(plan.op, args, kwargs, device)
        if fake is None or any(not isinstance(s, int) for s in fake.shape):
            raise NoKernelError(
                f"{qualname}(): single_chunk needs a fake kernel giving the output's static "
                f"shape; register one with oplib.register_fake({qualname!r})",
                op=qualname,
                key="Fake",
            )
        if any(_is_array(v) for v in kwargs.values()):
            raise NoKernelError(
                f"{qualname}(): single_chunk takes arrays as positional arguments only",
                op=qualname,
                key="Dask",
            )
        nout = len(fake.shape)
        pairs: list[Any] = []
        label = nout
        for a in args:
            if _is_array(a):
                a = _as_dask(a).rechunk(-1)
                pairs += [a, tuple(range(label, label + a.ndim))]
                label += a.ndim
            else:
                pairs += [a, None]
        return da.blockwise(
            ChunkCall(plan.ref(device.type), kwargs),
            tuple(range(nout)),
            *pairs,
            new_axes=dict(enumerate(fake.shape)),
            concatenate=True,
            dtype=fake.dtype,
            meta=meta_like(first, nout, fake.dtype),
            token=_token(qualname) + "-single-chunk",
        )

    return dask_single_chunk_kernel
