"""``load_library(path)``: check a native library's file, read its ABI version, open it,
call its entry symbol with the API table, and register what it declares, all or nothing.

The order is the safety argument: on ELF systems the file is checked whole and the exported
``oplib_library_abi_version`` is read from its dynamic symbol table (``_elf``) before
``dlopen``, so a truncated file, a file that is no oplib library, and a library built for
another major version are refused without running its code (constructors included). Every
registration made during ``oplib_library_init`` is a :class:`~oplib_core._registry.registry.Handle`;
any failure (a callback refused, the init returned non-zero) destroys them all before the
error is raised.
"""

from __future__ import annotations

import ctypes as C
import os
import stat
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import numpy as np

from .._registry.entry import Origin, current_plugin
from .._registry.registry import FAKE, REGISTRY, Handle
from .._registry.startup import ensure
from .._schema import FunctionSchema, parse_signature
from .._tags import Tag
from .._tensor.tensor import Tensor
from ..backends import TABLE
from ..errors import OplibError, ReservedNamespaceError, SchemaError, UnknownOperatorError
from ..fake import FakeArray
from . import _abi as A
from . import loaded_libraries
from ._classes import add_class, check_qualname, class_entry
from ._elf import kind_of, read_library
from ._errors import LibraryLoadError, NativeKernelError
from ._fastcall import fast_call_for
from ._marshal import CallPlan, allocate, fake_of, metas_from_shape_fn
from ._marshal import result as _result

__all__ = ["NativeKernel", "NativeObject", "load_library", "loaded_libraries"]

#: The native table's lock: innermost of the project's locks (docs/architecture.md), held
#: only to read or change ``_LIBRARIES`` and ``loaded_libraries``.
_LOCK = threading.Lock()


def _reset_after_fork() -> None:
    """In a forked child only the forking thread exists: the lock another thread held for a
    table update would never be released. (The table is whole: each update is one dict or
    set operation.)"""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
_LIBRARIES: dict[str, NativeLibrary] = {}
_KERNELS: weakref.WeakSet[NativeKernel] = weakref.WeakSet()
#: Whether libraries here are ELF files, checked and read before they are opened.
_ELF = sys.platform.startswith(("linux", "freebsd", "netbsd", "openbsd", "dragonfly", "sunos"))
# Each library resolves its own symbols (two exporting one kernel name each run their own);
# absent where ctypes ignores the mode (Windows).
_RTLD_LOCAL: int = getattr(os, "RTLD_LOCAL", 0)
_RTLD_NOW: int = getattr(os, "RTLD_NOW", 0)


def _invalidate_kernels(*_: Any) -> None:
    """What native kernels remember about sizing outputs is dropped on any change to the
    registry (a fake kernel registered or removed) or to a library's shape functions:
    those are rare, calls are not."""
    for kernel in list(_KERNELS):
        kernel.invalidate()


REGISTRY.add_listener(_invalidate_kernels)


class _HandleSink(Protocol):
    def _register(self, handle: Handle) -> None: ...


class NativeLibrary:
    """A loaded library: its ctypes handle, shape functions by op (or method) name, and the
    handles of its registrations."""

    def __init__(self, path: str, dll: C.CDLL) -> None:
        self.path = path
        self.dll = dll
        self.shape_fns: dict[str, Any] = {}
        self.handles: list[Handle] = []
        self.keep: list[Any] = []  # ctypes function objects C may call later
        self.classes_seen: set[str] = set()

    def __repr__(self) -> str:
        return f"<NativeLibrary {self.path}>"


