"""The built-in plugin ``core-autograd``: the Autograd kernels of the core op set, and the
view op ``oplib::_narrow`` (with its ``default`` and fake kernels) that the gradients of
``cat`` and ``stack`` need.

Registered through the same plugin path as third-party formulas (``oplib plugins list``
shows it and every kernel is credited to it), but each kernel is made the first time it is
read (:class:`~oplib_core._registry.registry.LazyKernel`): the formula modules
(``_core_formulas``) are imported when autograd first meets a core op, or something shows
its kernels (``oplib ops show``, opcheck), not by a program that never differentiates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._opset import CORE_OPS
from .._registry.entry import OpEntry
from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, FAKE
from ..hookspecs import hookimpl

__all__ = ["NAMES", "NARROW"]

#: A view op core adds for the gradients of ``cat`` and ``stack`` (the core set has no
#: slicing): ``length`` elements of dim ``dim`` from ``start``.
NARROW = "oplib::_narrow(Tensor(a) self, int dim, int start, int length) -> Tensor(a)"

#: The ops given an Autograd kernel: every core op taking a Tensor (a formula, an in-place
#: or ``out=`` form, or non-differentiable), ``_to_copy`` and ``_narrow``
#: (``tests/test_lazy_kernels.py`` holds this to ``_core_formulas.NAMES``).
NAMES = (
    *(op.name for op in CORE_OPS if "Tensor" in op.schema.partition("->")[0]),
    "_to_copy",
    "_narrow",
)

Made = tuple[Callable[..., Any], Callable[..., Any]]


def _autograd(entry: OpEntry, name: str) -> Made:
    from ._core_formulas import autograd_kernel

    return autograd_kernel(entry, name)


def _narrow(entry: OpEntry, name: str) -> Made:
    from . import _formulas

    fn: Callable[..., Any] = getattr(_formulas, name)
    return fn, fn


@hookimpl
def oplib_define(registrar: Any) -> None:
    registrar.define(NARROW)


@hookimpl
def oplib_impl(registrar: Any) -> None:
    make = functools.partial(_narrow, name="narrow_kernel")
    registrar._register_lazily(COMPOSITE_EXPLICIT, {"oplib::_narrow": make}, "impl")


@hookimpl
def oplib_register_fake(registrar: Any) -> None:
    make = functools.partial(_narrow, name="narrow_fake")
    registrar._register_lazily(FAKE, {"oplib::_narrow": make}, "register_fake")


@hookimpl
def oplib_register_autograd(registrar: Any) -> None:
    makes = {f"oplib::{name}": functools.partial(_autograd, name=name) for name in NAMES}
    registrar._register_lazily(AUTOGRAD, makes, "register_autograd")
