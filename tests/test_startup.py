"""Deferred start-up: the first use of the dispatch table loads the plugins exactly once,
also when many threads make that first use at the same time."""

from __future__ import annotations

from subproc import run_python

RACE = """
import threading
import numpy as np
import oplib_core as oplib

N = 8
barrier = threading.Barrier(N)
results, errors = [None] * N, []

def first_use(i):
    barrier.wait()
    try:
        kind = i % 4
        if kind == 0:
            results[i] = float(oplib.ops.oplib.sin(np.ones(1))[0])
        elif kind == 1:
            results[i] = sorted(b.name for b in oplib.backends.list())
        elif kind == 2:
            results[i] = float((oplib.tensor([1.0]) + 1).numpy()[0])
        else:
            results[i] = sorted(p.name for p in oplib.plugins.list())
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=first_use, args=(i,)) for i in range(N)]
for t in threads: t.start()
for t in threads: t.join()
OUT.update({"results": results, "errors": errors,
            "backends": sorted(b.name for b in oplib.backends.list()),
            "plugins": sorted(p.name for p in oplib.plugins.list())})
"""


def test_concurrent_first_use_sees_the_whole_table():
    for _ in range(3):  # the race is timing-dependent: try it a few times
        out = run_python(RACE)
        assert out["errors"] == []
        for i, value in enumerate(out["results"]):
            expected = [0.8414709848078965, out["backends"], 2.0, out["plugins"]][i % 4]
            assert value == expected, (i, value)
        assert "cpu" in out["backends"] and "cpu" in out["plugins"]


def test_plugins_load_once_even_when_a_loader_registers_plugins_itself():
    code = """
import oplib_core as oplib
from oplib_core._registry import startup
calls = []

class Late:
    @oplib.hookimpl
    def oplib_define(self, registrar):
        registrar.define("late::f(Tensor x) -> Tensor")

def loader():
    calls.append(1)
    oplib.plugins.register(Late(), name="late")  # touches the table while loading

startup.defer(loader)
ops = [sorted(oplib.ops.late.f.overloads()), oplib.ops.oplib.sin is not None]
OUT.update({"calls": len(calls), "ops": ops, "loaded": startup.is_loaded()})
"""
    assert run_python(code) == {"calls": 1, "ops": [["default"], True], "loaded": True}


def test_filled_singletons_are_plain_instances():
    code = """
import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY, Registry
from oplib_core.backends import TABLE, BackendTable
from oplib_core._plugin_host import HOST, PluginHost
pairs = ((REGISTRY, Registry), (TABLE, BackendTable), (HOST, PluginHost))
before = [type(o) is c for o, c in pairs]
oplib.ops.oplib.sin
after = [type(o) is c for o, c in pairs]
OUT.update({"before": before, "after": after, "isinstance": isinstance(REGISTRY, Registry)})
"""
    # Before first use each is a subclass with a __getattr__ that fills it in; after, the
    # plain class, so attribute reads on the hot path pay nothing for the laziness.
    assert run_python(code) == {
        "before": [False, False, False],
        "after": [True, True, True],
        "isinstance": True,
    }


def test_package_drops_its_getattr_once_loaded_and_keeps_every_name():
    code = """
import oplib_core as oplib
before = "__getattr__" in vars(oplib)
oplib.plugins.load()
import oplib_cuda.device, oplib_privateuse.device
OUT.update({
    "before": before,
    "after": "__getattr__" in vars(oplib),
    "cuda": oplib.cuda is oplib_cuda.device,
    "privateuse1": oplib.privateuse1 is oplib_privateuse.device,
    "legacy": oplib.legacy.__name__,
    "hookimpl": oplib.hookimpl.project_name,
    "opcheck": callable(oplib.opcheck),
    "missing": not hasattr(oplib, "no_such_device"),
})
"""
    assert run_python(code) == {
        "before": True,
        "after": False,
        "cuda": True,
        "privateuse1": True,
        "legacy": "oplib_core.legacy",
        "hookimpl": "oplib",
        "opcheck": True,
        "missing": True,
    }
