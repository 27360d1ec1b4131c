# ruff: noqa: E501, UP045, RUF059  (upstream's schemas, messages and unpacking, as written)
# Ported from FBGEMM_GPU (https://github.com/pytorch/FBGEMM), BSD-3-Clause license, at commit
# 71d6f8b229d964e61cac24df9bbd2ffcc4b4d378; 16 sparse ops:
# - the schemas, from fbgemm_gpu/src/sparse_ops/sparse_ops_cpu.cpp,
#   sparse_async_cumsum.cpp and jagged_tensor_ops/jagged_tensor_ops_cpu.cpp
#   (TORCH_LIBRARY_FRAGMENT(fbgemm, m) { m.def(...) }), tags and text as written;
# - their CPU kernels (TORCH_LIBRARY_IMPL(fbgemm, CPU, m), DISPATCH_TO_CPU), the C++
#   rewritten in numpy loop for loop where the order matters (block bucketize), vectorised
#   where it does not;
# - the C++ Meta kernels of the three cumsums (sparse_ops_meta.cpp) and of get_source_mask
#   (jagged_tensor_ops_meta.cpp), rewritten in Python, registered for "Meta";
# - fbgemm_gpu/fbgemm_gpu/sparse_ops.py: the fake kernels (impl_abstract / register_fake),
#   the autograd of permute_2D_sparse_data (register_autograd with setup_context) and the
#   _setup() function that registers them, as written.
#
# Changes from the original, every one of them:
# - C++ `TORCH_LIBRARY_FRAGMENT(fbgemm, m)` -> `oplib.Library("fbgemm", "FRAGMENT")`;
#   `TORCH_LIBRARY_IMPL(fbgemm, CPU/Meta, m)` -> `oplib.Library("fbgemm", "IMPL", "CPU"/"Meta")`;
#   `m.def(schema, {PT2_COMPLIANT_TAG})` -> `lib.define(schema, tags=oplib.Tag.pt2_compliant_tag)`;
#   TORCH_CHECK -> `oplib._check` (a RuntimeError, as TORCH_CHECK's c10::Error), with the C++
#   message.
# - sparse_ops.py: imports (torch -> oplib_core as oplib, torch.Tensor -> oplib.Tensor, the
#   fbgemm_gpu module loading and pytree dropped: this file is the "library");
#   torch._C._dispatch_has_kernel_for_dispatch_key(op_name, key) ->
#   `oplib.ops.<ns>.<op>.default.has_kernel(key)`; `key not in torch.library._impls` (a
#   private set of torch's) -> not asked (this module registers once);
#   torch.empty/empty_like -> oplib.empty/empty_like, torch.library.get_ctx -> oplib.get_ctx,
#   torch._check(_is_size) -> oplib._check(_is_size), torch.ops.fbgemm -> oplib.ops.fbgemm.
# - only the ops listed in _setup below are ported (upstream registers 60 more there); the
#   unregistered permute_2D_sparse_data_input1D_{setup_context,backward} are not.
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

import oplib_core as oplib
from oplib_core import Tensor

PT2_COMPLIANT_TAG = oplib.Tag.pt2_compliant_tag

# --- TORCH_LIBRARY_FRAGMENT(fbgemm, m): the schemas --------------------------------------

