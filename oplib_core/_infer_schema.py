"""Infer an operator schema from a Python function's type annotations, as
``torch.library.infer_schema`` does."""

from __future__ import annotations

import ast
import builtins
import collections.abc
import inspect
import numbers
import types
import typing
from collections.abc import Callable, Iterable

import numpy as np

from ._device import Device
from ._schema import BaseType, ListType, OptionalType, SchemaType, parse_signature
from ._tensor.tensor import Tensor
from .errors import SchemaError

__all__ = ["infer_schema"]

UNKNOWN_MUTATES = "unknown"

_TENSOR = BaseType("Tensor")
_SCALAR = BaseType("Scalar")
_PLAIN = {int: "int", float: "float", bool: "bool", str: "str"}
_LIST_ELEMS = frozenset({"Tensor", "int", "float", "bool", "Scalar"})
_SEQUENCE_ORIGINS = (list, collections.abc.Sequence)
_SCALAR_UNION = frozenset({"int", "float", "bool"})

SUPPORTED_PARAM_TYPES = (
    "Tensor (oplib Tensor, numpy.ndarray, cupy.ndarray), int, float, bool, str, "
    "Scalar (int | float [| bool], numbers.Number), ScalarType (numpy.dtype, "
    "type[numpy.generic]), Device, Optional[T] of those, Sequence[T]/list[T] and "
    "Optional[Sequence[T]] for T in Tensor, int, float, bool, Scalar, and "
    "Sequence[Optional[Tensor]]"
)
SUPPORTED_RETURN_TYPES = (
    "None, Tensor, Sequence[Tensor]/list[Tensor], int, float, bool, Scalar, and tuples of those"
)

_STRING_NAMES: dict[str, object] = {
    "Tensor": Tensor,
    "oplib.Tensor": Tensor,
    "oplib_core.Tensor": Tensor,
    "oplib_core._tensor.tensor.Tensor": Tensor,
    "oplib_core.tensor.Tensor": Tensor,
    "np.ndarray": np.ndarray,
    "numpy.ndarray": np.ndarray,
    "np.dtype": np.dtype,
    "numpy.dtype": np.dtype,
    "np.generic": np.generic,
    "numpy.generic": np.generic,
    "dtype": np.dtype,
    "Device": Device,
    "oplib.Device": Device,
    "oplib_core.Device": Device,
    "Number": numbers.Number,
    "numbers.Number": numbers.Number,
}
for _n in ("Optional", "Union", "Sequence", "List", "Tuple", "Type"):
    _STRING_NAMES[_n] = _STRING_NAMES[f"typing.{_n}"] = getattr(typing, _n)
_STRING_NAMES["collections.abc.Sequence"] = collections.abc.Sequence


class _CupyNdarray:
    """Stands for ``cupy.ndarray`` named in a string annotation, without importing cupy."""


class _Unsupported(Exception):
    """An annotation that has no schema type; carries the reason when there is one."""


