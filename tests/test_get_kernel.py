"""``oplib.library.get_kernel``: torch's ``torch.library.get_kernel`` (a handle on the kernel
an op runs for a key; torch 2.13 on CPU: ``SafeKernelFunction`` with ``call_boxed`` and
``op_handle``, 'no kernel for CUDA for gk::f', 'Alias keys do not have runtime kernel
registrations.', 'Invalid dispatch key: Nope')."""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.library import KernelHandle, get_kernel


def _define(lib: oplib.Library, ns: str) -> None:
    lib.define("f(Tensor x) -> Tensor")


def test_cpu_kernel_on_arrays_and_tensors(lib, ns):
    _define(lib, ns)

    def plus1(x):
        return x + 1

    lib.impl("f", plus1, "CPU")
    k = get_kernel(f"{ns}::f", "CPU")
    assert isinstance(k, KernelHandle)
    assert k.op is oplib.lookup(f"{ns}::f") and k.op_handle is k.op
    assert k.kernel is plus1 and k.served_by == "cpu" and k.key == "CPU"
    out = k(np.zeros(2))
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 1.0]
    t = k(oplib.tensor([1.0, 2.0]))
    assert isinstance(t, oplib.Tensor) and t.tolist() == [2.0, 3.0]
    assert k.call_boxed(oplib.DispatchKeySet(("cpu",)), np.zeros(1)).tolist() == [1.0]
    assert f"registered at {__file__}:" in repr(k) and f"{ns}::f" in repr(k)


def test_every_spelling_of_the_op(ns, teardown):
    @oplib.custom_op(f"{ns}::g", mutates_args=())
    def g(x: oplib.Tensor) -> oplib.Tensor:
        return x * 2

    teardown(g)
    packet = getattr(oplib.ops, ns).g
    for spelling in (f"{ns}::g", f"{ns}::g.default", packet, packet.default, g):
        k = get_kernel(spelling, "cpu")
        assert k.op is packet.default
        assert k(np.ones(2)).tolist() == [2.0, 2.0]


def test_default_kernel_serves_a_backend_key(lib, ns):
    _define(lib, ns)
    lib.impl("f", lambda x: x * 3, "CompositeExplicitAutograd")
    k = get_kernel(f"{ns}::f", "CPU")
    assert k.served_by == "CompositeExplicitAutograd"
    assert "served by CompositeExplicitAutograd" in repr(k)
    assert k(np.ones(1)).tolist() == [3.0]


def test_the_handle_keeps_the_original_kernel(lib, ns):
    # torch's use: keep the original, override the key, call the original from the override
    _define(lib, ns)
    lib.impl("f", lambda x: x + 1, "CPU")
    original = get_kernel(f"{ns}::f", "CPU")

    def conditional(x):
        return original(x) if (x < 0).any() else np.zeros_like(x)

    oplib.impl(f"{ns}::f", "cpu", conditional, lib=lib, allow_override=True)
    op = oplib.lookup(f"{ns}::f")
    assert op(np.array([1.0, 2.0])).tolist() == [0.0, 0.0]
    assert op(np.array([-1.0, 2.0])).tolist() == [0.0, 3.0]


def test_core_op():
    k = get_kernel("oplib::add", "cpu")
    assert k(np.ones(2), np.ones(2)).tolist() == [2.0, 2.0]
    assert k(oplib.tensor([1.0]), oplib.tensor([2.0])).tolist() == [3.0]


def test_autograd_and_fake_keys(lib, ns):
    _define(lib, ns)
    lib.impl("f", lambda x: x * 2, "CPU")
    with pytest.raises(oplib.NoKernelError, match=f"no kernel for Autograd for {ns}::f"):
        get_kernel(f"{ns}::f", "Autograd")
    oplib.register_autograd(f"{ns}::f", lambda ctx, grad: grad * 2, lib=lib)
    oplib.register_fake(f"{ns}::f", lambda x: oplib.empty_like(x), lib=lib)
    assert get_kernel(f"{ns}::f", "Autograd").served_by == "Autograd"
    fake = get_kernel(f"{ns}::f", "Fake")
    assert fake.served_by == "Fake"
    assert get_kernel(f"{ns}::f", "Meta").served_by == "Fake"  # meta runs the fake kernel


def test_fallthrough_is_skipped_as_dispatch_skips_it(lib, ns):
    _define(lib, ns)
    lib.impl("f", oplib.fallthrough_kernel, "CPU")
    with pytest.raises(oplib.NoKernelError):
        get_kernel(f"{ns}::f", "CPU")
    lib.impl("f", lambda x: x - 1, "default")
    k = get_kernel(f"{ns}::f", "CPU")
    assert k.served_by == "CompositeExplicitAutograd" and k(np.ones(1)).tolist() == [0.0]


# -- errors, as torch's ---------------------------------------------------------------------------


def test_no_kernel_for_the_key(lib, ns):
    _define(lib, ns)
    lib.impl("f", lambda x: x, "CPU")
    with pytest.raises(oplib.NoKernelError) as info:
        get_kernel(f"{ns}::f", "CUDA")
    assert isinstance(info.value, RuntimeError)  # torch raises RuntimeError
    message = str(info.value)
    assert f"no kernel for CUDA for {ns}::f" in message
    assert "Its kernels: cpu" in message and "oplib.register_kernel" in message


def test_op_without_any_kernel(lib, ns):
    _define(lib, ns)
    with pytest.raises(oplib.NoKernelError, match=r"Its kernels: \(none\)"):
        get_kernel(f"{ns}::f", "CPU")


@pytest.mark.parametrize(
    "key", ["CompositeExplicitAutograd", "default", "CompositeImplicitAutograd"]
)
def test_alias_keys_are_refused(lib, ns, key):
    _define(lib, ns)
    lib.impl("f", lambda x: x, "CompositeExplicitAutograd")
    with pytest.raises(oplib.UnknownDispatchKeyError) as info:
        get_kernel(f"{ns}::f", key)
    assert isinstance(info.value, RuntimeError)
    assert "alias keys do not have runtime kernel registrations" in str(info.value)


def test_unknown_key_and_op(lib, ns):
    _define(lib, ns)
    with pytest.raises(oplib.UnknownDispatchKeyError, match="unknown dispatch key 'Nope'") as info:
        get_kernel(f"{ns}::f", "Nope")
    assert isinstance(info.value, ValueError)  # torch: ValueError("Invalid dispatch key")
    with pytest.raises(oplib.UnknownOperatorError, match=f"{ns}::missing"):
        get_kernel(f"{ns}::missing", "CPU")
    with pytest.raises(oplib.ArgumentTypeError, match="dispatch_key must be a key name"):
        get_kernel(f"{ns}::f", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        get_kernel(3, "CPU")
