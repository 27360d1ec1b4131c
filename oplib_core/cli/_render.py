"""Terminal output for ``oplib``: rich tables that fit the terminal, plain text, JSON.

Colour only when the stream is a terminal and ``NO_COLOR`` is unset (rich's own rules);
the width is the terminal's (``COLUMNS`` overrides it). Cells are truncated with an
ellipsis; ``--json`` carries the full text. Text that the stream cannot encode (a lone
surrogate in a plugin's string, non-ASCII on an ASCII stream) is printed escaped instead
of ending the command.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Any, Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["STATUS_STYLES", "Output", "dist_label", "safe"]

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
    s = str(text)
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        s.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        if encoding.lower().replace("-", "") in ("utf8", "utf8sig"):
            encoding = "utf-8"
        try:
            return s.encode(encoding, "backslashreplace").decode(encoding)
        except LookupError:
            return s.encode("ascii", "backslashreplace").decode("ascii")
    return s


def fit_widths(natural: list[int], wide: list[bool], room: int) -> list[int]:
    """Column widths summing to ``room`` at most: the ``wide`` columns shrink first (to 12
    characters at least), then the widest columns, down to 4 characters each."""
    widths = list(natural)
    for floor, only_wide in ((12, True), (4, False)):
        while sum(widths) > room:
            candidates = [
                i for i, w in enumerate(widths) if w > floor and (wide[i] or not only_wide)
            ]
            if not candidates:
                break
            i = max(candidates, key=lambda j: widths[j])
            others = sorted((widths[j] for j in candidates if j != i), reverse=True)
            target = max(floor, others[0] if others else floor, widths[i] - (sum(widths) - room))
            widths[i] = target if target < widths[i] else widths[i] - 1
    return widths


class Output:
    """Where a command writes: ``table``, ``line`` and ``json`` on stdout, ``note`` and
    ``error`` on stderr."""

    def __init__(self) -> None:
        self.out = sys.stdout
        self.err = sys.stderr
        # NO_COLOR (https://no-color.org): no colour; no bold or dim either
        colors: Literal["auto"] | None = None if os.environ.get("NO_COLOR") else "auto"
        self.console = Console(
            file=self.out, highlight=False, markup=False, emoji=False, color_system=colors
        )
        self.err_console = Console(
            file=self.err, highlight=False, markup=False, emoji=False, color_system=colors
        )

    @property
    def width(self) -> int:
        return self.console.width

    def table(
        self,
        headers: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        wide: Sequence[str] = (),
    ) -> None:
        """A table no wider than the terminal: when it would be, the columns named in
        ``wide`` (long free text) give up width first, then the widest ones; cut cells end
        in an ellipsis."""
        cells = [[self.cell(c) for c in row] for row in rows]
        widths = fit_widths(
            [
                max([cell_len(h), *(c.cell_len for c in col)])
                for h, col in zip(
                    headers, zip(*cells, strict=True) if cells else [()] * len(headers), strict=True
                )
            ],
            [h in wide for h in headers],
            self.console.width - 3 * (len(headers) - 1),  # padding and rule
        )
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
        for h, w in zip(headers, widths, strict=True):
            t.add_column(h, no_wrap=True, overflow="ellipsis", width=w)
        for row in cells:
            t.add_row(*row)
        self.console.print(t)

    def cell(self, value: object) -> Text:
        if isinstance(value, Text):
            return value
        s = safe(value, self.out)
        return Text(s, style=STATUS_STYLES.get(s, ""))

    def line(self, text: object = "", style: str = "") -> None:
        """One line of text, cut to the terminal width (with an ellipsis) when too long."""
        self.console.print(
            Text(safe(text, self.out), style=style),
            overflow="ellipsis",
            no_wrap=True,
            crop=True,
        )

    def text(self, text: object) -> None:
        """Text printed as it is (wrapped by the terminal, never cut)."""
        self.out.write(safe(text, self.out) + "\n")

    def json(self, data: Any) -> None:
        self.out.write(json.dumps(data, indent=2) + "\n")

    def note(self, text: object) -> None:
        """A line on stderr (not part of the output a script reads)."""
        self.err_console.print(Text(safe(text, self.err)), soft_wrap=True)


def dist_label(name: object, version: object) -> str:
    """``"oplib-cpu 0.1.0"``; ``"-"`` for a registration made outside any distribution."""
    if not name:
        return "-"
    return f"{name} {version}" if version else str(name)
