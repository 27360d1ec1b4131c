"""DLPack by device: ``oplib.from_dlpack`` takes a producer to the backend that owns its
memory, on the device that holds it (the producer's ``__dlpack_device__`` type and id), and a
Tensor's ``__dlpack_device__`` reports its memory as it is (``(2, k)`` for a jax array on
CUDA GPU ``k``).

The routing is tested everywhere with :class:`Producer` (numpy memory that reports the device
it is told); the tests marked ``cuda`` move jax GPU arrays to cupy and torch and back, and are
skipped, with the reason, where JAX has no GPU or cupy/torch no CUDA device."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.errors import ArgumentTypeError, BackendError

from helpers import ToyArray, toy_spec
from subproc import run_python

CPU, CUDA, CUDA_HOST, ROCM, CUDA_MANAGED = 1, 2, 3, 10, 13  # dlpack.h's DLDeviceType
NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}  # hides the GPU from a child


class Producer:
    """A DLPack producer whose memory is a numpy array but whose ``__dlpack_device__`` says
    what it is told: what is tested is where oplib sends it, not a device library."""

    def __init__(self, kind: int, index: int) -> None:
        self.data = np.arange(3.0)
        self.device = (kind, index)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.data.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


PRODUCER = "from typing import Any\nimport numpy as np\n" + textwrap.dedent(
    inspect.getsource(Producer)
)


def rocm_backend(**overrides: Any) -> oplib.BackendSpec:
    """A two-device backend importing ROCm memory (no installed backend does): its
    ``from_dlpack`` keeps the producer's device id unless told otherwise."""

    def from_dlpack(obj: Any) -> ToyArray:
        return ToyArray(np.from_dlpack(obj), obj.__dlpack_device__()[1])

    fields = {"name": "rocmtoy", "dlpack_device_type": ROCM, "from_dlpack": from_dlpack}
    return toy_spec(**{**fields, **overrides})


# -- routing by device type and id -----------------------------------------------------------


@pytest.mark.parametrize("kind", [CPU, CUDA_HOST], ids=["cpu", "pinned host"])
def test_host_memory_of_another_library_lands_on_cpu_sharing_it(kind: int) -> None:
    p = Producer(kind, 0)
    t = oplib.from_dlpack(p)
    assert t.device == oplib.device("cpu")
    assert np.shares_memory(t.numpy(), p.data)


def test_device_memory_goes_to_the_backend_of_its_type_on_its_device(teardown: Any) -> None:
    teardown(oplib.backends.register(rocm_backend()))
    t = oplib.from_dlpack(Producer(ROCM, 1))
    assert t.device == oplib.Device("rocmtoy", 1)
    assert isinstance(t.native, ToyArray) and t.native.data.tolist() == [0.0, 1.0, 2.0]


def test_a_backend_that_moves_the_memory_is_named(teardown: Any) -> None:
    moving = rocm_backend(from_dlpack=lambda obj: ToyArray(np.from_dlpack(obj), 0))
    teardown(oplib.backends.register(moving))
    with pytest.raises(
        BackendError,
        match=r"the rocmtoy backend imported ROCm memory of device 1 \(DLPack device type 10\) "
        r"as rocmtoy:0, not rocmtoy:1: its BackendSpec.from_dlpack must keep",
    ):
        oplib.from_dlpack(Producer(ROCM, 1))


def test_an_unavailable_importer_says_why(teardown: Any) -> None:
    teardown(oplib.backends.register(rocm_backend(status=lambda: "unplugged")))
    with pytest.raises(
        BackendError,
        match=r"^from_dlpack\(\): cannot import ROCm memory of device 0 \(DLPack device type "
        r"10\): the rocmtoy backend: unplugged$",
    ):
        oplib.from_dlpack(Producer(ROCM, 0))


