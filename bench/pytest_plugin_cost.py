"""What oplib's pytest plugin costs a project that does not use it.

Writes a tiny unrelated project (three plain tests) to a temporary directory and runs its
pytest in fresh interpreters, taking turns: as installed (the ``pytest11`` entry point
``oplib`` loads) and with ``-p no:oplib`` (the baseline); prints the median wall time of
each and the difference. Budget: <= 20 ms. ``--python`` picks the interpreter of another
venv where oplib is installed (default: this one).

    python bench/pytest_plugin_cost.py [-n 15] [--python PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUDGET_MS = 20.0

TESTS = """\
import pytest


def test_one():
    assert 1 + 1 == 2


@pytest.mark.parametrize("n", [1, 2])
def test_two(n):
    assert n > 0
"""


def run_ms(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1e3
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15, help="runs of each (default 15)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTEST_"))}
    with tempfile.TemporaryDirectory() as project:
        with open(os.path.join(project, "test_unrelated.py"), "w") as f:
            f.write(TESTS)
        base = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        runs = {"with oplib's plugin": base, "-p no:oplib (baseline)": [*base, "-p", "no:oplib"]}
        times: dict[str, list[float]] = {name: [] for name in runs}
        for cmd in runs.values():  # warm the file system caches
            run_ms(cmd, project, env)
        for _ in range(args.n):
            for name, cmd in runs.items():
                times[name].append(run_ms(cmd, project, env))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ms in medians.items():
        print(f"{name:28s} median {ms:7.1f} ms  (min {min(times[name]):.1f})")
    cost = medians["with oplib's plugin"] - medians["-p no:oplib (baseline)"]
    print(f"\ncost of the plugin: {cost:+.1f} ms (budget {BUDGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
