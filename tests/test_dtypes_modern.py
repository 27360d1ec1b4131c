"""Dtypes of modern models: bfloat16 and float8 (ml_dtypes), every integer width, torch's
promotion (``oplib.promote_types`` and the core ops), ``finfo``/``iinfo``, ``Tensor.to``,
schemas, fake kernels, autograd, ``oplib check`` samples and the clear errors.

Expected values marked "torch 2.13" were printed by torch 2.13 (CPU)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import oplib_core as oplib
from oplib_core import Device
from oplib_core.errors import BackendDtypeError, UnsupportedDtypeError
from oplib_core.testing._core_samples import CORE_SAMPLES

from helpers import compile_library, unique_ns

ops = oplib.ops.oplib

ABBREV = {
    "b": oplib.bool_,
    "u8": oplib.uint8,
    "i8": oplib.int8,
    "i16": oplib.int16,
    "i32": oplib.int32,
    "i64": oplib.int64,
    "u16": oplib.uint16,
    "u32": oplib.uint32,
    "u64": oplib.uint64,
    "f16": oplib.float16,
    "bf16": oplib.bfloat16,
    "f32": oplib.float32,
    "f64": oplib.float64,
    "c64": oplib.complex64,
    "c128": oplib.complex128,
    "e4m3fn": oplib.float8_e4m3fn,
    "e5m2": oplib.float8_e5m2,
    "e4m3fnuz": oplib.float8_e4m3fnuz,
    "e5m2fnuz": oplib.float8_e5m2fnuz,
    "e8m0fnu": oplib.float8_e8m0fnu,
}
ORDER = list(ABBREV)
# torch 2.13: torch.promote_types(row, column) in ORDER; "-" where it raises
TORCH_PROMOTION = [
    "b u8 i8 i16 i32 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "u8 u8 i16 i16 i32 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "i8 i16 i8 i16 i32 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "i16 i16 i16 i16 i32 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "i32 i32 i32 i32 i32 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "i64 i64 i64 i64 i64 i64 - - - f16 bf16 f32 f64 c64 c128 - - - - -",
    "- - - - - - u16 - - f16 bf16 f32 f64 - - - - - - -",
    "- - - - - - - u32 - f16 bf16 f32 f64 - - - - - - -",
    "- - - - - - - - u64 f16 bf16 f32 f64 - - - - - - -",
    "f16 f16 f16 f16 f16 f16 f16 f16 f16 f16 f32 f32 f64 c64 c128 - - - - -",
    "bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 bf16 f32 bf16 f32 f64 c64 c128 - - - - -",
    "f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f32 f64 c64 c128 - - - - -",
    "f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 f64 c128 c128 - - - - -",
    "c64 c64 c64 c64 c64 c64 - - - c64 c64 c64 c128 c64 c128 - - - - -",
    "c128 c128 c128 c128 c128 c128 - - - c128 c128 c128 c128 c128 c128 - - - - -",
    "- - - - - - - - - - - - - - - e4m3fn - - - -",
    "- - - - - - - - - - - - - - - - e5m2 - - -",
    "- - - - - - - - - - - - - - - - - e4m3fnuz - -",
    "- - - - - - - - - - - - - - - - - - e5m2fnuz -",
    "- - - - - - - - - - - - - - - - - - - e8m0fnu",
]
EXTENSION = [oplib.bfloat16, *(ABBREV[k] for k in ORDER if k.startswith("e"))]
FLOATING = [oplib.float16, oplib.bfloat16, oplib.float32, oplib.float64]


def _torch_promotion(a: str, b: str) -> str:
    return TORCH_PROMOTION[ORDER.index(a)].split()[ORDER.index(b)]


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bfloat16", *(f"float8_{k}" for k in ORDER if k[0] == "e")])
def test_extension_dtypes_are_ml_dtypes_numpy_dtypes(name: str) -> None:
    d = getattr(oplib, name)
    assert isinstance(d, np.dtype)
    assert d == np.dtype(getattr(ml_dtypes, name)) == np.dtype(name)
    assert d.name == name


@pytest.mark.parametrize(
    "name", ["int8", "int16", "uint8", "uint16", "uint32", "uint64", "complex64", "complex128"]
)
def test_every_width_has_a_name(name: str) -> None:
    assert getattr(oplib, name) == np.dtype(name)
    assert name in oplib.__all__


# -- promote_types ----------------------------------------------------------------------------


@pytest.mark.parametrize("a", ORDER)
def test_promote_types_is_torchs_table(a: str) -> None:
    for b in ORDER:
        expected = _torch_promotion(a, b)
        if expected == "-":
            with pytest.raises(TypeError, match="Promotion for"):
                oplib.promote_types(ABBREV[a], ABBREV[b])
        else:
            assert oplib.promote_types(ABBREV[a], ABBREV[b]) == ABBREV[expected], (a, b)


def test_promote_types_errors_are_torchs() -> None:
    with pytest.raises(
        TypeError,
        match="Promotion for Float8 Types is not supported, attempted to promote "
        "float8_e4m3fn and float32",
    ):
        oplib.promote_types(oplib.float8_e4m3fn, oplib.float32)
    with pytest.raises(
        TypeError,
        match="Promotion for uint16, uint32, uint64 types is not supported, attempted to "
        "promote uint16 and int8",
    ):
        oplib.promote_types(oplib.uint16, oplib.int8)
    with pytest.raises(TypeError, match="not a bool, integer, floating or complex dtype"):
        oplib.promote_types(np.dtype("U3"), oplib.float32)


def test_promote_types_accepts_names_and_scalar_types() -> None:
    assert oplib.promote_types("bfloat16", np.float16) == oplib.float32
    assert oplib.promote_types(ml_dtypes.bfloat16, "int64") == oplib.bfloat16


@given(st.sampled_from(ORDER), st.sampled_from(ORDER))
def test_promote_types_is_symmetric(a: str, b: str) -> None:
    try:
        ab = oplib.promote_types(ABBREV[a], ABBREV[b])
    except TypeError:
        with pytest.raises(TypeError):
            oplib.promote_types(ABBREV[b], ABBREV[a])
    else:
        assert oplib.promote_types(ABBREV[b], ABBREV[a]) == ab


# -- finfo / iinfo ----------------------------------------------------------------------------

# torch 2.13: (bits, eps, max, min, tiny, resolution)
TORCH_FINFO = {
    "float32": (32, 1.1920928955078125e-07, 3.4028234663852886e38, 1.1754943508222875e-38, 1e-06),
    "bfloat16": (16, 0.0078125, 3.3895313892515355e38, 1.1754943508222875e-38, 0.01),
    "float16": (16, 0.0009765625, 65504.0, 6.103515625e-05, 0.001),
    "float8_e4m3fn": (8, 0.125, 448.0, 0.015625, 1.0),
    "float8_e5m2": (8, 0.25, 57344.0, 6.103515625e-05, 1.0),
    "float8_e4m3fnuz": (8, 0.125, 240.0, 0.0078125, 1.0),
}


@pytest.mark.parametrize("name", list(TORCH_FINFO))
def test_finfo_matches_torch(name: str) -> None:
    bits, eps, big, tiny, resolution = TORCH_FINFO[name]
    f = oplib.finfo(getattr(oplib, name))
    assert (f.bits, f.eps, f.max, f.min, f.tiny) == (bits, eps, big, -big, tiny)
    assert f.smallest_normal == tiny
    assert f.resolution == pytest.approx(resolution)
    assert f.dtype == name
    assert f"dtype={name}" in repr(f)


def test_finfo_edges() -> None:
    assert oplib.finfo() == oplib.finfo(oplib.float32)  # the default dtype
    assert oplib.finfo(oplib.complex64).dtype == "float32"  # the component, as torch
    assert oplib.finfo(oplib.float64).resolution == pytest.approx(1e-15)
    e8 = oplib.finfo(oplib.float8_e8m0fnu)  # torch 2.13: no sign, min is the smallest power
    assert (e8.eps, e8.max, e8.min) == (1.0, 1.7014118346046923e38, 5.877471754111438e-39)
    with pytest.raises(TypeError, match=r"finfo\(\) requires a floating point input type"):
        oplib.finfo(oplib.int32)


@pytest.mark.parametrize(
    ("name", "lo", "hi"),
    [("int8", -128, 127), ("uint8", 0, 255), ("uint16", 0, 65535), ("uint64", 0, 2**64 - 1)],
)
def test_iinfo(name: str, lo: int, hi: int) -> None:
    i = oplib.iinfo(getattr(oplib, name))
    assert (i.min, i.max, i.dtype, i.bits) == (lo, hi, name, np.dtype(name).itemsize * 8)


def test_iinfo_errors() -> None:
    with pytest.raises(TypeError, match=r"bool is not supported by oplib\.iinfo"):
        oplib.iinfo(oplib.bool_)
    with pytest.raises(TypeError, match=r"iinfo\(\) requires an integer input type"):
        oplib.iinfo(oplib.bfloat16)


# -- factories, to, schemas -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", EXTENSION, ids=str)
def test_factories_make_extension_dtypes(dtype: np.dtype) -> None:
    assert oplib.zeros(3, dtype=dtype).dtype == dtype
    assert oplib.ones(2, 2, dtype=dtype).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert oplib.full([2], 2.0, dtype=dtype).tolist() == [2.0, 2.0]
    assert oplib.empty(4, dtype=dtype).dtype == dtype
    assert oplib.tensor([1.0, 2.0], dtype=dtype).dtype == dtype
    assert oplib.zeros(2, dtype=dtype, device="meta").dtype == dtype


def test_arange_and_scalar_tensors_in_bfloat16() -> None:
    assert oplib.arange(4, dtype=oplib.bfloat16).tolist() == [0.0, 1.0, 2.0, 3.0]
    t = oplib.tensor(ml_dtypes.bfloat16(1.5))  # a numpy scalar of an extension dtype
    assert t.dtype == oplib.bfloat16 and t.item() == 1.5
    with pytest.raises(TypeError, match="cannot make a tensor"):
        oplib.tensor(np.zeros(2, dtype="V2")[0])  # raw bytes stay refused


def test_to_takes_a_dtype_first_and_bfloat16_method() -> None:
    t = oplib.tensor([1.5, 2.25, 3.0])
    assert t.to(oplib.bfloat16).dtype == oplib.bfloat16
    assert t.bfloat16().dtype == oplib.bfloat16
    assert t.bfloat16().tolist() == [1.5, 2.25, 3.0]
    assert t.to(np.float64).dtype == oplib.float64  # a numpy scalar type
    assert t.to(oplib.float32) is t  # nothing changes
    assert t.to("meta", oplib.bfloat16).dtype == oplib.bfloat16
    m = t.to("meta")
    assert m.to(oplib.bfloat16).device.type == "meta"
    assert t.to(dtype=oplib.float8_e5m2).dtype == oplib.float8_e5m2


def test_scalar_type_arguments_take_extension_dtypes(ns: str) -> None:
    oplib.define(f"{ns}::cast", "(Tensor x, ScalarType dtype) -> Tensor")
    oplib.impl(f"{ns}::cast", "cpu", lambda x, dtype: x.astype(dtype))
    cast = getattr(oplib.ops, ns).cast
    x = oplib.tensor([1.0, 2.0])
    for given_dtype in (oplib.bfloat16, "bfloat16", ml_dtypes.bfloat16):
        assert cast(x, given_dtype).dtype == oplib.bfloat16
    assert cast(x, "float8_e4m3fn").dtype == oplib.float8_e4m3fn
    assert ops.mean(oplib.tensor([1, 2]), dtype=oplib.bfloat16).dtype == oplib.bfloat16


def test_default_dtype_may_be_bfloat16(default_dtype: Any) -> None:
    oplib.set_default_dtype(oplib.bfloat16)
    assert oplib.zeros(2).dtype == oplib.bfloat16
    assert oplib.tensor([1.5]).dtype == oplib.bfloat16
    assert oplib.tensor([1j]).dtype == oplib.complex64
    assert oplib.arange(0.0, 1.0, 0.25).dtype == oplib.bfloat16
    assert oplib.arange(0.0, 1.0, 0.25, device="meta").dtype == oplib.bfloat16
    assert oplib.arange(3).dtype == oplib.int64
    with pytest.raises(TypeError, match="only floating dtypes"):
        oplib.set_default_dtype(oplib.int8)


# -- promotion in the core ops ----------------------------------------------------------------

X = [1.5, 2.25, 3.0, 0.3]
Y = [0.7, 1.1, -2.3, 5.0]


def _bf(values: list[float]) -> oplib.Tensor:
    return oplib.tensor(values).bfloat16()


def test_mixed_promotion_in_ops_is_torchs() -> None:
    x = _bf(X)
    h = oplib.tensor(Y, dtype=oplib.float16)
    i = oplib.tensor([1, 2, 3, 100000])
    assert (x + h).dtype == oplib.float32  # numpy has no common dtype
    assert (x + h).tolist() == [2.2001953125, 3.349609375, 0.69921875, 5.30078125]  # torch
    assert (x + i).dtype == oplib.bfloat16  # numpy: float64
    assert (x + i).tolist() == [2.5, 4.25, 6.0, 99840.0]  # torch 2.13
    assert (x + oplib.tensor(Y)).dtype == oplib.float32
    assert (x * 2.0).dtype == (2.0 * x).dtype == (x / 3).dtype == oplib.bfloat16
    assert (x * 1j).dtype == oplib.complex64  # torch 2.13
    assert (x > 2.0).dtype == oplib.bool_
    assert ops.where(x > 2.0, x, h).dtype == oplib.float32
    assert ops.cat([x, h, i]).dtype == oplib.float32
    assert ops.stack([x, i]).dtype == oplib.bfloat16
    assert ops.pow(x, h).dtype == oplib.float32


def test_values_as_torch_computes_them() -> None:
    x, y = _bf(X), _bf(Y)
    # the scalar stays float32 (torch's opmath); rounded to bfloat16 first, 0.1 would give
    # 0.2255859375 and 0.0301513671875
    assert (x * 0.1).tolist() == [0.150390625, 0.224609375, 0.30078125, 0.030029296875]
    assert (x / y).tolist() == [2.140625, 2.046875, -1.3046875, 0.06005859375]
    assert x.exp().tolist() == [4.46875, 9.5, 20.125, 1.3515625]
    z = _bf([-3.0, 0.2, 1.7, 4.1])
    assert ops.sigmoid(z).tolist() == [0.04736328125, 0.55078125, 0.84765625, 0.984375]
    m = _bf([1.5, 2.25, 3.0, 0.3]).reshape(2, 2)
    assert (m @ m).dtype == oplib.bfloat16  # numpy's matmul: float32
    assert (m @ m).tolist() == [[9.0, 4.0625], [5.40625, 6.84375]]


def test_bfloat16_sums_accumulate_in_float32() -> None:
    """numpy adds bfloat16 in bfloat16 (131072 here); torch accumulates in float32."""
    x = (oplib.arange(1000, dtype=oplib.float32) * 0.37).bfloat16()
    assert x.sum().item() == 184320.0  # torch 2.13
    assert x.mean().item() == 185.0
    assert x.sum().dtype == x.mean().dtype == oplib.bfloat16


@pytest.mark.parametrize("dtype", EXTENSION, ids=str)
def test_every_float8_computes_core_ops(dtype: np.dtype) -> None:
    x = oplib.tensor([[0.5, 2.0, 4.0], [0.25, 1.0, 8.0]]).to(dtype)  # exact in e8m0 too
    for out in (x + x, x * 2.0, x / x, x.exp(), ops.sigmoid(x), x.sum(), x @ x.T, ops.amax(x)):
        assert out.dtype == dtype
    assert (x * 2.0).tolist() == [[1.0, 4.0, 8.0], [0.5, 2.0, 16.0]]


ARRAY_DTYPES = [*EXTENSION, oplib.float16, oplib.float32, oplib.int8, oplib.int64, oplib.bool_]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt"]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(ARRAY_DTYPES),
    st.sampled_from(ARRAY_DTYPES),
    st.sampled_from(BINARY),
    st.sampled_from(["cpu", "meta"]),
)
def test_binary_ops_promote_as_torch_on_cpu_and_meta(
    a: np.dtype, b: np.dtype, name: str, device: str
) -> None:
    """With a bfloat16/float8 operand the result dtype is torch's ``promote_types`` (bool
    for comparisons) on the cpu kernels and the fake kernels alike, and float8 with another
    dtype is refused as torch refuses it."""
    assume(a in EXTENSION or b in EXTENSION)
    assume(not (name == "sub" and oplib.bool_ in (a, b)))  # numpy refuses bool subtraction
    x = oplib.ones(2, dtype=a, device=device)
    y = oplib.ones(2, dtype=b, device=device)
    op = getattr(ops, name)
    try:
        expected = oplib.promote_types(a, b)
    except TypeError:
        with pytest.raises(UnsupportedDtypeError, match="Promotion for"):
            op(x, y)
        return
    out = op(x, y)
    assert out.dtype == (oplib.bool_ if name in ("eq", "lt") else expected)
    assert out.device.type == device


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(EXTENSION),
    st.sampled_from(["add", "sub", "mul", "div", "pow", "rsub", "rdiv", "rpow", "eq"]),
    st.sampled_from([2, 0.5, True, 1j]),
)
def test_scalar_ops_agree_on_cpu_and_meta(dtype: np.dtype, name: str, scalar: Any) -> None:
    assume(not (scalar is True and name in ("sub", "rsub")))
    x = oplib.ones(2, dtype=dtype)
    op = getattr(ops, name).Scalar
    try:
        real = op(x, scalar)
    except Exception as e:
        with pytest.raises(type(e)):
            op(x.to("meta"), scalar)
        return
    fake = op(x.to("meta"), scalar)
    assert fake.dtype == real.dtype
    if name != "eq":
        assert real.dtype == (oplib.complex64 if isinstance(scalar, complex) else dtype)


def test_fake_tensor_mode_promotes_like_the_kernels() -> None:
    x = _bf(X)
    h = oplib.tensor(Y, dtype=oplib.float16)
    with oplib.FakeTensorMode() as mode:
        fx, fh = mode.from_real(x), mode.from_real(h)
        assert (fx + fh).dtype == oplib.float32
        assert (fx * 2.0).dtype == oplib.bfloat16
        assert (fx.reshape(2, 2) @ fx.reshape(2, 2)).dtype == oplib.bfloat16
        assert ops.cat([fx, fh]).dtype == oplib.float32


# -- autograd -----------------------------------------------------------------------------------


def test_bfloat16_tensors_record_gradients() -> None:
    x = oplib.tensor([1.5, 2.0]).bfloat16().requires_grad_()
    y = (x * x).sum()
    assert y.grad_fn is not None
    y.backward()
    assert x.grad is not None
    assert x.grad.dtype == oplib.bfloat16
    assert x.grad.tolist() == [3.0, 4.0]
    assert oplib.tensor([1.0]).to(oplib.float8_e4m3fn).requires_grad_().requires_grad


def test_integer_tensors_still_refuse_gradients() -> None:
    with pytest.raises(RuntimeError, match="floating point or complex"):
        oplib.tensor([1, 2], dtype=oplib.int8).requires_grad_()


# -- errors -------------------------------------------------------------------------------------


def test_float8_with_another_dtype_is_refused_with_torchs_words() -> None:
    x = oplib.ones(2, dtype=oplib.float8_e4m3fn)
    with pytest.raises(UnsupportedDtypeError, match="Promotion for Float8 Types") as info:
        x + oplib.ones(2)
    assert info.value.op == "oplib::add"
    assert info.value.dtype == oplib.float8_e4m3fn
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(UnsupportedDtypeError, match="Promotion for Float8 Types"):
        x.to("meta") + oplib.ones(2, device="meta")


def test_a_kernel_type_error_on_bfloat16_is_an_unsupported_dtype_error(ns: str) -> None:
    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype == oplib.bfloat16:
            raise TypeError("no loop for bfloat16")
        return x

    oplib.define(f"{ns}::picky", "(Tensor x) -> Tensor")
    oplib.impl(f"{ns}::picky", "cpu", kernel)
    picky = getattr(oplib.ops, ns).picky
    with pytest.raises(
        UnsupportedDtypeError, match=r"picky\(\): the cpu kernel raised TypeError on argument 'x'"
    ) as info:
        picky(oplib.ones(2, dtype=oplib.bfloat16))
    assert "cast it first, e.g. with .to(oplib.float32)" in str(info.value)
    assert info.value.argument == "x"
    assert str(info.value.__cause__) == "no loop for bfloat16"
    assert picky(oplib.ones(2)).dtype == oplib.float32  # other dtypes untouched


def test_cuda_refuses_dtypes_cupy_lacks_before_touching_cupy() -> None:
    """cuda declares cupy's dtypes (``BackendSpec.dtypes``): core refuses the others with
    ``BackendDtypeError`` before cupy is imported (so this runs without it)."""
    cuda = oplib.backends.get("cuda")
    assert oplib.bfloat16 not in cuda.spec.dtypes() and oplib.float16 in cuda.spec.dtypes()
    with pytest.raises(BackendDtypeError, match=r"copy to cuda:0: backend 'cuda' has no bfloat16"):
        cuda.from_host(np.zeros(2, oplib.bfloat16), Device("cuda", 0))
    with pytest.raises(BackendDtypeError, match=r"oplib::zeros\(\): .* no float8_e5m2 dtype") as e:
        oplib.zeros(2, dtype=oplib.float8_e5m2, device="cuda")
    assert (e.value.backend, e.value.dtype) == ("cuda", oplib.float8_e5m2)
    astype, _ = ops.astype.default.resolve(cuda)
    with pytest.raises(BackendDtypeError, match=r"oplib::astype\(\): .* no bfloat16 dtype"):
        astype(np.zeros(2), oplib.bfloat16)
    with pytest.raises(BackendDtypeError, match="empty on cuda:0"):
        cuda.empty((2,), oplib.float8_e4m3fn, Device("cuda", 0))
    # a bfloat16 tensor sent to cuda: refused before cupy is asked for its current device
    with pytest.raises(
        BackendDtypeError,
        match=r"jax backend.*bfloat16 on the GPU.*keep bfloat16 tensors on the cpu",
    ):
        _bf(X).to("cuda")


# -- backends and oplib check ----------------------------------------------------------------


def test_bfloat16_on_privateuse1() -> None:
    if oplib.backends.get("privateuse1").status() is not None:
        pytest.skip("privateuse1 unavailable")
    x = _bf(X).to("privateuse1")
    h = oplib.tensor(Y, dtype=oplib.float16).to("privateuse1")
    assert x.device.type == "privateuse1"
    assert (x + h).dtype == oplib.float32
    assert (x * 0.1).to("cpu").tolist() == [0.150390625, 0.224609375, 0.30078125, 0.030029296875]


def _mentions_bfloat16(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_mentions_bfloat16(v) for v in value)
    if isinstance(value, oplib.Tensor):
        return value.dtype == oplib.bfloat16
    return isinstance(value, np.dtype) and value == oplib.bfloat16


def test_core_samples_include_bfloat16() -> None:
    cpu = Device("cpu")
    with_bf16 = {
        name
        for name, make in CORE_SAMPLES.items()
        if any(_mentions_bfloat16([*s.args, *s.kwargs.values()]) for s in make(cpu))
    }
    for name in ("add", "mul.Scalar", "exp", "sum", "matmul", "cat", "zeros", "astype", "lt"):
        assert name in with_bf16, name


def test_opcheck_passes_on_a_bfloat16_sample() -> None:
    x, y = _bf(X), oplib.tensor(Y, dtype=oplib.float16)
    for op, args in ((ops.add.default, (x, y)), (ops.matmul.default, (x, x))):
        results = oplib.opcheck(op, args)
        assert set(results.values()) == {"SUCCESS"}
        ran = {(d.check, d.backend) for d in results.details if d.status == "PASS"}
        assert {("test_faketensor", "meta"), ("test_backends", "privateuse1")} <= ran


# -- native kernels -------------------------------------------------------------------------------

BF16_LIB = r"""
#include "oplib.h"
#include <string.h>

