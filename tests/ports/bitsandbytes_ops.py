# ruff: noqa: E501, UP045, SIM108  (upstream's schemas, messages, Optional and branches, as written)
# Ported from bitsandbytes (https://github.com/bitsandbytes-foundation/bitsandbytes), MIT
# license, at commit 95f9af309d4d5793847169c39288dcd3fcbdf564:
# - bitsandbytes/_ops.py: every torch.library.define and register_fake, as written (19
#   overloads), and its one kernel (int8_vectorwise_dequant, "default");
# - bitsandbytes/backends/default/ops.py: the "default" kernels, their math rewritten in numpy;
# - bitsandbytes/backends/utils.py: the NF4 and FP4 code tables (what _get_4bit_code returns).
#
# Changes from the original, every one of them:
# - imports: `import torch` -> `import oplib_core as oplib` and numpy; torch.library.X ->
#   oplib.X; torch.Tensor -> oplib.Tensor; torch.dtype -> Any (a numpy dtype); torch.int8
#   and the other dtypes -> oplib.int8, ...; torch._check -> oplib._check;
#   torch.library.get_ctx -> oplib.get_ctx; torch.empty/empty_like -> oplib.empty/empty_like;
#   torch.ops.bitsandbytes -> oplib.ops.bitsandbytes.
# - the "default" kernels are numpy code, so they are registered for "cpu" (the porting rule
#   in docs/coming-from-torch.md); their torch math became numpy math line for line
#   (torch.bucketize -> np.searchsorted(side="left"), F.linear -> A @ W.T (+ bias),
#   x.view(dtype) -> x.view(dtype), torch.compile wrappers dropped).
# - the optimizer kernel's torch.compile wrapper is dropped; its update is written in numpy.
# - kernels upstream has only for cuda or for its C library (int8_double_quant, the three
#   `.out` dequantize/gemv overloads, optimizer_update_8bit_blockwise) are not ported: the
#   ops are defined with their fake kernels and have no cpu kernel, as upstream without its
#   native library.
from __future__ import annotations

from collections.abc import Sequence
from math import prod, sqrt
from typing import Any, Optional

import numpy as np

import oplib_core as oplib

register_fake = oplib.register_fake
register_kernel = oplib.register_kernel

# Int8 mixed precision matmul + dequant + bias
oplib.define(
    "bitsandbytes::int8_mixed_scaled_mm",
    "(Tensor A, Tensor CA, Tensor CB, Tensor SCA, Tensor SCB, Tensor? outlier_cols=None, Tensor? bias=None) -> (Tensor, Tensor?)",
)


@register_fake("bitsandbytes::int8_mixed_scaled_mm")
def _(
    A: oplib.Tensor,
    CA: oplib.Tensor,
    CB: oplib.Tensor,
    SCA: oplib.Tensor,
    SCB: oplib.Tensor,
    outlier_cols: Optional[oplib.Tensor] = None,
    bias: Optional[oplib.Tensor] = None,
) -> tuple[oplib.Tensor, Optional[oplib.Tensor]]:
    shapeC = (*CA.shape[:-1], CB.shape[0])

    out = oplib.empty(shapeC, device=A.device, dtype=A.dtype)

    outlier_cols = oplib.get_ctx().new_dynamic_size()
    subA = A.new_empty(outlier_cols, dtype=oplib.int64)

    return out, subA


# Higher level op: int8 matmul + dequant + bias
oplib.define(
    "bitsandbytes::int8_scaled_mm",
    "(Tensor A, Tensor B, Tensor row_stats, Tensor col_stats, Tensor? bias=None, ScalarType? dtype=None) -> Tensor",
)


@register_fake("bitsandbytes::int8_scaled_mm")
def _(
    A: oplib.Tensor,
    B: oplib.Tensor,
    row_stats: oplib.Tensor,
    col_stats: oplib.Tensor,
    bias: Optional[oplib.Tensor] = None,
    dtype: Optional[Any] = None,
) -> oplib.Tensor:
    shapeC = (*A.shape[:-1], B.shape[0])
    return oplib.empty(shapeC, device=A.device, dtype=dtype or oplib.float16)


oplib.define(
    "bitsandbytes::int8_linear_matmul",
    "(Tensor A, Tensor B) -> Tensor",
)


@register_fake("bitsandbytes::int8_linear_matmul")
def _(A: oplib.Tensor, B: oplib.Tensor):
    oplib._check(A.dtype == oplib.int8, lambda: "A must be int8")
    oplib._check(B.dtype == oplib.int8, lambda: "B must be int8")
    shapeC = (*A.shape[:-1], B.shape[0])
    return oplib.empty(shapeC, device=A.device, dtype=oplib.int32)


# More info on `out` overloads:
# https://github.com/pytorch/pytorch/issues/125044
oplib.define(
    "bitsandbytes::int8_linear_matmul.out",
    "(Tensor A, Tensor B, Tensor! out) -> ()",
)


@register_fake("bitsandbytes::int8_linear_matmul.out")
def _(A: oplib.Tensor, B: oplib.Tensor, out: oplib.Tensor):
    shapeC = (*A.shape[:-1], B.shape[0])

    oplib._check(A.dtype == oplib.int8, lambda: "A must be int8")
    oplib._check(B.dtype == oplib.int8, lambda: "B must be int8")
    oplib._check(out.shape == shapeC, lambda: f"Expected out.shape == {shapeC}, got {out.shape}")
    oplib._check(
        out.device == A.device, lambda: f"Expected out.device == {A.device}, got {out.device}"
    )
    oplib._check(out.dtype == oplib.int32, lambda: f"Expected out.dtype == int32, got {out.dtype}")


oplib.define(
    "bitsandbytes::int8_vectorwise_quant",
    "(Tensor A, float threshold=0.0) -> (Tensor, Tensor, Tensor?)",
)


