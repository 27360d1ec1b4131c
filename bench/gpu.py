"""oplib on a CUDA device against cupy's own calls (and torch's, when torch sees the device),
all in one run: per call, autograd, bandwidth, memory, small-op throughput, matmul.

Sections (each figure the median of several repeats after a warm-up, the device
synchronized around every timed region; ratios against figures of this same run):

- per call, µs, on 1-element float32 arrays: ``neg``, ``add``, ``mul``, ``sum``, a 1x1
  ``matmul``, the factory ``zeros`` and ``cat`` of two (a list of tensors); cupy's
  function, the core op on cupy arrays (``oplib.ops.oplib.neg(a)``), on oplib Tensors,
  and torch's function; and each one's cost over cupy's as the median of the differences
  within a round. Budget (issue #30):
  native +0.5 µs, Tensor +1.5 µs over cupy.
- autograd: 50 x (``mul`` by 0.99, ``tanh``) on a 1M-element float32 tensor, forward and
  backward, oplib against torch (budget <= 1.0x torch); the forward alone against cupy.
  oplib's backward runs each ``tanh`` node's formula as one fused kernel; the chain is
  timed again with fusion off (``OPLIB_CUDA_FUSED_BACKWARD=0``, in a second process: the
  switch is read when the plugin loads).
- bandwidth, GB/s counting bytes read and written: ``add`` (and ``mul``) of two large
  contiguous arrays (float32, float16, int32), and one op of each other family of
  oplib-cuda's own kernels (``neg``; ``mul`` by the scalar 2; ``lt``, whose bool result is
  a byte an element; ``add`` of a bias repeated along the rows; ``sub`` of a 0-d array,
  as ``x - x.mean()``; ``sub`` of one value per row, as ``x - x.max(-1, keepdims=True)``;
  ``clamp(-1, 1)``, against cupy's ``clip``; ``where`` of a bool condition and two arrays),
  against a
  device-to-device copy (``cupy.copyto``; torch's ``copy_``), and which kernel served
  each oplib call ("oplib elementwise", oplib-cuda's own, or "cupy"). Budget: >= 90%
  of the copy.
- oplib-cuda's own kernels against cupy's functions by size (``add``, ``tanh``, ``mul`` by
  0.99; float32, 2**10 to 2**24 elements): µs per call of each, and the size from which
  the own kernel is no slower at every size measured, beside ``elementwise.MIN_ELEMENTS``
  (below it the plugin calls cupy's function: launch-bound calls cost what the host does).
- peak memory of that autograd chain, bytes in use at their highest: cupy's pool (its
  ``used_bytes()`` after each allocation, through a ``cupy.cuda.MemoryHook``) against
  ``torch.cuda.max_memory_allocated``; budget: <= torch. Beside it, what each allocator
  held (cupy's pool emptied first, its size afterwards; ``max_memory_reserved``): cupy's
  pool splits a free block for a small request, so it can hold more than was in use.
- a loop of 10,000 small ops (5,000 x ``mul``, ``add`` on 1-element arrays) as ops/second.
- ``matmul`` of two 8192 x 8192 float16 matrices, TFLOP/s.

    python bench/gpu.py [--json PATH] [--quick]

``--quick`` takes fewer repeats and smaller arrays. Without cupy or a CUDA device it prints
"no GPU: skipped" and exits 0 (``--json`` then writes ``{"skipped": ...}``). A section that
raises is reported (stderr, and ``errors`` in the JSON), the others still run, and the exit
status is 1. ``scripts/gpu-check.sh`` runs this script.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import timeit
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any, TypeVar

import numpy as np
from oplib_cuda import elementwise, fusion

import oplib_core as oplib
from oplib_core._dispatch import COMPILED_MODULE

OPS = oplib.ops.oplib
T = TypeVar("T")
Attempt = Callable[[str, Callable[[], Any]], Any]


@dataclass
class Rig:
    """What the sections run on: the array module and device oplib sees, how to wait for the
    device, and torch on the same device where there is one."""

    xp: Any
    device: str
    sync: Callable[[], None]
    torch: Any = None
    # what a run of ``fn`` holds at most on the device, bytes: "in use" (live arrays, as
    # torch's max_memory_allocated counts) and "held" (the allocator's own, free blocks
    # too); empty: not measured
    peak_bytes: Callable[[Callable[[], object]], dict[str, int]] = lambda fn: {}
    torch_peak_bytes: Callable[[Callable[[], object]], dict[str, int]] = lambda fn: {}


@dataclass
class Sizes:
    number: int = 2000  # calls per timed repeat, per-call section
    repeats: int = 15
    chain_n: int = 1 << 20
    chain_repeats: int = 7
    bandwidth_bytes: int = 512 << 20  # per array
    bandwidth_reps: int = 10
    loop_ops: int = 10_000
    loop_repeats: int = 3
    by_size_number: int = 200  # calls per timed repeat, own kernels against cupy
    by_size_repeats: int = 7
    matmul_k: int = 8192
    matmul_reps: int = 10


QUICK = Sizes(
    number=1000,
    repeats=5,
    chain_repeats=3,
    bandwidth_bytes=256 << 20,
    bandwidth_reps=5,
    loop_repeats=2,
    by_size_number=100,
    by_size_repeats=5,
    matmul_reps=5,
)

#: Elements (float32) at which the own kernels are timed against cupy's functions.
BY_SIZE = tuple(1 << k for k in (10, 16, 18, 20, 22, 24))


@dataclass
class Results:
    data: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def save(self) -> None:
        # after every section: a run cut off by its time limit leaves what it measured
        if self.path is not None:
            self.path.write_text(json.dumps(self.data, indent=1) + "\n")

    def attempt(self, label: str, fn: Callable[[], T]) -> T | None:
        """``fn()``, or ``None`` when it raises: the error goes to stderr and to ``errors``
        (and so into the exit status), and the figures that do not need it still come."""
        try:
            return fn()
        except Exception as e:
            traceback.print_exc()
            self.data.setdefault("errors", {})[label] = f"{type(e).__name__}: {e}"[:500]
            self.save()
            return None


def timed(fn: Callable[[], object], sync: Callable[[], None], reps: int, repeats: int) -> float:
    """Seconds per call of ``fn``: the median over ``repeats`` of ``reps`` calls, each
    repeat synchronized at both ends, after one warm-up call."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        sync()
        t0 = perf_counter()
        for _ in range(reps):
            fn()
        sync()
        times.append((perf_counter() - t0) / reps)
    return statistics.median(times)


