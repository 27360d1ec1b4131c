"""The public line: what the shipped plugins, the examples and the backend guide use of
oplib is public, so that vendors who copy them need public names only; and every name a
public module exports exists.

A private name is a module path segment or an imported name starting with ``_`` under
``oplib_core`` (``oplib_core._registry``, ``from oplib_core.backend_registration import
_x``), or an attribute starting with ``_`` read from an ``oplib_core`` module
(``oplib._x``, ``oplib_core.backends._y``). Dunders (``__version__``) are public.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import oplib_core

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(oplib_core.__file__).resolve().parent
CORE = "oplib_core"
_SKIP_DIRS = {"build", "dist", "__pycache__", ".venv"}

PUBLIC_MODULES = [
    "oplib_core",
    "oplib_core.library",
    "oplib_core.custom_op",
    "oplib_core.ops",
    "oplib_core.backends",
    "oplib_core.plugins",
    "oplib_core.hookspecs",
    "oplib_core.errors",
    "oplib_core.autograd",
    "oplib_core.fake",
    "oplib_core.testing",
    "oplib_core.kernels",
    "oplib_core.backend_registration",
    "oplib_core.legacy",
    "oplib_core.cli",
]


# -- the checker ----------------------------------------------------------------------------


#: Names with a leading underscore that are public on purpose: torch spells them so
#: (``torch._check``, ``torch._check_is_size`` ...), and ``oplib_core.__all__`` lists them.
DELIBERATE = frozenset(name for name in oplib_core.__all__ if name.startswith("_"))


def _private(segment: str) -> bool:
    if segment in DELIBERATE:
        return False
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``oplib_core.a.b``) is a module of the oplib_core package."""
    parts = dotted.split(".")
    if parts[0] != CORE:
        return False
    path = PACKAGE.joinpath(*parts[1:])
    return len(parts) == 1 or path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private_in_path(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == CORE and any(_private(p) for p in parts[1:])


def private_uses(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """``(line, what)`` for every use of a private oplib name in ``source``."""
    tree = ast.parse(source, filename)
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # local name -> the oplib_core module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != CORE:
                    continue
                if _private_in_path(alias.name):
                    found.append((node.lineno, f"import {alias.name}"))
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules[CORE] = CORE
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != CORE:
                continue
            if _private_in_path(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and _private_in_path(first.value)
                and _call_name(node.func) in ("import_module", "__import__")
            ):
                found.append((node.lineno, f"import_module({first.value!r})"))
    for node in _outermost_attributes(tree):
        chain = _chain(node)
        if chain is None or chain[0] not in modules:
            continue
        module = modules[chain[0]]
        for i, attr in enumerate(chain[1:], 1):
            if _private(attr):
                found.append((node.lineno, ".".join(chain[: i + 1])))
                break
            module = f"{module}.{attr}"
            if not _is_module(module):
                break  # an object's attributes are not the module line's business
    return sorted(set(found))


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` → ``["a", "b", "c"]`` for an attribute chain on a name."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    parts.append(current.id)
    return parts[::-1]


def _outermost_attributes(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Each attribute chain once, by its outermost node (``a.b.c``, not ``a.b``)."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            yield node


def _python_files() -> Iterator[Path]:
    for top in ("plugins", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if any(p in _SKIP_DIRS or p.endswith(".egg-info") for p in rel):
                continue
            yield path


def _doc_blocks(path: Path) -> Iterator[tuple[int, str]]:
    """``(first line, code)`` of each ```` ```python ```` block of a markdown file."""
    text = path.read_text()
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        yield text[: m.start()].count("\n") + 2, m.group(1)


# -- the checker checks what it should -------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import oplib_core._registry", ["import oplib_core._registry"]),
        ("import oplib_core.fake._mode as m", ["import oplib_core.fake._mode"]),
        ("from oplib_core._device import Device", ["from oplib_core._device import ..."]),
        ("from oplib_core.fake._arrays import X", ["from oplib_core.fake._arrays import ..."]),
        (
            "from oplib_core.backend_registration import _normalization_device",
            ["from oplib_core.backend_registration import _normalization_device"],
        ),
        ("from oplib_core import _startup", ["from oplib_core import _startup"]),
        ("import oplib_core as oplib\noplib._startup.ensure()", ["oplib._startup"]),
        ("import oplib_core\nx = oplib_core._registry.REGISTRY", ["oplib_core._registry"]),
        ("from oplib_core import backends\nbackends.TABLE._x", []),  # an object's attribute
        ("from oplib_core import backends\nbackends._builtin_list", ["backends._builtin_list"]),
        ("import oplib_core.backends\noplib_core.backends._x", ["oplib_core.backends._x"]),
        ("import importlib\nimportlib.import_module('oplib_core._tensor')", ["import_module"]),
        # public
        ("import oplib_core as oplib\noplib.ops.ns.op.default._schema", []),
        ("from oplib_core import __version__, lookup", []),
        ("import oplib_core as oplib\noplib.__version__", []),
        ("from oplib_core.backend_registration import normalize_device", []),
        ("import numpy as np\nnp._NoValue", []),
        ("from mypkg import _private", []),
        # torch's underscore spellings that oplib_core.__all__ lists
        ("import oplib_core as oplib\noplib._check(True)", []),
        ("from oplib_core import _check_is_size", []),
    ],
)
def test_checker(code: str, expected: list[str]) -> None:
    found = [what for _, what in private_uses(code)]
    assert len(found) == len(expected), found
    for what, want in zip(found, expected, strict=True):
        assert what.startswith(want), (what, want)


# -- the guard -----------------------------------------------------------------------------


def test_plugins_and_examples_use_public_names_only() -> None:
    files = list(_python_files())
    assert any("oplib_dask" in str(f) for f in files) and any("vendor_npu" in str(f) for f in files)
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in private_uses(path.read_text(), str(path))
    ]
    assert not problems, "private oplib names used (make them public first):\n" + "\n".join(
        problems
    )


def _private_attributes_of_public_classes() -> set[str]:
    """Underscore attributes that oplib's public classes define (fields, slots, methods),
    less the underscore names torch.library itself makes public (``_destroy``,
    ``_register_fake``)."""
    from oplib_core.custom_op import CustomOpDef

    classes = (
        oplib_core.OpOverload,
        oplib_core.OpOverloadPacket,
        CustomOpDef,
        oplib_core.Tensor,
        oplib_core.Library,
        oplib_core.BackendSpec,
        oplib_core.Device,
        oplib_core.FunctionSchema,
    )
    names: set[str] = set()
    for cls in classes:
        for c in cls.__mro__:
            if c.__module__.split(".")[0] != CORE:
                continue
            names.update(n for n in (*vars(c), *getattr(c, "__slots__", ())) if _private(n))
    return names - {"_destroy", "_register_fake"}


def test_plugins_and_examples_read_no_private_attributes_of_oplib_objects() -> None:
    # ``plan.op._schema``: an import-level check cannot see whose attribute it is, so
    # every attribute name that oplib's public classes keep private is refused by name.
    private = _private_attributes_of_public_classes()
    assert {"_schema", "_entry", "_data", "_sig"} <= private
    problems = []
    for path in _python_files():
        own = set()  # a plugin may define attributes of the same name on its own classes
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for s in node.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        own.add(s.name)
                    elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                        own.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private - own:
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not problems, "private attributes of oplib objects read:\n" + "\n".join(problems)


def test_backend_guide_uses_public_names_only() -> None:
    path = ROOT / "docs" / "writing-a-backend.md"
    problems = []
    blocks = list(_doc_blocks(path))
    assert blocks
    for first, code in blocks:
        for line, what in private_uses(code, str(path)):
            problems.append(f"{path.relative_to(ROOT)}:{first + line - 1}: {what}")
    # names in the prose, as `oplib_core.x._y` or `_y(...)` of a core module
    for n, text in enumerate(path.read_text().splitlines(), 1):
        for m in re.finditer(r"`(oplib_core(?:\.\w+)*)`|`(oplib_core(?:\.\w+)*)\(", text):
            dotted = m.group(1) or m.group(2)
            if _private_in_path(dotted):
                problems.append(f"{path.relative_to(ROOT)}:{n}: {dotted}")
    assert not problems, "\n".join(problems)


# -- every exported name exists ----------------------------------------------------------------


# Public modules whose public names are not listed: hookspecs holds nothing but the hook
# specifications (pluggy reads the module), and the markers.
_NO_ALL = {"oplib_core.hookspecs"}


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_names_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if module in _NO_ALL:
        assert names is None or all(hasattr(mod, n) for n in names)
        return
    assert names, f"{module} has no __all__"
    assert len(set(names)) == len(names), f"{module}.__all__ repeats names"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names missing attributes: {missing}"


def test_public_modules_are_not_private() -> None:
    assert not [m for m in PUBLIC_MODULES if _private_in_path(m)]