@register_fake("bitsandbytes::int8_vectorwise_quant")
def _(A: oplib.Tensor, threshold=0.0):
    out_row = oplib.empty(A.shape, device=A.device, dtype=oplib.int8)
    row_stats = oplib.empty(A.numel() // A.shape[-1], device=A.device, dtype=oplib.float32)

    if threshold == 0.0:
        return out_row, row_stats, None

    outlier_cols = oplib.get_ctx().new_dynamic_size()

    return out_row, row_stats, A.new_empty(outlier_cols, dtype=oplib.int64)


oplib.define("bitsandbytes::int8_vectorwise_dequant", "(Tensor A, Tensor stats) -> Tensor")


@register_fake("bitsandbytes::int8_vectorwise_dequant")
def _(A: oplib.Tensor, stats: oplib.Tensor) -> oplib.Tensor:
    oplib._check(A.dtype == oplib.int8, lambda: "A must be int8")
    return oplib.empty_like(A, dtype=oplib.float32)


# Default PyTorch-native implementation (numpy here: registered for cpu)
@register_kernel("bitsandbytes::int8_vectorwise_dequant", "cpu")
def _(A: np.ndarray, stats: np.ndarray):
    # To dequantize we divide by 127, or multiply by the reciprocal.
    return A * stats.reshape(-1, 1) * np.float32(7.874015718698502e-3)


oplib.define(
    "bitsandbytes::int8_mm_dequant",
    "(Tensor A, Tensor row_stats, Tensor col_stats, ScalarType? dtype=None, Tensor? bias=None) -> Tensor",
)


@register_fake("bitsandbytes::int8_mm_dequant")
def _(
    A: oplib.Tensor,
    row_stats: oplib.Tensor,
    col_stats: oplib.Tensor,
    dtype: Optional[Any] = None,
    bias: Optional[oplib.Tensor] = None,
) -> oplib.Tensor:
    oplib._check(A.dtype == oplib.int32, lambda: "A must be int32")
    return oplib.empty_like(A, dtype=dtype or oplib.float16)


oplib.define(
    "bitsandbytes::int8_double_quant",
    "(Tensor A, float threshold=0.0) -> (Tensor, Tensor, Tensor, Tensor, Tensor?)",
)


@register_fake("bitsandbytes::int8_double_quant")
def _(
    A: oplib.Tensor,
    threshold=0.0,
) -> tuple[oplib.Tensor, oplib.Tensor, oplib.Tensor, oplib.Tensor, Optional[oplib.Tensor]]:
    out_row = oplib.empty_like(A, dtype=oplib.int8)
    out_col = oplib.empty_like(A, dtype=oplib.int8)
    row_stats = oplib.empty(A.numel() // A.shape[-1], device=A.device, dtype=oplib.float32)
    col_stats = oplib.empty(A.shape[-1], device=A.device, dtype=oplib.float32)
    outlier_n = oplib.get_ctx().new_dynamic_size()
    outlier_cols = A.new_empty(outlier_n, dtype=oplib.int64)
    return out_row, out_col, row_stats, col_stats, outlier_cols


oplib.define(
    "bitsandbytes::dequantize_4bit",
    "(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype) -> Tensor",
)


@register_fake("bitsandbytes::dequantize_4bit")
def _(
    A: oplib.Tensor,
    absmax: oplib.Tensor,
    blocksize: int,
    quant_type: str,
    shape: Sequence[int],
    dtype: Any,
) -> oplib.Tensor:
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        quant_type in ("nf4", "fp4"),
        lambda: f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}",
    )
    oplib._check(
        absmax.dtype == oplib.float32, lambda: f"absmax must be float32, got {absmax.dtype}"
    )
    oplib._check(
        dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise 4bit dequantization only supports 16/32-bit floats, but got {dtype}",
    )
    return oplib.empty(shape, dtype=dtype, device=A.device)


oplib.define(
    "bitsandbytes::dequantize_4bit.out",
    "(Tensor A, Tensor absmax, int blocksize, str quant_type, int[] shape, ScalarType dtype, Tensor! out) -> ()",
)


@register_fake("bitsandbytes::dequantize_4bit.out")
def _(
    A: oplib.Tensor,
    absmax: oplib.Tensor,
    blocksize: int,
    quant_type: str,
    shape: Sequence[int],
    dtype: Any,
    out: oplib.Tensor,
) -> None:
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        quant_type in ("nf4", "fp4"),
        lambda: f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}",
    )
    oplib._check(
        absmax.dtype == oplib.float32, lambda: f"absmax must be float32, got {absmax.dtype}"
    )
    oplib._check(
        dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise 4bit dequantization only supports 16/32-bit floats, but got {dtype}",
    )
    oplib._check(out.shape == shape, lambda: f"Expected out.shape == {shape}, got {out.shape}")
    oplib._check(
        out.device == A.device, lambda: f"Expected out.device == {A.device}, got {out.device}"
    )
    oplib._check(out.dtype == dtype, lambda: f"Expected out.dtype == {dtype}, got {out.dtype}")


oplib.define(
    "bitsandbytes::quantize_4bit",
    "(Tensor A, int blocksize, str quant_type, ScalarType quant_storage) -> (Tensor, Tensor)",
)


