"""The schema parser and model: round trips, defaults, types, and every parse error."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oplib_core._schema import (
    BASE_TYPES,
    MAX_LIST_SIZE,
    Annotation,
    Argument,
    BaseType,
    FunctionSchema,
    ListType,
    OptionalType,
    Return,
    parse_schema,
    parse_signature,
)
from oplib_core.errors import SchemaError

T = BaseType("Tensor")
INT = BaseType("int")


# ----------------------------------------------------------------- random schemas

_FIRST = "abcxyzABXZ_"
_IDENT = st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_FIRST + "019", max_size=5))
# Operator names and namespaces never start with '__' (reserved for Python's attributes).
_OP_IDENT = _IDENT.filter(lambda w: not w.startswith("__"))
_ENUM_WORD = _IDENT.filter(lambda w: w not in ("None", "True", "False", "inf", "nan"))


def _single_quoted(s: str) -> str:
    out = []
    for ch in s:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ord(ch) < 32 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def _string_literal() -> st.SearchStrategy[tuple[str, object]]:
    return st.text(max_size=8).flatmap(
        lambda s: st.sampled_from([(json.dumps(s, ensure_ascii=False), s), (_single_quoted(s), s)])
    )


def _float_literal() -> st.SearchStrategy[tuple[str, object]]:
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: (repr(f), f)),
        st.integers(-100, 100).map(lambda i: (str(i), float(i))),
    )


def _base_default(name: str) -> st.SearchStrategy[tuple[str, object]] | None:
    ints = st.integers(-(2**40), 2**40).map(lambda i: (str(i), i))
    bools = st.booleans().map(lambda b: (str(b), b))
    table: dict[str, st.SearchStrategy[tuple[str, object]]] = {
        "int": ints,
        "SymInt": ints,
        "float": _float_literal(),
        "bool": bools,
        "Scalar": st.one_of(ints, bools, st.floats().map(lambda f: (repr(f), f))),
        "str": _string_literal(),
        "Device": _string_literal(),
        "ScalarType": _ENUM_WORD.map(lambda w: (w, w)),
        "Layout": _ENUM_WORD.map(lambda w: (w, w)),
        "MemoryFormat": _ENUM_WORD.map(lambda w: (w, w)),
    }
    return table.get(name)


def _defaults(t: object) -> st.SearchStrategy[tuple[str, object]] | None:
    """(canonical text, expected Python value) of a valid default for ``t``, or None."""
    if isinstance(t, OptionalType):
        inner = _defaults(t.elem)
        none = st.just(("None", None))
        return none if inner is None else st.one_of(none, inner)
    if isinstance(t, ListType):
        elem = _defaults(t.elem)
        if elem is None:
            return None
        lists = st.lists(elem, max_size=3 if t.size is None else 0).map(
            lambda items: ("[" + ", ".join(i[0] for i in items) + "]", [i[1] for i in items])
        )
        if t.size is None:
            return lists
        size = t.size
        full = st.lists(elem, min_size=size, max_size=size).map(
            lambda items: ("[" + ", ".join(i[0] for i in items) + "]", [i[1] for i in items])
        )
        broadcast = elem.filter(lambda d: d[0] != "None").map(lambda d: (d[0], [d[1]] * size))
        return st.one_of(lists, full, broadcast)
    return _base_default(t.name)


@st.composite
def schema_types(draw: st.DrawFn) -> object:
    t: object = BaseType(draw(st.sampled_from(BASE_TYPES)))
    shape = draw(st.sampled_from(["T", "T?", "T[]", "T[n]", "T[]?", "T?[]", "T?[n]?"]))
    if shape.startswith("T?"):
        t = OptionalType(t)
    if "[" in shape:
        t = ListType(t, draw(st.integers(1, 4)) if "[n]" in shape else None)
    if shape.endswith("]?") or shape == "T?[n]?":
        t = OptionalType(t)
    return t


@st.composite
def annotations(draw: st.DrawFn, t: object) -> Annotation | None:
    if t.base.name != "Tensor" or draw(st.booleans()):
        return None
    aliases = draw(
        st.lists(
            st.sampled_from(["a", "b", "a0", "a1", "out"]),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    return Annotation(tuple(aliases), draw(st.booleans()))


@st.composite
def arguments(draw: st.DrawFn, name: str) -> tuple[Argument, object]:
    t = draw(schema_types())
    ann = draw(annotations(t))
    defaults = _defaults(t)
    default = None
    if defaults is not None and draw(st.booleans()):
        default = draw(defaults)
    arg = Argument(name, t, None if default is None else default[0], ann)
    return arg, (None if default is None else default[1])


@st.composite
def schemas(draw: st.DrawFn) -> tuple[FunctionSchema, list[object]]:
    names = draw(st.lists(_IDENT, max_size=6, unique=True))
    drawn = [draw(arguments(n)) for n in names]
    n_kw = draw(st.integers(0, len(drawn)))
    positional = sorted(drawn[: len(drawn) - n_kw], key=lambda p: p[0].has_default)
    kwonly = [
        (Argument(a.name, a.type, a.default, a.annotation, kwarg_only=True), v)
        for a, v in drawn[len(drawn) - n_kw :]
    ]
    args = positional + kwonly
    n_ret = draw(st.integers(0, 3))
    named = draw(st.booleans())
    ret_names = draw(st.lists(_IDENT, min_size=n_ret, max_size=n_ret, unique=True))
    rets = []
    for i in range(n_ret):
        t = draw(schema_types())
        rets.append(Return(ret_names[i] if named else None, t, draw(annotations(t))))
    ns = draw(st.one_of(st.just(""), _OP_IDENT))
    name = draw(_OP_IDENT)
    overload = draw(
        st.one_of(
            st.just(""), _IDENT.filter(lambda w: w not in ("default", "overloads") and w[0] != "_")
        )
    )
    schema = FunctionSchema(
        f"{ns}::{name}" if ns else name, overload, tuple(a for a, _ in args), tuple(rets)
    )
    return schema, [v for _, v in args]


def _same_value(got: object, expected: object) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(_same_value(g, e) for g, e in zip(got, expected, strict=True))
        )
    return type(got) is type(expected) and got == expected


@settings(max_examples=150)
@given(schemas())
def test_round_trip_of_random_schemas(case: tuple[FunctionSchema, list[object]]) -> None:
    schema, values = case
    text = str(schema)
    parsed = parse_schema(text)
    assert parsed == schema
    assert hash(parsed) == hash(schema)
    assert str(parsed) == text
    for arg, expected in zip(parsed.arguments, values, strict=True):
        assert _same_value(arg.default_value, expected), (arg, expected)


_SPLIT_RE = re.compile(
    r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|->|::|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"""
    r"""|[A-Za-z_]\w*|\S"""
)


