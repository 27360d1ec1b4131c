"""oplib-jax built as a wheel and installed for real into a fresh virtualenv, with oplib-core,
oplib-cpu and jax[cpu], then discovered by a fresh interpreter (slow; CI runs it)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from helpers import venv_env, venv_with_plugin

pytestmark = pytest.mark.slow


def test_wheel_installs_and_runs_an_op(tmp_path):
    py = venv_with_plugin(tmp_path, "jax", "cpu")
    script = textwrap.dedent("""
        import json, jax, oplib_core as oplib
        x = oplib.tensor([1.0, 2.0], device="jax", requires_grad=True)
        (x * 3.0).sum().backward()
        b = oplib.backends.get("jax")
        print(json.dumps({
            "distribution": b.distribution,
            "device": str(x.device),
            "array": type(x.detach()._data).__module__.split(".")[0],
            "grad": x.grad.to("cpu").numpy().tolist(),
            "x64": jax.config.jax_enable_x64,
        }))
    """)
    env = venv_env()
    proc = subprocess.run(
        [py, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "distribution": "oplib-jax",
        "device": "jax:0",
        "array": "jaxlib",
        "grad": [3.0, 3.0],
        "x64": False,
    }
