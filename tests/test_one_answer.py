"""One answer to each question the code used to answer in many places (issue 33).

- "Which op does this name?": inside the core, ``_registry.op_named`` (the table key to its
  overload) and nothing else; for users, every API that takes an op accepts every spelling
  ``oplib.lookup`` accepts (plugins' APIs too).
- "Is this schema type a tensor?": the schema type's own ``is_tensor_like()``.

``tests/test_lookup.py`` holds the registration APIs to the same spellings; this file adds
the APIs that matrix leaves out and the single-place rules.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import drop_namespace, unique_ns

import oplib_core as oplib
from oplib_core import testing
from oplib_core._registry.registry import op_named
from oplib_core._tensor import indexing as _indexing
from oplib_core._tensor import setitem as _setitem
from oplib_core._tensor import tensor as _tensor
from oplib_core.library import get_kernel, register_autocast, register_vmap
from oplib_core.testing import SampleInput

CORE = pathlib.Path(oplib.__file__).parent
PLUGINS = CORE.parent / "plugins"


def _sources() -> list[pathlib.Path]:
    """The core's modules and the plugins' (not their build copies)."""
    plugin_files = [
        p
        for p in PLUGINS.glob("*/*/**/*.py")
        if "build" not in p.relative_to(PLUGINS).parts and "tests" not in p.parts
    ]
    return sorted(CORE.rglob("*.py")) + sorted(plugin_files)


# -- the op by name: one helper ----------------------------------------------------------


def _asks_the_table_for_an_overload(node: ast.AST) -> bool:
    """``<x>.ops[name].overload`` or ``<x>.ops.get(name).overload``."""
    if not (isinstance(node, ast.Attribute) and node.attr == "overload"):
        return False
    inner = node.value
    if isinstance(inner, ast.Subscript):
        table = inner.value
    elif (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Attribute)
        and inner.func.attr == "get"
    ):
        table = inner.func.value
    else:
        return False
    return isinstance(table, ast.Attribute) and table.attr == "ops"


def _op_named_lines() -> range:
    tree = ast.parse((CORE / "_registry" / "registry.py").read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "op_named"]
    assert fn.end_lineno is not None
    return range(fn.lineno, fn.end_lineno + 1)


def test_the_op_by_name_is_asked_in_one_place() -> None:
    allowed = _op_named_lines()
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if _asks_the_table_for_an_overload(node):
                if path == CORE / "_registry" / "registry.py" and node.lineno in allowed:
                    continue
                found.append(f"{path.relative_to(CORE.parent)}:{node.lineno}")
    assert found == [], (
        "the op by name is _registry.op_named(qualname)'s answer (a user's spelling: "
        f"oplib.lookup); these modules ask the table themselves: {found}"
    )


def test_the_detector_finds_a_restatement() -> None:
    tree = ast.parse(
        "a = REGISTRY.ops['oplib::add'].overload\nb = self.ops.get(q).overload\nc = e.overload"
    )
    hits = [n.lineno for n in ast.walk(tree) if _asks_the_table_for_an_overload(n)]
    assert sorted(hits) == [1, 2]


def test_op_named_gives_the_registered_overload() -> None:
    assert op_named("oplib::add") is oplib.ops.oplib.add.default
    assert op_named("oplib::add.Scalar") is oplib.ops.oplib.add.Scalar
    assert op_named("oplib::cos") is oplib.lookup("oplib::cos")  # a pending op is built


def test_op_named_refuses_an_unknown_name_naming_it() -> None:
    with pytest.raises(oplib.UnknownOperatorError, match=r"'oplib::nope' does not exist") as e:
        op_named("oplib::nope")
    assert e.value.op == "oplib::nope"
    # the table key only: the user's spellings are lookup's ("ns::op.default", packets...)
    with pytest.raises(oplib.UnknownOperatorError):
        op_named("oplib::add.default")


def test_hot_paths_call_the_helper_itself() -> None:
    # bound, not wrapped: Tensor operators and indexing pay no extra call for it
    assert _tensor._op is op_named
    assert _indexing._op is op_named
    assert _setitem._op is op_named


# -- every API that takes an op: every spelling ---------------------------------------------

CALLS: list[tuple[str, str]] = []  # (qualname, dtype) per kernel run


def _f_kernel(x: Any) -> Any:
    CALLS.append(("f", str(x.dtype)))
    return x.copy()


def _g_kernel(x: Any) -> Any:
    CALLS.append(("g.other", str(x.dtype)))
    return x.copy()


@pytest.fixture
def target(teardown: Any) -> Iterator[tuple[str, Any]]:
    """``ns::f``, a custom op (``CustomOpDef``) with a default overload, and ``ns::g.other``,
    an op with one named overload; both run on cpu and have fake kernels."""
    ns = unique_ns("one")

    @oplib.custom_op(f"{ns}::f", mutates_args=())
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return _f_kernel(x)  # (a kernel: it gets the array)

    f.register_fake(lambda x: oplib.empty_like(x))
    lib = oplib.Library(ns, "FRAGMENT")
    lib.define("g.other(Tensor x) -> Tensor")
    lib.impl("g.other", _g_kernel, "default")
    lib._register_fake("g.other", lambda x: oplib.empty_like(x))
    teardown(lib, f)
    CALLS.clear()
    yield ns, f
    drop_namespace(ns)


# Each spelling: (the op-like value, given ns and the CustomOpDef; the op it names).
SPELLINGS: dict[str, tuple[Callable[[str, Any], Any], str]] = {
    "'ns::op'": (lambda ns, f: f"{ns}::f", "f"),
    "'ns::op.default'": (lambda ns, f: f"{ns}::f.default", "f"),
    "'ns::op.overload'": (lambda ns, f: f"{ns}::g.other", "g.other"),
    "packet": (lambda ns, f: getattr(oplib.ops, ns).f, "f"),
    "packet of one overload": (lambda ns, f: getattr(oplib.ops, ns).g, "g.other"),
    "OpOverload": (lambda ns, f: getattr(oplib.ops, ns).g.other, "g.other"),
    "CustomOpDef": (lambda ns, f: f, "f"),
}


def _x() -> oplib.Tensor:
    return oplib.tensor(np.ones(4, dtype=np.float32))


def _sample_inputs(op: Any, ns: str, teardown: Any) -> str:
    class Samples:
        @oplib.hookimpl
        def oplib_sample_inputs(self, op: Any, device: Any) -> list[SampleInput]:
            if not op.name().startswith(f"{ns}::"):
                return []
            return [SampleInput((_x(),), name=op.name())]

    record = oplib.plugins.register(Samples(), name=f"{ns}-samples")
    teardown(lambda: oplib.plugins.unregister(record.name))
    (sample,) = testing.sample_inputs(op, "cpu")
    return str(sample.name)


def _get_kernel(op: Any, ns: str, teardown: Any) -> str:
    handle = get_kernel(op, "cpu")
    handle(_x())
    return handle.op.name()


def _register_dispatch_rule(op: Any, ns: str, teardown: Any) -> str:
    class Mode(oplib.DispatchMode):
        pass

    seen: list[str] = []

    def rule(mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        seen.append(func.name())
        return func(*args, **kwargs)

    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    oplib.register_dispatch_rule(op, Mode, rule, lib=lib)
    with Mode():
        oplib.lookup(op)(_x())
    (name,) = seen
    return name


def _register_autocast(op: Any, ns: str, teardown: Any) -> str:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    register_autocast(op, "cpu", oplib.float16, lib=lib)
    with oplib.autocast("cpu"):
        oplib.lookup(op)(_x())
    ((name, dtype),) = CALLS
    assert "float16" in dtype  # the rule cast the input: it is this op's
    return f"{ns}::{name}"


def _register_vmap(op: Any, ns: str, teardown: Any) -> str:
    seen: list[str] = []
    target = oplib.lookup(op)

    def rule(info: Any, in_dims: Any, x: Any) -> Any:
        seen.append(target.name())
        return target(x), 0

    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    register_vmap(op, rule, lib=lib)
    oplib.vmap(target)(oplib.tensor(np.ones((3, 2), dtype=np.float32)))
    (name,) = seen  # the rule ran once for the whole batch: it is this op's
    assert len(CALLS) == 1
    return name


def _run_checks(op: Any, ns: str, teardown: Any) -> str:
    (result,) = testing.run_checks(op, (_x(),), test_utils=["test_schema"])
    assert result.status == "PASS", result
    return result.op


def _opcheck(op: Any, ns: str, teardown: Any) -> str:
    assert testing.opcheck(op, (_x(),), test_utils=["test_schema"]) == {"test_schema": "SUCCESS"}
    ((name, _),) = CALLS  # test_schema ran the op once
    return f"{ns}::{name}"


def _single_chunk(op: Any, ns: str, teardown: Any) -> str:
    oplib_dask = pytest.importorskip("oplib_dask")
    da = pytest.importorskip("dask.array")
    x = da.ones(4, chunks=2, dtype=np.float32)  # the kernel takes the backend's arrays
    y = oplib_dask.single_chunk(op)(x)
    np.testing.assert_array_equal(np.asarray(y.compute()), np.ones(4))
    ((name, _),) = CALLS  # one task, on the whole array
    return f"{ns}::{name}"


APIS: dict[str, Callable[[Any, str, Any], str]] = {
    "testing.sample_inputs": _sample_inputs,
    "library.get_kernel": _get_kernel,
    "register_dispatch_rule": _register_dispatch_rule,
    "library.register_autocast": _register_autocast,
    "library.register_vmap": _register_vmap,
    "testing.run_checks": _run_checks,
    "testing.opcheck": _opcheck,
    "oplib_dask.single_chunk": _single_chunk,
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("api", list(APIS))
def test_every_api_takes_every_spelling(
    api: str, spelling: str, target: tuple[str, Any], teardown: Any
) -> None:
    ns, f = target
    make, names = SPELLINGS[spelling]
    assert APIS[api](make(ns, f), ns, teardown) == f"{ns}::{names}"


@pytest.mark.parametrize("api", ["testing.sample_inputs", "oplib_dask.single_chunk"])
def test_the_fixed_apis_refuse_as_lookup_does(api: str, ns: str) -> None:
    call: Callable[[Any], Any]
    if api == "testing.sample_inputs":
        call = lambda op: testing.sample_inputs(op, "cpu")  # noqa: E731
    else:
        call = pytest.importorskip("oplib_dask").single_chunk
    with pytest.raises(oplib.UnknownOperatorError, match=rf"'{ns}::nope' does not exist"):
        call(f"{ns}::nope")  # now, not at the first call
    with pytest.raises(oplib.NotAnOperatorError, match=r"expected an operator"):
        call(42)


# -- is this schema type a tensor: one method -----------------------------------------------


def _restatements(tree: ast.AST) -> list[str]:
    """Functions that unwrap ``T?``/``T[]`` (``.elem``, ``OptionalType``, ``ListType``) and
    return a comparison with ``"Tensor"``: ``is_tensor_like()`` written again."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        unwraps = any(
            (isinstance(n, ast.Attribute) and n.attr == "elem")
            or (isinstance(n, ast.Name) and n.id in ("OptionalType", "ListType"))
            for n in ast.walk(fn)
        )
        returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value]
        says_tensor = any(
            isinstance(c, ast.Compare)
            and any(
                isinstance(k, ast.Constant) and k.value == "Tensor"
                for k in (c.left, *c.comparators)
            )
            for r in returns
            for c in ast.walk(r)
        )
        if unwraps and says_tensor:
            out.append(f"{fn.name}:{fn.lineno}")
    return out


