"""In-place ops on views of tensors that require grad: the base's history is rewritten, as
torch's ``CopySlices`` does (issue 31, item 7).

Expected gradients are worked out by hand (or with numpy) in each test; where a number
depends on one of torch's rules, the comment gives what torch 2.13 (CPU) computed on the
same numbers. ``test_every_view_op_and_in_place_op`` checks the rest against finite
differences (``gradcheck``) and, for double backward, ``gradgradcheck``.
"""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.autograd import gradcheck, gradgradcheck

F64 = np.float64
X = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def t(values: Any, *, grad: bool = False) -> oplib.Tensor:
    return oplib.tensor(np.asarray(values, dtype=F64), requires_grad=grad)


def pickle_round_trip(x: Any) -> Any:
    return pickle.loads(pickle.dumps(x))


def grad_of(x: oplib.Tensor) -> np.ndarray:
    assert x.grad is not None
    return x.grad.numpy()


# -- the base's history is rewritten ------------------------------------------------------------
def test_setitem_on_a_computed_tensor():
    x = t(X, grad=True)
    y = x * 2
    y[:, 0] = 0
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[0, 2, 2], [0, 2, 2]])


def test_mul_on_a_slice_rewrites_the_base_and_the_view():
    x = t(X, grad=True)
    y = x * 2
    v = y[:, 1:]
    v.mul_(3)
    assert y.grad_fn.name() == "CopySlices"  # torch: CopySlices, AsStridedBackward0
    assert v.grad_fn.name() == "AsStridedBackward0"
    assert v.requires_grad and y.requires_grad
    (y * y).sum().backward()
    # y = [2 x0, 6 x1, 6 x2]: d(y^2)/dx = 8 x in column 0, 72 x elsewhere
    xs = np.asarray(X)
    np.testing.assert_array_equal(grad_of(x), np.where([True, False, False], 8, 72) * xs)
    np.testing.assert_array_equal(y.detach().numpy(), np.asarray(X) * [2, 6, 6])


def test_copy_of_a_tensor_that_requires_grad_into_a_row():
    x = t(X, grad=True)
    w = t([7.0, 8.0, 9.0], grad=True)
    c = t([[1.0, 10.0, 100.0], [1000.0, 10000.0, 100000.0]])
    y = x * 3
    y[0].copy_(w)
    (y * c).sum().backward()
    # row 0 was overwritten: x gets 3 c in row 1 only, w gets c's row 0 (torch: the same)
    np.testing.assert_array_equal(grad_of(x), [[0, 0, 0], [3000, 30000, 300000]])
    np.testing.assert_array_equal(grad_of(w), [1, 10, 100])


def test_mul_by_a_tensor_that_requires_grad_in_a_column():
    x = t(X, grad=True)
    w = t([2.0, 3.0], grad=True)
    y = x * 1
    y[:, 0].mul_(w)
    (y * y).sum().backward()
    # column 0 is x0 w: d/dx0 (x0 w)^2 = 2 x0 w^2, d/dw = 2 w x0^2; the rest 2 x
    x0, wv = np.asarray([1.0, 4.0]), np.asarray([2.0, 3.0])
    expected = 2 * np.asarray(X)
    expected[:, 0] = 2 * x0 * wv**2
    np.testing.assert_array_equal(grad_of(x), expected)  # torch: [[8, 4, 6], [72, 10, 12]]
    np.testing.assert_array_equal(grad_of(w), 2 * wv * x0**2)  # torch: [4, 96]


def test_narrow_add_and_the_out_pattern():
    x = t(X, grad=True)
    w = t([[1.0, 1.0], [2.0, 2.0]], grad=True)
    y = x * 1
    y.narrow(1, 1, 2).add_(w)
    (y * y).sum().backward()
    expected = 2 * (np.asarray(X) + np.asarray([[0, 1, 1], [0, 2, 2]]))
    np.testing.assert_array_equal(grad_of(x), expected)
    np.testing.assert_array_equal(grad_of(w), expected[:, 1:])

    a, b = t([[1.0], [2.0]], grad=True), t([[3.0, 4.0], [5.0, 6.0]], grad=True)
    out = oplib.zeros(2, 3, dtype=F64)  # torch.empty(...) then two copies, as models write
    out[..., :1].copy_(a * 2)
    out[..., 1:].copy_(b)
    assert out.requires_grad and out.grad_fn.name() == "CopySlices"
    (out * t([[1.0, 10.0, 100.0]])).sum().backward()
    np.testing.assert_array_equal(grad_of(a), [[2], [2]])
    np.testing.assert_array_equal(grad_of(b), [[10, 100], [10, 100]])


