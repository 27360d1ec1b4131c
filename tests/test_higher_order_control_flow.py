"""``oplib.cond``, ``while_loop``, ``map``, ``scan``: eager semantics as torch's, fake and
meta (shapes, mismatch errors, symbolic trip counts), gradients (gradcheck), nesting, use
inside a custom op's composite kernel, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core.autograd import gradcheck
from oplib_core.fake import SymInt

ops = oplib.ops.oplib


def t(data, grad=False, dtype=np.float64):
    return oplib.tensor(np.asarray(data, dtype=dtype), requires_grad=grad)


# -- cond ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pred", "expected"),
    [(True, [2.0, 4.0]), (False, [0.0, 1.0]), (1, [2.0, 4.0]), (0.0, [0.0, 1.0])],
)
def test_cond_python_predicates(pred, expected):
    x = t([1.0, 2.0])
    out = oplib.cond(pred, lambda a: a * 2.0, lambda a: a - 1.0, (x,))
    np.testing.assert_array_equal(out.numpy(), expected)


def test_cond_tensor_predicate_and_native_arrays():
    x = np.array([1.0, -3.0])
    assert oplib.cond(ops.sum(x) > 0, np.negative, np.abs, [x]).tolist() == [1.0, 3.0]
    assert oplib.cond(t([[True]]), lambda: 1, lambda: 2) == 1


def test_cond_returns_the_branch_structure():
    x = t([1.0, 2.0])
    out = oplib.cond(True, lambda a: {"y": (a, [a * 2.0])}, lambda a: {"y": (a, [a])}, (x,))
    assert out["y"][0] is x and out["y"][1][0].tolist() == [2.0, 4.0]


def test_cond_runs_only_the_branch_taken():
    ran = []
    oplib.cond(False, lambda: ran.append("t"), lambda: ran.append("f"))
    assert ran == ["f"]


def test_cond_predicate_must_have_one_element():
    with pytest.raises(
        oplib.ControlFlowError, match=r"one-element tensor, but got a tensor of shape \(2,\)"
    ) as e:
        oplib.cond(t([1.0, 0.0]), abs, abs, ())
    assert e.value.op == "higher_order::cond"
    with pytest.raises(oplib.ControlFlowError, match="but got str"):
        oplib.cond("yes", abs, abs, ())


def test_cond_argument_errors_name_the_argument():
    with pytest.raises(oplib.ArgumentTypeError, match="expected true_fn to be a function, got int"):
        oplib.cond(True, 1, abs, ())
    with pytest.raises(oplib.ArgumentTypeError, match="expected operands to be a tuple or list"):
        oplib.cond(True, abs, abs, t([1.0]))


def test_cond_gradcheck_through_both_branches():
    x = t([0.3, -0.7, 1.2], grad=True)
    w = t([1.5, 0.5, -2.0], grad=True)
    for pred in (True, False):
        assert gradcheck(
            lambda a, b, p=pred: oplib.cond(
                p, lambda u, v: (u * v).sin(), lambda u, v: u.exp() + v, (a, b)
            ),
            [x, w],
        )


def test_cond_with_tensor_predicate_records_the_taken_branch():
    x = t([1.0, 2.0], grad=True)
    y = oplib.cond(ops.sum(x.detach()) > 0, lambda a: a * a, lambda a: a, (x,))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


# -- cond under fake mode and on meta ---------------------------------------------------------
def test_cond_fake_traces_both_branches_and_returns_new_fakes():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(t(np.ones((3, 2))))
        out = oplib.cond(ops.sum(x) > 0, lambda a: a.sin(), lambda a: a.cos(), (x,))
    assert out.shape == (3, 2) and out.dtype == np.float64 and out is not x


@pytest.mark.parametrize(
    ("false_fn", "match"),
    [
        (
            lambda a: ops.sum(a),
            r"the output: true_fn is shape \(3, 2\) float64, false_fn is shape \(\) float64",
        ),
        (
            lambda a: a.reshape(2, 3),
            r"true_fn is shape \(3, 2\) float64, false_fn is shape \(2, 3\)",
        ),
        (lambda a: ops.astype(a, oplib.float32), r"false_fn is shape \(3, 2\) float32"),
        (lambda a: (a, a), r"same structure; true_fn is \*, false_fn is \(\*, \*\)"),
    ],
)
def test_cond_fake_branch_mismatch_names_the_branch(false_fn, match):
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(t(np.ones((3, 2))))
        with pytest.raises(oplib.ControlFlowError, match=match) as e:
            oplib.cond(True, lambda a: a * 2.0, false_fn, (x,))
    assert e.value.fn == "false_fn" and e.value.op == "higher_order::cond"


def test_cond_on_meta_checks_branches_without_data():
    x = oplib.empty(4, device="meta")
    out = oplib.cond(ops.sum(x) > 0, lambda a: a + 1.0, lambda a: a * 3.0, (x,))
    assert out.shape == (4,) and out.device.type == "meta"
    with pytest.raises(oplib.ControlFlowError, match="false_fn is shape"):
        oplib.cond(True, lambda a: a, lambda a: ops.sum(a), (x,))


def test_cond_nested_structure_mismatch_under_fake():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(t(np.ones(2)))
        with pytest.raises(oplib.ControlFlowError, match=r"output 1: true_fn is shape \(2,\)"):
            oplib.cond(True, lambda a: (a, a), lambda a: (a, ops.sum(a)), (x,))


# -- while_loop ------------------------------------------------------------------------------
def test_while_loop_counts_and_returns_a_tuple():
    out = oplib.while_loop(lambda i, a: i < 4, lambda i, a: (i + 1, a * 2.0), [0, t([1.0, 3.0])])
    assert type(out) is tuple and out[0] == 4 and out[1].tolist() == [16.0, 48.0]


def test_while_loop_tensor_predicate():
    i0 = t(0, dtype=np.int64)
    i, s = oplib.while_loop(
        lambda i, s: i < 5, lambda i, s: (i + 1, s + i), (i0, t(0, dtype=np.int64))
    )
    assert i.item() == 5 and s.item() == 10


def test_while_loop_zero_iterations_returns_the_inputs():
    x = t([1.0])
    assert oplib.while_loop(lambda a: False, lambda a: (a * 2.0,), (x,))[0] is x


def test_while_loop_body_must_keep_the_carry_length():
    with pytest.raises(
        oplib.ControlFlowError,
        match=r"body_fn must return a tuple of 2 values.*got tuple of length 1",
    ) as e:
        oplib.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1,), (0, t([1.0])))
    assert e.value.fn == "body_fn"


def test_while_loop_refuses_gradients():
    x = t([1.0], grad=True)
    with pytest.raises(oplib.ControlFlowError, match=r"while_loop is forward-only.*oplib.scan"):
        oplib.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * 2.0), (0, x))
    with oplib.no_grad():
        assert (
            oplib.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * 2.0), (0, x))[1].item()
            == 4.0
        )


def test_while_loop_fake_gives_symbolic_counters_and_checks_the_body():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(t(np.ones((2, 3))))
        i, y = oplib.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), (0, x))
        assert isinstance(i, SymInt) and y.shape == (2, 3)
        with pytest.raises(
            oplib.ControlFlowError, match=r"carried_inputs and body_fn's result.*output 1"
        ) as e:
            oplib.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, ops.sum(a)), (0, x))
        assert e.value.fn == "body_fn"
        with pytest.raises(
            oplib.ControlFlowError, match=r"cond_fn returned a tensor of shape \(2, 3\)"
        ):
            oplib.while_loop(lambda i, a: a > 0, lambda i, a: (i, a), (0, x))


def test_while_loop_on_meta_uses_the_default_shape_env():
    i, y = oplib.while_loop(
        lambda i, a: i < 3, lambda i, a: (i + 1, a), (0, oplib.empty(2, device="meta"))
    )
    assert isinstance(i, SymInt) and y.shape == (2,)


# -- map -------------------------------------------------------------------------------------
def test_map_over_rows_with_extra_args():
    xs = t(np.arange(6.0).reshape(3, 2))
    out = oplib.map(lambda r, w, b: r * w + b, xs, t([1.0, 10.0]), 1.0)
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0).reshape(3, 2) * [1, 10] + 1)


def test_map_native_arrays_stay_native():
    xs = np.arange(6.0).reshape(3, 2)
    out = oplib.map(lambda r: ops.sum(r), xs)
    assert type(out) is np.ndarray and out.tolist() == [1.0, 5.0, 9.0]


def test_map_nested_inputs_and_outputs():
    xs = {"a": t(np.ones((2, 3))), "b": (t(np.arange(2.0)),)}
    out = oplib.map(lambda d: (d["a"] * d["b"][0], [ops.sum(d["a"])]), xs)
    assert out[0].shape == (2, 3) and out[0].numpy()[1].tolist() == [1.0, 1.0, 1.0]
    assert out[1][0].tolist() == [3.0, 3.0]


def test_map_leaves_must_share_the_first_size():
    with pytest.raises(oplib.ControlFlowError, match=r"same size along dimension 0, got 2, 3"):
        oplib.map(lambda p: p[0], (t(np.ones(2)), t(np.ones(3))))
    with pytest.raises(
        oplib.ControlFlowError, match="must be a tensor with a dimension 0, got float"
    ):
        oplib.map(abs, [1.5])


def test_map_of_zero_rows_is_an_error():
    with pytest.raises(oplib.ControlFlowError, match="xs has no rows"):
        oplib.map(abs, t(np.ones((0, 2))))


def test_map_outputs_must_keep_their_structure():
    xs = t(np.arange(2.0))
    with pytest.raises(
        oplib.ControlFlowError, match=r"f must return the same structure at every step"
    ):
        oplib.map(lambda r: (r,) if r.item() == 0 else (r, r), xs)


def test_map_gradcheck_including_closed_over_args():
    xs = t(np.random.default_rng(0).normal(size=(4, 3)), grad=True)
    w = t([0.5, -1.0, 2.0], grad=True)
    assert gradcheck(lambda a, b: oplib.map(lambda r, v: (r * v).sin().sum(), a, b), [xs, w])


def test_map_fake_and_meta():
    with oplib.FakeTensorMode() as mode:
        xs = mode.from_real(t(np.ones((5, 2, 3))))
        out = oplib.map(lambda r: (ops.sum(r, [1]), r), xs)
    assert out[0].shape == (5, 2) and out[1].shape == (5, 2, 3)
    meta = oplib.map(lambda r: r * 2.0, oplib.empty(7, 2, device="meta"))
    assert meta.shape == (7, 2) and meta.device.type == "meta"


@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 3))
def test_map_matches_a_python_loop(n, m, seed):
    data = np.random.default_rng(seed).normal(size=(n, m))
    got = oplib.map(lambda r: (r * r).sum(), t(data)).numpy()
    np.testing.assert_allclose(got, [float((row * row).sum()) for row in data])


# -- scan ------------------------------------------------------------------------------------
def _cumsum(c, x):
    nxt = c + x
    return nxt, nxt * 1.0


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_cumulative_sum_like_torch(reverse):
    xs = t(np.arange(1.0, 5.0).reshape(4, 1))
    carry, ys = oplib.scan(_cumsum, t([0.0]), xs, reverse=reverse)
    assert carry.tolist() == [10.0]
    expected = [[1.0], [3.0], [6.0], [10.0]] if not reverse else [[10.0], [9.0], [7.0], [4.0]]
    assert ys.tolist() == expected


def test_scan_matches_torch_reverse_semantics():
    # torch: scan(lambda c, x: (c + x, c * 1), zeros(1), arange(4.).reshape(4, 1), reverse=True)
    # gives carry [6.] and ys [[6.], [5.], [3.], [0.]]
    carry, ys = oplib.scan(
        lambda c, x: (c + x, c * 1.0), t([0.0]), t(np.arange(4.0).reshape(4, 1)), reverse=True
    )
    assert carry.tolist() == [6.0] and ys.tolist() == [[6.0], [5.0], [3.0], [0.0]]


def test_scan_along_another_dim_with_pytrees():
    xs = {"x": t(np.arange(6.0).reshape(2, 3))}
    carry, ys = oplib.scan(
        lambda c, d: ((c[0] + d["x"],), {"y": d["x"] * 2.0}), (t([0.0, 0.0]),), xs, dim=1
    )
    assert carry[0].tolist() == [3.0, 12.0]
    assert ys["y"].shape == (2, 3) and ys["y"].tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    _, ys_neg = oplib.scan(lambda c, x: (c, x), t([0.0]), t(np.ones((2, 3))), dim=-1)
    assert ys_neg.shape == (2, 3)


def test_scan_combine_fn_must_return_a_pair():
    with pytest.raises(
        oplib.ControlFlowError,
        match=r"combine_fn must return a tuple \(next_carry, y\), got Tensor",
    ):
        oplib.scan(lambda c, x: c + x, t([0.0]), t(np.ones((2, 1))))
    with pytest.raises(oplib.ArgumentTypeError, match="expected dim to be an int"):
        oplib.scan(_cumsum, t([0.0]), t(np.ones((2, 1))), dim=0.5)


def test_scan_gradcheck_through_carry_and_outputs():
    init = t([0.2, -0.4], grad=True)
    xs = t(np.random.default_rng(1).normal(size=(3, 2)), grad=True)

    def f(c0, x):
        carry, ys = oplib.scan(lambda c, r: (c * r.cos() + r, (c * r).sin()), c0, x, reverse=True)
        return carry, ys

    assert gradcheck(f, [init, xs])


def test_scan_fake_checks_the_carry():
    with oplib.FakeTensorMode() as mode:
        xs = mode.from_real(t(np.ones((4, 3))))
        c0 = mode.from_real(t(np.zeros(3)))
        carry, ys = oplib.scan(_cumsum, c0, xs)
        assert carry.shape == (3,) and ys.shape == (4, 3)
        with pytest.raises(
            oplib.ControlFlowError, match=r"init and combine_fn's next carry.*init is shape \(3,\)"
        ) as e:
            oplib.scan(lambda c, x: (ops.sum(c + x), x), c0, xs)
        assert e.value.fn == "combine_fn"


def test_symbolic_lengths_flow_through_map():
    env_mode = oplib.FakeTensorMode()
    with env_mode:
        n = env_mode.shape_env.new_symbol(1, None)
        xs = oplib.empty(n, 3)
        out = oplib.map(lambda r: r * 2.0, xs)
    assert out.shape[0] is n and out.shape[1] == 3


# -- composition -----------------------------------------------------------------------------
def test_cond_inside_a_map_body():
    xs = t([[1.0, 2.0], [-3.0, 1.0], [0.5, 0.5]], grad=True)

    def body(r):
        return oplib.cond(ops.sum(r.detach()) > 0, lambda a: a * a, lambda a: -a, (r,))

    out = oplib.map(body, xs)
    np.testing.assert_allclose(out.detach().numpy(), [[1.0, 4.0], [3.0, -1.0], [0.25, 0.25]])
    assert gradcheck(lambda a: oplib.map(body, a), [xs])
    with oplib.FakeTensorMode() as mode:
        fx = mode.from_real(xs.detach())
        assert oplib.map(body, fx).shape == (3, 2)


def test_hops_inside_a_custom_op_composite_kernel(ns, teardown):
    @oplib.custom_op(f"{ns}::clip_rows", mutates_args=())
    def clip_rows(x: oplib.Tensor) -> oplib.Tensor:
        def per_row(r):
            return oplib.cond(ops.sum(r) > 1.0, lambda a: a / ops.sum(a), lambda a: a * 1.0, (r,))

        return oplib.map(per_row, x)

    teardown(clip_rows)
    out = clip_rows(t([[1.0, 3.0], [0.25, 0.25]]))
    np.testing.assert_allclose(out.numpy(), [[0.25, 0.75], [0.25, 0.25]])
    native = clip_rows(np.array([[1.0, 3.0]]))
    assert type(native) is np.ndarray


def test_scan_inside_while_loop_body():
    def body(i, acc):
        _, ys = oplib.scan(_cumsum, t([0.0]), acc)
        return i + 1, ys

    i, acc = oplib.while_loop(lambda i, a: i < 2, body, (0, t(np.ones((3, 1)))))
    assert i == 2 and acc.tolist() == [[1.0], [3.0], [6.0]]
