"""Binding call arguments to a schema.

``Binder(schema, qualname)`` validates and converts: ``bind(args, kwargs)`` returns the
kernel's positional arguments (defaults filled in) and keyword-only arguments, or raises
``CallArgumentError`` (a ``TypeError``) quoting the schema (the slow path). ``Signature``
is the same schema read once for the rest of dispatch: where the tensor arguments sit,
which call shapes the fast path may take without binding, the defaults that complete them,
and what the returns are.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import DTYPES
from .._native._classes import converter as class_converter
from .._registry.registry import Registry
from .._return_types import ReturnType
from .._schema import Argument, BaseType, FunctionSchema, ListType, OptionalType, SchemaType
from .._tensor.tensor import Tensor
from ..backends import TABLE, host_missing, not_installed
from ..backends import device as to_device
from ..errors import CallArgumentError, InvalidDeviceError
from ..fake._arrays import FakeArray

__all__ = [
    "REQUIRED",
    "Binder",
    "BoundCall",
    "Signature",
    "Slot",
    "by_position",
    "is_array",
    "is_plain_tensor",
    "place_int_lists",
    "tensor_like",
    "tensor_value",
]

_INVALID = object()
Converter = Callable[[Any], Any]


def is_array(x: object) -> bool:
    """A Tensor or a native array of an installed backend."""
    return type(x) is Tensor or TABLE.for_type(type(x)) is not None


def _tensor(x: Any) -> Any:
    if type(x) is Tensor or TABLE.for_type(type(x)) is not None or isinstance(x, FakeArray):
        return x
    if isinstance(x, Tensor):  # a subclass: vmap's BatchedTensor (its mode takes the call)
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    return _INVALID


#: What binding makes of a ``Tensor`` argument: ``x`` itself when it is an array (a Tensor,
#: a backend's native array, a fake array), a converted or invalid value otherwise.
tensor_value = _tensor


def _tensor_or_none(x: Any) -> Any:
    """A plain ``Tensor`` argument of a user's op: None passes as None, as torch hands a
    Python kernel the undefined tensor None becomes (causal-conv1d's backward passes
    ``dinitial_states=None``). Core ops refuse it: their kernels need arrays."""
    return None if x is None else _tensor(x)


def _int(x: Any) -> Any:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    if hasattr(x, "__oplib_symint__"):
        return x
    return _INVALID


def _float(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return _INVALID
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, (int, np.integer)):
        return float(x)
    return _INVALID


def _bool(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    return _INVALID


def _str(x: Any) -> Any:
    return x if isinstance(x, str) else _INVALID


def _scalar(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, numbers.Number):
        return x
    return _INVALID


def _scalar_type(x: Any) -> Any:
    if isinstance(x, (str, np.dtype)) or (isinstance(x, type) and issubclass(x, np.generic)):
        try:
            return np.dtype(x)
        except TypeError:
            return _INVALID
    if isinstance(x, type) and x in (float, int, bool, complex):
        return np.dtype(x)
    return _INVALID


def _device(x: Any) -> Any:
    if isinstance(x, (Device, str)) or (isinstance(x, int) and not isinstance(x, bool)):
        try:
            return to_device(x)
        except (TypeError, ValueError):
            return _INVALID
    return _INVALID


def _malformed_device(qualname: str, name: str, text: str) -> None:
    """Raise ``InvalidDeviceError`` (a ``ValueError``) for a device string ``device()``
    cannot parse, with its words: the string was the wrong value, not the wrong type."""
    try:
        to_device(text)
    except ValueError as e:
        reason = str(e).removeprefix("device(): ")
        raise InvalidDeviceError(f"{qualname}(): argument {name!r}: {reason}", text) from None


def _anything(x: Any) -> Any:
    return x


_BASE: dict[str, Converter] = {
    "Tensor": _tensor,
    "int": _int,
    "SymInt": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "Scalar": _scalar,
    "ScalarType": _scalar_type,
    "Device": _device,
    "Layout": _anything,
    "MemoryFormat": _anything,
    "Generator": _anything,
}


def converter(t: SchemaType) -> Converter:
    """A function mapping a call argument to the kernel's value, or ``_INVALID``."""
    if isinstance(t, BaseType):
        found = _BASE.get(t.name)
        return found if found is not None else class_converter(t.name, _INVALID)
    if isinstance(t, OptionalType):
        inner = converter(t.elem)
        return lambda x: None if x is None else inner(x)
    if isinstance(t, ListType):
        inner = converter(t.elem)
        size = t.size
        single_ok = not (isinstance(t.elem, BaseType) and t.elem.name == "Tensor")

        def convert_list(x: Any) -> Any:
            # As torch: Tensor[] takes a list or tuple; int[] and the other scalar lists take
            # any sequence (a shape object, range, a user-defined Sequence), given as a list.
            if isinstance(x, (list, tuple)) or (
                single_ok and isinstance(x, Sequence) and not isinstance(x, (str, bytes))
            ):
                out = [inner(v) for v in x]
                if any(v is _INVALID for v in out):
                    return _INVALID
                if size is not None and len(out) != size:
                    return _INVALID
                return out
            if single_ok:
                v = inner(x)
                if v is not _INVALID:
                    return [v] * (size or 1)
            return _INVALID

        return convert_list
    raise TypeError(f"unsupported schema type {t}")


