"""``oplib completion bash|zsh|fish|tcsh``: the shell's completion script for ``oplib``,
generated from the command tree by shtab (see ``docs/cli.md`` for where to put it)."""

from __future__ import annotations

import argparse
from typing import Any

import shtab

from . import build_parser
from ._render import Output

__all__ = ["SHELLS", "add_parser", "script"]

#: The shells a script is generated for.
SHELLS = ("bash", "zsh", "fish", "tcsh")


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "completion",
        help="print the shell completion script (eval it, or save it where the shell looks)",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(fn=run)


def script(shell: str) -> str:
    """The completion script of the whole ``oplib`` command tree for ``shell``."""
    return str(shtab.complete(build_parser(), shell=shell))


def run(args: argparse.Namespace, out: Output) -> int:
    out.out.write(script(args.shell))
    return 0