def test_is_tensor_like_is_asked_not_restated() -> None:
    found = [
        f"{path.relative_to(CORE.parent)}:{hit}"
        for path in _sources()
        if path.name != "_schema.py"  # the answer itself
        for hit in _restatements(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], f"ask the schema type's is_tensor_like(): {found}"


def test_the_restatement_detector_finds_the_old_copies() -> None:
    # the shapes removed from legacy.py, custom_op.py and testing/_checks.py
    old = """
def _tensor_like(t):
    if isinstance(t, OptionalType):
        t = t.elem
    return isinstance(t, BaseType) and t.name == "Tensor"

def _is_tensor_like(t):
    inner = t
    while not isinstance(inner, BaseType):
        inner = inner.elem
    return inner.name == "Tensor"

def _kind(t):
    if isinstance(t, ListType):
        return 2
    return 1 if getattr(t, "name", None) == "Tensor" else 0
"""
    assert [h.partition(":")[0] for h in _restatements(ast.parse(old))] == [
        "_tensor_like",
        "_is_tensor_like",
        "_kind",
    ]


@pytest.mark.parametrize(
    ("text", "like"),
    [
        ("Tensor", True),
        ("Tensor?", True),
        ("Tensor[]", True),
        ("Tensor?[]", True),
        ("Tensor[]?", True),
        ("int", False),
        ("int[]", False),
        ("Scalar?", False),
    ],
)
def test_kwarg_only_tensors_are_refused_by_custom_op_as_is_tensor_like_says(
    text: str, like: bool, ns: str
) -> None:
    # custom_op refuses keyword-only tensor arguments (torch's rule): it asks is_tensor_like()
    schema = f"(Tensor x, *, {text} y) -> Tensor"
    if like:
        with pytest.raises(Exception, match="kwarg-only Tensor"):
            oplib.custom_op(f"{ns}::k", mutates_args=(), schema=schema)(lambda x, y: x)
    else:
        made = oplib.custom_op(f"{ns}::k", mutates_args=(), schema=schema)(lambda x, y: x)
        made._destroy()


# -- __all__ says what is public ------------------------------------------------------------

REPO = CORE.parent
_FROM_IMPORT = re.compile(r"^\s*from (oplib_core(?:\.\w+)*) import (\([^)]*\)|[^\n]*)", re.M)


def _readers() -> list[pathlib.Path]:
    """What users copy: the docs, the README, the examples and the plugins."""
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    for where in ("examples", "plugins"):
        files += [
            p
            for p in sorted((REPO / where).rglob("*.py"))
            if "build" not in p.relative_to(REPO).parts
        ]
    return files


def _imported_names(text: str) -> Iterator[tuple[str, str]]:
    for m in _FROM_IMPORT.finditer(text):
        for item in m.group(2).split("#")[0].strip("()").split(","):
            name = item.split(" as ")[0].strip()
            if name.isidentifier():
                yield m.group(1), name


def test_what_docs_examples_and_plugins_import_is_in_all() -> None:
    missing = []
    for path in _readers():
        for module, name in _imported_names(path.read_text()):
            if any(part.startswith("_") for part in module.split(".")):
                continue  # test_public_line refuses these
            mod = importlib.import_module(module)
            if isinstance(getattr(mod, name, None), types.ModuleType):
                continue  # a submodule
            if name not in getattr(mod, "__all__", [name]):
                missing.append(f"{path.relative_to(REPO)}: from {module} import {name}")
    assert missing == []


def test_the_import_reader_reads_aliases_and_parentheses() -> None:
    text = (
        "from oplib_core.cli import main as oplib_cli\nfrom oplib_core import (\n    a,\n    b,\n)"
    )
    assert list(_imported_names(text)) == [
        ("oplib_core.cli", "main"),
        ("oplib_core", "a"),
        ("oplib_core", "b"),
    ]


def test_every_error_is_listed_where_users_look() -> None:
    from oplib_core import errors

    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }
    assert defined - set(errors.__all__) == set()
    assert set(errors.__all__) - set(oplib.__all__) == set()  # and at the top, as torch's


