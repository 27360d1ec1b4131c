"""Operators pickle by reference, as numpy's ufuncs do: ``pickle.loads(pickle.dumps(op)) is
op`` for packets, overloads, custom ops and higher-order operators; a process that lacks
the op imports the module that defined it, else raises ``UnknownOperatorError`` naming the
op and what to import, install or load; ``multiprocessing`` pools map ops under fork,
spawn and forkserver (tiny arrays, two workers, bounded in time)."""

from __future__ import annotations

import copy
import functools
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from plugin_dists import write_dist

import oplib_core as oplib

from helpers import Teardown, unique_ns

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _roundtrip(obj: Any, protocol: int = pickle.DEFAULT_PROTOCOL) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


def _env(**extra: str) -> dict[str, str]:
    """This environment (OPLIB_* switches and the run's cache directory included), with
    ``PYTHONPATH`` only as given."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def _run(code: str, *, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env=_env(**env),
    )


# -- by reference, in one process ----------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_core_ops_unpickle_as_the_same_object(protocol: int) -> None:
    ops = oplib.ops.oplib
    for op in (ops.sin, ops.sin.default, ops.sin.out, ops.add, ops.add.Scalar, ops.add.default):
        data = pickle.dumps(op, protocol=protocol)
        assert pickle.loads(data) is op, op
        assert len(data) < 300, (op, len(data))  # a name, never the kernels or caches
    x = np.array([0.0, 1.0])
    assert np.array_equal(_roundtrip(ops.sin)(x), np.sin(x))


def test_copy_and_deepcopy_give_the_op_itself() -> None:
    for op in (oplib.ops.oplib.exp, oplib.ops.oplib.exp.default, oplib.ops.higher_order.cond):
        assert copy.copy(op) is op and copy.deepcopy(op) is op
        assert copy.deepcopy([op, {"f": op}]) == [op, {"f": op}]


def test_user_ops_unpickle_as_the_same_object(lib: oplib.Library, ns: str) -> None:
    lib.define("scale(Tensor x, float s=2.0) -> Tensor")
    lib.define("scale.twice(Tensor x, Tensor y) -> Tensor")
    lib.impl("scale", lambda x, s=2.0: x * s, "CPU")
    lib.impl("scale.twice", lambda x, y: (x + y) * 2, "CPU")
    packet = getattr(oplib.ops, ns).scale
    for op in (packet, packet.default, packet.twice):
        for protocol in PROTOCOLS:
            assert _roundtrip(op, protocol) is op
    x = np.ones(2)
    again = _roundtrip(packet)
    assert np.array_equal(again(x), [2.0, 2.0]) and np.array_equal(again(x, x), [4.0, 4.0])
    partial = _roundtrip(functools.partial(packet.default, s=3.0))
    assert partial.func is packet.default and np.array_equal(partial(x), [3.0, 3.0])


def test_a_custom_op_unpickles_as_the_same_object(teardown: Teardown) -> None:
    ns = unique_ns()

    @oplib.custom_op(f"{ns}::inc", mutates_args=())
    def inc(x: np.ndarray) -> np.ndarray:
        return x + 1

    teardown(inc)
    for protocol in PROTOCOLS:
        assert _roundtrip(inc, protocol) is inc
    assert _roundtrip(inc._opoverload) is inc._opoverload
    assert np.array_equal(_roundtrip(inc)(np.zeros(2)), [1.0, 1.0])


def test_higher_order_operators_unpickle_as_the_same_object(teardown: Teardown) -> None:
    assert _roundtrip(oplib.ops.higher_order.cond) is oplib.ops.higher_order.cond
    hop = oplib.HigherOrderOperator(unique_ns("hop"))
    teardown(hop)
    for protocol in PROTOCOLS:
        assert _roundtrip(hop, protocol) is hop


def test_a_tensor_call_after_unpickling_takes_the_same_caches() -> None:
    # the fast path's closures stay in this process: the unpickled op is the op
    t = oplib.tensor([0.0, 1.0], dtype=oplib.float64)
    op = _roundtrip(oplib.ops.oplib.cos)
    assert op is oplib.ops.oplib.cos
    assert np.allclose(op(t).numpy(), np.cos([0.0, 1.0]))


def test_oplib_errors_pickle_whole() -> None:
    # Exception pickles as cls(*args): oplib's errors take keyword-only arguments, and one
    # that failed to unpickle in a pool's result thread hung the pool
    errors = [
        oplib.CallArgumentError("bad call", op="ns::x", schema="(Tensor x) -> Tensor"),
        oplib.UnknownOperatorError("no op", op="ns::x", suggestions=["ns::y"]),
        oplib.InvalidArgumentError("bad kind", api="Library", argument="kind", value="BAD"),
        oplib.ReservedNamespaceError("reserved", "oplib"),
    ]
    for error in errors:
        again = _roundtrip(error)
        assert type(again) is type(error) and again.args == error.args
        assert vars(again) == vars(error)


# -- a process without the op ---------------------------------------------------------------


def test_a_destroyed_op_names_itself_and_its_module() -> None:
    ns = unique_ns()
    lib = oplib.Library(ns, "DEF")
    lib.define("gone(Tensor x) -> Tensor")
    packet = getattr(oplib.ops, ns).gone
    data = [pickle.dumps(packet), pickle.dumps(packet.default)]
    lib._destroy()
    for blob in data:
        with pytest.raises(oplib.UnknownOperatorError) as info:
            pickle.loads(blob)
        msg = str(info.value)
        assert f"cannot unpickle operator '{ns}::gone'" in msg
        assert "no such operator is defined in this process" in msg
        assert f"module {__name__!r} defined it (at {__file__}:" in msg
        assert "import that module before unpickling" in msg
        assert info.value.op == f"{ns}::gone"


def test_a_destroyed_custom_op_and_higher_order_operator_name_themselves() -> None:
    ns = unique_ns()

    @oplib.custom_op(f"{ns}::gone", mutates_args=())
    def gone(x: np.ndarray) -> np.ndarray:
        return x

    hop = oplib.HigherOrderOperator(f"{ns}_hop")
    data = pickle.dumps(gone), pickle.dumps(hop)
    gone._destroy()
    hop._destroy()
    with pytest.raises(oplib.UnknownOperatorError, match=f"cannot unpickle custom op '{ns}::gone'"):
        pickle.loads(data[0])
    with pytest.raises(
        oplib.UnknownOperatorError,
        match=f"cannot unpickle higher-order operator 'higher_order::{ns}_hop'.*module",
    ):
        pickle.loads(data[1])


_MODULE = """\
import numpy as np
import oplib_core as oplib

