"""Fake arrays answer torch's tensor methods, Meta kernels serve FakeTensorMode, output
arity under the mode, and the ``oplib._check`` family (torch behaviours, issue 13)."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.fake import DataAccessError, FakeArray, SymInt

TORCH_CHECK_MESSAGE = "Expected cond to be True, but got False."


def fa(*shape: int, dtype: str = "float32", device: str = "cpu") -> FakeArray:
    return FakeArray(shape, dtype, device)


# -- FakeArray: torch's metadata methods ------------------------------------------------


def test_size_is_torchs_method_and_numpys_count():
    a = fa(2, 3)
    assert a.size() == (2, 3)
    assert a.size(0) == 2
    assert a.size(-1) == 3
    # numpy's meaning still reads: an element count
    assert a.size == 6
    assert a.size * 2 == 12
    assert isinstance(a.size, int)
    assert fa().size() == ()
    assert fa().size == 1


def test_size_of_a_dim_out_of_range_raises_index_error():
    with pytest.raises(IndexError, match="out of range"):
        fa(2, 3).size(2)
    with pytest.raises(IndexError):
        fa(2, 3).size(-3)


def test_dim_numel_stride_and_contiguity_like_torch():
    a = fa(2, 1, 3)
    assert (a.dim(), a.numel()) == (3, 6)
    # torch.empty(2, 1, 3).stride() == (3, 3, 1); torch.empty(0, 3).stride() == (3, 1)
    assert a.stride() == (3, 3, 1)
    assert a.stride(0) == 3
    assert a.stride(-1) == 1
    assert fa(0, 3).stride() == (3, 1)
    assert fa().stride() == ()
    assert a.is_contiguous()
    assert a.contiguous() is a
    assert a.element_size() == 4


def test_is_cuda_is_meta_device_and_dtype():
    assert not fa(2).is_cuda
    assert fa(2, device="cuda").is_cuda
    assert fa(2, device="cuda").device.type == "cuda"
    assert fa(2, dtype="int64").dtype == np.dtype("int64")


def test_symbolic_size_is_callable_too():
    u = oplib.fake.ShapeEnv().new_symbol()
    assert isinstance(u, SymInt)
    a = fa(2).new_empty((u, 3))
    assert a.size() == (u, 3)
    assert a.size(0) is u
    assert a.size == 3 * u
    assert a.numel() == 3 * u
    assert a.dim() == 2


def test_new_empty_zeros_ones_full_take_torch_and_numpy_forms():
    a = fa(2, 3, dtype="float32")
    for make in (a.new_empty, a.new_zeros, a.new_ones):
        assert make(4, 5).shape == (4, 5)
        assert make((4, 5)).shape == (4, 5)
        assert make([4]).dtype == np.dtype("float32")
        assert make(4, dtype=np.int64).dtype == np.dtype("int64")
        assert type(make(1)) is FakeArray
    assert a.new_empty((2,), np.int8).dtype == np.dtype("int8")  # numpy-style dtype
    assert a.new_full((2, 2), 7).shape == (2, 2)
    on_cuda = a.new_empty(3, device="cuda")
    assert on_cuda.device.type == "cuda"
    assert a.new_empty(3, device="cpu").device == a.device
    with pytest.raises(ValueError, match="negative dimensions"):
        a.new_zeros(-1)
    with pytest.raises(TypeError, match="dtype twice"):
        a.new_empty((2,), np.int8, dtype=np.int8)


def test_clone_view_reshape_transpose_expand():
    a = fa(2, 3, 4)
    c = a.clone()
    assert c is not a
    assert (c.shape, c.dtype, c.device) == (a.shape, a.dtype, a.device)
    assert a.view(6, 4).shape == (6, 4)
    assert a.view(-1).shape == (24,)
    assert a.view((4, -1)).shape == (4, 6)
    assert a.view(np.int32).dtype == np.dtype("int32")
    with pytest.raises(RuntimeError, match="element size"):
        a.view(np.int64)
    assert a.reshape(4, 6).shape == (4, 6)
    assert a.reshape((-1,)).shape == (24,)
    assert a.transpose(0, 2).shape == (4, 3, 2)
    assert a.transpose(-1, -2).shape == (2, 4, 3)
    with pytest.raises(IndexError):
        a.transpose(0, 3)
    b = fa(3, 1)
    assert b.expand(2, 3, 4).shape == (2, 3, 4)
    assert b.expand(-1, 5).shape == (3, 5)
    assert b.expand((3, 2)).shape == (3, 2)
    with pytest.raises(ValueError):
        a.reshape(5, 5)


# -- FakeArray: operators compute shapes (broadcasting) and dtypes (numpy's) -----------


def test_arithmetic_broadcasts_and_promotes_as_numpy():
    x, y = fa(2, 1, dtype="float32"), fa(3, dtype="int32")
    out = x + y
    assert out.shape == (2, 3)
    # the real cpu kernels are numpy: float32 + int32 -> float64 (numpy's promotion)
    assert out.dtype == np.result_type(np.float32, np.int32)
    assert (y / y).dtype == np.dtype("float64")
    assert (y // y).dtype == np.dtype("int32")
    assert (y * 2).dtype == np.dtype("int32")  # Python scalars are weak (NEP 50)
    assert (y + 1.5).dtype == np.dtype("float64")
    assert (x * 2.0).dtype == np.dtype("float32")
    assert (2 - x).shape == (2, 1)
    assert (1.0 / y).dtype == np.dtype("float64")
    assert (x**2).dtype == np.dtype("float32")
    assert (-x).shape == (2, 1)
    assert abs(y).dtype == np.dtype("int32")
    assert (y & y).dtype == np.dtype("int32")
    assert (~fa(2, dtype="bool")).dtype == np.dtype("bool")
    assert (x * np.float64(2)).dtype == np.dtype("float64")  # numpy scalars are strong
    m = fa(4, 2) @ fa(2, 5)
    assert m.shape == (4, 5)


def test_comparisons_give_bool_arrays_not_python_bools():
    x, y = fa(2, 1), fa(3, dtype="int64")
    for out in (x < y, x <= y, x > y, x >= y, x == y, x != y):
        assert isinstance(out, FakeArray)
        assert (out.shape, out.dtype) == ((2, 3), np.bool_)
    for out in (x > 0, x < 0, x == 1.5):
        assert (out.shape, out.dtype) == ((2, 1), np.bool_)
    assert {x: 1}[x] == 1  # still hashable
    with pytest.raises(DataAccessError, match=r"bool\(\)"):
        bool(x == y)


def test_operator_errors():
    with pytest.raises(ValueError):
        fa(2) + fa(3)
    with pytest.raises(OverflowError, match="out of bounds"):
        fa(2, dtype="uint8") + -3
    with pytest.raises(oplib.DeviceMismatchError, match="one device"):
        fa(2) + fa(2, device="cuda")
    assert (fa(2, device="cuda") + fa()).device.type == "cuda"  # 0-d cpu: a scalar
    with pytest.raises(TypeError):
        fa(2) + "a"
    with pytest.raises(TypeError):
        fa(2, dtype="float32") & fa(2, dtype="float32")


def test_torch_style_fake_kernel_runs_under_fake_tensor_mode(lib):
    ns = lib.ns
    lib.define("outer(Tensor a, Tensor b) -> Tensor")
    lib.impl("outer", lambda a, b: a[:, None] * b[None, :], "CPU")

    def outer_fake(a, b):
        oplib._check(a.dim() == 1 and b.dim() == 1, lambda: "outer expects 1-d inputs")
        prod = a.view(-1, 1) * b.view(1, -1)
        return a.new_empty(a.size(0), b.size(0), dtype=prod.dtype)

    oplib.register_fake(f"{ns}::outer", outer_fake, lib=lib)
    op = getattr(oplib.ops, ns).outer
    with oplib.FakeTensorMode() as mode:
        out = op(mode.from_real(np.ones(3)), mode.from_real(np.ones(4, dtype=np.float32)))
        assert (out.shape, out.dtype) == ((3, 4), np.dtype("float64"))
        with pytest.raises(RuntimeError, match="outer expects 1-d inputs"):
            op(mode.from_real(np.ones((2, 2))), mode.from_real(np.ones(4)))
    oplib.opcheck(op, (oplib.tensor(np.ones(3)), oplib.tensor(np.ones(2))))


# -- Meta kernels serve FakeTensorMode --------------------------------------------------


@pytest.fixture
def meta_op(lib, teardown):
    """``ns::pool``: a cpu kernel and a shape function registered as its Meta kernel only
    (torchvision's way)."""
    ns = lib.ns
    lib.define("pool(Tensor x, int k) -> Tensor")
    lib.impl("pool", lambda x, k: x[: x.shape[0] // k].copy(), "CPU")
    meta = oplib.Library(ns, "IMPL", "Meta")
    teardown(meta)

    def pool_meta(x, k):
        oplib._check(k > 0, lambda: f"k must be positive, got {k}")
        return x.new_empty((x.size(0) // k, *x.shape[1:]))

    meta.impl("pool", pool_meta)
    return getattr(oplib.ops, ns).pool


def test_meta_kernel_runs_under_fake_tensor_mode(meta_op):
    with oplib.FakeTensorMode() as mode:
        out = meta_op(mode.from_real(np.ones((6, 2))), 3)
        assert isinstance(out, oplib.Tensor)
        assert (out.shape, out.dtype, out.device.type) == ((2, 2), np.dtype("float64"), "cpu")
        native = meta_op(mode.from_real(np.ones((6, 2))).native, 2)
        assert type(native) is FakeArray
        assert native.shape == (3, 2)
        with pytest.raises(RuntimeError, match="k must be positive, got 0"):
            meta_op(mode.from_real(np.ones(4)), 0)
    # and on the meta device, as before
    assert meta_op(oplib.empty(8, device="meta"), 4).shape == (2,)


def test_meta_kernel_passes_opchecks_fake_check(meta_op):
    results = oplib.opcheck(meta_op, (oplib.tensor(np.ones((6, 2))), 3))
    assert results["test_faketensor"] == "SUCCESS"


def test_opcheck_names_the_wrong_meta_kernel(lib, teardown):
    ns = lib.ns
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: np.concatenate([x, x]), "CPU")
    meta = oplib.Library(ns, "IMPL", "Meta")
    teardown(meta)
    meta.impl("twice", lambda x: x.new_empty(x.shape))  # wrong: should double dim 0
    with pytest.raises(oplib.OpCheckError, match=r"the Meta kernel \(.*test_fake_torch.py:\d+\)"):
        oplib.opcheck(getattr(oplib.ops, ns).twice, (oplib.tensor(np.ones(3)),))


def test_meta_outputs_move_to_the_fake_inputs_device(lib, teardown):
    ns = lib.ns
    lib.define("grow(Tensor x) -> Tensor")
    meta = oplib.Library(ns, "IMPL", "Meta")
    teardown(meta)
    # a shape function that makes its output on "meta" itself, as torch code may
    meta.impl("grow", lambda x: oplib.empty(x.shape[0] + 1, dtype=x.dtype, device="meta").native)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(2, dtype=np.float32))
        out = getattr(oplib.ops, ns).grow(x)
        assert (out.shape, out.dtype, out.device.type) == ((3,), np.dtype("float32"), "cpu")
        assert type(out.native) is FakeArray
        m = getattr(oplib.ops, ns).grow(oplib.empty(2, device="meta"))
        assert m.device.type == "meta"


def test_fake_kernel_wins_over_meta_kernel(meta_op, lib):
    oplib.register_fake(lib.ns + "::pool", lambda x, k: x.new_empty((1,)), lib=lib)
    with oplib.FakeTensorMode() as mode:
        assert meta_op(mode.from_real(np.ones(6)), 3).shape == (1,)


def test_no_fake_kernel_error_is_honest_about_meta(lib):
    ns = lib.ns
    lib.define("plain(Tensor x) -> Tensor")
    lib.impl("plain", lambda x: x + 1, "CPU")
    lib.define("dflt(Tensor x) -> Tensor")
    lib.impl("dflt", lambda x: x + 1, "default")
    ops = getattr(oplib.ops, ns)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(2))
        with pytest.raises(oplib.NoKernelError, match="no fake kernel and no Meta kernel") as e:
            ops.plain(x)
        assert "nor on the meta device" in str(e.value)
        assert "'meta', fn" in str(e.value)
        with pytest.raises(oplib.NoKernelError) as e:
            ops.dflt(x)
        assert "nor on the meta device" not in str(e.value)
        assert "'default' kernel serves the meta device" in str(e.value)
    assert ops.dflt(oplib.empty(2, device="meta")).shape == (2,)


# -- output arity under FakeTensorMode --------------------------------------------------


def test_no_returns_give_none_under_fake_tensor_mode(lib):
    ns = lib.ns
    lib.define("log_it(Tensor x) -> ()")
    lib.impl("log_it", lambda x: None, "CPU")
    oplib.register_fake(f"{ns}::log_it", lambda x: None, lib=lib)
    op = getattr(oplib.ops, ns).log_it
    with oplib.FakeTensorMode() as mode:
        assert op(mode.from_real(np.ones(2))) is None
        assert op(mode.from_real(np.ones(2)).native) is None
        assert op(mode.from_real(np.ones(2)), **{}) is None
    assert oplib.opcheck(op, (oplib.tensor(np.ones(2)),))["test_faketensor"] == "SUCCESS"


def test_one_tuple_return_stays_a_one_tuple_under_fake_tensor_mode(lib):
    ns = lib.ns
    lib.define("single(Tensor x) -> (Tensor)")
    oplib.register_fake(f"{ns}::single", lambda x: (oplib.empty_like(x),), lib=lib)
    lib.define("single_kw(Tensor x, *, int n=1) -> (Tensor)")
    oplib.register_fake(f"{ns}::single_kw", lambda x, *, n=1: (x.new_empty(n),), lib=lib)
    ops = getattr(oplib.ops, ns)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(3))
        out = ops.single(x)
        assert type(out) is tuple and len(out) == 1
        assert isinstance(out[0], oplib.Tensor) and out[0].shape == (3,)
        native = ops.single(x.native)
        assert type(native) is tuple and type(native[0]) is FakeArray
        out = ops.single_kw(x, n=4)
        assert type(out) is tuple and out[0].shape == (4,)


# -- oplib._check family ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "error"),
    [
        (oplib._check, RuntimeError),
        (oplib._check_value, ValueError),
        (oplib._check_index, IndexError),
        (oplib._check_type, TypeError),
        (oplib._check_not_implemented, NotImplementedError),
    ],
)
def test_check_family_raises_torchs_exception_types(check, error):
    check(True)
    check(np.bool_(True))
    check(2 > 1, lambda: "never called")
    with pytest.raises(error) as e:
        check(False)
    assert type(e.value) is error
    assert str(e.value).startswith(TORCH_CHECK_MESSAGE)
    with pytest.raises(error, match=r"^bad k: 3$"):
        check(np.bool_(False), lambda: f"bad k: {3}")


