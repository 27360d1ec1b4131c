"""examples/native_ops the real way: pip builds its C library with the system compiler in a
fresh virtualenv, oplib finds the plugin through its entry point, the plugin loads the
library, and `oplib check` passes on its ops (slow; CI runs it). Twice: with oplib-core's
compiled fast call built, and with oplib-core installed where its build found no working C
compiler (``CC=false``), as from an sdist on such a machine: the same calls through the
generated Python fast call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oplib_core._dispatch import SLOW

from helpers import c_compiler

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["compiled", "no compiler"])
def venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if c_compiler() is None:
        pytest.skip("no C compiler (cc/gcc): building native-ops needs one; CI has gcc")
    where = tmp_path_factory.mktemp("native-venv")
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    pip += ["--disable-pip-version-check"]
    subprocess.run([*pip, "setuptools>=77", "wheel"], check=True)  # PEP 639 metadata
    # oplib-core provides oplib.h at build time, hence no build isolation.
    isolated = [*pip, "--no-build-isolation"]
    core, env = str(ROOT), None
    if request.param == "no compiler":  # from an sdist: the checkout holds built modules
        sdist = where / "sdist"
        build = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir"]
        subprocess.run([*build, str(sdist), str(ROOT)], check=True, capture_output=True)
        (core,) = map(str, sdist.glob("oplib_core-*.tar.gz"))
        env = {**os.environ, "CC": "false"}
    subprocess.run([*isolated, core, str(ROOT / "plugins" / "cpu")], check=True, env=env)
    subprocess.run([*isolated, str(ROOT / "examples" / "native_ops")], check=True)
    return where


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPLIB_CACHE_DIR": str(venv / "cache")}
    env.pop("PYTHONPATH", None)
    env.pop("OPLIB_NATIVE_SPEEDUPS", None)  # which build serves is what the venv says
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=venv)


def test_the_installed_plugin_loads_its_compiled_library(venv, request):
    script = textwrap.dedent("""
        import json, numpy as np, oplib_core as oplib, native_ops
        from oplib_core._native import _fastcall
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        f = oplib.classes.native_ops.Affine(2.0, 1.0)
        lo, hi = oplib.ops.native_ops.minmax(a)
        print(json.dumps({
            "lib": native_ops.library_path(),
            "loaded": sorted(oplib.ops.loaded_libraries),
            "sum": oplib.ops.native_ops.sum_dim(a, 0).tolist(),
            "tile": oplib.ops.native_ops.tile(a[:1, :2], [2, 1]).tolist(),
            "affine": oplib.ops.native_ops.apply_affine(f, a[0]).tolist(),
            "minmax": [float(lo), float(hi)],
            "origin": oplib.lookup("native_ops::sum_dim").kernel("cpu").origin.source,
            "plugin": oplib.lookup("native_ops::sum_dim").kernel("cpu").origin.plugin,
            "compiled": _fastcall.COMPILED is not None,
            "fast call": type(oplib.lookup("native_ops::minmax").kernel("cpu").fn.fast.call)
                .__name__,
        }))
    """)
    r = _run(venv, str(venv / "bin" / "python"), "-c", script)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["lib"].endswith("libnative_ops.so") and "site-packages" in out["lib"]
    assert out["loaded"] == [os.path.realpath(out["lib"])]
    assert out["sum"] == [12.0, 15.0, 18.0, 21.0]
    assert out["tile"] == [[0.0, 1.0], [0.0, 1.0]]
    assert out["affine"] == [1.0, 3.0, 5.0, 7.0]
    assert out["minmax"] == [0.0, 11.0]
    assert out["origin"] == os.path.realpath(out["lib"]) and out["plugin"] == "native_ops"
    compiled = request.node.callspec.params["venv"] == "compiled"
    assert out["compiled"] is compiled
    # (under OPLIB_DISPATCH_SLOW=1, which the venv inherits, no kernel has a fast call)
    assert out["fast call"] == ("FastCall" if compiled and not SLOW else "function")


def test_oplib_check_passes_on_the_native_ops(venv):
    ops = [f"native_ops::{n}" for n in ("scaled_add", "sum_dim", "tile", "apply_affine", "minmax")]
    r = _run(venv, str(venv / "bin" / "oplib"), "check", "--json", *ops)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    summary = report["summary"]
    assert summary["fail"] == 0 and summary["pass"] >= len(ops)
    passed = {
        row["op"]
        for row in report["results"]
        if row["status"] == "PASS" and row["check"] == "test_faketensor"
    }
    assert passed == set(ops)
