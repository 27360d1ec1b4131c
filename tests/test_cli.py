"""The ``oplib`` command: text tables and stable ``--json`` keys. (Rendering, golden
files and errors: ``test_cli_render.py``, ``test_cli_errors.py``.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.cli import main


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables fit the terminal: make it wide enough that no cell these tests read is cut."""
    monkeypatch.setenv("COLUMNS", "250")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_backends_list_table(capsys):
    code, out = run(capsys, "backends", "list")
    assert code == 0
    header, _rule, *rows = out.splitlines()
    assert header.split() == ["backend", "key", "distribution", "available", "devices", "ops"]
    cpu = next(r for r in rows if r.startswith("cpu "))
    assert cpu.split()[:6] == ["cpu", "CPU", "oplib-cpu", "0.1.0", "yes", "1"]


def test_backends_list_json_keys_and_op_count(capsys):
    code, out = run(capsys, "backends", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0
    assert set(rows["cpu"]) == {
        "name",
        "key",
        "distribution",
        "version",
        "available",
        "reason",
        "device_count",
        "ops",
    }
    before = rows["cpu"]["ops"]
    with oplib.library._scoped_library("clicount", "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", np.negative, "CPU")
        _, out = run(capsys, "backends", "list", "--json")
        assert {r["name"]: r for r in json.loads(out)}["cpu"]["ops"] == before + 1


def test_plugins_list(capsys):
    code, out = run(capsys, "plugins", "list")
    assert code == 0
    assert any(line.startswith("cpu ") and "loaded" in line for line in out.splitlines())
    _, out = run(capsys, "plugins", "list", "--json")
    rows = {p["name"]: p for p in json.loads(out)}
    assert rows["core"]["status"] == "loaded"
    assert {
        "name",
        "distribution",
        "version",
        "module",
        "hooks",
        "status",
        "error",
        "load_ms",
    } <= set(rows["cpu"])


def test_ops_list_namespace_filter(capsys):
    with oplib.library._scoped_library("clins", "FRAGMENT") as lib:
        lib.define("a(Tensor x) -> Tensor")
        lib.define("b(Tensor x) -> Tensor")
        lib.impl("a", np.negative, "CPU")
        _, out = run(capsys, "ops", "list", "--namespace", "clins", "--json")
        rows = json.loads(out)
    assert [r["qualname"] for r in rows] == ["clins::a", "clins::b"]
    assert rows[0]["keys"] == ["cpu"] and rows[1]["keys"] == []
    assert rows[0]["schema"] == "clins::a(Tensor x) -> Tensor"


def test_ops_show_text_and_json(capsys):
    with oplib.library._scoped_library("clishow", "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", np.negative, "CPU")
        lib.impl("op", np.negative, "cudax")
        code, out = run(capsys, "ops", "show", "clishow::op")
        assert code == 0
        assert "schema:  clishow::op(Tensor x) -> Tensor" in out
        assert "cudax" in out and "waiting" in out
        _, out = run(capsys, "ops", "show", "clishow::op", "--json")
        d = json.loads(out)
    assert {"qualname", "schema", "kernels", "fake", "autograd"} <= set(d)
    keys = {k["key"]: k for k in d["kernels"]}
    assert keys["cpu"]["status"] == "live" and keys["cudax"]["status"] == "waiting"
    assert set(keys["cpu"]) >= {"key", "source", "plugin", "distribution", "status"}
    assert re.fullmatch(r".+:\d+", keys["cpu"]["source"])


def test_ops_show_override_is_visible(capsys):
    with oplib.library._scoped_library("cliov", "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", np.negative, "CPU")

        def mine(x):
            return x

        oplib.impl("cliov::op", "cpu", mine, lib=lib, allow_override=True)
        _, out = run(capsys, "ops", "show", "cliov::op", "--json")
        d = json.loads(out)
        assert d["kernels"][0]["overrides"] is True
        assert d["kernels"][0]["source"].endswith(f"{mine.__code__.co_firstlineno}")
        assert len(d["overridden"]) == 1


def test_ops_show_unknown_op(capsys):
    code = main(["ops", "show", "nope::nothing"])
    assert code == 2
    assert "no operator 'nope::nothing'" in capsys.readouterr().err
    assert main(["ops", "show", "oplib::addd"]) == 2
    assert capsys.readouterr().err == (
        "oplib: no operator 'oplib::addd' (see 'oplib ops list'); did you mean 'oplib::add'?\n"
    )


def test_ops_explain(capsys):
    code, out = run(capsys, "ops", "explain", "oplib::matmul")
    assert code == 0
    assert "dispatch keys: CPU" in out and "taken: kernel at" in out


def test_ops_explain_on_a_backend_without_factory_kernels(capsys, ns, toy):
    # the sample tensors are made on cpu and moved: toy has no kernel for oplib::ones
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")
    oplib.register_kernel(f"{ns}::f", "toy", lambda x: x)
    code, out = run(capsys, "ops", "explain", f"{ns}::f", "--device", "toy")
    assert code == 0
    assert "on toy" in out and "dispatch keys: Toy" in out


def test_an_unknown_device_is_one_line_not_a_traceback(capsys):
    code = main(["ops", "explain", "oplib::add", "--device", "nope"])
    assert code == 2
    assert capsys.readouterr().err == ("oplib: no device type 'nope' (see 'oplib backends list')\n")
    assert main(["ops", "explain", "oplib::add", "--device", "cpux"]) == 2
    assert "did you mean 'cpu'?" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["ops list", "--version", "--help"])
