"""``python -m oplib_core.cli``: the ``oplib`` command."""

from __future__ import annotations

from . import main

raise SystemExit(main())
