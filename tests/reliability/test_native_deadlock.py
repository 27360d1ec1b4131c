"""The lock order of native loading: an in-process plugin whose hook loads a native library
(the hook runs under the registry's lock), beside ``oplib.ops.load_library`` of another
library in a second thread. ``load_library`` held the native table's lock while it called
into the registry, and the hook's load waited for that lock while holding the registry's:
a deadlock (2 of 2). Now the registry's lock is taken first and the native table's only
for the table (docs/architecture.md: plugin loading, then the registry, then the native
table), so both orders finish. Each run is a fresh interpreter with a timeout: a hang fails
the test instead of hanging CI.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import compile_library, unique_ns
from subproc import run_python

# The library the other thread loads sleeps in its init before registering: it is inside
# load_library (holding whatever that holds) while the plugin's hook loads its library.
SLOW_LIB = r"""
#include "oplib.h"
#include <unistd.h>
OPLIB_LIBRARY_INIT(api) {
  usleep(300000);
  return api->define(api->ctx, "{ns}::slow", "(Tensor x) -> Tensor") ? 1 : 0;
}
"""
HOOK_LIB = r"""
#include "oplib.h"
OPLIB_LIBRARY_INIT(api) {
  return api->define(api->ctx, "{ns}::hooked", "(Tensor x) -> Tensor") ? 1 : 0;
}
"""

SCENARIO = """
import threading, time, types
import oplib_core as oplib

oplib.plugins.load()
errors = []

def guarded(fn):
    def run():
        try:
            fn()
        except BaseException as e:
            errors.append(repr(e))
    return run

def define(registrar):
    time.sleep(HOOK_DELAY)
    registrar.load_library(HOOK_LIB)

plugin = types.SimpleNamespace(__name__="native_hook", oplib_define=oplib.hookimpl(define))

def other():
    time.sleep(OTHER_DELAY)
    oplib.ops.load_library(SLOW_LIB)

threads = [
    threading.Thread(target=guarded(lambda: oplib.plugins.register(plugin)), daemon=True),
    threading.Thread(target=guarded(other), daemon=True),
]
for t in threads:
    t.start()
for t in threads:
    t.join(20)
OUT["hung"] = [t.is_alive() for t in threads]
if not any(OUT["hung"]):  # (reading the registry would wait for a deadlocked thread's lock)
    OUT["errors"] = errors
    OUT["loaded"] = sorted(oplib.ops.loaded_libraries)
    OUT["ops"] = sorted(op.name() for op in oplib.registered_ops() if op.name().startswith(NS))
    OUT["status"] = oplib.plugins.get("native_hook").status
"""


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    where = tmp_path_factory.mktemp("native_deadlock")
    ns = unique_ns("lockorder")
    slow = compile_library(SLOW_LIB.replace("{ns}", ns), where, name="slow")
    hook = compile_library(HOOK_LIB.replace("{ns}", ns), where, name="hook")
    return ns, slow, hook


@pytest.mark.parametrize(
    ("hook_delay", "other_delay"),
    # load_library first, the hook's load while the other library's init runs; the hook
    # first (holding the registry's lock while it sleeps), load_library while it runs
    [(0.1, 0.0), (0.3, 0.1)],
    ids=["load_library-first", "hook-first"],
)
def test_a_plugin_hook_loading_a_library_beside_load_library_never_deadlocks(
    libraries, hook_delay, other_delay
):
    ns, slow, hook = libraries
    code = (
        f"NS, SLOW_LIB, HOOK_LIB = {ns + '::'!r}, {slow!r}, {hook!r}\n"
        f"HOOK_DELAY, OTHER_DELAY = {hook_delay}, {other_delay}\n" + SCENARIO
    )
    try:
        out = run_python(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: no answer within 60 s")
    assert out["hung"] == [False, False], f"deadlock: threads still running {out}"
    assert out["errors"] == []
    assert out["loaded"] == sorted([slow, hook])
    assert out["ops"] == [f"{ns}::hooked", f"{ns}::slow"]
    assert out["status"] == "loaded"


CONCURRENT = """
import threading
import oplib_core as oplib

barrier = threading.Barrier(6)
errors = []

def load():
    barrier.wait()
    try:
        oplib.ops.load_library(LIB)
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=load, daemon=True) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join(30)
OUT["hung"] = any(t.is_alive() for t in threads)
OUT["errors"] = errors
OUT["ops"] = sorted(op.name() for op in oplib.registered_ops() if op.name().startswith(NS))
"""


def test_threads_loading_one_library_at_once_load_it_once(libraries):
    """Its init defines an op, so a second run of it would fail ("already defined")."""
    ns, _, hook = libraries
    out = run_python(f"NS, LIB = {ns + '::'!r}, {hook!r}\n" + CONCURRENT, timeout=60)
    assert out == {"hung": False, "errors": [], "ops": [f"{ns}::hooked"]}


FORK = """
import os, threading
import oplib_core as oplib
from oplib_core._native import _classes, _library

oplib.plugins.load()
lock = {"table": _library, "classes": _classes}[WHICH]
held, release = threading.Event(), threading.Event()

def hold():
    with lock._LOCK:  # a thread in the middle of an update when the fork comes
        held.set()
        release.wait()

threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    oplib.ops.load_library(LIB)
    oplib.register_class(NS + "Packed", type("Packed", (), {}))
    ok = any(op.name() == NS + "hooked" for op in oplib.registered_ops())
    os._exit(0 if ok and getattr(oplib.classes, NS[:-2]).Packed else 1)
release.set()
OUT["child"] = os.waitpid(pid, 0)[1]
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
@pytest.mark.parametrize("which", ["table", "classes"])
def test_a_child_forked_while_another_thread_holds_a_native_lock_loads_libraries(libraries, which):
    """The native table's lock and the class table's are made anew in a forked child."""
    ns, _, hook = libraries
    code = f"NS, LIB, WHICH = {ns + '::'!r}, {hook!r}, {which!r}\n" + FORK
    try:
        out = run_python(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the forked child hung on the {which} lock (no answer within 60 s)")
    assert out == {"child": 0}
