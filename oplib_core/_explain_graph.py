"""The dispatch decision of a :class:`~oplib_core.DispatchExplanation` as a graph, in
Graphviz ``dot`` and Mermaid: the call, the active modes, ``Autograd``, the backend, then
each resolution step (own kernel, ``default``, composite, fallback) with the one taken."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._registry.registry import AUTOGRAD

if TYPE_CHECKING:
    from ._explain import DispatchExplanation

__all__ = ["Graph", "dispatch_graph", "dot_str", "to_dot", "to_mermaid"]


class Graph:
    """Nodes ``(id, label, kind)`` and edges ``(from, to, label, taken)``; ``kind`` is
    ``call``, ``mode``, ``key``, ``kernel`` or ``error``."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, str, str]] = []
        self.edges: list[tuple[str, str, str, bool]] = []

    def node(self, label: str, kind: str) -> str:
        nid = f"n{len(self.nodes)}"
        self.nodes.append((nid, label, kind))
        return nid


def dispatch_graph(e: DispatchExplanation) -> Graph:
    g = Graph()
    at = g.node(e.op, "call")
    for mode in reversed(e.modes):  # the innermost mode sees the call first
        nxt = g.node(mode, "mode")
        g.edges.append((at, nxt, "intercepts", True))
        at = nxt
    steps = list(e.steps)
    if steps and steps[0][0] == AUTOGRAD:
        _, why = steps.pop(0)
        nxt = g.node(f"{AUTOGRAD}\n{why}", "key")
        g.edges.append((at, nxt, "grad mode on" if "grad mode" not in why else why, True))
        at = nxt
        if why.startswith("taken"):
            g.edges.append((at, g.node(e.chosen or AUTOGRAD, "kernel"), "runs", True))
            return g
    if e.backend is not None:
        nxt = g.node(f"backend {e.backend}", "key")
        g.edges.append((at, nxt, "dispatch keys: " + " > ".join(e.keys), True))
        at = nxt
    taken_from = None
    for key, why in steps:
        taken = why.startswith("taken")
        nid = g.node(f"{key}\n{why}", "key")
        g.edges.append((at, nid, "taken" if taken else why.partition(":")[0], taken))
        if taken:
            taken_from = nid
    if e.error is not None:
        g.edges.append((at, g.node(e.error, "error"), "error", False))
    elif taken_from is not None and e.chosen is not None:
        g.edges.append((taken_from, g.node(f"kernel: {e.chosen}", "kernel"), "runs", True))
    return g


_DOT_STYLE = {
    "call": "shape=oval, style=bold",
    "mode": 'shape=box, style="rounded,filled", fillcolor="#fff3cd"',
    "key": "shape=box",
    "kernel": 'shape=box, style="rounded,filled", fillcolor="#d4edda"',
    "error": 'shape=box, style="rounded,filled", fillcolor="#f8d7da"',
}


def dot_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(g: Graph, name: str = "dispatch") -> str:
    lines = [f"digraph {dot_str(name)} {{", "  rankdir=TB;", '  node [fontname="Helvetica"];']
    for nid, label, kind in g.nodes:
        lines.append(f"  {nid} [label={dot_str(label)}, {_DOT_STYLE[kind]}];")
    for a, b, label, taken in g.edges:
        style = "" if taken else ", style=dashed"
        lines.append(f"  {a} -> {b} [label={dot_str(label)}{style}];")
    lines.append("}")
    return "\n".join(lines)


def _mermaid_str(s: str) -> str:
    # Mermaid labels take HTML entities; quotes and pipes would end the label
    return (
        s.replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("|", "#124;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("\n", "<br/>")
    )


_MERMAID_SHAPE = {"call": ("([", "])"), "mode": ("[/", "/]"), "error": ("{{", "}}")}


def to_mermaid(g: Graph) -> str:
    lines = ["flowchart TB"]
    for nid, label, kind in g.nodes:
        left, right = _MERMAID_SHAPE.get(kind, ("[", "]"))
        lines.append(f'  {nid}{left}"{_mermaid_str(label)}"{right}')
    for a, b, label, taken in g.edges:
        arrow = "-->" if taken else "-.->"
        lines.append(f'  {a} {arrow}|"{_mermaid_str(label)}"| {b}')
    lines.extend(f"  class {nid} {kind}" for nid, _, kind in g.nodes if kind in ("kernel", "error"))
    lines.append("  classDef kernel fill:#d4edda")
    lines.append("  classDef error fill:#f8d7da")
    return "\n".join(lines)