def infer_schema(
    prototype_function: Callable[..., object],
    /,
    *,
    mutates_args: Iterable[str] | str,
    op_name: str | None = None,
) -> str:
    """Infer the schema of ``prototype_function`` from its type annotations.

    Returns the arguments-and-returns schema ``"(Tensor x, int n=1) -> Tensor"``, or
    ``"op_name(...) -> ..."`` when ``op_name`` is given. ``mutates_args`` names the
    Tensor parameters the function writes to, or is ``"unknown"`` to mark every Tensor
    parameter as written to. A written parameter at position ``i`` gets the alias
    annotation ``(a<i>!)``, as torch writes it.

    Raises :class:`SchemaError` naming the offending parameter when a parameter has no or
    an unsupported annotation or default, is ``*args``/``**kwargs``/positional-only, or
    when ``mutates_args`` names a missing or non-Tensor parameter.
    """
    sig = inspect.signature(prototype_function)

    def error(what: str) -> SchemaError:
        return SchemaError(f"infer_schema(func): {what} Got func with signature {sig}")

    unknown = _check_mutates_args(mutates_args)
    mutated = set() if unknown else set(mutates_args)
    hints = _type_hints(prototype_function)
    params: list[str] = []
    seen: set[str] = set()
    saw_kwarg_only = False
    for idx, (name, param) in enumerate(sig.parameters.items()):
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise error(
                f"Parameter {name} is {param.kind.description}; we do not support "
                f"positional-only args, varargs, or varkwargs."
            )
        if param.kind is param.KEYWORD_ONLY and not saw_kwarg_only:
            params.append("*")
            saw_kwarg_only = True
        if param.annotation is inspect.Parameter.empty:
            raise error(f"Parameter {name} must have a type annotation.")
        annotation = hints.get(name, param.annotation)
        try:
            schema_type = _param_type(annotation, prototype_function)
        except _Unsupported as e:
            detail = f" {e}" if str(e) else ""
            raise error(
                f"Parameter {name} has unsupported type {_show(param.annotation)}.{detail} "
                f"The valid types are: {SUPPORTED_PARAM_TYPES}."
            ) from None
        type_text = str(schema_type)
        if (unknown and schema_type.is_tensor_like()) or name in mutated:
            if not schema_type.is_tensor_like():
                raise error(
                    f"Parameter {name} is in mutates_args but only Tensors or collections "
                    f"of Tensors can be mutated (its type is {type_text})."
                )
            type_text = f"Tensor(a{idx}!){type_text[len('Tensor') :]}"
        seen.add(name)
        if param.default is inspect.Parameter.empty:
            params.append(f"{type_text} {name}")
        else:
            default = _default_text(param.default)
            if default is None:
                raise error(
                    f"Parameter {name} has an unsupported default value {param.default!r} of "
                    f"type {type(param.default).__name__}; defaults may be None, int, float, "
                    f"bool, str, a Device or a numpy dtype."
                )
            params.append(f"{type_text} {name}={default}")
    missing = mutated - seen
    if missing:
        raise error(
            f"{sorted(missing)} in mutates_args were not found in the function's signature. "
            f"mutates_args should contain the names of all args that the function mutates, "
            f"or just the string 'unknown' if you don't know."
        )
    if sig.return_annotation is inspect.Signature.empty:
        raise error("No return type annotation was provided. Please add one.")
    try:
        ret = _return_text(hints.get("return", sig.return_annotation), prototype_function)
    except _Unsupported:
        raise error(
            f"Return has unsupported type {_show(sig.return_annotation)}. "
            f"The valid types are: {SUPPORTED_RETURN_TYPES}."
        ) from None
    text = f"({', '.join(params)}) -> {ret}"
    try:
        parse_signature(text)
    except SchemaError as e:
        raise error(f"the inferred schema {text!r} is invalid: {e.reason}.") from None
    return text if op_name is None else f"{op_name}{text}"


def _check_mutates_args(mutates_args: object) -> bool:
    if isinstance(mutates_args, str):
        if mutates_args != UNKNOWN_MUTATES:
            raise SchemaError(
                "infer_schema(func): mutates_args must either be a sequence of the names of "
                f"the arguments that are mutated or the string 'unknown', got {mutates_args!r}."
            )
        return True
    if not isinstance(mutates_args, Iterable):
        raise SchemaError(
            "infer_schema(func): mutates_args must either be a sequence of the names of "
            f"the arguments that are mutated or the string 'unknown', got {mutates_args!r}."
        )
    for name in mutates_args:
        if not isinstance(name, str):
            raise SchemaError(
                f"infer_schema(func): mutates_args must contain parameter names (str), "
                f"got {name!r}."
            )
    return False


