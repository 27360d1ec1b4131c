"""Type-checked in CI (mypy and pyright): code written against the array API standard,
on oplib Tensors through ``oplib.array_api``. The script also runs. Not collected by
pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
from typing_extensions import assert_type

import oplib_core as oplib
from oplib_core import array_api as xp

t = oplib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
assert_type(t.__array_namespace__(), ModuleType)
assert_type(xp.exp(t), oplib.Tensor)
assert_type(xp.add(t, 1.0), oplib.Tensor)
assert_type(xp.sum(t, axis=0, keepdims=True), oplib.Tensor)
assert_type(xp.var(t, axis=(0, 1), correction=1), oplib.Tensor)
assert_type(xp.unstack(t), tuple[oplib.Tensor, ...])
assert_type(xp.broadcast_arrays(t, t), list[oplib.Tensor])
assert_type(xp.tensordot(t, t, axes=1), oplib.Tensor)
assert_type(xp.linspace(0.0, 1.0, 5, dtype=xp.float64), oplib.Tensor)
assert_type(xp.can_cast(xp.int8, xp.int16), bool)
assert_type(xp.result_type(t, xp.float64), np.dtype)
assert_type(xp.finfo(xp.float32).eps, float)
assert_type(xp.iinfo(xp.int8).max, int)
assert_type(xp.__array_api_version__, str)
assert_type(xp.NOT_COVERED, dict[str, str])
xp.mean(xp.square(t)).backward()
