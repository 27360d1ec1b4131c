"""``help(oplib.ops.ns.op)`` and ``help(oplib.ops.ns.op.overload)``: the op's schemas, tags,
where it was defined and its own docstring, instead of the internal class.

An instance's ``__doc__`` is looked up on its class, so the class holds :class:`OpDoc`, a
descriptor that gives the class's own docstring to the class (Sphinx, ``help(OpOverload)``)
and builds the op's text for an instance when it is read (nothing is stored, nothing on the
call path reads it). pydoc documents an instance whose ``__doc__`` differs from its
class's as the object itself (its repr, then that text); it names the object by its
class's ``__name__``, which :func:`document` sets to the public class's name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import CodeType
from typing import Any

from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, FAKE

__all__ = ["OpDoc", "document", "op_docstring", "overload_text", "packet_text"]


class OpDoc:
    """``__doc__`` of a class whose instances are ops: the class's docstring on the class,
    ``text(instance)`` on an instance."""

    def __init__(self, class_doc: str | None, text: Callable[[Any], str]) -> None:
        self.class_doc = class_doc
        self.text = text

    def __get__(self, obj: object, cls: type | None = None) -> str | None:
        if obj is None:
            return self.class_doc
        return self.text(obj)


def document(cls: type, text: Callable[[Any], str], public: type | None = None) -> None:
    """Give ``cls``'s instances ``text(instance)`` as their ``__doc__``; an internal
    subclass is named like its ``public`` class in ``help()``'s title (its ``__qualname__``,
    which ``repr(type(x))`` shows, stays its own)."""
    doc = cls.__dict__.get("__doc__")
    class_doc = doc.class_doc if isinstance(doc, OpDoc) else doc
    if public is not None:
        class_doc = class_doc or public.__dict__["__doc__"].class_doc
        cls.__name__ = public.__name__
    cls.__doc__ = OpDoc(class_doc, text)  # type: ignore[assignment]  # a descriptor


def op_docstring(op: Any) -> str | None:
    """The op's own docstring: that of the function ``custom_op`` made it from (a kernel
    registered where the op was defined), else that of its ``default`` kernel. Only a
    Python function's docstring counts (not a numpy ufunc's, not a gradient formula's)."""
    candidates = [op.kernel(COMPOSITE_EXPLICIT)]
    source = op.origin.source
    for key, kernel in op.kernels():  # Fake and Autograd kernels may be made on first read
        if key not in (FAKE, AUTOGRAD, COMPOSITE_EXPLICIT) and _defined_with(kernel, source):
            candidates.append(kernel)
    for kernel in candidates:
        if kernel is not None and inspect.isfunction(kernel.fn):
            doc = inspect.getdoc(kernel.fn)
            if doc:
                return doc
    return None


def _defined_with(kernel: Any, source: str) -> bool:
    """Whether ``kernel`` was registered where its op was defined (``source``). Python 3.10
    puts a decorated function's definition at its ``def`` line, below the decorator's line
    where its code starts (``co_firstlineno``), which is the kernel's origin."""
    if kernel.origin.source == source:
        return True
    code: CodeType | None = getattr(kernel.fn, "__code__", None)
    filename, _, line = source.rpartition(":")
    if code is None or filename != code.co_filename or not line.isdigit():
        return False
    body = min((n for _, _, n in code.co_lines() if n is not None), default=code.co_firstlineno)
    return code.co_firstlineno <= int(line) <= body


def schema_lines(ops: list[Any]) -> str:
    return "\n".join(str(op.schema) for op in ops)


def _about(op: Any) -> str:
    lines = []
    if op.tags:
        lines.append(f"Tags: {', '.join(getattr(t, 'name', str(t)) for t in op.tags)}")
    lines.append(f"Defined at {op.origin}")
    return "\n".join(lines)


def overload_text(op: Any) -> str:
    """``help(ops.ns.op.overload)``: its schema, how to call it, tags, origin, docstring."""
    ns, _, name = op.name().partition("::")
    name = name.partition(".")[0]
    parts = [
        str(op.schema),
        f"The {op._overloadname!r} overload of {ns}::{name}: call "
        f"oplib.ops.{ns}.{name}.{op._overloadname}(...) with the schema's arguments.",
        _about(op),
    ]
    own = op_docstring(op)
    if own:
        parts.append(own)
    return "\n\n".join(parts)


def packet_text(packet: Any) -> str:
    """``help(ops.ns.op)``: every overload's schema, how a call picks one, tags, origin
    and the op's docstring."""
    overloads = [packet.__dict__[name] for name in packet.overloads()]
    qualname = packet._qualified_op_name
    if not overloads:
        return f"{qualname}: no longer defined."
    ns, _, name = qualname.partition("::")
    attrs = ", ".join(f".{o}" for o in packet.overloads())
    pick = (
        "Calling it calls that overload"
        if len(overloads) == 1
        else "Calling it picks the first overload (in this order) whose schema the arguments fit"
    )
    parts = [
        schema_lines(overloads),
        f"{pick}; each is also an attribute: oplib.ops.{ns}.{name}{attrs}.",
        _about(overloads[0]),
    ]
    own = next((d for d in map(op_docstring, overloads) if d), None)
    if own:
        parts.append(own)
    return "\n\n".join(parts)
