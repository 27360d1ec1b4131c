"""``oplib.autocast`` and ``oplib.library.register_autocast``: torch's ``torch.autocast`` and
``torch.library.register_autocast``, with torch's op lists for the core op set (checked
against torch 2.13 on CPU: matmul in bfloat16, exp and sum untouched on cpu, cat promoted)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._autocast import CORE_POLICIES, CastPolicy, policy_of
from oplib_core._dispatch.modes import active_modes

ops = oplib.ops.oplib


class Recorder(oplib.DispatchMode):
    """Records each op call it sees with its tensor arguments' dtypes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any]]] = []

    def __oplib_dispatch__(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        dtypes = []
        for a in (*args, *kwargs.values()):
            for x in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(x, oplib.Tensor):
                    dtypes.append(x.dtype)
        self.calls.append((op.name(), dtypes))
        return op(*args, **kwargs)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def f32(*shape: int, requires_grad: bool = False, device: str = "cpu") -> oplib.Tensor:
    rng = np.random.default_rng(sum(shape))
    t = oplib.tensor(rng.random(shape).astype(np.float32) + 0.5)
    if device != "cpu":
        t = t.to(device)
    return t.requires_grad_(True) if requires_grad else t


def _device_available(name: str) -> bool:
    backend = oplib.backends.TABLE.find(name)
    return backend is not None and backend.is_available()


accelerator = pytest.mark.skipif(
    not _device_available("privateuse1"),
    reason="the privateuse1 backend (oplib-privateuse) is not installed: it stands for an "
    "accelerator, whose autocast lists are CUDA's",
)


# -- the table ---------------------------------------------------------------------------------


def test_every_core_op_has_an_autocast_class():
    core = {op.name() for op in oplib.registered_ops("oplib")}
    missing = sorted(core - set(CORE_POLICIES))
    stale = sorted(set(CORE_POLICIES) - core)
    assert not missing, f"core ops without an autocast class in CORE_POLICIES: {missing}"
    assert not stale, f"CORE_POLICIES names ops that do not exist: {stale}"


def test_table_follows_torch_lists():
    # torch's AutocastCPU list and the list CUDA/XPU/MPS share (autocast_mode.cpp/.h)
    assert CORE_POLICIES["oplib::matmul"] == (CastPolicy.LOWER_PRECISION_FP,) * 2
    for name in ("exp", "log", "pow", "pow.Scalar", "rpow.Scalar"):
        assert CORE_POLICIES[f"oplib::{name}"] == (CastPolicy.NONE, CastPolicy.FP32), name
    assert CORE_POLICIES["oplib::sum"] == (CastPolicy.NONE, CastPolicy.FP32_SET_OPT_DTYPE)
    for name in ("cat", "stack"):
        assert CORE_POLICIES[f"oplib::{name}"] == (CastPolicy.PROMOTE, CastPolicy.NONE)
    for name in ("index_put", "scatter_add"):
        assert CORE_POLICIES[f"oplib::{name}"] == (CastPolicy.NONE, CastPolicy.PROMOTE)
    assert policy_of(ops.exp.default, "cuda") == (CastPolicy.FP32, None)
    assert policy_of(ops.exp.default, "cpu") == (CastPolicy.NONE, None)


# -- cpu: torch's AutocastCPU lists --------------------------------------------------------------


def test_cpu_matmul_runs_in_bfloat16_by_default():
    x, w = f32(2, 3), f32(3, 4)
    with oplib.autocast("cpu"):
        y = x @ w
        z = ops.matmul(x, w)
    assert y.dtype == oplib.bfloat16 and z.dtype == oplib.bfloat16
    expected = (x.numpy().astype(oplib.bfloat16) @ w.numpy().astype(oplib.bfloat16)).astype(
        np.float32
    )
    np.testing.assert_allclose(y.float().numpy(), expected, rtol=1e-2)
    assert (x @ w).dtype == oplib.float32  # off again after the block


def test_cpu_leaves_unlisted_ops_alone():
    x, w = f32(2, 3), f32(3, 4)
    with oplib.autocast("cpu"):
        y = x @ w
        # on cpu torch lists no unary math and no sum: they run in their input's dtype
        assert ops.exp(y).dtype == oplib.bfloat16
        assert ops.sum(y).dtype == oplib.bfloat16
        assert ops.exp(x).dtype == oplib.float32
        assert (y + f32(2, 4)).dtype == oplib.float32  # add promotes by itself


def test_cpu_cat_and_stack_promote_to_the_widest():
    x, w = f32(2, 3), f32(3, 4)
    with oplib.autocast("cpu"):
        y = x @ w
        rec = Recorder()
        with rec:
            out = ops.cat([y, f32(2, 4)])
        st = ops.stack([y, y])
        st64 = ops.stack([y, f32(2, 4).double()])
    assert out.dtype == oplib.float32
    # the bfloat16 input was cast before cat saw it (Recorder sits outside autocast)
    assert rec.calls[-1] == ("oplib::cat", [oplib.float32, oplib.float32])
    assert st.dtype == oplib.bfloat16
    # float64 is ignored by the promotion (torch's prioritize), then cat promotes by itself
    assert st64.dtype == oplib.float64


def test_only_floating_tensors_other_than_float64_are_cast():
    a = oplib.tensor(np.arange(6, dtype=np.int64).reshape(2, 3))
    b = oplib.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))
    x64, w64 = f32(2, 3).double(), f32(3, 4).double()
    with oplib.autocast("cpu"):
        assert (a @ b).dtype == oplib.int64
        assert (x64 @ w64).dtype == oplib.float64
        assert (f32(2, 3).half() @ f32(3, 4).half()).dtype == oplib.bfloat16


