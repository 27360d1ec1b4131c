# Ported from PyTorch: torch/testing/_internal/custom_op_db.py, the legacy version written
# with torch._custom_ops (custom_op / impl / impl_abstract / impl_save_for_backward /
# impl_backward), as it stood before the file moved to torch.library.custom_op.
# Copyright (c) PyTorch contributors. BSD-3-Clause license (PyTorch's LICENSE).
#
# Changes from the original, every one of them:
# - imports: `import torch._custom_ops as custom_ops` -> `import oplib_core.legacy as
#   custom_ops`; torch.Tensor -> oplib.Tensor; torch.types.Number -> numbers.Number;
#   `from typing import *` -> the names used; torch.long -> oplib.int64;
#   torch._custom_op.impl.get_ctx() -> custom_ops.get_ctx() (create_unbacked_symint unchanged);
#   torch.ops.<ns> -> oplib.ops.<ns>.
# - the namespace `_torch_testing` -> `_torch_testing_legacy`, so that this module and
#   custom_op_db.py (the torch.library version, which torch never loads together with this
#   one) can be imported in one process.
# - kernels receive native arrays, not Tensors: to_numpy wraps with oplib.tensor before
#   `.cpu().numpy()`, `device=x.device` -> `device=device_of(x)`, torch.tensor ->
#   oplib.tensor; numpy_split_copy(_with_int) copy each np.split piece (np.copy), since
#   oplib.tensor of an array does not copy where torch.tensor does.
# - fake kernels: torch.empty_like -> oplib.empty_like, torch.cat -> oplib.ops.oplib.cat,
#   torch.tensor_split -> custom_op_db.tensor_split.
# - numpy_nonzero's fake kernel: shape [x.dim(), i0] -> [i0, x.dim()], the fix torch made
#   in the later version (the kernel returns (n, dim); opcheck's fake check catches the
#   transposed shape); likewise numpy_nms's fake kernel: new_empty([i0, 4]) ->
#   new_empty([i0], dtype=int64) (the kernel returns the kept indices).
# - OpInfo, SampleInput, make_tensor, all_types_and, to_numpy and every sample-input
#   function come from custom_op_db.py: the original defines its own copies of to_numpy
#   and of the nonzero, view_copy, cat, split_copy and nms sample functions, identical to
#   that file's (there ported with the in-place `result *= mask` made out of place and
#   torch.stack -> oplib.ops.oplib.stack).
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import List, Tuple  # noqa: UP035

import numpy as np
from custom_op_db import (
    OpInfo,
    all_types_and,
    device_of,
    sample_inputs_numpy_cat,
    sample_inputs_numpy_cube,
    sample_inputs_numpy_mul,
    sample_inputs_numpy_nms,
    sample_inputs_numpy_nonzero,
    sample_inputs_numpy_sort,
    sample_inputs_numpy_split_copy,
    sample_inputs_numpy_take,
    sample_inputs_numpy_view_copy,
    tensor_split,
    to_numpy,
)

import oplib_core as oplib
import oplib_core.legacy as custom_ops
from oplib_core import Tensor

Number = numbers.Number

# Note: [custom op db]
#
# This is a collection of custom operator test cases written as OpInfos
# so they can easily be consumed by OpInfo-based tests to check if subsystems
# support them correctly.


@custom_ops.custom_op("_torch_testing_legacy::numpy_cube")
def numpy_cube(x: Tensor) -> Tuple[Tensor, Tensor]:  # noqa: UP006
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_cube")
def numpy_cube_impl(x):
    x_np = to_numpy(x)
    dx = oplib.tensor(3 * x_np**2, device=device_of(x))
    return oplib.tensor(x_np**3, device=device_of(x)), dx


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_cube")
def numpy_cube_abstract(x):
    return x.clone(), x.clone()


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_cube")
def numpy_cube_save_for_backward(inputs, output):
    return (inputs.x, output[1])


@custom_ops.impl_backward("_torch_testing_legacy::numpy_cube")
def numpy_cube_backward(ctx, saved, grad_out, grad_dx):
    x, dx = saved
    grad_x = oplib.ops._torch_testing_legacy.numpy_mul(
        grad_out, dx
    ) + 6 * oplib.ops._torch_testing_legacy.numpy_mul(grad_dx, x)
    return {"x": grad_x}


