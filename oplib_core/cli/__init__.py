"""``oplib``: what is installed and registered, checked and drawn. Every command takes
``--json``.

A command is a module of this package with ``add_parser(subparsers)``, which adds its
parser and sets ``fn(args, out) -> exit status`` as its default; :data:`COMMANDS` names
the module of each top-level command. Adding one is a module and a line there. Only the
module of the command being run is imported (each parser costs about a millisecond).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ._errors import did_you_mean

__all__ = ["COMMANDS", "build_parser", "main"]

_DESCRIPTION = "What oplib has installed and registered, checked and drawn."

#: Top-level command → the module of this package that builds it.
COMMANDS: dict[str, str] = {
    "backends": "_backends",
    "plugins": "_plugins",
    "ops": "_ops",
    "check": "_check",
    "profile": "_profile",
    "completion": "_completion",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (``oplib: error: ...``) and exit status 2, with
    did-you-mean for a command or choice and for an unknown option of the command given."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        hint = did_you_mean(str(value), choices)
        listed = ", ".join(choices)
        if isinstance(action, argparse._SubParsersAction):
            message = f"no command {value!r} (choose from {listed}){hint}"
        else:
            option = "/".join(action.option_strings) or action.dest
            message = f"{option}: invalid choice {value!r} (choose from {listed}){hint}"
        raise argparse.ArgumentError(None, message)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        ns, rest = super().parse_known_args(args, namespace)
        if not hasattr(ns, _PARSER):  # the innermost command's parser: its options
            setattr(ns, _PARSER, self)
        return ns, rest

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        ns: argparse.Namespace
        ns, rest = self.parse_known_args(args, namespace)
        innermost: _Parser = vars(ns).pop(_PARSER, self)
        if rest:
            options = [o for o in innermost._option_string_actions if o.startswith("--")]
            hint = did_you_mean(rest[0], options) if rest[0].startswith("-") else ""
            innermost.error(f"unrecognized arguments: {' '.join(rest)}{hint}")
        return ns


#: The attribute of the parsed namespace naming the parser of the innermost command.
_PARSER = "_oplib_parser"


def _help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace, Any], int]:
    """A command's ``fn`` that prints ``parser``'s help: ``oplib`` alone, ``oplib ops``
    without a subcommand (as ``pip`` alone: exit status 0)."""

    def show(args: argparse.Namespace, out: Any) -> int:
        out.text(parser.format_help().rstrip("\n"))
        return 0

    return show


def _version() -> str:
    from .._native import fast_call_build
    from .._version import __version__
    from ._versions import installed

    lines = [f"oplib-core {__version__} (native fast call: {fast_call_build()})"]
    lines += [f"{name} {version}" for name, version in installed() if name != "oplib-core"]
    return "\n".join(lines)


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the installed versions")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_version())
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree, or (``only``) just that top-level command."""
    parser = _Parser(prog="oplib", description=_DESCRIPTION)
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser.set_defaults(fn=_help(parser))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        if only is None or only == name:
            importlib.import_module(f"{__name__}.{module}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``oplib`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    except BrokenPipeError:  # ``oplib --version | head -1``
        from ._run import reader_left  # (it imports rich, which --version does not need)

        return reader_left()
    from ._render import Output
    from ._run import run

    return run(args, Output())


if __name__ == "__main__":
    raise SystemExit(main())
