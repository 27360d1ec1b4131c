"""``oplib profile script.py [args]``: the script runs as ``__main__`` with its own
arguments under ``oplib.profile()``; the table (or ``--json``, ``--trace``) says what ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oplib_core.cli import main

SCRIPT = """\
import sys
import numpy as np
import oplib_core as oplib

n = int(sys.argv[1])
assert sys.argv[2:] == ["--flag", "x"], sys.argv
assert __name__ == "__main__"
x = np.arange(3.0)
for _ in range(n):
    oplib.ops.oplib.neg(x)
t = oplib.tensor([1.0, 2.0], requires_grad=True)
(t * t).sum().backward()
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "work.py"
    path.write_text(SCRIPT)
    return path


def test_the_table_counts_the_script_calls(script, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["profile", str(script), "7", "--flag", "x"]) == 0
    out = capsys.readouterr().out
    neg = next(line for line in out.splitlines() if line.startswith("oplib::neg"))
    assert neg.split()[1:3] == ["cpu", "7"]
    assert "(backward)" in out and "events," in out


def test_json_sort_limit_and_trace(script, capsys, tmp_path):
    trace = tmp_path / "trace.json"
    assert main(["profile", "--json", "--trace", str(trace), str(script), "4", "--flag", "x"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    neg = next(r for r in rows if r["name"] == "oplib::neg")
    assert (neg["backend"], neg["kind"], neg["count"]) == ("cpu", "op", 4)
    assert any(r["kind"] == "backward" for r in rows)
    assert f"Chrome trace written to {trace}" in captured.err
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["name"] == "oplib::neg" for e in events) == 4
    argv = ["profile", "--sort", "count", "--limit", "1", str(script), "9", "--flag", "x"]
    assert main(argv) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2].startswith("oplib::neg") and table[3].startswith("---")


def test_a_missing_script_is_a_usage_error(capsys, tmp_path):
    assert main(["profile", str(tmp_path / "nope.py")]) == 2
    assert capsys.readouterr().err == f"oplib: no script {str(tmp_path / 'nope.py')!r}\n"
    assert main(["profile"]) == 2
    assert "required: script" in capsys.readouterr().err


def test_the_scripts_error_shows_its_own_traceback_and_exit_status_1(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import oplib_core as oplib\n"
        "oplib.ops.oplib.neg(oplib.ones(2))\n"
        "def f():\n    raise ValueError('broken input')\n\nf()\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "profile", str(bad)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert str(bad) in lines[1]  # the script's frame first: no runpy or oplib frames
    assert "runpy" not in r.stderr and "profiler.py" not in r.stderr
    assert lines[-2] == "ValueError: broken input"
    assert lines[-1] == (
        f"oplib: {bad} raised ValueError (exit status 1); the profile shows what ran before"
    )
    assert any(line.startswith("oplib::neg ") for line in r.stdout.splitlines())


def test_the_scripts_exit_status_is_passed_on(tmp_path, capsys):
    (tmp_path / "exits.py").write_text(
        "import sys\nimport oplib_core as oplib\noplib.ops.oplib.neg(oplib.ones(2))\nsys.exit(3)\n"
    )
    assert main(["profile", str(tmp_path / "exits.py")]) == 3
    captured = capsys.readouterr()
    assert captured.err == f"oplib: {tmp_path / 'exits.py'} exited with status 3\n"
    assert "oplib::neg" in captured.out  # what ran before the exit is still shown
    (tmp_path / "ok.py").write_text("import sys\nsys.exit(0)\n")
    assert main(["profile", str(tmp_path / "ok.py")]) == 0
    (tmp_path / "message.py").write_text("import sys\nsys.exit('no input given')\n")
    assert main(["profile", str(tmp_path / "message.py")]) == 1  # as python: message, 1
    err = capsys.readouterr().err
    assert err.startswith("no input given\n") and "exited with status 1" in err


CHATTY = """\
import os
import subprocess
import sys
import oplib_core as oplib

print("hello from the script")
os.write(1, b"straight to fd 1\\n")
subprocess.run([sys.executable, "-c", "print('from a child process')"], check=True)
oplib.ops.oplib.neg(oplib.ones(2))
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_json_is_alone_on_stdout_while_the_script_prints(tmp_path, status):
    chatty = tmp_path / "chatty.py"
    chatty.write_text(CHATTY)
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "profile", "--json", str(chatty), str(status)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == status
    rows = json.loads(r.stdout)  # nothing but the JSON
    assert any(row["name"] == "oplib::neg" for row in rows)
    for said in ("hello from the script", "straight to fd 1", "from a child process"):
        assert said in r.stderr


def test_output_writes_the_report_to_a_file_and_leaves_stdout_to_the_script(tmp_path):
    chatty = tmp_path / "chatty.py"
    chatty.write_text(CHATTY)
    report = tmp_path / "prof.json"
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "profile", "--json", "-o", str(report),
         str(chatty), "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0
    assert "hello from the script" in r.stdout and "from a child process" in r.stdout
    assert "oplib::neg" not in r.stdout
    assert any(row["name"] == "oplib::neg" for row in json.loads(report.read_text()))
    assert f"profile written to {report}" in r.stderr
    table = tmp_path / "prof.txt"
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "profile", "--output", str(table), str(chatty), "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0 and "oplib::neg" not in r.stdout
    assert table.read_text().splitlines()[0].split()[:2] == ["name", "backend"]
