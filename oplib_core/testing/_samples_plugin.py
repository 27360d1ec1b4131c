"""The built-in plugin ``core-samples``: the sample inputs of the core op set
(:mod:`._core_samples`), through the same ``oplib_sample_inputs`` hook as third-party
samples. The samples are imported on the first ask: only ``oplib check`` and ``opcheck``
read them, and a program that calls ops should not pay for their makers at start-up.
"""

from __future__ import annotations

from typing import Any

from .._device import Device
from .._dispatch import OpOverload
from ..hookspecs import hookimpl

__all__ = ["oplib_sample_inputs"]


@hookimpl
def oplib_sample_inputs(op: OpOverload, device: Device) -> Any:
    from ._core_samples import core_sample_inputs

    return core_sample_inputs(op, device)
