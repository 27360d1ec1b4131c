"""``oplib plugins list``: every plugin and its status. A plugin that interrupts loading
(a ``KeyboardInterrupt``) does not hide the others: what was known is printed, then the
interruption is reported."""

from __future__ import annotations

import argparse
from types import TracebackType
from typing import Any

from .. import _introspect as introspect
from ..plugins import HOST
from ._errors import CliError
from ._parsers import group, leaf
from ._render import Output, dist_label

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    plugins = group(sub, "plugins", "installed plugins")
    leaf(plugins, "list", "list plugins and their status", plugins_list)


def _culprit(tb: TracebackType | None) -> str | None:
    """The plugin whose module raised, from the innermost frame in a plugin's file."""
    modules = {r.module: r.name for r in HOST.records.values() if r.module}
    culprit = None
    while tb is not None:
        name = modules.get(tb.tb_frame.f_code.co_filename)
        if name is not None:
            culprit = name
        tb = tb.tb_next
    return culprit


def plugins_list(args: argparse.Namespace, out: Output) -> int:
    interrupted: KeyboardInterrupt | None = None
    try:
        rows = introspect.plugin_rows()
    except KeyboardInterrupt as e:  # print what loading had recorded, then say so
        interrupted = e
        rows = [r.to_json() for r in list(HOST.records.values())]
    if args.json:
        out.json(rows)
    else:
        out.table(
            ["plugin", "distribution", "status", "hooks", "ms", "module"],
            [
                [
                    r["name"],
                    dist_label(r["distribution"], r["version"]),
                    r["status"] + (f": {r['error']}" if r["error"] else ""),
                    ", ".join(h.removeprefix("oplib_") for h in r["hooks"]) or "-",
                    f"{r['load_ms']:.1f}",
                    r["module"] or "-",
                ]
                for r in rows
            ],
            wide=("status", "module"),
        )
        if not HOST.autoload:
            out.line("OPLIB_PLUGINS_AUTOLOAD=0: entry points were not loaded")
        if HOST.disabled:
            out.line(f"OPLIB_DISABLE_PLUGINS={','.join(sorted(HOST.disabled))}")
    if interrupted is not None:
        who = _culprit(interrupted.__traceback__)
        by = f" (raised in plugin {who!r})" if who else ""
        raise CliError(
            f"loading the plugins was interrupted by KeyboardInterrupt{by}; "
            "the list shows what was recorded before"
        )
    return 0
