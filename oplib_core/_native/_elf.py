"""Reading a native library's ELF file before it is opened: the file is checked to be a
whole shared object for this process's machine, and the ABI version and the entry symbol
are read from its dynamic symbol table, so a library built for another ABI (or no oplib
library at all) is refused without running any of its code (``dlopen`` runs its
constructors).

The checks are the ones that keep ``dlopen`` from crashing: every table and segment the
loader maps or reads must lie inside the file. A truncated file otherwise maps pages past
its end, and the first read of one kills the process with ``SIGBUS``. Pure Python on
``struct``; the file is read with ``read``, never mapped (a file shrinking under a mapping
is the same ``SIGBUS``).
"""

from __future__ import annotations

import os
import re
import stat
import struct
import sys
from dataclasses import dataclass
from typing import BinaryIO

from . import _abi as A
from ._errors import LibraryLoadError

__all__ = ["LibraryFile", "kind_of", "read_library"]

_MAGIC = b"\x7fELF"
_ET_NAMES = {
    0: "of no type",
    1: "a relocatable object file (.o)",
    2: "an executable",
    4: "a core dump",
}
_ET_DYN = 3
_ENDIAN = {1: "little-endian", 2: "big-endian"}
_PT_LOAD = 1
_PT_DYNAMIC = 2
_SHT_NOBITS = 8
_DT_NULL, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SYMENT = 0, 4, 5, 6, 10, 11
_DT_GNU_HASH = 0x6FFFFEF5
_SHN_UNDEF = 0
_SHN_LORESERVE = 0xFF00
_EXPORTED_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
_EXPORTED_VISIBILITY = (0, 3)  # STV_DEFAULT, STV_PROTECTED
#: Names of the common ``e_machine`` values, for the message about a foreign library.
_MACHINES = {
    3: "x86 (32-bit)",
    8: "MIPS",
    20: "PowerPC",
    21: "PowerPC 64",
    22: "s390",
    40: "ARM (32-bit)",
    62: "x86-64",
    183: "AArch64",
    243: "RISC-V",
    258: "LoongArch",
}


@dataclass(frozen=True)
class _Layout:
    """The struct formats of one ELF class (without the byte-order prefix)."""

    bits: int
    header: str  # after e_ident: e_type ... e_shstrndx
    phdr: str
    shdr: str
    sym: str


