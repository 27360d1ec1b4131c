"""Building blocks of the command tree: a command group and a leaf command that takes
``--json`` and runs ``fn(args, out)``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ._render import Output

__all__ = ["group", "leaf"]

Command = Callable[[argparse.Namespace, Output], int]


def group(sub: Any, name: str, help: str) -> Any:
    """``oplib <name> ...``: a command with subcommands; returns their subparsers. Given
    alone, it prints its help."""
    from . import _help  # the package's parser class and help command (imported first)

    p = sub.add_parser(name, help=help)
    p.set_defaults(fn=_help(p))
    return p.add_subparsers(dest="sub", metavar="SUBCOMMAND")


def leaf(sub: Any, name: str, help: str, fn: Command) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("--json", action="store_true", help="machine-readable output, full text")
    p.set_defaults(fn=fn)
    return p
