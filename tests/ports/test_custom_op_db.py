"""PyTorch's custom-op test database, checked per op and dtype: forward against numpy, on
the meta device, under FakeTensorMode, gradcheck and gradgradcheck where torch registers a
backward, and opcheck on every installed backend. Both ports run: custom_op_db.py
(torch.library.custom_op) and custom_op_db_legacy.py (torch._custom_ops, via oplib_core.legacy)."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import oplib_core as oplib
import oplib_core.legacy

# The ports register their ops when imported. They are imported by the module fixture below,
# not at collection, and destroyed after this module: other tests count the registry's ops.
NAMES = [
    "NumpyCubeCustomOp",
    "NumpyMulCustomOp",
    "NumpyMulScalarCustomOp",
    "NumpySortCustomOp",
    "NumpyTakeCustomOp",
    "NumpyNonzeroCustomOp",
    "NumpyNMSCustomOp",
    "NumpyViewCopyCustomOp",
    "NumpyCatCustomOp",
    "NumpySplitCopyCustomOp",
    "NumpySplitCopyWithIntCustomOp",
]
VARIANTS = {
    "library": ("custom_op_db", NAMES),
    "legacy": ("custom_op_db_legacy", [n for n in NAMES if n != "NumpyMulScalarCustomOp"]),
}
# every op of the db: dtypes=all_types_and(torch.bool, torch.half); nonzero and nms without
# autograd (checked against the modules' OpInfos by the fixture)
DTYPES = [np.float32, np.float64, np.uint8, np.int8, np.int16, np.int32, np.int64]
DTYPES += [np.bool_, np.float16]
NO_AUTOGRAD = {"NumpyNonzeroCustomOp", "NumpyNMSCustomOp"}
OPINFOS = {}  # "variant-name" -> OpInfo, filled by the fixture


@pytest.fixture(scope="module", autouse=True)
def ported_ops():
    modules = {}
    for variant, (module_name, names) in VARIANTS.items():
        module = modules[variant] = importlib.import_module(module_name)
        infos = {info.name: info for info in module.custom_op_db}
        assert list(infos) == names
        for name, info in infos.items():
            assert [np.dtype(d) for d in info.dtypes] == [np.dtype(d) for d in DTYPES]
            assert info.supports_autograd is (name not in NO_AUTOGRAD)
            OPINFOS[f"{variant}-{name}"] = info
    yield
    OPINFOS.clear()
    for module in modules.values():
        for value in list(vars(module).values()):
            if isinstance(value, (oplib.CustomOpDef, oplib.legacy.LegacyOp)):
                value._destroy()
        sys.modules.pop(module.__name__, None)


def _np(x):
    return x.detach().numpy() if isinstance(x, oplib.Tensor) else x


def _nms(boxes, scores, iou_threshold):
    x1, y1, x2, y2 = boxes.astype(np.float64).T  # the intended result: no integer overflow
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    keep = []
    for i in scores.argsort()[::-1]:  # the kernel's order among equal scores
        ok = True
        for j in keep:
            w = max(0.0, min(x2[i], x2[j]) - max(x1[i], x1[j]) + 1)
            h = max(0.0, min(y2[i], y2[j]) - max(y1[i], y1[j]) + 1)
            if w * h / (areas[i] + areas[j] - w * h) > iou_threshold:
                ok = False
                break
        if ok:
            keep.append(i)
    return np.array(keep)


# numpy references, written independently of the ported kernels
REFERENCES = {
    "NumpyCubeCustomOp": lambda x: (x**3, 3 * x**2),
    "NumpyMulCustomOp": lambda x, y: x * y,
    "NumpyMulScalarCustomOp": lambda x, scalar: x * scalar,
    "NumpySortCustomOp": lambda x, dim: (
        np.sort(x, axis=dim),
        np.argsort(x, axis=dim),
        np.argsort(np.argsort(x, axis=dim), axis=dim),
    ),
    "NumpyTakeCustomOp": lambda x, ind, ind_inv, dim: np.take_along_axis(x, ind, dim),
    "NumpyNonzeroCustomOp": lambda x: np.argwhere(x),
    "NumpyNMSCustomOp": _nms,
    "NumpyViewCopyCustomOp": lambda x, shape: x.reshape(shape),
    "NumpyCatCustomOp": lambda xs, dim: np.concatenate(xs, axis=dim),
    "NumpySplitCopyCustomOp": lambda x, splits, dim: np.split(x, splits, axis=dim),
    "NumpySplitCopyWithIntCustomOp": lambda x, splits, dim: (
        np.split(x, splits, axis=dim),
        len(splits),
    ),
}
# ops whose output size depends on the data (the fake kernel makes a dynamic size)
DATA_DEPENDENT = {"NumpyNonzeroCustomOp", "NumpyNMSCustomOp"}

# Where the original kernels' numpy code gives what neither the fake kernel nor the intended
# result says, in torch as here (torch's tests run these ops in one dtype: OpDTypes.any_one).
# (op, dtype) -> (reason, the checks that fail)
ALL_CHECKS = {"forward", "meta", "fake", "opcheck"}
KNOWN_FAILURES = {
    ("NumpyCubeCustomOp", "bool"): (
        "numpy: bool ** 3 is int64, the fake kernel says bool",
        {"meta", "fake", "opcheck"},
    ),
    ("NumpyNMSCustomOp", "bool"): ("numpy refuses `-` on bool arrays (x2 - x1)", ALL_CHECKS),
}


def cases(check):
    params = []
    for variant, (_, names) in VARIANTS.items():
        for name in names:
            for dtype in DTYPES:
                dt = np.dtype(dtype).name
                reason, checks = KNOWN_FAILURES.get((name, dt), (None, set()))
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if check in checks else []
                params.append(
                    pytest.param(
                        f"{variant}-{name}", dtype, id=f"{variant}-{name}-{dt}", marks=marks
                    )
                )
    return params


def samples(info, dtype, requires_grad=False, device="cpu"):
    """The op's samples, from a fixed seed (the same whichever tests run); only floating
    inputs require grad, as in torch's OpInfo tests."""
    sys.modules["custom_op_db"]._rng = np.random.default_rng(0)
    requires_grad = requires_grad and info.supports_autograd and np.dtype(dtype).kind == "f"
    return list(info.sample_inputs_func(info, device, dtype, requires_grad))


