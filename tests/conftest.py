"""Shared fixtures: fresh namespaces, a Library that is destroyed after the test, a second
in-process backend (``toy``) whose arrays wrap numpy arrays, and dtype restoration."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import oplib_core as oplib
from oplib_core import library as _library
from oplib_core._device import Device
from oplib_core._dispatch import SLOW

# These VMs stall for seconds at times: Hypothesis's timing checks (a slow draw, a slow
# example) would then fail tests about schemas, not about speed. Speed lives in bench/.
settings.register_profile("oplib", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("oplib")

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


@pytest.fixture
def ns():
    """A fresh namespace; registrations made in it through the functional API are removed
    after the test."""
    name = unique_ns()
    yield name
    drop_namespace(name)


@pytest.fixture
def lib(ns):
    """A FRAGMENT Library in ``ns``, destroyed after the test."""
    library = oplib.Library(ns, "FRAGMENT")
    yield library
    library._destroy()


@pytest.fixture
def default_dtype():
    """Restores the default floating dtype after the test."""
    saved = oplib.get_default_dtype()
    yield
    oplib.set_default_dtype(saved)


# -- a second backend, in process ---------------------------------------------------------


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


@pytest.fixture
def toy():
    """The ``toy`` backend (two devices, does not accept CPU arrays), removed after the test.
    Yields its array class."""
    undo = oplib.backends.register(toy_spec())
    yield ToyArray
    undo()


@pytest.fixture
def toy_accepting_cpu():
    """A ``toy`` backend whose kernels also take CPU arrays as inputs. Yields its array
    class."""
    undo = oplib.backends.register(toy_spec(accepts=("cpu",)))
    yield ToyArray
    undo()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``OPLIB_DISPATCH_SLOW=1`` (the fast path off) skip tests marked ``fastpath``:
    they inspect the fast path's caches, which then stay empty."""
    if not SLOW:
        return
    skip = pytest.mark.skip(reason="inspects the fast path, which OPLIB_DISPATCH_SLOW=1 turns off")
    for item in items:
        if "fastpath" in item.keywords:
            item.add_marker(skip)
