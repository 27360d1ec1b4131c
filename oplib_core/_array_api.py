"""Array namespaces through the Python array API standard, and dtype conversion.

:func:`standard_namespace` turns what a backend binds the core kernels to (``numpy``,
``cupy``, ``torch``, ``dask.array``, ``jax.numpy``, ``array_api_strict``, a vendor's own
namespace object) into a namespace with the standard's function names: array-api-compat's
wrapper where the library itself is not compliant, else the namespace as given.

:class:`DtypeMap` converts between oplib's dtypes (numpy dtype objects, ``oplib.float32``)
and a namespace's own dtype objects (``array_api_strict.float32``, ``torch.float32``). For
libraries whose arrays carry numpy dtypes (numpy, cupy, JAX, Dask) it is the identity, and
kernels bound to them skip the conversion entirely.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from . import _dtypes

__all__ = [
    "DtypeMap",
    "DtypeOf",
    "dtype_attr",
    "dtype_getter",
    "dtype_map",
    "is_namespace",
    "namespace_dtypes",
    "namespace_name",
    "standard_namespace",
]

#: oplib's dtypes, by the name the array API standard (and ml_dtypes) gives them.
OPLIB_DTYPES: tuple[np.dtype, ...] = tuple(
    getattr(_dtypes, n) for n in _dtypes.__all__ if isinstance(getattr(_dtypes, n), np.dtype)
)


def standard_namespace(xp: Any) -> Any:
    """The array API namespace for ``xp``: ``xp`` itself when it declares compliance
    (``__array_api_version__``: numpy >= 2.1, ``jax.numpy``, ``array_api_strict``) or is not
    a module (a vendor's namespace object is taken as given); else array-api-compat's wrapper
    (cupy, torch, dask.array, numpy 1.x), imported only then."""
    if not isinstance(xp, ModuleType):  # a vendor's per-device namespace object
        return xp
    # numpy >= 2.1's own namespace is the standard's (``astype`` arrived in 2.1); binding it
    # directly keeps numpy's kernels free of wrappers and plugin loading light (importing
    # array_api_compat.numpy costs tens of milliseconds).
    if getattr(xp, "__array_api_version__", None) and hasattr(xp, "astype"):
        return xp
    import array_api_compat

    if array_api_compat.is_numpy_namespace(xp):
        import array_api_compat.numpy as compat_numpy

        return compat_numpy
    if array_api_compat.is_cupy_namespace(xp):
        import array_api_compat.cupy as compat_cupy  # pyright: ignore[reportMissingImports]

        return compat_cupy
    if array_api_compat.is_torch_namespace(xp):
        import array_api_compat.torch as compat_torch  # pyright: ignore[reportMissingImports]

        return compat_torch
    if array_api_compat.is_dask_namespace(xp):
        import array_api_compat.dask.array as compat_dask  # pyright: ignore[reportMissingImports]

        return compat_dask
    return xp


def is_namespace(xp: Any, library: str) -> bool:
    """``array_api_compat.is_<library>_namespace(xp)`` (``library``: ``"numpy"``, ``"jax"``,
    ...). numpy's own module is answered without importing array-api-compat, which would
    add a millisecond to the first op call of a program that only uses numpy."""
    if xp is np:
        return library == "numpy"
    import array_api_compat

    test: Callable[[Any], bool] = getattr(array_api_compat, f"is_{library}_namespace")
    return test(xp)


def namespace_name(xp: Any) -> str:
    """A short name for error messages: ``"numpy"``, ``"array_api_strict"``, the class of a
    namespace object."""
    name = getattr(xp, "__name__", None) if isinstance(xp, ModuleType) else None
    if name is None:
        return repr(xp)
    return str(name).removeprefix("array_api_compat.")


def _uses_numpy_dtypes(ns: Any) -> bool:
    """Whether ``ns``'s arrays carry numpy dtype objects (numpy, cupy, JAX, Dask)."""
    f32 = getattr(ns, "float32", None)
    if isinstance(f32, np.dtype):
        return True
    if isinstance(f32, type) and issubclass(f32, np.generic):
        return True
    return isinstance(getattr(f32, "dtype", None), np.dtype)  # jax.numpy's scalar types


def namespace_dtypes(xp: Any) -> dict[np.dtype, Any]:
    """Every oplib dtype that the array namespace ``xp`` has, mapped to ``xp``'s own dtype
    object (found by the standard's names: ``xp.float32``, ``xp.bool``; bfloat16 and the
    float8 formats by ml_dtypes' names). For a namespace whose arrays carry numpy dtypes the
    values are the numpy dtypes themselves, bfloat16 and float8 (ml_dtypes) included. The
    answer for ``BackendSpec(dtypes=...)``."""
    ns = standard_namespace(xp)
    same = _uses_numpy_dtypes(ns)
    out: dict[np.dtype, Any] = {}
    for d in OPLIB_DTYPES:
        native = getattr(ns, d.name, None)
        if native is None and same and d in _dtypes.EXTENSION_FLOATS:
            native = d  # ml_dtypes' formats: numpy dtypes, not in numpy's namespace
        if native is None:
            continue
        if same:
            try:
                native = np.dtype(native)
            except TypeError:
                continue
            if native != d:
                continue
        out[d] = native
    return out


class DtypeMap:
    """Converts between oplib's dtypes and one namespace's dtype objects.

    ``native(d)`` gives the namespace's dtype for oplib dtype ``d`` (``TypeError`` naming the
    namespace when it has none); ``ours(n)`` the oplib dtype of the namespace's dtype ``n``.
    ``identity`` is true when both are the same objects (numpy dtypes). ``name`` says whose
    dtypes they are in error messages (``"the array namespace numpy"``)."""

    __slots__ = ("_native", "_ours", "identity", "name", "supported")

    def __init__(self, name: str, table: Mapping[np.dtype, Any], identity: bool) -> None:
        self.name = name
        self.identity = identity
        self._native: dict[np.dtype, Any] = dict(table)
        self._ours: dict[Any, np.dtype] = {v: k for k, v in table.items()}
        self.supported = frozenset(table)

    def native(self, d: Any) -> Any:
        if self.identity:
            return d
        try:
            return self._native[np.dtype(d)]
        except (KeyError, TypeError):
            if d in self._ours:  # already the namespace's own dtype
                return d
            raise TypeError(
                f"{self.name} has no dtype {d} (it has "
                f"{', '.join(sorted(x.name for x in self.supported))})"
            ) from None

    def ours(self, n: Any) -> np.dtype:
        if self.identity:
            d: np.dtype = np.dtype(n)
            return d
        try:
            return self._ours[n]
        except KeyError:
            raise TypeError(f"{self.name} gave dtype {n!r}, which oplib has no name for") from None


DtypeOf = Callable[[Any], np.dtype]
#: ``x.dtype``: the oplib dtype of an array that carries numpy dtypes (and of a fake).
dtype_attr: DtypeOf = operator.attrgetter("dtype")


def dtype_getter(dmap: DtypeMap) -> DtypeOf:
    """The function giving the oplib dtype of an array of ``dmap``'s namespace: ``x.dtype``
    itself when the namespace's dtypes are numpy's (no per-call conversion)."""
    if dmap.identity:
        return dtype_attr
    ours = dmap.ours
    return lambda x: ours(x.dtype)


@functools.cache
def _cached_map(ns: Any) -> DtypeMap:
    return _make_map(ns)


def _make_map(ns: Any) -> DtypeMap:
    return DtypeMap(
        f"the array namespace {namespace_name(ns)}", namespace_dtypes(ns), _uses_numpy_dtypes(ns)
    )


def dtype_map(xp: Any) -> DtypeMap:
    """The :class:`DtypeMap` of array namespace ``xp`` (computed once per namespace)."""
    ns = standard_namespace(xp)
    try:
        return _cached_map(ns)
    except TypeError:  # an unhashable namespace object
        return _make_map(ns)
