"""Ops with lists of tensors (``cat``, ``stack``, ``index.Tensor``) take the dispatcher's
cached call (issue 30: each call took the slow path, ~15 µs against numpy's ~1 µs): a
call whose tensors, in lists or not, are all of one class runs the kernel the slow path
remembered for it (``OpCache.call_listed``). Mixed classes, values binding converts, an
alias in the schema or a backend with several devices keep the slow path."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import fastpath
from oplib_core._dispatch.binding import Signature
from oplib_core._schema import parse_schema

ops = oplib.ops.oplib


def _slow_calls(op, monkeypatch) -> list[tuple[object, ...]]:
    slow: list[tuple[object, ...]] = []
    overload = type(op.default) if hasattr(op, "default") else type(op)
    real = overload._call_slow
    monkeypatch.setattr(overload, "_call_slow", lambda s, a, k: slow.append(a) or real(s, a, k))
    return slow


def test_which_ops_have_the_cached_call_of_lists() -> None:
    def lists(schema: str) -> tuple[tuple[int, bool], ...]:
        return Signature(parse_schema(schema), "t::f").tensor_lists

    assert lists("cat(Tensor[] tensors, int dim=0) -> Tensor") == ((0, False),)
    assert lists("index(Tensor self, Tensor?[] indices) -> Tensor") == ((1, True),)
    assert lists("f(Tensor(a) x, Tensor[] ys) -> Tensor(a)") == ()  # a view to bookkeep
    assert lists("f(Tensor(a!)[] xs) -> ()") == ()  # writes
    assert lists("f(Tensor[] xs) -> Tensor[]") == ()  # not one plain Tensor
    assert lists("f(Tensor[] xs, *, Tensor out) -> Tensor") == ()  # no default
    assert lists("f(Tensor[] xs, Generator g) -> Tensor") == ()  # an unchecked argument


@pytest.mark.fastpath
@pytest.mark.parametrize("array", ["native", "Tensor"])
def test_cat_stack_and_index_are_served_by_the_cache(array, monkeypatch) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = x + 10
    i = np.array([1, 0])
    wrap = (lambda a: a) if array == "native" else oplib.tensor
    a, b, idx = wrap(x), wrap(y), wrap(i)
    calls = [
        (ops.cat, ([a, b],), {}, np.concatenate([x, y])),
        (ops.cat, ((a, b), 1), {}, np.concatenate([x, y], 1)),  # a tuple for a list
        (ops.cat, ([a, b],), {"dim": -1}, np.concatenate([x, y], -1)),  # placed
        (ops.stack, ([a, b],), {}, np.stack([x, y])),
        (ops.index.Tensor, (a, [idx]), {}, x[i]),
        (ops.index.Tensor, (a, [None, idx]), {}, x[:, i]),  # Tensor?[] holds None
    ]
    for op, args, kwargs, _ in calls:  # the first calls plan and cache
        op(*args, **kwargs)
    slow = [_slow_calls(op, monkeypatch) for op in (ops.cat, ops.stack, ops.index.Tensor)]
    for _ in range(2):
        for op, args, kwargs, want in calls:
            out = op(*args, **kwargs)
            assert type(out) is (np.ndarray if array == "native" else oplib.Tensor)
            np.testing.assert_array_equal(np.asarray(out), want)
    assert slow == [[], [], []]
    assert ops.cat.default.plan_call(([a, b],), {}).cached  # explain() says so


def test_the_kernel_gets_a_list_of_its_own() -> None:
    with oplib.library._scoped_library("listed", "DEF") as lib:
        lib.define("total(Tensor[] xs) -> Tensor")
        given: list[list[object]] = []

        def total(xs):
            given.append(xs)
            return sum(xs[1:], xs[0])

        lib.impl("total", total, "CPU")
        xs = [np.ones(2), np.ones(2)]
        for _ in range(3):
            np.testing.assert_array_equal(oplib.ops.listed.total(xs), [2.0, 2.0])
        assert all(type(g) is list and g is not xs for g in given)


def test_mixed_classes_and_converted_values_take_the_slow_path_with_its_answers() -> None:
    x = np.ones((1, 2), np.float32)
    t = oplib.tensor(x)
    for _ in range(3):
        ops.cat([x, x])
        ops.cat([t, t])
        mixed = ops.cat([t, x])  # a native array beside a Tensor: a constant
        assert type(mixed) is oplib.Tensor and mixed.shape == (2, 2)
        assert ops.cat([x, x], np.int64(1)).shape == (1, 4)  # binding converts the dim


def test_errors_are_the_slow_paths_after_the_cache_is_warm() -> None:
    x = np.ones((1, 2))
    ops.cat([x, x])
    ops.cat([x, x])
    with pytest.raises(TypeError, match=r"argument 'tensors' must be Tensor\[\]"):
        ops.cat([x, "a"])
    with pytest.raises(TypeError, match="dim"):
        ops.cat([x, x], dim="a")
    notes = []
    for _ in range(2):  # the kernel raises: the same note, cold and warm
        with pytest.raises(ValueError) as info:
            ops.cat([x, np.ones((1, 3, 1))])
        notes.append(getattr(info.value, "__notes__", None))
    assert notes[0] == notes[1]


def test_cat_records_its_node_and_differentiates() -> None:
    for _ in range(3):
        a = oplib.tensor([1.0, 2.0], requires_grad=True)
        b = oplib.tensor([3.0], requires_grad=True)
        out = ops.cat([a, b])
        assert out.grad_fn is not None
        (out * oplib.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert a.grad is not None and a.grad.tolist() == [1.0, 2.0]
        assert b.grad is not None and b.grad.tolist() == [3.0]


def test_a_mode_sees_a_list_call_as_it_was_made() -> None:
    x = np.ones(2)
    ops.cat([x, x])
    ops.cat([x, x])

    class Log(oplib.DispatchMode):
        def __init__(self) -> None:
            self.calls: list[str] = []

        def __oplib_dispatch__(self, func, args, kwargs):
            self.calls.append(str(func))
            return func(*args, **kwargs)

    with Log() as log:
        ops.cat([x, x])
    assert log.calls == ["oplib.cat.default"]


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_the_compiled_call_runs_a_list_call_of_native_arrays_itself(monkeypatch) -> None:
    """A call of native arrays, or of Tensors recording no autograd, runs in C
    (``_ccall.c``'s ``listed_call``; its keywords placed), without the Python list call;
    a Tensor requiring grad still takes the Python one (which records the node)."""
    ops = oplib.ops.oplib
    x = np.arange(2.0)
    t = oplib.tensor(x)
    for args in (([x, x],), ([t, t],), ([x, x],), ((t, t), 0)):
        ops.cat(*args)  # fills the caches

    def refuse(*_: object) -> object:
        raise AssertionError("the Python list call ran")

    monkeypatch.setattr(type(ops.cat.default._opcache), "call_listed", refuse)
    np.testing.assert_array_equal(ops.cat([x, x]), [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(ops.cat.default((x, x), 0), [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(ops.cat([x[:, None], x[:, None]], -1), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(ops.cat(tensors=[x, x], dim=0), [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(ops.cat([x[:, None]] * 2, dim=1), [[0, 0], [1, 1]])
    for out in (ops.cat([t, t]), ops.cat((t, t), 0), ops.stack([t, t], dim=1)):
        assert type(out) is oplib.Tensor and out.requires_grad is False
    assert ops.cat([t, t]).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert ops.stack([t, t], dim=1).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    leaf = oplib.tensor(x, requires_grad=True)
    with pytest.raises(AssertionError, match="the Python list call ran"):
        ops.cat([t, leaf])


@pytest.mark.fastpath
@pytest.mark.skipif(not fastpath.COMPILED, reason="the compiled cached call is not built")
def test_a_list_call_of_tensors_over_two_backends_arrays_is_not_run_in_c() -> None:
    """Tensors in a list wrapping arrays of two classes (cpu and another backend's): the
    first class's kernel never runs them; the slow path raises its device error, call
    after call. The optional entries of a ``Tensor?[]`` (``index``) stay None."""
    from oplib_core.errors import DeviceMismatchError
    from tests import cupylike_backend

    x = np.arange(4.0).reshape(2, 2)
    t = oplib.tensor(x)
    columns = oplib.tensor(np.array([1, 0]))
    for _ in range(3):
        assert ops.index(t, [None, columns]).tolist() == [[1.0, 0.0], [3.0, 2.0]]
    uninstall = cupylike_backend.install()
    try:
        other = t.to(cupylike_backend.NAME)
        assert ops.cat([other, other]).shape == (4, 2)
        assert ops.cat([t, t]).shape == (4, 2)
        for _ in range(3):
            with pytest.raises(DeviceMismatchError, match="cupylike"):
                ops.cat([t, other])
    finally:
        uninstall()
