"""What a GPU run of oplib needs beyond what the GPU machine already has: the logic behind
``scripts/gpu-wheelhouse.sh`` (which fills the wheelhouse) and ``scripts/gpu-check.sh``
(which installs from it).

    python scripts/gpu_wheelhouse.py requirements [--python 3.12] [--have FILE]
    python scripts/gpu_wheelhouse.py keep STAGING DIR [--python 3.12] [--have FILE] ...

``requirements`` prints one requirement a line: every dependency of every oplib distribution
in this checkout (``pyproject.toml`` and ``plugins/*/pyproject.toml``), their ``test`` extras
and ``pytest-xdist``, without the oplib distributions themselves, without the tools a GPU
run does not use (see ``NOT_FOR_A_GPU_RUN``), without cupy (the GPU machine brings the one
for its CUDA), without ``cpu`` extras (``jax[cpu]``) and without what ``--have`` already
satisfies (``--have /dev/null``: everything, as ``scripts/gpu-check.sh`` installs it).
``keep`` moves from STAGING (``pip download``'s folder) into DIR the wheels the target lacks:
a wheel whose project the target has, at a version every requirement on it accepts, stays
behind.

A have-file is ``pip list --format=freeze`` from the target (``name==version`` lines; a bare
name means "there, any version"). Without ``--have``, ``scripts/gpu-image-packages.txt``
says what the GPU image holds.
"""

from __future__ import annotations

import argparse
import importlib
import re
import runpy
import shutil
import sys
import zipfile
from collections.abc import Iterable, Iterator
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
IMAGE_PACKAGES = Path(__file__).resolve().parent / "gpu-image-packages.txt"
# CI runs these over the source tree (lint, types, building and checking the dists); the
# tests that call them are marked slow and a GPU run leaves those out. basedpyright alone
# brings ~60 MB of node.
NOT_FOR_A_GPU_RUN = frozenset({"ruff", "mypy", "basedpyright", "twine", "build"})
# what the GPU run adds to the test extras: the suite in parallel workers
GPU_RUN_EXTRAS = ("pytest-xdist>=3",)
# always in the wheelhouse, whatever the target has: the build backend (1 MB), since an older
# one there would fail the offline build of every distribution (PEP 639 metadata needs 77)
ALWAYS = frozenset({"setuptools"})
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _toml(path: Path) -> dict[str, Any]:
    for name in ("tomllib", "tomli"):  # tomllib from Python 3.11
        try:
            reader = importlib.import_module(name)
        except ImportError:
            continue
        with path.open("rb") as f:
            return dict(reader.load(f))
    sys.exit(f"{path}: reading it needs Python 3.11+ (tomllib) or tomli installed")


def distributions(root: Path = ROOT) -> list[Path]:
    """The folders of this checkout's distributions: the core, then each plugin."""
    plugins = sorted(p.parent for p in (root / "plugins").glob("*/pyproject.toml"))
    return [root, *plugins]


def target_environment(python: str, machine: str = "x86_64") -> dict[str, str]:
    """The marker environment of a CPython ``python`` (``"3.12"``) on Linux."""
    if not re.fullmatch(r"3\.\d+", python):
        raise ValueError(f"--python: expected a version such as 3.12, got {python!r}")
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_machine": machine,
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


def _applies(req: Requirement, env: dict[str, str], extras: Iterable[str] = ("",)) -> bool:
    """Whether ``req`` is asked for on ``env`` when any of ``extras`` is requested (the
    extras its own marker names count as requested: the caller cannot know which were)."""
    if req.marker is None:
        return True
    named = _EXTRA.findall(str(req.marker))
    return any(req.marker.evaluate({**env, "extra": e}) for e in (*extras, *named))


def _setup_requirements(folder: Path, project: dict[str, Any]) -> list[str]:
    """A plugin's dependencies where its setup.py lists them (``dynamic``: their oplib
    pins come from the version), as that setup.py tells them without building."""
    if "dependencies" not in project.get("dynamic", []):
        return []
    told = runpy.run_path(str(folder / "setup.py"), run_name="oplib_requirements")
    return list(told["REQUIRES"])


