"""Kernel resolution: which kernel serves an operator on a backend (torch's ``resolve_key``).

For a backend the keys are tried in order: the backend's own kernel, the fake kernel (for
data-less backends such as meta; an op that mutates and returns nothing has a trivial one),
``CompositeExplicitAutograd``, then ``CompositeImplicitAutograd`` when the backend has no
kernel of its own, then the backend's fallback. A ``py_impl`` kernel for a key comes before
the table's; a ``fallthrough_kernel`` skips its key. ``Autograd`` is resolved on its own
(``autograd_kernel``). Nothing here caches: the fast path remembers answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .._registry.entry import Kernel, OpEntry
from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, FAKE, REGISTRY
from .._schema import BaseType, FunctionSchema, OptionalType
from ..backends import TABLE, Backend
from ..errors import AutogradUnsupportedError, NoKernelError

__all__ = [
    "DispatchKeySet",
    "autograd_kernel",
    "dtype_guarded",
    "has_trivial_fake",
    "lookup",
    "no_autograd",
    "no_kernel",
    "resolution_steps",
    "resolve",
    "trivial_fake",
]

#: A resolution step: (key, the kernel it gives or None, why it was taken or skipped).
Step = tuple[str, "Callable[..., Any] | None", str]


class DispatchKeySet:
    """The keys a ``with_keyset=True`` kernel may redispatch to (highest priority first)."""

    __slots__ = ("keys",)

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def highest_priority(self) -> str:
        if not self.keys:
            raise RuntimeError("redispatch(): the key set is empty")
        return self.keys[0]

    def remove(self, key: str) -> DispatchKeySet:
        return DispatchKeySet(tuple(k for k in self.keys if k != key))

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def __repr__(self) -> str:
        return f"DispatchKeySet({', '.join(self.keys)})"


def lookup(entry: OpEntry, key: str, below: tuple[str, ...]) -> Callable[..., Any] | None:
    """The callable serving ``key`` (its ``py_impl`` kernel, else the registered one), None
    for none or a fallthrough; a ``with_keyset`` kernel gets the keys ``below``."""
    py = entry.py_kernels.get(key)
    if py is not None:
        return py
    k = entry.kernel(key)
    if k is None or k.is_fallthrough:
        return None
    if k.with_keyset:
        fn = k.fn
        keyset = DispatchKeySet(below)
        return lambda *a, **kw: fn(keyset, *a, **kw)
    return k.fn


def has_trivial_fake(qualname: str, schema: FunctionSchema) -> bool:
    """Whether the op needs no fake kernel (torch's ``can_generate_trivial_fake_impl``): it
    mutates an argument and returns nothing (``-> ()``), and is not a core op. Such an op
    cannot change its inputs' metadata, so its fake is ``trivial_fake``: nothing to compute,
    nothing to touch."""
    if not schema.is_mutable or schema.returns:
        return False
    return qualname.partition("::")[0] not in REGISTRY.RESERVED_NAMESPACES


def trivial_fake(*args: Any, **kwargs: Any) -> None:
    """The fake (and meta) kernel of an op that ``has_trivial_fake``: returns None, touches
    nothing."""
    return None


def _why(entry: OpEntry, key: str, fn: Callable[..., Any] | None) -> str:
    k = entry.kernel(key)
    if fn is None:
        return "skipped: fallthrough_kernel" if k is not None else "skipped: no kernel"
    if key in entry.py_kernels:
        return "taken: py_impl kernel"
    return f"taken: kernel at {k.origin}" if k is not None else "taken"


def resolution_steps(entry: OpEntry, backend: Backend) -> Iterator[Step]:
    """The keys tried for ``backend`` in order, as ``(key, kernel or None, why)``; the first
    step with a kernel is the one dispatch takes (torch's ``resolve_key``)."""
    name = backend.name
    keys = [name]
    if backend.spec.fake_kernels:
        keys.append(FAKE)
    keys.append(COMPOSITE_EXPLICIT)
    for key in keys:
        fn = lookup(entry, key, (name,))
        yield key, fn, _why(entry, key, fn)
        if fn is not None:
            return
        if key == FAKE and has_trivial_fake(entry.qualname, entry.schema):
            # before a 'default' kernel, which would compute (numpy math) on data-less arrays
            yield FAKE, trivial_fake, "taken: trivial fake (mutates, returns nothing)"
            return
    if entry.has_kernel(name) or name in entry.py_kernels:
        yield COMPOSITE_IMPLICIT, None, f"skipped: not used when {name!r} has a kernel"
    else:
        fn = lookup(entry, COMPOSITE_IMPLICIT, (name,))
        yield COMPOSITE_IMPLICIT, fn, _why(entry, COMPOSITE_IMPLICIT, fn)
        if fn is not None:
            return
    fallback = backend.spec.fallback
    if fallback is not None:
        fn = fallback(entry.overload)
        why = (
            "taken: the backend's fallback"
            if fn is not None
            else "skipped: the backend's fallback does not cover this op"
        )
        yield f"{backend.key}Fallback", fn, why


def resolve(entry: OpEntry, backend: Backend) -> tuple[Callable[..., Any], str]:
    """The kernel ``resolution_steps`` takes and its key; ``NoKernelError`` when none.
    On a backend that declares the dtypes it holds, the kernel first checks the op's
    ``ScalarType`` arguments (``dtype_guarded``)."""
    for key, fn, _ in resolution_steps(entry, backend):
        if fn is not None:
            return dtype_guarded(entry, backend, fn), key
    raise no_kernel(entry, backend)


#: The attribute of a ``dtype_guarded`` wrapper that holds the kernel it guards.
_GUARDS = "_oplib_guards"


def factory_kernel(entry: OpEntry, backend: Backend, fn: Callable[..., Any]) -> Callable[..., Any]:
    """What a factory's cached calls run for kernel ``fn`` (``resolve``'s): ``fn``, or, on
    a machine with one device, the kernel that ``backends.on_device``'s wrapper runs (its
    ``fast_entry``, the function it wraps), behind the same dtype guard. A cached call's
    ``device`` is one an earlier call ran on; with one device that is the current one,
    and the wrapper has nothing to decide. (The fast path of ops with tensor arguments
    takes ``fast_entry`` itself; a factory's calls pass keywords, which only a wrapped
    function of the same signature, ``__wrapped__``, is sure to take.)"""
    raw: Callable[..., Any] = getattr(fn, _GUARDS, fn)
    inner: Callable[..., Any] | None = getattr(raw, "fast_entry", None)
    wrapped: object = getattr(raw, "__wrapped__", None)
    if inner is None or wrapped is not inner:
        return fn
    return inner if raw is fn else dtype_guarded(entry, backend, inner)


def dtype_guarded(entry: OpEntry, backend: Backend, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` refusing, before it runs, a dtype asked for by one of the op's ``ScalarType``
    arguments that ``backend`` declares it cannot hold (``BackendSpec.dtypes``): the one
    guard for factories, ``astype``, ``sum(dtype=)`` and custom ops on cupy, JAX or a
    vendor's device, so that no plugin writes its own. It raises ``BackendDtypeError``
    naming the op (``Backend.check_dtype``). ``fn`` itself where there is nothing to check:
    a backend that holds every dtype, an op without a ``ScalarType``, a copy that takes a
    ``Device`` (the data is checked where it arrives, ``Backend.from_host``)."""
    if backend.spec.dtypes is None:
        return fn
    slots: list[tuple[int, str]] = []
    pos = 0
    takes_tensor = takes_device = False
    keyword_none = True  # every ScalarType is keyword-only, None by default
    for a in entry.schema.arguments:
        t = a.type.elem if isinstance(a.type, OptionalType) else a.type
        name = t.name if isinstance(t, BaseType) else ""
        takes_tensor = takes_tensor or a.type.is_tensor_like()
        takes_device = takes_device or name == "Device"
        if name == "ScalarType":
            slots.append((-1 if a.kwarg_only else pos, a.name))
            keyword_none = keyword_none and a.kwarg_only and a.default == "None"
        if not a.kwarg_only:
            pos += 1
    if not slots or (takes_tensor and takes_device):
        return fn
    check, api = backend.check_dtype, f"{entry.qualname}()"
    held = backend.fixed_dtypes() or frozenset()  # (what needs no call of check)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        for i, name in slots:
            dtype = args[i] if 0 <= i < len(args) else kwargs.get(name)
            if dtype is not None and dtype not in held:
                check(dtype, api)
        return fn(*args, **kwargs)

    guarded.__wrapped__ = fn  # type: ignore[attr-defined]  # failures name fn, not this
    guarded.__dict__[_GUARDS] = fn
    if keyword_none:
        # The fast path calls kernels without keywords, so every dtype it passes is the
        # default None: nothing to check (``sum(x)`` on cupy runs without the guard).
        guarded.__dict__["fast_entry"] = fn
    return guarded


def autograd_kernel(entry: OpEntry, backend: Backend) -> Callable[..., Any] | None:
    """The kernel for the Autograd key, ``None`` to go straight to the backend
    (fallthrough), or a ``RuntimeError`` when the op has no formula."""
    k: Kernel | Callable[..., Any] | None = entry.py_kernels.get(AUTOGRAD) or entry.kernel(AUTOGRAD)
    if isinstance(k, Kernel):
        if k.is_fallthrough:
            return None
        if k.with_keyset:
            fn, keyset = k.fn, DispatchKeySet((backend.name,))
            return lambda *a, **kw: fn(keyset, *a, **kw)
        return k.fn
    if k is not None:
        return k
    has_backend = entry.has_kernel(backend.name) or entry.has_kernel(COMPOSITE_EXPLICIT)
    implicit = lookup(entry, COMPOSITE_IMPLICIT, (backend.name,))
    if implicit is not None and not has_backend:
        return implicit
    raise RuntimeError(
        f"Autograd has not been implemented for operator {entry.qualname}: an input "
        "requires grad but the op has no autograd formula. Register one with "
        f"oplib.register_autograd({entry.qualname!r}, backward, setup_context=...), or "
        "call it under oplib.no_grad() or on detached inputs."
    )


def no_autograd(entry: OpEntry, backend: Backend) -> AutogradUnsupportedError:
    """The error for inputs that require grad on a backend without autograd."""
    name = entry.qualname
    return AutogradUnsupportedError(
        f"{name}(): an input is a {backend.name} tensor that requires grad, but autograd "
        f"does not run on {backend.name} arrays. Call the op under oplib.no_grad(), or on "
        "t.detach(); compute gradients on another device.",
        op=name,
        backend=backend.name,
    )


def no_kernel(entry: OpEntry, backend: Backend) -> NoKernelError:
    """The error for an op without a kernel for ``backend``."""
    have = sorted(k for k in entry.kernels if k != AUTOGRAD) or ["(none)"]
    fake_hint = (
        " (a fake kernel, register_fake, also serves this device)"
        if backend.spec.fake_kernels
        else ""
    )
    hint = f" {backend.spec.no_kernel_hint}" if backend.spec.no_kernel_hint else ""
    return NoKernelError(
        f"{entry.qualname}(): no kernel for backend {backend.name!r} (dispatch key "
        f"{backend.key}){fake_hint}. Kernels are registered for: {', '.join(have)}. "
        f"Installed backends: {TABLE.names_text()}. Register one with "
        f"oplib.register_kernel({entry.qualname!r}, {backend.name!r}) or a 'default' "
        f"kernel.{hint}",
        op=entry.qualname,
        key=backend.key,
    )