lib = oplib.Library("fbgemm", "FRAGMENT")
# sparse_ops_cpu.cpp
lib.define(
    "permute_2D_sparse_data(Tensor permute, Tensor lengths, Tensor values, Tensor? weights=None, SymInt? permuted_lengths_sum=None) -> (Tensor, Tensor, Tensor?)",
    tags=PT2_COMPLIANT_TAG,
)
lib.define(
    "permute_2D_sparse_data_input1D(Tensor permute, Tensor lengths, Tensor values, SymInt stride, Tensor? weights=None, SymInt? permuted_lengths_sum=None) -> (Tensor, Tensor, Tensor?)"
)
lib.define(
    "permute_1D_sparse_data(Tensor permute, Tensor lengths, Tensor values, Tensor? weights=None, SymInt? permuted_lengths_sum=None) -> (Tensor, Tensor, Tensor?)",
    tags=PT2_COMPLIANT_TAG,
)
lib.define("invert_permute(Tensor permute) -> Tensor")
lib.define(
    "expand_into_jagged_permute(Tensor permute, Tensor input_offset, Tensor output_offset, SymInt output_size) -> Tensor",
    tags=PT2_COMPLIANT_TAG,
)
lib.define(
    "populate_bucketized_permute(Tensor lengths, Tensor bucketized_lengths, Tensor bucket_mapping) -> Tensor"
)
lib.define(
    "block_bucketize_sparse_features(Tensor lengths, Tensor indices, bool bucketize_pos, bool sequence, Tensor block_sizes, SymInt my_size, Tensor? weights=None, Tensor? batch_size_per_feature=None, SymInt max_B= -1, Tensor[]? block_bucketize_pos=None, bool keep_orig_idx=False, Tensor? total_num_blocks=None, Tensor? keep_orig_idx_per_feature=None) -> (Tensor, Tensor, Tensor?, Tensor?, Tensor?)"
)
lib.define(
    "segment_sum_csr(SymInt batch_size, Tensor csr_seg, Tensor values) -> Tensor",
    tags=PT2_COMPLIANT_TAG,
)
lib.define("lengths_range(Tensor t_in, SymInt[]? shape=None) -> Tensor")
lib.define(
    "permute_sparse_features(Tensor permute, Tensor lengths, Tensor indices, Tensor? weights=None) -> (Tensor, Tensor, Tensor?)",
    tags=PT2_COMPLIANT_TAG,
)
# sparse_async_cumsum.cpp
lib.define("asynchronous_exclusive_cumsum(Tensor t_in) -> Tensor", tags=PT2_COMPLIANT_TAG)
lib.define("asynchronous_inclusive_cumsum(Tensor t_in) -> Tensor", tags=PT2_COMPLIANT_TAG)
lib.define("asynchronous_complete_cumsum(Tensor t_in) -> Tensor", tags=PT2_COMPLIANT_TAG)
# jagged_tensor_ops_cpu.cpp
lib.define(
    "masked_select_jagged_1d(Tensor values, Tensor lengths, Tensor mask, bool? check_length = False) -> (Tensor, Tensor)",
    tags=PT2_COMPLIANT_TAG,
)
lib.define("get_source_mask(Tensor num_sources, Tensor num_targets, SymInt output_size) -> Tensor")
lib.define("repeat_arange(Tensor lengths) -> Tensor")


# --- TORCH_LIBRARY_IMPL(fbgemm, CPU, m): the C++ CPU kernels in numpy ---------------------

cpu = oplib.Library("fbgemm", "IMPL", "CPU")


def DISPATCH_TO_CPU(name: str, function: Callable[..., Any]) -> None:
    cpu.impl(name, function)


def _exclusive(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=lengths.dtype)
    np.cumsum(lengths.reshape(-1)[:-1], out=out[1:])
    return out


def _gather_segments(
    values: np.ndarray, starts: np.ndarray, lens: np.ndarray, size: Optional[int] = None
) -> np.ndarray:
    """values[starts[i] : starts[i] + lens[i]] for each i, concatenated (into ``size``
    elements when given, as the kernels' preallocated output)."""
    total = int(lens.sum())
    out_offsets = np.zeros(lens.size, dtype=np.int64)
    np.cumsum(lens[:-1], out=out_offsets[1:])
    positions = np.repeat(starts.astype(np.int64) - out_offsets, lens) + np.arange(total)
    gathered = values[positions]
    if size is None or size == total:
        return gathered
    out = np.zeros((size, *values.shape[1:]), dtype=values.dtype)
    out[: min(size, total)] = gathered[:size]
    return out


