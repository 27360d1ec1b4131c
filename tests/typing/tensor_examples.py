"""Type-checked in CI (mypy and pyright): Tensor's generated core-op methods and torch's
conveniences, as a user writes them; the generated methods are declared for type checkers
in class Tensor. The script also runs. Not collected by pytest (its name does not start
with ``test_``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from typing_extensions import assert_type

import oplib_core as oplib

x = oplib.tensor([[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
y = x.tanh().add(1.0).mul(x).amax(1)
assert_type(y, oplib.Tensor)
grad_like = x.new_ones(2, 2) * (1 - x.tanh() ** 2)
assert_type(grad_like, oplib.Tensor)
assert_type(x.to(oplib.float64), oplib.Tensor)
assert_type(x.to("cpu", oplib.float64), oplib.Tensor)
assert_type(x.double().float().long().int().bool().half(), oplib.Tensor)
assert_type(x.T, oplib.Tensor)
assert_type(x.mT, oplib.Tensor)
assert_type(x.new_tensor([1.0]), oplib.Tensor)
rows: list[oplib.Tensor] = list(x)
assert_type(2.0 in x, bool)
assert_type(float(x.sum()), float)
assert_type(x.element_size(), int)
assert_type(x.nbytes, int)
assert_type(x.is_meta, bool)
assert_type(x.stride(), Any)
index = [10, 20, 30][oplib.tensor(1)]
assert index == 20 and len(rows) == 2
assert f"{x.sum():.1f}" == "4.5"
assert np.allclose(y.tolist(), [0.5 * (1 + np.tanh(0.5)), 3.0 * (1 + np.tanh(3.0))])
