"""The CLI's errors: one line on stderr and an exit status (2 for usage and unknown
names, 1 for failures), with did-you-mean suggestions for names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

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


def did_you_mean(given: str, choices: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the close matches of ``given``, else ``""``. A
    ``prefix`` every choice shares is left out of the comparison (it would make every name
    look close) and kept in the suggestions."""
    names = sorted({c.removeprefix(prefix) for c in choices})
    close = difflib.get_close_matches(given.removeprefix(prefix), names, n=3, cutoff=0.6)
    return _suggest([prefix + c for c in close])


def _suggest(names: Sequence[str]) -> str:
    return "; did you mean " + " or ".join(map(repr, names)) + "?" if names else ""


def unknown_name(
    kind: str, given: str, choices: Iterable[str], listed_by: str, prefix: str = ""
) -> UsageError:
    """``no <kind> 'given' (see 'listed_by'); did you mean ...?``"""
    hint = did_you_mean(given, choices, prefix)
    return UsageError(f"no {kind} {given!r} (see {listed_by!r}){hint}")


def no_operator(e: UnknownOperatorError | AmbiguousOperatorError, given: str) -> UsageError:
    if isinstance(e, AmbiguousOperatorError):
        return UsageError(str(e))
    return UsageError(f"no operator {given!r} (see 'oplib ops list'){_suggest(e.suggestions)}")
