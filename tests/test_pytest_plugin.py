"""The pytest plugin (entry point ``pytest11``): the ``oplib_device`` fixture runs a test on
every available backend; the ``oplib_backends`` marker and ``--oplib-backend`` restrict it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

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
    # (pytest-benchmark, where installed, warns under -W error inside an xdist worker: not
    # what this test is about)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:benchmark", "--strict-markers", "-W", "error"
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


# -- a dtype the backend cannot hold: a skip with the reason, as in oplib check ----------------

CUPYLIKE_CONFTEST = f"""
import sys

sys.path.insert(0, {str(Path(__file__).parent)!r})
import cupylike_backend  # cupy's dtypes on numpy memory (tests/cupylike_backend.py)

_uninstall = cupylike_backend.install()
"""


def test_a_dtype_the_backend_cannot_hold_skips_the_test_there(pytester: pytest.Pytester):
    pytester.makeconftest(CUPYLIKE_CONFTEST)
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import oplib_core as oplib

        ON_BOTH = pytest.mark.oplib_backends("cpu", "cupylike")

        @pytest.fixture
        def bf16_data(oplib_device):
            return oplib.tensor(np.ones(2, oplib.bfloat16), device=oplib_device)

        @ON_BOTH
        def test_in_the_body(oplib_device):
            x = oplib.tensor(np.ones(2, oplib.bfloat16), device=oplib_device)
            assert (x + x).dtype == oplib.bfloat16

        @ON_BOTH
        def test_in_a_fixture(bf16_data):
            assert bf16_data.dtype == oplib.bfloat16

        @ON_BOTH
        def test_a_factory(oplib_device):
            assert oplib.zeros(2, dtype=oplib.float8_e4m3fn, device=oplib_device).shape == (2,)

        @ON_BOTH
        def test_held_dtypes_still_run(oplib_device):
            assert oplib.zeros(2, dtype=oplib.float16, device=oplib_device).dtype == oplib.float16

        @pytest.mark.oplib_backends("cpu")
        def test_another_backends_refusal_fails(oplib_device):
            oplib.tensor(np.ones(2, oplib.bfloat16), device=oplib_device).to("cupylike")

        @pytest.mark.oplib_backends("cupylike")
        def test_other_errors_fail(oplib_device):
            raise TypeError("a real bug")

        def test_without_the_fixture_fails():
            oplib.zeros(2, dtype=oplib.bfloat16, device="cupylike")
        """
    )
    result = pytester.runpytest_subprocess("-v", "-rs", "-p", "no:cacheprovider")
    assert outcomes(result) == {
        "test_in_the_body[cpu]": "PASSED",
        "test_in_the_body[cupylike]": "SKIPPED",
        "test_in_a_fixture[cpu]": "PASSED",
        "test_in_a_fixture[cupylike]": "SKIPPED",
        "test_a_factory[cpu]": "PASSED",
        "test_a_factory[cupylike]": "SKIPPED",
        "test_held_dtypes_still_run[cpu]": "PASSED",
        "test_held_dtypes_still_run[cupylike]": "PASSED",
        "test_another_backends_refusal_fails[cpu]": "FAILED",
        "test_other_errors_fail[cupylike]": "FAILED",
        "test_without_the_fixture_fails": "FAILED",
    }
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]*] test_a_dtype_*.py:*: oplib backend 'cupylike' cannot hold bfloat16: "
            "copy to cupylike: backend 'cupylike' has no bfloat16 dtype*",
            "SKIPPED [[]*] test_a_dtype_*.py:*: oplib backend 'cupylike' cannot hold "
            "float8_e4m3fn: oplib::zeros(): backend 'cupylike' has no float8_e4m3fn dtype*",
        ],
        consecutive=False,
    )
    result.assert_outcomes(passed=5, skipped=3, failed=3)


def test_float64_on_jax_without_64_bit_mode_is_a_skip(pytester: pytest.Pytester):
    if importlib.util.find_spec("jax") is None:  # (not imported here: the run is a subprocess)
        pytest.skip("jax is not installed")
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        import oplib_core as oplib

        @pytest.mark.oplib_backends("cpu", "jax")
        def test_arange(oplib_device):
            x = oplib.tensor(np.arange(3.0), device=oplib_device)
            assert x.sum().item() == 3.0
        """
    )
    result = pytester.runpytest_subprocess("-v", "-rs", "-p", "no:cacheprovider")
    assert outcomes(result) == {"test_arange[cpu]": "PASSED", "test_arange[jax]": "SKIPPED"}
    result.stdout.fnmatch_lines(
        ["*oplib backend 'jax' cannot hold float64: copy to jax*64-bit mode is off*"]
    )
