"""Type-checked in CI (mypy and pyright): the README examples as a user writes them.

Each ``assert_type`` fails the check if what a user sees stops being true (a decorator
that returns ``Any``, a Tensor method typed ``Any``, a record whose fields are hidden).
The script also runs (``tests/test_typing.py``): the examples work, not only type-check.
Not collected by pytest (its name does not start with ``test_``).
"""

from __future__ import annotations

import inspect
import sys

import numpy as np

import oplib_core as oplib
from oplib_core.backends import BackendSpec
from oplib_core.custom_op import CustomOpDef
from oplib_core.fake import FakeArray
from oplib_core.plugins import Registrar

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type

# -- the README's first example --------------------------------------------------------
oplib.define("mylib::sin", "(Tensor x) -> Tensor")


@oplib.register_kernel("mylib::sin", "cpu")
def sin_cpu(x: np.ndarray) -> np.ndarray:  # kernels see native arrays: numpy on cpu
    return np.asarray(np.sin(x))


# the decorators hand the function back, type and all (an Any would fail these)
assert_type(sin_cpu(np.arange(3.0)), np.ndarray)

oplib.ops.mylib.sin(np.arange(3.0))  # numpy in, numpy out
oplib.ops.mylib.sin(oplib.tensor([0.5]))  # Tensor in, Tensor out


@oplib.custom_op("mylib::scaled_add", mutates_args=())
def scaled_add(x: oplib.Tensor, y: oplib.Tensor, alpha: float = 1.0) -> oplib.Tensor:
    return x + alpha * y  # schema inferred from the annotations


assert_type(scaled_add, CustomOpDef)


@scaled_add.register_fake
def scaled_add_fake(x: FakeArray, y: FakeArray, alpha: float = 1.0) -> FakeArray:
    return x.new_empty(x.shape)  # fake kernels see data-less arrays


assert_type(scaled_add_fake(FakeArray((2,)), FakeArray((2,))), FakeArray)
t0 = oplib.tensor([1.0, 2.0])
scaled_add(t0, t0)  # called like the function: Tensors in, Tensors out
assert_type(oplib.empty_like(t0), oplib.Tensor)

# -- oplib.tensor and oplib.device are functions (not the modules they once shared names with)
t = oplib.tensor([1.0, 2.0, 3.0], requires_grad=True)
assert_type(t, oplib.Tensor)
assert_type(oplib.device("cpu"), oplib.Device)
assert_type(oplib.device("cpu").index, int | None)

# -- Tensor operators and methods give Tensors ------------------------------------------
oplib.tensor([1.0], requires_grad=True).sum().backward()
assert_type(t.sum(), oplib.Tensor)
assert_type(t + t, oplib.Tensor)
assert_type(2.0 * t - 1.0, oplib.Tensor)
assert_type(t / t, oplib.Tensor)
assert_type(-t, oplib.Tensor)
assert_type(t == t, oplib.Tensor)
assert_type(t.exp().sin().mean(), oplib.Tensor)
assert_type(t.reshape(3, 1).T, oplib.Tensor)
assert_type(t.detach().to("cpu"), oplib.Tensor)
assert_type(t.size(), tuple[int, ...])
assert_type(t.size(0), int)
assert_type(t.shape, tuple[int, ...])
assert_type(t.grad, oplib.Tensor | None)
loss = (t * t).sum()
loss.backward()
with oplib.no_grad():
    assert_type(t * 2.0, oplib.Tensor)

# -- records show their fields --------------------------------------------------------------
spec = BackendSpec(name="acme", array_type_names=("acme.Array",), priority=5)
assert_type(spec.name, str)
assert_type(spec.priority, int)
assert_type(spec.array_type_names, tuple[str, ...])
assert_type(spec._replace(priority=1), BackendSpec)
assert "array_types" in inspect.signature(BackendSpec).parameters
assert_type(oplib.parse_schema("mylib::f(Tensor x) -> Tensor").name, str)


# -- a plugin's hook, its registrar typed with the public name ----------------------------
@oplib.hookimpl  # imported lazily at run time, seen by type checkers all the same
def oplib_impl(registrar: Registrar) -> None:
    registrar.impl("mylib::sin", "meta", sin_cpu)

    @registrar.register_fake("mylib::sin")
    def sin_fake(x: FakeArray) -> FakeArray:
        return x.new_empty(x.shape)

    assert_type(sin_fake(FakeArray((1,))), FakeArray)
