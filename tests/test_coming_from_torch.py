"""docs/coming-from-torch.md: every oplib name in its table of names exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import oplib_core as oplib

DOC = Path(__file__).resolve().parent.parent / "docs" / "coming-from-torch.md"


def _table_rows() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("torch", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def _resolve(dotted: str) -> Any:
    """``oplib.a.b``: the object, attributes or submodules; stops at a ``<placeholder>``."""
    parts = dotted.split(".")
    assert parts[0] == "oplib", dotted
    obj: Any = oplib
    for part in parts[1:]:
        if part.startswith("<"):
            break
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            assert isinstance(obj, ModuleType), dotted
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def test_the_table_is_there() -> None:
    rows = _table_rows()
    assert len(rows) >= 30
    torch_names = " ".join(t for t, _ in rows)
    for needed in ("custom_op", "register_fake", "register_autograd", "Library", "opcheck"):
        assert f"torch.library.{needed}" in torch_names


def test_every_oplib_name_resolves() -> None:
    names = [n for _, cell in _table_rows() for n in re.findall(r"`([^`]+)`", cell)]
    assert names
    for name in names:
        assert name.startswith("oplib."), f"{name!r}: write the full oplib name"
        _resolve(name)  # raises (AttributeError, ImportError) for a name that is gone


def test_the_porting_claims() -> None:
    a = np.zeros(3)
    t = oplib.tensor(a)  # no copy, unlike torch.tensor
    a[0] = 5.0
    assert t.numpy()[0] == 5.0
    assert oplib.empty(2, dtype=np.float32).dtype == oplib.empty(2, dtype=oplib.float32).dtype
    assert t.device.type == "cpu"