@register_fake("bitsandbytes::quantize_4bit")
def _(
    A: oplib.Tensor, blocksize: int, quant_type: str, quant_storage: Any
) -> tuple[oplib.Tensor, oplib.Tensor]:
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        quant_type in ("nf4", "fp4"),
        lambda: f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}",
    )
    oplib._check(
        A.dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise 4bit quantization only supports 16/32-bit floats, but got {A.dtype}",
    )

    n = A.numel()
    blocks = -(n // -blocksize)
    absmax = oplib.empty((blocks,), device=A.device, dtype=oplib.float32)
    out = oplib.empty(
        ((n + 1) // (quant_storage.itemsize * 2), 1), device=A.device, dtype=quant_storage
    )
    return out, absmax


oplib.define(
    "bitsandbytes::gemm_4bit",
    "(Tensor A, Tensor B, int[] shapeB, Tensor absmax, int blocksize, str quant_type, "
    "Tensor? bias=None, Tensor? absmax_8bit=None, Tensor? absmax_code=None, Tensor? absmax_offset=None) -> Tensor",
)


@register_fake("bitsandbytes::gemm_4bit")
def _(
    A: oplib.Tensor,
    B: oplib.Tensor,
    shapeB: Sequence[int],
    absmax: oplib.Tensor,
    blocksize: int,
    quant_type: str,
    bias: Optional[oplib.Tensor] = None,
    absmax_8bit: Optional[oplib.Tensor] = None,
    absmax_code: Optional[oplib.Tensor] = None,
    absmax_offset: Optional[oplib.Tensor] = None,
) -> oplib.Tensor:
    oplib._check(len(shapeB) == 2, lambda: f"shapeB must be 2D [N, K], got {list(shapeB)}")
    oplib._check(
        A.shape[-1] == shapeB[1],
        lambda: f"A inner dim ({A.shape[-1]}) must match shapeB ({shapeB[1]})",
    )
    oplib._check(
        A.dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"A must be float16, bfloat16, or float32, got {A.dtype}",
    )
    oplib._check(
        B.dtype in (oplib.uint8, oplib.bfloat16, oplib.float16, oplib.float32),
        lambda: (
            f"B must be backed by storage of type uint8, bfloat16, float16, or float32, got {B.dtype}"
        ),
    )
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        quant_type in ("nf4", "fp4"),
        lambda: f"quant_type must be 'nf4' or 'fp4', got {quant_type!r}",
    )
    oplib._check(
        absmax.dtype == oplib.float32, lambda: f"absmax must be float32, got {absmax.dtype}"
    )
    if absmax_8bit is not None:
        oplib._check(
            absmax_8bit.ndim == 1, lambda: f"absmax_8bit must be 1D, got {absmax_8bit.ndim}D"
        )
        oplib._check(
            absmax_8bit.dtype == oplib.uint8,
            lambda: f"absmax_8bit must be uint8, got {absmax_8bit.dtype}",
        )
        oplib._check(
            absmax_code is not None, lambda: "absmax_code required when absmax_8bit is provided"
        )
        assert absmax_code is not None  # (for the type checker: _check above raised)
        oplib._check(
            absmax_code.ndim == 1, lambda: f"absmax_code must be 1D, got {absmax_code.ndim}D"
        )
        oplib._check(
            absmax_code.shape[0] == 256,
            lambda: f"absmax_code must have 256 entries, got {absmax_code.shape[0]}",
        )
        oplib._check(
            absmax_code.dtype == oplib.float32,
            lambda: f"absmax_code must be float32, got {absmax_code.dtype}",
        )
        oplib._check(
            absmax_offset is not None,
            lambda: "absmax_offset required when absmax_8bit is provided",
        )
        assert absmax_offset is not None
        oplib._check(
            absmax_offset.ndim == 0,
            lambda: f"absmax_offset must be a scalar (0-dim), got {absmax_offset.ndim}D",
        )
        oplib._check(
            absmax_offset.dtype == oplib.float32,
            lambda: f"absmax_offset must be float32, got {absmax_offset.dtype}",
        )
    if bias is not None:
        oplib._check(bias.ndim == 1, lambda: f"bias must be 1D, got {bias.ndim}D")
        oplib._check(
            bias.shape[0] == shapeB[0],
            lambda: f"bias length ({bias.shape[0]}) must match N ({shapeB[0]})",
        )
        oplib._check(
            bias.dtype == A.dtype,
            lambda: f"bias dtype ({bias.dtype}) must match A dtype ({A.dtype})",
        )
    N = shapeB[0]
    return oplib.empty((*A.shape[:-1], N), dtype=A.dtype, device=A.device)


oplib.define(
    "bitsandbytes::dequantize_blockwise",
    "(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype) -> Tensor",
)


@register_fake("bitsandbytes::dequantize_blockwise")
def _(
    A: oplib.Tensor, absmax: oplib.Tensor, code: oplib.Tensor, blocksize: int, dtype: Any
) -> oplib.Tensor:
    oplib._check(blocksize > 0, lambda: f"blocksize must be positive, got {blocksize}")
    oplib._check(A.dtype == oplib.uint8, lambda: f"A must be uint8, got {A.dtype}")
    oplib._check(
        dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise dequantization only supports 16/32-bit floats, but got {dtype}",
    )
    return oplib.empty_like(A, dtype=dtype)


oplib.define(
    "bitsandbytes::dequantize_blockwise.out",
    "(Tensor A, Tensor absmax, Tensor code, int blocksize, ScalarType dtype, Tensor! out) -> ()",
)


@register_fake("bitsandbytes::dequantize_blockwise.out")
def _(
    A: oplib.Tensor,
    absmax: oplib.Tensor,
    code: oplib.Tensor,
    blocksize: int,
    dtype: Any,
    out: oplib.Tensor,
):
    oplib._check(blocksize > 0, lambda: f"blocksize must be positive, got {blocksize}")
    oplib._check(A.dtype == oplib.uint8, lambda: f"A must be uint8, got {A.dtype}")
    oplib._check(
        dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise dequantization only supports 16/32-bit floats, but got {dtype}",
    )
    oplib._check(out.shape == A.shape, lambda: f"Expected out.shape == {A.shape}, got {out.shape}")
    oplib._check(
        out.device == A.device, lambda: f"Expected out.device == {A.device}, got {out.device}"
    )
    oplib._check(out.dtype == dtype, lambda: f"Expected out.dtype == {dtype}, got {out.dtype}")


oplib.define(
    "bitsandbytes::quantize_blockwise",
    "(Tensor A, Tensor code, int blocksize) -> (Tensor, Tensor)",
)


@register_fake("bitsandbytes::quantize_blockwise")
def _(A: oplib.Tensor, code: oplib.Tensor, blocksize: int) -> tuple[oplib.Tensor, oplib.Tensor]:
    oplib._check(blocksize > 0, lambda: f"blocksize must be positive, got {blocksize}")
    oplib._check(
        A.dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"Blockwise quantization only supports 16/32-bit floats, but got {A.dtype}",
    )
    n = A.numel()
    blocks = -(n // -blocksize)
    absmax = oplib.empty((blocks,), device=A.device, dtype=oplib.float32)
    out = oplib.empty_like(A, dtype=oplib.uint8)
    return out, absmax


oplib.define(
    "bitsandbytes::gemv_4bit",
    "(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize) -> Tensor",
)


@register_fake("bitsandbytes::gemv_4bit")
def _(
    A: oplib.Tensor,
    B: oplib.Tensor,
    shapeB: Sequence[int],
    absmax: oplib.Tensor,
    code: oplib.Tensor,
    blocksize: int,
) -> oplib.Tensor:
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        A.dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"A must be float16, bfloat16, or float32, got {A.dtype}",
    )
    oplib._check(
        B.dtype in (oplib.uint8, oplib.bfloat16, oplib.float16, oplib.float32),
        lambda: (
            f"B must be backed by storage of type uint8, bfloat16, float16, or float32, got {B.dtype}"
        ),
    )
    shape = (*A.shape[:-1], shapeB[0])
    return oplib.empty(shape, device=A.device, dtype=A.dtype)


oplib.define(
    "bitsandbytes::gemv_4bit.out",
    "(Tensor A, Tensor B, int[] shapeB, Tensor absmax, Tensor code, int blocksize, Tensor! out) -> ()",
)


@register_fake("bitsandbytes::gemv_4bit.out")
def _(
    A: oplib.Tensor,
    B: oplib.Tensor,
    shapeB: Sequence[int],
    absmax: oplib.Tensor,
    code: oplib.Tensor,
    blocksize: int,
    out: oplib.Tensor,
) -> None:
    oplib._check(
        blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096),
        lambda: f"invalid blocksize {blocksize}",
    )
    oplib._check(
        A.dtype in (oplib.float16, oplib.bfloat16, oplib.float32),
        lambda: f"A must be float16, bfloat16, or float32, got {A.dtype}",
    )
    oplib._check(
        B.dtype in (oplib.uint8, oplib.bfloat16, oplib.float16, oplib.float32),
        lambda: (
            f"B must be backed by storage of type uint8, bfloat16, float16, or float32, got {B.dtype}"
        ),
    )
    oplib._check(
        out.shape == (*A.shape[:-1], shapeB[0]),
        lambda: f"Expected out.shape == {(*A.shape[:-1], shapeB[0])}, got {out.shape}",
    )
    oplib._check(
        out.device == A.device, lambda: f"Expected out.device == {A.device}, got {out.device}"
    )
    oplib._check(out.dtype == A.dtype, lambda: f"Expected out.dtype == {A.dtype}, got {out.dtype}")


