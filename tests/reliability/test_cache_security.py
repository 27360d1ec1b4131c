"""The start-up caches (``oplib_core/_discovery.py``, ``_registry/backend_cache.py``) cannot be
steered by whoever can put files in their directory: nothing is written through a planted
link, a planted cache file imports nothing no installed distribution declares and hides
no plugin, a FIFO hangs nothing, a flipped bit never gives a wrong table, and a directory
others may write is not used at all."""

from __future__ import annotations

import marshal
import os
import stat
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from oplib_core import _discovery, _plugin_host, plugins
from oplib_core._registry import backend_cache as _backend_cache
from oplib_core._version import __version__

from subproc import run_python

KIND = "entry-points"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of the user's own (mode 700), for this process."""
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(directory))
    for switch in ("OPLIB_ENTRY_POINT_CACHE", "OPLIB_LAZY_BACKENDS"):
        monkeypatch.delenv(switch, raising=False)
    return directory


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    real = _discovery._scan

    def counting(version: str) -> Any:
        counted.append(1)
        return real(version)

    monkeypatch.setattr(_discovery, "_scan", counting)
    return counted


def cache_file(directory: Path, kind: str = KIND) -> Path:
    """Where this process reads and writes the cache ``kind``."""
    return Path(_discovery._cache_file(str(directory), kind, _discovery._path_entries()))


# -- links and temporary files -----------------------------------------------------------
def test_links_planted_at_the_file_names_are_never_written_through(
    cache_dir: Path, tmp_path: Path, scans: list[int]
) -> None:
    target = cache_file(cache_dir)
    victims = {name: tmp_path / name for name in ("old-temp-name", "cache-name")}
    for victim in victims.values():
        victim.write_bytes(b"precious")
    # the name the cache used to write through (f"{path}.{pid}.tmp"), and the file's own
    os.symlink(victims["old-temp-name"], f"{target}.{os.getpid()}.tmp")
    os.symlink(victims["cache-name"], target)

    first = _discovery.find_entry_points(__version__)
    assert "cpu" in {e.name for e in first}
    for victim in victims.values():
        assert victim.read_bytes() == b"precious"
    # the planted link at the cache's name was replaced, not followed: a file of its own
    assert stat.S_ISREG(os.lstat(target).st_mode)
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o600
    # and the temporary file went away under its new name
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(
        [target.name, f"{target.name}.{os.getpid()}.tmp"]
    )
    assert _discovery.find_entry_points(__version__) == first
    assert len(scans) == 1


def test_a_link_to_a_valid_cache_file_is_not_read(cache_dir: Path, scans: list[int]) -> None:
    _discovery.find_entry_points(__version__)
    target = cache_file(cache_dir)
    elsewhere = cache_dir.parent / "elsewhere.marshal"
    os.replace(target, elsewhere)
    os.symlink(elsewhere, target)
    assert _discovery.read_cache(KIND, __version__) is None
    _discovery.find_entry_points(__version__)
    assert len(scans) == 2


def test_a_new_cache_directory_is_made_for_the_user_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "new" / "oplib"
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(directory))
    _discovery.find_entry_points(__version__)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (written,) = directory.iterdir()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


# -- planted cache files -----------------------------------------------------------------
EVIL = """
import os
open(os.environ["EVIL_MARK"], "w").write("imported")
"""

WARM = """
import numpy as np
import oplib_core as oplib
oplib.ops.oplib.sin(np.ones(1))
"""

# Plants with oplib's own writer, so that the checksum is right: what an attacker who
# could write the directory would do. ``data`` is the stored entry-point table.
PLANT = """
from oplib_core import _discovery as d
from oplib_core._version import __version__ as v
data = d.read_cache("entry-points", v)
assert data is not None, "the warm-up wrote no cache"
(cpu,) = [e for e in data["entry_points"] if e[0] == "cpu"]
{change}
d.write_cache("entry-points", v, data)
OUT["planted"] = d.read_cache("entry-points", v) == data
"""

PLANTS = {
    # the cpu entry point now names the attacker's module
    "value replaced": """
data["entry_points"] = [(*e[:1], "evil_mod", *e[2:]) if e[0] == "cpu" else e
                        for e in data["entry_points"]]
""",
    # one more entry point, credited to an installed distribution that does not declare it
    "entry added": """
data["entry_points"].append(("evil", "evil_mod", *cpu[2:]))
""",
    # a distribution of the attacker's, outside sys.path, declaring it; and cpu hidden
    "distribution outside sys.path": """
import os
info = os.path.join(os.environ["EVIL_DIR"], "evil-1.0.dist-info")
os.makedirs(info)
text = b"[oplib]\\nevil = evil_mod\\n"
open(os.path.join(info, "entry_points.txt"), "wb").write(text)
data["distributions"].append((info, d.checksum(text)))
index = len(data["distributions"]) - 1
data["entry_points"] = [e for e in data["entry_points"] if e[0] != "cpu"]
data["entry_points"].append(("evil", "evil_mod", "evil", "1.0", None, True, index))
""",
    # cpu left out: the table would lack it
    "cpu hidden": """
data["entry_points"] = [e for e in data["entry_points"] if e[0] != "cpu"]
""",
}

