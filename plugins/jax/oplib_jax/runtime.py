"""jax, imported on first use; its devices; and the dtypes it holds in the current mode.

JAX keeps 64-bit types off unless the user turns on ``jax_enable_x64``. This module only
reads that setting: switching it would change the user's own JAX code mid-process.

JAX preallocates 75% of a GPU's memory in every process that first uses it, which would
starve cupy and torch beside it (an ``oplib check`` over several backends, opcheck's
comparison). When this module is the one importing jax and the user chose no GPU memory
setting of JAX's, it sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` first
(:data:`MEMORY_SETTINGS`); a user who imported jax first, or set any of them, keeps theirs.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from types import ModuleType
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.errors import BackendError

__all__ = [
    "MEMORY_SETTINGS",
    "X64_HINT",
    "devices",
    "dtypes",
    "jax",
    "jnp",
    "status",
    "x64_enabled",
]

#: What to do about a 64-bit dtype while JAX's 64-bit mode is off.
X64_HINT = (
    "JAX's 64-bit mode is off (oplib does not switch it on for you); enable it before using "
    "JAX with jax.config.update('jax_enable_x64', True) or JAX_ENABLE_X64=1, or use a 32-bit "
    "dtype"
)

#: ml_dtypes' formats that jax.numpy has (float8_e8m0fnu is not among them everywhere).
_EXTENSION = (
    oplib.bfloat16,
    oplib.float8_e4m3fn,
    oplib.float8_e5m2,
    oplib.float8_e4m3fnuz,
    oplib.float8_e5m2fnuz,
)
_64_BIT = tuple(np.dtype(n) for n in ("float64", "int64", "uint64", "complex128"))

#: JAX's GPU memory variables (read when JAX first uses a GPU; the fraction has two names).
#: Any of them set to a non-empty value is the user's choice, left alone.
MEMORY_SETTINGS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)


def _allocate_as_needed() -> None:
    """``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless jax is already imported (its user
    decides) or one of :data:`MEMORY_SETTINGS` is set: JAX then takes GPU memory as it needs
    it, as cupy and torch do, instead of 75% of the card."""
    if "jax" in sys.modules or any(os.environ.get(name) for name in MEMORY_SETTINGS):
        return
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"


@functools.cache
def _import() -> tuple[ModuleType | None, str | None]:
    _allocate_as_needed()
    try:
        return importlib.import_module("jax"), None
    except ImportError as e:
        if getattr(e, "name", None) in ("jax", "jaxlib"):
            return None, "jax not installed (pip install 'oplib-jax[cpu]')"
        return None, f"jax failed to import: {e}"
    except Exception as e:  # a broken jaxlib can fail in many ways at import
        return None, f"jax failed to import: {type(e).__name__}: {e}"


def jax() -> ModuleType:
    """The jax module; ``BackendError`` with the reason when it cannot be imported."""
    mod, problem = _import()
    if mod is None:
        raise BackendError(f"the jax backend is unavailable: {problem}")
    return mod


def jnp() -> ModuleType:
    """``jax.numpy``."""
    mod: ModuleType = jax().numpy
    return mod


def status() -> str | None:
    """``None`` when jax imports and reports a device, else why not. Never raises."""
    mod, problem = _import()
    if mod is None:
        return problem
    try:
        return None if mod.devices() else "jax reports no device"
    except Exception as e:
        return f"jax device check failed: {type(e).__name__}: {e}"


def devices() -> list[Any]:
    """JAX's devices on its default platform (cpu, or gpu/tpu where JAX reports one): the
    ``jax:0``, ``jax:1`` ... devices, in JAX's order."""
    found: list[Any] = jax().devices()
    return found


def device_count() -> int:
    """Number of JAX devices (0 when unavailable). Never raises."""
    if status() is not None:
        return 0
    return len(devices())


def x64_enabled() -> bool:
    """Whether the user has switched JAX's 64-bit mode on (read, never written)."""
    return bool(jax().config.jax_enable_x64)


def dtypes() -> frozenset[np.dtype]:
    """The dtypes JAX arrays can hold now: numpy's numeric and bool dtypes and ml_dtypes'
    (bfloat16, float8), without the 64-bit ones while JAX's 64-bit mode is off."""
    return _dtypes(x64_enabled())


@functools.cache
def _dtypes(x64: bool) -> frozenset[np.dtype]:
    names = (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )  # fmt: skip
    found = {np.dtype(n) for n in names} | {np.dtype(d) for d in _EXTENSION}
    if not x64:
        found.difference_update(_64_BIT)
    return frozenset(found)