_LAYOUTS = {
    1: _Layout(32, "HHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "IIIBBH"),
    2: _Layout(64, "HHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "IBBHQQ"),
}


@dataclass(frozen=True)
class LibraryFile:
    """What oplib needs from a library file before opening it: the value of its
    ``oplib_library_abi_version`` (None when it does not export one) and whether it exports
    ``oplib_library_init``."""

    abi_version: int | None
    has_init: bool


@dataclass(frozen=True)
class _Segment:
    type: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class _File:
    """Bounded reads of the library file: every read names what it reads, and a read past
    the end of the file is an error saying so."""

    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self.f = f
        self.path = path
        self.size = size

    def fail(self, what: str) -> LibraryLoadError:
        return LibraryLoadError(f"load_library(): {self.path} {what}", library=self.path)

    def check(self, offset: int, length: int, what: str) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise self.fail(
                f"is truncated or damaged: its {what} (bytes {offset} to {offset + length}) "
                f"lies beyond the end of the file ({self.size} bytes); rebuild or reinstall it"
            )

    def read(self, offset: int, length: int, what: str) -> bytes:
        self.check(offset, length, what)
        self.f.seek(offset)
        data = self.f.read(length)
        if len(data) != length:  # it shrank while being read
            raise self.fail(f"changed while being read (its {what} could not be read)")
        return data


def _host_ident() -> bytes | None:
    """``e_ident`` and ``e_machine`` of the running interpreter (its class, byte order and
    machine are what a library must match), or None where it cannot be read."""
    for exe in ("/proc/self/exe", os.path.realpath(sys.executable)):
        try:
            with open(exe, "rb") as f:
                head = f.read(20)
        except OSError:
            continue
        if head[:4] == _MAGIC and len(head) == 20:
            return head
    return None


_HOST = _host_ident()


def _machine_name(code: int) -> str:
    return _MACHINES.get(code, f"ELF machine {code}")


def read_library(path: str) -> LibraryFile:
    """Check the ELF file at ``path`` and read its oplib symbols, running none of its code.
    Raises :class:`LibraryLoadError` naming the path and what is wrong: not a regular file,
    not ELF, not a shared object, built for another machine, truncated or damaged."""
    try:
        # O_NONBLOCK: a FIFO planted at the path is refused, not waited on.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise LibraryLoadError(
            f"load_library(): {path} cannot be read ({e.strerror})", library=path
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise LibraryLoadError(
                f"load_library(): {path} is {kind_of(mode)}, not a regular file; give the "
                "path of the library file itself (a .so built with cc -shared)",
                library=path,
            )
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        return _read(_File(f, path, os.fstat(fd).st_size))


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, from its ``st_mode``, for an error."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _read(file: _File) -> LibraryFile:
    if file.size == 0:
        raise file.fail("is truncated or damaged: it is empty (0 bytes); rebuild or reinstall it")
    head = file.read(0, min(4, file.size), "ELF magic number")
    if file.size < 16 and _MAGIC.startswith(head):
        # the start of an ELF file, cut short: not "some other kind of file"
        file.check(0, 16, "ELF identification")
    if head != _MAGIC:
        raise file.fail(
            "is not a shared library: it does not start with the ELF magic number "
            "(expected a .so built with cc -shared)"
        )
    ident = file.read(0, 16, "ELF identification")
    elf_class, data, version = ident[4], ident[5], ident[6]
    layout = _LAYOUTS.get(elf_class)
    if layout is None or data not in (1, 2) or version != 1:
        raise file.fail(
            f"is damaged: its ELF identification is invalid (class {elf_class}, data "
            f"encoding {data}, version {version})"
        )
    order = "<" if data == 1 else ">"
    hfmt = order + layout.header
    fields = struct.unpack(hfmt, file.read(16, struct.calcsize(hfmt), "ELF header"))
    e_type, e_machine = fields[0], fields[1]
    e_phoff, e_shoff = fields[4], fields[5]
    e_phentsize, e_phnum, e_shentsize, e_shnum = fields[8], fields[9], fields[10], fields[11]
    if _HOST is not None:
        host_class, host_data = _HOST[4], _HOST[5]
        host_machine = struct.unpack(("<" if host_data == 1 else ">") + "H", _HOST[18:20])[0]
        if (elf_class, data, e_machine) != (host_class, host_data, host_machine):
            if data != host_data:
                theirs, ours = _ENDIAN[data], _ENDIAN[host_data]
            else:
                theirs = f"{_machine_name(e_machine)}, {layout.bits}-bit"
                ours = f"{_machine_name(host_machine)}, {_LAYOUTS[host_class].bits}-bit"
            raise file.fail(
                f"was built for another machine ({theirs}); this process runs on {ours}"
            )

    if e_type != _ET_DYN:
        what = _ET_NAMES.get(e_type, f"of ELF type {e_type}")
        hint = " (link it with cc -shared)" if e_type == 1 else ""
        raise file.fail(f"is not a shared library: it is {what}{hint}")
    if e_phnum == 0xFFFF:  # PN_XNUM: the count is in section 0's sh_info
        e_phnum = _section0(file, order, layout, e_shoff)[7]
    _check_sections(file, order, layout, e_shoff, e_shentsize, e_shnum)
    segments = _segments(file, order, layout, e_phoff, e_phentsize, e_phnum)
    return _symbols(file, order, layout, segments)


def _section0(file: _File, order: str, layout: _Layout, shoff: int) -> tuple[int, ...]:
    if shoff == 0:
        raise file.fail("is damaged: it counts its program headers in a missing section 0")
    fmt = order + layout.shdr
    return struct.unpack(fmt, file.read(shoff, struct.calcsize(fmt), "section header table"))


def _check_sections(
    file: _File, order: str, layout: _Layout, shoff: int, shentsize: int, shnum: int
) -> None:
    """Every section lies inside the file. (The loader reads none of them, and ``sstrip``
    removes them all; a file that has them and is cut short is damaged all the same.)"""
    if shoff == 0:
        return
    fmt = order + layout.shdr
    if shentsize != struct.calcsize(fmt):
        raise file.fail(f"is damaged: section header entries of {shentsize} bytes")
    if shnum == 0:  # SHN_XINDEX numbering: the count is in section 0's sh_size
        shnum = _section0(file, order, layout, shoff)[5]
    table = file.read(shoff, shentsize * shnum, "section header table")
    for index, (_, sh_type, _, _, offset, size, *_) in enumerate(struct.iter_unpack(fmt, table)):
        if index and sh_type != _SHT_NOBITS:
            file.check(offset, size, f"section {index}")


def _segments(
    file: _File, order: str, layout: _Layout, phoff: int, phentsize: int, phnum: int
) -> list[_Segment]:
    """The program headers, each segment inside the file: ``dlopen`` maps the loadable ones
    from it and reads the others through those mappings."""
    fmt = order + layout.phdr
    if phentsize != struct.calcsize(fmt) or phnum == 0:
        raise file.fail(
            f"is damaged: {phnum} program headers of {phentsize} bytes (a shared library "
            "has segments to load)"
        )
    segments = []
    table = file.read(phoff, phentsize * phnum, "program header table")
    for index, fields in enumerate(struct.iter_unpack(fmt, table)):
        if layout.bits == 64:
            p_type, _, offset, vaddr, _, filesz, memsz, _ = fields
        else:
            p_type, offset, vaddr, _, filesz, memsz, _, _ = fields
        if p_type != 0:
            file.check(offset, filesz, f"segment {index}")
        if p_type == _PT_LOAD and filesz > memsz:
            raise file.fail(f"is damaged: segment {index} holds more bytes than it maps")
        segments.append(_Segment(p_type, offset, vaddr, filesz, memsz))
    kinds = {s.type for s in segments}
    if _PT_LOAD not in kinds or _PT_DYNAMIC not in kinds:
        raise file.fail("is damaged: it has no loadable or no dynamic segment")
    return segments


def _file_offset(
    file: _File, segments: list[_Segment], address: int, length: int, what: str
) -> int | None:
    """Where the ``length`` bytes at ``address`` of the loaded library are in the file;
    None for zero-filled memory past a segment's file bytes (``.bss``)."""
    for s in segments:
        if s.type == _PT_LOAD and s.vaddr <= address and address + length <= s.vaddr + s.memsz:
            if address + length <= s.vaddr + s.filesz:
                return s.offset + address - s.vaddr
            if address >= s.vaddr + s.filesz:
                return None
            break
    raise file.fail(f"is damaged: its {what} (address {address:#x}) is in no loadable segment")


def _table(file: _File, segments: list[_Segment], address: int, length: int, what: str) -> int:
    at = _file_offset(file, segments, address, length, what)
    if at is None:
        raise file.fail(f"is damaged: its {what} is not in the file")
    return at


def _dynamic(file: _File, order: str, layout: _Layout, segments: list[_Segment]) -> dict[int, int]:
    """The dynamic section's entries (the first of each tag), up to ``DT_NULL``."""
    dynamic = next(s for s in segments if s.type == _PT_DYNAMIC)
    fmt = order + ("qQ" if layout.bits == 64 else "iI")
    entsize = struct.calcsize(fmt)
    data = file.read(dynamic.offset, dynamic.filesz - dynamic.filesz % entsize, "dynamic segment")
    tags: dict[int, int] = {}
    for tag, value in struct.iter_unpack(fmt, data):
        if tag == _DT_NULL:
            break
        tags.setdefault(tag, value)
    return tags


def _symbol_count(
    file: _File, order: str, layout: _Layout, segments: list[_Segment], tags: dict[int, int]
) -> int:
    """How many dynamic symbols there are: the ELF file does not say, its hash table does
    (``DT_HASH``'s chain count; for ``DT_GNU_HASH``, one past the end of the last chain)."""
    if _DT_GNU_HASH in tags:
        at = _table(file, segments, tags[_DT_GNU_HASH], 16, "GNU hash table")
        nbuckets, symoffset, bloom_size, _ = struct.unpack(
            order + "4I", file.read(at, 16, "GNU hash table")
        )
        buckets_at = at + 16 + bloom_size * (layout.bits // 8)
        buckets = struct.unpack(
            f"{order}{nbuckets}I", file.read(buckets_at, 4 * nbuckets, "GNU hash table")
        )
        last = max(buckets, default=0)
        if last < symoffset:
            return int(symoffset)
        # the chain of the last bucket runs to the first entry with its low bit set
        at = buckets_at + 4 * nbuckets + 4 * (last - symoffset)
        while True:
            length = min(4096, file.size - at) // 4 * 4
            words = struct.unpack(
                f"{order}{length // 4}I", file.read(at, max(length, 4), "GNU hash chain")
            )
            for i, word in enumerate(words):
                if word & 1:
                    return last + i + 1
            last += len(words)
            at += length
    if _DT_HASH in tags:
        at = _table(file, segments, tags[_DT_HASH], 8, "symbol hash table")
        return int(struct.unpack(order + "2I", file.read(at, 8, "symbol hash table"))[1])
    raise file.fail("is damaged: it has no symbol hash table (DT_HASH or DT_GNU_HASH)")


def _symbols(file: _File, order: str, layout: _Layout, segments: list[_Segment]) -> LibraryFile:
    """The two oplib symbols in the dynamic symbol table, found as ``dlsym`` finds them
    (through the dynamic segment, which ``sstrip`` keeps): defined, exported (global or
    weak binding, default or protected visibility)."""
    tags = _dynamic(file, order, layout, segments)
    if not {_DT_SYMTAB, _DT_STRTAB, _DT_STRSZ} <= tags.keys():
        raise file.fail("is damaged: its dynamic segment names no symbol or string table")
    names_at = _table(file, segments, tags[_DT_STRTAB], tags[_DT_STRSZ], "dynamic string table")
    names = file.read(names_at, tags[_DT_STRSZ], "dynamic string table")
    # The offsets at which each wanted name (NUL-terminated) starts: a symbol's st_name may
    # point into the middle of a longer string (linkers merge common suffixes).
    at: dict[int, bytes] = {}
    for name in (A.VERSION_SYMBOL.encode(), A.INIT_SYMBOL.encode()):
        for m in re.finditer(re.escape(name + b"\0"), names):
            at[m.start()] = name
    found: dict[bytes, tuple[int, int, int]] = {}
    if at:  # (most libraries that are not oplib's stop here)
        fmt = order + layout.sym
        entsize = struct.calcsize(fmt)
        if tags.get(_DT_SYMENT, entsize) != entsize:
            raise file.fail(f"is damaged: dynamic symbols of {tags[_DT_SYMENT]} bytes")
        size = entsize * _symbol_count(file, order, layout, segments, tags)
        table_at = _table(file, segments, tags[_DT_SYMTAB], size, "dynamic symbol table")
        for fields in struct.iter_unpack(fmt, file.read(table_at, size, "dynamic symbol table")):
            if layout.bits == 64:
                st_name, info, other, shndx, value, st_size = fields
            else:
                st_name, value, st_size, info, other, shndx = fields
            symbol = at.get(st_name)
            if (
                symbol is None
                or symbol in found
                or shndx == _SHN_UNDEF
                or info >> 4 not in _EXPORTED_BINDINGS
                or other & 3 not in _EXPORTED_VISIBILITY
            ):
                continue
            found[symbol] = (shndx, value, st_size)
    version_sym = found.get(A.VERSION_SYMBOL.encode())
    version = None if version_sym is None else _read_u32(file, order, segments, *version_sym)
    return LibraryFile(version, A.INIT_SYMBOL.encode() in found)


def _read_u32(
    file: _File, order: str, segments: list[_Segment], shndx: int, value: int, size: int
) -> int:
    """The ``uint32_t`` the version symbol holds, read from the file (no relocation applies
    to a constant)."""
    if size != 4 or shndx >= _SHN_LORESERVE:
        raise file.fail(
            f"exports {A.VERSION_SYMBOL} as {size} bytes (section {shndx}); expected a "
            "const uint32_t (write it with OPLIB_LIBRARY_INIT from oplib.h)"
        )
    at = _file_offset(file, segments, value, 4, A.VERSION_SYMBOL)
    if at is None:  # zero-initialised
        return 0
    return int(struct.unpack(order + "I", file.read(at, 4, A.VERSION_SYMBOL))[0])
