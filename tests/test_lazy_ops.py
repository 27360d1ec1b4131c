"""The core ops are built on first use (``oplib_core/_registry/table.py``): a program that calls
one op builds that op only, and nothing observable differs from building them all at
definition (``OPLIB_LAZY_OPS=0``): the same kernels with the same origins, the same
conflicts, the same rollbacks."""

from __future__ import annotations

from typing import Any

import pytest

from subproc import run_python

LAZY: dict[str, str] = {}
EAGER = {"OPLIB_LAZY_OPS": "0"}

STATE = """
import numpy as np
import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY

def pending():
    return sorted(REGISTRY.ops.pending)

def table():
    out = {}
    for q, e in sorted(REGISTRY.ops.items()):
        out[q] = {
            "schema": str(e.schema),
            "tags": [t.name for t in e.tags],
            "origin": [e.origin.source, e.origin.plugin],
            "kernels": {
                key: [[k.origin.source, k.origin.plugin, getattr(k.fn, "__qualname__", "?"),
                       k.with_keyset, k.allow_override] for k in stack]
                for key, stack in sorted(e.kernels.items())
            },
        }
    return out
"""


def test_first_call_builds_only_the_op_it_calls() -> None:
    out = run_python(
        STATE
        + """
oplib.ops.oplib.sin(np.ones(1))
OUT["built"] = sorted(e.qualname for e in REGISTRY.ops.built())
OUT["pending"] = pending()
OUT["len"] = len(REGISTRY.ops)
OUT["waiting"] = sorted(REGISTRY.ops.waiting)  # a waiting plugin's ops (_backend_cache)
OUT["dir_has_cos"] = "cos" in dir(oplib.ops.oplib)
OUT["still_pending"] = "oplib::cos" in REGISTRY.ops.pending
""",
        LAZY,
    )
    assert "oplib::sin" in out["built"] and "oplib::sin.out" in out["built"]
    assert not [q for q in out["built"] if q.startswith("oplib::") and "sin" not in q]
    assert "oplib::cos" in out["pending"] and "oplib::add" in out["pending"]
    assert out["len"] == len(out["built"]) + len(out["pending"]) + len(out["waiting"])
    # dir() lists every op without building any
    assert out["dir_has_cos"] and out["still_pending"]


def test_switched_off_every_op_is_built_at_load() -> None:
    out = run_python(STATE + "oplib.plugins.load()\nOUT['pending'] = pending()\n", EAGER)
    assert out["pending"] == []


def test_lazy_and_eager_tables_are_the_same() -> None:
    code = STATE + "oplib.ops.oplib.sin(np.ones(1))\nOUT['table'] = table()\n"
    lazy, eager = run_python(code, LAZY)["table"], run_python(code, EAGER)["table"]
    assert lazy.keys() == eager.keys()
    assert len(lazy) > 150
    for q in lazy:
        assert lazy[q] == eager[q], q
    # the kernels the backends give (cpu, fake, autograd ...) are all there
    assert {"cpu", "privateuse1", "Fake", "Autograd"} <= set(lazy["oplib::add"]["kernels"])


PLUGINS = """
from oplib_core import hookimpl

class Squatter:  # takes the cpu kernel of an op the cpu plugin gave one
    @hookimpl
    def oplib_impl(self, registrar):
        registrar.impl("oplib::cos", "cpu", lambda x: x)

class Broken:  # registers, then fails: rolled back
    @hookimpl
    def oplib_impl(self, registrar):
        registrar.impl("oplib::log", "waitingdevice", lambda x: x)
        raise RuntimeError("broken on purpose")

class Override:
    @hookimpl
    def oplib_impl(self, registrar):
        registrar.impl("oplib::exp", "cpu", lambda x: x, allow_override=True)

def state(name):
    r = oplib.plugins.register(PLUGIN_CLASSES[name](), name=name)
    return [r.status, r.error]

PLUGIN_CLASSES = {"squatter": Squatter, "broken": Broken, "override": Override}
OUT["squatter"] = state("squatter")
OUT["broken"] = state("broken")
OUT["log"] = table()["oplib::log"]["kernels"]
OUT["override"] = state("override")
OUT["cos"] = table()["oplib::cos"]["kernels"]["cpu"]
"""


@pytest.mark.parametrize("env", [LAZY, EAGER], ids=["lazy", "eager"])
def test_conflicts_and_rollbacks_on_unbuilt_ops(env: dict[str, str]) -> None:
    out = run_python(STATE + "oplib.plugins.load()\n" + PLUGINS, env)
    status, error = out["squatter"]
    assert status == "failed"
    assert "oplib::cos already has a kernel for 'cpu'" in error
    assert "oplib-cpu" in error
    assert out["broken"][0] == "failed" and "broken on purpose" in out["broken"][1]
    assert "waitingdevice" not in out["log"]  # rolled back
    assert len(out["cos"]) == 1 and out["cos"][0][1] == "cpu"
    # an override of an unbuilt op's kernel is decided at once, as for a built one
    assert out["override"][0] == "failed"
    assert "may not override the 'cpu' kernel of oplib::exp" in out["override"][1]


def test_conflict_outcomes_do_not_depend_on_laziness() -> None:
    code = STATE + "oplib.plugins.load()\n" + PLUGINS
    lazy, eager = run_python(code, LAZY), run_python(code, EAGER)
    for key in ("squatter", "broken", "log", "override", "cos"):
        assert lazy[key] == eager[key], key


def test_threads_building_one_op_get_one_entry() -> None:
    out = run_python(
        STATE
        + """
import threading
oplib.plugins.load()
N = 8
barrier = threading.Barrier(N)
got = [None] * N
def build(i):
    barrier.wait()
    got[i] = id(REGISTRY.ops["oplib::tanh"])
threads = [threading.Thread(target=build, args=(i,)) for i in range(N)]
for t in threads: t.start()
for t in threads: t.join()
OUT["ids"] = len(set(got))
OUT["value"] = float(oplib.ops.oplib.tanh(np.zeros(1))[0])
""",
        LAZY,
    )
    assert out == {"ids": 1, "value": 0.0}


def test_unloading_a_backend_plugin_drops_its_kept_kernels() -> None:
    out: dict[str, Any] = run_python(
        STATE
        + """
oplib.plugins.load()
before = "cpu" in REGISTRY.ops.pending["oplib::sigmoid"].kernels
oplib.plugins.unregister("cpu")
OUT["before"] = before
OUT["after"] = sorted(table()["oplib::sigmoid"]["kernels"])
""",
        LAZY,
    )
    assert out["before"] is True
    assert "cpu" not in out["after"] and "Fake" in out["after"]
