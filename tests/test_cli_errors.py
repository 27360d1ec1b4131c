"""The ``oplib`` command's errors and entry points: one line on stderr, exit 2 for usage
and unknown names (with did-you-mean), 1 for failures, tracebacks only with ``--debug``;
``--version``; ``python -m oplib_core``; odd plugin content printed, not crashed on."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import oplib_core as oplib
from oplib_core import _plugin_host, plugins
from oplib_core.cli import COMMANDS, build_parser, main
from oplib_core.cli._render import Output
from oplib_core.cli._run import run
from oplib_core.errors import RegistrationError


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ops", "show", "oplib::addd"], "did you mean 'oplib::add'?"),
        (["ops", "list", "-n", "oplb"], "no namespace 'oplb' (see 'oplib ops list'); "
         "did you mean 'oplib'?"),
        (["check", "-b", "mta"], "no backend 'mta' (see 'oplib backends list'); "
         "did you mean 'meta'?"),
        (["ops", "explain", "oplib::neg", "--device", "meat"], "no device type 'meat'"),
        (["ops", "explain", "oplib::neg", "--device", "cpu:x"], "--device 'cpu:x'"),
        (["ops", "nope"], "no command 'nope' (choose from list, show, explain, matrix)"),
        (["ops", "show"], "the following arguments are required: qualname"),
        (["frobnicate"], "no command 'frobnicate' (choose from backends, plugins, ops"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_exit_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("oplib") and captured.err.count("\n") == 1
    assert message in captured.err
    assert "Traceback" not in captured.err


def _raises(error: BaseException) -> argparse.Namespace:
    def fn(args: argparse.Namespace, out: Output) -> int:
        raise error

    return argparse.Namespace(fn=fn, debug=False)


def test_an_oplib_error_is_one_line_exit_1(capsys):
    args = _raises(RegistrationError("first line\n  second line"))
    assert run(args, Output()) == 1
    assert capsys.readouterr().err == "oplib: RegistrationError: first line second line\n"


def test_debug_shows_the_traceback(capsys):
    args = _raises(RegistrationError("broken"))
    args.debug = True
    assert run(args, Output()) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("oplib: RegistrationError: broken\n")
    assert main(["--debug", "ops", "show", "oplib::addd"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "UnknownOperatorError" in err


def test_ctrl_c_is_exit_130_without_traceback(capsys):
    assert run(_raises(KeyboardInterrupt()), Output()) == 130
    assert capsys.readouterr().err == "oplib: interrupted\n"


def test_a_bug_in_the_cli_is_not_hidden():
    with pytest.raises(ZeroDivisionError):
        run(_raises(ZeroDivisionError("a bug")), Output())


def test_version_lists_core_and_installed_distributions(capsys):
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"oplib-core {oplib.__version__} (native fast call: ")
    names = [line.split()[0] for line in lines]
    assert {"oplib-cpu", "oplib-meta", "oplib-privateuse"} <= set(names)
    assert names.count("oplib-core") == 1


def test_version_says_which_native_fast_call_serves(capsys, monkeypatch):
    from importlib.util import find_spec

    monkeypatch.delenv("OPLIB_NATIVE_SPEEDUPS", raising=False)
    main(["--version"])
    first = capsys.readouterr().out.splitlines()[0]
    has = find_spec("oplib_core._native._cfastcall") is not None
    built = "compiled" if has else "built without a C compiler"
    assert first.endswith(f"{built})")
    monkeypatch.setenv("OPLIB_NATIVE_SPEEDUPS", "0")
    main(["--version"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("(native fast call: generated Python, OPLIB_NATIVE_SPEEDUPS=0)")


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "usage: oplib" in capsys.readouterr().out


def test_every_command_builds_alone():
    for name in COMMANDS:
        parser = build_parser(name)
        rest = {"check": [], "profile": ["x.py"], "completion": ["bash"]}.get(name, ["list"])
        assert parser.parse_args([name, *rest]).fn


def test_python_m_oplib_core_runs_the_cli():
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "backends", "list", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "cpu" in {row["name"] for row in json.loads(r.stdout)}
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "--include"], capture_output=True, text=True
    )
    assert r.returncode == 0
    assert Path(r.stdout.strip()) == Path(oplib.__file__).resolve().parent / "include"
    assert r.stdout.strip() == oplib.get_include()
    assert (Path(r.stdout.strip()) / "oplib.h").is_file()
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "ops", "show", "oplib::addd"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2 and "did you mean 'oplib::add'" in r.stderr


def test_rich_is_imported_by_the_command_only():
    code = (
        "import sys, oplib_core; oplib_core.plugins.load()\n"
        "assert 'rich' not in sys.modules, 'import oplib_core imported rich'\n"
        "from oplib_core.cli import main\n"
        "main(['backends', 'list'])\n"
        "assert 'rich' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_ops_show_prints_a_lone_surrogate_escaped(capsys, ns):
    oplib.define(f"{ns}::s", '(Tensor x, str mode="a\udcffb") -> Tensor')
    oplib.impl(f"{ns}::s", "cpu", lambda x, mode: x)
    assert main(["ops", "show", f"{ns}::s"]) == 0
    out = capsys.readouterr().out
    assert "a\\udcffb" in out
    assert main(["ops", "show", f"{ns}::s", "--json"]) == 0
    schema = json.loads(capsys.readouterr().out)["schema"]
    assert "\udcff" in schema


def test_plugins_list_prints_a_non_ascii_op_name_on_an_ascii_stream():
    # the plugin fails (oplib refuses the name); its error, which quotes it, is printed
    code = (
        "import oplib_core as o\n"
        "from oplib_core.cli import main\n"
        "class P:\n"
        "    @o.hookimpl\n"
        "    def oplib_define(self, registrar):\n"
        "        registrar.define('nonascii::caf\\u00e9', '(Tensor x) -> Tensor')\n"
        "o.plugins.register(P(), name='caf\\u00e9-plugin')\n"
        "raise SystemExit(main(['plugins', 'list']))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "300"},
    )
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.decode("ascii").splitlines() if line.startswith("caf"))
    assert row.startswith("caf\\xe9-plugin") and "failed" in row


def test_plugins_list_survives_a_keyboard_interrupt_in_a_plugin(capsys, ns, monkeypatch):
    class Interrupting:
        @oplib.hookimpl
        def oplib_define(self, registrar):
            raise KeyboardInterrupt

    # a plugin interrupting the first load of the table; here: the load plugins_list asks for
    calls = []

    def interrupted_load():
        calls.append(1)
        plugins.register(Interrupting(), name=f"{ns}-ctrl-c")

    monkeypatch.setattr("oplib_core._introspect.plugin_rows", interrupted_load)
    try:
        code = main(["plugins", "list"])
    finally:
        if _plugin_host.HOST.records.get(f"{ns}-ctrl-c") is not None:
            plugins.unregister(f"{ns}-ctrl-c")
    captured = capsys.readouterr()
    assert calls and code == 1
    assert "cpu" in captured.out and "loaded" in captured.out  # what was known is printed
    assert captured.err.startswith(
        "oplib: loading the plugins was interrupted by KeyboardInterrupt"
    )
    assert captured.err.count("\n") == 1


def test_warnings_are_one_line(capsys):
    import warnings

    def warns(args: argparse.Namespace, out: Output) -> int:
        warnings.warn("oplib: plugin 'x' failed to load: boom", plugins.PluginWarning, stacklevel=1)
        return 0

    assert run(argparse.Namespace(fn=warns, debug=False), Output()) == 0
    assert capsys.readouterr().err == "oplib: PluginWarning: plugin 'x' failed to load: boom\n"


def test_plugins_list_when_an_installed_plugin_raises_keyboard_interrupt(tmp_path):
    """The real case: a distribution's entry point whose hook raises KeyboardInterrupt
    while the command loads the plugins (a distribution found on PYTHONPATH)."""
    (tmp_path / "ctrlc_plugin.py").write_text(
        "import oplib_core as oplib\n"
        "@oplib.hookimpl\n"
        "def oplib_define(registrar):\n"
        "    raise KeyboardInterrupt\n"
    )
    info = tmp_path / "ctrlc_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ctrlc-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[oplib]\nctrlc = ctrlc_plugin\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLIB_")}
    env.update(PYTHONPATH=str(tmp_path), OPLIB_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", "plugins", "list"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == (
        "oplib: loading the plugins was interrupted by KeyboardInterrupt (raised in plugin "
        "'ctrlc') and undone; nothing was loaded (OPLIB_DISABLE_PLUGINS=name skips a plugin)"
    )
    assert r.stdout.startswith("plugin ")  # the table of what was known is printed
