"""Named multi-output results (issue 14): an op whose schema names every return gives
``oplib.return_types.<ns>.<op>``, as torch's ``torch.max(x, 0)`` gives
``torch.return_types.max``.

torch 2.13, checked with a CPU wheel: ``torch.return_types.max`` is a tuple subclass
(``isinstance(r, tuple)``), ``r.values``/``r.indices`` are read-only ("readonly
attribute"), ``r[0:1]`` is a plain tuple, ``r == tuple(r)``; its repr is
``torch.return_types.max(\\nvalues=...,\\nindices=...)``; ``T((a, b))`` builds one,
``T((a,))`` raises "torch.return_types.max() takes a 2-sequence (1-sequence given)" and
``T(1)`` "constructor requires a sequence"; it pickles; ``n_fields`` is 2. torchgen gives
a named type only when every one of two or more returns is named.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._return_types import field_names

from helpers import compile_library, unique_ns
from subproc import run_python

TOPK = "topk(Tensor x, int k) -> (Tensor values, Tensor indices)"


def _topk(x, k):
    i = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, i, -1), i


def _define_topk(lib, ns):
    lib.define(TOPK)
    lib.impl("topk", _topk, "cpu")
    return getattr(oplib.ops, ns).topk


X = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])


# -- the type -----------------------------------------------------------------------------


def test_result_is_the_ops_named_tuple(lib, ns) -> None:
    topk = _define_topk(lib, ns)
    cls = getattr(oplib.return_types, ns).topk
    for _ in range(3):  # the slow path, then the fast path
        r = topk(oplib.tensor(X), 2)
        assert type(r) is cls and isinstance(r, tuple) and len(r) == 2
        assert type(r.values) is oplib.Tensor and type(r.indices) is oplib.Tensor
        assert np.array_equal(r.values.numpy(), [[3.0, 2.0], [5.0, 4.0]])
        assert np.array_equal(r.indices.numpy(), [[0, 2], [1, 2]])
        values, indices = r
        assert values is r.values is r[0] and indices is r.indices is r[-1]
    assert cls.__module__ == "oplib_core.return_types" and cls.__name__ == "topk"
    assert cls.__qualname__ == f"{ns}.topk" and cls.n_fields == cls.n_sequence_fields == 2
    assert cls.n_unnamed_fields == 0 and cls._fields == ("values", "indices")


def test_native_arrays_in_give_the_named_tuple_too(lib, ns) -> None:
    topk = _define_topk(lib, ns)
    for call in (topk, topk.default):
        for _ in range(3):
            r = call(X, 1)
            assert type(r) is getattr(oplib.return_types, ns).topk
            assert type(r.values) is np.ndarray and r.values.shape == (2, 1)


def test_keyword_only_defaults_on_the_fast_path(lib, ns) -> None:
    lib.define("top(Tensor x, *, int k=1) -> (Tensor values, Tensor indices)")
    lib.impl("top", lambda x, *, k: _topk(x, k), "cpu")
    top = getattr(oplib.ops, ns).top
    for _ in range(3):  # the fast path passes k=1 by keyword
        r = top(X)
        assert type(r) is getattr(oplib.return_types, ns).top and r.values.shape == (2, 1)
    assert top(X, k=2).values.shape == (2, 2)


def test_behaves_as_torchs_structseq(lib, ns) -> None:
    r = _define_topk(lib, ns)(X, 2)
    cls = type(r)
    assert r == tuple(r) and r[0:1] == (r.values,) and type(r[0:1]) is tuple
    assert repr(r) == (
        f"oplib_core.return_types.{ns}.topk(\nvalues={r.values!r},\nindices={r.indices!r})"
    )
    with pytest.raises(AttributeError):
        r.values = 1  # type: ignore[misc]
    assert cls((1, 2)) == (1, 2) and type(cls((1, 2))) is cls
    assert cls(iter([1, 2])) == (1, 2)
    with pytest.raises(TypeError, match=rf"{ns}\.topk\(\) takes a 2-sequence \(1-sequence given\)"):
        cls((1,))
    with pytest.raises(TypeError, match=r"takes a 2-sequence \(3-sequence given\)"):
        cls((1, 2, 3))
    with pytest.raises(TypeError, match="constructor requires a sequence"):
        cls(1)
    match r:
        case cls(values=v, indices=i):
            assert v is r.values and i is r.indices
        case _:
            pytest.fail("the type has no __match_args__")


def test_namedtuple_api(lib, ns) -> None:
    cls = type(_define_topk(lib, ns)(X, 1))
    r = cls(1, 2)
    assert r == cls(values=1, indices=2) == cls(1, indices=2) == cls._make([1, 2])
    assert r._asdict() == {"values": 1, "indices": 2}
    assert r._replace(indices=3) == (1, 3) and type(r._replace(indices=3)) is cls
    with pytest.raises(ValueError, match="unexpected field names: \\['other'\\]"):
        r._replace(other=1)
    with pytest.raises(TypeError, match=r"takes a 2-sequence or 2 fields \(3 given\)"):
        cls(1, 2, 3)
    with pytest.raises(TypeError, match="missing field 'indices'"):
        cls(1, other=2)


def test_pickle_and_copy_keep_the_type(lib, ns) -> None:
    r = _define_topk(lib, ns)(oplib.tensor(X), 2)
    for back in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert type(back) is type(r)
        assert np.array_equal(back.values.numpy(), r.values.numpy())
    assert pickle.loads(pickle.dumps(type(r))) is type(r)  # the class, by reference


def test_unpickled_where_the_op_is_not_defined_is_still_named(lib, ns) -> None:
    r = _define_topk(lib, ns)(X, 2)
    out = run_python(
        f"""
        import pickle
        r = pickle.loads({pickle.dumps(r)!r})
        OUT["type"] = type(r).__qualname__
        OUT["fields"] = list(type(r)._fields)
        OUT["values"] = r.values.tolist()
        OUT["tuple"] = isinstance(r, tuple)
        """
    )
    assert out == {
        "type": f"{ns}.topk",
        "fields": ["values", "indices"],
        "values": [[3.0, 2.0], [5.0, 4.0]],
        "tuple": True,
    }


# -- which ops get one --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returns", "expected"),
    [
        ("(Tensor values, Tensor indices)", ("values", "indices")),
        ("(Tensor a, Tensor[] b, int c)", ("a", "b", "c")),
        ("(Tensor values, Tensor)", None),  # only some named: torch's codegen refuses it
        ("(Tensor, Tensor)", None),
        ("(Tensor out)", None),  # one return: the Tensor itself
        ("((Tensor))", None),
        ("()", None),
        ("(Tensor n_fields, Tensor b)", None),  # would hide the type's own attributes
        ("(Tensor _a, Tensor b)", None),
    ],
)
def test_field_names_rule(returns, expected) -> None:
    assert field_names(oplib.parse_schema(f"ns::f(Tensor x) -> {returns}")) == expected


def test_unnamed_and_partly_named_returns_give_a_plain_tuple(lib, ns) -> None:
    lib.define("plain(Tensor x) -> (Tensor, Tensor)")
    lib.define("partly(Tensor x) -> (Tensor values, Tensor)")
    lib.define("one(Tensor x) -> (Tensor out)")
    for name in ("plain", "partly"):
        lib.impl(name, lambda x: (x, x + 1), "cpu")
        for _ in range(2):
            assert type(getattr(oplib.ops, ns).__getattr__(name)(X)) is tuple
            assert type(getattr(getattr(oplib.ops, ns), name)(oplib.tensor(X))) is tuple
    lib.impl("one", lambda x: x + 1, "cpu")
    assert type(getattr(oplib.ops, ns).one(oplib.tensor(X))) is oplib.Tensor
    with pytest.raises(AttributeError, match=f"no namespace {ns!r}"):
        getattr(oplib.return_types, ns)


def test_overloads_share_the_type_when_their_fields_agree(lib, ns) -> None:
    lib.define(TOPK)
    lib.define("topk.dim(Tensor x, int k, int dim) -> (Tensor values, Tensor indices)")
    lib.define("topk.other(Tensor x) -> (Tensor top, Tensor where)")
    lib.impl("topk", _topk, "cpu")
    lib.impl("topk.dim", lambda x, k, dim: _topk(x, k), "cpu")
    lib.impl("topk.other", lambda x: _topk(x, 1), "cpu")
    space = getattr(oplib.return_types, ns)
    packet = getattr(oplib.ops, ns).topk
    assert type(packet(X, 1)) is type(packet.dim(X, 1, -1)) is space.topk
    other = packet.other(X)
    assert type(other) is space.topk_other and other.top.shape == (2, 1)
    assert dir(space) == ["topk", "topk_other"] and ns in dir(oplib.return_types)
    with pytest.raises(
        AttributeError, match=rf"no op {ns}::sort .*\(types here: topk, topk_other\)"
    ):
        space.sort  # noqa: B018


def test_the_public_module_hides_no_namespace() -> None:
    # a namespace may be called anything but a dunder: the module holds nothing else
    names = [k for k in vars(oplib.return_types) if k.isidentifier()]  # (not pytest's "@py_...")
    assert [k for k in names if not k.startswith("__")] == []
    lib = oplib.Library("annotations", "FRAGMENT")
    try:
        lib.define("f(Tensor x) -> (Tensor a, Tensor b)")
        assert oplib.return_types.annotations.f._fields == ("a", "b")
    finally:
        lib._destroy()


def test_the_type_goes_with_the_op(ns) -> None:
    lib = oplib.Library(ns, "DEF")
    lib.define(TOPK)
    lib.define("topk.dim(Tensor x, int k, int dim) -> (Tensor values, Tensor indices)")
    cls = getattr(oplib.return_types, ns).topk
    lib._destroy()
    with pytest.raises(AttributeError, match=f"no namespace {ns!r}"):
        getattr(oplib.return_types, ns)
    lib = oplib.Library(ns, "DEF")
    try:
        lib.define("topk(Tensor x, int k) -> (Tensor top, Tensor where)")
        lib.impl("topk", _topk, "cpu")
        new = getattr(oplib.return_types, ns).topk
        assert new is not cls and new._fields == ("top", "where")
        assert type(getattr(oplib.ops, ns).topk(X, 1)) is new
    finally:
        lib._destroy()


def test_destroying_one_overload_keeps_the_shared_type(ns, teardown) -> None:
    base = oplib.Library(ns, "DEF")
    teardown(base)
    base.define(TOPK)
    extra = oplib.Library(ns, "FRAGMENT")
    extra.define("topk.dim(Tensor x, int k, int dim) -> (Tensor values, Tensor indices)")
    cls = getattr(oplib.return_types, ns).topk
    extra._destroy()
    assert getattr(oplib.return_types, ns).topk is cls


# -- every path ---------------------------------------------------------------------------


def test_kernels_returning_lists_tensors_or_the_type_itself(lib, ns) -> None:
    lib.define("as_list(Tensor x) -> (Tensor a, Tensor b)")
    lib.define("as_tensors(Tensor x) -> (Tensor a, Tensor b)")
    lib.define("as_named(Tensor x) -> (Tensor a, Tensor b)")
    lib.impl("as_list", lambda x: [x, x + 1], "cpu")
    lib.impl("as_tensors", lambda x: (oplib.tensor(x), oplib.tensor(x + 1)), "cpu")
    space = getattr(oplib.return_types, ns)
    lib.impl("as_named", lambda x: space.as_named((x, x + 1)), "cpu")
    ops = getattr(oplib.ops, ns)
    for name in ("as_list", "as_tensors", "as_named"):
        for _ in range(3):
            r = getattr(ops, name)(X)
            assert type(r) is getattr(space, name) and type(r.b) is np.ndarray
            assert np.array_equal(r.b, X + 1)
            t = getattr(ops, name)(oplib.tensor(X))
            assert type(t) is getattr(space, name) and type(t.b) is oplib.Tensor


def test_wrong_kernel_result_keeps_its_error(lib, ns) -> None:
    lib.define("bad(Tensor x) -> (Tensor a, Tensor b)")
    lib.impl("bad", lambda x: (x,), "cpu")
    with pytest.raises(oplib.errors.KernelResultError, match="expected a tuple of 2"):
        getattr(oplib.ops, ns).bad(X)


def test_decomposition_result_is_named(lib, ns) -> None:
    lib.define("split2(Tensor x) -> (Tensor head, Tensor tail)")
    core = oplib.ops.oplib

    def split2(x):
        return [core.mul.Scalar(x, 2.0), core.neg(x)]

    lib.impl("split2", split2, "CompositeImplicitAutograd")
    r = getattr(oplib.ops, ns).split2(oplib.tensor(X))
    assert type(r) is getattr(oplib.return_types, ns).split2
    assert np.array_equal(r.tail.numpy(), -X)


def test_autograd_through_the_named_fields(lib, ns) -> None:
    topk = _define_topk(lib, ns)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output.indices)
        ctx.shape = inputs[0].shape

    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        g = np.zeros(ctx.shape)
        np.put_along_axis(g, indices.numpy(), grad_values.numpy(), -1)
        return oplib.tensor(g), None

    oplib.register_autograd(f"{ns}::topk", backward, setup_context=setup_context)
    x = oplib.tensor(X, requires_grad=True)
    for _ in range(2):
        r = topk(x, 2)
        assert type(r) is getattr(oplib.return_types, ns).topk
        assert r.values.requires_grad and r.values.grad_fn is not None
        assert not r.indices.requires_grad  # integer output
    oplib.ops.oplib.sum(r.values).backward()
    assert np.array_equal(x.grad.numpy(), [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])


def test_custom_op_with_named_schema(ns, teardown) -> None:
    @oplib.custom_op(
        f"{ns}::minmax", mutates_args=(), schema="(Tensor x) -> (Tensor low, Tensor high)"
    )
    def minmax(x):
        return x.min(-1), x.max(-1)

    teardown(minmax)
    seen = []
    minmax.register_autograd(
        lambda ctx, g_low, g_high: g_low,
        setup_context=lambda ctx, inputs, output: seen.append(output.high),
    )
    cls = getattr(oplib.return_types, ns).minmax
    assert type(minmax(X)) is cls and np.array_equal(minmax(X).high, [3.0, 5.0])
    r = minmax(oplib.tensor(X, requires_grad=True))
    assert type(r) is cls and seen[0] is r.high  # setup_context sees the named tuple


def _fake_topk(x, k):
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=np.int64)


def test_fake_mode_and_meta_give_the_named_tuple(lib, ns) -> None:
    topk = _define_topk(lib, ns)
    oplib.register_fake(f"{ns}::topk", _fake_topk, lib=lib)
    cls = getattr(oplib.return_types, ns).topk
    with oplib.FakeTensorMode() as mode:
        for _ in range(2):
            r = topk(mode.from_real(X), 2)
            assert type(r) is cls and r.values.shape == (2, 2) and r.indices.dtype == np.int64
            n = topk(mode.from_real(X).native, 1)  # data-less native arrays in
            assert type(n) is cls and n.values.shape == (2, 1)
    pytest.importorskip("oplib_meta")
    for _ in range(2):
        m = topk(oplib.empty(4, 5, device="meta"), 3)
        assert type(m) is cls and m.values.shape == (4, 3) and str(m.values.device) == "meta"


def test_fake_decomposition_is_named(lib, ns) -> None:
    lib.define("split2(Tensor x) -> (Tensor head, Tensor tail)")
    core = oplib.ops.oplib
    lib.impl("split2", lambda x: (core.neg(x), core.neg(x)), "CompositeImplicitAutograd")
    with oplib.FakeTensorMode() as mode:
        r = getattr(oplib.ops, ns).split2(mode.from_real(X))
    assert type(r) is getattr(oplib.return_types, ns).split2 and r.head.shape == (2, 3)


def test_dask_kernel_results_are_named_and_compute_keeps_the_type(lib, ns) -> None:
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    pytest.importorskip("oplib_dask")
    lib.define("frexp(Tensor x) -> (Tensor mantissa, Tensor exponent)")
    lib.impl("frexp", lambda x: tuple(np.frexp(x)), "cpu")

    def dask_frexp(x):  # each chunk through the op: the tasks return the named tuple
        op = getattr(oplib.ops, ns).frexp
        m = x.map_blocks(lambda b: op(b).mantissa, dtype=x.dtype)
        e = x.map_blocks(lambda b: op(b).exponent, dtype=np.int32)
        return m, e

    lib.impl("frexp", dask_frexp, "dask")
    cls = getattr(oplib.return_types, ns).frexp
    x = da.from_array(np.arange(1.0, 13.0).reshape(3, 4), chunks=(2, 2))
    r = getattr(oplib.ops, ns).frexp(x)
    assert type(r) is cls and type(r.mantissa) is type(x)
    (computed,) = dask.compute(r, scheduler="sync")
    assert type(computed) is cls
    m, e = np.frexp(np.arange(1.0, 13.0).reshape(3, 4))
    assert np.array_equal(computed.mantissa, m) and np.array_equal(computed.exponent, e)
    t = getattr(oplib.ops, ns).frexp(oplib.tensor(x))
    assert type(t) is cls and type(t.exponent) is oplib.Tensor


SPLIT_LIB = r"""
#include "oplib.h"