@settings(max_examples=100)
@given(schemas(), st.data())
def test_whitespace_between_tokens_does_not_matter(
    case: tuple[FunctionSchema, list[object]], data: st.DataObject
) -> None:
    schema, _ = case
    tokens = _SPLIT_RE.findall(str(schema))
    pieces = [tokens[0]]
    for prev, tok in itertools.pairwise(tokens):
        words = re.match(r"\w", tok) and re.search(r"\w$", prev)
        sep = data.draw(st.sampled_from([" ", "  ", "\t", "\n "] if words else ["", " ", "\n"]))
        pieces.append(sep + tok)
    text = data.draw(st.sampled_from(["", " ", "\n"])) + "".join(pieces) + " "
    assert parse_schema(text) == schema


@given(schemas())
def test_parse_signature_round_trips_the_args_part(
    case: tuple[FunctionSchema, list[object]],
) -> None:
    schema, _ = case
    nameless = schema.with_name("")
    text = str(nameless)
    assert text.startswith("(")
    assert parse_signature(text) == nameless
    assert parse_signature(text, schema.name, schema.overload_name) == schema


# -------------------------------------------------------------------- the model


def test_full_example_and_properties() -> None:
    text = "mylib::add.out(Tensor x, Tensor y, *, float alpha=1.0, Tensor(a!) out) -> Tensor(a!)"
    s = parse_schema(text)
    assert str(s) == text
    assert s.name == "mylib::add"
    assert s.namespace == "mylib"
    assert s.qualname == "mylib::add"
    assert s.overload_name == "out"
    assert [a.name for a in s.positional] == ["x", "y"]
    assert [a.name for a in s.kwarg_only] == ["alpha", "out"]
    assert s.is_mutable
    assert s.mutated_arguments == ("out",)
    assert s.arguments[3].annotation == Annotation(("a",), True)
    assert s.returns == (Return(None, T, Annotation(("a",), True)),)
    assert s.arguments[2].default_value == 1.0


