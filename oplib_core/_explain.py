"""``explain(op, *args, **kwargs)``: the dispatch decision for a call, without running a kernel."""

from __future__ import annotations

from typing import Any

from ._dispatcher import OpOverload, active_modes
from ._grad_mode import STATE as GRAD
from ._lookup import lookup_for_call
from ._registry import AUTOGRAD, COMPOSITE_IMPLICIT, REGISTRY

__all__ = ["DispatchExplanation", "explain"]


class DispatchExplanation:
    """What dispatch would do: the keys computed from the arguments, each candidate kernel
    with why it was taken or skipped, and whether the dispatch cache would serve the call.

    Attributes: ``op``, ``schema``, ``modes``, ``arrays`` (argument → array type and
    device), ``backend``, ``keys``, ``steps`` (``(key, why)`` pairs), ``chosen``,
    ``cache_hit``, ``error``; ``to_json()`` gives them as a dict."""

    def __init__(self, op: str, schema: str, modes: list[str]) -> None:
        self.op = op
        self.schema = schema
        self.modes = modes
        self.arrays: dict[str, str] = {}
        self.backend: str | None = None
        self.keys: list[str] = []
        self.steps: list[tuple[str, str]] = []
        self.chosen: str | None = None
        self.cache_hit = False
        self.error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "steps": [list(s) for s in self.steps]}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"DispatchExplanation({fields})"

    def __str__(self) -> str:
        lines = [f"{self.op}: {self.schema}"]
        if self.modes:
            lines.append(f"  modes: {', '.join(self.modes)} (the innermost intercepts the call)")
        for name, where in self.arrays.items():
            lines.append(f"  argument {name}: {where}")
        lines.append(f"  dispatch keys: {' > '.join(self.keys) or '(none)'}")
        for key, why in self.steps:
            lines.append(f"    {key:28s} {why}")
        if self.error:
            lines.append(f"  error: {self.error}")
        else:
            lines.append(f"  kernel: {self.chosen}")
        lines.append(f"  dispatch cache: {'hit' if self.cache_hit else 'miss (slow path)'}")
        return "\n".join(lines)


def _overload(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> OpOverload:
    return lookup_for_call(op, args, kwargs, "explain")


def explain(op: Any, /, *args: Any, **kwargs: Any) -> DispatchExplanation:
    """Explain how ``op(*args, **kwargs)`` would dispatch; runs no kernel.

    Raises ``TypeError`` like the call itself when the arguments do not fit the schema.
    """
    ov = _overload(op, args, kwargs)
    entry = ov._entry
    bargs, bkwargs = ov._binder.bind(args, kwargs)
    out = DispatchExplanation(
        entry.qualname, str(entry.schema), [type(m).__name__ for m in active_modes()]
    )
    try:
        call = ov._prepare(bargs, bkwargs)
    except Exception as e:  # a device mismatch is part of the answer
        out.error = f"{type(e).__name__}: {e}"
        return out
    backend = call.backend
    out.backend = backend.name
    for name, arr, _ in call.found:
        b = REGISTRY.backends.for_type(type(arr))
        dev = b.device_of(arr) if b is not None else "?"
        out.arrays[name] = f"{type(arr).__module__}.{type(arr).__name__} on {dev}"
    if not call.found:
        out.arrays["(no tensors)"] = f"factory: device argument selects {backend.name}"
    autograd = call.tensors_in and call.requires_grad and GRAD.enabled
    out.keys = [*out.modes, *([AUTOGRAD] if autograd else []), backend.key]
    if autograd:
        try:
            fn = ov._autograd_kernel(backend)
        except RuntimeError as e:
            out.steps.append((AUTOGRAD, "error: no formula"))
            out.error = str(e)
            return out
        if fn is not None:
            out.steps.append((AUTOGRAD, "taken: autograd formula (or implicit composite)"))
            out.chosen = f"{AUTOGRAD} kernel of {entry.qualname}"
            return out
        out.steps.append((AUTOGRAD, "skipped: fallthrough_kernel"))
    elif call.tensors_in and call.requires_grad:
        out.steps.append((AUTOGRAD, "skipped: grad mode is off"))
    for key, fn, why in ov.resolution_steps(backend):
        out.steps.append((key, why))
        if fn is not None:
            out.chosen = key if key != COMPOSITE_IMPLICIT else f"{key} (decomposes)"
    if out.chosen is None:
        out.error = str(ov._no_kernel(backend))
    cls = ov._cache_class(call)
    fast = not kwargs and ov._nmin <= len(args) <= ov._npos and not out.modes
    if cls is not None and fast:
        key = type(next(iter(args[i] for i in ov._key_pos)))
        out.cache_hit = key in entry.cache and (not call.tensors_in or cls in entry.tcache)
    return out
