"""Start-up must stay light: ``import oplib_core`` loads no plugin, and loading them (on
first use) imports no heavy array library."""

from __future__ import annotations

from pathlib import Path

from subproc import ROOT, run_python

HEAVY = ("cupy", "dask", "distributed", "torch", "jax")


def metadata_scanned(cache_dir: Path, cwd: Path = ROOT) -> bool:
    """Whether loading the plugins imported ``importlib.metadata`` (scanned the installed
    distributions instead of reading the entry-point cache in ``cache_dir``)."""
    out = run_python(
        "import sys, oplib_core; oplib_core.plugins.load()\n"
        "OUT['scanned'] = 'importlib.metadata' in sys.modules",
        env={"OPLIB_CACHE_DIR": str(cache_dir)},
        cwd=cwd,
    )
    return out["scanned"]


def test_loading_the_plugins_imports_no_heavy_library():
    data = run_python(
        "import sys, numpy as np, oplib_core as oplib\n"
        "oplib.ops.oplib.sin(np.ones(2)); oplib.backends.list(); oplib.device('cpu')\n"
        "OUT.update({'modules': sorted(m.split('.')[0] for m in sys.modules),"
        " 'plugins': [p.name for p in oplib.plugins.list() if p.status == 'loaded']})"
    )
    assert {"cpu", "meta", "cuda", "dask", "privateuse"} <= set(data["plugins"])
    assert not [m for m in HEAVY if m in data["modules"]]
    # error-path helpers (did-you-mean suggestions) stay off the loading path
    assert "difflib" not in data["modules"]
    # the CLI's renderer is the oplib command's alone
    assert "rich" not in data["modules"]


def test_drawing_is_not_imported_at_start_up():
    data = run_python(
        "import sys, oplib_core; oplib_core.plugins.load()\n"
        "OUT['drawing'] = [m for m in ('oplib_core._explain_graph', 'oplib_core.autograd._dot')"
        " if m in sys.modules]"
    )
    assert data["drawing"] == []


def test_the_native_ctypes_layer_waits_for_a_library():
    data = run_python(
        "import sys, numpy as np, oplib_core as oplib\n"
        "oplib.ops.oplib.sin(np.ones(2)); OUT['before'] = oplib.ops.loaded_libraries == set()\n"
        "OUT['modules'] = [m for m in sys.modules if m.startswith('oplib_core._native._')]"
    )
    assert data["before"]
    assert sorted(data["modules"]) == ["oplib_core._native._api", "oplib_core._native._classes",
                                       "oplib_core._native._errors"]  # fmt: skip


def test_import_defers_the_plugins_to_first_use():
    data = run_python(
        "import sys, oplib_core as oplib\n"
        "before = (oplib._startup.is_loaded(), 'oplib_cpu' in sys.modules,\n"
        "          'oplib_core._core_plugin' in sys.modules)\n"
        "sin = oplib.ops.oplib.sin\n"
        "after = (oplib._startup.is_loaded(), 'oplib_core._core_plugin' in sys.modules)\n"
        "import numpy as np; sin(np.ones(1))\n"
        "OUT.update({'before': before, 'after': after, 'cpu': 'oplib_cpu' in sys.modules})"
    )
    assert data["before"] == [False, False, False]
    assert data["after"] == [True, True]
    assert data["cpu"] is True  # a plugin whose backend is used is loaded by then


def test_plugins_load_loads_them_now_and_once():
    data = run_python(
        "import oplib_core as oplib\n"
        "oplib.plugins.load(); first = [p.name for p in oplib.plugins.list()]\n"
        "oplib.plugins.load()\n"
        "OUT.update({'loaded': oplib._startup.is_loaded(), 'first': first,\n"
        "            'again': [p.name for p in oplib.plugins.list()]})"
    )
    assert data["loaded"] is True
    assert "cpu" in data["first"] and data["first"] == data["again"]


