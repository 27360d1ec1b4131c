"""The suite on every Python version oplib claims (pyproject.toml's classifiers: 3.10 to
3.13), each in its own virtualenv made by scripts/setup.sh, as .ci/run makes the oldest's
and the newest's. A version whose interpreter is not found is skipped (nox says so).

    nox                      # every version found, the suite without the slow tests
    nox -s tests-3.13 -- -x  # one version; arguments after -- go to pytest
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

#: the versions the classifiers claim (tests/test_release.py checks that they agree)
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def _pyenv_bins() -> list[str]:
    """pyenv's interpreter of each version, newest patch: its shims answer only for the
    versions pyenv has been told to use, so nox is shown the interpreters themselves."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = [sorted(root.glob(f"versions/{v}.*/bin/python"))[-1:] for v in PYTHONS]
    return [str(p.parent) for paths in found for p in paths]


os.environ["PATH"] = os.pathsep.join([*_pyenv_bins(), os.environ.get("PATH", "")])

nox.options.error_on_missing_interpreters = False
nox.options.reuse_existing_virtualenvs = True


@nox.session(python=PYTHONS, venv_backend="venv")
def tests(session: nox.Session) -> None:
    """scripts/setup.sh into nox's venv (every distribution editable), then pytest."""
    env = {"VENV": session.virtualenv.location, "OPLIB_SKIP_DEMO": "1"}
    session.run("bash", "scripts/setup.sh", env=env, external=True)
    args = session.posargs or ["-q", "-m", "not slow"]
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", *args)
