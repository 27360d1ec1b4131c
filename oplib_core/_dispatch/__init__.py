"""The hot path: calling an operator (private; ``oplib_core`` re-exports the public names).

One concept per module, each importing only those above it in this list:

- ``stack``: the per-thread mode stack, the count of active modes, and ``call_mode``
  (handing a call to the innermost mode);
- ``binding``: call arguments against the schema (``Binder``), and the schema read once
  for dispatch (``Signature``: tensor positions, the fast path's call shapes, returns);
- ``placement``: unwrapping Tensors, choosing the backend, device checks, scalar moves,
  wrapping results;
- ``resolution``: which kernel serves a backend (torch's ``resolve_key``), the Autograd
  kernel, the no-kernel errors;
- ``fastpath``: ``FastCall.__call__`` and the per-op caches it reads (``OpCache``), the
  Tensor entries, ``call_below_autograd``, and the ``OPLIB_DISPATCH_SLOW`` switch;
- ``overload``: the public ``OpOverload``, its slow path and ``plan_call``;
- ``modes``: ``DispatchMode``, the class of dispatch modes (its methods take the
  ``OpOverload`` a call is for).

This module is the one door: the rest of the core imports from here, never from the
submodules, and asks an op (``OpOverload``'s methods) rather than reading its fields.
Modes that run calls themselves use ``bind_call``/``unwrap_call``/``wrap_call`` (the
bound call, its arrays, the result as the caller gets it), ``mode_table`` and
``serve_mode`` (calls of the fast path's shape served without leaving the dispatcher),
and the profiler ``route``/``plan_call``/``run_plan`` (what the dispatcher decides, run
as it runs it). ``tests/test_dispatch_door.py`` holds the rule.
"""

from __future__ import annotations

from .binding import Binder, BoundCall, Signature, is_array
from .doc import document, packet_text
from .failure import add_note
from .fastpath import (
    COMPILED,
    COMPILED_MODULE,
    DEVICE_KEYS,
    FAST_FIELDS,
    MISS,
    SLOW,
    FactoryFastCall,
    FastCall,
    OpCache,
    Route,
    SizeRoutedBase,
    fast_entry,
    sized_tensor,
)
from .modes import ACTIVE, MODES, DispatchMode, active_modes, tensor_types
from .overload import CallRoute, OpOverload, Plan
from .overload import _FactoryOverload as FactoryOverload
from .resolution import DispatchKeySet, has_trivial_fake

__all__ = [
    "ACTIVE",
    "COMPILED",
    "COMPILED_MODULE",
    "DEVICE_KEYS",
    "FAST_FIELDS",
    "MISS",
    "MODES",
    "SLOW",
    "Binder",
    "BoundCall",
    "CallRoute",
    "DispatchKeySet",
    "DispatchMode",
    "FactoryFastCall",
    "FactoryOverload",
    "FastCall",
    "OpCache",
    "OpOverload",
    "Plan",
    "Route",
    "Signature",
    "SizeRoutedBase",
    "active_modes",
    "add_note",
    "document",
    "fast_entry",
    "has_trivial_fake",
    "is_array",
    "packet_text",
    "sized_tensor",
    "tensor_types",
]
