"""The engine and register_autograd: accumulation, retain_graph/freed graphs, create_graph,
deep graphs, ctx features, validation errors, registration rules and lifetimes."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import grad
from oplib_core.autograd._engine import IN_PLACE_MIN
from oplib_core.library import _scoped_library

OPS = oplib.ops.oplib


def make_sin(ns, *, setup=True):
    @oplib.custom_op(f"{ns}::numpy_sin", mutates_args=(), device_types="cpu")
    def numpy_sin(x: oplib.Tensor) -> oplib.Tensor:
        return np.sin(x)

    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * OPS.cos(x)

    numpy_sin.register_autograd(backward, setup_context=setup_context if setup else None)
    return numpy_sin


# -- the issue's example and the engine ---------------------------------------------------
def test_issue_example(ns):
    numpy_sin = make_sin(ns)
    x = oplib.tensor([0.1, 0.2], requires_grad=True)
    y = numpy_sin(x)
    assert y.requires_grad and y.grad_fn.name() == f"GeneratedBackwardFor_{ns}_numpy_sin_default"
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), np.cos([0.1, 0.2]))


def test_gradients_accumulate_across_backward_calls_and_paths():
    x = oplib.tensor([2.0], requires_grad=True)
    (x * x + x).backward()
    assert x.grad.tolist() == [5.0]
    (x * 3).backward()
    assert x.grad.tolist() == [8.0]


def test_leaf_grads_are_never_shared_objects():
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    y = oplib.tensor([1.0, 2.0], requires_grad=True)
    g = oplib.tensor([1.0, 1.0])
    (x + y).backward(g)
    assert x.grad is not y.grad and x.grad is not g
    x.grad.numpy()[0] = 100.0
    assert y.grad.tolist() == [1.0, 1.0] and g.tolist() == [1.0, 1.0]


_BIG = IN_PLACE_MIN  # elements: in-place accumulation is for arrays this large


def test_accumulation_writes_in_place_into_a_grad_nobody_else_holds():
    x = oplib.tensor(np.ones(_BIG), requires_grad=True)
    (x * 2).sum().backward()
    first = id(x.grad)
    memory = x.grad.numpy().ctypes.data
    (x * 3).sum().backward()
    assert id(x.grad) == first and x.grad.numpy().ctypes.data == memory
    np.testing.assert_array_equal(x.grad.numpy(), np.full(_BIG, 5.0))


def test_accumulation_into_a_small_grad_makes_a_new_one():
    x = oplib.tensor(np.ones(_BIG - 1), requires_grad=True)
    (x * 2).sum().backward()
    first = id(x.grad)
    (x * 3).sum().backward()
    assert id(x.grad) != first
    np.testing.assert_array_equal(x.grad.numpy(), np.full(_BIG - 1, 5.0))


def test_accumulation_never_mutates_a_grad_the_user_holds():
    x = oplib.tensor(np.ones(_BIG), requires_grad=True)
    (x * 2).sum().backward()
    held = x.grad
    (x * 3).sum().backward()
    assert held[0].item() == 2.0 and x.grad is not held
    assert x.grad[0].item() == 5.0
    array = x.grad.numpy()  # the array alone, or a view of it, is enough to keep it
    view = x.grad[0:1]
    (x * 1).sum().backward()
    assert array[0] == 5.0 and array[-1] == 5.0 and view.tolist() == [5.0]
    np.testing.assert_array_equal(x.grad.numpy(), np.full(_BIG, 6.0))


def test_accumulation_never_mutates_a_grad_the_user_set():
    x = oplib.tensor(np.ones(_BIG), requires_grad=True)
    mine = oplib.tensor(np.full(_BIG, 10.0))
    x.grad = mine
    del mine  # even unreferenced elsewhere: the engine did not make it
    data = x.grad.numpy()
    (x * 2).sum().backward()
    assert data[0] == 10.0 and x.grad[0].item() == 12.0


def test_accumulation_with_create_graph_stays_out_of_place():
    x = oplib.tensor(np.arange(_BIG, dtype=np.float64), requires_grad=True)
    (x * x).sum().backward(create_graph=True)
    first = x.grad
    assert first.grad_fn is not None
    (x * x).sum().backward(create_graph=True)
    assert first[1].item() == 2.0 and x.grad[1].item() == 4.0
    assert x.grad.grad_fn is not None


def test_backward_frees_each_saved_tensor_once_its_node_has_run(ns):
    """Peak memory of a chain: the values a node saved are gone before the node after it
    (in backward order) runs, not at the end of the pass."""
    alive: list[list[bool]] = []
    arrays: list[weakref.ref] = []

    @oplib.custom_op(f"{ns}::double", mutates_args=(), device_types="cpu")
    def double(x: oplib.Tensor) -> oplib.Tensor:
        out = np.multiply(x, 2.0)
        arrays.append(weakref.ref(out))
        return out

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        alive.append([r() is not None for r in arrays])
        return g * 2.0 + out * 0.0

    double.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor(np.ones(3), requires_grad=True)
    y = x
    for _ in range(4):
        y = double(y)
    loss = y.sum()
    del y
    loss.backward()
    # node k (backward order 3 - k) holds its own output; those of later nodes are freed
    assert alive == [
        [True, True, True, True],
        [True, True, True, False],
        [True, True, False, False],
        [True, False, False, False],
    ]
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 16.0))


def test_non_scalar_output_without_gradient_raises():
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match="grad can be implicitly created only for scalar outputs"
    ):
        (x * 2).backward()


def test_backward_on_tensor_without_grad_raises():
    x = oplib.tensor([1.0])
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        (x * 2).backward()


def test_second_backward_through_freed_graph_raises_and_retain_graph_allows_it(ns):
    numpy_sin = make_sin(ns)
    x = oplib.tensor([0.5], requires_grad=True)
    y = numpy_sin(x)
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.item() == pytest.approx(2 * np.cos(0.5))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_grad_returns_gradients_without_touching_dot_grad():
    x = oplib.tensor([3.0], requires_grad=True)
    w = oplib.tensor([2.0], requires_grad=True)
    y = x * w
    gx, gw = grad(y, [x, w])
    assert gx.tolist() == [2.0] and gw.tolist() == [3.0]
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad


def test_grad_of_an_intermediate_tensor():
    x = oplib.tensor([3.0], requires_grad=True)
    h = x * x
    y = h * 5
    (gh,) = grad(y, h)
    assert gh.tolist() == [5.0]


def test_grad_unused_input():
    x = oplib.tensor([1.0], requires_grad=True)
    z = oplib.tensor([1.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        grad(y, [x, z], retain_graph=True)
    gx, gz = grad(y, [x, z], allow_unused=True)
    assert gx.tolist() == [2.0] and gz is None


def test_create_graph_gives_higher_order_gradients_through_custom_ops(ns):
    numpy_sin = make_sin(ns)
    x = oplib.tensor([0.7], dtype=np.float64, requires_grad=True)
    (g,) = grad(numpy_sin(x), x, create_graph=True)
    assert g.requires_grad
    (gg,) = grad(g, x)
    assert gg.item() == pytest.approx(-np.sin(0.7))


def test_chain_of_100000_ops_works():
    x = oplib.tensor([1.0], dtype=np.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = OPS.mul.Scalar(y, 1.0)
    y.backward()
    assert x.grad.item() == 1.0
    del y
    gc.collect()


def test_no_grad_records_nothing_and_is_thread_local():
    x = oplib.tensor([1.0], requires_grad=True)
    with oplib.no_grad():
        assert not (x * 2).requires_grad
        seen = []
        th = threading.Thread(target=lambda: seen.append((x * 2).requires_grad))
        th.start()
        th.join()
    assert seen == [True]

    @oplib.no_grad()
    def f():
        return x * 2

    assert not f().requires_grad
    with oplib.no_grad(), oplib.enable_grad():
        assert (x * 2).requires_grad


def test_detach_and_requires_grad_():
    x = oplib.tensor([1.0]).requires_grad_()
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    with pytest.raises(RuntimeError, match="only tensors of floating point"):
        oplib.tensor([1]).requires_grad_()


def test_integer_outputs_do_not_require_grad(ns):
    @oplib.custom_op(f"{ns}::count", mutates_args=(), device_types="cpu")
    def count(x: oplib.Tensor) -> oplib.Tensor:
        return np.asarray((x > 0).sum())

    count.register_autograd(lambda ctx, g: None)
    out = count(oplib.tensor([1.0, -1.0], requires_grad=True))
    assert out.item() == 1 and not out.requires_grad


# -- ctx ---------------------------------------------------------------------------------
def test_ctx_needs_input_grad_and_attributes(ns):
    seen = {}

    @oplib.custom_op(f"{ns}::scale", mutates_args=(), device_types="cpu")
    def scale(x: oplib.Tensor, w: oplib.Tensor, k: float) -> oplib.Tensor:
        return x * w * k

    def setup_context(ctx, inputs, output):
        x, w, k = inputs
        ctx.k = k
        ctx.save_for_backward(x, w)

    def backward(ctx, g):
        seen["needs"] = ctx.needs_input_grad
        x, w = ctx.saved_tensors
        return (
            g * w * ctx.k if ctx.needs_input_grad[0] else None,
            g * x * ctx.k if ctx.needs_input_grad[1] else None,
            None,
        )

    scale.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor([2.0], requires_grad=True)
    w = oplib.tensor([3.0])
    scale(x, w, 0.5).backward()
    assert seen["needs"] == (True, False, False)
    assert x.grad.tolist() == [1.5]


def test_saving_the_output_and_multiple_outputs_with_non_differentiable_one(ns):
    @oplib.custom_op(f"{ns}::exp_and_sign", mutates_args=(), device_types="cpu")
    def exp_and_sign(x: oplib.Tensor) -> tuple[oplib.Tensor, oplib.Tensor]:
        return np.exp(x), np.sign(x)

    grads_seen = []

    def setup_context(ctx, inputs, output):
        e, s = output
        ctx.save_for_backward(e)
        ctx.mark_non_differentiable(s)

    def backward(ctx, ge, gs):
        grads_seen.append(gs.tolist())
        (e,) = ctx.saved_tensors
        return ge * e

    exp_and_sign.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor([0.0, 1.0], dtype=np.float64, requires_grad=True)
    e, s = exp_and_sign(x)
    assert e.requires_grad and not s.requires_grad
    e.sum().backward()
    assert np.allclose(x.grad.numpy(), np.exp([0.0, 1.0]))
    assert grads_seen == [[0.0, 0.0]]  # materialized zeros for the output without gradient


def test_set_materialize_grads_false_gives_none(ns):
    @oplib.custom_op(f"{ns}::two", mutates_args=(), device_types="cpu")
    def two(x: oplib.Tensor) -> tuple[oplib.Tensor, oplib.Tensor]:
        return x * 2, x * 3

    seen = []

    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)

    def backward(ctx, g0, g1):
        seen.append((g0 is None, g1 is None))
        return g1 * 3

    two.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor([1.0], requires_grad=True)
    _, b = two(x)
    b.backward()
    assert seen == [(True, False)] and x.grad.tolist() == [3.0]


def test_save_for_backward_rejects_non_tensors(ns):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x.copy()

    f.register_autograd(lambda ctx, g: g, setup_context=lambda ctx, i, o: ctx.save_for_backward(3))
    with pytest.raises(TypeError, match="save_for_backward can only save tensors"):
        f(oplib.tensor([1.0], requires_grad=True))


def test_keyword_only_inputs_form_of_setup_context(ns):
    @oplib.custom_op(f"{ns}::scaled", mutates_args=(), device_types="cpu")
    def scaled(x: oplib.Tensor, *, alpha: float = 2.0) -> oplib.Tensor:
        return x * alpha

    seen = {}

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        seen.update(keyword_only_inputs)
        ctx.alpha = keyword_only_inputs["alpha"]

    scaled.register_autograd(lambda ctx, g: g * ctx.alpha, setup_context=setup_context)
    x = oplib.tensor([1.0], requires_grad=True)
    scaled(x).backward()
    assert seen == {"alpha": 2.0}  # the default was filled in
    assert x.grad.tolist() == [2.0]


def test_setup_context_without_keyword_only_inputs_is_refused(ns):
    @oplib.custom_op(f"{ns}::scaled", mutates_args=(), device_types="cpu")
    def scaled(x: oplib.Tensor, *, alpha: float = 2.0) -> oplib.Tensor:
        return x * alpha

    with pytest.raises(ValueError, match="keyword_only_inputs"):
        scaled.register_autograd(lambda ctx, g: g, setup_context=lambda ctx, inputs, output: None)


def test_tensor_list_input(ns):
    @oplib.custom_op(f"{ns}::total", mutates_args=(), device_types="cpu")
    def total(xs: list[oplib.Tensor]) -> oplib.Tensor:
        return sum(xs[1:], xs[0].copy())

    total.register_autograd(lambda ctx, g: [g, g * 2])
    a = oplib.tensor([1.0], requires_grad=True)
    b = oplib.tensor([1.0], requires_grad=True)
    total([a, b]).backward()
    assert a.grad.tolist() == [1.0] and b.grad.tolist() == [2.0]


# -- validation of what backward returns ------------------------------------------------------
def test_wrong_number_of_gradients_names_op_and_location(ns):
    @oplib.custom_op(f"{ns}::mul2", mutates_args=(), device_types="cpu")
    def mul2(x: oplib.Tensor, y: oplib.Tensor) -> oplib.Tensor:
        return x * y

    def backward(ctx, g):
        return g

    mul2.register_autograd(backward)
    out = mul2(oplib.tensor([1.0], requires_grad=True), oplib.tensor([1.0]))
    line = backward.__code__.co_firstlineno
    with pytest.raises(RuntimeError) as info:
        out.backward()
    msg = str(info.value)
    assert f"{ns}::mul2" in msg and f"test_autograd.py:{line}" in msg
    assert "return 2 gradient(s), one per input (x, y), but got 1" in msg


def test_gradient_of_wrong_type_is_rejected(ns):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x.copy()

    f.register_autograd(lambda ctx, g: np.ones(1))
    with pytest.raises(
        RuntimeError, match="got an object of type ndarray as the gradient for input 'x'"
    ):
        f(oplib.tensor([1.0], requires_grad=True)).backward()


def test_gradient_for_a_non_tensor_input_must_be_none(ns):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor, n: int) -> oplib.Tensor:
        return x * n

    f.register_autograd(lambda ctx, g: (g, g))
    with pytest.raises(RuntimeError, match="expected None because input 'n' is not a Tensor"):
        f(oplib.tensor([1.0], requires_grad=True), 2).backward()


def test_gradient_of_wrong_shape_is_rejected(ns):
    @oplib.custom_op(f"{ns}::f", mutates_args=(), device_types="cpu")
    def f(x: oplib.Tensor) -> oplib.Tensor:
        return x.copy()

    f.register_autograd(lambda ctx, g: oplib.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(
        RuntimeError,
        match=r"invalid gradient for input 'x': got shape \(3,\) but expected shape \(2,\)",
    ):
        f(oplib.tensor([1.0, 2.0], requires_grad=True)).sum().backward()


# -- registration rules -----------------------------------------------------------------------
def test_op_without_formula_raises_but_runs_under_no_grad(ns):
    @oplib.custom_op(f"{ns}::plain", mutates_args=(), device_types="cpu")
    def plain(x: oplib.Tensor) -> oplib.Tensor:
        return x + 1

    x = oplib.tensor([1.0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match=f"Autograd has not been implemented for operator {ns}::plain"
    ):
        plain(x)
    with oplib.no_grad():
        assert plain(x).tolist() == [2.0]
    assert plain(x.detach()).tolist() == [2.0]


def test_implicit_composite_gets_gradients_from_its_parts():
    with _scoped_library("agcomp", "DEF") as lib:
        lib.define("square(Tensor x) -> Tensor")
        lib.impl("square", lambda x: x * x, "CompositeImplicitAutograd")
        x = oplib.tensor([3.0], requires_grad=True)
        oplib.ops.agcomp.square(x).backward()
        assert x.grad.tolist() == [6.0]


def test_register_autograd_by_string_and_lifetime_tied_to_library():
    with _scoped_library("agstr", "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        x = oplib.tensor([1.0], requires_grad=True)
        with _scoped_library("agstr", "IMPL") as impl_lib:
            oplib.register_autograd("agstr::twice", lambda ctx, g: g * 2, lib=impl_lib)
            oplib.ops.agstr.twice(x).backward()
            assert x.grad.tolist() == [2.0]
        with pytest.raises(RuntimeError, match="Autograd has not been implemented"):
            oplib.ops.agstr.twice(x)


def test_register_autograd_with_opoverload(ns):
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        op = getattr(oplib.ops, ns).twice.default
        oplib.register_autograd(op, lambda ctx, g: g * 2, lib=lib)
        x = oplib.tensor([1.0], requires_grad=True)
        op(x).backward()
        assert x.grad.tolist() == [2.0]


@pytest.mark.parametrize(
    "schema",
    ["(Tensor(a!) x) -> Tensor(a!)", "(Tensor(a) x) -> Tensor(a)", "(Tensor(a!) x) -> ()"],
)
def test_mutating_or_aliasing_ops_are_refused(ns, schema):
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define(f"f{schema}")
        with pytest.raises(
            RuntimeError,
            match=f"Cannot register autograd formula for non-functional operator {ns}::f",
        ):
            oplib.register_autograd(f"{ns}::f", lambda ctx, g: g, lib=lib)


def test_kwarg_only_tensor_inputs_are_refused(ns):
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("f(Tensor x, *, Tensor y) -> Tensor")
        with pytest.raises(NotImplementedError, match="kwarg-only Tensor arguments"):
            oplib.register_autograd(f"{ns}::f", lambda ctx, g: g, lib=lib)


def test_second_formula_conflicts_naming_the_first(ns):
    numpy_sin = make_sin(ns)
    with pytest.raises(
        oplib.RegistrationError,
        match=r"already has an autograd formula registered at .*test_autograd.py",
    ):
        numpy_sin.register_autograd(lambda ctx, g: g)


def test_unknown_op_and_bad_backward():
    with pytest.raises(oplib.RegistrationError, match="does not exist"):
        oplib.register_autograd("nosuchns::op", lambda ctx, g: g)
    with pytest.raises(TypeError, match="expected backward to be a function"):
        oplib.register_autograd("oplib::neg", 3)


def test_plugin_registrar_registers_formulas(ns):
    class Plugin:
        @oplib.hookimpl
        def oplib_define(self, registrar):
            registrar.define(f"{ns}::cube(Tensor x) -> Tensor")

        @oplib.hookimpl
        def oplib_impl(self, registrar):
            registrar.impl(f"{ns}::cube", "cpu", lambda x: x**3)

        @oplib.hookimpl
        def oplib_register_autograd(self, registrar):
            registrar.register_autograd(
                f"{ns}::cube",
                lambda ctx, g: g * 3 * ctx.x * ctx.x,
                setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]),
            )

    plugin = Plugin()
    record = oplib.plugins.register(plugin, name=f"ag-{ns}")
    try:
        assert record.status == "loaded", record.error
        x = oplib.tensor([2.0], requires_grad=True)
        getattr(oplib.ops, ns).cube(x).backward()
        assert x.grad.tolist() == [12.0]
        k = oplib.lookup(f"{ns}::cube").kernel("Autograd")
        assert k is not None
        assert k.origin.plugin == f"ag-{ns}"
    finally:
        oplib.plugins.unregister(f"ag-{ns}")