class Binder:
    """Validates and normalises call arguments for one schema."""

    __slots__ = ("_converters", "_kw", "_names", "_pos", "qualname", "schema")

    def __init__(self, schema: FunctionSchema, qualname: str) -> None:
        self.schema = schema
        self.qualname = qualname
        self._pos: tuple[Argument, ...] = tuple(a for a in schema.arguments if not a.kwarg_only)
        self._kw: tuple[Argument, ...] = tuple(a for a in schema.arguments if a.kwarg_only)
        self._names = {a.name for a in schema.arguments}
        user_op = qualname.partition("::")[0] not in Registry.RESERVED_NAMESPACES
        self._converters = {
            a.name: _tensor_or_none if user_op and is_plain_tensor(a.type) else converter(a.type)
            for a in schema.arguments
        }

    def _error(self, message: str) -> CallArgumentError:
        return CallArgumentError(
            f"{self.qualname}(): {message}\n  schema: {self.schema}",
            op=self.qualname,
            schema=str(self.schema),
        )

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        pos = self._pos
        if len(args) > len(pos):
            raise self._error(
                f"takes {len(pos)} positional argument{'s' if len(pos) != 1 else ''} but "
                f"{len(args)} were given"
            )
        for name in kwargs:
            if name not in self._names:
                raise self._error(f"got an unexpected keyword argument {name!r}")
        out_args: list[Any] = []
        for i, a in enumerate(pos):
            if i < len(args):
                if a.name in kwargs:
                    raise self._error(f"got multiple values for argument {a.name!r}")
                out_args.append(self._convert(a, args[i]))
            elif a.name in kwargs:
                out_args.append(self._convert(a, kwargs[a.name]))
            elif a.has_default:
                out_args.append(a.default_value)
            else:
                raise self._error(f"missing required argument {a.name!r} ({a.type})")
        out_kwargs: dict[str, Any] = {}
        for a in self._kw:
            if a.name in kwargs:
                out_kwargs[a.name] = self._convert(a, kwargs[a.name])
            elif a.has_default:
                out_kwargs[a.name] = a.default_value
            else:
                raise self._error(f"missing required keyword-only argument {a.name!r} ({a.type})")
        return out_args, out_kwargs

    def matches(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        try:
            self.bind(args, kwargs)
        except (TypeError, InvalidDeviceError):  # (a string that is no device may be a str)
            return False
        return True

    def _convert(self, a: Argument, value: Any) -> Any:
        out = self._converters[a.name](value)
        if out is _INVALID:
            if host_missing(value):  # a numpy array, and no cpu backend to take it
                raise not_installed("cpu", self.qualname)
            if type(value) is str and str(a.type).rstrip("?") == "Device":
                _malformed_device(self.qualname, a.name, value)
            missing = TABLE.missing_for(type(value))
            hint = f" ({missing})" if missing else ""
            raise self._error(f"argument {a.name!r} must be {a.type}, got {_describe(value)}{hint}")
        return out


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(sorted({type(v).__name__ for v in value})) or "empty"
        return f"{type(value).__name__} of {inner}"
    return (
        f"{type(value).__name__} ({value!r})"
        if isinstance(value, (int, float, str))
        else (type(value).__name__)
    )


# -- the schema read once for dispatch --------------------------------------------------------


def is_plain_tensor(t: SchemaType) -> bool:
    """``Tensor`` itself (not ``Tensor?``, not ``Tensor[]``)."""
    return isinstance(t, BaseType) and t.name == "Tensor"


def tensor_like(t: SchemaType) -> tuple[bool, bool]:
    """(is tensor-like, is a list of tensors): ``Tensor``, ``Tensor?``, ``Tensor[]``..."""
    if isinstance(t, OptionalType):
        return tensor_like(t.elem)
    if isinstance(t, ListType):
        inner, _ = tensor_like(t.elem)
        return inner, inner
    return is_plain_tensor(t), False


def _int_list(t: SchemaType) -> bool | None:
    """For ``int[]``/``SymInt[]`` (unsized): whether None is allowed; else None."""
    nullable = isinstance(t, OptionalType)
    inner = t.elem if isinstance(t, OptionalType) else t
    if (
        isinstance(inner, ListType)
        and inner.size is None
        and isinstance(inner.elem, BaseType)
        and inner.elem.name in ("int", "SymInt")
    ):
        return nullable
    return None


# Scalar argument types the fast path takes when the value has one of these exact types
# (anything else goes through binding, which converts or refuses it).
_FAST_TYPES: dict[str, frozenset[type]] = {
    "int": frozenset({int}),
    "SymInt": frozenset({int}),
    "float": frozenset({float}),
    "bool": frozenset({bool}),
    "str": frozenset({str}),
    "Scalar": frozenset({int, float, bool}),
    # oplib's dtypes, each an instance of its own numpy dtype class (binding passes a dtype
    # as given: np.dtype(d) is d); another dtype, or a name, is binding's to convert
    "ScalarType": frozenset(type(d) for d in DTYPES),
}


#: The types of a keyword-only argument's values that may key a cache of kernels with the
#: values bound (``keyword_split``): equal only when the same value. No float (-0.0 equals
#: 0.0, nan nothing); a dtype only without metadata, which equality ignores (checked per
#: call); int and bool apart, as the key holds each value's type.
_KEYABLE: dict[str, frozenset[type]] = {
    "int": frozenset({int}),
    "SymInt": frozenset({int}),
    "bool": frozenset({bool}),
    "str": frozenset({str}),
    "Scalar": frozenset({int, bool}),
    "ScalarType": _FAST_TYPES["ScalarType"],
}
_DTYPE_CLASSES = _FAST_TYPES["ScalarType"]
_NONE = frozenset({type(None)})


def _keyable(t: SchemaType) -> frozenset[type]:
    """The value types of an argument of type ``t`` that ``keyword_split`` takes (empty:
    none; an optional one takes None, whatever its type)."""
    if isinstance(t, OptionalType):
        inner = t.elem
        name = inner.name if isinstance(inner, BaseType) else ""
        return _KEYABLE.get(name, frozenset()) | _NONE
    return _KEYABLE.get(t.name, frozenset()) if isinstance(t, BaseType) else frozenset()


def keyword_split(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    params: tuple[tuple[str, ...], tuple[Any, ...]],
    kwkeys: dict[str, frozenset[type]],
) -> tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...]] | None:
    """A call with keyword-only arguments (``t.sum(dtype=oplib.float64)``) as ``(args,
    kwonly, key)``: its positional arguments (keywords naming positional parameters placed,
    ``by_position``), its keyword-only ones, and the key of their values (name, type and
    value of each given, in the schema's order) under which kernels with them bound are
    cached. None: no keyword-only argument, or one whose value cannot key a cache
    (``Signature.kwkeys``), or names ``by_position`` cannot place; binding decides."""
    kwonly: dict[str, Any] = {}
    named: dict[str, Any] = {}
    for name, v in kwargs.items():
        ok = kwkeys.get(name)
        if ok is None:
            named[name] = v
            continue
        t = type(v)
        if t not in ok or (t in _DTYPE_CLASSES and v.metadata is not None):
            return None
        kwonly[name] = v
    if not kwonly:
        return None
    if named:
        placed = by_position(args, named, params)
        if placed is None:
            return None
        args = placed
    key = []
    for name in kwkeys:
        if name in kwonly:
            v = kwonly[name]
            key.append((name, type(v), v))
    return args, kwonly, tuple(key)


