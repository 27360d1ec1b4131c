"""oplib on a CUDA device: the device module, a second device, third-party and custom
kernels (a plugin's, a ``cupy.RawKernel``, a ``cupy.ElementwiseKernel``), FakeTensorMode
over cuda tensors, Dask with cupy chunks, DLPack with torch and JAX, and the dtypes cupy
lacks. Every test is marked ``cuda`` and skips, with the reason, where cupy does not import
or no CUDA device is present (:func:`cuda_or_skip`); nothing GPU-only is imported when the
module loads. The core ops against numpy are in test_cuda_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._introspect import op_detail
from oplib_core.fake import DataAccessError, FakeArray

from helpers import make_plugin

pytestmark = pytest.mark.cuda


def cuda_or_skip() -> Any:
    """cupy, where it imports and a CUDA device is present; else skip the calling test with
    the reason the cuda backend gives ("cupy not installed ...", "no CUDA device", the
    driver's error)."""
    reason = oplib.backends.get("cuda").status()
    if reason is not None:
        pytest.skip(f"needs a CUDA device: {reason}")
    return pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def cp() -> Any:
    return cuda_or_skip()


@pytest.fixture
def current_device_restored(cp: Any) -> Iterator[None]:
    """Puts the current CUDA device back after a test that changes it."""
    saved = int(cp.cuda.runtime.getDevice())
    yield
    cp.cuda.runtime.setDevice(saved)


@pytest.fixture
def two_devices(cp: Any) -> None:
    n = oplib.cuda.device_count()
    if n < 2:
        pytest.skip(f"needs two CUDA devices; this machine has {n}")


def host(t: Any) -> np.ndarray:
    """A Tensor's or a cupy array's values, on the host."""
    if isinstance(t, oplib.Tensor):
        return np.asarray(t.detach().to("cpu").numpy())
    return np.asarray(cuda_or_skip().asnumpy(t))


CUDA0 = oplib.device("cuda:0")


# -- the device module, oplib.cuda ----------------------------------------------------------


def test_device_module_reports_the_devices_cupy_sees(cp: Any) -> None:
    assert oplib.cuda.is_available() is True
    assert oplib.cuda.device_count() == cp.cuda.runtime.getDeviceCount() >= 1
    assert oplib.backends.get("cuda").device_count() == oplib.cuda.device_count()
    assert oplib.cuda.current_device() == cp.cuda.runtime.getDevice()
    assert oplib.cuda._is_in_bad_fork() is False


@pytest.mark.usefixtures("current_device_restored")
def test_set_device_takes_an_index_a_string_or_a_device(cp: Any) -> None:
    last = oplib.cuda.device_count() - 1
    asked = [
        (last, last),
        (0, 0),
        (f"cuda:{last}", last),
        ("cuda:0", 0),
        (oplib.device(f"cuda:{last}"), last),
        (CUDA0, 0),
    ]
    for device, expected in asked:
        oplib.cuda.set_device(device)
        assert oplib.cuda.current_device() == expected, f"after set_device({device!r})"
        assert cp.cuda.runtime.getDevice() == expected, f"after set_device({device!r})"


def test_set_device_refuses_another_backends_device(cp: Any) -> None:
    with pytest.raises(oplib.InvalidDeviceError, match="Invalid device, must be cuda device"):
        oplib.cuda.set_device("cpu")
    with pytest.raises(oplib.InvalidDeviceError, match="must be >= 0"):
        oplib.cuda.set_device(-1)


def test_synchronize_waits_for_queued_work(cp: Any) -> None:
    n = 4096
    a = oplib.full((n, n), 1.0 / n, device="cuda")
    y = a
    for _ in range(10):  # some tens of milliseconds of queued matmuls
        y = y @ a
    done = cp.cuda.Event()
    done.record()
    oplib.cuda.synchronize()
    assert done.done, "oplib.cuda.synchronize() returned before the queued work finished"
    oplib.cuda.synchronize(0)
    oplib.cuda.synchronize("cuda:0")
    oplib.cuda.synchronize(CUDA0)
    np.testing.assert_allclose(host(y[0, :3]), np.full(3, 1.0 / n), rtol=1e-4)


def test_ops_run_on_the_callers_cupy_stream(cp: Any, ns: str) -> None:
    """oplib does not swap the current stream: a kernel sees the stream the caller made
    current, and the core kernels' device context leaves it current."""
    streams: list[int] = []

    def twice(x: Any) -> Any:
        streams.append(cp.cuda.get_current_stream().ptr)
        return x * 2

    oplib.define(f"{ns}::twice", "(Tensor x) -> Tensor")
    oplib.register_kernel(f"{ns}::twice", "cuda", twice)
    data = np.linspace(0.0, 4.0, 1024, dtype=np.float32)  # exp stays finite in float32
    x = oplib.tensor(data, device="cuda")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        y = getattr(oplib.ops, ns).twice((x + 1.0).exp().log())
        assert cp.cuda.get_current_stream().ptr == stream.ptr
    stream.synchronize()
    assert streams == [stream.ptr]
    np.testing.assert_allclose(host(y), 2 * (data + 1), rtol=1e-5)


def test_manual_seed_makes_cupy_random_numbers_reproducible(cp: Any, ns: str) -> None:
    """A third-party random op on cuda (cupy's global generator, which manual_seed seeds)."""
    oplib.define(f"{ns}::rand", "(SymInt[] size, *, Device? device=None) -> Tensor")

    def rand(size: list[int], *, device: Any = None) -> Any:
        with cp.cuda.Device(None if device is None else device.index):
            return cp.random.random_sample(tuple(size), dtype=cp.float64)

    oplib.register_kernel(f"{ns}::rand", "cuda", rand)
    op = getattr(oplib.ops, ns).rand

    def draw() -> np.ndarray:
        out = op([5], device=CUDA0)  # a user's op called without arrays gives a Tensor
        assert isinstance(out, oplib.Tensor) and out.device == CUDA0
        assert isinstance(out.native, cp.ndarray) and out.native.device.id == 0
        return np.asarray(cp.asnumpy(out.native))

    oplib.cuda.manual_seed(1234)
    first, second = draw(), draw()
    oplib.cuda.manual_seed(1234)
    again = draw()
    np.testing.assert_array_equal(again, first)
    assert not np.array_equal(second, first), "consecutive draws should differ"
    assert oplib.cuda.initial_seed() == 1234
    oplib.cuda.manual_seed(4321)
    assert not np.array_equal(draw(), first), "another seed gave the same numbers"
    assert oplib.cuda.initial_seed() == 4321


@pytest.mark.usefixtures("current_device_restored")
def test_manual_seed_all_seeds_every_device(cp: Any) -> None:
    def draws() -> list[np.ndarray]:
        out = []
        for i in range(oplib.cuda.device_count()):
            with cp.cuda.Device(i):
                out.append(cp.asnumpy(cp.random.random_sample((4,))))
        return out

    oplib.cuda.manual_seed_all(7)
    first = draws()
    oplib.cuda.manual_seed_all(7)
    for i, (a, b) in enumerate(zip(draws(), first, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"cuda:{i} after manual_seed_all(7)")
    for i in range(oplib.cuda.device_count()):
        oplib.cuda.set_device(i)
        assert oplib.cuda.initial_seed() == 7, f"initial_seed() on cuda:{i}"


# -- where tensors live -----------------------------------------------------------------------


def test_cpu_and_cuda_inputs_raise_device_mismatch(cp: Any) -> None:
    a = oplib.tensor(np.ones(3, np.float32), device="cuda")
    b = oplib.tensor(np.ones(3, np.float32))
    with pytest.raises(oplib.DeviceMismatchError, match="expected all tensor arguments on one"):
        a + b
    with pytest.raises(oplib.DeviceMismatchError) as info:
        oplib.ops.oplib.add(cp.ones(3), np.ones(3))
    assert info.value.op == "oplib::add"
    assert set(info.value.devices.values()) == {"cuda:0", "cpu"}


def test_tensors_on_the_second_device_stay_there(cp: Any, two_devices: None) -> None:
    data = np.linspace(0.5, 2.0, 6).reshape(2, 3)
    x = oplib.tensor(data, device="cuda:1")
    assert x.device == oplib.device("cuda:1") and x.native.device.id == 1
    results = {
        "exp, mul, add": (x * 2.0).exp() + x,
        "sum": x.sum(dim=[1]),
        "matmul": x @ x.T,
        "zeros": oplib.zeros(2, device="cuda:1"),
        "clone": oplib.ops.oplib.clone(x),
    }
    for what, out in results.items():
        assert out.device == oplib.device("cuda:1"), f"{what} is on {out.device}"
        assert out.native.device.id == 1, f"{what}'s cupy array is on device {out.native.device.id}"
    np.testing.assert_allclose(host(results["matmul"]), data @ data.T, rtol=1e-12)
    moved = x.to("cuda:0")
    assert moved.native.device.id == 0
    np.testing.assert_array_equal(host(moved), data)


def test_cupy_arrays_on_the_second_device_are_computed_there(cp: Any, two_devices: None) -> None:
    with cp.cuda.Device(1):
        a = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    out = oplib.ops.oplib.matmul(a, a.T)
    assert isinstance(out, cp.ndarray) and out.device.id == 1
    np.testing.assert_allclose(cp.asnumpy(out), cp.asnumpy(a) @ cp.asnumpy(a).T)


@pytest.mark.usefixtures("current_device_restored")
def test_set_device_chooses_where_index_less_cuda_tensors_go(cp: Any, two_devices: None) -> None:
    oplib.cuda.set_device(1)
    assert oplib.zeros(3, device="cuda").native.device.id == 1
    assert oplib.tensor([1.0, 2.0], device="cuda").native.device.id == 1


def test_inputs_on_two_cuda_devices_raise_device_mismatch(cp: Any, two_devices: None) -> None:
    a = oplib.tensor(np.ones(3, np.float32), device="cuda:0")
    b = oplib.tensor(np.ones(3, np.float32), device="cuda:1")
    with pytest.raises(oplib.DeviceMismatchError) as info:
        a + b
    assert info.value.op == "oplib::add"
    assert info.value.devices == {"self": "cuda:0", "other": "cuda:1"}
    assert "cuda:0" in str(info.value) and "cuda:1" in str(info.value)
    with cp.cuda.Device(1):
        c1 = cp.ones(3)
    with pytest.raises(oplib.DeviceMismatchError):
        oplib.ops.oplib.mul(cp.ones(3), c1)


def test_autograd_on_the_second_device(cp: Any, two_devices: None) -> None:
    x = oplib.tensor(np.linspace(-1.0, 1.0, 5), device="cuda:1", requires_grad=True)
    (x.tanh() * x).sum().backward()
    assert x.grad is not None and x.grad.native.device.id == 1
    xn = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(host(x.grad), np.tanh(xn) + xn * (1 - np.tanh(xn) ** 2), rtol=1e-12)


# -- third-party kernels ----------------------------------------------------------------------


def test_library_cuda_kernel_on_cupy_arrays_and_tensors(cp: Any, lib: oplib.Library) -> None:
    seen: list[type] = []

    def softplus(x: Any) -> Any:
        seen.append(type(x))
        return cp.log1p(cp.exp(x))

    lib.define("softplus(Tensor x) -> Tensor")
    lib.impl("softplus", softplus, "CUDA")
    op = getattr(oplib.ops, lib.ns).softplus
    data = np.linspace(-2.0, 2.0, 5)
    native = op(cp.asarray(data))
    assert isinstance(native, cp.ndarray)
    tensor = op(oplib.tensor(data, device="cuda"))
    assert isinstance(tensor, oplib.Tensor) and tensor.device == CUDA0
    for out in (native, tensor):
        np.testing.assert_allclose(host(out), np.log1p(np.exp(data)), rtol=1e-12)
    assert seen == [cp.ndarray, cp.ndarray]
    with pytest.raises(oplib.NoKernelError) as info:
        op(oplib.tensor(data))  # no cpu kernel
    assert info.value.op == f"{lib.ns}::softplus"


def test_register_kernel_for_cuda_beside_cpu(cp: Any, ns: str) -> None:
    oplib.define(f"{ns}::axpy", "(Tensor x, Tensor y, float a) -> Tensor")
    oplib.register_kernel(f"{ns}::axpy", "cpu", lambda x, y, a: a * x + y)
    oplib.register_kernel(f"{ns}::axpy", "cuda", lambda x, y, a: cp.add(cp.multiply(x, a), y))
    op = getattr(oplib.ops, ns).axpy
    x, y = np.arange(4.0), np.ones(4)
    on_cuda = op(oplib.tensor(x, device="cuda"), oplib.tensor(y, device="cuda"), 3.0)
    on_cpu = op(oplib.tensor(x), oplib.tensor(y), 3.0)
    assert isinstance(on_cuda.native, cp.ndarray) and isinstance(on_cpu.native, np.ndarray)
    np.testing.assert_array_equal(host(on_cuda), on_cpu.numpy())


def test_in_process_plugin_gives_a_cuda_kernel(
    cp: Any, ns: str, teardown: Callable[..., None]
) -> None:
    seen: list[tuple[type, type]] = []

    def oplib_define(registrar: Any) -> None:
        registrar.define(f"{ns}::hypot", "(Tensor x, Tensor y) -> Tensor")

    def oplib_impl(registrar: Any) -> None:
        def hypot(x: Any, y: Any) -> Any:
            seen.append((type(x), type(y)))
            return cp.hypot(x, y)

        registrar.register_kernel(f"{ns}::hypot", "cuda", hypot)

    name = f"{ns}_gpu_plugin"
    record = oplib.plugins.register(
        make_plugin(name, oplib_define=oplib_define, oplib_impl=oplib_impl), name=name
    )
    teardown(lambda: oplib.plugins.unregister(name))
    assert record.status == "loaded", record.error
    op = getattr(oplib.ops, ns).hypot
    out = op(cp.asarray([3.0, 5.0]), cp.asarray([4.0, 12.0]))
    assert isinstance(out, cp.ndarray)
    t = op(oplib.tensor([3.0, 5.0], device="cuda"), oplib.tensor([4.0, 12.0], device="cuda"))
    assert t.device == CUDA0
    for result in (out, t):
        np.testing.assert_allclose(host(result), [5.0, 13.0])
    assert seen == [(cp.ndarray, cp.ndarray)] * 2
    cuda = [k for k in op_detail(f"{ns}::hypot")["kernels"] if k["key"] == "cuda"]
    assert [(k["plugin"], k["status"]) for k in cuda] == [(name, "live")]


# -- custom ops with cupy kernels -------------------------------------------------------------

# A cube kernel, one entry point per dtype (gradcheck runs in float64).
CUBE_SOURCE = r"""
extern "C" __global__ void oplib_test_cube_f32(const float* x, float* y, long long n) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v * v * v; }
}
extern "C" __global__ void oplib_test_cube_f64(const double* x, double* y, long long n) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) { double v = x[i]; y[i] = v * v * v; }
}
"""


def raw_cube(cp: Any) -> Callable[[Any], Any]:
    """``x ** 3`` through a ``cupy.RawKernel`` (float32, float64)."""
    kernels = {
        np.dtype(np.float32): cp.RawKernel(CUBE_SOURCE, "oplib_test_cube_f32"),
        np.dtype(np.float64): cp.RawKernel(CUBE_SOURCE, "oplib_test_cube_f64"),
    }

    def cube(x: Any) -> Any:
        kernel = kernels.get(np.dtype(x.dtype))
        if kernel is None:
            raise TypeError(f"cube: expected float32 or float64, got {x.dtype}")
        x = cp.ascontiguousarray(x)
        y = cp.empty_like(x)
        n = int(x.size)
        if n:
            block = 128
            kernel(((n + block - 1) // block,), (block,), (x, y, np.int64(n)))
        return y

    return cube


def assert_opcheck_ran_on_cuda(result: Any) -> None:
    """Every check passed, and ran on cuda (none skipped there)."""
    assert set(result.values()) == {"SUCCESS"}, result
    rows = {(r.check, r.backend, r.status) for r in result.details}
    for check in ("test_schema", "test_faketensor", "test_gradcheck", "test_backends"):
        assert (check, "cuda", "PASS") in rows, f"{check} did not pass on cuda: {sorted(rows)}"


def test_raw_kernel_custom_op(cp: Any, ns: str) -> None:
    kernel = raw_cube(cp)

    @oplib.custom_op(f"{ns}::cube", mutates_args=(), device_types="cuda")
    def cube(x: oplib.Tensor) -> oplib.Tensor:
        return kernel(x)

    cube.register_kernel("cpu", lambda x: x * x * x)  # the reference test_backends compares
    cube.register_fake(lambda x: oplib.empty_like(x))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, grad: Any) -> Any:
        (x,) = ctx.saved_tensors
        return grad * 3.0 * x * x

    cube.register_autograd(backward, setup_context=setup_context)

    data = np.linspace(-1.5, 1.5, 1000)
    x = oplib.tensor(data, device="cuda", requires_grad=True)
    y = cube(x)
    assert isinstance(y.native, cp.ndarray) and y.device == CUDA0
    np.testing.assert_allclose(host(y), data**3, rtol=1e-12)
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(host(x.grad), 3 * data**2, rtol=1e-12)
    native = cube(cp.asarray(data, dtype=cp.float32))  # cupy in, cupy out, no autograd
    assert isinstance(native, cp.ndarray) and native.dtype == np.float32
    np.testing.assert_allclose(cp.asnumpy(native), (data**3).astype(np.float32), rtol=1e-6)

    small = oplib.tensor(np.linspace(-1.0, 1.0, 7), device="cuda", requires_grad=True)
    assert oplib.autograd.gradcheck(cube, (small,))
    sample = oplib.tensor(
        np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(3, 4), device="cuda", requires_grad=True
    )
    assert_opcheck_ran_on_cuda(oplib.opcheck(cube, (sample,), backends=["cuda"]))


def test_elementwise_kernel_custom_op(cp: Any, ns: str) -> None:
    elu_kernel = cp.ElementwiseKernel(
        "T x, T a", "T y", "y = x > 0 ? x : a * (exp(x) - 1)", "oplib_test_elu"
    )
    elu_grad_kernel = cp.ElementwiseKernel(
        "T x, T a, T g", "T y", "y = x > 0 ? g : g * a * exp(x)", "oplib_test_elu_grad"
    )

    def elu_host(x: Any, a: float) -> Any:
        return np.where(x > 0, x, a * (np.exp(x) - 1))

    @oplib.custom_op(f"{ns}::elu_grad", mutates_args=(), device_types="cuda")
    def elu_grad(x: oplib.Tensor, a: float, g: oplib.Tensor) -> oplib.Tensor:
        return elu_grad_kernel(x, x.dtype.type(a), g)

    @oplib.custom_op(f"{ns}::elu", mutates_args=(), device_types="cuda")
    def elu(x: oplib.Tensor, a: float) -> oplib.Tensor:
        return elu_kernel(x, x.dtype.type(a))

    elu.register_kernel("cpu", elu_host)
    elu_grad.register_kernel("cpu", lambda x, a, g: np.where(x > 0, g, g * a * np.exp(x)))
    elu.register_fake(lambda x, a: oplib.empty_like(x))

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.a = inputs[1]

    def backward(ctx: Any, grad: Any) -> Any:
        (x,) = ctx.saved_tensors
        return elu_grad(x, ctx.a, grad), None

    elu.register_autograd(backward, setup_context=setup_context)

    data = np.linspace(-2.0, 2.0, 9)
    x = oplib.tensor(data, device="cuda", requires_grad=True)
    y = elu(x, 0.7)
    assert isinstance(y.native, cp.ndarray)
    np.testing.assert_allclose(host(y), elu_host(data, 0.7), rtol=1e-12)
    y.sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(host(x.grad), np.where(data > 0, 1.0, 0.7 * np.exp(data)))
    wiggly = oplib.tensor(np.linspace(-1.3, 1.1, 6), device="cuda", requires_grad=True)
    assert oplib.autograd.gradcheck(lambda t: elu(t, 0.7), (wiggly,))
    sample = oplib.tensor(
        np.linspace(-1.7, 1.9, 8, dtype=np.float32), device="cuda", requires_grad=True
    )
    assert_opcheck_ran_on_cuda(oplib.opcheck(elu, (sample, 0.5), backends=["cuda"]))


# -- FakeTensorMode ---------------------------------------------------------------------------


def test_fake_tensor_mode_over_cuda_tensors(cp: Any, ns: str) -> None:
    calls: list[str] = []

    def scale(x: Any, a: float) -> Any:
        calls.append("cuda")
        return x * a

    oplib.define(f"{ns}::scale", "(Tensor x, float a) -> Tensor")
    oplib.register_kernel(f"{ns}::scale", "cuda", scale)
    oplib.register_fake(f"{ns}::scale", lambda x, a: oplib.empty_like(x))
    real = oplib.tensor(np.ones((4, 5), np.float32), device="cuda")
    needs_grad = oplib.tensor(np.ones(3), device="cuda", requires_grad=True)
    native = cp.zeros((3, 2))  # (made before the count: the test's own GPU memory)
    pool = cp.get_default_memory_pool()
    before = pool.used_bytes()
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(real)
        n = mode.from_real(native)
        g = mode.from_real(needs_grad)
        big = oplib.empty(60_000, 60_000, device="cuda:0")  # 14.4 GB, were it real
        results = {
            "from_real": (x, (4, 5), np.float32),
            "native from_real": (n, (3, 2), np.float64),
            "third-party op": (getattr(oplib.ops, ns).scale(x @ x.T, 2.0), (4, 4), np.float32),
            "reduction": ((x * 3.0).sum(dim=[1]), (4,), np.float32),
            "factory": (big, (60_000, 60_000), np.float32),
            "matmul of the factory": (big @ big, (60_000, 60_000), np.float32),
            "native": (n.T @ n, (2, 2), np.float64),
        }
        for what, (t, shape, dtype) in results.items():
            assert isinstance(t.native, FakeArray), f"{what}: {type(t.native).__name__}"
            assert (t.shape, t.dtype, t.device) == (shape, np.dtype(dtype), CUDA0), what
        assert g.requires_grad
        with pytest.raises(DataAccessError):
            x.tolist()
    assert calls == [], "the cuda kernel ran under FakeTensorMode"
    assert pool.used_bytes() <= before, "FakeTensorMode allocated GPU memory"
    assert isinstance(real.native, cp.ndarray)  # the real tensor is untouched


# -- Dask with cupy chunks --------------------------------------------------------------------


def test_dask_array_of_cupy_chunks_through_oplib_ops(cp: Any) -> None:
    da = pytest.importorskip("dask.array")
    data = np.arange(16, dtype=np.float32).reshape(4, 4)
    a = da.from_array(cp.asarray(data), chunks=(2, 2), asarray=False)
    summed = oplib.ops.oplib.add(a, a)
    assert isinstance(summed, da.Array)
    computed = summed.compute()
    assert isinstance(computed, cp.ndarray), type(computed)
    np.testing.assert_array_equal(cp.asnumpy(computed), data + data)

    t = oplib.tensor(a)
    assert t.device.type == "dask"
    chain = ((t * 0.1).exp() + 1.0).sum(dim=[1])
    assert chain.device.type == "dask"
    chunk = chain.native.compute()
    assert isinstance(chunk, cp.ndarray), type(chunk)
    np.testing.assert_allclose(
        host(chain), (np.exp(data * np.float32(0.1)) + 1).sum(axis=1), rtol=1e-5
    )


# -- DLPack with torch and JAX ----------------------------------------------------------------


def test_dlpack_with_torch_on_the_gpu_is_zero_copy(cp: Any) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch cannot use CUDA here (a CPU-only build of torch)")
    source = torch.arange(6, dtype=torch.float32, device="cuda:0")
    t = oplib.from_dlpack(source)
    assert t.device == CUDA0 and isinstance(t.native, cp.ndarray)
    assert t.native.data.ptr == source.data_ptr(), "from_dlpack copied torch's memory"
    back = torch.from_dlpack(t)
    assert back.device == torch.device("cuda:0")
    assert back.data_ptr() == source.data_ptr(), "torch.from_dlpack copied oplib's memory"
    y = t * 2.0 + 1.0
    ty = torch.from_dlpack(y)
    assert ty.data_ptr() == y.native.data.ptr
    torch.testing.assert_close(ty, source * 2 + 1)
    source[0] = 100.0  # one buffer: a write through torch shows in oplib
    torch.cuda.synchronize()
    assert host(t)[0] == 100.0


@pytest.fixture
def jax_gpu(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """jax and its first GPU device (skips where jax or its GPU backend is missing). JAX
    would otherwise preallocate 75% of the card on first use in this process."""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"jax has no GPU backend here: {e}")
    return jax, gpus[0]


def test_dlpack_jax_gpu_array_into_oplib_and_back(cp: Any, jax_gpu: tuple[Any, Any]) -> None:
    jax, gpu = jax_gpu
    jnp = jax.numpy
    x = jax.device_put(jnp.arange(4, dtype=jnp.float32), gpu)
    t = oplib.from_dlpack(x)
    assert t.device.type == "jax", "a jax array stays on its own backend"
    y = t * 2.0
    back = jnp.from_dlpack(y)
    assert back.devices() == {gpu}
    np.testing.assert_array_equal(np.asarray(back), [0.0, 2.0, 4.0, 6.0])
    on_cuda = t.to("cuda")
    assert on_cuda.device == CUDA0 and isinstance(on_cuda.native, cp.ndarray)
    np.testing.assert_array_equal(host(on_cuda), [0.0, 1.0, 2.0, 3.0])


def test_dlpack_oplib_cuda_tensor_into_jax(cp: Any, jax_gpu: tuple[Any, Any]) -> None:
    jax, gpu = jax_gpu
    t = oplib.tensor(np.arange(5, dtype=np.float32), device="cuda:0") * 3.0
    x = jax.numpy.from_dlpack(t)
    assert x.devices() == {gpu}
    np.testing.assert_array_equal(np.asarray(x), np.arange(5, dtype=np.float32) * 3)


# -- dtypes cupy lacks ------------------------------------------------------------------------

NUMPY_DTYPES = [
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
ML_DTYPES = [
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e8m0fnu",
]  # fmt: skip


@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_cuda_holds_every_numpy_dtype(cp: Any, name: str) -> None:
    dtype = np.dtype(getattr(oplib, name))
    assert oplib.backends.get("cuda").dtype_problem(dtype) is None
    data = np.arange(-2, 3).astype(dtype)
    t = oplib.tensor(data, device="cuda")
    assert isinstance(t.native, cp.ndarray) and t.dtype == dtype
    np.testing.assert_array_equal(host(t), data)
    assert oplib.zeros(3, dtype=dtype, device="cuda").native.dtype == dtype


@pytest.mark.parametrize("name", ML_DTYPES)
def test_cuda_declares_that_it_does_not_hold_ml_dtypes(cp: Any, name: str) -> None:
    """Declared, not discovered (cupy 14's bfloat16 is experimental, cupy 13 has none):
    the reason names the dtype."""
    dtype = np.dtype(getattr(oplib, name))
    problem = oplib.backends.get("cuda").dtype_problem(dtype)
    assert problem is not None and str(dtype) in problem


#: Ways of asking cuda for bfloat16 data (called in the test, never at import).
BFLOAT16_ON_CUDA: dict[str, Callable[[], Any]] = {
    "tensor": lambda: oplib.tensor(np.ones(2, dtype=oplib.bfloat16), device="cuda"),
    "zeros": lambda: oplib.zeros(2, dtype=oplib.bfloat16, device="cuda"),
    "full": lambda: oplib.full((2,), 1.5, dtype=oplib.bfloat16, device="cuda"),
    "arange": lambda: oplib.arange(4, dtype=oplib.bfloat16, device="cuda"),
    "Tensor.to": lambda: oplib.tensor(np.ones(2, dtype=oplib.bfloat16)).to("cuda"),
    "astype": lambda: oplib.ops.oplib.astype(oplib.ones(2, device="cuda"), oplib.bfloat16),
}


@pytest.mark.parametrize("call", list(BFLOAT16_ON_CUDA))
def test_bfloat16_on_cuda_raises_backend_dtype_error(cp: Any, call: str) -> None:
    with pytest.raises(oplib.BackendDtypeError) as info:
        BFLOAT16_ON_CUDA[call]()
    message = str(info.value)
    assert "cuda" in message and "bfloat16" in message, message
    refused: Any = info.value.dtype
    assert info.value.backend == "cuda" and np.dtype(refused) == oplib.bfloat16


def test_float8_on_cuda_raises_backend_dtype_error(cp: Any) -> None:
    with pytest.raises(oplib.BackendDtypeError, match="float8_e4m3fn") as info:
        oplib.zeros(2, dtype=oplib.float8_e4m3fn, device="cuda")
    assert info.value.backend == "cuda"


def test_in_place_add_writes_into_self_and_keeps_overlapping_views_right(cp: Any) -> None:
    """add_/mul_ of two cupy arrays of one dtype and shape are written by cupy's ufunc into
    self; a shifted view of self (which cupy's kernels would read while writing) takes the
    copying path and gives numpy's answer."""
    x = cp.ones(1 << 16, dtype=cp.float32)
    y = cp.full(1 << 16, 2.0, dtype=cp.float32)
    ptr = x.data.ptr
    assert oplib.ops.oplib.add_.Tensor(x, y) is x and x.data.ptr == ptr
    oplib.ops.oplib.mul_.Tensor(x, y)
    np.testing.assert_array_equal(cp.asnumpy(x), np.full(1 << 16, 6.0, np.float32))
    data = np.arange(4096, dtype=np.float64)
    z = cp.asarray(data)
    oplib.ops.oplib.add_.Tensor(z[1:], z[:-1])
    expected = data.copy()
    expected[1:] = data[1:] + data[:-1]
    np.testing.assert_array_equal(cp.asnumpy(z), expected)