def test_a_view_of_a_view():
    x = t(X, grad=True)
    w = t([2.0, 3.0], grad=True)
    y = x * 1
    v = y[:, 1:]
    v[1].mul_(w)  # y[1, 1:] *= w
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [[1, 2, 3], [4, 10, 18]])
    # torch: x.grad [[2, 4, 6], [8, 40, 108]], w.grad [100, 216]
    np.testing.assert_array_equal(grad_of(x), [[2, 4, 6], [8, 2 * 5 * 4, 2 * 6 * 9]])
    np.testing.assert_array_equal(grad_of(w), [2 * 2 * 25, 2 * 3 * 36])


def test_several_writes_in_a_row():
    x = t(X, grad=True)
    w = t([2.0, 3.0, 4.0], grad=True)
    y = x * 1
    y[0].mul_(2)
    y[1].add_(w)
    y[:, 0].copy_(y[:, 1] * 10)
    y.narrow(1, 2, 1).mul_(w[0])
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [[40, 4, 12], [80, 8, 20]])
    # torch 2.13 on the same numbers
    np.testing.assert_array_equal(grad_of(x), [[0, 1616, 96], [0, 1616, 80]])
    np.testing.assert_array_equal(grad_of(w), [544, 1616, 80])


def test_augmented_assignments_into_views():
    x = t(X, grad=True)
    w = t([2.0, 3.0, 4.0], grad=True)
    y = x * 1
    y[0] += w  # Python: a write into the view y[0], then y[0] = that view
    y[:, 1:] *= 3
    y.T[2] /= w[:2]
    (y * y).sum().backward()
    # torch 2.13 on the same numbers
    np.testing.assert_array_equal(grad_of(x), [[6, 90, 31.5], [8, 90, 12]])
    np.testing.assert_array_equal(grad_of(w), [-104.25, 66, 31.5])


def test_a_base_that_is_not_contiguous():
    x = t(X, grad=True)
    w = t([5.0, 6.0], grad=True)
    y = x.T * 2  # numpy keeps x.T's layout: y is Fortran-ordered
    assert not y.detach().numpy().flags.c_contiguous
    y[1].mul_(w)
    (y * y).sum().backward()
    # y[1] = 2 x[:, 1] w: d/dx = 8 x w^2 there, 8 x elsewhere (torch: [[8, 400, 24], [32,
    # 1440, 48]], w.grad [160, 1200])
    np.testing.assert_array_equal(grad_of(x), [[8, 400, 24], [32, 1440, 48]])
    np.testing.assert_array_equal(grad_of(w), [160, 1200])


def test_retain_graph_runs_the_rewritten_history_twice():
    x = t(X, grad=True)
    y = x * 2
    y.T[1].mul_(5)
    s = (y * y).sum()
    s.backward(retain_graph=True)
    s.backward()
    # twice 8 x (column 1: twice 200 x); torch: [[16, 800, 48], [64, 2000, 96]]
    np.testing.assert_array_equal(grad_of(x), [[16, 800, 48], [64, 2000, 96]])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        s.backward()


def test_double_backward_through_a_write_into_a_view():
    x = t(X, grad=True)
    w = t([2.0, 3.0, 4.0], grad=True)
    y = x * x
    y[0].mul_(w)
    z = (y * y).sum()
    (gx,) = oplib.autograd.grad(z, x, create_graph=True)
    (gx * gx).sum().backward()
    # torch 2.13 on the same numbers
    np.testing.assert_array_equal(gx.detach().numpy(), [[16, 288, 1728], [256, 500, 864]])
    np.testing.assert_array_equal(grad_of(x), [[1536, 248832, 5971968], [98304, 300000, 746496]])
    np.testing.assert_array_equal(grad_of(w), [512, 110592, 2985984])