def interleaved_us(
    stmts: dict[str, str], env: dict[str, Any], sync: Callable[[], None], sizes: Sizes
) -> dict[str, float]:
    """µs per call of each statement: rounds over all of them (a burst of load elsewhere
    hits them alike), the median of each one's rounds; each warmed up first. For each
    statement after the first, also ``"<label> over <first>"``: the median over rounds of
    its time minus the first's in the same round (a GPU call of ~10 µs drifts by tenths of
    a µs between rounds: differences within a round cancel the drift)."""
    timers = {label: timeit.Timer(stmt, globals=env) for label, stmt in stmts.items()}
    for timer in timers.values():
        timer.timeit(min(sizes.number, 100))
    sync()
    rounds: dict[str, list[float]] = {label: [] for label in timers}
    for _ in range(sizes.repeats):
        for label, timer in timers.items():
            sync()
            t0 = perf_counter()
            timer.timeit(sizes.number)
            sync()
            rounds[label].append((perf_counter() - t0) / sizes.number * 1e6)
    out = {label: round(statistics.median(r), 2) for label, r in rounds.items()}
    first, *rest = rounds
    for label in rest:
        paired = [t - f for t, f in zip(rounds[label], rounds[first], strict=True)]
        out[f"{label} over {first}"] = round(statistics.median(paired), 2)
    return out


