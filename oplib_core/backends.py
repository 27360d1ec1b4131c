"""Device backends: what a backend is (``BackendSpec``) and the table of installed ones."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any, cast

import numpy as np

from ._array_api import DtypeMap, namespace_dtypes
from ._device import Device, parse_device
from ._dtypes import (
    DTYPES,
    EXTENSION_FLOATS,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
)
from ._records import Record
from ._registry.backend_cache import DeferredBackend
from ._registry.entry import LOCATION
from ._registry.startup import LOCK, deferred, ensure
from .errors import (
    ArgumentTypeError,
    BackendDtypeError,
    BackendError,
    BackendNameError,
    InvalidArgumentError,
    InvalidDeviceError,
)

__all__ = [
    "DISTRIBUTIONS",
    "DTYPES",
    "Backend",
    "BackendSpec",
    "BackendTable",
    "DevicePlacement",
    "by_size",
    "device",
    "for_type",
    "get",
    "list",
    "namespace_dtypes",
    "not_installed",
    "on_device",
    "register",
]

_builtin_list = list  # ``list`` below is this module's function, also in annotations


#: The project's own backends and the distributions that provide them (named when one is
#: missing; the plugin host lets these distributions claim these names).
DISTRIBUTIONS = {
    "cpu": "oplib-cpu",
    "cuda": "oplib-cuda",
    "meta": "oplib-meta",
    "privateuse1": "oplib-privateuse",
    "dask": "oplib-dask",
    "jax": "oplib-jax",
}


def not_installed(name: str, api: str) -> BackendError:
    """The error for backend ``name`` missing, naming the distribution to install when it
    is one of the project's (``cpu``: every accelerator plugin depends on ``oplib-cpu``)."""
    dist = DISTRIBUTIONS.get(name)
    if dist is not None:
        return BackendError(
            f"{api}(): the {name} backend ({dist}) is not installed; install it with "
            f"`pip install {dist}` (installed: {TABLE.names_text()})"
        )
    return BackendError(
        f"{api}(): no backend {name!r} is installed (installed: {TABLE.names_text()})"
    )


def host_missing(value: Any) -> bool:
    """Whether ``value`` (an argument no overload took) is a numpy array, or a list of
    them, that failed only because the cpu backend is not installed."""
    items = value if isinstance(value, (_builtin_list, tuple)) else (value,)
    return any(isinstance(v, np.ndarray) for v in items) and TABLE.find("cpu") is None


def _always_available() -> str | None:
    return None


def _one_device() -> int:
    return 1


