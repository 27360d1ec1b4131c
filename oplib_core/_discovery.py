"""Finding plugins cheaply: the ``oplib`` entry points of installed distributions.

Scanning every installed distribution's metadata costs tens of milliseconds (and imports
``importlib.metadata`` and ``email``). The result is cached in a small file keyed on
what can change it: the interpreter, ``sys.path``, and the modification time of every
``sys.path`` directory (installing or removing a distribution adds or removes a
``*.dist-info`` directory there, which changes that time) except the script's own
directory, which Python puts first. ``OPLIB_ENTRY_POINT_CACHE=0``
turns the cache off; ``OPLIB_CACHE_DIR`` moves it. The file is in ``marshal`` format (plain
data only, read without importing anything; ``json`` alone would cost a few milliseconds),
named per interpreter version since that format is.

Each entry also records whether the distribution's requirement on ``oplib-core`` accepts
the installed version, so an incompatible plugin is reported before its module is imported.
"""

from __future__ import annotations

import importlib
import marshal
import os
import sys
from typing import Any

from ._records import Record

__all__ = [
    "EntryPointInfo",
    "find_entry_points",
    "load",
    "read_cache",
    "switched_on",
    "write_cache",
]

GROUP = "oplib"
CORE_DISTRIBUTION = "oplib-core"
_CACHE_VERSION = 3
_KIND = "entry-points"


class EntryPointInfo(Record):
    """One ``oplib`` entry point and what its distribution says about compatibility
    (``requirement``: e.g. ``"oplib-core>=0.1,<0.2"``, None when none is stated)."""

    name: str
    value: str
    distribution: str | None
    version: str | None
    requirement: str | None
    compatible: bool


def load(info: EntryPointInfo) -> Any:
    """Import the entry point's object (``module`` or ``module:attr``)."""
    module, _, attr = info.value.partition(":")
    obj = importlib.import_module(module.strip())
    for part in attr.strip().split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def _search_path() -> list[str]:
    """``sys.path`` without the script's directory (or the current directory) that Python
    puts first: a project directory changes all the time and holds no installed
    distributions, so it would only make the cache miss."""
    paths = list(sys.path)
    if paths and not getattr(sys.flags, "safe_path", False):
        paths = paths[1:]
    return paths


def _fingerprint(core_version: str) -> dict[str, Any]:
    dirs = []
    for p in _search_path():
        try:
            st = os.stat(p or ".")
        except OSError:
            continue
        dirs.append([p, st.st_mtime_ns])
    return {"v": _CACHE_VERSION, "python": sys.executable, "core": core_version, "path": dirs}


def _fnv1a(data: bytes) -> int:
    """A stable 64-bit hash (``hash()`` of a str changes per process; zlib and hashlib would
    be one more extension module to load at start-up)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _cache_file(fingerprint: dict[str, Any], kind: str) -> str:
    base = os.environ.get("OPLIB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "oplib",
    )
    text = f"{fingerprint['python']}|{_search_path()}"
    key = f"{_fnv1a(text.encode()):016x}"
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(base, f"{kind}-{key}.{py}.marshal")


def switched_on(variable: str) -> bool:
    """Whether the switch ``variable`` (an ``OPLIB_*`` environment variable, default on) is
    on: off for ``0``, ``false``, ``no`` or ``off``, in any case."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def read_cache(kind: str, core_version: str) -> Any:
    """What :func:`write_cache` stored under ``kind`` for the installed distributions as they
    are now; None when there is nothing, it is stale or it is unreadable (corrupt, written
    by another Python)."""
    fingerprint = _fingerprint(core_version)
    try:
        with open(_cache_file(fingerprint, kind), "rb") as f:
            cached = marshal.load(f)
        if cached.get("fingerprint") == fingerprint:
            return cached["data"]
    except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return None


def write_cache(kind: str, core_version: str, data: Any) -> None:
    """Store ``data`` (plain values only) under ``kind``, valid until a distribution is
    installed or removed, ``sys.path`` changes or core's version does. Written atomically; a
    read-only cache directory only costs the next start-up the work again."""
    fingerprint = _fingerprint(core_version)
    path = _cache_file(fingerprint, kind)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            marshal.dump({"fingerprint": fingerprint, "data": data}, f)
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _scan(core_version: str) -> list[EntryPointInfo]:
    from importlib.metadata import entry_points  # costly: only on a cache miss

    found = []
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        requirement, compatible = None, True
        if dist is not None:
            requirement, compatible = _check_requirement(dist.requires or (), core_version)
        found.append(
            EntryPointInfo(
                name=ep.name,
                value=ep.value,
                distribution=getattr(dist, "name", None),
                version=getattr(dist, "version", None),
                requirement=requirement,
                compatible=compatible,
            )
        )
    return found


def _check_requirement(requires: Any, core_version: str) -> tuple[str | None, bool]:
    from packaging.requirements import Requirement  # costly: only on a cache miss

    for text in requires:
        req = Requirement(text)
        if _normalize(req.name) != CORE_DISTRIBUTION:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        ok = not req.specifier or req.specifier.contains(core_version, prereleases=True)
        return f"{CORE_DISTRIBUTION}{req.specifier}", ok
    return None, True


def find_entry_points(core_version: str) -> list[EntryPointInfo]:
    """The ``oplib`` entry points of installed distributions (cached; see module doc)."""
    use_cache = switched_on("OPLIB_ENTRY_POINT_CACHE")
    if use_cache:
        cached = read_cache(_KIND, core_version)
        if cached is not None:
            try:
                return [EntryPointInfo(*e) for e in cached]
            except TypeError:
                pass  # written by another version of this file: scan again
    found = _scan(core_version)
    if use_cache:
        write_cache(_KIND, core_version, [tuple(e._asdict().values()) for e in found])
    return found
