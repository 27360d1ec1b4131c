"""Start-up must stay light: no heavy array library is imported by ``import oplib_core``."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("cupy", "dask", "distributed", "torch", "jax")


def test_import_loads_plugins_but_no_heavy_library():
    code = (
        "import sys, json, oplib_core\n"
        "print(json.dumps({'modules': sorted(m.split('.')[0] for m in sys.modules),"
        " 'plugins': [p.name for p in oplib_core.plugins.list() if p.status == 'loaded']}))"
    )
    r = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True
    )
    data = json.loads(r.stdout)
    assert "cpu" in data["plugins"]
    assert not [m for m in HEAVY if m in data["modules"]]


def test_warm_start_does_not_scan_distribution_metadata(tmp_path):
    env = {"OPLIB_CACHE_DIR": str(tmp_path)}
    code = "import sys, oplib_core; print('importlib.metadata' in sys.modules)"

    def run():
        import os

        r = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        return r.stdout.strip()

    assert run() == "True"  # cold: the entry points are scanned and cached
    assert run() == "False"  # warm: read from the cache, importlib.metadata never imported


def test_explain_and_cli_modules_are_not_imported_at_start_up():
    code = "import sys, oplib_core; print('oplib_core.cli' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_cache_survives_changes_in_the_current_directory(tmp_path):
    import os

    env = {**os.environ, "OPLIB_CACHE_DIR": str(tmp_path / "cache")}
    work = tmp_path / "project"
    work.mkdir()
    code = "import sys, oplib_core; print('importlib.metadata' in sys.modules)"

    def run():
        r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                           text=True, check=True, env=env, cwd=work)
        return r.stdout.strip()

    run()
    (work / "new_file.txt").write_text("the project directory changed")
    assert run() == "False"  # still a cache hit