class Slot:
    """Where an argument sits in bound arguments: ``bargs[pos]``, or ``bkwargs[name]`` when
    ``kw``; ``index`` is the one of the two that applies (``container[index]``)."""

    __slots__ = ("index", "is_list", "kw", "name", "pos")

    def __init__(self, name: str, kw: bool, pos: int, is_list: bool) -> None:
        self.name = name
        self.kw = kw
        self.pos = pos
        self.index: int | str = name if kw else pos
        self.is_list = is_list

    def get(self, bargs: list[Any], bkwargs: dict[str, Any]) -> Any:
        return bkwargs[self.name] if self.kw else bargs[self.pos]


#: A return: ``"tensor"``, ``"list"`` (Tensor[]) or ``"other"``, the input it aliases
#: (``Tensor(a!)``: a mutated input; ``Tensor(a)``: a view of an input) or None, and whether
#: that alias is written (``!``).
ReturnPlan = tuple[str, "Slot | None", bool]


def _alias_slots(schema: FunctionSchema) -> dict[frozenset[str], tuple[Slot, bool]]:
    """Each named alias set of a plain ``Tensor`` argument: where it sits, whether written."""
    aliases: dict[frozenset[str], tuple[Slot, bool]] = {}
    pos_i = 0
    for a in schema.arguments:
        # An anonymous ``Tensor!`` is an alias set of its own: no return can alias it.
        if a.annotation is not None and a.annotation.alias_set and is_plain_tensor(a.type):
            slot = Slot(a.name, a.kwarg_only, -1 if a.kwarg_only else pos_i, False)
            aliases[frozenset(a.annotation.alias_set)] = (slot, a.annotation.is_write)
        if not a.kwarg_only:
            pos_i += 1
    return aliases


