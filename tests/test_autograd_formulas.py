"""Every differentiable core op's formula against finite differences (gradcheck), including
broadcasting, reductions with dim/keepdim, matmul shapes, shape ops, cat/stack, and
higher-order gradients."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._opset import CORE_OPS, OUT_OPS
from oplib_core._registry.registry import AUTOGRAD, REGISTRY
from oplib_core.autograd import GradcheckError, grad, gradcheck
from oplib_core.autograd._formulas import FORMULAS, NON_DIFFERENTIABLE
from oplib_core.autograd._index_formulas import INDEX_FORMULAS
from oplib_core.autograd._inplace import FORMS
from oplib_core.autograd._inplace import FORMULAS as INPLACE_FORMULAS

OPS = oplib.ops.oplib
rng = np.random.default_rng(0)


def t(*shape, low=-1.0, high=1.0, rg=True):
    return oplib.tensor(rng.uniform(low, high, size=shape), dtype=np.float64, requires_grad=rg)


def pos(*shape):
    return t(*shape, low=0.5, high=2.0)


UNARY = [
    ("neg", t),
    ("exp", t),
    ("log", pos),
    ("sin", t),
    ("cos", t),
    ("tanh", t),
    ("sigmoid", t),
    ("relu", t),
    ("abs", t),
    ("sqrt", pos),
]


@pytest.mark.parametrize(("name", "make"), UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, make):
    op = getattr(OPS, name).default
    assert gradcheck(op, (make(2, 3),))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
@pytest.mark.parametrize(("sa", "sb"), [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1))])
def test_binary_broadcasting(name, sa, sb):
    op = getattr(OPS, name).default
    a = pos(*sa) if name == "pow" else t(*sa)
    b = pos(*sb) if name in ("div", "pow") else t(*sb)
    assert gradcheck(op, (a, b))


def test_maximum_ties_split_gradient_evenly():
    a = oplib.tensor([1.0, 2.0], requires_grad=True)
    b = oplib.tensor([1.0, 0.0], requires_grad=True)
    OPS.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 1.0]
    assert b.grad.tolist() == [0.5, 0.0]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "rsub", "rdiv", "rpow"])
def test_scalar_forms(name):
    op = getattr(OPS, name).Scalar
    assert gradcheck(lambda x: op(x, 1.7), (pos(3),))


def test_pow_scalar_zero_exponent_gives_zero_gradient():
    x = oplib.tensor([0.0, 2.0], requires_grad=True)
    OPS.pow.Scalar(x, 0).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]


def test_where_with_broadcast_branches():
    cond = oplib.tensor(np.array([[True, False, True], [False, False, True]]))
    assert gradcheck(lambda a, b: OPS.where(cond, a, b), (t(2, 3), t(3)))


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize(
    ("dim", "keepdim"), [(None, False), ([1], False), ([0, 2], True), ([-1], True)]
)
def test_reductions(name, dim, keepdim):
    op = getattr(OPS, name).default
    assert gradcheck(lambda x: op(x, dim, keepdim), (t(2, 3, 4),))


def test_amax_ties_share_the_gradient():
    x = oplib.tensor([3.0, 1.0, 3.0], requires_grad=True)
    OPS.amax(x).backward()
    assert x.grad.tolist() == [0.5, 0.0, 0.5]


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 2)),
        ((4,), (4,)),
        ((3, 4), (4,)),
        ((4,), (4, 2)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((2, 3, 4), (4,)),
    ],
)
def test_matmul_shapes(sa, sb):
    assert gradcheck(OPS.matmul.default, (t(*sa), t(*sb)))


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: OPS.reshape(x, [3, 2]), (2, 3)),
        (lambda x: OPS.reshape(x, [-1]), (2, 3)),
        (lambda x: OPS.transpose(x, 0, -1), (2, 3, 4)),
        (lambda x: OPS.permute(x, [2, 0, 1]), (2, 3, 4)),
        (lambda x: OPS.permute(x, [-1, 0, 1]), (2, 3, 4)),
        (lambda x: OPS.squeeze(x), (2, 1, 3)),
        (lambda x: OPS.squeeze(x, [1]), (2, 1, 3)),
        (lambda x: OPS.unsqueeze(x, 1), (2, 3)),
        (lambda x: OPS.broadcast_to(x, [4, 2, 3]), (2, 1)),
        (lambda x: OPS.clone(x), (2, 3)),
        (lambda x: OPS.sum(x * x, [0]), (2, 3)),
    ],
)
def test_shape_ops(fn, shape):
    assert gradcheck(fn, (t(*shape),))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    assert gradcheck(lambda a, b: OPS.cat([a, b], dim), (t(2, 3), t(2, 3)))


def test_cat_unequal_sizes_and_an_input_without_grad():
    a, b, c = t(1, 3), t(4, 3, rg=False), t(2, 3)
    assert gradcheck(lambda a, c: OPS.cat([a, b, c]), (a, c))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim):
    assert gradcheck(lambda a, b: OPS.stack([a, b], dim), (t(2, 3), t(2, 3)))


def test_astype_and_to_copy_send_the_gradient_back_in_the_source_dtype():
    x = oplib.tensor([1.0, 2.0], dtype=np.float32, requires_grad=True)
    y = OPS.astype(x, np.dtype("float64"))
    z = x.to(dtype=np.float64)
    (y * 2 + z * 3).sum().backward()
    assert x.grad.dtype == np.float32
    assert x.grad.tolist() == [5.0, 5.0]


def test_to_copy_between_devices_brings_gradient_back(toy_accepting_cpu):
    x = oplib.tensor([1.0, 2.0], requires_grad=True)
    y = x.to("toy")
    assert type(y.native).__name__ == "ToyArray"
    g = oplib.tensor([5.0, 7.0]).to("toy")
    y.backward(g)
    assert x.grad.device.type == "cpu"
    assert x.grad.tolist() == [5.0, 7.0]


def test_comparisons_produce_outputs_that_do_not_require_grad():
    x = t(3)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        out = getattr(OPS, name).Scalar(x, 0.0)
        assert out.requires_grad is False and out.grad_fn is None


def test_every_core_op_is_covered():
    """Each core op has a formula, falls through (comparisons), is a factory (no tensor
    inputs), mutates (an in-place op recorded on its functional form) or writes ``out=``
    (refused, as torch)."""
    for op in CORE_OPS:
        entry = REGISTRY.ops[f"oplib::{op.name}"]
        k = entry.kernel(AUTOGRAD)
        if op.name in NON_DIFFERENTIABLE:
            assert k is not None and k.is_fallthrough, op.name
        elif (
            op.name in FORMULAS
            or op.name in INDEX_FORMULAS
            or op.name in INPLACE_FORMULAS
            or op.name in FORMS
            or op in OUT_OPS
        ):
            assert k is not None and not k.is_fallthrough, op.name
            assert k.origin.plugin == "core-autograd", op.name
        else:
            assert "factory" in str(op.tags), op.name


def test_second_derivative_of_core_ops():
    x = oplib.tensor([0.3, 1.2], dtype=np.float64, requires_grad=True)
    y = (OPS.sin(x) * x).sum()
    (g,) = grad(y, x, create_graph=True)
    (gg,) = grad(g.sum(), x)
    xn = x.detach().numpy()
    assert np.allclose(g.detach().numpy(), np.cos(xn) * xn + np.sin(xn))
    assert np.allclose(gg.numpy(), -np.sin(xn) * xn + 2 * np.cos(xn))


def test_second_derivative_through_matmul_and_broadcasting():
    def f(a, b):
        (ga,) = grad((OPS.matmul(a, b) ** 2).sum(), a, create_graph=True)
        return ga

    assert gradcheck(f, (t(2, 3), t(3)))


def test_gradcheck_catches_a_wrong_formula(ns):
    @oplib.custom_op(f"{ns}::twice", mutates_args=(), device_types="cpu")
    def twice(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    twice.register_autograd(lambda ctx, g: g * 3)
    with pytest.raises(
        GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"
    ) as info:
        gradcheck(twice, (t(2),))
    assert info.value.analytical[0, 0] == pytest.approx(3.0)
    assert info.value.numerical[0, 0] == pytest.approx(2.0)
    assert gradcheck(twice, (t(2),), raise_exception=False) is False
