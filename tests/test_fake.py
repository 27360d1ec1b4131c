"""FakeTensorMode, data-less arrays, register_fake, get_ctx and symbolic sizes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.fake import (
    DataAccessError,
    DataDependentError,
    FakeArray,
    FakeTensorError,
    ShapeEnv,
    SymInt,
)

# -- FakeArray ---------------------------------------------------------------------------


def test_fake_array_metadata():
    a = FakeArray((2, 3), "float64", "cpu")
    assert (a.shape, a.dtype, a.ndim, a.size, len(a)) == ((2, 3), np.dtype("float64"), 2, 6, 2)
    assert a.nbytes == 48
    assert a.device == oplib.device("cpu")
    assert FakeArray(()).dtype == oplib.get_default_dtype()
    assert a.new_empty((5,)).shape == (5,)


def test_fake_array_validates_shape():
    with pytest.raises(ValueError, match="negative dimensions"):
        FakeArray((2, -1))
    with pytest.raises(TypeError, match="ints"):
        FakeArray((2.5,))


@pytest.mark.parametrize(
    "read, action",
    [
        (np.asarray, "__array__"),
        (lambda a: a.item(), "item()"),
        (lambda a: a.tolist(), "tolist()"),
        (lambda a: a.__dlpack__(), "__dlpack__"),
        (bool, "bool()"),
        (float, "float()"),
        (lambda a: a[0], "indexing"),
    ],
)
def test_reading_a_fake_arrays_data_raises(read, action):
    a = FakeArray((1,))
    with pytest.raises(DataAccessError, match="fake arrays carry shape") as info:
        read(a)
    assert info.value.action.startswith(action.split(" ")[0])
    assert info.value.op is None
    assert isinstance(info.value, oplib.BackendError)


# -- FakeTensorMode basics ---------------------------------------------------------------


def test_from_real_keeps_device_dtype_shape_and_requires_grad():
    with oplib.FakeTensorMode() as mode:
        real = oplib.tensor(np.ones((3, 4), dtype=np.float32), requires_grad=True)
        fake = mode.from_real(real)
        assert isinstance(fake.native, FakeArray)
        assert (fake.shape, fake.dtype) == ((3, 4), np.dtype(np.float32))
        assert fake.device == real.device
        assert fake.requires_grad
        assert mode.from_real(real) is fake  # memoized
        assert mode.from_real(fake) is fake
        n = mode.from_real(np.ones(2, dtype=np.int8))
        assert (n.shape, n.dtype) == ((2,), np.dtype(np.int8))


def test_from_real_rejects_non_arrays():
    with pytest.raises(TypeError, match="from_real"):
        oplib.FakeTensorMode().from_real([1, 2, 3])


def test_issue_example_custom_op_runs_fake_kernel(lib):
    lib.define("my_op(Tensor x) -> Tensor")
    calls = []

    def cpu(x):
        calls.append("cpu")
        return x * 2

    def fake(x):
        calls.append("fake")
        assert isinstance(x, FakeArray)
        return oplib.empty_like(x)

    lib.impl("my_op", cpu, "CPU")
    lib._register_fake("my_op", fake)
    with oplib.FakeTensorMode() as mode:
        a = mode.from_real(np.ones((3, 4)))
        b = getattr(oplib.ops, lib.ns).my_op(a)
    assert calls == ["fake"]
    assert isinstance(b, oplib.Tensor)
    assert isinstance(b.native, FakeArray)
    assert (b.shape, b.device.type, b.dtype) == ((3, 4), "cpu", np.dtype(np.float64))


def test_core_ops_and_tensor_operators_under_the_mode():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones((4, 3), dtype=np.float32))
        y = (x @ x.T + 1.0).sum(dim=[1])
        assert (y.shape, y.dtype) == ((4,), np.dtype(np.float32))
        z = oplib.ops.oplib.cat([x, x], 0)
        assert z.shape == (8, 3)
        assert oplib.ops.oplib.stack([x, x, x], -1).shape == (4, 3, 3)
        assert x.to(dtype=np.float64).dtype == np.float64
        assert repr(y) == "FakeTensor(..., size=(4,))"


def test_native_fake_arrays_in_give_native_fake_arrays_out():
    with oplib.FakeTensorMode():
        a = FakeArray((2, 3))
        out = oplib.ops.oplib.add(a, FakeArray((3,), "float64"))
        assert type(out) is FakeArray
        assert (out.shape, out.dtype) == ((2, 3), np.dtype("float64"))
        assert oplib.ops.oplib.mean(a, dim=[0]).shape == (3,)


def test_factories_under_the_mode_make_fakes_on_the_requested_device():
    with oplib.FakeTensorMode():
        t = oplib.zeros(2, 3)
        assert isinstance(t.native, FakeArray)
        assert t.device.type == "cpu"
        g = oplib.empty(5, device="cuda:1")  # no GPU needed: nothing is allocated
        assert (g.device.type, g.device.index) == ("cuda", 1)
        assert oplib.arange(0, 10, 2).shape == (5,)
        assert (oplib.full((2,), 7).dtype) == np.int64
        if oplib.backends.TABLE.find("meta") is not None:
            assert type(oplib.empty(3, device="meta").native).__name__ == "MetaArray"


def test_tensor_under_the_mode_is_fake_as_torch_tensor():
    with oplib.FakeTensorMode() as mode:
        t = oplib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        assert isinstance(t.native, FakeArray)
        assert (t.shape, t.dtype, t.requires_grad) == ((2, 2), np.float32, True)
        assert oplib.ops.oplib.add(t, t).shape == (2, 2)  # no "cannot be mixed"
        assert mode.from_real(t) is t
        with pytest.raises(oplib.DataAccessError):
            t.tolist()
        inner = oplib.tensor(np.arange(3), dtype=np.float64, device="cuda:1")
        assert (inner.device.type, inner.dtype) == ("cuda", np.float64)
    assert not isinstance(oplib.tensor([1.0]).native, FakeArray)  # after the mode: real


def test_to_another_device_under_the_mode_keeps_shape():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(3))
        y = x.to("cuda")
        assert y.device.type == "cuda"
        assert y.shape == (3,)


def test_mixing_real_and_fake_raises():
    real = oplib.tensor(np.ones(3))
    with oplib.FakeTensorMode() as mode:
        fake = mode.from_real(np.ones(3))
        with pytest.raises(FakeTensorError, match="cannot be mixed") as info:
            oplib.ops.oplib.add(fake, real)
        assert info.value.op == "oplib::add"
        assert "'other'" in str(info.value)
        with pytest.raises(FakeTensorError, match="from_real"):
            oplib.ops.oplib.neg(np.ones(3))


def test_zero_d_real_arrays_are_scalars_and_allowed():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(3, dtype=np.float32))
        y = oplib.ops.oplib.add(x, np.array(2.0))
        assert y.dtype == np.float64


def test_allow_non_fake_inputs_converts_them():
    with oplib.FakeTensorMode(allow_non_fake_inputs=True):
        y = oplib.ops.oplib.add(np.ones((2, 1)), np.ones(3))
        assert isinstance(y, FakeArray)
        assert y.shape == (2, 3)


def test_reading_data_of_a_fake_tensor_raises():
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(1))
        for read in (
            lambda: x.numpy(),
            lambda: x.item(),
            lambda: np.asarray(x),
            lambda: x.tolist(),
            lambda: float(x),
        ):
            with pytest.raises(DataAccessError, match="fake array"):
                read()


def test_fake_kernel_reading_data_names_the_op(lib):
    lib.define("peek(Tensor x) -> Tensor")

    def fake(x):
        x.item()

    lib._register_fake("peek", fake)
    with oplib.FakeTensorMode() as mode, pytest.raises(DataAccessError) as info:
        getattr(oplib.ops, lib.ns).peek(mode.from_real(np.ones(1)))
    assert info.value.op == f"{lib.ns}::peek"
    assert info.value.action == "item()"
    assert "test_fake.py" in str(info.value)  # the fake kernel's file:line


def test_op_without_fake_kernel_raises_saying_how_to_add_one(lib):
    lib.define("nofake(Tensor x) -> Tensor")
    lib.impl("nofake", lambda x: x, "CPU")
    with (
        oplib.FakeTensorMode() as mode,
        pytest.raises(oplib.NoKernelError, match="register_fake") as info,
    ):
        getattr(oplib.ops, lib.ns).nofake(mode.from_real(np.ones(2)))
    assert info.value.op == f"{lib.ns}::nofake"
    assert info.value.key == "Fake"


def test_composite_implicit_decomposition_runs_fake(lib):
    lib.define("twice_plus_one(Tensor x) -> Tensor")

    def decomposition(x):
        return oplib.ops.oplib.add.Scalar(oplib.ops.oplib.mul.Scalar(x, 2), 1)

    lib.impl("twice_plus_one", decomposition, "CompositeImplicitAutograd")
    with oplib.FakeTensorMode() as mode:
        out = getattr(oplib.ops, lib.ns).twice_plus_one(mode.from_real(np.ones((2, 2))))
    assert isinstance(out.native, FakeArray)
    assert out.shape == (2, 2)


def test_fake_kernel_returning_a_real_array_is_refused(lib):
    lib.define("liar(Tensor x) -> Tensor")
    lib._register_fake("liar", lambda x: np.zeros(3))
    with (
        oplib.FakeTensorMode() as mode,
        pytest.raises(FakeTensorError, match="returned a ndarray"),
    ):
        getattr(oplib.ops, lib.ns).liar(mode.from_real(np.ones(3)))


def test_fake_kernel_of_multi_output_op(lib):
    lib.define("split2(Tensor x) -> (Tensor, Tensor)")
    lib._register_fake("split2", lambda x: (x.new_empty((1,)), oplib.empty_like(x)))
    with oplib.FakeTensorMode() as mode:
        a, b = getattr(oplib.ops, lib.ns).split2(mode.from_real(np.ones((4, 2))))
    assert (a.shape, b.shape) == ((1,), (4, 2))


def test_py_impl_for_fake_tensor_mode_takes_precedence(lib):
    lib.define("special(Tensor x) -> Tensor")
    lib._register_fake("special", lambda x: oplib.empty_like(x))
    op = getattr(oplib.ops, lib.ns).special.default

    @op.py_impl(oplib.FakeTensorMode)
    def _(mode, x):
        return "handled"

    with oplib.FakeTensorMode() as mode:
        assert op(mode.from_real(np.ones(1))) == "handled"


def test_modes_leave_normal_dispatch_untouched_afterwards():
    with oplib.FakeTensorMode():
        pass
    out = oplib.ops.oplib.add(np.ones(2), np.ones(2))
    assert isinstance(out, np.ndarray)


# -- register_fake / impl_abstract --------------------------------------------------------


def test_register_fake_decorator_and_duplicate_names_earlier_location(ns):
    oplib.define(f"{ns}::f", "(Tensor x) -> Tensor")

    @oplib.register_fake(f"{ns}::f")
    def first(x):
        return oplib.empty_like(x)

    with pytest.raises(oplib.RegistrationError, match=r"test_fake\.py:\d+"):
        oplib.register_fake(f"{ns}::f", lambda x: x)


def test_impl_abstract_warns_and_registers(ns):
    oplib.define(f"{ns}::g", "(Tensor x) -> Tensor")
    with pytest.warns(FutureWarning, match="register_fake"):
        oplib.impl_abstract(f"{ns}::g", lambda x: oplib.empty_like(x))
    with oplib.FakeTensorMode() as mode:
        assert getattr(oplib.ops, ns).g(mode.from_real(np.ones(2))).shape == (2,)


def test_fake_kernel_lives_as_long_as_its_library(ns):
    oplib.define(f"{ns}::h", "(Tensor x) -> Tensor")
    lib = oplib.Library(ns, "FRAGMENT")
    oplib.register_fake(f"{ns}::h", lambda x: oplib.empty_like(x), lib=lib)
    lib._destroy()
    with oplib.FakeTensorMode() as mode, pytest.raises(oplib.NoKernelError):
        getattr(oplib.ops, ns).h(mode.from_real(np.ones(2)))


# -- dynamic sizes -----------------------------------------------------------------------


@pytest.fixture
def nonzero(lib):
    """``ns::nonzero``: data-dependent output size (indices of nonzero elements)."""
    lib.define("nonzero(Tensor x) -> Tensor")
    lib.impl("nonzero", lambda x: np.argwhere(x), "CPU")

    def fake(x):
        n = oplib.get_ctx().new_dynamic_size()
        return x.new_empty((n, x.ndim), dtype=np.int64)

    lib._register_fake("nonzero", fake)
    return getattr(oplib.ops, lib.ns).nonzero


def test_dynamic_size_flows_into_sum(nonzero):
    with oplib.FakeTensorMode() as mode:
        idx = nonzero(mode.from_real(np.array([[0, 1], [1, 1]])))
        (u0, two) = idx.shape
        assert isinstance(u0, SymInt) and str(u0) == "u0" and two == 2
        col = oplib.ops.oplib.sum(idx, [0])
        assert (col.shape, col.dtype) == ((2,), np.dtype(np.int64))
        row = oplib.ops.oplib.sum(idx, [1])
        assert row.shape == (u0,)
        again = nonzero(mode.from_real(np.ones(3)))
        assert str(again.shape[0]) == "u1"
        assert idx.reshape(-1).shape[0] == 2 * u0
        assert str(idx.reshape(-1).shape[0]) == "2*u0"
        assert idx.numel() == u0 * 2
        assert oplib.ops.oplib.cat([idx, idx]).shape == (2 * u0, 2)
        assert (idx + 1).shape == (u0, 2)
        assert (idx.T @ idx).shape == (2, 2)


def test_dynamic_sizes_on_the_meta_device(nonzero):
    pytest.importorskip("oplib_meta")
    idx = nonzero(oplib.empty(3, 4, device="meta"))
    assert idx.device.type == "meta"
    assert isinstance(idx.shape[0], SymInt)
    assert oplib.ops.oplib.sum(idx, [0]).shape == (2,)


def test_undecidable_questions_raise_clearly(nonzero):
    with oplib.FakeTensorMode() as mode:
        idx = nonzero(mode.from_real(np.ones(5)))
        u0 = idx.shape[0]
        with pytest.raises(DataDependentError, match=r"cannot decide whether u0 == 3") as info:
            bool(u0 == 3)
        assert info.value.expression == "u0 == 3"
        with pytest.raises(DataDependentError, match="reshaping"):
            idx.reshape(3, -1)
        with pytest.raises(DataDependentError, match="no concrete value"):
            int(u0)
        with pytest.raises(DataDependentError, match="broadcasting"):
            oplib.ops.oplib.add(idx, mode.from_real(np.ones((3, 1))))
        assert u0 >= 0  # decided by the range
        assert u0 + 1 > u0
        assert (u0 * 2) // 2 == u0


def test_get_ctx_outside_a_fake_kernel_raises():
    with pytest.raises(FakeTensorError, match="outside a fake kernel"):
        oplib.get_ctx()


def test_new_dynamic_size_bounds():
    env = ShapeEnv()
    s = env.new_symbol(min=2, max=10)
    assert s.bounds == (2, 10)
    assert s > 1
    assert not (s > 10)
    assert s != 0
    with pytest.raises(DataDependentError):
        bool(s < 5)
    assert env.new_symbol(min=4, max=4) == 4  # a fixed size is just an int
    with pytest.raises(ValueError, match="min"):
        env.new_symbol(min=-1)
    with pytest.raises(ValueError, match="max"):
        env.new_symbol(min=3, max=2)


def test_symint_arithmetic_is_canonical():
    env = ShapeEnv()
    u0, u1 = env.new_symbol(), env.new_symbol()
    assert u0 + u1 == u1 + u0
    assert hash(u0 * 2) == hash(u0 + u0)
    assert (u0 + 3) - 3 is u0 or (u0 + 3) - 3 == u0
    assert (u0 - u0) == 0 and isinstance(u0 - u0, int)
    assert str(u0 * u1 + 2 * u0 - 1) == "2*u0 + u0*u1 - 1"
    assert (4 * u0) % 2 == 0
    assert str((u0 + 1) // 2) == "((u0 + 1)//2)"
    assert (u0 + 1) // 2 == (u0 + 1) // 2
    assert (6 * u0 * u1) // (3 * u0) == 2 * u1


def test_symbolic_shapes_in_fake_arrays():
    env = ShapeEnv()
    u0 = env.new_symbol()
    a = FakeArray((u0, 3))
    assert a.size == 3 * u0
    with pytest.raises(DataDependentError):
        len(a)


def test_no_warnings_from_fake_mode_on_the_hot_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with oplib.FakeTensorMode() as mode:
            x = mode.from_real(np.ones((2, 3)))
            (x * 2).sum()