def _return_plan(schema: FunctionSchema) -> tuple[ReturnPlan, ...]:
    aliases = _alias_slots(schema)
    plan: list[ReturnPlan] = []
    for r in schema.returns:
        is_tensor, is_list = tensor_like(r.type)
        kind = "list" if is_list else ("tensor" if is_tensor else "other")
        ann = r.annotation
        found = None
        if ann is not None and ann.alias_set:  # "Tensor(a)[]": each piece a view (split)
            found = aliases.get(frozenset(ann.alias_set))
        if ann is None or found is None:
            plan.append((kind, None, False))
        else:
            plan.append((kind, found[0], found[1] and ann.is_write))
    return tuple(plan)


def _unreturned_writes(schema: FunctionSchema) -> tuple[Slot, ...]:
    """Mutated plain ``Tensor`` arguments (``Tensor(a!)``, ``Tensor!``) that no return aliases:
    their version counters are bumped after the call without a return to do it."""
    returned = {
        frozenset(r.annotation.alias_set)
        for r in schema.returns
        if r.annotation is not None and r.annotation.is_write
    }
    out: list[Slot] = []
    pos_i = 0
    for a in schema.arguments:
        ann = a.annotation
        if (
            ann is not None
            and ann.is_write
            and is_plain_tensor(a.type)
            and (not ann.alias_set or frozenset(ann.alias_set) not in returned)
        ):
            out.append(Slot(a.name, a.kwarg_only, -1 if a.kwarg_only else pos_i, False))
        if not a.kwarg_only:
            pos_i += 1
    return tuple(out)


