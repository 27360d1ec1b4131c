"""FakeTensorMode's fast path: the table an op serves the mode's calls from (``OpCache.modes``).

The first call of an op under the mode goes through ``FakeTensorMode.__oplib_dispatch__``,
which hands the op a table (``op.mode_table``/``op.serve_mode``); later calls of the fast
path's shape are served from it without leaving ``FastCall.__call__``. These tests hold
that the table is forgotten whenever a registration may change what serves the op (while
the mode is active, and between calls), that what it serves is exactly what the mode's
own path gives on the core sample set, and that a kernel it runs finds its context
(``get_ctx()``, the op named in data-access errors) though none is recorded per call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._dispatch import SLOW
from oplib_core._opset import CORE_OPS
from oplib_core.fake import DataAccessError, FakeArray, ShapeEnv
from oplib_core.testing import sample_inputs

pytest.importorskip("oplib_meta")


def _table(op: Any) -> Any:
    """What ``op`` serves FakeTensorMode's calls from (the test may look inside)."""
    return op._opcache.modes.get(oplib.FakeTensorMode)


@pytest.fixture
def lib() -> Iterator[oplib.Library]:
    lib = oplib.Library("fmspeed", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CPU")
    try:
        yield lib
    finally:
        lib._destroy()


# -- the table is forgotten when a registration changes the op ------------------------------


def test_replacing_the_fake_kernel_while_the_mode_is_active_is_seen_next_call(
    lib: oplib.Library,
) -> None:
    @oplib.register_fake("fmspeed::scale", lib=lib)
    def _(x: Any) -> Any:
        return oplib.empty_like(x)

    op = oplib.ops.fmspeed.scale.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones((2, 5)))
    with mode:
        assert op(x).shape == (2, 5)
        assert op(x).shape == (2, 5)  # served from the table
        assert (_table(op) is None) is SLOW

        @oplib.register_fake("fmspeed::scale", lib=lib, allow_override=True)
        def _(x: Any) -> Any:
            return x.new_empty((7,))

        assert _table(op) is None  # forgotten at once
        assert op(x).shape == (7,)
        assert op(x).shape == (7,)  # served again, from the new kernel's table
        assert op(x.native).shape == (7,)


def test_removing_the_fake_kernel_between_calls_is_seen(lib: oplib.Library) -> None:
    impl = oplib.Library("fmspeed", "IMPL")

    @oplib.register_fake("fmspeed::scale", lib=impl)
    def _(x: Any) -> Any:
        return oplib.empty_like(x)

    op = oplib.ops.fmspeed.scale.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(3))
    with mode:
        op(x)
        op(x)
    impl._destroy()  # the fake kernel goes with its library
    with mode, pytest.raises(oplib.NoKernelError, match="fmspeed::scale: has no fake kernel"):
        op(x)


def test_a_py_impl_for_the_mode_registered_later_takes_the_calls(lib: oplib.Library) -> None:
    @oplib.register_fake("fmspeed::scale", lib=lib)
    def _(x: Any) -> Any:
        return oplib.empty_like(x)

    op = oplib.ops.fmspeed.scale.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(3))
    with mode:
        op(x)
        op(x)
        op.py_impl(oplib.FakeTensorMode)(lambda mode, x: "handled")
        assert op(x) == "handled"


def test_a_thread_without_modes_is_not_served_by_another_threads_mode() -> None:
    neg = oplib.ops.oplib.neg.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(3))
    entered, done = threading.Event(), threading.Event()
    got: list[Any] = []

    def other() -> None:
        entered.wait()
        got.append(neg(np.arange(3.0)))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with mode:
        neg(x)
        neg(x)
        entered.set()
        done.wait(10)
    t.join()
    assert type(got[0]) is np.ndarray and got[0].tolist() == [-0.0, -1.0, -2.0]


def test_a_mode_that_goes_first_still_sees_calls_the_op_would_serve() -> None:
    matmul = oplib.ops.oplib.matmul.default
    mode = oplib.FakeTensorMode()
    a = mode.from_real(np.ones((1, 3), dtype=np.float32))
    b = mode.from_real(np.ones((3, 1), dtype=np.float32))
    with mode:
        matmul(a, b)
        matmul(a, b)  # the op now serves the mode
    assert (_table(matmul) is None) is SLOW
    with oplib.autocast("cpu", dtype=oplib.bfloat16), mode:
        # autocast goes first (torch's Autocast keys sit above the Python key): it casts
        # matmul's inputs, then the mode runs the fake kernel; a served call would skip it
        assert str(matmul(a, b).dtype) == "bfloat16"


def test_another_threads_autocast_does_not_stop_this_threads_served_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Which mode takes a call is a question about this thread's stack only: an autocast
    # block (a mode that goes first) in another thread changes nothing here.
    neg = oplib.ops.oplib.neg.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(3, dtype=np.float32))
    entered, done = threading.Event(), threading.Event()

    def other() -> None:
        with oplib.autocast("cpu", dtype=oplib.bfloat16):
            entered.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    entered.wait(10)
    slow: list[Any] = []
    real = type(neg)._call_slow
    monkeypatch.setattr(
        type(neg), "_call_slow", lambda self, a, kw: slow.append(self) or real(self, a, kw)
    )
    try:
        with mode:
            neg(x)  # the mode's path: hands neg its table
            del slow[:]
            out = neg(x)
    finally:
        done.set()
        t.join()
    assert out.shape == (3,) and type(out.native) is FakeArray
    assert slow == ([] if not SLOW else [neg])