def test_underscore_names_in_all_are_torchs_check_family_documented_as_public() -> None:
    underscored = {n for n in oplib.__all__ if n.startswith("_") and not n.startswith("__")}
    assert underscored == {
        "_check",
        "_check_index",
        "_check_is_size",
        "_check_not_implemented",
        "_check_type",
        "_check_value",
    }
    architecture = (REPO / "docs" / "architecture.md").read_text()
    assert all(f"`{n}`" in architecture for n in underscored)


@pytest.mark.parametrize("name", ["map", "bool", "int", "float"])
def test_builtin_spellings_are_public_outside_all(name: str) -> None:
    assert hasattr(oplib, name) and name not in oplib.__all__  # star imports shadow no builtin
    assert f"`oplib.{name}`" in (REPO / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize(("text", "like"), [("Tensor?", True), ("Tensor[]", True), ("int", False)])
def test_register_vmap_refuses_kwarg_only_tensors_as_is_tensor_like_says(
    text: str, like: bool, lib: oplib.Library, ns: str
) -> None:
    lib.define(f"k(Tensor x, *, {text} y) -> Tensor")
    if like:
        with pytest.raises(Exception, match="kwarg-only Tensor args"):
            register_vmap(f"{ns}::k", lambda info, in_dims, x, y: (x, 0), lib=lib)
    else:
        register_vmap(f"{ns}::k", lambda info, in_dims, x, y: (x, 0), lib=lib)
