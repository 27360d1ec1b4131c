"""The pytest plugin (entry point ``pytest11``): the ``oplib_device`` fixture runs a test on
every available backend; the ``oplib_backends`` marker and ``--oplib-backend`` restrict it."""

from __future__ import annotations

import re

import pytest

import oplib_core as oplib

pytest_plugins = ["pytester"]


def available() -> list[str]:
    names = [b.name for b in oplib.backends.list() if b.is_available()]
    return sorted(names, key=lambda n: n != "cpu")


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """test id → outcome, from ``-v`` lines (``test_x.py::test_ones[cpu] PASSED [ 50%]``)."""
    found = re.findall(r"::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", "\n".join(result.outlines))
    return dict(found)


TESTS = """
import pytest
import oplib_core as oplib

def test_ones(oplib_device):
    x = oplib.ones(2, device=oplib_device)
    assert isinstance(oplib_device, oplib.Device)
    assert x.device.type == oplib_device.type

@pytest.mark.oplib_backends("cpu", "privateuse1", "nosuch")
def test_marked(oplib_device):
    assert oplib_device.type in ("cpu", oplib.backends.get("privateuse1").name)

def test_plain():
    pass
"""


def test_fixture_runs_on_every_available_backend(pytester: pytest.Pytester):
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-k", "ones")
    ids = {k: v for k, v in outcomes(result).items() if k.startswith("test_ones")}
    assert set(ids) == {f"test_ones[{n}]" for n in available()}
    assert ids["test_ones[cpu]"] == "PASSED" and ids["test_ones[meta]"] == "PASSED"
    npu = oplib.backends.get("privateuse1").name
    assert ids[f"test_ones[{npu}]"] == "PASSED"


def test_marker_restricts_and_skips_missing_backends(pytester: pytest.Pytester):
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess("-v", "-rs", "-p", "no:cacheprovider", "-k", "marked")
    npu = oplib.backends.get("privateuse1").name
    ids = outcomes(result)
    assert ids["test_marked[cpu]"] == "PASSED"
    assert ids[f"test_marked[{npu}]"] == "PASSED"
    assert ids["test_marked[nosuch]"] == "SKIPPED"
    result.stdout.fnmatch_lines(["*oplib backend 'nosuch' is not installed*"])


def test_marker_names_an_unavailable_backend(pytester: pytest.Pytester):
    pytester.makeconftest(
        """
        import oplib_core as oplib

        oplib.backends.register(oplib.BackendSpec(
            name="offline", array_types=(bytearray,), status=lambda: "no device plugged in"))
        """
    )
    pytester.makepyfile(
        test_off="""
        import pytest

        @pytest.mark.oplib_backends("offline", "cpu")
        def test_off(oplib_device):
            assert oplib_device.type == "cpu"
        """
    )
    result = pytester.runpytest_subprocess("-v", "-rs", "-p", "no:cacheprovider")
    assert outcomes(result) == {"test_off[offline]": "SKIPPED", "test_off[cpu]": "PASSED"}
    result.stdout.fnmatch_lines(["*oplib backend 'offline': no device plugged in*"])


def test_command_line_option_restricts_every_test(pytester: pytest.Pytester):
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "--oplib-backend", "meta"
    )
    ids = outcomes(result)
    assert ids["test_ones[meta]"] == "PASSED" and ids["test_plain"] == "PASSED"
    assert not [k for k in ids if k.startswith("test_ones[") and k != "test_ones[meta]"]
    assert ids["test_marked[none]"] == "SKIPPED"  # neither cpu nor privateuse1 was allowed


def test_projects_not_using_the_fixture_are_unaffected(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.slow
        def test_plain():
            pass
        """
    )
    pytester.makeini("[pytest]\nmarkers =\n    slow: a project's own marker\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--strict-markers", "-W", "error"
    )
    result.assert_outcomes(passed=1)


def test_loading_by_module_name_with_autoload_disabled(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:cacheprovider", "-p", "oplib_core.testing", "--oplib-backend", "cpu"
    )
    assert outcomes(result)["test_ones[cpu]"] == "PASSED"
    # and together with the auto-loaded entry point, it is registered once
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "oplib_core.testing", "--oplib-backend", "cpu"
    )
    result.assert_outcomes(passed=3)


def test_projects_not_using_oplib_do_not_import_it(pytester: pytest.Pytester):
    """The entry point's module imports nothing from oplib until a test asks for the
    fixture (bench/pytest_plugin_cost.py measures what is left)."""
    pytester.makepyfile(
        test_unrelated="""
        import sys

        def test_plain():
            assert "oplib_core" not in sys.modules
            assert "_oplib_pytest" in sys.modules  # the plugin itself is loaded
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--oplib-backend", "cpu")
    result.assert_outcomes(passed=1)
    pytester.makepyfile(
        test_user="""
        import sys

        def test_uses_it(oplib_device):
            assert "oplib_core" in sys.modules and oplib_device.type == "cpu"
        """
    )
    result = pytester.runpytest_subprocess(
        "test_user.py", "-p", "no:cacheprovider", "--oplib-backend", "cpu"
    )
    result.assert_outcomes(passed=1)


def test_opcheck_on_a_backend_without_a_kernel_skips_the_test(pytester: pytest.Pytester):
    """The documented pattern: opcheck over sample inputs on every backend. A backend the op
    has no kernel for is SKIPPED with the reason, never PASSED."""
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import oplib_core as oplib

        @pytest.fixture(scope="module")
        def op():
            lib = oplib.Library("pyskip", "DEF")
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda x: x * 2, "CPU")
            oplib.register_fake("pyskip::twice", lambda x: oplib.empty_like(x), lib=lib)
            yield oplib.ops.pyskip.twice.default
            lib._destroy()

        @pytest.mark.oplib_backends("cpu", "privateuse1")
        def test_twice(op, oplib_device):
            x = oplib.tensor(np.ones(3), device=oplib_device)
            oplib.opcheck(op, (x,))
        """
    )
    result = pytester.runpytest_subprocess("-v", "-rs", "-p", "no:cacheprovider")
    found = outcomes(result)
    npu = oplib.backends.get("privateuse1").name
    assert found == {"test_twice[cpu]": "PASSED", f"test_twice[{npu}]": "SKIPPED"}
    result.stdout.fnmatch_lines([f"*opcheck(pyskip::twice): no kernel for backend '{npu}'*"])