def test_grad_of_the_written_value_alone():
    x = t(X, grad=True)
    w = t([7.0, 8.0, 9.0], grad=True)
    y = x * 1
    y[1].copy_(w * 2)
    (gw,) = oplib.autograd.grad((y * y).sum(), [w])
    np.testing.assert_array_equal(gw.numpy(), 8 * np.asarray([7.0, 8.0, 9.0]))
    assert x.grad is None and w.grad is None


# -- the other views ------------------------------------------------------------------------------
def test_another_view_gets_the_new_history():
    x = t(X, grad=True)
    y = x * 2
    a = y[:, 0]
    y[:, 0] = 0  # a's elements are overwritten: no gradient reaches x (torch: zeros)
    assert a.grad_fn.name() == "AsStridedBackward0"
    a.sum().backward()
    np.testing.assert_array_equal(grad_of(x), np.zeros((2, 3)))


def test_a_view_after_an_in_place_op_on_its_base():
    x = t(X, grad=True)
    y = x * 2
    a = y[:, 0]
    y.mul_(3)
    np.testing.assert_array_equal(a.detach().numpy(), [6, 24])
    a.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[6, 0, 0], [6, 0, 0]])  # torch: the same


def test_a_view_apart_from_the_written_one_keeps_its_history():
    x = t(X, grad=True)
    w = t([2.0, 3.0, 4.0], grad=True)
    y = x * 1
    first, second = y[0], y[1]
    history = first.grad_fn
    second.mul_(w)  # first's memory lies apart: its history is still right, and kept
    assert first.grad_fn is history
    overlapping = y[:, 0]  # shares memory with the next write: regenerated
    y[0].add_(1)
    assert first.grad_fn.name() == "AsStridedBackward0"
    assert overlapping.grad_fn.name() == "AsStridedBackward0"
    (first.sum() + second.sum() * overlapping.sum()).backward()
    # first = x0 + 1; second = x1 w; overlapping = [x00 + 1, x10 w0]
    s1, o = np.sum(np.asarray(X)[1] * [2, 3, 4]), 1 + 1 + 4 * 2
    np.testing.assert_array_equal(grad_of(w), np.asarray(X)[1] * o + [4 * s1, 0, 0])
    np.testing.assert_array_equal(grad_of(x), [[1 + s1, 1, 1], [2 * o + 2 * s1, 3 * o, 4 * o]])


def test_views_of_a_base_without_grad_get_grad_when_it_does():
    w = t([1.0, 2.0], grad=True)
    out = oplib.zeros(2, 3, dtype=F64)
    a, b = out[:, 1], out[:, 1:]  # taken before the write
    assert not a.requires_grad
    out[..., :1].copy_(w.reshape(2, 1))
    assert a.requires_grad and b.grad_fn.name() == "AsStridedBackward0"  # torch: the same
    (a + out[:, 0]).sum().backward()
    np.testing.assert_array_equal(grad_of(w), [1, 1])


def test_the_written_view_outlives_its_base():
    x = t(X, grad=True)
    v = (x * 2)[0]  # the base is dropped: the write is the view's own history
    gc.collect()
    v.mul_(3)
    v.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[6, 6, 6], [0, 0, 0]])


def test_a_view_of_a_view_whose_base_is_gone_rebases_the_first_view():
    x = t(X, grad=True)
    w = t([2.0, 3.0], grad=True)
    row = (x * 2)[0]
    gc.collect()
    tail = row[1:]
    tail.mul_(w)
    assert row.grad_fn.name() == "CopySlices"
    row.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[2, 4, 6], [0, 0, 0]])
    np.testing.assert_array_equal(grad_of(w), [4, 6])


