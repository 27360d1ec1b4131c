"""``explain(op, *args, **kwargs)``: the dispatch decision for a call, without running a kernel."""

from __future__ import annotations

from typing import Any

from ._dispatch import OpOverload, active_modes
from ._higher_order._operator import HigherOrderOperator
from ._registry.lookup import lookup_for_call
from ._registry.registry import AUTOGRAD, COMPOSITE_IMPLICIT, REGISTRY

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

    def to_dot(self) -> str:
        """The decision as a Graphviz ``dot`` graph: the call, the active modes,
        ``Autograd``, the backend and each resolution step (dashed: skipped)."""
        from ._explain_graph import dispatch_graph, to_dot

        return to_dot(dispatch_graph(self))

    def to_mermaid(self) -> str:
        """The decision as a Mermaid flowchart (GitHub renders it in Markdown)."""
        from ._explain_graph import dispatch_graph, to_mermaid

        return to_mermaid(dispatch_graph(self))

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


# How the Autograd step of a plan (``Plan.autograd``) reads in an explanation.
_AUTOGRAD_STEP = {
    "grad mode off": "skipped: grad mode is off",
    "taken": "taken: autograd formula (or implicit composite)",
    "fallthrough": "skipped: fallthrough_kernel",
    "no formula": "error: no formula",
    "unsupported": "error: the backend does not record gradients",
}


def explain(op: Any, /, *args: Any, **kwargs: Any) -> DispatchExplanation:
    """Explain how ``op(*args, **kwargs)`` would dispatch; runs no kernel.

    Raises ``TypeError`` like the call itself when the arguments do not fit the schema.
    ``op`` may be a ``HigherOrderOperator``: its handlers are the candidates.
    """
    if isinstance(op, HigherOrderOperator):
        return _explain_hop(op, args, kwargs)
    ov = _overload(op, args, kwargs)
    plan = ov.plan_call(args, kwargs)  # the decision dispatch itself takes
    out = DispatchExplanation(ov.name(), str(ov.schema), [type(m).__name__ for m in active_modes()])
    call, backend = plan.placement, plan.backend
    if call is None or backend is None:  # a device mismatch is part of the answer
        out.error = f"{type(plan.error).__name__}: {plan.error}"
        return out
    out.backend = backend.name
    for name, arr, _, _ in call.found:
        b = REGISTRY.backends.for_type(type(arr))
        dev = b.device_of(arr) if b is not None else "?"
        out.arrays[name] = f"{type(arr).__module__}.{type(arr).__name__} on {dev}"
    if not call.found:
        out.arrays["(no tensors)"] = f"factory: device argument selects {backend.name}"
    out.keys = [*out.modes, *plan.keys]
    out.cache_hit = plan.cached and not out.modes
    why = _AUTOGRAD_STEP.get(plan.autograd)
    if why is not None:
        out.steps.append((AUTOGRAD, why))
    if plan.key == AUTOGRAD:
        out.chosen = f"{AUTOGRAD} kernel of {ov.name()}"
        return out
    if plan.autograd in ("no formula", "unsupported"):
        out.error = str(plan.error)
        return out
    for key, _, why in ov.resolution_steps(backend):  # the reasons behind plan.key
        out.steps.append((key, why))
    if plan.key is not None:
        out.chosen = plan.key if plan.key != COMPOSITE_IMPLICIT else f"{plan.key} (decomposes)"
    else:
        out.error = str(plan.error)
    return out


def _explain_hop(
    hop: HigherOrderOperator, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> DispatchExplanation:
    """A higher-order operator's decision: the same keys and handler steps its call takes."""
    out = DispatchExplanation(
        hop.qualname, hop.signature, [type(m).__name__ for m in active_modes()]
    )
    decision = hop.decide(args, kwargs)
    out.backend = decision.backend.name
    out.arrays = decision.arrays
    out.keys = [*out.modes, *decision.keys]
    out.steps = [(key, why) for key, _, why in decision.steps]
    out.chosen = decision.chosen
    out.error = decision.error
    out.cache_hit = decision.cached and not out.modes
    return out
