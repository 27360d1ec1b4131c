"""numpy's protocols for ``Tensor``: numpy functions that have a core op run through it.

``np.sin(t)``, ``np.add(t, 1)``, ``np.sum(t, axis=0)``, ``np.concatenate([t, u])``
dispatch the corresponding ``oplib::`` op, so the result is a Tensor on the inputs' device
with autograd. The tables below are the one place that says which numpy ufunc or function
is which op; each entry names the numpy parameters it maps, and any other parameter given
with a value other than its default is refused with an error naming both.

A numpy function without a core op computes in numpy on the tensors' data when that loses
nothing (CPU tensors without autograd); for a tensor that requires grad or lives off the CPU
it raises instead of silently dropping the graph or copying from the device.

``Tensor``'s dunder methods call :func:`array_ufunc`, :func:`array_function` and
:func:`to_numpy`; the Tensor class comes in as ``type(self)``, so this module does not
import ``_tensor`` (which imports it).
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from .._registry.registry import op_named
from ..backends import TABLE
from ..errors import ArgumentTypeError
from ..fake._arrays import FakeArray

__all__ = [
    "FUNCTIONS",
    "REDUCTIONS",
    "REQUIRES_GRAD_MESSAGE",
    "UFUNCS",
    "NumpyBinary",
    "NumpyFunction",
    "array_function",
    "array_ufunc",
    "check_convertible",
    "to_numpy",
]

#: torch's words (``Tensor.numpy()`` on a tensor that requires grad), for every conversion.
REQUIRES_GRAD_MESSAGE = (
    "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
)


class NumpyBinary:
    """How a binary ufunc maps: the op for two tensors, and for a tensor and a scalar on
    either side (``None``: the scalar becomes a 0-d tensor on the tensor's device)."""

    __slots__ = ("op", "reflected", "scalar")

    def __init__(self, op: str, scalar: str | None = None, reflected: str | None = None) -> None:
        self.op = op
        self.scalar = scalar
        self.reflected = reflected

    def ops(self) -> tuple[str, ...]:
        return tuple(name for name in (self.op, self.scalar, self.reflected) if name)


#: numpy ufunc name -> the core op (unary) or :class:`NumpyBinary` (binary).
UFUNCS: dict[str, str | NumpyBinary] = {
    "negative": "neg",
    "exp": "exp",
    "log": "log",
    "sin": "sin",
    "cos": "cos",
    "tanh": "tanh",
    "sqrt": "sqrt",
    "absolute": "abs",
    "add": NumpyBinary("add", "add.Scalar", "add.Scalar"),
    "subtract": NumpyBinary("sub", "sub.Scalar", "rsub.Scalar"),
    "multiply": NumpyBinary("mul", "mul.Scalar", "mul.Scalar"),
    "divide": NumpyBinary("div", "div.Scalar", "rdiv.Scalar"),
    "power": NumpyBinary("pow", "pow.Scalar", "rpow.Scalar"),
    "maximum": NumpyBinary("maximum"),
    "minimum": NumpyBinary("minimum"),
    "equal": NumpyBinary("eq", "eq.Scalar", "eq.Scalar"),
    "not_equal": NumpyBinary("ne", "ne.Scalar", "ne.Scalar"),
    "less": NumpyBinary("lt", "lt.Scalar", "gt.Scalar"),
    "less_equal": NumpyBinary("le", "le.Scalar", "ge.Scalar"),
    "greater": NumpyBinary("gt", "gt.Scalar", "lt.Scalar"),
    "greater_equal": NumpyBinary("ge", "ge.Scalar", "le.Scalar"),
    "matmul": NumpyBinary("matmul"),
}

#: ``ufunc.reduce`` (``np.add.reduce(t, axis=0)``) -> the reduction op.
REDUCTIONS: dict[str, str] = {"add": "sum", "maximum": "amax", "minimum": "amin"}

# ufunc keywords a mapped call accepts, with the value that means "nothing special". ``dtype``
# is handled (a cast of the tensor inputs first); ``out`` is refused unless ``None``.
_UFUNC_DEFAULTS: dict[str, object] = {
    "casting": "same_kind",
    "order": "K",
    "subok": True,
    "signature": None,
    "out": None,
    "where": True,
}


def _op(name: str) -> Callable[..., Any]:
    fn: Callable[..., Any] = op_named("oplib::" + name)
    return fn


def _is_scalar(x: object) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray)