def test_native_arrays_are_cast_too():
    x = np.ones((2, 3), np.float32)
    with oplib.autocast("cpu"):
        out = ops.matmul(x, x.T)
    assert isinstance(out, np.ndarray) and out.dtype == oplib.bfloat16


# -- another device: the CUDA lists ------------------------------------------------------------


@accelerator
def test_accelerator_lists():
    x, w = f32(2, 3, device="privateuse1"), f32(3, 4, device="privateuse1")
    with oplib.autocast("privateuse1"):
        y = x @ w
        assert y.dtype == oplib.float16  # float16 by default off the cpu
        assert ops.exp(y).dtype == oplib.float32
        assert ops.log(y).dtype == oplib.float32
        assert (y**2).dtype == oplib.float32
        assert ops.sum(y).dtype == oplib.float32
        assert ops.sum(y, dtype=oplib.float16).dtype == oplib.float16  # a given dtype wins
        assert ops.cat([y, y]).dtype == oplib.float16  # cat is not listed for CUDA
        # scatter_add and index_put promote to the widest input (off autocast: self's dtype)
        half = oplib.tensor(np.zeros((2, 3), np.float16)).to("privateuse1")
        index = oplib.tensor(np.zeros((2, 3), np.int64)).to("privateuse1")
        assert ops.scatter_add(half, 0, index, f32(2, 3, device="privateuse1")).dtype == (
            oplib.float32
        )
        rows = oplib.tensor(np.array([0, 1])).to("privateuse1")
        assert ops.index_put(half, [rows], f32(2, 3, device="privateuse1")).dtype == (oplib.float32)
        with oplib.autocast("privateuse1", enabled=False):
            assert ops.scatter_add(half, 0, index, f32(2, 3, device="privateuse1")).dtype == (
                oplib.float16
            )
        # cpu tensors are not cast by a privateuse1 autocast
        assert (f32(2, 3) @ f32(3, 4)).dtype == oplib.float32
        assert oplib.is_autocast_enabled("privateuse1")
        assert not oplib.is_autocast_enabled("cpu")


_CUDA = oplib.backends.TABLE.find("cuda")
_CUDA_STATUS = "the cuda backend is not installed" if _CUDA is None else _CUDA.status()


