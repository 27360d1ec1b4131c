"""cupy, imported on first use, and the CUDA availability check that never raises."""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Any

from oplib_core.errors import BackendError

__all__ = ["cupy", "device_count", "in_bad_fork", "status", "switched_on"]

_CUDA_ERROR_NO_DEVICE = 100  # cudaErrorNoDevice
_CUDA_ERROR_INSUFFICIENT_DRIVER = 35  # cudaErrorInsufficientDriver: none, or too old


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


_initialised_in: list[int] = []


def cupy() -> ModuleType:
    """The cupy module, once a CUDA device is usable; ``BackendError`` with the reason
    (cupy not importable, no CUDA device, the driver's error) otherwise, so that a machine
    with cupy installed but no GPU or driver says what ``oplib backends list`` says rather
    than raising cupy's own error from deep in a kernel."""
    mod, problem = _import()
    if mod is None:
        raise _unavailable(problem)
    if not _initialised_in:
        problem = _problem(mod)
        if problem is not None:
            raise _unavailable(problem)
        _initialised_in.append(os.getpid())
    return mod


def _unavailable(problem: str | None) -> BackendError:
    return BackendError(f"the cuda backend is unavailable: {problem}")


def _driver_hint(mod: Any) -> str:
    """What to do about ``cudaErrorInsufficientDriver``: no NVIDIA driver at all, or one
    older than the CUDA that cupy was built for."""
    try:
        version = int(mod.cuda.runtime.runtimeGetVersion())
    except Exception:
        return " (no NVIDIA driver, or one too old for this cupy: update the driver)"
    major, minor = version // 1000, version % 1000 // 10
    older = " or use CUDA 12's cupy, pip install 'oplib-cuda[cuda12]'" if major >= 13 else ""
    return (
        f" (no NVIDIA driver, or one older than this cupy's CUDA {major}.{minor} needs: "
        f"update the driver{older})"
    )


def _count(mod: Any) -> tuple[int, str | None]:
    try:
        n = int(mod.cuda.runtime.getDeviceCount())
    except mod.cuda.runtime.CUDARuntimeError as e:
        status = getattr(e, "status", None)
        if status == _CUDA_ERROR_NO_DEVICE:
            return 0, "no CUDA device"
        hint = _driver_hint(mod) if status == _CUDA_ERROR_INSUFFICIENT_DRIVER else ""
        return 0, f"CUDA driver error: {e}{hint}"
    return n, None if n > 0 else "no CUDA device"


def _problem(mod: Any) -> str | None:
    """Why the CUDA devices of importable cupy ``mod`` are unusable, or ``None``. Never
    raises."""
    try:
        return _count(mod)[1]
    except Exception as e:
        return f"CUDA check failed: {type(e).__name__}: {e}"


def status() -> str | None:
    """``None`` when at least one CUDA device is usable, else why not: "cupy not
    installed", "no CUDA device" or the driver's error. Never raises."""
    mod, problem = _import()
    return problem if mod is None else _problem(mod)


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
