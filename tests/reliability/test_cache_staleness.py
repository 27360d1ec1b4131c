"""The start-up caches never give the table of another setting: each case where they went
stale, run as a user would, in fresh interpreters sharing one cache directory.

- a distribution visible only through ``sys.path[0]`` (the script's directory), whichever
  run comes first, and one added to or removed from it between runs;
- an ``entry_points.txt`` rewritten in place (same size, same modification time);
- a waiting plugin whose operators depend on an environment variable it declares
  (hook ``oplib_environment``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plugin_dists import write_dist

from oplib_core._registry.backend_cache import declared_environment

from subproc import run_python

PLUGIN = """
from oplib_core import hookimpl

@hookimpl
def oplib_define(registrar):
    registrar.define("{ns}::f(Tensor x) -> Tensor")
"""

TABLE = """
import warnings
warnings.simplefilter("ignore")
import numpy as np
import oplib_core as oplib
OUT["sin"] = oplib.ops.oplib.sin(np.zeros(1)).tolist()
OUT["plugins"] = {p.name: [p.status, p.entry_point] for p in oplib.plugins.list()}
"""


def on_path(site: Path) -> str:
    """``PYTHONPATH`` with ``site`` first (the rest kept: it may say where oplib is)."""
    return os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)


def table(cwd: Path, cache: Path, **env: str) -> dict[str, Any]:
    out = run_python(TABLE, {"OPLIB_CACHE_DIR": str(cache), **env}, cwd=cwd)
    assert out["sin"] == [0.0] and out["plugins"]["cpu"][0] == "loaded"
    return out["plugins"]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A directory holding the acme distribution, one without, and a cache directory."""
    with_acme, without = tmp_path / "with", tmp_path / "without"
    write_dist(with_acme, "acme-dist", "acme", PLUGIN.format(ns="acme"))
    without.mkdir()
    return with_acme, without, tmp_path / "cache"


# -- sys.path[0] -------------------------------------------------------------------------
@pytest.mark.parametrize("first", ["with", "without"])
def test_a_distribution_in_the_scripts_directory_is_seen_there_only(
    dirs: tuple[Path, Path, Path], first: str
) -> None:
    with_acme, without, cache = dirs
    order = [with_acme, without] if first == "with" else [without, with_acme]
    for _ in range(2):  # each run once cold, once from the cache
        for cwd in order:
            plugins = table(cwd, cache)
            if cwd == with_acme:
                assert plugins["acme"] == ["loaded", "acme"]
            else:
                assert "acme" not in plugins


