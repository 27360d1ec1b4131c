"""What the registry holds: an operator's entry (:class:`OpEntry`), the kernels on it
(:class:`Kernel`, :class:`LazyKernel`) and where each registration came from
(:class:`Origin`, the plugin running: :data:`current_plugin`).

Below the registry and its table, which both hold these: nothing here imports them.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from .._records import Record, field
from .startup import LOCK

if TYPE_CHECKING:
    from .._schema import FunctionSchema
    from .._tags import Tag

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames in these files are the registration machinery, never the registration's origin.
_MACHINERY = frozenset(
    os.path.join(_PACKAGE_DIR, *f.split("/"))
    for f in (
        "_registry/entry.py",
        "_registry/registry.py",
        "library.py",
        "plugins.py",
        "_registrar.py",
        "custom_op.py",
        "legacy.py",
        "__init__.py",
        "autograd/_registration.py",
    )
)


def fallthrough_kernel(*args: Any, **kwargs: Any) -> Any:
    """Register this for a key to make dispatch skip that key and go on to the next one."""
    raise NotImplementedError("fallthrough_kernel should never be called; dispatch skips it")


class Origin(Record):
    """Where a registration came from: ``file:line``, and the plugin and distribution if any."""

    source: str
    plugin: str | None = None
    distribution: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        if self.plugin is None:
            return self.source
        dist = f", {self.distribution} {self.version}" if self.distribution else ""
        return f"{self.source} (plugin {self.plugin!r}{dist})"


class PluginContext(Record):
    """The plugin whose hook is running (registrations are credited to it). ``owner``
    collects the handles of everything registered meanwhile, by any route (the plugin's
    registrar); ``privileged`` is true for the core's own plugins only (reserved
    namespaces)."""

    plugin: str
    distribution: str | None = None
    version: str | None = None
    owner: Any = None
    privileged: bool = False
    #: The namespace the plugin's distribution declares: its ``oplib`` entry point's name.
    namespace: str | None = None


#: Set while a plugin's hook runs, so registrations are credited to it.
current_plugin: contextvars.ContextVar[PluginContext | None] = contextvars.ContextVar(
    "oplib_current_plugin", default=None
)


#: A kernel wrapper that oplib makes for a plugin (``backends.on_device``) records here
#: where the plugin made it (``file:line``): its own code is oplib's, not the plugin's.
LOCATION = "__oplib_location__"


def _location_of(fn: Any) -> str | None:
    made_at = getattr(fn, LOCATION, None)
    if made_at is not None:
        return str(made_at)
    code = getattr(fn, "__code__", None)
    if code is None:
        wrapped = getattr(fn, "__wrapped__", None) or getattr(fn, "__func__", None)
        code = getattr(wrapped, "__code__", None)
    if code is None:
        return None
    return f"{code.co_filename}:{code.co_firstlineno}"


def _caller_location() -> str:
    """The first frame outside the registration machinery: used where no function object
    exists (``define``)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        machinery = _is_machinery.get(filename)
        if machinery is None:
            machinery = _is_machinery[filename] = os.path.abspath(filename) in _MACHINERY
        if not machinery:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


_is_machinery: dict[str, bool] = {}  # co_filename -> in _MACHINERY (abspath is not free)


def origin_of(fn: Any = None) -> Origin:
    """The origin of a registration of ``fn`` (or of a definition, when ``fn`` is None)."""
    source = (_location_of(fn) if fn is not None else None) or _caller_location()
    return _credited(source, current_plugin.get())


def _credited(source: str, ctx: PluginContext | None) -> Origin:
    if ctx is None:
        return Origin(source)
    return Origin(source, ctx.plugin, ctx.distribution, ctx.version)


class Kernel(Record, eq=False):
    """One kernel registered for one op and one dispatch key (compared by identity: two
    registrations of one function are two kernels)."""

    fn: Callable[..., Any]
    key: str
    origin: Origin
    with_keyset: bool = False
    allow_override: bool = False
    #: The party whose kernel this one overrides (a plugin's allowed override), if any.
    overrides: str | None = None

    @property
    def is_fallthrough(self) -> bool:
        return self.fn is fallthrough_kernel