@custom_ops.custom_op("_torch_testing_legacy::numpy_mul")
def numpy_mul(x: Tensor, y: Tensor) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_mul")
def numpy_mul_impl(x, y):
    return oplib.tensor(to_numpy(x) * to_numpy(y), device=device_of(x))


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_mul")
def numpy_mul_abstract(x, y):
    assert x.device == y.device
    return (x * y).contiguous()


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_mul")
def numpy_mul_save_for_backward(inputs, output):
    saved = {}
    saved["x_requires_grad"] = inputs.x.requires_grad
    saved["y_requires_grad"] = inputs.y.requires_grad
    # Optimization: only save what is necessary
    saved["y"] = inputs.y if inputs.x.requires_grad else None
    saved["x"] = inputs.x if inputs.y.requires_grad else None
    return saved


@custom_ops.impl_backward("_torch_testing_legacy::numpy_mul")
def numpy_mul_backward(ctx, saved, grad_out):
    grad_x = grad_out * saved["y"] if saved["x_requires_grad"] else None
    grad_y = grad_out * saved["x"] if saved["x_requires_grad"] else None
    return {"y": grad_y, "x": grad_x}


@custom_ops.custom_op("_torch_testing_legacy::numpy_sort")
def numpy_sort(x: Tensor, dim: int) -> Tuple[Tensor, Tensor, Tensor]:  # noqa: UP006
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_sort")
def numpy_sort_impl(x, dim):
    device = device_of(x)
    x = to_numpy(x)
    ind = np.argsort(x, axis=dim)
    ind_inv = np.argsort(ind, axis=dim)
    result = np.take_along_axis(x, ind, axis=dim)
    return (
        oplib.tensor(result, device=device),
        oplib.tensor(ind, device=device),
        oplib.tensor(ind_inv, device=device),
    )


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_sort")
def numpy_sort_abstract(x, dim):
    return (
        oplib.empty_like(x),
        oplib.empty_like(x, dtype=oplib.int64),
        oplib.empty_like(x, dtype=oplib.int64),
    )


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_sort")
def numpy_sort_save_for_backward(inputs, output):
    out, ind, ind_inv = output  # noqa: RUF059
    return [inputs.dim, ind, ind_inv]


@custom_ops.impl_backward(
    "_torch_testing_legacy::numpy_sort", output_differentiability=[True, False, False]
)
def numpy_sort_backward(ctx, saved, grad_out, grad_ind, grad_ind_inv):
    dim, ind, ind_inv = saved
    return {"x": oplib.ops._torch_testing_legacy.numpy_take(grad_out, ind_inv, ind, dim)}


@custom_ops.custom_op("_torch_testing_legacy::numpy_take")
def numpy_take(x: Tensor, ind: Tensor, ind_inv: Tensor, dim: int) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_take")
def numpy_take_impl(x, ind, ind_inv, dim):
    device = device_of(x)
    x = to_numpy(x)
    ind = to_numpy(ind)
    return oplib.tensor(np.take_along_axis(x, ind, dim), device=device)


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_take")
def numpy_take_abstract(x, ind, ind_inv, dim):
    assert x.device == ind.device
    assert x.device == ind_inv.device
    assert ind.dtype == oplib.int64
    assert ind_inv.dtype == oplib.int64
    return oplib.empty_like(x)


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_take")
def numpy_take_save_for_backward(inputs, output):
    return {
        "dim": inputs.dim,
        "ind": inputs.ind,
        "ind_inv": inputs.ind_inv,
    }


@custom_ops.impl_backward("_torch_testing_legacy::numpy_take")
def numpy_take_backward(ctx, saved, grad_out):
    return {
        "x": oplib.ops._torch_testing_legacy.numpy_take(
            grad_out, saved["ind_inv"], saved["ind"], saved["dim"]
        ),
        "ind": None,
        "ind_inv": None,
    }


@custom_ops.custom_op("_torch_testing_legacy::numpy_nonzero")
def numpy_nonzero(x: Tensor) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_nonzero")
def numpy_nonzero_impl(x):
    x_np = to_numpy(x)
    res = np.stack(np.nonzero(x_np), axis=1)
    if res.shape[0] <= 1:
        raise RuntimeError("not supported")
    return oplib.tensor(res, device=device_of(x))


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_nonzero")
def numpy_nonzero_abstract(x):
    ctx = custom_ops.get_ctx()
    i0 = ctx.create_unbacked_symint()
    shape = [i0, x.dim()]
    result = x.new_empty(shape, dtype=oplib.int64)
    return result


@custom_ops.custom_op("_torch_testing_legacy::numpy_view_copy")
def numpy_view_copy(x: Tensor, shape: Sequence[int]) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_view_copy")
def numpy_view_copy_impl(x, shape) -> Tensor:
    return oplib.tensor(np.copy(to_numpy(x).reshape(shape)), device=device_of(x))


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_view_copy")
def numpy_view_copy_abstract(x, shape) -> Tensor:
    return x.clone().view(shape).clone()


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_view_copy")
def numpy_view_copy_save_for_backward(inputs, output) -> Tensor:
    return inputs.x.shape


