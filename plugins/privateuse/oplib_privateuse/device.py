"""The device module: ``oplib_core.privateuse1`` (``oplib_core.npu`` after
``rename_privateuse1_backend("npu")``; ``oplib_core.<NAME>`` in a copy whose ``name.NAME``
is its own), the API torch expects of a device module.

Device selection is per thread; random number generators are per device (numpy PCG64,
seeded with torch's default seed until ``manual_seed``/``manual_seed_all``).
"""

from __future__ import annotations

import threading as _threading
from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from oplib_core.backend_registration import normalize_device as _normalize_device
from oplib_privateuse import memory as _memory
from oplib_privateuse.name import backend_name as _backend_name

if _TYPE_CHECKING:
    from typing import Any

    import numpy as np

    from oplib_core import Device

__all__ = [
    "_is_in_bad_fork",
    "current_device",
    "device_count",
    "generator",
    "get_amp_supported_dtype",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "memory_allocated",
    "set_device",
    "set_rng_state",
    "synchronize",
]

_DEFAULT_SEED = 67280421310721  # torch's default generator seed


class _Current(_threading.local):
    index = 0


_current = _Current()
_rng_lock = _threading.Lock()
_generators: dict[int, np.random.Generator] = {}
_seeds: dict[int, int] = {}  # device index -> the seed its generator was last seeded with


def _index(device: int | str | Device | None) -> int:
    return _memory.check_index(_normalize_device(device, _backend_name()))


def is_available() -> bool:
    """Whether at least one device exists (its count variable, ``name.DEVICES_ENV``, > 0)."""
    return device_count() > 0


def device_count() -> int:
    """Number of devices (``name.DEVICES_ENV``: ``OPLIB_PRIVATEUSE1_DEVICES``, default 2)."""
    return _memory.device_count()


def current_device() -> int:
    """Index of this thread's current device (0 until ``set_device``)."""
    return _current.index


def set_device(device: int | str | Device) -> None:
    """Make ``device`` (an index, ``"npu:1"`` or a Device) this thread's current device."""
    _current.index = _index(device)


def synchronize(device: int | str | Device | None = None) -> None:
    """Wait for the device's work to finish: this device computes synchronously, so it only
    checks that the device exists."""
    _index(device)


def generator(device: int | str | Device | None = None) -> np.random.Generator:
    """The random number generator of ``device`` (default: the current one)."""
    index = _index(device)
    with _rng_lock:
        gen = _generators.get(index)
        if gen is None:
            gen = _generators[index] = _np.random.Generator(_np.random.PCG64(_DEFAULT_SEED))
        return gen


def initial_seed() -> int:
    """The seed of the current device's generator: the last ``manual_seed``/
    ``manual_seed_all`` seed, else the default seed (torch's ``initial_seed``)."""
    index = _index(None)
    with _rng_lock:
        return _seeds.get(index, _DEFAULT_SEED)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _seed(current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator with ``seed``."""
    for index in range(device_count()):
        _seed(index, seed)


def _seed(index: int, seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, _np.integer)):
        raise TypeError(f"manual_seed(): expected an int seed, got {type(seed).__name__}")
    with _rng_lock:
        _seeds[index] = int(seed) & (2**64 - 1)
        _generators[index] = _np.random.Generator(_np.random.PCG64(_seeds[index]))


_STATE_BYTES = 37  # PCG64: state (16) + increment (16) + has_uint32 (1) + uinteger (4)


def get_rng_state(device: int | str | Device | None = None) -> np.ndarray:
    """The generator state of ``device`` as a uint8 array (for ``set_rng_state``)."""
    st = generator(device).bit_generator.state
    raw: bytes = (
        st["state"]["state"].to_bytes(16, "little")
        + st["state"]["inc"].to_bytes(16, "little")
        + bytes([st["has_uint32"]])
        + int(st["uinteger"]).to_bytes(4, "little")
    )
    return _np.frombuffer(bytearray(raw), dtype=_np.uint8)  # writable, like a copy


def set_rng_state(new_state: Any, device: int | str | Device | None = None) -> None:
    """Restore a state returned by ``get_rng_state`` on ``device``."""
    raw = _np.asarray(new_state)
    if raw.dtype != _np.uint8 or raw.shape != (_STATE_BYTES,):
        raise ValueError(
            f"set_rng_state(): expected the uint8 array of {_STATE_BYTES} bytes that "
            f"get_rng_state() returns, got dtype {raw.dtype}, shape {raw.shape}"
        )
    b = raw.tobytes()
    gen = generator(device)
    with _rng_lock:
        gen.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {
                "state": int.from_bytes(b[0:16], "little"),
                "inc": int.from_bytes(b[16:32], "little"),
            },
            "has_uint32": b[32],
            "uinteger": int.from_bytes(b[33:37], "little"),
        }


def get_amp_supported_dtype() -> list[np.dtype]:
    """Dtypes autocast may use on this device."""
    return [_np.dtype(_np.float16), _np.dtype(_np.float32)]


def _is_in_bad_fork() -> bool:
    """Host-backed memory survives ``fork``: never in a bad fork."""
    return False


def memory_allocated(device: int | str | Device | None = None) -> int:
    """Bytes of device memory in use by live arrays on ``device``."""
    return _memory.arena(_index(device)).allocated


def max_memory_allocated(device: int | str | Device | None = None) -> int:
    """The most bytes ever in use at once on ``device``."""
    return _memory.arena(_index(device)).peak


del annotations  # the __future__ feature: not part of the device module's API
