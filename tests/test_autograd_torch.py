"""Autograd as torch users write it (issue 13): mark_non_differentiable on any output, the
count of gradients and needs_input_grad for defaulted arguments, gradgradcheck, and
oplib.autograd.Function (forward/setup_context/backward, apply, mark_dirty,
set_materialize_grads, once_differentiable) over mutating custom ops. Messages quoted in
these tests are torch 2.x's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import (
    Function,
    GradcheckError,
    grad,
    gradcheck,
    gradgradcheck,
    once_differentiable,
)

OPS = oplib.ops.oplib


def t(*values, rg=True):
    return oplib.tensor(np.array(values, dtype=np.float64), requires_grad=rg)


# -- mark_non_differentiable ----------------------------------------------------------------
def make_sort(ns, mark):
    """torch's numpy_sort pattern: values and integer indices."""

    @oplib.custom_op(f"{ns}::sort", mutates_args=(), device_types="cpu")
    def sort(x: oplib.Tensor) -> tuple[oplib.Tensor, oplib.Tensor]:
        idx = np.argsort(x)
        return x[idx], idx

    seen = {}

    def setup_context(ctx, inputs, output):
        values, idx = output
        ctx.mark_non_differentiable(*mark(inputs[0], values, idx))
        ctx.save_for_backward(idx)

    def backward(ctx, gv, gi):
        seen["gi"] = gi
        (idx,) = ctx.saved_tensors
        g = np.zeros(gv.shape)
        g[idx.numpy()] = gv.detach().numpy()
        return oplib.tensor(g)

    sort.register_autograd(backward, setup_context=setup_context)
    return sort, seen


def test_mark_non_differentiable_accepts_integer_outputs(ns):
    sort, seen = make_sort(ns, lambda x, v, i: (i,))
    x = t(3.0, 1.0, 2.0)
    values, idx = sort(x)
    assert values.requires_grad and not idx.requires_grad
    (values * t(1.0, 2.0, 3.0, rg=False)).sum().backward()
    assert x.grad.tolist() == [3.0, 1.0, 2.0]
    # as torch: the integer output's gradient is materialized as zeros of its dtype
    assert seen["gi"].tolist() == [0, 0, 0] and seen["gi"].dtype == np.int64


def test_mark_non_differentiable_on_every_output_and_on_an_input(ns):
    sort, _ = make_sort(ns, lambda x, v, i: (v, i))
    values, idx = sort(t(3.0, 1.0))
    assert not values.requires_grad and not idx.requires_grad


def test_mark_non_differentiable_ignores_tensors_that_are_not_outputs(ns):
    sort, _ = make_sort(ns, lambda x, v, i: (x,))
    x = t(3.0, 1.0)
    values, _ = sort(x)
    assert values.requires_grad and x.requires_grad
    values.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("bad", [3, None])
def test_mark_non_differentiable_refuses_non_tensors_as_torch(ns, bad):
    sort, _ = make_sort(ns, lambda x, v, i: (bad,))
    with pytest.raises(
        RuntimeError, match=r"^mark_non_differentiable only accepts variable arguments, but got"
    ):
        sort(t(1.0))


# -- the count of gradients and needs_input_grad ----------------------------------------------
def make_scaled(ns, ret):
    @oplib.custom_op(f"{ns}::scaled", mutates_args=(), device_types="cpu")
    def scaled(x: oplib.Tensor, w: oplib.Tensor, n: int = 1, a: float = 2.0) -> oplib.Tensor:
        return x * w * n * a

    seen = {}

    def setup_context(ctx, inputs, output):
        seen["inputs"] = inputs
        ctx.n, ctx.a = inputs[2], inputs[3]

    def backward(ctx, g):
        seen["needs"] = ctx.needs_input_grad
        return ret(g * ctx.n * ctx.a)

    scaled.register_autograd(backward, setup_context=setup_context)
    return scaled, seen


