"""In-place ops, ``out=`` overloads, version counters and ``Tensor.__setitem__`` (issue 14)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core.autograd import gradcheck
from oplib_core.errors import NoKernelError
from oplib_core.kernels._inplace_kernels import _write, put_at

OPS = oplib.ops.oplib
F64 = np.float64


def leaf(values: Any, *, grad: bool = True) -> oplib.Tensor:
    return oplib.tensor(np.asarray(values, dtype=F64), requires_grad=grad)


# -- version counters -----------------------------------------------------------------------
def test_version_starts_at_zero_and_counts_every_in_place_op():
    t = oplib.zeros(3)
    assert t._version == 0
    t.add_(1)
    t.mul_(2.0)
    t.sub_(oplib.ones(3))
    t.div_(2)
    t.zero_()
    t.fill_(3.0)
    t.clamp_(0, 1)
    t.copy_(oplib.ones(3))
    assert t._version == 8
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_an_op_writing_an_argument_it_does_not_return_bumps_its_version_every_call(lib, ns):
    """``scale_(Tensor(a!) x, float s) -> Tensor`` returns a new tensor and writes ``x``:
    every call bumps ``x``'s version, the cached calls too (they once did only on the first
    call, the slow path's), so autograd still sees a saved tensor written in place."""
    lib.define("scale_(Tensor(a!) x, float s) -> Tensor")

    def scale_(x, s):
        x *= s
        return x.copy()

    lib.impl("scale_", scale_, "CPU")
    op = getattr(oplib.ops, ns).scale_
    t = oplib.ones(2)
    for n in range(1, 5):
        op(t, 2.0)
        assert t._version == n
    assert t.tolist() == [16.0, 16.0]
    x = leaf([1.0, 2.0])
    for _ in range(3):  # the cached calls
        saved = x.exp()  # exp saves its output
        with oplib.no_grad():
            op(saved, 2.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.sum().backward()


def test_out_of_place_ops_and_clones_leave_the_version_alone():
    t = oplib.ones(2, 3)
    (t + 1).exp()
    c = t.clone()
    c.add_(1)
    assert t._version == 0 and c._version == 1


def test_views_share_their_base_version_counter():
    base = oplib.zeros(2, 3)
    view = base.transpose(0, 1).unsqueeze(0)
    view.add_(1)
    assert base._version == view._version == 1
    base.mul_(2)
    assert view._version == 2
    assert float(base.sum()) == 12.0  # the view wrote into the base's memory


def test_in_place_ops_under_no_grad_bump_the_version():
    t = oplib.ones(3)
    with oplib.no_grad():
        t.add_(1)
    assert t._version == 1


def test_out_argument_is_bumped():
    out = oplib.empty(3)
    r = OPS.add(oplib.ones(3), 2.0, out=out)
    assert r is out and out._version == 1 and out.tolist() == [3.0, 3.0, 3.0]


# -- autograd refusals ----------------------------------------------------------------------
def test_in_place_op_on_a_leaf_that_requires_grad_is_refused():
    x = leaf([1.0, 2.0])
    for op in (lambda: x.add_(1), lambda: x.zero_(), lambda: x.copy_(oplib.ones(2))):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
            op()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x += 1
    assert x._version == 0 and x.tolist() == [1.0, 2.0]


def test_in_place_op_on_a_leaf_is_allowed_under_no_grad():
    x = leaf([1.0, 2.0])
    with oplib.no_grad():
        x.mul_(3)
    assert x.tolist() == [3.0, 6.0] and x.grad_fn is None and x.requires_grad


def test_modified_saved_input_raises_at_backward():
    a = leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b  # saves b
    b.add_(1)
    with pytest.raises(
        RuntimeError,
        match=r"one of the variables needed for gradient computation has been modified by an "
        r"inplace operation: \[oplib.float64 \[3\]\], which is output 0 of .*, is at "
        r"version 1; expected version 0 instead",
    ):
        c.sum().backward()


def test_modified_saved_output_raises_at_backward():
    a = leaf([1.0, 2.0])
    y = a.exp()  # saves its output
    y.add_(1)
    with pytest.raises(
        RuntimeError, match=r"output 0 of .*exp.*is at version 1; expected version 0"
    ):
        y.sum().backward()


def test_change_of_a_saved_tensor_under_no_grad_is_caught():
    """Before version counters this gave a silently wrong gradient."""
    a = leaf([1.0, 2.0])
    b = a * 1
    c = (b * b).sum()
    with oplib.no_grad():
        b.mul_(10)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.backward()


def test_modifying_a_view_of_a_saved_tensor_is_caught():
    a = leaf([[1.0, 2.0], [3.0, 4.0]])
    b = a * 1
    c = (b * b).sum()
    with oplib.no_grad():
        b.transpose(0, 1).add_(1)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        c.backward()


def test_in_place_on_a_view_of_a_leaf_is_refused():
    x = leaf([[1.0, 2.0]])
    v = x.squeeze(0)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        v.mul_(2)


# In-place ops on views of tensors that require grad (torch's CopySlices): see
# tests/test_inplace_views.py.


def test_writes_through_a_view_without_grad_reach_the_base():
    base = oplib.zeros(2, 3)
    row = base[0]
    row.copy_(oplib.ones(3))  # nothing requires grad: a plain write through the view
    np.testing.assert_array_equal(base.numpy()[0], [1.0, 1.0, 1.0])
    with oplib.no_grad():
        row.add_(leaf([1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(base.numpy()[0], [2.0, 2.0, 2.0])
    assert base.grad_fn is None and not base.requires_grad
    assert base._version == row._version == 2


def test_detach_shares_the_version_counter_as_torch():
    x = leaf([1.0, 2.0])
    y = x.exp()  # saves its output
    y.detach().zero_()
    assert y._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# -- gradients --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w: (x * 1).add_(w),
        lambda x, w: (x * 1).sub_(w),
        lambda x, w: (x * 1).mul_(w),
        lambda x, w: (x * 1).div_(w),
        lambda x, w: (x * 1).mul_(2.5).add_(w).div_(3),
        lambda x, w: (x * w).zero_().add_(x),
        lambda x, w: (x * 1).fill_(2.0) * w,
        lambda x, w: (x * 1).fill_(w.sum()),
        lambda x, w: (x * 1).copy_(w),
        lambda x, w: (x * w).clamp_(-0.5, 0.6),
        lambda x, w: (x * 1).clamp_(None, 0.6) * w,
        lambda x, w: w.clamp(-0.7),
    ],
)
def test_in_place_ops_have_correct_gradients(fn):
    x = leaf([0.3, -0.8, 1.2])
    w = leaf([0.9, 0.4, -1.1])
    assert gradcheck(fn, (x, w))


def test_in_place_op_records_on_a_tensor_that_did_not_require_grad():
    w = leaf([1.0, 2.0])
    t = oplib.zeros(2, dtype=F64)
    t.add_(w)
    t.mul_(w)
    assert t.requires_grad and t.grad_fn is not None
    t.sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]


def test_mul_in_place_uses_the_old_values_for_the_other_gradient():
    x = leaf([2.0, 3.0])
    w = leaf([5.0, 7.0])
    y = x * 1
    y.mul_(w)
    y.mul_(w)
    y.sum().backward()
    assert x.grad.tolist() == [25.0, 49.0]
    assert w.grad.tolist() == [2 * 2 * 5.0, 2 * 3 * 7.0]


# -- errors of the kernels and fakes, as torch ------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_in_place_dtype_and_shape_rules(device):
    i = oplib.zeros(3, dtype=np.int64, device=device)
    with pytest.raises(
        RuntimeError, match=r"result type float.* can't be cast to the desired output type int64"
    ):
        i.add_(1.5)
    with pytest.raises(
        RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"
    ):
        oplib.zeros(3, device=device).add_(oplib.ones(2, 3, device=device))
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        oplib.zeros(3, device=device).fill_(oplib.ones(2, device=device))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        oplib.zeros(3, device=device).clamp_()
    i.add_(oplib.ones(3, dtype=np.int32, device=device))  # a lower category casts


def test_fill_converts_the_value_as_torch():
    assert oplib.zeros(2, dtype=np.uint8).fill_(-3).tolist() == [253, 253]
    assert oplib.zeros(2, dtype=np.int64).fill_(1.5).tolist() == [1, 1]
    with pytest.raises(
        RuntimeError, match="value cannot be converted to type int8 without overflow"
    ):
        oplib.zeros(2, dtype=np.int8).fill_(300)
    with pytest.raises(RuntimeError, match="value cannot be converted to type float32"):
        oplib.zeros(2).fill_(1j)


def test_clamp_promotes_an_int_tensor_with_a_float_bound():
    r = oplib.arange(4).clamp(0.5, 2)
    assert r.dtype == oplib.float32 and r.tolist() == [0.5, 1.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type int64"):
        oplib.arange(4).clamp_(0.5)


def test_read_only_arrays_are_refused_with_a_reason():
    ro = np.broadcast_to(np.zeros(3), (2, 3))
    with pytest.raises(ValueError, match="read-only view"):
        OPS.add_.Scalar(ro, 1.0)


def test_immutable_array_types_are_refused_not_copied():
    class Frozen:
        shape = (2,)
        dtype = np.dtype(F64)

        def __setitem__(self, key: Any, value: Any) -> None:
            raise TypeError("'Frozen' object does not support item assignment")

    with pytest.raises(
        TypeError, match=r"in-place ops need writable arrays.*Frozen arrays are immutable"
    ):
        _write("oplib::zero_", Frozen(), ..., 0)


def test_dask_arrays_have_no_in_place_kernels():
    da = pytest.importorskip("dask.array")
    t = oplib.tensor(da.ones((4,), chunks=2))
    with pytest.raises(
        NoKernelError, match=r"oplib::add_.Scalar\(\): no kernel for backend 'dask'"
    ):
        t.add_(1)


# -- out= -------------------------------------------------------------------------------------
def test_out_overloads_are_generated_for_pointwise_ops_and_reductions():
    assert str(OPS.add.out._schema) == (
        "oplib::add.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"
    )
    assert "Tensor(a!) out" in str(OPS.sum.out._schema)
    assert str(OPS.mul.Scalar_out._schema).startswith("oplib::mul.Scalar_out(Tensor self, Scalar")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_out_rules(device):
    a = oplib.ones(3, device=device)
    with pytest.raises(RuntimeError, match=r"add\.Scalar_out: result type float32 can't be cast"):
        OPS.add(a, 1.5, out=oplib.empty(3, dtype=np.int64, device=device))
    with pytest.raises(
        RuntimeError, match=r"output with shape \[2\] doesn't match the broadcast shape \[3\]"
    ):
        OPS.exp(a, out=oplib.empty(2, device=device))
    out = oplib.empty([], dtype=F64, device=device)
    assert OPS.sum(a, out=out) is out


def test_out_refuses_autograd_as_torch():
    w = leaf([1.0, 2.0])
    with pytest.raises(
        RuntimeError,
        match=r"exp\(\): functions with out=\.\.\. arguments don't support automatic "
        "differentiation",
    ):
        OPS.exp(w, out=oplib.empty(2, dtype=F64))
    out = oplib.empty(2, dtype=F64)
    with oplib.no_grad():
        OPS.mul(w, w, out=out)
    assert out.tolist() == [1.0, 4.0]


def test_out_under_fake_tensor_mode():
    with oplib.FakeTensorMode():
        a = oplib.empty(2, 3)
        out = oplib.empty(3)
        assert OPS.sum(a, [0], out=out) is out
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            OPS.sum(a, out=out)


# -- __setitem__ -------------------------------------------------------------------------------
def test_setitem_as_torch():
    x = oplib.zeros(3, 4)
    x[0] = 1
    x[:, 1] = oplib.arange(3.0)
    x[x > 0.5] = 7
    x[oplib.tensor([0, 2]), 3] = 9
    assert x.tolist() == [[7, 0, 7, 9], [0, 7, 0, 0], [0, 7, 0, 9]]
    assert x._version == 4


def test_setitem_casts_the_value_and_broadcasts_it():
    x = oplib.zeros(2, 3, dtype=np.int64)
    x[1] = oplib.tensor([1.7, 2.2, 3.9])
    x[...] = x + 1
    assert x.tolist() == [[1, 1, 1], [2, 3, 4]]


def test_setitem_errors():
    x = oplib.zeros(2, 3)
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0] = 1
    with pytest.raises(IndexError, match="an index can only have a single ellipsis"):
        x[..., ...] = 1
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        x[oplib.tensor([0.5])] = 1
    with pytest.raises(IndexError, match="only integers, slices"):
        x["a"] = 1
    with pytest.raises(IndexError, match="out of bounds"):
        x[5] = 1


def test_setitem_records_gradients():
    a = leaf([1.0, 2.0, 3.0])
    w = leaf([10.0])
    x = a * 1
    x[a > 1.5] = 0.0
    x[0:1] = w * 2
    (x * x).sum().backward()
    assert a.grad.tolist() == [0.0, 0.0, 0.0]
    assert w.grad.tolist() == [2 * 2 * 20.0]


def test_setitem_on_a_leaf_that_requires_grad_is_refused():
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        leaf([1.0])[0] = 2.0


def test_index_put_with_accumulate_and_repeated_indices():
    x = oplib.zeros(3, dtype=F64)
    idx = oplib.tensor([0, 0, 2])
    x.index_put_([idx], oplib.tensor([1.0, 2.0, 3.0], dtype=F64), True)
    assert x.tolist() == [3.0, 0.0, 3.0]
    with pytest.raises(
        RuntimeError, match="Index put requires the source and destination dtypes match"
    ):
        x.index_put_([idx], oplib.ones(3), False)


_SHAPE = (3, 4, 5)


@st.composite
def _keys(draw: st.DrawFn) -> tuple[Any, ...]:
    """Index keys for a (3, 4, 5) array: ints, slices, None, ..., int arrays and bool masks."""
    items: list[Any] = []
    dim = 0
    ellipsis = False
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "array", "mask"]))
        if kind == "none":
            items.append(None)
            continue
        if kind == "ellipsis":
            if not ellipsis:
                ellipsis = True
                items.append(Ellipsis)
            continue
        if dim >= len(_SHAPE):
            break
        n = _SHAPE[dim]
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.none() | st.integers(-n, n))
            stop = draw(st.none() | st.integers(-n, n))
            step = draw(st.none() | st.integers(1, 3))
            items.append(slice(start, stop, step))
        elif kind == "array":
            items.append(np.array(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))))
        else:
            items.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
        dim += 1
    return tuple(items)


