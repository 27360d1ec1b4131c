"""The core's fake kernels and gradient formulas are made on first use (``LazyKernel``): a
program that never fakes or differentiates imports neither, and to everything reading the
table a lazily made kernel is a ``Kernel`` like any other (``tests/test_lazy_ops.py``
compares the whole table, origins included, with ``OPLIB_LAZY_OPS=0``, where they are made
at once)."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from oplib_core._registry.entry import Kernel, LazyKernel
from oplib_core._registry.registry import REGISTRY
from oplib_core._registry.table import lazy_ops_enabled
from oplib_core.autograd import _core_autograd_plugin, _core_formulas
from oplib_core.fake import _core_fake_plugin, _core_fakes

from subproc import run_python

MODULES = ("oplib_core.fake._core_fakes", "oplib_core.autograd._core_formulas")

#: With OPLIB_LAZY_OPS=0 every op is built at load, and its kernels are made then.
in_process = pytest.mark.skipif(
    not lazy_ops_enabled(), reason="OPLIB_LAZY_OPS=0: the kernels are made at load"
)


def test_a_numpy_program_imports_no_fake_kernel_and_no_formula_until_it_differentiates() -> None:
    out = run_python(
        "import sys, numpy as np, oplib_core as oplib\n"
        f"MODULES = {MODULES!r}\n"
        "def have(): return [m for m in MODULES if m in sys.modules]\n"
        "oplib.ops.oplib.mul(oplib.ops.oplib.sin(np.ones(2)), 2.0)\n"
        "OUT['numpy'] = have()\n"
        "x = oplib.tensor([1.0, 2.0], requires_grad=True)\n"
        "oplib.ops.oplib.sin(x).sum().backward()\n"
        "OUT['grad'] = [round(g, 6) for g in x.grad.tolist()]\n"
        "OUT['autograd'] = have()\n"
        "m = oplib.ops.oplib.add(oplib.empty(3, device='meta'), 1.0)\n"
        "OUT['meta'] = [list(m.shape), str(m.device)]\n"
        "OUT['fake'] = have()\n"
    )
    assert out["numpy"] == []
    assert out["grad"] == [round(float(np.cos(1.0)), 6), round(float(np.cos(2.0)), 6)]
    # sin's formula is traced once, on fake tensors, to run as a program of numpy's kernels
    assert out["autograd"] == list(MODULES)
    assert out["meta"] == [[3], "meta"]
    assert out["fake"] == list(MODULES)


def test_the_plugins_name_exactly_the_kernels_their_modules_have() -> None:
    # the light plugin modules list the ops without importing the kernels' modules
    assert set(_core_fake_plugin.NAMES) == set(_core_fakes._placed())
    autograd = set(_core_autograd_plugin.NAMES)
    assert autograd - {"_narrow"} == set(_core_formulas.NAMES) - {"_narrow"}
    assert "_narrow" in _core_formulas.NAMES
    for name in ("sin", "add", "add_.Tensor", "add.out", "eq", "_to_copy"):
        assert name in autograd, name
    assert "zeros" not in autograd  # a factory takes no Tensor: nothing to differentiate


@in_process
def test_a_lazy_kernel_reads_as_the_kernel_it_makes() -> None:
    kernel = REGISTRY.ops["oplib::mul"].kernel("Fake")
    assert isinstance(kernel, LazyKernel)
    assert kernel.fn is _core_fakes.fake_kernel("mul")
    assert kernel.origin.plugin == "core-fake"
    assert kernel.origin.source.startswith(_core_fakes.__file__.removesuffix("c"))
    replaced = kernel._replace(allow_override=True)
    assert type(replaced) is Kernel and replaced.fn is kernel.fn and replaced.allow_override
    # (eq does not differentiate: its Autograd kernel is the module-level fallthrough)
    falls = REGISTRY.ops["oplib::eq"].kernel("Autograd")
    assert isinstance(falls, LazyKernel)
    copied = pickle.loads(pickle.dumps(falls))
    assert type(copied) is Kernel and copied.is_fallthrough and copied.key == "Autograd"


@in_process
def test_threads_reading_a_lazy_kernel_get_one_function() -> None:
    kernel = REGISTRY.ops["oplib::div"].kernel("Autograd")
    assert isinstance(kernel, LazyKernel)
    seen: list[object] = []
    barrier = threading.Barrier(8)

    def read() -> None:
        barrier.wait()
        seen.append(kernel.fn)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(fn is seen[0] for fn in seen)


def test_unregistering_core_fake_removes_its_kernels_made_or_not() -> None:
    out = run_python(
        "import numpy as np, oplib_core as oplib\n"
        "from oplib_core._registry.registry import REGISTRY\n"
        "oplib.ops.oplib.sin(np.ones(1))\n"  # sin is built (its fake kernel not made)
        "oplib.plugins.unregister('core-fake')\n"
        "OUT['fake'] = [REGISTRY.ops[q].has_kernel('Fake') for q in "
        "('oplib::sin', 'oplib::cos', 'oplib::_narrow')]\n"
        "OUT['meta'] = catch(oplib.ops.oplib.cos, oplib.empty(2, device='meta'))\n"
    )
    assert out["fake"] == [False, False, True]  # _narrow's is core-autograd's
    assert out["meta"][0] == "NoKernelError" and "oplib::cos" in out["meta"][1]
