"""Running a parsed command: errors become one line on stderr and an exit status; the
traceback only with ``--debug``."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from typing import TextIO

from ..errors import OplibError
from ._errors import CliError
from ._render import Output, safe

__all__ = ["run"]

#: The exit status of a run that Ctrl-C (a KeyboardInterrupt) ended, as shells use.
INTERRUPTED = 130


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning (a plugin that failed to load...) as one line, like the errors."""
    text = str(message).removeprefix("oplib: ")
    print(safe(f"oplib: {category.__name__}: {text}", sys.stderr), file=sys.stderr)


def reader_left() -> int:
    """``oplib ops list | head``: the reader of stdout left; say nothing more (and let the
    interpreter's last flush at exit write nowhere). The exit status is 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def run(args: argparse.Namespace, out: Output) -> int:
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        return _run(args, out)


def _run(args: argparse.Namespace, out: Output) -> int:
    try:
        return int(args.fn(args, out))
    except BrokenPipeError:
        return reader_left()
    except (CliError, OplibError, KeyboardInterrupt) as e:
        if args.debug:
            traceback.print_exc()
        if isinstance(e, CliError):
            message, code = str(e), e.code
        elif isinstance(e, KeyboardInterrupt):
            message, code = "interrupted", INTERRUPTED
        else:  # a user's or a plugin's mistake: one line, not a traceback
            message, code = f"{type(e).__name__}: {e}", 1
        one_line = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(safe(f"oplib: {one_line}", sys.stderr), file=sys.stderr)
        return code
