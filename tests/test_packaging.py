"""Packaging: every distribution's metadata, the built wheels and sdists (``twine check``),
and editable installs that type checkers follow."""

from __future__ import annotations

import json
import re
import runpy
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
_BUILD = runpy.run_path(str(ROOT / "setup.py"), run_name="oplib_setup")
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
    # a wheel and an sdist each, and oplib-core's pure-Python wheel
    assert proc.stdout.count("PASSED") == 2 * len(DISTS) + 1, proc.stdout
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
    # oplib-core: its compiled wheel is checked here, its pure one in test_wheel_tags
    (wheel,) = [
        w
        for w in dists.glob(f"{stem}-*.whl")
        if not w.name.endswith("-none-any.whl") or name != "oplib-core"
    ]
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
    if name == "oplib-core":  # the optional compiled code: its sources, built by setup.py
        assert {
            "setup.py",
            "oplib_core/_native/_cfastcall.c",
            "oplib_core/include/oplib.h",
            "oplib_core/_dispatch/_ccall.c",
        } <= members
        assert not [m for m in members if m.endswith((".so", ".pyd"))]
        for module in ("oplib_core/_native/_cfastcall", "oplib_core/_dispatch/_ccall"):
            built = [n for n in names if n.startswith(f"{module}.")]
            assert f"{module}.pyi" in built
            if c_compiler() is not None:
                assert [n for n in built if n.endswith((".so", ".pyd"))], built
        # the cached call for 3.12's limited API, where the wheel was built on 3.12 or later
        vectorcall = [n for n in names if n.startswith("oplib_core/_dispatch/_ccall312.")]
        assert bool(vectorcall) is (c_compiler() is not None and sys.version_info >= (3, 12))


def _tags(wheel: Path) -> str:
    """The tags in a wheel's file name: python-abi-platform."""
    return wheel.name[: -len(".whl")].split("-", 2)[2]


@pytest.mark.slow
def test_wheel_tags(dists):
    """A package index takes every wheel: oplib-core's compiled one is abi3 (one per
    platform, every Python from 3.10, or from 3.12 where built there: it then holds the
    vectorcall build too) with a manylinux tag, never the bare linux tag; its pure one and
    every plugin's are py3-none-any."""
    core = sorted(dists.glob("oplib_core-*.whl"))
    tags = [_tags(w) for w in core]
    assert len(tags) == 2 and "py3-none-any" in tags, tags
    (compiled,) = [t for t in tags if t != "py3-none-any"]
    python = "cp312" if sys.version_info >= (3, 12) else "cp310"
    assert re.fullmatch(rf"{python}-abi3-(manylinux|musllinux)\S+", compiled), compiled
    assert "linux_" not in compiled.replace("manylinux_", "").replace("musllinux_", "")
    for where, (name, _) in DISTS.items():
        if where.startswith("plugins/"):
            (wheel,) = dists.glob(f"{name.replace('-', '_')}-*.whl")
            assert _tags(wheel) == "py3-none-any", wheel.name
            # the plugin needs the oplib-core (and oplib-cpu) of its own version's series
            meta = _metadata(wheel)
            pin = _BUILD["compatible_core"](meta["Version"])
            requires = meta.get_all("Requires-Dist")
            assert any(r.replace(" ", "") in _spellings("oplib-core", pin) for r in requires)
    (pure,) = [w for w in core if w.name.endswith("-py3-none-any.whl")]
    with zipfile.ZipFile(pure) as z:
        assert not [n for n in z.namelist() if n.endswith((".so", ".pyd"))]


def _spellings(name: str, spec: str) -> set[str]:
    """A requirement as metadata may write it (specifiers in either order)."""
    parts = spec.split(",")
    return {name + ",".join(parts), name + ",".join(reversed(parts))}


@pytest.mark.slow
def test_the_built_wheels_install_offline_and_pass_oplib_check(dists, tmp_path):
    """The wheels alone (--no-index: oplib's distributions from the built ones only) give a
    working install: ``oplib check`` on cpu passes; the pure-Python wheel runs the same
    calls through generated Python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    core = _project(".")["project"]["dependencies"]
    subprocess.run([*pip, *core], check=True, timeout=300)  # third-party: from the index
    offline = [*pip, "--no-index", "--find-links", str(dists)]
    subprocess.run([*offline, "oplib-core", "oplib-cpu"], check=True, timeout=300)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    oplib = str(venv / "bin" / "oplib")

    def run(*args: str) -> str:
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert run(oplib, "--version").startswith(
        f"oplib-core {_BUILD['oplib_version']()} (native fast call: compiled)"
    )
    run(oplib, "check", "--backend", "cpu")  # exit status 0: every op passes
    (pure,) = dists.glob("oplib_core-*-py3-none-any.whl")
    subprocess.run([*offline, "--force-reinstall", "--no-deps", str(pure)], check=True)
    assert "generated Python" in run(oplib, "--version").splitlines()[0]
    code = "import oplib_core as o; print(o.ops.oplib.add(o.tensor([1.0]), o.tensor([2.0])))"
    assert "3." in run(py, "-c", code)


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
