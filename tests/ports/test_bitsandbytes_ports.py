"""bitsandbytes' torch.library registrations (bitsandbytes_ops.py, a port of
bitsandbytes/_ops.py and backends/default/ops.py), checked op by op: the forward against
an independent numpy reference, on the meta device, under FakeTensorMode and with opcheck.

No bitsandbytes op has an autograd formula upstream (its autograd lives in
autograd.Function classes outside _ops.py), so none is gradchecked here; opcheck's autograd
checks run on inputs that do not require grad."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib

from helpers import drop_namespace


@pytest.fixture(scope="module", autouse=True)
def ported() -> Iterator[Any]:
    """The port registers its ops when imported, in the process-lifetime Library of the
    ``bitsandbytes`` namespace (torch.library.define's); dropped after this module, since
    other tests count the registry's ops."""
    module = importlib.import_module("bitsandbytes_ops")
    yield module
    drop_namespace("bitsandbytes")
    sys.modules.pop("bitsandbytes_ops", None)


def B() -> Any:
    return oplib.ops.bitsandbytes


rng = np.random.default_rng(31)
CODE8 = np.linspace(-1.0, 1.0, 256, dtype=np.float32)  # a sorted 8-bit code, as upstream's
NF4 = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
     -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
     0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
     0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0],
    dtype=np.float32,
)  # fmt: skip
FP4 = np.array(
    [0.0, 0.0052, 0.6667, 1.0, 0.3333, 0.5, 0.1667, 0.25,
     0.0, -0.0052, -0.6667, -1.0, -0.3333, -0.5, -0.1667, -0.25],
    dtype=np.float32,
)  # fmt: skip


# --- independent references: loops over blocks, nearest code value, textbook formulas ----


def ref_linear_matmul(A: np.ndarray, W: np.ndarray) -> np.ndarray:
    return (A.astype(np.int64) @ W.astype(np.int64).T).astype(np.int32)


def ref_mm_dequant(C, row, col, dtype=np.float16, bias=None):
    out = C.astype(np.float64) * row[:, None] * col[None, :] / (127.0 * 127.0)
    return (out if bias is None else out + bias).astype(dtype)


def ref_vectorwise_quant(A: np.ndarray, threshold: float = 0.0):
    A = A.astype(np.float64)
    cols = None
    if threshold > 0.0:
        cols = np.array([j for j in range(A.shape[1]) if (abs(A[:, j]) >= threshold).any()])
        cols = cols.astype(np.int64)
        A = np.where(abs(A) >= threshold, 0.0, A)
    stats = abs(A).max(axis=1)
    q = np.round(A * 127.0 / stats[:, None])
    if cols is not None and A.shape[0] > 1:
        q[:, cols] = 0
    return q.astype(np.int8), stats.astype(np.float32), cols


def _blocks(n: int, blocksize: int) -> list[slice]:
    return [slice(s, min(s + blocksize, n)) for s in range(0, n, blocksize)]


