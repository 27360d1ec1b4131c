"""Schemas as torch writes them: the anonymous mutable alias (``Tensor!``, ``Tensor!?``,
``Tensor![]``, ``int!?``), schema errors naming the operator being defined, and ``int[]``
arguments taking any sequence of ints."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._schema import (
    BASE_TYPES,
    Annotation,
    BaseType,
    ListType,
    OptionalType,
    parse_schema,
    parse_signature,
)
from oplib_core.errors import CallArgumentError, SchemaError

# -- the anonymous mutable alias ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("Tensor!", "Tensor!"),
        ("Tensor!?", "Tensor!?"),
        ("Tensor![]", "Tensor![]"),
        ("Tensor!?[]", "Tensor!?[]"),
        ("int!?", "int!?"),
        ("SymInt!", "SymInt!"),
    ],
)
def test_anonymous_mutable_alias_parses_and_is_written(text: str, rendered: str) -> None:
    s = parse_schema(f"f({text} x, Tensor y) -> ()")
    x = s.arguments[0]
    assert x.annotation is not None and x.annotation.is_anonymous
    assert x.is_write and s.is_mutable and s.mutated_arguments == ("x",)
    assert not s.arguments[1].is_write
    assert str(x) == f"{rendered} x"
    assert parse_schema(str(s)) == s


def test_vllm_style_schema() -> None:
    # vLLM's rms_norm / scaled quant ops, as written in its csrc/torch_bindings.cpp.
    s = parse_signature(
        "(Tensor! result, Tensor input, Tensor! scale, Tensor!? azp, Tensor![] caches, "
        "int!? n) -> ()",
        name="_C::quant",
    )
    assert s.mutated_arguments == ("result", "scale", "azp", "caches", "n")
    assert str(s).startswith("_C::quant(Tensor! result, Tensor input, Tensor! scale, Tensor!? azp")


def test_anonymous_return_aliases_no_argument() -> None:
    # torch gives each '!' a fresh alias set ($0, $1, ...): a 'Tensor!' return is new.
    s = parse_schema("f(Tensor! x) -> Tensor!")
    assert s.returns[0].annotation is not None and s.returns[0].annotation.is_anonymous
    assert str(s) == "f(Tensor! x) -> Tensor!"


def test_anonymous_annotation_model() -> None:
    a = Annotation((), True)
    assert a.is_anonymous and str(a) == "!"
    assert not Annotation(("a",), True).is_anonymous
    with pytest.raises(SchemaError, match="needs at least one alias name"):
        Annotation((), False)


@pytest.mark.parametrize(
    ("text", "pos", "words"),
    [
        ("f(Tensor!! x) -> ()", 9, ["an argument name", "got '!'"]),
        ("f(Tensor!(a!) x) -> ()", 9, ["an argument name", "got '('"]),
        ("f(int(a!) n) -> ()", 5, ["only allowed on Tensor"]),
    ],
)
def test_annotation_errors(text: str, pos: int, words: list[str]) -> None:
    with pytest.raises(SchemaError) as e:
        parse_schema(text)
    assert e.value.position == pos
    for w in words:
        assert w in e.value.reason


@st.composite
def _anon_schemas(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, 4))
    args = []
    for i in range(n):
        base = draw(st.sampled_from(BASE_TYPES))
        anon = draw(st.booleans())
        suffix = draw(st.sampled_from(["", "?", "[]", "?[]", "[]?", "[2]"]))
        args.append(f"{base}{'!' if anon else ''}{suffix} a{i}")
    ret = draw(st.sampled_from(["()", "Tensor", "Tensor!", "(Tensor!, int)"]))
    return f"ns::f({', '.join(args)}) -> {ret}"


@given(_anon_schemas())
def test_anonymous_alias_roundtrip(text: str) -> None:
    s = parse_schema(text)
    assert parse_schema(str(s)) == s
    arg_text = text.split("(", 1)[1].split(") ->")[0]
    expected = tuple(f"a{i}" for i, part in enumerate(arg_text.split(", ")) if "!" in part)
    assert s.mutated_arguments == expected
    for a in s.arguments:
        t = a.type
        while not isinstance(t, BaseType):
            assert isinstance(t, (OptionalType, ListType))
            t = t.elem
        assert (a.annotation is not None) == a.is_write


def test_anonymous_mutation_in_a_defined_op(ns: str, teardown) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("fill_(Tensor! x, float v) -> ()")

    def kernel(x, v):
        x[...] = v

    lib.impl("fill_", kernel, "CPU")
    x = oplib.tensor(np.zeros(3))
    assert getattr(oplib.ops, ns).fill_(x, 2.0) is None
    assert x.numpy().tolist() == [2.0, 2.0, 2.0]
    assert getattr(oplib.ops, ns).fill_.default._schema.mutated_arguments == ("x",)


def test_two_anonymous_arguments_and_a_new_return(ns: str, teardown) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("two(Tensor! a, Tensor! b) -> Tensor!")

    def kernel(a, b):
        a += 1
        b += 2
        return a + b

    lib.impl("two", kernel, "CPU")
    a, b = oplib.tensor(np.zeros(1)), oplib.tensor(np.zeros(1))
    out = getattr(oplib.ops, ns).two(a, b)
    assert out is not a and out is not b  # no alias: '!' sets are fresh
    assert out.numpy().tolist() == [3.0]
    assert a.numpy().tolist() == [1.0] and b.numpy().tolist() == [2.0]


# -- schema errors name the operator ----------------------------------------------------


def test_define_error_names_the_operator(ns: str) -> None:
    with pytest.raises(SchemaError) as e:
        oplib.define(f"{ns}::bad.ov", "(Tensor x, Tensr y) -> Tensor")
    assert f"operator '{ns}::bad.ov'" in str(e.value)
    assert "unknown type 'Tensr'" in str(e.value)
    assert e.value.position == 11
    assert not hasattr(getattr(oplib.ops, ns), "bad")


def test_library_define_error_names_the_operator(ns: str, teardown) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    with pytest.raises(SchemaError, match=rf"operator '{ns}::bad'.*duplicate argument name 'x'"):
        lib.define("bad(Tensor x, Tensor x) -> Tensor")


def test_custom_op_schema_error_names_the_operator(ns: str) -> None:
    with pytest.raises(SchemaError, match=rf"operator '{ns}::bad'.*expected"):
        oplib.custom_op(f"{ns}::bad", lambda x: x, mutates_args=(), schema="(Tensor x -> Tensor")


def test_error_without_a_name_is_unchanged() -> None:
    with pytest.raises(SchemaError) as e:
        parse_signature("(Tensr x) -> ()")
    assert e.value.reason.startswith("unknown type 'Tensr'")


# -- int[] takes any sequence of ints ---------------------------------------------------


class _Shape(Sequence[int]):
    """A user-defined sequence (as torch.Size is to torch)."""

    def __init__(self, *dims: int) -> None:
        self._dims = dims

    def __getitem__(self, i):  # type: ignore[override]
        return self._dims[i]

    def __len__(self) -> int:
        return len(self._dims)


@pytest.fixture
def reshape_op(ns: str, teardown):
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("rs(Tensor x, int[] shape, int[]? dims=None, float[] w=[]) -> Tensor")
    seen: list[object] = []

    def kernel(x, shape, dims=None, w=()):
        seen.append((shape, dims, w))
        return x.reshape(shape)

    lib.impl("rs", kernel, "CPU")
    return getattr(oplib.ops, ns).rs, seen


@pytest.mark.parametrize(
    "shape", [_Shape(2, 3), range(6, 7), (2, 3), [2, 3], np.array([2, 3]).tolist()]
)
def test_int_list_takes_any_sequence(reshape_op, shape) -> None:
    op, seen = reshape_op
    out = op(oplib.tensor(np.arange(6.0)), shape)
    assert out.shape == tuple(shape)
    got = seen[-1][0]
    assert type(got) is list and got == list(shape)


def test_optional_and_float_lists_take_sequences(reshape_op) -> None:
    op, seen = reshape_op
    op(oplib.tensor(np.arange(6.0)), _Shape(6), dims=_Shape(0), w=_Shape(1, 2))
    assert seen[-1] == ([6], [0], [1.0, 2.0])


@pytest.mark.parametrize("bad", [_Shape(2, "a"), "23", b"\x02\x03", {2, 3}])  # type: ignore[arg-type]
def test_int_list_refuses_non_int_sequences(reshape_op, bad) -> None:
    op, _ = reshape_op
    with pytest.raises(CallArgumentError, match="argument 'shape' must be int"):
        op(oplib.tensor(np.arange(6.0)), bad)


def test_tensor_list_still_wants_a_list_or_tuple(ns: str, teardown) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("cat(Tensor[] xs) -> Tensor")
    lib.impl("cat", lambda xs: np.concatenate(xs), "CPU")
    x = oplib.tensor(np.zeros(1))
    assert getattr(oplib.ops, ns).cat((x, x)).shape == (2,)
    with pytest.raises(CallArgumentError):
        getattr(oplib.ops, ns).cat(_Shape(x, x))  # type: ignore[arg-type]


def test_opcheck_accepts_an_anonymous_mutation(ns: str, teardown) -> None:
    lib = oplib.Library(ns, "FRAGMENT")
    teardown(lib)
    lib.define("scaled(Tensor! out, Tensor x) -> Tensor")

    def kernel(out, x):
        out[...] = x * 2
        return x + 1

    lib.impl("scaled", kernel, "CPU")
    oplib.register_fake(f"{ns}::scaled", lambda out, x: x.new_empty(x.shape), lib=lib)
    result = oplib.opcheck(f"{ns}::scaled", (oplib.tensor(np.zeros(3)), oplib.tensor(np.ones(3))))
    assert result.pop("test_backends") == "SKIPPED"  # a cpu kernel only: nothing to compare
    assert set(result.values()) == {"SUCCESS"}
