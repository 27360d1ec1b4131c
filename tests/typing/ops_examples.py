"""Type-checked in CI (mypy and pyright): naming and inspecting operators as a user does.

``oplib.ops.<ns>.<op>`` is an ``OpOverloadPacket``, ``.default`` an ``OpOverload``, and
``oplib.lookup`` gives the same ``OpOverload``; their accessors have true types. Calling an
op returns ``Any``: the result depends on the schema (a Tensor, a native array, a tuple of
them...), as with torch's ops. The script also runs: the claims hold at run time too. Not
collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np

import oplib_core as oplib
from oplib_core.autograd import FunctionCtx
from oplib_core.fake import FakeArray
from oplib_core.library import Kernel
from oplib_core.testing import OpCheckResults

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type

oplib.define("mylib::sin", "(Tensor x) -> Tensor")


@oplib.register_kernel("mylib::sin", "cpu")
def sin_cpu(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.sin(x))


# -- one way to name an op, one type per step ------------------------------------------------
packet = oplib.ops.mylib.sin
assert_type(packet, oplib.OpOverloadPacket)
op = oplib.ops.mylib.sin.default
assert_type(op, oplib.OpOverload)
assert_type(oplib.lookup("mylib::sin"), oplib.OpOverload)
assert_type(oplib.lookup(packet), oplib.OpOverload)
assert oplib.lookup("mylib::sin") is op and oplib.lookup(packet) is op
assert_type(packet.overloads(), list[str])
assert_type(oplib.ops.import_module("json"), ModuleType)
namespaces = iter(oplib.ops)
assert_type(namespaces, Iterator[str])
assert "mylib" in oplib.ops

# -- calls return what the schema says: Any to a type checker ------------------------------------
assert_type(packet(np.arange(3.0)), Any)
assert_type(op(oplib.tensor([0.5])), Any)
y: oplib.Tensor = op(oplib.tensor([0.5]))  # so annotate what you know
assert isinstance(y, oplib.Tensor)

# -- read-only accessors -------------------------------------------------------------------------
assert_type(op.schema, oplib.FunctionSchema)
assert_type(op.schema.returns[0].type.is_tensor_like(), bool)
assert_type(op.name(), str)
assert_type(op.namespace, str)
assert_type(op.tags, tuple[oplib.Tag, ...])
assert_type(op.origin.source, str)
assert_type(op.defined, bool)
assert_type(op.has_kernel("cpu"), bool)
k = op.kernel("cpu")
assert_type(k, Kernel | None)
assert k is not None and k.fn is sin_cpu
assert_type(k.fn, Callable[..., Any])
assert_type(op.bind((np.ones(1),), {}), tuple[list[Any], dict[str, Any]])
assert_type(op.py_kernel("cpu"), Callable[..., Any] | None)

# -- explain and autograd --------------------------------------------------------------------------
why = oplib.explain(packet, oplib.tensor([0.5]))
assert_type(why, oplib.DispatchExplanation)
assert why.backend == "cpu"
assert_type(oplib.tensor([1.0], requires_grad=True).sum().backward(), None)

# -- a formula keeps its own values on ctx; opcheck's answer; fake kernels ----------------------
oplib.define("mylib::scale", "(Tensor x, float beta) -> Tensor")
oplib.register_kernel("mylib::scale", "cpu", lambda x, beta: x * beta)


@oplib.register_fake("mylib::scale")
def scale_fake(x: FakeArray, beta: float) -> FakeArray:
    return oplib.empty_like(x)


def scale_setup(ctx: FunctionCtx, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.beta = inputs[1]


def scale_backward(ctx: FunctionCtx, grad: oplib.Tensor) -> tuple[oplib.Tensor, None]:
    assert_type(ctx.saved_tensors, tuple[oplib.Tensor, ...])
    return grad * ctx.beta, None


oplib.register_autograd("mylib::scale", scale_backward, setup_context=scale_setup)
x64 = oplib.tensor([1.0, 2.0], dtype=oplib.float64, requires_grad=True)
results = oplib.opcheck("mylib::scale", (x64, 3.0))
assert_type(results, OpCheckResults)
assert {r.check for r in results.details if r.status == "PASS"} >= {
    "test_autograd_registration",
    "test_gradcheck",
}, results.details


# a device-generic kernel: oplib.native allocates and converts on its input's device
@oplib.custom_op("mylib::host_double", mutates_args=(), device_types=None)
def host_double(x: oplib.Tensor) -> oplib.Tensor:
    host = oplib.native.to_host(x)
    assert_type(host, np.ndarray)
    out = oplib.native.new_empty(x, host.shape, x.dtype)
    assert_type(out, Any)
    doubled: oplib.Tensor = oplib.native.from_host(host * 2, like=x)  # x's backend's array
    return doubled


assert host_double(oplib.tensor([1.0])).item() == 2.0
