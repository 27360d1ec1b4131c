"""The Autograd kernels of the core op set, made for ``core-autograd``
(``_core_autograd_plugin``) the first time each is read: the gradient formulas
(``_formulas``, ``_index_formulas``, ``_inplace``), the in-place ops' kernels (recorded on
their functional form), the ``out=`` overloads' (which refuse autograd, as in torch) and
the non-differentiable ops' (falling through).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._opset import OUT_OPS
from .._registry.entry import OpEntry, fallthrough_kernel
from ..errors import RegistrationError
from ._formulas import FORMULAS, NON_DIFFERENTIABLE
from ._index_formulas import INDEX_FORMULAS
from ._inplace import FORMS, inplace_kernel, out_kernel
from ._inplace import FORMULAS as INPLACE_FORMULAS
from ._registration import formula_kernel

__all__ = ["NAMES", "autograd_kernel"]

_FORMULAS = FORMULAS | INDEX_FORMULAS | INPLACE_FORMULAS
_OUT = frozenset(op.name for op in OUT_OPS)

#: Every op this module has an Autograd kernel for.
NAMES = frozenset((*_FORMULAS, *FORMS, *_OUT, *NON_DIFFERENTIABLE))


def autograd_kernel(entry: OpEntry, name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The Autograd kernel of core op ``name`` (``"add.Scalar"``) and the function whose
    definition is its origin (a formula's backward)."""
    formula = _FORMULAS.get(name)
    if formula is not None:
        setup_context, backward = formula
        return formula_kernel(entry.overload, backward, setup_context, built_in=True), backward
    form = FORMS.get(name)
    if form is not None:
        fn = inplace_kernel(entry.qualname, form)
        return fn, fn
    if name in _OUT:
        fn = out_kernel(entry.qualname)
        return fn, fn
    if name in NON_DIFFERENTIABLE:
        return fallthrough_kernel, fallthrough_kernel
    raise RegistrationError(
        f"oplib internal error: core-autograd has no Autograd kernel for oplib::{name}",
        op=f"oplib::{name}",
    )
