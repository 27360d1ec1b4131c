"""The vendor template renamed is whole (issue 32, item 6): ``plugins/privateuse/`` copied and
renamed by the very lines ``docs/writing-a-backend.md`` gives ("Renaming the template"),
pip-installed for real (built into a wheel, discovered by its entry point) into a fresh
virtualenv, answers to its new name everywhere: the device module and ``set_device``, the
errors, the generated ``Tensor`` methods, its own operators, next to ``oplib-privateuse``
(slow; CI runs it).

The fresh virtualenv sees this checkout's oplib-core, oplib-cpu and oplib-privateuse through
the project's environment (``site.addsitedir``), so only the renamed copy is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "writing-a-backend.md"
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTHON"))}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the docs' rename steps need bash"),
]


def _rename_steps() -> str:
    """The shell lines of the docs' rename, without the final ``pip install`` (the test
    installs into its own virtualenv)."""
    text = DOC.read_text()
    found = re.search(
        r"<!-- rename: start -->\n```bash\n(.*?)```\n<!-- rename: end -->", text, re.S
    )
    assert found, "docs/writing-a-backend.md lost its rename block"
    lines = found.group(1).splitlines()
    assert lines[-1] == "pip install .", lines
    return "\n".join(lines[:-1])


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("rename")
    checkout = where / "checkout"
    shutil.copytree(
        ROOT / "plugins" / "privateuse",
        checkout / "plugins" / "privateuse",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"),
        symlinks=True,  # as a clone has it: the build helper is a link into plugins/
    )
    shutil.copy2(ROOT / "plugins" / "oplib_plugin_build.py", checkout / "plugins")
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _rename_steps()],
        cwd=checkout,
        check=True,
        timeout=60,
        env=ENV,
    )
    copy = checkout / "oplib-myaccel"
    assert (copy / "oplib_myaccel" / "name.py").read_text().count('NAME: str = "myaccel"') == 1
    env_dir = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=120)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    project_site = sysconfig.get_paths()["purelib"]  # oplib-core & co, editable, and numpy
    Path(site, "oplib_project.pth").write_text(f"import site; site.addsitedir({project_site!r})\n")
    pip = [str(py), "-m", "pip", "-q", "--disable-pip-version-check"]
    # the project's setuptools (>= 77, PEP 639 licenses) builds it, not the one venv bundles
    subprocess.run([*pip, "uninstall", "-y", "setuptools"], check=False, timeout=120, env=ENV)
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-build-isolation", str(copy)],
        check=True,
        timeout=300,
        env=ENV,
        cwd=where,
    )
    return py


_SCRIPT = """
import json
import numpy as np
import oplib_core as oplib
from oplib_core.backend_registration import privateuse1_backend_name

def catch(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None

out = {}
records = {r.name: r for r in oplib.plugins.list()}
out["plugins"] = {n: [r.status, r.distribution] for n, r in records.items()
                  if n in ("myaccel", "privateuse")}
import oplib_myaccel.plugin
out["installed_at"] = oplib_myaccel.plugin.__file__
backend = oplib.backends.get("myaccel")
out["backend"] = [backend.name, backend.key, backend.device_count(), backend.status()]
oplib.myaccel.set_device("myaccel:1")
out["current"] = oplib.myaccel.current_device()
t = oplib.tensor(np.arange(3.0, dtype=np.float32), device="myaccel")
out["device"] = str(t.device)
out["is"] = [t.is_myaccel, oplib.ones(2).is_myaccel, hasattr(t, "is_privateuse1")]
out["moved"] = str(oplib.ones(2).myaccel(0).device)
out["sum"] = float((t * t).sum().item())
out["rand"] = str(oplib.ops.myaccel.rand([2], device="myaccel").device)
out["bad_index"] = catch(oplib.ones, 2, device="myaccel:7")
out["wrong_type"] = catch(oplib.myaccel.set_device, "privateuse1:0")
out["slot"] = [privateuse1_backend_name(), str(oplib.ones(2, device="privateuse1").device)]
from oplib_core.cli import main
out["check"] = main(["check", "--backend", "myaccel", "oplib::mul", "oplib::sum"])
print(json.dumps(out))
"""


def _run(py: Path, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [str(py), "-W", "ignore", "-c", _SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        # its own entry-point cache, not the user's
        env={**ENV, "OPLIB_CACHE_DIR": str(py.parent.parent / "cache"), **(env or {})},
        cwd=py.parent,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_renamed_template_answers_to_its_name(venv: Path) -> None:
    out = _run(venv)
    assert out["plugins"] == {
        "myaccel": ["loaded", "oplib-myaccel"],
        "privateuse": ["loaded", "oplib-privateuse"],
    }, out["plugins"]
    assert "site-packages" in out["installed_at"], out["installed_at"]  # not the source tree
    assert out["backend"] == ["myaccel", "Myaccel", 2, None]
    assert out["current"] == 1
    assert out["device"] == "myaccel:1"  # the current device
    assert out["is"] == [True, False, False]
    assert out["moved"] == "myaccel:0"
    assert out["sum"] == 5.0
    assert out["rand"] == "myaccel:1"
    kind, message = out["bad_index"]
    assert kind == "BackendError", message
    assert "myaccel:7 does not exist: there are 2 myaccel devices" in message, message
    assert "OPLIB_MYACCEL_DEVICES" in message and "privateuse1" not in message, message
    kind, message = out["wrong_type"]
    assert kind == "InvalidDeviceError", message
    assert "must be myaccel device" in message, message
    # the slot is still oplib-privateuse's, under its own name
    assert out["slot"] == ["privateuse1", "privateuse1:0"]
    assert out["check"] == 0  # opcheck passes on the renamed device


def test_the_renamed_template_reads_its_own_device_count(venv: Path) -> None:
    out = _run(venv, env={"OPLIB_MYACCEL_DEVICES": "8", "OPLIB_PRIVATEUSE1_DEVICES": "1"})
    assert out["backend"][2] == 8
    assert out["bad_index"] is None  # device 7 exists now
