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

The plugin only registers its marker and option until a test asks for ``oplib_device``;
projects that do not use it see no other effect (loading it imports ``oplib_core``, its
parent package, which loads the oplib plugins).
"""

from __future__ import annotations

from typing import Any

import pytest

from oplib_core import backends
from oplib_core._device import Device
from oplib_core.backend_registration import _get_privateuse1_backend_name

MARKER = "oplib_backends"
FIXTURE = "oplib_device"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("oplib")
    group.addoption(
        "--oplib-backend",
        action="append",
        default=[],
        metavar="NAME",
        help="run tests using the oplib_device fixture only on this backend (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*names): run a test using the {FIXTURE} fixture only on these oplib "
        "backends (a named backend that is missing or unavailable is skipped)",
    )


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if FIXTURE not in metafunc.fixturenames:
        return
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


@pytest.fixture
def oplib_device(request: pytest.FixtureRequest) -> Any:
    """The ``oplib_core.Device`` of one available backend; tests using it run once per
    backend (restrict with ``@pytest.mark.oplib_backends("cpu", ...)``)."""
    return getattr(request, "param", None)
