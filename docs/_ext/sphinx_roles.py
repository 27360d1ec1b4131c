"""A griffe extension for the API reference (mkdocs.yml): the docstrings' Sphinx roles
(``:func:`~oplib_core.library.define```) become Markdown code (`` `define` ``), as Sphinx
would show them; a ``~`` keeps the last name only, ``text <target>`` keeps the text. A
paragraph ending in ``::`` before its literal block ends in ``:``, as Sphinx shows it."""

from __future__ import annotations

import re
from typing import Any

import griffe

_LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const):`([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    target = match.group(1)
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", target)
    if titled:
        return f"`{titled.group(1)}`"
    if target.startswith("~"):
        target = target[1:].rpartition(".")[2]
    return f"`{target}`"


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx cross-reference role written as inline code, and the
    ``::`` that introduces a literal block written ``:``."""
    return _LITERAL.sub(":", _ROLE.sub(_plain, text))


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
