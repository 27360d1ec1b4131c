"""Tensor's methods (issue 14): one per core op, generated from the op set so it cannot drift,
and torch's conveniences (``to`` forms, casts, ``T``/``mT``, ``new_*``, iteration,
``__contains__``, the one-element conversions, ``__format__``, storage facts). Errors are
torch 2.13's, checked against it."""

from __future__ import annotations

import ast
import inspect
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oplib_core as oplib
from oplib_core._opset import CORE_OPS, CoreOp
from oplib_core._registry.registry import REGISTRY
from oplib_core._registry.startup import ensure
from oplib_core._tensor import methods as _tensor_methods
from oplib_core._tensor import tensor as _tensor
from oplib_core.testing._core_samples import CORE_SAMPLES

Tensor = oplib.Tensor
CPU = oplib.device("cpu")


def _installed(device: str) -> None:
    if device not in {b.name for b in oplib.backends.list()}:
        pytest.skip(f"{device} is not installed")


# -- a method for every core op ------------------------------------------------------------


def test_every_oplib_op_with_a_tensor_first_argument_has_a_method_or_a_reason():
    ensure()
    missing = []
    for qualname, entry in list(REGISTRY.ops.items()):
        ns, _, name = qualname.partition("::")
        args = entry.schema.arguments
        if ns != "oplib" or not args or str(args[0].type) != "Tensor":
            continue
        base = name.partition(".")[0]
        if base not in _tensor_methods.NO_METHOD and not hasattr(Tensor, base):
            missing.append(qualname)
    assert not missing, f"core ops without a Tensor method or a NO_METHOD reason: {missing}"


def test_no_method_lists_only_real_ops_without_methods():
    ensure()
    bases = {q.partition("::")[2].partition(".")[0] for q in REGISTRY.ops if q[:7] == "oplib::"}
    for name in _tensor_methods.NO_METHOD:
        assert name in bases, f"NO_METHOD names {name!r}, which is no oplib op"
        assert not hasattr(Tensor, name)


def test_type_checkers_see_exactly_the_installed_methods():
    # The TYPE_CHECKING declarations in class Tensor must match what install() sets.
    tree = ast.parse(inspect.getsource(_tensor))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    block = next(
        n for n in cls.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    declared = {n.name for n in block.body if isinstance(n, ast.FunctionDef)}
    assert declared == {*_tensor_methods.generated_method_names(), "new_tensor"}


def test_the_schema_text_check_agrees_with_the_parser():
    for op in CORE_OPS:
        first = oplib.parse_schema(op.schema).arguments[0]
        parsed = str(first.type) == "Tensor" and first.name == "self" and not first.kwarg_only
        assert bool(_tensor_methods._SELF_FIRST.search(op.schema)) == parsed, op.schema


def test_generation_follows_the_op_set(monkeypatch):
    extra = CoreOp("oplib::frobnicate(Tensor self) -> Tensor")
    monkeypatch.setattr(_tensor_methods, "CORE_OPS", (*CORE_OPS, extra))
    assert "frobnicate" in _tensor_methods.generated_method_names()
    # ops whose first argument is not ``self`` (where's is the condition) are not generated
    assert "where" not in _tensor_methods.generated_method_names()
    assert "cat" not in _tensor_methods.generated_method_names()


def _samples_of(name: str):
    for overload, make in CORE_SAMPLES.items():
        if overload.partition(".")[0] == name:
            for sample in make(CPU):
                yield overload, sample


@pytest.mark.parametrize("name", _tensor_methods.generated_method_names())
def test_generated_method_calls_the_op(name):
    samples = list(_samples_of(name))
    assert samples, f"no sample inputs for {name}"
    for overload, sample in samples:
        op = oplib.lookup(f"oplib::{overload}")
        first, *rest = sample.args
        expected = op(first.detach().clone(), *rest, **sample.kwargs)
        got = getattr(first.detach().clone(), name)(*rest, **sample.kwargs)
        if isinstance(expected, list):  # a Tensor[] return (split_with_sizes, chunk)
            assert type(got) is list and len(got) == len(expected)
        else:
            got, expected = [got], [expected]
        for g, e in zip(got, expected, strict=True):
            assert type(g) is Tensor
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(
                g.detach().numpy(), e.detach().numpy(), err_msg=sample.name
            )


def test_generated_method_records_gradients_as_torch_writes_formulas():
    x = oplib.tensor([0.1, -0.5, 2.0], requires_grad=True)
    y = x.tanh()
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), (1 - y.detach() ** 2).numpy(), rtol=1e-6)
    assert x.tanh.__doc__ is not None and "oplib::tanh(Tensor self) -> Tensor" in x.tanh.__doc__