def per_call(rig: Rig, sizes: Sizes, attempt: Attempt) -> dict[str, dict[str, float]]:
    xp, dev = rig.xp, rig.device
    a, b = xp.ones(1, dtype=xp.float32), xp.full(1, 0.5, dtype=xp.float32)
    m = xp.ones((1, 1), dtype=xp.float32)
    env: dict[str, Any] = {
        "xp": xp,
        "oplib": oplib,
        "f32": oplib.float32,
        "dev": dev,
        "a": a,
        "b": b,
        "m": m,
        "ta": oplib.tensor(a),
        "tb": oplib.tensor(b),
        "tm": oplib.tensor(m),
        **{
            name: getattr(OPS, name)
            for name in ("neg", "add", "mul", "sum", "matmul", "zeros", "cat")
        },
    }
    rows = {
        "neg": ("xp.negative(a)", "neg(a)", "neg(ta)", "torch.neg(xa)"),
        "add": ("xp.add(a, b)", "add(a, b)", "add(ta, tb)", "torch.add(xa, xb)"),
        "mul": ("xp.multiply(a, b)", "mul(a, b)", "mul(ta, tb)", "torch.mul(xa, xb)"),
        "sum": ("xp.sum(a)", "sum(a)", "sum(ta)", "torch.sum(xa)"),
        "matmul 1x1": ("xp.matmul(m, m)", "matmul(m, m)", "matmul(tm, tm)", "torch.matmul(xm, xm)"),
        "zeros": (
            "xp.zeros(1, dtype=xp.float32)",
            "zeros([1], dtype=f32, device=dev)",
            "oplib.zeros(1, dtype=f32, device=dev)",
            "torch.zeros(1, device=tdev)",
        ),
        "cat": ("xp.concatenate([a, b])", "cat([a, b])", "cat([ta, tb])", "torch.cat([xa, xb])"),
    }
    if rig.torch is not None:
        torch = rig.torch
        tdev = "cuda"
        env.update(
            torch=torch,
            tdev=tdev,
            xa=torch.ones(1, device=tdev),
            xb=torch.full((1,), 0.5, device=tdev),
            xm=torch.ones((1, 1), device=tdev),
        )
    out: dict[str, dict[str, float]] = {}
    for op, (direct, native, tensor, torch_stmt) in rows.items():
        stmts = {"cupy": direct, "oplib": native, "oplib Tensor": tensor}
        if rig.torch is not None:
            stmts["torch"] = torch_stmt
        row = attempt(f"per_call_us {op}", partial(interleaved_us, stmts, env, rig.sync, sizes))
        if row is not None:
            out[op] = row
    return out


def mul_tanh_chain(y: Any) -> Any:
    """The autograd section's chain: 50 x (``mul`` by 0.99, ``tanh``)."""
    for _ in range(50):
        y = (y * 0.99).tanh()
    return y


def fused(array: Any) -> bool:
    """Whether this process runs pointwise backward formulas as fused kernels on arrays
    like ``array`` (its backend compiles them: ``BackendSpec.elementwise_kernel``)."""
    backend = oplib.backends.for_type(type(array))
    return backend is not None and backend.spec.elementwise_kernel is not None


def chain_fwd_bwd(rig: Rig, sizes: Sizes) -> float:
    """The chain's forward + backward alone, seconds (``--chain-only``)."""
    data = rig.xp.linspace(-2, 2, sizes.chain_n, dtype=rig.xp.float32)
    x = oplib.tensor(data, requires_grad=True)
    return timed(lambda: mul_tanh_chain(x).sum().backward(), rig.sync, 3, sizes.chain_repeats)