class BackendSpec(Record):
    """Describes a device backend. Only ``name`` and a way to recognise arrays are required.

    Arrays are recognised by ``array_types`` (classes, checked with ``isinstance``) or,
    without importing anything, by ``array_type_names``: ``"module.ClassName"`` strings
    matched against the array's class and its bases, module root only (``"cupy.ndarray"``
    matches ``cupy._core.core.ndarray``). Use the names form for heavy libraries so that
    loading the plugin never imports them.

    Callables (all optional):

    - ``status()``: ``None`` when usable, else the reason it is not (``"no CUDA device"``);
      must never raise.
    - ``device_count()``: number of devices (default 1).
    - ``device_of(array)``: the index of the device an array lives on (default: ``None``,
      a backend with one device).
    - ``to_host(array)`` / ``from_host(ndarray, device)``: copies to and from numpy.
    - ``empty(shape, dtype, device)``: allocate.
    - ``namespace()``: the array module kernels are written against (numpy, cupy, ...).
    - ``from_dlpack(obj)``: import a DLPack capsule producer whose
      ``__dlpack_device__()[0] == dlpack_device_type``.
    - ``dtypes()``: the dtypes the backend's arrays can hold now, either as a mapping from
      oplib's dtype (``oplib.float32``) to the library's own dtype object
      (``oplib.backends.namespace_dtypes(xp)`` builds it from an array API namespace), or,
      for a library whose arrays carry numpy dtypes, as a collection of them (JAX without
      its 64-bit mode: no float64). Default (``None``): every oplib dtype, as itself.
      ``Tensor.dtype`` reads it to name a foreign dtype, copies to the backend refuse the
      others, and ``oplib check`` skips samples whose dtypes are missing from it.
      ``dtypes_fixed=True`` declares that ``dtypes()`` gives the same table for as long as
      the backend is installed (cupy's); then a dtype asked of a factory or an op's
      ``ScalarType`` argument is looked up in it without a call of ``dtypes()`` or of
      :meth:`Backend.check_dtype` (that call checks whether the table changed, as JAX's
      does with its 64-bit mode).

    ``accepts`` names other backends whose arrays this backend's kernels take as inputs
    (a backend always accepts 0-d CPU arrays as scalars). ``fake_kernels`` makes ops
    without a kernel for this backend fall back to their fake kernel (the meta device).

    ``fallback(op)`` is the backend fallback (torch's term): asked, after every registered
    kernel, for a kernel of ``op`` on this backend; it returns one or None (Dask uses it to
    map any pointwise op onto chunks). ``no_kernel_hint`` is added to the error raised when
    an op has no kernel here. ``autograd=False`` declares that this backend's arrays cannot
    record gradients (calls on them that require grad raise ``AutogradUnsupportedError``).
    ``accelerator=True`` marks a device backend that ``oplib.device(0)`` may refer to.
    ``dtype_hint`` says what to do about the dtypes ``dtypes()`` leaves out (JAX without its
    64-bit mode: how to switch it on); errors and ``oplib check``'s skips quote it.
    ``library`` names the module ``status()`` and ``device_count()`` import (``"jax"``):
    while it is not imported, ``oplib backends list`` shows the backend as not probed
    instead of importing it (``--probe`` does), so listing stays fast.
    ``device_module`` is the backend's device module (``is_available``, ``device_count``,
    ``current_device``, ``manual_seed_all`` ...): it is ``oplib_core.<name>`` while the
    backend is installed, under its current name (after ``rename_privateuse1_backend``).
    ``elementwise_kernel(in_params, out_params, operation, name)`` compiles an elementwise
    kernel with ``cupy.ElementwiseKernel``'s signature (``"float32 g, float32 s0"``,
    ``"float32 grad"``, C statements assigning ``grad``, a C identifier) and returns a
    function that takes the inputs (this backend's arrays, on one device) and returns the
    output: with it, the backward formulas of the pointwise core ops run as one kernel
    each on this backend (``oplib-cuda`` gives cupy's; ``None``: each op of a formula runs
    as a call of its own). ``direct_kernels=True`` declares instead that this backend's
    kernels need nothing from the dispatcher between two calls (they take this backend's
    arrays and return them, with no device moves or conversions in between): the same
    formulas then run as one Python function calling the kernels in a row, without a
    dispatch or a Tensor per op, writing intermediates in place where a kernel is a numpy
    ufunc (``oplib-cpu`` sets it).
    """

    name: str
    array_types: tuple[type, ...] = ()
    array_type_names: tuple[str, ...] = ()
    key: str = ""
    priority: int = 0
    status: Callable[[], str | None] = _always_available
    device_count: Callable[[], int] = _one_device
    device_of: Callable[[Any], int | None] | None = None
    to_host: Callable[[Any], np.ndarray] | None = None
    from_host: Callable[[np.ndarray, Device], Any] | None = None
    empty: Callable[[tuple[int, ...], np.dtype, Device], Any] | None = None
    namespace: Callable[[], ModuleType] | None = None
    from_dlpack: Callable[[Any], Any] | None = None
    dtypes: Callable[[], Mapping[np.dtype, Any] | Collection[np.dtype]] | None = None
    dtypes_fixed: bool = False
    dtype_hint: str = ""
    dlpack_device_type: int | None = None
    accepts: tuple[str, ...] = ()
    fake_kernels: bool = False
    fallback: Callable[[Any], Callable[..., Any] | None] | None = None
    no_kernel_hint: str = ""
    autograd: bool = True
    accelerator: bool = False
    description: str = ""
    device_module: Any = None
    library: str = ""
    elementwise_kernel: Callable[[str, str, str, str], Callable[..., Any]] | None = None
    direct_kernels: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise BackendNameError(
                f"BackendSpec: name must be a lower-case identifier like 'cuda', got {self.name!r}",
                self.name,
            )
        if not (self.array_types or self.array_type_names):
            raise InvalidArgumentError(
                f"BackendSpec({self.name!r}): give array_types or array_type_names so that "
                "oplib can recognise this backend's arrays",
                api="BackendSpec",
                argument="array_types",
                value=self.array_types,
            )

    @property
    def dispatch_key(self) -> str:
        """Dispatch key name (``"CPU"``, ``"CUDA"``, ...); defaults to the capitalised name."""
        return self.key or self.name[:1].upper() + self.name[1:]


def _type_names(spec: BackendSpec) -> set[str]:
    return set(spec.array_type_names) | {
        f"{t.__module__.partition('.')[0]}.{t.__name__}" for t in spec.array_types
    }


def _clash_of(mine: BackendSpec, theirs: BackendSpec) -> str:
    """What two backends both claim: ``"the name"``, ``"the dispatch key 'CPU'"``, ``"the
    array type numpy.ndarray"``, or ``""`` when nothing."""
    if mine.name == theirs.name:
        return "the name"
    if mine.dispatch_key == theirs.dispatch_key:
        return f"the dispatch key {mine.dispatch_key!r}"
    common = sorted(_type_names(mine) & _type_names(theirs))
    return f"the array type {common[0]}" if common else ""