def _type_hints(fn: Callable[..., object]) -> dict[str, object]:
    """Resolved annotations; empty when some string annotation does not resolve (each
    annotation is then read on its own by :func:`_from_string`)."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _show(annotation: object) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation) if isinstance(annotation, str) else str(annotation)


def _is_tensor_class(t: object) -> bool:
    if not isinstance(t, type):
        return False
    if t is np.ndarray or t is _CupyNdarray or issubclass(t, Tensor):
        return True
    return t.__module__.split(".")[0] == "cupy" and t.__name__ == "ndarray"


def _convert(annotation: object, fn: Callable[..., object]) -> SchemaType:
    """Map an annotation to a schema type, allowing any nesting the schema can express."""
    if isinstance(annotation, str):
        return _convert(_from_string(annotation, fn), fn)
    if isinstance(annotation, typing.ForwardRef):
        return _convert(annotation.__forward_arg__, fn)
    if _is_tensor_class(annotation):
        return _TENSOR
    if annotation in _PLAIN:
        return BaseType(_PLAIN[annotation])
    if annotation is numbers.Number:
        return _SCALAR
    if annotation is Device:
        return BaseType("Device")
    if annotation is np.dtype:
        return BaseType("ScalarType")
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is np.dtype:
        return BaseType("ScalarType")
    if origin is type and len(args) == 1 and args[0] is np.generic:
        return BaseType("ScalarType")
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(args, fn)
    if origin in _SEQUENCE_ORIGINS and len(args) == 1:
        return ListType(_convert(args[0], fn))
    if origin is tuple:
        raise _Unsupported("We do not support Tuple inputs in schema; use Sequence/list.")
    raise _Unsupported()


def _convert_union(args: tuple[object, ...], fn: Callable[..., object]) -> SchemaType:
    members = [a for a in args if a is not type(None) and a is not None]
    if not members:
        raise _Unsupported()
    if len(members) == 1:
        inner = _convert(members[0], fn)
    else:
        converted = [_convert(m, fn) for m in members]
        names = {str(c) for c in converted}
        if not names <= _SCALAR_UNION | {"Scalar"}:
            raise _Unsupported("Unions other than of int, float and bool are not supported.")
        inner = _SCALAR
    if len(members) == len(args):
        return inner
    if isinstance(inner, OptionalType):
        return inner
    return OptionalType(inner)


def _param_type(annotation: object, fn: Callable[..., object]) -> SchemaType:
    """Map a parameter annotation to a schema type, limited to what torch supports."""
    try:
        t = _convert(annotation, fn)
    except SchemaError:
        raise _Unsupported() from None
    inner = t.elem if isinstance(t, OptionalType) else t
    if isinstance(inner, ListType):
        elem = inner.elem
        if isinstance(elem, OptionalType):
            if elem.elem != _TENSOR or isinstance(t, OptionalType):
                raise _Unsupported()
        elif str(elem) not in _LIST_ELEMS:
            raise _Unsupported()
    return t


def _return_text(annotation: object, fn: Callable[..., object]) -> str:
    if annotation is None or annotation is type(None):
        return "()"
    if isinstance(annotation, str):
        annotation = _from_string(annotation, fn)
        if annotation is None:
            return "()"
    if typing.get_origin(annotation) is tuple:
        args = typing.get_args(annotation)
        if args == ((),):
            args = ()
        if len(args) == 1:  # Tuple[Tensor]: a tuple of one, as torch writes it
            return f"(({_single_return(args[0], fn)}))"
        return "(" + ", ".join(_single_return(a, fn) for a in args) + ")"
    return _single_return(annotation, fn)


def _single_return(annotation: object, fn: Callable[..., object]) -> str:
    try:
        t = _convert(annotation, fn)
    except SchemaError:
        raise _Unsupported() from None
    text = str(t)
    if text not in ("Tensor", "Tensor[]", "int", "float", "bool", "Scalar"):
        raise _Unsupported()
    return text


def _default_text(value: object) -> str | None:
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (str, Device)):
        import json  # only here: keeps ``import oplib_core`` from importing json

        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        name: str = np.dtype(value).name
        return name
    return None


# ------------------------------------------------------ string annotations, no eval


def _from_string(text: str, fn: Callable[..., object]) -> object:
    """Read a string annotation without ``eval``: names from a fixed table (so
    ``"cupy.ndarray"`` works without cupy) or looked up in the function's globals."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise _Unsupported(f"{text!r} is not a type expression.") from None
    return _eval_node(node, fn)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _lookup(name: str, fn: Callable[..., object]) -> object:
    if name in _STRING_NAMES:
        return _STRING_NAMES[name]
    if name in ("cupy.ndarray", "cp.ndarray"):
        return _CupyNdarray
    head, *rest = name.split(".")
    scope = getattr(fn, "__globals__", {})
    if head in scope:
        obj = scope[head]
    elif hasattr(builtins, head):
        obj = getattr(builtins, head)
    else:
        raise _Unsupported(f"The name {name!r} is not defined.")
    for attr in rest:
        if not hasattr(obj, attr):
            raise _Unsupported(f"The name {name!r} is not defined.")
        obj = getattr(obj, attr)
    return obj


def _eval_node(node: ast.expr, fn: Callable[..., object]) -> object:
    if isinstance(node, ast.Constant):
        if node.value is None:
            return None
        if isinstance(node.value, str):
            return _from_string(node.value, fn)
        raise _Unsupported()
    name = _dotted(node)
    if name is not None:
        return _lookup(name, fn)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _eval_node(node.left, fn), _eval_node(node.right, fn)
        try:
            return left | right  # type: ignore[operator]
        except TypeError:
            raise _Unsupported() from None
    if isinstance(node, ast.Subscript):
        generic = _eval_node(node.value, fn)
        if isinstance(node.slice, ast.Tuple):
            params = tuple(_eval_node(e, fn) for e in node.slice.elts)
        else:
            params = (_eval_node(node.slice, fn),)
        try:
            return generic[params if len(params) > 1 else params[0]]  # type: ignore[index]
        except TypeError:
            raise _Unsupported() from None
    raise _Unsupported()
