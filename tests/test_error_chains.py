"""An error from an op's call carries no internal ``KeyError`` in its chain, and a failed
plugin's warning points at the user's line (issue 32).

The fast path looks its kernel up in a dict; on the first call the lookup misses and the
slow path takes over. Were the slow path called inside the ``except KeyError`` block, every
error it raised (a kernel's shape error, a missing kernel) would show "During handling of
the above exception, another exception occurred" under a ``KeyError`` the user did not
cause, in pytest and Jupyter alike. Each test makes the *first* call of a fresh op, on
native arrays, on Tensors (with and without grad), through a packet with several
overloads and through a factory, and walks ``__cause__``/``__context__``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import plugins
from oplib_core.errors import NoKernelError

from helpers import make_plugin


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        todo += [x.__cause__, x.__context__]


def _raises(error: type[BaseException], call: Callable[[], Any], match: str) -> BaseException:
    with pytest.raises(error, match=match) as info:
        call()
    chain = list(_chain(info.value))
    keyerrors = [x for x in chain if isinstance(x, KeyError)]
    assert not keyerrors, (
        f"{type(info.value).__name__} chains internal KeyErrors {keyerrors!r}: "
        f"{[type(x).__name__ for x in chain]}"
    )
    return info.value


def _shape_checked(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.shape != y.shape:
        raise ValueError(f"shapes {x.shape} and {y.shape} differ")
    return x + y


def _tensor(data: np.ndarray, grad: bool = False) -> oplib.Tensor:
    return oplib.tensor(data, requires_grad=grad)


@pytest.fixture
def pair(ns: str) -> Any:
    """``ns::pair(Tensor x, Tensor y) -> Tensor`` with a cpu kernel refusing unequal shapes;
    returns the packet."""
    q = oplib.define(f"{ns}::pair", "(Tensor x, Tensor y) -> Tensor")
    oplib.impl(q, "cpu", _shape_checked)
    return getattr(oplib.ops, ns).pair


@pytest.fixture
def unary(ns: str) -> Any:
    """``ns::one(Tensor x) -> Tensor`` with a cpu kernel refusing 0-d arrays."""

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            raise ValueError("one: a 0-d array has no rows")
        return x * 2

    q = oplib.define(f"{ns}::one", "(Tensor x) -> Tensor")
    oplib.impl(q, "cpu", kernel)
    return getattr(oplib.ops, ns).one


_A, _B = np.ones((2, 3)), np.ones((3,))


def test_native_arrays_shape_error(pair):
    _raises(ValueError, lambda: pair(_A, _B), "shapes")


def test_native_arrays_shape_error_through_the_overload(pair):
    _raises(ValueError, lambda: pair.default(_A, _B), "shapes")


def test_native_arrays_one_argument(unary):
    _raises(ValueError, lambda: unary(np.float64(1.0) * np.ones(())), "0-d")


def test_tensors_shape_error(pair):
    _raises(ValueError, lambda: pair(_tensor(_A), _tensor(_B)), "shapes")


def test_tensor_one_argument(unary):
    _raises(ValueError, lambda: unary(_tensor(np.ones(()))), "0-d")


def test_tensors_of_three_arguments(ns):
    q = oplib.define(f"{ns}::three", "(Tensor x, Tensor y, Tensor z) -> Tensor")
    oplib.impl(q, "cpu", lambda x, y, z: _shape_checked(x, y) + z)
    op = getattr(oplib.ops, ns).three
    _raises(ValueError, lambda: op(_tensor(_A), _tensor(_B), _tensor(_A)), "shapes")


def test_tensors_requiring_grad_without_a_formula(pair):
    # the Autograd cache misses first; the op has no formula: the slow path says so
    a, b = _tensor(_A, grad=True), _tensor(_A, grad=True)
    e = _raises(RuntimeError, lambda: pair(a, b), "autograd|backward|derivative|formula")
    assert "pair" in str(e)


def test_missing_kernel_native(ns):
    q = oplib.define(f"{ns}::nokernel", "(Tensor x) -> Tensor")
    op = getattr(oplib.ops, ns).nokernel
    e = _raises(NoKernelError, lambda: op(_A), "nokernel")
    assert q in str(e)


def test_missing_kernel_tensor(ns):
    oplib.define(f"{ns}::nokernel2", "(Tensor x, Tensor y) -> Tensor")
    op = getattr(oplib.ops, ns).nokernel2
    _raises(NoKernelError, lambda: op(_tensor(_A), _tensor(_A)), "nokernel2")


def test_packet_with_several_overloads(ns):
    oplib.define(f"{ns}::both.Tensor", "(Tensor x, Tensor y) -> Tensor")
    oplib.define(f"{ns}::both.Scalar", "(Tensor x, Scalar y) -> Tensor")
    oplib.impl(f"{ns}::both.Tensor", "cpu", _shape_checked)
    packet = getattr(oplib.ops, ns).both
    _raises(ValueError, lambda: packet(_A, _B), "shapes")
    _raises(ValueError, lambda: packet(_tensor(_A), _tensor(_B)), "shapes")
    # the Scalar overload has no kernel
    _raises(NoKernelError, lambda: packet(_A, 2.0), "both.Scalar")
    # a call shape seen before: the packet's route, then the overload's cache
    _raises(ValueError, lambda: packet(_A, _B), "shapes")


def test_factory(ns):
    def make(size: list[int], *, device: Any = None) -> np.ndarray:
        if any(s < 0 for s in size):
            raise ValueError(f"make: negative size {size}")
        return np.zeros(size)

    oplib.define(f"{ns}::make", "(int[] size, *, Device? device=None) -> Tensor")
    oplib.impl(f"{ns}::make", "cpu", make)
    op = getattr(oplib.ops, ns).make
    _raises(ValueError, lambda: op([-1]), "negative size")
    _raises(ValueError, lambda: op.default([-1], device="cpu"), "negative size")
    assert op([2]).shape == (2,)  # remembered: the factory cache serves the next call
    _raises(ValueError, lambda: op([-1]), "negative size")


def test_factory_without_kernel(ns):
    oplib.define(f"{ns}::make2", "(int[] size, *, Device? device=None) -> Tensor")
    op = getattr(oplib.ops, ns).make2
    _raises(NoKernelError, lambda: op([1]), "make2")


def test_core_op_wrong_shape_on_a_fresh_array_class():
    """A core op's first call on an array class the caches have not seen (a numpy
    subclass): its shape error chains nothing."""

    class Sub(np.ndarray):
        pass

    a, b = np.ones((2, 3)).view(Sub), np.ones((4, 5)).view(Sub)
    _raises(ValueError, lambda: oplib.ops.oplib.matmul(a, b), "mismatch in its core dimension")


# -- a failed plugin's warning --------------------------------------------------------------


def test_a_failed_plugins_warning_points_at_the_registering_line():
    def boom(registrar: Any) -> None:
        raise RuntimeError("boom")

    bad = make_plugin("warns_at_user", oplib_define=boom)
    with pytest.warns(plugins.PluginWarning, match="'warns_at_user'.*boom") as caught:
        line = sys._getframe().f_lineno + 1
        record = plugins.register(bad)
    plugins.unregister(record.name)
    [w] = [w for w in caught if issubclass(w.category, plugins.PluginWarning)]
    assert (w.filename, w.lineno) == (__file__, line)


def test_an_installed_plugins_warning_points_at_the_first_use(tmp_path):
    """The real case: an installed plugin fails while the plugins load on first use; the
    warning names that line of the user's script, not oplib_core/plugins.py."""
    (tmp_path / "badplug.py").write_text(
        "import oplib_core as oplib\n"
        "@oplib.hookimpl\n"
        "def oplib_define(registrar):\n"
        "    raise RuntimeError('boom')\n"
    )
    info = tmp_path / "badplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: badplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[oplib]\nbad = badplug\n")
    script = tmp_path / "user_script.py"
    script.write_text(
        "import numpy as np\nimport oplib_core as oplib\n\nx = oplib.ops.oplib.neg(np.ones(2))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPLIB_")}
    env.update(PYTHONPATH=str(tmp_path), OPLIB_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(
        f"{script}:4: PluginWarning: oplib: plugin 'bad' (badplug) failed to load and was "
        "skipped: RuntimeError: boom in oplib_define()\n"
    ), r.stderr
