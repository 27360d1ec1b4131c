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

Prints calls per second, the three counters and the peak RSS; exits 1 if a counter is not 0.

    python bench/soak.py [--seconds 10] [--callers 4] [--mutators 2]
"""

from __future__ import annotations

import argparse
import itertools
import resource
import sys
import threading
import time
from collections.abc import Callable

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--mutators", type=int, default=2, help="at least 1")
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
    return 0 if counters.errors == counters.stale == counters.wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
