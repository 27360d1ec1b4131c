"""``oplib profile script.py [args...]``: run a Python script under ``oplib.profile()`` and
print where the time went, per op and backend.

The exit status is the script's own (``sys.exit(3)``: 3; an exception: 1, after its
traceback), and the profile of what ran is printed either way. With ``--json`` the JSON is
alone on stdout: what the script prints goes to stderr meanwhile (file descriptor 1
included, so a subprocess's output too). ``--output FILE`` writes the table (or JSON) to
FILE and leaves stdout to the script."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from ..profiler import profile
from ._errors import UsageError
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
    p.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the table (or --json) to FILE; stdout stays the script's",
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


@contextlib.contextmanager
def _as_main(script: str, argv: Sequence[str]) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as ``python script.py argv...`` sets them."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """What is written to stdout meanwhile goes to stderr: ``sys.stdout`` and, where it
    is a real file, file descriptor 1 (C code and subprocesses write there)."""
    sys.stdout.flush()
    try:
        fds: tuple[int, int] | None = (sys.stdout.fileno(), sys.stderr.fileno())
    except (AttributeError, OSError, io.UnsupportedOperation):  # captured, in-memory
        fds = None
    saved = None
    if fds is not None:
        sys.stderr.flush()
        saved = os.dup(fds[0])
        os.dup2(fds[1], fds[0])
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if fds is not None and saved is not None:
            os.dup2(saved, fds[0])
            os.close(saved)


def _exit_status(e: SystemExit) -> int:
    """The process's exit status for ``e``, as the interpreter would make it (a message
    is printed on stderr and gives 1)."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


def _report(prof: profile, args: argparse.Namespace) -> str:
    if args.json:
        rows = [
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
        return json.dumps(rows, indent=2)
    return prof.table(sort_by=args.sort, row_limit=args.limit)


def run(args: argparse.Namespace, out: Output) -> int:
    if not os.path.isfile(args.script):
        raise UsageError(f"no script {args.script!r}")
    prof = profile()
    status = 0
    raised: BaseException | None = None
    quiet = args.json and not args.output  # the JSON alone on stdout
    with (
        _as_main(args.script, args.args),
        _stdout_to_stderr() if quiet else contextlib.nullcontext(),
    ):
        try:
            with prof:
                runpy.run_path(args.script, run_name="__main__")
        except SystemExit as e:
            status = _exit_status(e)
        except Exception as e:  # the script's bug, not oplib's: its traceback as python prints it
            traceback.print_exception(type(e), e, _from_script(e, args.script), file=sys.stderr)
            status, raised = 1, e
    if args.trace:
        prof.export_chrome_trace(args.trace)
    report = _report(prof, args)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(report + "\n")
        out.note(f"profile written to {args.output}")
    elif args.json:
        out.out.write(report + "\n")
    else:
        out.text(report)
    if args.trace:
        out.note(f"Chrome trace written to {args.trace}")
    if raised is not None:
        out.note(f"oplib: {args.script} raised {type(raised).__name__} (exit status 1); the "
                 "profile shows what ran before")  # fmt: skip
    elif status:
        out.note(f"oplib: {args.script} exited with status {status}")
    return status
