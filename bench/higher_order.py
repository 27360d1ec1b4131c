"""Cost of the control-flow operators against the plain Python they replace, same run.

- ``cond`` on a one-element tensor predicate: ``oplib.cond(p, f, g, (x,))`` against calling
  the chosen branch directly (``f(x)``, after reading the predicate as the caller would:
  ``bool(p)``). Target: at most 5 µs more.
- ``map`` over 1,000 rows: ``oplib.map(f, xs)`` against a Python loop calling ``f`` on each
  row and stacking the results (``np.stack([f(xs[i]) for i in range(n)])``). Target: within
  10 %. Both with native arrays (``f`` calls an oplib op on numpy rows) and with Tensors
  (the loop wraps each row in a Tensor and stacks the rows' arrays).

Cells are interleaved round by round and the best of each is kept (timeit's advice), so
the ratios compare measurements taken side by side.

    python bench/higher_order.py [--repeat 15] [--number 20000]
"""

from __future__ import annotations

import argparse
import timeit
from typing import Any

import numpy as np

import oplib_core as oplib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="rounds over all cells")
    parser.add_argument("--number", type=int, default=20_000, help="cond calls per measurement")
    args = parser.parse_args()

    core = oplib.ops.oplib
    x1 = oplib.tensor(np.ones(1))
    p1 = oplib.tensor(np.array([True]))
    xs_native = np.random.default_rng(0).normal(size=(1000, 4))
    xs_tensor = oplib.tensor(xs_native)
    rows = xs_native.shape[0]

    def f(a: Any) -> Any:
        return core.neg(a)

    def g(a: Any) -> Any:
        return core.exp(a)

    env = {
        "oplib": oplib,
        "np": np,
        "f": f,
        "g": g,
        "x1": x1,
        "p1": p1,
        "xs_native": xs_native,
        "xs_tensor": xs_tensor,
        "n": rows,
        "T": oplib.Tensor,
        "a": xs_native,
    }
    # (name, statement, calls per measurement)
    cells = {
        "cond: oplib.cond(p, f, g, (x,))": ("oplib.cond(p1, f, g, (x1,))", args.number),
        "cond: direct (f if bool(p) else g)(x)": ("(f if bool(p1) else g)(x1)", args.number),
        "map native: oplib.map(f, xs)": ("oplib.map(f, xs_native)", 20),
        "map native: loop + np.stack": (
            "np.stack([f(xs_native[i, ...]) for i in range(n)])",
            20,
        ),
        "map Tensor: oplib.map(f, xs)": ("oplib.map(f, xs_tensor)", 20),
        "map Tensor: loop + np.stack": (
            "T(np.stack([f(T(a[i, ...])).native for i in range(n)]))",
            20,
        ),
    }
    for stmt, _ in cells.values():
        eval(stmt, env)  # warm the caches
    best = dict.fromkeys(cells, float("inf"))
    for _ in range(args.repeat):
        for name, (stmt, number) in cells.items():
            t = timeit.timeit(stmt, globals=env, number=number) / number * 1e6
            best[name] = min(best[name], t)

    width = max(map(len, cells))
    for name, us in best.items():
        print(f"{name:{width}s}  {us:12.2f} µs")
    names = list(cells)
    cond_extra = best[names[0]] - best[names[1]]
    print()
    print(f"cond overhead over the direct branch call: {cond_extra:.2f} µs (target <= 5 µs)")
    pairs = {"native": (names[2], names[3]), "Tensor": (names[4], names[5])}
    for kind, (hop, loop) in pairs.items():
        ratio = best[hop] / best[loop]
        print(f"map {kind} / Python loop over {rows} rows: {ratio:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
