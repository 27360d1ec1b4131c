"""Installed plugin distributions written straight into a site directory: a package module
and a ``<name>-<version>.dist-info`` with ``METADATA``, ``entry_points.txt`` and ``RECORD``,
which is what ``importlib.metadata`` (and so oplib's discovery) reads. Much faster than
``pip install`` and the same to the reader."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_dist(
    site: Path, dist: str, module: str, code: str, *, entry_point: str | None = None
) -> None:
    """Install distribution ``dist`` into ``site``: module ``module`` (its source is
    ``code``) and an ``oplib`` entry point ``entry_point`` (default: ``module``)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(code))
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\nRequires-Dist: oplib-core>=0.1\n"
    )
    (info / "entry_points.txt").write_text(f"[oplib]\n{entry_point or module} = {module}\n")
    (info / "RECORD").write_text(f"{module}.py,,\n{info.name}/METADATA,,\n")


def fresh_venv(where: Path) -> tuple[Path, Path]:
    """A fresh virtual environment that sees oplib and its in-repo plugins (the development
    environment's site directory, added with its ``.pth`` files) and nothing else; returns
    its interpreter and its own site directory (searched before the development one)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    py = where / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dev_site = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "oplib_dev.pth").write_text(f"import site; site.addsitedir({dev_site!r})\n")
    return py, Path(site)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTHON"))}
    env.update(extra)
    return env