def test_bare_name_has_no_namespace() -> None:
    s = parse_schema("sin(Tensor self) -> Tensor")
    assert (s.name, s.namespace, s.qualname, s.overload_name) == ("sin", "", "sin", "")
    assert not s.is_mutable
    assert s.mutated_arguments == ()
    assert s.arguments[0].name == "self"


def test_with_name_copies() -> None:
    s = parse_signature("(Tensor x) -> Tensor")
    assert s.name == "" and str(s) == "(Tensor x) -> Tensor"
    named = s.with_name("mylib::sin", "out")
    assert str(named) == "mylib::sin.out(Tensor x) -> Tensor"
    assert s.name == ""
    assert named.arguments is s.arguments


def test_parse_signature_takes_the_name_separately() -> None:
    s = parse_signature("(Tensor x) -> Tensor", "mylib::sin", "out")
    assert str(s) == "mylib::sin.out(Tensor x) -> Tensor"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Tensor", T),
        ("Tensor?", OptionalType(T)),
        ("Tensor[]", ListType(T)),
        ("Tensor?[]", ListType(OptionalType(T))),
        ("int[]?", OptionalType(ListType(INT))),
        ("int[2]", ListType(INT, 2)),
        ("SymInt[]", ListType(BaseType("SymInt"))),
        ("ScalarType?", OptionalType(BaseType("ScalarType"))),
    ],
)
def test_types_parse_and_print(text: str, expected: object) -> None:
    s = parse_schema(f"f({text} x) -> {text}")
    assert s.arguments[0].type == expected
    assert s.returns[0].type == expected
    assert str(expected) == text


def test_type_predicates() -> None:
    assert T.is_tensor_like() and not T.is_tensor_list() and not T.is_optional()
    assert OptionalType(T).is_tensor_like() and OptionalType(T).is_optional()
    assert ListType(T).is_tensor_list() and ListType(T).is_tensor_like()
    assert ListType(OptionalType(T)).is_tensor_list()
    assert OptionalType(ListType(T)).is_tensor_list()
    assert OptionalType(ListType(T)).is_optional()
    assert not ListType(INT).is_tensor_like() and not ListType(INT).is_tensor_list()
    assert not OptionalType(INT).is_tensor_like()
    assert ListType(OptionalType(INT)).base == INT


def test_annotations_parse_and_print() -> None:
    s = parse_schema("f(Tensor(a) x, Tensor(a|b) y, Tensor(a0!) z, Tensor(b!)?[] w) -> ()")
    anns = [a.annotation for a in s.arguments]
    assert anns == [
        Annotation(("a",), False),
        Annotation(("a", "b"), False),
        Annotation(("a0",), True),
        Annotation(("b",), True),
    ]
    assert [str(a) for a in anns] == ["(a)", "(a|b)", "(a0!)", "(b!)"]
    assert s.mutated_arguments == ("z", "w")
    assert str(s.arguments[3]) == "Tensor(b!)?[] w"
    assert s.arguments[3].type == ListType(OptionalType(T))


def test_returns() -> None:
    assert parse_schema("f() -> ()").returns == ()
    assert str(parse_schema("f() -> ()")) == "f() -> ()"
    two = parse_schema("f(Tensor x) -> (Tensor, Tensor)")
    assert two.returns == (Return(None, T), Return(None, T))
    named = parse_schema("f(Tensor x) -> (Tensor values, Tensor indices)")
    assert [r.name for r in named.returns] == ["values", "indices"]
    assert str(named) == "f(Tensor x) -> (Tensor values, Tensor indices)"
    single_named = parse_schema("f(Tensor x) -> (Tensor out)")
    assert str(single_named) == "f(Tensor x) -> (Tensor out)"
    assert str(parse_schema("f(Tensor x) -> (Tensor)")) == "f(Tensor x) -> Tensor"
    for t in ("Tensor[]", "int", "float", "bool", "Scalar"):
        assert parse_schema(f"f() -> {t}").returns == (
            Return(None, parse_schema(f"f({t} x) -> ()").arguments[0].type),
        )


