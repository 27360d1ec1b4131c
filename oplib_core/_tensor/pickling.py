"""Operators pickle by reference, as numpy's ufuncs and Python's functions do.

An op object (an ``OpOverload``, an ``OpOverloadPacket``, a ``CustomOpDef``, a
``HigherOrderOperator``) pickles as its name and where it was defined, never as its state
(kernels, caches, closures): each class's ``__reduce__`` names a function of its own module
that finds the op of that name in the receiving process, through the same tables
``oplib.ops.<ns>.<name>`` and ``oplib.lookup`` read. So ``pickle.loads(pickle.dumps(op)) is
op`` within a process, and ``multiprocessing`` pools map ops under fork, spawn and
forkserver.

A process that lacks the op first imports the module that defined it, as unpickling a
function imports its module (never ``__main__``, never a native library); if the op is
still missing, :func:`find` raises ``UnknownOperatorError`` naming the op and what to
import, install or load. Nothing here runs on an op call.
"""

from __future__ import annotations

import importlib
import pickle
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._version import __version__
from ..errors import UnknownOperatorError

if TYPE_CHECKING:
    from .._registry.entry import Origin
    from .protocol import TensorLike

__all__ = ["Where", "find", "tensor_state", "where_defined"]

T = TypeVar("T")

#: ``(module, distribution, source)``: the module that defined the op (None when unknown),
#: the distribution of the plugin that did (None for code that is no plugin's) and the
#: definition's ``file:line`` (or a native library's path). Plain strings: they travel in
#: the pickle.
Where = tuple["str | None", "str | None", str]

_CORE = "oplib-core"
_MAIN = frozenset({"__main__", "__mp_main__"})
_NATIVE_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")
#: A definition's file → the module whose ``__file__`` it is (checked again on every read).
_module_of_file: dict[str, str] = {}


def where_defined(origin: Origin | None, module: str | None = None) -> Where:
    """Where the op of ``origin`` was defined, for its pickle; ``module`` when the caller
    knows it (a custom op's function's ``__module__``), else found from the source file."""
    if origin is None:
        return (module, None, "<unknown>")
    if module is None:
        module = _module_of(origin.source)
    return (module, origin.distribution, origin.source)


def find(kind: str, qualname: str, where: Where, get: Callable[[], T | None]) -> T:
    """``get()``'s op, importing ``where``'s module first when it gives None; else
    ``UnknownOperatorError`` naming the op (``kind`` says what it is: "operator",
    "custom op"...) and what would define it here."""
    found = get()
    if found is not None:
        return found
    module = where[0]
    failed: Exception | None = None
    tried = False
    if module is not None and module not in _MAIN and module not in sys.modules:
        tried = True
        try:
            importlib.import_module(module)
        except Exception as e:  # reported in the error below, with its cause
            failed = e
        else:
            found = get()
            if found is not None:
                return found
    error = UnknownOperatorError(_missing(kind, qualname, where, tried, failed), op=qualname)
    raise error from failed


def _missing(kind: str, qualname: str, where: Where, tried: bool, failed: Exception | None) -> str:
    module, distribution, source = where
    head = f"cannot unpickle {kind} {qualname!r}: no such operator is defined in this process"
    if distribution == _CORE:
        return (
            f"{head}; it belongs to {_CORE}'s own op set, which this {_CORE} {__version__} "
            "lacks: unpickle with the oplib-core version that pickled it"
        )
    if distribution is not None:
        return (
            f"{head}; the plugin of distribution {distribution!r} defined it (at {source}): "
            "install that distribution here (oplib loads installed plugins by itself), or "
            "see why its plugin failed with 'oplib plugins list'"
        )
    if source.endswith(_NATIVE_SUFFIXES):
        return (
            f"{head}; the native library {source} defined it: load it first, with "
            f"oplib.ops.load_library({source!r})"
        )
    if module in _MAIN:
        return (
            f"{head}; the main script defined it (at {source}): define it at the script's top "
            "level (not under `if __name__ == '__main__':`) so that worker processes define "
            "it too, or define it in a module the script imports"
        )
    if module is not None:
        if failed is not None:
            why = f"importing it here failed: {type(failed).__name__}: {failed}"
        elif tried:
            why = "importing it here did not define the operator"
        else:
            why = "it is imported here but no longer defines the operator"
        return (
            f"{head}; module {module!r} defined it (at {source}): import that module before "
            f"unpickling ({why})"
        )
    return (
        f"{head}; it was defined at {source}: run the code that defines it (its Library, "
        "custom_op or HigherOrderOperator) before unpickling"
    )


def _module_of(source: str) -> str | None:
    """The module whose file holds ``source`` (``file:line``), preferring an importable name
    to ``__main__``; None when no imported module has that file."""
    path, sep, line = source.rpartition(":")
    if not sep or not line.isdigit():
        return None
    known = _module_of_file.get(path)
    if known is not None and _file_of(sys.modules.get(known)) == path:
        return known
    found: str | None = None
    for name, mod in list(sys.modules.items()):
        if _file_of(mod) != path:
            continue
        found = name
        if name not in _MAIN:
            _module_of_file[path] = name
            break
    return found


def _file_of(mod: object) -> str | None:
    """A module's ``__file__`` read from its dict: ``getattr`` could run a module-level
    ``__getattr__`` (lazy modules import on it)."""
    try:
        value = vars(mod).get("__file__")
    except TypeError:  # no __dict__: not a module
        return None
    return value if isinstance(value, str) else None


def tensor_state(tensor: TensorLike) -> tuple[None, dict[str, Any]]:
    """A Tensor's pickled state (its slots); refused for a tensor an op made while recording
    gradients. Its ``grad_fn`` would travel by value, with the whole graph behind it and
    copies of its leaves, so ``backward()`` on the copy would run silently into those copies
    and never reach the sender's leaves: torch refuses the same ("autograd does not support
    crossing process boundaries")."""
    grad_fn = tensor.grad_fn
    if grad_fn is not None:
        name = getattr(grad_fn, "name", None)
        label = name() if callable(name) else type(grad_fn).__name__
        raise pickle.PicklingError(
            f"cannot pickle a Tensor that is part of an autograd graph (grad_fn=<{label}>): "
            "autograd does not cross process boundaries, so "
            "backward() on the copy would not reach this process's leaves. To send its data, "
            "pickle tensor.detach() (a leaf; .requires_grad_() on the other side to record "
            "again); to send gradients, call backward() where the graph was built and send "
            "the leaves' .grad"
        )
    slots = type(tensor).__slots__
    return None, {name: getattr(tensor, name) for name in slots if name != "__weakref__"}
