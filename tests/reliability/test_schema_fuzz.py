"""Hostile schemas: the parser and ``define`` answer every input with a parsed schema or
one of oplib's own errors, quickly and without allocating in proportion to a number
written in the schema.

Inputs are token soups (schema words, punctuation, huge and odd numbers, dunder-like
names, escapes, non-ASCII), valid schemas with random edits, and arbitrary text. An input
that parses must round-trip through ``str()``; one that does not must raise
``SchemaError`` pointing inside the text; ``define`` may also refuse with a
``RegistrationError`` and must then leave nothing registered.

The suite runs a bounded number of examples. For a bigger run by hand::

    python tests/reliability/test_schema_fuzz.py 100000

prints the inputs tried and the outcomes by kind (``crash:...``, ``bad-position``,
``round-trip``, ``slow`` and ``half-registered`` must all be 0).
"""

from __future__ import annotations

import collections
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core._opset import CORE_OPS
from oplib_core._registry.registry import REGISTRY
from oplib_core._schema import parse_schema, parse_signature
from oplib_core.errors import RegistrationError, SchemaError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ (helpers)
from helpers import drop_namespace, unique_ns

WORDS = [
    *("Tensor", "int", "float", "bool", "str", "Scalar", "ScalarType", "Device", "SymInt"),
    *("Layout", "MemoryFormat", "Generator", "None", "True", "False", "inf", "nan"),
    *("a", "b", "x", "ns", "self", "out", "default", "name", "_", "_x", "__", "__9"),
    *("___Xc", "__init__", "__call__", "oplib", "prim", "Tensor(a!)", "Tensor(a)"),
]
PUNCT = [*"()[],*?!|=.-:", "->", "::", " ", "'", '"', "\\", "(a|b!)", "\t", "\n"]
NUMBERS = [
    *("0", "1", "-1", "3", "1024", "1025", "100000000", "1e999", "-1e999", "1.5"),
    *("0x10", "1_0", "1e", "1.", ".5", "9223372036854775807", "9223372036854775808"),
    *("-9223372036854775809", "9" * 30, "9" * 70, "9" * 70 + ".0", "9" * 400, "9" * 5000),
]
STRINGS = ['"x"', "'a\\n'", '"\\ud800"', '"\\U0010ffff"', '"\\U00110000"', '"\\x4"', "'\\q'"]
ODD = ["é", "λ", "\x00", "💥", "\ufeff", "\u0661", "Ⅻ", "ß"]
TOKENS = WORDS + PUNCT + NUMBERS + STRINGS + ODD

SEEDS = [
    *(op.schema for op in CORE_OPS),
    "a::b(int[3] x=1, float[2]? y=None, *, Tensor(a!) out) -> Tensor(a!)",
    "a::b.ov(Tensor[] xs, Scalar s=-1.5e3, str m='mean', ScalarType? d=None) -> (Tensor, Tensor)",
    "a::b(SymInt[2] size=[1, 2], Device? device=None, bool k=False) -> ((Tensor))",
]

SLOW_S = 0.25  # a parse this slow means something grew with the input's numbers
MEMORY_BYTES = 2_000_000  # peak allocation while parsing one input (tracemalloc runs)


def _token_soup(rng: random.Random) -> str:
    head = rng.choice(["", "a::b", "ns::__9", "a::b.ov", "(", "a::_"])
    return head + "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 30)))


def _edited(rng: random.Random) -> str:
    text = list(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(text) + 1)
        action = rng.randrange(3)
        if action == 0 and text:
            del text[min(i, len(text) - 1)]
        elif action == 1:
            text.insert(i, rng.choice(TOKENS))
        elif text:
            text[min(i, len(text) - 1)] = rng.choice(TOKENS)
    return "".join(text)


def _any_text(rng: random.Random) -> str:
    return "".join(chr(rng.randrange(0x20, 0x250)) for _ in range(rng.randint(0, 40)))


def random_schemas(rng: random.Random) -> Iterator[str]:
    """An endless stream of hostile schemas."""
    makers: list[Callable[[random.Random], str]] = [_token_soup, _edited, _edited, _any_text]
    while True:
        yield rng.choice(makers)(rng)


def define_signature(rng: random.Random) -> str:
    """A hostile arguments-only schema (what ``define`` takes), often close to a valid one."""
    text = rng.choice([_edited, _edited, _token_soup])(rng)
    if rng.random() < 0.7:
        return text[text.find("(") :] if "(" in text else text
    if rng.random() < 0.5:
        seed = rng.choice(SEEDS)
        return seed[seed.find("(") :]
    return text


# -- what counts as a good answer --------------------------------------------------------------


def parse_outcome(text: str) -> str:
    """``ok``, ``schema-error``, or the kind of failure: ``crash:<type>``, ``bad-position``,
    ``round-trip`` or ``slow``."""
    start = time.perf_counter()
    try:
        s = parse_schema(text)
    except SchemaError as e:
        if e.position is not None and not 0 <= e.position <= len(text):
            return "bad-position"
        outcome = "schema-error"
    except Exception as e:
        return f"crash:{type(e).__name__}"
    else:
        try:
            again = parse_schema(str(s))
        except Exception as e:
            return f"round-trip:{type(e).__name__}"
        outcome = "ok" if again == s else "round-trip"
    return "slow" if time.perf_counter() - start > SLOW_S else outcome


