"""``oplib backends list``."""

from __future__ import annotations

import argparse
from typing import Any

from .. import _introspect as introspect
from ._names import INSTALL_A_BACKEND
from ._parsers import group, leaf
from ._render import Output, dist_label

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = leaf(
        group(sub, "backends", "installed device backends"), "list", "list backends", backends_list
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="also ask backends whose library is not imported yet (imports it: JAX takes ~0.5 s)",
    )


def _available(r: dict[str, Any]) -> str:
    if r["available"] is None:
        return "not probed"
    return "yes" if r["available"] else f"no: {r['reason']}"


def backends_list(args: argparse.Namespace, out: Output) -> int:
    rows = introspect.backend_rows(probe=args.probe)
    if args.json:
        out.json(rows)
        return 0
    if not rows:
        out.line(f"no backends installed ({INSTALL_A_BACKEND})")
        return 0
    out.table(
        ["backend", "key", "distribution", "available", "devices", "ops"],
        [
            [
                r["name"],
                r["key"],
                dist_label(r["distribution"], r["version"]),
                _available(r),
                "?" if r["device_count"] is None else r["device_count"],
                r["ops"],
            ]
            for r in rows
        ],
        wide=("available",),
    )
    for p in introspect.plugin_rows():
        if p["status"] == "failed":
            out.line(
                f"plugin {p['name']!r} ({dist_label(p['distribution'], p['version'])}) "
                f"failed to load: {p['error']}",
                style="red",
            )
    return 0
