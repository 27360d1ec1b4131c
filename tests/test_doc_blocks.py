"""Every Python block of README.md and docs/*.md runs (issue 32), so the documentation cannot
drift from the code. Blocks are found by sybil; a page is every ``docs/*.md``, a new one
included.

Each page runs in a fresh interpreter, its blocks in order in one namespace, as a reader
would paste them into one session (a page may rename the private-use slot or define
``mylib::sin``, which must not leak into the test process or another page). A block that
cannot run here is marked just before it, invisibly to readers, with sybil's directive and
a reason::

    <!-- skip: next "needs a CUDA device and cupy" -->

or, for a block that runs where something is present, a condition computed by an invisible
block before it (``<!-- skip: next if(not has_cuda, "needs a CUDA device and cupy") -->``).
The reason is required; the test reports the block as skipped with it. A block may also be
preceded by setup readers need not see (an op the page assumes, its inputs), and followed
by an assertion on what it claims::

    <!-- invisible-code-block: python
    x = oplib.tensor([3.0, 1.0, 2.0])
    -->
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sybil = pytest.importorskip("sybil", reason="sybil is not installed (pip install -e '.[test]')")
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
MARKER = "DOC-BLOCKS-RESULT "
# the example op package the pages use (acme::scaled_add): importable, and registered
# in-process by a block invisible to readers, where a page says "after pip install"
EXAMPLES = str(ROOT / "examples" / "acme_plugin")
PYTHONPATH = os.environ.get("PYTHONPATH", "")

_RUNNER = f"""
import json, sys, traceback
from pathlib import Path
from unittest import SkipTest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

document = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()]).parse(Path(sys.argv[1]))
document.namespace["__name__"] = "__main__"
results = {{}}
for example in document.examples():
    block = isinstance(example.parsed, str)  # a code block; else a skip directive
    try:
        example.evaluate()
    except SkipTest as e:
        results[example.line] = ["skipped", str(e)]
    except BaseException:
        if not block:
            raise
        results[example.line] = ["failed", traceback.format_exc(limit=-6)]
    else:
        if block:
            results[example.line] = ["passed", ""]
sys.stdout.flush()
print()
print({MARKER!r} + json.dumps(results))
"""


def _blocks(page: Path) -> list[int]:
    document = sybil.Sybil(parsers=[PythonCodeBlockParser(), SkipParser()]).parse(page)
    return [e.line for e in document.examples() if isinstance(e.parsed, str)]


CASES = [
    pytest.param(page, line, id=f"{page.relative_to(ROOT)}:{line}")
    for page in PAGES
    for line in _blocks(page)
]


@functools.cache
def _run(page: Path, where: Path) -> dict[str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(page)],
        cwd=where,  # a block that writes a file writes it here
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [EXAMPLES, PYTHONPATH]))},
        check=False,
    )
    found = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, (
        f"{page.relative_to(ROOT)} did not run to the end:\n{proc.stdout[-4000:]}\n"
        f"{proc.stderr[-4000:]}"
    )
    results: dict[str, list[str]] = json.loads(found[-1][len(MARKER) :])
    return results


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doc-blocks")


@pytest.mark.parametrize(("page", "line"), CASES)
def test_python_block_runs(page: Path, line: int, workdir: Path) -> None:
    status, detail = _run(page, workdir)[str(line)]
    if status == "skipped":
        pytest.skip(detail)
    assert status == "passed", f"{page.relative_to(ROOT)}:{line}:\n{detail}"


_SKIP = re.compile(r"<!--\s*skip:\s*(\w+)(.*?)-->")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_skipped_block_says_why(page: Path) -> None:
    for match in _SKIP.finditer(page.read_text()):
        action, reason = match.group(1), match.group(2).strip()
        if action == "end":
            continue
        # a reason, or a condition and a reason: if(not has_cuda, "needs a CUDA device")
        assert re.fullmatch(r'"[^"]{10,}"|if\(.+, "[^"]{10,}"\)', reason), (
            f"{page.relative_to(ROOT)}: '{match.group(0)}' needs a reason in quotes "
            '(<!-- skip: next "needs a CUDA device and cupy" -->)'
        )


def test_the_pages_include_every_docs_page() -> None:
    assert ROOT / "README.md" in PAGES
    assert set((ROOT / "docs").glob("*.md")) <= set(PAGES)
    assert len(CASES) >= 30  # the blocks were found


def test_the_runner_reports_failures_skips_and_hidden_setup(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- invisible-code-block: python\nhidden = 41\n-->\n"
        "```python\nassert hidden + 1 == 42\n```\n\n"
        '<!-- skip: next "cannot run in this test at all" -->\n'
        "```python\nraise SystemExit(3)\n```\n\n"
        "```python\n[].pop()\n```\n"
    )
    results = _run(page, tmp_path)
    assert [status for status, _ in results.values()] == ["passed", "passed", "skipped", "failed"]
    assert list(results.values())[2][1] == "cannot run in this test at all"
    assert "IndexError: pop from empty list" in list(results.values())[3][1]
