"""``oplib ops matrix``: every category, the three formats (text, Markdown, HTML parsed
with ``html.parser``), ``--check`` and ``--json``."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

import oplib_core as oplib
from oplib_core import plugins
from oplib_core.cli import main
from oplib_core.cli._matrix import CATEGORIES
from oplib_core.testing import SampleInput

from helpers import toy_spec


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


@pytest.fixture
def grid(ns, teardown):
    """Ops of ``ns`` covering every category on ``cpu``, ``meta``, a ``toy`` backend with a
    fallback for ops named ``*fb``, and a missing backend ``gpux``."""

    def fallback(op):
        return (lambda x: x) if op.name().endswith("fb") else None

    teardown(oplib.backends.register(toy_spec(fallback=fallback)))
    for name in ("own", "dflt", "comp", "fb", "fakeonly", "later", "bare"):
        oplib.define(f"{ns}::{name}", "(Tensor x) -> Tensor")
    oplib.impl(f"{ns}::own", ["cpu", "toy"], lambda x: -x)
    oplib.register_fake(f"{ns}::own", lambda x: x.new_empty(x.shape))
    oplib.impl(f"{ns}::dflt", "default", lambda x: x)
    oplib.impl(f"{ns}::comp", "CompositeImplicitAutograd", lambda x: oplib.ops.oplib.neg(x))
    oplib.register_fake(f"{ns}::fakeonly", lambda x: x.new_empty(x.shape))
    oplib.impl(f"{ns}::later", "gpux", lambda x: x)
    return ns


EXPECTED = {  # op -> (cpu, meta, toy, gpux)
    "bare": ("none", "none", "none", "none"),
    "comp": ("composite", "composite", "composite", "none"),
    "dflt": ("default", "default", "default", "none"),
    "fakeonly": ("none", "fake only", "none", "none"),
    "fb": ("none", "none", "fallback", "none"),
    "later": ("none", "none", "none", "waiting"),
    "own": ("own kernel", "fake only", "own kernel", "none"),
}


def matrix(capsys, *argv: str) -> tuple[int, str]:
    code = main(["ops", "matrix", *argv])
    return code, capsys.readouterr().out


def test_every_category_json(capsys, grid):
    code, out = matrix(capsys, "-n", grid, "--json")
    data = json.loads(out)
    assert code == 0
    assert data["columns"][-1] == "gpux" and {"cpu", "meta", "toy"} <= set(data["columns"])
    got = {
        r["op"].split("::")[1]: tuple(
            r["cells"][c]["category"] for c in ("cpu", "meta", "toy", "gpux")
        )
        for r in data["ops"]
    }
    assert got == EXPECTED
    assert {cat for row in EXPECTED.values() for cat in row} == set(CATEGORIES)


def test_text(capsys, grid):
    code, out = matrix(capsys, "-n", grid)
    assert code == 0
    lines = out.splitlines()
    header = lines[0].split()
    assert header[0] == "op" and header[-1] == "gpux"
    row = next(line for line in lines if line.startswith(f"{grid}::fb "))
    cells = dict(zip(header[1:], row.split()[1:], strict=True))
    assert cells["toy"] == "fallback" and cells["cpu"] == "none"
    assert lines[-1].split("  ") == list(CATEGORIES)  # the legend


def test_markdown_table_shape(capsys, grid):
    _, out = matrix(capsys, "-n", grid, "--format", "markdown")
    lines = out.splitlines()
    cols = lines[0].count("|") - 1
    assert lines[0].startswith("| op | ") and lines[1] == "|---|" + "---|" * (cols - 1)
    assert len(lines) == 2 + len(EXPECTED)
    for line in lines[2:]:
        assert line.startswith("| `") and line.endswith(" |") and line.count("|") == cols + 1
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    row = next(line for line in lines if f"`{grid}::later`" in line)
    cells = dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells["gpux"] == "waiting" and cells["cpu"] == "none"


class _Table(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[tuple[str, str]]] = []  # (tag, text) per cell
        self.classes: list[str | None] = []
        self.stack: list[str] = []
        self._cell: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []
            if tag == "td":
                self.classes.append(dict(attrs).get("class"))

    def handle_endtag(self, tag):
        assert self.stack.pop() == tag, f"</{tag}> closes another element"
        if tag in ("td", "th"):
            self.rows[-1].append((tag, "".join(self._cell)))

    def handle_data(self, data):
        if self.stack and self.stack[-1] in ("td", "th", "code"):
            self._cell.append(data)


def test_html_parses(capsys, grid):
    _, out = matrix(capsys, "-n", grid, "--format", "html")
    p = _Table()
    p.feed(out)
    p.close()
    assert p.stack == []  # every element closed
    header = [text for _, text in p.rows[0]]
    assert header[0] == "op" and header[-1] == "gpux"
    body = {r[0][1]: dict(zip(header[1:], (t for _, t in r[1:]), strict=True)) for r in p.rows[1:]}
    assert body[f"{grid}::comp"]["toy"] == "composite"
    assert {c for c in p.classes} <= {c.replace(" ", "-") for c in CATEGORIES}


def test_check_adds_results(capsys, grid):
    class Samples:
        @oplib.hookimpl
        def oplib_sample_inputs(self, op, device):
            if op.name() == f"{grid}::own":
                return [SampleInput((oplib.ones(2, device=device),))]
            return None

    plugins.register(Samples(), name=f"{grid}-samples")
    try:
        code, out = matrix(capsys, "-n", grid, "--check", "--json")
    finally:
        plugins.unregister(f"{grid}-samples")
    data = {r["op"]: r["cells"] for r in json.loads(out)["ops"]}
    assert code == 0
    own = data[f"{grid}::own"]
    assert own["cpu"] == {"category": "own kernel", "check": "PASS"}
    assert own["meta"]["check"] == "PASS"
    assert data[f"{grid}::bare"]["cpu"]["check"] == "SKIP"  # no samples
    assert own["gpux"]["check"] is None  # not installed: not checked


def test_unknown_namespace(capsys, grid):
    assert main(["ops", "matrix", "-n", grid + "x"]) == 2
    # the closest name first (namespaces other tests leave, such as a loaded native
    # library's, may follow it)
    assert f"did you mean '{grid}'" in capsys.readouterr().err
