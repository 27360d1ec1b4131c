"""Fixtures: fresh namespaces, a Library destroyed after the test, undoing registrations, the
in-process ``toy`` backend, and dtype restoration. Helpers they use live in ``helpers.py``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# The run's start-up caches (entry points, waiting plugins) go to a directory of its own,
# inherited by the interpreters tests start: each temporary venv or sys.path makes new
# cache files, which would pile up in the user's ~/.cache/oplib run after run.
if "OPLIB_CACHE_DIR" not in os.environ:
    _cache_dir = tempfile.mkdtemp(prefix="oplib-test-cache-")
    os.environ["OPLIB_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)

# JAX on a GPU takes 75% of its memory in each process that uses it: parallel workers (and
# the interpreters tests start) would starve one another and cupy. JAX reads this when it
# first uses the GPU, so it must be set before then (oplib-jax sets it too, see docs/jax.md).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import oplib_core as oplib  # (after the cache directory is chosen)
from oplib_core._dispatch import SLOW

from helpers import Teardown, ToyArray, drop_namespace, toy_spec, unique_ns

# These VMs stall for seconds at times: Hypothesis's timing checks (a slow draw, a slow
# example) would then fail tests about schemas, not about speed. Speed lives in bench/.
settings.register_profile("oplib", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("oplib")


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


@pytest.fixture
def teardown():
    """``teardown(x)``: destroy ``x`` (a Library, a custom op, an undo callable) after the
    test, whatever happens in it."""
    undo = Teardown()
    yield undo
    undo.run()


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
