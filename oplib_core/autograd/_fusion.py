"""Pointwise backward formulas run as one elementwise kernel (issue 30).

A formula such as tanh's ``mul(g, rsub(mul(out, out), 1))`` is three op calls, so three
kernel launches on a GPU, where torch's ``tanh_backward`` is one. :func:`fusable` wraps
such a formula: on a backend that can compile elementwise kernels
(``BackendSpec.elementwise_kernel``, cupy's ``ElementwiseKernel`` on ``cuda``) it runs as
one kernel generated from the formula itself, so no formula is written twice:

1. :func:`trace` runs the formula once per (formula, input dtypes) on data-less stand-ins
   for ``g`` and the saved tensors (fake tensors, under ``FakeTensorMode``), under a
   dispatch mode that records each op call into a :class:`Graph` (leaves: the inputs;
   Python scalars are literals).
2. :data:`ROWS` gives each pointwise core op its C expression, one row per op (as cupy's
   ufuncs are defined), never per formula. A trace that meets an op without a row, a shape
   change, a dtype other than bool or float16/32/64, a read of ``ctx`` beyond
   ``saved_tensors`` or a read of a value (a data-dependent branch: fake data cannot be
   read) is not
   fused: the formula runs, and that is remembered per (formula, dtypes).
3. :func:`kernel_source` turns the graph into ``ElementwiseKernel``'s four arguments,
   computing in float for float16/float32 and double for float64 and casting once at the
   end (torch's opmath).

Fused only in a backward pass without ``create_graph`` (grad mode off), with no dispatch
mode active, when ``g`` and the saved tensors are arrays of one backend with a compiler,
on one device; otherwise the formula runs as it would unwrapped, after one dict lookup.
"""

from __future__ import annotations

import functools
import math
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._dispatch import ACTIVE, DispatchMode, fast_entry
from .._grad_mode import STATE as GRAD
from .._registry.entry import LOCATION, _location_of
from .._registry.registry import REGISTRY, op_named
from .._tensor.tensor import Tensor
from ..backends import TABLE
from ..fake._mode import FakeTensorMode
from ._registration import FunctionCtx

__all__ = [
    "COMPILERS",
    "FLOATS",
    "ROWS",
    "VALUED_KERNELS",
    "Builder",
    "Call",
    "Fusion",
    "Graph",
    "KernelSource",
    "NotFusable",
    "Ref",
    "Row",
    "evaluate",
    "fusable",
    "kernel_source",
    "trace",
]

#: The dtypes a fused kernel computes on (bool is allowed for masks inside the formula).
FLOATS = frozenset(np.dtype(n) for n in ("float16", "float32", "float64"))

#: C type of each dtype in cupy's kernels (cupy's own ``float16`` class for float16).
_C_TYPES = {
    np.dtype("bool"): "bool",
    np.dtype("float16"): "float16",
    np.dtype("float32"): "float",
    np.dtype("float64"): "double",
}

#: The shape of the stand-ins a formula is traced on: any pointwise result has it.
_TRACE_SHAPE = (2, 3)


