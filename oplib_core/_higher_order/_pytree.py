"""Nested arguments as leaves and a structure: the lists, tuples and dicts that control-flow
operators take and return (torch's ``torch.utils._pytree``, the containers it needs here),
and ops' named results (``oplib.return_types``, torch's structseqs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .._return_types import ReturnType

__all__ = ["Spec", "leaves", "tree_flatten", "tree_map", "tree_unflatten"]

#: A structure: ``None`` for a leaf, else (container type, dict keys or None, children).
Spec = tuple[type, tuple[Any, ...] | None, tuple[Any, ...]] | None


def leaves(tree: Any) -> Iterator[Any]:
    """The leaves of ``tree`` in order (lists, tuples and dicts are containers)."""
    t = type(tree)
    if t is list or t is tuple or isinstance(tree, ReturnType):
        for child in tree:
            yield from leaves(child)
    elif t is dict:
        for child in tree.values():
            yield from leaves(child)
    else:
        yield tree


def tree_flatten(tree: Any) -> tuple[list[Any], Spec]:
    """``(leaves, spec)``; ``tree_unflatten(leaves, spec)`` rebuilds ``tree``."""
    out: list[Any] = []
    return out, _flatten(tree, out)


def _flatten(tree: Any, out: list[Any]) -> Spec:
    t = type(tree)
    if t is list or t is tuple or isinstance(tree, ReturnType):
        return (t, None, tuple(_flatten(c, out) for c in tree))
    if t is dict:
        return (t, tuple(tree), tuple(_flatten(c, out) for c in tree.values()))
    out.append(tree)
    return None


def tree_unflatten(values: list[Any], spec: Spec) -> Any:
    it = iter(values)
    return _build(it, spec)


def _build(it: Iterator[Any], spec: Spec) -> Any:
    if spec is None:
        return next(it)
    t, keys, children = spec
    built = [_build(it, c) for c in children]
    if keys is not None:
        return dict(zip(keys, built, strict=True))
    return t(built)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    values, spec = tree_flatten(tree)
    return tree_unflatten([fn(v) for v in values], spec)


def describe(spec: Spec) -> str:
    """A structure as text, for errors: ``(*, [*, *])``, ``{'a': *}``."""
    if spec is None:
        return "*"
    t, keys, children = spec
    if keys is not None:
        items = zip(keys, children, strict=True)
        return "{" + ", ".join(f"{k!r}: {describe(c)}" for k, c in items) + "}"
    if issubclass(t, ReturnType):
        fields = zip(t._fields, children, strict=True)
        return f"{t.__name__}(" + ", ".join(f"{f}={describe(c)}" for f, c in fields) + ")"
    inner = ", ".join(describe(c) for c in children)
    if t is tuple:
        return f"({inner},)" if len(children) == 1 else f"({inner})"
    return f"[{inner}]"
