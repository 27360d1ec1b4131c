"""The documentation site (issue 32): ``mkdocs build --strict`` turns docs/ and the public
modules' docstrings (docs/reference/, mkdocstrings) into a site without a single warning."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oplib_core.library import define

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mkdocs", "mkdocstrings_handlers")),
    reason="the docs tools are not installed (pip install -e '.[docs]')",
)

PUBLIC = [
    "oplib_core",
    "library",
    "custom_op",
    "ops",
    "backends",
    "plugins",
    "hookspecs",
    "errors",
    "autograd",
    "fake",
    "testing",
    "backend_registration",
    "legacy",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    where = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(where)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        # Material's notice about its successor is no warning of ours
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return where, output


def test_the_site_builds_without_warnings(site: tuple[Path, str]) -> None:
    _, output = site
    problems = [line for line in output.splitlines() if not line.startswith("INFO")]
    assert problems == [], "\n".join(problems)


def test_every_docs_page_is_on_the_site(site: tuple[Path, str]) -> None:
    where, _ = site
    pages = [p.stem for p in (ROOT / "docs").glob("*.md") if p.stem != "index"]
    missing = [p for p in pages if not (where / p / "index.html").is_file()]
    assert missing == []
    assert (where / "index.html").is_file()
    assert not (where / "_ext").exists()  # build code, not a page


@pytest.mark.parametrize("module", PUBLIC)
def test_the_reference_documents_each_public_module(site: tuple[Path, str], module: str) -> None:
    where, _ = site
    page = (where / "reference" / module / "index.html").read_text()
    full = module if module == "oplib_core" else f"oplib_core.{module}"
    assert full in page
    # at least one documented member (its heading's anchor is its dotted path)
    assert re.search(rf'id="{re.escape(full)}\.\w+"', page), module
    # the docstrings' Sphinx roles are shown as code, not as ``:func:`` text
    assert not re.search(r":(func|class|meth|mod|attr|data|exc):", page), module


def test_the_reference_shows_docstrings_and_signatures(site: tuple[Path, str]) -> None:
    where, _ = site
    page = (where / "reference" / "library" / "index.html").read_text()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())
    assert "register_fake" in text and "register_kernel" in text
    first_words = " ".join(define.__doc__.replace("`", "").split()[:6])  # code spans: <code>
    assert first_words in text, first_words


def test_sphinx_roles_become_code() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from sphinx_roles import plain_roles
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    assert plain_roles("see :func:`~oplib_core.library.define`.") == "see `define`."
    assert plain_roles(":class:`oplib_core.Tensor`") == "`oplib_core.Tensor`"
    assert plain_roles(":meth:`the copy <oplib_core.Tensor.to>`") == "`the copy`"
    assert plain_roles(":py:exc:`~oplib_core.errors.BackendError`") == "`BackendError`"
    assert plain_roles("``code`` and :unknown:`x`") == "``code`` and :unknown:`x`"
    assert plain_roles("an entry point::\n\n    [x]\n") == "an entry point:\n\n    [x]\n"
    assert plain_roles("a::b and c ::\n") == "a::b and c ::\n"  # a qualname; a lone ::


@pytest.mark.parametrize(
    ("page", "complaint"),
    [
        ("See [the guide](missing.md).\n", "missing.md"),
        ("See [a section](#no-such-section).\n", "no-such-section"),
        ("::: oplib_core.no_such_module\n", "no_such_module"),
    ],
    ids=["link", "anchor", "reference"],
)
def test_the_site_config_fails_on_a_broken_page(tmp_path: Path, page: str, complaint: str) -> None:
    """The project's own configuration, on a page with one mistake: the build fails and
    names it (so the test above can fail)."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n{page}")
    python = config["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(ROOT)]
    python["options"]["extensions"] = [str(ROOT / "docs" / "_ext" / "sphinx_roles.py")]
    config["docs_dir"] = str(docs)
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert proc.returncode != 0, proc.stderr
    assert complaint in proc.stderr, proc.stderr