def test_kwarg_only_split() -> None:
    s = parse_schema("f(Tensor x, int n=1, *, Tensor w, float eps=1e-5) -> Tensor")
    assert [a.kwarg_only for a in s.arguments] == [False, False, True, True]
    assert str(s) == "f(Tensor x, int n=1, *, Tensor w, float eps=1e-5) -> Tensor"
    only_kw = parse_schema("f(*, Tensor x) -> Tensor")
    assert only_kw.positional == () and [a.name for a in only_kw.kwarg_only] == ["x"]


@pytest.mark.parametrize(
    ("decl", "value"),
    [
        ("Tensor? w=None", None),
        ("ScalarType? dtype=None", None),
        ("Device? device=None", None),
        ("int n=1", 1),
        ("int n=-3", -3),
        ("SymInt k=7", 7),
        ("float a=1.0", 1.0),
        ("float a=1", 1.0),
        ("float a=-1e-5", -1e-5),
        ("float a=inf", math.inf),
        ("float a=-inf", -math.inf),
        ("bool b=False", False),
        ("bool b=True", True),
        ("Scalar c=2", 2),
        ("Scalar c=0.5", 0.5),
        ('str s="x"', "x"),
        ("str s='x'", "x"),
        (r'str s="a\"b\n\\"', 'a"b\n\\'),
        (r"str s='it\'s'", "it's"),
        (r'str s="\x41\u00e9"', "A\u00e9"),
        ('Device d="cuda:1"', "cuda:1"),
        ("int[] dims=[1, 2]", [1, 2]),
        ("int[] dims=[]", []),
        ("int[2] k=1", [1, 1]),
        ("int[3] k=[1, 2, 3]", [1, 2, 3]),
        ("int[1] dim=[]", []),
        ("int[]? dims=None", None),
        ("float[] f=[1, 2.5]", [1.0, 2.5]),
        ("bool[] f=[True]", [True]),
        ("int?[] f=[None, 1]", [None, 1]),
        ("ScalarType dtype=float32", "float32"),
        ("Layout layout=strided", "strided"),
    ],
)
def test_default_values(decl: str, value: object) -> None:
    arg = parse_schema(f"f({decl}) -> ()").arguments[0]
    assert arg.has_default
    assert _same_value(arg.default_value, value)


def test_nan_default_and_missing_default() -> None:
    s = parse_schema("f(Tensor x, float a=nan) -> ()")
    assert not s.arguments[0].has_default and s.arguments[0].default is None
    assert math.isnan(s.arguments[1].default_value)  # type: ignore[arg-type]


def test_default_text_is_canonical_and_list_values_are_fresh() -> None:
    s = parse_schema("f(int[] d=[ 1 ,2 ], float a=- 1.5) -> ()")
    assert str(s) == "f(int[] d=[1, 2], float a=-1.5) -> ()"
    value = s.arguments[0].default_value
    assert isinstance(value, list)
    value.append(3)
    assert s.arguments[0].default_value == [1, 2]
    assert Argument("d", ListType(INT), "[1,2]") == s.arguments[0]


def test_model_objects_are_immutable_and_hashable() -> None:
    s = parse_schema("f(Tensor x, int[] d=[1]) -> Tensor")
    with pytest.raises(AttributeError):
        s.name = "g"  # type: ignore[misc]
    assert {s, parse_schema("f(Tensor x,int[] d=[1])->Tensor")} == {s}


def test_deeply_nested_brackets_do_not_recurse() -> None:
    with pytest.raises(SchemaError) as e:
        parse_schema("f(int[] x=" + "[" * 5000 + ") -> ()")
    assert e.value.position == 11


# ------------------------------------------------------------------ parse errors

