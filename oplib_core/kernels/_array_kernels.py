"""Kernels for every op in :data:`oplib_core.kernels.CORE_OPS`, written once against the
Python array API standard.

``array_kernels(xp)`` binds them to an array namespace through array-api-compat
(:func:`~oplib_core._array_api.standard_namespace`): cupy, torch, dask.array and numpy 1.x
through its compat wrappers; numpy >= 2.1, jax.numpy, ``array_api_strict`` or any namespace
that declares compliance as they are. Only the standard's function names are used
(``concat``, ``permute_dims``, ``pow``, ``max``, ``astype`` ...). dtypes arrive as oplib's
(numpy dtype objects) and are converted to the namespace's own by a
:class:`~oplib_core._array_api.DtypeMap` (the identity for libraries whose arrays carry numpy
dtypes, so numpy pays nothing for it).

Where the standard has no way to express an op, the kernel declares what it needs
(``_NEEDS``): a namespace without it gets a kernel that raises ``NoKernelError`` naming the
op, the namespace and what is missing (``NamespaceUnsupportedError``, a ``NoKernelError``;
``oplib check`` reports it as a skip).

Calling convention (the contract with the dispatcher): a kernel takes the schema's positional
arguments positionally, with defaults filled in, and every keyword-only argument by keyword;
parameter names are the schema's argument names. ``Tensor`` arguments are native arrays of
``xp``, ``Tensor[]`` a list of them, ``ScalarType`` an oplib dtype or ``None``, ``Device``
an :class:`~oplib_core.device.Device` or ``None``, ``Scalar`` a Python int, float or bool.
Kernels return native arrays, never scalars (full reductions give 0-d arrays).

Type promotion is the namespace's (numpy's NEP 50 on numpy: Python scalars are weak, so
float32 + 2.0 stays float32). Where torch and numpy differ the docstring of the kernel says
which one it follows. With bfloat16 or float8 operands (``ml_dtypes``) binary ops follow torch
instead: mixed dtypes are cast to ``promote_types`` first (numpy has no common dtype for
bfloat16 and float16, and takes float64 for bfloat16 with int64), and with a Python scalar
they compute in float32 and round back, as torch's "opmath" does (numpy would give float32
for ``bfloat16 * 2.0``). True division of integers gives float64 (numpy's rule) also on
namespaces whose ``divide`` takes only floats (the standard leaves it open).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from oplib_core._array_api import (
    dtype_getter,
    dtype_map,
    is_namespace,
    namespace_name,
    standard_namespace,
)
from oplib_core._device import Device
from oplib_core._dtypes import (
    EXTENSION_FLOATS,
    get_default_dtype,
    is_floating,
    mean_dtype,
    promote_types,
    result_type,
    scalar_dtype,
)
from oplib_core._opset import CORE_OPS, NAMESPACE, CoreOp
from oplib_core.errors import NamespaceUnsupportedError
from oplib_core.kernels._index_kernels import index_kernels
from oplib_core.kernels._inplace_kernels import inplace_kernels

__all__ = ["UFUNC", "array_kernels", "check_kernels"]

#: The attribute of a numpy kernel that is one ufunc call: ``(ufunc, reverse)``, for the
#: backward programs of ``BackendSpec.direct_kernels`` (they call the ufunc with ``out=``).
#: It holds for operands of one dtype other than bfloat16/float8 (those compute as torch).
UFUNC = "__oplib_ufunc__"

_INT64 = np.dtype("int64")
_FLOAT32 = np.dtype("float32")
_FLOAT64 = np.dtype("float64")


def _mutable(ns: Any) -> bool:
    return not is_namespace(ns, "jax")


_WRITES = ("in-place writes (x[...] = y; the namespace's arrays are immutable)", _mutable)

#: Ops whose kernel needs more than the standard guarantees: op name → (what it needs, whether
#: a namespace has it). Every op that writes into an argument (``Tensor(a!)``: ``copy_``, the
#: in-place ops, the ``out=`` overloads) needs mutable arrays.
_NEEDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    op.name: _WRITES for op in CORE_OPS if op.writes
}


def check_kernels(
    kernels: Mapping[str, Callable[..., Any]], ops: Sequence[CoreOp] = CORE_OPS
) -> None:
    """Raise ``ValueError`` unless ``kernels`` has exactly one kernel per op of ``ops``, keyed
    by :attr:`CoreOp.name` (``"add.Scalar"``): no op left without a kernel, no stray kernel."""
    expected = {op.name for op in ops}
    missing = sorted(expected - kernels.keys())
    extra = sorted(kernels.keys() - expected)
    if missing or extra:
        raise ValueError(
            "check_kernels(): expected one kernel per core op; "
            f"ops without a kernel: {missing or 'none'}; kernels without an op: {extra or 'none'}"
        )


def _wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` as an index in ``range(ndim)``; like torch, a 0-d array accepts 0 and -1."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def _reduce_axes(ndim: int, dim: Sequence[int] | None) -> tuple[int, ...] | None:
    """``dim`` as the standard's ``axis``: None or [] mean every axis."""
    if not dim:
        return None
    axes = tuple(_wrap_dim(d, ndim) for d in dim)
    return axes if ndim else None


