"""A plugin distribution's version and dependencies, for its ``setup.py`` (one file for every
plugin in this repository: each plugin folder links to it, and its sdist carries a copy).

- In an oplib checkout, the version is the checkout's (the git tag, read by the repository's
  ``setup.py``: ``oplib_version``) and the oplib distributions a plugin needs are pinned to
  the same series (``compatible_core``).
- From an sdist, both come from the PKG-INFO it was made with.
- A copy outside an oplib checkout (a vendor's, from the ``privateuse`` template) takes the
  version of the oplib-core installed where it is built: give it its own version there.

All of a plugin's dependencies are listed by its ``setup.py``, because pyproject.toml cannot
list some and leave the others to setup.py.
"""

from __future__ import annotations

import re
import runpy
from importlib import metadata
from pathlib import Path


def _from_sdist(here: Path) -> tuple[str, list[str]] | None:
    pkg_info = here / "PKG-INFO"
    if not pkg_info.is_file():
        return None
    headers = pkg_info.read_text().split("\n\n", 1)[0]
    version = re.search(r"^Version: (\S+)$", headers, re.MULTILINE)
    if version is None:
        raise RuntimeError(f"{pkg_info} has no Version")
    requires = re.findall(r"^Requires-Dist: (.+)$", headers, re.MULTILINE)
    return version.group(1), [r for r in requires if "extra ==" not in r]


def versions(here: Path, oplib: list[str], others: list[str]) -> tuple[str, list[str]]:
    """``(version, requirements)`` of the plugin in folder ``here`` that needs the oplib
    distributions ``oplib`` (each pinned to the plugin's series) and ``others``."""
    from_sdist = _from_sdist(here)
    if from_sdist is not None:
        return from_sdist
    checkout = here.parent.parent
    if (checkout / "setup.py").is_file() and (checkout / "oplib_core").is_dir():
        build = runpy.run_path(str(checkout / "setup.py"), run_name="oplib_setup")
        version = build["oplib_version"]()
        pin = build["compatible_core"](version)
    else:
        try:
            version = metadata.version("oplib-core")
        except metadata.PackageNotFoundError:
            raise RuntimeError(
                "outside an oplib checkout, this setup.py takes its version from the "
                "installed oplib-core; install oplib-core first, or set your own version"
            ) from None
        major, minor = (int(p) for p in version.split(".")[:2])
        pin = f">={major}.{minor},<{major}.{minor + 1}" if major == 0 else f">={major},<{major + 1}"
    return version, [*(f"{name}{pin}" for name in oplib), *others]
