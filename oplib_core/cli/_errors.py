"""The CLI's errors: one line on stderr and an exit status (2 for usage and unknown
names, 1 for failures), with did-you-mean suggestions for names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from ..errors import AmbiguousOperatorError, UnknownOperatorError

__all__ = ["CliError", "UsageError", "did_you_mean", "no_operator", "unknown_name"]


class CliError(Exception):
    """Ends the command with ``message`` on stderr and exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    """A bad command line or an unknown name: exit status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


def did_you_mean(given: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the close matches of ``given``, else ``""``."""
    close = difflib.get_close_matches(given, sorted(set(choices)), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def unknown_name(kind: str, given: str, choices: Iterable[str], listed_by: str) -> UsageError:
    """``no <kind> 'given' (see 'listed_by'); did you mean ...?``"""
    return UsageError(f"no {kind} {given!r} (see {listed_by!r}){did_you_mean(given, choices)}")


def no_operator(e: UnknownOperatorError | AmbiguousOperatorError, given: str) -> UsageError:
    if isinstance(e, AmbiguousOperatorError):
        return UsageError(str(e))
    hint = ""
    if e.suggestions:
        hint = "; did you mean " + " or ".join(repr(s) for s in e.suggestions) + "?"
    return UsageError(f"no operator {given!r} (see 'oplib ops list'){hint}")