lib = oplib.Library("{ns}", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda x: x * 2, "CPU")


@oplib.custom_op("{ns}::plus_one", mutates_args=())
def plus_one(x: np.ndarray) -> np.ndarray:
    return x + 1
"""


@pytest.fixture
def op_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    """An importable module defining a Library op and a custom op (imported here)."""
    ns = unique_ns("pickled")
    name = f"{ns}_ops"
    (tmp_path / f"{name}.py").write_text(_MODULE.format(ns=ns))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module, tmp_path
    module.plus_one._destroy()
    module.lib._destroy()
    sys.modules.pop(name, None)


def test_unpickling_imports_the_module_that_defined_the_op(op_module: tuple[Any, Path]) -> None:
    module, where = op_module
    ns = module.lib.ns
    ops = getattr(oplib.ops, ns)
    blob = pickle.dumps([ops.twice, ops.twice.default, module.plus_one])
    proc = _run(
        f"""
        import pickle, sys
        import numpy as np
        assert {module.__name__!r} not in sys.modules
        twice, default, plus_one = pickle.loads({blob!r})
        assert {module.__name__!r} in sys.modules
        x = np.ones(2)
        print(twice(x).tolist(), default(x).tolist(), plus_one(x).tolist())
        print(plus_one is sys.modules[{module.__name__!r}].plus_one)
        """,
        cwd=where.parent,
        PYTHONPATH=str(where),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[2.0, 2.0] [2.0, 2.0] [2.0, 2.0]", "True"]


def test_a_module_the_receiver_cannot_import_is_named(op_module: tuple[Any, Path]) -> None:
    module, where = op_module
    blob = pickle.dumps(module.plus_one)
    proc = _run(
        f"""
        import pickle
        import oplib_core as oplib
        try:
            pickle.loads({blob!r})
        except oplib.UnknownOperatorError as e:
            print(e)
            print(type(e.__cause__).__name__)
        """,
        cwd=where.parent,
    )
    assert proc.returncode == 0, proc.stderr
    msg, cause = proc.stdout.strip().split("\n")
    assert f"cannot unpickle custom op '{module.lib.ns}::plus_one'" in msg
    assert f"module {module.__name__!r} defined it" in msg
    assert "import that module before unpickling" in msg
    assert (
        f"importing it here failed: ModuleNotFoundError: No module named {module.__name__!r}" in msg
    )
    assert cause == "ModuleNotFoundError"


_PLUGIN = """\
from oplib_core import hookimpl


@hookimpl
def oplib_define(registrar):
    registrar.define("pdist::neg", "(Tensor x) -> Tensor")


