"""``oplib check --backend NAME --contract``: what a backend lacks of the backend contract
(``docs/writing-a-backend.md``), before any op runs on it. Exit status 1 when something a
core feature needs is missing."""

from __future__ import annotations

import argparse

from .._contract import check_backend
from ._errors import UsageError
from ._names import backend
from ._render import Output

__all__ = ["run_contract"]


def run_contract(args: argparse.Namespace, out: Output) -> int:
    if not args.backend:
        raise UsageError("--contract checks the backends named with --backend NAME")
    if args.qualname:
        raise UsageError("--contract checks a backend, not ops: drop the op names")
    report = {}
    for given in args.backend:
        b = backend(given)
        report[b.name] = [g.to_json() for g in check_backend(b)]
    if args.json:
        out.json(report)
    else:
        for name, gaps in report.items():
            required = [g for g in gaps if g["required"]]
            optional = [g for g in gaps if not g["required"]]
            if required:
                out.line(f"backend {name!r} lacks what the core needs:", style="bold red")
                out.table(
                    ["kind", "missing", "needed by"],
                    [[g["kind"], g["item"], g["why"]] for g in required],
                    wide=("needed by",),
                )
            else:
                out.line(f"backend {name!r} meets the backend contract", style="bold")
            if optional:
                items = ", ".join(g["item"].removeprefix("oplib::") for g in optional)
                out.line(f"  {len(optional)} other core op(s) have no kernel there: {items}")
    return 1 if any(g["required"] for gaps in report.values() for g in gaps) else 0
