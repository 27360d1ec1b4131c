"""``oplib_core.backends.by_size``: a backend's own kernel for large arrays beside the
library's function for small ones (oplib-cuda's elementwise kernels, issue 30), compiled
where oplib-core is, and the Python function doing the same where it is not."""

from __future__ import annotations

import inspect
import sys
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
import oplib_core._dispatch as dispatch
from oplib_core.backends import by_size


@pytest.fixture(params=["compiled", "python"])
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled":
        if dispatch.SizeRoutedBase is None:
            pytest.skip("oplib-core runs without its compiled call here")
    else:
        monkeypatch.setattr(dispatch, "SizeRoutedBase", None)
    return str(request.param)


def _large(x: Any, *rest: Any, **kw: Any) -> Any:
    """The large kernel."""
    return ("large", x.shape if hasattr(x, "shape") else x, rest, kw)


def _small(*args: Any, **kw: Any) -> Any:
    return ("small", args[0].shape if args and hasattr(args[0], "shape") else args, kw)


def test_routes_on_the_first_arguments_size(build: str) -> None:
    k = by_size(_small, _large, 100)
    assert k(np.ones(100))[0] == "large"
    assert k(np.ones((10, 10)))[0] == "large"
    assert k(np.ones(99))[0] == "small"
    assert k(np.ones(0))[0] == "small"
    # only the first argument counts
    assert k(np.ones(3), np.ones(1000))[0] == "small"
    assert k(np.ones(1000), np.ones(3))[:2] == ("large", (1000,))


def test_arguments_counts_the_first_so_many(build: str) -> None:
    k = by_size(_small, _large, 100, arguments=2)
    assert k(np.ones(3), np.ones(100))[0] == "large"  # bias - x: the large one second
    assert k(np.ones(100), np.ones(3))[0] == "large"
    assert k(np.ones(3), np.ones(99))[0] == "small"
    assert k(np.ones(3), np.ones(3), np.ones(1000))[0] == "small"  # the third is not counted
    assert k(np.ones(3), 2.0)[0] == "small"  # a scalar has no size
    assert k(np.ones(3))[0] == "small"  # fewer arguments than counted
    assert k.among == 2  # type: ignore[attr-defined]
    assert by_size(_small, _large, 100).among == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("arguments", [0, -1, 1.0, "2", True])
def test_arguments_must_be_a_positive_int(build: str, arguments: object) -> None:
    with pytest.raises(oplib.InvalidArgumentError, match="arguments must be a positive int") as e:
        by_size(_small, _large, 1, arguments=arguments)  # type: ignore[arg-type]
    assert isinstance(e.value, ValueError) and e.value.argument == "arguments"


def test_passes_every_argument_and_keyword_on(build: str) -> None:
    k = by_size(_small, _large, 10)
    a = np.ones(10)
    got = k(a, 2.0, dim=1)
    assert got[0] == "large" and got[2] == (2.0,) and got[3] == {"dim": 1}
    assert k(np.ones(1), dim=3) == ("small", (1,), {"dim": 3})


@pytest.mark.parametrize(
    ("why", "args"),
    [
        ("no positional argument", ()),
        ("no size", (object(),)),
        ("a size that is not an int", (type("Odd", (), {"size": 10.0**9})(),)),
        ("a size below any", (type("Negative", (), {"size": -(1 << 70)})(),)),
        ("a Python scalar", (5,)),
    ],
)
def test_everything_without_an_int_size_goes_to_small(build: str, why: str, args: Any) -> None:
    assert by_size(_small, _large, 1)(*args)[0] == "small", why


def test_a_size_beyond_a_machine_int_is_large(build: str) -> None:
    assert by_size(_small, _large, 1 << 62)(type("Huge", (), {"size": 1 << 70})())[0] == "large"


def test_an_error_reading_size_reaches_the_caller(build: str) -> None:
    class Broken:
        @property
        def size(self) -> int:
            raise RuntimeError("no size today")

    with pytest.raises(RuntimeError, match="no size today"):
        by_size(_small, _large, 1)(Broken())


def test_errors_of_the_chosen_kernel_reach_the_caller(build: str) -> None:
    def large(x: Any) -> Any:
        raise ValueError("large failed")

    with pytest.raises(ValueError, match="large failed"):
        by_size(_small, large, 1)(np.ones(2))


def test_names_docs_signature_and_parts(build: str) -> None:
    k = by_size(_small, _large, 7, name="cuda_neg")
    assert k.__name__ == k.__qualname__ == "cuda_neg"
    assert k.__doc__ == "The large kernel."
    assert inspect.signature(k) == inspect.signature(_large)
    parts = (k.small, k.large, k.min_size, k.among)  # type: ignore[attr-defined]
    assert parts == (_small, _large, 7, 1)
    assert by_size(_small, _large, 7).__name__ == "_large"


@pytest.mark.parametrize("which", ["small", "large"])
def test_refuses_what_cannot_be_called(build: str, which: str) -> None:
    parts = {"small": _small, "large": _large, which: 3}
    with pytest.raises(
        oplib.ArgumentTypeError, match=f"by_size\\(\\): {which} must be callable, got 3"
    ) as raised:
        by_size(parts["small"], parts["large"], 1)
    assert isinstance(raised.value, TypeError) and raised.value.argument == which


def test_compiled_adds_no_python_frame() -> None:
    if dispatch.SizeRoutedBase is None:
        pytest.skip("oplib-core runs without its compiled call here")
    k = by_size(np.negative, _large, 100)
    a = np.ones(3)
    frames: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            frames.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        out = k(a)
    finally:
        sys.setprofile(None)
    np.testing.assert_array_equal(out, -a)
    assert frames == []


def test_the_compiled_kernel_is_released_with_its_parts() -> None:
    if dispatch.SizeRoutedBase is None:
        pytest.skip("oplib-core runs without its compiled call here")
    import gc
    import weakref

    class Fn:
        def __call__(self, *args: Any) -> Any:
            return args

    small = Fn()
    k = by_size(small, Fn(), 1)
    small.cycle = k  # type: ignore[attr-defined]  # a cycle through the kernel: the GC's
    ref = weakref.ref(small)
    del small, k
    gc.collect()
    assert ref() is None
