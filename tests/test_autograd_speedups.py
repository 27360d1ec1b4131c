"""The engine's cheaper paths (issue 30): gradients summed in place in a node's input buffer
when nothing else holds them, saved tensors freed as soon as their node has run. Each must
give what the plain path gives."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import grad
from oplib_core.autograd._engine import IN_PLACE_MIN

BIG = IN_PLACE_MIN  # the fewest elements the engine adds into in place


class _Log(oplib.DispatchMode):
    """Records the name of every op called while active."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __oplib_dispatch__(self, op, args, kwargs):
        self.names.append(op.name())
        return op(*args, **kwargs)


def test_formula_gradient_is_a_new_array_not_the_incoming_one():
    x = oplib.tensor(np.linspace(-1, 1, 5), requires_grad=True)
    g = oplib.tensor(np.ones(5))
    before = g.numpy().copy()
    (gx,) = grad(x.tanh(), x, g)
    np.testing.assert_array_equal(g.numpy(), before)
    assert not np.shares_memory(gx.numpy(), g.numpy())


def test_a_dispatch_mode_sees_the_formulas_ops():
    """Under a mode the formula runs through its ops (the mode sees each one)."""
    x = oplib.tensor(np.array([0.5, -0.25]), requires_grad=True)
    y = x.tanh()
    log = _Log()
    with log:
        y.backward(oplib.tensor(np.ones(2)))
    assert log.names.count("oplib::mul") == 2 and "oplib::rsub.Scalar" in log.names


def test_double_backward_through_tanh_and_scaled():
    x = oplib.tensor(np.array([0.3, -1.1]), requires_grad=True)
    y = (x * 0.5).tanh()
    (g1,) = grad(y.sum(), x, create_graph=True)
    assert g1.requires_grad
    (g2,) = grad(g1.sum(), x)
    t = np.tanh(0.5 * np.array([0.3, -1.1]))
    np.testing.assert_allclose(g1.detach().numpy(), 0.5 * (1 - t * t))
    np.testing.assert_allclose(g2.numpy(), 0.25 * -2 * t * (1 - t * t))


# -- in-place accumulation in a node's input buffer -------------------------------------------
def test_fan_in_gradients_are_summed_in_place_and_correctly():
    x = oplib.tensor(np.full(BIG, 2.0, np.float32), requires_grad=True)
    y = x * 2
    z = (y.tanh() + y.sin() + y.cos()).sum()
    log = _Log()
    with log:
        z.backward()
    assert log.names.count("oplib::add_.Tensor") == 2
    assert "oplib::add" not in log.names
    t = np.tanh(np.float32(4.0))
    want = 2 * ((1 - t * t) + np.cos(np.float32(4.0)) - np.sin(np.float32(4.0)))
    np.testing.assert_allclose(x.grad.numpy(), np.full(BIG, want), rtol=1e-5)


def test_small_fan_in_is_summed_out_of_place():
    x = oplib.tensor(np.full(4, 2.0), requires_grad=True)
    y = x * 2
    log = _Log()
    with log:
        (y.tanh() + y.sin()).sum().backward()
    assert "oplib::add_.Tensor" not in log.names and "oplib::add" in log.names


@pytest.mark.parametrize("as_array", [False, True])
def test_never_adds_into_a_callers_gradient(as_array):
    """clone's gradient is the incoming one itself: the caller's, which must stay as it was
    when another gradient meets it (the engine runs the last root first, so it arrives
    first)."""
    x = oplib.tensor(np.ones(BIG), requires_grad=True)
    a = x * 3
    g1n = np.full(BIG, 1.0)
    g1 = g1n if as_array else oplib.tensor(g1n)
    g2 = oplib.tensor(np.full(BIG, 2.0))
    oplib.autograd.backward([a * 1.0, a.clone()], [g2, g1])
    np.testing.assert_array_equal(g1n, np.full(BIG, 1.0))
    np.testing.assert_array_equal(x.grad.numpy(), np.full(BIG, 9.0))


def test_never_adds_into_a_grad_handed_out():
    """add sends one gradient to the leaf (it becomes x.grad) and to a's node; the second
    gradient reaching a's node must not be added into x.grad."""
    x = oplib.tensor(np.ones(BIG), requires_grad=True)
    a = x * 3
    loss = a.tanh().sum() + ((x + a) * 1.0).sum()
    loss.backward()
    t = np.tanh(3.0)
    np.testing.assert_allclose(x.grad.numpy(), np.full(BIG, 1 + 3 * (1 + 1 - t * t)))


