"""Soak: op calls from several threads while other threads register, override and destroy
kernels, ``Library`` objects and custom ops, for a bounded time.

Callers go round four paths: the native fast path (``oplib.ops.oplib.add(a, b)``), the
Tensor path (``ta * tb``), autograd (``(t * t).sum().backward()``, gradient checked) and the
kwargs path (``oplib.ops.oplib.sum(a, dim=[0], keepdim=True)``), plus ``soak::scale<i>``,
the ops whose kernels mutator ``i`` keeps overriding and removing (and calls itself right
after each change). Every kernel multiplies by its own factor and says which factor it
used, so callers and mutators can check:

* errors: any exception in a caller (must be 0);
* stale dispatches: a kernel that ran although its removal had finished before the call
  began, or a mutator's call right after its change not served by the kernel it must be
  (must be 0);
* wrong results: a result that is not what numpy gives, or not what the kernel that ran
  computed (must be 0).

Two more phases follow, each reporting errors, wrong results and hangs (all must be 0):

* threaded first use: fresh processes in which many threads make the first calls of the
  same core ops at once (the ops are built on first use), with and without grad, each
  result compared with the same call made afterwards by one thread;
* shared-leaf backward: threads running backward passes into one shared leaf at once; its
  ``.grad`` must be exactly the serial sum.

Prints calls per second, the counters and the peak RSS; exits 1 if a counter is not 0.

    python bench/soak.py [--seconds 10] [--callers 4] [--mutators 2]
        [--first-use-processes 4] [--first-use-threads 16] [--leaf-threads 8] [--leaf-passes 50]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import oplib_core as oplib

_seq = itertools.count(1)  # a global clock: next() is atomic under the GIL
_local = threading.local()


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.errors = 0
        self.stale = 0
        self.wrong = 0
        self.first_error: str | None = None

    def add(self, calls: int, errors: int, stale: int, wrong: int, error: str | None) -> None:
        with self.lock:
            self.calls += calls
            self.errors += errors
            self.stale += stale
            self.wrong += wrong
            self.first_error = self.first_error or error


def scale_kernel(factor: float, dead: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    """A kernel of ``soak::scale`` multiplying by ``factor``; ``dead[0]`` is set to the clock
    once its removal has finished (0 while it lives)."""

    def kernel(x: np.ndarray) -> np.ndarray:
        if dead[0] and dead[0] < _local.started:
            _local.stale += 1
        _local.factor = factor
        return x * factor

    return kernel


def caller(stop: threading.Event, counters: Counters, mutators: int) -> None:
    _local.stale = 0
    a = np.arange(1.0, 5.0)
    b = np.full(4, 2.0)
    ta, tb = oplib.tensor(a), oplib.tensor(b)
    add, total = oplib.ops.oplib.add, oplib.ops.oplib.sum
    scales = [getattr(oplib.ops.soak, f"scale{i}") for i in range(mutators)]
    calls = errors = wrong = 0
    error: str | None = None
    while not stop.is_set():
        try:
            for n in range(50):
                wrong += not np.array_equal(add(a, b), a + b)
                wrong += not np.array_equal((ta * tb).numpy(), a * b)
                wrong += not np.array_equal(total(a, dim=[0], keepdim=True), [a.sum()])
                _local.started = next(_seq)
                out = scales[n % len(scales)](a)
                wrong += not np.array_equal(out, a * _local.factor)
                calls += 4
            t = oplib.tensor(a, requires_grad=True)
            (t * t).sum().backward()
            wrong += not np.array_equal(t.grad.numpy(), 2 * a)
            calls += 3  # mul, sum and the backward pass
        except Exception as e:
            errors += 1
            error = error or f"{type(e).__name__}: {e}"
    counters.add(calls, errors, _local.stale, wrong, error)


def mutator(stop: threading.Event, counters: Counters, seed: int) -> None:
    """Registers and removes overriding kernels of ``soak::scale`` (through Libraries and
    the functional API), and defines and destroys Libraries and custom ops of their own."""
    factors = itertools.count(seed * 1_000_000 + 2)
    scale = getattr(oplib.ops.soak, f"scale{seed}")
    a = np.ones(1)
    _local.stale = 0
    errors = 0
    error: str | None = None
    n = 0
    while not stop.is_set():
        n += 1
        try:
            dead = [0]
            factor = float(next(factors))
            lib = oplib.Library("soak", "IMPL")
            lib.impl(f"scale{seed}", scale_kernel(factor, dead), "CPU", allow_override=True)
            _local.started = next(_seq)
            _local.stale += scale(a)[0] != factor  # the new kernel must serve from now on
            lib._destroy()
            dead[0] = next(_seq)
            _local.started = next(_seq)
            _local.stale += scale(a)[0] != 1.0  # and the base kernel again once it is gone

            ns = f"soak_m{seed}_{n % 8}"
            with oplib.library._scoped_library(ns, "FRAGMENT") as frag:
                frag.define("op(Tensor x) -> Tensor")
                frag.impl("op", np.negative, "CPU")
                if not np.array_equal(getattr(oplib.ops, ns).op(np.ones(2)), [-1.0, -1.0]):
                    counters.add(0, 0, 0, 1, None)

            op = oplib.custom_op(
                f"soak_c{seed}::twice",
                lambda x: x * 2,
                mutates_args=(),
                schema="(Tensor x) -> Tensor",
            )
            if not np.array_equal(op(np.ones(1)), [2.0]):
                counters.add(0, 0, 0, 1, None)
            op._destroy()
        except Exception as e:
            errors += 1
            error = error or f"{type(e).__name__}: {e}"
    counters.add(0, errors, _local.stale, 0, error)


#: One fresh process of the first-use phase: ``argv[1]`` threads, each op's first call from
#: all of them at once; ``argv[2]`` is "grad" or "nograd". Prints its counters as JSON.
FIRST_USE = """\
import json, sys, threading
import numpy as np
import oplib_core as oplib