@pytest.mark.parametrize(
    ("call", "ret", "needs"),
    [
        # torch's dispatcher drops trailing arguments equal to their default
        (lambda f, x, w: f(x, w), lambda g: (g, None), (True, False)),
        (lambda f, x, w: f(x, w, 1), lambda g: (g, None), (True, False)),
        (lambda f, x, w: f(x, w, a=2.0), lambda g: (g, None), (True, False)),
        (lambda f, x, w: f(x, w, 3), lambda g: (g, None, None), (True, False, False)),
        (lambda f, x, w: f(x, w, 1, 3.0), lambda g: (g, None, None, None), (True,) + (False,) * 3),
        # more than passed is fine when the extra ones are None
        (lambda f, x, w: f(x, w), lambda g: (g, None, None, None), (True, False)),
        (lambda f, x, w: f(x, w), lambda g: (g, None, None, None, None), (True, False)),
    ],
)
def test_backward_returns_one_gradient_per_input_passed(ns, call, ret, needs):
    scaled, seen = make_scaled(ns, ret)
    x, w = t(1.0, 2.0), t(3.0, 4.0, rg=False)
    call(scaled, x, w).sum().backward()
    assert seen["needs"] == needs
    assert len(seen["inputs"]) == 4  # setup_context still sees every input, defaults filled
    assert x.grad.tolist() == [seen["inputs"][2] * seen["inputs"][3]] * 2


@pytest.mark.parametrize(
    ("call", "ret", "expected", "got"),
    [
        (lambda f, x, w: f(x, w), lambda g: g, 2, 1),
        (lambda f, x, w: f(x, w, 3), lambda g: (g, None), 3, 2),
        (lambda f, x, w: f(x, w), lambda g: (g, None, None, None, g), 2, 5),
    ],
)
def test_too_few_gradients_is_torchs_error(ns, call, ret, expected, got):
    scaled, _ = make_scaled(ns, ret)
    with pytest.raises(RuntimeError) as info:
        call(scaled, t(1.0), t(1.0, rg=False)).sum().backward()
    msg = str(info.value)
    assert f"{ns}::scaled" in msg and "test_autograd_torch.py:" in msg
    assert f"return {expected} gradient(s)" in msg and f"but got {got}" in msg
    assert "returned an incorrect number of gradients" in msg


def test_needs_input_grad_with_an_optional_tensor_left_out(ns):
    @oplib.custom_op(f"{ns}::lin", mutates_args=(), device_types="cpu")
    def lin(x: oplib.Tensor, b: oplib.Tensor | None = None) -> oplib.Tensor:
        return x * 2 if b is None else x * 2 + b

    seen = []

    def backward(ctx, g):
        seen.append(ctx.needs_input_grad)
        return (g * 2,) if len(ctx.needs_input_grad) == 1 else (g * 2, g)

    lin.register_autograd(backward)
    x, b = t(1.0), t(5.0)
    lin(x).backward()
    lin(x, b).backward()
    assert seen == [(True,), (True, True)]
    assert x.grad.tolist() == [4.0] and b.grad.tolist() == [1.0]


def test_needs_input_grad_of_a_tensor_list_input_is_a_list(ns):
    @oplib.custom_op(f"{ns}::cat2", mutates_args=(), device_types="cpu")
    def cat2(xs: list[oplib.Tensor], w: oplib.Tensor, n: int = 0) -> oplib.Tensor:
        return np.concatenate(xs) * w.sum()

    seen = []

    def backward(ctx, g):
        seen.append(ctx.needs_input_grad)
        return [None] * ctx.k, None

    def setup_context(ctx, inputs, output):
        ctx.k = len(inputs[0])

    cat2.register_autograd(backward, setup_context=setup_context)
    a, b = t(1.0), t(1.0, rg=False)
    cat2([a, b], t(1.0, rg=False)).sum().backward()
    cat2([b, b], t(1.0)).sum().backward()
    assert seen == [([True, False], False), ([False, False], True)]  # torch's values


# -- gradgradcheck ----------------------------------------------------------------------------
def test_gradgradcheck_passes_for_core_ops_and_differentiable_formulas(ns):
    assert gradgradcheck(lambda a, b: OPS.sin(a) * OPS.exp(b), (t(0.1, 0.5), t(0.3, -0.2)))
    assert gradgradcheck(lambda a: OPS.matmul(a, a), (t(1.0, 2.0, 3.0),))

    @oplib.custom_op(f"{ns}::cube", mutates_args=(), device_types="cpu")
    def cube(x: oplib.Tensor) -> oplib.Tensor:
        return x**3

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x

    cube.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor([0.5, -1.5], dtype=np.float32, requires_grad=True)
    assert gradgradcheck(cube, (x,))
    assert gradgradcheck(cube, (x,), (t(1.0, -2.0),))