def test_memory_no_backend_imports_is_named_with_what_the_backends_import() -> None:
    with pytest.raises(BackendError) as info:
        oplib.from_dlpack(Producer(ROCM, 1))
    message = str(info.value)
    assert message.startswith(
        "from_dlpack(): no installed backend imports DLPack device type 10: the array is in "
        "ROCm memory of device 1 (DLPack device type 10), and the installed backends import "
    )
    assert "cpu (type 1, CPU)" in message and "cuda (type 2, CUDA)" in message
    assert message.endswith("copy the array to the host in its own library first")


def test_cuda_memory_without_a_usable_cuda_backend_says_why() -> None:
    # the child has no GPU (hidden, wherever it runs): cupy is missing or sees no device
    out = run_python(
        PRODUCER
        + """
import oplib_core as oplib
OUT["reason"] = oplib.backends.get("cuda").status()
OUT["cuda"] = catch(oplib.from_dlpack, Producer(2, 1))
OUT["managed"] = str(oplib.from_dlpack(Producer(13, 0)).device)
""",
        env=NO_GPU,
    )
    assert out["reason"] is not None
    assert out["cuda"] == [
        "BackendError",
        "from_dlpack(): cannot import CUDA memory of device 1 (DLPack device type 2): the "
        f"cuda backend: {out['reason']}",
    ]
    assert out["managed"] == "cpu"  # CUDA managed memory is readable on the host too


def test_what_is_not_a_producer_is_refused() -> None:
    with pytest.raises(
        ArgumentTypeError,
        match=r"from_dlpack\(\): expected a DLPack producer \(an object with __dlpack__ and "
        r"__dlpack_device__: .*\), got list",
    ):
        oplib.from_dlpack([1.0, 2.0])


# -- a Tensor as a producer ----------------------------------------------------------------------


def test_a_tensor_reports_its_memory_and_goes_back_to_its_backend() -> None:
    t = oplib.tensor([1.0, 2.0])
    device = t.__dlpack_device__()
    assert device == (1, 0) and all(type(v) is int for v in device)
    back = oplib.from_dlpack(t)
    assert back.device == oplib.device("cpu") and np.shares_memory(back.numpy(), t.numpy())


def test_a_tensor_of_a_backend_without_dlpack_raises_buffer_error(toy: type) -> None:
    t = oplib.Tensor(toy(np.ones(2)))
    message = (
        r"the toy backend's arrays \(ToyArray\) do not support DLPack; copy the tensor to the "
        r"host first with tensor.cpu\(\)"
    )
    with pytest.raises(BufferError, match=r"^__dlpack__\(\): " + message):
        np.from_dlpack(t)
    with pytest.raises(BufferError, match=r"^__dlpack_device__\(\): " + message):
        t.__dlpack_device__()
    np.testing.assert_array_equal(t.cpu().numpy(), [1.0, 1.0])


# -- jax ------------------------------------------------------------------------------------------


