"""Operators by reference: what a task carries to a worker so that the op exists there.

A task pickles an :class:`OpRef`: the op's qualified name plus the modules that provide it
(the in-process plugin that defined it, the module its definition and its chunk kernel
live in). Entry-point plugins load on every worker by themselves (``import oplib_core``);
the others are imported on the worker the first time a task needs the op, and an
in-process plugin module is registered there with ``oplib_core.plugins.register``. So op
authors need module-level kernel functions in a module importable on the workers (not
``__main__``, not a notebook cell).
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from typing import Any, NamedTuple, TypeGuard

import oplib_core
from oplib_core import OpOverload, UnknownOperatorError
from oplib_dask.errors import DaskWorkerError

__all__ = ["OpRef", "Provider", "providers_of"]

_lock = threading.Lock()
_SKIP_ROOTS = frozenset({"oplib_core", "oplib_dask", "oplib_cpu", "oplib_cuda", "oplib_meta"})


class Provider(NamedTuple):
    """A module to import on a worker; ``plugin`` is the name to register it under as an
    in-process plugin (``None``: a plain module, importing it defines what it defines)."""

    module: str
    plugin: str | None = None


class OpRef:
    """An operator that pickles by name (plus its providers) and resolves lazily."""

    __slots__ = ("_op", "providers", "qualname")

    def __init__(self, qualname: str, providers: tuple[Provider, ...] = (), op: Any = None):
        self.qualname = qualname
        self.providers = providers
        self._op = op

    def __reduce__(self) -> Any:
        return (OpRef, (self.qualname, self.providers))

    def __repr__(self) -> str:
        return f"OpRef({self.qualname!r})"

    def get(self) -> Any:
        """The ``OpOverload`` (importing its providers first if it is not defined here)."""
        op = self._op
        if op is None:
            op = self._op = _resolve(self.qualname, self.providers)
        return op


def _find(qualname: str) -> OpOverload | None:
    try:
        return oplib_core.lookup(qualname)
    except UnknownOperatorError:
        return None


def _resolve(qualname: str, providers: tuple[Provider, ...]) -> OpOverload:
    op = _find(qualname)
    if op is None:
        with _lock:
            op = _find(qualname)
            if op is None:
                _import_providers(qualname, providers)
                op = _find(qualname)
    if op is None:
        shipped = ", ".join(p.module for p in providers) or "none known"
        raise DaskWorkerError(
            f"{qualname}: operator is not defined in this dask worker process (modules "
            f"imported to find it: {shipped}). Define the op and its kernels at module level "
            "in an importable module (a plugin package installed on the workers, or a module "
            "on their sys.path), not in __main__ or a notebook cell.",
            op=qualname,
        )
    return op


def _loaded(plugin: str) -> bool:
    record = oplib_core.plugins.get(plugin)  # (never loads the plugins still waiting)
    return record is not None and record.status == "loaded"


def _import_providers(qualname: str, providers: tuple[Provider, ...]) -> None:
    for p in providers:
        try:
            module = importlib.import_module(p.module)
        except ImportError as e:
            raise DaskWorkerError(
                f"{qualname}: the dask worker cannot import module {p.module!r}, which "
                f"provides this operator ({e}). Install it on the workers or put it on "
                "their sys.path.",
                op=qualname,
            ) from e
        if p.plugin is not None and not _loaded(p.plugin) and _find(qualname) is None:
            oplib_core.plugins.register(module, name=p.plugin)


def _module_of_file(path: str) -> str | None:
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == path:
            return name
    return None


def _shippable(module: str | None) -> TypeGuard[str]:
    return (
        module is not None
        and module not in ("", "__main__")
        and module.partition(".")[0] not in _SKIP_ROOTS
    )


def providers_of(op: OpOverload, kernels: tuple[Any, ...]) -> tuple[Provider, ...]:
    """The modules a worker must import to have ``op`` and ``kernels``: the in-process
    plugin that defined it, the module of its definition, the modules of the kernels."""
    out: list[Provider] = []
    plugin = op.origin.plugin
    record = oplib_core.plugins.get(plugin) if plugin is not None else None
    # (entry-point plugins load on the worker by themselves)
    if record is not None and record.entry_point is None:
        obj = record.plugin
        if isinstance(obj, types.ModuleType) and _shippable(obj.__name__):
            out.append(Provider(obj.__name__, plugin))
    source = op.origin.source.rpartition(":")[0]
    modules = [_module_of_file(source)] + [getattr(k, "__module__", None) for k in kernels]
    for name in modules:
        if _shippable(name) and all(p.module != name for p in out):
            out.append(Provider(name))
    return tuple(out)
