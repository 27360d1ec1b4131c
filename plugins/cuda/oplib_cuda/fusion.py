"""The cuda backend's compiler of elementwise kernels (``BackendSpec.elementwise_kernel``).

oplib-core runs the backward formula of a pointwise core op (tanh's
``mul(g, rsub(mul(out, out), 1))``, three cupy launches) as one kernel generated from the
formula itself where the backend can compile one (issue 30); this module gives cupy's
``ElementwiseKernel`` for that, made on the kernel's first call (loading the plugin imports
no cupy) and run on its arrays' device (``oplib_core.backends.on_device``).

``OPLIB_CUDA_FUSED_BACKWARD=0`` (or ``false``, ``no``, ``off``) turns it off: read once,
when the plugin loads; the formulas then run op by op.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from oplib_core.backends import DevicePlacement, on_device
from oplib_cuda import runtime

__all__ = ["SWITCH", "compiler", "enabled", "launches"]

#: The environment variable that turns fused backward kernels off.
SWITCH = "OPLIB_CUDA_FUSED_BACKWARD"

_launches: Counter[str] = Counter()


def enabled() -> bool:
    """Whether fused backward kernels are on: ``OPLIB_CUDA_FUSED_BACKWARD`` is unset or
    not one of ``0``, ``false``, ``no``, ``off`` (any case)."""
    return runtime.switched_on(SWITCH)


def launches() -> dict[str, int]:
    """How many times each fused kernel (by its name) ran in this process."""
    return dict(_launches)


def compiler(
    placement: Callable[[], DevicePlacement],
) -> Callable[[str, str, str, str], Callable[..., Any]] | None:
    """``BackendSpec.elementwise_kernel`` for cupy: a function making
    ``cupy.ElementwiseKernel(in_params, out_params, operation, name)`` on its first call,
    run on the device of its arrays (``placement``: the plugin's ``DevicePlacement``);
    ``None`` when :data:`SWITCH` turns fusion off."""
    if not enabled():
        return None

    def elementwise_kernel(
        in_params: str, out_params: str, operation: str, name: str
    ) -> Callable[..., Any]:
        def make() -> Callable[..., Any]:
            kernel = runtime.cupy().ElementwiseKernel(in_params, out_params, operation, name)

            def launch(*arrays: Any) -> Any:
                _launches[name] += 1
                return kernel(*arrays)

            return launch

        return on_device(make, placement, name=name)

    return elementwise_kernel
