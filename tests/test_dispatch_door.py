"""One door into the dispatcher: no module of the core outside ``oplib_core/_dispatch/``
(and no plugin) reads the dispatcher's private fields of an op (``_sig``, ``_opcache``,
``_nmin``, ``_npos``, ``_run``) or imports a ``_dispatch`` submodule; they import
``oplib_core._dispatch`` itself and ask the op (``bind_call``, ``route``, ``run_plan``...).
And the door serves a mode as the modes it replaced did: FakeTensorMode's fast-shaped
calls are served by the op, the same result as its own path, and not at all with
``OPLIB_DISPATCH_SLOW=1``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import SLOW

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "oplib_core"
DISPATCH = CORE / "_dispatch"
PRIVATE_FIELDS = frozenset({"_sig", "_opcache", "_nmin", "_npos", "_run"})


def _sources() -> list[Path]:
    files = [p for p in CORE.rglob("*.py") if DISPATCH not in p.parents]
    files += list((ROOT / "plugins").rglob("*.py"))
    return sorted(p for p in files if "__pycache__" not in p.parts and "build" not in p.parts)


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` names (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def reach_arounds(path: Path) -> list[str]:
    """Where ``path`` reads a private dispatcher field or imports a ``_dispatch``
    submodule, as ``"file:line: what"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    module = _module_of(path)
    is_package = path.name == "__init__.py"
    rel = path.relative_to(ROOT)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_FIELDS:
            if isinstance(node.ctx, ast.Load):
                found.append(f"{rel}:{node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            target = _imported(node, module, is_package)
            names = [a.name for a in node.names]
            if target.startswith("oplib_core._dispatch."):
                found.append(f"{rel}:{node.lineno}: imports {target}")
            elif target == "oplib_core" and "_dispatch" in names:
                found.append(f"{rel}:{node.lineno}: imports oplib_core._dispatch as a name")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("oplib_core._dispatch."):
                    found.append(f"{rel}:{node.lineno}: imports {a.name}")
    return found


def test_no_module_reaches_around_the_door() -> None:
    sources = _sources()
    assert len(sources) > 100  # the walk found the core and the plugins
    found = [f for p in sources for f in reach_arounds(p)]
    assert not found, (
        "import from oplib_core._dispatch (its __init__) and ask the op (bind_call, "
        "unwrap_call, wrap_call, route, run_plan, tensor_kernel...) instead:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("def f(op):\n    return op._sig.npos\n", "reads ._sig"),
        ("def f(op):\n    return op._opcache\n", "reads ._opcache"),
        ("def f(op, a):\n    return op._npos, op._nmin\n", "reads ._npos"),
        ("def f(op, p):\n    return op._run(p, True)\n", "reads ._run"),
        ("from .._dispatch.fastpath import SLOW\n", "imports oplib_core._dispatch.fastpath"),
        ("from oplib_core._dispatch.modes import MODES\n", "imports oplib_core._dispatch.modes"),
        ("import oplib_core._dispatch.binding\n", "imports oplib_core._dispatch.binding"),
    ],
)
def test_the_check_finds_each_kind_of_reach_around(tmp_path: Path, source: str, what: str) -> None:
    # a module inside the core, outside _dispatch: what the walk reads
    path = CORE / "fake" / "_door_probe_tmp.py"
    path.write_text(source, encoding="utf-8")
    try:
        found = reach_arounds(path)
    finally:
        path.unlink()
    assert any(what in f for f in found), found


def test_the_check_allows_the_door_itself(tmp_path: Path) -> None:
    path = CORE / "fake" / "_door_probe_tmp.py"
    path.write_text(
        "from .._dispatch import MODES, OpOverload\nfrom . import _run\n"
        "def f(op, self):\n    self._npos = -1\n    return op.route((), {})\n",
        encoding="utf-8",
    )
    try:
        assert reach_arounds(path) == []
    finally:
        path.unlink()


# -- the door serves FakeTensorMode ----------------------------------------------------------


def test_fake_mode_calls_are_served_by_the_op_and_agree_with_the_mode() -> None:
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones((3, 4)))
    neg = oplib.ops.oplib.neg.default
    with mode:
        first = neg(x)  # through the mode: it lets the op serve such calls
        second = neg(x)  # served by the op, the mode still active
        raw = neg(x.native)
    assert type(first) is oplib.Tensor and type(second) is oplib.Tensor
    assert (first.shape, first.dtype, first.device) == (second.shape, second.dtype, second.device)
    assert raw.shape == (3, 4) and not isinstance(raw, oplib.Tensor)
    served = neg._opcache.modes.get(oplib.FakeTensorMode)  # (the test may look inside)
    if SLOW:
        assert served is None
    else:
        # what it serves: fake arrays, and Tensors of them; anything else goes to the mode
        assert set(served) == {type(x.native), oplib.Tensor}
        real = oplib.tensor(np.ones(2))
        with mode, pytest.raises(oplib.fake.FakeTensorError, match="got real input 'self'"):
            served[oplib.Tensor](real)


