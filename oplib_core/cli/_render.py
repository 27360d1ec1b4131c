"""Terminal output for ``oplib``: rich tables that fit the terminal, plain text, JSON.

Colour only when the stream is a terminal and ``NO_COLOR`` is unset; the width is the
terminal's (``COLUMNS`` overrides it). Table cells are cut with an ellipsis to fit it
(``--json`` carries the full text); other lines are printed whole. Text that the stream
cannot encode (a lone surrogate in a plugin's string, non-ASCII on an ASCII stream) is
printed escaped instead of ending the command.
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
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        return str(text).encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:  # an encoding Python does not know
        return str(text).encode("ascii", "backslashreplace").decode("ascii")


def fit_widths(natural: list[int], wide: list[bool], room: int) -> list[int]:
    """Column widths summing to ``room`` at most where possible: the widest of the
    ``wide`` columns shrink first (to 12 characters), then the widest of all (to 4)."""
    widths = list(natural)
    everything = [True] * len(widths)
    for floor, shrinkable in ((12, wide), (4, everything)):
        while sum(widths) > room:
            over = [i for i, w in enumerate(widths) if shrinkable[i] and w > floor]
            if not over:
                break
            widths[max(over, key=widths.__getitem__)] -= 1
    return widths


class Output:
    """Where a command writes: ``table``, ``line``, ``text`` and ``json`` on stdout,
    ``note`` on stderr."""

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
        natural = [cell_len(h) for h in headers]
        for row in cells:
            natural = [max(n, c.cell_len) for n, c in zip(natural, row, strict=True)]
        widths = fit_widths(
            natural,
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
        """A line of text (styled on a terminal), never cut: the terminal wraps it."""
        self.console.print(Text(safe(text, self.out), style=style), soft_wrap=True)

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
