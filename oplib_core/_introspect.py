"""What the registry and plugin host hold, as plain data (the CLI prints it; tools and
tests read it). Keys are stable: they are the ``--json`` output of ``oplib``."""

from __future__ import annotations

from typing import Any

from . import plugins
from ._lookup import resolve
from ._registry import AUTOGRAD, FAKE, REGISTRY, Kernel, OpEntry
from .backends import TABLE, Backend

__all__ = ["backend_rows", "op_detail", "op_rows", "plugin_rows"]


def backend_rows() -> list[dict[str, Any]]:
    rows = []
    for b in TABLE.all():
        reason = b.status()
        rows.append(
            {
                "name": b.name,
                "key": b.key,
                "distribution": b.distribution,
                "version": b.version,
                "available": reason is None,
                "reason": reason,
                "device_count": b.device_count(),
                "ops": _servable_ops(b),
            }
        )
    return rows


def _servable_ops(backend: Backend) -> int:
    """How many operators have a kernel for ``backend`` (their own, a ``default`` kernel, a
    fake kernel on the meta device, the backend's fallback...)."""
    with REGISTRY.lock:
        entries = list(REGISTRY.ops.values())
    return sum(
        1
        for e in entries
        if any(fn is not None for _, fn, _ in e.overload.resolution_steps(backend))
    )


def plugin_rows() -> list[dict[str, Any]]:
    return [r.to_json() for r in plugins.list()]


def _kernel_json(k: Kernel) -> dict[str, Any]:
    return {
        "key": k.key,
        "source": k.origin.source,
        "plugin": k.origin.plugin,
        "distribution": k.origin.distribution,
        "version": k.origin.version,
        "status": REGISTRY.kernel_status(k.key),
        "overrides": k.allow_override,
        # a plugin's override of a kernel another distribution owns (OPLIB_ALLOW_OVERRIDE)
        "overrides_owner": k.overrides,
    }


def op_rows(namespace: str | None = None) -> list[dict[str, Any]]:
    with REGISTRY.lock:
        entries = sorted(REGISTRY.ops.values(), key=lambda e: e.qualname)
        return [
            {
                "qualname": e.qualname,
                "schema": str(e.schema),
                "keys": sorted(k for k in e.kernels if k not in (FAKE, AUTOGRAD)),
                "fake": e.has_kernel(FAKE),
                "autograd": e.has_kernel(AUTOGRAD),
                "tags": [t.value for t in e.tags],
            }
            for e in entries
            if namespace is None or e.schema.namespace == namespace
        ]


def find_entry(qualname: str) -> OpEntry:
    """``ns::name`` / ``ns::name.default`` (the default overload) or ``ns::name.overload``
    (:func:`oplib_core.lookup`'s errors for other names)."""
    return REGISTRY.ops[resolve(qualname, "ops show").name()]


def op_detail(qualname: str) -> dict[str, Any]:
    with REGISTRY.lock:
        e = find_entry(qualname)
        kernels = [
            _kernel_json(stack[-1])
            for key, stack in sorted(e.kernels.items())
            if key not in (FAKE, AUTOGRAD)
        ]
        overridden = [
            _kernel_json(k) for key, stack in sorted(e.kernels.items()) for k in stack[:-1]
        ]
        fake = e.kernel(FAKE)
        autograd = e.kernel(AUTOGRAD)
        return {
            "qualname": e.qualname,
            "schema": str(e.schema),
            "defined_at": str(e.origin),
            "plugin": e.origin.plugin,
            "distribution": e.origin.distribution,
            "tags": [t.value for t in e.tags],
            "kernels": kernels,
            "overridden": overridden,
            "fake": None if fake is None else _kernel_json(fake),
            "autograd": None if autograd is None else _kernel_json(autograd),
        }