class Backend:
    """An installed backend: its spec and where it came from."""

    def __init__(
        self,
        spec: BackendSpec,
        plugin: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        self.spec = spec
        self.plugin = plugin
        self.distribution = distribution
        self.version = version
        self._names = frozenset(spec.array_type_names)
        self._dtype_map: DtypeMap | None = None
        self._dtype_table: object = None

    def __repr__(self) -> str:
        origin = f", distribution={self.distribution!r}" if self.distribution else ""
        return f"<Backend {self.name!r} key={self.key!r}{origin}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def key(self) -> str:
        return self.spec.dispatch_key

    @property
    def multi_device(self) -> bool:
        return self.spec.device_of is not None

    def status(self) -> str | None:
        """``None`` when available, else why not. Never raises."""
        try:
            return self.spec.status()
        except Exception as e:
            return f"status check failed: {type(e).__name__}: {e}"

    def is_available(self) -> bool:
        return self.status() is None

    def device_count(self) -> int:
        if self.status() is not None:
            return 0
        try:
            return int(self.spec.device_count())
        except Exception:
            return 0

    def recognises(self, cls: type) -> bool:
        """Whether ``cls`` is one of this backend's array classes: a subclass of
        ``array_types``, or of a class ``array_type_names`` names. A name is resolved in its
        library only if that library is already imported (``"jax.Array"`` is the public
        alias of a class defined in ``jaxlib``, virtual subclasses included); else a class in
        ``cls``'s MRO matches it by module root and class name. Asked at cache-miss time."""
        if self.spec.array_types and issubclass(cls, self.spec.array_types):
            return True
        return bool(self._names) and _named(cls, self._names)

    def dtype_problem(self, dtype: Any) -> str | None:
        """``None`` when this backend's arrays can hold ``dtype`` (see ``BackendSpec.dtypes``),
        else why not, with the spec's hint."""
        if self.supports_dtype(np.dtype(dtype)):
            return None
        hint = f": {self.spec.dtype_hint}" if self.spec.dtype_hint else ""
        return f"the {self.name} backend does not support dtype {np.dtype(dtype)}{hint}"

    def current_index(self) -> int:
        """The device index that ``Device(name)`` without an index means: the device
        module's ``current_device()`` when the backend has one, else 0."""
        mod = self.spec.device_module
        current = getattr(mod, "current_device", None)
        return int(current()) if current is not None else 0

    def device_of(self, array: Any) -> Device:
        dev_of = self.spec.device_of
        return Device(self.name, None if dev_of is None else dev_of(array))

    def to_host(self, array: Any) -> np.ndarray:
        if self.spec.to_host is None:
            return np.asarray(array)
        return self.spec.to_host(array)

    def from_host(self, array: np.ndarray, dev: Device) -> Any:
        """``array`` copied to device ``dev`` of this backend; ``BackendDtypeError`` (before
        the library is touched) when the backend declares it cannot hold ``array``'s dtype."""
        if self.spec.from_host is None:
            raise BackendError(
                f"backend {self.name!r} cannot receive data from the host (its BackendSpec "
                "has no from_host)"
            )
        self.check_dtype(array.dtype, f"copy to {dev}", copy=True)
        return self.spec.from_host(array, dev)

    def empty(self, shape: tuple[int, ...], dtype: Any, dev: Device) -> Any:
        """An uninitialised array of ``shape`` and ``dtype`` on device ``dev`` (the spec's
        ``empty``); ``BackendDtypeError`` for a dtype the backend declares it cannot hold."""
        if self.spec.empty is None:
            raise BackendError(
                f"backend {self.name!r} cannot allocate (its BackendSpec has no empty)"
            )
        self.check_dtype(dtype, f"empty on {dev}")
        return self.spec.empty(shape, np.dtype(dtype), dev)

    def check_dtype(self, dtype: Any, api: str, *, copy: bool = False) -> None:
        """Raise :meth:`dtype_error` when this backend declares it cannot hold ``dtype``
        (``BackendSpec.dtypes``); free for a backend that holds every dtype. The one guard:
        copies (:meth:`from_host`), :meth:`empty` and every op's ``ScalarType`` argument on
        this backend (the dispatcher asks it) go through here, so no plugin writes its own."""
        dtypes = self.spec.dtypes
        if dtypes is None:
            return
        # the common case in two calls, not four (factories check every keyword dtype):
        # the table dtype_map() last built from is still the one dtypes() gives
        built = self._dtype_map
        if (
            built is not None
            and dtype in built.supported
            and (self.spec.dtypes_fixed or dtypes() is self._dtype_table)
        ):
            return
        if dtype in self._supported():
            return
        try:
            d = np.dtype(dtype)
        except TypeError:  # the library's own dtype object: its kernel converts it
            return
        if not self.supports_dtype(d):
            raise self.dtype_error(d, api, copy=copy)

    def dtype_error(self, dtype: Any, api: str, *, copy: bool = False) -> BackendDtypeError:
        """The error for ``dtype`` refused by this backend in ``api`` (``"copy to cuda:0"``,
        ``"oplib::zeros()"``): names the backend, the dtype, the dtypes it holds and what to
        do (the spec's ``dtype_hint``; keep the data on the cpu; cast it; use a backend that
        holds the dtype)."""
        d = np.dtype(dtype)
        held = ", ".join(x.name for x in sorted(self._supported(), key=_dtype_order))
        cast = _cast_target(d, self._supported())
        hint = f"{self.spec.dtype_hint}; or " if self.spec.dtype_hint else ""
        if copy:
            todo = (
                f"keep {d} tensors on the cpu, or convert them first, e.g. "
                f"t.to(oplib.{cast}).to({self.name!r}), or use a backend that holds {d}"
            )
        else:
            todo = (
                f"ask for a dtype it holds (e.g. oplib.{cast}), keep {d} tensors on the cpu, "
                f"or use a backend that holds {d}"
            )
        return BackendDtypeError(
            f"{api}: backend {self.name!r} has no {d} dtype (it holds {held}); {hint}{todo}",
            api=api,
            backend=self.name,
            dtype=d,
        )

    def dtype_map(self) -> DtypeMap | None:
        """The spec's ``dtypes()`` as a :class:`DtypeMap` (built again only when ``dtypes()``
        gives another object: JAX's change with its 64-bit mode), or None when the backend
        computes with numpy dtypes, every one of them."""
        if self.spec.dtypes is None:
            return None
        table = self.spec.dtypes()
        if self._dtype_map is None or self._dtype_table is not table:
            name = f"backend {self.name!r}"
            if isinstance(table, Mapping):
                self._dtype_map = DtypeMap(name, table, identity=False)
            else:  # the library's arrays carry numpy dtypes: only some of them
                held = _numpy_dtypes(self.name, table)
                self._dtype_map = DtypeMap(name, {d: d for d in held}, True)
            self._dtype_table = table
        return self._dtype_map

    def fixed_dtypes(self) -> frozenset[np.dtype] | None:
        """The oplib dtypes this backend holds for as long as it is installed (its spec's
        ``dtypes_fixed``), or None when ``dtypes()`` may change or the backend holds every
        dtype: a dtype in it needs no :meth:`check_dtype` (the dispatcher's fast calls look
        it up themselves)."""
        if self.spec.dtypes is None or not self.spec.dtypes_fixed:
            return None
        return self._supported()

    def _supported(self) -> frozenset[np.dtype]:
        m = self.dtype_map()
        return frozenset() if m is None else m.supported

    def supports_dtype(self, dtype: np.dtype) -> bool:
        """Whether the backend computes with oplib dtype ``dtype`` (see ``BackendSpec.dtypes``)."""
        m = self.dtype_map()
        return m is None or dtype in m.supported

    def dtype_of(self, array: Any) -> np.dtype:
        """The oplib dtype of one of this backend's arrays."""
        d = array.dtype
        if isinstance(d, np.dtype):
            return d
        m = self.dtype_map()
        return np.dtype(d) if m is None else m.ours(d)

    def namespace(self) -> ModuleType:
        if self.spec.namespace is None:
            raise BackendError(f"backend {self.name!r} does not declare an array namespace")
        return self.spec.namespace()


def _numpy_dtypes(backend: str, table: object) -> _builtin_list[np.dtype]:
    """``BackendSpec.dtypes()``'s collection of numpy dtypes, each checked: a string or a
    non-dtype in it is the plugin's mistake, named as such (``np.dtype`` would read the
    string ``"float32"`` as the dtypes of its letters)."""
    expected = (
        "BackendSpec.dtypes() must return a mapping (oplib dtype -> the library's dtype) or "
        "a collection of numpy dtypes such as {oplib.float32, oplib.int32}"
    )
    if isinstance(table, (str, bytes)) or not isinstance(table, Collection):
        raise BackendError(f"backend {backend!r}: {expected}, got {table!r}")
    held: _builtin_list[np.dtype] = []
    for d in table:
        dtype = None
        if d is not None:  # (np.dtype(None) is float64)
            with contextlib.suppress(TypeError):
                dtype = np.dtype(d)
        if dtype is None:
            raise BackendError(f"backend {backend!r}: {expected}; {d!r} in it is not a dtype")
        held.append(dtype)
    return held


#: What a refused dtype is best cast to, by kind: the first of these the backend holds.
_CASTS: dict[str, tuple[np.dtype, ...]] = {
    "f": (float32, float16, float64),
    "i": (int32, int64, int16),
    "u": (uint32, uint16, uint8),
    "c": (complex64, complex128),
}


#: The order dtypes are listed in messages (docs/dtypes.md's): bool, the signed then the
#: unsigned integers, the floats (bfloat16 and float8 among them), complex; by size in each.
_KIND_ORDER = {"b": 0, "i": 1, "u": 2, "f": 3, "c": 4}


def _dtype_order(dtype: np.dtype) -> tuple[int, int, str]:
    kind = "f" if dtype in EXTENSION_FLOATS else dtype.kind
    return (_KIND_ORDER.get(kind, 5), dtype.itemsize, dtype.name)


def _cast_target(dtype: np.dtype, held: Collection[np.dtype]) -> str:
    """The dtype to suggest casting ``dtype`` to (bfloat16 and float8 are floats here)."""
    kind = "f" if dtype in EXTENSION_FLOATS else dtype.kind
    return str(next((c for c in _CASTS.get(kind, ()) if c in held), float32).name)


def _imported_class(name: str) -> type | None:
    """The class ``"pkg.mod.Name"`` names, if module ``pkg.mod`` (or ``pkg`` holding
    ``mod.Name``) is already imported; never imports anything."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        obj: Any = sys.modules.get(".".join(parts[:cut]))
        if obj is None:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, type) else None
    return None


def _named(cls: type, names: Collection[str]) -> bool:
    """Whether ``cls`` is a subclass of a class ``names`` names (``BackendSpec.
    array_type_names``): resolved in its library if that is imported, else matched by module
    root and class name along ``cls``'s MRO."""
    for name in names:
        found = _imported_class(name)
        if found is not None and issubclass(cls, found):
            return True
    for base in cls.__mro__:
        if f"{base.__module__.partition('.')[0]}.{base.__name__}" in names:
            return True
    return False


def _root_name(dotted: str) -> str:
    """``"pkg.mod.Name"`` → ``"pkg.Name"``, the form array classes are compared in."""
    return f"{dotted.partition('.')[0]}.{dotted.rpartition('.')[2]}"


#: Array libraries with a backend in an oplib distribution: library (module root) ->
#: backend name (its distribution is in ``DISTRIBUTIONS``), for the error when that backend
#: is not installed.
KNOWN_LIBRARIES: dict[str, str] = {
    "numpy": "cpu",
    "cupy": "cuda",
    "dask": "dask",
    "jax": "jax",
    "jaxlib": "jax",
}


class BackendTable:
    """The installed backends, and the (cached) map from array class to backend.

    Filled on first use: reading the table loads the plugins (see ``startup``). A backend
    whose plugin is deferred (``_backend_cache``) is *pending*: its plugin loads when
    something names it, its dispatch key or one of its array classes, or reads the table as
    a whole (``all``)."""

    _deferred = frozenset({"_backends", "_by_type", "_renames", "_pending"})

    def __init__(self) -> None:
        self._lock = LOCK
        self._listeners: _builtin_list[Callable[[str, Backend], None]] = []

    def _init_state(self) -> None:
        self._backends: dict[str, Backend] = {}
        self._by_type: dict[type, Backend | None] = {}
        self._renames: dict[str, str] = {}
        self._pending: dict[str, tuple[DeferredBackend, Callable[[], None]]] = {}
        #: dispatch key -> backend, or the pending backend's (see ``by_key``)
        self._by_key: dict[str, Backend | DeferredBackend] | None = None

    def _changed(self) -> None:
        """Forget what is worked out from the backends (under the lock)."""
        self._by_type.clear()
        self._by_key = None

    # -- pending backends -----------------------------------------------------------------
    def defer(self, backend: DeferredBackend, load: Callable[[], None]) -> None:
        """Note a backend whose plugin ``load()`` installs it (and calls :meth:`undefer`)."""
        with self._lock:
            self._pending[backend.name] = (backend, load)
            self._changed()

    def undefer(self, name: str) -> None:
        with self._lock:
            self._pending.pop(name, None)
            self._by_key = None

    def _load(self, match: Callable[[DeferredBackend], bool]) -> None:
        for backend, load in _builtin_list(self._pending.values()):
            if match(backend):
                load()

    def _load_clashing(self, spec: BackendSpec) -> None:
        """Load the pending backends claiming what ``spec`` does (the clash is then
        settled, and reported, as between installed backends)."""
        if self._pending:
            mine = {_root_name(n) for n in _type_names(spec)}
            self._load(
                lambda b: (
                    b.name == spec.name
                    or b.key == spec.dispatch_key
                    or not mine.isdisjoint(_root_name(n) for n in b.type_names)
                )
            )

    def add_listener(self, fn: Callable[[str, Backend], None]) -> None:
        """``fn(event, backend)`` is called with ``"added"``/``"removed"`` under the lock."""
        self._listeners.append(fn)

    def register(
        self,
        spec: BackendSpec,
        *,
        plugin: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> Callable[[], None]:
        """Add a backend; returns a function that removes it again."""
        ensure()
        self._load_clashing(spec)
        with self._lock:
            if spec.name in self._renames:
                spec = spec._replace(name=self._renames[spec.name])
            old = self._backends.get(spec.name)
            if old is not None:
                where = f"plugin {old.plugin!r}" if old.plugin else "at runtime"
                raise BackendError(
                    f"backends.register(): a backend named {spec.name!r} is already registered "
                    f"({where}, distribution {old.distribution or '-'}); names must be unique"
                )
            for other in self._backends.values():
                clash = _clash_of(spec, other.spec)
                if clash:
                    raise BackendError(
                        f"backends.register(): backend {spec.name!r} claims {clash} of "
                        f"backend {other.name!r} ({other.distribution or 'registered at runtime'})"
                    )
            backend = Backend(spec, plugin, distribution, version)
            self._backends[spec.name] = backend
            # its waiting plugin is the one loading (any other would have clashed above):
            # it is no longer pending, and its kernels need not ask to load it
            self._pending.pop(spec.name, None)
            self._changed()
            for fn in self._listeners:
                fn("added", backend)

        def unregister() -> None:
            with self._lock:
                if self._backends.get(backend.name) is backend:
                    self._remove(backend)

        return unregister

    def _remove(self, backend: Backend) -> None:
        """Take ``backend`` out of the table and tell the listeners (the lock held)."""
        del self._backends[backend.name]
        self._changed()
        for fn in self._listeners:
            fn("removed", backend)

    def forget_plugins(self, plugins: Collection[str]) -> None:
        """Remove the backends registered by ``plugins`` (in a forked child: a plugin whose
        load another thread had under way, its backend registered but the handle that
        undoes it not yet kept, so the rollback of the load cannot reach it)."""
        backends: dict[str, Backend] | None = self.__dict__.get("_backends")
        if backends is None:  # never filled (reading it would fill it, loading the plugins)
            return
        with self._lock:
            for backend in [b for b in backends.values() if b.plugin in plugins]:
                self._remove(backend)

    def rename(self, old: str, new: str) -> None:
        """Give backend ``old`` the name ``new`` (the private-use slot), now and for a backend
        called ``old`` registered later; ``old`` stays an alias in ``get``/``find``. Listeners
        see ``"renamed"``."""
        ensure()
        self._load(lambda b: b.name in (old, new))
        with self._lock:
            taken = self._backends.get(new)
            if taken is not None:
                raise BackendError(
                    f"cannot rename backend {old!r} to {new!r}: a backend named {new!r} is "
                    f"already registered (plugin {taken.plugin!r}, distribution "
                    f"{taken.distribution or '-'})"
                )
            self._renames[old] = new
            backend = self._backends.pop(old, None)
            if backend is not None:
                backend.spec = backend.spec._replace(name=new)
                self._backends[new] = backend
                self._changed()
                for fn in self._listeners:
                    fn("renamed", backend)

    def unrename(self, old: str, new: str) -> None:
        """Undo ``rename(old, new)``: the backend called ``new`` through the rename is
        ``old`` again (listeners see ``"removed"`` under the new name, then ``"added"``)."""
        with self._lock:
            if self._renames.get(old) != new:
                return
            del self._renames[old]
            backend = self._backends.get(new)
            if backend is None:
                return
            for fn in self._listeners:
                fn("removed", backend)
            del self._backends[new]
            backend.spec = backend.spec._replace(name=old)
            self._backends[old] = backend
            self._changed()
            for fn in self._listeners:
                fn("added", backend)

    def get(self, name: str) -> Backend:
        backend = self.find(name)
        if backend is None:
            raise BackendError(
                f"no backend named {self._renames.get(name, name)!r} is installed; "
                f"installed: {self.names_text()}"
            )
        return backend

    def find(self, name: str) -> Backend | None:
        ensure()
        name = self._renames.get(name, name)
        if name in self._pending:
            self._load(lambda b: b.name == name)
        return self._backends.get(name)

    def aliases_of(self, name: str) -> _builtin_list[str]:
        """The old names that ``get``/``find`` map to backend ``name``."""
        return [old for old, new in self._renames.items() if new == name]

    def by_key(self, key: str) -> Backend | None:
        ensure()
        found = self._key_index().get(key)
        if isinstance(found, DeferredBackend):
            self._load(lambda b: b.key == key)
            found = self._key_index().get(key)
        return found if isinstance(found, Backend) else None

    def _key_index(self) -> dict[str, Backend | DeferredBackend]:
        """Dispatch key -> backend, pending ones included (asked for every kernel a plugin
        registers: one dict lookup, even while plugins wait)."""
        index = self._by_key
        if index is None:
            with self._lock:
                index = {}
                for pending, _ in self._pending.values():
                    index[pending.key] = pending
                for backend in self._backends.values():
                    index[backend.key] = backend
                self._by_key = index
        return index

    def all(self) -> _builtin_list[Backend]:
        """Backends, highest priority first, then by name (the pending ones load)."""
        ensure()
        if self._pending:
            self._load(lambda b: True)
        return self.loaded()

    def names(self) -> set[str]:
        """The names of the installed backends, pending ones included (none loads)."""
        ensure()
        return {*self._backends, *self._pending}

    def loaded(self) -> _builtin_list[Backend]:
        """``all()`` without loading the pending backends."""
        return sorted(self._backends.values(), key=lambda b: (-b.spec.priority, b.name))

    def clashing(self, spec: BackendSpec) -> _builtin_list[tuple[Backend, str]]:
        """The installed backends claiming something ``spec`` claims, with what
        (``_clash_of``); pending ones that do are loaded first."""
        ensure()
        self._load_clashing(spec)
        found = [(b, _clash_of(spec, b.spec)) for b in self.loaded()]
        return [(b, clash) for b, clash in found if clash]

    def names_text(self) -> str:
        return ", ".join(b.name for b in self.all()) or "(none)"

    def missing_for(self, cls: type) -> str | None:
        """For an array class no installed backend recognises: ``"the jax backend
        (oplib-jax) is not installed"`` when ``cls`` belongs to a library an oplib
        distribution serves, else ``None``. For error messages only."""
        for base in cls.__mro__:
            known = KNOWN_LIBRARIES.get(base.__module__.partition(".")[0])
            if known is not None and self.find(known) is None:
                return f"the {known} backend ({DISTRIBUTIONS[known]}) is not installed"
        return None

    def for_type(self, cls: type) -> Backend | None:
        """The backend whose arrays are of class ``cls`` (cached per class)."""
        try:
            return self._by_type[cls]
        except KeyError:
            pass
        ensure()  # a miss while another thread loads the plugins must wait for them
        if self._pending:
            self._load(lambda b: _named(cls, b.type_names))
        with self._lock:
            found = None
            for b in self.loaded():
                if b.recognises(cls):
                    found = b
                    break
            self._by_type[cls] = found
            return found


TABLE = deferred(BackendTable)()


def register(spec: BackendSpec) -> Callable[[], None]:
    """Register a backend at runtime (tests, notebooks); returns a function undoing it."""
    return TABLE.register(spec)


def get(name: str) -> Backend:
    """The installed backend called ``name`` (``BackendError`` if none)."""
    return TABLE.get(name)


def for_type(cls: type) -> Backend | None:
    """The installed backend whose arrays are of class ``cls`` (``type(array)``), or
    ``None``. Recognising a class by name does not import its library."""
    return TABLE.for_type(cls)


def list() -> _builtin_list[Backend]:
    """Installed backends, highest priority first."""
    return TABLE.all()


def default_accelerator() -> str:
    """The backend an integer device index refers to: the highest-priority available
    accelerator (``BackendSpec.accelerator``), else ``cpu``."""
    for b in TABLE.all():
        if b.spec.accelerator and b.is_available():
            return b.name
    return "cpu"


def device(spec: Device | str | int, index: int | None = None) -> Device:
    """``device("cuda:1")`` → ``Device(type="cuda", index=1)``; also takes a ``Device`` or an
    int (an index on the current accelerator backend, see :func:`default_accelerator`)."""
    if isinstance(spec, bool):  # an int to Python, not a device index
        raise ArgumentTypeError(
            f"device(): expected a str like 'cuda:1', a Device or an int, got {spec!r}",
            api="device",
            argument="spec",
            value=spec,
        )
    if isinstance(spec, int):
        if spec < 0:
            raise InvalidDeviceError(f"device(): device index must be >= 0, got {spec}", spec)
        return Device(default_accelerator(), spec)
    return parse_device(spec, index)


def dtype_of(array: Any) -> np.dtype:
    """The oplib dtype of a native array of any installed backend: its own ``dtype`` when that
    is a numpy dtype, else what its backend's ``BackendSpec.dtypes`` calls it."""
    d = array.dtype
    if isinstance(d, np.dtype):
        return d
    b = TABLE.for_type(type(array))
    return np.dtype(d) if b is None else b.dtype_of(array)


class DevicePlacement(Record):
    """How a backend's kernels find the device a call runs on and make it current, for
    :func:`on_device`: ``array_type`` recognises the backend's arrays (the library's class,
    known once it is imported; ``()`` when no array decides: JAX runs an op where its inputs
    are), ``device_of(array)`` gives such an array's device index, ``current_device()`` this
    thread's current device index (``None``: the library has no current device, so a call
    that names one always enters it), and ``device(index)`` is the context manager that
    makes device ``index`` current (``cupy.cuda.Device(i)``). ``device_count()``, when
    given, is the number of devices (the ``BackendSpec``'s): with one, every call runs on
    the current device and the dispatcher calls the kernel without the wrapper."""

    array_type: type | tuple[type, ...]
    device_of: Callable[[Any], int]
    current_device: Callable[[], int] | None
    device: Callable[[int], contextlib.AbstractContextManager[Any]]
    device_count: Callable[[], int] | None = None


def on_device(
    kernel: Callable[[], Callable[..., Any]],
    placement: Callable[[], DevicePlacement],
    *,
    name: str,
) -> Callable[..., Any]:
    """A backend plugin's kernel run on the device its call runs on: the first of the
    call's arrays (a positional argument, or an item of a list or tuple argument) that is
    ``placement().array_type``, else its ``device=`` argument's index, else the current
    device. ``placement().device(i)`` is entered only when ``i`` is not the current device
    (entering and leaving ``cupy.cuda.Device`` cost about a microsecond per call, issue
    30; on one device it is always current). ``kernel()`` and ``placement()`` are called
    once, on the first call, so that loading the plugin imports no array library; the
    result is named ``name`` (its ``__name__`` and ``__qualname__``, which errors quote),
    and its registration's origin (``oplib ops show``, ``explain``, a kernel's error note)
    is the line that called ``on_device``, in the plugin.

    No dtype guard is added here: the dispatcher already refuses, before any kernel runs,
    a dtype the backend declares it cannot hold (``BackendSpec.dtypes``) with a
    ``BackendDtypeError`` (``Backend.check_dtype``), in dtype arguments, copies and
    ``empty``.

    On a machine with one device (``placement().device_count() == 1``) there is no device
    to choose: after the first call the wrapper offers the kernel itself as its
    ``fast_entry``, which the dispatcher's fast path calls in its place (about 0.3 µs a
    call less; errors still name the line that called ``on_device``)."""
    fn: Callable[..., Any] | None = None
    array_type: type | tuple[type, ...] = ()
    device_of: Callable[[Any], int] = int
    current: Callable[[], int] | None = None
    enter: Callable[[int], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext

    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal fn, array_type, device_of, current, enter
        if fn is None:  # the first call: imports the library (BackendError when unusable)
            where = placement()
            array_type, device_of = where.array_type, where.device_of
            current, enter = where.current_device, where.device
            fn = kernel()
            # signature() and the dispatcher's keyword defaults see the kernel's
            run.__dict__["__wrapped__"] = fn
            count = where.device_count
            if count is not None and count() == 1:
                run.__dict__["fast_entry"] = fn  # (the fast path's cache reads it)
        index: int | None = None
        for a in args:
            if isinstance(a, array_type):
                index = device_of(a)
                break
            if isinstance(a, (_builtin_list, tuple)):
                for item in a:
                    if isinstance(item, array_type):
                        index = device_of(item)
                        break
                if index is not None:
                    break
        else:
            target = kwargs.get("device")
            if isinstance(target, Device):
                index = target.index
        if index is None or (current is not None and index == current()):
            return fn(*args, **kwargs)
        with enter(index):
            return fn(*args, **kwargs)

    run.__name__ = run.__qualname__ = name
    made_at = sys._getframe(1)  # the plugin's line: registrations and errors point there
    run.__dict__[LOCATION] = f"{made_at.f_code.co_filename}:{made_at.f_lineno}"
    return run


def by_size(
    small: Callable[..., Any],
    large: Callable[..., Any],
    min_size: int,
    *,
    name: str | None = None,
    arguments: int = 1,
) -> Callable[..., Any]:
    """A kernel that calls ``large(*args, **kwargs)`` where one of its first ``arguments``
    positional arguments has a ``size`` (an int) of at least ``min_size``, and
    ``small(*args, **kwargs)`` for every other call: smaller arrays, no ``size``, fewer
    positional arguments. (``arguments=2`` for a binary op whose larger array may come
    second, ``bias - x``; an argument without ``size`` costs an ``AttributeError`` each call,
    so count only arguments that are arrays.)

    For a backend with a kernel of its own for large arrays (oplib-cuda's vectorized
    elementwise kernels) beside the library's function, which stays the cheaper call for
    small ones. The choice is made in C where oplib-core is compiled (no Python frame: a
    launch-bound small call costs about 50-80 ns more than ``small`` alone, against about
    120-140 ns through a Python wrapper), else by a Python function doing the same. An error
    reading ``size`` (other than ``AttributeError``) reaches the caller.

    The result is named ``name`` (default ``large``'s ``__name__``), carries ``large``'s
    ``__doc__``, and ``__wrapped__`` is ``large`` (``inspect.signature`` reads that);
    ``small``, ``large``, ``min_size`` and ``among`` (``arguments``) are readable as
    attributes."""
    for role, fn in (("small", small), ("large", large)):
        if not callable(fn):
            raise ArgumentTypeError(
                f"by_size(): {role} must be callable, got {fn!r}",
                api="by_size",
                argument=role,
                value=fn,
            )
    if type(arguments) is not int or arguments < 1:
        raise InvalidArgumentError(
            f"by_size(): arguments must be a positive int, got {arguments!r}",
            api="by_size",
            argument="arguments",
            value=arguments,
        )
    label = name if name is not None else getattr(large, "__name__", "by_size")
    make = _size_routed_class() or _size_routed_python
    routed: Any = make(small, large, min_size, arguments)
    routed.__name__ = routed.__qualname__ = label
    routed.__doc__ = getattr(large, "__doc__", None)
    routed.__wrapped__ = large
    return cast(Callable[..., Any], routed)


def _size_routed_python(
    small: Callable[..., Any], large: Callable[..., Any], min_size: int, among: int
) -> Callable[..., Any]:
    """``by_size``'s kernel without the compiled call: the same choice, in Python."""

    def routed(*args: Any, **kwargs: Any) -> Any:
        for item in args[:among]:
            size = getattr(item, "size", None)
            if isinstance(size, int) and size >= min_size:
                return large(*args, **kwargs)
        return small(*args, **kwargs)

    routed.__dict__.update(small=small, large=large, min_size=min_size, among=among)
    return routed


def _size_routed_class() -> type | None:
    """``by_size``'s compiled kernel class, or None without the compiled call."""
    from ._dispatch import SizeRoutedBase

    return None if SizeRoutedBase is None else _subclass(SizeRoutedBase)


@functools.cache
def _subclass(base: type) -> type:
    class SizeRouted(base):
        """``by_size``'s kernel: the compiled choice, with a ``__dict__`` for its names."""

    return SizeRouted
