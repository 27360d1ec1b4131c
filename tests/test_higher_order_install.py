"""A third-party distribution, pip-installed into a fresh virtualenv, defines a
higher-order operator and handlers for backends it does not own (slow; CI runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_real_install import _write_dist

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

PLUGIN = """
from oplib_core import hookimpl


def twice(f, x):
    return f(f(x))


@hookimpl
def oplib_define(registrar):
    registrar.define_higher_order("acme_twice")


@hookimpl
def oplib_impl(registrar):
    registrar.py_impl("acme_twice", "cpu", twice)  # the cpu backend is oplib-cpu's
    registrar.py_impl("acme_twice", "cuda", twice)  # not installed here: kept, waiting
    registrar.py_impl("higher_order::map", "privateuse1", lambda f, xs, args: "acme map")
"""

CHECK = """
import json
import numpy as np
import oplib_core as oplib
from oplib_core._introspect import op_detail, op_rows

hop = oplib.ops.higher_order.acme_twice
detail = op_detail("higher_order::acme_twice")
print(json.dumps({
    "out": hop(lambda a: a * 3.0, np.ones(2)).tolist(),
    "plugin": hop.origin.plugin,
    "distribution": hop.origin.distribution,
    "handlers": {
        k["key"]: [k["plugin"], k["distribution"], k["status"]] for k in detail["kernels"]
    },
    "row": [r for r in op_rows("higher_order") if r["qualname"] == "higher_order::acme_twice"],
    "map_pu": oplib.ops.higher_order.map.handler("privateuse1").origin.plugin,
}))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("hopvenv")
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    dist = _write_dist(tmp_path_factory.mktemp("acme_hops"), "acme-hops", "oplib-core", PLUGIN)
    py = str(where / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "setuptools>=77", "wheel"], check=True)  # PEP 639 metadata
    pip.append("--no-build-isolation")
    # the third-party plugin first, then the backend whose key it gives a handler for
    subprocess.run([*pip, str(ROOT)], check=True)
    subprocess.run([*pip, str(dist)], check=True)
    subprocess.run([*pip, str(ROOT / "plugins" / "cpu")], check=True)
    return where


def test_installed_plugin_defines_a_hop_with_handlers_for_backends_it_does_not_own(venv):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OPLIB_CACHE_DIR"] = str(venv / "cache")
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", CHECK],
        capture_output=True,
        text=True,
        env=env,
        cwd=venv,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["out"] == [9.0, 9.0]
    assert got["plugin"] == "acme_hops" and got["distribution"] == "acme-hops"
    assert got["handlers"] == {
        "cpu": ["acme_hops", "acme-hops", "live"],
        "cuda": ["acme_hops", "acme-hops", "waiting"],
    }
    assert got["row"] == [
        {
            "kind": "hop",
            "qualname": "higher_order::acme_twice",
            "schema": "acme_twice(*args, **kwargs)",
            "keys": ["cpu", "cuda"],
            "fake": False,
            "autograd": False,
            "tags": [],
        }
    ]
    assert got["map_pu"] == "acme_hops"
