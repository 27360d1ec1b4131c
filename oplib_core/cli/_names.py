"""Names given on the command line turned into what they name, or a :class:`UsageError`
with did-you-mean suggestions."""

from __future__ import annotations

from .._device import Device
from .._dispatch import OpOverload
from .._higher_order._operator import HOPS, NAMESPACE, HigherOrderOperator
from .._registry.lookup import resolve
from .._registry.registry import REGISTRY
from ..backends import TABLE, Backend, device
from ..errors import AmbiguousOperatorError, UnknownOperatorError
from ._errors import UsageError, no_operator, unknown_name

__all__ = [
    "INSTALL_A_BACKEND",
    "backend",
    "device_arg",
    "namespace",
    "op_name",
    "operator",
    "operator_or_hop",
]

#: What a user with oplib-core alone types to get a backend (cpu, the reference one).
INSTALL_A_BACKEND = "pip install oplib-cpu"


def operator(given: str, api: str) -> OpOverload:
    """The op ``given`` names, in any spelling :func:`oplib_core.lookup` takes."""
    try:
        return resolve(given, api)
    except (UnknownOperatorError, AmbiguousOperatorError) as e:
        raise no_operator(e, given) from e


def operator_or_hop(given: str, api: str) -> OpOverload | HigherOrderOperator:
    """A higher-order operator for ``higher_order::name``, else :func:`operator`."""
    if given.startswith(f"{NAMESPACE}::"):
        hop = HOPS.get(given)
        if hop is not None:
            return hop
        qualnames = [h.qualname for h in HOPS.all()]
        raise unknown_name(
            "higher-order operator", given, qualnames, "oplib ops list", f"{NAMESPACE}::"
        )
    return operator(given, api)


def op_name(given: str, api: str) -> str:
    """The name ``given`` resolves to: an overload's ``ns::op.overload`` or a higher-order
    operator's ``higher_order::name``."""
    op = operator_or_hop(given, api)
    return op.qualname if isinstance(op, HigherOrderOperator) else op.name()


def backend(given: str) -> Backend:
    b = TABLE.find(given)
    if b is None:
        raise unknown_name("backend", given, [x.name for x in TABLE.all()], "oplib backends list")
    return b


def device_arg(given: str) -> Device:
    """A ``--device`` value whose type is an installed backend."""
    try:
        d = device(given)
    except (ValueError, TypeError, RuntimeError) as e:
        raise UsageError(f"--device {given!r}: {e}") from e
    if TABLE.find(d.type) is None:
        raise unknown_name(
            "device type", d.type, [x.name for x in TABLE.all()], "oplib backends list"
        )
    return d


def namespace(given: str) -> str:
    with REGISTRY.lock:
        known = {e.schema.namespace for e in REGISTRY.ops.values()}
    if HOPS.all():
        known.add(NAMESPACE)
    if given not in known:
        raise unknown_name("namespace", given, known, "oplib ops list")
    return given
