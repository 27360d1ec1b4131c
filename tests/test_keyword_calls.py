"""Calls that name positional parameters by keyword (``x.clamp(min=0.0)``,
``op(x, dims=[1])``) take the dispatcher's cached call (issue 30): ``by_position`` places
the keywords, and anything it cannot place goes to binding, which says what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._dispatch.binding import REQUIRED, Binder, Signature, by_position
from oplib_core._schema import parse_schema

# -- by_position against binding, on schemas hypothesis writes ---------------------------------

_TYPES = {"Tensor": None, "int": "1", "float": "2.5", "bool": "False", "int[]": "[0, 1]"}


@st.composite
def schemas_and_calls(draw: st.DrawFn) -> tuple[str, tuple[object, ...], dict[str, object]]:
    """A schema (``Tensor x`` first, then positional parameters, defaults after the
    required ones, then keyword-only ones) and a call of it: some positional arguments,
    the rest of those it gives by keyword, perhaps a keyword-only one too."""
    kinds = draw(st.lists(st.sampled_from(sorted(_TYPES)[1:]), max_size=4))
    n_required = draw(st.integers(0, len(kinds)))
    params = ["Tensor x"] + [
        f"{k} p{i}" if i < n_required else f"{k} p{i}={_TYPES[k]}" for i, k in enumerate(kinds)
    ]
    kw_only = draw(st.booleans())
    schema = f"f({', '.join(params)}{', *, float k=1.0' if kw_only else ''}) -> Tensor"
    values: dict[str, object] = {"int": 3, "float": 0.5, "bool": True, "int[]": [2]}
    names = ["x"] + [f"p{i}" for i in range(len(kinds))]
    args_all = [np.ones(1)] + [values[k] for k in kinds]
    given_n = draw(st.integers(1, len(names)))  # positionally
    args = tuple(args_all[:given_n])
    kwargs = {
        name: value
        for name, value in zip(names[given_n:], args_all[given_n:], strict=True)
        if name[1:].isdigit() and (int(name[1:]) < n_required or draw(st.booleans()))
    }
    if kw_only and draw(st.booleans()):
        kwargs["k"] = 2.0
    return schema, args, kwargs


@given(schemas_and_calls())
def test_by_position_places_what_binding_binds_or_leaves_the_call_to_it(case) -> None:
    schema_text, args, kwargs = case
    schema = parse_schema(schema_text)
    sig = Signature(schema, "t::f")
    bound_args, bound_kwargs = Binder(schema, "t::f").bind(args, kwargs)
    assume(kwargs)  # (by_position is asked only about calls with keywords)
    placed = by_position(args, kwargs, sig.params)
    if "k" in kwargs:  # a keyword-only one: the kernel takes it by keyword, binding's
        assert placed is None
        return
    assert placed is not None
    assert len(placed) == len(bound_args)
    for got, want in zip(placed, bound_args, strict=True):
        assert got is want or got == want
    assert bound_kwargs == sig.kwdefaults  # the keyword-only ones at their defaults


def test_by_position_refuses_what_binding_must_judge() -> None:
    sig = Signature(
        parse_schema("f(Tensor x, int a, float b=2.0, *, bool c=False) -> Tensor"), "t::f"
    )
    x = np.ones(1)
    assert sig.params == (("x", "a", "b"), (REQUIRED, REQUIRED, 2.0))
    assert by_position((x,), {"a": 1}, sig.params) == (x, 1, 2.0)
    assert by_position((x,), {"b": 1.5, "a": 1}, sig.params) == (x, 1, 1.5)
    assert by_position((x,), {"b": 1.5}, sig.params) is None  # a required one missing
    assert by_position((x, 1), {"a": 1}, sig.params) is None  # given twice
    assert by_position((x,), {"a": 1, "c": True}, sig.params) is None  # keyword-only
    assert by_position((x,), {"a": 1, "d": 0}, sig.params) is None  # unknown
    assert by_position((x, 1, 2.0), {"a": 1}, sig.params) is None  # nothing left to name


# -- the cached call serves them -------------------------------------------------------------


@pytest.fixture
def clamp_like():
    with oplib.library._scoped_library("kwcall", "DEF") as lib:
        lib.define("lim(Tensor x, Scalar? min=None, Scalar? max=None) -> Tensor")
        seen: list[tuple[object, object]] = []

        def lim(x, min, max):
            seen.append((min, max))
            return np.clip(x, min, max)

        lib.impl("lim", lim, "CPU")
        yield oplib.ops.kwcall.lim, seen


@pytest.mark.fastpath
@pytest.mark.parametrize("array", ["native", "Tensor"])
def test_a_call_naming_positional_parameters_takes_the_cached_call(
    clamp_like, array, monkeypatch
) -> None:
    op, seen = clamp_like
    x = np.array([-1.0, 0.5, 2.0])
    arg = x if array == "native" else oplib.tensor(x)
    op(arg, min=0.0)  # the first call plans and caches
    slow: list[object] = []
    overload = type(op.default)
    real = overload._call_slow
    monkeypatch.setattr(overload, "_call_slow", lambda s, a, k: slow.append(k) or real(s, a, k))
    assert np.asarray(op(arg, min=0.0)).tolist() == [0.0, 0.5, 2.0]
    assert np.asarray(op(arg, max=1.0)).tolist() == [-1.0, 0.5, 1.0]
    assert np.asarray(op.default(arg, max=1.0, min=0.0)).tolist() == [0.0, 0.5, 1.0]
    assert slow == []
    assert seen[-3:] == [(0.0, None), (None, 1.0), (0.0, 1.0)]  # as binding gives them


def test_tensor_clamp_with_a_keyword_gives_what_the_positional_call_gives() -> None:
    t = oplib.tensor([-1.0, 0.5, 2.0])
    for _ in range(3):
        assert t.clamp(min=0.0).tolist() == t.clamp(0.0).tolist() == [0.0, 0.5, 2.0]
        assert t.clamp(max=1.0).tolist() == t.clamp(None, 1.0).tolist() == [-1.0, 0.5, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"mn": 0.0}, "unexpected keyword argument 'mn'"),
        ({"min": "zero"}, "argument 'min' must be Scalar?"),
    ],
)
def test_keywords_it_cannot_place_or_take_get_bindings_errors_after_warm_calls(
    clamp_like, kwargs, words
) -> None:
    op, _ = clamp_like
    x = np.ones(2)
    for _ in range(2):
        op(x, min=0.0)
    with pytest.raises(oplib.CallArgumentError, match=words) as info:
        op(x, **kwargs)
    assert "kwcall::lim" in str(info.value)


def test_an_argument_given_twice_is_still_refused(clamp_like) -> None:
    op, _ = clamp_like
    x = np.ones(2)
    for _ in range(2):
        op(x, 0.0)
    with pytest.raises(TypeError, match="min"):
        op(x, 0.0, min=1.0)


def test_a_mode_sees_a_keyword_call_as_it_was_made(clamp_like) -> None:
    op, _ = clamp_like
    x = np.ones(2)
    op(x, min=0.0)

    class Log(oplib.DispatchMode):
        def __init__(self) -> None:
            self.calls: list[tuple[int, dict[str, object]]] = []

        def __oplib_dispatch__(self, func, args, kwargs):
            self.calls.append((len(args), dict(kwargs)))
            return func(*args, **kwargs)

    with Log() as log:
        op(x, min=0.0)
    assert log.calls == [(1, {"min": 0.0})]