def _unsupported(name: str, ns_name: str, needs: str) -> Callable[..., Any]:
    """The kernel of op ``name`` on a namespace that lacks what its shared kernel needs."""
    qualname = f"{NAMESPACE}::{name.partition('.')[0]}"

    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NamespaceUnsupportedError(
            f"{qualname}: the shared array-API kernel cannot run on the array namespace "
            f"{ns_name}: it needs {needs}. Register a kernel of your own for this backend "
            f"(oplib.register_kernel({qualname!r}, ...)).",
            qualname,
            ns_name,
            needs,
        )

    fn.__doc__ = f"Not available on {ns_name}: the shared kernel needs {needs}."
    return fn


def _same(x: Any) -> Any:
    """The asarray of a namespace whose functions return arrays: nothing to do."""
    return x


def array_kernels(xp: Any) -> dict[str, Callable[..., Any]]:
    """Kernels for every core op, bound to the array namespace ``xp``: ``numpy``, ``cupy``,
    ``torch``, ``dask.array`` (through array-api-compat), ``jax.numpy``, ``array_api_strict``,
    any namespace that follows the array API standard, or a vendor's per-device namespace
    object with the standard's function names.

    Returns a dict keyed by op name with overload and without namespace (``"add"``,
    ``"add.Scalar"``, ``"arange.start"``); see the module docstring for the calling convention.
    """
    ns = standard_namespace(xp)
    dmap = dtype_map(ns)
    same = dmap.identity  # the namespace's dtypes are oplib's (numpy dtype objects)
    native, ours = dmap.native, dmap.ours
    # numpy functions return numpy scalars for 0-d inputs; kernels must return arrays.
    # (compat's asarray is a Python wrapper; numpy's own is all the scalars need.)
    # (A vendor's namespace object may forward ``__name__`` to numpy's: modules only.)
    numpy_module = isinstance(ns, ModuleType) and is_namespace(ns, "numpy")
    # Every other library's namespace (cupy, jax, torch, dask, array_api_strict) returns
    # arrays, never scalars, as the standard says: its kernels call the function directly,
    # decided here once (compat's asarray cost cupy's neg 1.1 us per call). numpy through
    # compat, and a vendor's namespace object (it may hand back numpy's scalars), keep it.
    direct = isinstance(ns, ModuleType) and not is_namespace(ns, "numpy")
    asarray = np.asarray if numpy_module else _same if direct else ns.asarray
    astype = ns.astype
    # numpy's sum/max/min are Python wrappers (about 1.2 us on a small array) that call the
    # ufunc reductions for an ndarray; numpy's kernels call those directly (same results).
    reduce_sum: Callable[..., Any] = np.add.reduce if numpy_module else ns.sum
    reduce_max: Callable[..., Any] = np.maximum.reduce if numpy_module else ns.max
    reduce_min: Callable[..., Any] = np.minimum.reduce if numpy_module else ns.min
    # array-api-compat wraps cupy's creation functions and matmul (two Python frames each)
    # only to accept and check the standard's ``device=``, which these kernels never pass:
    # they call cupy's own (issue 30: each call's cost over cupy's).
    cupy_module = is_namespace(ns, "cupy")
    own = xp if xp is not ns and cupy_module else ns
    if cupy_module:  # cupy's sum/max/min are Python wrappers of the array's own methods
        reduce_sum, reduce_max, reduce_min = own.ndarray.sum, own.ndarray.max, own.ndarray.min
    ext = (
        EXTENSION_FLOATS
        if same
        else frozenset(dmap.native(d) for d in EXTENSION_FLOATS & dmap.supported)
    )
    # cupy's arrays have no bfloat16/float8 dtypes: its binary kernels never promote
    no_ext = cupy_module
    f32 = native(_FLOAT32)
    kernels: dict[str, Callable[..., Any]] = {}

    def kernel(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            fn.__qualname__ = fn.__name__ = name
            kernels[name] = fn
            return fn

        return register

    odtype = dtype_getter(dmap)  # the oplib dtype of an array

    def promoted(a: Any, b: Any) -> tuple[Any, Any]:
        """``a`` and ``b`` (one of them bfloat16/float8, dtypes differ) cast to torch's
        ``promote_types``; ``TypeError`` for float8 with another dtype, as torch."""
        d = native(promote_types(odtype(a), odtype(b)))
        return astype(a, d, copy=False), astype(b, d, copy=False)

    def opmath(fn: Callable[..., Any], self: Any, other: Any, reverse: bool) -> Any:
        """``fn`` of a bfloat16/float8 array and a Python scalar as torch computes it: in
        float32, rounded back to ``self``'s dtype (bool and complex results are kept)."""
        x = astype(self, f32)
        out = fn(other, x) if reverse else fn(x, other)
        return astype(out, self.dtype) if out.dtype == f32 else out

    def common(arrays: Sequence[Any]) -> list[Any]:
        """``arrays`` as a list; cast to torch's promotion when their dtypes differ and one
        of them is bfloat16/float8."""
        arrays = list(arrays)
        if no_ext or not arrays:  # (cat's and stack's every call: the common case first)
            return arrays
        first = arrays[0].dtype
        for a in arrays:
            d = a.dtype
            if d is not first and d != first:  # (a dtype is most often the same object)
                break
        else:
            return arrays
        if any(a.dtype in ext for a in arrays):
            d = native(result_type(*(odtype(a) for a in arrays)))
            arrays = [astype(a, d, copy=False) for a in arrays]
        return arrays

    def integral(x: Any) -> bool:
        if isinstance(x, (bool, int)):
            return True
        return hasattr(x, "dtype") and odtype(x).kind in "biu"

    def true_divide(a: Any, b: Any) -> Any:
        """``divide``; integers give float64 (numpy's rule) on namespaces whose ``divide``
        takes floats only (the standard leaves integer division's dtype open)."""
        try:
            return ns.divide(a, b)
        except TypeError:
            if not (integral(a) and integral(b)):
                raise
            f = native(_FLOAT64 if _FLOAT64 in dmap.supported else get_default_dtype())
            a = astype(a, f) if hasattr(a, "dtype") else a
            b = astype(b, f) if hasattr(b, "dtype") else b
            return ns.divide(a, b)

    def marked(fn: Callable[..., Any], ufunc: Any, reverse: bool = False) -> None:
        """Mark a numpy kernel that computes ``ufunc(*operands)`` (``reverse``: of its two
        operands swapped) for the operands' dtypes other than bfloat16/float8 (UFUNC)."""
        if numpy_module and isinstance(ufunc, np.ufunc):
            setattr(fn, UFUNC, (ufunc, reverse))

    def plain(k_direct: Callable[..., Any], fn: Callable[..., Any]) -> None:
        """Let the dispatcher's fast path call the namespace's ``fn`` in place of
        ``k_direct``, which computes exactly ``fn(*operands)`` (``fast_entry``: one Python
        frame less per call, about 0.05-0.1 us of a cupy call's cost over cupy's own)."""
        k_direct.fast_entry = fn  # type: ignore[attr-defined]

    # The pointwise kernels, the hot ones, come in two forms: with asarray, and without.
    def unary(name: str, fn: Callable[..., Any], doc: str) -> None:
        def k(self: Any) -> Any:
            return asarray(fn(self))

        def k_direct(self: Any) -> Any:
            return fn(self)

        chosen = k_direct if direct else k
        chosen.__doc__ = doc
        marked(chosen, fn)
        if direct:
            plain(chosen, fn)
        kernel(name)(chosen)

    # bfloat16/float8: a set lookup on the hot path, and torch's promotion only for them
    def binary(name: str, fn: Callable[..., Any], doc: str, ufunc: Any = None) -> None:
        def k(self: Any, other: Any) -> Any:
            sd, od = self.dtype, other.dtype
            if sd is not od and (sd in ext or od in ext):
                self, other = promoted(self, other)
            return asarray(fn(self, other))

        def k_direct(self: Any, other: Any) -> Any:
            sd, od = self.dtype, other.dtype
            if sd is not od and (sd in ext or od in ext):
                self, other = promoted(self, other)
            return fn(self, other)

        chosen = k_direct if direct else k
        chosen.__doc__ = doc
        marked(chosen, fn if ufunc is None else ufunc)
        if direct and no_ext:
            plain(chosen, fn)
        kernel(name)(chosen)

    def scalar(
        name: str, fn: Callable[..., Any], doc: str, *, reverse: bool = False, ufunc: Any = None
    ) -> None:
        def k(self: Any, other: Any) -> Any:
            if self.dtype in ext:
                return asarray(opmath(fn, self, other, reverse))
            return asarray(fn(other, self) if reverse else fn(self, other))

        def k_direct(self: Any, other: Any) -> Any:
            if self.dtype in ext:
                return opmath(fn, self, other, reverse)
            return fn(other, self) if reverse else fn(self, other)

        chosen = k_direct if direct else k
        chosen.__doc__ = doc
        marked(chosen, fn if ufunc is None else ufunc, reverse)
        if direct and no_ext and not reverse:
            plain(chosen, fn)
        kernel(name)(chosen)

    def power(name: str, doc: str) -> None:
        def k(self: Any, exponent: Any) -> Any:
            if self.dtype in ext or getattr(exponent, "dtype", None) in ext:
                if not hasattr(exponent, "dtype"):
                    return asarray(opmath(ns.pow, self, exponent, False))
                if self.dtype is not exponent.dtype:
                    self, exponent = promoted(self, exponent)
            return asarray(ns.pow(self, exponent))

        k.__doc__ = doc
        kernel(name)(k)

    # -- unary pointwise ----------------------------------------------------------------
    unary("neg", ns.negative, "``-self``.")
    unary("exp", ns.exp, "``e ** self`` (integer input gives the namespace's float dtype).")
    unary("log", ns.log, "Natural logarithm (nan for negative input, -inf for 0).")
    unary("sin", ns.sin, "Sine.")
    unary("cos", ns.cos, "Cosine.")
    unary("tanh", ns.tanh, "Hyperbolic tangent.")
    unary("abs", ns.abs, "Absolute value, same dtype as ``self``.")
    unary("sqrt", ns.sqrt, "Square root (nan for negative input).")

    @kernel("sigmoid")
    def sigmoid(self: Any) -> Any:
        """``1 / (1 + exp(-self))``, computed so that no intermediate overflows for large
        ``|self|``; float dtypes are kept, integer input gives numpy's float dtype for ``exp``."""
        d = odtype(self)
        if d.kind == "c":
            return asarray(1 / (1 + ns.exp(-self)))
        if self.dtype in ext:  # in float32, rounded once (as torch)
            return astype(sigmoid(astype(self, f32)), self.dtype)
        x = self
        if not is_floating(d):
            # result_type with float16 is the float dtype numpy's exp loop would choose.
            x = astype(x, native(np.result_type(d, np.float16)))
        e = ns.exp(-ns.abs(x))
        return asarray(ns.where(x >= 0, 1 / (1 + e), e / (1 + e)))

    @kernel("relu")
    def relu(self: Any) -> Any:
        """``max(self, 0)`` elementwise, same dtype as ``self``; nan stays nan."""
        return asarray(ns.where(self < 0, ns.zeros_like(self), self))

    # -- binary pointwise ---------------------------------------------------------------
    binary("add", ns.add, "``self + other`` with the namespace's broadcasting and promotion.")
    binary("sub", ns.subtract, "``self - other``.")
    binary("mul", ns.multiply, "``self * other``.")
    binary(
        "div",
        true_divide,
        "True division ``self / other``. Follows numpy, not torch: int / int gives float64.",
        ufunc=np.divide,  # (true_divide calls it alone on numpy, which divides integers)
    )
    power("pow", "``self ** exponent``; integer to a negative integer power raises.")
    binary("maximum", ns.maximum, "Elementwise maximum; nan propagates.")
    binary("minimum", ns.minimum, "Elementwise minimum; nan propagates.")
    scalar("add.Scalar", ns.add, "``self + other``; the Python scalar is weak (NEP 50).")
    scalar("sub.Scalar", ns.subtract, "``self - other``; the Python scalar is weak.")
    scalar("mul.Scalar", ns.multiply, "``self * other``; the Python scalar is weak.")
    scalar(
        "div.Scalar",
        true_divide,
        "``self / other``; the Python scalar is weak, int / int gives float64 (numpy).",
        ufunc=np.divide,
    )
    power("pow.Scalar", "``self ** exponent``; the Python scalar is weak.")
    scalar("rsub.Scalar", ns.subtract, "``other - self`` (for ``2.0 - t``).", reverse=True)
    scalar(
        "rdiv.Scalar",
        true_divide,
        "``other / self`` (for ``2.0 / t``).",
        reverse=True,
        ufunc=np.divide,
    )
    scalar("rpow.Scalar", ns.pow, "``other ** self`` (for ``2.0 ** t``).", reverse=True)

    for cmp_name, fn, symbol in (
        ("eq", ns.equal, "=="),
        ("ne", ns.not_equal, "!="),
        ("lt", ns.less, "<"),
        ("le", ns.less_equal, "<="),
        ("gt", ns.greater, ">"),
        ("ge", ns.greater_equal, ">="),
    ):
        binary(cmp_name, fn, f"``self {symbol} other`` as a bool array.")
        scalar(f"{cmp_name}.Scalar", fn, f"``self {symbol} other`` as a bool array.")

    @kernel("where")
    def where(condition: Any, self: Any, other: Any) -> Any:
        """``self`` where ``condition`` holds, else ``other``; all three broadcast together."""
        sd, od = self.dtype, other.dtype
        if sd is not od and (sd in ext or od in ext):
            self, other = promoted(self, other)
        return asarray(ns.where(condition, self, other))

    # -- reductions ---------------------------------------------------------------------
    @kernel("sum")
    def sum_(
        self: Any, dim: Sequence[int] | None, keepdim: bool, *, dtype: np.dtype | None = None
    ) -> Any:
        """Sum over ``dim`` (None or [] for all). Like torch, with ``dtype=None`` bool and
        integer input accumulate in int64 (uint64 stays uint64); floats keep their dtype
        (bfloat16/float8 accumulate in float32)."""
        sd = self.dtype
        d = sd if same else ours(sd)
        kind = d.kind
        axis = None if not dim else _reduce_axes(self.ndim, dim)
        if dtype is None:
            if kind in "bi" or (kind == "u" and d.itemsize < 8):
                dtype = _INT64
            elif sd in ext:  # accumulate in float32 (torch)
                out = reduce_sum(self, axis=axis, dtype=f32, keepdims=keepdim)
                return astype(asarray(out), sd)
            elif direct:  # (the common case, without a no-op asarray)
                return reduce_sum(self, axis=axis, keepdims=keepdim)
            else:
                return asarray(reduce_sum(self, axis=axis, keepdims=keepdim))
        nd = dtype if same else native(dtype)
        if kind == "b" and not same:  # the standard sums numeric dtypes only
            self = astype(self, nd)
        return asarray(reduce_sum(self, axis=axis, dtype=nd, keepdims=keepdim))

    @kernel("mean")
    def mean(
        self: Any, dim: Sequence[int] | None, keepdim: bool, *, dtype: np.dtype | None = None
    ) -> Any:
        """Mean over ``dim`` (None or [] for all). Like torch, the result dtype must be
        floating or complex: integer or bool input raises ``TypeError`` unless a floating
        ``dtype=`` is given (the input is then converted to it first)."""
        mean_dtype(odtype(self), dtype)
        axis = _reduce_axes(self.ndim, dim)
        if dtype is None and self.dtype in ext:  # accumulate in float32 (torch)
            out = ns.mean(astype(self, f32), axis=axis, keepdims=keepdim)
            return astype(asarray(out), self.dtype)
        if dtype is not None:
            self = astype(self, native(dtype), copy=False)
        return asarray(ns.mean(self, axis=axis, keepdims=keepdim))

    @kernel("amax")
    def amax(self: Any, dim: Sequence[int] | None, keepdim: bool) -> Any:
        """Maximum over ``dim`` (None or [] for all); nan propagates; empty input raises."""
        return asarray(reduce_max(self, axis=_reduce_axes(self.ndim, dim), keepdims=keepdim))

    @kernel("amin")
    def amin(self: Any, dim: Sequence[int] | None, keepdim: bool) -> Any:
        """Minimum over ``dim`` (None or [] for all); nan propagates; empty input raises."""
        return asarray(reduce_min(self, axis=_reduce_axes(self.ndim, dim), keepdims=keepdim))

    # -- linear algebra -----------------------------------------------------------------
    @kernel("matmul")
    def matmul(self: Any, other: Any) -> Any:
        """Matrix product with the standard's ``matmul`` rules (batch dims broadcast, 1-d
        operands are promoted to matrices and the added dim removed). bfloat16/float8 operands
        give torch's ``promote_types`` dtype (numpy's matmul would give float32)."""
        sd, od = self.dtype, other.dtype
        if sd in ext or od in ext:
            d = native(promote_types(odtype(self), odtype(other)))
            out = own.matmul(astype(self, d, copy=False), astype(other, d, copy=False))
            return astype(asarray(out), d, copy=False)
        return asarray(own.matmul(self, other))

    if direct and no_ext:  # exactly own.matmul: the fast path may call it (cupy)
        plain(matmul, own.matmul)

    # -- shape ops (may return views of self) -------------------------------------------
    @kernel("transpose")
    def transpose(self: Any, dim0: int, dim1: int) -> Any:
        """Swap dims ``dim0`` and ``dim1``; returns a view."""
        dim0, dim1 = _wrap_dim(dim0, self.ndim), _wrap_dim(dim1, self.ndim)
        if not self.ndim:
            return self[...]
        perm = list(range(self.ndim))
        perm[dim0], perm[dim1] = dim1, dim0
        return ns.permute_dims(self, tuple(perm))

    @kernel("permute")
    def permute(self: Any, dims: Sequence[int]) -> Any:
        """Reorder dims (``dims`` is a permutation of all of them); returns a view."""
        return ns.permute_dims(self, tuple(dims))

    @kernel("reshape")
    def reshape(self: Any, shape: Sequence[int]) -> Any:
        """Give ``self`` a new shape (one entry may be -1); a view where the namespace can
        make one, else a copy."""
        return ns.reshape(self, tuple(shape))

    @kernel("broadcast_to")
    def broadcast_to(self: Any, size: Sequence[int]) -> Any:
        """Broadcast to ``size``; as in torch's ``expand``, -1 keeps an existing dim's size.
        Returns a read-only view."""
        lead = len(size) - self.ndim
        shape = []
        for i, s in enumerate(size):
            if s == -1:
                if i < lead:
                    raise ValueError(
                        f"broadcast_to(): -1 keeps the size of an existing dim, but size "
                        f"{list(size)} puts it at new leading dim {i} of a {self.ndim}-d array"
                    )
                s = self.shape[i - lead]
            shape.append(s)
        return ns.broadcast_to(self, tuple(shape))

    @kernel("unsqueeze")
    def unsqueeze(self: Any, dim: int) -> Any:
        """Insert a dim of size 1 at ``dim`` (negative counts from the new end); a view."""
        return ns.expand_dims(self, axis=dim)

    @kernel("squeeze")
    def squeeze(self: Any, dim: Sequence[int] | None) -> Any:
        """Remove dims of size 1: all of them for ``dim=None``, else those in ``dim`` that have
        size 1 (others are left alone, as in torch); returns a view."""
        if dim is None:
            axes = tuple(i for i, s in enumerate(self.shape) if s == 1)
        else:
            wrapped = {_wrap_dim(d, self.ndim) for d in dim}
            axes = tuple(sorted(a for a in wrapped if self.ndim and self.shape[a] == 1))
        return ns.squeeze(self, axis=axes) if axes else self[...]

    # numpy's and cupy's concatenate take the axis positionally (the standard's concat, a
    # Python wrapper on cupy, takes it by keyword only)
    concatenate: Callable[..., Any] | None = (
        np.concatenate if numpy_module else own.concatenate if cupy_module else None
    )

    @kernel("cat")
    def cat(tensors: Sequence[Any], dim: int) -> Any:
        """Concatenate along an existing dim; dtypes promote as in the namespace (as torch
        with a bfloat16/float8 among them)."""
        if concatenate is not None:
            return concatenate(common(tensors), dim)
        return ns.concat(common(tensors), axis=dim)

    if direct and no_ext and concatenate is not None:  # cupy: exactly its concatenate
        plain(cat, concatenate)

    @kernel("stack")
    def stack(tensors: Sequence[Any], dim: int) -> Any:
        """Stack equal-shaped arrays along a new dim ``dim``."""
        return ns.stack(common(tensors), axis=dim)

    # -- copies -------------------------------------------------------------------------
    @kernel("clone")
    def clone(self: Any) -> Any:
        """A new array with the same data and layout; never shares memory with ``self``."""
        return ns.asarray(self, copy=True)

    @kernel("copy_")
    def copy_(self: Any, src: Any) -> Any:
        """Write ``src`` (broadcast to ``self``'s shape, cast to its dtype) into ``self`` in
        place and return ``self``."""
        if src.dtype != self.dtype:
            src = astype(src, self.dtype)
        self[...] = src
        return self

    @kernel("astype")
    def astype_(self: Any, dtype: np.dtype) -> Any:
        """A copy of ``self`` converted to ``dtype`` (always a new array, as the schema
        promises no aliasing)."""
        return astype(self, native(dtype), copy=True)

    # -- factories (``device`` is the binding plugin's business) --------------------------
    def default(dtype: np.dtype | None) -> Any:
        return native(get_default_dtype() if dtype is None else dtype)

    if same:  # oplib's dtypes are the namespace's: no conversion (factories' hot path)

        def default(dtype: np.dtype | None) -> Any:
            return get_default_dtype() if dtype is None else dtype

    @kernel("empty")
    def empty(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """An uninitialised array of shape ``size``; ``dtype=None`` is the default dtype."""
        return own.empty(tuple(size), dtype=default(dtype))

    @kernel("zeros")
    def zeros(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """Zeros of shape ``size``; ``dtype=None`` is the default dtype."""
        return own.zeros(tuple(size), dtype=default(dtype))

    @kernel("ones")
    def ones(size: Sequence[int], *, dtype: np.dtype | None, device: Device | None) -> Any:
        """Ones of shape ``size``; ``dtype=None`` is the default dtype."""
        return own.ones(tuple(size), dtype=default(dtype))

    if same and (numpy_module or cupy_module):
        # numpy's and cupy's creation functions take (shape, dtype) positionally, as these
        # kernels call them: the factories' cached call calls them itself (``factory_entry``:
        # a Python frame and a keyword call less, issue 30)
        creators: Any = np if numpy_module else own
        for k, f in ((empty, creators.empty), (zeros, creators.zeros), (ones, creators.ones)):
            k.factory_entry = f  # type: ignore[attr-defined]

    @kernel("full")
    def full(
        size: Sequence[int], fill_value: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        """``fill_value`` repeated to shape ``size``. As in torch, ``dtype=None`` infers from
        the fill: bool → bool, int → int64, float → the default dtype."""
        if dtype is None:
            dtype = scalar_dtype(fill_value)
        return own.full(tuple(size), fill_value, dtype=native(dtype))

    def _arange(start: Any, end: Any, step: Any, dtype: np.dtype | None) -> Any:
        if dtype is None:
            dtypes = [scalar_dtype(v) for v in (start, end, step)]
            floating = any(d.kind == "c" or is_floating(d) for d in dtypes)  # bfloat16 default
            dtype = get_default_dtype() if floating else _INT64
        return ns.arange(start, end, step, dtype=native(dtype))

    @kernel("arange")
    def arange(end: Any, *, dtype: np.dtype | None, device: Device | None) -> Any:
        """``0, 1, ..., end - 1``. As in torch, ``dtype=None`` gives int64 for int ``end`` and
        the default dtype for a float one."""
        return _arange(0, end, 1, dtype)

    @kernel("arange.start")
    def arange_start(
        start: Any, end: Any, step: Any, *, dtype: np.dtype | None, device: Device | None
    ) -> Any:
        """``start, start + step, ...`` up to but excluding ``end``. As in torch,
        ``dtype=None`` gives int64 if all three are ints, else the default dtype."""
        return _arange(start, end, step, dtype)

    kernels.update(index_kernels(xp))  # indexing and views (issue 14)
    kernels.update(inplace_kernels(xp, kernels))
    ns_name = namespace_name(ns)
    for name, (needs, has) in _NEEDS.items():
        if not has(ns):
            kernels[name] = _unsupported(name, ns_name, needs)
    return kernels
