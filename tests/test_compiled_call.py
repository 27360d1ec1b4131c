"""The dispatcher's cached call compiled (``oplib_core/_dispatch/_ccall.c``, issue 30): the
base type of every ``FastCall``, running ``__call__``'s common case in C and handing the
rest to the Python ``__call__``. Each behaviour is run twice, compiled and with
``OPLIB_NATIVE_SPEEDUPS=0`` (the Python ``__call__`` alone), and must come out the same."""

from __future__ import annotations

import types

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import fastpath
from tests.subproc import run_python

from helpers import c_compiler

# What both runs do: every route through __call__, the answers and errors as data.
CALLS = """
import numpy as np
import oplib_core as oplib
from oplib_core._dispatch import fastpath

OUT["compiled"] = fastpath.COMPILED
OUT["python_call"] = isinstance(type(oplib.ops.oplib.neg.default).__call__, type(catch))
ops = oplib.ops.oplib
x = np.array([1.0, -2.0, 3.0])
t = oplib.tensor(x)
for _ in range(3):  # the first call fills the caches, the later ones take them
    OUT["neg"] = ops.neg.default(x).tolist()
    OUT["add"] = ops.add.default(x, x).tolist()
    OUT["mul_scalar"] = ops.mul.Scalar(x, 2.5).tolist()
    OUT["mul_int"] = ops.mul.Scalar(x, 2).tolist()
    OUT["tensor"] = type(ops.neg.default(t)).__name__
    OUT["tensor_add"] = ops.add.default(t, t).tolist()
    OUT["keyword"] = ops.add.default(x, other=x).tolist()
    OUT["sum"] = ops.sum.default(x).tolist()  # the defaults appended (None, False)
    OUT["sum_dim"] = ops.sum.default(x.reshape(3, 1), [1]).tolist()  # an int[]: checked
    OUT["sum_dim_tuple"] = ops.sum.default(x.reshape(3, 1), (1,)).tolist()

lib = oplib.Library("ccall", "DEF")
lib.define("scale(Tensor x, float s=2.0, bool twice=False) -> Tensor")
lib.define("boom(Tensor x) -> Tensor")
lib.define("stop(Tensor x) -> Tensor")
lib.impl("scale", lambda x, s, twice: x * s * (2 if twice else 1), "CPU")


def boom(x):
    raise ValueError("boom")


class Stop(BaseException):
    pass


def stop(x):
    raise Stop("stop")


lib.impl("boom", boom, "CPU")
lib.impl("stop", stop, "CPU")
for _ in range(3):
    OUT["defaults"] = oplib.ops.ccall.scale.default(x).tolist()  # the tails appended
    OUT["one_default"] = oplib.ops.ccall.scale.default(x, 3.0).tolist()
    OUT["all_given"] = oplib.ops.ccall.scale.default(x, 3.0, True).tolist()
    OUT["wrong_scalar"] = catch(oplib.ops.ccall.scale.default, x, "two")
    OUT["too_many"] = catch(oplib.ops.ccall.scale.default, x, 1.0, True, 4)
    OUT["none"] = catch(ops.neg.default)
    OUT["mixed"] = catch(ops.add.default, x, [1.0, 2.0, 3.0])
    try:
        oplib.ops.ccall.boom.default(x)
    except ValueError as e:
        OUT["notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
    try:
        oplib.ops.ccall.stop.default(x)
    except Stop as e:
        OUT["base_exception"] = [str(e), getattr(e, "__notes__", None)]


# packets: several overloads (routed by the arguments' types), one, and one gaining another
for _ in range(3):
    OUT["packet_add"] = ops.add(x, x).tolist()
    OUT["packet_add_scalar"] = ops.add(x, 1.5).tolist()
    OUT["packet_mul_tensor"] = ops.mul(t, 2.0).tolist()
    OUT["packet_keyword"] = ops.add(x, other=x).tolist()
    OUT["packet_neg"] = ops.neg(x).tolist()
    OUT["packet_bad"] = catch(ops.add, x, "one")
lib.define("twin(Tensor x) -> Tensor")
lib.impl("twin", lambda x: x * 2, "CPU")
twin = [oplib.ops.ccall.twin(x).tolist() for _ in range(2)]
lib.define("twin.Scalar(Tensor x, float s) -> Tensor")
lib.define("twin.boom(Tensor x, bool b) -> Tensor")
lib.impl("twin.Scalar", lambda x, s: x * s, "CPU")
lib.impl("twin.boom", lambda x, b: boom(x), "CPU")
for _ in range(3):
    twin += [oplib.ops.ccall.twin(x).tolist(), oplib.ops.ccall.twin(x, 3.0).tolist()]
    try:
        oplib.ops.ccall.twin(x, True)
    except ValueError as e:
        OUT["packet_notes"] = [n.split(" (")[0] for n in getattr(e, "__notes__", [])]
OUT["packet_gains_an_overload"] = twin
OUT["packet_routed"] = [oplib.ops.ccall.twin._routed, ops.neg._routed]


class Log(oplib.DispatchMode):
    def __init__(self):
        self.names = []

    def __oplib_dispatch__(self, op, args, kwargs):
        self.names.append(op.name())
        return op(*args, **kwargs)


with Log() as log:
    ops.neg.default(x)
    ops.add.default(t, t)
    ops.add(x, x)
    ops.mul(t, 2.0)
OUT["mode"] = log.names
"""

