"""Finding plugins cheaply: the ``oplib`` entry points of installed distributions, and the
start-up cache that spares the scan.

Scanning every installed distribution's metadata costs tens of milliseconds (and imports
``importlib.metadata`` and ``email``). The result is cached in a small file, valid while
what it was built from is unchanged: the interpreter, core's version, every ``sys.path``
entry (the script's directory, ``sys.path[0]``, included) with its identity and
modification time (installing or removing a distribution adds or removes a ``*.dist-info``
directory there, which changes that time; when the time moved, the directory's
``*.dist-info``/``*.egg-info`` entries are listed, and the file, if they are the same, is
written again with the new time: a script's directory, where files come and go, costs a
listing now and then, not a scan), and the content of the ``entry_points.txt`` of every
distribution that declares an ``oplib`` entry point (an edit in place changes no
directory). ``OPLIB_ENTRY_POINT_CACHE=0`` turns the cache off; ``OPLIB_CACHE_DIR`` moves
it (default ``$XDG_CACHE_HOME/oplib``, else ``~/.cache/oplib``).

The cache is never trusted with more than a start-up's speed:

- its directory must belong to the user and be writable by nobody else (as pip checks
  its cache), else the caches are off, with one warning that says how to fix it;
- files are written to a fresh ``mkstemp`` name in that directory and renamed into place,
  so nothing planted there is written through; only regular files are read (a symlink, a
  FIFO or a device is refused without opening it for a blocking read);
- each file carries the inputs above and a checksum of all it holds: a file corrupted,
  truncated or built from other inputs is rebuilt, without an error;
- every cached entry point is checked against its distribution's ``entry_points.txt``
  (the same file ``importlib.metadata`` reads, in a directory on ``sys.path``) before
  anything is imported: a cache never makes oplib import a module that no installed
  distribution declares, nor hides one that one does.

Files are in ``marshal`` format (plain data only, read without importing anything; ``json``
alone would cost a few milliseconds), named per interpreter version since that format is.

Each entry also records whether the distribution's requirement on ``oplib-core`` accepts
the installed version, so an incompatible plugin is reported before its module is imported.
"""

from __future__ import annotations

import contextlib
import importlib
import marshal
import os
import stat
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from ._records import Record

__all__ = [
    "EntryPointInfo",
    "cache_directory",
    "checksum",
    "find_entry_points",
    "load",
    "read_cache",
    "read_regular_file",
    "switched_on",
    "write_cache",
]

GROUP = "oplib"
CORE_DISTRIBUTION = "oplib-core"
_CACHE_VERSION = 4
_KIND = "entry-points"
_MAGIC = b"oplib\x00c\x04"  # (8 bytes) what a cache file starts with, then its checksum
_PRIME = 2**128 - 159
_CHECKSUM_SIZE = 16
_HEADER = len(_MAGIC) + _CHECKSUM_SIZE
_MAX_SIZE = 1 << 24  # a cache file is a few kB; a bigger one is not ours
_SWITCHES = "OPLIB_ENTRY_POINT_CACHE=0 and OPLIB_LAZY_BACKENDS=0"

# Directories already refused in this process: the warning is given once, not at each read.
_refused: set[str] = set()


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


def switched_on(variable: str) -> bool:
    """Whether the switch ``variable`` (an ``OPLIB_*`` environment variable, default on) is
    on: off for ``0``, ``false``, ``no`` or ``off``, in any case."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def checksum(*parts: bytes) -> bytes:
    """A 16-byte checksum of ``parts``: their bytes (each led by its length) read as one
    number, modulo the largest prime below 2**128. Any change within 127 consecutive bits
    (a flipped bit, a torn byte) changes it, any other with odds of 2**-128 of not.

    It detects corruption; it is not a signature (nothing secret keys it): what keeps other
    users from writing a cache file is the directory check. It costs microseconds, where
    the first use of ``hashlib`` costs a start-up 0.25 ms (``blake2b``) to 3 ms (OpenSSL)
    of importing."""
    data = b"".join(len(part).to_bytes(8, "big") + part for part in parts)
    return (int.from_bytes(b"\x01" + data, "big") % _PRIME).to_bytes(_CHECKSUM_SIZE, "big")


# -- the cache directory -------------------------------------------------------------------
def cache_directory() -> str:
    """Where the start-up caches live: ``OPLIB_CACHE_DIR``, else ``oplib`` in
    ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    return os.environ.get("OPLIB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "oplib",
    )