def wanted(root: Path = ROOT, python: str = "3.12") -> list[Requirement]:
    """Every requirement of a GPU run on ``python`` (build, run and test), oplib's own
    distributions left out, one entry per project (specifiers merged), in first-seen order."""
    env = target_environment(python)
    local: set[str] = set()
    found: dict[str, Requirement] = {}
    for folder in distributions(root):
        meta = _toml(folder / "pyproject.toml")
        project = meta["project"]
        local.add(canonicalize_name(project["name"]))
        lines = list(meta.get("build-system", {}).get("requires", []))
        lines += project.get("dependencies", []) or _setup_requirements(folder, project)
        lines += project.get("optional-dependencies", {}).get("test", [])
        for line in (*lines, *GPU_RUN_EXTRAS):
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if not _applies(req, env) or name in NOT_FOR_A_GPU_RUN or name.startswith("cupy"):
                continue
            req.marker = None
            # jax[cpu] is for machines without a GPU: a GPU machine brings jax's CUDA build
            req.extras = {e for e in req.extras if e != "cpu"}
            if name in found:
                found[name].specifier &= req.specifier
                found[name].extras |= req.extras
            else:
                found[name] = req
    return [r for n, r in found.items() if n not in local]


def read_have(path: Path | None) -> dict[str, Version | None]:
    """A have-file as project -> version (``None``: present, version unknown)."""
    text = (path or IMAGE_PACKAGES).read_text()
    have: dict[str, Version | None] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):  # comments, "-e path" lines of editables
            continue
        # "name==1.2", "name @ file:///...", or a bare name
        name, _, version = line.partition("==") if "==" in line else (line, "", "")
        name, version = name.split("@", 1)[0].strip(), version.strip()
        try:
            have[canonicalize_name(name)] = Version(version) if version else None
        except InvalidVersion:
            have[canonicalize_name(name)] = None
    return have


def satisfied(req: Requirement, have: dict[str, Version | None]) -> bool:
    """Whether the target's copy of ``req``'s project (if any) meets it."""
    name = canonicalize_name(req.name)
    if name not in have or name in ALWAYS:
        return False
    version = have[name]
    return version is None or req.specifier.contains(version, prereleases=True)


def requirements(python: str, have: dict[str, Version | None], root: Path = ROOT) -> list[str]:
    """The requirement lines that pip must download (or install) for a GPU run."""
    return [str(r) for r in wanted(root, python) if not satisfied(r, have)]


def _requires_dist(wheel: Path) -> Iterator[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        # the wheel's own: a top-level folder (some wheels vendor others' dist-info inside)
        (meta,) = (n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        headers = HeaderParser().parsestr(z.read(meta).decode("utf-8", "replace"))
    for line in headers.get_all("Requires-Dist") or ():
        try:
            yield Requirement(line)
        except InvalidRequirement:
            continue


def keep(
    staging: Path, dest: Path, python: str, have: dict[str, Version | None], root: Path = ROOT
) -> tuple[list[Path], list[str]]:
    """Move into ``dest`` the wheels of ``staging`` the target lacks; returns the wheels
    kept and, for each left behind, why."""
    env = target_environment(python)
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(staging.glob("*.whl"))
    asks: dict[str, list[Requirement]] = {}
    for req in [*wanted(root, python), *(r for w in wheels for r in _requires_dist(w))]:
        if _applies(req, env):
            asks.setdefault(canonicalize_name(req.name), []).append(req)
    kept: list[Path] = []
    skipped: list[str] = []
    for wheel in wheels:
        name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
        reqs = asks.get(name, [])
        if name in have and all(satisfied(r, have) for r in reqs):
            skipped.append(f"{wheel.name}: the target has {name} {have[name] or ''}".rstrip())
            continue
        target = dest / wheel.name
        shutil.move(str(wheel), target)
        kept.append(target)
    return kept, skipped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("requirements", "keep"):
        p = sub.add_parser(name)
        p.add_argument("--python", default="3.12", help="the target's Python (3.12)")
        p.add_argument("--have", type=Path, help="pip list --format=freeze from the target")
        if name == "keep":
            p.add_argument("staging", type=Path)
            p.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    have = read_have(args.have)
    if args.command == "requirements":
        print("\n".join(requirements(args.python, have)))
        return
    kept, skipped = keep(args.staging, args.dest, args.python, have)
    for line in skipped:
        print(f"  not needed: {line}")
    for wheel in kept:
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
