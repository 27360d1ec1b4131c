"""The hot path: calling an operator (private; ``oplib_core`` re-exports the public names).

One concept per module, each importing only those above it in this list:

- ``modes``: dispatch modes, the per-thread mode stack and the count of active modes;
- ``binding``: call arguments against the schema (``Binder``), and the schema read once
  for dispatch (``Signature``: tensor positions, the fast path's call shapes, returns);
- ``placement``: unwrapping Tensors, choosing the backend, device checks, scalar moves,
  wrapping results;
- ``resolution``: which kernel serves a backend (torch's ``resolve_key``), the Autograd
  kernel, the no-kernel errors;
- ``fastpath``: ``FastCall.__call__`` and the per-op caches it reads (``OpCache``), the
  Tensor entries, ``call_below_autograd``, and the ``OPLIB_DISPATCH_SLOW`` switch;
- ``overload``: the public ``OpOverload``, its slow path and ``plan_call``.
"""

from __future__ import annotations

from .binding import Binder, Signature, is_array
from .fastpath import FAST_FIELDS, MISS, SLOW, FastCall, OpCache
from .modes import DispatchMode, active_modes
from .overload import OpOverload, Plan
from .resolution import DispatchKeySet

__all__ = [
    "FAST_FIELDS",
    "MISS",
    "SLOW",
    "Binder",
    "DispatchKeySet",
    "DispatchMode",
    "FastCall",
    "OpCache",
    "OpOverload",
    "Plan",
    "Signature",
    "active_modes",
    "is_array",
]
