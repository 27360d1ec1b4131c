"""Backend plugins load on first use (``oplib_core/_registry/backend_cache.py``): after a start-up
that loaded everything, the jax, dask, cuda, meta and private-use plugins wait until
something needs their backend or their operators, and nothing observable differs from
loading them at once (``OPLIB_LAZY_BACKENDS=0``)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from oplib_core._registry import backend_cache as _backend_cache
from oplib_core._version import __version__

from subproc import run_python

WAITING = ["cuda", "dask", "jax", "meta", "privateuse"]  # the installed plugins that may wait

STATE = """
import sys
import numpy as np
import oplib_core as oplib
from oplib_core import _plugin_host, plugins
from oplib_core.backends import TABLE

def waiting():
    oplib._startup.ensure()  # the start-up, which notes the plugins that wait
    return sorted(_plugin_host.HOST.deferred)

def imported(*names):
    return sorted(n for n in names if f"oplib_{n}.plugin" in sys.modules)
"""


@pytest.fixture
def cache(tmp_path: Path) -> dict[str, str]:
    """A cache directory of its own, warmed by one start-up that loads everything."""
    env = {"OPLIB_CACHE_DIR": str(tmp_path)}
    out = run_python(STATE + "oplib.ops.oplib.sin(np.ones(1))\nOUT['waiting'] = waiting()\n", env)
    assert out["waiting"] == []  # cold: nothing recorded yet, everything loads
    return env


def run(code: str, env: dict[str, str]) -> dict[str, Any]:
    return run_python(STATE + textwrap.dedent(code), env)


def test_backend_only_plugins_wait_for_their_backend(cache: dict[str, str]) -> None:
    out = run(
        """
        OUT["before"] = waiting()
        OUT["sin"] = oplib.ops.oplib.sin(np.zeros(2)).tolist()
        OUT["after_call"] = waiting()
        OUT["imported"] = imported("jax", "dask", "cuda", "meta", "cpu", "privateuse")
        OUT["statuses"] = {r.name: r.status for r in _plugin_host.HOST.records.values()}
        """,
        cache,
    )
    # cpu waits too, until the first numpy array reaches an op
    assert out["before"] == sorted([*WAITING, "cpu"])
    assert out["sin"] == [0.0, 0.0]
    assert out["after_call"] == WAITING
    assert out["imported"] == ["cpu"]
    assert out["statuses"]["jax"] == "deferred" and out["statuses"]["cpu"] == "loaded"


@pytest.mark.parametrize(
    ("what", "code", "loaded"),
    [
        ("backend by name", "oplib.backends.get('dask')", ["dask"]),
        ("device string", "oplib.empty(2, device='meta')", ["meta"]),
        ("device module", "OUT['avail'] = oplib.cuda.is_available()", ["cuda"]),
        (
            "dispatch key",
            "oplib.impl('oplib::sin', 'JAX', lambda x: x, allow_override=True)",
            ["jax"],
        ),
        ("array class", "import jax.numpy as jnp; oplib.ops.oplib.sin(jnp.ones(2))", ["jax"]),
        ("whole table", "oplib.backends.list()", WAITING),
        ("plugin list", "oplib.plugins.list()", WAITING),
        ("plugins.load", "oplib.plugins.load()", WAITING),
        ("ops whole", "oplib.registered_ops('oplib')", WAITING),
        ("its operator", "oplib.ops.privateuse.randn([2], device='privateuse1')", ["privateuse"]),
        ("its op by name", "oplib.lookup('privateuse::rand')", ["privateuse"]),
        ("its op listed", "OUT['dir'] = dir(oplib.ops.privateuse)", []),
    ],
)
def test_each_way_of_asking_for_a_backend_loads_its_plugin(
    cache: dict[str, str], what: str, code: str, loaded: list[str]
) -> None:
    out = run(
        f"""
        import warnings; warnings.simplefilter("ignore")
        oplib.ops.oplib.sin(np.ones(1))
        {code}
        OUT["waiting"] = waiting()
        OUT["imported"] = imported(*{WAITING!r})
        """,
        cache,
    )
    assert out["waiting"] == sorted(set(WAITING) - set(loaded)), what
    assert out["imported"] == loaded, what


def test_computing_on_dask_loads_the_dask_plugin_alone(cache: dict[str, str]) -> None:
    # the dask kernels name the modules a worker must import (plugins.get, not list())
    out = run(
        """
        import dask.array as da
        x = da.ones(4, chunks=2)
        OUT["sum"] = float(oplib.ops.oplib.sum(oplib.ops.oplib.sin(x)).compute())
        OUT["record"] = plugins.get("jax").status, plugins.get("nope")
        OUT["waiting"] = waiting()
        OUT["imported"] = imported("jax", "dask", "cuda", "meta", "privateuse")
        """,
        cache,
    )
    assert out["sum"] == pytest.approx(4 * 0.8414709848)
    assert out["record"] == ["deferred", None]
    assert out["waiting"] == ["cuda", "jax", "meta", "privateuse"]
    assert out["imported"] == ["dask"]


@pytest.mark.parametrize("gpu", ["as it is", "hidden"])
def test_the_device_module_stand_in_becomes_the_real_one(cache: dict[str, str], gpu: str) -> None:
    hidden = {"CUDA_VISIBLE_DEVICES": ""} if gpu == "hidden" else {}
    out = run(
        """
        oplib.ops.oplib.sin(np.ones(1))  # start-up done: oplib.cuda is a package attribute
        stand_in = oplib.cuda
        OUT["before"] = type(stand_in).__name__
        OUT["count"] = stand_in.device_count()  # loads the cuda plugin
        import oplib_cuda.plugin as p
        from oplib_cuda import runtime
        OUT["real"] = oplib.cuda is p.CUDA.device_module
        OUT["devices"] = runtime.device_count()  # cupy's count, asked directly
        """,
        {**cache, **hidden},
    )
    assert out["before"] == "_PendingModule"
    assert out["count"] == out["devices"]  # what the real module says, GPU or none
    if gpu == "hidden":
        assert out["count"] == 0
    assert out["real"] is True


TABLE_DUMP = """
def dump():
    oplib.plugins.load()
    from oplib_core._registry.registry import REGISTRY
    ops = {}
    for q, e in sorted(REGISTRY.ops.items()):
        ops[q] = {key: [[k.origin.source, k.origin.plugin, k.with_keyset, k.allow_override]
                        for k in stack] for key, stack in sorted(e.kernels.items())}
    return {
        "ops": ops,
        "backends": [[b.name, b.key, b.plugin, b.distribution] for b in TABLE.all()],
        "plugins": [[r.name, r.status, r.hooks, r.error] for r in plugins.list()],
        "modules": sorted(
            n for n in dir(oplib) if n in ("cuda", "meta", "jax", "dask", "privateuse1")
        ),
    }