def _nearest(code: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.abs(x[:, None] - code[None, :].astype(np.float64)).argmin(axis=1)


def ref_quantize_blockwise(A: np.ndarray, code: np.ndarray, blocksize: int):
    flat = A.reshape(-1).astype(np.float64)
    q = np.empty(flat.size, np.uint8)
    absmax = []
    for s in _blocks(flat.size, blocksize):
        am = abs(flat[s]).max()
        absmax.append(am)
        q[s] = _nearest(code, np.clip(flat[s] / max(am, 1e-38), -1, 1))
    return q.reshape(A.shape), np.array(absmax, np.float32)


def ref_dequantize_blockwise(q, absmax, code, blocksize, dtype):
    flat = code[q.reshape(-1)].astype(np.float64)
    for i, s in enumerate(_blocks(flat.size, blocksize)):
        flat[s] *= absmax[i]
    return flat.reshape(q.shape).astype(dtype)


def ref_quantize_4bit(A: np.ndarray, blocksize: int, code: np.ndarray):
    idx, absmax = ref_quantize_blockwise(A.reshape(-1), code, blocksize)
    idx = list(idx) + [0] * (idx.size % 2)
    packed = [(hi << 4) | lo for hi, lo in zip(idx[::2], idx[1::2], strict=True)]
    return np.array(packed, np.uint8)[:, None], absmax


def ref_dequantize_4bit(packed, absmax, blocksize, code, shape, dtype):
    nibbles = [v for byte in packed.view(np.uint8).reshape(-1) for v in (byte >> 4, byte & 15)]
    n = int(np.prod(shape))
    return ref_dequantize_blockwise(np.array(nibbles[:n]), absmax, code, blocksize, dtype).reshape(
        shape
    )


# --- the cases: one per op overload with a cpu kernel --------------------------------------


@dataclass
class Case:
    op: str  # "name.overload" in oplib.ops.bitsandbytes
    args: Callable[[], tuple[Any, ...]]
    ref: Callable[..., Any]
    kwargs: Callable[[], dict[str, Any]] = dict
    rtol: float = 1e-5
    atol: float = 1e-6
    # upstream's fake kernel disagrees with its kernel (torch's opcheck fails it too)
    fake_disagrees: bool = False

    def overload(self) -> Any:
        name, _, overload = self.op.partition(".")
        return getattr(getattr(B(), name), overload or "default")


def _i8(*shape: int) -> np.ndarray:
    return rng.integers(-127, 128, shape).astype(np.int8)


def _f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _outliers() -> np.ndarray:
    A = _f32(4, 8)
    A[1, 2] = 9.0
    A[3, 5] = -7.5
    return A


def _stats(n: int) -> np.ndarray:
    return rng.uniform(0.5, 2.0, n).astype(np.float32)


_A8, _W8 = _i8(5, 16), _i8(3, 16)
_ROW, _COL = _stats(5), _stats(3)
_Q4 = {qt: ref_quantize_4bit(_f32(6, 64), 64, code) for qt, code in (("nf4", NF4), ("fp4", FP4))}
_X = _f32(2, 64)

CASES = {
    "int8_linear_matmul": Case("int8_linear_matmul", lambda: (_A8, _W8), ref_linear_matmul),
    "int8_mm_dequant": Case(
        "int8_mm_dequant",
        lambda: (ref_linear_matmul(_A8, _W8), _ROW, _COL),
        ref_mm_dequant,
        rtol=1e-3,
        atol=1e-3,
    ),
    "int8_mm_dequant-bias-f32": Case(
        "int8_mm_dequant",
        lambda: (ref_linear_matmul(_A8, _W8), _ROW, _COL, np.float32, _f32(3)),
        ref_mm_dequant,
        rtol=1e-4,
        atol=1e-4,
    ),
    "int8_scaled_mm": Case(
        "int8_scaled_mm",
        lambda: (_A8, _W8, _ROW, _COL),
        lambda A, W, r, c: ref_mm_dequant(ref_linear_matmul(A, W), r, c),
        rtol=1e-3,
        atol=1e-3,
    ),
    "int8_scaled_mm-bias": Case(
        "int8_scaled_mm",
        lambda: (_A8, _W8, _ROW, _COL, _f32(3), np.float32),
        lambda A, W, r, c, b, dt: ref_mm_dequant(ref_linear_matmul(A, W), r, c, dt, b),
        rtol=1e-4,
        atol=1e-4,
    ),
    "int8_vectorwise_quant": Case(
        "int8_vectorwise_quant", lambda: (_f32(4, 8),), ref_vectorwise_quant
    ),
    "int8_vectorwise_quant-threshold": Case(
        "int8_vectorwise_quant", lambda: (_outliers(), 6.0), ref_vectorwise_quant
    ),
    "int8_vectorwise_dequant": Case(
        "int8_vectorwise_dequant",
        lambda: (_i8(4, 8), _stats(4)),
        lambda A, s: (A * s[:, None].astype(np.float64) / 127.0).astype(np.float32),
    ),
    "int8_mixed_scaled_mm": Case(
        "int8_mixed_scaled_mm",
        lambda: (_f32(5, 16), _A8, _W8, _ROW, _COL, np.array([2, 7]), _f32(3)),
        lambda A, CA, CB, SCA, SCB, cols, bias: (
            ref_mm_dequant(ref_linear_matmul(CA, CB), SCA, SCB, np.float32, bias)
            + A[:, cols] @ (CB[:, cols] * SCB[:, None] / 127.0).T,
            A[:, cols],
        ),
        rtol=1e-4,
        atol=1e-4,
        # the fake's second output is `A.new_empty(u0, dtype=int64)`, the kernel's
        # `A[:, outlier_cols]` (2-D, A's dtype)
        fake_disagrees=True,
    ),
    "quantize_blockwise": Case(
        "quantize_blockwise", lambda: (_f32(3, 50), CODE8, 64), ref_quantize_blockwise
    ),
    "dequantize_blockwise": Case(
        "dequantize_blockwise",
        lambda: (rng.integers(0, 256, (3, 50)).astype(np.uint8), _stats(3), CODE8, 64, np.float32),
        ref_dequantize_blockwise,
    ),
    "quantize_4bit-nf4": Case(
        "quantize_4bit",
        lambda: (_X, 64, "nf4", np.uint8),
        lambda A, bs, qt, st: ref_quantize_4bit(A, bs, NF4),
    ),
    "quantize_4bit-fp4-odd": Case(
        "quantize_4bit",
        lambda: (_f32(5, 9), 32, "fp4", np.uint8),
        lambda A, bs, qt, st: ref_quantize_4bit(A, bs, FP4),
    ),
    "quantize_4bit-float32-storage": Case(
        "quantize_4bit",
        lambda: (_X, 64, "nf4", np.float32),
        lambda A, bs, qt, st: (
            ref_quantize_4bit(A, bs, NF4)[0].reshape(-1).view(np.float32)[:, None],
            ref_quantize_4bit(A, bs, NF4)[1],
        ),
    ),
    "dequantize_4bit": Case(
        "dequantize_4bit",
        lambda: (*_Q4["nf4"], 64, "nf4", [6, 64], np.float32),
        lambda q, am, bs, qt, shape, dt: ref_dequantize_4bit(q, am, bs, NF4, shape, dt),
    ),
    "dequantize_4bit-fp4-float16": Case(
        "dequantize_4bit",
        lambda: (*_Q4["fp4"], 64, "fp4", [6, 64], np.float16),
        lambda q, am, bs, qt, shape, dt: ref_dequantize_4bit(q, am, bs, FP4, shape, dt),
        rtol=1e-3,
        atol=1e-3,
    ),
    "gemv_4bit": Case(
        "gemv_4bit",
        lambda: (_f32(1, 64), _Q4["fp4"][0], [6, 64], _Q4["fp4"][1], FP4, 64),
        lambda A, q, shapeB, am, code, bs: (
            A @ ref_dequantize_4bit(q, am, bs, FP4, shapeB, np.float32).T
        ),
        rtol=1e-4,
        atol=1e-4,
    ),
    "gemm_4bit": Case(
        "gemm_4bit",
        lambda: (_f32(3, 64), _Q4["nf4"][0], [6, 64], _Q4["nf4"][1], 64, "nf4", _f32(6)),
        lambda A, q, shapeB, am, bs, qt, bias: (
            A @ ref_dequantize_4bit(q, am, bs, NF4, shapeB, np.float32).T + bias
        ),
        rtol=1e-4,
        atol=1e-4,
    ),
}


def _tensor(x: Any) -> Any:
    return oplib.tensor(x.copy()) if isinstance(x, np.ndarray) else x


def _np(x: Any) -> Any:
    return x.detach().numpy() if isinstance(x, oplib.Tensor) else x


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _assert_matches(got: Any, want: Any, rtol: float, atol: float) -> None:
    got, want = _outputs(got), _outputs(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
            continue
        g = _np(g)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def _assert_same_meta(fake: Any, real: Any) -> None:
    """Shapes and dtypes of fake/meta outputs against the real ones; a data-dependent
    size (a symbolic ``u0``) stands for any size."""
    fake, real = _outputs(fake), _outputs(real)
    assert len(fake) == len(real)
    for f, r in zip(fake, real, strict=True):
        if r is None:
            assert f is None
            continue
        assert f.dtype == r.dtype, (f.dtype, r.dtype)
        assert len(f.shape) == len(r.shape), (f.shape, r.shape)
        for fd, rd in zip(f.shape, r.shape, strict=True):
            assert oplib.fake.is_symbolic(fd) or fd == rd, (f.shape, r.shape)


@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_numpy(name: str) -> None:
    case = CASES[name]
    args = case.args()
    got = case.overload()(*[_tensor(a) for a in args])
    _assert_matches(got, case.ref(*args), case.rtol, case.atol)
    native = case.overload()(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    _assert_matches(native, case.ref(*args), case.rtol, case.atol)


@pytest.mark.parametrize("name", list(CASES))
def test_meta_device(name: str) -> None:
    case = CASES[name]
    args = case.args()
    real = case.overload()(*[_tensor(a) for a in args])
    meta = case.overload()(
        *[_tensor(a).to("meta") if isinstance(a, np.ndarray) else a for a in args]
    )
    if case.fake_disagrees:
        with pytest.raises(AssertionError):
            _assert_same_meta(meta, real)
        return
    _assert_same_meta(meta, real)
    assert all(m.device.type == "meta" for m in _outputs(meta) if m is not None)


@pytest.mark.parametrize("name", list(CASES))
def test_fake_tensor_mode(name: str) -> None:
    case = CASES[name]
    args = case.args()
    real = case.overload()(*[_tensor(a) for a in args])
    with oplib.FakeTensorMode() as mode:
        fake = case.overload()(
            *[mode.from_real(a) if isinstance(a, np.ndarray) else a for a in args]
        )
    if case.fake_disagrees:
        with pytest.raises(AssertionError):
            _assert_same_meta(fake, real)
        return
    _assert_same_meta(fake, real)


@pytest.mark.parametrize("name", list(CASES))
def test_opcheck(name: str) -> None:
    case = CASES[name]
    if case.fake_disagrees:
        # torch 2.13's opcheck on the same registrations: "test_faketensor failed with ...
        # found mismatched tensor metadata for output[1]: Shapes torch.Size([5, 2]) and
        # torch.Size([u0]) are not equal!"
        with pytest.raises(oplib.OpCheckError, match=r"test_faketensor failed.*output 1"):
            oplib.opcheck(case.overload(), [_tensor(a) for a in case.args()])
        return
    oplib.opcheck(case.overload(), [_tensor(a) for a in case.args()])


# --- the out= overload with a kernel, the optimizer, and the ops with no cpu kernel ---------


def test_int8_linear_matmul_out_writes_out() -> None:
    A, W = _i8(5, 16), _i8(3, 16)
    out = oplib.zeros(5, 3, dtype=oplib.int32)
    assert B().int8_linear_matmul.out(oplib.tensor(A), oplib.tensor(W), out) is None
    np.testing.assert_array_equal(out.numpy(), ref_linear_matmul(A, W))
    fresh = oplib.zeros(5, 3, dtype=oplib.int32)
    oplib.opcheck(B().int8_linear_matmul.out, [oplib.tensor(A), oplib.tensor(W), fresh])


def test_int8_linear_matmul_out_fake_and_meta_check_out() -> None:
    A, W = _i8(5, 16), _i8(3, 16)
    with oplib.FakeTensorMode() as mode:
        fa, fw = mode.from_real(A), mode.from_real(W)
        assert (
            B().int8_linear_matmul.out(fa, fw, mode.from_real(np.zeros((5, 3), np.int32))) is None
        )
        with pytest.raises(RuntimeError, match=r"Expected out.shape == \(5, 3\), got \(5, 4\)"):
            B().int8_linear_matmul.out(fa, fw, mode.from_real(np.zeros((5, 4), np.int32)))
        with pytest.raises(RuntimeError, match=r"Expected out\.dtype == int32, got int64"):
            B().int8_linear_matmul.out(fa, fw, mode.from_real(np.zeros((5, 3), np.int64)))
    meta = [oplib.tensor(a).to("meta") for a in (A, W, np.zeros((5, 3), np.int32))]
    assert B().int8_linear_matmul.out(*meta) is None


def test_fake_kernel_checks_name_what_came() -> None:
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(_f32(4, 8))
        with pytest.raises(RuntimeError, match="A must be int8"):
            B().int8_linear_matmul(x, x)
        with pytest.raises(RuntimeError, match="invalid blocksize 48"):
            B().quantize_4bit(x, 48, "nf4", oplib.uint8)
        with pytest.raises(RuntimeError, match="quant_type must be 'nf4' or 'fp4', got 'int4'"):
            B().quantize_4bit(x, 64, "int4", oplib.uint8)
        with pytest.raises(RuntimeError, match="shapeB must be 2D"):
            B().gemm_4bit(x, x, [8], mode.from_real(_stats(2)), 64, "nf4")


def _textbook(name: str, g, p, s1, s2, b1, b2, eps, wd, step, lr):
    """One step of each optimizer as its paper writes it, in float64."""
    g, p, s1 = g.astype(np.float64), p.astype(np.float64), s1.astype(np.float64)
    if name == "adam":
        m = b1 * s1 + (1 - b1) * g
        v = b2 * s2 + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1**step), v / (1 - b2**step)
        return p * (1 - lr * wd) - lr * mhat / (np.sqrt(vhat) + eps), m, v
    if name == "momentum":
        s = b1 * s1 + g + wd * p
        return p - lr * s, s, None
    if name == "rmsprop":
        g = g + wd * p
        s = b1 * s1 + (1 - b1) * g * g
        return p - lr * g / (np.sqrt(s) + eps), s, None
    if name == "adagrad":
        g = g + wd * p
        s = s1 + g * g
        return p - lr * g / (np.sqrt(s) + eps), s, None
    assert name == "lion"
    p = p * (1 - lr * wd) - lr * np.sign(b1 * s1 + (1 - b1) * g)
    return p, b2 * s1 + (1 - b2) * g, None


@pytest.mark.parametrize("name", ["adam", "momentum", "rmsprop", "adagrad", "lion"])
def test_optimizer_update_32bit_matches_the_textbook(name: str) -> None:
    g, p = _f32(64), _f32(64)
    s1 = np.abs(_f32(64)) if name in ("adagrad", "rmsprop") else _f32(64) * 0.1
    s2 = np.abs(_f32(64)) * 0.01 if name == "adam" else None
    b1, b2, eps, wd, step, lr = 0.9, 0.99, 1e-8, 0.01, 3, 1e-2
    want_p, want_s1, want_s2 = _textbook(name, g, p, s1, s2, b1, b2, eps, wd, step, lr)
    tp, ts1 = oplib.tensor(p.copy()), oplib.tensor(s1.copy())
    ts2 = None if s2 is None else oplib.tensor(s2.copy())
    args = [
        name,
        oplib.tensor(g),
        tp,
        ts1,
        ts2,
        None,
        0.0,
        0.0,
        b1,
        b2,
        0.0,
        0.0,
        eps,
        wd,
        step,
        lr,
        1.0,
    ]
    assert B().optimizer_update_32bit(*args) is None
    np.testing.assert_allclose(tp.numpy(), want_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ts1.numpy(), want_s1, rtol=1e-5, atol=1e-6)
    if ts2 is not None:
        np.testing.assert_allclose(ts2.numpy(), want_s2, rtol=1e-5, atol=1e-7)
    # fake and meta: the fake kernel's checks, nothing written
    with oplib.FakeTensorMode() as mode:
        fake = [mode.from_real(a.numpy()) if isinstance(a, oplib.Tensor) else a for a in args]
        assert B().optimizer_update_32bit(*fake) is None
    meta = [a.to("meta") if isinstance(a, oplib.Tensor) else a for a in args]
    assert B().optimizer_update_32bit(*meta) is None
    fresh = [oplib.tensor(a.numpy().copy()) if isinstance(a, oplib.Tensor) else a for a in args]
    # upstream declares g mutable (Tensor(a0!) g) and no kernel writes it: opcheck says so
    with pytest.warns(UserWarning, match=r"declares argument 'g' mutable \(Tensor\(a0!\) g\)"):
        oplib.opcheck(B().optimizer_update_32bit, fresh)


def test_optimizer_update_32bit_refuses_what_upstream_refuses() -> None:
    g = oplib.tensor(_f32(8))
    args = ["adam", g, oplib.tensor(_f32(8)), oplib.tensor(_f32(8)), oplib.tensor(_f32(8))]
    args += [None, 0.0, 0.0, 0.9, 0.99, 0.0, 0.0, 1e-8, 0.0, 1, 1e-3, 1.0]
    with pytest.raises(NotImplementedError, match="skip_zeros is not supported yet"):
        B().optimizer_update_32bit(*args, skip_zeros=True)
    with oplib.FakeTensorMode() as mode:
        fake = [mode.from_real(a.numpy()) if isinstance(a, oplib.Tensor) else a for a in args]
        fake[2] = mode.from_real(_f32(8).astype(np.float64))
        with pytest.raises(RuntimeError, match=r"g\.dtype=float32, p\.dtype=float64"):
            B().optimizer_update_32bit(*fake)


# Upstream has these kernels only for cuda or in its C library: defined with their fake
# kernels here, so they run under FakeTensorMode and on meta and refuse cpu arrays.
NO_CPU_KERNEL = {
    "int8_double_quant": lambda: (_f32(4, 8),),
    "dequantize_blockwise.out": lambda: (
        rng.integers(0, 256, (3, 50)).astype(np.uint8), _stats(3), CODE8, 64, np.float32,
        np.zeros((3, 50), np.float32),
    ),
    "gemv_4bit.out": lambda: (
        _f32(1, 64), _Q4["fp4"][0], [6, 64], _Q4["fp4"][1], FP4, 64, np.zeros((1, 6), np.float32),
    ),
    "optimizer_update_8bit_blockwise": lambda: (
        "adam", _f32(64), _f32(64), np.zeros(64, np.uint8), np.zeros(64, np.uint8), 0.9, 0.99,
        0.0, 0.0, 1e-8, 1, 1e-3, CODE8, CODE8, _stats(1), _stats(1), 0.0, 1.0,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NO_CPU_KERNEL))
def test_ops_without_a_cpu_kernel(name: str) -> None:
    op = Case(name, NO_CPU_KERNEL[name], lambda: None).overload()
    args = NO_CPU_KERNEL[name]()
    with oplib.FakeTensorMode() as mode:
        fake = op(*[mode.from_real(a) if isinstance(a, np.ndarray) else a for a in args])
    meta = op(*[oplib.tensor(a).to("meta") if isinstance(a, np.ndarray) else a for a in args])
    if name == "int8_double_quant":
        shapes = [(4, 8), (4, 8), (4,), (8,)]
        assert [o.shape for o in fake[:4]] == [o.shape for o in meta[:4]] == shapes
        assert oplib.fake.is_symbolic(fake[4].shape[0]) and fake[4].dtype == np.int64
    else:
        assert fake is None and meta is None
    with pytest.raises(oplib.NoKernelError, match=f"bitsandbytes::{name.split('.')[0]}"):
        op(*[oplib.tensor(a) if isinstance(a, np.ndarray) else a for a in args])


def test_dequantize_4bit_out_fake_compares_a_shape_with_a_list() -> None:
    """Upstream's check ``out.shape == shape`` compares a shape with the ``int[]`` argument,
    which reaches a fake kernel as a list in torch as here, so it fails for every call.
    torch 2.13: ``RuntimeError: Expected out.shape == [2, 64], got torch.Size([2, 64])``."""
    q, absmax = _Q4["nf4"]
    with oplib.FakeTensorMode() as mode:
        args = [mode.from_real(q), mode.from_real(absmax), 64, "nf4", [6, 64], np.float32]
        with pytest.raises(RuntimeError, match=r"Expected out.shape == \[6, 64\], got \(6, 64\)"):
            B().dequantize_4bit.out(*args, mode.from_real(np.zeros((6, 64), np.float32)))


def test_data_dependent_sizes_on_meta_are_symbolic() -> None:
    """torch refuses a fake kernel that calls get_ctx() on meta tensors ("You're trying to
    run this operator with meta Tensors (as opposed to FakeTensors), but this operator may
    return an output Tensor with data-dependent shape"); oplib gives the output a symbolic
    size, as under FakeTensorMode (docs/coming-from-torch.md)."""
    x = oplib.tensor(_outliers()).to("meta")
    out_row, row_stats, cols = B().int8_vectorwise_quant(x, 6.0)
    assert out_row.shape == (4, 8) and row_stats.shape == (4,)
    assert oplib.fake.is_symbolic(cols.shape[0]) and cols.dtype == np.int64