@pytest.mark.parametrize("duplicate", [pickle_round_trip, copy.deepcopy])
def test_a_copied_tensor_is_the_base_of_its_new_views(duplicate: Callable[[Any], Any]) -> None:
    base = oplib.zeros(2, 3, dtype=F64)
    _ = base[0]  # a view: the storage's record of views travels with the copy
    moved = duplicate(base)
    w = t([1.0, 2.0, 3.0], grad=True)
    moved[1].copy_(w)
    assert moved.grad_fn.name() == "CopySlices"
    (moved * moved).sum().backward()
    np.testing.assert_array_equal(grad_of(w), [2, 4, 6])
    assert base.grad_fn is None and float(base.sum()) == 0.0


def test_a_reshape_that_copies_is_not_a_view_of_its_input():
    x = t(X, grad=True)
    y = x * 1
    r = y.T.reshape(6)  # not contiguous: the kernel copies (torch's reshape too)
    r.mul_(3)
    np.testing.assert_array_equal(y.detach().numpy(), X)  # the base is untouched
    assert y.grad_fn.name() != "CopySlices"
    (r.sum() + y.sum()).backward()
    np.testing.assert_array_equal(grad_of(x), np.full((2, 3), 4.0))


def test_the_record_of_views_stays_small():
    base = oplib.zeros(4)

    def drop(i: int) -> None:
        base[i % 4 :]  # a view, dropped at once

    for i in range(1000):
        drop(i)
    assert base._vc is not None
    views = base._vc[1]
    assert len(views.views) <= 64
    keep = [base[i % 4 :] for i in range(100)]
    assert len(views.alive()) == 100 and all(views.is_view(k) for k in keep)
    assert not views.is_view(base) and not views.is_view(base.detach())


# -- every view op and every in-place op, against finite differences ----------------------------
def _write(view: Callable[[oplib.Tensor], oplib.Tensor], fn: Callable[..., Any]) -> Any:
    def f(x: oplib.Tensor, w: oplib.Tensor) -> oplib.Tensor:
        y = x * 1
        fn(view(y), w)
        return y * y

    return f


PATTERNS: dict[str, Any] = {
    "slice mul_ scalar": _write(lambda y: y[:, 1:], lambda v, w: v.mul_(3)),
    "int add_": _write(lambda y: y[1], lambda v, w: v.add_(w[0])),
    "ellipsis copy_": _write(lambda y: y[..., :2], lambda v, w: v.copy_(w[:, :2])),
    "narrow add_": _write(lambda y: y.narrow(1, 1, 2), lambda v, w: v.add_(w[:, 1:])),
    "select mul_": _write(lambda y: y.select(1, 2), lambda v, w: v.mul_(w[:, 0])),
    "step slice div_": _write(lambda y: y[:, ::2], lambda v, w: v.div_(w[:, ::2])),
    "negative index sub_": _write(lambda y: y[-1, -2:], lambda v, w: v.sub_(w[0, :2])),
    "transpose mul_": _write(lambda y: y.transpose(0, 1)[1:], lambda v, w: v.mul_(w.T[1:])),
    "permute add_": _write(lambda y: y.permute(1, 0), lambda v, w: v.add_(w.permute(1, 0))),
    "T copy_": _write(lambda y: y.T[0], lambda v, w: v.copy_(w[:, 0])),
    "mT mul_": _write(lambda y: y.mT[2], lambda v, w: v.mul_(w[:, 1])),
    "reshape mul_": _write(lambda y: y.reshape(6)[2:5], lambda v, w: v.mul_(w.reshape(6)[:3])),
    "view clamp_": _write(lambda y: y.view(3, 2), lambda v, w: v.clamp_(0.8, 1.5)),
    "unsqueeze fill_": _write(lambda y: y.unsqueeze(0)[0, 0], lambda v, w: v.fill_(2.0)),
    "squeeze zero_": _write(lambda y: y.unsqueeze(1).squeeze(1)[1], lambda v, w: v.zero_()),
    "movedim mul_": _write(lambda y: y.movedim(0, 1)[2], lambda v, w: v.mul_(w[:, 2])),
    "view of a view": _write(lambda y: y[1:][:, 1:][0], lambda v, w: v.mul_(w[0, 1:])),
    "setitem in a view": _write(lambda y: y[1], lambda v, w: v.__setitem__(slice(0, 2), w[0, :2])),
    "setitem of one element": _write(
        lambda y: y[:, 1:], lambda v, w: v.__setitem__((0, 1), w[1, 1])
    ),
    "fill_ with a tensor": _write(lambda y: y[0], lambda v, w: v.fill_(w[1, 2])),
}


