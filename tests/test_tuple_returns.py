"""``-> Tuple[Tensor]`` custom ops return a 1-tuple, as in torch (issue 13).

torch 2.13, checked with a CPU wheel: ``infer_schema`` writes ``Tuple[Tensor]`` as
``-> ((Tensor))``, one return of tuple type; the op (through the custom op, ``torch.ops``,
FakeTensorMode and autograd) returns a 1-tuple; a kernel returning a bare Tensor raises
"Object tensor(...) had a different number of elements than type Tuple[Tensor]", a list of
one is accepted. A hand-written ``-> (Tensor)`` is ``-> Tensor`` and returns a Tensor.
"""

from __future__ import annotations

from typing import Tuple  # noqa: UP035  (torch users write typing.Tuple)

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.errors import KernelResultError


def _cube(ns: str, name: str = "cube", tuple_type: object = Tuple) -> oplib.CustomOpDef:  # noqa: UP006
    ann = tuple_type[oplib.Tensor]  # type: ignore[index]

    def cube(x: oplib.Tensor):
        return (x**3,)

    cube.__annotations__["return"] = ann  # ``-> Tuple[Tensor]`` or ``-> tuple[Tensor]``
    return oplib.custom_op(f"{ns}::{name}", cube, mutates_args=())


def test_infer_schema_writes_a_tuple_of_one_as_torch() -> None:
    def f(x: oplib.Tensor) -> Tuple[oplib.Tensor]: ...  # noqa: UP006

    def g(x: oplib.Tensor) -> tuple[oplib.Tensor]: ...

    def h(x: oplib.Tensor) -> Tuple[oplib.Tensor, oplib.Tensor]: ...  # noqa: UP006

    assert oplib.infer_schema(f, mutates_args=()) == "(Tensor x) -> ((Tensor))"
    assert oplib.infer_schema(g, mutates_args=()) == "(Tensor x) -> ((Tensor))"
    assert oplib.infer_schema(h, mutates_args=()) == "(Tensor x) -> (Tensor, Tensor)"


def test_schema_model() -> None:
    s = oplib.parse_schema("ns::a(Tensor x) -> ((Tensor))")
    assert s.tuple_return and len(s.returns) == 1 and str(s) == "ns::a(Tensor x) -> ((Tensor))"
    assert oplib.parse_schema(str(s)) == s
    plain = oplib.parse_schema("ns::a(Tensor x) -> (Tensor)")
    assert not plain.tuple_return and str(plain) == "ns::a(Tensor x) -> Tensor"
    assert plain != s
    with pytest.raises(oplib.SchemaError):
        oplib.parse_schema("ns::a(Tensor x) -> ((Tensor, Tensor))")


@pytest.mark.parametrize("tuple_type", [Tuple, tuple])  # noqa: UP006
def test_custom_op_returns_a_1_tuple(ns, tuple_type) -> None:
    cube = _cube(ns, tuple_type=tuple_type)
    x = oplib.tensor(np.full(2, 2.0))
    for call in (cube, getattr(oplib.ops, ns).cube, oplib.lookup(f"{ns}::cube")):
        out = call(x)
        assert type(out) is tuple and len(out) == 1
        assert type(out[0]) is oplib.Tensor and np.array_equal(out[0].numpy(), [8.0, 8.0])
    native = cube(np.full(2, 2.0))
    assert type(native) is tuple and type(native[0]) is np.ndarray


def test_hand_written_parenthesised_return_stays_a_tensor(lib, ns) -> None:
    lib.define("one(Tensor x) -> (Tensor)")
    lib.impl("one", lambda x: x + 1, "default")
    assert type(getattr(oplib.ops, ns).one(oplib.tensor(np.zeros(1)))) is oplib.Tensor
    lib.define("tup(Tensor x) -> ((Tensor))")  # torch's Tuple[Tensor], written by hand
    lib.impl("tup", lambda x: (x + 1,), "default")
    out = getattr(oplib.ops, ns).tup(oplib.tensor(np.zeros(1)))
    assert type(out) is tuple and type(out[0]) is oplib.Tensor


def test_kernel_result_checked(lib, ns) -> None:
    lib.define("bare(Tensor x) -> ((Tensor))")
    lib.impl("bare", lambda x: x + 1, "default")
    with pytest.raises(KernelResultError, match=r"\(\(Tensor\)\): expected a tuple of 1"):
        getattr(oplib.ops, ns).bare(oplib.tensor(np.zeros(1)))
    lib.define("lst(Tensor x) -> ((Tensor))")
    lib.impl("lst", lambda x: [x + 1], "default")  # a list of one is accepted, as torch
    out = getattr(oplib.ops, ns).lst(oplib.tensor(np.zeros(1)))
    assert type(out) is tuple and out[0].numpy()[0] == 1.0
    lib.define("two(Tensor x) -> ((Tensor))")
    lib.impl("two", lambda x: (x, x), "default")
    with pytest.raises(KernelResultError):
        getattr(oplib.ops, ns).two(oplib.tensor(np.zeros(1)))


def test_fake_meta_autograd_and_opcheck(ns) -> None:
    cube = _cube(ns)

    @cube.register_fake
    def _(x):
        return (oplib.empty_like(x),)

    with oplib.FakeTensorMode() as mode:
        out = cube(mode.from_real(np.ones(3)))
    assert type(out) is tuple and len(out) == 1 and out[0].shape == (3,)
    meta = cube(oplib.empty(3, device="meta"))
    assert type(meta) is tuple and meta[0].device.type == "meta"

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    cube.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor(np.full(2, 2.0), requires_grad=True)
    (y,) = cube(x)
    assert y.requires_grad
    y.sum().backward()
    assert np.allclose(x.grad.numpy(), [12.0, 12.0])
    assert oplib.autograd.gradcheck(cube, (x,))
    oplib.opcheck(cube, (oplib.tensor(np.full(2, 2.0), requires_grad=True),))
