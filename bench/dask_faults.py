"""oplib on Dask when a worker dies: kill a worker process of a ``distributed.LocalCluster``
at several moments of a computation built from oplib ops, and count correct results.

The computation is ``sum(tanh(sin(x) * 2) + exp(-x*x), dim=[1])`` repeated over a few
rounds on a float64 ``x`` generated on the workers from a seed (so a lost chunk is
recomputed to the same values); the reference is numpy on the same ``x``. The workers run
under nannies, which restart a killed worker; Dask reschedules the lost tasks. Moments:

- ``before``: a worker is killed after the graph is built, before it is submitted;
- ``at-submit``: right after submission;
- ``25%`` / ``50%`` / ``75%``: that far into the undisturbed run time;
- ``after-done``: after the result is computed on the cluster, before it is gathered
  (the worker holding it may be the one killed: Dask recomputes it).

Each moment runs ``--repeat`` times; a run that takes longer than ``--timeout`` counts as
hung, and a worker not back ``--timeout`` seconds after a run is reported. Prints a table:
runs, correct, wrong, errors, hung, and the median time.

    python bench/dask_faults.py [--workers 3] [--repeat 3] [--size 2000] [--chunk 250]
                                [--moments before,25%,...] [--logs]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
import warnings
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

import oplib_core as oplib

core = oplib.ops.oplib
MOMENTS = ("none", "before", "at-submit", "25%", "50%", "75%", "after-done")


def oplib_graph(x: Any, rounds: int) -> Any:
    y = x
    for _ in range(rounds):
        y = core.add(
            core.tanh(core.mul.Scalar(core.sin(y), 2.0)), core.exp(core.neg(core.mul(y, y)))
        )
    return core.sum(y, [1], False)


def numpy_graph(x: np.ndarray, rounds: int) -> np.ndarray:
    y = x
    for _ in range(rounds):
        y = np.tanh(np.sin(y) * 2.0) + np.exp(-(y * y))
    return y.sum(axis=1)


def kill_a_worker(client: Any, rng: np.random.Generator) -> int:
    """SIGKILL one worker process (its nanny restarts it); returns its pid."""
    pids = client.run(os.getpid)
    pid = int(rng.choice(sorted(pids.values())))
    os.kill(pid, signal.SIGKILL)
    return pid


def one_run(
    client: Any,
    x: Any,
    want: np.ndarray,
    args: argparse.Namespace,
    moment: str,
    undisturbed: float,
    rng: np.random.Generator,
) -> tuple[str, float]:
    from distributed import wait

    t0 = time.perf_counter()
    y = oplib_graph(x, args.rounds)
    if moment == "before":
        kill_a_worker(client, rng)
    future = client.compute(y)
    if moment == "at-submit":
        kill_a_worker(client, rng)
    elif moment.endswith("%"):
        time.sleep(undisturbed * int(moment[:-1]) / 100)
        kill_a_worker(client, rng)
    try:
        if moment == "after-done":
            wait(future, timeout=args.timeout)
            kill_a_worker(client, rng)
        got = future.result(timeout=args.timeout)
    except TimeoutError:
        future.cancel()
        return "hung", time.perf_counter() - t0
    except Exception as e:  # a lost result Dask could not recover counts as an error
        print(f"    {moment}: {type(e).__name__}: {e}")
        return "errors", time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-9, atol=1e-9)
    return ("correct" if ok else "wrong"), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--moments", default=",".join(MOMENTS[1:]), help="comma-separated")
    parser.add_argument("--logs", action="store_true", help="show the cluster's warnings")
    args = parser.parse_args()

    import dask.array as da
    from distributed import Client, LocalCluster

    warnings.filterwarnings("ignore")  # restarted workers log loudly; the table says it
    rng = np.random.default_rng(19)
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            worker_dashboard_address=None,
            silence_logs=30 if args.logs else 50,
        ) as cluster,
        Client(cluster) as client,
    ):
        x = da.random.default_rng(0).standard_normal(
            (args.size, args.size), chunks=(args.chunk, args.chunk)
        )
        want = numpy_graph(x.compute(), args.rounds)
        client.compute(oplib_graph(x[:1, :1], 1), sync=True)  # workers import oplib once
        times = [one_run(client, x, want, args, "none", 0.0, rng)[1] for _ in range(2)]
        undisturbed = min(times)
        print(
            f"{args.workers} workers, x {args.size}x{args.size} float64 in "
            f"{x.npartitions} chunks, {args.rounds} rounds; undisturbed run "
            f"{undisturbed:.2f} s"
        )
        print(
            f"{'moment':<12}{'runs':>6}{'correct':>9}{'wrong':>7}{'errors':>8}"
            f"{'hung':>6}{'median s':>10}"
        )
        totals = dict.fromkeys(("runs", "correct", "wrong", "errors", "hung"), 0)
        for moment in ("none", *args.moments.split(",")):
            counts = dict.fromkeys(("correct", "wrong", "errors", "hung"), 0)
            elapsed = []
            for _ in range(args.repeat):
                outcome, seconds = one_run(client, x, want, args, moment, undisturbed, rng)
                counts[outcome] += 1
                elapsed.append(seconds)
                try:
                    client.wait_for_workers(args.workers, timeout=args.timeout)
                except TimeoutError:  # the run's outcome stands; say so and go on
                    n = len(client.scheduler_info()["workers"])
                    print(
                        f"    {moment}: only {n}/{args.workers} workers {args.timeout:.0f} s later"
                    )
            for k, v in counts.items():
                totals[k] += v
            totals["runs"] += args.repeat
            print(
                f"{moment:<12}{args.repeat:>6}{counts['correct']:>9}{counts['wrong']:>7}"
                f"{counts['errors']:>8}{counts['hung']:>6}{statistics.median(elapsed):>10.2f}"
            )
        print(
            f"total: {totals['correct']}/{totals['runs']} correct, {totals['wrong']} wrong, "
            f"{totals['errors']} errors, {totals['hung']} hung"
        )


if __name__ == "__main__":
    main()