@pytest.mark.cuda
@pytest.mark.skipif(_CUDA_STATUS is not None, reason=f"cuda unavailable: {_CUDA_STATUS}")
def test_cuda_lists_on_a_gpu():
    x, w = f32(2, 3, device="cuda"), f32(3, 4, device="cuda")
    with oplib.autocast("cuda"):
        y = x @ w
        assert y.dtype == oplib.float16 and y.device.type == "cuda"
        assert ops.exp(y).dtype == oplib.float32
        assert ops.sum(y).dtype == oplib.float32
    expected = x.cpu().numpy().astype(np.float16) @ w.cpu().numpy().astype(np.float16)
    np.testing.assert_allclose(y.cpu().numpy(), expected, rtol=1e-2)
    # cupy holds no bfloat16: refused up front, as torch refuses it on a GPU without it
    with pytest.raises(oplib.BackendError, match="cannot hold bfloat16"):
        oplib.autocast("cuda", dtype=oplib.bfloat16)


# -- nesting, enabled=False, threads -------------------------------------------------------------


def test_nested_autocast_and_disabled_inside():
    x, w = f32(2, 3), f32(3, 4)
    with oplib.autocast("cpu"):
        with oplib.autocast("cpu", dtype=oplib.float16):
            assert (x @ w).dtype == oplib.float16
            assert oplib.get_autocast_dtype("cpu") == oplib.float16
        assert (x @ w).dtype == oplib.bfloat16
        with oplib.autocast("cpu", enabled=False):
            assert (x @ w).dtype == oplib.float32
            assert not oplib.is_autocast_enabled("cpu")
        assert (x @ w).dtype == oplib.bfloat16
    assert not oplib.is_autocast_enabled("cpu")
    assert oplib.get_autocast_dtype("cpu") == oplib.bfloat16


def test_no_mode_while_off():
    with oplib.autocast("cpu", enabled=False):
        assert active_modes() == ()  # a disabled autocast costs calls nothing
    with oplib.autocast("cpu") as ac:
        assert active_modes() == (ac,)
    assert active_modes() == ()


def test_other_threads_are_not_cast():
    x, w = f32(2, 3), f32(3, 4)
    seen = []
    with oplib.autocast("cpu"):
        t = threading.Thread(target=lambda: seen.append((x @ w).dtype))
        t.start()
        t.join()
        assert (x @ w).dtype == oplib.bfloat16
    assert seen == [oplib.float32]


def test_decorator():
    x, w = f32(2, 3), f32(3, 4)

    @oplib.autocast("cpu")
    def forward(a: oplib.Tensor, depth: int) -> oplib.Tensor:
        return forward(a, depth - 1) if depth else a @ w

    assert forward(x, 2).dtype == oplib.bfloat16
    assert forward.__name__ == "forward"
    assert (x @ w).dtype == oplib.float32


# -- autograd ------------------------------------------------------------------------------------


def test_casts_are_differentiable_and_leaf_grads_keep_their_dtype():
    x, w = f32(2, 3, requires_grad=True), f32(3, 4, requires_grad=True)
    with oplib.autocast("cpu"):
        y = x @ w
    assert y.dtype == oplib.bfloat16 and y.requires_grad
    y.float().sum().backward()
    assert x.grad is not None and w.grad is not None
    assert x.grad.dtype == oplib.float32 and w.grad.dtype == oplib.float32
    expected = np.tile(w.detach().numpy().sum(1), (2, 1))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=2e-2)


def test_no_grad_casts_without_a_graph():
    x, w = f32(2, 3, requires_grad=True), f32(3, 4)
    with oplib.no_grad(), oplib.autocast("cpu"):
        y = x @ w
    assert y.dtype == oplib.bfloat16 and not y.requires_grad and y.grad_fn is None


def test_weight_cast_is_cached_within_the_block():
    x, w = f32(2, 3), f32(3, 4, requires_grad=True)
    rec = Recorder()
    with rec, oplib.autocast("cpu"):
        a, b = x @ w, x @ w
    assert rec.names().count("oplib::astype") == 3  # x twice (not a leaf weight), w once
    (a.float().sum() + b.float().sum()).backward()
    assert w.grad is not None and w.grad.dtype == oplib.float32
    rec = Recorder()
    with rec, oplib.autocast("cpu", cache_enabled=False):
        x @ w, x @ w
    assert rec.names().count("oplib::astype") == 4