oplib.define(
    "bitsandbytes::optimizer_update_32bit",
    "(str optimizer_name, Tensor(a0!) g, Tensor(a1!) p, Tensor(a2!) state1, Tensor(a3!)? state2, Tensor(a4!)? unorm_vec, float max_unorm, float param_norm, float beta1, float beta2, float beta3, float alpha, float eps, float weight_decay, int step, float lr, float gnorm_scale, bool skip_zeros=False) -> ()",
)


@register_fake("bitsandbytes::optimizer_update_32bit")
def _(
    optimizer_name: str,
    g: oplib.Tensor,
    p: oplib.Tensor,
    state1: oplib.Tensor,
    state2: Optional[oplib.Tensor],
    unorm_vec: Optional[oplib.Tensor],
    max_unorm: float,
    param_norm: float,
    beta1: float,
    beta2: float,
    beta3: float,
    alpha: float,
    eps: float,
    weight_decay: float,
    step: int,
    lr: float,
    gnorm_scale: float,
    skip_zeros=False,
) -> None:
    oplib._check(
        g.numel() == p.numel(),
        lambda: f"g and p must have the same number of elements, got {g.numel()} and {p.numel()}",
    )
    compute_dtypes = [oplib.float16, oplib.bfloat16, oplib.float32]

    oplib._check(
        g.dtype in compute_dtypes,
        lambda: f"g must be bfloat16, float16, or float32, got {g.dtype}",
    )
    oplib._check(
        g.dtype == p.dtype,
        lambda: (
            f"Expected all tensors to have the same dtype, got g.dtype={g.dtype}, p.dtype={p.dtype}"
        ),
    )


oplib.define(
    "bitsandbytes::optimizer_update_8bit_blockwise",
    "(str optimizer_name, Tensor(a0!) g, Tensor(a1!) p, Tensor(a2!) state1, Tensor(a3!)? state2, float beta1, float beta2, float beta3, float alpha, float eps, int step, float lr, Tensor(a4!) qmap1, Tensor(a5!)? qmap2, Tensor(a6!) absmax1, Tensor(a7!)? absmax2, float weight_decay, float gnorm_scale, bool skip_zeros=False) -> ()",
)


