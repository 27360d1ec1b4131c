"""Plugin discovery and loading: entry points of group ``oplib``, merged by pluggy, run in
phases (backends → define → impl → fake → autograd), each plugin isolated from the others.

``register(obj)`` adds a plugin in-process (tests, notebooks); ``list()`` reports every
plugin with its status (``loaded``, ``blocked``, ``failed``, ``incompatible``). A plugin
that only brings backends (and operators) of its own may wait for their first use
(``_backend_cache``): its record says ``deferred`` meanwhile, and ``list()`` and ``load()``
load it first.
"""

from __future__ import annotations

from typing import Any

from ._plugin_host import HOST as _HOST
from ._registrar import PluginRecord, PluginWarning, Registrar
from ._registry.ownership import OverrideWarning
from ._registry.startup import ensure

__all__ = [
    "OverrideWarning",
    "PluginRecord",
    "PluginWarning",
    "Registrar",
    "get",
    "list",
    "load",
    "register",
    "unregister",
]

_builtin_list = list  # ``list`` below is this module's function, also in annotations


def load() -> None:
    """Load the installed plugins now, all of them. They otherwise load on first use of the
    dispatch table (an op lookup, a registration, a device or backend query), not on
    ``import oplib_core``, and a backend-only plugin on first use of its backend; call this
    to pay that cost (and see plugin warnings) up front."""
    ensure()
    _HOST.load_deferred()


def register(plugin: Any, name: str | None = None) -> PluginRecord:
    """Add a plugin in-process and run its hooks now (all phases). Returns its record; a
    failing plugin is rolled back and its record says why (status ``failed``)."""
    return _HOST.register(plugin, name)


def unregister(plugin_or_name: Any) -> None:
    """Remove an in-process or entry-point plugin and everything it registered."""
    _HOST.unregister(plugin_or_name)


def get(name: str) -> PluginRecord | None:
    """The record of the plugin called ``name`` (None if oplib knows of none), without
    loading the plugins that wait for their backends: one of those has status
    ``"deferred"`` until its backend is first used (:func:`list` loads them all)."""
    ensure()
    return _HOST.records.get(name)


def list() -> _builtin_list[PluginRecord]:
    """Every plugin oplib knows of, loaded or not, in load order (the ones waiting for
    their backends load first, to report how that went)."""
    ensure()
    _HOST.load_deferred()
    return _builtin_list(_HOST.records.values())
