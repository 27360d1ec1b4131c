"""The device module ``oplib_core.cuda`` (torch.cuda's names). cupy is imported by the
functions that need it, never by this module."""

from __future__ import annotations

import numpy as np

from oplib_core import Device
from oplib_core.backend_registration import normalize_device
from oplib_cuda import runtime

__all__ = [
    "_is_in_bad_fork",
    "current_device",
    "device_count",
    "get_amp_supported_dtype",
    "get_rng_state",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "set_rng_state",
    "synchronize",
]


def is_available() -> bool:
    """Whether cupy imports and at least one CUDA device exists. Never raises."""
    return runtime.status() is None


def device_count() -> int:
    """Number of CUDA devices; 0 without cupy or a driver. Never raises."""
    return runtime.device_count()


def current_device() -> int:
    """Index of the current CUDA device (``BackendError`` when CUDA is unavailable)."""
    return int(runtime.cupy().cuda.runtime.getDevice())


def set_device(device: int | str | Device) -> None:
    """Make ``device`` the current CUDA device."""
    runtime.cupy().cuda.runtime.setDevice(normalize_device(device, "cuda"))


def synchronize(device: int | str | Device | None = None) -> None:
    """Wait until all work queued on ``device`` (default: the current one) has finished."""
    cp = runtime.cupy()
    cp.cuda.Device(normalize_device(device, "cuda")).synchronize()


def manual_seed(seed: int) -> None:
    """Seed cupy's generator of the current device."""
    runtime.cupy().random.seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed cupy's generator on every device."""
    cp = runtime.cupy()
    for index in range(device_count()):
        with cp.cuda.Device(index):
            cp.random.seed(seed)


def get_rng_state(device: int | str | Device | None = None) -> np.ndarray:
    """Not supported: cupy does not expose its cuRAND generator state."""
    raise NotImplementedError(
        "oplib.cuda.get_rng_state(): cupy does not expose the state of its cuRAND "
        "generators; use oplib.cuda.manual_seed_all(seed) for reproducibility"
    )


def set_rng_state(new_state: object, device: int | str | Device | None = None) -> None:
    """Not supported: cupy does not expose its cuRAND generator state."""
    raise NotImplementedError(
        "oplib.cuda.set_rng_state(): cupy does not expose the state of its cuRAND "
        "generators; use oplib.cuda.manual_seed_all(seed) for reproducibility"
    )


def get_amp_supported_dtype() -> list[np.dtype]:
    """Dtypes autocast may use on CUDA (numpy has no bfloat16)."""
    return [np.dtype(np.float16), np.dtype(np.float32)]


def _is_in_bad_fork() -> bool:
    """True in a child forked after CUDA was initialised in the parent."""
    return runtime.in_bad_fork()