def _torch_index(array: np.ndarray, key: tuple[Any, ...]) -> tuple[np.ndarray, tuple[Any, ...]]:
    """torch's indexing order in numpy: ``(view, rest)`` where ``view`` is ``array`` after
    the ints, slices, None and ... (basic indexing: a view) and ``rest`` indexes it with the
    index arrays. numpy alone treats ints as advanced indices, which places dims otherwise."""
    if not any(k is Ellipsis for k in key):
        key = (*key, Ellipsis)  # so that basic indexing gives a (0-d) view, never a scalar
    basic = tuple(slice(None) if isinstance(k, np.ndarray) else k for k in key)
    rest = tuple(
        k if isinstance(k, np.ndarray) or k is Ellipsis else slice(None)
        for k in key
        if not isinstance(k, int)
    )
    view = array[basic]
    # torch expands ``...`` before placing the advanced block: index arrays with only a
    # zero-dim ``...`` between them are adjacent (numpy would put their block first)
    at = next(i for i, k in enumerate(rest) if k is Ellipsis)
    whole = (slice(None),) * (view.ndim - len(rest) + 1)
    return view, rest[:at] + whole + rest[at + 1 :]


@settings(max_examples=150, deadline=None)
@given(_keys())
def test_setitem_agrees_with_torchs_indexing(key):
    start = np.arange(60, dtype=F64).reshape(_SHAPE)
    expected = start.copy()
    view, rest = _torch_index(expected, key)
    try:
        shape = view[rest].shape
    except IndexError:
        return  # the key itself is refused (index arrays that do not broadcast)
    value = -np.arange(int(np.prod(shape)), dtype=F64).reshape(shape) - 1
    view[rest] = value
    t = oplib.tensor(start.copy())
    t[tuple(oplib.tensor(k) if isinstance(k, np.ndarray) else k for k in key)] = oplib.tensor(value)
    np.testing.assert_array_equal(t.numpy(), expected)