def test_check_refuses_non_bool_conditions_and_message_strings():
    with pytest.raises(TypeError, match=r"^cond must be a bool, but got <class 'int'>$"):
        oplib._check(1)
    with pytest.raises(TypeError, match="cond must be a bool"):
        oplib._check_value(fa(2) > 0)
    with pytest.raises(TypeError, match=r"^message must be a callable$"):
        oplib._check(False, "a string")  # type: ignore[arg-type]


def test_check_is_size():
    oplib._check_is_size(0)
    oplib._check_is_size(5, max=5)
    with pytest.raises(RuntimeError, match=TORCH_CHECK_MESSAGE):
        oplib._check_is_size(-1)
    with pytest.raises(RuntimeError, match="too big"):
        oplib._check_is_size(6, lambda: "too big", max=5)
    u = oplib.fake.ShapeEnv().new_symbol()
    oplib._check_is_size(u)  # a dynamic size is >= 0


def test_checks_in_a_kernel_and_its_fake_kernel_agree(lib):
    ns = lib.ns
    lib.define("pick(Tensor x, int i) -> Tensor")

    def pick(x, i):
        oplib._check_index(-x.shape[0] <= i < x.shape[0], lambda: f"index {i} out of range")
        return x[i].copy()

    def pick_fake(x, i):
        oplib._check_index(-x.size(0) <= i < x.size(0), lambda: f"index {i} out of range")
        return x.new_empty(x.shape[1:])

    lib.impl("pick", pick, "CPU")
    oplib.register_fake(f"{ns}::pick", pick_fake, lib=lib)
    op = getattr(oplib.ops, ns).pick
    x = oplib.tensor(np.ones((3, 2)))
    with pytest.raises(IndexError, match="index 3 out of range"):
        op(x, 3)
    with oplib.FakeTensorMode() as mode, pytest.raises(IndexError, match="index 3 out of range"):
        op(mode.from_real(x), 3)
    with pytest.raises(IndexError, match="index 3 out of range"):
        op(oplib.empty(3, 2, device="meta"), 3)


def test_meta_kernel_taking_the_keyset_runs_under_fake_tensor_mode(lib, teardown):
    ns = lib.ns
    lib.define("ks(Tensor x) -> Tensor")
    meta = oplib.Library(ns, "IMPL", "Meta")
    teardown(meta)
    seen = []

    def ks_meta(keyset, x):
        seen.append(keyset)
        return x.new_empty(x.size(0) * 2)

    meta.impl("ks", ks_meta, with_keyset=True)
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(np.ones(3))
        assert getattr(oplib.ops, ns).ks(x).shape == (6,)
        assert getattr(oplib.ops, ns).ks(x).shape == (6,)
    assert len(seen) == 2
    assert isinstance(seen[0], oplib.DispatchKeySet)


def test_stride_of_a_symbolic_shape():
    u = oplib.fake.ShapeEnv().new_symbol()
    a = fa(2).new_empty((3, u, 4))
    assert a.stride() == (u * 4, 4, 1)
    assert a.stride(0) == 4 * u