# (schema, text at the error position, words in the message); the position is found from
# the second column and checked against an explicit offset, so a wrong caret fails.
ERRORS = [
    ("mylib::f(Tensor x, Tensr y) -> Tensor", 19, "Tensr", ["unknown type 'Tensr'"]),
    ("f(Tensor x, int x) -> Tensor", 16, "x", ["duplicate argument name 'x'"]),
    ("f(int a=1, int b) -> Tensor", 15, "b", ["'b'", "no default", "'a'", "kwarg-only"]),
    ("f(*, int a, *, int b) -> ()", 12, "*", ["'*' given twice"]),
    ("f(Tensor x) Tensor", 12, "Tensor", ["expected '->'", "got 'Tensor'"]),
    ("f(Tensor x)", 11, "", ["expected '->'", "got end of schema"]),
    ("f(Tensor x) -> Tensor foo", 22, "foo", ["expected end of schema", "got 'foo'"]),
    ("f(Tensor x) -> Tensor values", 22, "values", ["expected end of schema"]),
    ("f(Tensor x) -> Tensor#", 21, "#", ["expected end of schema", "got '#'"]),
    ("(Tensor x) -> Tensor", 0, "(", ["empty operator name"]),
    ("::f(Tensor x) -> Tensor", 0, "::", ["expected an operator name", "got '::'"]),
    ("mylib::1f(Tensor x) -> Tensor", 7, "1f", ["operator name", "got '1f'"]),
    ("a::b::c(Tensor x) -> ()", 4, "::", ["only one '::'"]),
    ("f(Tensor 1x) -> Tensor", 9, "1x", ["argument name after type 'Tensor'", "got '1x'"]),
    ("f.1(Tensor x) -> Tensor", 2, "1", ["overload name", "got '1'"]),
    ("f.(Tensor x) -> Tensor", 2, "(", ["overload name", "got '('"]),
    ("f.default(Tensor x) -> Tensor", 2, "default", ["'default' is reserved"]),
    ("f(int(a!) n) -> ()", 5, "(a!)", ["mutable alias annotation", "only allowed on Tensor"]),
    ("f(int(a) n) -> ()", 5, "(a)", ["alias annotation", "only allowed on Tensor"]),
    ("f(Tensor(a!!) x) -> ()", 11, "!", ["')' to close the alias annotation", "got '!'"]),
    ("f(Tensor() x) -> ()", 9, ")", ["alias name", "got ')'"]),
    ('f(int n="a") -> ()', 8, '"a"', ["invalid default", "'n'", "'int'"]),
    ("f(Tensor x=1) -> ()", 11, "1", ["invalid default", "'x'", "'Tensor'"]),
    ("f(Tensor x=None) -> ()", 11, "None", ["invalid default", "'Tensor'"]),
    ("f(bool b=1) -> ()", 9, "1", ["invalid default", "'bool'"]),
    ("f(int n=1.5) -> ()", 8, "1.5", ["invalid default", "'int'"]),
    ("f(int n=True) -> ()", 8, "True", ["invalid default", "'int'"]),
    ("f(int[] d=1) -> ()", 10, "1", ["invalid default", "'int[]'"]),
    ("f(int[] d=[1, 'a']) -> ()", 14, "'a'", ["invalid default", "'int'"]),
    ("f(int[2] k=[1, 2, 3]) -> ()", 11, "[", ["3 elements", "expected 2"]),
    ("f(int n=) -> ()", 8, ")", ["expected a default value", "got ')'"]),
    ("f(int n=1x) -> ()", 8, "1x", ["invalid number '1x'"]),
    ("f(float a=-x) -> ()", 11, "x", ["a number after '-'"]),
    ("f(Tensor x-1) -> ()", 10, "-", ["expected ')' or ',' after argument 'x', got '-'"]),
    ('f(str s="abc) -> ()', 8, '"', ["unterminated string"]),
    ('f(str s="a\\q") -> ()', 10, "\\q", ["invalid escape", "\\q"]),
    ("f(int[][] x) -> ()", 7, "[", ["nested list"]),
    ("f(Tensor?? x) -> ()", 9, "?", ["already optional"]),
    ("f(int[0] x) -> ()", 6, "0", ["positive integer"]),
    ("f(int[x] y) -> ()", 6, "x", ["expected ']' or a list size", "got 'x'"]),
    ("f(Tensor x,) -> ()", 11, ")", ["expected an argument type", "got ')'"]),
    ("f(Tensor x, *) -> ()", 13, ")", ["after '*'"]),
    ("f(Tensor x, *, ) -> ()", 15, ")", ["expected an argument type"]),
    ("f(Tensor x) -> (Tensor a, Tensor a)", 33, "a", ["duplicate return name 'a'"]),
    ("f(Tensor x) -> (Tensor, Foo)", 24, "Foo", ["unknown type 'Foo'"]),
    ("f(Tensor x) -> (Tensor a b)", 25, "b", ["expected ')' or ',' after return 'a'"]),
    ("f(Tensor x) -> (Tensor", 22, "", ["got end of schema"]),
    ("f(Tensor x) ->", 14, "", ["expected a return type or '('", "got end of schema"]),
    ("f Tensor x) -> ()", 2, "Tensor", ["expected '(' to start the argument list"]),
]


