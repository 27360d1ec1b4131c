"""How oplib-cuda is built from an oplib checkout: its version is the checkout's (the git tag,
read by the repository's setup.py, ``oplib_version``) and it needs oplib-core and oplib-cpu
of the same series (``compatible_core``). From an sdist both come from the PKG-INFO it was
made with. A copy outside an oplib checkout (a vendor's, from this template) takes the
version of the oplib-core installed where it is built: give it its own version there.

All its dependencies are listed here, because pyproject.toml cannot list some and leave the
others to setup.py.
"""

from __future__ import annotations

import re
import runpy
from importlib import metadata
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
#: the oplib distributions it needs, each in the series of its own version
OPLIB = ["oplib-core", "oplib-cpu"]
OTHERS = ["numpy>=1.24"]


def _from_sdist() -> tuple[str, list[str]] | None:
    pkg_info = HERE / "PKG-INFO"
    if not pkg_info.is_file():
        return None
    headers = pkg_info.read_text().split("\n\n", 1)[0]
    version = re.search(r"^Version: (\S+)$", headers, re.MULTILINE)
    if version is None:
        raise RuntimeError(f"{pkg_info} has no Version")
    requires = re.findall(r"^Requires-Dist: (.+)$", headers, re.MULTILINE)
    return version.group(1), [r for r in requires if "extra ==" not in r]


def _versions() -> tuple[str, list[str]]:
    from_sdist = _from_sdist()
    if from_sdist is not None:
        return from_sdist
    checkout = HERE.parent.parent
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
    return version, [*(f"{name}{pin}" for name in OPLIB), *OTHERS]


VERSION, REQUIRES = _versions()

if __name__ == "__main__":  # (run under another name, it only tells VERSION and REQUIRES)
    setup(version=VERSION, install_requires=REQUIRES)
