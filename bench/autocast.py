"""What ``oplib.autocast`` costs a call: nothing while off, the casts while on.

All figures from this run, interleaved: a core op (``add``, which autocast leaves alone, and
``matmul``, which it casts) on 4x4 float32 arrays called (a) directly through numpy, (b)
through oplib with no autocast ever entered in the process, (c) inside
``oplib.autocast("cpu", enabled=False)``, (d) after an enabled autocast block has come and
gone, (e) inside an enabled ``oplib.autocast("cpu")``; (c) and (d) alternate call by
call. Budget: autocast off costs at most 100 ns a call: (c)-(d) and (d)-(b), with numpy
arrays and with Tensors. (e)-(b) is what
autocast on costs (the mode, and for matmul two ``_to_copy`` casts to bfloat16).

Autocast is a dispatch mode pushed only while an enabled block is active, so (b), (c) and
(d) run the same code; the differences are noise. ``(b)`` must run first: it is the only row
measured before any autocast existed.

    python bench/autocast.py [--rounds 7] [--number 20000]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_ns, interleaved_ns

import oplib_core as oplib
from oplib_core._dispatch.modes import active_modes

BUDGET_NS = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()

    x = np.ones((4, 4), np.float32)
    t = oplib.tensor(x)
    add, matmul = oplib.ops.oplib.add, oplib.ops.oplib.matmul
    xb = x.astype(oplib.bfloat16)
    env = {"np": np, "x": x, "xb": xb, "t": t, "add": add, "matmul": matmul}
    calls = {
        "np.add(x, x)": "direct",
        "add(x, x)": "native",
        "add(t, t)": "Tensor",
        "np.matmul(x, x)": "direct",
        "np.matmul(xb, xb)": "direct",
        "matmul(x, x)": "native",
        "matmul(t, t)": "Tensor",
    }
    oplib_calls = [c for c, kind in calls.items() if kind != "direct"]

    # (a) and (b): before any autocast existed
    before = interleaved_ns(calls, env, args.number, args.rounds)
    # (c) and (d), alternating call by call so that load elsewhere hits both alike
    disabled = dict.fromkeys(oplib_calls, float("inf"))
    after = dict.fromkeys(oplib_calls, float("inf"))
    with oplib.autocast("cpu"):
        matmul(t, t)  # an enabled block came and went (its weight cache dropped)
    for _ in range(args.rounds):
        for call in oplib_calls:  # back to back, call by call
            after[call] = min(after[call], best_ns(call, env, args.number))
            with oplib.autocast("cpu", enabled=False):
                disabled[call] = min(disabled[call], best_ns(call, env, args.number))
    # (e) inside an enabled autocast (add untouched, matmul cast to bfloat16), against the
    # same calls inside a mode that does nothing: what any mode costs, on the slow path
    n_on = max(1, args.number // 10)
    on = dict.fromkeys(oplib_calls, float("inf"))
    plain_mode = dict.fromkeys(oplib_calls, float("inf"))
    for _ in range(args.rounds):
        with oplib.autocast("cpu"):
            for call in oplib_calls:
                on[call] = min(on[call], best_ns(call, env, n_on))
        with oplib.DispatchMode():
            for call in oplib_calls:
                plain_mode[call] = min(plain_mode[call], best_ns(call, env, n_on))

    print(
        f"{'call':18s} {'(a/b) never':>11s} {'(c) disabled':>13s} {'(d) off':>8s} "
        f"{'(e) on':>9s} {'a mode':>9s}"
    )
    for call in calls:
        row = f"{call:18s} {before[call]:11.0f}"
        if call in oplib_calls:
            row += f" {disabled[call]:13.0f} {after[call]:8.0f} {on[call]:9.0f}"
            row += f" {plain_mode[call]:9.0f}"
        print(row)
    print()
    worst = 0.0
    for call in oplib_calls:
        d_disabled = disabled[call] - after[call]
        worst = max(worst, d_disabled)
        print(
            f"{call:14s} disabled vs off {d_disabled:+5.0f} ns; on vs off "
            f"{on[call] - after[call]:+7.0f} ns, of which autocast's own "
            f"{on[call] - plain_mode[call]:+7.0f} ns (the rest: any mode's slow path)"
        )
    direct_add, direct_mm = before["np.add(x, x)"], before["np.matmul(x, x)"]
    print(
        f"\nnumpy's own bfloat16 matmul (ml_dtypes): {before['np.matmul(xb, xb)']:.0f} ns, "
        f"float32: {before['np.matmul(x, x)']:.0f} ns"
    )
    print(
        f"dispatch over numpy: add native {before['add(x, x)'] - direct_add:.0f} ns, "
        f"matmul native {before['matmul(x, x)'] - direct_mm:.0f} ns"
    )
    # (b) and (d) run the same code (no mode is pushed); their difference, measured minutes
    # apart on a shared machine, is load, so the budget is held on the interleaved rows
    assert not active_modes(), "a mode was left on"
    verdict = "within" if worst <= BUDGET_NS else "OVER"
    print(f"autocast off, worst row: {worst:+.0f} ns ({verdict} the {BUDGET_NS} ns budget)")


if __name__ == "__main__":
    main()
