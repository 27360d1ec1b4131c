"""The import-time registration deadlock: one thread imports a plugin module that registers
at import time (a module-level ``custom_op``) while another thread makes oplib's first call,
which imports the same module as an entry point. oplib never waits for the plugins to load
while a thread holds a module's import lock, and never holds its registration lock while
importing, so this finishes; a hang fails the test (timeout) instead of hanging CI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from plugin_dists import clean_env, fresh_venv, write_dist

PLUGIN = """\
import time
import numpy as np
import oplib_core as oplib

time.sleep(0.2)  # hold this module's import lock while the other thread starts loading


@oplib.custom_op("racer::neg", mutates_args=())
def neg(x: np.ndarray) -> np.ndarray:
    return -x
"""

SCENARIO = """\
import threading, time
import numpy as np
import oplib_core as oplib

results = {}

def importer():
    import racer_plugin  # registers at import time
    results["import"] = True

def first_call():
    time.sleep(0.05)  # the import has started and holds its lock
    results["add"] = oplib.ops.oplib.add(np.ones(2), np.ones(2)).tolist()

threads = [threading.Thread(target=importer), threading.Thread(target=first_call)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert results == {"import": True, "add": [2.0, 2.0]}, results
assert oplib.ops.racer.neg(np.ones(1)).tolist() == [-1.0]
status = {r.name: r.status for r in oplib.plugins.list()}
assert status["racer_plugin"] == "loaded" and status["cpu"] == "loaded", status
print("ok")
"""


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("deadlock")
    py, _ = fresh_venv(root / "venv")
    write_dist(root / "site", "racer-plugin", "racer_plugin", PLUGIN)
    return py, root / "site"


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(5))
def test_import_time_registration_racing_the_first_call_never_deadlocks(
    python: tuple[Path, Path], attempt: int
) -> None:
    py, site = python
    env = clean_env(PYTHONPATH=str(site), OPLIB_ENTRY_POINT_CACHE="0")
    try:
        proc = subprocess.run(
            [str(py), "-c", SCENARIO], capture_output=True, text=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"attempt {attempt}: deadlock (no answer within 60 s)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


def _returns_within(fn: object, seconds: float) -> bool:
    import threading

    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    t.join(seconds)
    return not t.is_alive()


def test_a_thread_holding_the_registration_lock_waits_for_another_threads_loading_without_it():
    """It waits with the lock released (the loader's registrations take it), and holds it
    again, as often as before, when the loading is done."""
    import threading

    from oplib_core._registry import startup as _startup

    started, release, registered = threading.Event(), threading.Event(), threading.Event()

    def slow_loader() -> None:
        started.set()
        release.wait(30)
        with _startup.LOCK:  # a registration
            registered.set()

    _startup.defer(slow_loader)
    loader = threading.Thread(target=_startup.ensure)
    loader.start()
    held_after: list[bool] = []
    try:
        assert started.wait(10)

        def ensure_holding_the_lock() -> None:
            with _startup.LOCK, _startup.LOCK:
                _startup.ensure()
                held_after.append(_startup.LOCK._is_owned())  # type: ignore[attr-defined]
            held_after.append(_startup.LOCK._is_owned())  # type: ignore[attr-defined]

        waiter = threading.Thread(target=ensure_holding_the_lock, daemon=True)
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive(), "returned before the loading was done"
        assert not _returns_within(_startup.ensure, 0.2), "a plain thread must wait"
        release.set()
        waiter.join(10)
        assert not waiter.is_alive(), "deadlock: the loader could not take the lock"
        assert registered.is_set()
        assert held_after == [True, False]
    finally:
        release.set()
        loader.join(10)
    assert _startup.is_loaded()