def test_gradgradcheck_catches_a_wrong_second_derivative(ns):
    @oplib.custom_op(f"{ns}::square", mutates_args=(), device_types="cpu")
    def square(x: oplib.Tensor) -> oplib.Tensor:
        return x * x

    def square_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def square_backward(ctx, g):  # wrong: should be 2 * g * x
        (x,) = ctx.saved_tensors
        return g * x

    square.register_autograd(square_backward, setup_context=square_setup)

    @oplib.custom_op(f"{ns}::cube", mutates_args=(), device_types="cpu")
    def cube(x: oplib.Tensor) -> oplib.Tensor:
        return x**3

    def cube_backward(ctx, g):  # right values, through the wrong formula of square
        (x,) = ctx.saved_tensors
        return g * 3 * square(x)

    cube.register_autograd(cube_backward, setup_context=square_setup)
    x = t(0.5, -1.5)
    assert gradcheck(cube, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(cube, (x,))
    assert gradgradcheck(cube, (x,), raise_exception=False) is False


def test_gradgradcheck_of_a_formula_written_in_numpy_fails_as_torch(ns):
    @oplib.custom_op(f"{ns}::cube", mutates_args=(), device_types="cpu")
    def cube(x: oplib.Tensor) -> oplib.Tensor:
        return x**3

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return oplib.tensor(g.detach().numpy() * 3 * x.detach().numpy() ** 2)

    cube.register_autograd(backward, setup_context=setup_context)
    x = t(0.5, 2.0)
    assert gradcheck(cube, (x,))
    with pytest.raises(
        GradcheckError, match=r"^Numerical gradient for function expected to be zero"
    ):
        gradgradcheck(cube, (x,))


def test_gradgradcheck_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="requires grad"):
        gradgradcheck(OPS.sin.default, (t(1.0, rg=False),))


# -- autograd.Function ------------------------------------------------------------------------
class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        assert not oplib.is_grad_enabled()
        y = OPS.exp(x)
        ctx.save_for_backward(y)  # an output, saved during forward
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class Scale(Function):
    """setup_context style with a defaulted argument."""

    @staticmethod
    def forward(x, k=2.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]
        ctx.inputs = inputs

    @staticmethod
    def backward(ctx, g):
        ctx.needs = ctx.needs_input_grad
        return g * ctx.k, None


def test_function_forward_with_ctx_and_double_backward():
    x = t(0.5, 1.0)
    y = Exp.apply(x)
    assert y.requires_grad and y.grad_fn.name() == "ExpBackward"
    assert type(y.grad_fn) is Exp._backward_cls and type(y.grad_fn).__name__ == "ExpBackward"
    (g,) = grad(y.sum(), x, create_graph=True)
    assert np.allclose(g.detach().numpy(), np.exp([0.5, 1.0]))
    g.sum().backward()
    assert np.allclose(x.grad.numpy(), np.exp([0.5, 1.0]))
    assert gradcheck(Exp.apply, (x,)) and gradgradcheck(Exp.apply, (x,))


def test_function_setup_context_binds_defaults_and_keywords():
    x = t(1.0, 2.0)
    Scale.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    x.grad = None
    out = Scale.apply(x, k=3.0)
    ctx = out.grad_fn
    assert ctx.inputs == (x, 3.0)
    out.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0] and ctx.needs == (True, False)


def test_function_tensors_given_by_keyword_are_inputs_after_the_positional_ones():
    class Lin(Function):
        @staticmethod
        def forward(ctx, x, y=None):
            return x * 2 if y is None else x * 2 + y * 3

        @staticmethod
        def backward(ctx, g):
            ctx.needs = ctx.needs_input_grad
            return (g * 2, g * 3) if len(ctx.needs) == 2 else g * 2

    a, b = t(1.0), t(1.0)
    out = Lin.apply(a, y=b)
    out.backward()
    assert out.grad_fn.needs == (True, True)
    assert a.grad.tolist() == [2.0] and b.grad.tolist() == [3.0]
    out = Lin.apply(a)
    out.backward()
    assert out.grad_fn.needs == (True,) and a.grad.tolist() == [4.0]


