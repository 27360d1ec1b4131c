"""Where a small call's time goes on the cuda backend: each layer between ``cupy.negative(a)``
and ``oplib.ops.oplib.neg(ta)`` timed on its own, in one run, and a profile of each call.

For each of ``neg``, ``add``, ``mul``, ``sum``, a 1x1 ``matmul`` and ``zeros``, on
1-element float32 arrays, ns per call (the median of interleaved rounds):

- ``array module``: cupy's own function (``cupy.negative(a)``);
- ``core kernel``: ``array_kernels(cupy)[name]``, the kernel the plugin binds;
- ``served``: what the dispatcher's fast path calls for a cupy array (the op's cache entry
  after a first call), called directly; its name says which wrapper it is;
- ``overload`` and ``packet``: ``neg.default(a)`` and ``neg(a)``;
- ``Tensor``: ``neg(ta)`` on an oplib Tensor over the same array;

and each one's cost over the array module's, the median of the differences within a round.

Then a cProfile of 20,000 packet calls of each op, the functions by own time: a call that
leaves the fast path shows there (``_call_slow``, ``plan_call``); and one of 20 runs of
bench/gpu.py's autograd chain (50 x ``mul``, ``tanh`` on 1M float32, forward and
backward).

    python bench/gpu_calls.py [--json PATH] [--cpu]

``--cpu`` runs the same on numpy arrays and the cpu backend (to try the script without a
GPU). Without cupy or a CUDA device (and without ``--cpu``) it prints "no GPU: skipped"
(``--json`` then writes ``{"skipped": ...}``) and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu import Sizes, interleaved_us, mul_tanh_chain

import oplib_core as oplib
from oplib_core.kernels import array_kernels

OPS = oplib.ops.oplib
ROUNDS, NUMBER = int(os.environ.get("ROUNDS", 9)), 3000

#: op -> (the array module's statement, the op's arguments as a statement, the kernel's
#: positional arguments with the defaults the fast path appends)
CALLS = {
    "neg": ("xp.negative(a)", "a", "a"),
    "add": ("xp.add(a, b)", "a, b", "a, b"),
    "mul": ("xp.multiply(a, b)", "a, b", "a, b"),
    "sum": ("xp.sum(a)", "a", "a, None, False"),
    "matmul": ("xp.matmul(m, m)", "m, m", "m, m"),
}


def _name(fn: Any) -> str:
    parts = [getattr(fn, "__qualname__", None) or type(fn).__name__]
    seen = 0
    inner = fn
    while seen < 6:
        inner = getattr(inner, "fast_entry", None) or getattr(inner, "__wrapped__", None)
        if inner is None:
            break
        parts.append(getattr(inner, "__qualname__", None) or type(inner).__name__)
        seen += 1
    module = getattr(fn, "__module__", "?")
    return f"{module}:{' -> '.join(parts)}"


def _interleaved(stmts: dict[str, str], env: dict[str, Any], sync: Callable[[], None]) -> dict:
    """ns per call of each statement and over the first one, by bench/gpu.py's
    ``interleaved_us`` (rounds over all of them; over: the median of within-round
    differences)."""
    us = interleaved_us(stmts, env, sync, Sizes(number=NUMBER, repeats=ROUNDS))
    first = next(iter(stmts))
    return {
        "ns": {k: round(us[k] * 1e3) for k in stmts},
        "over": {k: 0 if k == first else round(us[f"{k} over {first}"] * 1e3) for k in stmts},
    }


def _profile(
    stmt: str, env: dict[str, Any], sync: Callable[[], None], n: int = 20000, rows: int = 14
) -> str:
    code = compile(f"for _ in range({n}):\n    {stmt}\n", "<profiled>", "exec")
    prof = cProfile.Profile()
    prof.enable()
    exec(code, env)
    sync()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(rows)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    return "\n".join(lines[2:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cpu", action="store_true", help="numpy arrays on the cpu backend")
    args = parser.parse_args(argv)
    if args.cpu:
        import numpy as xp

        device = "cpu"

        def sync() -> None:
            return None
    else:
        try:
            import cupy as xp

            if xp.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
        except Exception as e:
            why = f"no GPU: skipped ({type(e).__name__}: {e})"
            print(why)
            if args.json:
                args.json.write_text(json.dumps({"skipped": why}) + "\n")
            return 0
        device = "cuda"

        def sync() -> None:
            xp.cuda.Device().synchronize()

    a = xp.ones(1, dtype=xp.float32)
    b = xp.full(1, 0.5, dtype=xp.float32)
    m = xp.ones((1, 1), dtype=xp.float32)
    kernels = array_kernels(xp)
    env: dict[str, Any] = {"xp": xp, "a": a, "b": b, "m": m, "oplib": oplib, "OPS": OPS}
    env.update(ta=oplib.tensor(a), tb=oplib.tensor(b), tm=oplib.tensor(m), f32=oplib.float32)
    report: dict[str, Any] = {"device": device, "ns": {}, "over": {}, "served": {}, "profiles": {}}
    for op, (direct, operands, full) in CALLS.items():
        packet = getattr(OPS, op)
        overload = packet.default
        exec(f"OPS.{op}({operands})", env)  # fills the fast path's cache
        cache = overload._opcache
        served = cache.by_type.get(type(a))
        env.update({f"{op}_p": packet, f"{op}_o": overload, f"{op}_k": kernels[op]})
        env[f"{op}_s"] = served
        tensor_ops = ", ".join(f"t{v.strip()}" for v in operands.split(","))
        stmts = {
            "array module": direct,
            "core kernel": f"{op}_k({full})",
            "overload": f"{op}_o({operands})",
            "packet": f"{op}_p({operands})",
            "Tensor": f"{op}_p({tensor_ops})",
        }
        if served is not None:
            stmts["served"] = f"{op}_s({full})"
        exec(stmts["Tensor"], env)
        inner = cache.tensor.get(type(a))
        report["served"][op] = {
            "native": None if served is None else _name(served),
            "tensor inner": None if inner is None else _name(inner),
            "cached": served is not None,
        }
        report["ns"][op], report["over"][op] = _interleaved(stmts, env, sync).values()
        report["profiles"][op] = _profile(stmts["packet"], env, sync)
        report["profiles"][op + " Tensor"] = _profile(stmts["Tensor"], env, sync)
    zeros = {
        "array module": "xp.zeros(1, dtype=xp.float32)",
        "packet": f"OPS.zeros([1], dtype=f32, device={device!r})",
        "oplib.zeros": f"oplib.zeros(1, dtype=f32, device={device!r})",
    }
    for stmt in zeros.values():
        exec(stmt, env)
    served = OPS.zeros.default._opcache.factory
    report["served"]["zeros"] = {  # the kernel's factory_entry, when it offers one
        repr(k): _name(v[4] if v[4] is not None else v[0]) for k, v in served.items()
    }
    report["ns"]["zeros"], report["over"]["zeros"] = _interleaved(zeros, env, sync).values()
    report["profiles"]["zeros"] = _profile(zeros["packet"], env, sync)

    # the autograd chain of bench/gpu.py, profiled: where a node's time goes
    data = xp.linspace(-2, 2, 1 << 20, dtype=xp.float32)
    env["cx"] = oplib.tensor(data, requires_grad=True)
    env["chain"] = mul_tanh_chain
    exec("chain(cx).sum().backward()", env)  # compiles the fused kernels
    report["profiles"]["autograd chain, 50 x (mul, tanh) on 1M float32, fwd+bwd"] = _profile(
        "chain(cx).sum().backward()", env, sync, n=20, rows=30
    )

    print(f"ns per call on {device}, 1-element float32 (median of {ROUNDS} rounds of {NUMBER})")
    cols = ["array module", "core kernel", "served", "overload", "packet", "Tensor"]
    print(f"{'op':8}" + "".join(f"{c:>14}" for c in cols))
    for op, row in report["ns"].items():
        print(f"{op:8}" + "".join(f"{row.get(c, '-'):>14}" for c in cols))
    for op, over in report["over"].items():
        extra = ", ".join(f"{k} {v:+d}" for k, v in over.items() if k != "array module")
        print(f"  {op}: over the array module (median of the differences in a round) {extra}")
    print("\nserved:")
    for op, s in report["served"].items():
        print(f"  {op}: {s}")
    for label, text in report["profiles"].items():
        print(f"\n== profile: {label}\n{text}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
