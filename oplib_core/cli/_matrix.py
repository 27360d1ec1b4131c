"""``oplib ops matrix``: an ops x backends grid of what serves each op on each backend,
as text, Markdown (to paste into a README) or HTML; ``--check`` adds the ``oplib check``
result per cell.

A cell's category is read from the op's own resolution steps
(:meth:`~oplib_core.OpOverload.resolution_steps`), the order dispatch follows: the
backend's own kernel, the fake kernel (data-less backends), the ``default`` kernel, an
implicit composite, the backend's fallback. Kernels registered for a device whose backend
is not installed get a column of their own: ``waiting``.
"""

from __future__ import annotations

import argparse
import html
from dataclasses import dataclass, field
from typing import Any

from .._higher_order._operator import HOPS, NAMESPACE
from .._registry.registry import COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, FAKE, REGISTRY
from ..backends import TABLE, Backend
from ._names import namespace
from ._render import Output

__all__ = ["CATEGORIES", "Matrix", "add_parser", "build", "run"]

OWN, DEFAULT, COMPOSITE, FALLBACK = "own kernel", "default", "composite", "fallback"
FAKE_ONLY, WAITING, NONE = "fake only", "waiting", "none"
#: Every category a cell can have, in the order the legend lists them.
CATEGORIES = (OWN, DEFAULT, COMPOSITE, FALLBACK, FAKE_ONLY, WAITING, NONE)
_STYLES = {
    OWN: "green",
    DEFAULT: "cyan",
    COMPOSITE: "blue",
    FALLBACK: "magenta",
    FAKE_ONLY: "dim",
    WAITING: "yellow",
    NONE: "red",
}


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", "-n", help="only this namespace")
    p.add_argument(
        "--format", choices=("text", "markdown", "html"), default="text", help="output format"
    )
    p.add_argument(
        "--check", action="store_true", help="run 'oplib check' and add its result per cell"
    )


@dataclass
class Matrix:
    """``cells[op][column]`` is a category; ``checks[op][column]`` a check status."""

    columns: list[str]
    cells: dict[str, dict[str, str]]
    checks: dict[str, dict[str, str]] = field(default_factory=dict)

    def label(self, op: str, column: str) -> str:
        status = self.checks.get(op, {}).get(column)
        return f"{self.cells[op][column]} {status}" if status else self.cells[op][column]

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "ops": [
                {
                    "op": op,
                    "cells": {
                        c: {"category": cat, "check": self.checks.get(op, {}).get(c)}
                        for c, cat in row.items()
                    },
                }
                for op, row in self.cells.items()
            ],
        }


def _category(op: Any, backend: Backend) -> str:
    taken = next((key for key, fn, _ in op.resolution_steps(backend) if fn is not None), None)
    if taken is None:
        return NONE
    if taken == backend.name:
        return OWN
    if taken == FAKE:
        return FAKE_ONLY
    if taken == COMPOSITE_EXPLICIT:
        return DEFAULT
    if taken == COMPOSITE_IMPLICIT:
        return COMPOSITE
    return FALLBACK  # the backend's fallback, the last step


def build(ns: str | None = None) -> Matrix:
    """The grid for every op and higher-order operator (of namespace ``ns``) and installed
    backend, plus a column per device that has kernels waiting for its backend."""
    backends = TABLE.all()
    with REGISTRY.lock:
        entries = sorted(
            (e for e in REGISTRY.ops.values() if ns is None or e.schema.namespace == ns),
            key=lambda e: e.qualname,
        )
    hops = HOPS.all() if ns is None or ns == NAMESPACE else []
    hop_keys = {h.qualname: {k for k, _ in h.handlers() if isinstance(k, str)} for h in hops}
    waiting = sorted(
        {k for e in entries for k in e.kernels if REGISTRY.kernel_status(k) == WAITING}
        | {k for keys in hop_keys.values() for k in keys if REGISTRY.kernel_status(k) == WAITING}
    )
    cells: dict[str, dict[str, str]] = {}
    for e in entries:
        row = {b.name: _category(e.overload, b) for b in backends}
        row.update({k: WAITING if e.has_kernel(k) else NONE for k in waiting})
        cells[e.qualname] = row
    for h in hops:  # their handlers resolve in the same steps (own, Fake, the default)
        row = {b.name: _category(h, b) for b in backends}
        row.update({k: WAITING if k in hop_keys[h.qualname] else NONE for k in waiting})
        cells[h.qualname] = row
    return Matrix([b.name for b in backends] + waiting, cells)


def add_checks(m: Matrix, out: Output) -> None:
    """Run ``oplib check`` on the grid's ops and installed backends; a cell's status is
    FAIL if any check failed there, else PASS if any passed, else SKIP."""
    from ..testing._checks import FAIL, PASS, SKIP
    from ._check import run_checks

    report = run_checks(list(m.cells), [], out, isolate=False)
    rank = {SKIP: 0, PASS: 1, FAIL: 2}
    for r in report.rows:
        row = m.checks.setdefault(r.op, {})
        if rank[r.status] >= rank[row.get(r.backend, SKIP)]:
            row[r.backend] = r.status


def render_markdown(m: Matrix) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = [
        "| op | " + " | ".join(esc(c) for c in m.columns) + " |",
        "|---|" + "---|" * len(m.columns),
    ]
    lines += [
        f"| `{esc(op)}` | " + " | ".join(esc(m.label(op, c)) for c in m.columns) + " |"
        for op in m.cells
    ]
    return "\n".join(lines)


def render_html(m: Matrix) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in m.columns)
    body = []
    for op in m.cells:
        tds = "".join(
            f'<td class="{e(m.cells[op][c].replace(" ", "-"))}">{e(m.label(op, c))}</td>'
            for c in m.columns
        )
        body.append(f"    <tr><th><code>{e(op)}</code></th>{tds}</tr>")
    return "\n".join(
        [
            '<table class="oplib-matrix">',
            f"  <thead><tr><th>op</th>{head}</tr></thead>",
            "  <tbody>",
            *body,
            "  </tbody>",
            "</table>",
        ]
    )


def run(args: argparse.Namespace, out: Output) -> int:
    m = build(None if args.namespace is None else namespace(args.namespace))
    if args.check:
        add_checks(m, out)
    if args.json:
        out.json(m.to_json())
    elif args.format == "markdown":
        out.text(render_markdown(m))
    elif args.format == "html":
        out.text(render_html(m))
    else:
        from rich.text import Text

        out.table(
            ["op", *m.columns],
            [
                [op, *(Text(m.label(op, c), style=_STYLES[m.cells[op][c]]) for c in m.columns)]
                for op in m.cells
            ],
        )
        out.console.print(
            Text("  ").join(Text(c, style=_STYLES[c]) for c in CATEGORIES), no_wrap=True
        )
    return 0
