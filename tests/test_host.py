"""A stack always has a host: every backend plugin but cpu's own depends on oplib-cpu, and
core names oplib-cpu when numpy arrays meet an installation without it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from subproc import run_python

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))


@pytest.mark.parametrize("plugin", [p for p in PLUGINS if p != "cpu"])
def test_every_backend_plugin_depends_on_oplib_cpu(plugin):
    project = tomllib.loads((ROOT / "plugins" / plugin / "pyproject.toml").read_text())
    # the plugin's setup.py lists its dependencies (the oplib pins come from the version)
    told = runpy.run_path(str(ROOT / "plugins" / plugin / "setup.py"), run_name="requirements")
    deps = [d.replace(" ", "") for d in told["REQUIRES"]]
    assert any(d.startswith("oplib-cpu") for d in deps), (
        f"plugins/{plugin} must depend on oplib-cpu (pip install {project['project']['name']} "
        "alone must give a working cpu)"
    )
    (core,) = [d for d in deps if d.startswith("oplib-core")]
    assert "oplib-cpu" + core.removeprefix("oplib-core") in deps  # the same range as oplib-core


def test_missing_cpu_backend_is_named_instead_of_no_overload_matches():
    out = run_python(
        """
        import numpy as np
        import oplib_core as oplib
        a = np.ones(2)
        OUT["packet"] = catch(oplib.ops.oplib.add, a, a)
        OUT["overload"] = catch(oplib.ops.oplib.neg, a)
        OUT["list"] = catch(oplib.ops.oplib.cat, [a, a])
        OUT["factory"] = catch(oplib.zeros, 2)
        OUT["tensor"] = catch(oplib.tensor, [1.0])
        OUT["other"] = catch(oplib.ops.oplib.neg, "text")
        """,
        env={"OPLIB_DISABLE_PLUGINS": "cpu"},
    )
    for key in ("packet", "overload", "list", "factory", "tensor"):
        kind, message = out[key]
        assert kind == "BackendError", (key, out[key])
        assert "the cpu backend (oplib-cpu) is not installed" in message
        assert "pip install oplib-cpu" in message
    assert out["packet"][1].startswith("oplib::add()")
    kind, message = out["other"]  # not an array: the ordinary argument error
    assert kind == "CallArgumentError" and "must be Tensor" in message
