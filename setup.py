"""oplib-core's build: the version every oplib distribution takes from the git tag, and the
two compiled pieces, the native fast call (oplib_core/_native/_cfastcall.c) and the
dispatcher's cached call (oplib_core/_dispatch/_ccall.c).

The version (``oplib_version``): ``git describe`` of the checkout, as setuptools-scm's
default scheme reads it. A clean checkout of tag ``vX.Y.Z`` is ``X.Y.Z``; N commits later
(or with uncommitted changes) it is ``X.Y.(Z+1).devN+gHASH`` (``.dirty`` added). Without
git or a ``v*`` tag (a shallow CI clone, a fork, a source tarball) it is
``FALLBACK_VERSION`` from oplib_core/_version.py; in an sdist, the version it was made with
(PKG-INFO). The build writes it to oplib_core/_version_built.py, which ``__version__``
reads, so that the module and the installed metadata agree. The plugins' setup.py files run
this file (not as ``__main__``) for ``oplib_version`` and ``compatible_core``: every
distribution in a checkout has one version, and needs the oplib-core of its minor series.

Both are optional: where no C compiler is found the build warns and goes on, and oplib
runs the same calls through generated Python (docs/native-kernels.md, "What a call costs")
and the dispatcher's Python ``FastCall.__call__``; ``OPLIB_NO_EXTENSION=1`` leaves them out
on purpose (the pure-Python ``py3-none-any`` wheel for platforms without a compiled one).
They use only the limited API of Python 3.10, so one ``abi3`` wheel per platform serves
every Python from 3.10 on; built on Python 3.12 or later, the cached call is also built for
3.12's limited API (``_ccall312``, imported there: calls by vectorcall).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
#: the oldest Python the abi3 extension runs on (Py_LIMITED_API, the wheel's cp310 tag)
LIMITED_API = (3, 10)
#: the first limited API with vectorcall (PEP 590's protocol for a type of its own)
VECTORCALL_API = (3, 12)


def _fallback_version() -> str:
    text = (ROOT / "oplib_core" / "_version.py").read_text()
    found = re.search(r'^FALLBACK_VERSION = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise RuntimeError('oplib_core/_version.py has no FALLBACK_VERSION = "..." line')
    return found.group(1)


def pkg_info_version(where: Path) -> str | None:
    """The version an sdist was made with (its PKG-INFO), or None outside an sdist."""
    pkg_info = where / "PKG-INFO"
    if not pkg_info.is_file():
        return None
    found = re.search(r"^Version: (\S+)$", pkg_info.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def version_from_describe(described: str) -> str:
    """``git describe --tags --long --dirty --abbrev=7`` output as a PEP 440 version."""
    found = re.fullmatch(r"v(\d+(?:\.\d+)*)((?:a|b|rc)\d+)?-(\d+)-g([0-9a-f]+)(-dirty)?", described)
    if found is None:
        raise ValueError(f"a release tag is vX.Y.Z (or vX.Y.ZrcN), not {described!r}")
    release, pre, distance, node, dirty = found.groups()
    if distance == "0" and not dirty:
        return release + (pre or "")
    # guess-next-dev: the next patch release, or the tagged pre-release's release
    parts = [int(p) for p in release.split(".")] + [0] * (3 - release.count(".") - 1)
    if pre:  # after vX.Y.ZrcN comes rc(N+1)
        kind, number = re.fullmatch(r"([a-z]+)(\d+)", pre).groups()  # type: ignore[union-attr]
        after = f"{kind}{int(number) + 1}"
    else:
        parts[-1] += 1
        after = ""
    local = f"g{node}" + (".dirty" if dirty else "")
    return ".".join(map(str, parts)) + f"{after}.dev{distance}+{local}"


def oplib_version(where: Path = ROOT) -> str:
    """The version of every oplib distribution built from this checkout (module docstring)."""
    from_sdist = pkg_info_version(where)
    if from_sdist is not None:
        return from_sdist
    described = _git("describe", "--tags", "--long", "--dirty", "--abbrev=7", "--match", "v[0-9]*")
    return _fallback_version() if described is None else version_from_describe(described)


def compatible_core(version: str) -> str:
    """The oplib-core range a plugin of ``version`` works with: its minor series while the
    major version is 0 (a minor release may change the plugin API), its major series after;
    from the series' first pre-release on when ``version`` is one of them."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?(.*)$", version)
    if found is None:
        raise ValueError(f"not a release version: {version!r}")
    major, minor, patch, rest = int(found[1]), int(found[2]), found[3], found[4]
    series = f"{major}.{minor}" if major == 0 else f"{major}.0"
    before_release = (patch in (None, "0")) and re.match(r"\.?(a|b|rc|dev)", rest) is not None
    low = f"{series}.dev0" if before_release and series == f"{major}.{minor}" else series
    high = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={low},<{high}"