@pytest.mark.parametrize(("text", "position", "at", "words"), ERRORS)
def test_parse_errors(text: str, position: int, at: str, words: list[str]) -> None:
    assert text.startswith(at, position)
    with pytest.raises(SchemaError) as e:
        parse_schema(text)
    err = e.value
    assert err.position == position
    assert err.schema == text
    for w in words:
        assert w in err.reason
    assert text in str(err) and "^" in str(err)


def test_error_message_points_a_caret_at_the_position() -> None:
    with pytest.raises(SchemaError) as e:
        parse_schema("f(Tensor x-1) -> ()")
    lines = str(e.value).splitlines()
    assert lines[-1].index("^") - lines[-2].index("f") == 10


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("sin(Tensor x) -> Tensor", 0, ["'sin'", "given separately"]),
        ("  mylib::sin(Tensor x) -> Tensor", 2, ["'mylib'", "given separately"]),
        ("(Tensor x) Tensor", 11, ["expected '->'"]),
        ("(Tensor x, Tensor x) -> ()", 18, ["duplicate argument name 'x'"]),
    ],
)
def test_parse_signature_errors(text: str, position: int, words: list[str]) -> None:
    with pytest.raises(SchemaError) as e:
        parse_signature(text, "mylib::sin")
    assert e.value.position == position
    for w in words:
        assert w in e.value.reason


@pytest.mark.parametrize(
    ("name", "overload"),
    [("mylib::", ""), ("1x", ""), ("mylib::sin.out", ""), ("sin", "de fault"), ("sin", "default")],
)
def test_parse_signature_rejects_bad_names(name: str, overload: str) -> None:
    with pytest.raises(SchemaError):
        parse_signature("(Tensor x) -> Tensor", name, overload)


@pytest.mark.parametrize(
    "make",
    [
        lambda: BaseType("Tensr"),
        lambda: ListType(ListType(INT)),
        lambda: ListType(INT, 0),
        lambda: OptionalType(OptionalType(INT)),
        lambda: Annotation((), False),
        lambda: Argument("x", INT, '"a"'),
        lambda: Argument("x y", INT),
        lambda: Argument("x", INT, annotation=Annotation(("a",), True)),
        lambda: FunctionSchema("f", "", (Argument("x", T), Argument("x", INT)), ()),
        lambda: FunctionSchema("f", "", (Argument("x", INT, "1"), Argument("y", T)), ()),
        lambda: FunctionSchema("f", "", (Argument("x", T, kwarg_only=True), Argument("y", T)), ()),
        lambda: FunctionSchema("a::b::c", "", (), ()),
        lambda: FunctionSchema("f", "default", (), ()),
        lambda: FunctionSchema("", "out", (), ()),
    ],
)
def test_model_rejects_invalid_objects(make: object) -> None:
    with pytest.raises(SchemaError):
        make()  # type: ignore[operator]


@settings(max_examples=300)
@given(
    st.text(
        alphabet=st.sampled_from(list("()[],*?!|=.-:> \"'\\TensorintflaNeu0123ab")), max_size=40
    )
)
def test_arbitrary_text_only_raises_schema_error(text: str) -> None:
    try:
        parse_schema(text)
    except SchemaError as e:
        assert e.position is not None and 0 <= e.position <= len(text)
        assert e.schema == text


@settings(max_examples=100)
@given(schemas(), st.data())
def test_corrupted_schema_raises_schema_error_with_position(
    case: tuple[FunctionSchema, list[object]], data: st.DataObject
) -> None:
    text = str(case[0])
    i = data.draw(st.integers(0, len(text)))
    bad = (
        text[:i] + data.draw(st.sampled_from(["#", ")", "(", ",", "*", "->", "[", "="])) + text[i:]
    )
    try:
        parse_schema(bad)
    except SchemaError as e:
        assert e.position is not None and 0 <= e.position <= len(bad)


# ------------------------------------------------------------ hostile input (issue 19)


