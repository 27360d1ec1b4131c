"""The console samples of README.md and docs/cli.md against the real output of their
``$ oplib ...`` commands, row by row and cell by cell (cells are separated by three or
more spaces; the column widths may differ). A sample with a ``...`` line shows some rows
only: each must be in the output. Versions are compared as ``<version>``, and the cells
that depend on the machine (cuda's availability and devices) are left out.

After a deliberate change (a new op changes the counts), regenerate the samples with
``OPLIB_REGEN_SAMPLES=1 .venv/bin/python -m pytest tests/test_cli_readme.py`` and review
the diff.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FILES = ["README.md", "docs/cli.md"]
BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
VERSION = re.compile(r"\b\d+\.\d+(\.\d+)?([.+-]?[0-9A-Za-z.+-]*)?\b")
#: (first cell, header) of cells that depend on the machine, not on oplib
MACHINE = {("cuda", "available"), ("cuda", "devices")}


@dataclass
class Sample:
    file: str
    command: str
    output: list[str]
    partial: bool


def samples() -> list[Sample]:
    found = []
    for name in FILES:
        for block in BLOCK.findall((ROOT / name).read_text(encoding="utf-8")):
            command, output = None, []
            for line in [*block.splitlines(), "$"]:
                if line.startswith("$"):
                    if command is not None and output:
                        partial = any(o.strip() == "..." for o in output)
                        rows = [o for o in output if o.strip() != "..."]
                        found.append(Sample(name, command, rows, partial))
                    command, output = line[1:].strip(), []
                else:
                    output.append(line)
    return found


def cells(line: str) -> list[str]:
    return [VERSION.sub("<version>", c) for c in re.split(r" {3,}", line.strip())]


def comparable(rows: list[str]) -> list[list[str]]:
    """The rows as cells, the rule left out and machine-dependent cells blanked."""
    table = [cells(r) for r in rows if r.strip() and not set(r.strip()) <= {"─"}]
    header = table[0] if table else []
    for row in table[1:]:
        for i, h in enumerate(header[: len(row)]):
            if (row[0], h) in MACHINE:
                row[i] = "<machine>"
    return table


def run(command: str) -> list[str]:
    """The command's stdout in a fresh process (what a user sees: nothing registered or
    imported by other tests), piped: a line per row."""
    argv = shlex.split(command, comments=True)
    assert argv[0] == "oplib", command
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    r = subprocess.run(
        [sys.executable, "-m", "oplib_core", *argv[1:]],
        capture_output=True, text=True, timeout=120, env={**env, "NO_COLOR": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [line.rstrip() for line in r.stdout.splitlines()]


ALL = samples()


def test_the_samples_are_found():
    commands = [s.command.split("#")[0].split() for s in ALL]
    assert ["oplib", "backends", "list"] in commands  # the README's
    assert any(s.file == "README.md" for s in ALL)


@pytest.mark.parametrize("sample", ALL, ids=[f"{s.file}:{s.command}" for s in ALL])
def test_a_console_sample_is_what_the_command_prints(sample):
    actual = run(sample.command)
    if os.environ.get("OPLIB_REGEN_SAMPLES") and not sample.partial:
        path = ROOT / sample.file
        text = path.read_text(encoding="utf-8")
        old = "\n".join(sample.output)
        assert text.count(old) == 1, f"the sample of {sample.command!r} is not unique"
        path.write_text(text.replace(old, "\n".join(actual)), encoding="utf-8")
        return
    want, got = comparable(sample.output), comparable(actual)
    hint = "regenerate: OPLIB_REGEN_SAMPLES=1 pytest tests/test_cli_readme.py"
    if sample.partial:
        missing = [row for row in want if row not in got]
        assert not missing, f"{sample.file}: rows no longer printed ({hint}): {missing}"
    else:
        assert want == got, f"{sample.file}: {sample.command!r} prints otherwise ({hint})"


def test_a_stale_sample_is_caught():
    stale = Sample("README.md", "oplib backends list", [
        "backend   key   distribution   available   devices   ops",
        "cpu       CPU   oplib-cpu 0.1.0   yes   1   62",
    ], partial=False)  # fmt: skip
    actual = run(stale.command)
    assert comparable(stale.output) != comparable(actual)
    assert comparable(stale.output)[1][3] == "yes"  # (cells are split on 3+ spaces)
