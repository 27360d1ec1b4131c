"""Profiler overhead: a one-tensor op (``oplib::neg``) on a one-element float64 array,
with and without ``oplib.profile()`` active, measured in this run.

Prints ns per call for (a) the kernel called directly, (b) the op on an ``oplib.Tensor``
with no profile (the fast path), (c) the same under ``oplib.profile()``, (d) under
``oplib.profile(record_shapes=False)``; then the cost profiling adds per op call, (c)-(b).
Budget: (c)-(b) <= 2000 ns. While no profile is active the profiler costs nothing: it is a
dispatch mode, and ``bench/dispatch_overhead.py`` measures that path.

    python bench/profile_overhead.py [--repeat 30] [--number 5000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import oplib_core as oplib

BUDGET_NS = 2000


def per_call_ns(fn, arg, number: int, prof: oplib.profile | None) -> float:
    """ns per ``fn(arg)`` over ``number`` calls (inside ``prof`` when given; a fresh
    profile per round keeps the event list the same size)."""
    if prof is None:
        start = time.perf_counter_ns()
        for _ in range(number):
            fn(arg)
        return (time.perf_counter_ns() - start) / number
    with prof:
        start = time.perf_counter_ns()
        for _ in range(number):
            fn(arg)
        elapsed = time.perf_counter_ns() - start
    return elapsed / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=5_000)
    args = parser.parse_args()

    op = oplib.ops.oplib.neg.default  # a core op, with the cpu backend's kernel
    kernel = op.kernel("cpu").fn
    x = np.ones(1)
    t = oplib.tensor(x)
    op(t)  # warm the caches

    rows = {
        "(a) kernel(x) direct": (kernel, x, lambda: None),
        "(b) op(t), not profiling": (op, t, lambda: None),
        "(c) op(t) under profile()": (op, t, oplib.profile),
        "(d) op(t), record_shapes=False": (op, t, lambda: oplib.profile(record_shapes=False)),
    }
    # Rounds interleave the paths, so a burst of load elsewhere hits all of them alike;
    # each path keeps its best round.
    best = {name: float("inf") for name in rows}
    for _ in range(args.repeat):
        for name, (fn, arg, make) in rows.items():
            best[name] = min(best[name], per_call_ns(fn, arg, args.number, make()))
    print(f"{'path':36s} {'ns/call':>9s}")
    for name, ns in best.items():
        print(f"{name:36s} {ns:9.0f}")
    base = best["(b) op(t), not profiling"]
    cost = best["(c) op(t) under profile()"] - base
    cost_ns = best["(d) op(t), record_shapes=False"] - base
    print(
        f"\nprofiling cost per op call (c-b): {cost:.0f} ns (budget {BUDGET_NS}); "
        f"without shapes (d-b): {cost_ns:.0f} ns"
    )


if __name__ == "__main__":
    main()