# -- modes and devices without data ----------------------------------------------------------------


def test_under_fake_tensor_mode():
    with oplib.FakeTensorMode() as mode:
        a = mode.from_real(f32(2, 3))
        with oplib.autocast("cpu"):
            assert (a @ a.T).dtype == oplib.bfloat16
            assert ops.cat([a @ a.T, mode.from_real(f32(2, 2))]).dtype == oplib.float32


def test_autocast_sees_calls_before_modes_entered_inside_it():
    # torch's Autocast keys sit above the Python key: a mode entered inside autocast sees
    # the casts and the cast op, as it does when entered outside
    with oplib.autocast("cpu"), oplib.FakeTensorMode() as mode:
        a = mode.from_real(f32(2, 3))
        assert (a @ a.T).dtype == oplib.bfloat16
    rec = Recorder()
    with oplib.autocast("cpu"), rec:
        f32(2, 3) @ f32(3, 4)
    assert rec.calls == [
        ("oplib::astype", [oplib.float32]),
        ("oplib::astype", [oplib.float32]),
        ("oplib::matmul", [oplib.bfloat16, oplib.bfloat16]),
    ]


def test_meta_tensors_are_not_cpu_tensors():
    # as torch: autocast("cpu") casts cpu tensors; a meta tensor's device is meta
    m = oplib.empty(2, 3, device="meta")
    with oplib.autocast("cpu"):
        assert (m @ m.T).dtype == oplib.float32


def test_higher_order_branches_are_cast():
    x, w = f32(2, 3), f32(3, 4)
    with oplib.autocast("cpu"):
        out = oplib.cond(oplib.tensor(True), lambda a: a @ w, lambda a: a @ w, (x,))
    assert out.dtype == oplib.bfloat16


# -- errors, as torch's ----------------------------------------------------------------------------


