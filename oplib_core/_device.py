"""Devices: a device type (the backend's name) and an optional index."""

from __future__ import annotations

import re

from ._records import Record

__all__ = ["Device", "parse_device"]

_DEVICE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(\d+))?$")


class Device(Record):
    """A device: ``type`` names a backend (``"cpu"``, ``"cuda"``, ...), ``index`` picks one of
    its devices (``None`` means the backend's current device)."""

    type: str
    index: int | None = None

    # Record's generic __init__ would take its slow path for Device("cpu"); made often.
    def __init__(self, type: str, index: int | None = None) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type={self.type!r})"
        return f"device(type={self.type!r}, index={self.index})"


#: Device strings parsed before (``parse_device``), at most ``_MAX_PARSED``: a program names
#: the same few devices call after call (``x.to("cuda")``), and a Device never changes.
_PARSED: dict[str, Device] = {}
_MAX_PARSED = 64


def parse_device(spec: Device | str, index: int | None = None) -> Device:
    """Parse ``"cuda:1"``, ``("cuda", 1)`` or a :class:`Device` (ints are resolved against the
    installed backends by :func:`oplib_core.device`)."""
    if index is None and type(spec) is str:
        known = _PARSED.get(spec)
        if known is not None:
            return known
        parsed = _parse(spec, None)
        if len(_PARSED) < _MAX_PARSED:
            _PARSED[spec] = parsed
        return parsed
    return _parse(spec, index)


def _parse(spec: Device | str, index: int | None) -> Device:
    if isinstance(spec, Device):
        if index is not None:
            raise TypeError(f"device(): index given twice: {spec!r} and index={index}")
        return spec
    if not isinstance(spec, str):
        raise TypeError(
            f"device(): expected a str like 'cuda:1', a Device or an int, got {type(spec).__name__}"
        )
    m = _DEVICE_RE.match(spec.strip())
    if m is None:
        raise ValueError(
            f"device(): expected a device string like 'cpu', 'cuda' or 'cuda:1', got {spec!r}"
        )
    dtype, idx = m.group(1), m.group(2)
    if idx is not None and index is not None:
        raise ValueError(f"device(): index given twice: {spec!r} and index={index}")
    idx_val = int(idx) if idx is not None else index
    return Device(dtype, None if idx_val is None else _check_index(idx_val))


def _check_index(i: int) -> int:
    if i < 0:
        raise ValueError(f"device(): device index must be >= 0, got {i}")
    return i