/* split(Tensor x) -> (Tensor head, Tensor tail): x and -x, 1-d float64 */
static int split(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  const double *px = (const double *)((const char *)x->data + x->byte_offset);
  for (int64_t i = 0; i < x->shape[0]; i++) {
    ((double *)outs[0].data)[i] = px[i * x->strides[0]];
    ((double *)outs[1].data)[i] = -px[i * x->strides[0]];
  }
  return OPLIB_OK;
}

static int split_shape(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                       oplib_error *err) {
  for (int j = 0; j < 2; j++) {
    o[j].ndim = 1;
    o[j].dtype = a[0].v.tensor->dtype;
    o[j].shape[0] = a[0].v.tensor->shape[0];
  }
  return OPLIB_OK;
}

OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::split", "(Tensor x) -> (Tensor head, Tensor tail)")) return 1;
  if (api->impl(c, "{ns}::split", "cpu", split)) return 1;
  if (api->register_shape_fn(c, "{ns}::split", split_shape)) return 1;
  return 0;
}
"""


def test_native_c_kernel_results_are_named(tmp_path) -> None:
    ns = unique_ns("native")
    oplib.ops.load_library(compile_library(SPLIT_LIB.replace("{ns}", ns), tmp_path))
    cls = getattr(oplib.return_types, ns).split
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(3):
        r = getattr(oplib.ops, ns).split(x)
        assert type(r) is cls and np.array_equal(r.tail, -x) and np.array_equal(r.head, x)
        t = getattr(oplib.ops, ns).split(oplib.tensor(x))
        assert type(t) is cls and np.array_equal(t.tail.numpy(), -x)


# -- any schema ---------------------------------------------------------------------------

_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 4),
    names=st.lists(
        st.one_of(st.none(), _NAME, st.sampled_from(["n_fields", "_x", "values", "count"])),
        min_size=4,
        max_size=4,
    ),
)
def test_any_returns(n, names) -> None:
    names = names[:n]
    given_names = [x for x in names if x is not None]
    if len(set(given_names)) != len(given_names):
        return  # duplicate return names: a SchemaError, tested in test_schema
    ns = unique_ns()
    rets = ", ".join(f"Tensor {x}" if x else "Tensor" for x in names)
    lib = oplib.Library(ns, "DEF")
    try:
        lib.define(f"f(Tensor x) -> ({rets})")
        lib.impl("f", lambda x: tuple(x + i for i in range(n)) if n > 1 else x, "cpu")
        op = getattr(oplib.ops, ns).f
        named = n >= 2 and all(x is not None and x[0] != "_" and x != "n_fields" for x in names)
        for arg in (X, oplib.tensor(X), X):
            r = op(arg)
            if n == 1:
                assert not isinstance(r, tuple)
                continue
            assert type(r) is (getattr(oplib.return_types, ns).f if named else tuple)
            assert len(r) == n
            if named:
                for i, x in enumerate(names):
                    assert getattr(r, x) is r[i]
                assert type(pickle.loads(pickle.dumps(r))) is type(r)
    finally:
        lib._destroy()
    if named:
        assert ns not in dir(oplib.return_types)


def test_control_flow_keeps_named_results(lib, ns) -> None:
    topk = _define_topk(lib, ns)
    oplib.register_fake(f"{ns}::topk", _fake_topk, lib=lib)
    cls = getattr(oplib.return_types, ns).topk
    x = oplib.tensor(X)
    r = oplib.cond(oplib.tensor(np.array(True)), lambda a: topk(a, 2), lambda a: topk(-a, 2), (x,))
    assert type(r) is cls and np.array_equal(r.values.numpy(), [[3.0, 2.0], [5.0, 4.0]])
    m = oplib.map(lambda row: topk(row, 1), x)
    assert type(m) is cls and m.values.shape == (2, 1) and m.indices.shape == (2, 1)

    def combine(carry, row):
        r = topk(row, 1)
        return carry + r.values, r

    _, ys = oplib.scan(combine, oplib.tensor(np.zeros(1)), x)
    assert type(ys) is cls and ys.indices.shape == (2, 1)
    with (
        oplib.FakeTensorMode() as mode,
        pytest.raises(
            oplib.ControlFlowError, match=r"true_fn is topk\(values=\*, indices=\*\)"
        ) as e,
    ):
        oplib.cond(
            mode.from_real(np.array(True)),
            lambda a: topk(a, 2),
            lambda a: tuple(topk(a, 2)),
            (mode.from_real(X),),
        )
    assert "false_fn is (*, *)" in str(e.value)
