"""``oplib profile script.py [args...]``: run a Python script under ``oplib.profile()`` and
print where the time went, per op and backend."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from types import TracebackType
from typing import Any

from ..profiler import profile_script
from ._errors import CliError, UsageError
from ._parsers import leaf
from ._render import Output

__all__ = ["add_parser"]

_SORT = ("total", "self", "count", "name")


def add_parser(sub: Any) -> None:
    p = leaf(sub, "profile", "run a Python script under oplib.profile() and print the table", run)
    p.add_argument("--sort", choices=_SORT, default="total", help="order of the rows")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N rows")
    p.add_argument(
        "--trace", metavar="PATH", help="also write a Chrome trace (Perfetto, chrome://tracing)"
    )
    p.add_argument("script", help="the Python script to run (as __main__)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def _from_script(e: BaseException, script: str) -> TracebackType | None:
    """``e``'s traceback from the script's first frame on (runpy's and ours cut)."""
    path = os.path.abspath(script)
    tb = e.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    return tb or e.__traceback__


def run(args: argparse.Namespace, out: Output) -> int:
    if not os.path.isfile(args.script):
        raise UsageError(f"no script {args.script!r}")
    try:
        prof = profile_script(args.script, args.args)
    except SystemExit as e:  # the script's own failing exit status
        raise CliError(f"{args.script} exited with status {e.code}") from e
    except Exception as e:
        # The script's bug, not oplib's: its traceback as python would print it.
        traceback.print_exception(type(e), e, _from_script(e, args.script), file=sys.stderr)
        raise CliError(f"{args.script} raised {type(e).__name__}; nothing was profiled") from e
    if args.trace:
        prof.export_chrome_trace(args.trace)
    if args.json:
        out.json(
            [
                {
                    "name": r.name,
                    "backend": r.backend,
                    "kind": r.kind,
                    "count": r.count,
                    "total_ns": r.total_ns,
                    "self_ns": r.self_ns,
                }
                for r in prof.key_averages()
            ]
        )
    else:
        out.text(prof.table(sort_by=args.sort, row_limit=args.limit))
    if args.trace:
        out.note(f"Chrome trace written to {args.trace}")
    return 0
