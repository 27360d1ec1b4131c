"""The built-in plugin ``core-autograd``: gradient formulas of the core op set.

Registered through the same plugin path as third-party formulas (``oplib_register_autograd``),
so ``oplib plugins list`` shows it and every formula is credited to it. It also defines the
view op ``oplib::_narrow`` (with a ``default`` kernel and a fake kernel) that the gradients
of ``cat`` and ``stack`` need, and the Autograd kernels of the in-place ops (``_inplace``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._opset import OUT_OPS
from .._registry import AUTOGRAD, REGISTRY, OpEntry, fallthrough_kernel, origin_of
from ..hookspecs import hookimpl
from ._formulas import FORMULAS, NARROW, NON_DIFFERENTIABLE, narrow_fake, narrow_kernel
from ._index_formulas import INDEX_FORMULAS
from ._inplace import FORMS, Form, inplace_kernel, out_kernel
from ._inplace import FORMULAS as INPLACE_FORMULAS
from ._registration import formula_kernel


def _formula(
    entry: OpEntry, backward: Callable[..., Any], setup_context: Callable[..., Any] | None
) -> Callable[..., Any]:
    return formula_kernel(entry.overload, backward, setup_context)


def _inplace(entry: OpEntry, form: Form) -> Callable[..., Any]:
    return inplace_kernel(entry.qualname, form)


@hookimpl
def oplib_define(registrar: Any) -> None:
    registrar.define(NARROW)


@hookimpl
def oplib_impl(registrar: Any) -> None:
    registrar.impl("oplib::_narrow", "default", narrow_kernel)


@hookimpl
def oplib_register_fake(registrar: Any) -> None:
    registrar.register_fake("oplib::_narrow", narrow_fake)


@hookimpl
def oplib_register_autograd(registrar: Any) -> None:
    # Made from each op's schema when the op is built (core ops are built on first use).
    for name, (setup_context, backward) in (FORMULAS | INDEX_FORMULAS | INPLACE_FORMULAS).items():
        # Core shape ops return views (``Tensor(a)``), which the public register_autograd
        # refuses; core registers their formulas directly, as torch does for its views.
        registrar._register(
            REGISTRY.add_kernel_built(
                f"oplib::{name}",
                AUTOGRAD,
                functools.partial(_formula, backward=backward, setup_context=setup_context),
                origin=origin_of(backward),
                api="register_autograd",
            )
        )
    for name, form in FORMS.items():  # in-place ops: recorded on their functional form
        registrar._register(
            REGISTRY.add_kernel_built(
                f"oplib::{name}",
                AUTOGRAD,
                functools.partial(_inplace, form=form),
                api="register_autograd",
            )
        )
    for op in OUT_OPS:  # out= overloads refuse autograd, as in torch
        qualname = f"oplib::{op.name}"
        registrar._register(
            REGISTRY.add_kernel(qualname, AUTOGRAD, out_kernel(qualname), api="register_autograd")
        )
    for name in NON_DIFFERENTIABLE:
        registrar._register(
            REGISTRY.add_kernel(
                f"oplib::{name}", AUTOGRAD, fallthrough_kernel, api="register_autograd"
            )
        )
