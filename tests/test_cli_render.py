"""What ``oplib`` prints, at a fixed terminal width, compared with golden files in
``tests/cli_golden/``; colour only on a terminal and never with ``NO_COLOR``; cells that
do not fit the terminal fold (records on a narrow one), never cut.

After a deliberate change of the output, regenerate the golden files with
``OPLIB_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_cli_render.py`` and review
the diff.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core import plugins
from oplib_core.cli import main
from oplib_core.cli._render import fit_widths, short_paths
from oplib_core.testing import SampleInput

from helpers import FakeTTY

GOLDEN = Path(__file__).parent / "cli_golden"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NS = "cligold"  # fixed: it appears in the golden output


@pytest.fixture
def gold_ops() -> Iterator[None]:
    """Namespace ``cligold``: ``neg`` (cpu kernel, fake kernel, samples), ``broken``
    (its fake kernel gives the wrong shape), ``bare`` (no kernel), ``later`` (a kernel
    waiting for the backend ``gpux``), ``both`` (a ``default`` kernel)."""
    with oplib.library._scoped_library(NS, "FRAGMENT") as lib:
        lib.define("neg(Tensor x) -> Tensor")
        lib.impl("neg", np.negative, "CPU")
        lib._register_fake("neg", lambda x: x.new_empty(x.shape))
        lib.define("broken(Tensor x) -> Tensor")
        lib.impl("broken", np.negative, "CPU")
        lib._register_fake("broken", lambda x: x.new_empty((1,)))
        lib.define("bare(Tensor x) -> Tensor")
        lib.define("later(Tensor x) -> Tensor")
        lib.impl("later", np.negative, "gpux")
        lib.define("both(Tensor x) -> Tensor")
        lib.impl("both", lambda x: x, "CompositeExplicitAutograd")

        class Samples:
            @oplib.hookimpl
            def oplib_sample_inputs(self, op, device):
                if op.name() in (f"{NS}::neg", f"{NS}::broken"):
                    return [SampleInput((oplib.ones(2, 3, device=device),), name="ones")]
                return None

        plugins.register(Samples(), name="cligold-samples")
        try:
            yield
        finally:
            plugins.unregister("cligold-samples")


def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int,
        *argv: str) -> tuple[int, str]:  # fmt: skip
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(list(argv))
    return code, capsys.readouterr().out


def golden(name: str, text: str) -> None:
    text = re.sub(r"in \d+\.\d+s", "in X.Xs", text)  # timings vary
    text = text.replace(short_paths(__file__), "<tests>/test_cli_render.py")
    text = re.sub(r"(<tests>/\w+\.py):\d+", r"\1:N", text)  # line numbers of this file
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("OPLIB_REGEN_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with OPLIB_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


CASES = {
    "ops_list": (100, "ops", "list", "-n", NS),
    "ops_list_narrow": (30, "ops", "list", "-n", NS),
    "matrix_cpu_meta": (100, "ops", "matrix", "-n", NS),
    "check_summary": (100, "check", f"{NS}::neg", f"{NS}::broken", "-b", "cpu"),
    "check_verbose": (200, "check", f"{NS}::neg", f"{NS}::broken", "-b", "cpu", "-v"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_output(capsys, monkeypatch, gold_ops, case):
    columns, *argv = CASES[case]
    monkeypatch.setenv("NO_COLOR", "1")
    _, out = cli(capsys, monkeypatch, columns, *argv)
    if case.startswith("matrix"):  # the installed backends vary: keep cpu and meta
        out = _keep_columns(out, ["op", "cpu", "meta", "gpux"])
    golden(case, out)
    table = out.split("\n\n")[0]  # the table fits; the text after it is printed whole
    assert max(len(line) for line in table.splitlines()) <= columns


def _keep_columns(table: str, names: list[str]) -> str:
    lines = table.splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    spans = list(zip(starts, [*starts[1:], None], strict=True))
    keep = [(a, b) for a, b in spans if header[a:b].strip() in names]
    out = []
    for line in lines:
        if set(line.strip()) <= {"─"}:
            out.append("─" * 10)
        elif line.startswith(NS) or line is header:
            out.append("".join(line[a:b].ljust((b or a + 12) - a) for a, b in keep).rstrip())
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_a_narrow_terminal_gets_records_and_nothing_is_cut(capsys, monkeypatch, gold_ops):
    _, out = cli(capsys, monkeypatch, 30, "ops", "list", "-n", NS)
    assert "…" not in out
    assert all(len(line) <= 30 for line in out.splitlines())
    assert "cligold::broken\n  kernels:  cpu" in out
    assert "CompositeExplicitA" in out and "utograd" in out  # folded, not cut


def test_colour_on_a_terminal_only_and_never_with_no_color(capsys, monkeypatch, gold_ops):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert main(["check", f"{NS}::neg", "-b", "cpu"]) == 0
    coloured = tty.getvalue()
    assert ANSI.search(coloured)
    tty.seek(0)
    tty.truncate()
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["check", f"{NS}::neg", "-b", "cpu"]) == 0
    plain = tty.getvalue()
    assert not ANSI.search(plain) and "PASS" in plain
    assert ANSI.sub("", coloured) == plain
    monkeypatch.undo()
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["check", f"{NS}::neg", "-b", "cpu"]) == 0
    assert not ANSI.search(capsys.readouterr().out)  # not a terminal


@given(
    st.lists(st.integers(1, 120), min_size=1, max_size=8).flatmap(
        lambda ws: st.tuples(st.just(ws), st.lists(st.booleans(), min_size=len(ws),
                                                   max_size=len(ws)), st.integers(0, 300))
    )
)  # fmt: skip
def test_fit_widths(args):
    natural, wide, room = args
    widths = fit_widths(natural, wide, room)
    assert all(1 <= w <= n for w, n in zip(widths, natural, strict=True))
    if sum(natural) <= room:
        assert widths == natural  # nothing cut when it fits
    elif sum(widths) > room:  # could not fit: every column is at its floor
        assert all(w == 1 for w in widths)
    narrow_cut = any(w < n for w, n, k in zip(widths, natural, wide, strict=True) if not k)
    if narrow_cut:  # a narrow column is cut only once the wide ones are at their floor
        assert all(w <= 12 for w, k in zip(widths, wide, strict=True) if k)