@custom_ops.impl_backward("_torch_testing_legacy::numpy_view_copy")
def numpy_view_copy_backward(ctx, x_shape, grad_out) -> Tensor:
    return {"x": oplib.ops._torch_testing_legacy.numpy_view_copy(grad_out, x_shape)}


@custom_ops.custom_op("_torch_testing_legacy::numpy_cat")
def numpy_cat(xs: Sequence[Tensor], dim: int) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_cat")
def numpy_cat_impl(xs, dim):
    assert len(xs) > 0
    assert all(device_of(x) == device_of(xs[0]) for x in xs)
    assert all(x.dtype == xs[0].dtype for x in xs)
    np_xs = [to_numpy(x) for x in xs]
    np_out = np.concatenate(np_xs, axis=dim)
    return oplib.tensor(np_out, device=device_of(xs[0]))


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_cat")
def numpy_cat_abstract(xs, dim):
    assert len(xs) > 0
    assert all(x.device == xs[0].device for x in xs)
    assert all(x.dtype == xs[0].dtype for x in xs)
    return oplib.ops.oplib.cat(xs, dim=dim)


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_cat")
def numpy_cat_save_for_backward(inputs, output):
    dim_sizes = [x.shape[inputs.dim] for x in inputs.xs]
    return dim_sizes, inputs.dim


@custom_ops.impl_backward("_torch_testing_legacy::numpy_cat")
def numpy_cat_backward(ctx, saved, grad_out):
    dim_sizes, dim = saved
    splits = list(np.cumsum(dim_sizes)[:-1])
    grad_xs = oplib.ops._torch_testing_legacy.numpy_split_copy(grad_out, splits, dim)
    return {"xs": grad_xs}


@custom_ops.custom_op("_torch_testing_legacy::numpy_split_copy")
def numpy_split_copy(x: Tensor, sections: Sequence[int], dim: int) -> List[Tensor]:  # noqa: UP006
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_split_copy")
def numpy_split_copy_impl(x, splits, dim):
    x_np = to_numpy(x)
    arrs = np.split(x_np, splits, axis=dim)
    return [oplib.tensor(np.copy(arr), device=device_of(x), dtype=x.dtype) for arr in arrs]


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_split_copy")
def numpy_split_copy_abstract(x, splits, dim):
    return [xi.clone() for xi in tensor_split(x, splits, dim)]


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_split_copy")
def numpy_split_copy_save_for_backward(inputs, output):
    return inputs.dim


@custom_ops.impl_backward("_torch_testing_legacy::numpy_split_copy")
def numpy_split_copy_backward(ctx, saved, grad_out):
    dim = saved
    return {"x": oplib.ops._torch_testing_legacy.numpy_cat(grad_out, dim=dim)}


@custom_ops.custom_op("_torch_testing_legacy::numpy_split_copy_with_int")
def numpy_split_copy_with_int(
    x: Tensor, sections: Sequence[int], dim: int
) -> Tuple[List[Tensor], int]:  # noqa: UP006
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_split_copy_with_int")
def numpy_split_copy_with_int_impl(x, splits, dim):
    x_np = to_numpy(x)
    arrs = np.split(x_np, splits, axis=dim)
    return [oplib.tensor(np.copy(arr), device=device_of(x), dtype=x.dtype) for arr in arrs], len(
        splits
    )


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_split_copy_with_int")
def numpy_split_copy_with_int_abstract(x, splits, dim):
    return [xi.clone() for xi in tensor_split(x, splits, dim)], len(splits)


@custom_ops.impl_save_for_backward("_torch_testing_legacy::numpy_split_copy_with_int")
def numpy_split_copy_with_int_save_for_backward(inputs, output):
    return inputs.dim


@custom_ops.impl_backward(
    "_torch_testing_legacy::numpy_split_copy_with_int", output_differentiability=[True, False]
)
def numpy_split_copy_with_int_backward(ctx, saved, grad_out, _):
    dim = saved
    return {"x": oplib.ops._torch_testing_legacy.numpy_cat(grad_out, dim=dim)}


@custom_ops.custom_op("_torch_testing_legacy::numpy_nms")
def numpy_nms(boxes: Tensor, scores: Tensor, iou_threshold: Number) -> Tensor:
    raise NotImplementedError()


