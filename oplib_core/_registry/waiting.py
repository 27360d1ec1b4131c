"""Kernels waiting for their operator: a plugin's kernel for an op that no installed
package defines is kept, like a kernel for a backend that is not installed, and goes live
when the op is defined (and waits again if the op goes away).

Only plugins' kernels wait (``Registrar.impl`` / ``register_kernel``), and only for a
name whose namespace no defined op uses: a reserved namespace (``oplib``, ``prim``) or a
namespace some op already lives in means the name is a typo, which fails as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import OplibError, UnknownOperatorError
from .entry import OpEntry, Origin
from .registry import REGISTRY, Handle
from .startup import ensure

__all__ = ["WAITING", "WaitingKernel", "WaitingKernels"]


class WaitingKernel:
    """One plugin kernel registered for an op that is not defined (yet)."""

    __slots__ = ("allow_override", "api", "error", "fn", "key", "live", "origin", "qualname")

    def __init__(
        self,
        qualname: str,
        key: str,
        fn: Callable[..., Any],
        origin: Origin,
        allow_override: bool,
        api: str,
    ) -> None:
        self.qualname = qualname
        self.key = key
        self.fn = fn
        self.origin = origin
        self.allow_override = allow_override
        self.api = api
        #: The registry's handle while the op is defined and the kernel is live.
        self.live: Handle | None = None
        #: Why the kernel was refused when its op was defined (a conflict), else None.
        self.error: str | None = None

    @property
    def status(self) -> str:
        if self.live is not None:
            return "live"
        return f"refused: {self.error}" if self.error else f"waiting for op {self.qualname}"

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.qualname,
            "key": self.key,
            "source": self.origin.source,
            "plugin": self.origin.plugin,
            "distribution": self.origin.distribution,
            "version": self.origin.version,
            "status": "live" if self.live is not None else "waiting",
            "error": self.error,
        }


class WaitingKernels:
    """Every waiting kernel, by the op qualname it waits for (``ns::op`` or
    ``ns::op.overload``). Listens to the registry: a definition wakes its kernels."""

    def __init__(self) -> None:
        self._by_op: dict[str, list[WaitingKernel]] = {}
        REGISTRY.add_listener(self._on_op)

    def waiting_name(self, op: Any, error: UnknownOperatorError) -> str:
        """The qualname a kernel for ``op`` (unknown to the registry) may wait for; else
        ``error`` goes up (reserved namespace, a namespace in use, not a name)."""
        if not isinstance(op, str) or "::" not in op:
            raise error
        qualname = op.removesuffix(".default")
        ns = qualname.partition("::")[0]
        if not ns.isidentifier() or ns in REGISTRY.RESERVED_NAMESPACES:
            raise error
        with REGISTRY.lock:
            if any(e.schema.namespace == ns for e in REGISTRY.ops.values()):
                raise error  # the package is installed: the name is a typo
        return qualname

    def add(
        self,
        qualname: str,
        key: str,
        fn: Callable[..., Any],
        origin: Origin,
        *,
        allow_override: bool = False,
        api: str = "impl",
    ) -> Handle:
        """Keep ``fn`` as ``qualname``'s kernel for ``key`` until the op is defined."""
        ensure()
        with REGISTRY.lock:
            key = REGISTRY.normalize_key(key, api=api)
            w = WaitingKernel(qualname, key, fn, origin, allow_override, api)
            self._by_op.setdefault(qualname, []).append(w)
            entry = REGISTRY.ops.get(qualname)
            if entry is not None:  # defined meanwhile
                self._wake(w)

        def undo() -> None:
            with REGISTRY.lock:
                stack = self._by_op.get(qualname, [])
                if w in stack:
                    stack.remove(w)
                    if not stack:
                        del self._by_op[qualname]
                live, w.live = w.live, None
                if live is not None:
                    live.destroy()

        return Handle(undo, f"{key} kernel of {qualname} (waiting for the op)")

    def _wake(self, w: WaitingKernel) -> None:
        try:
            w.live = REGISTRY.add_kernel(
                w.qualname,
                w.key,
                w.fn,
                origin=w.origin,
                allow_override=w.allow_override,
                api=w.api,
            )
            w.error = None
        except OplibError as e:  # a conflict: the rest of the plugin stays
            w.error = str(e)

    def _on_op(self, event: str, entry: OpEntry) -> None:
        if event == "defined":
            for w in list(self._by_op.get(entry.qualname, ())):
                if w.live is None:
                    self._wake(w)
        elif event == "undefined":
            for w in self._by_op.get(entry.qualname, ()):
                w.live = None  # its kernel went with the op

    def of_plugin(self, plugin: str) -> list[WaitingKernel]:
        """The plugin's kernels that wait (or were refused) for an op."""
        with REGISTRY.lock:
            return [
                w
                for stack in self._by_op.values()
                for w in stack
                if w.origin.plugin == plugin and w.live is None
            ]

    def for_op(self, qualname: str) -> list[WaitingKernel]:
        with REGISTRY.lock:
            return list(self._by_op.get(qualname.removesuffix(".default"), ()))


WAITING = WaitingKernels()
