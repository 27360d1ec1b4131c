"""Every core op on cuda against numpy on the same data, and autograd on cuda against the
same chain on cpu. Marked ``cuda``: without cupy or a CUDA device every test here skips
with the reason (``cuda_or_skip`` in test_cuda_device.py).

The data is what ``oplib check`` uses: each op's public sample inputs
(``oplib.testing.sample_inputs``) made on cpu, then copied to both devices, so the numpy
run and the cupy run see the same values. A sample of a dtype cupy has no dtype for
(bfloat16, float8) is left out with the reason; an op all of whose samples are left out
skips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_cuda_device import cuda_or_skip

import oplib_core as oplib
from oplib_core.kernels import CORE_OPS
from oplib_core.testing import SampleInput, sample_inputs

pytestmark = pytest.mark.cuda

#: Ops the core samples cover beyond CORE_OPS: the copy between devices and the kernel
#: behind ``narrow``'s views, served by "default" kernels on cuda too.
EXTRA_OPS = ("_to_copy", "_narrow")
OP_NAMES = [op.name for op in CORE_OPS] + list(EXTRA_OPS)


@pytest.fixture(autouse=True)
def cp() -> Any:
    return cuda_or_skip()


# -- the comparison, written for any device (only the tests below ask for cuda) --------------


def dtypes_in(sample: SampleInput) -> list[np.dtype]:
    """The dtypes of a sample's tensors and dtype arguments."""
    found: dict[np.dtype, None] = {}

    def visit(v: Any) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, oplib.Tensor):
            found[np.dtype(v.dtype)] = None
        elif isinstance(v, np.dtype):
            found[v] = None
        elif isinstance(v, type) and issubclass(v, np.generic):
            found[np.dtype(v)] = None

    visit(sample.args)
    visit(list(sample.kwargs.values()))
    return list(found)


def cupy_lacks(dtype: np.dtype) -> bool:
    """cupy holds numpy's bool, integer, float and complex dtypes; ml_dtypes' formats
    (bfloat16, float8: numpy kind "V") it has no dtype for."""
    return dtype.kind not in "biufc"