@custom_ops.impl("_torch_testing_legacy::numpy_nms")
def numpy_nms_impl(boxes, scores, iou_threshold):
    # Adapted from Ross Girshick's fast-rcnn implementation at
    # https://github.com/rbgirshick/fast-rcnn/blob/master/lib/utils/nms.py
    assert device_of(boxes) == device_of(scores)
    device = device_of(boxes)

    boxes = to_numpy(boxes)
    scores = to_numpy(scores)

    N = boxes.shape[0]
    assert boxes.shape == (N, 4)
    assert scores.shape == (N,)

    x1 = boxes[:, 0]
    y1 = boxes[:, 1]
    x2 = boxes[:, 2]
    y2 = boxes[:, 3]

    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]

    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        xx1 = np.maximum(x1[i], x1[order[1:]])
        yy1 = np.maximum(y1[i], y1[order[1:]])
        xx2 = np.minimum(x2[i], x2[order[1:]])
        yy2 = np.minimum(y2[i], y2[order[1:]])

        w = np.maximum(0.0, xx2 - xx1 + 1)
        h = np.maximum(0.0, yy2 - yy1 + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)

        inds = np.where(ovr <= iou_threshold)[0]
        order = order[inds + 1]

    result = np.stack(keep)
    result = oplib.tensor(np.stack(keep), device=device)
    # Needed for data-dependent condition :(
    assert result.size(0) >= 2
    return result


@custom_ops.impl_abstract("_torch_testing_legacy::numpy_nms")
def numpy_nms_abstract(boxes, scores, iou_threshold):
    assert boxes.device == scores.device
    N = boxes.shape[0]
    assert boxes.shape == (N, 4)
    assert scores.shape == (N,)

    ctx = custom_ops.get_ctx()
    i0 = ctx.create_unbacked_symint()
    result = boxes.new_empty([i0], dtype=oplib.int64)
    return result


custom_op_db = [
    OpInfo(
        "NumpyCubeCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_cube,
        sample_inputs_func=sample_inputs_numpy_cube,
        dtypes=all_types_and(bool, np.float16),
        supports_out=False,
    ),
    OpInfo(
        "NumpyMulCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_mul,
        sample_inputs_func=sample_inputs_numpy_mul,
        dtypes=all_types_and(bool, np.float16),
        supports_out=False,
    ),
    OpInfo(
        "NumpySortCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_sort,
        sample_inputs_func=sample_inputs_numpy_sort,
        dtypes=all_types_and(bool, np.float16),
        supports_out=False,
    ),
    OpInfo(
        "NumpyTakeCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_take,
        sample_inputs_func=sample_inputs_numpy_take,
        dtypes=all_types_and(bool, np.float16),
        supports_out=False,
    ),
    OpInfo(
        "NumpyNonzeroCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_nonzero,
        sample_inputs_func=sample_inputs_numpy_nonzero,
        dtypes=all_types_and(bool, np.float16),
        supports_autograd=False,
        supports_out=False,
    ),
    OpInfo(
        "NumpyNMSCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_nms,
        sample_inputs_func=sample_inputs_numpy_nms,
        dtypes=all_types_and(bool, np.float16),
        supports_autograd=False,
        supports_out=False,
    ),
    OpInfo(
        "NumpyViewCopyCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_view_copy,
        sample_inputs_func=sample_inputs_numpy_view_copy,
        dtypes=all_types_and(bool, np.float16),
        supports_autograd=True,
        supports_out=False,
    ),
    OpInfo(
        "NumpyCatCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_cat,
        sample_inputs_func=sample_inputs_numpy_cat,
        dtypes=all_types_and(bool, np.float16),
        supports_autograd=True,
        check_batched_grad=False,
        check_batched_gradgrad=False,
        supports_out=False,
    ),
    OpInfo(
        "NumpySplitCopyCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_split_copy,
        sample_inputs_func=sample_inputs_numpy_split_copy,
        dtypes=all_types_and(bool, np.float16),
        supports_autograd=True,
        check_batched_grad=False,
        check_batched_gradgrad=False,
        supports_out=False,
    ),
    OpInfo(
        "NumpySplitCopyWithIntCustomOp",
        op=oplib.ops._torch_testing_legacy.numpy_split_copy_with_int,
        sample_inputs_func=sample_inputs_numpy_split_copy,
        dtypes=all_types_and(bool, np.float16),
        gradcheck_wrapper=lambda op, *args, **kwargs: op(*args, **kwargs)[0],
        supports_autograd=True,
        check_batched_grad=False,
        check_batched_gradgrad=False,
        supports_out=False,
    ),
]