def _write_version_module(version: str) -> None:
    target = ROOT / "oplib_core" / "_version_built.py"
    text = f'"""Written by setup.py at build time (git-ignored)."""\n\nversion = "{version}"\n'
    if not target.is_file() or target.read_text() != text:
        target.write_text(text)


def _ccall_builds(limited: str) -> list[tuple[str, str]]:
    """The dispatcher's cached call's builds, (module name, Py_LIMITED_API): ``_ccall`` for
    the oldest Python claimed, and where this Python is 3.12 or later also ``_ccall312``,
    for 3.12's limited API, whose calls come and go by vectorcall (no argument tuple or
    keyword dict per call: issue 30). A wheel holding both is tagged ``cp312-abi3``
    (``_wheel_api``)."""
    builds = [("_ccall", limited)]
    if sys.version_info >= VECTORCALL_API:
        builds.append(("_ccall312", "0x{:02X}{:02X}0000".format(*VECTORCALL_API)))
    return builds


def _wheel_api() -> str:
    """The compiled wheel's Python tag (``cpXY-abi3``): the oldest Python claimed, or 3.12
    where the build also holds ``_ccall312`` (built on 3.12 or later), so that pip on 3.12
    and later takes that wheel, whose calls come by vectorcall, before the one built on
    3.10 (cibuildwheel builds both: .github/workflows/release.yml)."""
    return "cp{}{}".format(*(VECTORCALL_API if sys.version_info >= VECTORCALL_API else LIMITED_API))


def _extensions() -> list[Any]:
    from setuptools import Extension

    if os.environ.get("OPLIB_NO_EXTENSION", "0") == "1":
        return []
    limited = "0x{:02X}{:02X}0000".format(*LIMITED_API)
    # _Alignas: MSVC compiles C11 only when asked
    c11 = ["/std:c11"] if sys.platform == "win32" else []
    return [
        Extension(
            "oplib_core._native._cfastcall",
            sources=["oplib_core/_native/_cfastcall.c"],
            include_dirs=["oplib_core/include"],
            define_macros=[("Py_LIMITED_API", limited)],
            py_limited_api=True,
            extra_compile_args=c11,
            optional=True,
        ),
        *(
            Extension(
                f"oplib_core._dispatch.{name}",
                sources=["oplib_core/_dispatch/_ccall.c"],
                define_macros=[("Py_LIMITED_API", api), ("CCALL_MODULE", name)],
                py_limited_api=True,
                extra_compile_args=c11,
                # it calls nothing of libc's, so the linker would leave libc out of its
                # needed libraries, and auditwheel (which reads the libc flavour from them)
                # refuses it
                extra_link_args=["-Wl,--no-as-needed", "-lc"] if sys.platform == "linux" else [],
                optional=True,
            )
            for name, api in _ccall_builds(limited)
        ),
    ]


if __name__ == "__main__":
    from setuptools import setup

    VERSION = oplib_version()
    _write_version_module(VERSION)
    extensions = _extensions()
    abi3 = {"bdist_wheel": {"py_limited_api": _wheel_api()}}
    setup(version=VERSION, ext_modules=extensions, options=abi3 if extensions else {})
