"""The operator schema language: a parser and an immutable model of parsed schemas.

The language is the one torch uses for operators, restricted to what makes sense here::

    mylib::add.out(Tensor x, Tensor y, *, float alpha=1.0, Tensor(a!) out) -> Tensor(a!)

:func:`parse_schema` reads a full schema (name, optional overload name, arguments,
returns); :func:`parse_signature` reads the arguments-and-returns part alone, as given to
``define("mylib::sin", "(Tensor x) -> Tensor")``. Both raise :class:`SchemaError` carrying
the 0-based position of the offending character. ``str()`` of every model object gives its
canonical spelling, and ``parse_schema(str(s)) == s`` for every schema ``s`` with a name.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ._records import Record, field
from .errors import SchemaError

__all__ = [
    "BASE_TYPES",
    "MAX_LIST_SIZE",
    "Annotation",
    "Argument",
    "BaseType",
    "FunctionSchema",
    "ListType",
    "OptionalType",
    "Return",
    "SchemaType",
    "parse_schema",
    "parse_signature",
]

BASE_TYPES: tuple[str, ...] = (
    "Tensor",
    "int",
    "float",
    "bool",
    "str",
    "Scalar",
    "ScalarType",
    "Device",
    "SymInt",
    "Layout",
    "MemoryFormat",
    "Generator",
)

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CLASS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*\Z")


def _is_class_name(name: str) -> bool:
    """Whether a type name names a registered-class type (``ns::Name``)."""
    return _CLASS_RE.match(name) is not None


MAX_LIST_SIZE = 1024
"""The largest size of a sized list type (``int[n]``): a default such as ``int[3] x=1``
expands to ``n`` elements, so the size is bounded (torch accepts any size up to 2**63)."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_ENUM_TYPES = frozenset({"ScalarType", "Layout", "MemoryFormat"})


# --------------------------------------------------------------------------- types