class NativeKernel:
    """A native kernel as oplib calls it: native arrays in, native arrays out."""

    __slots__ = ("__name__", "__qualname__", "__weakref__", "fast", "fn", "lib", "metas", "plan")

    def __init__(self, fn: Any, plan: CallPlan, lib: NativeLibrary) -> None:
        self.fn = fn
        self.plan = plan
        self.lib = lib
        self.fast = fast_call_for(plan, _address(fn), self, self._positional)
        self.metas: dict[Any, list[tuple[tuple[int, ...], np.dtype]]] = {}
        self.__name__ = self.__qualname__ = f"native kernel of {plan.op}"
        _KERNELS.add(self)

    def __repr__(self) -> str:
        return f"<native kernel of {self.plan.op} from {self.lib.path}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:  # every argument positionally: the fast path may serve
            return self.fast.call(*args)
        return self._call(args, kwargs)

    @property
    def fast_entry(self) -> Any:
        """What the dispatcher's fast path may call instead of this object, with the same
        positional arguments (it skips this object's frame; dropped on ``invalidate``)."""
        return self.fast.call

    def _positional(self, args: tuple[Any, ...]) -> Any:
        return self._call(args, {})

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plan = self.plan
        values = plan.values(args, kwargs)
        if kwargs or len(args) != plan.nargs:  # defaults filled in: the fast path may serve
            return self.fast.call(*values)
        keep: list[Any] = []
        cargs, first = plan.fill(values, keep)
        metas = self._metas(values, cargs) if plan.nouts else []
        outs, couts = allocate(plan, first, metas, keep)
        err = A.Error()
        plan.check(self.fn(cargs, plan.nargs, couts, plan.nouts, C.byref(err)), err)
        return _result(outs)

    def invalidate(self) -> None:
        """Forget every remembered output size (a fake kernel or shape function changed),
        and the dispatcher's answers for the op, which may hold ``fast_entry``."""
        self.metas = {}
        self.fast.invalidate()
        entry = REGISTRY.ops.get(self.plan.op)
        if entry is not None:
            entry.invalidate()

    def shape_fn(self) -> Any:
        """The library's shape function for this op (or method), if it gave one."""
        return self.lib.shape_fns.get(self.plan.op)

    def fake_metas(self, values: list[Any]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """The outputs' sizes by the op's fake kernel (the fast path caches them)."""
        return self._run_fake(self._fake(), values)

    def _fake(self) -> Any:
        entry = REGISTRY.ops.get(self.plan.op)
        return entry.kernel(FAKE) if entry is not None else None

    def _metas(self, values: list[Any], cargs: Any) -> list[tuple[tuple[int, ...], np.dtype]]:
        plan = self.plan
        shape_fn = self.shape_fn()
        if shape_fn is not None:
            return metas_from_shape_fn(plan, shape_fn, cargs)
        fake = self._fake()
        # A fake kernel is a function of metadata and scalars: its answer is remembered per
        # (fake kernel, input metadata), so repeated calls skip running it.
        try:
            key = (fake, tuple(map(_meta_key, values)))
            hit = self.metas.get(key)
        except TypeError:  # an unhashable argument: no caching
            key, hit = None, None
        if hit is not None:
            return hit
        metas = self._run_fake(fake, values)
        if key is not None and len(self.metas) < 256:
            self.metas[key] = metas
        return metas

    def _run_fake(self, fake: Any, values: list[Any]) -> list[tuple[tuple[int, ...], np.dtype]]:
        plan = self.plan
        if fake is None:
            raise NativeKernelError(
                f"{plan.op} (library {self.lib.path}): oplib cannot size the outputs: register "
                "a shape function (api->register_shape_fn) or a fake kernel "
                f"(oplib.register_fake({plan.op!r}))",
                op=plan.op,
                library=self.lib.path,
                status=A.OK,
            )
        fvalues = [_fake_value(v) for v in values]
        npos = sum(not a.kwarg_only for a in plan.args)
        kw = {a.name: v for a, v in zip(plan.args[npos:], fvalues[npos:], strict=True)}
        out = fake.fn(*fvalues[:npos], **kw)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        metas = []
        for o in outs:
            shape = tuple(o.shape)
            if not all(isinstance(d, int) for d in shape):
                raise NativeKernelError(
                    f"{plan.op} (library {self.lib.path}): the fake kernel gave symbolic "
                    f"sizes {shape}; a native kernel needs a shape function for "
                    "data-dependent output sizes",
                    op=plan.op,
                    library=self.lib.path,
                    status=A.OK,
                )
            metas.append((tuple(int(d) for d in shape), np.dtype(o.dtype)))
        return metas


def _meta_key(v: Any) -> Any:
    """What a fake kernel may depend on: an array's class, shape and dtype; a value."""
    if type(v) is list or type(v) is tuple:
        return tuple(map(_meta_key, v))
    shape = getattr(v, "shape", None)
    if shape is not None and not isinstance(v, np.generic):
        return (type(v), shape, v.dtype)
    return (type(v), v)


def _data(value: Any) -> Any:
    return value._data if type(value) is Tensor else value


def _device_of(value: Any) -> Any:
    backend = TABLE.for_type(type(value))
    if backend is None:
        raise TypeError(f"no installed backend recognises {type(value).__name__} arrays")
    return backend.device_of(value)


def _fake_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_fake_value(e) for e in v]
    if hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (FakeArray, np.generic)):
        return fake_of(v, _device_of)
    return v