def test_setitem_places_dims_as_torch_where_numpy_differs():
    """torch selects ints before advanced indexing; numpy treats them as advanced indices
    (``a[0, :, [1, 2]]`` is (4, 2) in torch, (2, 4) in numpy)."""
    t = oplib.zeros(3, 4, 5)
    t[0, :, oplib.tensor([1, 2])] = oplib.ones(4, 2)
    assert float(t.sum()) == 8.0
    u = oplib.zeros(3, 4, 5)
    u[:, oplib.tensor([0]), None, 0] = oplib.arange(3.0).reshape(3, 1, 1)
    assert u.numpy()[:, 0, 0].tolist() == [0.0, 1.0, 2.0]


def _is_mask(k: Any) -> bool:
    return type(k) is not slice and k.dtype == np.bool_


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(-3, 2), min_size=1, max_size=6),
    st.sampled_from(["rows", "cols", "mask"]),
    st.booleans(),
)
def test_writes_without_add_at_agree_with_numpy(rows, how, accumulate):
    """The standard-only path of index_put (no add.at, no writes at index arrays): the
    same result as numpy's add.at (accumulate) or setitem (the last repeated index wins)."""
    a = np.zeros((3, 4))
    key: tuple[Any, ...]
    if how == "rows":
        key = (np.array(rows),)
    elif how == "cols":
        key = (slice(None), np.array(rows) % 4)
    else:
        key = (np.array([r % 2 == 0 for r in rows[:3]] + [True] * (3 - len(rows[:3]))),)
    values = np.arange(a[key].size, dtype=F64).reshape(a[key].shape) + 1
    if accumulate:
        np.add.at(a, key, values)
    else:
        a[key] = values
    b = put_at(np, np.zeros((3, 4)), key, values, _is_mask, accumulate)
    np.testing.assert_allclose(b, a)


