"""The Dask backend's own errors and warnings; each carries the operator as data."""

from __future__ import annotations

from oplib_core import OplibError

__all__ = ["DaskMetaWarning", "DaskWorkerError"]


class DaskWorkerError(OplibError, RuntimeError):
    """A dask worker could not find the operator a task calls (its defining module is not
    importable there). ``op`` is the operator's qualified name."""

    def __init__(self, message: str, op: str) -> None:
        self.op = op
        super().__init__(message)


class DaskMetaWarning(UserWarning):
    """An op has no fake kernel, so dask guesses its output ``meta`` by calling the kernel
    on empty arrays. Issued once per op; register a fake kernel to silence it."""