def placed(value: Any, device: str) -> Any:
    """``value`` with every Tensor replaced by a fresh copy of its data on ``device`` (no
    autograd history, nothing shared with the sample, so an in-place op on one run cannot
    change the other's inputs) and every Device by ``device``."""
    if isinstance(value, oplib.Tensor):
        host = np.array(value.detach().to("cpu").numpy(), copy=True)
        return oplib.tensor(host, device=device)
    if isinstance(value, oplib.Device):
        return oplib.device(device)
    if isinstance(value, list):
        return [placed(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(placed(v, device) for v in value)
    if isinstance(value, dict):
        return {k: placed(v, device) for k, v in value.items()}
    return value


def flat_outputs(result: Any) -> list[Any]:
    """An op's result as a flat list (a Tensor, a tuple of them, ``Tensor[]``), native
    arrays (what factories, which take no Tensor, return) wrapped as Tensors."""
    if isinstance(result, (list, tuple)):
        return [x for r in result for x in flat_outputs(r)]
    if oplib.backends.for_type(type(result)) is not None:
        return [oplib.tensor(result)]
    return [result]


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """``(rtol, atol)``: how far a GPU result of ``dtype`` may be from numpy's. A few units
    in the last place (CUDA's math library and numpy's differ by ulps; reductions add in
    another order), tight enough for float64 to catch a computation done in float32."""
    if dtype == np.float16:
        return 2e-3, 1e-3
    if dtype in (np.float32, np.complex64):
        return 1e-5, 1e-6
    return 1e-10, 1e-12


def assert_same_output(got: Any, want: Any, device: str, where: str) -> None:
    """``got`` (from ``device``) equals ``want`` (from cpu): type, device, shape, dtype and
    values (bool and integer exactly, floats within :func:`tolerance`)."""
    if not isinstance(want, oplib.Tensor):
        assert got == want, f"{where}: {device} gave {got!r}, cpu gave {want!r}"
        return
    assert isinstance(got, oplib.Tensor), f"{where}: {device} gave a {type(got).__name__}"
    assert got.device == oplib.device(device), f"{where}: the result is on {got.device}"
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (
        f"{where}: {device} gave {got.dtype} {got.shape}, cpu gave {want.dtype} {want.shape}"
    )


def assert_same_values(got: Any, want: Any, device: str, where: str) -> None:
    if not isinstance(want, oplib.Tensor):
        return
    g = np.asarray(got.to("cpu").numpy())
    w = np.asarray(want.numpy())
    msg = f"{where}: {device} and numpy differ"
    if w.dtype.kind in "biu":
        np.testing.assert_array_equal(g, w, err_msg=msg)
    else:
        rtol, atol = tolerance(w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=msg)


def compare_with_cpu(
    name: str, device: str, lacks: Callable[[np.dtype], bool]
) -> tuple[int, list[str]]:
    """Run ``oplib::name`` on each of its cpu samples on cpu and on ``device``, and assert
    the results agree. Returns how many samples were compared and why the others were left
    out (a dtype ``lacks`` says ``device`` cannot hold)."""
    qualname = f"oplib::{name}"
    op = oplib.lookup(qualname)
    samples = sample_inputs(op, "cpu")
    assert samples, f"{qualname} has no sample inputs: oplib check does not cover it either"
    compared, left_out = 0, []
    for i, s in enumerate(samples):
        label = f"{qualname} sample {s.name or i!r}"
        missing = [str(d) for d in dtypes_in(s) if lacks(d)]
        if missing:
            left_out.append(f"{label}: {device} has no {', '.join(missing)} dtype")
            continue
        with oplib.no_grad():
            want = op(*placed(s.args, "cpu"), **placed(s.kwargs, "cpu"))
            got = op(*placed(s.args, device), **placed(s.kwargs, device))
        wants, gots = flat_outputs(want), flat_outputs(got)
        assert len(gots) == len(wants), (
            f"{label}: {device} gave {len(gots)} outputs, cpu gave {len(wants)}"
        )
        for j, (g, w) in enumerate(zip(gots, wants, strict=True)):
            where = f"{label}, output {j}"
            assert_same_output(g, w, device, where)
            if s.compare_values:
                assert_same_values(g, w, device, where)
        compared += 1
    return compared, left_out


# -- on cuda ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OP_NAMES)
def test_core_op_on_cuda_matches_numpy(name: str, cp: Any) -> None:
    compared, left_out = compare_with_cpu(name, "cuda:0", cupy_lacks)
    if not compared:
        pytest.skip("; ".join(left_out))


def test_every_core_op_compares_at_least_one_sample_on_cuda(cp: Any) -> None:
    """Which ops only have samples cupy cannot hold (those skip above): none today, and a
    new one should get a float32 or integer sample."""
    only_lacking = []
    for name in OP_NAMES:
        samples = sample_inputs(oplib.lookup(f"oplib::{name}"), "cpu")
        if all(any(cupy_lacks(d) for d in dtypes_in(s)) for s in samples):
            only_lacking.append(name)
    assert only_lacking == []


def test_results_are_cupy_arrays_on_the_inputs_device(cp: Any) -> None:
    x = oplib.tensor(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3), device="cuda")
    for out in (x.exp(), x + x, x.sum(dim=[1]), x @ x.T, oplib.ops.oplib.transpose(x, 0, 1)):
        assert isinstance(out.native, cp.ndarray)
        assert out.native.device.id == 0
        assert out.device == oplib.device("cuda:0")


# -- autograd ---------------------------------------------------------------------------------


def chain_grads(device: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Gradients of a small chain of core ops (elementwise, matmul, reductions, a
    broadcast) with respect to both inputs, computed on ``device``; and the loss."""
    rng = np.random.default_rng(29)
    a = oplib.tensor(rng.uniform(0.5, 2.0, (3, 4)), device=device, requires_grad=True)
    b = oplib.tensor(rng.uniform(-1.0, 1.0, (4,)), device=device, requires_grad=True)
    h = (a * b).tanh() + a.exp() / (b * b + 1.0)
    loss = (h @ h.T).mean() + a.sqrt().sum() - (b.sigmoid() * 2.0).sum()
    loss.backward()
    assert a.grad is not None and b.grad is not None
    assert a.grad.device == oplib.device(device) and b.grad.device == oplib.device(device)
    return (
        np.asarray(a.grad.to("cpu").numpy()),
        np.asarray(b.grad.to("cpu").numpy()),
        float(loss.to("cpu").item()),
    )


def test_autograd_chain_on_cuda_equals_the_cpu_run(cp: Any) -> None:
    ga_cpu, gb_cpu, loss_cpu = chain_grads("cpu")
    ga, gb, loss = chain_grads("cuda:0")
    np.testing.assert_allclose(loss, loss_cpu, rtol=1e-11)
    np.testing.assert_allclose(ga, ga_cpu, rtol=1e-10, atol=1e-12, err_msg="d loss / d a")
    np.testing.assert_allclose(gb, gb_cpu, rtol=1e-10, atol=1e-12, err_msg="d loss / d b")


def test_autograd_grad_on_cuda_float32(cp: Any) -> None:
    x = oplib.tensor(np.linspace(-1.0, 1.0, 8, dtype=np.float32), device="cuda", requires_grad=True)
    (g,) = oplib.autograd.grad((x * x * x).sum(), [x])
    assert isinstance(g.native, cp.ndarray) and g.dtype == np.float32
    np.testing.assert_allclose(
        g.to("cpu").numpy(), 3 * np.linspace(-1.0, 1.0, 8, dtype=np.float32) ** 2, rtol=1e-6
    )
