"""Errors of native libraries: loading one, and a kernel reporting a failure."""

from __future__ import annotations

from ..errors import OplibError

__all__ = ["LibraryLoadError", "NativeKernelError"]


class LibraryLoadError(OplibError, OSError):
    """``load_library(path)`` failed: the file is missing, not a shared library, truncated
    or damaged, or built for another machine; it lacks the entry symbols; it was built for
    another ABI major version; or a registration it made was refused (``op`` names that
    operator). Nothing the library declared stays registered. ``library`` is the path."""

    def __init__(self, message: str, *, library: str, op: str | None = None) -> None:
        self.library = library
        self.op = op
        super().__init__(message)


class NativeKernelError(OplibError, RuntimeError):
    """A native kernel (or shape function, or class constructor) returned an error status;
    the message is the one it set with ``oplib_set_error``. ``op`` names the operator,
    ``library`` the library's path, ``status`` the returned code."""

    def __init__(self, message: str, *, op: str, library: str, status: int) -> None:
        self.op = op
        self.library = library
        self.status = status
        super().__init__(message)