def _py_scalar(x: object) -> object:
    # numpy scalars count as Python scalars (weak, as torch treats them): ``t_f32 * np.float64``
    # stays float32.
    return x.item() if isinstance(x, np.generic) else x


@functools.cache
def _numpy_name(fn: object) -> str:
    module = getattr(fn, "__module__", "numpy") or "numpy"
    prefix = "np." + module[len("numpy.") :] + "." if module.startswith("numpy.") else "np."
    return prefix + getattr(fn, "__name__", repr(fn))


def _refuse(api: str, argument: str, value: object, why: str) -> ArgumentTypeError:
    return ArgumentTypeError(
        f"{api}(): argument '{argument}' (= {value!r}) is not supported with oplib Tensors: {why}",
        api=api,
        argument=argument,
        value=value,
    )


# -- conversion (the fallback, and ``__array__``) --------------------------------------------
def check_convertible(t: Any, action: str, api: str | None = None) -> None:
    """Raise if numpy cannot have ``t``'s data without losing something: its autograd graph
    (torch's error), its device, or data it does not have (meta, fake). ``api`` names the
    numpy function without an oplib op that asked."""
    data = t._data
    if isinstance(data, FakeArray):
        raise data._no_data(action)
    if t._rg:
        if api is None:
            raise RuntimeError(REQUIRES_GRAD_MESSAGE)
        raise RuntimeError(
            f"{api}() has no oplib op, so it would run in numpy on the data and drop the "
            f"autograd graph: {REQUIRES_GRAD_MESSAGE} (numpy functions with an oplib op keep "
            "the graph: see docs/numpy-interop.md)"
        )
    if t.backend.name != "cpu":
        raise TypeError(
            f"can't convert a {t.device} tensor to a numpy array implicitly ({action}); use "
            "tensor.to('cpu') first"
        )


def to_numpy(t: Any, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """``Tensor.__array__``: numpy 2's contract (``copy=False`` never copies and raises when
    it would have to; ``copy=True`` always copies)."""
    check_convertible(t, "Tensor.__array__ (conversion to numpy)")
    if copy:
        return np.array(t._data, dtype=dtype, copy=True)
    if copy is False:
        return np.asarray(t._data, dtype=dtype, copy=False)
    return np.asarray(t._data, dtype=dtype)


def _unwrap(x: Any, cls: Any, api: str) -> Any:
    """``x`` with every Tensor (also inside lists and tuples) replaced by its numpy array."""
    if type(x) is cls:
        check_convertible(x, f"{api}(), which has no oplib op", api)
        return x._data
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, cls, api) for v in x)
    return x


