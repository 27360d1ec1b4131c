"""Which operator is this? One answer, for every API that takes an op.

:func:`lookup` turns anything that names an operator into its :class:`OpOverload`:

- ``"ns::op"`` and ``"ns::op.default"``: the default (unnamed) overload;
- ``"ns::op.overload"``: that overload;
- an ``OpOverload``: itself (while its definition lives);
- an ``OpOverloadPacket`` (``oplib.ops.ns.op``): its default overload; a packet without
  one but with exactly one overload gives that one (as torch's ``opcheck`` resolves a
  packet), several raise :class:`AmbiguousOperatorError`;
- a custom op (``CustomOpDef``) or a legacy op: the overload it wraps.

A name no operator goes by raises :class:`UnknownOperatorError` (with close names as
suggestions), an object that is no operator :class:`NotAnOperatorError`. The registration
functions, ``explain``, ``opcheck``, ``legacy.*`` and the CLI all resolve through here, so
they accept and refuse the same names.
"""

from __future__ import annotations

from typing import Any

from .._dispatch import OpOverload
from ..errors import AmbiguousOperatorError, NotAnOperatorError, UnknownOperatorError
from ..ops import OpOverloadPacket
from .registry import REGISTRY, op_named
from .startup import ensure

__all__ = ["lookup", "lookup_for_call", "qualname_of", "registered_ops", "resolve"]

_DEFAULT = ".default"


def lookup(op: Any) -> OpOverload:
    """The :class:`OpOverload` that ``op`` names: ``"ns::op"``, ``"ns::op.default"``,
    ``"ns::op.overload"``, an ``OpOverload``, an ``OpOverloadPacket`` (its default
    overload, or its only one), or a custom op.

    Raises :class:`~oplib_core.errors.UnknownOperatorError` when no operator goes by that
    name (or the op's Library was destroyed), :class:`~oplib_core.errors.
    AmbiguousOperatorError` for a packet with several overloads and no default one, and
    :class:`~oplib_core.errors.NotAnOperatorError` (a ``TypeError``) for anything else.
    """
    return resolve(op, "lookup")


def resolve(op: Any, api: str) -> OpOverload:
    """:func:`lookup` for the public function ``api``, which error messages name."""
    if isinstance(op, str):
        return _by_name(op, api)
    if isinstance(op, OpOverload):
        return _alive(op, api)
    if isinstance(op, OpOverloadPacket):
        return _alive(_of_packet(op, api), api)
    inner = getattr(op, "_opoverload", None)  # CustomOpDef, legacy ops
    if isinstance(inner, OpOverload):
        return _alive(inner, api)
    raise NotAnOperatorError(
        f"{api}(): expected an operator (a 'ns::name[.overload]' string, an OpOverload such "
        f"as oplib.ops.ns.name.default, an OpOverloadPacket or a custom op), got {op!r}",
        api=api,
        value=op,
    )


def qualname_of(op: Any, api: str) -> str:
    """``resolve(op, api).name()``, without building a pending core op (``_op_table``) for
    a name: registering a kernel for it only needs to know that it exists."""
    if isinstance(op, str):
        ensure()
        key = op[: -len(_DEFAULT)] if op.endswith(_DEFAULT) else op
        if key in REGISTRY.ops.pending:
            return key
    return resolve(op, api).name()


def lookup_for_call(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], api: str) -> OpOverload:
    """The overload a call ``op(*args, **kwargs)`` runs: for a packet with several
    overloads the one calling it would pick (by matching the arguments to the schemas);
    otherwise :func:`lookup`'s answer. For ``explain`` and ``opcheck``, which take a call."""
    if isinstance(op, OpOverloadPacket) and len(op._overloads) > 1:
        return op._pick(args, kwargs)
    return resolve(op, api)