def test_a_script_run_from_another_directory_sees_its_own_distributions(
    dirs: tuple[Path, Path, Path],
) -> None:
    # a script file: sys.path[0] is its directory, whatever the working directory
    with_acme, without, cache = dirs
    script = "import json\nOUT = {}\n" + TABLE + "\nprint(json.dumps(OUT))\n"
    for where in (with_acme, without):
        (where / "show.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLIB_")}
    env["OPLIB_CACHE_DIR"] = str(cache)
    for _ in range(2):
        for where in (with_acme, without, with_acme):
            proc = subprocess.run(
                [sys.executable, str(where / "show.py")],
                cwd=without,  # the same working directory each time
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            out = json.loads(proc.stdout.splitlines()[-1])
            assert out["sin"] == [0.0] and out["plugins"]["cpu"][0] == "loaded"
            assert ("acme" in out["plugins"]) == (where == with_acme), where


def test_a_distribution_added_to_and_removed_from_the_scripts_directory(
    dirs: tuple[Path, Path, Path],
) -> None:
    with_acme, without, cache = dirs
    assert "acme" not in table(without, cache)
    assert "acme" not in table(without, cache)  # cached
    for name in ("acme.py", "acme_dist-0.1.dist-info"):
        shutil.move(with_acme / name, without / name)
    assert table(without, cache)["acme"] == ["loaded", "acme"]
    assert table(without, cache)["acme"] == ["loaded", "acme"]  # cached
    shutil.rmtree(without / "acme_dist-0.1.dist-info")
    assert "acme" not in table(without, cache)


# -- entry_points.txt --------------------------------------------------------------------
def test_an_entry_points_file_rewritten_in_place(tmp_path: Path) -> None:
    site, cwd, cache = tmp_path / "site", tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    write_dist(site, "acme-dist", "acme_one", PLUGIN.format(ns="acme"), entry_point="acme")
    (site / "acme_two.py").write_text(PLUGIN.format(ns="acme"))
    env = {"PYTHONPATH": on_path(site)}
    assert table(cwd, cache, **env)["acme"] == ["loaded", "acme_one"]
    assert table(cwd, cache, **env)["acme"] == ["loaded", "acme_one"]  # cached

    text = site / "acme_dist-0.1.dist-info" / "entry_points.txt"
    before = {p: os.stat(p) for p in (site, text.parent, text)}
    # rewritten in place: same size, and every modification time put back
    with open(text, "r+") as f:
        old = f.read()
        f.seek(0)
        f.write(old.replace("acme_one", "acme_two"))
    with open(text, "a") as f:
        f.write("[oplib]\nacme2 = acme_one\n")
    for p, st in before.items():
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert all(os.stat(p).st_mtime_ns == st.st_mtime_ns for p, st in before.items())

    for _ in range(2):
        plugins = table(cwd, cache, **env)
        assert plugins["acme"][1] == "acme_two"
        assert plugins["acme2"][1] == "acme_one"


# -- a waiting plugin's own environment ---------------------------------------------------
WAITING_PLUGIN = '''
import os
import numpy as np
from oplib_core import BackendSpec, hookimpl

class AcmeArray(np.ndarray):
    """The acme device's arrays (host memory, for the test)."""

SPEC = BackendSpec(name="acme", array_types=(AcmeArray,), key="Acme", priority=1,
                   to_host=lambda a: np.asarray(a).view(np.ndarray),
                   from_host=lambda a, d: a.view(AcmeArray))

@hookimpl
def oplib_environment():
    return ["ACME_MODE"]

@hookimpl
def oplib_backends():
    return [SPEC]

@hookimpl
def oplib_define(registrar):
    # what is defined depends on the variable
    registrar.define(f"acme::{os.environ.get('ACME_MODE', 'unset')}(Tensor x) -> Tensor")

@hookimpl
def oplib_impl(registrar):
    mode = os.environ.get("ACME_MODE", "unset")
    registrar.impl(f"acme::{mode}", "Acme", lambda x: x)
'''

ACME_OPS = """
import warnings
warnings.simplefilter("ignore")
import numpy as np
import oplib_core as oplib
from oplib_core import _plugin_host
oplib.ops.oplib.sin(np.zeros(1))
OUT["waiting"] = sorted(_plugin_host.HOST.deferred)
OUT["listed"] = sorted(n for n in dir(oplib.ops.acme) if not n.startswith("_"))
OUT["status"] = _plugin_host.HOST.records["acme"].status
"""


def test_a_waiting_plugin_is_recorded_again_when_its_declared_variable_changes(
    tmp_path: Path,
) -> None:
    site, cwd, cache = tmp_path / "site", tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    write_dist(site, "acme-dist", "acme_backend", WAITING_PLUGIN, entry_point="acme")

    def ops(mode: str | None) -> dict[str, Any]:
        env = {"OPLIB_CACHE_DIR": str(cache), "PYTHONPATH": on_path(site)}
        if mode is not None:
            env["ACME_MODE"] = mode
        return run_python(ACME_OPS, env, cwd=cwd)

    assert ops("fast")["listed"] == ["fast"]  # cold: loaded, recorded
    warm = ops("fast")
    assert "acme" in warm["waiting"] and warm["status"] == "deferred"  # it does wait
    assert warm["listed"] == ["fast"]
    for mode, expected in [("slow", ["slow"]), (None, ["unset"]), ("fast", ["fast"])]:
        changed = ops(mode)
        assert changed["listed"] == expected, mode  # not the recorded setting's
        assert "acme" not in changed["waiting"]  # loaded, and recorded again
        again = ops(mode)
        assert again["listed"] == expected and "acme" in again["waiting"], mode


def test_a_plugin_whose_environment_hook_fails_never_waits(tmp_path: Path) -> None:
    site, cwd, cache = tmp_path / "site", tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    broken = WAITING_PLUGIN.replace('return ["ACME_MODE"]', 'return "ACME_MODE"')
    write_dist(site, "acme-dist", "acme_backend", broken, entry_point="acme")
    env = {"OPLIB_CACHE_DIR": str(cache), "PYTHONPATH": on_path(site), "ACME_MODE": "fast"}
    for _ in range(2):
        out = run_python(ACME_OPS, env, cwd=cwd)
        assert out["status"] == "loaded" and out["listed"] == ["fast"]
    assert "acme" not in out["waiting"] and "meta" in out["waiting"]


def test_the_declared_environment_is_names_and_their_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACME_A", "1")
    monkeypatch.delenv("ACME_B", raising=False)
    hooks = [lambda: ["ACME_B", "ACME_A"], lambda: ("ACME_A",)]
    assert declared_environment(hooks) == (("ACME_A", "1"), ("ACME_B", None))
    assert declared_environment([]) == ()

    def raises() -> list[str]:
        raise RuntimeError("broken hook")

    for bad in (lambda: "ACME_A", lambda: [1], lambda: None, raises):
        assert declared_environment([bad]) is None