def test_the_mode_stack_says_which_mode_takes_the_calls() -> None:
    from oplib_core._dispatch.stack import ModeStack

    class Plain:
        pass

    class First:
        _oplib_dispatch_first = True

    s: ModeStack[Any] = ModeStack()
    assert (s.stack, s.at, s.key) == ((), -1, None)
    a, f, b = Plain(), First(), Plain()
    s.push(a)
    assert (s.at, s.key) == (0, Plain)
    s.push(f)
    s.push(b)  # entered after the one that goes first: it still takes the calls
    assert s.stack == (a, f, b) and (s.at, s.key) == (1, First)
    assert s.take(1) is f and s.stack == (a, b) and (s.at, s.key) == (1, Plain)
    s.put(1, f)
    assert s.stack == (a, f, b) and s.at == 1
    assert s.pop() is b and s.pop() is f and (s.at, s.key) == (0, Plain)
    assert s.pop() is a and (s.stack, s.at, s.key) == ((), -1, None)
    with pytest.raises(AttributeError):
        s.stack.append(a)  # type: ignore[attr-defined]  # only the methods change it


# -- what the table serves is what the mode's own path gives --------------------------------


class _ModePath(oplib.FakeTensorMode):
    """The mode's own path every call: a subclass that overrides dispatch is never served."""

    def __oplib_dispatch__(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return super().__oplib_dispatch__(op, args, kwargs)


def _describe(out: Any) -> Any:
    if isinstance(out, (list, tuple)):
        return (type(out).__name__, [_describe(o) for o in out])
    if isinstance(out, (oplib.Tensor, FakeArray)):
        return (type(out).__name__, str(tuple(out.shape)), str(out.dtype), str(out.device))
    return (type(out).__name__, repr(out))


def _run(mode: oplib.FakeTensorMode, op: Any, args: Any, kwargs: Any, native: bool) -> Any:
    def conv(v: Any) -> Any:
        if isinstance(v, (oplib.Tensor, np.ndarray)):
            t = mode.from_real(v)
            return t.native if native else t
        if isinstance(v, (list, tuple)):
            return type(v)(conv(e) for e in v)
        return v

    a, kw = conv(args), {k: conv(v) for k, v in kwargs.items()}
    with mode:
        try:
            op(*a, **kw)  # the first call hands the op its table; the second is served
            return ("ok", _describe(op(*a, **kw)))
        except Exception as e:
            return ("error", type(e).__name__, str(e))


def _samples() -> Iterator[tuple[str, Any, Any]]:
    for core_op in CORE_OPS:
        name = f"oplib::{core_op.name}"
        for s in sample_inputs(name, "cpu"):
            yield name, s.args, s.kwargs


@pytest.mark.parametrize("native", [False, True], ids=["Tensor", "native"])
def test_served_calls_give_what_the_mode_gives_on_the_core_samples(native: bool) -> None:
    served_ops = 0
    differ: list[str] = []
    for name, args, kwargs in _samples():
        op = oplib.lookup(name)
        served = _run(oplib.FakeTensorMode(), op, args, kwargs, native)
        own = _run(_ModePath(), op, args, kwargs, native)
        if served != own:
            differ.append(f"{name} {kwargs}: served {served}, the mode's path {own}")
        served_ops += _table(op) is not None
    assert not differ, "\n".join(differ[:20])
    if SLOW:
        assert served_ops == 0
    else:
        assert served_ops > 100  # most core ops are served: the comparison covers the table


def test_served_errors_say_what_the_mode_says() -> None:
    add = oplib.ops.oplib.add.default
    words = []
    for mode in (oplib.FakeTensorMode(), _ModePath()):
        a = mode.from_real(np.ones((2, 3)))
        b = mode.from_real(np.ones((4,)))
        with mode:
            add(a, a)
            add(a, a)
            with pytest.raises(Exception) as info:
                add(a, b)
        words.append((type(info.value), str(info.value)))
    assert words[0] == words[1]
    assert "broadcast" in words[0][1]


def test_a_fake_kernel_returning_real_data_is_refused_when_served(lib: oplib.Library) -> None:
    @oplib.register_fake("fmspeed::scale", lib=lib)
    def _(x: Any) -> Any:
        return oplib.empty_like(x) if x.shape[0] == 2 else np.zeros(x.shape)

    op = oplib.ops.fmspeed.scale.default
    mode = oplib.FakeTensorMode()
    with mode:
        ok = mode.from_real(np.ones(2))
        op(ok)
        op(ok)  # the op serves the mode now
        bad = mode.from_real(np.ones(3))
        for x in (bad, bad.native):
            with pytest.raises(
                oplib.fake.FakeTensorError,
                match=r"fmspeed::scale: its fake kernel returned a ndarray under FakeTensorMode",
            ):
                op(x)


def test_a_served_custom_op_hands_other_inputs_to_the_mode(lib: oplib.Library) -> None:
    # One-argument calls of a user's op go to one entry of its table (fake arrays and
    # Tensors of them); anything else must get what the mode's own path gives it.
    @oplib.register_fake("fmspeed::scale", lib=lib)
    def _(x: Any) -> Any:
        return oplib.empty_like(x)

    op = oplib.ops.fmspeed.scale
    fake = oplib.FakeTensorMode()
    x = fake.from_real(np.ones(2))
    others = [np.ones(3), oplib.tensor(np.ones(4)), 2.5]
    with fake:
        op(x)
        op(x)  # served from now on
        table = _table(op.default)
        assert (table is None) if SLOW else (table[1] is not None)  # (fast path off: none)
        assert (op(x).shape, type(op(x.native))) == ((2,), FakeArray)
        served = [_describe(_outcome(op, v)) for v in others]
    with _ModePath():  # the mode's own path, every call
        own = [_describe(_outcome(op, v)) for v in others]
    assert served == own


def _outcome(op: Any, v: Any) -> Any:
    try:
        return op(v)
    except Exception as e:
        return (type(e).__name__, str(e))


# -- a served kernel finds its context --------------------------------------------------------


def _env_at(n: int) -> ShapeEnv:
    """A shape env whose next symbol is ``u{n}`` (the meta device's env is elsewhere)."""
    env = ShapeEnv()
    for _ in range(n):
        env.new_symbol()
    return env


def test_get_ctx_in_a_served_kernel_is_its_ops_with_the_modes_shape_env(
    lib: oplib.Library,
) -> None:
    lib.define("nonzero_like(Tensor x) -> Tensor")
    seen: list[Any] = []

    @oplib.register_fake("fmspeed::nonzero_like", lib=lib)
    def _(x: Any) -> Any:
        ctx = oplib.get_ctx()
        seen.append(ctx)
        return x.new_empty((ctx.new_dynamic_size(),))

    op = oplib.ops.fmspeed.nonzero_like.default
    env = _env_at(50)
    mode = oplib.FakeTensorMode(shape_env=env)
    x = mode.from_real(np.ones(4))
    with mode:
        shapes = [str(op(x).shape) for _ in range(3)]  # the mode's path, then served twice
    assert shapes == ["(u50,)", "(u51,)", "(u52,)"]
    assert [c.op for c in seen] == ["fmspeed::nonzero_like"] * 3
    assert all(c.shape_env is env for c in seen)


def test_masked_select_under_a_mode_takes_the_modes_shape_env() -> None:
    mode = oplib.FakeTensorMode(shape_env=_env_at(50))
    x = mode.from_real(np.ones(4))
    m = mode.from_real(np.ones(4, dtype=bool))
    with mode:
        shapes = [str(oplib.ops.oplib.masked_select.default(x, m).shape) for _ in range(3)]
    assert shapes == ["(u50,)", "(u51,)", "(u52,)"]  # numbered by the mode's env


def test_a_data_access_in_a_served_kernel_names_its_op(lib: oplib.Library) -> None:
    @oplib.register_fake("fmspeed::scale", lib=lib)
    def _(x: Any) -> Any:
        if x.shape[0] == 3:
            bool(x)  # reads data
        return oplib.empty_like(x)

    op = oplib.ops.fmspeed.scale.default
    mode = oplib.FakeTensorMode()
    with mode:
        ok = mode.from_real(np.ones(2))
        op(ok)
        op(ok)
        with pytest.raises(DataAccessError, match=r"^fmspeed::scale: its fake kernel \("):
            op(mode.from_real(np.ones(3)))


def test_the_innermost_kernels_context_wins_served_or_recorded(lib: oplib.Library) -> None:
    lib.define("outer(Tensor x) -> Tensor")
    lib.define("inner(Tensor x) -> Tensor")
    seen: list[str] = []

    @oplib.register_fake("fmspeed::inner", lib=lib)
    def _(x: Any) -> Any:
        seen.append(oplib.get_ctx().op)
        return oplib.empty_like(x)

    @oplib.register_fake("fmspeed::outer", lib=lib)
    def _(x: Any, *, twice: bool = False) -> Any:
        out = oplib.ops.fmspeed.inner.default(x)
        seen.append(oplib.get_ctx().op)
        return out

    outer, inner = oplib.ops.fmspeed.outer.default, oplib.ops.fmspeed.inner.default
    mode = oplib.FakeTensorMode()
    x = mode.from_real(np.ones(2))
    with mode:
        inner(x)
        inner(x)  # inner is served from now on
        seen.clear()
        outer(x)  # outer by the mode's path (its context recorded), inner served inside
        outer(x)  # both served
    assert seen == ["fmspeed::inner", "fmspeed::outer"] * 2
    seen.clear()
    with mode:  # cond's handler records its own context; inner, served inside, still wins
        oplib.cond(True, lambda a: inner(a), lambda a: inner(a), (x,))
    assert seen == ["fmspeed::inner", "fmspeed::inner"]
