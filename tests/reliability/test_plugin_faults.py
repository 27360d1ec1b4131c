"""The plugin fault matrix, as real installed distributions in a fresh virtualenv: each
faulty plugin is its own distribution, discovered by a fresh interpreter once sorted
*before* the in-repo plugins (its site directory on ``PYTHONPATH``) and once *after* them
(its site directory appended to ``sys.path``). Whatever the order: everything else loads,
nothing of the faulty plugin stays half-registered, and the message names the plugin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from plugin_dists import clean_env, fresh_venv, write_dist

pytestmark = pytest.mark.slow

_HOOK = "from oplib_core import hookimpl\nimport oplib_core as oplib\nimport numpy as np\n"


def _raises_in(hook: str, body: str) -> str:
    args = "" if hook == "oplib_backends" else "registrar"
    return (
        f"{_HOOK}\n@hookimpl\ndef {hook}({args}):\n{body}    raise RuntimeError('boom in {hook}')\n"
    )


#: case -> (module source, what the failed plugin's error must say, entry point name or None)
CASES: dict[str, tuple[str, str, str | None]] = {
    "import_error": (
        f"{_HOOK}oplib.define('fimp::x', '(Tensor x) -> Tensor')\n"
        "raise ImportError('boom at import')\n",
        "boom at import",
        None,
    ),
    "sys_exit": (
        f"{_HOOK}oplib.define('fexit::x', '(Tensor x) -> Tensor')\nimport sys\nsys.exit(3)\n",
        "SystemExit",
        None,
    ),
    "raise_backends": (
        _raises_in("oplib_backends", "    import oplib_core\n"),
        "boom in oplib_backends",
        None,
    ),
    "raise_define": (
        _raises_in("oplib_define", "    registrar.define('fdef::x', '(Tensor x) -> Tensor')\n"),
        "boom in oplib_define",
        None,
    ),
    "raise_impl": (
        f"{_HOOK}\n@hookimpl\ndef oplib_define(registrar):\n"
        "    registrar.define('fimpl::x', '(Tensor x) -> Tensor')\n"
        + _raises_in("oplib_impl", "    registrar.impl('fimpl::x', 'cpu', np.negative)\n")[
            len(_HOOK) :
        ],
        "boom in oplib_impl",
        None,
    ),
    "raise_fake": (
        f"{_HOOK}\n@hookimpl\ndef oplib_define(registrar):\n"
        "    registrar.define('ffake::x', '(Tensor x) -> Tensor')\n"
        + _raises_in(
            "oplib_register_fake", "    registrar.register_fake('ffake::x', lambda x: x)\n"
        )[len(_HOOK) :],
        "boom in oplib_register_fake",
        None,
    ),
    "raise_autograd": (
        f"{_HOOK}\n@hookimpl\ndef oplib_define(registrar):\n"
        "    registrar.define('fgrad::x', '(Tensor x) -> Tensor')\n"
        + _raises_in(
            "oplib_register_autograd",
            "    registrar.register_autograd('fgrad::x', lambda ctx, g: g)\n",
        )[len(_HOOK) :],
        "boom in oplib_register_autograd",
        None,
    ),
    "conflicting_kernel": (
        f"{_HOOK}\n@hookimpl\ndef oplib_impl(registrar):\n"
        "    registrar.impl('oplib::mul', 'cpu', np.add)\n",
        "oplib-cpu",
        None,
    ),
    "silent_hijack": (
        f"{_HOOK}\n@hookimpl\ndef oplib_impl(registrar):\n"
        "    registrar.impl('oplib::add', 'cpu', lambda a, b: np.zeros_like(a), "
        "allow_override=True)\n",
        "OPLIB_ALLOW_OVERRIDE",
        None,
    ),
    "backend_name": (
        f"{_HOOK}class Arr: pass\n\n@hookimpl\ndef oplib_backends():\n"
        "    return [oplib.BackendSpec(name='cpu', array_types=(Arr,))]\n",
        "oplib-cpu",
        None,
    ),
    "backend_key": (
        f"{_HOOK}class Arr: pass\n\n@hookimpl\ndef oplib_backends():\n"
        "    return [oplib.BackendSpec(name='fkey', key='CPU', array_types=(Arr,))]\n",
        "dispatch key 'CPU'",
        None,
    ),
    "backend_array_type": (
        f"{_HOOK}\n@hookimpl\ndef oplib_backends():\n"
        "    return [oplib.BackendSpec(name='fnumpy', array_types=(np.ndarray,))]\n",
        "numpy.ndarray",
        None,
    ),
    "entry_point_name": (f"{_HOOK}\n", "oplib-cpu", "cpu"),
    "op_definition": (
        f"{_HOOK}\n@hookimpl\ndef oplib_define(registrar):\n"
        "    registrar.define('fown::op', '(Tensor x) -> Tensor')\n",
        "fault-owner",
        None,
    ),
    "op_kernel": (
        f"{_HOOK}\n@hookimpl\ndef oplib_impl(registrar):\n"
        "    registrar.impl('fown::op', 'cpu', np.positive)\n",
        "fault-owner",
        None,
    ),
    "reserved_namespace": (
        f"{_HOOK}_oplib_core_plugin = True\n\n@hookimpl\ndef oplib_define(registrar):\n"
        "    registrar.define('oplib::evil', '(Tensor x) -> Tensor')\n",
        "reserved namespace",
        None,
    ),
    "global_api_then_raise": (
        f"{_HOOK}KEEP = []\n\n@hookimpl\ndef oplib_impl(registrar):\n"
        "    oplib.define('fglob::a', '(Tensor x) -> Tensor')\n"
        "    oplib.impl('fglob::a', 'cpu', np.negative)\n"
        "    lib = oplib.Library('fglob', 'FRAGMENT')\n"
        "    lib.define('b(Tensor x) -> Tensor')\n"
        "    KEEP.append(lib)\n"
        "    KEEP.append(oplib.custom_op('fglob::c', lambda x: -x, mutates_args=(), "
        "schema='(Tensor x) -> Tensor'))\n"
        "    raise RuntimeError('boom after global registrations')\n",
        "boom after global registrations",
        None,
    ),
}

#: An op package installed in the venv itself (between the squatters sorted before it and
#: after it): its entry point ``fown`` declares the namespace ``fown``.
OWNER = (
    f"{_HOOK}\n@hookimpl\ndef oplib_define(registrar):\n"
    "    registrar.define('fown::op', '(Tensor x) -> Tensor')\n\n"
    "@hookimpl\ndef oplib_impl(registrar):\n"
    "    registrar.impl('fown::op', 'cpu', np.negative)\n"
)

#: A hook interrupted by Ctrl-C the first time only: loading is all or nothing, and retried.
KEYBOARD_INTERRUPT = (
    f"{_HOOK}HITS = []\n\n@hookimpl\ndef oplib_define(registrar):\n"
    "    registrar.define('fki::x', '(Tensor x) -> Tensor')\n"
    "    if not HITS:\n"
    "        HITS.append(1)\n"
    "        raise KeyboardInterrupt\n"
)

PROBE = """\
import json, sys, warnings
if {after!r}:
    sys.path.append({site!r})