class _ShapeFake:
    """A library's shape function serving as the op's fake kernel."""

    __slots__ = ("__name__", "fn", "plan")

    def __init__(self, fn: Any, plan: CallPlan) -> None:
        self.fn = fn
        self.plan = plan
        self.__name__ = f"shape function of {plan.op}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plan = self.plan
        values = plan.values(args, kwargs)
        keep: list[Any] = []
        cargs, first = plan.fill(values, keep, fake_objects=True)
        metas = metas_from_shape_fn(plan, self.fn, cargs)
        device = first.device if isinstance(first, FakeArray) else _device_of(first)
        cls = type(first) if isinstance(first, FakeArray) else FakeArray
        return _result([cls._make(shape, dtype, device) for shape, dtype in metas])


class NativeObject:
    """Base of the Python classes of native classes: wraps the handle ``create`` returned,
    calls ``destroy`` when collected, pickles by its constructor arguments and flattens to
    them (``__obj_flatten__``) for fake mode."""

    __slots__ = ("__weakref__", "_oplib_handle", "_oplib_values")
    _oplib_plan: ClassVar[CallPlan]
    _oplib_create: ClassVar[Any]
    _oplib_destroy: ClassVar[Any]
    __oplib_qualname__: ClassVar[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        plan = type(self)._oplib_plan
        values = plan.values(args, kwargs)
        keep: list[Any] = []
        cargs, _ = plan.fill(values, keep)
        err = A.Error()
        handle = type(self)._oplib_create(cargs, plan.nargs, C.byref(err))
        if not handle:
            plan.check(A.INVALID_ARGUMENT, err, " constructor")
        self._oplib_handle = handle
        self._oplib_values = tuple(values)
        weakref.finalize(self, type(self)._oplib_destroy, handle)

    def __obj_flatten__(self) -> tuple[tuple[str, Any], ...]:
        plan = type(self)._oplib_plan
        return tuple((a.name, v) for a, v in zip(plan.args, self._oplib_values, strict=True))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self).__oplib_qualname__, self._oplib_values))

    def __repr__(self) -> str:
        return f"<{type(self).__oplib_qualname__} object at {self._oplib_handle:#x}>"


def _rebuild(qualname: str, values: tuple[Any, ...]) -> Any:
    """Unpickle a native object: the process must have loaded its library (plugins load
    theirs on first use of the registry, which ``class_entry`` triggers)."""
    ensure()
    return class_entry(qualname, "unpickle").cls(*values)


