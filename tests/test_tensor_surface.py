"""The Tensor surface torch code reaches for (issue 31, item 4): ``contiguous()`` and
``is_contiguous()``, ``.layout`` and ``layout=``, torch's dtype spellings (``oplib.bool``),
``OpOverload.has_kernel_for_dispatch_key``. Expected values and messages are torch 2.13's."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import oplib_core as oplib


def _arange(*shape: int, requires_grad: bool = False) -> oplib.Tensor:
    n = int(np.prod(shape))
    return oplib.tensor(np.arange(n, dtype=np.float64).reshape(shape), requires_grad=requires_grad)


# -- contiguous / is_contiguous ------------------------------------------------------------------
def test_a_contiguous_tensor_is_returned_itself():
    x = _arange(2, 3)
    assert x.is_contiguous()
    assert x.contiguous() is x
    assert x.contiguous(memory_format=oplib.contiguous_format) is x
    assert x.contiguous(oplib.preserve_format) is x  # torch: returns self when contiguous


def test_a_transposed_tensor_gets_a_contiguous_copy_with_autograd():
    x = _arange(2, 3, requires_grad=True)
    t = x.transpose(0, 1)
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c is not t and c.is_contiguous() and c.stride() == (2, 1)
    np.testing.assert_array_equal(c.detach().numpy(), t.detach().numpy())
    assert not np.shares_memory(c.detach().numpy(), x.detach().numpy())
    assert c.grad_fn is not None
    weights = _arange(3, 2)
    (c * weights).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), weights.numpy().T)


def test_a_strided_slice_is_not_contiguous():
    x = _arange(6)
    every_other = x[::2]
    assert not every_other.is_contiguous()
    c = every_other.contiguous()
    assert c.is_contiguous() and c.stride() == (1,)
    np.testing.assert_array_equal(c.numpy(), [0.0, 2.0, 4.0])


def test_size_one_dims_and_empty_tensors_count_as_torch_counts_them():
    # torch: torch.ones(3, 1).t().is_contiguous() and torch.empty(0, 3).t().is_contiguous()
    assert _arange(3, 1).transpose(0, 1).is_contiguous()
    assert oplib.empty(0, 3).transpose(0, 1).is_contiguous()


def test_channels_last_as_torch():
    x = oplib.ones(2, 3, 4, 5)
    assert not x.is_contiguous(memory_format=oplib.channels_last)
    c = x.contiguous(memory_format=oplib.channels_last)
    # torch: y.contiguous(memory_format=torch.channels_last).stride() == (60, 1, 15, 3)
    assert c.stride() == (60, 1, 15, 3)
    assert c.is_contiguous(memory_format=oplib.channels_last) and not c.is_contiguous()
    assert c.contiguous(memory_format=oplib.channels_last) is c
    back = c.contiguous()
    assert back.stride() == (60, 20, 5, 1)
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    assert not oplib.ones(2, 3).is_contiguous(memory_format=oplib.channels_last)


def test_channels_last_copy_carries_gradients():
    x = oplib.tensor(np.random.default_rng(0).standard_normal((1, 2, 2, 3)), requires_grad=True)
    c = x.contiguous(memory_format=oplib.channels_last)
    (c * c).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy())


def test_a_memory_format_for_another_rank_is_refused_with_torchs_message():
    with pytest.raises(RuntimeError, match=r"^required rank 4 tensor to use channels_last format$"):
        oplib.ones(2, 3).contiguous(memory_format=oplib.channels_last)
    with pytest.raises(
        RuntimeError, match=r"^required rank 5 tensor to use channels_last_3d format$"
    ):
        oplib.ones(2, 3).contiguous(memory_format=oplib.channels_last_3d)


def test_preserve_format_copy_is_refused_with_torchs_message():
    t = _arange(2, 3).transpose(0, 1)
    assert not t.is_contiguous(memory_format=oplib.preserve_format)  # torch: False
    with pytest.raises(
        RuntimeError, match=r"^preserve memory format is unsupported by the contiguous operator$"
    ):
        t.contiguous(memory_format=oplib.preserve_format)


@pytest.mark.parametrize("bad", ["contiguous_format", None, 0])
def test_a_memory_format_of_another_type_is_a_type_error(bad):
    x = _arange(2)
    with pytest.raises(oplib.ArgumentTypeError) as info:
        x.contiguous(memory_format=bad)
    # torch: "contiguous(): argument 'memory_format' must be torch.memory_format, not str"
    assert str(info.value) == (
        "contiguous(): argument 'memory_format' must be oplib.memory_format, not "
        f"{type(bad).__name__}"
    )
    assert isinstance(info.value, TypeError) and info.value.argument == "memory_format"
    with pytest.raises(TypeError, match=r"^is_contiguous"):
        x.is_contiguous(bad)


def test_fake_and_meta_tensors_are_contiguous_and_strided():
    with oplib.FakeTensorMode() as mode:
        f = mode.from_real(_arange(2, 3))
        assert f.is_contiguous() and f.contiguous() is f and f.layout is oplib.strided
        t = f.transpose(0, 1)
        assert t.contiguous().shape == (3, 2)
    assert f._data.layout is oplib.strided
    m = oplib.empty(2, 3, device="meta")
    assert m.is_contiguous() and m.contiguous() is m and m.layout is oplib.strided
    assert m._data.layout is oplib.strided
    assert not m.is_contiguous(oplib.channels_last)


def test_memory_formats_print_and_pickle_as_torchs():
    assert repr(oplib.contiguous_format) == "oplib.contiguous_format"
    assert isinstance(oplib.channels_last, oplib.memory_format)
    for fmt in (oplib.contiguous_format, oplib.preserve_format, oplib.channels_last):
        assert pickle.loads(pickle.dumps(fmt)) is fmt


# -- layout ---------------------------------------------------------------------------------------
def test_layout_is_strided():
    x = _arange(2)
    assert x.layout is oplib.strided and isinstance(oplib.strided, oplib.layout)
    assert repr(oplib.strided) == "oplib.strided"
    assert pickle.loads(pickle.dumps(oplib.strided)) is oplib.strided


FACTORIES = {
    "empty": lambda **kw: oplib.empty(2, 3, **kw),
    "zeros": lambda **kw: oplib.zeros(2, 3, **kw),
    "ones": lambda **kw: oplib.ones((2, 3), **kw),
    "full": lambda **kw: oplib.full((2, 3), 1.5, **kw),
    "arange": lambda **kw: oplib.arange(6, **kw),
    "empty_like": lambda **kw: oplib.empty_like(oplib.ones(2, 3), **kw),
    "zeros_like": lambda **kw: oplib.zeros_like(oplib.ones(2, 3), **kw),
    "ones_like": lambda **kw: oplib.ones_like(oplib.ones(2, 3), **kw),
    "new_empty": lambda **kw: oplib.ones(1).new_empty(2, 3, **kw),
    "new_zeros": lambda **kw: oplib.ones(1).new_zeros((2, 3), **kw),
    "new_ones": lambda **kw: oplib.ones(1).new_ones(2, 3, **kw),
    "new_full": lambda **kw: oplib.ones(1).new_full((2, 3), 2.0, **kw),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_take_layout_strided_or_none(name):
    for layout in (oplib.strided, None):
        out = FACTORIES[name](layout=layout)
        assert isinstance(out, oplib.Tensor) and out.layout is oplib.strided


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_refuse_any_other_layout(name):
    # torch: "zeros(): argument 'layout' must be torch.layout, not str"
    with pytest.raises(oplib.ArgumentTypeError) as info:
        FACTORIES[name](layout="strided")
    assert str(info.value).startswith(
        f"{name}(): argument 'layout' must be oplib.strided, the only layout oplib has"
    )
    assert "got 'strided'" in str(info.value) and info.value.argument == "layout"
    sparse = oplib.layout("sparse_coo")
    with pytest.raises(TypeError, match=r"no sparse or other layouts\), got oplib.sparse_coo"):
        FACTORIES[name](layout=sparse)


def test_layout_on_a_fake_tensors_factory_methods():
    with oplib.FakeTensorMode() as mode:
        f = mode.from_real(_arange(2))
        out = f.new_zeros(3, layout=oplib.strided)
        assert out.shape == (3,) and out.layout is oplib.strided
    assert oplib.empty_like(f._data, layout=oplib.strided).layout is oplib.strided


# -- dtype names ----------------------------------------------------------------------------------
def test_torchs_dtype_spellings():
    # torch.bool, torch.float (float32), torch.double, torch.half, torch.long, torch.int
    # (int32), torch.short, torch.cfloat, torch.cdouble
    assert oplib.bool == np.dtype(bool) and oplib.bool is oplib.bool_
    assert oplib.float == np.float32 and oplib.double == np.float64
    assert oplib.half == np.float16 and oplib.long == np.int64
    assert oplib.int == np.int32 and oplib.short == np.int16
    assert oplib.cfloat == np.complex64 and oplib.cdouble == np.complex128
    m = oplib.tensor([1.0, -1.0]) > 0
    assert m.dtype == oplib.bool
    assert oplib.zeros(2, dtype=oplib.bool).numpy().tolist() == [False, False]


def test_star_import_leaves_the_builtins_alone():
    scope: dict[str, object] = {}
    exec("from oplib_core import *", scope)
    assert "long" in scope and "strided" in scope
    assert "bool" not in scope and "float" not in scope and "int" not in scope


# -- has_kernel_for_dispatch_key ------------------------------------------------------------------
def test_has_kernel_for_dispatch_key_as_torch(lib, ns):
    # torch.library with the same registrations answers the same (checked on torch 2.13)
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x.copy(), "CPU")
    lib.define("g(Tensor x) -> Tensor")
    lib.impl("g", lambda x: x.copy(), "CompositeExplicitAutograd")
    lib.define("h(Tensor x) -> Tensor")
    lib.impl("h", lambda x: x, "CompositeImplicitAutograd")
    lib.define("k(Tensor x) -> Tensor")
    lib.impl("k", oplib.fallthrough_kernel, "Autograd")
    f, g, h, k = (oplib.lookup(f"{ns}::{n}") for n in "fghk")
    keys = ["CPU", "CUDA", "Autograd", "AutogradCPU", "CompositeImplicitAutograd"]
    keys.append("CompositeExplicitAutograd")
    answers = {
        n: [op.has_kernel_for_dispatch_key(k_) for k_ in keys]
        for n, op in zip("fghk", (f, g, h, k), strict=True)
    }
    assert answers == {
        "f": [True, False, False, False, False, False],
        "g": [False, False, False, False, False, True],
        "h": [False, False, False, False, True, False],
        "k": [False, False, True, False, False, False],  # a fallthrough counts
    }
    assert f.has_kernel_for_dispatch_key("cpu")  # a device type, normalised
    assert g.has_kernel_for_dispatch_key("default")


def test_has_kernel_for_dispatch_key_counts_py_impl(lib, ns):
    lib.define("p(Tensor x) -> Tensor")
    op = oplib.lookup(f"{ns}::p")
    assert not op.has_kernel_for_dispatch_key("CPU")
    op.py_impl("CPU")(lambda x: x)
    assert op.has_kernel_for_dispatch_key("CPU")


def test_has_kernel_for_any_dispatch_key(lib, ns):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x.copy(), "CPU")
    lib.define("g(Tensor x) -> Tensor")
    lib.impl("g", lambda x: x.copy(), "CompositeExplicitAutograd")
    f, g = oplib.lookup(f"{ns}::f"), oplib.lookup(f"{ns}::g")
    assert f.has_kernel_for_any_dispatch_key(oplib.DispatchKeySet(("Autograd", "CPU")))
    assert not f.has_kernel_for_any_dispatch_key(["CUDA", "Meta"])
    # alias keys are left out, as torch's hasKernelForAnyDispatchKey leaves them out
    assert not g.has_kernel_for_any_dispatch_key(["CompositeExplicitAutograd", "CPU"])


def test_has_kernel_for_dispatch_key_refuses_a_name_that_is_no_key():
    # torch: RuntimeError "could not parse dispatch key: Bogus"
    with pytest.raises(oplib.UnknownDispatchKeyError, match="unknown dispatch key 'Bogus'"):
        oplib.ops.oplib.add.default.has_kernel_for_dispatch_key("Bogus")