N, GRAD = int(sys.argv[1]), sys.argv[2] == "grad"
sys.setswitchinterval(1e-6)
o = oplib.ops.oplib
A = np.linspace(0.5, 1.5, 6).reshape(2, 3)
B = np.linspace(1.25, 0.25, 6).reshape(2, 3)
CALLS = [  # (differentiable, call)
    (True, lambda x, y: x * y), (True, lambda x, y: x + y), (True, lambda x, y: x - y),
    (True, lambda x, y: x / y), (True, lambda x, y: o.exp(x)), (True, lambda x, y: o.sin(x)),
    (True, lambda x, y: o.tanh(x)), (True, lambda x, y: o.sqrt(x)), (True, lambda x, y: o.relu(x)),
    (True, lambda x, y: o.maximum(x, y)), (True, lambda x, y: o.mul.Scalar(x, 3.0)),
    (True, lambda x, y: 1.0 / x), (False, lambda x, y: o.lt(x, y)),
    (True, lambda x, y: o.where(o.gt(x, y), x, y)), (True, lambda x, y: o.sum(x, [1])),
    (True, lambda x, y: o.mean(x, [0])), (True, lambda x, y: o.amax(x, [1])),
    (True, lambda x, y: o.matmul(x, o.transpose(y, 0, 1))),
    (True, lambda x, y: o.reshape(x, [3, 2])), (True, lambda x, y: o.flip(x, [1])),
    (True, lambda x, y: o.cat([x, y])), (True, lambda x, y: o.stack([x, y], 1)),
    (True, lambda x, y: o.clamp(x, 0.75, 1.25)), (True, lambda x, y: o.tril(x)),
]

def call(i):
    diff, fn = CALLS[i]
    x, y = oplib.tensor(A, requires_grad=GRAD), oplib.tensor(B, requires_grad=GRAD)
    out = fn(x, y)
    grads = None
    if GRAD and diff:
        (out * out).sum().backward()
        grads = [x.grad.numpy().tolist(), None if y.grad is None else y.grad.numpy().tolist()]
    return out.detach().numpy().tolist(), grads

errors, results, first = [], {}, []
barrier = threading.Barrier(N)

def run(k):
    for i in range(len(CALLS)):
        try:
            barrier.wait(30)
            results[k, i] = call(i)
        except BaseException as e:
            errors.append(repr(e))

threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(60)
hung = sum(t.is_alive() for t in threads)
wrong = 0
if not hung:
    expected = [call(i) for i in range(len(CALLS))]
    wrong = sum(got != expected[i] for (k, i), got in results.items())
print(json.dumps({"calls": len(results), "errors": len(errors), "wrong": wrong, "hung": hung,
                  "first_error": errors[0] if errors else None}))
