"""Fake (data-less) execution: data-less arrays, symbolic sizes, and their errors.

``FakeTensorMode`` and the core op set's fake kernels live in :mod:`.mode` and
:mod:`.core_fakes`; ``oplib_core`` exports ``FakeTensorMode`` and ``get_ctx``. This package
``__init__`` imports only the low layers (no dispatcher), so ``tensor.py`` can use
``FakeArray``.
"""

from __future__ import annotations

from . import _shapes as shapes
from ._arrays import FakeArray, check_shape, fake_array, numel
from ._context import FakeKernelContext, get_ctx
from ._errors import DataAccessError, DataDependentError, FakeTensorError
from ._symbolic import ShapeEnv, SymInt, is_symbolic

__all__ = [
    "DataAccessError",
    "DataDependentError",
    "FakeArray",
    "FakeKernelContext",
    "FakeTensorError",
    "ShapeEnv",
    "SymInt",
    "check_shape",
    "fake_array",
    "get_ctx",
    "is_symbolic",
    "numel",
    "shapes",
]