def test_device_type_must_be_a_str():
    with pytest.raises(oplib.InvalidArgumentError, match=r"Expected `device_type` of type `str`"):
        oplib.autocast(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        oplib.autocast(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["foo", "meta"])
def test_unsupported_device_type(device):
    with pytest.raises(oplib.InvalidDeviceError) as info:
        oplib.autocast(device)
    assert isinstance(info.value, RuntimeError)  # torch raises RuntimeError
    assert f"unsupported autocast device_type {device!r}" in str(info.value)
    assert "cpu" in str(info.value)  # lists the device types that work


@pytest.mark.parametrize("dtype", [oplib.float32, oplib.float64, oplib.int8, "x"])
def test_unsupported_dtype_warns_and_disables(dtype):
    x, w = f32(2, 3), f32(3, 4)
    with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
        ac = oplib.autocast("cpu", dtype=dtype)
    with ac:
        assert (x @ w).dtype == oplib.float32
        assert not oplib.is_autocast_enabled("cpu")


def test_unavailable_device_warns_and_disables():
    cuda = oplib.backends.TABLE.find("cuda")
    if cuda is None or cuda.is_available():
        pytest.skip("needs the cuda backend installed without a usable GPU")
    with pytest.warns(UserWarning, match=r"CUDA is not available \(backend 'cuda' installed"):
        ac = oplib.autocast("cuda")
    with ac:
        assert active_modes() == ()


def test_known_device_type_without_its_backend_warns_and_disables(lib, ns):
    assert oplib.backends.TABLE.find("xpu") is None  # no xpu backend in this project
    assert oplib.is_autocast_available("xpu") and not oplib.is_autocast_available("meta")
    with pytest.warns(UserWarning, match=r"XPU is not available \(backend 'xpu' not installed\)"):
        ac = oplib.autocast("xpu")
    with ac:
        assert active_modes() == ()
    # a rule for it registers (it waits for the backend, as kernels for it do)
    _seen_op(lib, ns, [])
    handle = oplib.library.register_autocast(f"{ns}::f", "xpu", oplib.float16, lib=lib)
    assert handle.active


def test_disabled_autocast_never_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oplib.autocast("cpu", dtype=oplib.float32, enabled=False)


def test_decorating_a_non_callable():
    with pytest.raises(TypeError, match=r"autocast\(\)\(func\) requires a callable, but got int"):
        oplib.autocast("cpu")(3)  # type: ignore[arg-type, type-var]


# -- register_autocast -----------------------------------------------------------------------------


def _seen_op(lib: oplib.Library, ns: str, seen: list[Any]) -> oplib.OpOverload:
    lib.define("f(Tensor x, Tensor n, float s) -> Tensor")

    def kernel(x: np.ndarray, n: np.ndarray, s: float) -> np.ndarray:
        seen.append((x.dtype, n.dtype))
        # ops the kernel calls run with autocast off (torch runs the op excluded)
        seen.append(ops.matmul(x[None], x[:, None]).dtype)
        return x * s

    lib.impl("f", kernel, "cpu")
    return oplib.lookup(f"{ns}::f")


def test_register_autocast_casts_floating_inputs(lib, ns):
    seen: list[Any] = []
    op = _seen_op(lib, ns, seen)
    handle = oplib.library.register_autocast(f"{ns}::f", "cpu", oplib.float16, lib=lib)
    x, n = f32(3), oplib.tensor(np.arange(3))
    with oplib.autocast("cpu"):
        out = op(x, n, 2.0)
    assert out.dtype == oplib.float16
    assert seen == [(oplib.float16, np.dtype(np.int64)), oplib.float16]
    seen.clear()
    op(x, n, 2.0)  # outside autocast: untouched
    assert seen[0] == (oplib.float32, np.dtype(np.int64))
    handle.destroy()
    seen.clear()
    with oplib.autocast("cpu"):
        op(x, n, 2.0)
    assert seen[0][0] == oplib.float32


def test_register_autocast_goes_with_its_library(ns):
    seen: list[Any] = []
    owner = oplib.Library(ns, "FRAGMENT")
    op = _seen_op(owner, ns, seen)
    rules = oplib.Library(ns, "FRAGMENT")
    oplib.library.register_autocast(op, "cpu", oplib.bfloat16, lib=rules)
    with oplib.autocast("cpu"):
        op(f32(2), oplib.tensor(np.arange(2)), 1.0)
    assert seen[0][0] == oplib.bfloat16
    rules._destroy()
    seen.clear()
    with oplib.autocast("cpu"):
        op(f32(2), oplib.tensor(np.arange(2)), 1.0)
    assert seen[0][0] == oplib.float32
    owner._destroy()


def test_custom_op_register_autocast(ns, teardown):
    @oplib.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    teardown(scale)
    scale.register_autocast("cpu", oplib.float16)
    with oplib.autocast("cpu"):
        assert scale(f32(3)).dtype == oplib.float16
        with oplib.autocast("cpu", enabled=False):
            assert scale(f32(3)).dtype == oplib.float32
    assert scale(f32(3)).dtype == oplib.float32
    # the functional form on a CustomOpDef goes through the same method
    handle = oplib.library.register_autocast(scale, "cpu", oplib.bfloat16)
    with oplib.autocast("cpu"):
        assert scale(f32(3)).dtype == oplib.bfloat16
    handle.destroy()
    with oplib.autocast("cpu"):
        assert scale(f32(3)).dtype == oplib.float16


def test_register_autocast_errors(lib, ns):
    _seen_op(lib, ns, [])
    with pytest.raises(oplib.InvalidDeviceError, match="unsupported autocast device_type 'foo'"):
        oplib.library.register_autocast(f"{ns}::f", "foo", oplib.float16, lib=lib)
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        oplib.library.register_autocast(f"{ns}::f", 0, oplib.float16, lib=lib)  # type: ignore[arg-type]
    for bad in ("nope", oplib.int32, 3):
        with pytest.raises(oplib.ArgumentTypeError) as info:
            oplib.library.register_autocast(f"{ns}::f", "cpu", bad, lib=lib)
        assert f"register_autocast('{ns}::f'): cast_inputs must be a floating dtype" in str(
            info.value
        )
        assert repr(bad) in str(info.value)
    with pytest.raises(oplib.UnknownOperatorError):
        oplib.library.register_autocast(f"{ns}::missing", "cpu", oplib.float16, lib=lib)
