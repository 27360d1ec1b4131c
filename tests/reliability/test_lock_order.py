"""The lock order (docs/architecture.md, "Locks"): plugin loading, then the registration
lock, then the native library table; imports and plugin hooks run without the
registration lock. The deadlock it removes: a plugin that waits for first use
(``_backend_cache``) loaded by one thread (it held the registration lock while importing
the plugin's module) while another thread imports that module, which registers at import
time (it held the module's import lock and needed the registration lock). 2 of 2 runs hung.

Each scenario runs in a child interpreter with a timeout: a hang fails with a message."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from plugin_dists import write_dist

PLUGIN = '''\
import time
import numpy as np
import oplib_core as oplib
from oplib_core import BackendSpec, hookimpl

class LzArray(np.ndarray):
    """The lazyb device's arrays (host memory, for the test)."""

SPEC = BackendSpec(name="lazyb", array_types=(LzArray,), key="Lazyb", priority=1,
                   to_host=lambda a: np.asarray(a).view(np.ndarray),
                   from_host=lambda a, d: a.view(LzArray))

time.sleep(0.3)  # hold this module's import lock while the other thread loads the plugin
oplib.define("lazyb::twice", "(Tensor x) -> Tensor")  # registers at import time

@hookimpl
def oplib_backends():
    return [SPEC]

@hookimpl
def oplib_impl(registrar):
    registrar.impl("lazyb::twice", "Lazyb", lambda x: (x.view(np.ndarray) * 2).view(LzArray))
'''

WARM = """\
import numpy as np, oplib_core as oplib
from oplib_core import plugins
oplib.ops.oplib.sin(np.ones(1))
print(plugins.get("lazyb").status)
"""

#: One thread imports the plugin's module, the other asks for its operator (which loads the
#: waiting plugin), after the given delays; then the operator runs on the plugin's arrays.
RACE = """\
import os, sys, threading, time
import numpy as np
import oplib_core as oplib

delay_import, delay_use = float(sys.argv[1]), float(sys.argv[2])
errors = []

def importer():
    time.sleep(delay_import)
    import lazyb_plugin

def first_use():
    time.sleep(delay_use)
    oplib.ops.lazyb.twice

def run(fn):
    try:
        fn()
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=run, args=(f,), daemon=True) for f in (importer, first_use)]
for t in threads:
    t.start()
for t in threads:
    t.join(20)
if any(t.is_alive() for t in threads):
    print("hung", flush=True)
    os._exit(3)
from lazyb_plugin import LzArray
y = oplib.ops.lazyb.twice(np.ones(2).view(LzArray))
status = oplib.plugins.get("lazyb").status
print(errors, type(y).__name__, y.tolist(), status, oplib.backends.get("lazyb").name)
"""

EXPECTED = "[] LzArray [2.0, 2.0] loaded lazyb"


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment with the plugin installed and a cache that makes it wait."""
    root = tmp_path_factory.mktemp("lock_order")
    write_dist(root / "site", "lazyb-plugin", "lazyb_plugin", PLUGIN, entry_point="lazyb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPLIB_", "PYTHON"))}
    env.update(PYTHONPATH=str(root / "site"), OPLIB_CACHE_DIR=str(root / "cache"))
    assert _run(WARM, env) == "loaded"  # cold: loads everything and records lazyb
    assert _run(WARM, env) == "deferred"  # now it waits for first use
    return env


def _run(code: str, env: dict[str, str], *args: str) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"deadlock: no answer within 60 s (delays {args})")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("lazy", ["1", "0"], ids=["lazy-backends", "eager-backends"])
def test_loading_a_waiting_plugin_while_another_thread_imports_its_module(
    warm: dict[str, str], lazy: str
) -> None:
    env = {**warm, "OPLIB_LAZY_BACKENDS": lazy}
    # the import first (it holds its module's import lock), the first use first, both at once
    delays = [("0", "0.05"), ("0.05", "0"), ("0", "0")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        outs = list(pool.map(lambda d: _run(RACE, env, *d), delays))
    assert outs == [EXPECTED] * len(delays)


def test_importing_a_waiting_plugins_module_in_the_main_thread(warm: dict[str, str]) -> None:
    """Its import-time registration asks for the plugin, whose module is half-run: the
    plugin is not loaded from it (its hooks are not defined yet) but on the next ask."""
    code = """\
import numpy as np, oplib_core as oplib
import lazyb_plugin
y = oplib.ops.lazyb.twice(np.ones(2).view(lazyb_plugin.LzArray))
print([], type(y).__name__, y.tolist(), oplib.plugins.get("lazyb").status, "lazyb")
"""
    assert _run(code, warm) == EXPECTED


def test_the_lock_order_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    locks = text.partition("## Locks")[2].partition("\n## ")[0]
    order = [locks.find(w) for w in ("plugin loading", "registration lock", "native library")]
    assert -1 not in order and order == sorted(order), order