@register_fake("bitsandbytes::optimizer_update_8bit_blockwise")
def _(
    optimizer_name: str,
    g: oplib.Tensor,
    p: oplib.Tensor,
    state1: oplib.Tensor,
    state2: Optional[oplib.Tensor],
    beta1: float,
    beta2: float,
    beta3: float,
    alpha: float,
    eps: float,
    step: int,
    lr: float,
    qmap1: oplib.Tensor,
    qmap2: Optional[oplib.Tensor],
    absmax1: oplib.Tensor,
    absmax2: Optional[oplib.Tensor],
    weight_decay: float,
    gnorm_scale: float,
    skip_zeros=False,
) -> None:
    oplib._check(
        g.numel() == p.numel(),
        lambda: f"g and p must have the same number of elements, got {g.numel()} and {p.numel()}",
    )
    compute_dtypes = [oplib.float16, oplib.bfloat16, oplib.float32]

    oplib._check(
        g.dtype in compute_dtypes,
        lambda: f"g must be bfloat16, float16, or float32, got {g.dtype}",
    )
    oplib._check(
        g.dtype == p.dtype,
        lambda: (
            f"Expected all tensors to have the same dtype, got g.dtype={g.dtype}, p.dtype={p.dtype}"
        ),
    )
    oplib._check(
        state1.dtype == oplib.uint8,
        lambda: f"state1 must be uint8, got {state1.dtype}",
    )
    oplib._check(
        qmap1.dtype == absmax1.dtype == oplib.float32,
        lambda: (
            f"Expected qmap1 and absmax1 to be float32, got qmap1.dtype={qmap1.dtype}, absmax1.dtype={absmax1.dtype}"
        ),
    )
    if state2 is not None:
        assert qmap2 is not None and absmax2 is not None
        oplib._check(
            state2.dtype == oplib.uint8,
            lambda: f"state2 must be uint8, got {state2.dtype}",
        )
        oplib._check(
            qmap2.dtype == absmax2.dtype == oplib.float32,
            lambda: (
                f"Expected qmap2 and absmax2 to be float32, got qmap2.dtype={qmap2.dtype}, absmax2.dtype={absmax2.dtype}"
            ),
        )


# --- bitsandbytes/backends/default/ops.py, in numpy, for cpu -----------------------------


@register_kernel("bitsandbytes::int8_mm_dequant", "cpu")
def _(
    A: np.ndarray,
    row_stats: np.ndarray,
    col_stats: np.ndarray,
    dtype: Optional[Any] = None,
    bias: Optional[np.ndarray] = None,
) -> np.ndarray:
    if A.dtype != np.int32:
        raise ValueError(f"A must be int32, got {A.dtype}")
    if row_stats.dtype != np.float32:
        raise ValueError(f"row_stats must be float32, got {row_stats.dtype}")
    if col_stats.dtype != np.float32:
        raise ValueError(f"col_stats must be float32, got {col_stats.dtype}")

    A_calc = A.reshape(-1, A.shape[-1])
    row_stats = row_stats.reshape(-1)[:, None]
    col_stats = col_stats.reshape(-1)[None, :]

    # torch: int32 * float32 is float32 (numpy would make float64)
    out = A_calc.astype(np.float32) * (row_stats * col_stats) * np.float32(6.200124e-05)
    if bias is not None:
        out += bias

    return out.astype(dtype or np.float16)