def test_function_without_grad_records_nothing():
    y = Exp.apply(t(1.0, rg=False))
    assert not y.requires_grad and y.grad_fn is None
    with oplib.no_grad():
        y = Exp.apply(t(1.0))
    assert not y.requires_grad and y.grad_fn is None


def test_function_gradient_count_and_type_errors_are_torchs():
    class Few(Function):
        @staticmethod
        def forward(ctx, x, n):
            return x * n

        @staticmethod
        def backward(ctx, g):
            return g

    class NonVar(Few):
        @staticmethod
        def backward(ctx, g):
            return g, g

    class Extra(Few):
        @staticmethod
        def backward(ctx, g):
            return g, None, None

    class BadType(Few):
        @staticmethod
        def backward(ctx, g):
            return 3, None

    x = t(1.0, 2.0)
    with pytest.raises(
        RuntimeError,
        match=r"^function FewBackward returned an incorrect number of gradients \(expected 2, "
        r"got 1\)$",
    ):
        Few.apply(x, 2).sum().backward()
    with pytest.raises(
        RuntimeError,
        match=r"^function NonVarBackward returned a gradient different than None at position 2, "
        r"but the corresponding forward input was not a Variable$",
    ):
        NonVar.apply(x, 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"^expected Variable or None \(got int\)$"):
        BadType.apply(x, 2).sum().backward()
    Extra.apply(x, 2).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_function_without_backward_or_forward():
    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

    with pytest.raises(NotImplementedError, match="You must implement either the backward"):
        NoBackward.apply(t(1.0)).sum().backward()

    class NoForward(Function):
        pass

    with pytest.raises(NotImplementedError, match="You must implement the forward function"):
        NoForward.apply(t(1.0))
    with pytest.raises(RuntimeError, match="should not be instantiated"):
        NoBackward()


