"""The narrow windows of a fork during another thread's plugin load, each set up on purpose.

``test_fork.py`` forks at random moments of a real load (each window is hit about once in
a few hundred forks: CI saw it). Here each half-done step the child can inherit is made by
hand, and the child's repair (``os.register_at_fork`` handlers) is checked directly:

- a lazily built object (the registry, the plugin host, the backend table) whose state the
  gone thread was building: the child builds it afresh;
- a plugin registered with pluggy whose record the gone thread had not finished;
- a core op defined (pending) or a backend registered whose undo handle the gone thread
  had not handed to the plugin yet;
- and the repair never builds what nobody built (that would load the plugins inside the
  fork handler).
"""

from __future__ import annotations

import os

import pytest

from subproc import run_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: In a child of ``os.fork()``: ``child(body)`` runs ``body`` there and returns what it put
#: in its dict (or the error it raised), through a pipe.
CHILD = """
import json, os

def child(body):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = {}
        try:
            body(out)
        except BaseException as e:
            out["error"] = f"{type(e).__name__}: {e}"
        os.write(w, json.dumps(out, default=str).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)
"""


def test_a_lazy_object_half_built_by_a_gone_thread_is_built_afresh_in_the_child() -> None:
    out = run_python(
        CHILD
        + """
from oplib_core._registry.startup import deferred

class Box:
    _deferred = frozenset({"items"})
    def _init_state(self):
        self.items = ["fresh"]

box = deferred(Box)()
box.__dict__["items"] = ["half"]  # a thread the child lacks was in _init_state

def body(out):
    out["items"] = box.items
    out["class"] = type(box) is Box

OUT["child"] = child(body)
OUT["parent"] = box.__dict__["items"]
"""
    )
    assert out["child"] == {"items": ["fresh"], "class": True}
    assert out["parent"] == ["half"]  # the parent's own state is never touched


def test_the_repair_builds_nothing_that_was_never_built() -> None:
    out = run_python(
        """
from oplib_core._registry import startup
from oplib_core._registry.registry import REGISTRY
from oplib_core.backends import TABLE

REGISTRY.forget_plugins({"core"})
TABLE.forget_plugins({"cpu"})
OUT["loaded"] = startup.is_loaded()
OUT["built"] = ["ops" in REGISTRY.__dict__, "_backends" in TABLE.__dict__]
"""
    )
    assert out == {"loaded": False, "built": [False, False]}


def test_a_pending_definition_and_its_queued_kernels_go_with_their_plugin() -> None:
    out = run_python(
        """
import oplib_core as oplib
from oplib_core._registry.entry import Origin, PluginContext
from oplib_core._registry.registry import REGISTRY
from oplib_core._registry.table import PendingOp, QueuedKernel

oplib.ops.oplib.neg  # the plugins are loaded
ops = REGISTRY.ops

def pending(ns, plugin):  # defined by plugin, not built yet
    origin = Origin("p.py:1", plugin)
    op = PendingOp(ops, f"{ns}::f", f"{ns}::f(Tensor x) -> Tensor", (), origin, None)
    ops.pending[op.qualname] = op
    return op

def queued(op, key, plugin):  # a kernel kept for op until it is built
    ctx = PluginContext(plugin)
    op.kernels[key] = QueuedKernel(op, key, abs, None, None, ctx, False, False, "impl")

pending("ghost", "ghost")
kept = pending("kept", "kept")
queued(kept, "CPU", "ghost")
queued(kept, "Meta", "kept")
REGISTRY.forget_plugins({"ghost"})
OUT["pending"] = sorted(q for q in ops.pending if q.endswith("::f"))
OUT["kernels"] = sorted(kept.kernels)
"""
    )
    assert out == {"pending": ["kept::f"], "kernels": ["Meta"]}


def test_a_backend_and_a_pluggy_registration_without_their_record_are_dropped() -> None:
    """The gone thread registered a backend and a plugin with pluggy for plugin 'ghost' in
    its open transaction, but kept neither handle nor record: the child drops both, so
    that its own load of 'ghost' is not refused as a duplicate."""
    out = run_python(
        CHILD
        + """
import threading
import numpy as np
import oplib_core as oplib
from oplib_core._plugin_host import HOST
from oplib_core.plugins import PluginRecord
from oplib_core.backends import TABLE

oplib.ops.oplib.neg(np.ones(1))  # the plugins are loaded
class GhostArray:
    pass

TABLE.register(oplib.BackendSpec(name="ghost", array_types=(GhostArray,)), plugin="ghost")
class Hooks:
    pass

before = set(HOST.records)
HOST.pm.register(Hooks(), name="ghost")
HOST.records["ghost"] = PluginRecord("ghost")  # its record, hook target not yet set
HOST._transactions[threading.get_ident() + 1] = before  # a thread the child lacks

def body(out):
    out["backend"] = TABLE.find("ghost") is not None
    out["pluggy"] = HOST.pm.get_plugin("ghost") is not None
    out["neg"] = oplib.ops.oplib.neg(np.ones(1)).tolist()
    out["record"] = "ghost" in HOST.records

OUT["child"] = child(body)
OUT["parent"] = [TABLE.find("ghost") is not None, HOST.pm.get_plugin("ghost") is not None]
OUT["record"] = "ghost" in HOST.records
"""
    )
    assert out["child"] == {"backend": False, "pluggy": False, "neg": [-1.0], "record": False}
    assert out["parent"] == [True, True] and out["record"]
