"""Truncated, damaged and foreign files given to ``load_library``: each is refused with a
``LibraryLoadError`` naming the path and what is wrong, before ``dlopen`` (which would map
pages past the end of a truncated file and die of ``SIGBUS`` reading them).

Each file is loaded in a child forked from one fresh interpreter (so a crash is reported as
that file's signal instead of ending the run), with a timeout per file and for the whole.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import oplib_core as oplib
from oplib_core._native._elf import read_library

from helpers import c_compiler, compile_library
from subproc import run_python

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "fork"),
    reason="the file checks read ELF files; the harness forks (Linux)",
)

LIB = r"""
#include "oplib.h"
static int k(const oplib_arg *a, int64_t n, DLTensor *o, int64_t no, oplib_error *e) { return 0; }
OPLIB_LIBRARY_INIT(api) {
  if (api->define(api->ctx, "filecheck::f", "(Tensor x) -> Tensor")) return 1;
  return api->impl(api->ctx, "filecheck::f", "cpu", k) ? 1 : 0;
}
"""

# Loads each path in a forked child; OUT[path] = [outcome, message], the outcome being
# "loaded", an exception's type name, "signal N" or "timeout".
PROBE = """
import json, os, signal, time
import oplib_core as oplib
oplib.plugins.load()  # in the parent: the children only load their file
for path in PATHS:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            oplib.ops.load_library(path)
            out = ["loaded", ""]
        except BaseException as e:
            out = [type(e).__name__, str(e)]
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
            break
        time.sleep(0.002)
    with os.fdopen(r, "rb") as f:
        said = f.read()
    if status is None:
        OUT[path] = ["timeout", ""]
    elif os.WIFSIGNALED(status):
        OUT[path] = [f"signal {os.WTERMSIG(status)}", ""]
    else:
        OUT[path] = json.loads(said) if said else [f"exit {os.WEXITSTATUS(status)}", ""]