class BoundCall:
    """``op(*args, **kwargs)`` bound for a mode that runs kernels itself
    (``OpOverload.bind_call``): ``bargs``/``bkwargs`` as kernels get them (defaults filled
    in, Tensors as given); ``fast`` whether the call has the fast path's shape (positional
    arguments of the exact types it takes; always False with ``OPLIB_DISPATCH_SLOW=1``)."""

    __slots__ = ("bargs", "bkwargs", "fast")

    def __init__(self, bargs: list[Any], bkwargs: dict[str, Any], fast: bool) -> None:
        self.bargs = bargs
        self.bkwargs = bkwargs
        self.fast = fast


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


#: In ``Signature.params``: a positional parameter without a default.
REQUIRED: Any = _Required()


def by_position(
    args: tuple[Any, ...], kwargs: dict[str, Any], params: tuple[tuple[str, ...], tuple[Any, ...]]
) -> tuple[Any, ...] | None:
    """A call's ``args`` and ``kwargs`` as one positional tuple, every positional parameter
    of ``params`` (``Signature.params``) given or defaulted, when each keyword names one
    that ``args`` did not give (``x.clamp(min=0.0)`` as ``clamp(x, 0.0, None)``); None
    otherwise (a keyword-only or unknown name, one given twice, a required one missing):
    binding decides, and says what is wrong."""
    names, defaults = params
    n = len(args)
    if n >= len(names):
        return None
    out = list(args)
    named = 0
    for i in range(n, len(names)):
        v = kwargs.get(names[i], REQUIRED)
        if v is REQUIRED:
            v = defaults[i]
            if v is REQUIRED:
                return None
        else:
            named += 1
        out.append(v)
    return tuple(out) if named == len(kwargs) else None


def place_int_lists(bargs: list[Any], lists: tuple[tuple[int, bool], ...]) -> bool:
    """Check the ``int[]`` arguments of a positional call (``Signature.lists``: position,
    whether None is allowed) and give them as binding does, in place: a list of ints as it
    is, a tuple of ints or an int as a list, None where allowed. False: one binding must
    judge. The plain form of the check the cached calls inline (``FastCall._call_py``,
    ``factory_call``, ``_ccall.c``'s ``lists_fit``)."""
    for i, nullable in lists:
        v = bargs[i]
        if v is None:
            if not nullable:
                return False
        elif type(v) is list or type(v) is tuple:
            for e in v:  # (a loop, not all(): modes bind every call through this)
                if type(e) is not int:
                    return False
            if type(v) is tuple:
                bargs[i] = list(v)
        elif type(v) is int:
            bargs[i] = [v]
        else:
            return False
    return True


def _plain_int_list(value: Any, nullable: bool) -> bool:
    """Whether ``value`` is an ``int[]`` as the fast path passes it on unchanged: a list of
    ints, or None where None is allowed."""
    if value is None:
        return nullable
    return type(value) is list and all(type(e) is int for e in value)