class NotFusable(Exception):
    """A formula's trace met something a fused kernel cannot do (``reason`` says what)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _check_zeros(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    if len(args) != 1 or list(args[0]) != [] or set(kwargs) - {"dtype", "device"}:
        return "oplib::zeros makes more than a 0-d zero"
    return None


def _check_astype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    # the target dtype is checked as every node's is: bool or a fused float dtype
    return None if len(args) == 2 and not kwargs else "oplib::astype with more arguments"


class Row(NamedTuple):
    """An op's C expression: ``c`` formats its first ``operands`` positional arguments
    (``{0}``, ``{1}`` ...; arrays and Python scalars alike) and the compute type ``{T}``.
    Other arguments are allowed only where ``check(args, kwargs)`` allows them (it returns
    why not, or None)."""

    c: str
    operands: int
    check: Callable[[tuple[Any, ...], dict[str, Any]], str | None] | None = None


def _rows() -> dict[str, Row]:
    rows = {
        "oplib::neg": Row("(-{0})", 1),
        "oplib::abs": Row("fabs({0})", 1),
        "oplib::add": Row("({0} + {1})", 2),
        "oplib::sub": Row("({0} - {1})", 2),
        "oplib::mul": Row("({0} * {1})", 2),
        "oplib::div": Row("({0} / {1})", 2),
        "oplib::pow": Row("pow({0}, {1})", 2),
        "oplib::add.Scalar": Row("({0} + {1})", 2),
        "oplib::sub.Scalar": Row("({0} - {1})", 2),
        "oplib::mul.Scalar": Row("({0} * {1})", 2),
        "oplib::div.Scalar": Row("({0} / {1})", 2),
        "oplib::pow.Scalar": Row("pow({0}, {1})", 2),
        "oplib::rsub.Scalar": Row("({1} - {0})", 2),
        "oplib::rdiv.Scalar": Row("({1} / {0})", 2),
        "oplib::rpow.Scalar": Row("pow({1}, {0})", 2),
        "oplib::where": Row("({0} ? {1} : {2})", 3),
        "oplib::astype": Row("(({T})({0}))", 1, _check_astype),
        "oplib::zeros": Row("(({T})0)", 0, _check_zeros),
    }
    for fn in ("exp", "log", "sin", "cos", "tanh", "sqrt"):
        rows[f"oplib::{fn}"] = Row(f"{fn}({{0}})", 1)
    for name, c in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">")):
        rows[f"oplib::{name}"] = rows[f"oplib::{name}.Scalar"] = Row(f"({{0}} {c} {{1}})", 2)
    rows["oplib::ge"] = rows["oplib::ge.Scalar"] = Row("({0} >= {1})", 2)
    return rows


#: The C expression of each pointwise core op a fused kernel may contain, by qualified
#: name (``"oplib::rsub.Scalar"``). The operands are values of the compute type (or bool).
ROWS: dict[str, Row] = _rows()


class Ref(NamedTuple):
    """A value of a :class:`Graph`: input ``at`` (``g``, then the saved tensors), or the
    result of call ``at - len(inputs)``."""

    at: int


class Call(NamedTuple):
    """One recorded op call: the op, its arguments with arrays as :class:`Ref`\\ s, and its
    result's dtype."""

    op: Any  # the OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    dtype: np.dtype

    @property
    def name(self) -> str:
        return str(self.op.name())


class Graph(NamedTuple):
    """A traced formula: its inputs' dtypes, the calls in order, which value it returns,
    and how many Nones follow it (``(grad, None)`` for an op's Scalar input)."""

    inputs: tuple[np.dtype, ...]
    calls: tuple[Call, ...]
    result: Ref
    nones: int = 0

    @property
    def dtype(self) -> np.dtype:
        n = len(self.inputs)
        i = self.result.at
        return self.inputs[i] if i < n else self.calls[i - n].dtype


class _TraceCtx:
    """The ``ctx`` a formula is traced with: ``saved_tensors``, and the values it declared
    (``fusable(values=...)``) as this call has them."""

    __slots__ = ("saved_tensors", "values")

    def __init__(self, saved: tuple[Tensor, ...], values: Mapping[str, Any]) -> None:
        self.saved_tensors = saved
        self.values = values

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        raise NotFusable(
            f"reads ctx.{name} (a fused formula reads only g, saved_tensors and the values "
            "it declares)"
        )