class BaseType(Record):
    """A type without modifiers, e.g. ``Tensor`` or ``int``; ``name`` is one of
    :data:`BASE_TYPES`."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in BASE_TYPES and not _is_class_name(self.name):
            raise SchemaError(
                f"unknown type {self.name!r}; expected one of {', '.join(BASE_TYPES)} "
                "or a class name 'ns::Name'"
            )

    def __str__(self) -> str:
        return self.name

    @property
    def base(self) -> BaseType:
        """The innermost base type (``self``)."""
        return self

    def is_tensor_like(self) -> bool:
        """Whether values of this type are or contain Tensors."""
        return self.name == "Tensor"

    def is_tensor_list(self) -> bool:
        """Whether this is a list of (possibly optional) Tensors."""
        return False

    def is_optional(self) -> bool:
        """Whether ``None`` is a valid value of this type."""
        return False

    def is_list(self) -> bool:
        """Whether this is a list type (possibly optional)."""
        return False


class OptionalType(Record):
    """``T?``: a value of ``elem`` or ``None``."""

    elem: SchemaType

    def __post_init__(self) -> None:
        if isinstance(self.elem, OptionalType):
            raise SchemaError(f"optional of an optional type is not allowed: {self.elem}?")

    def __str__(self) -> str:
        return f"{self.elem}?"

    @property
    def base(self) -> BaseType:
        """The innermost base type."""
        return self.elem.base

    def is_tensor_like(self) -> bool:
        """Whether values of this type are or contain Tensors."""
        return self.elem.is_tensor_like()

    def is_tensor_list(self) -> bool:
        """Whether this is an optional list of (possibly optional) Tensors (``Tensor[]?``)."""
        return self.elem.is_tensor_list()

    def is_optional(self) -> bool:
        """Whether ``None`` is a valid value of this type (always true)."""
        return True

    def is_list(self) -> bool:
        """Whether this is an optional list type (``T[]?``)."""
        return self.elem.is_list()


class ListType(Record):
    """``T[]`` (``size`` ``None``) or ``T[n]`` (a list of ``n`` elements)."""

    elem: SchemaType
    size: int | None = None

    def __post_init__(self) -> None:
        if self.elem.is_list():
            raise SchemaError(f"nested list types are not supported: {self}")
        if self.size is not None and (
            isinstance(self.size, bool)
            or not isinstance(self.size, int)
            or not 1 <= self.size <= MAX_LIST_SIZE
        ):
            raise SchemaError(
                f"list size must be a positive integer up to {MAX_LIST_SIZE}, got {self.size!r}"
            )

    def __str__(self) -> str:
        return f"{self.elem}[{'' if self.size is None else self.size}]"

    @property
    def base(self) -> BaseType:
        """The innermost base type."""
        return self.elem.base

    def is_tensor_like(self) -> bool:
        """Whether values of this type are or contain Tensors."""
        return self.elem.is_tensor_like()

    def is_tensor_list(self) -> bool:
        """Whether this is a list of (possibly optional) Tensors."""
        return self.elem.is_tensor_like()

    def is_optional(self) -> bool:
        """Whether ``None`` is a valid value of this type (never; elements may be)."""
        return False

    def is_list(self) -> bool:
        """Whether this is a list type (always true)."""
        return True


SchemaType = BaseType | OptionalType | ListType


def _render_type(t: SchemaType, annotation: Annotation | None) -> str:
    """The type's spelling with the alias annotation right after the base name, as torch
    writes it: ``Tensor(a!)?[]``."""
    if annotation is None:
        return str(t)
    if isinstance(t, BaseType):
        return f"{t.name}{annotation}"
    if isinstance(t, OptionalType):
        return f"{_render_type(t.elem, annotation)}?"
    return f"{_render_type(t.elem, annotation)}[{'' if t.size is None else t.size}]"


# --------------------------------------------------------------------- annotations


class Annotation(Record):
    """An alias annotation: ``(a)`` (aliases set ``a``), ``(a!)`` (and writes to it),
    ``(a|b)`` (may alias either), or torch's anonymous ``!`` (written to, in an alias set
    of its own that nothing else names: ``alias_set`` is empty)."""

    alias_set: tuple[str, ...]
    is_write: bool = False

    def __post_init__(self) -> None:
        if not self.alias_set and not self.is_write:
            raise SchemaError("an alias annotation needs at least one alias name")
        for a in self.alias_set:
            if not isinstance(a, str) or not _IDENT_RE.match(a):
                raise SchemaError(f"alias name must be an identifier, got {a!r}")

    def __str__(self) -> str:
        if not self.alias_set:
            return "!"
        return f"({'|'.join(self.alias_set)}{'!' if self.is_write else ''})"

    @property
    def is_anonymous(self) -> bool:
        """Whether this is torch's anonymous mutable annotation ``Tensor!``: a fresh alias
        set per use, so it aliases no other argument or return."""
        return not self.alias_set


_ANONYMOUS_WRITE = Annotation((), True)


# ----------------------------------------------------------------------- arguments


class Argument(Record):
    """One argument: ``Tensor(a!) out``, ``int n=1``. ``default`` is the default's source
    text in canonical spacing (``None`` when there is none); ``default_value`` its value."""

    name: str
    type: SchemaType
    default: str | None = None
    annotation: Annotation | None = None
    kwarg_only: bool = False
    _value: object = field(init=False)

    def __post_init__(self) -> None:
        _check_ident(self.name, "argument name")
        if self.annotation is not None:
            _check_annotation_target(self.type, self.annotation)
        if self.default is None:
            object.__setattr__(self, "_value", None)
            return
        p = _Parser(self.default)
        node = p.parse_default_literal()
        p.expect_end("the default value")
        value = _default_value(node, self.type, self.default, self.name)
        object.__setattr__(self, "default", node.text)
        object.__setattr__(self, "_value", value)

    def __str__(self) -> str:
        text = f"{_render_type(self.type, self.annotation)} {self.name}"
        return text if self.default is None else f"{text}={self.default}"

    @property
    def has_default(self) -> bool:
        """Whether the argument has a default value."""
        return self.default is not None

    @property
    def default_value(self) -> object:
        """The default as a Python value (a fresh list for list types); ``None`` when the
        default is ``None`` or there is no default (see :attr:`has_default`)."""
        v = self._value
        return list(v) if isinstance(v, tuple) else v

    @property
    def is_write(self) -> bool:
        """Whether the operator writes to this argument (``Tensor(a!)``)."""
        return self.annotation is not None and self.annotation.is_write


class Return(Record):
    """One return value: ``Tensor``, ``Tensor(a!)``, ``Tensor values`` (named)."""

    name: str | None
    type: SchemaType
    annotation: Annotation | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            _check_ident(self.name, "return name")
        if self.annotation is not None:
            _check_annotation_target(self.type, self.annotation)

    def __str__(self) -> str:
        text = _render_type(self.type, self.annotation)
        return text if self.name is None else f"{text} {self.name}"


# ------------------------------------------------------------------ function schema


class FunctionSchema(Record):
    """A parsed operator schema.

    ``name`` is ``"ns::name"`` or a bare ``"name"`` (``""`` for a schema parsed by
    :func:`parse_signature` without a name); ``overload_name`` is ``""`` for the default
    overload. ``arguments`` holds all arguments in order, positional ones first; the
    kwarg-only ones (after ``*``) have ``kwarg_only`` set.
    """

    name: str
    overload_name: str
    arguments: tuple[Argument, ...]
    returns: tuple[Return, ...]
    #: The one return is a tuple of it, ``-> ((Tensor))``: what torch's ``infer_schema``
    #: writes for ``-> Tuple[Tensor]``; the op returns a 1-tuple (``-> (Tensor)`` is
    #: ``-> Tensor``, as in torch).
    tuple_return: bool = False
    _positional: tuple[Argument, ...] = field(init=False)
    _kwarg_only: tuple[Argument, ...] = field(init=False)
    _mutated: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.name:
            _check_op_name(self.name)
        elif self.overload_name:
            raise SchemaError("a schema without a name cannot have an overload name")
        if self.overload_name:
            _check_overload_name(self.overload_name)
        object.__setattr__(self, "arguments", tuple(self.arguments))
        object.__setattr__(self, "returns", tuple(self.returns))
        seen: set[str] = set()
        kw_started = False
        defaulted: str | None = None
        for a in self.arguments:
            if a.name in seen:
                raise SchemaError(f"duplicate argument name {a.name!r}", str(self))
            seen.add(a.name)
            if a.kwarg_only:
                kw_started = True
            elif kw_started:
                raise SchemaError(
                    f"positional argument {a.name!r} comes after kwarg-only arguments"
                )
            elif a.has_default:
                defaulted = a.name
            elif defaulted is not None:
                raise SchemaError(_after_default_message(a.name, defaulted), str(self))
        if self.tuple_return and (len(self.returns) != 1 or self.returns[0].name is not None):
            raise SchemaError("a tuple return '((T))' holds exactly one unnamed return", str(self))
        names = [r.name for r in self.returns if r.name is not None]
        if len(names) != len(set(names)):
            raise SchemaError(f"duplicate return names in {names}", str(self))
        object.__setattr__(
            self, "_positional", tuple(a for a in self.arguments if not a.kwarg_only)
        )
        object.__setattr__(self, "_kwarg_only", tuple(a for a in self.arguments if a.kwarg_only))
        object.__setattr__(self, "_mutated", tuple(a.name for a in self.arguments if a.is_write))

    def __str__(self) -> str:
        parts: list[str] = []
        star = False
        for a in self.arguments:
            if a.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(str(a))
        head = self.name
        if self.overload_name:
            head = f"{head}.{self.overload_name}"
        return f"{head}({', '.join(parts)}) -> {self._returns_str()}"

    def _returns_str(self) -> str:
        if self.tuple_return:
            return f"(({self.returns[0]}))"
        if len(self.returns) == 1 and self.returns[0].name is None:
            return str(self.returns[0])
        return f"({', '.join(str(r) for r in self.returns)})"

    @property
    def namespace(self) -> str:
        """The namespace (``"mylib"`` of ``"mylib::sin"``), ``""`` when there is none."""
        ns, sep, _ = self.name.partition("::")
        return ns if sep else ""

    @property
    def qualname(self) -> str:
        """``"ns::name"`` (the name as given, without the overload name)."""
        return self.name

    @property
    def positional(self) -> tuple[Argument, ...]:
        """The arguments before ``*``."""
        return self._positional

    @property
    def kwarg_only(self) -> tuple[Argument, ...]:
        """The arguments after ``*``."""
        return self._kwarg_only

    @property
    def is_mutable(self) -> bool:
        """Whether the operator writes to any of its arguments."""
        return bool(self._mutated)

    @property
    def mutated_arguments(self) -> tuple[str, ...]:
        """Names of the arguments the operator writes to, in order."""
        return self._mutated

    def with_name(self, name: str, overload_name: str = "") -> FunctionSchema:
        """A copy of this schema with another name and overload name."""
        return self._replace(name=name, overload_name=overload_name)


# -------------------------------------------------------------- checks on the model


def _check_ident(name: object, what: str) -> None:
    if not isinstance(name, str) or not _IDENT_RE.match(name):
        raise SchemaError(f"{what} must be an identifier, got {name!r}")


def _check_op_name(name: str) -> None:
    parts = name.split("::")
    if len(parts) > 2:
        raise SchemaError(f"operator name must be 'name' or 'namespace::name', got {name!r}")
    for part in parts:
        _check_ident(part, "operator name part")
        if part.startswith("__"):
            raise SchemaError(_DUNDER_MESSAGE.format(part=part, name=name))


# ``ops.ns.name`` is attribute access, and Python keeps names with two leading underscores
# for its own protocols (``__deepcopy__``, ``__reduce_ex__``, name mangling ...).
_DUNDER_MESSAGE = (
    "operator name part {part!r} of {name!r} starts with '__': names with two leading "
    "underscores are reserved for Python's own attributes and could not be reached as "
    "oplib.ops.<namespace>.<name>"
)


def _check_overload_name(overload_name: str) -> None:
    _check_ident(overload_name, "overload name")
    if overload_name == "default":
        raise SchemaError(
            "overload name 'default' is reserved for the unnamed overload; "
            "use '' for the default overload"
        )
    problem = _overload_name_problem(overload_name)
    if problem is not None:
        raise SchemaError(problem)


def _overload_name_problem(overload_name: str) -> str | None:
    """Why ``overload_name`` cannot be an attribute of its op's packet
    (``ops.ns.op.<overload>``), or None. ('default' has its own message.)"""
    if overload_name.startswith("_") or overload_name == "overloads":
        return (
            f"overload name {overload_name!r} would hide an attribute of the op's packet "
            "(ops.<namespace>.<op>.<overload>): overload names may not start with '_' or be "
            "'overloads'"
        )
    return None


def _annotation_error(t: SchemaType, annotation: Annotation) -> str | None:
    # torch parses the anonymous ``!`` on every type (vLLM writes ``int!?``); named alias
    # sets stay Tensor-only here.
    if t.base.name != "Tensor" and not annotation.is_anonymous:
        kind = "mutable alias annotation" if annotation.is_write else "alias annotation"
        return f"{kind} {annotation} is only allowed on Tensor types, not on '{t}'"
    return None


def _check_annotation_target(t: SchemaType, annotation: Annotation) -> None:
    msg = _annotation_error(t, annotation)
    if msg is not None:
        raise SchemaError(msg)


def _after_default_message(name: str, defaulted: str) -> str:
    return (
        f"positional argument {name!r} has no default but comes after {defaulted!r}, "
        f"which has one; give it a default or make it kwarg-only (after '*')"
    )


# ------------------------------------------------------------------------ tokenizer


class _Tok:
    __slots__ = ("kind", "pos", "text")

    def __init__(self, kind: str, text: str, pos: int) -> None:
        self.kind = kind
        self.text = text
        self.pos = pos


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<arrow>->)
  | (?P<dcolon>::)
  | (?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<punct>[()\[\],*?!|=.\-])
  | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}


def _tokenize(text: str) -> list[_Tok]:
    toks = []
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        if kind == "ws":
            continue
        tok = m.group()
        if kind == "bad" and tok in "\"'":
            raise SchemaError("unterminated string literal", text, m.start())
        toks.append(_Tok(kind, tok, m.start()))  # type: ignore[arg-type]
    toks.append(_Tok("eof", "", len(text)))
    return toks


def _describe(tok: _Tok) -> str:
    return "end of schema" if tok.kind == "eof" else repr(tok.text)


def _unescape(literal: str, schema: str, pos: int) -> str:
    body = literal[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = body[i + 1]
        if esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
            continue
        width = {"x": 2, "u": 4, "U": 8}.get(esc)
        digits = body[i + 2 : i + 2 + width] if width else ""
        if width and len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise SchemaError(f"invalid escape '\\{esc}{digits}'", schema, pos + 1 + i)
            out.append(chr(code))
            i += 2 + width
            continue
        raise SchemaError(f"invalid escape sequence '\\{esc}' in string", schema, pos + 1 + i)
    return "".join(out)


# -------------------------------------------------------------------------- parser

# Types are immutable and few (``Tensor``, ``int[]``, ``Tensor?`` ...): the parser shares
# one object per type instead of building it again for each argument.
_TYPES: dict[tuple[Any, ...], Any] = {}


def _interned(cls: type[Any], *fields: Any) -> Any:
    key = (cls, *fields)
    t = _TYPES.get(key)
    if t is None:
        t = _TYPES[key] = cls(*fields)
    return t


class _Lit:
    """A parsed default value: ``kind`` is none/bool/int/float/str/ident/list."""

    __slots__ = ("items", "kind", "pos", "text", "value")

    def __init__(
        self, kind: str, text: str, pos: int, value: object, items: tuple[_Lit, ...] = ()
    ) -> None:
        self.kind = kind
        self.text = text
        self.pos = pos
        self.value = value
        self.items = items


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.tuple_return = False

    def peek(self, k: int = 0) -> _Tok:
        if not k:  # the common case; next() never moves past the final "eof" token
            return self.toks[self.i]
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        t = self.toks[self.i]
        return t.text == text and t.kind in ("punct", "arrow", "dcolon")

    def error(self, message: str, pos: int) -> SchemaError:
        return SchemaError(message, self.text, pos)

    def fail(self, expected: str, tok: _Tok | None = None) -> SchemaError:
        tok = tok or self.peek()
        return self.error(f"expected {expected}, got {_describe(tok)}", tok.pos)

    def expect(self, text: str, context: str) -> _Tok:
        if not self.at(text):
            raise self.fail(f"'{text}' {context}")
        return self.next()

    def expect_ident(self, what: str) -> _Tok:
        t = self.peek()
        if t.kind != "ident":
            raise self.fail(what)
        return self.next()

    def expect_end(self, after: str) -> None:
        if self.peek().kind != "eof":
            raise self.fail(f"end of schema after {after}")

    # -- names

    def parse_op_name(self) -> tuple[str, str]:
        first = self.peek()
        if self.at("("):
            raise self.error("empty operator name: expected a name before '('", first.pos)
        first_tok = self.expect_ident("an operator name (an identifier)")
        self.check_not_dunder(first_tok, f"{first_tok.text}::...")
        name = first_tok.text
        if self.at("::"):
            self.next()
            op_tok = self.expect_ident(f"an operator name after {name!r}::")
            name = f"{name}::{op_tok.text}"
            self.check_not_dunder(op_tok, name)
            if self.at("::"):
                raise self.fail("'.' or '(' after the operator name (only one '::' allowed)")
        overload = ""
        if self.at("."):
            self.next()
            tok = self.expect_ident("an overload name (an identifier) after '.'")
            if tok.text == "default":
                raise self.error(
                    "overload name 'default' is reserved for the unnamed overload", tok.pos
                )
            problem = _overload_name_problem(tok.text)
            if problem is not None:
                raise self.error(problem, tok.pos)
            overload = tok.text
        return name, overload

    def check_not_dunder(self, tok: _Tok, name: str) -> None:
        if tok.text.startswith("__"):
            message = _DUNDER_MESSAGE.format(part=tok.text, name=name)
            raise self.error(message, tok.pos)

    # -- types

    def parse_type(self, what: str) -> tuple[SchemaType, Annotation | None, int]:
        tok = self.peek()
        if tok.kind != "ident":
            raise self.fail(what)
        name = self.parse_class_name() if tok.text not in BASE_TYPES else self.next().text
        t: SchemaType = _interned(BaseType, name)
        annotation = None
        if self.at("!"):
            self.next()
            annotation = _ANONYMOUS_WRITE
        elif self.at("("):
            ann_pos = self.peek().pos
            annotation = self.parse_annotation()
            msg = _annotation_error(t, annotation)
            if msg is not None:
                raise self.error(msg, ann_pos)
        while True:
            if self.at("?"):
                q = self.next()
                if isinstance(t, OptionalType):
                    raise self.error(f"type '{t}' is already optional", q.pos)
                t = _interned(OptionalType, t)
            elif self.at("["):
                lb = self.next()
                if t.is_list():
                    raise self.error(f"nested list types are not supported: '{t}[]'", lb.pos)
                size = None
                if self.peek().kind == "num":
                    num = self.next()
                    if not num.text.isdigit() or not 1 <= _bounded_int(num.text) <= MAX_LIST_SIZE:
                        raise self.error(
                            f"list size must be a positive integer up to {MAX_LIST_SIZE}, "
                            f"got {_clip(num.text)!r}",
                            num.pos,
                        )
                    size = int(num.text)
                self.expect("]", "to close the list type" if size else "or a list size")
                t = _interned(ListType, t, size)
            else:
                return t, annotation, tok.pos

    def parse_class_name(self) -> str:
        """A class type: ``ns::Name``, or torch's ``__torch__.torch.classes.ns.Name``; the
        canonical name is ``ns::Name``."""
        tok = self.peek()
        if self.peek(1).kind == "dcolon" and self.peek(2).kind == "ident":
            self.next()
            self.next()
            return f"{tok.text}::{self.next().text}"
        parts = [tok.text]
        while self.peek(len(parts) * 2 - 1).text == "." and (
            self.peek(len(parts) * 2).kind == "ident"
        ):
            parts.append(self.peek(len(parts) * 2).text)
        if len(parts) == 5 and parts[:3] == ["__torch__", "torch", "classes"]:
            for _ in range(9):
                self.next()
            return f"{parts[3]}::{parts[4]}"
        raise self.error(
            f"unknown type {tok.text!r}; expected one of {', '.join(BASE_TYPES)} or a class "
            "name 'ns::Name'",
            tok.pos,
        )

    def parse_annotation(self) -> Annotation:
        self.next()
        aliases = [self.expect_ident("an alias name in the annotation").text]
        while self.at("|"):
            self.next()
            aliases.append(self.expect_ident("an alias name after '|'").text)
        write = False
        if self.at("!"):
            self.next()
            write = True
        if not self.at(")"):
            raise self.fail("')' to close the alias annotation" if write else "'|', '!' or ')'")
        self.next()
        return Annotation(tuple(aliases), write)

    # -- default values

    def parse_default_literal(self, negative: bool = False) -> _Lit:
        tok = self.peek()
        if self.at("["):
            self.next()
            items: list[_Lit] = []
            if not self.at("]"):
                while True:
                    if self.at("["):
                        raise self.error(
                            "nested lists are not allowed as defaults", self.peek().pos
                        )
                    items.append(self.parse_default_literal())
                    if self.at(","):
                        self.next()
                        continue
                    if not self.at("]"):
                        raise self.fail("',' or ']' in the list default")
                    break
            self.next()
            text = "[" + ", ".join(it.text for it in items) + "]"
            return _Lit("list", text, tok.pos, None, tuple(items))
        if self.at("-"):
            self.next()
            inner = self.peek()
            if inner.kind == "num" or (inner.kind == "ident" and inner.text == "inf"):
                lit = self.parse_default_literal(negative=True)
                value = -lit.value  # type: ignore[operator]
                return _Lit(lit.kind, f"-{lit.text}", tok.pos, value)
            raise self.fail("a number after '-'")
        if tok.kind == "num":
            self.next()
            if re.fullmatch(r"[0-9]+", tok.text):
                value = _bounded_int(tok.text)
                if value > _INT64_MAX + negative:
                    raise self.error(
                        f"integer default {_clip(tok.text)} is out of the range of a 64-bit "
                        f"integer [{_INT64_MIN}, {_INT64_MAX}]",
                        tok.pos,
                    )
                return _Lit("int", tok.text, tok.pos, value)
            try:
                number = float(tok.text)
            except ValueError:
                raise self.error(f"invalid number {_clip(tok.text)!r}", tok.pos) from None
            if number == math.inf:
                raise self.error(
                    f"float default {_clip(tok.text)} is out of the range of a 64-bit float "
                    f"(write 'inf' for infinity)",
                    tok.pos,
                )
            return _Lit("float", tok.text, tok.pos, number)
        if tok.kind == "str":
            self.next()
            return _Lit("str", tok.text, tok.pos, _unescape(tok.text, self.text, tok.pos))
        if tok.kind == "ident":
            self.next()
            word = tok.text
            if word == "None":
                return _Lit("none", word, tok.pos, None)
            if word in ("True", "False"):
                return _Lit("bool", word, tok.pos, word == "True")
            if word in ("inf", "nan"):
                return _Lit("float", word, tok.pos, float(word))
            return _Lit("ident", word, tok.pos, word)
        raise self.fail("a default value")

    # -- arguments and returns

    def parse_arguments(self) -> tuple[Argument, ...]:
        self.expect("(", "to start the argument list")
        args: list[Argument] = []
        seen: set[str] = set()
        star_pos: int | None = None
        defaulted: str | None = None
        if self.at(")"):
            self.next()
            return ()
        while True:
            if self.at("*"):
                star = self.next()
                if star_pos is not None:
                    raise self.error("'*' given twice in the argument list", star.pos)
                star_pos = star.pos
                if not self.at(","):
                    raise self.fail("',' and a kwarg-only argument after '*'")
                self.next()
                continue
            t, annotation, _ = self.parse_type("an argument type")
            name_tok = self.peek()
            if name_tok.kind != "ident":
                raise self.fail(f"an argument name after type '{_render_type(t, annotation)}'")
            self.next()
            name = name_tok.text
            if name in seen:
                raise self.error(f"duplicate argument name {name!r}", name_tok.pos)
            seen.add(name)
            default = None
            if self.at("="):
                self.next()
                lit = self.parse_default_literal()
                _default_value(lit, t, self.text, name)
                default = lit.text
            kwarg_only = star_pos is not None
            if not kwarg_only:
                if default is not None:
                    defaulted = defaulted or name
                elif defaulted is not None:
                    raise self.error(_after_default_message(name, defaulted), name_tok.pos)
            args.append(Argument(name, t, default, annotation, kwarg_only))
            if self.at(","):
                self.next()
                continue
            if self.at(")"):
                self.next()
                return tuple(args)
            raise self.fail(f"')' or ',' after argument {name!r}")

    def parse_returns(self) -> tuple[Return, ...]:
        if not self.at("("):
            t, annotation, _ = self.parse_type("a return type or '(' after '->'")
            return (Return(None, t, annotation),)
        self.next()
        if self.at("("):  # "((Tensor))": one return, a tuple of one Tensor (torch's Tuple[T])
            self.next()
            t, annotation, _ = self.parse_type("a return type")
            self.expect(")", f"after return type '{t}' (a tuple return holds one type)")
            self.expect(")", "after the tuple return")
            self.tuple_return = True
            return (Return(None, t, annotation),)
        rets: list[Return] = []
        names: set[str] = set()
        if self.at(")"):
            self.next()
            return ()
        while True:
            t, annotation, _ = self.parse_type("a return type")
            name = None
            if self.peek().kind == "ident":
                name_tok = self.next()
                name = name_tok.text
                if name in names:
                    raise self.error(f"duplicate return name {name!r}", name_tok.pos)
                names.add(name)
            rets.append(Return(name, t, annotation))
            if self.at(","):
                self.next()
                continue
            if self.at(")"):
                self.next()
                return tuple(rets)
            last = f"return {name!r}" if name else f"return type '{t}'"
            raise self.fail(f"')' or ',' after {last}")

    def parse_rest(self, name: str, overload: str, namespace: str = "") -> FunctionSchema:
        try:
            args = self.parse_arguments()
            if not self.at("->"):
                raise self.fail("'->' and the returns after the argument list")
            self.next()
            self.tuple_return = False
            rets = self.parse_returns()
            self.expect_end("the returns")
            return FunctionSchema(name, overload, args, rets, self.tuple_return)
        except SchemaError as e:
            if not name:
                raise
            # Name the operator being defined, as torch does ("... for operator ns::op").
            qual = name if "::" in name or not namespace else f"{namespace}::{name}"
            if overload:
                qual = f"{qual}.{overload}"
            raise SchemaError(
                f"in the schema of operator {qual!r}: {e.reason}", e.schema, e.position
            ) from None


def _clip(text: str, width: int = 40) -> str:
    """``text`` shortened for a message (the caret line shows where it is)."""
    return text if len(text) <= width else f"{text[: width - 3]}..."


def _bounded_int(digits: str) -> int:
    """``int(digits)``, or one more than the int64 range for longer digit strings (which
    ``int`` would refuse past 4300 digits, or convert in quadratic time)."""
    if len(digits.lstrip("0")) > 19:
        return _INT64_MAX + 2
    return int(digits)


def _type_error(lit: _Lit, t: SchemaType, schema: str, arg: str) -> SchemaError:
    return SchemaError(
        f"invalid default {lit.text} for argument {arg!r} of type '{t}'", schema, lit.pos
    )


def _default_value(lit: _Lit, t: SchemaType, schema: str, arg: str) -> object:
    """Check ``lit`` against ``t`` and return its Python value (lists as tuples)."""
    if isinstance(t, OptionalType):
        if lit.kind == "none":
            return None
        return _default_value(lit, t.elem, schema, arg)
    if isinstance(t, ListType):
        if lit.kind == "list":
            if t.size is not None and lit.items and len(lit.items) != t.size:
                raise SchemaError(
                    f"default for argument {arg!r} of type '{t}' has {len(lit.items)} "
                    f"elements, expected {t.size}",
                    schema,
                    lit.pos,
                )
            return tuple(_default_value(it, t.elem, schema, arg) for it in lit.items)
        if t.size is not None and lit.kind != "none":
            return (_default_value(lit, t.elem, schema, arg),) * t.size
        raise _type_error(lit, t, schema, arg)
    name = t.name
    kind = lit.kind
    if name in ("int", "SymInt") and kind == "int":
        return lit.value
    if name == "float" and kind in ("int", "float"):
        return float(lit.value)  # type: ignore[arg-type]
    if name == "bool" and kind == "bool":
        return lit.value
    if name == "Scalar" and kind in ("int", "float", "bool"):
        return lit.value
    if name in ("str", "Device") and kind == "str":
        return lit.value
    if name in _ENUM_TYPES and kind == "ident":
        return lit.value
    raise _type_error(lit, t, schema, arg)


# ----------------------------------------------------------------------- public API


def parse_schema(text: str, namespace: str = "") -> FunctionSchema:
    """Parse a full schema ``ns::name.overload(args) -> returns`` (the namespace and the
    overload name are optional; ``namespace``, when given, only names the operator in
    error messages of a schema without one).

    Raises :class:`SchemaError` with the position of the offending character, naming the
    operator when the error is after its name.
    """
    p = _Parser(text)
    name, overload = p.parse_op_name()
    return p.parse_rest(name, overload, namespace)


def parse_signature(text: str, name: str = "", overload_name: str = "") -> FunctionSchema:
    """Parse an arguments-and-returns schema ``(Tensor x) -> Tensor``; the operator's
    ``name`` (``"ns::name"``) and ``overload_name`` are given separately.

    Raises :class:`SchemaError` with the position of the offending character.
    """
    if name:
        name_parser = _Parser(name)
        parsed_name, parsed_overload = name_parser.parse_op_name()
        name_parser.expect_end("the operator name")
        if parsed_overload:
            raise SchemaError(
                "give the overload name as overload_name, not in the name", name, name.index(".")
            )
        name = parsed_name
    if overload_name:
        op = _Parser(overload_name)
        tok = op.expect_ident("an overload name (an identifier)")
        op.expect_end("the overload name")
        if tok.text == "default":
            raise SchemaError(
                "overload name 'default' is reserved for the unnamed overload", overload_name, 0
            )
        problem = _overload_name_problem(tok.text)
        if problem is not None:
            raise SchemaError(problem, overload_name, 0)
    p = _Parser(text)
    first = p.peek()
    if first.kind == "ident":
        raise SchemaError(
            f"expected '(' to start the argument list, got {first.text!r}: the operator name "
            f"is given separately, so the schema should start with '('",
            text,
            first.pos,
        )
    return p.parse_rest(name, overload_name)
