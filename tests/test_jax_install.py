"""oplib-jax built as a wheel and installed for real into a fresh virtualenv, with oplib-core,
oplib-cpu and jax[cpu], then discovered by a fresh interpreter (slow; CI runs it)."""

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


def test_wheel_installs_and_runs_an_op(tmp_path):
    wheels = tmp_path / "wheels"
    pip_env = {**os.environ}
    pip_env.pop("PYTHONPATH", None)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(ROOT / "plugins" / "jax")],
        check=True, timeout=300, env=pip_env,
    )  # fmt: skip
    (wheel,) = wheels.glob("oplib_jax-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "setuptools>=77", "wheel"], check=True, timeout=300, env=pip_env)
    subprocess.run(
        [*pip, "--no-build-isolation", str(ROOT), str(ROOT / "plugins" / "cpu"), f"{wheel}[cpu]"],
        check=True, timeout=900, env=pip_env,
    )  # fmt: skip
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
    env = {k: v for k, v in pip_env.items() if not k.startswith("OPLIB_")}
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
