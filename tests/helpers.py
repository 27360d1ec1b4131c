"""Helpers shared by the tests (fixtures live in ``conftest.py``): fresh namespaces, a
second in-process backend (``toy``) whose arrays wrap numpy arrays, and undoing
registrations."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
import sys
import threading
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import _plugin_host, plugins
from oplib_core import library as _library
from oplib_core._device import Device

#: numpy's function of each binary pointwise core op (and comparison), by op name.
NUMPY_BINARY: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


_counter = itertools.count()
_counter_lock = threading.Lock()


def unique_ns(prefix: str = "t") -> str:
    """A namespace name no other test uses."""
    with _counter_lock:
        return f"{prefix}{next(_counter)}_ns"


def drop_namespace(ns: str) -> None:
    """Destroy the process-lifetime Library the functional API (``lib=None``) made for ``ns``."""
    keep = _library._keep_alive.pop(ns, None)
    if keep is not None:
        keep._destroy()


class ToyArray:
    """A small real array type: wraps a numpy array and remembers its device index."""

    def __init__(self, data: Any, index: int = 0) -> None:
        self.data = np.asarray(data)
        self.index = index

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def __repr__(self) -> str:
        return f"ToyArray({self.data!r}, index={self.index})"


def _toy_from_host(array: np.ndarray, device: Device) -> ToyArray:
    return ToyArray(np.array(array, copy=True), device.index or 0)


def _toy_to_host(array: ToyArray) -> np.ndarray:
    return array.data


def toy_spec(**overrides: Any) -> oplib.BackendSpec:
    kw: dict[str, Any] = {
        "name": "toy",
        "array_types": (ToyArray,),
        "to_host": _toy_to_host,
        "from_host": _toy_from_host,
        "device_of": lambda a: a.index,
        "device_count": lambda: 2,
    }
    kw.update(overrides)
    return oplib.BackendSpec(**kw)


class Teardown:
    """Undoes registrations at the end of a test, last first: ``teardown(x)`` takes a
    ``Library``, a ``CustomOpDef`` (anything with ``_destroy()``) or an undo callable."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], object]] = []

    def __call__(self, *things: Any) -> None:
        for thing in things:
            destroy = getattr(thing, "_destroy", None)
            self._undo.append(destroy if destroy is not None else thing)

    def run(self) -> None:
        while self._undo:
            self._undo.pop()()


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal (for colour and progress-bar tests)."""

    def isatty(self) -> bool:
        return True


def c_compiler() -> str | None:
    """The system C compiler (``$CC``, ``cc`` or ``gcc``), or None."""
    return next((c for c in (os.environ.get("CC"), "cc", "gcc") if c and shutil.which(c)), None)


def compile_library(sources: list[str] | str, where: Any, name: str = "lib") -> str:
    """Compile C ``sources`` (file paths, or one source text) against oplib.h into a
    shared library in the directory ``where``; returns its path. Skips the calling test
    when no C compiler is installed (CI has one)."""
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) found: native-kernel tests need one; CI has gcc")
    if isinstance(sources, str):
        path = os.path.join(str(where), f"{name}.c")
        with open(path, "w") as f:
            f.write(sources)
        sources = [path]
    out = os.path.join(str(where), f"{name}.so")
    subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-I", oplib.get_include(), *sources, "-o", out],
        check=True,
        capture_output=True,
    )
    return out


def make_plugin(name: str, **hooks: Any) -> Any:
    """An in-process plugin object named ``name`` with these hook implementations."""
    ns = types.SimpleNamespace(__name__=name)
    for hook, fn in hooks.items():
        setattr(ns, hook, oplib.hookimpl(fn))
    return ns


def load_batch(*plugins_and_dists: Any, entry_points: bool = False) -> tuple[list[Any], list[Any]]:
    """Load several in-process plugins in one pass (as entry points are), in this order;
    with ``entry_points``, each as if found through an entry point named after it. Returns
    their records and the warnings raised."""
    oplib.plugins.load()
    host = _plugin_host.HOST
    recs = []
    for plugin, dist in plugins_and_dists:
        rec = plugins.PluginRecord(
            name=plugin.__name__,
            distribution=dist,
            version="1",
            entry_point=f"{dist}:p" if entry_points else None,
        )
        host.records[rec.name] = rec
        assert host._register_with_pluggy(rec, plugin)
        recs.append(rec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        host._run_phases(recs)
    return recs, caught


ROOT = Path(__file__).resolve().parents[1]


def venv_with_plugin(where: Path, plugin: str, extra: str, *more: str) -> str:
    """A fresh virtualenv under ``where`` holding oplib-core, oplib-cpu and the wheel of
    ``plugins/<plugin>`` with its extra ``extra`` (and the requirements ``more``), installed
    for real by pip (from PyPI, as a user installs them); its python's path."""
    pip_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wheels = where / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(ROOT / "plugins" / plugin)],
        check=True, timeout=300, env=pip_env,
    )  # fmt: skip
    (wheel,) = wheels.glob(f"oplib_{plugin}-*.whl")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "setuptools>=77", "wheel"], check=True, timeout=300, env=pip_env)
    subprocess.run(
        [*pip, "--no-build-isolation", str(ROOT), str(ROOT / "plugins" / "cpu"),
         f"{wheel}[{extra}]", *more],
        check=True, timeout=900, env=pip_env,
    )  # fmt: skip
    return py


def venv_env() -> dict[str, str]:
    """The environment for processes of a :func:`venv_with_plugin` virtualenv: this one's,
    less oplib's switches (``OPLIB_*``) and ``PYTHONPATH`` (which would reach the checkout)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OPLIB_") and k != "PYTHONPATH"}
