"""``oplib plugins list``: every plugin and its status. A plugin that interrupts loading
(a ``KeyboardInterrupt``) is named in one line instead of a traceback; loading is
all-or-nothing, so what was recorded before it (nothing loaded) is printed first."""

from __future__ import annotations

import argparse
from typing import Any

from .. import _introspect as introspect
from .._plugin_host import HOST, INTERRUPTED_IN
from ._errors import CliError
from ._parsers import group, leaf
from ._render import Output, dist_label

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    plugins = group(sub, "plugins", "installed plugins")
    leaf(plugins, "list", "list plugins and their status", plugins_list)


def _culprit(e: KeyboardInterrupt) -> str | None:
    """The plugin whose code raised, from the note loading adds (the plugin's records are
    gone: an interrupted load is undone)."""
    notes: list[str] = getattr(e, "__notes__", [])
    for note in notes:
        if note.startswith(INTERRUPTED_IN):
            return note.removeprefix(INTERRUPTED_IN).strip()
    return None


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
                    r["status"]
                    + (f": {r['error']}" if r["error"] else "")
                    + "".join(f"; overrides {o}" for o in r.get("overrides") or ())
                    + "".join(f"; waiting for op {w}" for w in r.get("waiting") or ()),
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
        who = _culprit(interrupted)
        by = f" (raised in plugin {who})" if who else ""
        raise CliError(
            f"loading the plugins was interrupted by KeyboardInterrupt{by} and undone; "
            "nothing was loaded (OPLIB_DISABLE_PLUGINS=name skips a plugin)"
        )
    return 0
