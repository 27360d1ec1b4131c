"""``BackendSpec.array_type_names`` matched by MRO and by a library's public names, resolved
without importing the library; arrays of a known library without its backend named."""

from __future__ import annotations

import abc
import sys
import types

import pytest

import oplib_core as oplib
from oplib_core import backends
from oplib_core.errors import BackendError, CallArgumentError


class _Impl:
    """An array class defined in a private module, as jaxlib's ``ArrayImpl``."""

    dtype = None
    shape = ()


_Impl.__module__ = "fakearrlib._core"


class _Public(abc.ABC):  # noqa: B024  (a public alias: classes register virtually)
    pass


_Public.__module__ = "fakearrlib._base"
_Public.register(_Impl)


class _Sub(_Impl):
    pass


@pytest.fixture
def fakearrlib(monkeypatch):
    mod = types.ModuleType("fakearrlib")
    mod.Array = _Public  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fakearrlib", mod)
    return mod


def test_public_name_matches_virtual_subclasses_and_subclasses(fakearrlib, teardown):
    teardown(
        oplib.backends.register(
            oplib.BackendSpec(name="fakearr", array_type_names=("fakearrlib.Array",))
        )
    )
    assert oplib.backends.for_type(_Impl).name == "fakearr"
    assert oplib.backends.for_type(_Sub).name == "fakearr"


def test_a_name_never_imports_its_library(teardown):
    assert "oplib_never_imported_lib" not in sys.modules
    teardown(
        oplib.backends.register(
            oplib.BackendSpec(name="neverlib", array_type_names=("oplib_never_imported_lib.Array",))
        )
    )
    assert oplib.backends.for_type(_Impl) is None
    assert "oplib_never_imported_lib" not in sys.modules


def test_a_name_still_matches_by_module_root_and_class_name(teardown):
    class ndarray:
        pass

    ndarray.__module__ = "unimportedlib.core.multiarray"
    teardown(
        oplib.backends.register(
            oplib.BackendSpec(name="rootname", array_type_names=("unimportedlib.ndarray",))
        )
    )
    assert oplib.backends.for_type(ndarray).name == "rootname"


def test_arrays_of_a_known_library_without_its_backend(monkeypatch, teardown):
    class Thing:
        dtype = None
        shape = ()

    Thing.__module__ = "knownlib.core"
    monkeypatch.setitem(backends.KNOWN_LIBRARIES, "knownlib", "knownb")
    monkeypatch.setitem(backends.DISTRIBUTIONS, "knownb", "oplib-knownb")
    wanted = r"the knownb backend \(oplib-knownb\) is not installed"
    with pytest.raises(TypeError, match=wanted):
        oplib.Tensor(Thing())
    with pytest.raises(CallArgumentError, match=wanted):
        oplib.ops.oplib.neg(Thing())
    # a Tensor whose backend goes away after it was made
    undo = oplib.backends.register(oplib.BackendSpec(name="knownb", array_types=(Thing,)))
    t = oplib.Tensor(Thing())
    undo()
    with pytest.raises(BackendError, match=wanted):
        _ = t.backend
    # an unknown library keeps the old wording
    Thing.__module__ = "unknownlib"
    with pytest.raises(BackendError, match="no longer installed"):
        _ = t.backend