# -- ufuncs ---------------------------------------------------------------------------------
def array_ufunc(
    self: Any, ufunc: np.ufunc, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.__array_ufunc__``: the core op for ``ufunc`` when there is one, numpy on the
    data otherwise (see the module docstring)."""
    cls = type(self)
    for x in inputs:
        if not (type(x) is cls or _is_scalar(x) or TABLE.for_type(type(x)) is not None):
            return NotImplemented
    api = _numpy_name(ufunc)
    entry = UFUNCS.get(ufunc.__name__) if method == "__call__" else None
    reduction = REDUCTIONS.get(ufunc.__name__) if method == "reduce" else None
    out = kwargs.get("out")
    if out is not None and not any(type(o) is cls for o in out):
        # numpy writes into numpy arrays (``nd += t``): a numpy computation on the data.
        entry = reduction = None
    if entry is not None:
        return _call_ufunc(api, entry, inputs, kwargs, cls)
    if reduction is not None:
        return _call_reduce(api, reduction, inputs, kwargs, cls)
    if out is not None and any(type(o) is cls for o in out):
        raise _refuse(api, "out", out, "oplib has no in-place ops; assign the result instead")
    args = _unwrap(inputs, cls, api + "." + method if method != "__call__" else api)
    kwargs = {k: _unwrap(v, cls, api) for k, v in kwargs.items()}
    result = getattr(ufunc, method)(*args, **kwargs)
    if out is not None:  # numpy wrote into the arrays given
        return result
    # As torch (its ``__array_wrap__``): numpy's array result comes back as a Tensor.
    if isinstance(result, np.ndarray):
        return cls._wrap(result)
    if isinstance(result, tuple):
        return tuple(cls._wrap(r) if isinstance(r, np.ndarray) else r for r in result)
    return result


def _check_ufunc_kwargs(api: str, kwargs: dict[str, Any]) -> None:
    for name, value in kwargs.items():
        if name == "dtype":
            continue
        if name not in _UFUNC_DEFAULTS:
            raise _refuse(api, name, value, "it has no equivalent in the oplib op")
        default = _UFUNC_DEFAULTS[name]
        if name == "out":
            why = "oplib has no in-place ops; assign the result instead"
        elif name == "where":
            why = "a masked ufunc leaves the other elements unset; use np.where(mask, ...)"
        else:
            why = f"only the default ({default!r}) maps to the oplib op"
        if not (value is default or _same(value, default)):
            raise _refuse(api, name, value, why)


def _cast(x: Any, dtype: Any, cls: Any) -> Any:
    if dtype is None:
        return x
    if _is_scalar(x):
        return np.dtype(dtype).type(x)
    return x if x.dtype == np.dtype(dtype) else _op("astype")(x, np.dtype(dtype))


def _as_tensor(scalar: object, like: Any, cls: Any) -> Any:
    """A 0-d tensor holding ``scalar`` on ``like``'s device (numpy 2's promotion of a Python
    scalar against ``like``'s dtype)."""
    value = _py_scalar(scalar)
    dtype = np.result_type(like.dtype, value)  # type: ignore[arg-type]
    # Made on the host and copied: not every backend has factory kernels (dask has none).
    return cls._wrap(_op("full")([], value, dtype=dtype, device="cpu")).to(like.device)


def _call_ufunc(
    api: str, entry: str | NumpyBinary, inputs: tuple[Any, ...], kwargs: dict[str, Any], cls: Any
) -> Any:
    _check_ufunc_kwargs(api, kwargs)
    dtype = kwargs.get("dtype")
    args = [_cast(x, dtype, cls) for x in inputs]
    if isinstance(entry, str):
        return _op(entry)(args[0])
    a, b = args
    if _is_scalar(b):
        if entry.scalar is None:
            return _op(entry.op)(a, _as_tensor(b, a, cls))
        return _op(entry.scalar)(a, _py_scalar(b))
    if _is_scalar(a):
        if entry.reflected is None:
            return _op(entry.op)(_as_tensor(a, b, cls), b)
        return _op(entry.reflected)(b, _py_scalar(a))
    return _op(entry.op)(a, b)


def _call_reduce(
    api: str, op: str, inputs: tuple[Any, ...], kwargs: dict[str, Any], cls: Any
) -> Any:
    kwargs = dict(kwargs)
    axis = kwargs.pop("axis", 0)
    keepdims = bool(kwargs.pop("keepdims", False))
    dtype = kwargs.pop("dtype", None)
    initial = kwargs.pop("initial", np._NoValue)
    if initial is not np._NoValue:
        raise _refuse(api, "initial", initial, f"oplib::{op} has no 'initial'")
    _check_ufunc_kwargs(api, kwargs)  # ``where`` as for a call: only ``True``
    (x,) = inputs
    if type(x) is not cls:
        return NotImplemented
    dim = _dims(axis)
    if op == "sum":
        return _op(op)(x, dim, keepdims, dtype=dtype)
    if dtype is not None:
        raise _refuse(api, "dtype", dtype, f"oplib::{op} has no 'dtype'")
    return _op(op)(x, dim, keepdims)


def _sizes(shape: Any) -> list[int]:
    return [int(shape)] if isinstance(shape, (int, np.integer)) else [int(s) for s in shape]


def _dims(axis: Any) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return [int(a) for a in axis]
    return [int(axis)]


# -- array functions ------------------------------------------------------------------------
class NumpyFunction:
    """One numpy function with a core op: ``params`` are the numpy parameters ``adapt``
    maps (the others must keep their defaults), ``adapt`` calls the op with the Tensor the
    protocol was called on and the bound arguments."""

    __slots__ = ("_leading", "_signature", "adapt", "fn", "op", "params")

    def __init__(
        self, fn: Callable[..., Any], op: str, params: str, adapt: Callable[..., Any]
    ) -> None:
        self.fn = fn
        self.op = op
        self.params = frozenset(params.split())
        self.adapt = adapt
        self._signature: inspect.Signature | None = None
        self._leading: tuple[str, ...] = ()

    def signature(self) -> inspect.Signature:
        """numpy's signature of ``fn``, read on first use (reading them all would cost every
        import of oplib, and most programs never call a numpy function on a Tensor)."""
        if self._signature is None:
            try:
                self._signature = inspect.signature(self.fn)
            except ValueError:  # a C function numpy < 2.3 gives no signature
                self._signature = inspect.signature(_SIGNATURES[self.fn.__name__])
            # The positional parameters up to the first one not mapped: a call giving no
            # more than these, and no keywords, needs no binding (``np.sum(t, 0)``).
            leading: list[str] = []
            for p in self._signature.parameters.values():
                if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    break
                if p.name not in self.params:
                    break
                leading.append(p.name)
            self._leading = tuple(leading)
        return self._signature

    def leading(self) -> tuple[str, ...]:
        self.signature()
        return self._leading


#: numpy function -> its core op and how the arguments map.
FUNCTIONS: dict[Callable[..., Any], NumpyFunction] = {}


def _concatenate_signature(
    arrays: Any, /, axis: Any = 0, out: Any = None, *, dtype: Any = None, casting: Any = "same_kind"
) -> Any: ...


def _where_signature(condition: Any, x: Any = None, y: Any = None, /) -> Any: ...


#: the signatures numpy 2.3 and later report, for the C functions older numpy (that of
#: Python 3.10) gives none
_SIGNATURES: dict[str, Callable[..., Any]] = {
    "concatenate": _concatenate_signature,
    "where": _where_signature,
}


def _implements(fn: Any, op: str, params: str) -> Callable[[Callable[..., Any]], Any]:
    def register(adapt: Callable[..., Any]) -> Callable[..., Any]:
        FUNCTIONS[fn] = NumpyFunction(fn, op, params, adapt)
        return adapt

    return register


def _keep(value: Any) -> bool:
    return bool(value) if value is not np._NoValue else False


@_implements(np.sum, "sum", "a axis dtype keepdims")
def _sum(like: Any, a: Any, axis: Any = None, dtype: Any = None, keepdims: Any = False) -> Any:
    return _op("sum")(a, _dims(axis), _keep(keepdims), dtype=dtype)


@_implements(np.mean, "mean", "a axis dtype keepdims")
def _mean(like: Any, a: Any, axis: Any = None, dtype: Any = None, keepdims: Any = False) -> Any:
    return _op("mean")(a, _dims(axis), _keep(keepdims), dtype=dtype)


def _extreme(op: str) -> Callable[..., Any]:
    def adapt(like: Any, a: Any, axis: Any = None, keepdims: Any = False) -> Any:
        return _op(op)(a, _dims(axis), _keep(keepdims))

    return adapt


for _fn, _name in ((np.max, "amax"), (np.amax, "amax"), (np.min, "amin"), (np.amin, "amin")):
    _implements(_fn, _name, "a axis keepdims")(_extreme(_name))


@_implements(np.concatenate, "cat", "arrays axis")
def _concatenate(like: Any, arrays: Any, axis: Any = 0) -> Any:
    if axis is None:  # numpy flattens first
        return _op("cat")([_op("reshape")(x, [-1]) for x in arrays], 0)
    return _op("cat")(list(arrays), int(axis))


@_implements(np.stack, "stack", "arrays axis")
def _stack(like: Any, arrays: Any, axis: Any = 0) -> Any:
    return _op("stack")(list(arrays), int(axis))


@_implements(np.transpose, "permute", "a axes")
def _transpose(like: Any, a: Any, axes: Any = None) -> Any:
    dims = list(range(a.ndim - 1, -1, -1)) if axes is None else [int(d) for d in axes]
    return _op("permute")(a, dims)


@_implements(np.swapaxes, "transpose", "a axis1 axis2")
def _swapaxes(like: Any, a: Any, axis1: Any, axis2: Any) -> Any:
    return _op("transpose")(a, int(axis1), int(axis2))


@_implements(np.reshape, "reshape", "a shape order")
def _reshape(like: Any, a: Any, shape: Any, order: Any = "C") -> Any:
    if order != "C":
        raise _refuse("np.reshape", "order", order, "oplib::reshape is C order only")
    return _op("reshape")(a, _sizes(shape))


@_implements(np.squeeze, "squeeze", "a axis")
def _squeeze(like: Any, a: Any, axis: Any = None) -> Any:
    return _op("squeeze")(a, _dims(axis))


@_implements(np.expand_dims, "unsqueeze", "a axis")
def _expand_dims(like: Any, a: Any, axis: Any) -> Any:
    axes = _dims(axis) or []
    ndim = a.ndim + len(axes)
    for d in sorted(d % ndim for d in axes):  # numpy places each axis in the result
        a = _op("unsqueeze")(a, d)
    return a


@_implements(np.broadcast_to, "broadcast_to", "array shape")
def _broadcast_to(like: Any, array: Any, shape: Any) -> Any:
    return _op("broadcast_to")(array, _sizes(shape))


@_implements(np.where, "where", "condition x y")
def _where(like: Any, condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None or y is None:
        why = "np.where(condition) (the indices) has no oplib op; give both x and y"
        raise _refuse("np.where", "x" if x is None else "y", None, why)
    cls = type(like)
    if _is_scalar(x):  # a 0-d tensor of the other branch's dtype, on the tensors' device
        x = _as_tensor(x, y if type(y) is cls else like, cls)
    if _is_scalar(y):
        y = _as_tensor(y, x, cls)
    return _op("where")(condition, x, y)


@_implements(np.copy, "clone", "a")
def _copy(like: Any, a: Any) -> Any:
    return _op("clone")(a)


@_implements(np.astype, "astype", "x dtype")
def _astype(like: Any, x: Any, dtype: Any) -> Any:
    return _op("astype")(x, np.dtype(dtype))


@_implements(np.linalg.matmul, "matmul", "x1 x2")
def _linalg_matmul(like: Any, x1: Any, x2: Any) -> Any:
    return _op("matmul")(x1, x2)


# -- indexing and views (issue 14) ------------------------------------------------------------
@_implements(np.flip, "flip", "m axis")
def _flip(like: Any, m: Any, axis: Any = None) -> Any:
    return _op("flip")(m, list(range(m.ndim)) if axis is None else _dims(axis))


@_implements(np.roll, "roll", "a shift axis")
def _roll(like: Any, a: Any, shift: Any, axis: Any = None) -> Any:
    return _op("roll")(a, _sizes(shift), _dims(axis) or [])


@_implements(np.tril, "tril", "m k")
def _tril(like: Any, m: Any, k: Any = 0) -> Any:
    return _op("tril")(m, int(k))


@_implements(np.triu, "triu", "m k")
def _triu(like: Any, m: Any, k: Any = 0) -> Any:
    return _op("triu")(m, int(k))


@_implements(np.tile, "tile", "A reps")
def _tile(like: Any, A: Any, reps: Any) -> Any:  # numpy names it A
    return _op("tile")(A, _sizes(reps))


@_implements(np.moveaxis, "movedim.intlist", "a source destination")
def _moveaxis(like: Any, a: Any, source: Any, destination: Any) -> Any:
    return _op("movedim.intlist")(a, _sizes(source), _sizes(destination))


def _dtype_of(x: object) -> Any:
    return x if isinstance(x, (type, np.dtype, str)) else getattr(x, "dtype", x)


# Questions about metadata need no data: answered from the tensor, on every device.
_METADATA: dict[Callable[..., Any], Callable[..., Any]] = {
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.numel() if axis is None else a.shape[axis],
    np.result_type: lambda *xs: np.result_type(*(_dtype_of(x) for x in xs)),
}


def array_function(
    self: Any, func: Any, types: tuple[type, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``Tensor.__array_function__``: the core op for ``func`` when there is one, numpy on
    the data otherwise (see the module docstring)."""
    cls = type(self)
    for t in types:
        if t is not cls and not issubclass(t, np.ndarray) and TABLE.for_type(t) is None:
            return NotImplemented
    metadata = _METADATA.get(func)
    if metadata is not None:
        return metadata(*args, **kwargs)
    entry = FUNCTIONS.get(func)
    api = _numpy_name(func)
    if entry is None:
        args = _unwrap(args, cls, api)
        kwargs = {k: _unwrap(v, cls, api) for k, v in kwargs.items()}
        return func(*args, **kwargs)
    leading = entry.leading()
    if not kwargs and len(args) <= len(leading):
        return entry.adapt(self, **dict(zip(leading, args, strict=False)))
    signature = entry.signature()
    bound = signature.bind(*args, **kwargs)
    for name, value in bound.arguments.items():
        if name in entry.params:
            continue
        default = signature.parameters[name].default
        if value is default or (value is None and name == "out"):
            continue
        if default is not signature.empty and _same(value, default):
            continue
        why = (
            "oplib has no in-place ops; assign the result instead"
            if name == "out"
            else f"oplib::{entry.op} has no equivalent"
        )
        raise _refuse(api, name, value, why)
    return entry.adapt(self, **{k: v for k, v in bound.arguments.items() if k in entry.params})


def _same(value: object, default: object) -> bool:
    if default is np._NoValue:
        return False
    try:
        return bool(value == default)
    except Exception:  # an array compared with a default: not the default
        return False
