"""The pytest plugin: run one test on every oplib backend.

Loaded automatically through the ``pytest11`` entry point ``oplib`` (or with
``pytest -p oplib_core.testing``). A test that takes the ``oplib_device`` argument runs
once per available backend (``cpu``, the private-use device under its vendor name,
``cuda`` when present, ``meta``), with an ``oplib_core.Device``::

    def test_scaled_add(oplib_device):
        x = oplib.ones(3, device=oplib_device)
        ...

    @pytest.mark.oplib_backends("cpu", "npu")
    def test_only_on_cpu_and_npu(oplib_device): ...

A backend named by the marker that is not installed or not available is a skip with the
reason. ``--oplib-backend NAME`` (repeatable) restricts every such test from the command line.

A test that puts data of a dtype the backend cannot hold on it (``oplib.tensor(np.arange(3.0),
device=oplib_device)`` on JAX without its 64-bit mode, bfloat16 on cuda) is SKIPPED with the
reason, not failed: the ``BackendDtypeError`` that backend raises (see
``BackendSpec.dtypes``), in the test or in a fixture it uses, is a skip, as in ``oplib check``
and ``opcheck``. Another backend's refusal, or any other error, still fails the test.

What pytest loads is the top-level module ``_oplib_pytest``: it declares the option, the
marker and the fixture, and imports this module (and so oplib) only when a test asks for
``oplib_device``. Projects that do not use oplib pay for nothing else
(``bench/pytest_plugin_cost.py`` measures it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from _oplib_pytest import FIXTURE, MARKER
from oplib_core import backends
from oplib_core._device import Device
from oplib_core.backend_registration import _get_privateuse1_backend_name
from oplib_core.errors import BackendDtypeError
from oplib_core.testing._checks import UNCHECKED

__all__ = ["dtype_skip_reason", "parametrize", "skipping_unchecked"]


@contextlib.contextmanager
def skipping_unchecked(device: Device) -> Iterator[None]:
    """While a test runs on ``device``: an ``opcheck`` that checked nothing on it (the op
    has no kernel there) calls ``pytest.skip`` with the reason, so the test reports
    SKIPPED for that backend instead of PASSED."""

    def skip(backend: str, reason: str) -> None:
        if backend == device.type:
            pytest.skip(reason)

    token = UNCHECKED.set(skip)
    try:
        yield
    finally:
        UNCHECKED.reset(token)


def dtype_skip_reason(device: Device, error: BaseException) -> str | None:
    """Why a test on ``device`` is a skip rather than a failure: ``error`` (or an error it
    was raised from) is a ``BackendDtypeError`` of ``device``'s backend, which declares it
    cannot hold that dtype (``BackendSpec.dtypes``: float64 on JAX without its 64-bit mode,
    bfloat16 on cuda). ``None`` for any other error, and for another backend's refusal."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, BackendDtypeError) and seen.backend == device.type:
            return f"oplib backend {device.type!r} cannot hold {seen.dtype}: {seen}"
        seen = seen.__cause__
    return None


def _params(names: tuple[str, ...] | None, only: list[str]) -> list[Any]:
    table = backends.list()
    if names is None:
        chosen = [b for b in table if b.is_available()]
        chosen.sort(key=lambda b: b.name != "cpu")  # cpu first, then by priority
        wanted: list[tuple[str, Any]] = [(b.name, b) for b in chosen]
    else:
        wanted = []
        for n in names:
            found = next((b for b in table if b.name == n), None)
            if found is None:
                found = next(
                    (b for b in table if b.name == _renamed(n)), None
                )  # "privateuse1" after the vendor renamed it
            wanted.append((n, found))
    params = []
    for n, b in wanted:
        if only and n not in only and (b is None or b.name not in only):
            continue
        if b is None:
            params.append(
                pytest.param(
                    None,
                    id=n,
                    marks=pytest.mark.skip(reason=f"oplib backend {n!r} is not installed"),
                )
            )
            continue
        status = b.status()
        if status is not None:
            params.append(
                pytest.param(
                    None,
                    id=b.name,
                    marks=pytest.mark.skip(reason=f"oplib backend {b.name!r}: {status}"),
                )
            )
            continue
        params.append(pytest.param(Device(b.name), id=b.name))
    return params


def _renamed(name: str) -> str:
    return _get_privateuse1_backend_name() if name == "privateuse1" else name


def parametrize(metafunc: pytest.Metafunc) -> None:
    """Parametrise a test that uses the ``oplib_device`` fixture over the backends its
    marker and ``--oplib-backend`` allow."""
    names: tuple[str, ...] | None = None
    for mark in metafunc.definition.iter_markers(MARKER):
        names = tuple(mark.args)  # the closest marker wins
        break
    only = metafunc.config.getoption("oplib_backend") or []
    params = _params(names, list(only))
    if not params:
        reason = (
            "no oplib backend is available"
            if not only
            else (f"no oplib backend among --oplib-backend {', '.join(only)}")
        )
        params = [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize(FIXTURE, params, indirect=True)
