"""cupy, imported on first use, and the CUDA availability check that never raises."""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Any

from oplib_core.errors import BackendError

__all__ = ["cupy", "cupy_import_error", "device_count", "in_bad_fork", "status", "switched_on"]

_CUDA_ERROR_NO_DEVICE = 100  # cudaErrorNoDevice


def switched_on(variable: str) -> bool:
    """Whether the plugin's switch ``variable`` (an environment variable, default on) is on:
    off for ``0``, ``false``, ``no`` or ``off``, in any case, as oplib's own switches read."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def _import() -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module("cupy"), None
    except ImportError as e:
        if getattr(e, "name", None) == "cupy":
            return None, "cupy not installed (pip install 'oplib-cuda[cuda12]' or '[cuda13]')"
        return None, f"cupy failed to import: {e}"
    except Exception as e:  # a broken CUDA install can fail in many ways at import
        return None, f"cupy failed to import: {type(e).__name__}: {e}"


def cupy_import_error() -> str | None:
    """Why cupy cannot be imported, or ``None`` (imports cupy)."""
    return _import()[1]


_initialised_in: list[int] = []


def cupy() -> ModuleType:
    """The cupy module; ``BackendError`` with the reason when CUDA is unusable."""
    mod, problem = _import()
    if mod is None:
        raise BackendError(f"the cuda backend is unavailable: {problem}")
    if not _initialised_in:
        _initialised_in.append(os.getpid())
    return mod


def _count(mod: Any) -> tuple[int, str | None]:
    try:
        n = int(mod.cuda.runtime.getDeviceCount())
    except mod.cuda.runtime.CUDARuntimeError as e:
        if getattr(e, "status", None) == _CUDA_ERROR_NO_DEVICE:
            return 0, "no CUDA device"
        return 0, f"CUDA driver error: {e}"
    return n, None if n > 0 else "no CUDA device"


def status() -> str | None:
    """``None`` when at least one CUDA device is usable, else why not: "cupy not
    installed", "no CUDA device" or the driver's error. Never raises."""
    mod, problem = _import()
    if mod is None:
        return problem
    try:
        return _count(mod)[1]
    except Exception as e:
        return f"CUDA check failed: {type(e).__name__}: {e}"


def device_count() -> int:
    """Number of CUDA devices (0 when unavailable). Never raises."""
    mod, _ = _import()
    if mod is None:
        return 0
    try:
        return _count(mod)[0]
    except Exception:
        return 0


def in_bad_fork() -> bool:
    """Whether this process was forked after CUDA was initialised in its parent."""
    return bool(_initialised_in) and _initialised_in[0] != os.getpid()
