"""Plugins the real way: distributions with entry points pip-installed into a fresh
virtualenv, discovered by a fresh interpreter (slow; CI runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _write_dist(where: Path, name: str, requires: str, plugin_body: str) -> Path:
    pkg = name.replace("-", "_")
    (where / pkg).mkdir(parents=True)
    (where / pkg / "__init__.py").write_text("")
    (where / pkg / "plugin.py").write_text(textwrap.dedent(plugin_body))
    (where / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "0.0.1"
        dependencies = ["{requires}"]
        [project.entry-points.oplib]
        {pkg} = "{pkg}.plugin"
        [tool.setuptools]
        packages = ["{pkg}"]
    """)
    )
    return where


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    py = where / "bin" / "python"
    pip = [
        str(py),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-build-isolation",
    ]
    subprocess.run([*pip[:-1], "setuptools>=77", "wheel"], check=True)
    # Install order on purpose: the third-party plugin before the CPU backend it targets.
    subprocess.run([*pip, str(ROOT)], check=True)
    subprocess.run([*pip, str(ROOT / "examples" / "acme_plugin")], check=True)
    subprocess.run([*pip, str(ROOT / "plugins" / "cpu")], check=True)
    extra = tmp_path_factory.mktemp("dists")
    future = _write_dist(
        extra / "future",
        "future-plugin",
        "oplib-core>=9",
        "raise AssertionError('an incompatible plugin must not be imported')\n",
    )
    broken = _write_dist(
        extra / "broken", "broken-plugin", "oplib-core", "import a_module_that_does_not_exist\n"
    )
    subprocess.run([*pip, "--no-deps", str(future), str(broken)], check=True)
    return where