def unfused_fwd_bwd(sizes: Sizes) -> float:
    """``chain_fwd_bwd`` in a second process with ``OPLIB_CUDA_FUSED_BACKWARD=0``, seconds."""
    done = subprocess.run(
        [sys.executable, __file__, "--chain-only", f"{sizes.chain_n},{sizes.chain_repeats}"],
        env={**os.environ, fusion.SWITCH: "0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"--chain-only with fusion off failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["s"])


def autograd(rig: Rig, sizes: Sizes) -> tuple[dict[str, float], dict[str, float | None]]:
    """The chain's times (ms) and its peak memory (MiB)."""
    xp, n, reps, repeats = rig.xp, sizes.chain_n, 3, sizes.chain_repeats
    data = xp.linspace(-2, 2, n, dtype=xp.float32)
    x = oplib.tensor(data, requires_grad=True)
    plain = oplib.tensor(data)

    def fwd_bwd() -> None:
        mul_tanh_chain(x).sum().backward()

    def cupy_fwd() -> object:
        y = data
        for _ in range(50):
            y = xp.tanh(y * 0.99)
        return y

    ms = {
        "oplib fwd+bwd": timed(fwd_bwd, rig.sync, reps, repeats),
        "oplib fwd": timed(lambda: mul_tanh_chain(plain), rig.sync, reps, repeats),
        "cupy fwd": timed(cupy_fwd, rig.sync, reps, repeats),
    }
    if fused(data):  # else the figure above is already the unfused one
        ms["oplib fwd+bwd, fusion off"] = unfused_fwd_bwd(sizes)
    peak = {f"oplib {k} (cupy pool)": v for k, v in rig.peak_bytes(fwd_bwd).items()}
    if rig.torch is not None:
        torch = rig.torch
        tx = torch.linspace(-2, 2, n, device="cuda", requires_grad=True)

        def torch_fwd_bwd() -> None:
            mul_tanh_chain(tx).sum().backward()

        def torch_fwd() -> object:
            with torch.no_grad():
                return mul_tanh_chain(tx)

        ms["torch fwd+bwd"] = timed(torch_fwd_bwd, rig.sync, reps, repeats)
        ms["torch fwd"] = timed(torch_fwd, rig.sync, reps, repeats)
        peak.update({f"torch {k}": v for k, v in rig.torch_peak_bytes(torch_fwd_bwd).items()})
    mib = {k: round(v / 2**20, 1) for k, v in peak.items()}
    return {k: round(v * 1e3, 3) for k, v in ms.items()}, mib


def bandwidth(rig: Rig, sizes: Sizes, attempt: Attempt) -> dict[str, dict[str, float | str]]:
    """GB/s per dtype: bytes read and written per call over its time."""
    out = {}
    for dtype in ("float32", "float16", "int32"):
        row = attempt(f"bandwidth_GBps {dtype}", partial(_bandwidth, rig, sizes, dtype))
        if row is not None:
            out[dtype] = row
    return out


def _bandwidth(rig: Rig, sizes: Sizes, dtype: str) -> dict[str, float | str]:
    xp, size = rig.xp, np.dtype(dtype).itemsize
    n = sizes.bandwidth_bytes // size
    # fresh contiguous arrays from the pool: aligned, so oplib's ops may take its own kernels
    a, b, c = xp.ones(n, dtype=dtype), xp.ones(n, dtype=dtype), xp.empty(n, dtype=dtype)
    ta, tb = oplib.tensor(a), oplib.tensor(b)
    two, one, cmp = 3 * n * size, 2 * n * size, 2 * n * size + n  # bytes read and written
    where = two + n
    mask = xp.zeros(n, dtype=bool)
    width = next(w for w in (4096, 1024, 64, 8, 1) if n % w == 0)
    rows, bias = a.reshape(n // width, width), xp.ones(width, dtype=dtype)
    mean = xp.ones((), dtype=dtype)  # a 0-d array: x - x.mean()
    peaks = xp.ones((n // width, 1), dtype=dtype)  # one per row: x - x.max(-1, keepdims=True)
    # oplib's calls, one of each family of oplib-cuda's own kernels: label, bytes moved, the
    # call, and the own kernel that would serve it (``elementwise.launches()``'s key)
    ours: list[tuple[str, int, Callable[[], object], str]] = [
        ("add", two, lambda: OPS.add(a, b), f"add {dtype}"),
        ("neg", one, lambda: OPS.neg(a), f"neg {dtype}"),
        ("mul by 2", one, lambda: OPS.mul(a, 2), f"mul.Scalar {dtype}"),
        # a bool result: one byte an element
        ("lt", cmp, lambda: OPS.lt(a, b), f"lt {dtype}"),
        # a bias repeated along the rows (its own reads, a row's worth, left out)
        ("add bias", one, lambda: OPS.add(rows, bias), f"add {dtype} repeat_y"),
        # one element against every element
        ("sub 0-d", one, lambda: OPS.sub(a, mean), f"sub {dtype} one_y"),
        # one value per row (its own reads, one element a row, left out)
        ("sub per row", one, lambda: OPS.sub(rows, peaks), f"sub {dtype} rows_y"),
        # two bounds: one pass (cupy's clip, and the core's maximum then minimum, two)
        ("clamp", one, lambda: OPS.clamp(a, -1, 1), f"clamp {dtype}"),
        # a bool condition choosing between two arrays: three reads (one of a byte), a write
        ("where", where, lambda: OPS.where(mask, a, b), f"where {dtype}"),
    ]
    runs: dict[str, tuple[int, Callable[[], object]]] = {  # bytes moved per call, the call
        "copy (cupy)": (one, lambda: xp.copyto(c, a)),
        "cupy add": (two, lambda: xp.add(a, b)),
        "oplib Tensor add": (two, lambda: OPS.add(ta, tb)),
        "cupy mul": (two, lambda: xp.multiply(a, b)),
        "oplib mul": (two, lambda: OPS.mul(a, b)),
        "cupy neg": (one, lambda: xp.negative(a)),
        "cupy mul by 2": (one, lambda: xp.multiply(a, 2)),
        "cupy lt": (cmp, lambda: xp.less(a, b)),
        "cupy add bias": (one, lambda: xp.add(rows, bias)),
        "cupy sub 0-d": (one, lambda: xp.subtract(a, mean)),
        "cupy sub per row": (one, lambda: xp.subtract(rows, peaks)),
        "cupy clamp": (one, lambda: xp.clip(a, -1, 1)),
        "cupy where": (where, lambda: xp.where(mask, a, b)),
        **{f"oplib {label}": (moved, call) for label, moved, call, _ in ours},
    }
    if rig.torch is not None:
        torch = rig.torch
        tdt = getattr(torch, dtype)
        xa = torch.ones(n, dtype=tdt, device="cuda")
        xb = torch.ones(n, dtype=tdt, device="cuda")
        xc = torch.empty(n, dtype=tdt, device="cuda")
        runs["copy (torch)"] = (one, lambda: xc.copy_(xa))
        runs["torch add"] = (two, lambda: torch.add(xa, xb))
        runs["torch neg"] = (one, lambda: torch.neg(xa))
        runs["torch lt"] = (cmp, lambda: torch.lt(xa, xb))
    row: dict[str, float | str] = {
        label: round(moved / timed(fn, rig.sync, sizes.bandwidth_reps, sizes.chain_repeats) / 1e9)
        for label, (moved, fn) in runs.items()
    }
    for label, _, call, key in ours:
        row[f"oplib {label} served by"] = _served_by(key, call)
    return row


def _served_by(key: str, call: Callable[[], object]) -> str:
    """Which kernel ran ``call``: "oplib elementwise" when oplib-cuda's own kernel ``key``
    (``"add float32"``, ``"add float32 repeat_y"``: ``elementwise.launches()``'s keys)
    launched (its launch count rose), else "cupy" (cupy's function)."""
    before = elementwise.launches().get(key, 0)
    call()
    return "oplib elementwise" if elementwise.launches().get(key, 0) > before else "cupy"


def own_by_size(rig: Rig, sizes: Sizes) -> dict[str, Any]:
    """µs per call of cupy's function and of oplib-cuda's own kernel for it (through
    ``elementwise.fast_kernel(..., min_elements=0)``: the plugin's routing without its
    threshold) at each of :data:`BY_SIZE`, and where the own kernel stops being slower
    (:func:`crossover`)."""
    xp = rig.xp
    # label: the core op, cupy's function, the call's arguments from an array
    calls: dict[str, tuple[str, Callable[..., Any], Callable[[Any], tuple[Any, ...]]]] = {
        "add": ("add", xp.add, lambda a: (a, a + 1)),
        "tanh": ("tanh", xp.tanh, lambda a: (a,)),
        "mul by 0.99": ("mul.Scalar", xp.multiply, lambda a: (a, 0.99)),
    }
    timing = Sizes(number=sizes.by_size_number, repeats=sizes.by_size_repeats)
    out: dict[str, Any] = {"MIN_ELEMENTS": elementwise.MIN_ELEMENTS}
    for label, (op, cupy_fn, arguments) in calls.items():
        own = elementwise.fast_kernel(op, cupy_fn, min_elements=0)
        row: dict[str, dict[str, float]] = {}
        for n in BY_SIZE:
            args = arguments(xp.linspace(-2, 2, n, dtype=xp.float32))
            served = _served_by(f"{op} float32", lambda: own(*args))  # noqa: B023 (called here)
            if served != "oplib elementwise":
                raise RuntimeError(f"{label} on {n} elements ran {served}, not the own kernel")
            env = {"args": args, "cupy": cupy_fn, "own": own}
            stmts = {"cupy": "cupy(*args)", "own": "own(*args)"}
            row[str(n)] = interleaved_us(stmts, env, rig.sync, timing)
        out[label] = {"us": row, "own no slower from": crossover(row)}
    return out


def crossover(row: dict[str, dict[str, float]]) -> int | None:
    """The smallest size (a key of ``row``) from which the own kernel's cost over cupy's
    (``"own over cupy"``) is at most 0 at every larger size too; ``None`` when it is slower
    at the largest."""
    found = None
    for n in sorted(row, key=int, reverse=True):
        if row[n]["own over cupy"] > 0:
            break
        found = int(n)
    return found


def small_ops(rig: Rig, sizes: Sizes) -> dict[str, float]:
    """Ops per second of a dependent chain of ``sizes.loop_ops`` 1-element mul and add."""
    xp, half = rig.xp, sizes.loop_ops // 2
    a, b = xp.ones(1, dtype=xp.float32), xp.full(1, 0.5, dtype=xp.float32)
    ta, tb = oplib.tensor(a), oplib.tensor(b)

    def loop(mul: Callable[..., Any], add: Callable[..., Any], x: Any, y: Any) -> Callable[[], Any]:
        def run() -> Any:
            z = x
            for _ in range(half):
                z = add(mul(z, y), x)
            return z

        return run

    runs = {
        "cupy": loop(xp.multiply, xp.add, a, b),
        "oplib": loop(OPS.mul, OPS.add, a, b),
        "oplib Tensor": loop(OPS.mul, OPS.add, ta, tb),
    }
    if rig.torch is not None:
        torch = rig.torch
        xa, xb = torch.ones(1, device="cuda"), torch.full((1,), 0.5, device="cuda")
        runs["torch"] = loop(torch.mul, torch.add, xa, xb)
    return {
        label: round(2 * half / timed(fn, rig.sync, 1, sizes.loop_repeats))
        for label, fn in runs.items()
    }


def matmul(rig: Rig, sizes: Sizes) -> dict[str, float]:
    """TFLOP/s of a k x k float16 product (2 k^3 flops)."""
    xp, k = rig.xp, sizes.matmul_k
    a = xp.linspace(-1, 1, k * k, dtype=xp.float32).reshape(k, k).astype(xp.float16)
    b = a.T.copy()
    ta, tb = oplib.tensor(a), oplib.tensor(b)
    runs: dict[str, Callable[[], object]] = {
        "cupy": lambda: xp.matmul(a, b),
        "oplib": lambda: OPS.matmul(a, b),
        "oplib Tensor": lambda: OPS.matmul(ta, tb),
    }
    if rig.torch is not None:
        torch = rig.torch
        xa = torch.linspace(-1, 1, k * k, device="cuda").reshape(k, k).half()
        xb = xa.T.contiguous()
        runs["torch"] = lambda: torch.matmul(xa, xb)
    flops = 2 * k**3
    return {
        label: round(flops / timed(fn, rig.sync, sizes.matmul_reps, sizes.chain_repeats) / 1e12, 1)
        for label, fn in runs.items()
    }


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}x" if x and y else "n/a"


def summary(data: dict[str, Any]) -> list[str]:
    """The headline lines: each figure beside its budget."""
    lines = []
    calls = data.get("per_call_us")
    if calls:
        extra = [
            f"{op} {r['oplib over cupy']:+.2f}/{r['oplib Tensor over cupy']:+.2f}"
            for op, r in calls.items()
        ]
        lines.append(
            "per call, µs over cupy (native/Tensor; budget +0.5/+1.5): " + ", ".join(extra)
        )
        if all("torch" in r for r in calls.values()):
            lines.append(
                "per call, µs, cupy / oplib / torch: "
                + ", ".join(
                    f"{op} {r['cupy']:.1f}/{r['oplib']:.1f}/{r['torch']:.1f}"
                    for op, r in calls.items()
                )
            )
    sizes = data.get("sizes", {})
    chain = data.get("autograd_ms")
    if chain:
        ours, theirs = chain["oplib fwd+bwd"], chain.get("torch fwd+bwd")
        versus = f", torch {theirs} ms: {_ratio(ours, theirs)} torch (budget <= 1.0x)"
        off = chain.get("oplib fwd+bwd, fusion off")
        unfused = (
            f" (fusion off: {off} ms, {_ratio(off, theirs)} torch)"
            if off
            else " (fusion off in this run)"
        )
        lines.append(
            f"autograd 50x(mul, tanh) on {sizes.get('chain_n', 0):,} float32, fwd+bwd: "
            f"oplib {ours} ms"
            + unfused
            + (versus if theirs else "")
            + f"; forward: oplib {chain['oplib fwd']} ms, cupy {chain['cupy fwd']} ms"
        )
    peak = data.get("peak_memory_MiB")
    if peak:
        ours, theirs = peak.get("oplib in use (cupy pool)"), peak.get("torch in use")
        held = peak.get("oplib held (cupy pool)"), peak.get("torch held")
        lines.append(
            f"peak memory of that chain, in use: oplib {ours} MiB, torch {theirs} MiB: "
            f"{_ratio(ours, theirs)} (budget <= 1.0x); held by the allocator: oplib "
            f"{held[0]} MiB, torch {held[1]} MiB"
        )
    mib = sizes.get("bandwidth_bytes", 0) >> 20
    for dtype, r in data.get("bandwidth_GBps", {}).items():
        copy = r["copy (cupy)"]
        for op in (k[len("oplib ") : -len(" served by")] for k in r if k.endswith(" served by")):
            ours = r[f"oplib {op}"]
            share = f"{ours / copy:.0%}" if copy else "n/a"
            lines.append(
                f"{op} {dtype}, {mib} MiB arrays: oplib {ours} GB/s = {share} of the copy "
                f"({copy} GB/s; budget >= 90%; served by "
                f"{r.get(f'oplib {op} served by', 'n/a')}); cupy {r.get(f'cupy {op}', 'n/a')}, "
                f"torch {r.get(f'torch {op}', 'n/a')}"
                + (f"; mul: oplib {r.get('oplib mul', 'n/a')}" if op == "add" else "")
            )
    own = data.get("own_kernels_by_size_us")
    if own:
        least = own["MIN_ELEMENTS"]
        for label, r in own.items():
            if label == "MIN_ELEMENTS":
                continue
            steps = ", ".join(
                f"{int(n):,} {t['cupy']:.1f}/{t['own']:.1f}" for n, t in r["us"].items()
            )
            start = r["own no slower from"]
            lines.append(
                f"own kernel against cupy, {label} float32, µs per call cupy/own: {steps}; "
                + (
                    f"own no slower from {start:,} elements"
                    if start
                    else "own slower at every size"
                )
                + f" (MIN_ELEMENTS {least:,})"
            )
    loop = data.get("small_ops_per_s")
    if loop:
        lines.append(
            f"{sizes.get('loop_ops', 0):,} small ops, ops/s: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in loop.items())
        )
    mm = data.get("matmul_TFLOPs")
    if mm:
        k = sizes.get("matmul_k")
        lines.append(
            f"matmul {k}x{k} float16, TFLOP/s: " + ", ".join(f"{a} {v}" for a, v in mm.items())
        )
    for section, error in data.get("errors", {}).items():
        lines.append(f"{section}: raised {error}")
    return lines


def run(rig: Rig, sizes: Sizes, results: Results) -> bool:
    """Every section on ``rig``; False when one raised (the others still ran)."""
    results.put("sizes", asdict(sizes))
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("per_call_us", lambda: per_call(rig, sizes, results.attempt)),
        ("autograd_ms", lambda: autograd(rig, sizes)),
        ("bandwidth_GBps", lambda: bandwidth(rig, sizes, results.attempt)),
        ("small_ops_per_s", lambda: small_ops(rig, sizes)),
        ("matmul_TFLOPs", lambda: matmul(rig, sizes)),
    ]
    if rig.device == "cuda":  # (the own kernels are cupy's RawKernels)
        sections.insert(3, ("own_kernels_by_size_us", lambda: own_by_size(rig, sizes)))
    for key, section in sections:
        t0 = perf_counter()
        value = results.attempt(key, section)
        if value is None:
            continue
        if key == "autograd_ms":
            value, peak = value
            results.put("peak_memory_MiB", peak)
        results.put(key, value)
        print(f"{key} ({perf_counter() - t0:.1f} s): {json.dumps(value)}", flush=True)
    results.put("summary", summary(results.data))
    return "errors" not in results.data


def cuda_rig() -> Rig | str:
    """The rig on CUDA device 0, or why there is none."""
    try:
        import cupy as cp
    except ImportError as e:
        return f"cupy is not importable ({e})"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError as e:
        return f"cupy sees no CUDA device ({e})"
    if count == 0:
        return "cupy sees no CUDA device"
    pool = cp.get_default_memory_pool()

    def sync() -> None:
        cp.cuda.Device().synchronize()

    class PeakInUse(cp.cuda.MemoryHook):  # type: ignore[misc]
        """The pool's bytes in use at their highest: sampled after each allocation."""

        name = "oplib_bench_peak_in_use"

        def __init__(self) -> None:
            self.peak = int(pool.used_bytes())

        def malloc_postprocess(self, **kwargs: Any) -> None:
            self.peak = max(self.peak, int(pool.used_bytes()))

    def peak(fn: Callable[[], object]) -> dict[str, int]:
        # "held" is what the pool keeps, freed blocks too (emptied first: its size afterwards
        # is its high-water mark); "in use" the live arrays, as torch's max_memory_allocated
        sync()
        pool.free_all_blocks()
        used, total = pool.used_bytes(), pool.total_bytes()
        hook = PeakInUse()
        with hook:
            fn()
        sync()
        return {"in use": hook.peak - used, "held": int(pool.total_bytes() - total)}

    rig = Rig(xp=cp, device="cuda", sync=sync, peak_bytes=peak)
    try:  # optional: torch's figures beside cupy's
        torch = importlib.import_module("torch")
    except ImportError:
        return rig
    if not torch.cuda.is_available():
        return rig

    def both() -> None:
        cp.cuda.Device().synchronize()
        torch.cuda.synchronize()

    def torch_peak(fn: Callable[[], object]) -> dict[str, int]:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        used, held = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        fn()
        torch.cuda.synchronize()
        return {
            "in use": int(torch.cuda.max_memory_allocated() - used),
            "held": int(torch.cuda.max_memory_reserved() - held),
        }

    rig.torch, rig.sync, rig.torch_peak_bytes = torch, both, torch_peak
    return rig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller arrays")
    parser.add_argument("--chain-only", metavar="N,REPEATS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    results = Results(path=args.json)
    rig = cuda_rig()
    if args.chain_only and not isinstance(rig, str):  # the autograd section's second process
        n, repeats = (int(v) for v in args.chain_only.split(","))
        seconds = chain_fwd_bwd(rig, Sizes(chain_n=n, chain_repeats=repeats))
        print(json.dumps({"s": seconds}))
        return 0
    if isinstance(rig, str):
        print(f"no GPU: skipped ({rig})")
        results.put("skipped", f"no GPU: {rig}")
        return 0
    cp = rig.xp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    results.put(
        "device",
        {
            "name": props["name"].decode(),
            "cupy": cp.__version__,
            "torch": None if rig.torch is None else rig.torch.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            # which cached call serves the calls measured: _ccall312 (vectorcall), _ccall
            # or None (the Python one)
            "cached_call": COMPILED_MODULE,
        },
    )
    device = results.data["device"]
    print(
        f"{device['name']}: cupy {cp.__version__}, Python {device['python']}, cached call "
        f"{device['cached_call'] or 'Python'}",
        flush=True,
    )
    ok = run(rig, QUICK if args.quick else Sizes(), results)
    print()
    print("\n".join(results.data["summary"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