def call(info, sample):
    return info.op(sample.input, *sample.args, **sample.kwargs)


def flat(out):
    if isinstance(out, (tuple, list)):
        return [y for x in out for y in flat(x)]
    return [out]


def to_device(x, device):
    if isinstance(x, oplib.Tensor):
        return x.detach().to(device)
    if isinstance(x, list):
        return [to_device(y, device) for y in x]
    return x


def assert_same_structure(out, ref):
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert_same_structure(o, r)
    elif isinstance(ref, int):
        assert out == ref
    else:
        assert isinstance(out, oplib.Tensor)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
        if ref.dtype.kind == "f":
            assert out.dtype == ref.dtype


def assert_same_form(out, real, dynamic=False):
    """``out`` (meta or fake) has ``real``'s structure, shapes (but dynamic sizes), dtypes."""
    if isinstance(real, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(real)
        for o, r in zip(out, real, strict=True):
            assert_same_form(o, r, dynamic)
    elif isinstance(real, int):
        assert out == real
    else:
        assert out.dtype == real.dtype
        assert len(out.shape) == len(real.shape)
        for o, r in zip(out.shape, real.shape, strict=True):
            if not dynamic or isinstance(o, int):
                assert o == r, (out.shape, real.shape)


@pytest.mark.parametrize(("name", "dtype"), cases("forward"))
def test_forward_matches_numpy(name, dtype):
    info = OPINFOS[name]
    for sample in samples(info, dtype):
        out = call(info, sample)
        args = [_np(a) for a in (sample.input, *sample.args)]
        args = [[_np(y) for y in a] if isinstance(a, list) else a for a in args]
        kwargs = {k: _np(v) for k, v in sample.kwargs.items()}
        assert_same_structure(out, REFERENCES[info.name](*args, **kwargs))


@pytest.mark.parametrize(("name", "dtype"), cases("meta"))
def test_meta(name, dtype):
    info = OPINFOS[name]
    for sample in samples(info, dtype):
        real = call(info, sample)
        meta = info.op(
            to_device(sample.input, "meta"),
            *[to_device(a, "meta") for a in sample.args],
            **sample.kwargs,
        )
        for t in flat(meta):
            if isinstance(t, oplib.Tensor):
                assert t.device.type == "meta"
        assert_same_form(meta, real, dynamic=info.name in DATA_DEPENDENT)


@pytest.mark.parametrize(("name", "dtype"), cases("fake"))
def test_fake_tensor_mode(name, dtype):
    info = OPINFOS[name]
    for sample in samples(info, dtype):
        real = call(info, sample)
        with oplib.FakeTensorMode() as mode:

            def fake(x, mode=mode):
                if isinstance(x, oplib.Tensor):
                    return mode.from_real(x)
                if isinstance(x, list):
                    return [fake(y) for y in x]
                return x

            out = info.op(fake(sample.input), *[fake(a) for a in sample.args], **sample.kwargs)
            assert_same_form(out, real, dynamic=info.name in DATA_DEPENDENT)


AUTOGRAD = [
    f"{variant}-{name}"
    for variant, (_, names) in VARIANTS.items()
    for name in names
    if name not in NO_AUTOGRAD
]


@pytest.mark.parametrize("check", ["gradcheck", "gradgradcheck"])
@pytest.mark.parametrize("name", AUTOGRAD)
def test_gradcheck(name, check):
    """torch's OpInfo tests run both (test_fn_grad, test_fn_gradgrad)."""
    info = OPINFOS[name]
    for sample in samples(info, np.float64, requires_grad=True):
        op = info.op
        if info.gradcheck_wrapper is not None:
            wrapper = info.gradcheck_wrapper

            def op(*args, wrapper=wrapper, **kwargs):
                return wrapper(info.op, *args, **kwargs)

        if isinstance(sample.input, list):  # Tensor[] input: one gradcheck input per tensor

            def fn(*xs, op=op, sample=sample):
                return op(list(xs), *sample.args, **sample.kwargs)

            inputs = tuple(sample.input)
        else:
            tensors = [a for a in (sample.input, *sample.args) if isinstance(a, oplib.Tensor)]
            positions = [
                i for i, a in enumerate((sample.input, *sample.args)) if isinstance(a, oplib.Tensor)
            ]

            def fn(*ts, op=op, sample=sample, positions=positions):
                args = list((sample.input, *sample.args))
                for i, t in zip(positions, ts, strict=True):
                    args[i] = t
                return op(*args, **sample.kwargs)

            inputs = tuple(tensors)
        assert getattr(oplib.autograd, check)(fn, inputs)


@pytest.mark.parametrize(("name", "dtype"), cases("opcheck"))
def test_opcheck(name, dtype):
    info = OPINFOS[name]
    for sample in samples(info, dtype, requires_grad=True):
        oplib.opcheck(info.op, (sample.input, *sample.args), sample.kwargs)
