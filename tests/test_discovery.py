"""The entry-point cache: a hit skips the metadata scan; a stale or corrupt cache rescans."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oplib_core import _discovery as discovery
from oplib_core._version import __version__


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OPLIB_ENTRY_POINT_CACHE", raising=False)
    return tmp_path


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    real = discovery._scan

    def counting(version: str) -> list[discovery.EntryPointInfo]:
        counted.append(1)
        return real(version)

    monkeypatch.setattr(discovery, "_scan", counting)
    return counted


def names(found: list[discovery.EntryPointInfo]) -> set[str]:
    return {e.name for e in found}


def test_second_lookup_is_served_from_the_cache(cache_dir: Path, scans: list[int]) -> None:
    first = discovery.find_entry_points(__version__)
    second = discovery.find_entry_points(__version__)
    assert len(scans) == 1
    assert first == second and "cpu" in names(first)
    (cache_file,) = cache_dir.iterdir()
    assert cache_file.name.startswith("entry-points-") and cache_file.suffix == ".marshal"


def test_a_corrupt_cache_file_is_rescanned_and_rewritten(cache_dir: Path, scans: list[int]) -> None:
    expected = discovery.find_entry_points(__version__)
    (cache_file,) = cache_dir.iterdir()
    for garbage in (b"", b"\x00not marshal", b"[1, 2]"):
        cache_file.write_bytes(garbage)
        assert discovery.find_entry_points(__version__) == expected
    assert len(scans) == 4
    assert discovery.find_entry_points(__version__) == expected
    assert len(scans) == 4  # the rescans rewrote a good cache


def test_a_distribution_added_to_a_site_directory_invalidates_the_cache(
    cache_dir: Path, scans: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    discovery.find_entry_points(__version__)
    (cache_file,) = (f for f in cache_dir.iterdir() if f.name.startswith("entry-points-"))
    first = cache_file.stat().st_ino
    st = os.stat(site)
    os.utime(site, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a file came or went
    discovery.find_entry_points(__version__)
    written = cache_file.stat().st_ino
    assert len(scans) == 1 and written != first  # listed: no distribution added; rewritten
    discovery.find_entry_points(__version__)
    assert len(scans) == 1 and cache_file.stat().st_ino == written  # (no listing, no write)
    (site / "acme-1.0.dist-info").mkdir()  # "something installed"
    discovery.find_entry_points(__version__)
    assert len(scans) == 2


def test_cache_off_always_scans(
    cache_dir: Path, scans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPLIB_ENTRY_POINT_CACHE", "0")
    discovery.find_entry_points(__version__)
    discovery.find_entry_points(__version__)
    assert len(scans) == 2 and not list(cache_dir.iterdir())