import numpy as np
import oplib_core as oplib
from oplib_core._registry.registry import REGISTRY

out = {{"interrupted": None}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        oplib.plugins.load()
    except KeyboardInterrupt:
        out["interrupted"] = True
        out["loaded_after_interrupt"] = oplib._startup.is_loaded()
        oplib.plugins.load()
out["warnings"] = [str(w.message) for w in caught]
out["plugins"] = [[r.name, r.status, r.distribution, r.error] for r in oplib.plugins.list()]
out["backends"] = {{b.name: b.distribution for b in oplib.backends.list()}}
mine = {dist!r}
out["leftovers"] = sorted(
    f"{{e.qualname}} {{k.key}}" if k else e.qualname
    for e in REGISTRY.ops.values()
    for k in [None, *[k for s in e.kernels.values() for k in s]]
    if (k.origin if k else e.origin).distribution == mine
    or (k is None and e.qualname.partition("::")[0] in {fault_ns!r})
)
a = np.arange(3.0)
out["add"] = oplib.ops.oplib.add(a, a).tolist()
out["mul"] = oplib.ops.oplib.mul(a, a).tolist()
t = oplib.tensor(a, requires_grad=True)
(t * t).sum().backward()
out["grad"] = t.grad.numpy().tolist()
out["tensor_add"] = (t.detach() + t.detach()).numpy().tolist()
out["fown"] = oplib.ops.fown.op(a).tolist()
print("@@" + json.dumps(out))
"""

#: The namespaces the faulty plugins define ops in (whoever is credited with them).
FAULT_NS = {"fimp", "fexit", "fdef", "fimpl", "ffake", "fgrad", "fglob", "fki"}
IN_REPO = {"cpu", "cuda", "meta", "privateuse", "dask"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("faults")
    py, venv_site = fresh_venv(root / "venv")
    write_dist(venv_site, "fault-owner", "fown", OWNER)
    for case, (code, _, ep) in {
        **CASES,
        "keyboard_interrupt": (KEYBOARD_INTERRUPT, "", None),
    }.items():
        write_dist(
            root / case, f"fault-{case.replace('_', '-')}", f"fault_{case}", code, entry_point=ep
        )
    return py, root


def _probe(world: tuple[Path, Path], case: str, after: bool) -> dict:
    py, root = world
    site = root / case
    code = PROBE.format(
        after=after, site=str(site), dist=f"fault-{case.replace('_', '-')}", fault_ns=FAULT_NS
    )
    env = clean_env(OPLIB_ENTRY_POINT_CACHE="0", **({} if after else {"PYTHONPATH": str(site)}))
    proc = subprocess.run(
        [str(py), "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=root
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("@@"))
    return json.loads(line[2:])


def _everything_else_works(out: dict) -> None:
    assert out["add"] == [0.0, 2.0, 4.0] and out["mul"] == [0.0, 1.0, 4.0]
    assert out["grad"] == [0.0, 2.0, 4.0] and out["tensor_add"] == [0.0, 2.0, 4.0]
    mine = {p[0]: p[1] for p in out["plugins"] if p[2] is not None and p[2].startswith("oplib-")}
    assert {name: mine.get(name) for name in IN_REPO} == dict.fromkeys(IN_REPO, "loaded")
    assert out["backends"]["cpu"] == "oplib-cpu"
    assert out["fown"] == [-0.0, -1.0, -2.0]
    assert ["fown", "loaded", "fault-owner"] in [p[:3] for p in out["plugins"]]


@pytest.mark.parametrize("after", [False, True], ids=["squatter-first", "squatter-last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_faulty_plugin_fails_alone(world: tuple[Path, Path], case: str, after: bool) -> None:
    out = _probe(world, case, after)
    _everything_else_works(out)
    dist = f"fault-{case.replace('_', '-')}"
    [(name, status, _, error)] = [p for p in out["plugins"] if p[2] == dist]
    assert status == "failed"
    assert CASES[case][1] in error, error
    assert any(name in w and dist in w for w in out["warnings"]), out["warnings"]
    assert out["leftovers"] == []
    assert dist not in out["backends"].values()


@pytest.mark.parametrize("after", [False, True], ids=["plugin-first", "plugin-last"])
def test_ctrl_c_in_a_hook_leaves_the_table_as_before_and_the_next_use_loads_again(
    world: tuple[Path, Path], after: bool
) -> None:
    out = _probe(world, "keyboard_interrupt", after)
    assert out["interrupted"] is True and out["loaded_after_interrupt"] is False
    _everything_else_works(out)
    assert ["fault_keyboard_interrupt", "loaded"] in [p[:2] for p in out["plugins"]]
    assert out["leftovers"] == ["fki::x"]  # defined once, by the second, complete load
