"""The core kernels on the array API standard: the array-api-strict conformance backend
(``tests/strict_backend.py``) through ``oplib check``, dtype conversion through
``BackendSpec.dtypes``, and the ``NamespaceUnsupportedError`` of kernels a namespace lacks."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import array_api_strict as xs
import numpy as np
import pytest

import oplib_core as oplib
from oplib_core.backends import namespace_dtypes
from oplib_core.cli import main
from oplib_core.errors import NamespaceUnsupportedError, NoKernelError
from oplib_core.kernels import CORE_OPS, array_kernels, check_kernels
from oplib_core.testing import SampleInput
from tests import strict_backend


@pytest.fixture
def strict() -> Iterator[None]:
    uninstall = strict_backend.install()
    yield
    uninstall()


def test_every_core_op_binds_to_the_strict_namespace() -> None:
    check_kernels(array_kernels(xs))


def test_oplib_check_on_the_strict_backend_passes_every_op(strict: None) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["check", "--backend", "strict", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0, [r for r in report["results"] if r["status"] == "FAIL"]
    core = {f"oplib::{op.name}" for op in CORE_OPS}
    checked = {r["op"] for r in report["results"]}
    passed = {r["op"] for r in report["results"] if r["status"] == "PASS"}
    # every core op that has samples ran on array_api_strict and passed some check
    assert core & checked <= passed, (core & checked) - passed
    assert len(core & checked) >= 50
    assert report["summary"]["fail"] == 0


def test_tensor_dtype_names_a_foreign_dtype(strict: None) -> None:
    t = oplib.tensor(xs.asarray([1.0, 2.0], dtype=xs.float32))
    assert t.dtype == oplib.float32
    assert t.device == oplib.device("strict")
    u = t + t
    assert type(u._data).__module__.startswith("array_api_strict")
    assert u.dtype == oplib.float32


def test_numpy_dtypes_reach_a_strict_kernel_as_its_own(strict: None) -> None:
    z = oplib.zeros((2, 3), dtype=np.float64, device="strict")
    assert z.dtype == oplib.float64
    assert z._data.dtype == xs.float64
    c = oplib.tensor(xs.asarray([1, 2])).to(dtype=oplib.float32)
    assert c._data.dtype == xs.float32


def test_autograd_on_strict_arrays(strict: None) -> None:
    t = oplib.tensor(xs.asarray([1.0, -2.0], dtype=xs.float32), requires_grad=True)
    ((t * t).sum() + t.relu().sum()).backward()
    assert t.grad is not None
    assert t.grad.dtype == oplib.float32
    np.testing.assert_allclose(np.from_dlpack(t.grad._data), [3.0, -4.0])


def test_integer_division_gives_float64_on_a_float_only_divide(strict: None) -> None:
    k = array_kernels(xs)
    out = k["div"](xs.asarray([1, 2]), xs.asarray([2, 4]))
    assert out.dtype == xs.float64
    assert k["div.Scalar"](xs.asarray([3]), 2).dtype == xs.float64


def test_strict_declares_only_the_standard_dtypes() -> None:
    table = namespace_dtypes(xs)
    assert table[oplib.float32] is xs.float32
    assert oplib.bfloat16 not in table
    assert oplib.float16 not in table
    assert namespace_dtypes(np)[oplib.bfloat16] == oplib.bfloat16


def test_a_kernel_asked_for_a_dtype_the_namespace_lacks_says_so() -> None:
    with pytest.raises(TypeError, match="array_api_strict has no dtype bfloat16"):
        array_kernels(xs)["zeros"]([2], dtype=oplib.bfloat16, device=None)


def test_unsupported_dtype_samples_are_skips_with_the_reason(strict: None, teardown: Any) -> None:
    ns = f"aa{id(teardown) % 10_000}"
    lib = oplib.Library(ns, "DEF")
    teardown(lib._destroy)
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x + x, "CompositeExplicitAutograd")

    class Samples:
        @oplib.hookimpl
        def oplib_sample_inputs(self, op: Any, device: Any) -> list[SampleInput]:
            if op.name() != f"{ns}::twice":
                return []
            x = oplib.tensor(np.ones(3, dtype=np.float16), device=device)
            return [SampleInput((x,), name="float16 (3,)")]

    record = oplib.plugins.register(Samples(), name=f"{ns}-samples")
    teardown(lambda: oplib.plugins.unregister(record.name))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["check", f"{ns}::twice", "--backend", "strict", "--json"])
    rows = json.loads(out.getvalue())["results"]
    assert rows and all(r["status"] == "SKIP" for r in rows)
    assert "the strict backend does not support dtype float16" in rows[0]["reason"]
    assert "the strict backend does not support dtype float16" in rows[-1]["reason"]
    assert code in (0, 1)  # nothing was checked: the exit status is opcheck's business


def test_immutable_namespace_gets_a_clear_no_kernel_error() -> None:
    jnp = pytest.importorskip("jax.numpy")
    k = array_kernels(jnp)["copy_"]
    with pytest.raises(NamespaceUnsupportedError, match=r"oplib::copy_.*jax.numpy.*in-place"):
        k(jnp.zeros(2), jnp.ones(2))
    kernels = array_kernels(jnp)
    for name, args in [("add_.Scalar", (1.0,)), ("index_put_", ([None], jnp.ones(()), False))]:
        with pytest.raises(NamespaceUnsupportedError, match=r"jax.numpy.*in-place writes"):
            kernels[name](jnp.zeros(2), *args)
    with pytest.raises(NamespaceUnsupportedError, match=r"oplib::add: .*in-place writes"):
        kernels["add.out"](jnp.zeros(2), jnp.ones(2), out=jnp.zeros(2))
    # the functional index_put computes without writes on immutable arrays
    assert kernels["index_put"](jnp.zeros(2), [None], jnp.ones(()), False).tolist() == [1, 1]
    rows = [jnp.asarray([0, 0, 2])]
    out = kernels["index_put"](jnp.zeros(3), rows, jnp.ones(()), True)
    assert out.tolist() == [2.0, 0.0, 1.0]


def test_namespace_unsupported_error_is_a_no_kernel_error() -> None:
    e = NamespaceUnsupportedError("m", "oplib::copy_", "jax.numpy", "in-place writes")
    assert isinstance(e, NoKernelError)
    assert (e.op, e.namespace, e.needs) == ("oplib::copy_", "jax.numpy", "in-place writes")


def test_a_namespace_without_what_a_kernel_needs_gets_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from oplib_core.kernels import _array_kernels

    needs = {"copy_": ("in-place writes", lambda ns: ns is not xs)}
    monkeypatch.setattr(_array_kernels, "_NEEDS", needs)
    k = array_kernels(xs)["copy_"]
    with pytest.raises(
        NamespaceUnsupportedError,
        match=r"oplib::copy_: .* array namespace array_api_strict: it needs in-place writes",
    ):
        k(xs.zeros(2), xs.ones(2))
    assert array_kernels(np)["copy_"](np.zeros(2), np.ones(2)).tolist() == [1.0, 1.0]


def _namespaces() -> list[Any]:
    import array_api_compat.numpy as compat_numpy

    found: list[Any] = [compat_numpy, xs]
    try:
        import dask.array as da
    except ImportError:  # the dask plugin's library is optional
        return found
    return [*found, da]


_CASES: list[tuple[str, Any]] = [
    ("add", lambda a, i: (a, a)),
    ("sub.Scalar", lambda a, i: (a, 1.5)),
    ("rdiv.Scalar", lambda a, i: (a, 2.0)),
    ("div", lambda a, i: (i, i)),
    ("pow", lambda a, i: (a * a, a)),
    ("sigmoid", lambda a, i: (a,)),
    ("relu", lambda a, i: (a,)),
    ("sum", lambda a, i: (a, [1], True)),
    ("sum", lambda a, i: (i, None, False)),
    ("mean", lambda a, i: (a, [0], False)),
    ("amin", lambda a, i: (a, None, False)),
    ("matmul", lambda a, i: (a, a)),
    ("transpose", lambda a, i: (a, 0, -1)),
    ("permute", lambda a, i: (a, [1, 0])),
    ("unsqueeze", lambda a, i: (a, -1)),
    ("squeeze", lambda a, i: (a, None)),
    ("cat", lambda a, i: ([a, a], 1)),
    ("stack", lambda a, i: ([a, a], 0)),
    ("where", lambda a, i: (a > 0, a, a * 2)),
    ("clone", lambda a, i: (a,)),
]


@pytest.mark.parametrize("xp", _namespaces(), ids=lambda m: m.__name__)
@pytest.mark.parametrize(("name", "args"), _CASES, ids=[c[0] for c in _CASES])
def test_the_same_kernels_agree_on_every_namespace(xp: Any, name: str, args: Any) -> None:
    host = np.array([[0.5, -1.25], [2.0, 0.75]], dtype=np.float32)
    ints = np.array([[1, 2], [3, 4]], dtype=np.int64)
    expected = array_kernels(np)[name](*args(host, ints))
    wrap = xp.from_array if hasattr(xp, "from_array") else xp.asarray
    if xp is xs:
        a, i = xs.asarray(host), xs.asarray(ints)
    else:
        a, i = wrap(host), wrap(ints)
    out = array_kernels(xp)[name](*args(a, i))
    got = np.asarray(out.compute()) if hasattr(out, "compute") else np.from_dlpack(out)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got.dtype == expected.dtype


def test_copying_a_dtype_the_backend_lacks_says_what_to_do(strict: None) -> None:
    t = oplib.tensor(np.ones(2, dtype=oplib.bfloat16))
    # (a TypeError on a bfloat16 argument: the dispatcher's UnsupportedDtypeError quotes it)
    with pytest.raises(
        TypeError,
        match=r"copy to strict(:0)?: backend 'strict' has no bfloat16 dtype .*float32.*"
        r"t\.to\(oplib\.float32\)\.to\('strict'\)",
    ):
        t.to("strict")
    assert t.to(oplib.float32).to("strict").dtype == oplib.float32
    b = oplib.backends.get("strict")
    with pytest.raises(oplib.errors.ArgumentTypeError, match="has no float16 dtype") as e:
        b.from_host(np.ones(2, dtype=np.float16), oplib.device("strict"))
    assert e.value.value == oplib.float16


class _Pair(oplib.autograd.Function):
    """Two outputs; a loss that uses only the first leaves the second's gradient to the
    engine's zeros, made from the dtype the Function recorded for it."""

    @staticmethod
    def forward(ctx: Any, x: oplib.Tensor) -> tuple[oplib.Tensor, oplib.Tensor]:
        return x * 2.0, x * 3.0

    @staticmethod
    def backward(ctx: Any, g1: oplib.Tensor, g2: oplib.Tensor) -> oplib.Tensor:
        return g1 * 2.0 + g2 * 3.0


def test_a_function_on_a_backend_with_its_own_dtypes_records_oplib_dtypes(strict: None) -> None:
    x = oplib.tensor(np.array([1.0, 2.0], dtype=np.float32), device="strict", requires_grad=True)
    first, _ = _Pair.apply(x)
    first.sum().backward()
    assert x.grad is not None and x.grad.dtype == oplib.float32
    np.testing.assert_array_equal(x.grad.to("cpu").numpy(), [2.0, 2.0])
