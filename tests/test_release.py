"""Releases (issue 32): one version from the git tag for every oplib distribution, each plugin
pinned to its core's series, the limited-API extension, the cibuildwheel configuration and
the release workflow that agree with each other, a CHANGELOG entry for the version being
built, the distribution names a user types, and every claimed Python tested."""

from __future__ import annotations

import ast
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import oplib_core

from helpers import c_compiler

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
BUILD: dict[str, Any] = runpy.run_path(str(ROOT / "setup.py"), run_name="oplib_setup")
PLUGINS = sorted(p.parent.name for p in ROOT.glob("plugins/*/pyproject.toml"))
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def _pyproject(where: str = ".") -> dict[str, Any]:
    return tomllib.loads((ROOT / where / "pyproject.toml").read_text())


# -- the version ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("described", "version"),
    [
        ("v0.1.0-0-gabc1234", "0.1.0"),
        ("v0.1.0-3-gabc1234", "0.1.1.dev3+gabc1234"),
        ("v0.1.0-0-gabc1234-dirty", "0.1.1.dev0+gabc1234.dirty"),
        ("v1.2-5-gabc1234", "1.2.1.dev5+gabc1234"),
        ("v0.2.0rc1-0-gabc1234", "0.2.0rc1"),
        ("v0.2.0rc1-2-gabc1234", "0.2.0rc2.dev2+gabc1234"),
    ],
)
def test_version_from_the_tag(described, version):
    assert BUILD["version_from_describe"](described) == version


def test_a_tag_that_is_no_version_is_refused():
    with pytest.raises(ValueError, match=r"a release tag is vX\.Y\.Z .*'vnext-1-gabc1234'"):
        BUILD["version_from_describe"]("vnext-1-gabc1234")


@pytest.mark.parametrize(
    ("version", "needs"),
    [
        ("0.1.0", ">=0.1,<0.2"),
        ("0.1.3", ">=0.1,<0.2"),
        ("0.1.1.dev3+gabc1234", ">=0.1,<0.2"),
        # before the series' first release its pre-releases must satisfy it
        ("0.2.0rc2.dev2+gabc1234", ">=0.2.dev0,<0.3"),
        ("0.2.dev4", ">=0.2.dev0,<0.3"),
        ("1.4.2", ">=1.0,<2"),
    ],
)
def test_plugins_need_the_core_of_their_series(version, needs):
    assert BUILD["compatible_core"](version) == needs
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(needs).contains(version.split("+")[0], prereleases=True)


def test_without_a_tag_the_version_is_the_fallback(monkeypatch):
    globals_ = BUILD["oplib_version"].__globals__
    monkeypatch.setitem(globals_, "_git", lambda *args: None)  # git describe found no tag
    assert BUILD["oplib_version"]() == BUILD["_fallback_version"]()
    # ...which is oplib_core/_version.py's, the one place it is written
    from oplib_core import _version

    assert BUILD["_fallback_version"]() == _version.FALLBACK_VERSION


def test_an_sdist_keeps_the_version_it_was_made_with(tmp_path):
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: oplib-core\nVersion: 7.1.2\n")
    assert BUILD["oplib_version"](tmp_path) == "7.1.2"
    assert BUILD["pkg_info_version"](tmp_path.parent) is None


def test_the_module_version_is_the_installed_metadata():
    assert oplib_core.__version__ == metadata.version("oplib-core")


def test_every_oplib_distribution_takes_its_version_from_the_build():
    """No pyproject.toml of core or a plugin writes a version or an oplib pin by hand."""
    for where in [".", *(f"plugins/{p}" for p in PLUGINS)]:
        project = _pyproject(where)["project"]
        assert "version" not in project, where
        assert "version" in project["dynamic"], where
    for plugin in PLUGINS:
        project = _pyproject(f"plugins/{plugin}")["project"]
        assert "dependencies" in project["dynamic"] and "dependencies" not in project, plugin


@pytest.mark.parametrize("plugin", ["cpu", "cuda"])
def test_a_plugin_in_the_checkout_has_the_checkout_version(plugin):
    proc = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=ROOT / "plugins" / plugin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == BUILD["oplib_version"]()


