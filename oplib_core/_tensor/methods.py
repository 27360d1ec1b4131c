"""Tensor methods generated from the core op set, so that no core op lacks one.

Every ``oplib::`` op of :data:`~oplib_core._opset.CORE_OPS` whose first argument is
``Tensor self`` becomes ``Tensor.<name>`` (overloads share one method: ``t.add(u)`` and
``t.add(2.0)`` go through the packet ``oplib.ops.oplib.add``, which picks the overload),
unless :class:`~oplib_core._tensor.tensor.Tensor` writes the method itself with torch's calling
conventions (``t.permute(1, 0)``, ``t.sum(1)``) or :data:`NO_METHOD` says why it has none.
``tests/test_tensor_methods.py`` checks every ``oplib::`` op in the registry against that.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._factories import tensor
from .._opset import CORE_OPS, NAMESPACE
from ..ops import ops
from .tensor import Tensor

__all__ = ["NO_METHOD", "generated_method_names", "install"]

#: Core ops with a Tensor first argument that deliberately have no method of their name.
NO_METHOD: dict[str, str] = {
    "rsub": "the reversed scalar form behind `2 - t` (torch has no Tensor.rsub either)",
    "rdiv": "the reversed scalar form behind `2 / t`",
    "rpow": "the reversed scalar form behind `2 ** t`",
    "_to_copy": "internal: Tensor.to() and its conveniences (float(), cpu() ...) call it",
    "_narrow": "internal: the gradients of cat and stack use it (oplib::narrow is public)",
    "index": "t[idx] and t[mask] call it (torch has no Tensor.index either)",
    "slice": "t[a:b:c] calls it (torch has no Tensor.slice either)",
    "pad": "torch spells it as a function, torch.nn.functional.pad (here oplib.ops.oplib.pad)",
}


#: What class Tensor itself defines (before :func:`install` adds to it).
_HAND_WRITTEN = frozenset(vars(Tensor))


# Read from the schema text: parsing the whole op set would add milliseconds to
# ``import oplib_core`` (its schemas are parsed when the core plugin loads, on first use).
# tests/test_tensor_methods.py checks the outcome against the parsed schemas.
_SELF_FIRST = re.compile(r"\(Tensor(\([a-z]+!?\))? self\b")


def _core_schemas() -> dict[str, list[str]]:
    """The core ops' schemas by op name (overloads together), in definition order."""
    out: dict[str, list[str]] = {}
    for op in CORE_OPS:
        out.setdefault(op.name.partition(".")[0], []).append(op.schema)
    return out


def generated_method_names() -> list[str]:
    """The core ops that get a generated method: first argument ``Tensor self`` in every
    overload, not in :data:`NO_METHOD` and not written by hand on :class:`Tensor`."""
    return [
        name
        for name, schemas in _core_schemas().items()
        if name not in NO_METHOD
        and name not in _HAND_WRITTEN
        and all(_SELF_FIRST.search(s) for s in schemas)
    ]


def _method(name: str, schemas: list[str]) -> Callable[..., Any]:
    namespace = getattr(ops, NAMESPACE)
    packets = namespace.__dict__

    # The packet is looked up per call (it is rebuilt when the op's registration changes),
    # in the namespace's dict first: cheaper than getattr, which makes it when missing.
    def method(self: Tensor, /, *args: Any, **kwargs: Any) -> Any:
        try:
            packet = packets[name]
        except KeyError:
            packet = getattr(namespace, name)
        return packet(self, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    lines = "\n".join(f"    {s}" for s in schemas)
    method.__doc__ = f"``oplib.ops.{NAMESPACE}.{name}(self, ...)``, the core op:\n\n{lines}"
    return method


def _new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor holding ``data`` (copied) with this tensor's dtype and device unless
    given (torch's ``Tensor.new_tensor``); it is a leaf that does not require grad."""
    if isinstance(data, Tensor):
        data = data.detach()
    return tensor(
        data,
        dtype=self.dtype if dtype is None else dtype,
        device=self.device if device is None else device,
    ).clone()


def install() -> None:
    """Set the generated methods (and the factory conveniences) on :class:`Tensor`."""
    schemas = _core_schemas()
    for name in generated_method_names():
        setattr(Tensor, name, _method(name, schemas[name]))
    Tensor.new_tensor = _new_tensor  # type: ignore[method-assign]


install()
