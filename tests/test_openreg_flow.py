"""Device vendor code as torch vendors write it (torch's OpenReg flow): rename the private-use
backend, register the vendor's own device module, generate the Tensor methods (asking for
the Module/PackedSequence/Storage ones too), and use the device module's torch API.

Renaming is once per process: the flow runs in a fresh interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import backend_registration as br

from subproc import run_python

_TORCH_DEFAULT_SEED = 67280421310721


def test_openreg_flow():
    out = run_python("""
        import types, warnings
        import numpy as np
        import oplib_core as oplib
        import oplib_privateuse.device as template

        # the vendor's device module, as OpenReg's torch_openreg.openreg
        npu = types.ModuleType("torch_npu.npu")
        npu.device_count = lambda: 3
        npu.is_available = lambda: True
        npu.current_device = lambda: 1

        oplib.rename_privateuse1_backend("npu")
        with warnings.catch_warnings(record=True) as replaced:
            warnings.simplefilter("always")
            oplib.register_device_module("npu", npu)
        OUT["replaced"] = [(w.category.__name__, str(w.message)) for w in replaced]
        OUT["is_vendor"] = oplib.npu is npu
        OUT["custom_func"] = oplib.backend_registration.device_module_function("device_count")()
        OUT["again"] = catch(oplib.register_device_module, "npu", types.ModuleType("x"))
        OUT["unknown"] = catch(oplib.register_device_module, "foo", types.ModuleType("x"))
        with warnings.catch_warnings(record=True) as generated:
            warnings.simplefilter("always")
            oplib.generate_methods_for_privateuse1_backend(
                for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
            )
        OUT["generated"] = [(w.category.__name__, str(w.message)) for w in generated]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            OUT["defaults_silent"] = catch(
                oplib.generate_methods_for_privateuse1_backend, for_tensor=False
            )
        t = oplib.tensor([1.0, 2.0]).npu()  # the vendor module's current_device(): 1
        OUT["device"] = str(t.device)
        OUT["is_npu"] = t.is_npu
        OUT["template_kept"] = template.initial_seed()
    """)
    [(category, message)] = out["replaced"]
    assert category == "UserWarning"
    assert "oplib_core.npu" in message and "'oplib_privateuse.device'" in message
    assert "'torch_npu.npu'" in message
    assert out["is_vendor"] is True
    assert out["custom_func"] == 3
    assert out["again"][0] == "DeviceModuleError"
    assert "The runtime module of 'npu' has already been registered" in out["again"][1]
    # torch: "Expected one of cpu, cuda, ... device type at start of device string: foo"
    assert out["unknown"][0] == "DeviceModuleError"
    assert "Expected one of" in out["unknown"][1] and "npu" in out["unknown"][1]
    assert "device type at start of device string: foo" in out["unknown"][1]
    kinds = [m for c, m in out["generated"] if c == "UserWarning"]
    assert len(kinds) == len(out["generated"]) == 3
    assert any("no Module" in m and "for_module=True" in m for m in kinds)
    assert any("no PackedSequence" in m and "for_packed_sequence=True" in m for m in kinds)
    assert any("no Storage" in m and "for_storage=True" in m for m in kinds)
    assert out["defaults_silent"] is None
    assert out["device"] == "npu:1" and out["is_npu"] is True
    assert out["template_kept"] == _TORCH_DEFAULT_SEED


def test_register_device_module_before_the_rename_is_the_privateuse_name():
    out = run_python("""
        import types, warnings
        import oplib_core as oplib
        warnings.simplefilter("error")
        OUT["npu"] = catch(oplib.register_device_module, "npu", types.ModuleType("m"))
        oplib.rename_privateuse1_backend("npu")
        warnings.simplefilter("ignore")
        OUT["after"] = catch(oplib.register_device_module, "npu", types.ModuleType("m"))
    """)
    assert out["npu"][0] == "DeviceModuleError" and "start of device string: npu" in out["npu"][1]
    assert out["after"] is None


# -- device modules: initial_seed and namespace -----------------------------------------


@pytest.fixture
def seeds_restored():
    mod = oplib.privateuse1
    states = [mod.get_rng_state(i) for i in range(mod.device_count())]
    seeds = dict(mod._seeds)
    yield mod
    for i, st in enumerate(states):
        mod.set_rng_state(st, i)
    mod._seeds.clear()
    mod._seeds.update(seeds)
    mod.set_device(0)


@pytest.mark.skipif(
    br._get_privateuse1_backend_name() != "privateuse1", reason="renamed in this process"
)
def test_privateuse_initial_seed(seeds_restored):
    mod = seeds_restored
    mod._seeds.clear()
    assert mod.initial_seed() == _TORCH_DEFAULT_SEED  # torch's default seed
    mod.manual_seed(5)
    assert mod.initial_seed() == 5
    mod.set_device(1)
    assert mod.initial_seed() == _TORCH_DEFAULT_SEED  # manual_seed seeds the current device
    mod.manual_seed_all(11)
    assert mod.initial_seed() == 11
    mod.set_device(0)
    assert mod.initial_seed() == 11
    state = mod.get_rng_state()
    mod.set_rng_state(state)
    assert mod.initial_seed() == 11  # as torch: restoring a state keeps the seed
    assert isinstance(mod.initial_seed(), int)


def _public(module: object) -> list[str]:
    return sorted(n for n in dir(module) if not (n.startswith("__") and n.endswith("__")))


@pytest.mark.parametrize("name", ["oplib_privateuse.device", "oplib_cuda.device"])
def test_device_module_namespace_is_its_api(name):
    import importlib

    module = importlib.import_module(name)
    names = _public(module)
    api = [n for n in names if not n.startswith("_")]
    assert api == sorted(n for n in module.__all__ if not n.startswith("_"))
    for stray in ("np", "numpy", "threading", "Any", "Device", "annotations", "os", "runtime"):
        assert stray not in names, stray
    for fn in ("initial_seed", "manual_seed", "manual_seed_all", "get_rng_state"):
        assert callable(getattr(module, fn))
    assert set(module.__all__) <= set(names)


def test_cuda_initial_seed_without_a_gpu():
    import oplib_cuda.device as cuda

    if cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(oplib.BackendError):
        cuda.initial_seed()
    assert np.dtype(np.float16) in cuda.get_amp_supported_dtype()
