"""Higher-order operators in ``oplib ops list|show|explain``: marked as such, their
handlers per key with where each came from, a sample call explained, names checked."""

from __future__ import annotations

import json

import pydot
import pytest

import oplib_core as oplib
from oplib_core.cli import main

# pydot 4 still calls pyparsing's camelCase names, which pyparsing 3.3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:'\\w+' deprecated - use:DeprecationWarning")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_ops_list_marks_hops_and_their_handler_keys(capsys):
    text = _out(capsys, "ops", "list")
    (cond,) = [line for line in text.splitlines() if line.startswith("higher_order::cond")]
    assert "(higher-order)" in cond and "CompositeExplicitAutograd" in cond and "dask" in cond
    assert "oplib::add (higher-order)" not in text
    rows = json.loads(_out(capsys, "ops", "list", "-n", "higher_order", "--json"))
    assert {r["qualname"] for r in rows} >= {
        "higher_order::cond",
        "higher_order::map",
        "higher_order::scan",
        "higher_order::while_loop",
    }
    assert {r["kind"] for r in rows} == {"hop"}


def test_ops_show_lists_handlers_with_origins(capsys):
    text = _out(capsys, "ops", "show", "higher_order::cond")
    assert "higher-order operator" in text
    assert "cond(pred, true_fn, false_fn, operands)" in text
    handler = next(line for line in text.splitlines() if line.startswith("CompositeExplicit"))
    assert "_control_flow.py" in handler and "live" in handler
    detail = json.loads(_out(capsys, "ops", "show", "higher_order::map", "--json"))
    assert detail["kind"] == "hop"
    assert "dask" in {k["key"] for k in detail["kernels"]}
    dask = next(k for k in detail["kernels"] if k["key"] == "dask")
    assert dask["distribution"] == "oplib-dask"


def test_a_hop_defined_at_runtime_is_shown(capsys, teardown):
    hop = oplib.HigherOrderOperator("cli_probe_hop")
    teardown(hop)
    hop.py_impl("CompositeExplicitAutograd")(lambda f, x: f(x))
    text = _out(capsys, "ops", "show", "higher_order::cli_probe_hop")
    assert "CompositeExplicitAutograd" in text and "test_cli_hops.py" in text
    # Only the built-ins have samples to explain a call with.
    assert main(["ops", "explain", "higher_order::cli_probe_hop"]) == 2
    assert "no sample call for higher_order::cli_probe_hop" in capsys.readouterr().err


def test_unknown_hop_is_exit_2_with_did_you_mean(capsys):
    assert main(["ops", "show", "higher_order::cnd"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no higher-order operator 'higher_order::cnd'" in err
    assert err.endswith("did you mean 'higher_order::cond'?\n")


def test_ops_explain_a_hop_with_a_sample_call(capsys):
    text = _out(capsys, "ops", "explain", "higher_order::map", "--requires-grad")
    assert "higher_order::map: map(f, xs, args)" in text
    assert "requires grad" in text and "Autograd handler of higher_order::map" in text
    text = _out(capsys, "ops", "explain", "higher_order::cond", "--device", "meta")
    assert "on meta" in text
    (graph,) = pydot.graph_from_dot_data(
        _out(capsys, "ops", "explain", "higher_order::scan", "--format", "dot")
    )
    labels = " ".join(str(n.get_label()) for n in graph.get_nodes())
    assert "higher_order::scan" in labels


def test_ops_matrix_has_a_row_per_hop(capsys):
    grid = json.loads(_out(capsys, "ops", "matrix", "-n", "higher_order", "--json"))
    rows = {r["op"]: r["cells"] for r in grid["ops"]}
    assert set(rows) >= {"higher_order::cond", "higher_order::map"}
    cond = {column: cell["category"] for column, cell in rows["higher_order::cond"].items()}
    # the default (CompositeExplicitAutograd) handler on cpu, Dask's own, meta's Fake
    assert (cond["cpu"], cond["dask"], cond["meta"]) == ("default", "own kernel", "fake only")
    assert "oplib::add" not in rows
    everything = json.loads(_out(capsys, "ops", "matrix", "--json"))
    assert {"oplib::add", "higher_order::scan"} <= {r["op"] for r in everything["ops"]}


def test_a_plugin_handler_for_a_missing_backend_is_a_waiting_column(capsys, teardown):
    hop = oplib.HigherOrderOperator("cli_waiting_hop")
    teardown(hop)
    hop.py_impl("npu_not_installed")(lambda f, x: f(x))
    grid = json.loads(_out(capsys, "ops", "matrix", "-n", "higher_order", "--json"))
    assert "npu_not_installed" in grid["columns"]
    row = next(r["cells"] for r in grid["ops"] if r["op"] == "higher_order::cli_waiting_hop")
    assert row["npu_not_installed"]["category"] == "waiting"
    assert row["cpu"]["category"] == "none"


def test_oplib_check_takes_hop_names(capsys):
    assert main(["check", "higher_order::cond", "-b", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert {r["op"] for r in rows} == {"higher_order::cond"}
    assert any(r["status"] == "PASS" for r in rows)
    assert main(["check", "higher_order::cnd"]) == 2
    assert "did you mean 'higher_order::cond'?" in capsys.readouterr().err