"""


def probe(paths: list[str]) -> dict[str, list[str]]:
    return run_python(f"PATHS = {paths!r}\n" + PROBE, timeout=300)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    where = tmp_path_factory.mktemp("filecheck")
    with open(compile_library(LIB, where), "rb") as f:
        return f.read()


def _refused(outcome: list[str], path: str, *phrases: str) -> None:
    kind, message = outcome
    assert kind == "LibraryLoadError", f"{path}: {kind} {message}"
    assert path in message and any(p in message for p in phrases), message


def test_truncations_at_many_offsets_are_refused_never_a_signal(library, tmp_path):
    size = len(library)
    offsets = {0, 1, 3, 4, 15, 16, 17, 40, 63, 64, 65, 120, size - 1}
    offsets |= {size * i // 60 for i in range(1, 60)}
    paths = {}
    for offset in sorted(offsets):
        path = tmp_path / f"cut{offset}.so"
        path.write_bytes(library[:offset])
        paths[str(path)] = offset
    whole = tmp_path / "whole.so"
    whole.write_bytes(library)
    out = probe([*paths, str(whole)])
    assert out.pop(str(whole)) == ["loaded", ""]  # the harness can tell a good file
    bad = {paths[p]: o for p, o in out.items() if o[0] != "LibraryLoadError"}
    assert bad == {}, f"offsets not refused cleanly: {bad}"
    for path, outcome in out.items():
        _refused(outcome, path, "is truncated or damaged", "is not a shared library")


def test_random_bytes_are_refused_never_a_signal(library, tmp_path):
    rng = random.Random(34)
    paths = []
    for i, size in enumerate((1, 64, 4096, 65536)):
        path = tmp_path / f"noise{i}.so"
        path.write_bytes(rng.randbytes(size))
        paths.append(str(path))
    # the real ELF header followed by noise: the tables it points at are noise
    for i, size in enumerate((64, 4096, len(library))):
        path = tmp_path / f"header_noise{i}.so"
        path.write_bytes(library[:64] + rng.randbytes(size))
        paths.append(str(path))
    out = probe(paths)
    for path in paths:
        _refused(out[path], path, "is truncated or damaged", "is not a shared library", "damaged")


# -- damaged headers, patched into a good library (64-bit little-endian hosts) -------------

_LE64 = sys.byteorder == "little" and struct.calcsize("P") == 8


def _patched(library: bytes, where: Path, name: str, edits: dict[int, bytes]) -> str:
    data = bytearray(library)
    for offset, value in edits.items():
        data[offset : offset + len(value)] = value
    path = where / f"{name}.so"
    path.write_bytes(bytes(data))
    return str(path)


def _headers(library: bytes) -> tuple[int, int, int, int, int]:
    """e_phoff, e_phnum, e_shoff, e_shnum and the index of .dynsym of a 64-bit LE file."""
    phoff, shoff = struct.unpack_from("<QQ", library, 32)
    phnum, _, shnum = struct.unpack_from("<HHH", library, 56)
    dynsym = next(
        i for i in range(shnum) if struct.unpack_from("<I", library, shoff + 64 * i + 4)[0] == 11
    )
    return phoff, phnum, shoff, shnum, dynsym


@pytest.mark.skipif(not _LE64, reason="patches a 64-bit little-endian ELF file")
def test_damaged_headers_are_refused_naming_what_is_wrong(library, tmp_path):
    phoff, phnum, shoff, _, dynsym = _headers(library)
    load = next(
        i for i in range(phnum) if struct.unpack_from("<I", library, phoff + 56 * i)[0] == 1
    )
    huge = struct.pack("<QQ", len(library) * 4, len(library) * 4)
    cases = {
        # a loadable segment longer than the file: dlopen would map pages past its end
        _patched(library, tmp_path, "segment", {phoff + 56 * load + 32: huge}): (
            f"its segment {load} (bytes"
        ),
        _patched(
            library, tmp_path, "section", {shoff + 64 * dynsym + 24: struct.pack("<Q", 1 << 40)}
        ): (f"its section {dynsym} (bytes"),
        _patched(library, tmp_path, "phoff", {32: struct.pack("<Q", len(library) - 8)}): (
            "its program header table"
        ),
        _patched(library, tmp_path, "arm", {18: struct.pack("<H", 183)}): (
            "was built for another machine (AArch64, 64-bit); this process runs on"
        ),
        _patched(library, tmp_path, "class32", {4: b"\x01"}): "was built for another machine",
        _patched(library, tmp_path, "big_endian", {5: b"\x02"}): (
            "was built for another machine (big-endian); this process runs on little-endian"
        ),
        _patched(library, tmp_path, "exec", {16: struct.pack("<H", 2)}): (
            "is not a shared library: it is an executable"
        ),
        _patched(library, tmp_path, "ident", {6: b"\x07"}): "ELF identification is invalid",
    }
    out = probe(list(cases))
    for path, phrase in cases.items():
        _refused(out[path], path, phrase)


def test_an_object_file_a_directory_and_a_fifo_are_refused(tmp_path):
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) found: native-kernel tests need one; CI has gcc")
    src, obj = tmp_path / "k.c", tmp_path / "k.o"
    src.write_text(LIB)
    subprocess.run(
        [cc, "-c", "-fPIC", "-I", oplib.get_include(), str(src), "-o", str(obj)], check=True
    )
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    directory = tmp_path / "dir.so"
    directory.mkdir()
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    cut = tmp_path / "cut.so"  # the start of an ELF file: truncated, not "some other file"
    cut.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(3))
    cases = {
        str(obj): "is not a shared library: it is a relocatable object file (.o) (link it "
        "with cc -shared)",
        str(fifo): "is a FIFO, not a regular file; give the path of the library file itself",
        str(directory): "is a directory, not a regular file; give the path of the library",
        str(empty): "is truncated or damaged: it is empty (0 bytes); rebuild or reinstall it",
        str(cut): "is truncated or damaged: its ELF identification (bytes 0 to 16) lies beyond "
        "the end of the file (10 bytes)",
    }
    for path, phrase in cases.items():
        with pytest.raises(oplib.LibraryLoadError) as e:
            oplib.ops.load_library(path)
        assert e.value.library == path and phrase in str(e.value), str(e.value)
        assert path not in oplib.ops.loaded_libraries


@pytest.mark.skipif(not _LE64, reason="patches a 64-bit little-endian ELF file")
def test_a_library_without_section_headers_loads_and_its_segments_are_checked(library, tmp_path):
    """``sstrip`` drops the section headers (the loader reads none): such a library loads,
    its symbols found through the dynamic segment, and cut short it is refused by its
    segments."""
    # e_shoff, then e_shnum and e_shstrndx zeroed, the section header table cut off
    stripped = bytearray(library)
    stripped[40:48] = bytes(8)
    stripped[60:64] = bytes(4)
    phoff, phnum, _, _, _ = _headers(library)
    end = max(
        struct.unpack_from("<Q", library, phoff + 56 * i + 8)[0]
        + struct.unpack_from("<Q", library, phoff + 56 * i + 32)[0]
        for i in range(phnum)
    )
    stripped = stripped[: max(end, 64)]
    whole = tmp_path / "sstripped.so"
    whole.write_bytes(stripped)
    cuts = {}
    for offset in sorted({len(stripped) * i // 12 for i in range(1, 12)} | {len(stripped) - 1}):
        path = tmp_path / f"sstripped{offset}.so"
        path.write_bytes(stripped[:offset])
        cuts[str(path)] = offset
    out = probe([str(whole), *cuts])
    assert out.pop(str(whole)) == ["loaded", ""]
    for path, outcome in out.items():
        _refused(outcome, path, "its segment", "its program header table", "is damaged")


def test_mutated_libraries_give_a_result_or_a_load_error_from_the_reader(library, tmp_path):
    """The reader alone (it opens nothing, so this runs in-process): 1500 copies of the
    library with a few bytes changed in its headers and tables, each read quickly, with a
    result or a ``LibraryLoadError``, never another exception (a ``struct.error``, an
    ``OverflowError``)."""
    rng = random.Random(4)
    path = tmp_path / "mutant.so"
    size = len(library)
    outcomes = {"read": 0, "refused": 0}
    start = time.perf_counter()
    for _ in range(1500):
        data = bytearray(library)
        for _ in range(rng.randint(1, 4)):
            # mostly the headers and the dynamic tables near the start, some anywhere
            at = rng.randrange(min(size, 2048)) if rng.random() < 0.8 else rng.randrange(size)
            data[at] = rng.choice((0, 0xFF, rng.randrange(256), data[at] ^ (1 << rng.randrange(8))))
        path.write_bytes(bytes(data))
        try:
            read_library(str(path))
            outcomes["read"] += 1
        except oplib.LibraryLoadError as e:
            assert e.library == str(path) and str(path) in str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50 and outcomes["read"] > 50, outcomes
    assert time.perf_counter() - start < 60
