"""``autograd.to_dot(output)``: the autograd graph recorded behind a Tensor, as Graphviz ``dot``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._explain_graph import dot_str
from .._tensor.tensor import Tensor
from ._engine import Node

__all__ = ["draw"]


def _leaf_label(t: Tensor) -> str:
    return f"{tuple(t.shape)} {t.dtype}\nrequires_grad leaf"


def draw(outputs: Tensor | Sequence[Tensor], name: str = "autograd") -> str:
    """:func:`oplib_core.autograd.to_dot`."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ids: dict[int, str] = {}
    lines = [f"digraph {dot_str(name)} {{", "  rankdir=BT;", '  node [fontname="Helvetica"];']
    edges: list[str] = []

    def visit(obj: Any) -> str:
        key = id(obj)
        if key in ids:
            return ids[key]
        nid = ids[key] = f"n{len(ids)}"
        if isinstance(obj, Node):
            lines.append(f"  {nid} [label={dot_str(obj.name())}, shape=box];")
            for nxt, _ in obj.next_functions:
                if nxt is not None:
                    edges.append(f"  {visit(nxt)} -> {nid};")
        else:
            lines.append(
                f"  {nid} [label={dot_str(_leaf_label(obj))}, shape=box, "
                'style=filled, fillcolor="#cfe2ff"];'
            )
        return nid

    roots = []
    for i, t in enumerate(outs):
        src = t.grad_fn if t.grad_fn is not None else (t if t.requires_grad else None)
        if src is None:
            continue
        out_id = f"out{i}"
        lines.append(
            f"  {out_id} [label={dot_str(f'output {i}: {tuple(t.shape)} {t.dtype}')}, "
            'shape=oval, style=filled, fillcolor="#d4edda"];'
        )
        edges.append(f"  {visit(src)} -> {out_id};")
        roots.append(out_id)
    if not roots:
        raise ValueError(
            "autograd.to_dot(): no output has an autograd graph (none requires grad); "
            "compute it from Tensors made with requires_grad=True, outside no_grad()"
        )
    return "\n".join([*lines, *edges, "}"])
