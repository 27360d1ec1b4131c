"""oplib in one page: define an op, give it a numpy kernel, call it, look at what is installed.

python examples/quickstart.py
"""

import numpy as np

import oplib_core as oplib
from oplib_core.cli import main as oplib_cli

# 1. Define an operator with a schema, and a CPU kernel. Kernels see numpy arrays.
oplib.define("mylib::sin", "(Tensor x) -> Tensor")


@oplib.register_kernel("mylib::sin", "cpu")
def sin_cpu(x: np.ndarray) -> np.ndarray:
    return np.sin(x)


# 2. Call it with a numpy array (numpy back) or a Tensor (Tensor back).
print("native:", oplib.ops.mylib.sin(np.arange(3.0)))
t = oplib.tensor([0.0, 0.5, 1.0])
print("tensor:", oplib.ops.mylib.sin(t), t.dtype)


# 3. custom_op: the schema is inferred from the annotations.
@oplib.custom_op("mylib::scaled_add", mutates_args=())
def scaled_add(x: oplib.Tensor, y: oplib.Tensor, alpha: float = 1.0) -> oplib.Tensor:
    return x + alpha * y


print("schema:", scaled_add.schema)
print("custom_op:", scaled_add(t, t, alpha=2.0))

# 4. Core ops and Tensor arithmetic route through the same dispatcher.
print("core ops:", oplib.ops.oplib.sum(t * 2.0 + 1.0))

# 5. What is installed (the same as running `oplib backends list` in a shell).
print()
oplib_cli(["backends", "list"])