def test_the_examples_third_party_pins_hold_the_current_core():
    """The examples stand for third-party packages (their own versions, a written pin):
    the pin they show must still take the core of this checkout."""
    from packaging.requirements import Requirement

    version = BUILD["oplib_version"]()
    for path in ROOT.glob("examples/*/pyproject.toml"):
        for text in tomllib.loads(path.read_text())["project"]["dependencies"]:
            req = Requirement(text)
            if req.name.startswith("oplib-"):
                assert req.specifier.contains(version, prereleases=True), (path, text)


# -- the compiled extension and the wheels' configuration ----------------------------------


def test_the_extension_uses_the_limited_api_of_the_oldest_python(monkeypatch):
    requires = _pyproject()["project"]["requires-python"]
    assert requires == ">={}.{}".format(*BUILD["LIMITED_API"])
    monkeypatch.delenv("OPLIB_NO_EXTENSION", raising=False)
    exts = BUILD["_extensions"]()
    # the cached call again for 3.12's limited API (vectorcall) where the build runs on it
    vectorcall = sys.version_info >= (3, 12)
    names = ["_native._cfastcall", "_dispatch._ccall"] + ["_dispatch._ccall312"] * vectorcall
    assert [e.name for e in exts] == [f"oplib_core.{n}" for n in names]
    sources = [*C_SOURCES, C_SOURCES[1]] if vectorcall else list(C_SOURCES)
    assert [e.sources for e in exts] == [[str(s.relative_to(ROOT))] for s in sources]
    for ext in exts:
        assert ext.py_limited_api is True and ext.optional is True
        api = "0x030C0000" if ext.name.endswith("312") else "0x030A0000"
        assert ("Py_LIMITED_API", api) in ext.define_macros
    monkeypatch.setenv("OPLIB_NO_EXTENSION", "1")  # the pure-Python wheel
    assert BUILD["_extensions"]() == []


def test_a_wheel_holding_the_vectorcall_build_claims_python_3_12():
    """Built on 3.10 or 3.11 the wheel is ``cp310-abi3``; built on 3.12 or later it also
    holds ``_ccall312`` and is ``cp312-abi3``, which pip prefers there to the cp310 one."""
    names = [e.name for e in BUILD["_extensions"]()]
    vectorcall = "oplib_core._dispatch._ccall312" in names
    assert vectorcall is (sys.version_info >= (3, 12))
    assert BUILD["_wheel_api"]() == ("cp312" if vectorcall else "cp310")


#: The compiled extensions' sources (setup.py's ``_extensions``).
C_SOURCES = (
    ROOT / "oplib_core" / "_native" / "_cfastcall.c",
    ROOT / "oplib_core" / "_dispatch" / "_ccall.c",
)


#: The limited APIs each source is built for (setup.py): 3.12's too for the cached call,
#: where these headers are 3.12's or later.
C_BUILDS = [(C_SOURCES[0], "0x030A0000"), (C_SOURCES[1], "0x030A0000")] + [
    (C_SOURCES[1], "0x030C0000")
] * (sys.version_info >= (3, 12))