"""


def test_waiting_and_loading_at_once_give_the_same_table(cache: dict[str, str]) -> None:
    code = TABLE_DUMP + "oplib.ops.oplib.sin(np.ones(1))\nOUT['w'] = waiting()\nOUT['t'] = dump()\n"
    lazy = run(code, cache)
    eager = run(code, {**cache, "OPLIB_LAZY_BACKENDS": "0"})
    assert lazy["w"] == WAITING and eager["w"] == []
    assert lazy["t"]["backends"] == eager["t"]["backends"]
    assert lazy["t"]["plugins"] == eager["t"]["plugins"]
    assert lazy["t"]["modules"] == eager["t"]["modules"]
    assert lazy["t"]["ops"].keys() == eager["t"]["ops"].keys()
    for q in lazy["t"]["ops"]:
        assert lazy["t"]["ops"][q] == eager["t"]["ops"][q], q
    assert "jax" in lazy["t"]["ops"]["oplib::add"]


def test_switched_off_nothing_waits_and_nothing_is_recorded(tmp_path: Path) -> None:
    env = {"OPLIB_CACHE_DIR": str(tmp_path), "OPLIB_LAZY_BACKENDS": "0"}
    for _ in range(2):
        out = run("oplib.ops.oplib.sin(np.ones(1))\nOUT['waiting'] = waiting()\n", env)
        assert out["waiting"] == []
    assert not list(tmp_path.glob("backends-*"))


def test_a_corrupt_record_is_ignored_and_rewritten(cache: dict[str, str]) -> None:
    (record,) = Path(cache["OPLIB_CACHE_DIR"]).glob("backends-*")
    for garbage in (b"", b"\x00not marshal", record.read_bytes()[:40]):
        record.write_bytes(garbage)
        out = run("oplib.ops.oplib.sin(np.ones(1))\nOUT['waiting'] = waiting()\n", cache)
        assert out["waiting"] == []  # everything loaded, and recorded again
        out = run("oplib.ops.oplib.sin(np.ones(1))\nOUT['waiting'] = waiting()\n", cache)
        assert out["waiting"] == WAITING


def test_another_environment_keeps_its_own_record(cache: dict[str, str]) -> None:
    other = {**cache, "OPLIB_DISABLE_PLUGINS": "dask"}
    code = "oplib.ops.oplib.sin(np.ones(1))\nOUT['waiting'] = waiting()\n"
    assert run(code, other)["waiting"] == []  # first start-up with this setting
    assert run(code, other)["waiting"] == ["cuda", "jax", "meta", "privateuse"]
    assert run(code, cache)["waiting"] == WAITING  # the first one's record is still there


def test_an_edited_plugin_file_invalidates_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPLIB_CACHE_DIR", str(tmp_path))
    source = tmp_path / "acme_plugin.py"
    source.write_text("")
    st = os.stat(source)
    backend = _backend_cache.DeferredBackend("acme", "Acme", ("acme_plugin.Array",), False)
    plugin = _backend_cache.DeferredPlugin(
        "acme", "acme_plugin", ((str(source), st.st_mtime_ns),), (backend,)
    )
    _backend_cache.write(__version__, [plugin])
    assert _backend_cache.read(__version__) == {"acme": plugin}
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert _backend_cache.read(__version__) is None
    source.unlink()
    assert _backend_cache.read(__version__) is None


ACME = '''
import numpy as np
from oplib_core import BackendSpec, hookimpl

class AcmeArray(np.ndarray):
    """The acme device's arrays (host memory, for the test)."""

