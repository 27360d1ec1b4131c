"""Terminal output for ``oplib``: rich tables, plain text, JSON.

A table cell is never cut: on a terminal a long cell folds onto more lines within its
column (the long free-text columns give up width first); when stdout is not a terminal
there is no width limit at all, so each row is one line (``oplib plugins list | grep
name`` finds the whole row). ``COLUMNS`` sets the width either way. Colour only when
the stream is a terminal (``FORCE_COLOR`` forces it, as rich does); ``NO_COLOR`` turns
off every escape code: colour, bold, and the progress bar's cursor movement. Paths in
text are shortened as pytest shortens them: relative to the current directory when
under it, ``.../`` plus the path inside site-packages when installed there; ``--json``
keeps them absolute. Text that the stream cannot encode (a lone surrogate in a plugin's
string, non-ASCII on an ASCII stream) is printed escaped instead of ending the command.
"""

from __future__ import annotations

import functools
import json
import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from typing import IO, Any, Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["STATUS_STYLES", "Output", "dist_label", "safe", "short_paths"]

#: Styles of the words the CLI colours (check results, availability).
STATUS_STYLES = {
    "PASS": "green",
    "FAIL": "bold red",
    "SKIP": "yellow",
    "yes": "green",
    "loaded": "green",
    "failed": "bold red",
    "blocked": "yellow",
    "incompatible": "yellow",
    "waiting": "yellow",
}


def safe(text: object, stream: IO[str] | None = None) -> str:
    """``text`` as ``stream`` (default stdout) can write it: what its encoding cannot
    hold (lone surrogates included) becomes a backslash escape."""
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        return str(text).encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:  # an encoding Python does not know
        return str(text).encode("ascii", "backslashreplace").decode("ascii")


#: A table whose columns would be narrower than this (or than their own cells) on the
#: terminal is printed as records instead (see :meth:`Output.table`).
NARROWEST = 8

#: Where an unlimited width is asked for (stdout is no terminal): wider than any row.
UNLIMITED = 1_000_000


@functools.cache
def _path_roots() -> tuple[tuple[str, str], ...]:
    """``(directory + sep, replacement)``, longest first: site-packages directories become
    ``.../``, the current directory nothing (pytest's ``bestrelpath``, without ``..``)."""
    roots: dict[str, str] = {}
    cwd = os.getcwd()
    if os.path.dirname(cwd) != cwd:  # not "/": every path would lose its root
        roots[cwd] = ""
    packages = [*site.getsitepackages(), site.getusersitepackages()]
    packages += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    for d in packages:
        roots[os.path.normpath(d)] = "..." + os.sep
    ordered = sorted(roots.items(), key=lambda kv: -len(kv[0]))
    return tuple((d.rstrip(os.sep) + os.sep, short) for d, short in ordered)


def short_paths(text: str) -> str:
    """``text`` with the absolute paths under the current directory made relative to it
    and those under a site-packages directory shown as ``.../pkg/mod.py`` (as pytest
    shows its own files)."""
    if os.sep not in text:
        return text
    for root, short in _path_roots():
        text = text.replace(root, short)
    return text


def fit_widths(natural: list[int], wide: list[bool], room: int) -> list[int]:
    """Column widths summing to ``room`` at most where possible: the widest of the
    ``wide`` columns shrink first (to 12 characters), then the widest of all (to 4, then
    to 1). A cell wider than its column folds onto more lines; it is never cut."""
    widths = list(natural)
    everything = [True] * len(widths)
    for floor, shrinkable in ((12, wide), (4, everything), (1, everything)):
        while sum(widths) > room:
            over = [i for i, w in enumerate(widths) if shrinkable[i] and w > floor]
            if not over:
                break
            widths[max(over, key=widths.__getitem__)] -= 1
    return widths


