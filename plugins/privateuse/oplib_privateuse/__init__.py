"""oplib's private-use backend: a software device (``privateuse1`` until renamed) whose
arrays live in their own per-device memory. See ``docs/writing-a-backend.md``; a copy takes
its own name from ``name.NAME``."""

from __future__ import annotations

from oplib_privateuse.memory import DeviceArray

__all__ = ["DeviceArray"]