def registered_ops(namespace: str | None = None) -> list[OpOverload]:
    """Every operator overload defined now (in ``namespace``, if given), by qualified
    name. Read them through their public accessors (``name()``, ``schema``, ``tags``,
    ``kernel(key)``, ``has_kernel(key)``)."""
    ensure()
    with REGISTRY.lock:
        entries = sorted(REGISTRY.ops.items())
    return [e.overload for _, e in entries if namespace is None or e.schema.namespace == namespace]


# -- the cases ----------------------------------------------------------------------------


def _by_name(name: str, api: str) -> OpOverload:
    ensure()
    key = name[: -len(_DEFAULT)] if name.endswith(_DEFAULT) else name
    ns, sep, rest = key.partition("::")
    if sep and ns and rest:
        try:
            overload: OpOverload = op_named(key)
        except UnknownOperatorError:
            raise _unknown(name, api) from None  # in lookup's words, with suggestions
        return overload
    raise _unknown(name, api)


def _alive(op: OpOverload, api: str) -> OpOverload:
    if op.defined:
        return op
    raise UnknownOperatorError(
        f"{api}(): operator {op.name()!r} no longer exists: the Library that defined it "
        "was destroyed",
        op=op.name(),
    )


def _of_packet(packet: OpOverloadPacket, api: str) -> OpOverload:
    overloads = packet._overloads
    qualname = packet._qualified_op_name
    if not overloads:
        raise UnknownOperatorError(
            f"{api}(): operator {qualname!r} no longer exists: the Library that defined it "
            "was destroyed",
            op=qualname,
        )
    only = overloads.get("default")
    if only is not None:
        return only
    if len(overloads) == 1:
        return next(iter(overloads.values()))
    names = ", ".join(f"{qualname}.{o}" for o in overloads)
    raise AmbiguousOperatorError(
        f"{api}(): operator {qualname!r} has no default overload and several others "
        f"({names}); name one, as oplib.ops.{packet._ns}.{packet._name}.<overload> or "
        f"'{qualname}.<overload>'",
        op=qualname,
        overloads=tuple(overloads),
    )


def _unknown(name: str, api: str) -> UnknownOperatorError:
    suggestions = _close_names(name)
    if suggestions:
        hint = " Did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
    elif "::" in name:
        hint = f" Define it first (oplib.define({name!r}, '(...) -> ...')); see 'oplib ops list'."
    else:
        hint = ""
    what = f"{api}(): operator {name!r} does not exist"
    if "::" not in name:
        what += ": an operator is named 'namespace::name' or 'namespace::name.overload'"
    return UnknownOperatorError(f"{what}.{hint}", op=name, suggestions=suggestions)


def _close_names(name: str) -> list[str]:
    """Existing qualified names spelled like ``name``: the same op name in another
    namespace (or with an overload, for an op without a default one), then near misses of
    the op name in its namespace and of the whole name."""
    import difflib  # only errors need it; it costs start-up time (about 0.6 ms)

    with REGISTRY.lock:
        known = sorted(REGISTRY.ops)
    key = name[: -len(_DEFAULT)] if name.endswith(_DEFAULT) else name
    if "::" not in key and "." in key:  # torch's printed form, "ns.op.overload"
        ns, _, rest = key.partition(".")
        key = f"{ns}::{rest}"
    ns, _, rest = key.rpartition("::")
    base = rest.partition(".")[0]

    def base_of(q: str) -> str:
        return q.rpartition("::")[2].partition(".")[0]

    same_name = sorted(
        (q for q in known if base_of(q) == base), key=lambda q: q.rpartition("::")[0] != ns
    )
    in_ns = {q.rpartition("::")[2]: q for q in known if q.rpartition("::")[0] == ns}
    near = [in_ns[n] for n in difflib.get_close_matches(rest, list(in_ns), n=3, cutoff=0.6)]
    elsewhere = [q for q in known if q.rpartition("::")[0] != ns]  # a namespace typo
    near += difflib.get_close_matches(key, elsewhere, n=3, cutoff=0.85)
    out: list[str] = []
    for q in [*same_name, *near]:
        if q not in out and q != name:
            out.append(q)
    return out[:5]