def test_function_non_tensor_and_integer_outputs_and_materialized_grads():
    seen = []

    class Multi(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, 5, OPS.astype(x, np.int64)

        @staticmethod
        def backward(ctx, g, g_int, g_idx):
            seen.append((g_int, g_idx))
            return g * 2

    x = t(1.0, 2.0)
    y, five, idx = Multi.apply(x)
    assert five == 5 and not idx.requires_grad and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    assert seen[0][0] is None and seen[0][1].tolist() == [0, 0]


@pytest.mark.parametrize("materialize", [True, False])
def test_function_set_materialize_grads(materialize):
    seen = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append(g2)
            return g1 * 2

    x = t(1.0, 2.0)
    Two.apply(x)[0].sum().backward()
    assert (seen[0] is None) is (not materialize)
    if materialize:
        assert seen[0].tolist() == [0.0, 0.0]


def test_function_mark_non_differentiable_in_forward():
    class ND(Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            ctx.mark_non_differentiable(y)
            return y, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            return g2 * 3

    x = t(1.0)
    a, b = ND.apply(x)
    assert not a.requires_grad and b.requires_grad
    b.backward()
    assert x.grad.tolist() == [3.0]


def test_function_returning_an_input_gives_a_new_tensor():
    class Ident(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = t(1.0, 2.0)
    y = Ident.apply(x)
    assert y is not x and y.grad_fn.name() == "IdentBackward" and x.grad_fn is None
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    plain = t(1.0, rg=False)
    y = Ident.apply(plain)
    assert y is not plain and np.shares_memory(y.numpy(), plain.numpy())
    with oplib.no_grad():
        y = Ident.apply(x)
    assert y is not x and not y.requires_grad


class Double_(Function):
    """In place: doubles x through the mutating core op copy_ and marks it dirty."""

    @staticmethod
    def forward(ctx, x):
        OPS.copy_(x, x * 2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_function_mark_dirty_rebases_the_input():
    a = t(1.0, 2.0)
    b = a * 1
    y = Double_.apply(b)
    assert y is b and b.grad_fn.name() == "Double_Backward"
    assert b.tolist() == [2.0, 4.0]
    (y * y).sum().backward()
    assert a.grad.tolist() == [8.0, 16.0]  # d(2a)^2/da = 8a


def test_function_mark_dirty_errors_and_no_grad():
    with pytest.raises(
        RuntimeError,
        match=r"^a leaf Variable that requires grad has been used in an in-place operation",
    ):
        Double_.apply(t(1.0))
    plain = t(1.0, rg=False)
    assert Double_.apply(plain) is plain and plain.tolist() == [2.0]

    class NotReturned(Function):
        @staticmethod
        def forward(ctx, x, z):
            OPS.copy_(z, z * 2)
            ctx.mark_dirty(z)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    with pytest.raises(
        RuntimeError, match=r"^Some elements marked as dirty during the forward method were not"
    ):
        NotReturned.apply(t(1.0), t(1.0, rg=False))


def test_function_over_mutating_custom_ops(ns):
    """flash-attention's pattern: forward and backward are mutating custom ops writing into
    buffers the Function allocates."""

    @oplib.custom_op(f"{ns}::fwd", mutates_args=("out",), device_types="cpu")
    def fwd(x: oplib.Tensor, w: oplib.Tensor, out: oplib.Tensor) -> None:
        np.multiply(x, np.exp(w), out=out)

    @oplib.custom_op(f"{ns}::bwd", mutates_args=("dx", "dw"), device_types="cpu")
    def bwd(
        g: oplib.Tensor, x: oplib.Tensor, w: oplib.Tensor, dx: oplib.Tensor, dw: oplib.Tensor
    ) -> None:
        np.multiply(g, np.exp(w), out=dx)
        np.multiply(g * x, np.exp(w), out=dw)

    class Attn(Function):
        @staticmethod
        def forward(ctx, x, w):
            out = oplib.empty_like(x)
            fwd(x, w, out)
            ctx.save_for_backward(x, w)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            dx, dw = oplib.empty_like(x), oplib.empty_like(w)
            bwd(g, x, w, dx, dw)
            return dx, dw

    x, w = t(1.0, 2.0), t(0.5, -0.5)
    out = Attn.apply(x, w)
    assert np.allclose(out.detach().numpy(), [np.exp(0.5), 2 * np.exp(-0.5)])
    out.sum().backward()
    assert np.allclose(x.grad.numpy(), np.exp([0.5, -0.5]))
    assert np.allclose(w.grad.numpy(), [np.exp(0.5), 2 * np.exp(-0.5)])
    assert gradcheck(Attn.apply, (x, w))


def test_once_differentiable_refuses_a_second_differentiation():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            assert not oplib.is_grad_enabled()
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = t(1.0, 2.0)
    (g,) = grad(Sq.apply(x).sum(), x)
    assert g.tolist() == [2.0, 4.0]
    go = t(1.0, 1.0)
    (g,) = grad(Sq.apply(x), x, go, create_graph=True)
    assert g.tolist() == [2.0, 4.0] and g.requires_grad
    with pytest.raises(
        RuntimeError,
        match=r"^trying to differentiate twice a function that was marked with "
        r"@once_differentiable$",
    ):
        g.sum().backward()


# -- grad mode below the Autograd kernel ------------------------------------------------------
@pytest.mark.parametrize("form", ["one tensor", "tensor and scalar", "keyword"])
def test_a_custom_ops_kernel_sees_grad_mode_off_on_every_call(form: str) -> None:
    """As torch's custom_op: the kernel under a registered formula runs with grad mode off,
    on the first call (the full path) and on the cached ones (call_below_autograd) alike."""
    seen: list[bool] = []
    name = {"one tensor": "a", "tensor and scalar": "b", "keyword": "c"}[form]

    @oplib.custom_op(f"gradmode::{name}", mutates_args=())
    def f(x: oplib.Tensor, k: float = 2.0, *, s: float = 1.0) -> oplib.Tensor:
        seen.append(oplib.is_grad_enabled())
        return np.asarray(x) * k * s

    f.register_autograd(lambda ctx, g: (g * 2.0, None))
    x = oplib.tensor(np.ones(2), requires_grad=True)
    for _ in range(3):
        y = (
            f(x)
            if form == "one tensor"
            else f(x, 3.0)
            if form == "tensor and scalar"
            else f(x, s=2.0)
        )
        assert y.requires_grad
    assert seen == [False, False, False]
    assert oplib.is_grad_enabled()


def test_keeps_marks_a_setup_that_saves_one_output_or_input() -> None:
    from oplib_core.autograd._registration import KEEPS, keeps

    @keeps("output")
    def setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(output)

    assert getattr(setup, KEEPS) == "output"
    with pytest.raises(ValueError, match=r"keeps\(\): 'output', 'input' or 'scalar', got 'both'"):
        keeps("both")


def test_a_scalar_op_keeps_its_scalar_without_calling_its_setup() -> None:
    """``t * s``: the Autograd kernel keeps ``s`` as ``ctx.scalar`` itself (the setup marked
    ``keeps("scalar")``), and the gradient reads it."""
    from oplib_core.autograd._formulas import FORMULAS
    from oplib_core.autograd._registration import KEEPS, formula_of

    setup = FORMULAS["mul.Scalar"][0]
    assert getattr(setup, KEEPS) == "scalar"
    formula = formula_of(oplib.ops.oplib.mul.Scalar)
    assert formula is not None and formula.setup is setup
    calls: list[object] = []
    formula.setup = lambda *a: calls.append(a) or setup(*a)
    x = oplib.tensor(np.array([1.0, 2.0]), requires_grad=True)
    try:
        y = x * 0.25
    finally:
        formula.setup = setup
    assert y.grad_fn.scalar == 0.25
    assert calls == []
    (y / 4.0).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [0.0625, 0.0625])
    # called with its default-free arguments through the general kernel too (keywords)
    z = oplib.ops.oplib.mul.Scalar(x, other=3.0)
    assert z.grad_fn.scalar == 3.0


# -- what the Scalar ops save, and gradients at special values, as torch -----------------------
def test_the_output_of_x_pow_s_and_s_div_x_may_be_written_in_place() -> None:
    """torch saves x alone for ``x ** s`` and ``s / x`` (reciprocal, then mul): their output
    written in place leaves the gradient as it was."""
    data = np.linspace(0.5, 2, 8)
    a = oplib.tensor(data, requires_grad=True)
    y = a**2
    y += 1.0
    y.sum().backward()
    assert a.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), 2 * data)
    b = oplib.tensor(data, requires_grad=True)
    z = 2.0 / (b * 1.0)
    z *= 3.0
    z.sum().backward()
    assert b.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), -6.0 / data**2)