def test_a_jax_array_stays_on_jax_on_its_own_device() -> None:
    pytest.importorskip("jax")
    out = run_python(
        """
        import jax, jax.numpy as jnp, oplib_core as oplib
        from oplib_jax import runtime
        x = jax.device_put(jnp.arange(3.0), jax.devices()[1])
        t = oplib.from_dlpack(x)
        OUT["device"] = str(t.device)
        OUT["dlpack"] = [[type(v).__name__, int(v)] for v in t.__dlpack_device__()]
        OUT["shared"] = t.native.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()
        OUT["tensor"] = str(oplib.from_dlpack(t).device)
        OUT["host"] = t.cpu().numpy().tolist()
        # an array on a device the jax backend does not hold (on a GPU machine: a jax
        # array on the cpu platform, outside jax.devices())
        runtime.devices = lambda: jax.devices()[:1]
        OUT["outside"] = catch(lambda: oplib.from_dlpack(x).device)
        """,
        env={"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
    )
    assert out["device"] == "jax:1" and out["tensor"] == "jax:1"
    assert out["dlpack"] == [["int", 1], ["int", 0]]  # jax's cpu memory is kDLCPU, id 0
    assert out["shared"] is True
    assert out["host"] == [0.0, 1.0, 2.0]
    kind, message = out["outside"]
    assert kind == "BackendError"
    assert message.startswith(
        "jax: this array is on JAX's CpuDevice(id=1) (platform cpu), which is not one of the "
        "devices of JAX's default platform that the jax backend holds as jax:0 ... "
        "(CpuDevice(id=0));"
    )
    assert "jax.device_put(x, jax.devices()[0])" in message


# -- on a GPU ---------------------------------------------------------------------------------


def jax_on_a_gpu() -> Any:
    """jax, when its default platform is a GPU (else the test is skipped, saying why)."""
    jax = pytest.importorskip("jax")
    if jax.default_backend() != "gpu":
        pytest.skip(f"JAX's default platform is {jax.default_backend()}, not a GPU")
    return jax


def cupy_on_a_gpu() -> Any:
    status = oplib.backends.get("cuda").status()
    if status is not None:
        pytest.skip(f"cuda unavailable: {status}")
    from oplib_cuda import runtime

    return runtime.cupy()


def torch_on_a_gpu() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.mark.cuda
def test_a_jax_gpu_array_to_cupy_and_back() -> None:
    jax = jax_on_a_gpu()
    cp = cupy_on_a_gpu()
    x = jax.numpy.arange(4, dtype=jax.numpy.float32) * 2
    (dev,) = x.devices()
    gpu = dev.local_hardware_id
    t = oplib.from_dlpack(x)
    assert t.device == oplib.Device("jax", jax.devices().index(dev))
    assert t.__dlpack_device__() == (CUDA, gpu)
    c = cp.from_dlpack(t)  # zero-copy, on the same GPU
    assert c.device.id == gpu and c.data.ptr == x.unsafe_buffer_pointer()
    u = oplib.from_dlpack(c)
    assert u.device == oplib.Device("cuda", gpu) and u.__dlpack_device__() == (CUDA, gpu)
    back = jax.numpy.from_dlpack(u)
    assert back.devices() == {dev} and back.unsafe_buffer_pointer() == c.data.ptr
    np.testing.assert_array_equal(np.asarray(back), [0.0, 2.0, 4.0, 6.0])
    np.testing.assert_array_equal(t.cpu().numpy(), [0.0, 2.0, 4.0, 6.0])
    np.testing.assert_array_equal(np.from_dlpack(t, device="cpu"), [0.0, 2.0, 4.0, 6.0])


@pytest.mark.cuda
def test_a_jax_gpu_array_to_torch_and_back() -> None:
    jax = jax_on_a_gpu()
    torch = torch_on_a_gpu()
    x = jax.numpy.arange(4, dtype=jax.numpy.float32) + 1
    (dev,) = x.devices()
    gpu = dev.local_hardware_id
    t = oplib.from_dlpack(x)
    tt = torch.from_dlpack(t)  # zero-copy, on the same GPU
    assert tt.device == torch.device("cuda", gpu)
    assert tt.data_ptr() == x.unsafe_buffer_pointer()
    back = jax.numpy.from_dlpack(tt)
    assert back.devices() == {dev} and back.unsafe_buffer_pointer() == tt.data_ptr()
    np.testing.assert_array_equal(np.asarray(back), [1.0, 2.0, 3.0, 4.0])


@pytest.mark.cuda
def test_a_torch_cuda_tensor_lands_on_cuda_of_its_gpu() -> None:
    torch = torch_on_a_gpu()
    cp = cupy_on_a_gpu()
    for gpu in range(min(torch.cuda.device_count(), 2)):
        tt = torch.arange(3, dtype=torch.float32, device=f"cuda:{gpu}")
        t = oplib.from_dlpack(tt)
        assert t.device == oplib.Device("cuda", gpu) and isinstance(t.native, cp.ndarray)
        assert t.native.data.ptr == tt.data_ptr()
        assert t.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.cuda
def test_a_jax_array_outside_the_gpu_platform_is_named() -> None:
    jax = jax_on_a_gpu()
    x = jax.device_put(jax.numpy.arange(3.0), jax.devices("cpu")[0])
    t = oplib.from_dlpack(x)
    with pytest.raises(BackendError, match=r"not one of the devices of JAX's default platform"):
        _ = t.device
