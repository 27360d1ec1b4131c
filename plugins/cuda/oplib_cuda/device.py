"""The device module ``oplib_core.cuda`` (torch.cuda's names). cupy is imported by the
functions that need it, never by this module."""

from __future__ import annotations

import os as _os
import threading as _threading
from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from oplib_core.backend_registration import normalize_device as _normalize_device
from oplib_cuda import runtime as _runtime

if _TYPE_CHECKING:
    import numpy as np

    from oplib_core import Device

__all__ = [
    "_is_in_bad_fork",
    "current_device",
    "device_count",
    "get_amp_supported_dtype",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "set_rng_state",
    "synchronize",
]


def is_available() -> bool:
    """Whether cupy imports and at least one CUDA device exists. Never raises."""
    return _runtime.status() is None


def device_count() -> int:
    """Number of CUDA devices; 0 without cupy or a driver. Never raises."""
    return _runtime.device_count()


def current_device() -> int:
    """Index of the current CUDA device (``BackendError`` when CUDA is unavailable)."""
    return int(_runtime.cupy().cuda.runtime.getDevice())


def set_device(device: int | str | Device) -> None:
    """Make ``device`` the current CUDA device."""
    _runtime.cupy().cuda.runtime.setDevice(_normalize_device(device, "cuda"))


def synchronize(device: int | str | Device | None = None) -> None:
    """Wait until all work queued on ``device`` (default: the current one) has finished."""
    cp = _runtime.cupy()
    cp.cuda.Device(_normalize_device(device, "cuda")).synchronize()


_seed_lock = _threading.Lock()
_seeds: dict[int, int] = {}  # device index -> the seed oplib last gave cupy's generator


def initial_seed() -> int:
    """The seed of cupy's generator on the current device (torch's ``initial_seed``): the
    last ``manual_seed``/``manual_seed_all`` seed, else ``CUPY_SEED`` (which cupy seeds its
    generators with). cupy seeds an unseeded generator from ``os.urandom`` and does not
    expose that seed, so without either the current device's generator is seeded here with
    a fresh random seed, which is returned (and kept)."""
    cp = _runtime.cupy()
    index = int(cp.cuda.runtime.getDevice())
    with _seed_lock:
        seed = _seeds.get(index)
        if seed is None:
            env = _os.environ.get("CUPY_SEED")
            if env is not None:
                seed = int(env)
            else:
                seed = int.from_bytes(_os.urandom(8), "little") >> 1
                cp.random.seed(seed)
            _seeds[index] = seed
        return seed


def manual_seed(seed: int) -> None:
    """Seed cupy's generator of the current device."""
    cp = _runtime.cupy()
    with _seed_lock:
        cp.random.seed(seed)
        _seeds[int(cp.cuda.runtime.getDevice())] = int(seed)


def manual_seed_all(seed: int) -> None:
    """Seed cupy's generator on every device."""
    cp = _runtime.cupy()
    with _seed_lock:
        for index in range(device_count()):
            with cp.cuda.Device(index):
                cp.random.seed(seed)
            _seeds[index] = int(seed)


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
    return [_np.dtype(_np.float16), _np.dtype(_np.float32)]


def _is_in_bad_fork() -> bool:
    """True in a child forked after CUDA was initialised in the parent."""
    return _runtime.in_bad_fork()


del annotations  # the __future__ feature: not part of the device module's API
