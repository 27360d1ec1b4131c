"""Packaging: every distribution's metadata, the built wheels and sdists (``twine check``),
and editable installs that type checkers follow."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from helpers import c_compiler

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
LICENSE = (ROOT / "LICENSE").read_text()

#: distribution directory -> (distribution name, import package)
DISTS = {
    ".": ("oplib-core", "oplib_core"),
    "plugins/cpu": ("oplib-cpu", "oplib_cpu"),
    "plugins/cuda": ("oplib-cuda", "oplib_cuda"),
    "plugins/dask": ("oplib-dask", "oplib_dask"),
    "plugins/jax": ("oplib-jax", "oplib_jax"),
    "plugins/meta": ("oplib-meta", "oplib_meta"),
    "plugins/privateuse": ("oplib-privateuse", "oplib_privateuse"),
    "examples/acme_plugin": ("acme-ops", "acme_ops"),
    "examples/vendor_npu": ("oplib-vendor-npu", "vendor_npu"),
    "examples/native_ops": ("native-ops", "native_ops"),
}
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _title(name: str) -> str:
    """The first line of a distribution's README."""
    return "# oplib" if name == "oplib-core" else f"# {name}"


def _project(where: str) -> dict:
    return tomllib.loads((ROOT / where / "pyproject.toml").read_text())


def test_every_distribution_in_the_repository_is_listed():
    found = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/*/pyproject.toml")}
    found.add(".")
    assert found == set(DISTS)


def test_license_is_bsd_3_clause_by_the_oplib_developers():
    assert LICENSE.startswith("BSD 3-Clause License\n")
    assert "Copyright (c) 2026, the oplib developers" in LICENSE


@pytest.mark.parametrize("where", DISTS)
def test_pyproject_metadata(where):
    pyproject = _project(where)
    project = pyproject["project"]
    name, package = DISTS[where]
    assert project["name"] == name
    # SPDX expression (PEP 639), not the deprecated {text = ...} table
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / where / "LICENSE").read_text() == LICENSE
    readme = ROOT / where / project["readme"]
    assert readme.is_file() and readme.read_text().startswith(_title(name))
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers
    for version in PYTHONS:
        assert f"Programming Language :: Python :: {version}" in classifiers
    # setuptools refuses License :: classifiers next to a license expression (PEP 639)
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert ("Framework :: Pytest" in classifiers) == (name == "oplib-core")
    assert set(project["urls"]) >= {"Homepage", "Documentation", "Source", "Issues"}
    # PEP 639 support in setuptools
    # (native-ops also needs oplib-core at build time, for oplib.h)
    requires = ["setuptools>=77", *(["oplib-core"] if name == "native-ops" else [])]
    assert pyproject["build-system"]["requires"] == requires
    assert (ROOT / where / package / "py.typed").is_file()
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"][package]


def test_cuda_extras_bound_cupy_from_below():
    extras = _project("plugins/cuda")["project"]["optional-dependencies"]
    for extra, package in (("cuda12", "cupy-cuda12x"), ("cuda13", "cupy-cuda13x")):
        (requirement,) = extras[extra]
        assert re.fullmatch(rf"{package}>=\d+\.\d+", requirement), requirement


def test_packaging_tools_are_in_the_test_extra():
    test = _project(".")["project"]["optional-dependencies"]["test"]
    assert any(r.startswith("build>=") for r in test)
    assert any(r.startswith("twine>=") for r in test)


# -- built distributions ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every distribution built by scripts/check_dists.sh, which also runs twine check."""
    out = tmp_path_factory.mktemp("dists")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_dists.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2 * len(DISTS), proc.stdout
    return out


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(z.read(name).decode())


@pytest.mark.slow
@pytest.mark.parametrize("where", DISTS)
def test_built_wheel_and_sdist(dists, where):
    name, package = DISTS[where]
    stem = name.replace("-", "_")
    (wheel,) = dists.glob(f"{stem}-*.whl")
    (sdist,) = dists.glob(f"{stem}-*.tar.gz")
    meta = _metadata(wheel)
    assert meta["Name"] == name
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert ("Framework :: Pytest" in classifiers) == (name == "oplib-core")
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Homepage", "Source"}
    # the README is the package page
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith(_title(name))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert f"{package}/py.typed" in names
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(lic).decode() == LICENSE
    with tarfile.open(sdist) as t:
        members = {m.split("/", 1)[1] for m in t.getnames() if "/" in m}
    assert {"LICENSE", "README.md", "pyproject.toml", f"{package}/py.typed"} <= members
    if name == "oplib-core":  # the optional compiled fast call: its source, built by setup.py
        assert {"setup.py", "oplib_core/_native/_cfastcall.c", "oplib_core/include/oplib.h"} <= (
            members
        )
        assert not [m for m in members if m.endswith((".so", ".pyd"))]
        built = [n for n in names if n.startswith("oplib_core/_native/_cfastcall.")]
        assert "oplib_core/_native/_cfastcall.pyi" in built
        if c_compiler() is not None:
            assert [n for n in built if n.endswith((".so", ".pyd"))], built


# -- editable installs ----------------------------------------------------------------------

_USER_CODE = """\
import oplib_core as oplib
from oplib_cpu import plugin as cpu_plugin
from oplib_meta import MetaArray

x: oplib.Tensor = oplib.ones(3)
n: int = x.ndim
bad: str = x.ndim  # the one error: proves the types were read, not Any
"""


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy", "basedpyright"])
def test_type_checkers_follow_the_editable_installs(tmp_path, checker):
    """Outside the repository (no mypy_path / extraPaths from its configuration), the venv's
    editable installs of core and the plugins resolve, and are typed."""
    user = tmp_path / "user.py"
    user.write_text(_USER_CODE)
    tool = str(Path(sys.executable).parent / checker)
    if checker == "mypy":
        cmd = [tool, "--cache-dir=/dev/null", "--python-executable", sys.executable, str(user)]
    else:
        venv = Path(sys.prefix)
        config = {"venvPath": str(venv.parent), "venv": venv.name}
        (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
        cmd = [tool, str(user)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if "error" in line and "user.py" in line]
    assert len(errors) == 1 and ":7:" in errors[0], out