class _Session:
    """The API table for one ``oplib_library_init`` call and the registrations it made."""

    def __init__(self, lib: NativeLibrary) -> None:
        self.lib = lib
        self.errors: list[OplibError | Exception] = []
        self.last_error = b""
        ctx = current_plugin.get()
        self.origin = (
            Origin(lib.path)
            if ctx is None
            else Origin(lib.path, ctx.plugin, ctx.distribution, ctx.version)
        )
        self.api = A.Api(
            A.ABI_MAJOR,
            A.ABI_MINOR,
            C.sizeof(A.Api),
            None,
            A.DefineCb(self._guard(self._define)),
            A.ImplCb(self._guard(self._impl)),
            A.ShapeCb(self._guard(self._shape_fn)),
            A.ClassCb(self._guard(self._class)),
            A.MethodCb(self._guard(self._method)),
            A.LastErrorCb(lambda _ctx: self.last_error),
            A.DefineTaggedCb(self._guard(self._define)),
        )

    def _guard(self, fn: Callable[..., None]) -> Callable[..., int]:
        def callback(_ctx: Any, *args: Any) -> int:
            try:
                fn(*args)
            except Exception as e:  # reported after init returns; C gets a status
                self.errors.append(e)
                self.last_error = str(e).encode(errors="replace")
                return A.INVALID_ARGUMENT
            return A.OK

        return callback

    def _add(self, handle: Handle) -> None:
        self.lib.handles.append(handle)

    def _parse(self, qualname: str, schema: str) -> FunctionSchema:
        name, _, overload = qualname.partition(".")
        return parse_signature(schema, name=name, overload_name=overload)

    def _define(self, qualname: bytes, schema: bytes, tags: bytes = b"") -> None:
        parsed = self._parse(qualname.decode(), schema.decode())
        tag_names = [t.strip() for t in tags.decode().split(",") if t.strip()]
        unknown = [t for t in tag_names if t not in Tag.__members__]
        if unknown:
            raise SchemaError(
                f"define_tagged(): unknown tag(s) {', '.join(unknown)} for {parsed.qualname}; "
                f"expected oplib.Tag names ({', '.join(Tag.__members__)})"
            )
        ns = parsed.namespace
        if not ns:
            raise SchemaError(f"define(): expected 'namespace::name', got {qualname.decode()!r}")
        if ns in REGISTRY.RESERVED_NAMESPACES:
            raise ReservedNamespaceError(
                f"define(): {ns!r} is a reserved namespace; use your own namespace", ns
            )
        entry, handle = REGISTRY.define(
            parsed, tuple(Tag[t] for t in tag_names), origin=self.origin
        )
        self._add(handle)
        CallPlan(entry.schema, entry.qualname, self.lib.path)  # refuse what C cannot take

    def _impl(self, qualname: bytes, device_type: bytes, fn: Any) -> None:
        q = qualname.decode()
        try:
            entry = REGISTRY.entry(q)
        except UnknownOperatorError:
            raise UnknownOperatorError(
                f"impl(): operator {q!r} does not exist; define it first, in "
                f'oplib_library_init before this impl: api->define(api->ctx, "{q}", '
                '"(...) -> ...")',
                op=q,
            ) from None
        plan = CallPlan(entry.schema, entry.qualname, self.lib.path)
        key = device_type.decode()
        kernel = NativeKernel(A.KernelFn(_address(fn)), plan, self.lib)
        self._add(REGISTRY.add_kernel(entry.qualname, key, kernel, origin=self.origin))

    def _shape_fn(self, qualname: bytes, fn: Any) -> None:
        q = qualname.decode()
        shape = A.ShapeFn(_address(fn))
        entry = REGISTRY.ops.get(q)
        if entry is not None:  # an op: the shape function is its fake kernel too
            plan = CallPlan(entry.schema, entry.qualname, self.lib.path)
            self._add(REGISTRY.add_kernel(q, FAKE, _ShapeFake(shape, plan), origin=self.origin))
        elif q.rpartition(".")[0] not in self.lib.classes_seen:
            raise SchemaError(
                f"register_shape_fn(): {q!r} is neither a defined operator nor a method "
                "'ns::Class.method' of a class this library registered"
            )
        shapes = self.lib.shape_fns
        shapes[q] = shape
        _invalidate_kernels()

        def undo() -> None:
            shapes.pop(q, None)
            _invalidate_kernels()

        self._add(Handle(undo, f"shape function of {q}"))

    def _class(self, cdef: Any) -> None:
        d = cdef.contents
        q = check_qualname((d.qualname or b"").decode(), "register_class")
        plan = CallPlan(self._parse(q, (d.init_schema or b"() -> ()").decode()), q, self.lib.path)
        if plan.nouts:
            raise SchemaError(f"register_class(): {q}'s init_schema must return (), got {plan}")
        if not d.create or not d.destroy:
            raise SchemaError(f"register_class(): {q} needs both create and destroy functions")
        attrs = {
            "__slots__": (),
            "__module__": "oplib_core.classes",
            "_oplib_plan": plan,
            "_oplib_create": A.CreateFn(_address(d.create)),
            "_oplib_destroy": A.DestroyFn(_address(d.destroy)),
        }
        cls = type(q.rpartition("::")[2], (NativeObject,), attrs)
        cls.__qualname__ = q
        self._add(add_class(q, cls, api="register_class", origin=self.origin))
        self.lib.classes_seen.add(q)

    def _method(self, class_q: bytes, name: bytes, schema: bytes, fn: Any) -> None:
        q = class_q.decode()
        entry = class_entry(q, "register_method")
        if q not in self.lib.classes_seen:
            raise SchemaError(f"register_method(): class {q} was not registered by this library")
        method = name.decode()
        if not method.isidentifier() or hasattr(entry.cls, method):
            raise SchemaError(f"register_method(): {q} cannot get a method named {method!r}")
        parsed = self._parse(q, schema.decode())
        first = parsed.arguments[0].type if parsed.arguments else None
        if str(first) != q:
            raise SchemaError(
                f"register_method(): the first argument of {q}.{method} must be {q} self, "
                f"got schema {schema.decode()!r}"
            )
        plan = CallPlan(parsed, f"{q}.{method}", self.lib.path)
        kernel = NativeKernel(A.KernelFn(_address(fn)), plan, self.lib)

        def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
            # Methods are called directly, not dispatched: Tensors in, Tensors out.
            if any(type(a) is Tensor for a in args) or any(
                type(v) is Tensor for v in kwargs.values()
            ):
                out = kernel(self, *map(_data, args), **{k: _data(v) for k, v in kwargs.items()})
                return (
                    tuple(map(Tensor._wrap, out))
                    if isinstance(out, tuple)
                    else (None if out is None else Tensor._wrap(out))
                )
            return kernel(self, *args, **kwargs)

        bound.__name__ = method
        bound.__qualname__ = f"{q}.{method}"
        bound.__doc__ = f"{q}.{method}{str(parsed)[len(q) :]} (native, {self.lib.path})"
        cls = entry.cls
        setattr(cls, method, bound)
        self._add(Handle(lambda: delattr(cls, method), f"method {q}.{method}"))


