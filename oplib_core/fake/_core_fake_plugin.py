"""The built-in plugin ``core-fake``: a fake kernel for every op of the core op set and for
``oplib::_to_copy`` (``_core_fakes``), registered through the same plugin hook as anyone
else's.

Each kernel is made the first time it is read (:class:`~oplib_core._registry.registry.LazyKernel`):
``_core_fakes`` is imported when a meta or fake tensor first reaches a core op, or
something shows its kernels (``oplib ops show``, opcheck), not by a program that never
fakes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._opset import CORE_OPS
from .._registry.entry import OpEntry
from .._registry.registry import FAKE
from ..hookspecs import hookimpl

__all__ = ["NAMES"]

#: The ops given a fake kernel (``tests/test_lazy_kernels.py`` holds it to ``_core_fakes``'s).
NAMES = (*(op.name for op in CORE_OPS), "_to_copy")


def _fake(entry: OpEntry, name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    from ._core_fakes import fake_kernel

    fn = fake_kernel(name)
    return fn, fn


@hookimpl
def oplib_register_fake(registrar: Any) -> None:
    makes = {f"oplib::{name}": functools.partial(_fake, name=name) for name in NAMES}
    registrar._register_lazily(FAKE, makes, "register_fake")
