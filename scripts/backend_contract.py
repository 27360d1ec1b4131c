"""Rewrite the contract tables of docs/writing-a-backend.md from the code (between the
``<!-- contract: start -->`` and ``<!-- contract: end -->`` markers).

    .venv/bin/python scripts/backend_contract.py

``tests/test_backend_contract.py`` fails while the page differs from what this writes.
"""

from __future__ import annotations

from pathlib import Path

from oplib_core._contract import markdown

START, END = "<!-- contract: start -->", "<!-- contract: end -->"
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "writing-a-backend.md"


def main() -> None:
    text = GUIDE.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    GUIDE.write_text(f"{head}{START}\n\n{markdown()}\n{END}{tail}")


if __name__ == "__main__":
    main()