@register_kernel("bitsandbytes::int8_mixed_scaled_mm", "cpu")
def _(
    A: np.ndarray,
    CA: np.ndarray,
    CB: np.ndarray,
    SCA: np.ndarray,
    SCB: np.ndarray,
    outlier_cols: Optional[np.ndarray] = None,
    bias: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    subB = None

    if outlier_cols is not None and outlier_cols.size:
        # Extract the inputs with outliers in original precision
        subA = np.ascontiguousarray(A[:, outlier_cols])

        # Dequantize the corresponding weight columns
        subB = (
            oplib.ops.bitsandbytes.int8_vectorwise_dequant.default(
                np.ascontiguousarray(CB[:, outlier_cols]), SCB
            )
            .astype(A.dtype)
            .T
        )
    else:
        subA = np.empty(0, dtype=A.dtype)

    # Int8 Matmul + Dequant + Bias
    output = oplib.ops.bitsandbytes.int8_scaled_mm.default(
        CA, CB, SCA, SCB, bias=bias, dtype=A.dtype
    )

    if subB is not None:
        # Add the outlier columns back to the output
        output = output + subA @ subB

    return output, subA


@register_kernel("bitsandbytes::int8_scaled_mm", "cpu")
def _(
    A: np.ndarray,
    B: np.ndarray,
    row_stats: np.ndarray,
    col_stats: np.ndarray,
    bias: Optional[np.ndarray] = None,
    dtype: Optional[Any] = None,
) -> np.ndarray:
    out_i32 = oplib.ops.bitsandbytes.int8_linear_matmul.default(A, B)
    return oplib.ops.bitsandbytes.int8_mm_dequant.default(
        out_i32,
        row_stats,
        col_stats,
        dtype=dtype or np.float16,
        bias=bias,
    )


@register_kernel("bitsandbytes::int8_linear_matmul", "cpu")
def _(A: np.ndarray, B: np.ndarray):
    return _int8_linear_matmul_impl(A, B)


@register_kernel("bitsandbytes::int8_linear_matmul.out", "cpu")
def _(A: np.ndarray, B: np.ndarray, out: np.ndarray):
    if out.dtype != np.int32:
        raise ValueError(f"out must be int32, got {out.dtype}")
    _int8_linear_matmul_impl(A, B, out)


def _int8_linear_matmul_impl(A: np.ndarray, B: np.ndarray, out: Optional[np.ndarray] = None):
    # Naive implementation: perform matmul in fp32
    result = np.matmul(A.astype(np.float32), B.astype(np.float32).T).astype(np.int32)
    if out is not None:
        out[...] = result
        result = out
    return result


@register_kernel("bitsandbytes::int8_vectorwise_quant", "cpu")
def _(A: np.ndarray, threshold=0.0):
    rows = A.size // A.shape[-1]
    outlier_cols = None

    outlier_restore = None

    if threshold > 0.0:
        outliers = np.abs(A) >= threshold

        if outliers.any():
            # Determine which columns contain outliers, and zero out the
            # outliers ahead of quantization. We need to keep a backup of these
            # outliers to restore them after quantization.
            outlier_cols = np.argwhere(outliers.any(axis=0)).reshape(-1)
            outlier_restore = A[outliers].copy()
            A[outliers] = 0
        else:
            outlier_cols = np.empty(0, dtype=np.int64)

    # Get absmax for each row.
    row_stats = np.abs(A).max(axis=1).astype(np.float32)

    # Quantize row-wise to int8.
    out_row = np.round(A * (np.float32(127.0) / row_stats[:, None])).astype(np.int8)

    # Zero out values from outlier columns across all rows.
    if rows > 1 and outlier_cols is not None:
        out_row[:, outlier_cols] = 0

    # Restore outliers.
    if outlier_restore is not None:
        A[outliers] = outlier_restore

    return out_row, row_stats, outlier_cols


def _scale_blocks(A: np.ndarray, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    """The absmax scaling quantize_blockwise and quantize_4bit share upstream (written out
    twice there)."""
    A_flat = A.reshape(-1).astype(np.float32)
    n = A_flat.size
    rem = n % blocksize
    full = n - rem
    blocks = full // blocksize
    A_com = A_flat[:full].reshape(blocks, blocksize)
    absmax = np.abs(A_com).max(axis=-1, initial=0.0)
    scaled = np.clip(A_com * (1.0 / np.maximum(absmax, 1e-38).reshape(-1, 1)), -1, 1).reshape(-1)
    if rem:
        am = np.maximum(np.abs(A_flat[full:]).max(), np.float32(1e-38))
        absmax = np.concatenate([absmax, am[None]])
        scaled = np.concatenate([scaled, np.clip(A_flat[full:] / am, -1, 1)])
    return scaled.astype(np.float32), absmax.astype(np.float32)


@register_kernel("bitsandbytes::quantize_blockwise", "cpu")
def _(A: np.ndarray, code: np.ndarray, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    scaled, absmax = _scale_blocks(A, blocksize)
    bounds = (code[:-1] + code[1:]) / 2  # code is always sorted (same assumption as CUDA kernel)
    q = np.searchsorted(bounds, scaled, side="left").astype(np.uint8)
    return q.reshape(A.shape), absmax


def _dequantize_blockwise_compute(
    A_flat: np.ndarray, absmax: np.ndarray, code: np.ndarray, blocksize: int, dtype: Any
) -> np.ndarray:
    n = A_flat.size
    out = code[A_flat.astype(np.int64)]
    rem = n % blocksize
    if rem == 0:
        out = (out.reshape(-1, blocksize) * absmax.reshape(-1, 1)).reshape(n)
    else:
        full = n - rem
        blocks = full // blocksize
        out = np.concatenate(
            [
                (out[:full].reshape(blocks, blocksize) * absmax[:blocks].reshape(-1, 1)).reshape(
                    full
                ),
                out[full:] * absmax[blocks],
            ]
        )
    return out.astype(dtype)


@register_kernel("bitsandbytes::dequantize_blockwise", "cpu")
def _(
    A: np.ndarray, absmax: np.ndarray, code: np.ndarray, blocksize: int, dtype: Any
) -> np.ndarray:
    return _dequantize_blockwise_compute(A.reshape(-1), absmax, code, blocksize, dtype).reshape(
        A.shape
    )


_NF4_QUANT_TABLE = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
_FP4_QUANT_TABLE = np.array(
    [
        0.0000,
        0.0052,
        0.6667,
        1.0000,
        0.3333,
        0.5000,
        0.1667,
        0.2500,
        0.0000,
        -0.0052,
        -0.6667,
        -1.0000,
        -0.3333,
        -0.5000,
        -0.1667,
        -0.2500,
    ],
    dtype=np.float32,
)
CODE = {"nf4": _NF4_QUANT_TABLE, "fp4": _FP4_QUANT_TABLE}


def _get_4bit_code(quant_type: str) -> np.ndarray:
    return CODE[quant_type]


def _get_4bit_quantize_bounds(quant_type: str) -> tuple[np.ndarray, np.ndarray]:
    code = _get_4bit_code(quant_type)
    order = np.argsort(code, kind="stable")
    midpoints = (code[order[:-1]] + code[order[1:]]) / 2
    return midpoints, order  # NF4 order is identity (sorted); FP4 needs remap


@register_kernel("bitsandbytes::quantize_4bit", "cpu")
def _(
    A: np.ndarray, blocksize: int, quant_type: str, quant_storage: Any
) -> tuple[np.ndarray, np.ndarray]:
    bounds, order = _get_4bit_quantize_bounds(quant_type)
    scaled, absmax = _scale_blocks(A, blocksize)
    if scaled.size % 2:
        scaled = np.pad(scaled, (0, 1))
    q = np.searchsorted(bounds, scaled, side="left")
    if quant_type != "nf4":
        q = order[q]
    q8 = q.astype(np.uint8)
    packed = ((q8[::2] << 4) | q8[1::2])[:, None]
    if quant_storage != np.uint8:
        packed = packed.reshape(-1).view(quant_storage)[:, None]
    return packed, absmax


def _dequantize_4bit_compute(
    A_flat: np.ndarray,
    absmax: np.ndarray,
    code: np.ndarray,
    blocksize: int,
    shape: Sequence[int],
    dtype: Any,
) -> np.ndarray:
    n = prod(shape)
    out_dq = np.empty(A_flat.shape[0] * 2, dtype=np.int32)
    out_dq[1::2] = A_flat & 0xF
    out_dq[::2] = A_flat >> 4
    out_dq = code[out_dq][:n]  # stays fp32, matches C++ / CUDA behavior
    rem = n % blocksize
    if rem:
        full = n - rem
        blocks = full // blocksize
        out = np.empty(n, dtype=np.float32)
        out[:full] = (
            out_dq[:full].reshape(-1, blocksize) * absmax[:blocks].reshape(-1, 1)
        ).reshape(full)
        out[full:] = out_dq[full:] * absmax[blocks]
    else:
        out = (out_dq.reshape(-1, blocksize) * absmax.reshape(-1, 1)).reshape(n)
    return out.reshape(-1, *shape[1:]).astype(dtype)


@register_kernel("bitsandbytes::dequantize_4bit", "cpu")
def _(
    A: np.ndarray,
    absmax: np.ndarray,
    blocksize: int,
    quant_type: str,
    shape: Sequence[int],
    dtype: Any,
) -> np.ndarray:
    if A.dtype != np.uint8:
        A = A.view(np.uint8)
    code = _get_4bit_code(quant_type)
    return _dequantize_4bit_compute(A.reshape(-1), absmax, code, blocksize, shape, dtype)


@register_kernel("bitsandbytes::gemv_4bit", "cpu")
def _(
    A: np.ndarray,
    B: np.ndarray,
    shapeB: Sequence[int],
    absmax: np.ndarray,
    code: np.ndarray,
    blocksize: int,
) -> np.ndarray:
    # Applied from dequantize_4bit
    quant_type = "fp4" if code[1] > 0 else "nf4"
    B_dq = oplib.ops.bitsandbytes.dequantize_4bit.default(
        B, absmax, blocksize, quant_type, shapeB, A.dtype
    )

    return A @ B_dq.T  # torch.nn.functional.linear(A, B_dq, bias=None)


def _gemm_4bit_default_impl(
    A: np.ndarray,
    B: np.ndarray,
    shapeB: Sequence[int],
    absmax: np.ndarray,
    blocksize: int,
    quant_type: str,
    bias: Optional[np.ndarray] = None,
    absmax_8bit: Optional[np.ndarray] = None,
    absmax_code: Optional[np.ndarray] = None,
    absmax_offset: Optional[np.ndarray] = None,
) -> np.ndarray:
    # When nested, per-block scale = absmax_code[absmax_8bit[i]] * absmax[i // 256] + absmax_offset
    if absmax_8bit is not None:
        absmax = (
            oplib.ops.bitsandbytes.dequantize_blockwise.default(
                absmax_8bit, absmax, absmax_code, 256, np.float32
            )
            + absmax_offset
        )
    B_dq = oplib.ops.bitsandbytes.dequantize_4bit.default(
        B, absmax, blocksize, quant_type, shapeB, A.dtype
    )
    out = A @ B_dq.T  # torch.nn.functional.linear(A, B_dq, bias)
    return out if bias is None else out + bias


register_kernel("bitsandbytes::gemm_4bit", "cpu")(_gemm_4bit_default_impl)


MOMENTUM = 0
RMSPROP = 1
ADAGRAD = 2
ADAM = 3
# LION should be larger than MOMENTUM, RMSPROP, ADAGRAD due to comparison in kernels
LION = 4
ADEMAMIX = 5

name2optimizer_id = {
    "momentum": MOMENTUM,
    "lars": MOMENTUM,
    "rmsprop": RMSPROP,
    "adagrad": ADAGRAD,
    "adam": ADAM,
    "lamb": ADAM,
    "lion": LION,
    "ademamix": ADEMAMIX,
}


def _optimizer_precondition_32bit(
    g: np.ndarray,
    p: np.ndarray,
    state1: np.ndarray,
    state2: Optional[np.ndarray],
    unorm_vec: np.ndarray,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    step: int,
    lr: float,
    gnorm_scale: float,
    optimizer_id: int,
) -> None:
    """Preprocessing optimizer, computing update norm"""

    g_vals = gnorm_scale * g

    if optimizer_id == 3:  # ADAM
        assert state2 is not None
        correction1 = 1.0 / (1.0 - beta1**step)
        correction2 = 1.0 / (1.0 - beta2**step)

        s1_vals = state1 * beta1 + (1.0 - beta1) * g_vals
        s2_vals = state2 * beta2 + (1.0 - beta2) * g_vals * g_vals

        s1_vals = s1_vals * correction1
        s2_vals = s2_vals * correction2

        update_vals = s1_vals / (np.sqrt(s2_vals) + eps)
        update_norm = update_vals * update_vals

    elif optimizer_id == 5:  # ADEMAMIX
        update_norm = state1

    elif optimizer_id == 0:  # MOMENTUM
        if step == 1:
            s1_vals = g_vals
        else:
            s1_vals = state1 * beta1 + g_vals
        update_norm = s1_vals * s1_vals

    elif optimizer_id == 4:  # LION
        s1_vals = state1 * beta2 + (1.0 - beta2) * g_vals
        update_norm = s1_vals

    elif optimizer_id == 1:  # RMSPROP
        s1_vals = state1 * beta1 + (1.0 - beta1) * g_vals * g_vals
        update_vals = g_vals / (np.sqrt(s1_vals) + eps)
        update_norm = update_vals * update_vals

    else:  # ADAGRAD
        s1_vals = state1 + g_vals * g_vals
        update_vals = g_vals / (np.sqrt(s1_vals) + eps)
        update_norm = update_vals * update_vals

    total_norm = np.sum(update_norm)
    unorm_vec += total_norm


def _optimizer_update_32bit(
    g: np.ndarray,
    p: np.ndarray,
    state1: np.ndarray,
    state2: Optional[np.ndarray],
    unorm_vec: Optional[np.ndarray],
    max_unorm: float,
    param_norm: float,
    beta1: float,
    beta2: float,
    beta3: float,
    alpha: float,
    eps: float,
    weight_decay: float,
    step: int,
    lr: float,
    gnorm_scale: float,
    optimizer_id: int,
) -> None:
    """Unified optimizer update kernel"""

    p_vals = p.astype(np.float32)
    g_vals = (gnorm_scale * g).astype(np.float32)
    # Coupled (L2) weight decay for MOMENTUM/RMSPROP/ADAGRAD; LION's is decoupled (below).
    if optimizer_id in [0, 1, 2] and weight_decay > 0.0:
        g_vals = g_vals + p_vals * weight_decay

    update_scale = 1.0
    if max_unorm > 0.0:
        assert unorm_vec is not None
        current_unorm = np.sqrt(unorm_vec)
        if optimizer_id in [0, 1, 2, 4]:  # 1-state optimizers
            if current_unorm > max_unorm * param_norm + eps:
                update_scale = (max_unorm * param_norm + eps) / current_unorm
        else:  # 2-state optimizers
            if current_unorm > max_unorm * param_norm:
                update_scale = (max_unorm * param_norm) / current_unorm

    if optimizer_id == 3:  # ADAM
        assert state2 is not None
        s1_vals = state1 * beta1 + (1.0 - beta1) * g_vals
        s2_vals = state2 * beta2 + (1.0 - beta2) * g_vals * g_vals

        correction1 = 1.0 - beta1**step
        correction2 = sqrt(1.0 - beta2**step)
        step_size = -lr * correction2 / correction1

        if weight_decay > 0.0:
            p_vals = p_vals * (1.0 - lr * weight_decay)

        update_val = update_scale * step_size * (s1_vals / (np.sqrt(s2_vals) + eps * correction2))
        p_vals = p_vals + update_val

        state1[...] = s1_vals
        state2[...] = s2_vals

    elif optimizer_id == 5:  # ADEMAMIX
        assert state2 is not None
        s1_vals = state1[0]
        s3_vals = state1[1]
        s2_vals = state2

        m1 = s1_vals * beta1 + (1.0 - beta1) * g_vals
        m2 = s3_vals * beta3 + (1.0 - beta3) * g_vals
        nu = s2_vals * beta2 + (1.0 - beta2) * g_vals * g_vals

        correction1 = 1.0 - beta1**step
        correction2 = sqrt(1.0 - beta2**step)

        if weight_decay > 0.0:
            p_vals = p_vals * (1.0 - lr * weight_decay)

        mixed_momentum = (m1 / correction1) + (alpha * m2)
        adaptive_term = (np.sqrt(nu) / correction2) + eps
        p_vals = p_vals - lr * (mixed_momentum / adaptive_term)

        state1[0] = m1
        state1[1] = m2
        state2[...] = nu

    elif optimizer_id == 0:  # MOMENTUM
        if step == 1:
            s1_vals = g_vals
        else:
            s1_vals = state1 * beta1 + g_vals

        update_val = update_scale * (-lr * s1_vals)
        p_vals = p_vals + update_val

        state1[...] = s1_vals

    elif optimizer_id == 4:  # LION
        if weight_decay > 0.0:
            p_vals = p_vals * (1.0 - lr * weight_decay)

        momentum_update = state1 * beta1 + (1.0 - beta1) * g_vals
        update_val = update_scale * lr * np.sign(momentum_update)
        p_vals = p_vals - update_val

        s1_vals = state1 * beta2 + (1.0 - beta2) * g_vals
        state1[...] = s1_vals

    elif optimizer_id == 1:  # RMSPROP
        s1_vals = state1 * beta1 + (1.0 - beta1) * g_vals * g_vals
        update_val = update_scale * lr * g_vals / (np.sqrt(s1_vals) + eps)
        p_vals = p_vals - update_val

        state1[...] = s1_vals

    elif optimizer_id == 2:  # ADAGRAD
        s1_vals = state1 + g_vals * g_vals
        update_val = lr * g_vals / (np.sqrt(s1_vals) + eps)
        p_vals = p_vals - update_val

        state1[...] = s1_vals

    p[...] = p_vals


@register_kernel("bitsandbytes::optimizer_update_32bit", "cpu")
def _(
    optimizer_name: str,
    g: np.ndarray,
    p: np.ndarray,
    state1: np.ndarray,
    state2: Optional[np.ndarray],
    unorm_vec: Optional[np.ndarray],
    max_unorm: float,
    param_norm: float,
    beta1: float,
    beta2: float,
    beta3: float,
    alpha: float,
    eps: float,
    weight_decay: float,
    step: int,
    lr: float,
    gnorm_scale: float = 1.0,
    skip_zeros=False,
) -> None:
    """32-bit optimizer (upstream: PyTorch with @torch.compile; here numpy)."""
    if skip_zeros:
        raise NotImplementedError("skip_zeros is not supported yet")

    optimizer_id = name2optimizer_id[optimizer_name]
    update = (
        g, p, state1, state2, unorm_vec, max_unorm, param_norm, beta1, beta2, beta3, alpha,
        eps, weight_decay, step, lr, gnorm_scale, optimizer_id,
    )  # fmt: skip

    if optimizer_name == "lion":
        _optimizer_update_32bit(*update)

        if max_unorm > 0.0:
            assert unorm_vec is not None
            unorm_vec[...] = 0
            _optimizer_precondition_32bit(
                g, p, state1, state2, unorm_vec, beta1, beta2, eps, weight_decay, step, lr,
                gnorm_scale, optimizer_id,
            )  # fmt: skip
    else:
        if max_unorm > 0.0:
            assert unorm_vec is not None
            unorm_vec[...] = 0
            _optimizer_precondition_32bit(
                g, p, state1, state2, unorm_vec, beta1, beta2, eps, weight_decay, step, lr,
                gnorm_scale, optimizer_id,
            )  # fmt: skip

        _optimizer_update_32bit(*update)
