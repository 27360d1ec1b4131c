"""Calls with keyword-only arguments (``t.sum(dtype=oplib.float64)``, ``t.to(oplib.float64)``'s
``_to_copy(t, dtype=..., device=None)``) take the dispatcher's cached call (issue 30): the
values key a cache of their own (``OpCache.keyed``) whose kernels carry them as their
keyword-only defaults. Values that could compare equal while being different (floats,
dtypes with metadata) are not keys: those calls take the slow path, as every such call
did before."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._dispatch import fastpath
from oplib_core._dispatch.binding import Binder, Signature, keyword_split
from oplib_core._schema import parse_schema

FLOAT64 = np.dtype("float64")

# -- keyword_split against binding, on schemas hypothesis writes --------------------------------

#: keyword-only kinds: (schema type, default, values a call gives, whether they key a cache)
_KW = {
    "int": ("1", [2, -1], True),
    "bool": ("False", [True], True),
    "str": ("'a'", ["b"], True),
    "ScalarType?": ("None", [oplib.float64, oplib.int8, None], True),
    "Scalar": ("1", [2, True], True),
    "float": ("1.0", [0.5, -0.0], False),
    "Device?": ("None", [None], True),
}


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, tuple[object, ...], dict[str, object], set[str]]:
    """A schema (``Tensor x``, an optional ``int p``, one to three keyword-only arguments)
    and a call of it giving some keyword-only ones, ``p`` perhaps by keyword; and the names
    of the keyword-only arguments given whose values cannot key a cache."""
    kinds = draw(st.lists(st.sampled_from(sorted(_KW)), min_size=1, max_size=3, unique=True))
    kw = [f"{k} k{i}={_KW[k][0]}" for i, k in enumerate(kinds)]
    schema = f"f(Tensor x, int p=0, *, {', '.join(kw)}) -> Tensor"
    args: tuple[object, ...] = (np.ones(1),)
    kwargs: dict[str, object] = {}
    if draw(st.booleans()):
        if draw(st.booleans()):
            kwargs["p"] = 3
        else:
            args += (3,)
    unkeyable = set()
    for i, k in enumerate(kinds):
        if draw(st.booleans()):
            kwargs[f"k{i}"] = draw(st.sampled_from(_KW[k][1]))
            if not _KW[k][2]:
                unkeyable.add(f"k{i}")
    return schema, args, kwargs, unkeyable


@given(calls())
def test_keyword_split_gives_what_binding_binds_or_leaves_the_call_to_it(case) -> None:
    schema_text, args, kwargs, unkeyable = case
    schema = parse_schema(schema_text)
    sig = Signature(schema, "t::f")
    bound_args, bound_kwargs = Binder(schema, "t::f").bind(args, kwargs)
    split = keyword_split(args, kwargs, sig.params, sig.kwkeys)
    kwonly = {k: v for k, v in kwargs.items() if k != "p"}
    if unkeyable or not kwonly:
        assert split is None
        return
    assert split is not None
    pos, given_kw, key = split
    fast = sig.bind_fast(pos, {})
    assert fast is not None
    assert len(fast[0]) == len(bound_args)
    assert all(a is b or a == b for a, b in zip(fast[0], bound_args, strict=True))
    assert given_kw == kwonly
    assert {**sig.kwdefaults, **given_kw} == bound_kwargs
    # the key names each value with its type: True and 1, -1 and 1 never meet
    assert key == tuple((n, type(v), v) for n, v in sorted(kwonly.items()))


def test_keys_keep_equal_values_of_different_types_apart() -> None:
    sig = Signature(parse_schema("f(Tensor x, *, Scalar s=1) -> Tensor"), "t::f")
    x = np.ones(1)
    one = keyword_split((x,), {"s": 1}, sig.params, sig.kwkeys)
    true = keyword_split((x,), {"s": True}, sig.params, sig.kwkeys)
    assert one is not None and true is not None and one[2] != true[2]


def test_floats_and_dtypes_with_metadata_key_nothing() -> None:
    sig = Signature(
        parse_schema("f(Tensor x, *, float a=1.0, ScalarType? dtype=None) -> Tensor"), "t::f"
    )
    x = np.ones(1)
    assert keyword_split((x,), {"a": -0.0}, sig.params, sig.kwkeys) is None  # == 0.0
    tagged = np.dtype("float64", metadata={"unit": "m"})  # == np.dtype("float64")
    assert keyword_split((x,), {"dtype": tagged}, sig.params, sig.kwkeys) is None
    assert keyword_split((x,), {"dtype": oplib.float64}, sig.params, sig.kwkeys) is not None


# -- the cached call serves them -------------------------------------------------------------


@pytest.fixture
def scaled():
    """``kwonly::scaled(x, *, dtype, k, s, f)``: ``x`` cast to ``dtype`` and multiplied by
    ``k`` (and ``f``), recording what the kernel was given."""
    with oplib.library._scoped_library("kwonly", "DEF") as lib:
        lib.define(
            "scaled(Tensor x, int p=0, *, ScalarType? dtype=None, int k=1, Scalar s=1, "
            "float f=1.0) -> Tensor"
        )
        seen: list[tuple[object, ...]] = []

        def scaled(x, p, *, dtype, k, s, f):
            seen.append((p, dtype, k, s, f))
            out = x if dtype is None else x.astype(dtype)
            return out * (k * f)

        lib.impl("scaled", scaled, "CPU")
        yield oplib.ops.kwonly.scaled, lib, seen


def _slow_calls(op, monkeypatch) -> list[dict[str, object]]:
    slow: list[dict[str, object]] = []
    overload = type(op.default)
    real = overload._call_slow
    monkeypatch.setattr(overload, "_call_slow", lambda s, a, k: slow.append(k) or real(s, a, k))
    return slow


@pytest.mark.fastpath
@pytest.mark.parametrize("array", ["native", "Tensor"])
def test_keyword_only_values_are_served_by_the_cache(scaled, array, monkeypatch) -> None:
    op, _, seen = scaled
    x = np.array([1.0, 2.0], np.float32)
    arg = x if array == "native" else oplib.tensor(x)
    calls = [
        ({"dtype": oplib.float64}, np.float64, [1.0, 2.0]),
        ({"k": 3}, np.float32, [3.0, 6.0]),
        ({"dtype": oplib.float64, "k": 2}, np.float64, [2.0, 4.0]),
        ({"k": 2, "dtype": oplib.float64}, np.float64, [2.0, 4.0]),  # the same key
        ({"p": 5, "k": 3}, np.float32, [3.0, 6.0]),  # a positional one named too
    ]
    for kwargs, _, _ in calls:  # the first call of each key plans and caches
        op(arg, **kwargs)
    slow = _slow_calls(op, monkeypatch)
    for _ in range(2):
        for kwargs, dtype, values in calls:
            out = op(arg, **kwargs)
            assert np.asarray(out).dtype == dtype
            assert np.asarray(out).tolist() == values
    assert slow == []
    assert seen[-1] == (5, None, 3, 1, 1.0)  # given as binding gives them
    assert len(op.default._opcache.keyed) == 3  # (p=5 takes the entry of k=3)


@pytest.mark.fastpath
def test_keyword_only_calls_keep_their_values_apart(scaled, monkeypatch) -> None:
    op, _, seen = scaled
    x = np.ones(1)
    for s in (1, True, 1, True):  # equal, and hash alike: the key holds their types
        op(x, s=s)
        assert type(seen[-1][3]) is type(s)
    for f in (0.0, -0.0, 0.0, -0.0):  # floats key nothing: each call binds its own
        op(x, f=f)
        assert math.copysign(1.0, seen[-1][4]) == math.copysign(1.0, f)
    slow = _slow_calls(op, monkeypatch)
    op(x, f=2.0)
    op(x, s=True)
    assert slow == [{"f": 2.0}]


@pytest.mark.fastpath
def test_a_registration_forgets_the_keyed_caches(scaled) -> None:
    op, lib, _ = scaled
    x = np.ones(2)
    op(x, k=2)
    op(x, k=2)
    assert op.default._opcache.keyed
    lib.impl("scaled", lambda x, p, *, dtype, k, s, f: x * 0 + k + 100, "CPU", allow_override=True)
    assert not op.default._opcache.keyed
    assert op(x, k=2).tolist() == [102.0, 102.0]
    assert op(x, k=2).tolist() == [102.0, 102.0]


@pytest.mark.fastpath
def test_the_number_of_keyed_caches_is_bounded(scaled) -> None:
    op, _, _ = scaled
    x = np.ones(1)
    for k in range(fastpath.MAX_KEYED + 10):
        assert op(x, k=k).tolist() == [float(k)]
        assert op(x, k=k).tolist() == [float(k)]  # past the bound: the slow path, right
    assert len(op.default._opcache.keyed) == fastpath.MAX_KEYED


@pytest.mark.fastpath
def test_explain_says_a_keyword_only_call_is_served(scaled) -> None:
    op, _, _ = scaled
    x = np.ones(1)
    assert not op.default.plan_call((x,), {"k": 4}).cached
    op(x, k=4)
    assert op.default.plan_call((x,), {"k": 4}).cached
    assert not op.default.plan_call((x,), {"k": 5}).cached


def test_a_mode_sees_keyword_only_arguments_as_given(scaled) -> None:
    op, _, _ = scaled
    x = np.ones(1)
    op(x, k=2)
    op(x, k=2)

    class Log(oplib.DispatchMode):
        def __init__(self) -> None:
            self.calls: list[dict[str, object]] = []

        def __oplib_dispatch__(self, func, args, kwargs):
            self.calls.append(dict(kwargs))
            return func(*args, **kwargs)

    with Log() as log:
        op(x, k=2)
    assert log.calls == [{"k": 2}]


def test_a_kernel_failure_on_a_keyed_call_is_reported_as_on_the_slow_path(scaled) -> None:
    op, _, _ = scaled
    x = np.ones(2, np.float32)
    op(x, dtype=oplib.int8)
    notes = []
    for _ in range(2):  # warm: the keyed cache serves it, and the kernel raises there
        with pytest.raises(TypeError) as info:
            op(np.array(["a"], dtype=object), dtype=oplib.int8)
        notes.append(getattr(info.value, "__notes__", None))
    assert notes[0] == notes[1]


@pytest.mark.parametrize("words", ["argument 'dtype' must be ScalarType?"])
def test_a_bad_keyword_value_is_still_bindings_error_when_warm(scaled, words) -> None:
    op, _, _ = scaled
    x = np.ones(1)
    op(x, dtype=oplib.float64)
    op(x, dtype=oplib.float64)
    with pytest.raises(oplib.CallArgumentError, match=words):
        op(x, dtype="nosuch")
    with pytest.raises(TypeError, match="unexpected keyword argument 'dtyp'"):
        op(x, dtyp=oplib.float64)


# -- the core ops users call so ------------------------------------------------------------------


@pytest.mark.fastpath
def test_tensor_to_a_dtype_and_sum_with_a_dtype_are_served(monkeypatch) -> None:
    t = oplib.tensor([1.0, 2.0, 3.0])
    for _ in range(2):
        t.to(oplib.float64)
        t.sum(dtype=oplib.float64)
    ops = oplib.ops.oplib
    slow = _slow_calls(ops._to_copy, monkeypatch) + _slow_calls(ops.sum, monkeypatch)
    for _ in range(2):
        assert t.to(oplib.float64).dtype == oplib.float64
        assert t.double().tolist() == [1.0, 2.0, 3.0]
        s = t.sum(dtype=oplib.float64)
        assert (s.dtype, s.item()) == (oplib.float64, 6.0)
    assert slow == []


def test_sum_with_a_dtype_differentiates_through_the_keyed_cache() -> None:
    for _ in range(3):
        t = oplib.tensor([1.0, 2.0], requires_grad=True)
        s = t.sum(dtype=oplib.float64)
        s.backward()
        assert s.dtype == oplib.float64
        assert t.grad is not None and t.grad.dtype == oplib.float32
        assert t.grad.tolist() == [1.0, 1.0]


@pytest.mark.fastpath
def test_sum_with_a_dtype_records_its_node_from_the_keyed_cache(monkeypatch) -> None:
    t = oplib.tensor([1.0, 2.0], requires_grad=True)
    t.sum(dtype=oplib.float64)
    slow = _slow_calls(oplib.ops.oplib.sum, monkeypatch)
    s = t.sum(dtype=oplib.float64)
    s.backward()
    assert slow == []
    assert s.dtype == oplib.float64 and s.grad_fn is not None
    assert t.grad is not None and t.grad.tolist() == [1.0, 1.0]


def test_a_kernels_own_default_dtype_does_not_stand_in_for_the_schemas_none() -> None:
    # np.dtype("float64") == None is true (numpy reads None as its default dtype): the
    # fast path took the kernel's own default for the schema's None, and skipped binding it
    with oplib.library._scoped_library("kwdefault", "DEF") as lib:
        lib.define("given(Tensor x, *, ScalarType? dtype=None) -> str")
        lib.impl("given", lambda x, *, dtype=FLOAT64: repr(dtype), "CPU")
        op = oplib.ops.kwdefault.given
        x = np.ones(1)
        assert [op(x) for _ in range(3)] == ["None"] * 3


def test_a_cast_on_its_device_makes_one_copy(monkeypatch) -> None:
    # _to_copy(t, dtype=...) cloned and then cast: two full copies, on a GPU two kernels
    # and twice the memory traffic of one
    import oplib_core._core_plugin as core

    t = oplib.tensor([1.5, 2.5])
    monkeypatch.setattr(core, "_clone", lambda: pytest.fail("a cast must not clone first"))
    for _ in range(2):
        u = t.to(oplib.float64)
        assert (u.dtype, u.tolist()) == (oplib.float64, [1.5, 2.5])
        assert not np.shares_memory(np.asarray(u), np.asarray(t))


@pytest.mark.fastpath
def test_a_call_that_raised_leaves_no_keyed_cache(scaled) -> None:
    op, _, _ = scaled
    bad = np.array(["a"], dtype=object)
    for k in range(3):
        with pytest.raises(TypeError):
            op(bad, dtype=oplib.int8, k=k)
    assert op.default._opcache.keyed == {}
