"""Pictures: ``explain(...).to_dot()`` / ``.to_mermaid()`` (and ``oplib ops explain
--format dot|mermaid``), ``oplib.autograd.to_dot(output)``. Dot is read back with
``pydot`` (a test dependency); Mermaid with a line grammar of the subset we write."""

from __future__ import annotations

import re

import pytest

import oplib_core as oplib
from oplib_core.cli import main

pydot = pytest.importorskip("pydot", reason="pydot (a test dependency) reads the dot output")
# pydot 4 still calls pyparsing's camelCase names, which pyparsing 3.3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:'\\w+' deprecated - use:DeprecationWarning")


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Node id → label, and edges (from, to, label), as pydot reads them."""
    graphs = pydot.graph_from_dot_data(text)
    assert graphs is not None and len(graphs) == 1, "pydot could not parse the output"
    g = graphs[0]

    def unquote(s: str | None) -> str:
        return (s or "").strip('"').replace("\\n", "\n").replace('\\"', '"')

    nodes = {n.get_name(): unquote(n.get("label")) for n in g.get_nodes() if n.get("label")}
    edges = [(e.get_source(), e.get_destination(), unquote(e.get("label"))) for e in g.get_edges()]
    for a, b, _ in edges:
        assert a in nodes and b in nodes, f"edge {a} -> {b} to an undeclared node"
    return nodes, edges


_MERMAID_NODE = re.compile(r'^  (n\d+)(\(\[|\[/|\{\{|\[)"([^"|]*)"(\]\)|/\]|\}\}|\])$')
_MERMAID_EDGE = re.compile(r'^  (n\d+) (-->|-\.->)\|"([^"|]*)"\| (n\d+)$')
_MERMAID_OTHER = re.compile(r"^  (class n\d+ \w+|classDef \w+ [\w:#]+)$")
_PAIRS = {"([": "])", "[/": "/]", "{{": "}}", "[": "]"}


def parse_mermaid(text: str) -> tuple[dict[str, str], list[tuple[str, str, str, bool]]]:
    lines = text.splitlines()
    assert lines[0] == "flowchart TB"
    nodes: dict[str, str] = {}
    edges = []
    for line in lines[1:]:
        if m := _MERMAID_NODE.match(line):
            assert _PAIRS[m[2]] == m[4], f"unbalanced shape in {line!r}"
            nodes[m[1]] = m[3]
        elif m := _MERMAID_EDGE.match(line):
            assert m[1] in nodes and m[4] in nodes
            edges.append((m[1], m[4], m[3], m[2] == "-->"))
        else:
            assert _MERMAID_OTHER.match(line), f"not Mermaid we write: {line!r}"
    return nodes, edges


def test_explain_to_dot_backend_path():
    x = oplib.ones(2)
    nodes, edges = parse_dot(oplib.explain(oplib.ops.oplib.add, x, x).to_dot())
    labels = list(nodes.values())
    assert labels[0] == "oplib::add"
    assert "backend cpu" in labels
    chosen = [n for n, label in nodes.items() if label == "kernel: cpu"]
    assert len(chosen) == 1
    into = [(a, label) for a, b, label in edges if b == chosen[0]]
    assert len(into) == 1 and nodes[into[0][0]].startswith("cpu\ntaken: kernel at")


def test_explain_to_dot_autograd_and_modes(ns):
    x = oplib.ones(2, requires_grad=True)
    nodes, edges = parse_dot(oplib.explain(oplib.ops.oplib.mul, x, x).to_dot())
    assert any(label.startswith("Autograd\ntaken") for label in nodes.values())
    assert "Autograd kernel of oplib::mul" in nodes.values()
    with oplib.FakeTensorMode():
        y = oplib.empty(2)
        nodes, edges = parse_dot(oplib.explain(oplib.ops.oplib.neg, y).to_dot())
    assert "FakeTensorMode" in nodes.values()
    assert next(label for _, _, label in edges) == "intercepts"


def test_explain_to_dot_skipped_steps_are_dashed():
    y = oplib.empty(2, device="meta")
    g = pydot.graph_from_dot_data(oplib.explain(oplib.ops.oplib.add, y, y).to_dot())[0]
    styles = {e.get("label").strip('"'): e.get("style") for e in g.get_edges()}
    assert styles["skipped"] == "dashed" and styles["taken"] is None


def test_explain_to_dot_error(ns):
    oplib.define(f"{ns}::nokernel", "(Tensor x) -> Tensor")
    e = oplib.explain(f"{ns}::nokernel", oplib.ones(2))
    nodes, edges = parse_dot(e.to_dot())
    assert e.error is not None and e.error in nodes.values()
    assert "error" in {label for _, _, label in edges}


def test_explain_to_mermaid_matches_dot():
    x = oplib.ones(2)
    e = oplib.explain(oplib.ops.oplib.add, x, x)
    dot_nodes, dot_edges = parse_dot(e.to_dot())
    nodes, edges = parse_mermaid(e.to_mermaid())
    assert [label.replace("<br/>", "\n") for label in nodes.values()] == [
        label.replace('"', "#quot;") for label in dot_nodes.values()
    ]
    assert [(a, b) for a, b, _, _ in edges] == [(a, b) for a, b, _ in dot_edges]


def test_mermaid_escapes_quotes_and_pipes(ns):
    oplib.define(f"{ns}::q", '(Tensor x, str s="a|b") -> Tensor')
    e = oplib.explain(f"{ns}::q", oplib.ones(2))
    e.error = 'no kernel for "q" | here'
    nodes, _ = parse_mermaid(e.to_mermaid())
    assert "no kernel for #quot;q#quot; #124; here" in nodes.values()
    dot_nodes, _ = parse_dot(e.to_dot())
    assert 'no kernel for "q" | here' in dot_nodes.values()


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_cli_explain_format(capsys, fmt):
    assert main(["ops", "explain", "oplib::add", "--format", fmt, "--requires-grad"]) == 0
    out = capsys.readouterr().out
    nodes, _ = (parse_dot if fmt == "dot" else parse_mermaid)(out)
    assert "Autograd kernel of oplib::add" in nodes.values()


def test_autograd_to_dot():
    a = oplib.ones(2, 3, requires_grad=True)
    b = oplib.ones(2, 3, requires_grad=True)
    y = (a * b + a).sum()
    nodes, edges = parse_dot(oplib.autograd.to_dot(y))
    names = {label.split("_oplib_")[-1] for label in nodes.values() if "Backward" in label}
    assert names == {"sum_default", "add_default", "mul_default"}
    leaves = [n for n, label in nodes.items() if label.endswith("requires_grad leaf")]
    assert len(leaves) == 2
    out = next(n for n, label in nodes.items() if label.startswith("output 0"))
    # a is used twice (mul and add); every path ends at the output
    assert sum(1 for x, _, _ in edges if x == leaves[0]) == 2
    total = next(n for n, label in nodes.items() if label.endswith("sum_default"))
    assert [x for x, to, _ in edges if to == out] == [total]


def test_autograd_to_dot_several_outputs_and_errors():
    a = oplib.ones(3, requires_grad=True)
    nodes, _edges = parse_dot(oplib.autograd.to_dot([a * 2, a]))
    assert sum(label.startswith("output") for label in nodes.values()) == 2
    with pytest.raises(ValueError, match="no output has an autograd graph"):
        oplib.autograd.to_dot(oplib.ones(2))