def test_served_calls_still_refuse_real_inputs() -> None:
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(3))
    real = oplib.tensor(np.ones(3))
    with mode:
        oplib.ops.oplib.neg.default(x)
        with pytest.raises(oplib.fake.FakeTensorError, match="got real input 'self'"):
            oplib.ops.oplib.neg.default(real)


def test_a_registration_makes_the_op_forget_what_it_served() -> None:
    lib = oplib.Library("doortest", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")

        @oplib.register_fake("doortest::twice", lib=lib)
        def _(x):
            return oplib.empty_like(x)

        mode = oplib.FakeTensorMode()
        x = mode.from_real(np.ones((2, 5)))
        op = oplib.ops.doortest.twice.default
        with mode:
            assert op(x).shape == (2, 5)
            assert op(x).shape == (2, 5)

        @oplib.register_fake("doortest::twice", lib=lib, allow_override=True)
        def _(x):
            return x.new_empty((7,))

        with mode:
            assert op(x).shape == (7,)
            assert op(x).shape == (7,)
    finally:
        lib._destroy()


def test_a_mode_subclass_that_overrides_dispatch_is_never_bypassed() -> None:
    seen: list[str] = []

    class Counting(oplib.FakeTensorMode):
        def __oplib_dispatch__(self, op, args, kwargs):
            seen.append(op.name())
            return super().__oplib_dispatch__(op, args, kwargs)

    mode = Counting()
    x = mode.from_real(np.ones(3))
    with mode:
        for _ in range(3):
            oplib.ops.oplib.neg.default(x)
    assert seen.count("oplib::neg") == 3


def test_slow_switch_turns_the_served_path_off() -> None:
    code = textwrap.dedent(
        """
        import numpy as np, oplib_core as oplib
        mode = oplib.FakeTensorMode()
        x = mode.from_real(np.ones(3))
        neg = oplib.ops.oplib.neg.default
        with mode:
            neg(x); neg(x)
        print(len(neg._opcache.modes))
        """
    )
    env = {**os.environ, "OPLIB_DISPATCH_SLOW": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"


def test_served_binary_calls_agree_with_the_mode() -> None:
    mode = oplib.FakeTensorMode()
    a = mode.from_real(np.ones((4, 3), dtype=np.float32))
    b = mode.from_real(np.ones(3, dtype=np.float64))
    add = oplib.ops.oplib.add.default
    with mode:
        results = [add(a, b) for _ in range(2)]  # the mode's path, then the op's
        mixed = add(a, b.native)  # a Tensor beside a native fake array: a Tensor
        native = add(a.native, b.native)
    for r in (*results, mixed):
        assert type(r) is oplib.Tensor
        assert (r.shape, str(r.dtype)) == ((4, 3), "float64")
    assert not isinstance(native, oplib.Tensor) and native.shape == (4, 3)


def test_packets_and_custom_ops_reach_what_their_op_serves() -> None:
    lib = oplib.Library("doorpkt", "DEF")
    try:
        lib.define("half(Tensor x) -> Tensor")
        lib.impl("half", lambda x: x / 2, "CPU")
        calls: list[int] = []

        @oplib.register_fake("doorpkt::half", lib=lib)
        def _(x):
            calls.append(1)
            return oplib.empty_like(x)

        mode = oplib.FakeTensorMode()
        x = mode.from_real(np.ones((2, 3)))
        packet = oplib.ops.doorpkt.half
        with mode:
            outs = [packet(x) for _ in range(3)]
        assert [o.shape for o in outs] == [(2, 3)] * 3
        assert len(calls) == 3  # the fake kernel ran each time, whichever path served it
        # the op serves its packet's calls (the fast path off: it serves none)
        assert bool(packet.default._opcache.modes) is (not SLOW)
    finally:
        lib._destroy()


def test_a_packet_without_overloads_under_a_mode_says_the_op_is_gone() -> None:
    lib = oplib.Library("doorgone", "DEF")
    lib.define("gone(Tensor x) -> Tensor")
    packet = oplib.ops.doorgone.gone
    lib._destroy()
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(2))
    with mode, pytest.raises(RuntimeError, match=r"doorgone::gone no longer exists"):
        packet(x)


def test_served_views_and_named_results_are_what_the_mode_gives() -> None:
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones((3, 4)))
    transpose = oplib.ops.oplib.transpose.default  # -> Tensor(a): a view of its input
    max_dim = oplib.ops.oplib.max.dim  # -> (Tensor values, Tensor indices)
    with mode:
        views = [transpose(x, 0, 1) for _ in range(2)]  # the mode's path, then the op's
        results = [max_dim(x, 1) for _ in range(2)]
    for v in views:
        assert type(v) is oplib.Tensor and v.shape == (4, 3)
    before = x._version
    with mode:
        oplib.ops.oplib.add_.Tensor(views[1], views[0])  # writing a view bumps its base
    assert x._version == before + 1
    for r in results:
        assert type(r).__name__ == "max" and r.values.shape == (3,)
        assert str(r.indices.dtype) == "int64"
    for op in (transpose, max_dim):
        assert bool(op._opcache.modes) is (not SLOW)