SPEC = BackendSpec(name="acme", array_types=(AcmeArray,), key="Acme", priority=1,
                   to_host=lambda a: np.asarray(a).view(np.ndarray),
                   from_host=lambda a, d: a.view(AcmeArray))

@hookimpl
def oplib_backends():
    return [SPEC]

@hookimpl
def oplib_impl(registrar):
    registrar.impl("oplib::sin", "Acme", lambda x: np.sin(x.view(np.ndarray)).view(AcmeArray))
'''

ACME_FAN = """
import numpy as np
from oplib_core import hookimpl

@hookimpl
def oplib_impl(registrar):  # gives the acme backend a kernel: acme must load at start-up
    registrar.impl("oplib::cos", "Acme", lambda x: np.cos(x.view(np.ndarray)).view(type(x)))
"""

WITH_ACME = """
import sys
sys.path.insert(0, {path!r})
from oplib_core import _discovery
real = _discovery.find_entry_points
def find(version):
    return [*real(version), *[
        _discovery.EntryPointInfo(name, name + "_plugin", name + "-dist", "1.0", None, True)
        for name in {names!r}
    ]]
_discovery.find_entry_points = find
"""


def with_acme(tmp_path: Path, names: list[str], code: str) -> dict[str, Any]:
    for name, text in (("acme_plugin.py", ACME), ("fan_plugin.py", ACME_FAN)):
        if not (tmp_path / name).exists():  # (rewriting it would invalidate the record)
            (tmp_path / name).write_text(text)
    prelude = WITH_ACME.format(path=str(tmp_path), names=names)
    env = {"OPLIB_CACHE_DIR": str(tmp_path / "cache")}
    return run_python(prelude + STATE + textwrap.dedent(code), env)


def test_a_third_party_backend_waits_for_an_array_of_its_class(tmp_path: Path) -> None:
    code = """
    OUT["sin_np"] = oplib.ops.oplib.sin(np.zeros(1)).tolist()
    OUT["waiting"] = waiting()
    from acme_plugin import AcmeArray
    x = np.zeros(2).view(AcmeArray)
    y = oplib.ops.oplib.sin(x)
    OUT["result"] = [type(y).__name__, y.tolist()]
    OUT["after"] = waiting()
    OUT["record"] = _plugin_host.HOST.records["acme"].status
    """
    with_acme(tmp_path, ["acme"], code)  # cold: recorded
    out = with_acme(tmp_path, ["acme"], code)
    assert "acme" in out["waiting"]
    assert out["result"] == ["AcmeArray", [0.0, 0.0]]
    assert "acme" not in out["after"]
    assert out["record"] == "loaded"


def test_a_backend_another_plugin_gives_kernels_does_not_wait(tmp_path: Path) -> None:
    code = "oplib.ops.oplib.sin(np.zeros(1))\nOUT['waiting'] = waiting()\n"
    with_acme(tmp_path, ["acme", "fan"], code)
    out = with_acme(tmp_path, ["acme", "fan"], code)
    assert "acme" not in out["waiting"] and "fan" not in out["waiting"]
    assert set(WAITING) <= set(out["waiting"])


def test_a_plugin_failing_when_its_backend_is_first_used_is_reported(
    cache: dict[str, str],
) -> None:
    out = run(
        """
        import warnings
        oplib.ops.oplib.sin(np.ones(1))
        import oplib_dask.plugin as p  # (its hooks are read when it loads)

        @oplib.hookimpl
        def oplib_impl(registrar):
            raise RuntimeError("dask plugin broke")

        p.oplib_impl = oplib_impl
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            OUT["get"] = catch(oplib.backends.get, "dask")
        OUT["warned"] = [str(w.message) for w in seen]
        (record,) = [r for r in plugins.list() if r.name == "dask"]
        OUT["record"] = [record.status, record.error]
        OUT["waiting"] = waiting()
        """,
        cache,
    )
    assert out["get"][0] == "BackendError" and "no backend named 'dask'" in out["get"][1]
    assert any("'dask'" in w and "dask plugin broke" in w for w in out["warned"])
    assert out["record"] == ["failed", "RuntimeError: dask plugin broke in oplib_impl()"]
    assert out["waiting"] == []


def test_ctrl_c_while_a_waiting_plugin_loads_leaves_it_waiting(cache: dict[str, str]) -> None:
    out = run(
        """
        real = _plugin_host.PluginHost._run_hook
        hits = []
        def interrupted(self, record, phase):
            if record.name == "meta" and not hits:
                hits.append(1)
                raise KeyboardInterrupt
            return real(self, record, phase)
        _plugin_host.PluginHost._run_hook = interrupted
        oplib.ops.oplib.sin(np.ones(1))
        OUT["first"] = catch(oplib.backends.get, "meta")
        OUT["waiting"] = waiting()
        OUT["installed"] = [b.name for b in TABLE.loaded()]
        OUT["again"] = oplib.backends.get("meta").distribution
        OUT["after"] = waiting()
        """,
        cache,
    )
    assert out["first"][0] == "KeyboardInterrupt"
    assert "meta" in out["waiting"] and "meta" not in out["installed"]
    assert out["again"] == "oplib-meta"
    assert "meta" not in out["after"]


def test_threads_asking_at_once_load_the_plugin_once(cache: dict[str, str]) -> None:
    out = run(
        """
        import threading
        oplib.ops.oplib.sin(np.ones(1))
        real = _plugin_host.PluginHost._load_entry_point
        loads = []
        def counting(self, ep, record=None):
            loads.append(ep.name)
            return real(self, ep, record)
        _plugin_host.PluginHost._load_entry_point = counting
        barrier = threading.Barrier(8)
        seen = []
        def ask():
            barrier.wait()
            seen.append(oplib.backends.get("jax").key)
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        OUT["seen"] = seen
        OUT["loads"] = loads
        """,
        cache,
    )
    assert out["seen"] == ["JAX"] * 8
    assert out["loads"] == ["jax"]


def test_a_renamed_private_use_backend_does_not_wait(tmp_path: Path) -> None:
    env = {"OPLIB_CACHE_DIR": str(tmp_path), "OPLIB_PRIVATEUSE1_NAME": "npu"}
    code = """
    oplib.ops.oplib.sin(np.ones(1))
    OUT["waiting"] = waiting()
    OUT["npu"] = oplib.backends.get("npu").distribution
    """
    run(code, env)
    out = run(code, env)
    assert out["waiting"] == ["cuda", "dask", "jax", "meta"]
    assert out["npu"] == "oplib-privateuse"


def test_unregistering_a_waiting_plugin_removes_what_it_would_have_registered(
    cache: dict[str, str],
) -> None:
    out = run(
        """
        oplib.ops.oplib.sin(np.ones(1))
        oplib.plugins.unregister("meta")
        OUT["waiting"] = waiting()
        OUT["meta"] = oplib.backends.TABLE.find("meta") is None
        OUT["records"] = sorted(r.name for r in _plugin_host.HOST.records.values())
        OUT["op"] = catch(oplib.lookup, "privateuse::rand")
        """,
        cache,
    )
    assert "meta" not in out["waiting"]
    assert out["meta"] is True
    assert "meta" not in out["records"]
    assert out["op"] is None  # the other waiting plugins are untouched and still load