/* twice(Tensor x) -> Tensor for bfloat16: the top half of a float32's bits */
static int twice(const oplib_arg *a, int64_t n, DLTensor *outs, int64_t no, oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  if (x->dtype.code != kDLBfloat || x->dtype.bits != 16)
    return oplib_set_error(err, "x must be bfloat16");
  int64_t total = 1;
  for (int32_t d = 0; d < x->ndim; d++) total *= x->shape[d];
  const uint16_t *px = (const uint16_t *)((const char *)x->data + x->byte_offset);
  for (int64_t i = 0; i < total; i++) {
    uint32_t bits = (uint32_t)px[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    f *= 2.0f;
    memcpy(&bits, &f, 4);
    ((uint16_t *)outs[0].data)[i] = (uint16_t)(bits >> 16);
  }
  return OPLIB_OK;
}

static int same(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no,
                oplib_error *err) {
  const DLTensor *x = a[0].v.tensor;
  o[0].ndim = x->ndim;
  o[0].dtype = x->dtype;
  for (int32_t d = 0; d < x->ndim; d++) o[0].shape[d] = x->shape[d];
  return OPLIB_OK;
}

OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::twice", "(Tensor x) -> Tensor")) return 1;
  if (api->impl(c, "{ns}::twice", "cpu", twice)) return 1;
  if (api->register_shape_fn(c, "{ns}::twice", same)) return 1;
  return 0;
}
"""


def test_native_kernels_take_bfloat16_as_dlpack_bfloat(tmp_path: Any) -> None:
    ns = unique_ns("bf16native")
    oplib.ops.load_library(compile_library(BF16_LIB.replace("{ns}", ns), tmp_path))
    twice = getattr(oplib.ops, ns).twice
    out = twice(_bf([1.5, -2.25, 3.0]))
    assert out.dtype == oplib.bfloat16
    assert out.tolist() == [3.0, -4.5, 6.0]
    assert twice(_bf([1.0]).to("meta")).dtype == oplib.bfloat16  # through the shape function
    with pytest.raises(oplib.NativeKernelError, match="x must be bfloat16"):
        twice(oplib.ones(2))
    with pytest.raises(UnsupportedDtypeError, match="float8_e5m2"):
        twice(oplib.ones(2, dtype=oplib.float8_e5m2))  # no DLPack code: not passed as float8