def test_writes_without_add_at_refuse_an_index_out_of_bounds():
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        put_at(np, np.zeros((3, 4)), (np.array([0, 3]),), np.ones(4), _is_mask, True)


def test_setitem_on_data_less_tensors():
    for make in (
        lambda: oplib.empty(3, 4, device="meta"),
        lambda: oplib.zeros(3, 4),  # under FakeTensorMode
    ):
        with oplib.FakeTensorMode():
            t = make()
            t[0] = 1.0
            t[:, 1:3] = 2.0
            t[1:, [0, 1]] = 3.0
            t[t > 0] = 4.0
            t += 1
            assert t._version == 5 and t.shape == (3, 4)
    m = oplib.empty(3, 4, device="meta")
    with pytest.raises(RuntimeError, match="the indexed positions depend on the mask's data"):
        m[oplib.empty(3, dtype=bool, device="meta"), 1:] = 1.0


def test_an_out_overload_keeps_its_packet_on_the_fast_path():
    """``exp`` beside ``exp.out``: calls without keywords can only mean ``exp``, so the
    packet shares ``exp``'s fast path; ``out=`` calls pick ``exp.out``."""
    from oplib_core.ops import OpOverloadPacket

    assert type(OPS.exp) is OpOverloadPacket and OPS.exp._only is OPS.exp.default
    assert type(OPS.add) is not OpOverloadPacket  # several positional overloads
    x = oplib.ones(3)
    out = oplib.empty(3)
    assert OPS.exp(x, out=out) is out
    assert OPS.sum(x, dtype=F64).dtype == F64  # keywords of the positional overload still work