def test_a_closed_pipe_ends_quietly(command):
    r = subprocess.run(
        f"{sys.executable} -m oplib_core.cli {command} | true",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr


def test_console_script_runs_in_a_subprocess():
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core.cli", "backends", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "cpu" in {row["name"] for row in json.loads(r.stdout)}


def test_plugin_docs_hook_reference_matches_hookspecs():
    r = subprocess.run(
        [sys.executable, "scripts/gen_hook_reference.py", "--check"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert r.returncode == 0, r.stdout


def test_ops_show_lists_an_installed_plugins_kernels_waiting_for_their_op(tmp_path):
    """docs/writing-a-plugin.md: ``oplib ops show acme::scaled_add`` lists the kernels
    waiting for an op no installed package defines. The real case: a fresh process, whose
    plugins load only when something asks (a distribution found on PYTHONPATH)."""
    (tmp_path / "acme_npu.py").write_text(
        "import oplib_core as oplib\n"
        "@oplib.hookimpl\n"
        "def oplib_impl(registrar):\n"
        "    registrar.impl('acme::scaled_add', 'cpu', lambda x, y: x + y)\n"
    )
    info = tmp_path / "acme_npu-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-npu\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[oplib]\nacme-npu = acme_npu\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLIB_")}
    env.update(PYTHONPATH=str(tmp_path), OPLIB_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")

    def oplib_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oplib_core", *argv],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip

    r = oplib_cli("ops", "show", "acme::scaled_add")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "acme::scaled_add"
    assert "not defined: no installed package defines it" in lines[1]
    row = next(line for line in lines if line.startswith("cpu "))
    assert "waiting for op" in row
    assert (
        f"{tmp_path / 'acme_npu.py'}:4" in row
    )  # the kernel's line and "plugin acme-npu (acme-npu 0.1)" in row
    r = oplib_cli("ops", "show", "acme::scaled_add", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "waiting" and d["qualname"] == "acme::scaled_add"
    [k] = d["kernels"]
    assert (k["key"], k["status"], k["plugin"]) == ("cpu", "waiting", "acme-npu")
    r = oplib_cli("ops", "show", "acme::scaled_sub")  # nothing waits for it: unknown
    assert r.returncode == 2
    assert "no operator 'acme::scaled_sub'" in r.stderr