"""


def first_use_phase(processes: int, threads: int, counters: Counters) -> int:
    """``processes`` fresh processes with and without grad; returns the hangs."""

    def one(grad: str) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if k != "OPLIB_LAZY_OPS"}
        try:
            proc = subprocess.run(
                [sys.executable, "-c", FIRST_USE, str(threads), grad],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"hung": 1, "first_error": "a process hung (no answer in 120 s)"}
        if proc.returncode != 0:
            return {"errors": 1, "first_error": proc.stderr.strip().splitlines()[-1]}
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out

    runs = ["grad", "nograd"] * processes
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(one, runs))
    hangs = 0
    for out in outs:
        counters.add(
            out.get("calls", 0),
            out.get("errors", 0),
            0,
            out.get("wrong", 0),
            out.get("first_error"),
        )
        hangs += out.get("hung", 0)
    return hangs


def shared_leaf_phase(threads: int, passes: int, counters: Counters) -> int:
    """``threads`` threads, ``passes`` backward passes each into one shared leaf (thread
    ``k`` contributes ``k + 1`` per element and pass); returns the hangs."""
    n = 100_000
    w = oplib.tensor(np.zeros(n), requires_grad=True)
    barrier = threading.Barrier(threads)

    def run(k: int) -> None:
        x = oplib.tensor(np.full(n, float(k + 1)))
        errors, error = 0, None
        barrier.wait()
        for _ in range(passes):
            try:
                (w * x).sum().backward()
            except Exception as e:
                errors += 1
                error = error or f"{type(e).__name__}: {e}"
        counters.add(passes, errors, 0, 0, error)

    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
    finally:
        sys.setswitchinterval(saved)
    hangs = sum(t.is_alive() for t in workers)
    if not hangs:
        expected = passes * sum(range(1, threads + 1))
        got = np.zeros(n) if w.grad is None else w.grad.numpy()
        counters.add(0, 0, 0, int(np.count_nonzero(got != expected)), None)
    return hangs


def report_phase(name: str, counters: Counters, hangs: int, elapsed: float) -> bool:
    print(f"{name}: {elapsed:.1f} s")
    print(f"  calls             {counters.calls}")
    print(f"  errors            {counters.errors}")
    print(f"  wrong results     {counters.wrong}")
    print(f"  hangs             {hangs}")
    if counters.first_error:
        print(f"  first error: {counters.first_error}")
    return counters.errors == counters.wrong == hangs == 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--mutators", type=int, default=2, help="at least 1")
    p.add_argument("--first-use-processes", type=int, default=4, help="each with and without grad")
    p.add_argument("--first-use-threads", type=int, default=16)
    p.add_argument("--leaf-threads", type=int, default=8)
    p.add_argument("--leaf-passes", type=int, default=50)
    args = p.parse_args(argv)

    oplib.plugins.load()
    base = oplib.Library("soak", "DEF")
    for i in range(args.mutators):
        base.define(f"scale{i}(Tensor x) -> Tensor")
        base.impl(f"scale{i}", scale_kernel(1.0, [0]), "CPU")

    stop = threading.Event()
    counters = Counters()
    threads = [
        threading.Thread(target=caller, args=(stop, counters, args.mutators))
        for _ in range(args.callers)
    ]
    threads += [
        threading.Thread(target=mutator, args=(stop, counters, i)) for i in range(args.mutators)
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    print(f"soak: {args.callers} callers, {args.mutators} mutators, {elapsed:.1f} s")
    print(f"calls             {counters.calls}  ({counters.calls / elapsed:,.0f} /s)")
    print(f"errors            {counters.errors}")
    print(f"stale dispatches  {counters.stale}")
    print(f"wrong results     {counters.wrong}")
    print(f"peak RSS          {peak_mb:.0f} MB")
    if counters.first_error:
        print(f"first error: {counters.first_error}")
    base._destroy()
    ok = counters.errors == counters.stale == counters.wrong == 0

    first = Counters()
    start = time.perf_counter()
    hangs = first_use_phase(args.first_use_processes, args.first_use_threads, first)
    phase = f"threaded first use ({args.first_use_processes} x 2 processes"
    phase += f" x {args.first_use_threads} threads)"
    ok &= report_phase(phase, first, hangs, time.perf_counter() - start)

    leaf = Counters()
    start = time.perf_counter()
    hangs = shared_leaf_phase(args.leaf_threads, args.leaf_passes, leaf)
    phase = f"shared-leaf backward ({args.leaf_threads} threads x {args.leaf_passes} passes)"
    ok &= report_phase(phase, leaf, hangs, time.perf_counter() - start)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