@pytest.mark.skipif(c_compiler() is None, reason="no C compiler")
@pytest.mark.parametrize(("source", "api"), C_BUILDS, ids=lambda v: getattr(v, "name", v))
def test_the_c_source_compiles_against_the_limited_api_alone(source, api):
    """Under Py_LIMITED_API the headers declare only the limited API: a call outside it
    (PyTuple_GET_ITEM, PyObject_Vectorcall before 3.12) is an undeclared function."""
    cc = shutil.which(c_compiler() or "cc") or "cc"
    cmd = [
        cc,
        "-fsyntax-only",
        "-Werror",
        "-Wall",
        f"-DPy_LIMITED_API={api}",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{ROOT / 'oplib_core' / 'include'}",
        str(source),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", C_SOURCES, ids=lambda p: p.name)
def test_the_c_source_parses_arguments_without_hash_formats(path):
    """An abi3 module built with 3.13's headers passes a '#' format (``s#``) to the 3.10-3.12
    runtime without the size_t flag, which raises "PY_SSIZE_T_CLEAN macro must be defined
    for '#' formats" there (seen in CI: the 3.13 venv rebuilt the in-place module)."""
    source = path.read_text()
    calls = re.findall(r"(Py_BuildValue|PyArg_\w+)\(([^;]*?)\"([^\"]*)\"", source)
    assert calls, "no argument parsing found: the check reads the wrong file"
    assert not [(fn, fmt) for fn, _, fmt in calls if "#" in fmt]


def _cibuildwheel() -> dict[str, Any]:
    return _pyproject()["tool"]["cibuildwheel"]


def test_cibuildwheel_builds_every_platform_and_claimed_python():
    config = _cibuildwheel()
    assert config["build"] == [f"cp{v.replace('.', '')}-*" for v in PYTHONS]
    assert config["linux"]["archs"] == ["x86_64", "aarch64"]
    assert config["macos"]["archs"] == ["x86_64", "arm64"]
    assert config["windows"]["archs"] == ["AMD64"]
    # manylinux and musllinux both built; free-threaded and 32-bit left out
    assert not [s for s in config["skip"] if "linux" in s and "i686" not in s]
    assert "cp3*t-*" in config["skip"]
    assert "oplib" in config["test-command"]


def _workflow(name: str) -> dict[Any, Any]:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def test_the_release_workflow_builds_what_cibuildwheel_is_configured_for():
    flow = _workflow("release.yml")
    on = flow[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"]["tags"] == ["v*"]
    matrix = flow["jobs"]["wheels"]["strategy"]["matrix"]["include"]
    built = {(m["platform"], m["archs"]) for m in matrix}
    config = _cibuildwheel()
    wanted = {(p, a) for p in ("linux", "macos", "windows") for a in config[p]["archs"]}
    assert built == wanted
    steps = flow["jobs"]["wheels"]["steps"]
    runs = [s for s in steps if s.get("uses", "").startswith("pypa/cibuildwheel@")]
    # two runs (cibuildwheel would serve 3.12 with the wheel built on 3.10): the Pythons
    # before 3.12, then 3.12 and later, every Python cibuildwheel is configured for once
    builds = [s["env"]["CIBW_BUILD"].split() for s in runs]
    assert sorted(b for run in builds for b in run) == sorted(config["build"])
    assert [{b < "cp312" for b in run} for run in builds] == [{True}, {False}]
    for run in runs:
        assert run["env"]["CIBW_PLATFORM"] == "${{ matrix.platform }}"
        assert run["env"]["CIBW_ARCHS"] == "${{ matrix.archs }}"
        assert run["with"]["output-dir"] == "wheelhouse"


def test_the_release_workflow_publishes_with_trusted_publishing():
    flow = _workflow("release.yml")
    publish = flow["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert set(publish["needs"]) == {"sdists", "wheels"}
    uses = [s.get("uses", "") for s in publish["steps"]]
    assert "pypa/gh-action-pypi-publish@release/v1" in uses
    # no API token: trusted publishing only
    assert "password" not in str(publish)
    sdists = flow["jobs"]["sdists"]["steps"]
    assert any(s.get("with", {}).get("fetch-depth") == 0 for s in sdists)
    assert "OPLIB_NO_EXTENSION=1" in str(sdists)
    # a build that fell back to FALLBACK_VERSION (no tag found) is never published
    (check,) = [s for s in sdists if s.get("name") == "the version is the tag's"]
    assert check["run"] == 'test -f "dist/oplib_core-${GITHUB_REF_NAME#v}.tar.gz"'


def test_ci_runs_the_ci_script_on_a_full_clone():
    flow = _workflow("ci.yml")
    steps = flow["jobs"]["run"]["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0
    assert {"run": "bash .ci/run"} in steps
    assert set(steps[1]["with"]["python-version"].split()) >= {"3.10", "3.13"}


# -- CHANGELOG ------------------------------------------------------------------------------


def changelog_entry(text: str, version: str) -> str | None:
    """The heading the CHANGELOG must have for ``version``: ``## X.Y.Z`` for a release,
    ``## Unreleased`` for anything else (a dev version, a build without a tag); None when
    it is there."""
    released = re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?", version) is not None
    head = f"## {version}" if released else "## Unreleased"
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    found = any(h == head[3:] or h.startswith(head[3:] + " ") for h in headings)
    return None if found else head


def _tagged() -> bool:
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--tags", "--exact-match", "--match", "v[0-9]*"],
        capture_output=True,
    )
    return proc.returncode == 0


def test_the_changelog_has_an_entry_for_this_version():
    version = BUILD["oplib_version"]()
    if not _tagged():  # the fallback 0.1.0 is not released until it is tagged
        version = f"{version}.dev0"
    missing = changelog_entry((ROOT / "CHANGELOG.md").read_text(), version)
    assert missing is None, f"CHANGELOG.md needs a '{missing}' section for {version}"


def test_the_changelog_rule():
    text = "# Changelog\n\n## Unreleased\n\n- x\n\n## 0.1.0 — 2026-12-01\n\n- y\n"
    assert changelog_entry(text, "0.1.0") is None
    assert changelog_entry(text, "0.1.1.dev3+gabc1234") is None
    assert changelog_entry(text, "0.2.0") == "## 0.2.0"
    assert changelog_entry(text.replace("## Unreleased", "## 0.0.9"), "0.1.1.dev1") == (
        "## Unreleased"
    )


# -- names ----------------------------------------------------------------------------------

#: ``pip install oplib`` as a command (not oplib-core, oplib_core, oplib-cpu ...)
WRONG_NAME = re.compile(r"pip install ['\"]?oplib(?![\w-])")


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    suffixes = {".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".rst"}
    files = [ROOT / line for line in out.splitlines()]
    return [p for p in files if p.suffix in suffixes and p.is_file()]


def test_nothing_tells_a_user_to_pip_install_oplib():
    """``pip install oplib`` installs an unrelated project; only a line saying so may name
    it."""
    offenders = []
    for path in _tracked_text_files():
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if WRONG_NAME.search(line) and not re.search(r"not this project|unrelated", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_pattern_finds_the_wrong_name():
    assert WRONG_NAME.search("run pip install oplib to get it")
    assert WRONG_NAME.search("pip install 'oplib'")
    assert not WRONG_NAME.search("pip install oplib-core oplib-cpu")
    assert not WRONG_NAME.search("pip install oplib_core")


def test_the_readme_names_the_distribution_to_install():
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install oplib-core oplib-cpu" in install
    assert "**`pip install oplib` is not this project**" in install
    assert "oplib-cuda" in install and "brings oplib-cpu" in install


def test_oplib_cuda_brings_the_cpu_backend():
    tree = ast.parse((ROOT / "plugins" / "cuda" / "setup.py").read_text())
    (needs,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "OPLIB"
    ]
    assert needs == ["oplib-core", "oplib-cpu"]


# -- every claimed Python -------------------------------------------------------------------


def test_the_noxfile_runs_every_claimed_python():
    classifiers = _pyproject()["project"]["classifiers"]
    claimed = [c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r".* :: 3\.\d+", c)]
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (pythons,) = [
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign | ast.Assign)
        and "PYTHONS"
        in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
    ]
    assert pythons == claimed == PYTHONS


def test_ci_runs_the_oldest_and_the_newest_python():
    run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"for v in 3\.10 3\.13; do", run)
    assert 'VENV=".venv-py$v"' in run and '-m "not slow"' in run


@pytest.mark.parametrize(
    "path", [".nox/x", ".venv-py3.10/bin/python", "oplib_core/_version_built.py"]
)
def test_the_extra_venvs_and_the_built_version_are_ignored(path):
    proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path])
    assert proc.returncode == 0, f"{path} is not git-ignored"
    # pytest collects tests/ only; ruff and the type checkers read what git does not ignore
    assert _pyproject()["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
