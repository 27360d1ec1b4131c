"""Autograd overhead: forward + backward time per graph node, and a small MLP against numpy.

1. A chain of N calls of a unary custom op (``register_autograd`` formula) on a one-element
   float64 tensor, then ``backward()``: µs per node (forward + backward). Target: <= 10 µs.
   Also the same chain with the core op ``oplib::sin``.
2. A two-layer MLP step (matmul + relu + matmul + sum, 64x64 float32, batch 64): forward +
   backward with oplib vs the same written directly in numpy with hand-written gradients.
3. If torch is importable: torch's figures for the same chain, with ``custom_op`` +
   ``register_autograd`` and with its built-in ``torch.sin`` (for comparison only: on a
   noisy machine the same-run ratio says more than the absolute figure).
4. One node, forward and the whole ``backward()`` call: a custom op, the core ``neg``,
   and torch's built-in ``neg`` if importable (issue 30's CPU target).
5. The 100-node chain of issue 30, 50 x (``mul`` by 0.99, ``tanh``) on float32: on one
   element, µs per node for the forward without grad, with grad (node creation) and forward
   + backward, with same-run ratios and the split into recording and backward (and torch's
   figures and split, if importable); on 1M elements, the peak
   of memory traced (``tracemalloc``, which sees numpy's arrays, not torch's) during forward
   + backward, in arrays of the chain's size beyond the 50 saved ``tanh`` outputs (torch's
   fused ``tanh_backward`` needs one: its result, beside a broadcast incoming gradient).

    python bench/autograd.py [--nodes 2000] [--repeat 60]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import oplib_core as oplib


def best_us(fn: Callable[[], None], repeat: int, per: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / per * 1e6


def chain(x: Any, f: Callable[[Any], Any], nodes: int) -> Callable[[], None]:
    """``nodes`` calls of ``f`` starting from ``x``, then ``backward()`` (oplib's or torch's
    tensors alike)."""

    def go() -> None:
        y = x
        for _ in range(nodes):
            y = f(y)
        y.backward()
        x.grad = None

    return go


def custom_chain(nodes: int, repeat: int) -> tuple[float, float]:
    @oplib.custom_op("bench_autograd::sin", mutates_args=(), device_types="cpu")
    def sin(x: oplib.Tensor) -> oplib.Tensor:
        return np.sin(x)

    cos = oplib.ops.oplib.cos

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * cos(x)

    sin.register_autograd(backward, setup_context=setup_context)
    x = oplib.tensor([0.5], dtype=np.float64, requires_grad=True)

    custom = best_us(chain(x, sin, nodes), repeat, nodes)
    core = best_us(chain(x, oplib.ops.oplib.sin.default, nodes), repeat, nodes)
    sin._destroy()
    return custom, core


def forward_only(nodes: int, repeat: int) -> float:
    x = oplib.tensor([0.5], dtype=np.float64, requires_grad=True)
    sin = oplib.ops.oplib.sin.default

    def go() -> None:
        y = x
        for _ in range(nodes):
            y = sin(y)

    return best_us(go, repeat, nodes)


def mlp(repeat: int, steps: int = 200) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((64, 64)).astype(np.float32)
    w1n = (rng.standard_normal((64, 64)) * 0.1).astype(np.float32)
    w2n = (rng.standard_normal((64, 64)) * 0.1).astype(np.float32)
    x = oplib.tensor(xn)
    w1 = oplib.tensor(w1n, requires_grad=True)
    w2 = oplib.tensor(w2n, requires_grad=True)
    relu = oplib.ops.oplib.relu

    def step_oplib() -> None:
        for _ in range(steps):
            loss = (relu(x @ w1) @ w2).sum()
            loss.backward()
            w1.grad = w2.grad = None

    def step_numpy() -> None:
        for _ in range(steps):
            h = xn @ w1n
            a = np.maximum(h, 0)
            out = a @ w2n
            out.sum()
            g = np.ones_like(out)
            gw2 = a.T @ g
            ga = g @ w2n.T
            gh = ga * (h > 0)
            gw1 = xn.T @ gh
            del gw1, gw2

    # check the two agree once
    loss = (relu(x @ w1) @ w2).sum()
    loss.backward()
    h = xn @ w1n
    ref = xn.T @ ((np.ones((64, 64), np.float32) @ w2n.T) * (h > 0))
    assert np.allclose(w1.grad.numpy(), ref, rtol=1e-4, atol=1e-4)
    w1.grad = w2.grad = None
    return best_us(step_oplib, repeat, steps), best_us(step_numpy, repeat, steps)


def torch_chain(nodes: int, repeat: int) -> tuple[float, float] | None:
    try:
        import torch
    except ImportError:
        return None

    # schema given: this module's annotations are strings torch cannot resolve here
    @torch.library.custom_op("bench_autograd::tsin", mutates_args=(), schema="(Tensor x) -> Tensor")
    def tsin(x):
        return torch.from_numpy(np.sin(x.numpy()))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    tsin.register_autograd(backward, setup_context=setup_context)
    x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)

    return (
        best_us(chain(x, tsin, nodes), repeat, nodes),
        best_us(chain(x, torch.sin, nodes), repeat, nodes),
    )


def one_node(repeat: int, per: int = 2000) -> dict[str, float]:
    """µs for one graph node, forward and ``backward()`` (the whole call), on a one-element
    float32 tensor: a custom op with ``register_autograd`` and the core ``neg``; torch's
    built-in ``neg`` beside them when torch is importable (issue 30's CPU target: the
    custom op at most 1.0x torch's built-in op)."""

    @oplib.custom_op("bench_autograd::neg", mutates_args=(), device_types="cpu")
    def neg(x: oplib.Tensor) -> oplib.Tensor:
        return np.negative(x)

    neg.register_autograd(lambda ctx, g: -g)
    x = oplib.tensor(np.array([0.5], np.float32), requires_grad=True)
    core = oplib.ops.oplib.neg

    def run(f: Callable[[Any], Any], t: Any) -> Callable[[], None]:
        def go() -> None:
            for _ in range(per):
                f(t).backward()
                t.grad = None

        return go

    out: dict[str, float] = {}
    for _ in range(2):
        for name, fn in (("custom", run(neg, x)), ("core", run(core, x))):
            t = best_us(fn, max(3, repeat // 4), per)
            out[name] = min(out.get(name, t), t)
    neg._destroy()
    try:
        import torch
    except ImportError:
        return out
    tx = torch.tensor([0.5], dtype=torch.float32, requires_grad=True)
    out["torch"] = best_us(run(torch.neg, tx), max(3, repeat // 4), per)
    return out


def mul_tanh(x: Any) -> Any:
    """The issue-30 chain: 50 x (``mul`` by 0.99, ``tanh``), 100 graph nodes."""
    y = x
    for _ in range(50):
        y = (y * 0.99).tanh()
    return y


def mul_tanh_times(repeat: int, per: int = 20) -> dict[str, float]:
    """µs per node of the chain on a one-element float32 tensor: forward without grad,
    forward with grad, forward + backward (oplib, and torch's when importable)."""
    x = oplib.tensor(np.array([0.5], np.float32), requires_grad=True)
    xn = x.detach()

    def fwd_grad() -> None:
        for _ in range(per):
            mul_tanh(x)

    def fwd_nograd() -> None:
        for _ in range(per):
            mul_tanh(xn)

    def fwd_bwd() -> None:
        for _ in range(per):
            mul_tanh(x).sum().backward()
            x.grad = None

    out: dict[str, float] = {}
    for _ in range(2):  # alternated, best of both rounds (a shared machine drifts)
        for name, fn in (("nograd", fwd_nograd), ("grad", fwd_grad), ("fwd+bwd", fwd_bwd)):
            t = best_us(fn, max(3, repeat // 4), per * 100)
            out[name] = min(out.get(name, t), t)
    try:
        import torch
    except ImportError:
        return out
    tx = torch.tensor([0.5], dtype=torch.float32, requires_grad=True)
    txn = tx.detach()

    def torch_fwd_bwd() -> None:
        for _ in range(per):
            mul_tanh(tx).sum().backward()
            tx.grad = None

    def torch_fwd(t: Any) -> Callable[[], None]:
        def go() -> None:
            for _ in range(per):
                mul_tanh(t)

        return go

    for _ in range(2):
        for name, fn in (
            ("torch nograd", torch_fwd(txn)),
            ("torch grad", torch_fwd(tx)),
            ("torch fwd+bwd", torch_fwd_bwd),
        ):
            t = best_us(fn, max(3, repeat // 4), per * 100)
            out[name] = min(out.get(name, t), t)
    return out


def mul_tanh_memory(n: int = 1 << 20) -> tuple[float, float]:
    """Peak traced MiB during forward + backward of the chain on ``n`` float32 elements (the
    input, made before, not counted), and how many arrays of ``n`` float32 that is beyond
    the 50 saved outputs."""
    import tracemalloc

    x = oplib.tensor(np.random.default_rng(0).standard_normal(n).astype(np.float32))
    x.requires_grad_()
    mul_tanh(x).sum().backward()  # warm: caches, lazily made kernels
    x.grad = None
    tracemalloc.start()
    try:
        mul_tanh(x).sum().backward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    array = n * 4
    return peak / 2**20, peak / array - 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()

    custom, core = custom_chain(args.nodes, args.repeat)
    fwd = forward_only(args.nodes, args.repeat)
    print(f"chain of {args.nodes} nodes, 1-element float64 tensor, forward + backward per node:")
    print(f"  custom op + register_autograd: {custom:7.2f} µs   (target <= 10 µs)")
    print(f"  core op oplib::sin           : {core:7.2f} µs")
    print(f"  (forward only, oplib::sin    : {fwd:7.2f} µs)")
    t = torch_chain(args.nodes, args.repeat)
    if t is not None:
        print(f"  torch custom_op + register_autograd (same chain): {t[0]:7.2f} µs")
        print(f"  torch built-in torch.sin (same chain)           : {t[1]:7.2f} µs")
        print(f"  oplib custom op is {t[0] / custom:.1f}x faster than torch's custom op")
    o = one_node(args.repeat)
    print("one node, 1-element float32, forward + backward() call:")
    print(f"  custom op + register_autograd: {o['custom']:7.2f} µs")
    print(f"  core op oplib::neg           : {o['core']:7.2f} µs")
    if "torch" in o:
        print(
            f"  torch built-in torch.neg     : {o['torch']:7.2f} µs   "
            f"(oplib custom op / torch = {o['custom'] / o['torch']:.2f}x)"
        )
    m = mul_tanh_times(args.repeat)
    print("50 x (mul, tanh) chain (100 nodes), 1-element float32, µs per node:")
    print(f"  forward without grad        : {m['nograd']:7.2f} µs")
    print(
        f"  forward with grad           : {m['grad']:7.2f} µs   "
        f"(with / without = {m['grad'] / m['nograd']:.2f}x)"
    )
    print(f"  forward + backward          : {m['fwd+bwd']:7.2f} µs")
    print(
        f"  (recording {m['grad'] - m['nograd']:.2f} µs, "
        f"backward {m['fwd+bwd'] - m['grad']:.2f} µs: with grad minus without, "
        "forward + backward minus forward with grad)"
    )
    if "torch fwd+bwd" in m:
        print(
            f"  torch forward + backward    : {m['torch fwd+bwd']:7.2f} µs   "
            f"(oplib / torch = {m['fwd+bwd'] / m['torch fwd+bwd']:.2f}x)"
        )
        print(
            f"  (torch: without grad {m['torch nograd']:.2f} µs, recording "
            f"{m['torch grad'] - m['torch nograd']:.2f} µs, backward "
            f"{m['torch fwd+bwd'] - m['torch grad']:.2f} µs)"
        )
    peak, extra = mul_tanh_memory()
    print("same chain on 1M float32 elements (4 MiB), forward + backward, memory traced:")
    print(
        f"  peak {peak:7.1f} MiB: the 50 saved outputs and {extra:.1f} arrays more "
        "(torch's tanh_backward: 1)"
    )
    ours, ref = mlp(args.repeat)
    print("MLP step (x@w1 -> relu -> @w2 -> sum, 64x64 float32), forward + backward:")
    print(f"  oplib autograd              : {ours:7.1f} µs")
    print(f"  numpy, hand-written grads   : {ref:7.1f} µs   (oplib / numpy = {ours / ref:.2f}x)")


if __name__ == "__main__":
    main()
