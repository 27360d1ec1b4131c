"""``oplib``'s output at any width and in a pipe (issue 32): no cell is ever cut (every
``file:line``, reason and install hint complete at 40, 80 and 200 columns and piped), a
pipe gets one line per row and no escape codes, ``NO_COLOR`` means no escape code at all,
paths are shortened in text and absolute in ``--json``; ``oplib`` alone prints help;
did-you-mean for commands and options; completion scripts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import plugins
from oplib_core.cli import COMMANDS, main
from oplib_core.cli._completion import script
from oplib_core.cli._render import short_paths
from oplib_core.testing import SampleInput

from helpers import FakeTTY

NS = "clifold"
OP = f"{NS}::an_operator_with_a_name_long_enough_to_need_folding"
PLUGIN = "myplugin_whose_name_is_long_enough_to_be_folded_at_forty_columns"
REASON = (
    "the configuration file /etc/myplugin/a/deeply/nested/path/config.toml is missing; "
    "set MYPLUGIN_CONFIG to its path"
)
WIDTHS = [40, 80, 200]


def _wrong_fake(x):
    return x.new_empty((1,))


class _Samples:
    @oplib.hookimpl
    def oplib_sample_inputs(self, op, device):
        if op.name() == OP:
            return [SampleInput((oplib.ones(2, 3, device=device),), name="ones")]
        return None


class _Failing:
    @oplib.hookimpl
    def oplib_define(self, registrar):
        raise RuntimeError(REASON)


@pytest.fixture(scope="module")
def registered() -> Iterator[None]:
    """``OP`` (a cpu kernel, a kernel waiting for ``gpux``, a fake kernel giving the wrong
    shape: oplib check fails it with a reason quoting this file), its samples, and a
    plugin with a long name that fails to load with a long reason."""
    with oplib.library._scoped_library(NS, "FRAGMENT") as lib:
        name = OP.partition("::")[2]
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, np.negative, "CPU")
        lib.impl(name, np.negative, "gpux")
        lib._register_fake(name, _wrong_fake)
        plugins.register(_Samples(), name=f"{NS}-samples")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", plugins.PluginWarning)
            plugins.register(_Failing(), name=PLUGIN)
        try:
            yield
        finally:
            plugins.unregister(PLUGIN)
            plugins.unregister(f"{NS}-samples")


def oplib_cli(capsys, monkeypatch, width: int | None, *argv: str) -> str:
    """stdout of ``oplib argv`` at ``width`` columns (None: piped, no COLUMNS)."""
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    return captured.out


def squash(text: str) -> str:
    return "".join(text.split())


def _spans(lines: list[str]) -> list[tuple[int, int]]:
    """The column spans of a table's lines: runs of characters separated by gutters (at
    least 3 positions blank in every line)."""
    width = max(map(len, lines))
    blank = [all(i >= len(line) or line[i] == " " for line in lines) for i in range(width)]
    spans: list[tuple[int, int]] = []
    start, gap = None, 0
    for i, b in enumerate([*blank, True, True, True]):
        if not b:
            if start is None:
                start = i
            gap = 0
        elif start is not None:
            gap += 1
            if gap == 3:
                spans.append((start, i - 2))
                start = None
    return spans


def cell_texts(out: str) -> list[str]:
    """Each column's text top to bottom, whitespace removed (a folded cell's pieces join
    up again), for a table or for records (a title line, then ``header: value`` lines)."""
    lines = [line for line in out.splitlines() if line.strip()]
    texts: list[str] = []
    table = [line for line in lines if not set(line.strip()) <= {"─"}]
    if len(table) == len(lines):  # records: titles at column 0, fields indented
        title = ""
        for line in lines:  # a title folded onto more lines joins up
            if line.startswith(" "):
                texts.append(title)
                title = ""
            else:
                title += squash(line)
        table = [line for line in lines if line.startswith(" ")]
    for a, b in _spans(table):
        texts.append("".join(squash(line[a:b]) for line in table))
    return texts


def assert_complete(out: str, width: int | None, expected: list[str]) -> None:
    """Every expected cell is in the output whole: on one line when piped, within one
    column (folded or not) at a width, and no line is wider than that width."""
    assert "…" not in out
    if width is None:
        lines = out.splitlines()
        for e in expected:
            assert any(e in line for line in lines), f"{e!r} not on one line of:\n{out}"
        return
    assert max(map(len, out.splitlines())) <= width, out
    texts = cell_texts(out)
    for e in expected:
        assert any(squash(e) in t for t in texts), f"{e!r} not whole in:\n{out}"


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_backends_list_keeps_every_reason_and_install_hint(capsys, monkeypatch, width):
    rows = json.loads(oplib_cli(capsys, monkeypatch, 80, "backends", "list", "--json"))
    out = oplib_cli(capsys, monkeypatch, width, "backends", "list")
    expected = [r["name"] for r in rows] + [
        f"no: {r['reason']}" for r in rows if r["available"] is False
    ]
    expected += [f"{r['distribution']} {r['version']}" for r in rows]
    assert_complete(out, width, expected)


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_plugins_list_keeps_the_name_and_the_failure_reason(capsys, monkeypatch, registered, width):
    rows = json.loads(oplib_cli(capsys, monkeypatch, 80, "plugins", "list", "--json"))
    failed = next(r for r in rows if r["name"] == PLUGIN)
    assert REASON in failed["error"]
    out = oplib_cli(capsys, monkeypatch, width, "plugins", "list")
    assert_complete(out, width, [PLUGIN, f"failed: {failed['error']}"])


def test_plugins_list_in_a_pipe_is_greppable():
    code = (
        "import warnings, oplib_core as o\n"
        "from oplib_core.cli import main\n"
        "class P:\n"
        "    @o.hookimpl\n"
        "    def oplib_define(self, registrar):\n"
        f"        raise RuntimeError({REASON!r})\n"
        "warnings.simplefilter('ignore')\n"
        f"o.plugins.register(P(), name={PLUGIN!r})\n"
        "raise SystemExit(main(['plugins', 'list']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run(
        f"{sys.executable} -c {shlex.quote(code)} | grep myplugin",
        shell=True, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith(PLUGIN + " ") and REASON in line and "\x1b[" not in line


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_ops_list_and_show_keep_every_file_and_line(capsys, monkeypatch, registered, width):
    out = oplib_cli(capsys, monkeypatch, width, "ops", "list", "-n", NS)
    assert_complete(out, width, [OP, "cpu, gpux"])
    d = json.loads(oplib_cli(capsys, monkeypatch, 80, "ops", "show", OP, "--json"))
    sources = [k["source"] for k in d["kernels"]] + [d["fake"]["source"]]
    assert all(os.path.isabs(s.rpartition(":")[0]) for s in sources)  # --json: absolute
    fake_line = _wrong_fake.__code__.co_firstlineno
    assert d["fake"]["source"] == f"{__file__}:{fake_line}"
    out = oplib_cli(capsys, monkeypatch, width, "ops", "show", OP)
    table = out[out.index("\nkey ") + 1 :]  # after the schema and where it was defined
    assert_complete(table, width, [short_paths(s) for s in sources])
    relative = f"tests/test_cli_output.py:{fake_line}"
    if Path.cwd() == Path(__file__).parent.parent:  # the text is relative to the cwd
        assert relative in out.replace("\n", "") or squash(relative) in squash(out)
        assert __file__ not in out


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_check_keeps_the_whole_failure_reason(capsys, monkeypatch, registered, width):
    report = json.loads(oplib_cli(capsys, monkeypatch, 80, "check", OP, "-b", "cpu", "--json"))
    (failed,) = [r for r in report["results"] if r["status"] == "FAIL"]
    reason = failed["reason"].strip().splitlines()[0]
    assert f"test_cli_output.py:{_wrong_fake.__code__.co_firstlineno}" in reason
    out = oplib_cli(capsys, monkeypatch, width, "check", OP, "-b", "cpu")
    table = out.split("\n\n")[0]
    assert_complete(table, width, [OP, f"faketensor on cpu: {short_paths(reason)}"])


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_matrix_keeps_every_cell(capsys, monkeypatch, registered, width):
    out = oplib_cli(capsys, monkeypatch, width, "ops", "matrix", "-n", NS)
    table = out.rsplit("\n", 2)[0]  # the legend's line is printed whole, unfolded
    assert_complete(table, width, [OP, "own kernel", "waiting"])


@pytest.mark.parametrize("width", [*WIDTHS, None])
def test_profile_keeps_the_op_name(capsys, monkeypatch, registered, width, tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"import numpy as np\nimport oplib_core as o\no.lookup({OP!r})(np.ones(3))\n")
    out = oplib_cli(capsys, monkeypatch, width, "profile", str(work))
    assert any(line.startswith(f"{OP}.default ") or line.startswith(f"{OP} ")
               for line in out.splitlines()), out  # fmt: skip


def test_a_pipe_has_no_width_limit_and_no_escape_codes(registered, capsys, monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    listed = json.loads(oplib_cli(capsys, monkeypatch, None, "plugins", "list", "--json"))
    out = oplib_cli(capsys, monkeypatch, None, "plugins", "list")
    header, _rule, *rows = out.splitlines()
    assert header.split() == ["plugin", "distribution", "status", "hooks", "ms", "module"]
    assert len(rows) == len(listed)  # a line per row
    row = next(r for r in rows if r.startswith(PLUGIN))
    assert len(row) > 200 and REASON in row and "\x1b[" not in out


def test_no_color_means_no_escape_code_at_all(registered, monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")

    def run_on_terminals() -> tuple[str, str]:
        out, err = FakeTTY(), FakeTTY()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        try:
            assert main(["check", OP, "-b", "cpu"]) == 1
        finally:
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
            monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        return out.getvalue(), err.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    out, err = run_on_terminals()
    assert "\x1b[" in out and "\x1b[" in err  # colour, and the progress bar's cursor codes
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")  # NO_COLOR wins
    out, err = run_on_terminals()
    assert "\x1b[" not in out and "\x1b[" not in err
    assert "FAIL" in out and "1 failed" in err + out


def test_force_color_colours_a_pipe_as_rich_does(registered, capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    out = oplib_cli(capsys, monkeypatch, None, "check", OP, "-b", "cpu")
    assert re.search(r"\x1b\[[0-9;]*mFAIL", out)


# -- the command line ---------------------------------------------------------------------


def test_oplib_alone_prints_help_and_exits_0(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: oplib ")
    for command in COMMANDS:
        assert f"\n    {command}" in out
    assert main(["ops"]) == 0  # a group alone: its own help
    out = capsys.readouterr().out
    assert out.startswith("usage: oplib ops ") and "show" in out and "matrix" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bakends", "list"], "no command 'bakends' (choose from backends, plugins, ops, "),
        (["bakends"], "did you mean 'backends'?"),
        (["ops", "shw", "oplib::add"], "no command 'shw' (choose from list, show, explain, "
                                       "matrix); did you mean 'show'?"),
        (["backends", "list", "--jsn"], "unrecognized arguments: --jsn; did you mean '--json'?"),
        (["ops", "matrix", "--fromat", "html"], "did you mean '--format'?"),
        (["ops", "matrix", "--format", "htm"],
         "--format: invalid choice 'htm' (choose from text, markdown, html); did you mean "
         "'html'?"),
        (["completion", "bsh"], "did you mean 'bash'"),
    ],
)  # fmt: skip
def test_did_you_mean_for_commands_choices_and_options(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert "argument " not in err  # argparse's 'argument sub:' / 'argument command:'


def test_no_suggestion_when_nothing_is_close(capsys):
    assert main(["backends", "list", "--zzzzzz"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_name_every_command(capsys, shell):
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    assert text == script(shell)
    for word in (*COMMANDS, "list", "show", "explain", "matrix", "--json", "--namespace"):
        assert word in text
    interpreter = shutil.which(shell)
    if interpreter is not None:  # the script parses in that shell
        r = subprocess.run([interpreter, "-n"], input=text, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_bash_completes_the_commands(capsys):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    main(["completion", "bash"])
    text = capsys.readouterr().out
    driver = (
        text + "\nCOMP_WORDS=(oplib ops s); COMP_CWORD=2; COMP_LINE='oplib ops s'; "
        "COMP_POINT=${#COMP_LINE}; _shtab_oplib; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    r = subprocess.run([bash, "-c", driver], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["show"]