def test_never_adds_into_a_gradient_a_formula_kept(ns):
    """A gradient the backward function also keeps (here on a list) is not written into."""
    kept: list[oplib.Tensor] = []

    @oplib.custom_op(f"{ns}::ident", mutates_args=(), device_types="cpu")
    def ident(x: oplib.Tensor) -> oplib.Tensor:
        return np.array(x, copy=True)

    def backward(ctx, g):
        out = g * 1.0
        kept.append(out)
        return out

    ident.register_autograd(backward)
    x = oplib.tensor(np.ones(BIG), requires_grad=True)
    a = x * 2
    (a.tanh() + ident(a)).sum().backward()
    np.testing.assert_array_equal(kept[0].numpy(), np.ones(BIG))


def test_create_graph_sums_out_of_place():
    x = oplib.tensor(np.ones(BIG), requires_grad=True)
    y = x * 2
    log = _Log()
    with log:
        (gx,) = grad((y.tanh() + y.sin()).sum(), x, create_graph=True)
    assert "oplib::add_.Tensor" not in log.names
    assert gx.requires_grad


# -- saved tensors freed ------------------------------------------------------------------------
def _chain_with_saved_output() -> tuple[oplib.Tensor, oplib.Tensor, weakref.ref]:
    x = oplib.tensor(np.linspace(-1, 1, 8), requires_grad=True)
    h = (x * 2).tanh()  # tanh saves its output
    ref = weakref.ref(h._data)
    loss = (h * 0.5).sum()
    del h
    return x, loss, ref


def test_saved_output_is_freed_by_backward():
    x, loss, ref = _chain_with_saved_output()
    gc.collect()
    assert ref() is not None
    loss.backward()
    assert ref() is None
    assert x.grad is not None


def test_saved_output_stays_with_retain_graph_and_a_second_backward_works():
    x, loss, ref = _chain_with_saved_output()
    loss.backward(retain_graph=True)
    assert ref() is not None
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    assert ref() is None
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


# -- the Autograd kernel of a core op calls the kernel below itself ------------------------------
def test_a_recorded_view_stays_a_view_once_its_no_grad_call_is_cached():
    """A view op's result needs wrapping as a view: the Autograd kernel never calls its
    cached kernel directly (a write through the view must reach the base's history)."""
    data = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    for _ in range(2):  # fills the fast path's caches for select, mul.Scalar, mul_
        plain = oplib.tensor(np.asarray(data)) * 1
        plain[:, 0].mul_(oplib.tensor(np.asarray([2.0, 3.0])))
    x = oplib.tensor(np.asarray(data), requires_grad=True)
    w = oplib.tensor(np.asarray([2.0, 3.0]), requires_grad=True)
    y = x * 1
    y[:, 0].mul_(w)
    (y * y).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [[8.0, 4.0, 6.0], [72.0, 10.0, 12.0]])


@pytest.mark.fastpath
def test_a_core_ops_kernel_failing_below_autograd_is_named_as_on_the_plain_path():
    """Once cached, the Autograd kernel calls the kernel below itself: an error raised
    there carries the same note, naming the kernel, as on the plain fast path."""

    def picky(x):
        if (x < 0).any():
            raise ValueError("tanh kernel takes no negatives")
        return np.tanh(x)

    good, bad = np.asarray([0.5, 1.5]), np.asarray([-0.5, 1.5])
    op = oplib.ops.oplib.tanh.default
    with oplib.library._scoped_library("oplib", "IMPL") as lib:
        lib.impl("tanh", picky, "CPU", allow_override=True)
        for _ in range(2):  # the Tensor cache, then the Autograd cache
            oplib.tensor(good).tanh()
            oplib.tensor(good, requires_grad=True).tanh()
        assert op.tensor_kernels[np.ndarray] is picky  # what the Autograd kernel calls
        y = oplib.tensor(good, requires_grad=True).tanh()
        assert y.grad_fn is not None
        notes = []
        for grad in (False, True):
            with pytest.raises(ValueError, match=r"^tanh kernel takes no negatives") as info:
                oplib.tensor(bad, requires_grad=grad).tanh()
            notes.append(info.value.__notes__)
    assert notes[0] == notes[1]
    assert "raised by the cpu kernel of oplib::tanh (" in notes[1][0]
    np.testing.assert_allclose(oplib.tensor(bad).tanh().numpy(), np.tanh(bad))  # undone


def test_a_core_op_under_a_mode_records_and_the_mode_sees_the_call_below():
    """With a mode active the Autograd kernel leaves the cached kernel alone: the call
    below autograd goes through the mode, as on the first call."""
    x = oplib.tensor(np.asarray([0.5, 1.5]), requires_grad=True)
    for _ in range(2):
        (x * 2.0).tanh()
    with _Log() as log:
        y = (x * 2.0).tanh()
    assert log.names == ["oplib::mul.Scalar", "oplib::tanh"]
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 2.0 / np.cosh(2.0 * np.asarray([0.5, 1.5])) ** 2)
