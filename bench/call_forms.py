"""The same call written the ways torch code writes it: an ``int[]`` as a list, a tuple or
a bare int (``t.sum(0)``), an argument by position or by keyword (``t.clamp(min=0.0)``),
a factory's size as a list or an int, a keyword-only argument given (``t.sum(dtype=...)``,
beside the same call leaving it at its default). Each form is timed beside the plain
form in the same interleaved rounds; the ratio says what writing it that way costs.
Issue 30: the int, keyword and keyword-only forms took the slow path on every call
(2-10x); the cached call now places them, so each ratio should stay near 1 (a keyword
form pays for placing its keywords, a keyword-only one for keying its values, about a
microsecond each on a slow machine). Last, ops taking a list of tensors (``cat``,
``stack``) beside numpy's own function: they took the slow path on every call too (about
15 µs); their cached call (``OpCache.call_listed``) is Python, a few µs. And ``t[i]``
with an integer index tensor beside the op it makes.

    python bench/call_forms.py [--rounds 9] [--number 2000]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import interleaved_ns

import oplib_core as oplib

# (the form, the plain positional form it is compared with)
FORMS = [
    ("ops.sum(t, (0,))", "ops.sum(t, [0])"),
    ("ops.sum(t, 0)", "ops.sum(t, [0])"),
    ("t.sum(0)", "ops.sum(t, [0])"),
    ("t.sum(dim=0)", "ops.sum(t, [0])"),
    ("ops.sum(x, 0)", "ops.sum(x, [0])"),
    ("ops.clamp(t, min=0.0)", "ops.clamp(t, 0.0)"),
    ("t.clamp(min=0.0)", "ops.clamp(t, 0.0)"),
    ("ops.clamp(x, max=1.0)", "ops.clamp(x, None, 1.0)"),
    ("ops.zeros(2)", "ops.zeros([2])"),
    ("ops.zeros((2, 3))", "ops.zeros([2, 3])"),
    ("ops.sum(t, dtype=f32)", "ops.sum(t)"),
    ("t.sum(dtype=f32)", "ops.sum(t)"),
    ("ops.sum(x, [0], dtype=f32)", "ops.sum(x, [0])"),
    ("ops._to_copy(t, dtype=f32)", "ops.clone(t)"),
    ("ops.cat([x, x])", "np.concatenate([x, x])"),
    ("ops.cat([t, t], -1)", "np.concatenate([x, x], -1)"),
    ("ops.stack([x, x])", "np.stack([x, x])"),
    ("t[i]", "ops.index(t, [i])"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    x = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    env = {
        "ops": oplib.ops.oplib,
        "np": np,
        "t": oplib.tensor(x),
        "x": x,
        "i": oplib.tensor(np.array([2, 0])),
        "f32": oplib.float32,
    }
    stmts = [s for pair in FORMS for s in pair]
    best = interleaved_ns(stmts, env, args.number, args.rounds)
    print(f"{'form':26s} {'ns':>7s}   {'plain form':26s} {'ns':>7s}   ratio")
    for form, plain in FORMS:
        ratio = best[form] / best[plain]
        print(f"{form:26s} {best[form]:7.0f}   {plain:26s} {best[plain]:7.0f}   {ratio:5.2f}")


if __name__ == "__main__":
    main()
