"""numpy's API for one device: the array namespace the core kernels are bound to.

``array_kernels(xp)`` is written once against an array namespace. ``DeviceNamespace(i)``
is numpy seen from device ``i``: each function takes the buffers of device ``i``'s arrays,
runs numpy on them and hands back DeviceArrays whose fresh memory device ``i`` owns. Nothing
here copies data between the host and the device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from oplib_privateuse.memory import check_index, unwrap, wrap

__all__ = ["DeviceNamespace", "bind", "namespace"]

T = TypeVar("T")


class DeviceNamespace:
    """numpy's functions on the arrays of device ``index``; numpy's dtypes and constants
    unchanged."""

    def __init__(self, index: int) -> None:
        self.index = check_index(index)

    def __repr__(self) -> str:
        return f"<DeviceNamespace of device {self.index}>"

    def __getattr__(self, name: str) -> Any:
        target = getattr(np, name)
        if not callable(target) or isinstance(target, type):
            return target
        index = self.index

        @functools.wraps(target)
        def on_device(*args: Any, **kwargs: Any) -> Any:
            args = unwrap(args, index)
            kwargs = {k: unwrap(v, index) for k, v in kwargs.items()}
            return wrap(target(*args, **kwargs), index)

        setattr(self, name, on_device)  # cache: __getattr__ runs once per name
        return on_device


@functools.cache
def namespace(index: int) -> DeviceNamespace:
    """The (shared) namespace of device ``index``."""
    return DeviceNamespace(index)


def bind(fn: Callable[[Any], T]) -> Callable[[int], T]:
    """``fn(xp)`` computed once per device (e.g. ``bind(array_kernels)``); ``xp`` is the
    device's :class:`DeviceNamespace`, which stands in for numpy's module."""
    return functools.cache(lambda index: fn(namespace(index)))
