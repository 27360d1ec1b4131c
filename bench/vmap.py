"""What ``oplib.vmap`` costs over calling the op on the batched array itself.

All figures from this run, interleaved: (a) a core op on a batched Tensor (the batch dim
first), (b) ``oplib.vmap`` of the same op over it, for ``sin`` (one input), ``mul`` with an
unbatched second input (``in_dims=(0, None)``) and ``sum`` over the example's last dim. Each
op has a batching rule, so (b) runs it once on the whole batch; the difference is vmap's own
work (checking in_dims, wrapping the inputs, the mode, the rule, unwrapping the output),
which does not grow with the data. Budget: (b)/(a) <= 1.2 for a batch of 256 examples of
16384 float32 each. The small rows (8 examples of 16) show that fixed cost on its own
(no budget).

    python bench/vmap.py [--rounds 7] [--number 200]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _timing import interleaved_ns

import oplib_core as oplib

BUDGET = 1.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()

    ops = oplib.ops.oplib
    rng = np.random.default_rng(0)
    env = {
        "O": ops,
        "vsin": oplib.vmap(ops.sin),
        "vmul": oplib.vmap(ops.mul, in_dims=(0, None)),
        "vsum": oplib.vmap(lambda x: ops.sum(x, [-1])),
    }
    over = False
    for label, batch, n, number in (
        ("256 x 16384 float32", 256, 16384, args.number),
        ("8 x 16 float32 (fixed cost only)", 8, 16, args.number * 20),
    ):
        env["X"] = oplib.tensor(rng.standard_normal((batch, 4, n // 4), dtype=np.float32))
        env["w"] = oplib.tensor(rng.standard_normal((4, n // 4), dtype=np.float32))
        pairs = {
            "sin": ("O.sin(X)", "vsin(X)"),
            "mul": ("O.mul(X, w)", "vmul(X, w)"),
            "sum": ("O.sum(X, [-1])", "vsum(X)"),
        }
        stmts = [s for pair in pairs.values() for s in pair]
        best = interleaved_ns(stmts, env, number, args.rounds)
        print(f"{label}:")
        head = f"  {'op':5s} {'direct us':>10s} {'vmap us':>10s} {'ratio':>7s}"
        print(head + f" {'vmap - direct us':>17s}")
        for name, (direct, vmapped) in pairs.items():
            a, b = best[direct] / 1e3, best[vmapped] / 1e3
            ratio = b / a
            print(f"  {name:5s} {a:10.1f} {b:10.1f} {ratio:7.3f} {b - a:17.1f}")
            if batch == 256 and ratio > BUDGET:
                over = True
        print()
    print(f"budget: vmap / direct <= {BUDGET} on the large batch: {'OVER' if over else 'ok'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
