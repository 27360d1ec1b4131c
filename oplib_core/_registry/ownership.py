"""Who owns what a plugin registers, so that conflicts never depend on discovery order.

A *party* is the distribution a registration came from (the core's own plugins are
``oplib-core``; an in-process plugin without a distribution is ``plugin 'name'``); code
that is not a plugin is no party. Ownership:

* an operator belongs to the party that defined it;
* a kernel of an operator for a key belongs to the operator's owner, except the core op
  set's (``oplib::``/``prim::``) kernels for a backend key, which belong to the party that
  installed that backend.

The registry asks :func:`owner_of` while it holds its lock, at registration time only;
nothing here runs on a call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends import BackendTable
    from .entry import Origin, PluginContext

__all__ = ["ALLOW_OVERRIDE_ENV", "OverrideWarning", "override_allowed", "owner_of", "party"]

#: Comma-separated distributions (or in-process plugin names) allowed to override kernels
#: that other distributions own.
ALLOW_OVERRIDE_ENV = "OPLIB_ALLOW_OVERRIDE"

_RESERVED = frozenset({"oplib", "prim"})
_ALIAS_KEYS = frozenset(
    {"CompositeExplicitAutograd", "CompositeImplicitAutograd", "Autograd", "Fake"}
)


class OverrideWarning(UserWarning):
    """A plugin replaced a kernel another distribution owns (allowed by name through
    ``OPLIB_ALLOW_OVERRIDE``). ``oplib plugins list`` and ``oplib ops show`` mark it too."""


def party(origin: Origin | PluginContext | None) -> str | None:
    """The distribution (else ``plugin 'name'``) a registration came from (or of the
    plugin whose hook runs); None for code that is not a plugin."""
    if origin is None or origin.plugin is None:
        return None
    return origin.distribution or f"plugin {origin.plugin!r}"


def owner_of(qualname: str, op_origin: Origin, key: str, backends: BackendTable) -> str | None:
    """The party owning ``qualname``'s kernel for ``key`` (None: nobody in particular)."""
    if qualname.partition("::")[0] in _RESERVED and key not in _ALIAS_KEYS:
        backend = backends.find(key)
        if backend is None:
            return None
        if backend.distribution:
            return backend.distribution
        return f"plugin {backend.plugin!r}" if backend.plugin else None
    return party(op_origin)


def override_allowed(who: str) -> bool:
    """Whether the user allowed ``who`` (a distribution or in-process plugin name) to
    override kernels it does not own. Read at registration time, so that it can change."""
    names = {n.strip() for n in os.environ.get(ALLOW_OVERRIDE_ENV, "").split(",")}
    plain = who[len("plugin '") : -1] if who.startswith("plugin '") else who
    return who in names or plain in names