def _width(stream: IO[str]) -> int | None:
    """``COLUMNS`` if set, else None on a terminal (rich asks it) and no limit otherwise."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    return None if isatty is not None and isatty() else UNLIMITED


class Output:
    """Where a command writes: ``table``, ``line``, ``text`` and ``json`` on stdout,
    ``note`` on stderr."""

    def __init__(self) -> None:
        self.out = sys.stdout
        self.err = sys.stderr
        #: NO_COLOR (https://no-color.org) is honoured fully: no colour, no bold or dim, no
        #: progress bar (it moves the cursor)
        self.plain = bool(os.environ.get("NO_COLOR"))
        colors: Literal["auto"] | None = None if self.plain else "auto"
        self.console = Console(
            file=self.out,
            highlight=False,
            markup=False,
            emoji=False,
            color_system=colors,
            width=_width(self.out),
        )
        self.err_console = Console(
            file=self.err, highlight=False, markup=False, emoji=False, color_system=colors
        )

    @property
    def live_progress(self) -> bool:
        """Whether a progress bar may redraw itself on stderr: a terminal, no NO_COLOR."""
        return self.err_console.is_terminal and not self.plain

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        wide: Sequence[str] = (),
    ) -> None:
        """A table as wide as its cells, or the terminal's width where they would be
        wider: then the columns named in ``wide`` (long free text) give up width first,
        then the widest ones, and a cell too long for its column folds onto more lines
        (at spaces where it can). Where even that would leave a column narrower than
        :data:`NARROWEST` (or its own width), each row is printed as a record instead: its
        first cell, then a ``header: value`` line per column. Nothing is ever cut."""
        cells = [[self.cell(c) for c in row] for row in rows]
        natural = [cell_len(h) for h in headers]
        for row in cells:
            natural = [max(n, c.cell_len) for n, c in zip(natural, row, strict=True)]
        widths = fit_widths(
            natural,
            [h in wide for h in headers],
            self.console.width - 3 * (len(headers) - 1),  # padding and rule
        )
        if any(w < min(n, NARROWEST) for w, n in zip(widths, natural, strict=True)):
            self._records(headers, cells)
            return
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
        for h, w in zip(headers, widths, strict=True):
            t.add_column(h, overflow="fold", width=w)
        for row in cells:
            t.add_row(*row)
        self.console.print(t)

    def _records(self, headers: Sequence[str], cells: list[list[Text]]) -> None:
        """A narrow terminal's table: per row, the first cell, then its other cells under
        it as ``header: value`` (the value folds within the terminal's width)."""
        for row in cells:
            first = row[0].copy()
            first.stylize("bold")
            self.console.print(first, overflow="fold")
            t = Table.grid(padding=(0, 1))
            t.add_column(width=1)
            t.add_column(no_wrap=True, style="dim")
            t.add_column(overflow="fold")
            for h, c in zip(headers[1:], row[1:], strict=True):
                t.add_row("", f"{h}:", c)
            self.console.print(t)

    def cell(self, value: object) -> Text:
        if isinstance(value, Text):
            return value
        s = short_paths(safe(value, self.out)).replace("\n", " ")  # a row is one line
        return Text(s, style=STATUS_STYLES.get(s, ""))

    def line(self, text: object = "", style: str = "") -> None:
        """A line of text (styled on a terminal), never cut: the terminal wraps it."""
        line = Text(short_paths(safe(text, self.out)), style=style)
        self.console.print(line, soft_wrap=True)

    def text(self, text: object) -> None:
        """Text printed as it is (wrapped by the terminal, never cut)."""
        self.out.write(short_paths(safe(text, self.out)) + "\n")

    def json(self, data: Any) -> None:
        """``data`` as JSON: full text, absolute paths."""
        self.out.write(json.dumps(data, indent=2) + "\n")

    def note(self, text: object) -> None:
        """A line on stderr (not part of the output a script reads)."""
        self.err_console.print(Text(short_paths(safe(text, self.err))), soft_wrap=True)


def dist_label(name: object, version: object) -> str:
    """``"oplib-cpu 0.1.0"``; ``"-"`` for a registration made outside any distribution."""
    if not name:
        return "-"
    return f"{name} {version}" if version else str(name)
