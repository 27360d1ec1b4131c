"""``python -m oplib_core``: the ``oplib`` command; ``--include`` prints the directory of
oplib's C header (as ``oplib.get_include()``), for compiler flags."""

from __future__ import annotations

import sys


def _main(argv: list[str]) -> int:
    if argv == ["--include"]:
        from ._native._api import get_include

        print(get_include())
        return 0
    from .cli import main

    return main(argv)


raise SystemExit(_main(sys.argv[1:]))
