"""examples/triton_replacement.py, what replaces ``triton_op``/``wrap_triton``: its op on cpu
(against numpy, gradients, opcheck), under FakeTensorMode, its cuda kernel registered for the
cuda key (everywhere) and run on a GPU (tests marked ``cuda``: skipped, with the reason,
without cupy and a GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import oplib_core as oplib

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "triton_replacement.py"
CUDA = oplib.backends.get("cuda")
STATUS = CUDA.status()
gpu_present = pytest.mark.skipif(STATUS is not None, reason=f"cuda unavailable: {STATUS}")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("triton_replacement_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_cpu_matches_numpy_and_differentiates(example):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 2.0, np.float32)
    out = example.add_scaled(x, y, 0.5)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, x + 0.5 * y)
    tx = oplib.tensor(x, requires_grad=True)
    ty = oplib.tensor(y, requires_grad=True)
    example.add_scaled(tx, ty, 0.5).sum().backward()
    assert tx.grad.tolist() == np.ones((2, 3)).tolist()
    assert ty.grad.tolist() == np.full((2, 3), 0.5).tolist()


def test_opcheck_on_cpu(example):
    # float32, the cuda kernel's one dtype: on a GPU opcheck compares cuda with cpu too
    rng = np.random.default_rng(0)
    x = oplib.tensor(rng.random((3, 4), dtype=np.float32), requires_grad=True)
    y = oplib.tensor(rng.random((3, 4), dtype=np.float32), requires_grad=True)
    oplib.opcheck(example.add_scaled, (x, y, 1.5))


def test_fake_kernel(example):
    with oplib.FakeTensorMode() as mode:
        x = mode.from_real(oplib.ones(2, 3))
        out = example.add_scaled(x, x, 2.0)
        assert out.shape == (2, 3) and out.dtype == oplib.float32
        with pytest.raises(RuntimeError, match=r"shapes differ: \(2, 3\) and \(3,\)"):
            example.add_scaled(x, mode.from_real(oplib.ones(3)), 2.0)


def test_cuda_kernel_serves_the_cuda_key(example):
    handle = oplib.library.get_kernel(example.add_scaled, "CUDA")
    assert handle.served_by == "cuda"
    assert handle.source.startswith(f"{EXAMPLE}:")
    assert oplib.library.get_kernel(example.add_scaled, "CPU").served_by == "cpu"


def test_main_runs(example, capsys):
    example.main()
    printed = capsys.readouterr().out
    assert "cpu: [[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]" in printed
    assert "fake: (2, 3)" in printed


@pytest.mark.cuda
@gpu_present
def test_raw_kernel_on_a_gpu(example):
    x = oplib.tensor(np.linspace(0, 1, 1000, dtype=np.float32)).to("cuda")
    y = oplib.tensor(np.linspace(1, 2, 1000, dtype=np.float32)).to("cuda")
    out = example.add_scaled(x, y, -0.25)
    assert out.device.type == "cuda"
    expected = np.linspace(0, 1, 1000, dtype=np.float32) - 0.25 * np.linspace(
        1, 2, 1000, dtype=np.float32
    )
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-6)
    with pytest.raises(TypeError, match="float32 only, got float64"):
        example.add_scaled(x.double(), y.double(), 1.0)
