"""``get_kernel``: the kernel an op runs for a dispatch key, as a callable handle (torch's
``torch.library.get_kernel`` and its ``SafeKernelFunction``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._dispatch import DispatchKeySet, OpOverload
from ._registry.entry import origin_of
from ._registry.lookup import resolve
from ._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, FAKE, REGISTRY
from ._tensor.tensor import Tensor
from .backends import TABLE
from .errors import ArgumentTypeError, NoKernelError, UnknownDispatchKeyError

__all__ = ["KernelHandle", "get_kernel"]

_ALIAS_KEYS = (COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT)
# Keys whose kernels take Tensors (they record or decompose); the others take native arrays.
_TENSOR_KEYS = (AUTOGRAD, COMPOSITE_IMPLICIT)


class KernelHandle:
    """One op's kernel for one dispatch key, taken when ``get_kernel`` ran: registering
    another kernel for that key later does not change what this handle calls (torch's use:
    keep the original kernel, override the key, call the original from the override).

    ``handle(*args, **kwargs)`` or torch's ``handle.call_boxed(keyset, *args, **kwargs)``
    runs the kernel alone (no modes, no autograd above it): Tensors given are unwrapped to
    the native arrays kernels see and the results wrapped back. ``op`` (torch's
    ``op_handle``) is the ``OpOverload``, ``key`` the key asked for, ``served_by`` the key
    whose kernel serves it (``"CompositeExplicitAutograd"`` for a ``default`` kernel),
    ``kernel`` the function and ``source`` where it was registered.
    """

    __slots__ = ("_tensors", "kernel", "key", "op", "served_by", "source")

    def __init__(
        self, op: OpOverload, key: str, served_by: str, kernel: Callable[..., Any], source: str
    ) -> None:
        self.op = op
        self.key = key
        self.served_by = served_by
        self.kernel = kernel
        self.source = source
        self._tensors = served_by in _TENSOR_KEYS

    @property
    def op_handle(self) -> OpOverload:
        """torch's name for :attr:`op`."""
        return self.op

    def __repr__(self) -> str:
        via = "" if self.served_by == self.key else f", served by {self.served_by}"
        debug = f"registered at {self.source}"
        return f"KernelHandle({self.op.name()}, {self.key!r}{via}, debug={debug!r})"

    def call_boxed(self, keyset: DispatchKeySet | None, /, *args: Any, **kwargs: Any) -> Any:
        """torch's call: the kernel on ``args``; ``keyset`` is accepted for torch's signature
        (a ``with_keyset`` kernel gets the keys below its own, as dispatch gives them)."""
        return self(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bargs, bkwargs = self.op.bind(args, kwargs)
        if self._tensors:
            return self.kernel(*bargs, **bkwargs)
        tensors_in = [False]
        nargs = [_unwrap(a, tensors_in) for a in bargs]
        nkwargs = {k: _unwrap(v, tensors_in) for k, v in bkwargs.items()}
        out = self.kernel(*nargs, **nkwargs)
        return _wrap(out) if tensors_in[0] else out


def _unwrap(value: Any, seen: list[bool]) -> Any:
    if isinstance(value, Tensor):
        seen[0] = True
        return value._data
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, seen) for v in value)
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_wrap(v) for v in value)
    if isinstance(value, tuple):  # a named tuple of results
        return type(value)(*(_wrap(v) for v in value))
    if value is not None and TABLE.for_type(type(value)) is not None:
        return Tensor._wrap(value)
    return value


def _source(op: OpOverload, key: str, fn: Callable[..., Any]) -> str:
    k = op.kernel(key)
    if k is not None and k.fn is fn:
        return str(k.origin)
    return str(origin_of(fn))


def get_kernel(op: Any, dispatch_key: str) -> KernelHandle:
    """The kernel ``op`` runs for ``dispatch_key``, as a callable :class:`KernelHandle`
    (torch's ``torch.library.get_kernel``).

    ``op`` is any spelling ``oplib.lookup`` takes; ``dispatch_key`` a runtime key: a
    backend's key or device type (``"CPU"``, ``"cpu"``, ``"CUDA"``, ``"Meta"``...), whose
    kernel is the one dispatch would take there (the backend's own, else the ``default``
    one, else the op's decomposition: torch's computed kernel; a ``fallthrough_kernel`` is
    skipped as dispatch skips it), ``"Autograd"`` (the gradient formula's kernel) or
    ``"Fake"``. Alias keys (``"CompositeExplicitAutograd"``/``"default"``,
    ``"CompositeImplicitAutograd"``) have no runtime kernel and are refused, as torch refuses
    them; an unknown key raises ``UnknownDispatchKeyError`` (a ``ValueError``), and a key
    the op has no kernel for ``NoKernelError`` (a ``RuntimeError``, as torch's).
    """
    api = "get_kernel"
    overload = resolve(op, api)
    if not isinstance(dispatch_key, str):
        raise ArgumentTypeError(
            f"{api}({overload.name()}): dispatch_key must be a key name such as 'CPU' or a "
            f"device type such as 'cpu', got {dispatch_key!r}",
            api=api,
            argument="dispatch_key",
            value=dispatch_key,
        )
    key = REGISTRY.normalize_key(dispatch_key, api=api)
    if key in _ALIAS_KEYS:
        raise UnknownDispatchKeyError(
            f"{api}({overload.name()}, {dispatch_key!r}): {key} is an alias key; alias keys "
            "do not have runtime kernel registrations (as in torch). Ask for a runtime key "
            "such as 'CPU' (served by the op's default kernel when it has no CPU kernel), or "
            f"read the registration with op.kernel({key!r})",
            dispatch_key,
        )
    served = _serving(overload, key)
    if served is None:
        have = sorted(k for k, kernel in overload.kernels() if not kernel.is_fallthrough)
        raise NoKernelError(
            f"{api}(): no kernel for {dispatch_key} for {overload.name()} (torch: 'no kernel "
            f"for {dispatch_key} for {overload.name()}'). Its kernels: "
            f"{', '.join(have) or '(none)'}. Register one with "
            f"oplib.register_kernel({overload.name()!r}, {key!r})",
            op=overload.name(),
            key=key,
        )
    served_by, fn = served
    return KernelHandle(overload, dispatch_key, served_by, fn, _source(overload, served_by, fn))


def _serving(op: OpOverload, key: str) -> tuple[str, Callable[..., Any]] | None:
    """(the key whose kernel serves ``key``, that kernel), or None."""
    if key in (AUTOGRAD, FAKE):
        fn = op.py_kernel(key)
        if fn is None:
            k = op.kernel(key)
            fn = k.fn if k is not None and not k.is_fallthrough else None
        return None if fn is None else (key, fn)
    backend = TABLE.find(key)
    if backend is not None:
        for step_key, fn, _ in op.resolution_steps(backend):
            if fn is not None:
                return step_key, fn
        return None
    # a well-known key no installed backend serves: what dispatch would take once one is
    for step_key in (key, COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT):
        fn = op.py_kernel(step_key)
        k = op.kernel(step_key)
        if fn is None and k is not None and not k.is_fallthrough:
            fn = _with_keyset(k.fn, step_key) if k.with_keyset else k.fn
        if fn is not None:
            return step_key, fn
    return None


def _with_keyset(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
    keyset = DispatchKeySet((key,))
    return lambda *a, **kw: fn(keyset, *a, **kw)