CHECK = """
import sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import oplib_core as oplib
OUT["sin"] = oplib.ops.oplib.sin(np.zeros(2)).tolist()
OUT["evil imported"] = "evil_mod" in sys.modules
OUT["plugins"] = {p.name: p.status for p in oplib.plugins.list()}
"""


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_cache_imports_nothing_undeclared_and_hides_no_plugin(
    tmp_path: Path, plant: str
) -> None:
    # (run in ``cwd``, where evil_mod.py lies: importable, were anything to import it)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "evil_mod.py").write_text(EVIL)
    cache = tmp_path / "cache"
    mark = tmp_path / "imported"
    env = {
        "OPLIB_CACHE_DIR": str(cache),
        "EVIL_MARK": str(mark),
        "EVIL_DIR": str(tmp_path),
    }
    run_python(WARM, env, cwd=cwd)
    plant_code = PLANT.format(change=textwrap.dedent(PLANTS[plant]))
    assert run_python(plant_code, env, cwd=cwd) == {"planted": True}

    out = run_python(CHECK, env, cwd=cwd)
    assert out["sin"] == [0.0, 0.0]
    assert out["evil imported"] is False and not mark.exists()
    assert out["plugins"]["cpu"] == "loaded"
    assert "evil" not in out["plugins"]


def test_an_entry_point_cache_checks_each_entry_against_the_distribution(
    cache_dir: Path, scans: list[int]
) -> None:
    found = _discovery.find_entry_points(__version__)
    data = _discovery.read_cache(KIND, __version__)
    entries = _discovery._path_entries()
    assert _discovery._from_cache(data, entries) == found
    # a distribution's directory that is no longer on sys.path: not trusted
    assert _discovery._from_cache(data, [p for p in entries if "site-packages" not in p]) is None
    assert len(scans) == 1