def _why_unsafe(st: os.stat_result) -> str | None:
    """Why a directory with status ``st`` may not hold the cache (None: it may)."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # Windows: its ACLs, not mode bits, decide who may write
        return None
    if st.st_uid != getuid():
        return (
            f"belongs to user id {st.st_uid}, not to you (user id {getuid()}): its owner "
            f"could plant files there that make oplib import their code"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(
            w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit
        )
        return (
            f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}): another user could "
            f"plant files there that make oplib import their code"
        )
    return None


def _usable_directory(create: bool) -> str | None:
    """The cache directory if it may be used (made, mode 700, when ``create``); None when
    it is missing or refused (refused: one ``UserWarning`` per directory and process)."""
    base = cache_directory()
    try:
        if create:
            os.makedirs(base, mode=0o700, exist_ok=True)
        st = os.stat(base)
    except OSError:
        return None  # not there yet (a read), or not creatable: no cache, nothing to say
    why = _why_unsafe(st)
    if why is None:
        return base
    if base not in _refused:
        _refused.add(base)
        warnings.warn(
            f"oplib's start-up cache is off: its directory {base} {why}. Fix: "
            f"'chmod go-w {base}' (if it is yours), or set OPLIB_CACHE_DIR to a directory "
            f"of your own, or switch the caches off ({_SWITCHES})",
            UserWarning,
            stacklevel=2,
        )
    return None


# -- what a cache file is valid for --------------------------------------------------------
def _path_entries() -> list[str]:
    """``sys.path`` as the import system sees it (``""`` is the current directory)."""
    return [p or os.getcwd() for p in sys.path]


def _distributions_in(directory: str) -> bytes:
    """A checksum of the ``*.dist-info``/``*.egg-info`` entries of ``directory`` (what
    ``importlib.metadata`` looks for there), with their inode numbers (a reinstall makes a
    new one)."""
    try:
        with os.scandir(directory) as it:
            found = sorted(
                f"{e.name}/{e.inode()}"
                for e in it
                if e.name.lower().endswith((".dist-info", ".egg-info"))
            )
    except OSError:
        return b""
    return checksum("\n".join(found).encode())


def _inputs(core_version: str, entries: list[str]) -> tuple[Any, ...]:
    """What a cache file is built from: the interpreter, core, and each ``sys.path`` entry
    with its identity (device, inode), modification time and, for a directory, the
    distributions in it (a missing entry counts as missing)."""
    stats = []
    for p in entries:
        try:
            st = os.stat(p)
        except OSError:
            stats.append((p, -1, -1, -1, b""))
            continue
        held = _distributions_in(p) if stat.S_ISDIR(st.st_mode) else b""
        stats.append((p, st.st_dev, st.st_ino, st.st_mtime_ns, held))
    return (_CACHE_VERSION, sys.executable, core_version, tuple(stats))


def _still(inputs: Any, core_version: str, entries: list[str]) -> bool | None:
    """Whether ``inputs`` (what a file was built from) hold now: True, False, or None
    when they hold only after listing a directory whose modification time moved with no
    distribution added or removed (a script's directory, where files come and go); the
    file is then written again with the new times, so later start-ups need no listing."""
    version, executable, core, stats = inputs
    if (version, executable, core) != (_CACHE_VERSION, sys.executable, core_version):
        return False
    if len(stats) != len(entries):
        return False
    listed = False
    for (p, dev, ino, mtime, held), now in zip(stats, entries, strict=True):
        if p != now:
            return False
        try:
            st = os.stat(p)
        except OSError:
            if dev == -1:
                continue
            return False
        if (st.st_dev, st.st_ino, st.st_mtime_ns) == (dev, ino, mtime):
            continue
        if (st.st_dev, st.st_ino) != (dev, ino) or not stat.S_ISDIR(st.st_mode):
            return False  # another directory there, or a zip changed
        if _distributions_in(p) != held:
            return False
        listed = True
    return None if listed else True


def _cache_file(base: str, kind: str, entries: list[str]) -> str:
    # one file per interpreter and search path, so that two projects (or a script run
    # from two directories) keep their own rather than overwrite each other's
    key = checksum(sys.executable.encode(), repr(entries).encode())[-8:].hex()
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(base, f"{kind}-{key}.{py}.marshal")


def read_regular_file(path: str, *, own: bool = False, limit: int = _MAX_SIZE) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes (and, with
    ``own``, the user's, on POSIX); None for anything else: missing, a symlink, a FIFO or a
    device (never opened for a blocking read), too big, unreadable."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None  # (not even opened: opening some devices has effects)
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
        # what lstat saw may have been swapped since: open no symlink, block on no FIFO
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        getuid = getattr(os, "getuid", None)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_size > limit
            or (own and getuid is not None and st.st_uid != getuid())
        ):
            return None
        chunks = []
        size = 0
        while chunk := os.read(fd, st.st_size - size + 1):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return None
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_metadata(path: str) -> bytes | None:
    """The bytes of a distribution's metadata file (``entry_points.txt``), None when it
    cannot be read. Leaner than :func:`read_regular_file`, as every start-up reads a few:
    a FIFO there gives no bytes rather than a wait; anything else that is not a file gives
    bytes its checksum will not match."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            if len(chunks) > 16:
                return None  # (an entry_points.txt is a few hundred bytes)
        return b"".join(chunks)
    except OSError:
        return None  # a directory, or a FIFO with no writer
    finally:
        os.close(fd)


def read_cache(kind: str, core_version: str) -> Any:
    """What :func:`write_cache` stored under ``kind`` for the inputs as they are now; None
    when there is nothing, it is stale, corrupt, written by another Python, or the cache
    directory is refused (see the module doc)."""
    base = _usable_directory(create=False)
    if base is None:
        return None
    entries = _path_entries()
    content = read_regular_file(_cache_file(base, kind, entries), own=True)
    if content is None or len(content) < _HEADER or not content.startswith(_MAGIC):
        return None
    payload = content[_HEADER:]
    if content[len(_MAGIC) : _HEADER] != checksum(payload):
        return None  # corrupt
    try:
        inputs, data = marshal.loads(payload)
        holds = _still(inputs, core_version, entries)
    except (EOFError, ValueError, TypeError):
        return None  # not what this version writes
    if holds is False:
        return None
    if holds is None:
        write_cache(kind, core_version, data)
    return data


def write_cache(kind: str, core_version: str, data: Any) -> None:
    """Store ``data`` (plain values only) under ``kind``, valid while the inputs it was
    built from are unchanged (see the module doc). Written to a fresh temporary file in the
    cache directory and renamed into place; an unusable directory only costs the next
    start-up the work again."""
    base = _usable_directory(create=True)
    if base is None:
        return
    entries = _path_entries()
    try:
        payload = marshal.dumps((_inputs(core_version, entries), data))
    except ValueError:
        return  # (a value marshal cannot store: no cache, as with a read-only directory)
    import tempfile  # (only when writing: a start-up that reads pays nothing for it)

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}-", suffix=".tmp", dir=base)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + checksum(payload) + payload)
        os.replace(tmp, _cache_file(base, kind, entries))
    except BaseException as e:
        with contextlib.suppress(OSError):  # (the directory may have gone)
            os.unlink(tmp)
        if not isinstance(e, OSError):  # a full disk: no cache this time; Ctrl-C: stop
            raise


