"""Sample inputs: what ``oplib check`` and the pytest fixture call operators with.

Plugins provide them through the ``oplib_sample_inputs(op, device)`` hook; pluggy gathers the
answers of every plugin and :func:`sample_inputs` merges them into one list of
:class:`SampleInput`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._device import Device, parse_device
from .._dispatch import OpOverload
from .._plugin_host import HOST
from .._records import Record, field
from .._registry.lookup import resolve

__all__ = ["SampleInput", "sample_inputs"]


class SampleInput(Record):
    """One way to call an operator: ``op(*args, **kwargs)``.

    ``name`` describes the sample in reports (``"float32 (2, 3) broadcast"``).
    ``compare_values=False`` says the outputs' values are unspecified (``empty``), so
    ``test_backends`` compares only shape, dtype and device. A hook may also yield plain
    ``(args, kwargs)`` pairs.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    compare_values: bool = True

    def __post_init__(self) -> None:
        if self.kwargs is None:  # as before fields were typed: None means no kwargs
            object.__setattr__(self, "kwargs", {})


def as_sample(value: Any, op: OpOverload) -> SampleInput:
    """A hook's answer item as a :class:`SampleInput`."""
    if isinstance(value, SampleInput):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
        args, kwargs = value
        return SampleInput(tuple(args), dict(kwargs))
    raise TypeError(
        f"oplib_sample_inputs(): samples for {op.name()} must be SampleInput objects or "
        f"(args, kwargs) pairs, got {type(value).__name__}: {value!r}"
    )


def sample_inputs(op: Any, device: Device | str) -> list[SampleInput]:
    """Every plugin's sample inputs for ``op`` (any spelling ``oplib.lookup`` takes; the
    ``oplib_sample_inputs`` hooks get its ``OpOverload``) on ``device``, in plugin order.
    The core samples keep data of a dtype ``device``'s backend cannot hold
    (``BackendSpec.dtypes``: float64 on JAX in its 32-bit mode) on ``cpu``; ``oplib check``
    skips such samples."""
    overload = resolve(op, "sample_inputs")
    dev = parse_device(device)
    answers: Iterable[Any] = HOST.pm.hook.oplib_sample_inputs(op=overload, device=dev)
    return [as_sample(s, overload) for answer in answers for s in answer]
