"""Native kernels: what oplib adds around a C kernel, and how the kernels themselves run.

Compiles examples/native_ops/csrc/native_ops.c (``cc -O3``) into a temporary directory,
loads it, and prints, all measured in this run:

1. per-call overhead on a one-element float32 tensor: ``oplib.ops.native_ops.scaled_add``
   on numpy arrays (dispatch, the fast path's metadata lookup, ``np.empty`` for the output,
   the packed call) versus the same C function called directly through ctypes on the same
   arrays, three ways: (a) the kernel's declared prototype, argument structs and output
   built once; (b) as oplib's fast path calls it (no prototype, ready ``c_void_p``
   arguments), structs and output built once (the bare C call); (c) as (b) with the output
   allocated per call by ``np.empty`` and its data pointer written, as oplib does. oplib is
   measured through the compiled fast call (``_cfastcall``, when oplib-core was built with a
   C compiler; budget: <= 1 us) and through the generated Python one it falls back to, each
   split into dispatch and the kernel's fast call (the C call included);
2. 10M float32 elements: ``scaled_add(a, b, 1.0)`` versus numpy's ``np.add(a, b)``, both
   allocating their output (budget: within 10%);
3. 2 threads versus 1 calling ``apply_affine`` on 2000x2000 float32 arrays (budget: >=
   1.6x; needs two idle cores).

The kernel itself is also timed against ``np.add(a, b, out=out)`` on a preallocated output,
so the gap the C code makes (its compiler flags) is told apart from the gap oplib makes.
The example builds its contiguous float32 loop for AVX2 and the baseline (target_clones,
see docs/native-kernels.md); ``--cflags "-O3 -march=native"`` builds everything for this
machine instead.

    python bench/native.py [--repeat 30] [--number 20000] [--cflags "-O3"]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _timing import best_ns

import oplib_core as oplib
from oplib_core._native import _abi, _fastcall, _marshal

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "examples" / "native_ops" / "csrc" / "native_ops.c"


def build(where: str, cflags: list[str]) -> str:
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc") if c and shutil.which(c)), None)
    if cc is None:
        sys.exit("bench/native.py needs a C compiler (cc or gcc)")
    out = os.path.join(where, "libnative_ops.so")
    cmd = [cc, *cflags, "-shared", "-fPIC", "-I", oplib.get_include(), str(SOURCE), "-o", out]
    subprocess.run(cmd, check=True)
    return out


def direct_call(kernel_fn, a: np.ndarray, b: np.ndarray, out: np.ndarray, *, raw: bool = False):
    """The C kernel through ctypes with its argument structs built once, writing into
    ``out``. ``raw``: as oplib's fast path calls it (no prototype; every argument a ready
    ``c_void_p``, so ctypes converts nothing) instead of through the kernel's declared
    prototype (``KernelFn``: pointers to the structs, ``byref`` for the error)."""
    keep = []

    def dl(arr):
        t = _abi.DLTensor()
        sh = (ctypes.c_int64 * arr.ndim)(*arr.shape)
        st = (ctypes.c_int64 * arr.ndim)(*[s // arr.itemsize for s in arr.strides])
        t.data, t.device, t.ndim = arr.ctypes.data, _abi.DLDevice(1, 0), arr.ndim
        t.dtype, t.shape, t.strides = _abi.DLDataType(2, 32, 1), sh, st
        keep.extend((sh, st, t))
        return t

    args = (_abi.Arg * 3)()
    args[0].v.i = ctypes.addressof(dl(a))
    args[1].v.i = ctypes.addressof(dl(b))
    args[2].v.f = 1.0
    outs = (_abi.DLTensor * 1)(dl(out))
    err = _abi.Error()
    if raw:
        fn = _fastcall._untyped(ctypes.cast(kernel_fn, ctypes.c_void_p).value)
        pa, po, pe = (ctypes.c_void_p(ctypes.addressof(x)) for x in (args, outs, err))
        na, no = _fastcall._COUNT(3), _fastcall._COUNT(1)

        def call():
            return fn(pa, na, po, no, pe)

    else:
        ref = ctypes.byref(err)

        def call():
            return kernel_fn(args, 3, outs, 1, ref)

    call.keep = (keep, args, outs, err)  # type: ignore[attr-defined]
    call.outs = outs  # type: ignore[attr-defined]
    return call


def direct_call_allocating(kernel_fn, a: np.ndarray, b: np.ndarray):
    """As ``direct_call(raw=True)``, but allocating the output per call as oplib does
    (``np.empty``) and writing its data pointer into the prebuilt output ``DLTensor``."""
    call = direct_call(kernel_fn, a, b, np.empty(a.shape, a.dtype), raw=True)
    out_dl = call.outs[0]
    shape, dtype, empty, numpy_data = a.shape, a.dtype, np.empty, _marshal.numpy_data

    def alloc_call():
        out = empty(shape, dtype)
        out_dl.data = numpy_data(out)  # as oplib reads it
        call()
        return out

    alloc_call.keep = call  # type: ignore[attr-defined]
    return alloc_call


def threads_seconds(fn, n_threads: int, calls: int) -> float:
    barrier = threading.Barrier(n_threads + 1)

    def work():
        barrier.wait()
        for _ in range(calls):
            fn()

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--cflags", default="-O3", help="C compiler flags (default: -O3)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        oplib.ops.load_library(build(tmp, args.cflags.split()))
        ops = oplib.ops.native_ops
        oplib.register_fake("native_ops::scaled_add", lambda a, b, alpha=1.0: oplib.empty_like(a))
        kernel = oplib.lookup("native_ops::scaled_add").kernel("cpu")
        assert kernel is not None
        kernel_fn = kernel.fn.fn

        # 1. per-call overhead, one element
        a = np.ones(1, np.float32)
        b = np.ones(1, np.float32)
        add = ops.scaled_add
        env = {
            "declared": direct_call(kernel_fn, a, b, np.empty(1, np.float32)),
            "raw": direct_call(kernel_fn, a, b, np.empty(1, np.float32), raw=True),
            "alloc": direct_call_allocating(kernel_fn, a, b),
            "add": add,
            "kernel": kernel.fn,
            "args": (a, b, 1.0),
            "a": a,
            "b": b,
        }

        def ns(stmt: str) -> float:
            return best_ns(stmt, env, args.number, args.repeat)

        t = {name: ns(stmt) for name, stmt in (
            ("declared", "declared()"), ("raw", "raw()"), ("alloc", "alloc()"),
        )}  # fmt: skip
        # oplib's call, through the compiled fast call (when built) and the generated Python
        # one it falls back to; each is made anew on the first call after invalidate()
        compiled = _fastcall.COMPILED
        for impl, use in (("compiled", compiled), ("python", None)):
            if impl == "compiled" and compiled is None:
                continue
            _fastcall.COMPILED = use
            kernel.fn.invalidate()
            add(a, b, 1.0)
            env["fast"] = kernel.fn.fast.call
            t[impl] = ns("add(a, b, 1.0)")
            t[impl + " fast"] = ns("fast(a, b, 1.0)")
            t[impl + " kernel"] = ns("kernel(a, b, 1.0)")
        _fastcall.COMPILED = compiled
        kernel.fn.invalidate()
        print("one float32 element, ns per call (best of the repeats):")
        for name, what in (
            ("declared", "ctypes direct, declared prototype, structs and output built once"),
            ("raw", "ctypes direct, ready c_void_p args, structs and output built once"),
            ("alloc", "ctypes direct, ready c_void_p args, np.empty output per call"),
            ("compiled", "oplib.ops.native_ops.scaled_add(a, b, 1.0), compiled fast call"),
            ("python", "oplib.ops.native_ops.scaled_add(a, b, 1.0), generated Python"),
        ):
            if name in t:
                print(f"  {what:66} {t[name]:6.0f}")
        if compiled is None:
            print("  (no compiled fast call: oplib-core was installed without a C compiler)")
        for impl, budget in (("compiled", " (budget 1000 ns)"), ("python", " (the fallback)")):
            if impl not in t:
                continue
            print(
                f"  {impl} overhead vs the three: {t[impl] - t['declared']:5.0f} / "
                f"{t[impl] - t['raw']:5.0f} / {t[impl] - t['alloc']:5.0f} ns{budget}"
            )
            print(
                f"    of which: dispatch to the kernel's fast call "
                f"{t[impl] - t[impl + ' fast']:4.0f}, the fast call with the C call in it "
                f"{t[impl + ' fast']:4.0f} (the bare C call: {t['raw']:4.0f}); calling the "
                f"kernel object adds {t[impl + ' kernel'] - t[impl + ' fast']:4.0f} (the "
                f"dispatcher skips it)"
            )

        # 2. 10M float32 elementwise
        n = 10_000_000
        big_a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        big_b = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(add(big_a, big_b, 1.0), big_a + big_b, rtol=1e-6)
        env = {"add": add, "np": np, "a": big_a, "b": big_b}
        t_native = best_ns("add(a, b, 1.0)", env, 5, 10)
        t_numpy = best_ns("np.add(a, b)", env, 5, 10)
        print(
            f"10M float32: native {t_native / 1e6:7.2f} ms, numpy {t_numpy / 1e6:7.2f} ms, "
            f"ratio {t_native / t_numpy:5.2f} (budget <= 1.10)"
        )
        big_out = np.empty_like(big_a)
        env["kernel"] = direct_call(kernel_fn, big_a, big_b, big_out, raw=True)
        env["out"] = big_out
        t_kernel = best_ns("kernel()", env, 5, 10)
        t_ufunc = best_ns("np.add(a, b, out=out)", env, 5, 10)
        print(
            f"  of which the C code (cflags {args.cflags!r}), preallocated output: kernel "
            f"{t_kernel / 1e6:7.2f} ms, np.add(out=) {t_ufunc / 1e6:7.2f} ms, "
            f"ratio {t_kernel / t_ufunc:5.2f}"
        )

        # 3. threads on large arrays
        f = oplib.classes.native_ops.Affine(2.0, 1.0)
        x = np.random.default_rng(2).standard_normal((2000, 2000)).astype(np.float32)

        def one():
            ops.apply_affine(f, x)

        one()
        calls = 10
        t1 = min(threads_seconds(one, 1, calls) for _ in range(3))
        t2 = min(threads_seconds(one, 2, calls) for _ in range(3))
        speedup = 2 * t1 / t2
        print(
            f"threads: 1 thread {calls} calls {t1 * 1e3:7.1f} ms, 2 threads {2 * calls} "
            f"calls {t2 * 1e3:7.1f} ms, speed-up {speedup:4.2f}x (budget >= 1.6x)"
        )


if __name__ == "__main__":
    main()