def _address(fn: Any) -> int:
    """The address of a function pointer the library passed; NULL is refused (calling it
    would crash the process)."""
    address = C.cast(fn, C.c_void_p).value
    if not address:
        raise SchemaError("a NULL function pointer was passed")
    return address


def _fail(lib: NativeLibrary, message: str, op: str | None = None) -> LibraryLoadError:
    while lib.handles:
        lib.handles.pop().destroy()
    return LibraryLoadError(message, library=lib.path, op=op)


def _check_version(real: str, version: int) -> None:
    if version >> 16 != A.ABI_MAJOR:
        raise LibraryLoadError(
            f"load_library(): {real} was built for oplib ABI {A.version_str(version)}, "
            f"but this oplib implements ABI {A.version_str(A.ABI_VERSION)} (major versions "
            "differ); rebuild the library against this oplib's header "
            "(oplib.get_include())",
            library=real,
        )


def _not_oplib(real: str) -> LibraryLoadError:
    return LibraryLoadError(
        f"load_library(): {real} is not an oplib library: it does not export "
        f"{A.VERSION_SYMBOL} and {A.INIT_SYMBOL} (write the entry function with "
        "OPLIB_LIBRARY_INIT(api) from oplib.h)",
        library=real,
    )


def load_library(path: str | os.PathLike[str], *, _sink: _HandleSink | None = None) -> None:
    """Load a native library of operators (``torch.ops.load_library``): check the file and
    read its ABI version without running its code (ELF), open it with ``RTLD_LOCAL``, call
    its ``oplib_library_init`` and register what it declares. Loading a path already loaded
    does nothing.

    Locks, in the project's order (docs/architecture.md): the registry's lock is held from
    opening the library to the end of its registrations, so no other thread sees half a
    library and two loads of one path make one; the native table's lock is taken inside it,
    only to read or change the table of loaded libraries, never while calling the registry
    (a plugin hook loading a library holds the registry's lock already)."""
    real = os.path.realpath(os.fspath(path))
    with _LOCK:
        if real in loaded_libraries:
            return
    try:
        mode = os.stat(real).st_mode
    except OSError:
        raise LibraryLoadError(f"load_library(): {real} does not exist", library=real) from None
    if not stat.S_ISREG(mode):
        raise LibraryLoadError(
            f"load_library(): {real} is {kind_of(mode)}, not a regular file; give the path "
            "of the library file itself (a .so built with cc -shared)",
            library=real,
        )
    # Read before dlopen, which runs the library's constructors and crashes on a truncated
    # file; elsewhere than ELF the version is read from the opened library.
    info = read_library(real) if _ELF else None
    if info is not None:
        if info.abi_version is None or not info.has_init:
            raise _not_oplib(real)
        _check_version(real, info.abi_version)
    ensure()  # before the lock: never wait for the plugins to load while holding it
    with REGISTRY.lock:
        with _LOCK:
            if real in loaded_libraries:  # loaded by another thread meanwhile
                return
        _open_and_register(real, info is None, _sink)


