"""What the registry and plugin host hold, as plain data (the CLI prints it; tools and
tests read it). Keys are stable: they are the ``--json`` output of ``oplib``."""

from __future__ import annotations

import sys
from typing import Any

from . import plugins
from ._higher_order._operator import HOPS, NAMESPACE, HigherOrderOperator
from ._registry.entry import Kernel, OpEntry
from ._registry.lookup import resolve
from ._registry.registry import AUTOGRAD, FAKE, REGISTRY
from ._registry.waiting import WAITING
from .backends import TABLE, Backend

__all__ = ["backend_rows", "hop_detail", "op_detail", "op_rows", "plugin_rows", "waiting_detail"]


def backend_rows(*, probe: bool = False) -> list[dict[str, Any]]:
    """One row per installed backend. A backend whose ``BackendSpec.library`` is not
    imported yet is not probed (``"available"`` and ``"device_count"`` are None, with the
    reason) unless ``probe``: asking would import the library (JAX: about half a second)."""
    rows = []
    for b in TABLE.all():
        lib = b.spec.library
        reason: str | None
        available: bool | None
        count: int | None
        if lib and not probe and lib not in sys.modules:
            available, count = None, None
            reason = f"not probed ({lib} is not imported yet; --probe imports it)"
        else:
            reason = b.status()
            available, count = reason is None, b.device_count()
        rows.append(
            {
                "name": b.name,
                "key": b.key,
                "distribution": b.distribution,
                "version": b.version,
                "available": available,
                "reason": reason,
                "device_count": count,
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
    """One row per operator overload (``"kind": "op"``), then one per higher-order
    operator (``"kind": "hop"``: ``schema`` is its signature, ``keys`` the keys with
    handlers)."""
    with REGISTRY.lock:
        entries = sorted(REGISTRY.ops.values(), key=lambda e: e.qualname)
        rows = [
            {
                "kind": "op",
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
    if namespace is None or namespace == NAMESPACE:
        rows.extend(_hop_row(h) for h in HOPS.all())
    return rows


def _hop_row(hop: HigherOrderOperator) -> dict[str, Any]:
    keys = [k.key for _, k in hop.handlers() if k.key not in (FAKE, AUTOGRAD)]
    return {
        "kind": "hop",
        "qualname": hop.qualname,
        "schema": hop.signature,
        "keys": sorted(keys),
        "fake": hop.handler(FAKE) is not None,
        "autograd": hop.handler(AUTOGRAD) is not None,
        "tags": [],
    }


def _handler_json(key: object, k: Kernel) -> dict[str, Any]:
    row = _kernel_json(k)
    if not isinstance(key, str):  # a dispatch mode's handler
        row["status"] = "live"
    return row


def hop_detail(hop: HigherOrderOperator) -> dict[str, Any]:
    """``op_detail`` for a higher-order operator: its handlers per key (modes' under the
    mode class's name) with where each came from."""
    TABLE.all()  # every backend's plugin in: their handlers too
    handlers = hop.handlers()
    fake = hop.handler(FAKE)
    autograd = hop.handler(AUTOGRAD)
    return {
        "kind": "hop",
        "qualname": hop.qualname,
        "schema": hop.signature,
        "defined_at": str(hop.origin),
        "plugin": hop.origin.plugin,
        "distribution": hop.origin.distribution,
        "tags": [],
        "kernels": sorted(
            (_handler_json(key, k) for key, k in handlers if k.key not in (FAKE, AUTOGRAD)),
            key=lambda r: r["key"],
        ),
        "overridden": [],
        "fake": None if fake is None else _kernel_json(fake),
        "autograd": None if autograd is None else _kernel_json(autograd),
    }


def find_entry(qualname: str) -> OpEntry:
    """``ns::name`` / ``ns::name.default`` (the default overload) or ``ns::name.overload``
    (:func:`oplib_core.lookup`'s errors for other names)."""
    return REGISTRY.ops[resolve(qualname, "ops show").name()]


def waiting_detail(qualname: str) -> dict[str, Any] | None:
    """For an op no installed package defines but plugins gave kernels for: those kernels
    (status ``waiting``); ``None`` when the op is defined or nothing waits for it."""
    TABLE.all()  # every plugin in (a backend's too): their kernels may be the waiting ones
    waiting = WAITING.for_op(qualname)
    if not waiting or qualname.removesuffix(".default") in REGISTRY.ops:
        return None
    return {
        "kind": "waiting",
        "qualname": waiting[0].qualname,
        "schema": None,
        "defined_at": None,
        "plugin": None,
        "distribution": None,
        "tags": [],
        "kernels": [w.to_json() for w in waiting],
        "overridden": [],
        "fake": None,
        "autograd": None,
    }


def op_detail(qualname: str) -> dict[str, Any]:
    """An operator's schema, kernels per key with their origins, fake and autograd; a
    higher-order operator's name (``"higher_order::cond"``) gives ``hop_detail``."""
    if qualname.startswith(f"{NAMESPACE}::"):
        hop = HOPS.get(qualname)
        if hop is not None:
            return hop_detail(hop)
    TABLE.all()  # every backend's plugin in: their kernels too
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
            "kind": "op",
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