def _base_and_sibling(x: oplib.Tensor, w: oplib.Tensor) -> oplib.Tensor:
    y = x * 1
    a = y[:, :2]
    y[:, 0].mul_(w[:, 0])
    return a * a + y.sum()


def _expanded_view_read_after(x: oplib.Tensor, w: oplib.Tensor) -> oplib.Tensor:
    y = x * 1
    e = y[:, :1].expand(2, 4)  # each element of y[:, 0] four times: their gradients sum
    y[:, 0].mul_(w[:, 0])
    return e * e + y.sum()


def _out_pattern(x: oplib.Tensor, w: oplib.Tensor) -> oplib.Tensor:
    out = oplib.zeros(2, 3, dtype=F64)
    out[..., :2].copy_(x[:, :2] * 2)
    out[..., 2:].copy_(w[:, 2:].exp())
    return out * out


def _fortran_base(x: oplib.Tensor, w: oplib.Tensor) -> oplib.Tensor:
    y = x.transpose(0, 1) * 2
    y[0].mul_(w[0, :2])
    return y * y


PATTERNS.update(
    {
        "another view read after": _base_and_sibling,
        "expanded view read after": _expanded_view_read_after,
        "out pattern": _out_pattern,
        "not contiguous base": _fortran_base,
    }
)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_every_view_op_and_in_place_op(name: str) -> None:
    def inputs() -> tuple[oplib.Tensor, oplib.Tensor]:
        rng = np.random.default_rng(7)
        x, w = rng.uniform(0.5, 2.0, (2, 2, 3))
        return t(x, grad=True), t(w, grad=True)

    assert gradcheck(PATTERNS[name], inputs())
    assert gradgradcheck(PATTERNS[name], inputs())


# -- torch's refusals and version counters ------------------------------------------------------
@pytest.mark.parametrize(
    "view",
    [
        lambda x: x[0],
        lambda x: x.narrow(1, 0, 2),
        lambda x: x.T,
        lambda x: x.reshape(6),
        lambda x: x[1:][:, 0],
    ],
)
def test_a_view_of_a_leaf_is_refused(view: Callable[[oplib.Tensor], oplib.Tensor]) -> None:
    x = t(X, grad=True)
    v = view(x)
    with pytest.raises(
        RuntimeError,
        match=r"^a view of a leaf Variable that requires grad is being used in an in-place "
        r"operation\.$",
    ):
        v.mul_(2)
    assert x._version == 0  # refused before writing
    with oplib.no_grad():  # under no_grad the write is allowed (torch: the same)
        v.mul_(2)
    assert x._version == 1 and x.grad_fn is None
    assert float(x.detach().sum()) > 21.0


def test_a_view_taken_under_no_grad_is_refused_with_grad_on():
    y = t([1.0, 1.0, 1.0, 1.0], grad=True) * 2
    with oplib.no_grad():
        v = y[:2]
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being"):
        v.mul_(t([1.0, 1.0], grad=True))
    y.mul_(2)  # writing the base leaves the no_grad view alone
    assert v.grad_fn is None and not v.requires_grad


def test_outputs_of_split_and_chunk_are_refused():
    y = t([1.0, 2.0, 3.0, 4.0], grad=True) * 2
    a, _ = y.split(2)
    with pytest.raises(
        RuntimeError,
        match=r"Output 0 of .*split.* is a view and is being modified inplace\. This view is "
        "the output of a function that returns multiple views",
    ):
        a.mul_(2)
    _, b = t([1.0, 2.0], grad=True).chunk(2)
    with pytest.raises(RuntimeError, match=r"Output 1 of .*chunk.* is a view"):
        b.add_(1)


