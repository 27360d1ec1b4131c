"""Forks and imports while another thread loads the plugins.

A fork while another thread loads plugins used to leave the child hung (4 of 5): the
child inherited the registration lock, and Python's lock of the module being imported,
held by a thread that does not exist in the child. oplib resets its locks in the child
(``os.register_at_fork``, as ``logging`` does), undoes the loads that thread had under way
and lets the child load afresh. And an op called at import time in a second thread while
the first call loads the plugins used to get "oplib-cpu is not installed" or "no operator
oplib::add" (the importing thread did not wait); it now waits for the load, unless the
loader waits for its import.

Each scenario runs in child interpreters with a timeout: a hang fails with a message."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from plugin_dists import write_dist

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

ROOT = Path(__file__).resolve().parents[2]

#: A thread makes the first call (loading the plugins) or its first use of a waiting
#: backend, the main thread forks after ``delay``; the child must compute, and be quick.
FORK = """\
import os, sys, threading, time
import numpy as np
import oplib_core as oplib

what, delay = sys.argv[1], float(sys.argv[2])
if what == "waiting":  # the start-up is done; the meta plugin waits for first use
    oplib.ops.oplib.sin(np.ones(1))
    use = lambda: oplib.empty(2, device="meta")
else:
    use = lambda: oplib.ops.oplib.add(np.ones(2), np.ones(2))
t = threading.Thread(target=use)
t.start()
time.sleep(delay)
pid = os.fork()
if pid == 0:
    try:
        r = oplib.ops.oplib.mul(np.ones(2), np.full(2, 3.0)).tolist()
        m = tuple(oplib.empty(2, device="meta").shape) if what == "waiting" else (2,)
        w = oplib.tensor(np.ones(2), requires_grad=True)
        (w * oplib.tensor(np.full(2, 2.0))).sum().backward()
        ok = r == [3.0, 3.0] and m == (2,) and w.grad.numpy().tolist() == [2.0, 2.0]
        os._exit(0 if ok else 2)
    except BaseException as e:
        os.write(2, repr(e).encode())
        os._exit(1)
t.join()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
"""

#: The first call loads the plugins in one thread; another imports a module that calls an
#: op at import time, ``delay`` later.
IMPORT_TIME = """\
import sys, threading, time
sys.path.insert(0, sys.argv[2])
import numpy as np
import oplib_core as oplib

delay = float(sys.argv[1])
out = {}

def first():
    out["first"] = oplib.ops.oplib.mul(np.ones(2), np.ones(2)).tolist()

def importer():
    time.sleep(delay)
    try:
        import calls_at_import
        out["import"] = calls_at_import.RESULT
    except BaseException as e:
        out["import"] = repr(e)

threads = [threading.Thread(target=first), threading.Thread(target=importer)]
for t in threads:
    t.start()
for t in threads:
    t.join(30)
print("hung" if any(t.is_alive() for t in threads) else sorted(out.items()))
"""

DELAYS = ["0", "0.002", "0.005", "0.01", "0.02", "0.04"]


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OPLIB_") or k == "OPLIB_CACHE_DIR"  # the run's (see conftest)
    }
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=90,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no answer within 90 s (arguments {args})")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def _fork_at_each_delay(what: str, env: dict[str, str] | None = None) -> list[str]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(lambda d: _run(FORK, what, d, env=env), DELAYS))


def test_a_fork_while_another_thread_makes_the_first_call_gives_a_usable_child() -> None:
    assert _fork_at_each_delay("start-up") == ["child exit 0"] * len(DELAYS)


def test_a_fork_while_another_thread_loads_a_waiting_plugin_gives_a_usable_child(
    tmp_path: Path,
) -> None:
    env = {"OPLIB_CACHE_DIR": str(tmp_path)}
    warm = "import numpy as np, oplib_core as oplib\noplib.ops.oplib.sin(np.ones(1))\nprint(1)"
    _run(warm, env=env)  # records the plugins that may wait
    assert _fork_at_each_delay("waiting", env=env) == ["child exit 0"] * len(DELAYS)


RACER = """\
import numpy as np
import oplib_core as oplib


def plus_one(x: np.ndarray) -> np.ndarray:
    return x + 1.0


# custom ops made at import time, each under custom_op's lock
OPS = [oplib.custom_op(f"racer::f{i}", plus_one, mutates_args=()) for i in range(3)]
"""

#: The main thread forks while the loading thread is inside the plugin's import, defining
#: ``racer::f1`` (holding custom_op's lock and the registration lock): a listener of the
#: registry tells the main thread, and holds the loading thread there meanwhile.
FORK_IN_DEFINE = """\
import os, sys, threading, time
import numpy as np
import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY

inside = threading.Event()

def listener(event, entry):
    if event == "defined" and entry.qualname == "racer::f1" and not inside.is_set():
        inside.set()
        time.sleep(0.5)

REGISTRY.add_listener(listener)
t = threading.Thread(target=lambda: oplib.ops.oplib.add(np.ones(2), np.ones(2)))
t.start()
assert inside.wait(30)
pid = os.fork()
if pid == 0:
    try:
        r = oplib.ops.oplib.mul(np.ones(2), np.full(2, 3.0)).tolist()
        f = [oplib.ops.racer.f0(np.ones(1)).tolist(), oplib.ops.racer.f2(np.ones(1)).tolist()]
        status = oplib.plugins.get("racer_plugin").status
        os._exit(0 if (r, f, status) == ([3.0, 3.0], [[2.0], [2.0]], "loaded") else 2)
    except BaseException as e:
        os.write(2, repr(e).encode())
        os._exit(1)
t.join()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
"""


def test_a_fork_while_a_plugin_makes_custom_ops_at_import_time_gives_a_usable_child(
    tmp_path: Path,
) -> None:
    """The locks a registration holds while it calls into the registry (custom_op's, the
    registration lock) are made afresh in the child, the half-run plugin module is dropped
    and its load undone: the child's first call loads the plugin again, whole."""
    write_dist(tmp_path / "site", "racer-plugin", "racer_plugin", RACER)
    env = {"PYTHONPATH": str(tmp_path / "site"), "OPLIB_ENTRY_POINT_CACHE": "0"}
    assert _run(FORK_IN_DEFINE, env=env) == "child exit 0"


def test_an_op_called_at_import_time_while_another_thread_loads_the_plugins(
    tmp_path: Path,
) -> None:
    (tmp_path / "calls_at_import.py").write_text(
        "import numpy as np\nimport oplib_core as oplib\n"
        "RESULT = oplib.ops.oplib.add(np.ones(2), np.ones(2)).tolist()\n"
    )
    outs = [_run(IMPORT_TIME, d, str(tmp_path)) for d in DELAYS]
    assert outs == ["[('first', [1.0, 1.0]), ('import', [2.0, 2.0])]"] * len(DELAYS)