_KERNEL_FN = Kernel.__dict__["fn"]  # the slots a LazyKernel fills on first use
_KERNEL_ORIGIN = Kernel.__dict__["origin"]

#: ``make(entry) -> (kernel, source)``: a kernel, and the function whose definition is its
#: origin (the kernel itself, or the formula a gradient kernel is made from).
MakeKernel = Callable[["OpEntry"], tuple[Callable[..., Any], Callable[..., Any]]]


class LazyKernel(Kernel, eq=False):
    """A kernel made on first use: ``fn`` and ``origin`` are worked out (``make``) the first
    time either is read. The core's fake kernels and gradient formulas are placed this way
    (``add_kernels_lazy``), so that a program which never fakes or differentiates does not
    import them; to everything reading the table it is a ``Kernel`` like any other."""

    __slots__ = ("_make",)
    if TYPE_CHECKING:  # (a slot of its own, not a field: Kernel's fields are inherited)
        _make: Callable[[], tuple[Callable[..., Any], Origin]] = field(init=False)

    def __init__(
        self, make: Callable[[], tuple[Callable[..., Any], Origin]], key: str, with_keyset: bool
    ) -> None:
        setter = object.__setattr__
        setter(self, "_make", make)
        setter(self, "key", key)
        setter(self, "with_keyset", with_keyset)
        setter(self, "allow_override", False)
        setter(self, "overrides", None)

    def _made(self) -> None:
        try:
            _KERNEL_FN.__get__(self, Kernel)
        except AttributeError:
            fn, origin = self._make()  # (outside the lock: it may import a module)
            with LOCK:
                try:
                    _KERNEL_FN.__get__(self, Kernel)  # another thread made it first
                except AttributeError:
                    _KERNEL_ORIGIN.__set__(self, origin)
                    _KERNEL_FN.__set__(self, fn)

    def _replace(self, **changes: Any) -> Kernel:  # type: ignore[override]
        return Kernel(**{**self._asdict(), **changes})

    def __reduce__(self) -> tuple[Any, ...]:
        return (Kernel, self._values())


def _made_slot(slot: Any) -> property:
    def read(self: LazyKernel) -> Any:
        self._made()
        return slot.__get__(self, Kernel)

    return property(read, doc=f"``Kernel.{slot.__name__}``, made on first read.")


# Set on the class, not written in its body: to type checkers these stay Kernel's fields.
for _slot in (_KERNEL_FN, _KERNEL_ORIGIN):
    setattr(LazyKernel, _slot.__name__, _made_slot(_slot))


class Invalidates(Protocol):
    """What the registry knows of a cache kept above it: that it can be told to forget."""

    def invalidate(self) -> None: ...


class OpEntry:
    """An operator overload: schema, tags, kernels per key (a stack: the last one serves)."""

    __slots__ = (
        "alive",
        "cache",
        "declared",
        "kernels",
        "origin",
        "overload",
        "py_kernels",
        "qualname",
        "schema",
        "tags",
    )

    def __init__(self, schema: FunctionSchema, tags: tuple[Tag, ...], origin: Origin) -> None:
        self.schema = schema
        self.qualname = (
            schema.qualname
            if not schema.overload_name
            else (f"{schema.qualname}.{schema.overload_name}")
        )
        self.tags = tags
        self.origin = origin
        self.kernels: dict[str, list[Kernel]] = {}
        self.py_kernels: dict[Any, Callable[..., Any]] = {}
        # The dispatcher's per-op cache, attached when it builds the OpOverload. The
        # registry tells it to forget (under the lock) whenever an answer may change.
        self.cache: Invalidates | None = None
        self.alive = True
        self.overload: Any = None
        #: Defined by a plugin whose entry point is named after the op's namespace.
        self.declared = False

    def invalidate(self) -> None:
        if self.cache is not None:
            self.cache.invalidate()

    def kernel(self, key: str) -> Kernel | None:
        stack = self.kernels.get(key)
        return stack[-1] if stack else None

    def has_kernel(self, key: str) -> bool:
        return bool(self.kernels.get(key))


Listener = Callable[[str, OpEntry], None]
