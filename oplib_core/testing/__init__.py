"""Checking operators: :func:`opcheck`, sample inputs, and the pytest plugin.

``pytest -p oplib_core.testing`` loads the pytest plugin (it is also auto-loaded through the
``pytest11`` entry point ``oplib``): a fixture ``oplib_device`` parametrised over the
available backends and a marker ``oplib_backends(...)`` restricting it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below imports them
    from ._checks import (
        CHECKS,
        DEFAULT_TEST_UTILS,
        SKIPPED,
        BackendOutcome,
        CheckResult,
        OpCheckError,
        OpCheckResults,
        opcheck,
        run_checks,
    )
    from ._samples import SampleInput, sample_inputs

# Names imported on first use, by module: the built-in sample-input plugin imports this
# package at start-up, and neither checking nor samples are needed then.
_LAZY = {
    "CHECKS": "_checks",
    "DEFAULT_TEST_UTILS": "_checks",
    "SKIPPED": "_checks",
    "BackendOutcome": "_checks",
    "CheckResult": "_checks",
    "OpCheckError": "_checks",
    "OpCheckResults": "_checks",
    "opcheck": "_checks",
    "run_checks": "_checks",
    "SampleInput": "_samples",
    "sample_inputs": "_samples",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHECKS",
    "DEFAULT_TEST_UTILS",
    "SKIPPED",
    "BackendOutcome",
    "CheckResult",
    "OpCheckError",
    "OpCheckResults",
    "SampleInput",
    "opcheck",
    "run_checks",
    "sample_inputs",
]


def pytest_addhooks(pluginmanager: Any) -> None:
    """``pytest -p oplib_core.testing`` registers this package as a pytest plugin: add the
    real one (the entry point's module), under its entry-point name so the auto-loaded copy
    is not added twice. (Imported here, not above: ``import oplib_core`` must not import
    pytest.)"""
    import _oplib_pytest

    if not pluginmanager.is_registered(_oplib_pytest):
        pluginmanager.register(_oplib_pytest, "oplib")