def test_sized_list_beyond_the_limit_is_refused_without_allocating() -> None:
    text = "a::b(int[100000000] x=1) -> Tensor"
    with pytest.raises(SchemaError, match=r"list size must be a positive integer up to 1024") as e:
        parse_schema(text)
    assert e.value.position == text.index("100000000")
    assert "'a::b'" in str(e.value)


def test_sized_list_at_the_limit_is_accepted() -> None:
    s = parse_schema(f"a::b(int[{MAX_LIST_SIZE}] x=1) -> Tensor")
    assert s.arguments[0].default_value == [1] * MAX_LIST_SIZE
    with pytest.raises(SchemaError, match="up to 1024"):
        ListType(INT, MAX_LIST_SIZE + 1)


@pytest.mark.parametrize("digits", ["9" * 30, "9" * 5000])
def test_huge_list_size_is_a_schema_error_not_an_overflow(digits: str) -> None:
    with pytest.raises(SchemaError, match=r"list size .* up to 1024, got '9+(\.\.\.)?'") as e:
        parse_schema(f"a::b(int[{digits}] x=1) -> Tensor")
    assert e.value.position == len("a::b(int[")


@pytest.mark.parametrize(
    ("default", "match"),
    [
        ("9223372036854775808", "out of the range of a 64-bit integer"),
        ("-9223372036854775809", "out of the range of a 64-bit integer"),
        ("9" * 5000, "out of the range of a 64-bit integer"),
    ],
)
def test_integer_defaults_must_fit_int64(default: str, match: str) -> None:
    text = f"a::b(int x={default}) -> Tensor"
    with pytest.raises(SchemaError, match=match) as e:
        parse_schema(text)
    assert e.value.position == text.index(default.lstrip("-"))


def test_integer_default_bounds_are_inclusive() -> None:
    s = parse_schema("a::b(int x=-9223372036854775808, int y=9223372036854775807) -> ()")
    assert [a.default_value for a in s.arguments] == [-(2**63), 2**63 - 1]


@pytest.mark.parametrize("default", ["1e999", "-1e999", "9" * 400 + ".0"])
def test_float_defaults_that_overflow_are_refused(default: str) -> None:
    with pytest.raises(SchemaError, match=r"out of the range of a 64-bit float \(write 'inf'"):
        parse_schema(f"a::b(float x={default}) -> Tensor")


def test_seventy_digit_float_default_is_a_float() -> None:
    s = parse_schema("a::b(float x=" + "9" * 70 + ".0) -> Tensor")
    assert s.arguments[0].default_value == pytest.approx(1e70)


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("ns::__9(Tensor x) -> Tensor", "__9"),
        ("ns::___Xc(Tensor x) -> Tensor", "___Xc"),
        ("ns::__(Tensor x) -> Tensor", "__"),
        ("__::f(Tensor x) -> Tensor", "__"),
        ("__init__::f(Tensor x) -> Tensor", "__init__"),
    ],
)
def test_dunder_like_operator_names_are_refused(text: str, part: str) -> None:
    with pytest.raises(SchemaError, match=f"operator name part '{part}' .* starts with '__'") as e:
        parse_schema(text)
    assert e.value.position == text.index(part)


def test_dunder_like_names_are_refused_in_the_model_and_signature() -> None:
    with pytest.raises(SchemaError, match="starts with '__'"):
        FunctionSchema("ns::__call__", "", (), ())
    with pytest.raises(SchemaError, match="'__x' of 'ns::__x' starts with '__'"):
        parse_signature("(Tensor x) -> Tensor", "ns::__x")


def test_single_underscore_names_are_fine() -> None:
    assert parse_schema("_ns::_x(Tensor x) -> Tensor").name == "_ns::_x"


@pytest.mark.parametrize("overload", ["_ns", "_overloads", "_set", "overloads"])
def test_overload_names_that_would_hide_packet_attributes_are_refused(overload: str) -> None:
    text = f"a::b.{overload}(Tensor x) -> Tensor"
    with pytest.raises(SchemaError, match="would hide an attribute of the op's packet") as e:
        parse_schema(text)
    assert e.value.position == text.index(overload)
    with pytest.raises(SchemaError, match="may not start with '_' or be 'overloads'"):
        parse_signature("(Tensor x) -> Tensor", "a::b", overload)
    with pytest.raises(SchemaError, match="would hide"):
        FunctionSchema("a::b", overload, (), ())