# -- special files -----------------------------------------------------------------------
@pytest.mark.parametrize("planted", ["fifo", "link to a fifo", "link to a device"])
def test_special_files_in_the_cache_directory_hang_nothing(tmp_path: Path, planted: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cache = tmp_path / "cache"
    env = {"OPLIB_CACHE_DIR": str(cache)}
    run_python(WARM, env, cwd=cwd)
    files = sorted(cache.iterdir())
    assert {f.name.split("-")[0] for f in files} == {"entry", "backends"}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for f in files:
        f.unlink()
        if planted == "fifo":
            os.mkfifo(f)
        else:
            os.symlink(fifo if planted == "link to a fifo" else "/dev/zero", f)
    # a cache opened for a blocking read would wait here for a writer that never comes
    out = run_python(CHECK, env, cwd=cwd, timeout=60)
    assert out["sin"] == [0.0, 0.0] and out["plugins"]["cpu"] == "loaded"
    for f in files:  # replaced by regular files, the special ones untouched
        assert stat.S_ISREG(os.lstat(f).st_mode)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_reading_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _discovery.read_regular_file(str(fifo)) is None
    assert _discovery.read_regular_file("/dev/null") is None
    assert _discovery.read_regular_file(str(tmp_path)) is None
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    assert _discovery.read_regular_file(str(big), limit=10) is None
    assert _discovery.read_regular_file(str(big), limit=11) == b"x" * 11


# -- corruption --------------------------------------------------------------------------
def flipped(content: bytes, bit: int) -> bytes:
    data = bytearray(content)
    data[bit // 8] ^= 1 << (bit % 8)
    return bytes(data)


def real_backends_record() -> None:
    """Write the waiting-plugin record this process's plugins give (the real one)."""
    plugins.load()
    deferrable = _plugin_host.HOST._deferrable()
    assert {p.name for p in deferrable} >= {"cuda", "meta", "privateuse"}
    _backend_cache.write(__version__, deferrable)


@pytest.mark.parametrize("kind", ["entry points", "waiting plugins"])
def test_no_single_bit_flip_gives_a_table(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    if kind == "entry points":
        _discovery.find_entry_points(__version__)
        read = lambda: _discovery.read_cache(KIND, __version__)  # noqa: E731
        target = cache_file(cache_dir)
    else:
        real_backends_record()
        read = lambda: _backend_cache.read(__version__)  # noqa: E731
        (target,) = cache_dir.glob("backends-*")
    good = target.read_bytes()
    expected = read()
    assert expected is not None
    # The file's bytes are swapped in memory (writing the file ~50k times is slow); a
    # flipped bit on disk goes through the same read: see the next test.
    content = [good]
    real = _discovery.read_regular_file

    def reading(path: str, **kwargs: Any) -> bytes | None:
        return content[0] if path == str(target) else real(path, **kwargs)

    monkeypatch.setattr(_discovery, "read_regular_file", reading)
    wrong = []
    for bit in range(len(good) * 8):  # every bit of the file
        content[0] = flipped(good, bit)
        if read() is not None:
            wrong.append(bit)
    assert wrong == []
    for size in range(len(good)):  # and every truncation
        content[0] = good[:size]
        if read() is not None:
            wrong.append(-size)
    assert wrong == []
    content[0] = good
    assert read() == expected


def test_a_flipped_bit_in_a_plugin_name_rebuilds_the_cache(tmp_path: Path) -> None:
    # the case: one flip in "oplib_cpu.plugin" had every later run with cpu failed
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cache = tmp_path / "cache"
    env = {"OPLIB_CACHE_DIR": str(cache)}
    run_python(WARM, env, cwd=cwd)
    (target,) = cache.glob("entry-points-*")
    good = target.read_bytes()
    where = good.index(b"oplib_cpu.plugin")
    target.write_bytes(flipped(good, (where + 6) * 8))  # "oplib_bpu.plugin"
    for _ in range(2):
        out = run_python(CHECK, env, cwd=cwd)
        assert out["sin"] == [0.0, 0.0] and out["plugins"]["cpu"] == "loaded"
    assert b"oplib_cpu.plugin" in target.read_bytes()  # rebuilt


def test_a_file_marshal_cannot_read_is_rebuilt(cache_dir: Path, scans: list[int]) -> None:
    found = _discovery.find_entry_points(__version__)
    target = cache_file(cache_dir)
    payload = b"\xff not marshal"
    target.write_bytes(_discovery._MAGIC + _discovery.checksum(payload) + payload)
    assert _discovery.find_entry_points(__version__) == found
    payload = marshal.dumps(("not", "the inputs"))
    target.write_bytes(_discovery._MAGIC + _discovery.checksum(payload) + payload)
    assert _discovery.find_entry_points(__version__) == found
    assert len(scans) == 3
    assert _discovery.find_entry_points(__version__) == found
    assert len(scans) == 3


# -- whose directory ---------------------------------------------------------------------
def refused(directory: Path, scans: list[int]) -> list[str]:
    """Run discovery twice with ``directory`` as the cache; the warnings it gave."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = _discovery.find_entry_points(__version__)
        assert _discovery.find_entry_points(__version__) == first
        assert _backend_cache.read(__version__) is None
    assert len(scans) == 2  # no cache: scanned each time
    assert "cpu" in {e.name for e in first}
    assert all(w.category is UserWarning for w in seen)
    return [str(w.message) for w in seen]


@pytest.mark.parametrize(
    ("mode", "who"), [(0o770, "group"), (0o707, "others"), (0o777, "group and others")]
)
def test_a_directory_others_may_write_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scans: list[int], mode: int, who: str
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(directory))
    (message,) = refused(directory, scans)  # one warning, not one per read or write
    assert f"{directory} is writable by {who} (mode {mode:o})" in message
    assert f"chmod go-w {directory}" in message
    assert "OPLIB_CACHE_DIR" in message and "OPLIB_ENTRY_POINT_CACHE=0" in message
    assert list(directory.iterdir()) == []  # nothing written there


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a directory away needs root"
)
def test_a_directory_of_another_user_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scans: list[int]
) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o755)
    os.chown(directory, 65534, 65534)  # nobody
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(directory))
    (message,) = refused(directory, scans)
    assert "belongs to user id 65534, not to you (user id 0)" in message
    assert list(directory.iterdir()) == []


def test_a_file_where_the_directory_should_be_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scans: list[int]
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(not_a_directory))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _discovery.find_entry_points(__version__)
        _discovery.find_entry_points(__version__)
    assert len(scans) == 2
    (message,) = [str(w.message) for w in seen]
    assert f"{not_a_directory} is not a directory" in message


def test_a_refused_directory_warns_once_in_a_fresh_process(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    code = """
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        import numpy as np
        import oplib_core as oplib
        OUT["sin"] = oplib.ops.oplib.sin(np.zeros(1)).tolist()
        oplib.plugins.list()
    OUT["warnings"] = [[w.category.__name__, str(w.message)] for w in seen]
    """
    out = run_python(code, {"OPLIB_CACHE_DIR": str(directory)})
    assert out["sin"] == [0.0]
    (warning,) = out["warnings"]
    assert warning[0] == "UserWarning" and "chmod go-w" in warning[1]
    assert list(directory.iterdir()) == []
    # switched off: nothing read, nothing said
    off = {"OPLIB_CACHE_DIR": str(directory), "OPLIB_ENTRY_POINT_CACHE": "0"}
    out = run_python(code, {**off, "OPLIB_LAZY_BACKENDS": "0"})
    assert out["warnings"] == []