def test_outputs_of_split_share_the_version_counter_of_their_input():
    # A piece of a split written under no_grad changes the saved input: backward refuses, as
    # torch does (each output shares its base's version counter), instead of a wrong grad.
    x = t([0.0, 1.0, 2.0, 3.0], grad=True)
    y = x * 2
    z = y.sin()  # saves y
    for pieces in (y.split(2), y.chunk(2), oplib.ops.oplib.tensor_split(y, 2)):
        assert all(p._version == y._version for p in pieces)
    with oplib.no_grad():
        y.split(2)[1].add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    # a piece of a tensor outside the graph, given a value in it: torch 2.13's refusal
    with pytest.raises(
        RuntimeError,
        match=r"A view was created in no_grad mode and is being modified inplace with grad "
        r"mode enabled\. This view is the output of a function that returns multiple views",
    ):
        t([0.0, 0.0]).chunk(2)[0].add_(t([1.0], grad=True))
    # and without autograd, the write lands in the base's storage
    base = t([0.0, 0.0, 0.0, 0.0])
    base.chunk(2)[1].fill_(3.0)
    assert base.numpy().tolist() == [0.0, 0.0, 3.0, 3.0] and base._version == 1


def test_an_expanded_view_is_refused():
    y = t([1.0], grad=True) * 2
    e = y.expand(3)
    with pytest.raises(
        RuntimeError, match="more than one element of the written-to tensor refers to a single"
    ):
        e.mul_(2)


def test_a_saved_output_written_through_a_view_raises_at_backward():
    x = t(X, grad=True)
    y = x.exp()  # saves its output
    y.narrow(1, 0, 2).add_(1)
    # torch: "... [torch.FloatTensor [2, 3]], which is output 0 of Exp, is at version 1;
    # expected version 0 instead."
    with pytest.raises(
        RuntimeError,
        match=r"modified by an inplace operation: \[oplib.float64 \[2, 3\]\], which is output "
        r"0 of .*exp.*, is at version 1; expected version 0",
    ):
        y.sum().backward()


def test_a_saved_input_written_through_a_view_raises_at_backward():
    x = t(X, grad=True)
    y = x * 1
    z = y.sin()  # saves y
    y.narrow(1, 0, 2).add_(1)
    # torch: "... which is output 0 of torch::autograd::CopySlices, is at version 1"
    with pytest.raises(RuntimeError, match="which is output 0 of CopySlices, is at version 1"):
        z.sum().backward()


def test_views_share_the_base_version_counter():
    y = t(X, grad=True) * 1
    v = y[0]
    w = v[1:]
    w.add_(1)
    assert y._version == v._version == w._version == 1


def test_meta_tensors_get_shapes():
    x = oplib.tensor(np.ones((2, 3)), device="meta", requires_grad=True)
    w = oplib.tensor(np.ones(3), device="meta", requires_grad=True)
    y = x * 2
    y[0].mul_(w)
    y[1, 1:] = 0
    (y * y).sum().backward()
    assert x.grad is not None and w.grad is not None
    assert x.grad.shape == (2, 3) and w.grad.shape == (3,) and x.grad.device.type == "meta"


def test_arrays_without_strides_are_refused_naming_their_type():
    backend = oplib.backends.TABLE.find("privateuse1")
    if backend is None or not backend.is_available():
        pytest.skip("the privateuse1 backend (oplib-privateuse) is not installed")
    x = oplib.tensor(np.ones((2, 3)), device="privateuse1", requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError) as info:
        y[0].mul_(2)  # the vendor's arrays hide their memory: the view cannot be placed
    assert y._version == 0
    assert "needs the arrays' strides" in str(info.value)
    assert "DeviceArray has none" in str(info.value) and "clone()" in str(info.value)


@pytest.mark.cuda
def test_on_a_cuda_device():
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    pytest.importorskip("cupy")
    x = oplib.tensor(np.asarray(X), device="cuda", requires_grad=True)
    w = oplib.tensor(np.asarray([2.0, 3.0]), device="cuda", requires_grad=True)
    y = x * 1
    y.T[1:].mul_(w.reshape(2, 1))  # columns 1 and 2 of y times 2 and 3
    (y * y).sum().backward()
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(x.grad.to("cpu").numpy(), 2 * np.asarray(X) * [1, 4, 9])
    np.testing.assert_allclose(w.grad.to("cpu").numpy(), [4 * (4 + 25), 6 * (9 + 36)])