def test_the_output_of_s_pow_x_is_saved_as_torch_saves_it() -> None:
    x = oplib.tensor(np.linspace(0.5, 2, 8), requires_grad=True)
    y = OPS.rpow.Scalar(x * 1.0, 2.0)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_gradients_at_special_values_are_torchs() -> None:
    # torch 2.13: relu passes the gradient at NaN (threshold_backward: zero where out <= 0);
    # 0 ** x has gradient 0 where x >= 0, -inf where x < 0, NaN at NaN
    x = oplib.tensor(np.array([-1.0, 0.0, 2.0, np.nan]), requires_grad=True)
    x.relu().sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.0, 0.0, 1.0, 1.0]
    x = oplib.tensor(np.array([-1.0, 0.0, 2.0, np.nan]), requires_grad=True)
    with np.errstate(all="ignore"):
        OPS.rpow.Scalar(x, 0.0).sum().backward()
    assert x.grad is not None
    g = x.grad.numpy()
    assert g[0] == -np.inf and g[1] == 0 and g[2] == 0 and np.isnan(g[3])


@pytest.mark.fastpath
@pytest.mark.parametrize("method", ["sum", "mean"])
def test_a_recorded_reduction_runs_below_autograd_through_the_fast_path(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``t.sum()`` passes no keyword when ``dtype`` is None, and the Autograd kernel leaves
    keyword-only arguments at their default out of the call below it: after the first
    call, neither plans a call (each used to take the slow path, twice, every time)."""
    from oplib_core._dispatch.overload import OpOverload

    t = oplib.tensor(np.ones((4, 4)), requires_grad=True)
    getattr(t, method)()
    planned: list[str] = []
    plan = OpOverload.plan_call

    def spy(self: OpOverload, args: Any, kwargs: Any) -> Any:
        planned.append(self.name())
        return plan(self, args, kwargs)

    monkeypatch.setattr(OpOverload, "plan_call", spy)
    y = getattr(t, method)()
    assert planned == [] and y.grad_fn is not None
    z = getattr(t, method)(dtype=np.dtype("float32"))  # a dtype given: the full path, kept
    assert z.dtype == np.float32 and planned