# -- entry points --------------------------------------------------------------------------
def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _declared(text: bytes) -> set[tuple[str, str]]:
    """The ``(name, value)`` pairs of the ``[oplib]`` section of an ``entry_points.txt``,
    read by ``importlib.metadata``'s rules (lines stripped; blank lines and ``#`` comments
    skipped; ``name = value`` split at the first ``=``)."""
    found = set()
    section = None
    for line in text.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == GROUP:
            name, _, value = line.partition("=")
            found.add((name.strip(), value.strip()))
    return found


def _metadata_directory(dist: Any) -> str | None:
    """The directory a ``PathDistribution`` reads (``*.dist-info``, ``*.egg-info``), or
    None for a distribution found another way (a zip, a custom finder)."""
    path = getattr(dist, "_path", None)  # (no public name for it)
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return None
    return os.path.abspath(os.fspath(path))


def _scan(core_version: str) -> tuple[list[EntryPointInfo], list[str | None]]:
    """The entry points, and for each the metadata directory of its distribution."""
    from importlib.metadata import entry_points  # costly: only on a cache miss

    found = []
    sources = []
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
        sources.append(None if dist is None else _metadata_directory(dist))
    return found, sources


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


def _to_cache(found: list[EntryPointInfo], sources: list[str | None]) -> Any:
    """What the cache stores: each distribution's metadata directory with a checksum of its
    ``entry_points.txt``, and each entry point with the index of its distribution. None
    when an entry point cannot be checked on reading (no metadata directory)."""
    directories: dict[str, int] = {}
    stored = []
    for info, directory in zip(found, sources, strict=True):
        if directory is None:
            return None
        if directory not in directories:
            directories[directory] = len(directories)
        stored.append((*info._asdict().values(), directories[directory]))
    checked = []
    for directory in directories:
        text = _read_metadata(os.path.join(directory, "entry_points.txt"))
        if text is None:
            return None
        checked.append((directory, checksum(text)))
    return {"distributions": checked, "entry_points": stored}