def test_warm_start_does_not_scan_distribution_metadata(tmp_path):
    assert metadata_scanned(tmp_path) is True  # cold: the entry points are scanned and cached
    assert metadata_scanned(tmp_path) is False  # warm: read from the cache, never imported


def test_cli_module_is_not_imported_at_start_up():
    data = run_python(
        "import sys, oplib_core; oplib_core.plugins.load()\n"
        "OUT['cli'] = 'oplib_core.cli' in sys.modules"
    )
    assert data["cli"] is False


def test_cache_survives_changes_in_the_current_directory(tmp_path):
    cache = tmp_path / "cache"
    work = tmp_path / "project"
    work.mkdir()
    assert metadata_scanned(cache, cwd=work) is True  # cold
    (work / "new_file.txt").write_text("the project directory changed")
    assert metadata_scanned(cache, cwd=work) is False  # still a cache hit


def test_importing_a_submodule_does_not_load_the_plugins():
    # ``from oplib_core import cli`` first asks the package for the attribute ``cli``; the
    # package's __getattr__ (device modules) must not load the plugins to answer that.
    data = run_python(
        "import oplib_core as oplib\n"
        "from oplib_core import _introspect, cli\n"
        "OUT['loaded'] = oplib._startup.is_loaded()"
    )
    assert data == {"loaded": False}


def test_the_first_call_imports_neither_the_array_namespace_nor_the_samples():
    data = run_python(
        "import sys, numpy as np, oplib_core as oplib\n"
        "oplib.ops.oplib.sin(np.ones(2))\n"
        "def have(*names): return [n for n in names if n in sys.modules]\n"
        "OUT['first'] = have('oplib_core.array_api._creation', 'oplib_core.testing._samples')\n"
        "xp = oplib.array_api\n"
        "OUT['listed'] = 'sum' in dir(xp) and 'sum' in xp.__all__\n"
        "OUT['sum'] = float(xp.sum(xp.asarray([1.0, 2.0])).item())\n"
        "OUT['missing'] = catch(getattr, xp, 'no_such_name')\n"
        "from oplib_core.testing import SampleInput\n"
        "OUT['later'] = have('oplib_core.array_api._creation', 'oplib_core.testing._samples')\n"
    )
    assert data["first"] == []
    assert data["listed"] is True and data["sum"] == 3.0
    assert data["missing"][0] == "AttributeError" and "no_such_name" in data["missing"][1]
    assert data["later"] == ["oplib_core.array_api._creation", "oplib_core.testing._samples"]


def test_a_numpy_program_imports_neither_array_api_compat_nor_the_numpy_protocol_tables():
    # numpy >= 2.1 is its own array API namespace: array-api-compat is for the others
    # (the strict backend below), and numpy's protocols for Tensor load when numpy meets one
    data = run_python(
        "import sys, numpy as np, oplib_core as oplib\n"
        "from oplib_core._array_api import is_namespace\n"
        "oplib.ops.oplib.sin(np.ones(2))\n"
        "def have(*names): return [n for n in names if n in sys.modules]\n"
        "NAMES = ('array_api_compat', 'oplib_core._tensor.numpy_interop')\n"
        "OUT['first'] = have(*NAMES)\n"
        "OUT['numpy'] = [is_namespace(np, 'numpy'), is_namespace(np, 'jax')]\n"
        "OUT['first_still'] = have(*NAMES)\n"
        "OUT['sin'] = float(np.sin(oplib.tensor([0.0])).item())\n"
        "import array_api_strict as strict\n"
        "import array_api_compat.numpy as compat_numpy\n"
        "OUT['others'] = [is_namespace(strict, 'numpy'), is_namespace(compat_numpy, 'numpy')]\n"
        "OUT['later'] = have(*NAMES)\n"
    )
    assert data["first"] == [] and data["first_still"] == []
    assert data["numpy"] == [True, False]
    assert data["sin"] == 0.0
    assert data["others"] == [False, True]
    assert data["later"] == ["array_api_compat", "oplib_core._tensor.numpy_interop"]
