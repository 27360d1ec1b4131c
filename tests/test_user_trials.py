"""What users found doing, from the docs alone, what they will do: send tensors through
pickle and process pools, back-propagate a custom op from threads into a shared weight,
copy the backend template under a name of their own."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import oplib_core as oplib

from helpers import Teardown, unique_ns

# -- pickling tensors --------------------------------------------------------------------


def test_a_tensor_with_a_graph_is_refused_by_pickle_and_deepcopy() -> None:
    """Pickled whole, its grad_fn carried copies of its leaves: backward() on the copy ran
    into them silently and the sender's x.grad stayed None."""
    x = oplib.tensor(np.arange(3.0), requires_grad=True)
    y = (x * x).sum()
    for send in (pickle.dumps, copy.deepcopy):
        with pytest.raises(pickle.PicklingError) as e:
            send(y)
        message = str(e.value)
        assert "part of an autograd graph (grad_fn=<" in message, message
        assert "autograd does not cross process boundaries" in message
        assert "tensor.detach()" in message and ".grad" in message
    assert x.grad is None


def test_a_leaf_and_a_detached_tensor_pickle_with_their_data() -> None:
    x = oplib.tensor(np.arange(3.0), requires_grad=True)
    x.grad = oplib.ones(3, dtype=oplib.float64)
    back = pickle.loads(pickle.dumps(x))
    assert back.is_leaf and back.requires_grad and back.grad_fn is None
    assert np.array_equal(back.detach().numpy(), [0.0, 1.0, 2.0])
    assert back.grad is not None and np.array_equal(back.grad.numpy(), [1.0, 1.0, 1.0])
    (back * 2).sum().backward()  # records again, into the copy's own .grad
    assert np.array_equal(back.grad.numpy(), [3.0, 3.0, 3.0])
    y = (x * 2).detach()
    same = pickle.loads(pickle.dumps(y))
    assert same.grad_fn is None and not same.requires_grad
    assert np.array_equal(same.numpy(), [0.0, 2.0, 4.0])
    view = oplib.arange(6.0).reshape(2, 3)
    assert np.array_equal(pickle.loads(pickle.dumps(view)).numpy(), view.numpy())


def _loss(x: oplib.Tensor) -> oplib.Tensor:
    return 2 * (x * x).sum()  # a worker function of a public torch Pool.map example


def _loss_value(x: oplib.Tensor) -> oplib.Tensor:
    return _loss(x).detach()


def test_pool_map_of_tensors_that_require_grad() -> None:
    """``Pool.map(f, tensors)`` with leaves that require grad: a result that is part of the
    worker's graph is refused with the reason (it reaches the caller), its detached value
    comes back."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method on this platform")
    tensors = [oplib.tensor([float(i)], requires_grad=True) for i in range(3)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        values = pool.map_async(_loss_value, tensors).get(60)
        assert [v.item() for v in values] == [0.0, 2.0, 8.0]
        with pytest.raises(Exception) as e:
            pool.map_async(_loss, tensors).get(60)
    assert "part of an autograd graph" in str(e.value), str(e.value)


# -- threads ---------------------------------------------------------------------------


@pytest.fixture
def scale_op(teardown: Teardown) -> Iterator[oplib.CustomOpDef]:
    ns = unique_ns("trial")

    @oplib.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: oplib.Tensor, a: float) -> oplib.Tensor:
        return x * a

    def setup(ctx: object, inputs: tuple[object, ...], output: object) -> None:
        ctx.a = inputs[1]  # type: ignore[attr-defined]

    def backward(ctx: object, grad: oplib.Tensor) -> tuple[oplib.Tensor, None]:
        return grad * ctx.a, None  # type: ignore[attr-defined]

    scale.register_autograd(backward, setup_context=setup)
    teardown(scale)
    yield scale


def test_threads_back_propagate_a_custom_op_into_a_shared_weight(
    scale_op: oplib.CustomOpDef,
) -> None:
    w = oplib.tensor(np.ones(1000), requires_grad=True)
    x = oplib.tensor(np.arange(1000.0))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                scale_op(w * x, 3.0).sum().backward()
        except BaseException as e:
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert w.grad is not None
    assert np.array_equal(w.grad.numpy(), 8 * 25 * 3.0 * np.arange(1000.0))
