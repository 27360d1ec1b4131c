"""The engine's scheduling as the speed work left it: dependency counts start at the roots
(a root another root reaches waits for it), and the Scalar ops' formulas hand back
``(gradient, None)`` without a helper call. Values are checked against numpy's
hand-written gradients."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib


def _x() -> oplib.Tensor:
    return oplib.tensor(np.array([0.3, -0.7, 1.1]), requires_grad=True)


def test_backward_from_a_root_that_another_root_reaches():
    x = _x()
    y = x.tanh()
    z = (y * 3.0).sin()  # z reaches y: y's node runs once, after z's gradient arrived
    oplib.autograd.backward([y, z], [oplib.ones_like(y), oplib.ones_like(z)])
    xv = x.detach().numpy()
    t = np.tanh(xv)
    expected = (1 - t * t) * (1 + 3.0 * np.cos(3.0 * t))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_backward_roots_given_later_one_first():
    x = _x()
    y = x.tanh()
    z = y * 2.0
    oplib.autograd.backward([z, y], [oplib.ones_like(z), oplib.ones_like(y)])
    t = np.tanh(x.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), (1 - t * t) * 3.0, rtol=1e-12)


def test_grad_from_a_root_that_another_root_reaches():
    x = _x()
    y = x.exp()
    z = y * y
    (gx,) = oplib.autograd.grad([y, z], [x], [oplib.ones_like(y), oplib.ones_like(z)])
    e = np.exp(x.detach().numpy())
    np.testing.assert_allclose(gx.numpy(), e + 2 * e * e, rtol=1e-12)
    assert x.grad is None


def test_grad_of_an_intermediate_root_that_another_root_reaches():
    x = _x()
    y = x * 2.0
    z = y.sin()
    gy, gx = oplib.autograd.grad([y, z], [y, x], [oplib.ones_like(y), oplib.ones_like(z)])
    yv = 2.0 * x.detach().numpy()
    np.testing.assert_allclose(gy.numpy(), 1 + np.cos(yv), rtol=1e-12)
    np.testing.assert_allclose(gx.numpy(), 2 * (1 + np.cos(yv)), rtol=1e-12)


def test_the_same_root_twice_sums_its_gradients():
    x = _x()
    y = x * 5.0
    oplib.autograd.backward([y, y], [oplib.ones_like(y), oplib.ones_like(y)])
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 10.0, 10.0])


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda x: x * 3.0, lambda xv: np.full_like(xv, 3.0)),
        (lambda x: x / 4.0, lambda xv: np.full_like(xv, 0.25)),
        (lambda x: x + 1.5, lambda xv: np.ones_like(xv)),
        (lambda x: x - 1.5, lambda xv: np.ones_like(xv)),
        (lambda x: 2.0 - x, lambda xv: -np.ones_like(xv)),
        (lambda x: 2.0 / x, lambda xv: -2.0 / xv**2),
        (lambda x: x**3.0, lambda xv: 3.0 * xv**2),
        (lambda x: x**0, lambda xv: np.zeros_like(xv)),
        (lambda x: 2.0**x, lambda xv: 2.0**xv * np.log(2.0)),
    ],
)
def test_scalar_formulas_give_the_tensors_gradient_and_none_for_the_scalar(call, expected):
    x = _x()
    out = call(x)
    # the node's formula returns (gradient, None): one per input, the Scalar's None
    (result,) = oplib.autograd.grad([out], [x], [oplib.ones_like(out)])
    np.testing.assert_allclose(result.numpy(), expected(x.detach().numpy()), rtol=1e-12)
    assert out.grad_fn.next_functions[1] == (None, 0)


def test_scalar_formulas_double_backward():
    x = _x()
    (g,) = oplib.autograd.grad([(x**3.0).sum()], [x], create_graph=True)
    (gg,) = oplib.autograd.grad([g.sum()], [x])
    np.testing.assert_allclose(gg.numpy(), 6.0 * x.detach().numpy(), rtol=1e-12)
