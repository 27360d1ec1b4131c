"""oplib on Dask: wall time of a heavy pointwise op plus a reduction on a >= 2 GB array, as
one numpy call and as oplib ops on dask with 1 and 2 worker processes; and graph-build time
of oplib's generic kernels for 10,000 chunks against the same graph from plain dask.

The computation is ``sum(tanh(sin(x) * 2), dim=[1])`` on a float64 ``x`` of ``--gb`` GB
(default 2). For dask, ``x`` is generated and persisted on the workers first (its creation
is not timed), then the oplib graph is built and computed (both timed). Workers are
``distributed.LocalCluster`` processes on loopback with one thread each; the numpy baseline
is single-threaded too. Memory: the numpy baseline peaks near 3x the array size; the
cluster holds the array once (spread over the workers) plus chunks in flight.

    python bench/dask_scaling.py [--gb 2.0] [--chunk-mb 64] [--repeat 2]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")  # single-threaded numpy, for a fair baseline

import numpy as np

import oplib_core as oplib

core = oplib.ops.oplib


def oplib_graph(x):
    return core.sum(core.tanh(core.mul.Scalar(core.sin(x), 2.0)), [1], False)


def numpy_call(x):
    return np.tanh(np.sin(x) * 2.0).sum(axis=1)


def shape_for(gb: float) -> tuple[int, int]:
    cols = 16_384
    rows = int(gb * 1e9 / 8 / cols)
    return rows, cols


def bench_numpy(shape: tuple[int, int], repeat: int) -> float:
    x = np.random.default_rng(0).random(shape)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = numpy_call(x)
        times.append(time.perf_counter() - t0)
    del x, out
    gc.collect()
    return min(times)


def bench_dask(shape, chunks, workers: int, repeat: int) -> tuple[float, float]:
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        x = da.random.default_rng(0).random(shape, chunks=chunks)
        x = client.persist(x)
        wait(x)
        client.compute(oplib_graph(x[:1, :1]), sync=True)  # workers import oplib once
        totals, builds = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            y = oplib_graph(x)
            t1 = time.perf_counter()
            out = client.compute(y, sync=True)
            totals.append(time.perf_counter() - t0)
            builds.append(t1 - t0)
        head = client.compute(x[:64], sync=True)  # check against numpy on the same rows
        np.testing.assert_allclose(out[:64], numpy_call(head), rtol=1e-9)
        del x
    return min(totals), min(builds)


def _numpy_work(_: int) -> float:
    x = np.random.default_rng(1).random((1200, 16_384))
    t0 = time.perf_counter()
    numpy_call(x)
    return time.perf_counter() - t0


def machine_parallelism() -> float:
    """Speed-up two independent numpy processes get on this machine (the ceiling for 2
    workers): time of 2 tasks in 1 process over time of 2 tasks in 2 processes at once."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_numpy_work, range(2))  # warm-up
        t0 = time.perf_counter()
        pool.map(_numpy_work, range(2))
        parallel = time.perf_counter() - t0
    serial = _numpy_work(0) + _numpy_work(0)
    return serial / parallel


def graph_build(nchunks: int = 10_000, repeat: int = 7) -> dict[str, tuple[float, float]]:
    """(build ms, build + materialise ms) per way of making the same 10,000-task layer."""
    import dask.array as da

    side = round(nchunks**0.5)
    x = da.ones((side * 10, side * 10), chunks=10, dtype=np.float32)
    assert x.npartitions == side * side
    meta = np.empty((0, 0), np.float32)
    ways = {
        "oplib sin(x) (fake-kernel meta)": lambda: core.sin(x),
        "da.map_blocks(np.sin, meta=...)": lambda: da.map_blocks(np.sin, x, meta=meta),
        "da.map_blocks(np.sin) (guessed meta)": lambda: da.map_blocks(np.sin, x),
        "oplib sum(x, [1])": lambda: core.sum(x, [1], False),
        "x.sum(axis=1)": lambda: x.sum(axis=1),
    }
    out = {}
    for name, make in ways.items():
        builds, fulls = [], []
        make()  # warm-up
        gc.collect()
        for _ in range(repeat):
            t0 = time.perf_counter()
            y = make()
            t1 = time.perf_counter()
            n = len(dict(y.__dask_graph__()))
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            fulls.append(t2 - t0)
        assert n >= nchunks
        out[name] = (statistics.median(builds) * 1e3, statistics.median(fulls) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="array size in GB (1e9 bytes)")
    parser.add_argument("--chunk-mb", type=float, default=64.0, help="chunk size in MB")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    shape = shape_for(args.gb)
    rows_per_chunk = max(1, int(args.chunk_mb * 1e6 / 8 / shape[1]))
    chunks = (rows_per_chunk, shape[1])
    nbytes = shape[0] * shape[1] * 8
    nchunks = -(-shape[0] // rows_per_chunk)
    print(
        f"x: {shape} float64 = {nbytes / 1e9:.2f} GB in {nchunks} chunks of "
        f"{chunks} ({rows_per_chunk * shape[1] * 8 / 1e6:.0f} MB); cores: {os.cpu_count()}"
    )
    print("computation: sum(tanh(sin(x) * 2), dim=[1])\n")

    t_np = bench_numpy(shape, args.repeat)
    print(f"{'numpy, one call (1 thread)':<34} {t_np:8.2f} s")
    results = {}
    for w in args.workers:
        total, build = bench_dask(shape, chunks, w, args.repeat)
        results[w] = total
        print(
            f"{f'oplib on dask, {w} worker(s)':<34} {total:8.2f} s   "
            f"(graph build {build * 1e3:.1f} ms; vs numpy x{t_np / total:.2f})"
        )
    if 1 in results and len(results) > 1:
        for w, t in results.items():
            if w != 1:
                print(f"speed-up {w} workers vs 1: x{results[1] / t:.2f}")
        print(
            f"(ceiling on this machine: two numpy processes at once run "
            f"x{machine_parallelism():.2f} faster than one after the other)"
        )

    print("\ngraph build for 10,000 chunks (median of 7; ms):")
    print(f"{'':<40} {'build':>8} {'+ materialise':>14}")
    for name, (b, f) in graph_build().items():
        print(f"{name:<40} {b:8.2f} {f:14.1f}")


if __name__ == "__main__":
    main()
