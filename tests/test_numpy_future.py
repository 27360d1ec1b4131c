"""numpy's future (issue 32): the suite fails on a DeprecationWarning raised in oplib's own
code, numpy's included (numpy attributes its warnings to the caller with ``stacklevel``),
and the core's kernels use nothing numpy deprecates."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from oplib_core.kernels import array_kernels


class _Numpy25Array(np.ndarray):
    """An ndarray as numpy 2.5 has it: setting ``.shape`` is deprecated."""

    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...]:
        return np.ndarray.shape.__get__(self)

    @shape.setter
    def shape(self, value: tuple[int, ...]) -> None:
        warnings.warn(
            "Setting the shape on a NumPy array has been deprecated in NumPy 2.5.",
            DeprecationWarning,
            stacklevel=2,
        )
        np.ndarray.shape.__set__(self, value)


class _ReshapeWithoutCopy:
    """numpy's functions, but a ``reshape`` without the ``copy`` argument (cupy's, numpy
    before 2.1's): the view kernel's other path."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def reshape(self, a: Any, shape: Any) -> Any:
        return np.reshape(a, shape)


def test_view_without_reshape_copy_sets_no_ndarray_shape() -> None:
    view = array_kernels(_ReshapeWithoutCopy())["view"]
    a = np.arange(6.0).view(_Numpy25Array)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = view(a, [3, 2])
    assert out.shape == (3, 2)
    assert np.shares_memory(out, a)  # a view, as torch's
    out[0, 0] = 7.0
    assert a[0] == 7.0


def test_view_without_reshape_copy_still_refuses_impossible_strides() -> None:
    view = array_kernels(_ReshapeWithoutCopy())["view"]
    a = np.arange(6.0).reshape(2, 3).T.view(_Numpy25Array)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match=r"view size is not compatible.*Use \.reshape"):
            view(a, [6])


needs_numpy_24 = pytest.mark.skipif(
    np.lib.NumpyVersion(np.__version__) < "2.4.0",
    reason="setting ndarray.strides is deprecated from numpy 2.4 on",
)


def _set_strides_from(module: str) -> None:
    """Set an array's strides (deprecated by numpy 2.4) in code whose module is ``module``."""
    code = compile("a.strides = a.strides", f"<{module}>", "exec")
    exec(code, {"__name__": module, "a": np.zeros(4)})


@needs_numpy_24
@pytest.mark.parametrize(
    "module",
    [
        "oplib_core.kernels._index_kernels",
        "oplib_cpu.plugin",
        "oplib_privateuse.device",
        "_oplib_pytest",
    ],
)
def test_a_numpy_deprecation_in_oplib_code_fails_the_suite(module: str) -> None:
    with pytest.raises(DeprecationWarning, match="strides"):
        _set_strides_from(module)


@needs_numpy_24
def test_a_numpy_deprecation_elsewhere_stays_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:  # keeps the suite's filters
        _set_strides_from("some_user_library")
    assert [w.category for w in caught] == [DeprecationWarning]
