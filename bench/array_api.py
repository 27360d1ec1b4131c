"""``oplib.array_api`` against the op calls its functions make: ``xp.exp(t)`` vs
``oplib.ops.oplib.exp(t)``, ``xp.add(t, u)`` vs ``oplib.ops.oplib.add(t, u)``,
``xp.add(t, 1.0)`` vs ``oplib.ops.oplib.add(t, 1.0)`` (a Python scalar: the ``.Scalar``
overload), ``xp.sum(t, axis=0)`` vs the ``oplib::sum`` call it makes; and a composite,
``xp.expm1(t)`` (three ops), against ``exp``.

Prints ns per call for a one-element float32 Tensor and each function's cost over its op,
all measured in this run, rounds interleaved. A namespace function is a plain Python
function in front of dispatch: the cost over the op is its argument checks (budget: 300 ns
for the elementwise functions, 1 µs for a reduction, which also normalises its axes and
applies the standard's accumulation dtype; a composite costs the sum of its ops).

    python bench/array_api.py [--repeat 30] [--number 20000]
"""

from __future__ import annotations

import argparse

from _timing import interleaved_ns, print_ns

import oplib_core as oplib
from oplib_core import array_api as xp
from oplib_core._dispatch import SLOW

BUDGET_NS = {"exp": 300.0, "add": 300.0, "add scalar": 300.0, "sum": 1000.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()

    t, u = oplib.tensor([0.5]), oplib.tensor([1.5])
    env = {"oplib": oplib, "xp": xp, "t": t, "u": u, "f32": oplib.float32}
    pairs = [
        ("exp", "oplib.ops.oplib.exp(t)", "xp.exp(t)"),
        ("add", "oplib.ops.oplib.add(t, u)", "xp.add(t, u)"),
        ("add scalar", "oplib.ops.oplib.add(t, 1.0)", "xp.add(t, 1.0)"),
        ("sum", "oplib.ops.oplib.sum(t, [0], False, dtype=f32)", "xp.sum(t, axis=0)"),
        ("expm1 (3 ops)", "oplib.ops.oplib.exp(t)", "xp.expm1(t)"),
    ]
    best = interleaved_ns(
        (s for _, op, fn in pairs for s in (op, fn)), env, args.number, args.repeat
    )
    print_ns(best)
    for name, op, fn in pairs:
        diff = best[fn] - best[op]
        budget = BUDGET_NS.get(name)
        verdict = "" if budget is None else ("  ok" if diff <= budget else "  OVER BUDGET")
        print(f"namespace over op, {name:14s} {diff:+7.0f} ns{verdict}")
    if SLOW:
        print("(OPLIB_DISPATCH_SLOW=1: slow-path figures, not held to the budget)")


if __name__ == "__main__":
    main()
