"""Tensor methods against the ops they call: ``t.tanh()`` vs ``oplib.ops.oplib.tanh(t)``.

Prints ns per call for a one-element float32 Tensor, the method's cost over the op (budget:
``t.tanh()`` at most 100 ns slower than ``oplib.ops.oplib.tanh(t)``, issue 14), and the same
for a two-overload method (``t.add(1.0)`` vs ``oplib.ops.oplib.add(t, 1.0)``) and a
hand-written one (``t.permute(0)``), all measured in this run, rounds interleaved.

Indexing: ``t[0]`` and ``t[0:1]`` on the same tensor (budget: at most 3 µs each, issue 14),
against the op they call (``select``, ``slice``) and as a ratio to numpy's own ``a[0, ...]``.

    python bench/tensor_surface.py [--repeat 40] [--number 20000]
"""

from __future__ import annotations

import argparse

from _timing import interleaved_ns, print_ns

import oplib_core as oplib
from oplib_core._dispatch import SLOW

BUDGET_NS = 100.0
INDEX_BUDGET_NS = 3000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()

    t = oplib.tensor([0.5])
    env = {"oplib": oplib, "t": t, "a": t.numpy()}
    pairs = [
        ("tanh", "oplib.ops.oplib.tanh(t)", "t.tanh()"),
        ("add scalar", "oplib.ops.oplib.add(t, 1.0)", "t.add(1.0)"),
        ("permute", "oplib.ops.oplib.permute(t, [0])", "t.permute(0)"),
        ("t[0]", "oplib.ops.oplib.select(t, 0, 0)", "t[0]"),
        ("t[0:1]", "oplib.ops.oplib.slice(t, 0, 0, 1)", "t[0:1]"),
    ]
    stmts = [s for _, op, method in pairs for s in (op, method)] + ["a[0, ...]"]
    best = interleaved_ns(stmts, env, args.number, args.repeat)
    print_ns(best)
    for name, op, method in pairs:
        diff = best[method] - best[op]
        verdict = "" if name != "tanh" else ("  ok" if diff <= BUDGET_NS else "  OVER BUDGET")
        print(f"method over op, {name:12s} {diff:+7.0f} ns{verdict}")
    for key in ("t[0]", "t[0:1]"):
        ns = best[key]
        verdict = "ok" if ns <= INDEX_BUDGET_NS else "OVER BUDGET"
        ratio = ns / best["a[0, ...]"]
        print(f"{key:8s} {ns:6.0f} ns ({ratio:.1f}x numpy's a[0, ...]), budget 3 us: {verdict}")
    if SLOW:
        print("(OPLIB_DISPATCH_SLOW=1: slow-path figures, not held to the budget)")


if __name__ == "__main__":
    main()
