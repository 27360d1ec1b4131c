"""Start-up cost: wall time of ``python -c "import oplib_core"`` against ``import numpy``.

Runs each command N times in fresh interpreters (same venv, taking turns) and prints the
medians and the difference (budget: +40 ms). Plugins load on first use, so it also prints
what the first op call adds: what a program that uses oplib pays in all (and the same
with every plugin loaded at start-up, ``OPLIB_LAZY_BACKENDS=0``, for comparison). ``--venv PATH``
measures another environment's python, e.g. one with ~100 extra distributions installed
(see ``--make-crowded``). Last, ``oplib backends list`` (the ``oplib`` console script's
function, run by that python): every CLI command pays the same start-up (budget 200 ms).
Then, measured inside fresh interpreters: importing oplib_core after numpy, the first op
call, and each plugin that call loads (the wall times above also hold the interpreter's
exit, which frees what was imported).

    python bench/import_time.py [-n 15] [--venv .venv] [--make-crowded DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def wall_ms(python: str, codes: dict[str, str], n: int, env: dict[str, str]) -> dict[str, float]:
    """Median wall time per command; the commands take turns, so that the machine's
    slow and fast moments are shared between them."""
    times: dict[str, list[float]] = {label: [] for label in codes}
    for _ in range(n):
        for label, code in codes.items():
            start = time.perf_counter()
            subprocess.run([python, "-c", code], check=True, env=env, stdout=subprocess.DEVNULL)
            times[label].append((time.perf_counter() - start) * 1000)
    return {label: statistics.median(t) for label, t in times.items()}


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


_CLI_TARGET = """
import importlib.metadata as m
(ep,) = m.entry_points(group="console_scripts", name="oplib")
print(ep.value)
"""


def cli_code(python: str, env: dict[str, str], argv: list[str]) -> str:
    """Code running the ``oplib`` console script's function with ``argv``, as the script
    would (its wrapper in ``bin/`` names another venv's python in a copied venv)."""
    target = subprocess.check_output([python, "-c", _CLI_TARGET], text=True, env=env).strip()
    module, _, func = target.partition(":")
    return (
        f"import sys; sys.argv = {['oplib', *argv]!r}; "
        f"from {module} import {func} as main; sys.exit(main())"
    )


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
    ms = wall_ms(
        python,
        {
            "python -c pass": "pass",
            "import numpy": "import numpy",
            "import oplib_core": "import oplib_core",
            # what a program that uses oplib pays: the plugins load on first use
            "import + first op call": (
                "import numpy as np, oplib_core as oplib; oplib.ops.oplib.sin(np.ones(1))"
            ),
            # the same with every plugin loaded at start-up (oplib_core/_registry/backend_cache.py)
            "first call, eager plugins": (
                "import os; os.environ['OPLIB_LAZY_BACKENDS'] = '0'; "
                "import numpy as np, oplib_core as oplib; oplib.ops.oplib.sin(np.ones(1))"
            ),
            "oplib backends list": cli_code(python, env, ["backends", "list"]),
        },
        args.n,
        env,
    )
    print(f"python: {python} ({count} distributions installed)")
    for label, value in ms.items():
        print(f"{label:28s} {value:7.1f} ms")
    numpy = ms["import numpy"]
    over = ms["import oplib_core"] - numpy
    print(f"import oplib_core over numpy: {over:+.1f} ms (budget +40 ms)")
    first = ms["import + first op call"] - numpy
    print(f"first op call over numpy:     {first:+.1f} ms (budget +35 ms)")
    eager = ms["first call, eager plugins"] - numpy
    print(f"  (every plugin at start-up:  {eager:+.1f} ms, OPLIB_LAZY_BACKENDS=0)")
    print(f"oplib backends list:          {ms['oplib backends list']:.1f} ms (budget 200 ms)")
    print_breakdown(python, args.n, env)


_BREAKDOWN = """
import json, time
import numpy as np
start = time.perf_counter()
import oplib_core as oplib
imported = time.perf_counter()
oplib.ops.oplib.sin(np.ones(1))
called = time.perf_counter()
out = {"import oplib_core": (imported - start) * 1e3, "first op call": (called - imported) * 1e3}
for r in oplib._plugin_host.HOST.records.values():  # (not plugins.list(): that loads them all)
    if r.status == "loaded":
        out[f"  plugin {r.name!r}"] = r.load_ms
print(json.dumps(out))
"""


def print_breakdown(python: str, n: int, env: dict[str, str]) -> None:
    """Where the time goes inside the interpreter (median of ``n`` fresh ones): importing
    oplib_core after numpy, the first op call, and each plugin it loads (its ``load_ms``).
    The wall times above also hold the interpreter's exit, which frees what was imported."""
    runs = [
        json.loads(subprocess.check_output([python, "-c", _BREAKDOWN], env=env, text=True))
        for _ in range(n)
    ]
    print("in-process, median:")
    for label in runs[0]:
        values = [run[label] for run in runs if label in run]
        print(f"  {label:26s} {statistics.median(values):7.2f} ms")


if __name__ == "__main__":
    main()