def test_add_of_one_dtype_and_shape_writes_into_self_without_a_temporary():
    """numpy's (and cupy's) ufuncs write add_/sub_/mul_ straight into self: no result array
    the size of self is made and copied in (the autograd engine accumulates this way)."""
    import tracemalloc

    x = np.ones(1 << 20, np.float32)
    y = np.full(1 << 20, 2.0, np.float32)
    for op, want in (("add_", 3.0), ("mul_", 6.0), ("sub_", 4.0)):
        fn = getattr(oplib.ops.oplib, op).Tensor
        tracemalloc.start()
        try:
            assert fn(x, y) is x
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < x.nbytes // 4, (op, peak)
        np.testing.assert_array_equal(x, np.full(1 << 20, want, np.float32))


def test_direct_in_place_writes_give_the_functional_answers_on_overlap_and_other_dtypes():
    x = np.arange(6.0)
    oplib.ops.oplib.add_.Tensor(x[1:], x[:-1])  # overlapping: numpy reads before it writes
    np.testing.assert_array_equal(x, [0.0, 1.0, 3.0, 5.0, 7.0, 9.0])
    i = np.array([2**31 - 1, 5], np.int32)
    oplib.ops.oplib.add_.Tensor(i, np.ones(2, np.int32))  # wraps as torch's int32 add_
    np.testing.assert_array_equal(i, np.array([-(2**31), 6], np.int32))
    b = np.ones(3, oplib.bfloat16)  # ml_dtypes' format: the functional kernel's opmath
    oplib.ops.oplib.mul_.Tensor(b, np.full(3, 3.0, oplib.bfloat16))
    assert b.dtype == oplib.bfloat16 and b.astype(np.float32).tolist() == [3.0, 3.0, 3.0]
    f = np.ones(3, np.float32)  # another dtype: promotion checked as before
    oplib.ops.oplib.add_.Tensor(f, np.ones(3, np.float16))
    assert f.dtype == np.float32 and f.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError):
        oplib.ops.oplib.add_.Tensor(np.ones(3, np.int32), np.ones(3, np.float32))