class _Recorder(DispatchMode):
    """Records every op call of a traced formula (see :func:`trace`)."""

    def __init__(self, inputs: Sequence[Any]) -> None:
        self.calls: list[Call] = []
        # id of each native array made so far -> its Ref; the arrays are kept alive so
        # that an id is not reused during the trace
        self.refs: dict[int, Ref] = {id(a): Ref(i) for i, a in enumerate(inputs)}
        self.alive: list[Any] = list(inputs)

    def ref(self, value: Any) -> Ref:
        data = value._data if isinstance(value, Tensor) else value
        ref = self.refs.get(id(data))
        if ref is None:
            raise NotFusable(f"uses an array the formula did not get or make ({type(data)})")
        return ref

    def operand(self, name: str, value: Any) -> Any:
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            if not math.isfinite(float(value)):
                raise NotFusable(f"{name} has a non-finite scalar ({value!r})")
            return value
        if isinstance(value, Tensor) or hasattr(value, "shape"):
            return self.ref(value)
        raise NotFusable(f"{name} takes a {type(value).__name__} operand ({value!r})")

    def __oplib_dispatch__(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = str(op.name())
        row = ROWS.get(name)
        if row is None:
            raise NotFusable(f"calls {name}, which has no C expression (ROWS)")
        if row.check is not None:
            why = row.check(args, kwargs)
            if why is not None:
                raise NotFusable(why)
        elif len(args) != row.operands or kwargs:
            raise NotFusable(f"calls {name} with more than its {row.operands} operand(s)")
        recorded = tuple(
            self.operand(name, a) if i < row.operands else a for i, a in enumerate(args)
        )
        out = op(*args, **kwargs)
        data = out._data if isinstance(out, Tensor) else out
        shape = tuple(getattr(data, "shape", (None,)))
        if shape != (_TRACE_SHAPE if row.operands else ()):
            raise NotFusable(f"{name} gives shape {shape}, not the pointwise shape")
        dtype = np.dtype(data.dtype)
        if dtype not in _C_TYPES:
            raise NotFusable(f"{name} gives {dtype} (fused: bool, float16/32/64)")
        self.refs[id(data)] = Ref(len(self.alive))
        self.alive.append(data)
        self.calls.append(Call(op, recorded, dict(kwargs), dtype))
        return out


def trace(
    formula: Callable[..., Any],
    dtypes: Sequence[np.dtype],
    values: Mapping[str, Any] | None = None,
) -> Graph:
    """The :class:`Graph` of ``formula(ctx, g)`` for a ``g`` of ``dtypes[0]`` and saved
    tensors of ``dtypes[1:]`` (and ``ctx``'s ``values``, which the graph holds as the
    literals they are); :class:`NotFusable` when it cannot be one kernel. The formula
    returns one Tensor, or a tuple of one Tensor and Nones (an op's other inputs)."""
    for dt in dtypes:
        if np.dtype(dt) not in _C_TYPES:
            raise NotFusable(f"an input is {np.dtype(dt)} (fused: bool, float16/32/64)")
    empty = op_named("oplib::empty")
    before = GRAD.enabled
    GRAD.enabled = False
    try:
        with FakeTensorMode():  # the recorder, inside it, hands each call on to it
            shape = list(_TRACE_SHAPE)
            arrays = [empty(shape, dtype=np.dtype(dt), device="cpu") for dt in dtypes]
            g, *saved = (Tensor._wrap(a) for a in arrays)
            recorder = _Recorder(arrays)
            with recorder:
                result = formula(_TraceCtx(tuple(saved), values or {}), g)
    except NotFusable:
        raise
    except Exception as e:  # reading a value (a branch on data), a failing op ...
        raise NotFusable(f"tracing raised {type(e).__name__}: {e}") from e
    finally:
        GRAD.enabled = before
    nones = 0
    if type(result) is tuple and result and all(r is None for r in result[1:]):
        result, nones = result[0], len(result) - 1
    if not isinstance(result, Tensor):
        raise NotFusable(f"returns {type(result).__name__}, not one Tensor (and Nones)")
    ref = recorder.ref(result)
    if ref.at < len(arrays):
        raise NotFusable("returns an input as it is: there is nothing to fuse")
    graph = Graph(tuple(np.dtype(d) for d in dtypes), tuple(recorder.calls), ref, nones)
    if graph.dtype not in FLOATS:
        raise NotFusable(f"returns {graph.dtype}, not a float16/32/64 gradient")
    return graph


def evaluate(graph: Graph, arrays: Sequence[Any]) -> Any:
    """Run ``graph`` on ``arrays`` (``g``, then the saved tensors), call by call, with the
    ops it recorded: what the formula computes, read back from the trace."""
    values = list(arrays)
    for call in graph.calls:
        args = tuple(values[a.at] if type(a) is Ref else a for a in call.args)
        values.append(call.op(*args, **call.kwargs))
    return values[graph.result.at]


class KernelSource(NamedTuple):
    """``cupy.ElementwiseKernel``'s arguments: ``in_params`` (``"float32 g, float32 s0"``),
    ``out_params`` (``"float32 grad"``), the ``operation`` and the kernel's ``name``."""

    in_params: str
    out_params: str
    operation: str
    name: str


def _literal(value: Any, compute: str) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    text = repr(float(value))
    return f"({text}f)" if compute == "float" else f"({text})"


def kernel_source(graph: Graph, name: str) -> KernelSource:
    """The elementwise kernel computing ``graph``: inputs ``g``, ``s0``, ``s1`` ... (the
    saved tensors), output ``grad``; computed in double when a value is float64, else in
    float (float16 values converted once on the way in and once on the way out)."""
    dtypes = [*graph.inputs, *(c.dtype for c in graph.calls)]
    compute = "double" if np.dtype("float64") in dtypes else "float"
    names = ["g", *(f"s{i}" for i in range(len(graph.inputs) - 1))]
    lines = []
    for i, (param, dt) in enumerate(zip(names, graph.inputs, strict=True)):
        ctype = "bool" if dt == np.bool_ else compute
        lines.append(f"const {ctype} v{i} = ({ctype})({param});")
    n = len(graph.inputs)
    for k, call in enumerate(graph.calls):
        row = ROWS[call.name]
        operands = [
            f"v{a.at}" if type(a) is Ref else _literal(a, compute)
            for a in call.args[: row.operands]
        ]
        ctype = "bool" if call.dtype == np.bool_ else compute
        lines.append(f"const {ctype} v{n + k} = {row.c.format(*operands, T=compute)};")
    out = graph.dtype
    lines.append(f"grad = ({_C_TYPES[out]})(v{graph.result.at});")
    return KernelSource(
        ", ".join(f"{dt.name} {p}" for p, dt in zip(names, graph.inputs, strict=True)),
        f"{out.name} grad",
        "\n".join(lines),
        name,
    )


#: Why a formula of one op call is no program: the fused path's own steps (its lookups,
#: the saved arrays, the Tensor) cost about what a dispatch does.
ONE_CALL = "one op call: the dispatcher runs it for what a program would cost"


class _OneCall(NotFusable):
    """A program of one op call, declined (``ONE_CALL``)."""


class Builder(NamedTuple):
    """How a backend makes the function computing a traced formula: ``builder(graph,
    name)``. ``compile``: the backend's ``elementwise_kernel`` (the graph as C); else
    ``backend``, one with ``direct_kernels`` (the graph as a program of its kernels)."""

    compile: Callable[..., Any] | None
    backend: Any = None

    def __call__(self, graph: Graph, name: str) -> Callable[..., Any]:
        if self.compile is not None:
            return self.compile(*kernel_source(graph, name))  # type: ignore[no-any-return]
        from ._program import direct_kernel, kernel_program

        if len(graph.calls) < 2:
            raise _OneCall(ONE_CALL)
        return kernel_program(graph, functools.partial(direct_kernel, self.backend), name)


class _Compilers(dict[type, Any]):
    """Array class -> ``(build, device_of)`` of its backend, ``build(graph, name)`` making
    the function that computes a traced formula (C through ``elementwise_kernel``, or a
    program of ``direct_kernels``), or None when the backend has neither (cleared whenever
    a backend comes or goes); ``device_of`` is None for a backend with one device."""

    def __missing__(self, cls: type) -> Any:
        backend = TABLE.for_type(cls)
        spec = None if backend is None else backend.spec
        found = None
        # arrays on one device need no check per node: only a backend with several has one
        # (as the dispatcher's fast path decides, once per array class)
        device_of = None
        if backend is not None and spec is not None and spec.device_of is not None:
            device_of = spec.device_of if backend.device_count() > 1 else None
        if spec is not None and spec.elementwise_kernel is not None:
            found = (Builder(spec.elementwise_kernel), device_of)
        elif spec is not None and spec.direct_kernels:
            found = (Builder(None, backend), device_of)
        self[cls] = found
        return found


COMPILERS = _Compilers()
#: Every Fusion, whose kernels are forgotten with the compilers (a backend that comes or
#: goes may compile them differently, for the same array class).
_FUSIONS: weakref.WeakSet[Fusion] = weakref.WeakSet()


def _forget(event: str, backend: Any) -> None:
    COMPILERS.clear()
    for fusion in list(_FUSIONS):
        fusion.kernels.clear()  # (its reasons stay, for reports, until a kernel is built)
        fusion.declined.clear()


TABLE.add_listener(_forget)


def _kernels_changed(event: str, entry: Any) -> None:
    """A kernel of a pointwise op came or went (a plugin's override of ``oplib::mul`` on
    cpu): the programs of ``direct_kernels`` backends call the kernels they found when
    made, so every formula's are made again (C kernels with them: they are cheap to ask
    again, and compiled sources are cached by their compilers)."""
    if entry.qualname in ROWS:
        _forget(event, None)


REGISTRY.add_listener(_kernels_changed)

_MISSING = object()


class _Kernel:
    """A compiled kernel, and how many Nones follow its result in the formula's return;
    ``proven`` once a call of it returned (until then an error, which may be the
    compiler's, sends the node back to its formula)."""

    __slots__ = ("fn", "nones", "proven")

    def __init__(self, fn: Callable[..., Any], nones: int = 0) -> None:
        self.fn = fn
        self.nones = nones
        self.proven = False


#: The most kernels a formula that reads values keeps (one per value it met twice, per
#: dtypes).
VALUED_KERNELS = 64
_SCALARS = frozenset((bool, int, float))


class Fusion:
    """The fused side of one formula: its kernels per (array class, input dtypes, and the
    values of ``ctx`` it declares), or None where it is not fused (``reasons`` says why),
    and counts for tests and reports."""

    def __init__(self, formula: Callable[..., Any], values: tuple[str, ...] = ()) -> None:
        self.formula = formula
        self.values = values
        _FUSIONS.add(self)
        self.kernels: dict[tuple[Any, ...], _Kernel | None] = {}
        self.reasons: dict[tuple[Any, ...], str] = {}
        self.compiled = 0  # compiler calls
        self.fused = 0  # backward calls that ran the kernel
        # builders this formula runs as it is on, without asking per call (a program of
        # one op call, for a formula reading no values: the same for every dtype)
        self.declined: list[Builder] = []
        # keys with values met once (see _worth_building)
        self.met: set[tuple[Any, ...]] = set()

    def _build(
        self, key: tuple[Any, ...], build: Builder, ctx: Any, ndtypes: int
    ) -> _Kernel | None:
        dtypes = key[1 : 1 + ndtypes]
        # a C identifier (a lambda is "<lambda>")
        name = re.sub(r"\W", "", getattr(self.formula, "__name__", "")).strip("_") or "formula"
        kernel: _Kernel | None = None
        try:
            values = {n: getattr(ctx, n) for n in self.values}
            graph = trace(self.formula, dtypes, values)
            label = "_".join(np.dtype(d).name for d in dtypes)
            kernel = _Kernel(build(graph, f"oplib_backward_{name}_{label}"), graph.nones)
            self.compiled += 1
            self.reasons.pop(key, None)
        except NotFusable as e:
            self.reasons[key] = e.reason
            if isinstance(e, _OneCall) and not self.values and build not in self.declined:
                self.declined.append(build)
        except Exception as e:  # the backend's compiler refused it: the formula serves
            self.reasons[key] = f"the compiler raised {type(e).__name__}: {e}"
        self.kernels[key] = kernel
        return kernel

    def _worth_building(self, key: tuple[Any, ...]) -> bool:
        """For a formula reading values: whether to trace a program for ``key`` now. Only
        for a value met before (one that changes every step, an annealed exponent, never
        pays back a trace), and while the formula holds fewer than ``VALUED_KERNELS``."""
        if len(self.kernels) >= VALUED_KERNELS:
            return False
        met = self.met
        if key in met:
            return True
        if len(met) >= 4 * VALUED_KERNELS:
            met.clear()
        met.add(key)
        return False

    def _valued(self, ctx: Any, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """``key`` with this call's declared values (each with its type: ``2`` and ``2.0``
        are equal keys), or None when one is not a finite bool, int or float."""
        values = []
        for n in self.values:
            v: Any = getattr(ctx, n, None)
            if type(v) not in _SCALARS or v - v != 0:  # (inf - inf and nan - nan are nan)
                return None
            values.append(v)
        return (*key, *values, *[type(v) for v in values])

    def run(self, ctx: Any, g: Tensor, found: tuple[Builder, Any]) -> Any:
        """``formula(ctx, g)`` as one kernel where it can (``found``: the backend's builder
        and ``device_of``), else the formula."""
        gd = g._data
        cls = type(gd)
        # the saved arrays, their versions checked as the formula's saved_tensors would
        data: Sequence[Any] | None = ctx._saved_data() if type(ctx) is FunctionCtx else None
        if data is None:
            arrays = []
            for t in ctx.saved_tensors:
                if type(t) is not Tensor:
                    return self.formula(ctx, g)
                arrays.append(t._data)
            data = arrays
        if not data:
            key: tuple[Any, ...] = (cls, gd.dtype)
        elif len(data) == 1:
            sd = data[0]
            if type(sd) is not cls:
                return self.formula(ctx, g)
            key = (cls, gd.dtype, sd.dtype)
        else:
            if any(type(d) is not cls for d in data):
                return self.formula(ctx, g)
            key = (cls, gd.dtype, *[d.dtype for d in data])
        if self.values:
            # a value becomes a literal of the kernel: programs only (one C compile per
            # value would cost more than it saves)
            if found[0].compile is not None:
                return self.formula(ctx, g)
            valued = self._valued(ctx, key)
            if valued is None:
                return self.formula(ctx, g)
            key = valued
        kernel = self.kernels.get(key, _MISSING)
        if kernel is _MISSING:
            if self.values and not self._worth_building(key):
                return self.formula(ctx, g)
            kernel = self._build(key, found[0], ctx, 1 + len(data))
        if type(kernel) is not _Kernel:
            return self.formula(ctx, g)
        device_of = found[1]
        if device_of is not None and data:
            where = device_of(gd)
            if any(device_of(d) != where for d in data):
                return self.formula(ctx, g)
        if kernel.proven:
            out = kernel.fn(gd, *data)
        else:
            try:
                out = kernel.fn(gd, *data)
            except Exception as e:  # a compile error shows on the first call (cupy)
                self.reasons[key] = f"the kernel's first call raised {type(e).__name__}: {e}"
                self.kernels[key] = None
                return self.formula(ctx, g)
            kernel.proven = True
            # a kernel behind backends.on_device on a machine with one device: its wrapper
            # has nothing to decide after the first call (as for the dispatcher's fast path)
            kernel.fn = fast_entry(kernel.fn, {})
        if out is None:  # a program whose kernel gave no array: the formula says how
            return self.formula(ctx, g)
        self.fused += 1
        if kernel.nones:
            return (Tensor._wrap(out), *(None,) * kernel.nones)
        return Tensor._wrap(out)


def fusable(formula: Callable[..., Any], values: tuple[str, ...] = ()) -> Callable[..., Any]:
    """``formula`` (a ``backward(ctx, g)`` of one gradient, reading only ``g``,
    ``ctx.saved_tensors`` and the attributes of ``ctx`` named in ``values``, which must hold
    finite Python numbers) that runs as one elementwise kernel where the backend compiles
    them, or as one program of its kernels (see the module doc); ``.fusion`` is its
    :class:`Fusion`. A formula reading values becomes one program per value met twice
    (for at most ``VALUED_KERNELS`` values; the formula runs for the others), never a C
    kernel."""
    fusion = Fusion(formula, values)
    run = fusion.run
    compilers = COMPILERS
    declined = fusion.declined

    def backward(ctx: Any, g: Any) -> Any:
        # the question a cpu array asks first and alone (about 0.1 us per node in all)
        try:
            found = compilers[type(g._data)]
        except AttributeError:  # not a Tensor
            return formula(ctx, g)
        # create_graph (grad mode on) and dispatch modes need the formula's op calls
        if found is None or GRAD.enabled or ACTIVE[0] or (declined and found[0] in declined):
            return formula(ctx, g)
        return run(ctx, g, found)

    functools.update_wrapper(backward, formula)
    # errors and ``oplib ops show`` point at the formula, not at this wrapper
    backward.__dict__[LOCATION] = _location_of(formula)
    backward.fusion = fusion  # type: ignore[attr-defined]
    return backward
