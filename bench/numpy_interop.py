"""numpy functions on Tensors: what ``__array_ufunc__`` / ``__array_function__`` add.

Prints ns per call, all in this run, on a one-element float64 CPU Tensor: ``np.sin(t)``
against ``t.sin()`` and ``oplib.ops.oplib.sin(t)``; ``np.add(t, 1.0)`` against ``t + 1.0``;
``np.sum(t)`` against ``t.sum()``; then the interop's extra cost per call (numpy's protocol
lookup plus the table lookup). The op itself is the same in every pair.

    python bench/numpy_interop.py [--repeat 30] [--number 20000]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_ns

import oplib_core as oplib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()

    t = oplib.tensor(np.ones(1))
    env = {"np": np, "oplib": oplib, "t": t, "sin": oplib.ops.oplib.sin}
    pairs = [
        ("np.sin(t)", "t.sin()"),
        ("np.sin(t)", "oplib.ops.oplib.sin(t)"),
        ("np.add(t, 1.0)", "t + 1.0"),
        ("np.sum(t)", "t.sum()"),
    ]
    statements = dict.fromkeys(s for pair in pairs for s in pair)
    for stmt in statements:  # warm the caches
        eval(stmt, env)
    ns = {s: best_ns(s, env, args.number, args.repeat) for s in statements}

    print(f"{'path':<28}{'ns/call':>10}")
    for stmt, value in ns.items():
        print(f"{stmt:<28}{value:>10.0f}")
    print()
    for numpy_call, oplib_call in pairs:
        extra = ns[numpy_call] - ns[oplib_call]
        ratio = ns[numpy_call] / ns[oplib_call]
        print(f"{numpy_call} vs {oplib_call}: +{extra:.0f} ns ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