class Signature:
    """One operator's schema, read once for dispatch.

    - ``binder``: the full argument binding (``bind``).
    - ``slots``: every tensor-like argument (``Tensor``, ``Tensor?``, ``Tensor[]``...);
      ``device_arg``: the first ``Device`` argument (factories dispatch on it).
    - The fast path's plan, for calls with positional arguments only: ``npos`` positional
      parameters (-1: no call takes the fast path, e.g. a keyword-only argument without a
      default or a positional one of a type it does not check), ``nmin`` of them required,
      ``tails[n]`` the defaults that complete ``n`` arguments, ``key_pos`` the positions of
      the plain ``Tensor`` arguments (``key0`` the first, ``key_rest`` the others),
      ``checks`` the scalar positions with the exact types taken unconverted, ``lists`` the
      ``int[]`` positions (and whether None is allowed), ``multi`` whether any of
      ``key_rest``/``checks``/``lists`` is non-empty; ``checks_at[n]`` and ``lists_at[n]``
      the same for a call of ``n`` positional arguments, whose defaults need no check per
      call (those that pass it once, at plan time), and ``multi_at[n]`` what such a call
      checks: 0 nothing, 1 only that ``key_rest``'s tensors are of the first one's type,
      2 scalars or ``int[]``s as well;
      ``kwdefaults`` the keyword-only defaults the kernel gets on that path; ``params`` the
      positional parameters' names and defaults (``REQUIRED`` where there is none), with
      which a call naming some of them by keyword takes that path too (``by_position``);
      ``kwkeys`` the keyword-only arguments whose values may key the kernels cached with
      them bound (``OpCache.keyed``), with the exact types taken (``keyword_split``), and
      ``kwplan`` the same as ``(name, types, the numpy dtype classes among them)`` tuples
      in the schema's order (what the compiled call reads).
    - The cached call of an op with lists of tensors (``cat``, ``stack``, ``index.Tensor``;
      ``OpCache.call_listed``): ``tensor_lists`` the positions of its ``Tensor[]`` and
      ``Tensor?[]`` arguments, each with whether it takes None (empty: no such call, as for
      an op with an alias or a return other than one plain ``Tensor``), ``listed_nmin``
      the positional arguments required.
    - A factory's plan (no tensor argument, a keyword-only ``Device?`` that places the call,
      the other keyword-only arguments ``ScalarType?``): ``factory_dtypes`` those
      ``ScalarType?`` names (None: not such a factory), ``factory_nmin`` the positional
      arguments required; ``tails``, ``checks`` and ``lists`` as above. ``wrap_bare``: a
      user's op, whose calls without any array return Tensors (as torch's).
    - ``returns``: per return, its kind and the input it aliases (see ``ReturnPlan``);
      ``single_plain_return``: exactly one return, a plain ``Tensor``; ``tuple_return``:
      the one return comes as a 1-tuple (``-> ((Tensor))``, torch's ``Tuple[Tensor]``);
      ``writes``: mutated tensor arguments no return aliases (their versions are bumped);
      ``plain_result``: a Tensor call's result is a new Tensor over the kernel's array and
      nothing more is done (``single_plain_return`` and no ``writes``: the Tensor fast
      paths' case);
      ``arity``: the number of positional parameters; ``named``: the op's named result
      type when its schema names every return (set by the ``OpOverload``, which owns it).
    """

    __slots__ = (
        "arity",
        "binder",
        "checks",
        "checks_at",
        "device_arg",
        "factory_dtypes",
        "factory_nmin",
        "key0",
        "key_pos",
        "key_rest",
        "kwdefaults",
        "kwkeys",
        "kwplan",
        "listed_nmin",
        "lists",
        "lists_at",
        "multi",
        "multi_at",
        "named",
        "nmin",
        "npos",
        "params",
        "plain_result",
        "returns",
        "single_plain_return",
        "slots",
        "tails",
        "tensor_lists",
        "tuple_return",
        "wrap_bare",
        "writes",
    )

    def __init__(self, schema: FunctionSchema, qualname: str) -> None:
        self.binder = Binder(schema, qualname)
        key_pos: list[int] = []
        checks: list[tuple[int, frozenset[type]]] = []
        lists: list[tuple[int, bool]] = []
        tail: list[Any] = []
        kwdefaults: dict[str, Any] = {}
        kwkeys: dict[str, frozenset[type]] = {}
        tensor_lists: list[tuple[int, bool]] = []
        listed = True
        names: list[str] = []
        param_defaults: list[Any] = []
        fast = True
        slots: list[Slot] = []
        device_arg: Slot | None = None
        pos_i = 0
        nmin = 0
        for a in schema.arguments:
            is_tensor, is_list = tensor_like(a.type)
            pos = -1 if a.kwarg_only else pos_i
            if is_tensor:
                slots.append(Slot(a.name, a.kwarg_only, pos, is_list))
            base = a.type.elem if isinstance(a.type, OptionalType) else a.type
            if isinstance(base, BaseType) and base.name == "Device" and device_arg is None:
                device_arg = Slot(a.name, a.kwarg_only, pos, False)
            if a.kwarg_only:
                if a.has_default:
                    kwdefaults[a.name] = a.default_value
                    keyable = _keyable(a.type)
                    if keyable:
                        kwkeys[a.name] = keyable
                else:
                    fast = listed = False
                continue
            names.append(a.name)
            param_defaults.append(a.default_value if a.has_default else REQUIRED)
            if a.has_default:
                tail.append(a.default_value)
            else:
                nmin = pos_i + 1
            int_list = _int_list(a.type)
            if is_plain_tensor(a.type):
                key_pos.append(pos_i)
            elif isinstance(a.type, BaseType) and a.type.name in _FAST_TYPES:
                checks.append((pos_i, _FAST_TYPES[a.type.name]))
            elif (  # ``SymInt? start=None`` (slice), ``float? value=None`` (pad)
                isinstance(a.type, OptionalType)
                and isinstance(a.type.elem, BaseType)
                and a.type.elem.name in _FAST_TYPES
            ):
                checks.append((pos_i, _FAST_TYPES[a.type.elem.name] | {type(None)}))
            elif int_list is not None:
                lists.append((pos_i, int_list))
            elif isinstance(a.type, ListType) and is_tensor:  # Tensor[], Tensor?[]
                tensor_lists.append((pos_i, isinstance(a.type.elem, OptionalType)))
                fast = False
            else:
                fast = listed = False
            pos_i += 1
        # A factory (no tensor argument; placed by a keyword-only ``Device?``, beside
        # keyword-only ``ScalarType?``s and nothing else) has a fast path of its own.
        self.factory_dtypes: tuple[str, ...] | None = None
        if fast and not slots and device_arg is not None and device_arg.kw:
            kw_types = {
                a.name: str(a.type) for a in schema.arguments if a.kwarg_only and a.has_default
            }
            dtypes = tuple(n for n, t in kw_types.items() if t == "ScalarType?")
            if len(dtypes) + 1 == len(kw_types) and kw_types[device_arg.name] == "Device?":
                self.factory_dtypes = dtypes
        # A call of a user's op without any array (create_from_file(str) -> Tensor, every
        # Tensor argument None) returns Tensors, as torch does; the core's factories give
        # their arrays (oplib.zeros wraps them).
        self.wrap_bare = qualname.partition("::")[0] not in Registry.RESERVED_NAMESPACES
        self.factory_nmin = nmin
        if not key_pos:
            fast = False
        self.arity = pos_i
        self.slots = tuple(slots)
        self.device_arg = device_arg
        self.key_pos = tuple(key_pos)
        self.key0 = key_pos[0] if key_pos else 0
        self.key_rest = tuple(key_pos[1:])
        self.checks = tuple(checks)
        self.lists = tuple(lists)
        self.multi = bool(self.key_rest or self.checks or self.lists)
        # the cached call of an op with lists of tensors (cat, stack, index.Tensor): one
        # plain Tensor returned, no argument an alias (a view or a write to bookkeep)
        listed = listed and bool(tensor_lists) and not any(a.annotation for a in schema.arguments)
        self.tensor_lists = tuple(tensor_lists) if listed else ()
        self.listed_nmin = nmin
        self.npos = pos_i if fast else -1
        self.params = (tuple(names), tuple(param_defaults))
        self.nmin = nmin if fast else 0
        defaults = tuple(tail)
        first_default = pos_i - len(defaults)
        self.tails = tuple(defaults[max(0, n - first_default) :] for n in range(pos_i + 1))
        # A default passes the fast path's check or never does: check it here, once.
        default_at = {first_default + j: v for j, v in enumerate(defaults)}
        fixed = {i for i, ok in self.checks if i in default_at and type(default_at[i]) in ok}
        fixed |= {
            i
            for i, nullable in self.lists
            if i in default_at and _plain_int_list(default_at[i], nullable)
        }
        self.checks_at = tuple(
            tuple(c for c in self.checks if c[0] < n or c[0] not in fixed) for n in range(pos_i + 1)
        )
        self.lists_at = tuple(
            tuple(c for c in self.lists if c[0] < n or c[0] not in fixed) for n in range(pos_i + 1)
        )
        self.multi_at = tuple(
            2 if self.checks_at[n] or self.lists_at[n] else int(bool(self.key_rest))
            for n in range(pos_i + 1)
        )
        self.kwdefaults = kwdefaults
        self.kwkeys = kwkeys
        self.kwplan = tuple((n, ok, ok & _DTYPE_CLASSES) for n, ok in kwkeys.items())
        self.returns = _return_plan(schema)
        self.writes = _unreturned_writes(schema)
        self.named: type[ReturnType] | None = None
        rets = schema.returns
        self.tuple_return = schema.tuple_return
        self.single_plain_return = (
            len(rets) == 1
            and is_plain_tensor(rets[0].type)
            and rets[0].annotation is None
            and not schema.tuple_return
        )
        if not self.single_plain_return:
            self.tensor_lists = ()
        self.plain_result = self.single_plain_return and not self.writes

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        return self.binder.bind(args, kwargs)

    def bind_fast(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]] | None:
        """``bind()`` for calls of the fast path's shape (the checks ``FastCall.__call__``
        inlines, without the one on tensor types), else None: for modes that handle calls
        themselves. The same result as ``bind()`` (``int[]`` arguments as lists)."""
        bargs = self.positional(args, kwargs, self.nmin, self.npos)
        return None if bargs is None else (bargs, dict(self.kwdefaults))

    def positional(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], nmin: int, nmax: int
    ) -> list[Any] | None:
        """A call as the positional arguments a cached call passes: keywords naming
        positional parameters placed (``by_position``), ``nmin`` to ``nmax`` of them,
        defaults appended, each scalar of a type the schema takes as it is, ``int[]``s as
        lists. None: binding must judge the call."""
        if kwargs:
            placed = by_position(args, kwargs, self.params)
            if placed is None:
                return None
            args = placed
        n = len(args)
        if n > nmax or n < nmin:
            return None
        bargs = list(args + self.tails[n])
        for i, ok in self.checks:
            if type(bargs[i]) not in ok:
                return None
        return bargs if place_int_lists(bargs, self.lists) else None

    def tensor_arguments(
        self, nargs: list[Any], nkwargs: dict[str, Any]
    ) -> Iterator[tuple[str, Any, Any, Any]]:
        """``(name, value, container, index)`` for every tensor argument that is not None,
        in bound arguments the caller owns (``container[index] = x`` replaces it); list
        arguments are replaced by list copies first, and yield one item per element."""
        for slot in self.slots:
            container: Any = nkwargs if slot.kw else nargs
            value = container[slot.index]
            if value is None:
                continue
            if slot.is_list:
                items = list(value)
                container[slot.index] = items
                for j, item in enumerate(items):
                    if item is not None:
                        yield f"{slot.name}[{j}]", item, items, j
            else:
                yield slot.name, value, container, slot.index