def _from_cache(data: Any, entries: Iterable[str]) -> list[EntryPointInfo] | None:
    """The cached entry points if each distribution is still on ``sys.path`` (``entries``)
    with the same ``entry_points.txt``, declaring exactly the cached entry points; else
    None (scan again)."""
    try:
        on_path = {os.path.abspath(p) for p in entries}
        declared = []
        for directory, expected in data["distributions"]:
            if os.path.dirname(directory) not in on_path:
                return None
            text = _read_metadata(os.path.join(directory, "entry_points.txt"))
            if text is None or checksum(text) != expected:
                return None
            declared.append(_declared(text))
        found: list[EntryPointInfo] = []
        listed: list[set[tuple[str, str]]] = [set() for _ in declared]
        for *fields, source in data["entry_points"]:
            info = EntryPointInfo(*fields)
            if (info.name, info.value) not in declared[source]:
                return None
            listed[source].add((info.name, info.value))
            found.append(info)
        if listed != declared:
            return None  # one it declares is missing
        return found
    except (KeyError, TypeError, ValueError, IndexError):
        return None  # not what this version writes


def find_entry_points(core_version: str) -> list[EntryPointInfo]:
    """The ``oplib`` entry points of installed distributions (cached; see module doc)."""
    use_cache = switched_on("OPLIB_ENTRY_POINT_CACHE")
    if use_cache:
        cached = read_cache(_KIND, core_version)
        if cached is not None:
            found = _from_cache(cached, _path_entries())
            if found is not None:
                return found
    found, sources = _scan(core_version)
    if use_cache:
        data = _to_cache(found, sources)
        if data is not None:
            write_cache(_KIND, core_version, data)
    return found
