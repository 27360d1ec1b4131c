"""Vendor templates and the host, installed for real into fresh virtualenvs from wheels:

- two distributions copied from ``plugins/privateuse/`` that both rename the private-use
  slot, next to ``oplib-privateuse``: a conflict naming both, and nothing of theirs left on
  the slot;
- ``pip install oplib-cuda`` alone gives a working cpu (the dependency on oplib-cpu).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTHON"))}

pytestmark = pytest.mark.slow


def _copy_template(where: Path, dist: str, package: str, device: str) -> Path:
    """``plugins/privateuse`` as a vendor copies it: another distribution and package whose
    plugin renames the slot to ``device`` in ``oplib_backends``."""
    target = where / dist
    shutil.copytree(
        ROOT / "plugins" / "privateuse",
        target,
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"),
    )
    (target / "oplib_privateuse").rename(target / package)
    for path in target.rglob("*"):
        if path.suffix in (".py", ".toml", ".md") and path.is_file():
            text = path.read_text().replace("oplib_privateuse", package)
            text = text.replace("oplib-privateuse", dist)
            path.write_text(text)
    pyproject = target / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            f'privateuse = "{package}.plugin"', f'{package} = "{package}.plugin"'
        )
    )
    plugin = target / package / "plugin.py"
    text = plugin.read_text()
    text = text.replace(
        "from oplib_core import BackendSpec,",
        "from oplib_core import rename_privateuse1_backend\nfrom oplib_core import BackendSpec,",
    )
    text = text.replace(
        "def oplib_backends() -> list[BackendSpec]:\n    return [SPEC]",
        f"def oplib_backends() -> list[BackendSpec]:\n"
        f"    rename_privateuse1_backend({device!r})\n    return [SPEC]",
    )
    assert f"rename_privateuse1_backend({device!r})" in text
    plugin.write_text(text)
    return target


def _core_requirements() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [*deps, "wheel", "setuptools>=77"]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("vendors")
    wheels = where / "wheels"
    a = _copy_template(where, "vendor-a", "vendor_a", "accela")
    b = _copy_template(where, "vendor-b", "vendor_b", "accelb")
    sources = [ROOT, *(ROOT / "plugins" / p for p in ("cpu", "cuda", "privateuse")), a, b]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            *map(str, sources),
        ],
        check=True,
        timeout=300,
        env=ENV,
        cwd=where,
    )
    return wheels


def _venv(where: Path, wheels: Path, *dists: str) -> Path:
    """A fresh virtualenv (system site packages: numpy) with core's requirements from the
    index and ``dists`` from the wheels only, with their dependencies."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(where)], check=True, timeout=60
    )
    py = where / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *_core_requirements()], check=True, timeout=300, env=ENV)
    subprocess.run(
        [*pip, "--no-index", "--find-links", str(wheels), *dists],
        check=True,
        timeout=300,
        env=ENV,
    )
    return py


def _run(py: Path, code: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [str(py), "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**ENV, **(env or {})},
        cwd=py.parent,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_REPORT = """
import json
import oplib_core as oplib
from oplib_core import backend_registration as br
records = {r.name: r for r in oplib.plugins.list()}
x = oplib.tensor([1.0, 2.0], device=br.privateuse1_backend_name())
print(json.dumps({
    "status": {n: r.status for n, r in records.items()},
    "errors": {n: r.error for n, r in records.items()},
    "name": br.privateuse1_backend_name(),
    "distribution": oplib.backends.get(br.privateuse1_backend_name()).distribution,
    "methods": [n for n in ("accela", "accelb") if hasattr(oplib.Tensor, n)],
    "device": str(x.device),
    "sum": float((x + x).to("cpu").numpy().sum()),
}))
"""


def test_two_template_copies_renaming_the_slot(wheelhouse: Path, tmp_path: Path):
    py = _venv(tmp_path / "venv", wheelhouse, "vendor-a", "vendor-b", "oplib-privateuse")
    out = _run(py, _REPORT)
    assert out["status"]["vendor_a"] == out["status"]["vendor_b"] == "failed"
    for name in ("vendor_a", "vendor_b"):
        assert "vendor-a" in out["errors"][name] and "vendor-b" in out["errors"][name]
    assert out["status"]["privateuse"] == "loaded"
    # nothing of theirs is left on the slot: the template's device keeps its name
    assert out["name"] == "privateuse1" and out["distribution"] == "oplib-privateuse"
    assert out["methods"] == []
    assert out["device"] == "privateuse1:0" and out["sum"] == 6.0

    # one copy next to oplib-privateuse: it loses the backend, and its rename goes with it
    alone = _run(py, _REPORT, env={"OPLIB_DISABLE_PLUGINS": "vendor_b"})
    assert alone["status"]["vendor_a"] == "failed"
    assert "oplib-privateuse" in alone["errors"]["vendor_a"]
    assert alone["name"] == "privateuse1" and alone["device"] == "privateuse1:0"

    # one copy alone: the vendor's device, under its name
    mine = _run(py, _REPORT, env={"OPLIB_DISABLE_PLUGINS": "vendor_b,privateuse"})
    assert mine["status"]["vendor_a"] == "loaded", mine["errors"]
    assert mine["name"] == "accela" and mine["distribution"] == "vendor-a"
    assert mine["device"] == "accela:0" and mine["sum"] == 6.0

    listing = subprocess.run(
        [str(py.parent / "oplib"), "plugins", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV, "COLUMNS": "300"},
        check=True,
    )
    assert re.search(r"vendor_a .*failed.*vendor-b", listing.stdout)


def test_installing_an_accelerator_alone_gives_a_cpu(wheelhouse: Path, tmp_path: Path):
    py = _venv(tmp_path / "venv", wheelhouse, "oplib-cuda")
    out = _run(
        py,
        "import json, importlib.metadata as md\n"
        "import oplib_core as oplib\n"
        "t = oplib.tensor([1.0, 2.0])\n"
        "print(json.dumps({'device': str(t.device), 'sum': float((t + t).sum().item()),\n"
        "  'cpu': md.distribution('oplib-cpu').version,\n"
        "  'backends': sorted(b.name for b in oplib.backends.list())}))",
    )
    assert out["device"] == "cpu" and out["sum"] == 6.0
    assert out["cpu"] == "0.1.0"
    assert out["backends"] == ["cpu", "cuda"]