@hookimpl
def oplib_impl(registrar):
    registrar.impl("pdist::neg", "cpu", lambda x: -x)
"""


def test_an_op_of_a_distribution_the_receiver_lacks_says_to_install_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_dist(site, "oplib-pickle-dist", "pdist_plugin", _PLUGIN)
    sent = _run(
        """
        import pickle, sys
        import oplib_core as oplib
        sys.stdout.write(pickle.dumps(oplib.ops.pdist.neg.default).hex())
        """,
        cwd=tmp_path,
        PYTHONPATH=str(site),
        OPLIB_ENTRY_POINT_CACHE="0",
    )
    assert sent.returncode == 0, sent.stderr
    code = f"""
        import pickle
        import numpy as np
        import oplib_core as oplib
        try:
            print(pickle.loads(bytes.fromhex({sent.stdout.strip()!r}))(np.ones(1)).tolist())
        except oplib.UnknownOperatorError as e:
            print(e)
        """
    there = _run(code, cwd=tmp_path, PYTHONPATH=str(site), OPLIB_ENTRY_POINT_CACHE="0")
    assert there.returncode == 0 and there.stdout.strip() == "[-1.0]", there.stderr
    missing = _run(code, cwd=tmp_path, OPLIB_ENTRY_POINT_CACHE="0")
    assert missing.returncode == 0, missing.stderr
    msg = missing.stdout.strip()
    assert "cannot unpickle operator 'pdist::neg'" in msg
    assert "the plugin of distribution 'oplib-pickle-dist' defined it" in msg
    assert "install that distribution here" in msg


def test_an_op_the_main_script_defined_under_its_guard_says_where(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import pickle, sys
            import oplib_core as oplib

            if __name__ == "__main__":
                lib = oplib.Library("guarded", "DEF")
                lib.define("op(Tensor x) -> Tensor")
                sys.stdout.write(pickle.dumps(oplib.ops.guarded.op).hex())
            """
        )
    )
    sent = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert sent.returncode == 0, sent.stderr
    got = _run(
        f"""
        import pickle
        import oplib_core as oplib
        try:
            pickle.loads(bytes.fromhex({sent.stdout.strip()!r}))
        except oplib.UnknownOperatorError as e:
            print(e)
        """,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stderr
    assert "cannot unpickle operator 'guarded::op'" in got.stdout
    assert f"the main script defined it (at {script}:" in got.stdout
    assert "if __name__ == '__main__':" in got.stdout


# -- multiprocessing pools ------------------------------------------------------------------

_POOL_OPS = """\
import numpy as np
import oplib_core as oplib

lib = oplib.Library("poolops", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda x: x * 2, "CPU")


@oplib.custom_op("poolops::plus_one", mutates_args=())
def plus_one(x: np.ndarray) -> np.ndarray:
    return x + 1
"""

_POOL_MAIN = """\
import multiprocessing as mp
import sys

import numpy as np
import oplib_core as oplib

# defined by every worker too: spawn and forkserver run this part of the script again
main_lib = oplib.Library("mainops", "DEF")
main_lib.define("half(Tensor x) -> Tensor")
main_lib.impl("half", lambda x: x / 2, "CPU")

if __name__ == "__main__":
    import pool_ops  # only here: spawned workers import it when they unpickle its ops

    ctx = mp.get_context(sys.argv[1])
    arrays = [np.arange(3.0) + i for i in range(4)]
    ops = oplib.ops
    with ctx.Pool(2) as pool:
        for op in (
            ops.oplib.sin,
            ops.oplib.sin.default,
            ops.poolops.twice,
            ops.poolops.twice.default,
            pool_ops.plus_one,
            ops.mainops.half,
        ):
            got = pool.map_async(op, arrays).get(60)  # (a hang fails here, not in CI)
            want = [op(a) for a in arrays]
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), (op, got, want)
        pairs = pool.starmap_async(ops.oplib.add, [(a, a) for a in arrays]).get(60)
        assert all(np.array_equal(p, 2 * a) for p, a in zip(pairs, arrays))
        try:  # an op's error in a worker reaches the caller whole
            pool.map_async(ops.oplib.add, arrays).get(60)
        except oplib.CallArgumentError as e:
            assert e.op == "oplib::add" and "oplib::add" in str(e), e
        else:
            raise AssertionError("add(x) did not raise")
    print("ok", sys.argv[1])
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_map_runs_ops_under_each_start_method(tmp_path: Path, method: str) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method on this platform")
    (tmp_path / "pool_ops.py").write_text(_POOL_OPS)
    (tmp_path / "main.py").write_text(_POOL_MAIN)
    proc = subprocess.run(
        [sys.executable, "main.py", method],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ok {method}"