def _open_and_register(real: str, check_version: bool, sink: _HandleSink | None) -> None:
    """Open the library (each resolves its own symbols: ``RTLD_LOCAL``), run its init and
    enter it into the table; the caller holds the registry's lock."""
    try:
        dll = C.CDLL(real, mode=_RTLD_LOCAL | _RTLD_NOW)
    except OSError as e:
        raise LibraryLoadError(
            f"load_library(): {real} is not a shared library that can be opened ({e})",
            library=real,
        ) from None
    lib = NativeLibrary(real, dll)
    try:
        version = C.c_uint32.in_dll(dll, A.VERSION_SYMBOL).value
        init = A.InitFn((A.INIT_SYMBOL, dll))
    except ValueError:
        raise _not_oplib(real) from None
    if check_version:
        _check_version(real, version)
    session = _Session(lib)
    try:
        status = init(C.byref(session.api))
    except BaseException:
        raise _fail(lib, f"load_library(): {real}: oplib_library_init failed") from None
    if session.errors:
        first = session.errors[0]
        op = getattr(first, "op", None)
        raise _fail(lib, f"load_library(): {real}: {first}", op) from first
    if status != A.OK:
        raise _fail(
            lib,
            f"load_library(): {real}: oplib_library_init returned {status} (OPLIB_OK is 0) "
            "although every registration call it made succeeded, so the failure is the "
            "library's own; nothing it registered was kept",
        )
    lib.keep.append(session)
    with _LOCK:
        _LIBRARIES[real] = lib
        loaded_libraries.add(real)

    def forget() -> None:
        with REGISTRY.lock:
            with _LOCK:
                _LIBRARIES.pop(real, None)
                loaded_libraries.discard(real)
            while lib.handles:
                lib.handles.pop().destroy()

    if sink is not None:
        sink._register(Handle(forget, f"library {real}"))
