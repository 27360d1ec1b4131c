"""The cuda path's CPU side without a GPU: dispatch overhead on a backend whose arrays are
recognised by type name and carry a device, as cupy's are.

Installs ``devicelike`` (``tests/devicelike_backend.py``: numpy memory on two pretend
devices, declared with ``array_type_names`` and ``device_of`` like the cuda plugin) and
times, per core op on 1-element float32 arrays, the kernel the backend's ``on_device``
wrapper runs (``array_kernels(namespace)[op]``, as the cuda plugin's wraps
``array_kernels(cupy)[op]``), called directly with the arrays' device current, against
``oplib.ops.oplib.<op>`` on native arrays and on Tensors, all in this run: once
with the backend declaring one device (the one-GPU machine: the fast path serves two arrays
as it does numpy's), once with two (arrays on the second; the fast path checks both arrays'
devices per call, ``same_device``). The binary ops are the case issue 30 found on the GPU:
two arrays of one multi-device backend took the slow path on every call. Budget, as
``bench/dispatch_overhead.py``'s: native <= +500 ns, Tensor <= +1500 ns over the direct
call. The ``zeros`` rows are a factory (no tensor argument: served by the factory cache,
keyed on its ``device`` argument, with ``dtype=`` and ``device=`` given as keywords), shown
apart from the worst figures.

    python bench/accelerator_dispatch.py [--repeat 30] [--number 20000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _timing import best_ns

import oplib_core as oplib
from oplib_core._dispatch import SLOW

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.*
from tests import devicelike_backend as dl

#: op -> (direct statement, native statement, Tensor statement)
CASES = {
    "neg": ("k_neg(a)", "ops.neg(a)", "ops.neg(ta)"),
    "add": ("k_add(a, b)", "ops.add(a, b)", "ops.add(ta, tb)"),
    "mul": ("k_mul(a, b)", "ops.mul(a, b)", "ops.mul(ta, tb)"),
    "sum": ("k_sum(a, None, False)", "ops.sum(a)", "ops.sum(ta)"),
    "matmul": ("k_matmul(m, n)", "ops.matmul(m, n)", "ops.matmul(tm, tn)"),
    "zeros": ("k_zeros([1], dtype=f32, device=dev)", "ops.zeros([1], dtype=f32, device=dev)", ""),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    worst = [section(devices, args.repeat, args.number) for devices in (1, 2)]
    print(
        "worst over direct, ops with a tensor argument (budget: native 500, Tensor 1500): "
        + "; ".join(
            f"{d} device{'s' if d > 1 else ''}: native {nat:+.0f} ns, Tensor {ten:+.0f} ns"
            for d, (nat, ten) in zip((1, 2), worst, strict=True)
        )
    )
    if SLOW:
        print("(OPLIB_DISPATCH_SLOW=1: the fast path is off; these are slow-path figures)")


def section(devices: int, repeat: int, number: int) -> tuple[float, float]:
    """Time every case with the backend declaring ``devices`` devices (arrays on the last);
    print the table, return the worst native and Tensor overheads."""
    uninstall = dl.install(devices)
    try:
        return _section(devices, repeat, number)
    finally:
        uninstall()


def _section(devices: int, repeat: int, number: int) -> tuple[float, float]:
    backend = oplib.backends.get(dl.NAME)
    ops = oplib.ops.oplib
    i = devices - 1
    a, b = dl.on(np.ones(1, np.float32), i), dl.on(np.full(1, 2.0, np.float32), i)
    m, n = dl.on(np.ones((1, 1), np.float32), i), dl.on(np.ones((1, 1), np.float32), i)
    env: dict = {
        "ops": ops,
        "a": a,
        "b": b,
        "m": m,
        "n": n,
        "ta": oplib.Tensor(a),
        "tb": oplib.Tensor(b),
        "tm": oplib.Tensor(m),
        "tn": oplib.Tensor(n),
        "f32": oplib.float32,
        "dev": oplib.device(f"{dl.NAME}:{i}"),
    }
    for op, (_, native, _) in CASES.items():
        eval(native, env)  # the plugin's kernel loads on its first call
        # direct: the kernel the backend's on_device wrapper runs, on the current device
        env[f"k_{op}"] = getattr(ops, op).default.resolve(backend)[0].__wrapped__
    stmts = [s for case in CASES.values() for s in case if s]
    with dl.device(i):  # the program's current device is its arrays' (as on a GPU)
        for stmt in stmts:  # warm the caches; every result on device i
            out = eval(stmt, env)
            data = out._data if isinstance(out, oplib.Tensor) else out
            assert type(data) is dl.DeviceArray and data._index == i, (stmt, data)

        best = dict.fromkeys(stmts, float("inf"))
        for _ in range(repeat):  # rounds interleave the paths: load hits all alike
            for stmt in stmts:
                best[stmt] = min(best[stmt], best_ns(stmt, env, number))

    print(f"{devices} device{'s' if devices > 1 else ''}, arrays on {dl.NAME}:{i} (ns per call)")
    print(f"{'op':8s} {'direct':>8s} {'native':>8s} {'+ns':>7s} {'Tensor':>8s} {'+ns':>7s}")
    worst_native = worst_tensor = 0.0
    for op, (direct, native, tensor) in CASES.items():
        d, nat = best[direct], best[native]
        row = f"{op:8s} {d:8.0f} {nat:8.0f} {nat - d:+7.0f}"
        if tensor:
            t = best[tensor]
            row += f" {t:8.0f} {t - d:+7.0f}"
        if op != "zeros":
            worst_native = max(worst_native, nat - d)
            worst_tensor = max(worst_tensor, best[tensor] - d)
        print(row)
    print()
    return worst_native, worst_tensor


if __name__ == "__main__":
    main()
