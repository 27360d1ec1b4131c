"""How ``oplib check`` (every op with samples x every backend) grows with the number of
backends: the run's time for the first 1, 2, ... N available backends (cpu first), the
time per backend, and the ratio of the last to the first per-backend time, all in this run.

It must grow no more than linearly: each backend's cell compares with cpu once per sample
(``test_backends`` is scoped to the cell's backend), so the per-backend time stays flat.
A backend's own cost differs (dask builds graphs, meta has no data), so the per-backend
times are also given per backend alone.

    python bench/check_scaling.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import oplib_core as oplib
from oplib_core.testing._runner import check_ops


def seconds(backends: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_ops(None, backends)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    names = [b.name for b in oplib.backends.list() if b.is_available()]
    names.sort(key=lambda n: n != "cpu")
    seconds(names[:1], 1)  # warm up: samples, caches, first imports
    alone = {n: seconds([n], args.repeat) for n in names}
    print(f"{'backends':<45} {'seconds':>8} {'s/backend':>10} {'sum alone':>10}")
    first = None
    for k in range(1, len(names) + 1):
        chosen = names[:k]
        t = seconds(chosen, args.repeat)
        per = t / k
        first = first or per
        total_alone = sum(alone[n] for n in chosen)
        print(f"{', '.join(chosen):<45} {t:8.2f} {per:10.2f} {total_alone:10.2f}")
    print(f"\nalone: {', '.join(f'{n} {s:.2f}s' for n, s in alone.items())}")
    print(
        f"all {len(names)} backends together / sum of each alone: "
        f"{seconds(names, args.repeat) / sum(alone.values()):.2f} (1.00 = exactly linear)"
    )


if __name__ == "__main__":
    main()
