"""oplib's pytest plugin as pytest loads it (the ``pytest11`` entry point ``oplib``).

Internal, and deliberately outside the ``oplib_core`` package: it is imported by every
pytest run of an environment where oplib-core is installed, so it imports nothing from
oplib (nor numpy) until a test asks for the ``oplib_device`` fixture. Then
``oplib_core.testing.pytest_plugin`` (where the plugin is documented) parametrises the test.
Projects that never use oplib pay only for declaring the option, the marker and the fixture.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if FIXTURE not in metafunc.fixturenames:
        return
    # The first test that uses oplib: only now is oplib imported (its plugins load too).
    from oplib_core.testing.pytest_plugin import parametrize

    parametrize(metafunc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A test on ``oplib_device`` that failed because that backend cannot hold a dtype it
    declares it lacks (``oplib_core.BackendDtypeError``) is reported SKIPPED with the reason
    (as pytest's own skipping plugin rewrites xfail reports); other tests are untouched."""
    outcome = yield
    if call.excinfo is None or call.when == "teardown":
        return
    callspec = getattr(item, "callspec", None)
    device = None if callspec is None else callspec.params.get(FIXTURE)
    if device is None:
        return
    from oplib_core.testing.pytest_plugin import dtype_skip_reason

    reason = dtype_skip_reason(device, call.excinfo.value)
    if reason is not None:
        report = outcome.get_result()
        path, line, _ = item.reportinfo()
        report.outcome = "skipped"
        report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {reason}")


@pytest.fixture
def oplib_device(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The ``oplib_core.Device`` of one available backend; tests using it run once per
    backend (restrict with ``@pytest.mark.oplib_backends("cpu", ...)``). An ``opcheck``
    that checks nothing on it (no kernel for the op there) skips the test with the reason,
    and so does data of a dtype the backend cannot hold (``oplib_core.BackendDtypeError``)."""
    device = getattr(request, "param", None)
    if device is None:
        yield device
        return
    from oplib_core.testing.pytest_plugin import skipping_unchecked

    with skipping_unchecked(device):
        yield device
