"""What replaces torch's ``triton_op`` / ``wrap_triton``: a GPU kernel of your own,
registered for the op's ``"cuda"`` key.

torch::

    @torch.library.triton_op("mylib::add_scaled", mutates_args=())
    def add_scaled(x: Tensor, y: Tensor, alpha: float) -> Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        wrap_triton(add_scaled_kernel)[(triton.cdiv(n, 256),)](x, y, out, alpha, n, BLOCK=256)
        return out

oplib: the op is a ``custom_op`` whose body is the cpu kernel (numpy), and the GPU kernel is
registered for ``"cuda"`` with ``register_kernel``; it receives cupy arrays, here launching a
``cupy.RawKernel`` (CUDA C, compiled once on first use). The fake kernel and the gradient
formula are what ``triton_op`` derived by tracing the function; in oplib you write them
(two lines each), and the op then works under ``FakeTensorMode``, on meta and with autograd
on every device.

Run ``python examples/triton_replacement.py``: the cpu part runs anywhere, the cuda part
where cupy and a GPU are.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import oplib_core as oplib

# CUDA C for cupy.RawKernel: one thread per element, float32 only (the cuda kernel below
# refuses other dtypes by name).
SOURCE = r"""
extern "C" __global__
void add_scaled(const float* x, const float* y, const float alpha, float* out,
                const long long n) {
    long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        out[i] = x[i] + alpha * y[i];
    }
}
"""
BLOCK = 256


@oplib.custom_op("triton_demo::add_scaled", mutates_args=(), device_types="cpu")
def add_scaled(x: oplib.Tensor, y: oplib.Tensor, alpha: float) -> oplib.Tensor:
    """``x + alpha * y``; this body is the cpu kernel (it gets numpy arrays)."""
    return np.add(x, np.multiply(alpha, y, dtype=x.dtype), dtype=x.dtype)


@add_scaled.register_fake
def _(x: Any, y: Any, alpha: float) -> Any:
    oplib._check(x.shape == y.shape, lambda: f"shapes differ: {x.shape} and {y.shape}")
    return oplib.empty_like(x)


def _backward(ctx: Any, grad: oplib.Tensor) -> tuple[oplib.Tensor, oplib.Tensor, None]:
    return grad, grad * ctx.alpha, None


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.alpha = inputs[2]


add_scaled.register_autograd(_backward, setup_context=_setup_context)


@functools.cache
def _raw_kernel() -> Any:
    """The compiled kernel (compiled once, on the first cuda call: importing this module
    needs no cupy)."""
    import cupy  # only where the cuda kernel runs

    return cupy.RawKernel(SOURCE, "add_scaled")


@add_scaled.register_kernel("cuda")
def _(x: Any, y: Any, alpha: float) -> Any:
    import cupy

    if x.dtype != np.float32 or y.dtype != np.float32:
        raise TypeError(
            f"triton_demo::add_scaled on cuda: the kernel is float32 only, got {x.dtype} "
            f"and {y.dtype}"
        )
    x, y = cupy.ascontiguousarray(x), cupy.ascontiguousarray(y)
    out = cupy.empty_like(x)
    n = x.size
    grid = ((n + BLOCK - 1) // BLOCK,)
    _raw_kernel()(grid, (BLOCK,), (x, y, np.float32(alpha), out, np.int64(n)))
    return out


def main() -> None:
    x = oplib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = oplib.ones(2, 3)
    out = add_scaled(x, y, 0.5)
    out.sum().backward()
    print("cpu:", out.tolist(), "grad:", x.grad.tolist() if x.grad is not None else None)
    with oplib.FakeTensorMode() as mode:
        print("fake:", add_scaled(mode.from_real(x), mode.from_real(y), 0.5).shape)
    if oplib.backends.get("cuda").status() is None:
        xc, yc = x.detach().to("cuda"), y.to("cuda")
        print("cuda:", add_scaled(xc, yc, 0.5).cpu().tolist())
    else:
        print("cuda: skipped:", oplib.backends.get("cuda").status())


if __name__ == "__main__":
    main()
