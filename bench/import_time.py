"""Start-up cost: wall time of ``python -c "import oplib_core"`` against ``import numpy``.

Runs each command N times in fresh interpreters (same venv) and prints the medians and
the difference (budget: +40 ms). ``--venv PATH`` measures another environment's python,
e.g. one with ~100 extra distributions installed (see ``--make-crowded``).

    python bench/import_time.py [-n 15] [--venv .venv] [--make-crowded DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def wall_ms(python: str, code: str, n: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([python, "-c", code], check=True, env=env)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def make_crowded(venv: str, count: int) -> None:
    """Fill ``venv`` with ``count`` tiny distributions (each with a dist-info and one module,
    some with entry points of other groups), to measure entry-point discovery at scale."""
    py = os.path.join(venv, "bin", "python")
    site = subprocess.check_output(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    for i in range(count):
        name = f"filler_pkg_{i:03d}"
        info = os.path.join(site, f"{name}-1.0.dist-info")
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            f.write(f"[console_scripts]\n{name} = {name}:main\n")
        with open(os.path.join(info, "RECORD"), "w") as f:
            f.write("")
        with open(os.path.join(site, f"{name}.py"), "w") as f:
            f.write("def main():\n    pass\n")


_COMPILE = """
import compileall, importlib.util, os, pkgutil
for m in pkgutil.iter_modules():
    if m.name == "oplib_core" or m.name.startswith("oplib_"):
        spec = importlib.util.find_spec(m.name)
        if spec and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                compileall.compile_dir(d, quiet=1)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=15)
    parser.add_argument("--venv", default=os.path.dirname(os.path.dirname(sys.executable)))
    parser.add_argument(
        "--make-crowded",
        type=int,
        default=0,
        metavar="COUNT",
        help="first add COUNT filler distributions to the venv",
    )
    args = parser.parse_args()
    python = os.path.join(args.venv, "bin", "python")
    if args.make_crowded:
        make_crowded(args.venv, args.make_crowded)
    env = dict(os.environ)
    # pip compiles the .pyc files of a regular install; editable installs (and machines
    # with PYTHONDONTWRITEBYTECODE=1) would otherwise measure compiling the sources.
    subprocess.run([python, "-c", _COMPILE], check=True, env=env)
    count = subprocess.check_output(
        [python, "-c", "import importlib.metadata as m; print(len(list(m.distributions())))"],
        text=True,
    ).strip()
    base = wall_ms(python, "pass", args.n, env)
    numpy = wall_ms(python, "import numpy", args.n, env)
    oplib = wall_ms(python, "import oplib_core", args.n, env)
    print(f"python: {python} ({count} distributions installed)")
    print(f"{'python -c pass':28s} {base:7.1f} ms")
    print(f"{'import numpy':28s} {numpy:7.1f} ms")
    print(f"{'import oplib_core':28s} {oplib:7.1f} ms")
    print(f"oplib_core over numpy: {oplib - numpy:+.1f} ms (budget +40 ms)")


if __name__ == "__main__":
    main()