def define_outcome(ns: str, name: str, signature: str) -> str:
    """``define(f"{ns}::{name}", signature)``: ``ok`` (and the op is reachable and then
    removed), ``refused`` (SchemaError or RegistrationError, nothing left registered), or
    the kind of failure."""
    qualname = f"{ns}::{name}"
    before = set(REGISTRY.ops)
    try:
        defined = oplib.define(qualname, signature)
    except (SchemaError, RegistrationError):
        return "refused" if set(REGISTRY.ops) == before else "half-registered"
    except Exception as e:
        return f"crash:{type(e).__name__}"
    try:
        op = oplib.lookup(defined)
        op_name, _, overload = defined.split("::")[1].partition(".")
        packet = getattr(getattr(oplib.ops, ns), op_name)
        if op.name() != defined or getattr(packet, overload or "default") is not op:
            return "unreachable"
    except Exception as e:
        return f"unreachable:{type(e).__name__}"
    finally:
        try:
            drop_namespace(ns)
        except Exception as e:
            return f"crash-on-destroy:{type(e).__name__}"
    return "ok" if set(REGISTRY.ops) == before else "left-behind"


GOOD_PARSE = {"ok", "schema-error"}
GOOD_DEFINE = {"ok", "refused"}


# -- the suite's bounded run -------------------------------------------------------------------

_hostile = st.randoms(use_true_random=False).map(lambda r: next(random_schemas(r)))


@settings(max_examples=400)
@given(text=st.one_of(_hostile, st.text(max_size=60)))
def test_parser_answers_every_input_with_a_schema_or_a_schema_error(text: str) -> None:
    assert parse_outcome(text) in GOOD_PARSE, text


@settings(max_examples=150)
@given(
    name=st.one_of(
        st.sampled_from([w for w in WORDS if w.isidentifier()]),
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}(\.[A-Za-z_][A-Za-z0-9_]{0,4})?", fullmatch=True),
        st.text(max_size=8),
    ),
    rng=st.randoms(use_true_random=False),
)
def test_define_answers_every_input_with_an_op_or_a_refusal(name: str, rng: random.Random) -> None:
    signature = define_signature(rng)
    assert define_outcome(unique_ns("fz"), name, signature) in GOOD_DEFINE, (name, signature)


# -- the issue's cases, and the bounds they need ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a::b(int[100000000] x=1) -> Tensor", "list size must be a positive integer up to"),
        ("a::b(int[999999999999999999999999999999] x=1) -> Tensor", "list size"),
        ("a::b(int[" + "9" * 5000 + "] x=1) -> Tensor", "list size"),
        ("a::b(float x=" + "9" * 400 + ") -> Tensor", "out of the range of a 64-bit integer"),
        ("a::b(float x=1e999) -> Tensor", "out of the range of a 64-bit float"),
        ("a::b(int x=" + "9" * 5000 + ") -> Tensor", "out of the range of a 64-bit integer"),
        ("ns::__9(Tensor x) -> Tensor", "starts with '__'"),
        ("ns::___Xc(Tensor x) -> Tensor", "starts with '__'"),
        ("ns::__(Tensor x) -> Tensor", "starts with '__'"),
    ],
)
def test_issue_cases_are_schema_errors_that_stay_small(text: str, words: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match=words) as info:
            parse_schema(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BYTES, f"{peak} bytes for {text[:40]!r}"
    assert info.value.position is not None and 0 <= info.value.position < len(text)
    assert info.value.schema == text


def test_seventy_digit_float_default_parses() -> None:
    s = parse_signature("(float x=" + "9" * 70 + ".0) -> Tensor")
    assert s.arguments[0].default_value == pytest.approx(1e70)


@pytest.mark.parametrize("name", ["__9", "___Xc", "__", "__init__", "__call__"])
def test_define_refuses_dunder_like_names_and_registers_nothing(ns: str, name: str) -> None:
    before = set(REGISTRY.ops)
    with pytest.raises(SchemaError, match=f"'{name}' of '{ns}::{name}' starts with '__'"):
        oplib.define(f"{ns}::{name}", "(Tensor x) -> Tensor")
    assert set(REGISTRY.ops) == before


@pytest.mark.parametrize("name", ["name", "_ops", "_missing", "_", "default"])
def test_ops_named_like_namespace_internals_are_reachable(ns: str, name: str) -> None:
    """``ops.<ns>`` keeps nothing under a non-dunder name, so no op name is shadowed (an
    op called ``name`` used to crash define while the packet was built)."""
    assert define_outcome(ns, name, "(Tensor x) -> Tensor") == "ok"


# -- the bigger run, by hand -------------------------------------------------------------------


def main(count: int, seed: int = 19) -> dict[str, collections.Counter[str]]:
    """Run ``count`` inputs through the parser and ``count // 10`` through ``define``."""
    rng = random.Random(seed)
    stream = random_schemas(rng)
    parsed: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    for _ in range(count):
        text = next(stream)
        outcome = parse_outcome(text)
        parsed[outcome] += 1
        examples.setdefault(outcome, text)
    print(f"parser: {count} inputs: {dict(parsed)}", flush=True)
    defined: collections.Counter[str] = collections.Counter()
    for i in range(count // 10):
        name = rng.choice(
            [w for w in WORDS if w.isidentifier()] + [_any_text(rng)[:6], f"op.{rng.choice(WORDS)}"]
        )
        outcome = define_outcome(f"fz{i}_ns", name, define_signature(rng))
        defined[outcome] += 1
        examples.setdefault(f"define {outcome}", name)
    print(f"define: {count // 10} inputs: {dict(defined)}")
    for kind, text in examples.items():
        if kind.split(":")[0] not in GOOD_PARSE | GOOD_DEFINE | {"define ok", "define refused"}:
            print(f"  e.g. {kind}: {text[:120]!r}")
    return {"parse": parsed, "define": defined}


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10000)