def test_scalar_and_tensor_overloads_share_one_method():
    t = oplib.tensor([1.0, 2.0])
    assert t.add(1.0).tolist() == [2.0, 3.0]
    assert t.add(t).tolist() == [2.0, 4.0]
    assert t.pow(2).tolist() == [1.0, 4.0]
    assert t.eq(2.0).tolist() == [False, True]
    with pytest.raises(TypeError, match=r"oplib::add\(\): no overload matches"):
        t.add("x")


def test_hand_written_methods_take_torch_forms():
    t = oplib.tensor(np.arange(6.0).reshape(2, 3))
    assert t.permute(1, 0).shape == (3, 2) and t.permute((1, 0)).shape == (3, 2)
    assert t.sum(1).tolist() == [3.0, 12.0] and t.amax(1).tolist() == [2.0, 5.0]
    assert t.where(t > 2, 0.0).tolist() == [[0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]
    assert t.where(t > 2, -t).tolist() == [[-0.0, -1.0, -2.0], [3.0, 4.0, 5.0]]
    # the scalar is weak: a float32 tensor stays float32, an int one takes the float
    assert t.float().where(t > 2, 0.5).dtype == np.float32
    assert oplib.tensor([1, 2]).where(oplib.tensor([True, False]), 0.5).tolist() == [1.0, 0.5]


# -- to() and the casts --------------------------------------------------------------------


def test_to_takes_a_dtype_first():
    t = oplib.tensor([1.5, 2.5])
    assert t.to(oplib.float64).dtype == np.float64
    assert t.to(np.int32).dtype == np.int32
    assert t.to("cpu", oplib.float64).dtype == np.float64
    assert t.to(None, "float16").dtype == np.float16  # what oplib.tensor(..., dtype=) passes
    assert t.to(device="cpu", dtype=oplib.int64).tolist() == [1, 2]
    assert t.to(oplib.float32) is t and t.to(oplib.float32, copy=True) is not t


def test_to_another_tensor_takes_its_dtype_and_device():
    _installed("meta")
    t = oplib.tensor([1.0, 2.0])
    other = oplib.tensor([1], dtype=oplib.int32)
    assert t.to(other).dtype == np.int32
    assert t.type_as(other).tolist() == [1, 2]
    m = t.to(oplib.empty(1, device="meta", dtype=oplib.float64))
    assert m.is_meta and m.dtype == np.float64


@pytest.mark.parametrize(
    ("args", "kwargs", "given"),
    [
        ((np.float64, np.float32), {}, r"\(dtype, dtype\)"),
        (("cpu",), {"device": "cpu"}, r"\(str, device=str\)"),
        ((oplib.float64,), {"dtype": oplib.float32}, r"\(dtype, dtype=dtype\)"),
    ],
)
def test_to_refuses_combinations_torch_refuses(args, kwargs, given):
    with pytest.raises(TypeError, match=r"to\(\) received an invalid combination of arguments"):
        oplib.tensor([1.0]).to(*args, **kwargs)
    with pytest.raises(TypeError, match=given):
        oplib.tensor([1.0]).to(*args, **kwargs)


def test_to_with_a_tensor_and_more_is_refused():
    t = oplib.tensor([1.0])
    with pytest.raises(TypeError, match=r"expected a dtype \(numpy dtype, scalar type or name\)"):
        t.to("cpu", "cpu")
    with pytest.raises(TypeError, match=r"got \(Tensor, dtype=dtype\)"):
        t.to(t, dtype=oplib.float64)


def test_casts():
    t = oplib.tensor([1.7, -2.2, 0.0], requires_grad=True)
    assert t.float() is t  # already float32
    assert t.double().dtype == np.float64 and t.double().grad_fn is not None
    assert t.half().dtype == np.float16
    assert t.long().tolist() == [1, -2, 0] and t.long().dtype == np.int64
    assert t.int().dtype == np.int32
    assert t.bool().tolist() == [True, True, False]


# -- T, mT, factories ----------------------------------------------------------------------


def test_T_and_mT():
    t = oplib.zeros(3, 4, 5)
    assert t.T.shape == (5, 4, 3)
    assert t.mT.shape == (3, 5, 4)
    x = oplib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x.mT.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    with pytest.raises(RuntimeError, match=r"tensor.mT is only supported on matrices .* 1-D"):
        _ = oplib.zeros(3).mT


def test_new_factories_keep_dtype_and_device():
    t = oplib.tensor([1, 2], dtype=oplib.int32)
    assert t.new_zeros(2, 3).tolist() == [[0, 0, 0], [0, 0, 0]]
    assert t.new_zeros((2, 3)).dtype == np.int32
    assert t.new_ones(2, dtype=oplib.float64).tolist() == [1.0, 1.0]
    assert t.new_ones(2, dtype=oplib.float64).dtype == np.float64
    assert t.new_full((2,), 7).tolist() == [7, 7] and t.new_full((2,), 7).dtype == np.int32
    assert t.new_empty(4).shape == (4,)
    n = t.new_tensor([1.5, 2.5])
    assert n.dtype == np.int32 and n.tolist() == [1, 2]  # torch: self's dtype, values cast


def test_new_tensor_copies_and_leaves_the_graph():
    src = oplib.tensor([1.0, 2.0], requires_grad=True)
    n = src.new_tensor(src)
    assert n.is_leaf and not n.requires_grad
    arr = np.array([1.0, 2.0], dtype=np.float32)
    m = src.new_tensor(arr)
    arr[0] = 9.0
    assert m.tolist() == [1.0, 2.0]


def test_new_factories_on_meta():
    _installed("meta")
    t = oplib.empty(2, device="meta")
    z = t.new_zeros(3)
    assert z.is_meta and z.shape == (3,) and not z.is_cuda


# -- iteration, membership, one-element conversions ----------------------------------------


def test_iteration_gives_rows_with_gradients():
    x = oplib.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    rows = list(x)
    assert [r.tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    (rows[0].sum() + 3 * rows[2].sum()).backward()
    assert x.grad is not None
    assert x.grad.tolist() == [[1.0, 1.0], [0.0, 0.0], [3.0, 3.0]]
    assert [r.item() for r in oplib.tensor([7, 8])] == [7, 8]  # 1-d: 0-d rows
    assert list(oplib.zeros(0, 2)) == []


def test_iteration_on_meta_and_over_a_0d_tensor():
    _installed("meta")
    assert [r.shape for r in oplib.empty(2, 3, device="meta")] == [(3,), (3,)]
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(oplib.tensor(1.0))


@given(
    arr=hnp.arrays(
        st.sampled_from([np.float64, np.int64, np.bool_]),
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
    ),
    value=st.integers(-3, 3) | st.floats(-3, 3, allow_nan=False) | st.booleans(),
)
def test_rows_and_membership_agree_with_numpy(arr, value):
    t = oplib.tensor(arr)
    rows = list(t)
    assert len(rows) == len(arr)
    for row, expected in zip(rows, arr, strict=True):
        assert row.shape == expected.shape and row.dtype == arr.dtype
        np.testing.assert_array_equal(row.numpy(), expected)
    assert (value in t) == bool((arr == value).any())


@given(
    value=st.floats(allow_nan=False, allow_infinity=False, width=64) | st.integers(-(10**6), 10**6),
    spec=st.sampled_from(["", ".2f", ">10", "+.3e", "^8.1f", "g"]),
    shape=st.sampled_from([(), (1,), (1, 1)]),
)
def test_format_of_one_element_is_the_value_format(value, spec, shape):
    arr = np.full(shape, value, dtype=np.float64 if isinstance(value, float) else np.int64)
    t = oplib.tensor(arr)
    assert format(t, spec) == (repr(t) if spec == "" else format(arr.item(), spec))


def test_contains():
    t = oplib.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert 2.0 in t and 4 in t and 5 not in t
    assert oplib.tensor(3.0) in t
    assert 1 not in oplib.tensor([])
    with pytest.raises(RuntimeError, match=r"__contains__ only supports Tensor or scalar.*str"):
        "a" in t  # noqa: B015


def test_one_element_conversions():
    assert float(oplib.tensor([2.5])) == 2.5 and int(oplib.tensor([[7]])) == 7
    assert bool(oplib.tensor([0.0])) is False
    assert [10, 20, 30][oplib.tensor(1)] == 20 and range(5)[oplib.tensor([2])] == 2
    assert oplib.tensor(True).__index__() == 1


@pytest.mark.parametrize("data", [[1.0, 2.0], []])
def test_conversions_of_other_than_one_element_are_torch_errors(data):
    t = oplib.tensor(data)
    amount = "more than one value" if data else "no values"
    with pytest.raises(RuntimeError, match=f"Boolean value of Tensor with {amount} is ambiguous"):
        bool(t)
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python"):
        float(t)
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python"):
        int(t)
    with pytest.raises(RuntimeError, match=f"a Tensor with {len(data)} elements cannot be"):
        t.item()


def test_index_wants_an_integer():
    with pytest.raises(TypeError, match="only integer tensors of a single element can be"):
        [1, 2][oplib.tensor(1.0)]
    with pytest.raises(TypeError, match="only integer tensors of a single element can be"):
        oplib.tensor([0, 1]).__index__()


def test_format():
    assert f"{oplib.tensor(1.5):.2f}" == "1.50"
    assert f"{oplib.tensor([math.pi]):.3f}" == "3.142"  # one element (torch: 0-d only)
    assert f"{oplib.tensor(7):>4}" == "   7"
    t = oplib.tensor([1.0, 2.0])
    assert f"{t}" == repr(t)
    with pytest.raises(TypeError, match=r"unsupported format string passed to Tensor\.__format__"):
        f"{t:.2f}"


def test_format_of_a_fake_tensor_says_it_has_no_data():
    _installed("meta")
    m = oplib.empty((), device="meta")
    assert f"{m}" == repr(m)
    with pytest.raises(oplib.DataAccessError, match=r"Tensor\.item\(\)"):
        f"{m:.2f}"


# -- storage facts -------------------------------------------------------------------------


def test_storage_facts():
    t = oplib.tensor(np.zeros((2, 3), dtype=np.float64))
    assert t.element_size() == 8 and t.nbytes == 48 and t.ndim == 2 and t.numel() == 6
    assert t.stride() == (3, 1) and t.stride(0) == 3 and t.stride(-1) == 1
    assert t.T.stride() == (1, 3)  # numpy's transpose is a view
    assert not t.is_cuda and not t.is_meta
    with pytest.raises(IndexError, match=r"Dimension out of range .*\[-2, 1\], but got 2"):
        t.stride(2)


def test_stride_of_fake_tensors_is_contiguous():
    _installed("meta")
    m = oplib.empty(2, 3, 4, device="meta")
    assert m.is_meta and m.stride() == (12, 4, 1) and m.stride(1) == 4
    assert m.nbytes == 96 and m.element_size() == 4


def test_stride_where_the_backend_has_none():
    _installed("dask")
    t = oplib.tensor([1.0, 2.0]).to("dask")
    assert t.element_size() == 4 and t.nbytes == 8
    with pytest.raises(RuntimeError, match=r"stride\(\): tensors on the dask device have no"):
        t.stride()


def test_generated_method_finds_a_packet_the_namespace_dropped(monkeypatch):
    # The namespace drops a packet when its op's registration changes; the method makes it
    # again through the namespace instead of keeping a stale one.
    namespace = oplib.ops.oplib
    namespace.tanh  # noqa: B018 (make the packet)
    monkeypatch.delitem(namespace.__dict__, "tanh")
    assert oplib.tensor([0.0]).tanh().tolist() == [0.0]
    assert "tanh" in namespace.__dict__


def test_typing_example_of_tensor_methods_runs():
    # mypy and basedpyright check it with the project (pyproject.toml includes tests/typing)
    script = Path(__file__).parent / "typing" / "tensor_examples.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
