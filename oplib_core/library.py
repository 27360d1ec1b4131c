"""The registration API, mirroring ``torch.library``: ``Library``, ``define``, ``impl``,
``register_kernel``, ``register_fake``. A Library owns its registrations: destroying it (or
losing the last reference to it) removes exactly those, and its ops vanish from ``ops``."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, overload

from . import _autocast
from ._dispatch import DispatchMode, OpOverload, tensor_types
from ._kernel_handle import KernelHandle, get_kernel
from ._registry.entry import Kernel, Origin, current_plugin, fallthrough_kernel, origin_of
from ._registry.lookup import qualname_of, resolve
from ._registry.registry import _WELL_KNOWN_KEYS, FAKE, REGISTRY, Handle
from ._registry.startup import fork_safe
from ._schema import parse_schema, parse_signature
from ._tags import Tag
from ._vmap import _batched
from .errors import (
    ArgumentTypeError,
    DuplicateLibraryError,
    InvalidArgumentError,
    InvalidNameError,
    LibraryDestroyedError,
    RegistrationError,
    ReservedNamespaceError,
    SchemaError,
)

__all__ = [
    "Handle",
    "Kernel",
    "KernelHandle",
    "Library",
    "Origin",
    "_scoped_library",
    "define",
    "fallthrough_kernel",
    "get_kernel",
    "impl",
    "impl_abstract",
    "register_autocast",
    "register_dispatch_rule",
    "register_fake",
    "register_kernel",
    "register_vmap",
]

#: A kernel (or fake kernel): the decorator forms give it back unchanged, type included.
_KernelT = TypeVar("_KernelT", bound=Callable[..., Any])

_KINDS = ("DEF", "IMPL", "FRAGMENT")
_def_lock = fork_safe(threading.Lock())
_def_namespaces: dict[str, tuple[object, str]] = {}
# Libraries made by the functional API (lib=None) live as long as the process.
_keep_alive: dict[str, Library] = {}


def _destroy_all(handles: list[Handle], ns: str, kind: str, def_token: object) -> None:
    while handles:
        handles.pop().destroy()
    if kind == "DEF":
        with _def_lock:
            if _def_namespaces.get(ns, (None,))[0] is def_token:
                del _def_namespaces[ns]


class Library:
    """A set of registrations in one namespace whose lifetime is the Library's.

    ``kind`` is ``"DEF"`` (the namespace's owner: defines ops; one per namespace),
    ``"FRAGMENT"`` (defines more ops in a namespace) or ``"IMPL"`` (only kernels).
    ``dispatch_key`` is the default key for :meth:`impl`.
    """

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        if kind not in _KINDS:
            raise InvalidArgumentError(
                f"Library(): kind must be one of {', '.join(_KINDS)}, got {kind!r}",
                api="Library",
                argument="kind",
                value=kind,
            )
        if not isinstance(ns, str) or not ns.isidentifier():
            raise InvalidNameError(f"Library(): namespace must be an identifier, got {ns!r}", ns)
        if ns in REGISTRY.RESERVED_NAMESPACES and kind != "IMPL":
            raise ReservedNamespaceError(
                f"Library({ns!r}, {kind!r}): {ns!r} is a reserved namespace (the core op set); "
                "define your operators in your own namespace",
                ns,
            )
        if dispatch_key:
            REGISTRY.normalize_key(dispatch_key, api="Library")
        self.ns = ns
        self.kind = kind
        self.dispatch_key = dispatch_key
        self._handles: list[Handle] = []
        self._op_defs: set[str] = set()
        self._def_token = object()
        if kind == "DEF":
            with _def_lock:
                if ns in _def_namespaces:
                    raise DuplicateLibraryError(
                        f"Library({ns!r}, 'DEF'): only one DEF library may exist per namespace and "
                        f"one already exists (created at {_def_namespaces[ns][1]}); use kind "
                        "'FRAGMENT' to add operators to it",
                        ns,
                        existing=_def_namespaces[ns][1],
                    )
                _def_namespaces[ns] = (self._def_token, origin_of().source)
        self._finalizer = weakref.finalize(
            self, _destroy_all, self._handles, ns, kind, self._def_token
        )
        ctx = current_plugin.get()
        if ctx is not None and ctx.owner is not None:
            # made while a plugin's hook runs: the plugin's rollback/unregister destroys it
            ctx.owner._register(Handle(self._finalizer, f"Library({ns!r}, {kind!r})"))

    def __repr__(self) -> str:
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})"

    def _check_alive(self, api: str) -> None:
        if not self._finalizer.alive:
            raise LibraryDestroyedError(
                f"Library.{api}(): this Library ({self.ns}) was destroyed", self.ns
            )

    def define(
        self, schema: str, alias_analysis: str = "", *, tags: Iterable[Tag] | Tag = ()
    ) -> str:
        """Define an operator from a full schema ``"name.overload(Tensor x) -> Tensor"``;
        returns its qualified name."""
        self._check_alive("define")
        if self.kind == "IMPL":
            raise RegistrationError(
                f"Library({self.ns!r}, 'IMPL').define(): IMPL libraries cannot define "
                "operators; use a DEF or FRAGMENT library"
            )
        if alias_analysis not in ("", "FROM_SCHEMA", "CONSERVATIVE"):
            raise InvalidArgumentError(
                f"define(): invalid alias_analysis {alias_analysis!r}",
                api="Library.define",
                argument="alias_analysis",
                value=alias_analysis,
            )
        parsed = parse_schema(schema, self.ns)
        ns, sep, name = parsed.name.rpartition("::")
        if sep and ns != self.ns:
            raise InvalidNameError(
                f"Library.define(): schema {schema!r} names namespace {ns!r} but this Library is "
                f"for {self.ns!r}",
                parsed.name,
            )
        parsed = parsed.with_name(f"{self.ns}::{name}", parsed.overload_name)
        tag_tuple = (tags,) if isinstance(tags, Tag) else tuple(tags)
        entry, handle = REGISTRY.define(parsed, tag_tuple)
        self._handles.append(handle)
        self._op_defs.add(entry.qualname)
        return entry.qualname

    def impl(
        self,
        op_name: str | OpOverload,
        fn: Callable[..., Any],
        dispatch_key: str = "",
        *,
        with_keyset: bool = False,
        allow_override: bool = False,
    ) -> None:
        """Register ``fn`` as the kernel of ``op_name`` for ``dispatch_key`` (a key name such
        as ``"CPU"``, a device type, ``"CompositeExplicitAutograd"``...; by default the
        Library's key, else ``CompositeImplicitAutograd``)."""
        self._check_alive("impl")
        qualname = self._qualname(op_name, "Library.impl")
        if (
            dispatch_key
            and self.dispatch_key
            and REGISTRY.normalize_key(dispatch_key, api="Library.impl")
            != REGISTRY.normalize_key(self.dispatch_key, api="Library.impl")
        ):
            raise RegistrationError(
                f"impl({qualname!r}, ...): Explicitly provided dispatch key ({dispatch_key}) is "
                f"inconsistent with the library's dispatch key ({self.dispatch_key}). Use a "
                f"separate Library({self.ns!r}, 'IMPL', {dispatch_key!r}) for this key",
                op=qualname,
            )
        key = dispatch_key or self.dispatch_key or "CompositeImplicitAutograd"
        handle = REGISTRY.add_kernel(
            qualname,
            key,
            fn,
            with_keyset=with_keyset,
            allow_override=allow_override,
            api="Library.impl",
        )
        self._handles.append(handle)

    def _register_fake(self, op_name: str | OpOverload, fn: Callable[..., Any], **kw: Any) -> None:
        self._check_alive("_register_fake")
        qualname = self._qualname(op_name, "register_fake")
        handle = REGISTRY.add_kernel(qualname, FAKE, fn, api="register_fake", **kw)
        self._handles.append(handle)

    def _register(self, handle: Handle) -> None:
        self._handles.append(handle)

    def _qualname(self, op_name: Any, api: str) -> str:
        """The qualified name of ``op_name`` (a name without namespace is in this Library's
        namespace), which must be an existing operator of this namespace."""
        if isinstance(op_name, str) and "::" not in op_name:
            op_name = f"{self.ns}::{op_name}"
        if isinstance(op_name, str):
            self._check_namespace(op_name.partition("::")[0], op_name)
        qualname = resolve(op_name, api).name()
        self._check_namespace(qualname.partition("::")[0], qualname)
        return qualname

    def _check_namespace(self, ns: str, qualname: str) -> None:
        if ns != self.ns:
            raise InvalidNameError(
                f"Library({self.ns!r}).impl(): operator {qualname} is not in this Library's "
                f"namespace; use Library({ns!r}, 'IMPL')",
                qualname,
            )

    def _destroy(self) -> None:
        """Remove every registration this Library made."""
        self._finalizer()


@contextlib.contextmanager
def _scoped_library(ns: str, kind: str, dispatch_key: str = "") -> Iterator[Library]:
    """A Library destroyed when the ``with`` block ends."""
    lib = Library(ns, kind, dispatch_key)
    try:
        yield lib
    finally:
        lib._destroy()


class _Owner(Protocol):
    """What owns registrations made without ``lib=``: a Library, or the registrar of the
    plugin whose hook is running."""

    def _register(self, handle: Handle) -> None: ...
    def define(self, schema: str, /, *, tags: Iterable[Tag] | Tag = ()) -> str: ...


def _lib_for(qualname: str, lib: Library | None) -> _Owner:
    if lib is not None:
        return lib
    ctx = current_plugin.get()
    if ctx is not None and ctx.owner is not None:
        owner: _Owner = ctx.owner  # a plugin's hook is running: its registrar owns this
        return owner
    ns = qualname.partition("::")[0]
    with _def_lock:
        keep = _keep_alive.get(ns)
        if keep is None:
            # A reserved namespace gets an IMPL Library: kernels for the core ops, never
            # definitions (``define`` refuses those namespaces before getting here).
            kind = "IMPL" if ns in REGISTRY.RESERVED_NAMESPACES else "FRAGMENT"
            keep = Library(ns, kind)
            _keep_alive[ns] = keep
        return keep


def _split(qualname: str, api: str) -> tuple[str, str]:
    ns, sep, name = qualname.partition("::") if isinstance(qualname, str) else ("", "", "")
    if not sep or not ns or not name:
        raise InvalidNameError(
            f"{api}(): expected a qualified name 'namespace::name', got {qualname!r}", qualname
        )
    return ns, name


def define(
    qualname: str, schema: str, *, lib: Library | None = None, tags: Iterable[Tag] | Tag = ()
) -> str:
    """Define ``qualname`` (``"mylib::sin"``) with an arguments-only ``schema``
    (``"(Tensor x) -> Tensor"``); returns the qualified name."""
    ns, name = _split(qualname, "define")
    if ns in REGISTRY.RESERVED_NAMESPACES:
        raise ReservedNamespaceError(
            f"define(): {ns!r} is a reserved namespace; use your own namespace", ns
        )
    op_name, _, overload = name.partition(".")
    parsed = parse_signature(schema, name=f"{ns}::{op_name}", overload_name=overload)
    return _lib_for(qualname, lib).define(str(parsed), tags=tags)


def _normalize_types(types: str | Sequence[str] | None, api: str) -> tuple[str, ...]:
    if types is None:
        return ("default",)
    if isinstance(types, str):
        return (types,)
    out = tuple(types) if isinstance(types, Iterable) else ()
    if not out or not all(isinstance(t, str) for t in out):
        raise ArgumentTypeError(
            f"{api}(): expected a device type or a sequence of them, got {types!r}",
            api=api,
            argument="types",
            value=types,
        )
    return out


_checked_device_types: set[str] = set()
_WELL_KNOWN_DEVICE_TYPES = frozenset(_WELL_KNOWN_KEYS.values())


def _warn_if_misspelled(key: str, api: str) -> None:
    """A kernel for a device type no backend serves waits for one to be installed (by
    design); a name close to an installed backend's is more likely a typo: warn once."""
    if key in _checked_device_types or not key.isidentifier() or key != key.lower():
        return
    if key in _WELL_KNOWN_DEVICE_TYPES or key == "default":
        return
    installed = REGISTRY.backends.names()
    if key in installed:
        return
    # Asked once per name (plugin loading registers hundreds of kernels): a name checked
    # while no close backend was installed is not checked again.
    _checked_device_types.add(key)
    import difflib  # only on this rare path: keeps it out of `import oplib_core`

    close = difflib.get_close_matches(key, sorted(installed), n=1, cutoff=0.75)
    if close:
        warnings.warn(
            f"{api}(): no installed backend serves device type {key!r}; the kernel waits "
            f"for a backend of that name. Did you mean {close[0]!r}?",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside oplib_core, for the caller of this."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(pkg):
        frame = frame.f_back
        level += 1
    return level


def _register_many(
    qualname: str,
    keys: tuple[str, ...],
    fn: Callable[..., Any],
    lib: Library | None,
    api: str,
    allow_override: bool,
) -> None:
    for key in keys:
        _warn_if_misspelled(key, api)
    handles: list[Handle] = []
    try:
        for key in keys:
            handles.append(
                REGISTRY.add_kernel(qualname, key, fn, allow_override=allow_override, api=api)
            )
    except BaseException:
        for h in reversed(handles):
            h.destroy()
        raise
    target = _lib_for(qualname, lib)
    for h in handles:
        target._register(h)


@overload
def impl(
    qualname: str | OpOverload,
    types: str | Sequence[str],
    func: None = None,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def impl(
    qualname: str | OpOverload,
    types: str | Sequence[str],
    func: _KernelT,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> _KernelT: ...
@overload
def impl(qualname: Library, types: str, func: str = "", /) -> Callable[[_KernelT], _KernelT]: ...
def impl(
    qualname: str | OpOverload | Library,
    types: str | Sequence[str],
    func: Callable[..., Any] | str | None = None,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Any:
    """Register ``func`` for device types / ``"default"`` / dispatch key names; usable as a
    decorator. ``allow_override=True`` replaces an existing kernel (the old one comes back
    when the new registration goes).

    torch's older Library-first form ``impl(lib, "name", dispatch_key="")`` returns a
    decorator registering through ``lib.impl("name", fn, dispatch_key)``."""
    if isinstance(qualname, Library):
        legacy_lib, op_name = qualname, types
        key = func if isinstance(func, str) else ""
        if func is not None and not isinstance(func, str):
            raise ArgumentTypeError(
                f"impl(lib, {op_name!r}, dispatch_key): dispatch_key must be a str, got {func!r}",
                api="impl",
                argument="dispatch_key",
                value=func,
            )
        if not isinstance(op_name, str):
            raise ArgumentTypeError(
                f"impl(lib, name): name must be an operator name (str), got {op_name!r}",
                api="impl",
                argument="name",
                value=op_name,
            )

        def register_legacy(fn: Callable[..., Any]) -> Callable[..., Any]:
            legacy_lib.impl(op_name, fn, key)
            return fn

        return register_legacy
    keys = _normalize_types(types, "impl")
    if isinstance(func, str):
        raise ArgumentTypeError(
            f"impl(): func must be a callable, got {func!r}",
            api="impl",
            argument="func",
            value=func,
        )

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = qualname_of(qualname, "impl")
        _register_many(name, keys, fn, lib, "impl", allow_override)
        return fn

    return register if func is None else register(func)


@overload
def register_kernel(
    op: Any,
    device_types: str | Sequence[str] | None,
    func: None = None,
    /,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def register_kernel(
    op: Any,
    device_types: str | Sequence[str] | None,
    func: _KernelT,
    /,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> _KernelT: ...
def register_kernel(
    op: Any,
    device_types: str | Sequence[str] | None,
    func: Callable[..., Any] | None = None,
    /,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Any:
    """Register a kernel of ``op`` for ``device_types`` (None: every device, as ``"default"``)."""
    if hasattr(op, "register_kernel") and not isinstance(op, (str, OpOverload)) and lib is None:
        resolve(op, "register_kernel")  # a custom op: refused alike once destroyed
        return op.register_kernel(device_types, func, allow_override=allow_override)
    keys = _normalize_types(device_types, "register_kernel")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = qualname_of(op, "register_kernel")
        _register_many(name, keys, fn, lib, "register_kernel", allow_override)
        return fn

    return register if func is None else register(func)


@overload
def register_fake(
    op: Any,
    func: None = None,
    /,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def register_fake(
    op: Any, func: _KernelT, /, *, lib: Library | None = None, allow_override: bool = False
) -> _KernelT: ...
def register_fake(
    op: Any,
    func: Callable[..., Any] | None = None,
    /,
    *,
    lib: Library | None = None,
    allow_override: bool = False,
) -> Any:
    """Register the fake kernel of ``op``: computes output metadata (shape, dtype, device)
    from data-less inputs. Serves the meta device and ``FakeTensorMode``."""
    if hasattr(op, "register_fake") and not isinstance(op, (str, OpOverload)) and lib is None:
        resolve(op, "register_fake")
        return op.register_fake(func)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = qualname_of(op, "register_fake")
        _register_many(name, (FAKE,), fn, lib, "register_fake", allow_override)
        return fn

    return register if func is None else register(func)


@overload
def impl_abstract(
    op: Any, func: None = None, /, *, lib: Library | None = None
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def impl_abstract(op: Any, func: _KernelT, /, *, lib: Library | None = None) -> _KernelT: ...
def impl_abstract(
    op: Any, func: Callable[..., Any] | None = None, /, *, lib: Library | None = None
) -> Any:
    """Deprecated alias of :func:`register_fake`."""
    warnings.warn(
        "oplib.impl_abstract was renamed to oplib.register_fake; please use that instead",
        FutureWarning,
        stacklevel=2,
    )
    return register_fake(op, func, lib=lib)


#: (operator's qualified name, mode class) -> where its dispatch rule was registered.
_dispatch_rules: dict[tuple[str, type], Origin] = {}


@overload
def register_dispatch_rule(
    op: Any, mode: type[DispatchMode], func: None = None, /, *, lib: Library | None = None
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def register_dispatch_rule(
    op: Any, mode: type[DispatchMode], func: Callable[..., Any], /, *, lib: Library | None = None
) -> Handle: ...
def register_dispatch_rule(
    op: Any,
    mode: type[DispatchMode],
    func: Callable[..., Any] | None = None,
    /,
    *,
    lib: Library | None = None,
) -> Any:
    """Give ``op`` its own handler under the dispatch mode class ``mode``: torch's
    ``torch.library.register_torch_dispatch``.

    While an instance of ``mode`` (exactly that class) is the innermost active mode, calling
    ``op`` runs ``func(mode_instance, op_overload, types, args, kwargs)`` instead of
    ``mode.__oplib_dispatch__``; ``types`` is the tuple of the Tensor arguments' types and
    ``args``/``kwargs`` are the call's. The mode is inactive while ``func`` runs, so calling
    ``op_overload(*args, **kwargs)`` there runs the operator normally.

    ``lib`` owns the rule (it goes when the Library is destroyed); without it the rule
    lives as long as the operator. The direct form returns the registration's ``Handle``
    (``handle.destroy()`` removes the rule); the decorator form returns the function
    unchanged. A second rule for the same operator and mode class is refused, naming the
    first's ``file:line``."""
    api = "register_dispatch_rule"
    if not (isinstance(mode, type) and issubclass(mode, DispatchMode)):
        raise ArgumentTypeError(
            f"{api}(): mode must be a DispatchMode subclass, got {mode!r}",
            api=api,
            argument="mode",
            value=mode,
        )
    overload_ = resolve(op, api)
    if func is not None and not callable(func):
        raise ArgumentTypeError(
            f"{api}(): func must be callable, got {func!r}", api=api, argument="func", value=func
        )

    def register(fn: Callable[..., Any]) -> Handle:
        qualname = overload_.name()
        origin = origin_of(fn)

        def rule(mode_: DispatchMode, *args: Any, **kwargs: Any) -> Any:
            return fn(mode_, overload_, tensor_types(args, kwargs), args, kwargs)

        rule.__wrapped__ = fn  # type: ignore[attr-defined]
        key = (qualname, mode)
        with _def_lock:
            first = _dispatch_rules.get(key)
            if first is not None or overload_.py_kernel(mode) is not None:
                where = f", registered at {first}" if first is not None else " (py_impl)"
                raise RegistrationError(
                    f"{api}(): {qualname} already has a dispatch rule for "
                    f"{mode.__qualname__}{where}",
                    op=qualname,
                    existing=str(first) if first is not None else None,
                )
            inner = REGISTRY.add_py_kernel(qualname, mode, rule)
            _dispatch_rules[key] = origin

        def undo() -> None:
            inner.destroy()
            with _def_lock:
                if _dispatch_rules.get(key) is origin:
                    del _dispatch_rules[key]

        handle = Handle(undo, f"dispatch rule of {qualname} for {mode.__qualname__}")
        _lib_for(qualname, lib)._register(handle)
        return handle

    if func is None:

        def decorator(fn: _KernelT) -> _KernelT:
            register(fn)
            return fn

        return decorator
    return register(func)


def register_autocast(
    op: Any, device_type: str, cast_inputs: Any, /, *, lib: Library | None = None
) -> Handle:
    """Give ``op`` an autocast rule for ``device_type`` (torch's
    ``torch.library.register_autocast``): inside an enabled ``oplib.autocast(device_type)``
    its floating inputs on that device (not float64, in lists too) are cast to
    ``cast_inputs`` and the op runs with autocast off, so the ops its kernel calls are not
    cast again. Non-floating inputs are untouched.

    ``lib`` owns the rule (it goes when the Library is destroyed); the returned ``Handle``
    removes it too. A later rule for the same op and device replaces this one while it
    lives. A device type autocast does not support raises ``InvalidDeviceError`` (a
    ``ValueError``, as torch's); a ``cast_inputs`` that is not a floating dtype raises
    ``ArgumentTypeError``."""
    api = "register_autocast"
    if hasattr(op, "register_autocast") and not isinstance(op, (str, OpOverload)) and lib is None:
        resolve(op, api)  # a custom op: refused alike once destroyed
        handle: Handle = op.register_autocast(device_type, cast_inputs)
        return handle
    overload_ = resolve(op, api)
    qualname = overload_.name()
    device = _autocast.check_device_type(device_type, f"{api}({qualname!r})")
    dtype = _autocast.check_cast_dtype(cast_inputs, f"{api}({qualname!r})", "cast_inputs")
    handle = _autocast.add_rule(qualname, device, dtype)
    _lib_for(qualname, lib)._register(handle)
    return handle


#: (operator's qualified name) -> where its vmap rule was registered.
_vmap_rules: dict[str, Origin] = {}


class _KwargOnlyTensorsError(SchemaError, NotImplementedError):
    """``register_vmap`` for an op with keyword-only Tensor arguments: a SchemaError, and
    the NotImplementedError torch raises for it."""


def _check_vmap_schema(op: OpOverload, api: str) -> None:
    schema = op.schema
    if any(a.kwarg_only and a.type.is_tensor_like() for a in schema.arguments):
        raise _KwargOnlyTensorsError(
            f"{api} with kwarg-only Tensor args. In the original definition of the op, please "
            f"make your tensors not kwarg-only. Got: {schema}",
            str(schema),
        )


def add_vmap_rule(
    op: OpOverload, fn: Callable[..., Any], owner: _Owner, api: str, *, replace: bool
) -> Handle:
    """Put ``fn`` in the vmap rule table for ``op`` (``replace``: a custom op's new rule
    replaces its old one, as torch's ``CustomOpDef.register_vmap``)."""
    if not callable(fn):
        raise ArgumentTypeError(
            f"{api}(): func must be callable, got {fn!r}", api=api, argument="func", value=fn
        )
    qualname = op.name()
    origin = origin_of(fn)
    with _def_lock:
        first = _vmap_rules.get(qualname)
        if first is not None and not replace:
            raise RegistrationError(
                f"{api}(): {qualname} already has a vmap rule, registered at {first}; destroy "
                "its handle (or its Library) first",
                op=qualname,
                existing=str(first),
            )
        _batched.USER_RULES[qualname] = fn
        _vmap_rules[qualname] = origin

    def undo() -> None:
        with _def_lock:
            if _vmap_rules.get(qualname) is origin:
                del _vmap_rules[qualname]
                del _batched.USER_RULES[qualname]

    handle = Handle(undo, f"vmap rule of {qualname}")
    owner._register(handle)
    return handle


@overload
def register_vmap(
    op: Any, func: None = None, /, *, lib: Library | None = None
) -> Callable[[_KernelT], _KernelT]: ...
@overload
def register_vmap(
    op: Any, func: Callable[..., Any], /, *, lib: Library | None = None
) -> Handle: ...
def register_vmap(
    op: Any, func: Callable[..., Any] | None = None, /, *, lib: Library | None = None
) -> Any:
    """Give ``op`` a batching rule for ``oplib.vmap`` (torch's ``torch.library.register_vmap``).

    The rule is called as ``func(info, in_dims, *args, **kwargs)`` with the op's arguments
    (its batched Tensors with the batch dim at ``in_dims[i]``; None for an argument that is
    not batched or not a Tensor; a list of dims for a ``Tensor[]``), ``info.batch_size`` and
    ``info.randomness``, and returns ``(output, out_dims)``: out_dims has one entry per
    output (or one int for all) saying where its batch dim is, None for an output that is
    the same for every example. It runs once for the whole batch; an op without a rule runs
    once per example inside vmap. Ops with keyword-only Tensor arguments are refused, as
    torch refuses them.

    A custom op (``CustomOpDef``) takes the rule through its own ``register_vmap``, which
    replaces an earlier one. For other ops ``lib`` owns the rule; a second rule for the
    same op is refused naming the first's ``file:line``. The direct form returns the
    ``Handle`` (``handle.destroy()`` removes the rule); the decorator form returns the
    function."""
    api = "register_vmap"
    if hasattr(op, "register_vmap") and not isinstance(op, (str, OpOverload)) and lib is None:
        resolve(op, api)  # a custom op: refused alike once destroyed
        return op.register_vmap(func)
    overload_ = resolve(op, api)
    _check_vmap_schema(overload_, api)

    def register(fn: Callable[..., Any]) -> Handle:
        return add_vmap_rule(overload_, fn, _lib_for(overload_.name(), lib), api, replace=False)

    if func is None:

        def decorator(fn: _KernelT) -> _KernelT:
            register(fn)
            return fn

        return decorator
    return register(func)
