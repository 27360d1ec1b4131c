"""The typing claims are tested, not only configured.

mypy and pyright (the project's configuration in ``pyproject.toml``) check the user script
``tests/typing/readme_examples.py``, which must be clean, and a snippet of typical mistakes,
each of which must be reported on its line with the expected error code. The script also
runs: the examples work, not only type-check.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "typing" / "readme_examples.py"
OPS_EXAMPLES = ROOT / "tests" / "typing" / "ops_examples.py"
BIN = Path(sys.executable).parent

# Each mistake ends with ``# expect: <mypy error code> <pyright rule>``.
MISTAKES = textwrap.dedent(
    """\
    from __future__ import annotations

    import numpy as np

    import oplib_core as oplib
    from oplib_core.backends import BackendSpec
    from oplib_core.plugins import Registrar

    spec = BackendSpec(name="acme", array_typs=(np.ndarray,))  # expect: call-arg reportCallIssue
    BackendSpec(array_types=(np.ndarray,))  # expect: call-arg reportCallIssue
    ok = BackendSpec(name="acme", array_types=(np.ndarray,))
    ok.name = "other"  # expect: misc reportAttributeAccessIssue
    priority: str = ok.priority  # expect: assignment reportAssignmentType

    t = oplib.tensor([1.0])
    total: str = t.sum()  # expect: assignment reportAssignmentType
    t.sum().no_such_method()  # expect: attr-defined reportAttributeAccessIssue
    size: str = t.size(0)  # expect: assignment reportAssignmentType
    oplib.device("cpu").typ  # expect: attr-defined reportAttributeAccessIssue


    @oplib.register_kernel("demo::f", "cpu")
    def f(x: np.ndarray) -> np.ndarray:
        return x


    f("not an array")  # expect: arg-type reportArgumentType


    @oplib.custom_op("demo::g", mutates_args=())
    def g(x: oplib.Tensor) -> oplib.Tensor:
        return x


    g.no_such_method()  # expect: attr-defined reportAttributeAccessIssue


    def oplib_impl(registrar: Registrar) -> None:
        registrar.impl("demo::f", "cpu", f, overide=True)  # expect: call-overload reportCallIssue
    """
)


def _expected(source: str) -> dict[int, tuple[str, str]]:
    """Line number (1-based) -> (mypy code, pyright rule)."""
    out = {}
    for n, line in enumerate(source.splitlines(), start=1):
        m = re.search(r"# expect: (\S+) (\S+)$", line)
        if m:
            out[n] = (m.group(1), m.group(2))
    return out


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN} (pip install -e '.[test]')")
    return str(path)


def _mypy(*files: Path) -> dict[Path, dict[int, set[str]]]:
    """Errors per file and line: their codes. Errors in modules the files import are left
    out (``mypy`` with no arguments checks those). No cache: mypy would report a cached
    module's errors under the path it had when cached (each run's tmp_path differs)."""
    proc = subprocess.run(
        [_tool("mypy"), "--cache-dir=/dev/null", "--no-pretty", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    found: dict[Path, dict[int, set[str]]] = {f: {} for f in files}
    for line in proc.stdout.splitlines():
        m = re.match(r"(.+?):(\d+): error: .*\[([\w-]+)\]$", line)
        if m is None:
            continue
        path = (ROOT / m.group(1)).resolve()
        if path in found:
            found[path].setdefault(int(m.group(2)), set()).add(m.group(3))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 2: mypy itself failed
    return found


def _pyright(*files: Path) -> dict[Path, dict[int, set[str]]]:
    proc = subprocess.run(
        [_tool("basedpyright"), "--outputjson", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    report = json.loads(proc.stdout)
    found: dict[Path, dict[int, set[str]]] = {f: {} for f in files}
    for d in report["generalDiagnostics"]:
        if d["severity"] != "error":
            continue
        line = d["range"]["start"]["line"] + 1
        found[Path(d["file"]).resolve()].setdefault(line, set()).add(d.get("rule", "?"))
    return found


@pytest.fixture
def mistakes(tmp_path: Path) -> Path:
    path = tmp_path / "mistakes.py"
    path.write_text(MISTAKES)
    return path.resolve()


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_readme_examples_type_check_and_mistakes_are_reported(checker: str, mistakes: Path) -> None:
    run = _mypy if checker == "mypy" else _pyright
    found = run(EXAMPLES, OPS_EXAMPLES, mistakes)
    for script in (EXAMPLES, OPS_EXAMPLES):
        assert found[script] == {}, f"{checker} finds errors in {script.name}: {found[script]}"
    expected = {
        line: {codes[0] if checker == "mypy" else codes[1]}
        for line, codes in _expected(MISTAKES).items()
    }
    assert found[mistakes] == expected


@pytest.mark.parametrize("script", [EXAMPLES, OPS_EXAMPLES], ids=lambda p: p.name)
def test_typing_examples_run(script: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_records_show_their_fields_to_inspect_signature() -> None:
    from oplib_core import BackendSpec, Device, FunctionSchema
    from oplib_core.testing import SampleInput

    params = inspect.signature(BackendSpec).parameters
    assert tuple(params) == BackendSpec._fields
    assert params["name"].default is inspect.Parameter.empty
    assert params["priority"].default == 0
    assert params["array_types"].annotation == "tuple[type, ...]"
    # a record with its own __init__ shows that one
    assert str(inspect.signature(Device)) == "(type: 'str', index: 'int | None' = None) -> 'None'"
    # slots that are not arguments (field(init=False)) stay out
    assert tuple(inspect.signature(FunctionSchema).parameters) == (
        "name",
        "overload_name",
        "arguments",
        "returns",
        "tuple_return",
    )
    # default_factory: a fresh value per record
    a, b = SampleInput((1,)), SampleInput((2,))
    assert a.kwargs == {} and a.kwargs is not b.kwargs


def test_record_fields_come_from_annotations() -> None:
    from oplib_core._records import Record, field

    class Point(Record):
        x: int
        y: int = 0
        tags: list[str] = field(default_factory=list)
        _norm: float = field(init=False)
        ORIGIN: ClassVar[str] = "here"

        def __post_init__(self) -> None:
            object.__setattr__(self, "_norm", abs(self.x) + abs(self.y))

    assert Point._fields == ("x", "y", "tags")
    assert Point.__slots__ == ("x", "y", "tags", "_norm")  # type: ignore[comparison-overlap]
    p = Point(3, y=-4)
    assert (p.x, p.y, p.tags, p._norm) == (3, -4, [], 7)
    assert p == Point(3, -4, [])
    assert p._replace(y=1) == Point(3, 1)
    with pytest.raises(AttributeError, match="immutable"):
        p.x = 1  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected arguments 'z'"):
        Point(1, z=2)  # type: ignore[call-arg]

    with pytest.raises(TypeError, match="field 'b' without a default follows"):

        class Bad(Record):
            a: int = 0
            b: int  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]


def test_record_eq_false_compares_by_identity() -> None:
    from oplib_core._records import Record

    class Token(Record, eq=False):
        name: str
        weight: int = 1

    a, b = Token("x"), Token("x")
    assert a == a and a != b and len({a, b}) == 2
    assert Token.__eq__ is object.__eq__ and Token.__hash__ is object.__hash__
    assert a._replace(weight=2).weight == 2