def _run(venv: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OPLIB_CACHE_DIR": str(venv / "cache"), **(env or {})}
    full_env.pop("PYTHONPATH", None)
    return subprocess.run(args, capture_output=True, text=True, env=full_env, cwd=venv)


def test_third_party_op_works_after_import(venv: Path) -> None:
    script = textwrap.dedent("""
        import numpy as np, oplib_core as oplib
        out = oplib.ops.acme.scaled_add(np.ones(3), np.arange(3.0), alpha=2.0)
        print(out.tolist())
        print(oplib.ops.acme.scaled_add(oplib.tensor([1.0]), oplib.tensor([1.0])).tolist())
    """)
    r = _run(venv, str(venv / "bin" / "python"), "-W", "ignore", "-c", script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[1.0, 3.0, 5.0]", "[2.0]"]


def test_plugins_list_json_reports_each_plugin(venv: Path) -> None:
    r = _run(venv, str(venv / "bin" / "oplib"), "plugins", "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = {p["name"]: p for p in json.loads(r.stdout)}
    assert rows["acme"]["status"] == "loaded"
    assert rows["acme"]["distribution"] == "acme-ops" and rows["acme"]["version"] == "1.2.0"
    assert rows["acme"]["hooks"] == ["oplib_define", "oplib_impl", "oplib_register_fake"]
    assert rows["acme"]["module"].endswith(os.path.join("acme_ops", "plugin.py"))
    assert rows["cpu"]["status"] == "loaded"
    assert rows["future_plugin"]["status"] == "incompatible"
    assert rows["future_plugin"]["error"] == (
        "incompatible: needs oplib-core>=9, have oplib-core 0.1.0"
    )
    assert rows["broken_plugin"]["status"] == "failed"
    assert "ModuleNotFoundError" in rows["broken_plugin"]["error"]
    assert "a_module_that_does_not_exist" in rows["broken_plugin"]["traceback"]
    assert set(rows["acme"]) >= {
        "name",
        "distribution",
        "version",
        "module",
        "hooks",
        "status",
        "error",
        "load_ms",
    }


def test_ops_show_names_origins_and_waiting_kernel(venv: Path) -> None:
    r = _run(venv, str(venv / "bin" / "oplib"), "ops", "show", "acme::scaled_add", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    kernels = {k["key"]: k for k in d["kernels"]}
    assert kernels["cpu"]["status"] == "live" and kernels["cpu"]["distribution"] == "acme-ops"
    assert kernels["cuda"]["status"] == "waiting"
    assert kernels["cpu"]["source"].split(":")[0].endswith("plugin.py")
    assert d["fake"]["plugin"] == "acme"


def test_disable_and_autoload_controls(venv: Path) -> None:
    oplib = str(venv / "bin" / "oplib")
    r = _run(venv, oplib, "plugins", "list", "--json", env={"OPLIB_DISABLE_PLUGINS": "acme"})
    rows = {p["name"]: p for p in json.loads(r.stdout)}
    assert rows["acme"]["status"] == "blocked"
    r = _run(
        venv,
        oplib,
        "ops",
        "list",
        "--namespace",
        "acme",
        "--json",
        env={"OPLIB_DISABLE_PLUGINS": "acme"},
    )
    # its namespace is gone with it: an unknown name for the CLI (exit 2)
    assert r.returncode == 2 and "oplib: no namespace 'acme'" in r.stderr
    r = _run(venv, oplib, "plugins", "list", "--json", env={"OPLIB_PLUGINS_AUTOLOAD": "0"})
    # only the built-in plugins of oplib-core itself; no entry point was loaded
    rows = json.loads(r.stdout)
    assert rows and all(p["entry_point"] is None for p in rows)
    assert {p["distribution"] for p in rows} == {"oplib-core"}
    assert "cpu" not in {p["name"] for p in rows} and "acme" not in {p["name"] for p in rows}


def test_backends_list_never_crashes_because_of_a_plugin(venv: Path) -> None:
    r = _run(venv, str(venv / "bin" / "oplib"), "backends", "list")
    assert r.returncode == 0, r.stderr
    assert "cpu" in r.stdout and "oplib-cpu 0.1.0" in r.stdout
    assert "plugin 'broken_plugin'" in r.stdout


def test_entry_point_cache_sees_a_new_install(venv: Path, tmp_path: Path) -> None:
    py = str(venv / "bin" / "python")
    code = "import oplib_core; print(sorted(r.name for r in oplib_core.plugins.list()))"
    before = _run(venv, py, "-W", "ignore", "-c", code).stdout
    assert "late_plugin" not in before
    late = _write_dist(
        tmp_path / "late",
        "late-plugin",
        "oplib-core",
        "import oplib_core\n"
        "@oplib_core.hookimpl\n"
        "def oplib_define(registrar):\n"
        "    registrar.define('late::op', '(Tensor x) -> Tensor')\n",
    )
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(late)],
        check=True,
    )
    after = _run(venv, py, "-W", "ignore", "-c", code).stdout
    assert "late_plugin" in after
    subprocess.run([py, "-m", "pip", "uninstall", "-q", "-y", "late-plugin"], check=True)
    gone = _run(venv, py, "-W", "ignore", "-c", code).stdout
    assert "late_plugin" not in gone


TILE_PLUGIN = """
import numpy as np
from oplib_core import BackendSpec, hookimpl

class TileArray(np.ndarray):
    \"\"\"The tile device's arrays (host memory, for the test).\"\"\"

SPEC = BackendSpec(
    name="tile",
    array_types=(TileArray,),
    priority=1,  # over cpu, whose numpy arrays these are too
    to_host=lambda a: np.asarray(a).view(np.ndarray),
    from_host=lambda a, d: a.view(TileArray),
)

@hookimpl
def oplib_backends():
    return [SPEC]

@hookimpl
def oplib_impl(registrar):
    registrar.impl("oplib::neg", "tile", lambda x: np.negative(x.view(np.ndarray)).view(TileArray))
"""


def test_an_installed_backend_only_plugin_waits_for_its_backend(venv: Path, tmp_path: Path) -> None:
    py = str(venv / "bin" / "python")
    tile = _write_dist(tmp_path / "tile", "tile-backend", "oplib-core", TILE_PLUGIN)
    pip = [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, str(tile)], check=True)
    code = textwrap.dedent("""
        import sys, json, numpy as np, oplib_core as oplib
        oplib.ops.oplib.neg(np.ones(1))
        before = "tile_backend.plugin" in sys.modules
        from tile_backend.plugin import TileArray
        y = oplib.ops.oplib.neg(np.ones(2).view(TileArray))
        print(json.dumps([before, type(y).__name__, y.tolist()]))
    """)
    env = {"OPLIB_CACHE_DIR": str(tmp_path / "cache")}
    try:
        runs = [_run(venv, py, "-W", "ignore", "-c", code, env=env) for _ in range(2)]
        for r in runs:
            assert r.returncode == 0, r.stderr
        cold, warm = (json.loads(r.stdout) for r in runs)
        assert cold == [True, "TileArray", [-1.0, -1.0]]  # first start-up: everything loads
        assert warm == [False, "TileArray", [-1.0, -1.0]]  # then it waits for a tile array
    finally:
        subprocess.run([py, "-m", "pip", "uninstall", "-q", "-y", "tile-backend"], check=True)
