"""Named multi-output results: the tuple type an op returns when its schema names every
return (``-> (Tensor values, Tensor indices)``), as torch's ``torch.return_types``.

One type per op name and field names, made when the first overload that needs it is
defined and removed from :mod:`oplib_core.return_types` when the last one is destroyed.
The types behave as torch's structseqs: tuple subclasses (unpacking, indexing, ``==`` with
a plain tuple), a read-only attribute per field, built from one sequence
(``T((values, indices))``), ``n_fields``/``n_sequence_fields``/``n_unnamed_fields``, a
multi-line repr; and as namedtuples (built from the fields, ``_fields``, ``_asdict``...);
picklable by value (a process that never defined the op still gets a named tuple back,
see ``_rebuild``).
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from ._registry.startup import fork_safe
from ._schema import FunctionSchema

__all__ = [
    "Namespace",
    "ReturnType",
    "acquire",
    "field_names",
    "named_result",
    "namespace_names",
    "namespace_of",
    "naming",
    "release",
]

#: The public module the types are reachable from (and named after in reprs).
PUBLIC = "oplib_core.return_types"


class ReturnType(tuple[Any, ...]):
    """Base of every named result type (internal: users see the per-op subclasses).

    Built as torch's structseqs are, from one sequence (``T((values, indices))``), or as a
    ``collections.namedtuple`` is, from the fields (``T(values, indices)``,
    ``T(values=v, indices=i)``): a type always has two fields or more, so one positional
    argument is always the sequence. The namedtuple API (``_fields``, ``_make``,
    ``_asdict``, ``_replace``) is there too, so that tools which rebuild named tuples
    (``dask.compute``, pytrees) keep the type.
    """

    __slots__ = ()
    n_fields: ClassVar[int]
    n_sequence_fields: ClassVar[int]
    n_unnamed_fields: ClassVar[int] = 0
    _fields: ClassVar[tuple[str, ...]]
    _field_defaults: ClassVar[dict[str, Any]] = {}
    _op_namespace: ClassVar[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> ReturnType:
        n = cls.n_fields
        if kwargs:
            if len(args) + len(kwargs) != n:
                raise TypeError(f"{_public_name(cls)}() takes {n} fields ({cls._fields})")
            values = list(args)
            for f in cls._fields[len(args) :]:
                if f not in kwargs:
                    raise TypeError(f"{_public_name(cls)}() missing field {f!r}")
                values.append(kwargs[f])
            return tuple.__new__(cls, values)
        if len(args) == 1:
            sequence = args[0]
            if not hasattr(sequence, "__len__"):
                if not hasattr(sequence, "__iter__"):
                    raise TypeError("constructor requires a sequence")
                sequence = tuple(sequence)
            if len(sequence) != n:
                raise TypeError(
                    f"{_public_name(cls)}() takes a {n}-sequence ({len(sequence)}-sequence given)"
                )
            return tuple.__new__(cls, sequence)
        if len(args) != n:
            raise TypeError(
                f"{_public_name(cls)}() takes a {n}-sequence or {n} fields ({len(args)} given)"
            )
        return tuple.__new__(cls, args)

    def __repr__(self) -> str:
        body = ",\n".join(f"{n}={v!r}" for n, v in zip(self._fields, self, strict=True))
        return f"{_public_name(type(self))}(\n{body})"

    def __reduce__(self) -> tuple[Any, ...]:
        cls = type(self)
        return (_rebuild, (cls._op_namespace, cls.__name__, cls._fields, tuple(self)))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    @classmethod
    def _make(cls, iterable: Any) -> ReturnType:
        return cls(tuple(iterable))

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def _replace(self, **changes: Any) -> ReturnType:
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise ValueError(f"got unexpected field names: {sorted(unknown)!r}")
        return tuple.__new__(type(self), [changes.get(f, v) for f, v in self._asdict().items()])


def _public_name(cls: type) -> str:
    return f"{PUBLIC}.{cls.__qualname__}"


def field_names(schema: FunctionSchema) -> tuple[str, ...] | None:
    """The field names when the schema names every one of two or more returns, else None
    (torch's rule: one return, or none or only some named, gives no named type; so do
    names that would hide the type's own attributes: ``n_fields``..., ``_``-names)."""
    rets = schema.returns
    if len(rets) < 2 or schema.tuple_return:
        return None
    names: list[str] = []
    for r in rets:
        if r.name is None or r.name in _RESERVED or r.name[0] == "_":
            return None
        names.append(r.name)
    return tuple(names)


#: Names a field cannot take without hiding the type's own attributes (nor can names
#: starting with ``_``, as in ``collections.namedtuple``).
_RESERVED = frozenset({"n_fields", "n_sequence_fields", "n_unnamed_fields"})


def _make(ns: str, name: str, fields: tuple[str, ...]) -> type[ReturnType]:
    body: dict[str, Any] = {
        "__slots__": (),
        "__module__": PUBLIC,
        "__qualname__": f"{ns}.{name}",
        "__doc__": f"{ns}::{name}'s named result: ({', '.join(fields)}).",
        "__match_args__": fields,
        "n_fields": len(fields),
        "n_sequence_fields": len(fields),
        "_op_namespace": ns,
        "_fields": fields,
    }
    for i, f in enumerate(fields):
        body[f] = property(operator.itemgetter(i), doc=f"Alias for field number {i}")
    return type(name, (ReturnType,), body)


class Namespace:
    """``oplib.return_types.<ns>``: the named result types of namespace ``ns``'s ops."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"<oplib_core.return_types.{self._name}>"

    def __dir__(self) -> list[str]:
        return sorted(k for k in vars(self) if not k.startswith("_"))

    def __getattr__(self, name: str) -> type[ReturnType]:
        # only for names not set: the types are instance attributes
        if name.startswith("_"):  # (fields never start with "_")
            raise AttributeError(name)
        raise AttributeError(
            f"oplib.return_types.{self._name} has no type {name!r}: no op {self._name}::{name} "
            f"with every return named is defined (types here: {', '.join(dir(self)) or 'none'})"
        )


_LOCK = fork_safe(threading.RLock())
#: (namespace, type name) -> [type, number of overloads using it]
_TYPES: dict[tuple[str, str], list[Any]] = {}
_NAMESPACES: dict[str, Namespace] = {}
#: Types for results unpickled where the op is not (or no longer) defined.
_DETACHED: dict[tuple[str, str, tuple[str, ...]], type[ReturnType]] = {}


def namespace_of(ns: str) -> Namespace | None:
    """The namespace object for ``ns`` (None while no op of it has a named result)."""
    return _NAMESPACES.get(ns)


def namespace_names() -> list[str]:
    """The namespaces that have named result types, sorted."""
    return sorted(_NAMESPACES)


def acquire(schema: FunctionSchema) -> type[ReturnType] | None:
    """The named result type of a newly defined op (None when its returns are not all
    named): the type of its op name with the same fields, made and published on first use.
    An overload whose fields differ from the op name's type gets ``<name>_<overload>``."""
    fields = field_names(schema)
    if fields is None:
        return None
    ns, _, name = schema.name.rpartition("::")
    with _LOCK:
        for type_name in (name, f"{name}_{schema.overload_name or 'default'}"):
            found = _TYPES.get((ns, type_name))
            if found is None:
                cls = _make(ns, type_name, fields)
                _TYPES[(ns, type_name)] = [cls, 1]
                space = _NAMESPACES.get(ns)
                if space is None:
                    space = _NAMESPACES[ns] = Namespace(ns)
                setattr(space, type_name, cls)
                return cls
            if found[0]._fields == fields:
                found[1] += 1
                return found[0]  # type: ignore[no-any-return]
        raise AssertionError("an overload name is unique within its op")


def release(cls: type[ReturnType]) -> None:
    """An overload using ``cls`` was destroyed: unpublish ``cls`` with its last user."""
    ns, type_name = cls._op_namespace, cls.__name__
    with _LOCK:
        found = _TYPES.get((ns, type_name))
        if found is None or found[0] is not cls:
            return
        found[1] -= 1
        if found[1]:
            return
        del _TYPES[(ns, type_name)]
        space = _NAMESPACES[ns]
        delattr(space, type_name)
        if not any(not k.startswith("_") for k in vars(space)):
            del _NAMESPACES[ns]


def _rebuild(
    ns: str, type_name: str, fields: tuple[str, ...], values: tuple[Any, ...]
) -> ReturnType:
    """Unpickling: the published type when it has these fields, else a detached one with
    the same name and fields (the op is not defined in this process)."""
    with _LOCK:
        found = _TYPES.get((ns, type_name))
        if found is not None and found[0]._fields == fields:
            cls: type[ReturnType] = found[0]
        else:
            key = (ns, type_name, fields)
            cls = _DETACHED.get(key) or _DETACHED.setdefault(key, _make(ns, type_name, fields))
    return tuple.__new__(cls, values)


def named_result(cls: type[ReturnType], out: Any) -> Any:
    """``out`` as ``cls`` when it is a tuple or list of its length (what a decomposition
    returns), else unchanged (a wrong result keeps its own error further on)."""
    if type(out) is cls:
        return out
    if isinstance(out, (tuple, list)) and len(out) == cls.n_fields:
        return tuple.__new__(cls, out)
    return out


def naming(fn: Callable[..., Any], cls: type[ReturnType], kwargs: bool) -> Callable[..., Any]:
    """``fn`` (a kernel the fast path serves native arrays with) giving ``cls``: its
    result, already held to the schema's length, becomes the named tuple in one step.
    ``kwargs``: whether calls pass keyword arguments (the op's keyword-only defaults)."""
    new = tuple.__new__

    def with_kwargs(*args: Any, **kwargs: Any) -> Any:
        return new(cls, fn(*args, **kwargs))

    def positional(*args: Any) -> Any:  # ~30 ns cheaper without **kwargs
        return new(cls, fn(*args))

    named_kernel = with_kwargs if kwargs else positional
    named_kernel.__wrapped__ = fn  # type: ignore[attr-defined]  # failures name fn
    return named_kernel