def permute_2D_sparse_data_cpu(
    permute: np.ndarray,
    lengths: np.ndarray,
    indices: np.ndarray,
    weights: Optional[np.ndarray] = None,
    permuted_lengths_sum: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    oplib._check(lengths.ndim == 2, lambda: "Expected lengths.dim() == 2")
    T, B = permute.size, lengths.shape[1]
    permuted_lengths = lengths[permute.astype(np.int32)]
    input_offsets = _exclusive(lengths).reshape(lengths.shape)
    starts = input_offsets[permute].reshape(-1)
    lens = permuted_lengths.reshape(-1).astype(np.int64)
    assert permuted_lengths.shape == (T, B)
    permuted_indices = _gather_segments(indices, starts, lens, permuted_lengths_sum)
    permuted_weights = None
    if weights is not None:
        permuted_weights = _gather_segments(weights, starts, lens, permuted_lengths_sum)
    return permuted_lengths, permuted_indices, permuted_weights


def permute_2D_sparse_data_input1D_cpu(
    permute: np.ndarray,
    lengths: np.ndarray,
    indices: np.ndarray,
    stride: int,
    weights: Optional[np.ndarray] = None,
    permuted_lengths_sum: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    permuted_lengths, permuted_indices, permuted_weights = permute_2D_sparse_data_cpu(
        permute, lengths.reshape(-1, stride), indices, weights, permuted_lengths_sum
    )
    return permuted_lengths.reshape(-1), permuted_indices, permuted_weights


def permute_1D_sparse_data_cpu(
    permute: np.ndarray,
    lengths: np.ndarray,
    indices: np.ndarray,
    weights: Optional[np.ndarray] = None,
    permuted_lengths_sum: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    permuted_lengths = lengths[permute]
    starts = _exclusive(lengths)[permute]
    lens = permuted_lengths.astype(np.int64)
    permuted_indices = _gather_segments(indices, starts, lens, permuted_lengths_sum)
    permuted_weights = None
    if weights is not None:
        permuted_weights = _gather_segments(weights, starts, lens, permuted_lengths_sum)
    return permuted_lengths, permuted_indices, permuted_weights


def invert_permute_cpu(permute: np.ndarray) -> np.ndarray:
    inversed_permute = np.empty_like(permute)
    inversed_permute[permute] = np.arange(permute.size, dtype=permute.dtype)
    return inversed_permute


def expand_into_jagged_permute_cpu(
    permute: np.ndarray, input_offsets: np.ndarray, output_offsets: np.ndarray, output_size: int
) -> np.ndarray:
    oplib._check(permute.size > 0, lambda: "Expected permute.numel() > 0")
    oplib._check(
        permute.size == input_offsets.size - 1,
        lambda: "Expected permute.numel() == input_offsets.numel() - 1",
    )
    oplib._check(
        permute.size == output_offsets.size - 1,
        lambda: "Expected permute.numel() == output_offsets.numel() - 1",
    )
    output_permute = np.empty(output_size, dtype=input_offsets.dtype)
    for t in range(permute.size):
        permute_length = output_offsets[t + 1] - output_offsets[t]
        input_start = input_offsets[permute[t]]
        output_start = output_offsets[t]
        output_permute[output_start : output_start + permute_length] = input_start + np.arange(
            permute_length
        )
    return output_permute


def populate_bucketized_permute_cpu(
    lengths: np.ndarray, bucketized_lengths: np.ndarray, bucket_mapping: np.ndarray
) -> np.ndarray:
    bucketized_permute = np.empty_like(bucket_mapping)
    offsets = asynchronous_complete_cumsum_cpu(lengths)
    bucketized_offsets = asynchronous_complete_cumsum_cpu(bucketized_lengths)
    length_size = lengths.size
    for i in range(length_size):
        for j in range(lengths[i]):
            index = offsets[i] + j
            bucket = bucket_mapping[index]
            bucketized_permute[index] = bucketized_offsets[bucket * length_size + i]
            bucketized_offsets[bucket * length_size + i] += 1
    return bucketized_permute


def _block_bucketize_sparse_features_cpu(
    lengths: np.ndarray,
    indices: np.ndarray,
    bucketize_pos: bool,
    sequence: bool,
    block_sizes: np.ndarray,
    total_num_blocks: Optional[np.ndarray],
    my_size: int,
    weights: Optional[np.ndarray],
    batch_size_per_feature: Optional[np.ndarray],
    block_bucketize_pos: Optional[Sequence[np.ndarray]],
    keep_orig_idx: bool,
    keep_orig_idx_per_feature: Optional[np.ndarray],
) -> tuple[np.ndarray, ...]:
    """_block_bucketize_sparse_features_cpu_kernel, loop for loop (without the bucket
    mapping of the inference variant)."""
    if total_num_blocks is not None and not block_bucketize_pos:
        oplib._check(
            bool((total_num_blocks % my_size == 0).all()),
            lambda: "total_num_blocks must be divisible by my_size",
        )
    lengths_size = lengths.size
    new_lengths = np.zeros(lengths_size * my_size, dtype=lengths.dtype)
    new_indices = np.empty_like(indices)
    new_weights = None if weights is None else np.empty_like(weights)
    new_pos = np.empty_like(indices) if bucketize_pos else None
    unbucketize_permute = np.empty(indices.size, dtype=indices.dtype) if sequence else None
    T = block_sizes.size
    B = lengths_size // T
    variable_batch_size = batch_size_per_feature is not None
    variable_bucket_sizes = bool(block_bucketize_pos)
    bits = 8 * indices.dtype.itemsize  # the C++ reads indices as unsigned (uindex_t)
    offsets = np.zeros(lengths_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    oplib._check(
        offsets[lengths_size] == indices.size,
        lambda: (
            f"offsets_data[lengths_size] ({offsets[lengths_size]}) != indices.numel() ({indices.size})"
        ),
    )
    lower_bounds = [0] * indices.size

    def feature(t: int) -> tuple[int, int, int, int, int, Any]:
        blk_size = int(block_sizes[t])
        cur_batch_size = int(batch_size_per_feature[t]) if variable_batch_size else B  # type: ignore[index]
        local_num_blks = 1 if total_num_blocks is None else int(total_num_blocks[t]) // my_size
        global_num_blks = my_size if total_num_blocks is None else int(total_num_blocks[t])
        bucketize_offset = block_bucketize_pos[t] if variable_bucket_sizes else None  # type: ignore[index]
        return (
            blk_size, cur_batch_size, local_num_blks, global_num_blks,
            blk_size * global_num_blks, bucketize_offset,
        )  # fmt: skip

    # count nonzeros
    cur_offset = 0
    for t in range(T):
        blk_size, cur_batch_size, local_num_blks, global_num_blks, global_idx_size, bpos = feature(
            t
        )
        local_idx_size = blk_size * local_num_blks
        for b in range(cur_batch_size):
            b_t = (cur_offset if variable_batch_size else t * B) + b
            for i in range(offsets[b_t], offsets[b_t + 1]):
                idx = int(indices[i]) % (1 << bits)
                if variable_bucket_sizes:
                    if blk_size == 0:
                        idx = (idx % global_num_blks) * int(bpos[-1]) // global_num_blks
                    lb = int(np.searchsorted(bpos, idx, side="right")) - 1
                    lower_bounds[i] = lb
                    p = lb if lb < my_size else idx % my_size
                else:
                    p = (
                        idx // local_idx_size
                        if idx < global_idx_size
                        else (idx % global_num_blks) // local_num_blks
                    )
                new_lengths[p * lengths_size + b_t] += 1
        cur_offset += cur_batch_size

    # bucketize nonzeros
    new_offsets = np.zeros(lengths_size * my_size + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=new_offsets[1:])
    cur_offset = 0
    for t in range(T):
        blk_size, cur_batch_size, local_num_blks, global_num_blks, global_idx_size, bpos = feature(
            t
        )
        local_idx_size = blk_size * local_num_blks
        keep_idx = keep_orig_idx
        if keep_orig_idx_per_feature is not None:
            keep_idx = bool(keep_orig_idx_per_feature[t])
        for b in range(cur_batch_size):
            b_t = (cur_offset if variable_batch_size else t * B) + b
            rowstart = offsets[b_t]
            for i in range(rowstart, offsets[b_t + 1]):
                idx = int(indices[i]) % (1 << bits)
                if variable_bucket_sizes:
                    lb = lower_bounds[i]
                    p = lb if lb < my_size else idx % my_size
                    if keep_idx:
                        new_idx = idx
                    elif blk_size == 0:
                        new_idx = idx // global_num_blks
                    elif lb < my_size:
                        new_idx = idx - int(bpos[lb])
                    else:
                        new_idx = idx // my_size
                else:
                    p = (
                        idx // local_idx_size
                        if idx < global_idx_size
                        else (idx % global_num_blks) // local_num_blks
                    )
                    if keep_idx:
                        new_idx = idx
                    elif idx < global_idx_size:
                        new_idx = idx % local_idx_size
                    else:
                        new_idx = idx // global_num_blks
                pos = new_offsets[p * lengths_size + b_t]
                new_indices[pos] = new_idx
                if unbucketize_permute is not None:
                    unbucketize_permute[i] = pos
                new_offsets[p * lengths_size + b_t] += 1
                if new_weights is not None:
                    assert weights is not None
                    new_weights[pos] = weights[i]
                if new_pos is not None:
                    new_pos[pos] = i - rowstart
        cur_offset += cur_batch_size
    return new_lengths, new_indices, new_weights, new_pos, unbucketize_permute


def block_bucketize_sparse_features_cpu(
    lengths: np.ndarray,
    indices: np.ndarray,
    bucketize_pos: bool,
    sequence: bool,
    block_sizes: np.ndarray,
    my_size: int,
    weights: Optional[np.ndarray] = None,
    batch_size_per_feature: Optional[np.ndarray] = None,
    max_B: int = -1,
    block_bucketize_pos: Optional[Sequence[np.ndarray]] = None,
    keep_orig_idx: bool = False,
    total_num_blocks: Optional[np.ndarray] = None,
    keep_orig_idx_per_feature: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, ...]:
    return _block_bucketize_sparse_features_cpu(
        lengths, indices, bucketize_pos, sequence, block_sizes, total_num_blocks, my_size,
        weights, batch_size_per_feature, block_bucketize_pos, keep_orig_idx,
        keep_orig_idx_per_feature,
    )  # fmt: skip


def segment_sum_csr_cpu(batch_size: int, csr_seg: np.ndarray, values: np.ndarray) -> np.ndarray:
    output = np.empty(csr_seg.size - 1, dtype=values.dtype)
    for i in range(csr_seg.size - 1):
        seg_start = csr_seg[i] * batch_size
        seg_end = csr_seg[i + 1] * batch_size
        output[i] = values[seg_start:seg_end].sum(dtype=values.dtype)
    return output


def lengths_range(t_in: np.ndarray, shape: Optional[Sequence[int]] = None) -> np.ndarray:
    oplib._check(t_in.ndim == 1, lambda: f"Expected t_in.dim() == 1, got {t_in.ndim}")
    output_size = math.prod(shape) if shape is not None else int(t_in.sum())
    output = np.empty(output_size, dtype=t_in.dtype)
    offset = 0
    for length in t_in.tolist():
        oplib._check(
            output_size - length >= offset, lambda: "Expected (output_size - len) >= offset"
        )
        output[offset : offset + length] = np.arange(length)
        offset += length
    return output


def permute_sparse_features_cpu(
    permute: np.ndarray,
    lengths: np.ndarray,
    indices: np.ndarray,
    weights: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    oplib._check(
        lengths.dtype == indices.dtype,
        lambda: "lengths and indices must have the same type",
    )
    oplib._check(
        lengths.ndim == 2,
        lambda: (
            "The dimension of lengths tensor should be equal to 2 to correctly infer number of features and batch size."
        ),
    )
    return permute_2D_sparse_data_cpu(permute, lengths, indices, weights)


def asynchronous_exclusive_cumsum_cpu(t_in: np.ndarray) -> np.ndarray:
    return _exclusive(t_in).reshape(t_in.shape)


def asynchronous_inclusive_cumsum_cpu(t_in: np.ndarray) -> np.ndarray:
    return np.cumsum(t_in.reshape(-1), dtype=t_in.dtype).reshape(t_in.shape)


def asynchronous_complete_cumsum_cpu(t_in: np.ndarray) -> np.ndarray:
    num_dims = t_in.ndim
    oplib._check(num_dims == 1 or num_dims == 2, lambda: "Expected num_dims == 1 || num_dims == 2")
    rows = t_in.reshape(1 if num_dims == 1 else t_in.shape[0], -1)
    out = np.zeros((rows.shape[0], rows.shape[1] + 1), dtype=t_in.dtype)
    np.cumsum(rows, axis=1, out=out[:, 1:])
    return out.reshape(-1) if num_dims == 1 else out


def masked_select_jagged_1d(
    values: np.ndarray, lengths: np.ndarray, mask: np.ndarray, check_length: Optional[bool] = False
) -> tuple[np.ndarray, np.ndarray]:
    oplib._check(values.ndim == 1, lambda: "Expected values.dim() == 1")
    oplib._check(lengths.ndim == 1, lambda: "Expected lengths.dim() == 1")
    oplib._check(mask.ndim == 1, lambda: "Expected mask.dim() == 1")
    if check_length:
        oplib._check(
            mask.size == values.size,
            lambda: (
                f"mask and values should have the same numel, but got mask numel: {mask.size} values numel: {values.size}"
            ),
        )
    masked_values = values[mask]
    segment = np.repeat(np.arange(lengths.size), lengths)
    masked_lengths = np.bincount(segment, weights=mask[: segment.size], minlength=lengths.size)
    masked_lengths = masked_lengths.astype(lengths.dtype)
    return masked_values, masked_lengths


def get_source_mask_cpu(
    num_sources: np.ndarray, num_targets: np.ndarray, output_size: int
) -> np.ndarray:
    batch_size = num_sources.shape[0]
    oplib._check(
        num_targets.shape[0] == batch_size,
        lambda: "num_sources and num_targets must have the same batch size",
    )
    output = np.empty(output_size, dtype=np.bool_)
    offset = 0
    for n_sources, n_targets in zip(num_sources.tolist(), num_targets.tolist(), strict=True):
        output[offset : offset + n_sources] = True
        offset += n_sources
        output[offset : offset + n_targets] = False
        offset += n_targets
    return output


def repeat_arange_cpu(lengths: np.ndarray) -> np.ndarray:
    output_size = int(lengths.astype(np.int64).sum())
    if output_size < 0:
        raise ValueError(
            f"repeat_arange: output_size (sum of lengths) must be non-negative, got {output_size}. This typically indicates corrupted/negative lengths."
        )
    return lengths_range(lengths)


DISPATCH_TO_CPU("permute_2D_sparse_data", permute_2D_sparse_data_cpu)
DISPATCH_TO_CPU("permute_2D_sparse_data_input1D", permute_2D_sparse_data_input1D_cpu)
DISPATCH_TO_CPU("permute_1D_sparse_data", permute_1D_sparse_data_cpu)
DISPATCH_TO_CPU("invert_permute", invert_permute_cpu)
DISPATCH_TO_CPU("expand_into_jagged_permute", expand_into_jagged_permute_cpu)
DISPATCH_TO_CPU("populate_bucketized_permute", populate_bucketized_permute_cpu)
DISPATCH_TO_CPU("block_bucketize_sparse_features", block_bucketize_sparse_features_cpu)
DISPATCH_TO_CPU("segment_sum_csr", segment_sum_csr_cpu)
DISPATCH_TO_CPU("lengths_range", lengths_range)
DISPATCH_TO_CPU("permute_sparse_features", permute_sparse_features_cpu)
DISPATCH_TO_CPU("asynchronous_exclusive_cumsum", asynchronous_exclusive_cumsum_cpu)
DISPATCH_TO_CPU("asynchronous_inclusive_cumsum", asynchronous_inclusive_cumsum_cpu)
DISPATCH_TO_CPU("asynchronous_complete_cumsum", asynchronous_complete_cumsum_cpu)
DISPATCH_TO_CPU("masked_select_jagged_1d", masked_select_jagged_1d)
DISPATCH_TO_CPU("get_source_mask", get_source_mask_cpu)
DISPATCH_TO_CPU("repeat_arange", repeat_arange_cpu)


# --- TORCH_LIBRARY_IMPL(fbgemm, Meta, m): the C++ Meta kernels ----------------------------

meta = oplib.Library("fbgemm", "IMPL", "Meta")


def asynchronous_complete_cumsum_meta(t_in: Tensor) -> Tensor:
    num_dims = t_in.dim()
    oplib._check(num_dims == 1 or num_dims == 2, lambda: "Expected num_dims == 1 || num_dims == 2")
    if num_dims == 1:
        return oplib.zeros(t_in.numel() + 1, dtype=t_in.dtype, device=t_in.device)
    return oplib.zeros(t_in.size(0), t_in.size(1) + 1, dtype=t_in.dtype, device=t_in.device)


def asynchronous_exclusive_cumsum_meta(t_in: Tensor) -> Tensor:
    return oplib.zeros(t_in.shape, dtype=t_in.dtype, device=t_in.device)


def asynchronous_inclusive_cumsum_meta(t_in: Tensor) -> Tensor:
    return oplib.empty(t_in.shape, dtype=t_in.dtype, device=t_in.device)


def get_source_mask_meta_cpp(num_sources: Tensor, num_targets: Tensor, output_size: int) -> Tensor:
    batch_size = num_sources.numel()
    oplib._check(
        num_targets.numel() == batch_size,
        lambda: "num_sources and num_targets must have the same batch size",
    )
    return oplib.empty([output_size], dtype=oplib.bool_, device="meta")


meta.impl("asynchronous_inclusive_cumsum", asynchronous_inclusive_cumsum_meta)
meta.impl("asynchronous_exclusive_cumsum", asynchronous_exclusive_cumsum_meta)
meta.impl("asynchronous_complete_cumsum", asynchronous_complete_cumsum_meta)
meta.impl("get_source_mask", get_source_mask_meta_cpp)


# --- fbgemm_gpu/sparse_ops.py: fake kernels and autograd, as written ----------------------

impl_abstract = oplib.register_fake


def permute_2D_sparse_data_meta(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    # Functional (allocating) entry point; delegates to the shared
    # implementation with no pre-allocated output buffers.
    return permute_2D_sparse_preallocated_out_meta(
        permute, lengths, values, weights, permuted_lengths_sum
    )


def permute_2D_sparse_preallocated_out_meta(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
    permuted_lengths_out: Tensor | None = None,
    permuted_indices_out: Tensor | None = None,
    permuted_weights_out: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    oplib._check(lengths.dim() == 2, lambda: f"expected lengths.dim() == 2, got {lengths.dim()}")
    T = permute.numel()
    B = lengths.size(1)
    indices = values
    permuted_lengths = (
        permuted_lengths_out if permuted_lengths_out is not None else lengths.new_empty([T, B])
    )
    permuted_indices_size: Any = 0
    if permuted_lengths_sum is not None:
        permuted_indices_size = permuted_lengths_sum
    else:
        ctx = oplib.get_ctx()
        permuted_indices_size = ctx.new_dynamic_size()
    permuted_indices = (
        permuted_indices_out
        if permuted_indices_out is not None
        else indices.new_empty(permuted_indices_size)
    )
    permuted_weights = None
    if weights is not None:
        permuted_weights = (
            permuted_weights_out
            if permuted_weights_out is not None
            else weights.new_empty(permuted_indices_size)
        )
    return permuted_lengths, permuted_indices, permuted_weights


def permute_2D_sparse_data_input1D_meta(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    stride: int,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    oplib._check(lengths.dim() == 1, lambda: f"expected lengths.dim() == 1, got {lengths.dim()}")
    T = permute.numel()
    B = stride
    indices = values
    permuted_lengths = lengths.new_empty([T * B])
    permuted_indices_size: Any = 0
    if permuted_lengths_sum is not None:
        permuted_indices_size = permuted_lengths_sum
    else:
        ctx = oplib.get_ctx()
        permuted_indices_size = ctx.new_dynamic_size()
    permuted_indices = indices.new_empty(permuted_indices_size)
    permuted_weights = None
    if weights is not None:
        permuted_weights = weights.new_empty(permuted_indices_size)
    return permuted_lengths, permuted_indices, permuted_weights


def invert_permute_abstract(permute: Tensor) -> Tensor:
    return oplib.empty_like(permute)


def get_source_mask_meta(
    num_sources: Tensor, num_targets: Tensor, output_size: int | None = None
) -> Tensor:
    if output_size is None:
        ctx = oplib.get_ctx()
        output_size = ctx.new_dynamic_size()
    return oplib.empty([output_size], dtype=oplib.bool_)


def repeat_arange_meta(lengths: Tensor) -> Tensor:
    """Meta implementation for repeat_arange."""
    # Output size is data-dependent (sum of lengths).
    # For FakeTensors (used in torch.compile), we use dynamic sizing.
    # For actual meta tensors, we cannot determine the size so return empty.
    if lengths.device.type == "meta":
        # Actual meta tensors: return a zero-sized tensor as placeholder
        # since we cannot compute the data-dependent output size
        return oplib.empty([0], dtype=lengths.dtype, device=lengths.device)
    else:
        # FakeTensor context: use dynamic sizing for proper shape tracking
        ctx = oplib.get_ctx()
        output_size = ctx.new_dynamic_size()
        oplib._check_is_size(output_size)
        return oplib.empty([output_size], dtype=lengths.dtype, device=lengths.device)


def permute_2D_sparse_data_setup_context(ctx: Any, inputs: Any, output: Any) -> None:
    permute, lengths, values, weights, permuted_lengths_sum = inputs
    permuted_lengths, permuted_values, permuted_weights = output
    ctx.permute = permute
    ctx.permuted_lengths = permuted_lengths


def permute_2D_sparse_data_backward(
    ctx: Any, grad_lengths: Any, grad_values: Any, grad_weights: Any
) -> tuple[Any, ...]:
    inv_permute = oplib.ops.fbgemm.invert_permute(ctx.permute)
    permuted_grad_lengths, permuted_grad_values, permuted_grad_weights = (
        oplib.ops.fbgemm.permute_2D_sparse_data(
            inv_permute, ctx.permuted_lengths, grad_values, grad_weights
        )
    )
    return (
        None,
        permuted_grad_lengths,
        permuted_grad_values,
        permuted_grad_weights,
        None,
    )


def permute_1D_sparse_data_meta(
    permute: Tensor,
    lengths: Tensor,
    values: Tensor,
    weights: Tensor | None = None,
    permuted_lengths_sum: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    indices = values
    permuted_lengths_size = permute.numel()
    permuted_lengths = lengths.new_empty([permuted_lengths_size])
    permuted_indices_size: Any = 0
    if permuted_lengths_sum is not None:
        permuted_indices_size = permuted_lengths_sum
    else:
        ctx = oplib.get_ctx()
        permuted_indices_size = ctx.new_dynamic_size()
    permuted_indices = indices.new_empty(permuted_indices_size)
    permuted_weights = None
    if weights is not None:
        permuted_weights = (
            weights.new_empty(permuted_indices_size)
            if weights.dim() <= 1
            else weights.new_empty([permuted_indices_size, *weights.shape[1:]])
        )
    return permuted_lengths, permuted_indices, permuted_weights


def masked_select_jagged_1d_abstract(  # upstream: masked_select_jagged_1d
    values: Tensor, lengths: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    oplib._check(values.dim() == 1)
    oplib._check(lengths.dim() == 1)
    oplib._check(values.device == lengths.device)
    oplib._check(values.device == mask.device)

    s0 = oplib.get_ctx().new_dynamic_size()
    masked_values = values.new_empty([s0])
    masked_lengths = oplib.empty_like(lengths)
    return masked_values, masked_lengths


def expand_into_jagged_permute_meta(
    permute: Tensor,
    input_offsets: Tensor,
    output_offsets: Tensor,
    output_size: tuple[int, ...],
) -> Tensor:
    oplib._check(permute.numel() > 0, lambda: "expected {permute.numel} > 0")
    oplib._check(
        permute.numel() == input_offsets.numel() - 1,
        lambda: f"expected {permute.numel()} == {input_offsets.numel()} - 1",
    )
    oplib._check(
        permute.numel() == output_offsets.numel() - 1,
        lambda: f"expected {permute.numel()} == {output_offsets.numel()} - 1",
    )
    output_permute = input_offsets.new_empty(output_size)
    return output_permute


def block_bucketize_sparse_features_meta(
    lengths: Tensor,
    indices: Tensor,
    bucketize_pos: bool,
    sequence: bool,
    block_sizes: Tensor,
    my_size: int,
    weights: Tensor | None = None,
    batch_size_per_feature: Tensor | None = None,
    max_B: int = -1,
    block_bucketize_pos: Tensor | None = None,
    keep_orig_idx: bool = False,
    total_num_blocks: Tensor | None = None,
    keep_orig_idx_per_feature: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]:
    # Output: lengths, indices, weights", pos?, unbucketize_permute?
    num_buckets = my_size
    num_features = lengths.size(0)
    num_values = indices.size(0)
    return (
        lengths.new_empty([num_buckets * num_features]),
        indices.new_empty([num_values]),
        weights.new_empty(weights.shape) if weights is not None else None,
        indices.new_empty([num_values]) if bucketize_pos else None,
        # The real CPU/CUDA kernels only return unbucketize_permute when
        # `sequence` is set; otherwise the output is None. Match that so the
        # FakeTensor opcheck variant no longer sees a Tensor-vs-None mismatch.
        # See T191384137.
        indices.new_empty([num_values]) if sequence else None,
    )


def populate_bucketized_permute_meta(
    lengths: Tensor,
    bucketized_lengths: Tensor,
    bucket_mapping: Tensor,
) -> Tensor:
    # The real CPU/CUDA kernels return native_empty_like(bucket_mapping), i.e. an
    # output with the same shape/dtype as bucket_mapping
    # (sparse_ops_cpu.cpp:1117). Without this meta, the op has no abstract impl
    # and all of its FakeTensor / aot_dispatch opcheck variants fail. T191384137.
    return oplib.empty_like(bucket_mapping)


def permute_sparse_features_abstract(
    permute: Tensor, lengths: Tensor, indices: Tensor, weights: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor | None]:
    oplib._check(lengths.dtype == indices.dtype)
    oplib._check(permute.device == lengths.device)
    oplib._check(permute.device == indices.device)
    if weights is not None:
        oplib._check(permute.device == weights.device)
    num_output_features = permute.numel()
    B = lengths.size(1)
    permuted_lengths = lengths.new_empty(num_output_features, B)
    output_size = oplib.get_ctx().new_dynamic_size()
    permuted_indices = indices.new_empty(output_size)
    permuted_weights = None
    if weights is not None:
        permuted_weights = weights.new_empty(output_size)
    return (permuted_lengths, permuted_indices, permuted_weights)


def segment_sum_csr_abstract(batch_size: int, csr_seg: Tensor, values: Tensor) -> Tensor:
    output_size = csr_seg.numel() - 1
    output = values.new_empty(output_size)
    return output


def lengths_range_abstract(
    lengths: Tensor,
    output_shape: Sequence[int] | None = None,
) -> Tensor:
    oplib._check(lengths.dim() == 1, lambda: "lengths must be a 1D tensor")
    output_size: Any = 0
    if output_shape is not None:
        output_size = math.prod(output_shape)
    else:
        ctx = oplib.get_ctx()
        output_size = ctx.new_dynamic_size()
    return lengths.new_empty([output_size], dtype=lengths.dtype)


def _setup() -> None:
    _setup.done = getattr(_setup, "done", False)  # type: ignore[attr-defined]

    def impl_abstract(op_name: str, fn: Callable[..., Any]) -> None:
        # NOTE: Failures have occasionally been observed with register_fake,
        # where the error signatures can be found in:
        # https://github.com/pytorch/pytorch/blob/main/torch/_library/fake_impl.py
        #
        # To work around this, we first check if the kernel is already registered
        # for the following dispatch keys, and if so, we skip the registration.
        ns, _, name = op_name.partition("::")
        for dkey in ["CompositeImplicitAutograd", "Meta"]:
            if getattr(getattr(oplib.ops, ns), name).default.has_kernel(dkey):
                return
        oplib.register_fake(op_name, fn)

    def impl_autograd(
        op_name: str,
        fn: Callable[..., Any],
        setup_context: Callable[..., None] | None = None,
    ) -> None:
        oplib.register_autograd(op_name, fn, setup_context=setup_context)

    if not _setup.done:  # type: ignore[attr-defined]
        impl_autograd(
            "fbgemm::permute_2D_sparse_data",
            permute_2D_sparse_data_backward,
            setup_context=permute_2D_sparse_data_setup_context,
        )

        impl_abstract("fbgemm::permute_2D_sparse_data", permute_2D_sparse_data_meta)
        impl_abstract("fbgemm::get_source_mask", get_source_mask_meta)
        impl_abstract("fbgemm::repeat_arange", repeat_arange_meta)
        impl_abstract(
            "fbgemm::permute_2D_sparse_data_input1D",
            permute_2D_sparse_data_input1D_meta,
        )
        impl_abstract("fbgemm::invert_permute", invert_permute_abstract)
        impl_abstract("fbgemm::permute_1D_sparse_data", permute_1D_sparse_data_meta)
        impl_abstract("fbgemm::masked_select_jagged_1d", masked_select_jagged_1d_abstract)
        impl_abstract("fbgemm::expand_into_jagged_permute", expand_into_jagged_permute_meta)
        impl_abstract(
            "fbgemm::block_bucketize_sparse_features",
            block_bucketize_sparse_features_meta,
        )
        impl_abstract(
            "fbgemm::populate_bucketized_permute",
            populate_bucketized_permute_meta,
        )
        impl_abstract("fbgemm::permute_sparse_features", permute_sparse_features_abstract)
        impl_abstract("fbgemm::segment_sum_csr", segment_sum_csr_abstract)
        impl_abstract("fbgemm::lengths_range", lengths_range_abstract)
        _setup.done = True  # type: ignore[attr-defined]


_setup()