EXPECTED = {
    "neg": [-1.0, 2.0, -3.0],
    "add": [2.0, -4.0, 6.0],
    "mul_scalar": [2.5, -5.0, 7.5],
    "mul_int": [2.0, -4.0, 6.0],
    "tensor": "Tensor",
    "tensor_add": [2.0, -4.0, 6.0],
    "keyword": [2.0, -4.0, 6.0],
    "sum": 2.0,
    "sum_dim": [1.0, -2.0, 3.0],
    "sum_dim_tuple": [1.0, -2.0, 3.0],
    "defaults": [2.0, -4.0, 6.0],
    "one_default": [3.0, -6.0, 9.0],
    "all_given": [6.0, -12.0, 18.0],
    "notes": ["oplib: raised by the cpu kernel of ccall::boom"],
    "base_exception": ["stop", None],
    "mode": ["oplib::neg", "oplib::add", "oplib::add", "oplib::mul.Scalar"],
    "packet_add": [2.0, -4.0, 6.0],
    "packet_add_scalar": [2.5, -0.5, 4.5],
    "packet_mul_tensor": [2.0, -4.0, 6.0],
    "packet_keyword": [2.0, -4.0, 6.0],
    "packet_neg": [-1.0, 2.0, -3.0],
    "packet_gains_an_overload": [[2.0, -4.0, 6.0]] * 2 + [[2.0, -4.0, 6.0], [3.0, -6.0, 9.0]] * 3,
    "packet_notes": ["oplib: raised by the cpu kernel of ccall::twin.boom"],
    "packet_routed": [True, False],
}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, object]]:
    return {
        "compiled": run_python(CALLS, timeout=120),
        "python": run_python(CALLS, env={"OPLIB_NATIVE_SPEEDUPS": "0"}, timeout=120),
    }


def test_the_compiled_call_serves_where_it_was_built(runs):
    if c_compiler() is None:
        pytest.skip("no C compiler: the install built no compiled cached call")
    assert runs["compiled"]["compiled"] is True
    assert runs["compiled"]["python_call"] is False


def test_oplib_native_speedups_0_leaves_the_python_call(runs):
    assert runs["python"]["compiled"] is False
    assert runs["python"]["python_call"] is True


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_both_calls_give_the_same_answers(runs, key):
    assert runs["compiled"][key] == runs["python"][key] == EXPECTED[key]


@pytest.mark.parametrize("key", ["wrong_scalar", "too_many", "none", "mixed", "packet_bad"])
def test_both_calls_raise_the_same_errors(runs, key):
    error = runs["compiled"][key]
    assert error is not None and error == runs["python"][key]
    assert error[1].startswith(("ccall::", "oplib::")), error  # naming the op


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_the_compiled_base_holds_the_fields_the_python_call_reads():
    """The fields are the base type's members: no subclass may shadow one with a slot of
    its own (the C call would read the base's, left empty)."""
    base = type(oplib.ops.oplib.neg.default).__mro__[-2]
    assert base.__name__ == "FastCallBase"
    for cls in (
        type(oplib.ops.oplib.neg.default),
        type(oplib.ops.oplib.neg),
        type(oplib.ops.oplib.add),
        type(oplib.ops.oplib.zeros),
    ):
        for klass in cls.__mro__[:-2]:
            assert not set(klass.__dict__) & set(fastpath.FAST_FIELDS), klass
    op = oplib.ops.oplib.neg.default
    x = np.ones(2)
    op(x)
    assert op._by_type[np.ndarray] is not None  # read through the member
    assert isinstance(fastpath.FastCall._call_py, types.FunctionType)


@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_a_kernel_that_empties_the_cache_it_came_from_returns_its_result():
    """The C call holds the kernel it found while it runs: a kernel whose call drops the
    op's caches (a registration inside it) still returns, and the next call re-resolves."""
    with oplib.library._scoped_library("ccall_inv", "DEF") as lib:
        lib.define("f(Tensor x) -> Tensor")
        calls: list[int] = []

        def f(x):
            calls.append(1)
            if len(calls) == 3:  # a cached call: invalidate every cache of the op
                lib.impl("f", lambda x: x * 10, "Meta")
            return x + 1

        lib.impl("f", f, "CPU")
        op = oplib.ops.ccall_inv.f.default
        x = np.zeros(2)
        assert [op(x).tolist() for _ in range(4)] == [[1.0, 1.0]] * 4
        assert len(calls) == 4
