"""One vocabulary for "this backend cannot hold that dtype" (issue 29).

A backend declares the dtypes it holds (``BackendSpec.dtypes``); core refuses the others with
``BackendDtypeError`` wherever data or a dtype argument reaches it (copies, ``empty``, every
op's ``ScalarType`` argument), and ``oplib check`` and ``opcheck`` report such samples as skips
with the reason. Proved on ``cupylike`` (tests/cupylike_backend.py): numpy memory declaring
cupy's dtypes, without a guard of its own, as the cuda plugin is.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import Device
from oplib_core.cli import main
from oplib_core.errors import BackendDtypeError, UnsupportedDtypeError
from oplib_core.testing._runner import check_ops
from tests import cupylike_backend
from tests.cupylike_backend import CUPY_DTYPES, MADE, NAME, CupyLikeArray

from helpers import Teardown
from subproc import run_python

ops = oplib.ops.oplib
EXTENSION = (oplib.bfloat16, oplib.float8_e4m3fn, oplib.float8_e5m2, oplib.float8_e8m0fnu)


@pytest.fixture(scope="module")
def cupylike() -> Iterator[oplib.backends.Backend]:
    uninstall = cupylike_backend.install()
    try:
        yield oplib.backends.get(NAME)
    finally:
        uninstall()


def _bf16(values: list[float]) -> oplib.Tensor:
    return oplib.tensor(np.array(values, dtype=np.float32).astype(oplib.bfloat16))


# -- oplib check over a backend without bfloat16 ----------------------------------------------


def test_oplib_check_checks_every_op_in_the_dtypes_it_holds_and_skips_the_rest(
    cupylike: oplib.backends.Backend,
) -> None:
    MADE.clear()
    report = check_ops(backends=[NAME])
    failed = [(r.op, r.check, r.reason) for r in report.rows if r.status == "FAIL"]
    assert not failed, failed[:5]
    # every core op with samples ran on it (a PASS in some check)
    by_op: dict[str, set[str]] = {}
    for r in report.rows:
        by_op.setdefault(r.op, set()).add(r.status)
    assert len(by_op) > 140
    assert [op for op, seen in by_op.items() if "PASS" not in seen] == []
    # ... in the dtypes cupy holds, and never in one it lacks
    assert {oplib.float16, oplib.float32, oplib.float64, oplib.int64, oplib.bool_} <= MADE
    assert MADE <= CUPY_DTYPES
    # the bfloat16 samples (of ops whose float32 samples passed) are skips with the reason
    skips = report.sample_skips()
    bf16 = "the cupylike backend does not support dtype bfloat16: cupylike has no bfloat16"
    assert any(reason.startswith(bf16) for reason in skips)
    zeros = [r for r in report.rows if r.op == "oplib::zeros" and r.check == "test_backends"]
    assert zeros[0].status == "PASS"
    assert any("bfloat16" in s["reason"] for s in zeros[0].skipped_samples)


def test_oplib_check_cli_reports_the_skipped_samples(cupylike: oplib.backends.Backend) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["check", "oplib::zeros", "oplib::add", "--backend", NAME])
    text = out.getvalue()
    assert code == 0, text
    assert "samples skipped (the op's other samples were checked):" in text
    assert "does not support dtype bfloat16: cupylike has no bfloat16" in text
    assert "0 failed" in text
    out = io.StringIO()
    with redirect_stdout(out):
        main(["check", "oplib::zeros", "--backend", NAME, "--json"])
    data = json.loads(out.getvalue())
    assert data["summary"]["fail"] == 0 and data["summary"]["skipped_samples"] >= 1
    row = next(r for r in data["results"] if r["check"] == "test_backends")
    assert any("bfloat16" in s["reason"] for s in row["skipped_samples"])


def test_opcheck_skips_the_backend_for_a_sample_it_cannot_hold(
    cupylike: oplib.backends.Backend,
) -> None:
    x = _bf16([1.5, 2.25, 3.0])
    res = oplib.opcheck(ops.add.default, (x, x))
    assert set(res.values()) == {"SUCCESS"}
    (row,) = [d for d in res.details if d.backend == NAME and d.check == "test_backends"]
    assert row.status == "SKIP"
    assert "does not support dtype bfloat16" in row.reason


# -- every refusal is a BackendDtypeError from core -------------------------------------------


@pytest.mark.parametrize("dtype", EXTENSION, ids=str)
@pytest.mark.parametrize(
    "make",
    [
        lambda d: oplib.empty(2, dtype=d, device=NAME),
        lambda d: oplib.zeros(2, dtype=d, device=NAME),
        lambda d: oplib.ones(2, dtype=d, device=NAME),
        lambda d: oplib.full([2], 1.0, dtype=d, device=NAME),
        lambda d: oplib.arange(3, dtype=d, device=NAME),
        lambda d: oplib.arange(0, 3, 1, dtype=d, device=NAME),
    ],
    ids=["empty", "zeros", "ones", "full", "arange", "arange.start"],
)
def test_factories_refuse_a_dtype_the_backend_lacks(
    cupylike: oplib.backends.Backend, make: object, dtype: np.dtype
) -> None:
    # numpy would make these arrays: the refusal is core's, from BackendSpec.dtypes
    with pytest.raises(BackendDtypeError) as info:
        make(dtype)  # type: ignore[operator]
    e = info.value
    assert (e.backend, e.dtype) == (NAME, dtype)
    assert isinstance(e, TypeError) and not isinstance(e, UnsupportedDtypeError)
    held = "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, "
    held += "float64, complex64, complex128"  # by kind then size, as docs/dtypes.md lists them
    assert f"backend {NAME!r} has no {dtype} dtype (it holds {held});" in str(e)
    assert "ask for a dtype it holds (e.g. oplib.float32)" in str(e)
    assert f"keep {dtype} tensors on the cpu" in str(e)
    assert "cupylike has no bfloat16 or float8 dtypes, as cupy" in str(e)  # its dtype_hint
    assert not getattr(e, "__notes__", None)  # not "raised by the kernel": it never ran
    assert make(oplib.float16).dtype == oplib.float16  # type: ignore[operator]


def test_the_error_names_the_op(cupylike: oplib.backends.Backend) -> None:
    with pytest.raises(BackendDtypeError, match=r"^oplib::full\(\): backend 'cupylike'"):
        oplib.full([2], 1.0, dtype=oplib.bfloat16, device=NAME)


def test_astype_and_dtype_arguments_are_refused_on_the_fast_path_too(
    cupylike: oplib.backends.Backend,
) -> None:
    t = oplib.tensor(np.ones(3, np.float32), device=NAME)
    assert type(t._data) is CupyLikeArray
    for _ in range(3):  # the first calls fill the fast path's caches
        assert ops.astype.default(t._data, oplib.float16).dtype == oplib.float16
        with pytest.raises(BackendDtypeError, match=r"oplib::astype\(\): .* no bfloat16"):
            ops.astype.default(t._data, oplib.bfloat16)
    with pytest.raises(BackendDtypeError, match=r"oplib::_to_copy\(\): .* no bfloat16"):
        t.to(oplib.bfloat16)
    with pytest.raises(BackendDtypeError, match=r"oplib::sum\(\): .* no float8_e5m2"):
        t.sum(dtype=oplib.float8_e5m2)
    assert t.sum(dtype=oplib.float64).dtype == oplib.float64


def test_a_custom_op_dtype_argument_is_refused(
    cupylike: oplib.backends.Backend, teardown: Teardown
) -> None:
    lib = oplib.Library("dtypeguard", "DEF")
    teardown(lib)
    lib.define("cast(Tensor x, ScalarType dtype) -> Tensor")
    lib.impl("cast", lambda x, dtype: x.astype(dtype), NAME)
    x = oplib.tensor(np.ones(2, np.float32), device=NAME)
    with pytest.raises(BackendDtypeError, match=r"dtypeguard::cast\(\): .* no bfloat16"):
        oplib.ops.dtypeguard.cast(x, oplib.bfloat16)
    assert oplib.ops.dtypeguard.cast(x, oplib.int32).dtype == oplib.int32


def test_copies_to_the_backend_are_refused_before_any_data_moves(
    cupylike: oplib.backends.Backend,
) -> None:
    x = _bf16([1.0, 2.0])
    # a BackendDtypeError, not the UnsupportedDtypeError the dispatcher makes of a kernel's
    # TypeError on a bfloat16 argument
    with pytest.raises(BackendDtypeError, match=r"copy to cupylike: .* no bfloat16") as info:
        x.to(NAME)
    assert "t.to(oplib.float32).to('cupylike')" in str(info.value)
    with pytest.raises(BackendDtypeError, match="copy to cupylike"):
        oplib.tensor(np.zeros(2, oplib.float8_e4m3fn), device=NAME)
    with pytest.raises(BackendDtypeError, match="copy to cupylike"):
        oplib.tensor(np.zeros(2, np.float32), dtype=oplib.bfloat16, device=NAME)
    assert x.to(oplib.float32).to(NAME).dtype == oplib.float32
    # back to the cpu as bfloat16: the cpu holds it (the copy is checked where it arrives)
    y = oplib.tensor(np.array([1.5, 2.0], np.float32), device=NAME)
    assert y.to("cpu", oplib.bfloat16).dtype == oplib.bfloat16


def test_backend_methods_refuse_before_the_spec_is_called(
    cupylike: oplib.backends.Backend,
) -> None:
    with pytest.raises(BackendDtypeError, match=r"empty on cupylike: .* no bfloat16"):
        cupylike.empty((2,), oplib.bfloat16, Device(NAME))
    with pytest.raises(BackendDtypeError, match=r"copy to cupylike: .* no float8_e5m2"):
        cupylike.from_host(np.zeros(2, oplib.float8_e5m2), Device(NAME))
    assert cupylike.empty((2,), oplib.float16, Device(NAME)).dtype == oplib.float16
    # a device-generic kernel's allocation goes through the same guard
    x = oplib.tensor(np.ones(2, np.float32), device=NAME)
    with pytest.raises(BackendDtypeError, match=r"empty on cupylike: .* no bfloat16"):
        oplib.native.new_empty(x, (3,), oplib.bfloat16)
    assert type(oplib.native.new_empty(x, (3,), oplib.float16)) is CupyLikeArray
    # a backend that holds every dtype checks nothing
    cpu = oplib.backends.get("cpu")
    for dtype in EXTENSION:
        cpu.check_dtype(dtype, "test")
    assert cpu.empty((2,), oplib.bfloat16, Device("cpu")).dtype == oplib.bfloat16


def test_check_dtype_follows_a_dtypes_table_that_changes() -> None:
    """``check_dtype`` answers from the table ``dtypes()`` last gave while it gives the same
    object, and from the new one as soon as it gives another (JAX's 64-bit mode)."""
    tables = {
        "x64": frozenset(map(np.dtype, ("float32", "float64"))),
        "x32": frozenset(map(np.dtype, ("float32",))),
    }
    mode = ["x64"]
    calls: list[str] = []

    def dtypes() -> frozenset[np.dtype]:
        calls.append(mode[0])
        return tables[mode[0]]

    backend = oplib.backends.Backend(
        oplib.BackendSpec(name="switching", array_types=(bytearray,), dtypes=dtypes)
    )
    for _ in range(3):
        backend.check_dtype(oplib.float64, "op()")
    mode[0] = "x32"
    with pytest.raises(BackendDtypeError, match=r"op\(\): backend 'switching' has no float64"):
        backend.check_dtype(oplib.float64, "op()")
    backend.check_dtype(oplib.float32, "op()")
    mode[0] = "x64"
    backend.check_dtype(oplib.float64, "op()")
    assert set(calls) == {"x64", "x32"}


def test_the_suggested_cast_is_a_dtype_the_backend_holds() -> None:
    jax_like = oplib.backends.Backend(
        oplib.BackendSpec(
            name="x32",
            array_types=(bytearray,),
            dtypes=lambda: frozenset(map(np.dtype, ("float32", "int32", "uint32", "complex64"))),
        )
    )
    for dtype, cast in [
        (oplib.float64, "float32"),
        (oplib.int64, "int32"),
        (oplib.uint64, "uint32"),
        (oplib.complex128, "complex64"),
        (oplib.bfloat16, "float32"),
    ]:
        assert f"e.g. oplib.{cast})" in str(jax_like.dtype_error(dtype, "op()"))


def test_cuda_declares_cupys_dtypes_without_importing_cupy() -> None:
    out = run_python("""
        import sys
        import oplib_core as oplib
        cuda = oplib.backends.get("cuda")
        OUT["dtypes"] = sorted(d.name for d in cuda.spec.dtypes())
        OUT["refused"] = catch(oplib.zeros, 2, dtype=oplib.bfloat16, device="cuda")[0]
        OUT["cupy imported"] = "cupy" in sys.modules
    """)
    assert out == {
        "dtypes": sorted(d.name for d in CUPY_DTYPES),
        "refused": "BackendDtypeError",
        "cupy imported": False,
    }
    hint = oplib.backends.get("cuda").spec.dtype_hint
    assert "jax backend" in hint and "bfloat16 on the GPU" in hint


@pytest.mark.fastpath
@pytest.mark.parametrize("dtype", EXTENSION, ids=str)
def test_a_factory_served_from_the_cache_refuses_as_its_first_call_does(
    cupylike: oplib.backends.Backend, dtype: np.dtype
) -> None:
    zeros = oplib.ops.oplib.zeros.default
    zeros([2], dtype=oplib.float32, device=NAME)  # the device is served from now on
    assert zeros._opcache.serves_factory(([2],), {"dtype": dtype, "device": NAME})
    with pytest.raises(BackendDtypeError) as info:
        zeros([2], dtype=dtype, device=NAME)
    assert (info.value.backend, info.value.dtype) == (NAME, dtype)
    assert f"oplib::zeros(): backend {NAME!r} has no {dtype} dtype" in str(info.value)
    assert zeros([2], dtype=oplib.float64, device=NAME).dtype == oplib.float64


def _counting_backend(fixed: bool) -> tuple[oplib.backends.Backend, list[int]]:
    calls: list[int] = []
    table = frozenset(map(np.dtype, ("float32", "float64")))

    def dtypes() -> frozenset[np.dtype]:
        calls.append(1)
        return table

    spec = oplib.BackendSpec(
        name="fixedtable", array_types=(bytearray,), dtypes=dtypes, dtypes_fixed=fixed
    )
    return oplib.backends.Backend(spec), calls


def test_a_fixed_dtypes_table_is_read_once() -> None:
    """``dtypes_fixed=True``: ``check_dtype`` answers a dtype the table holds without a call
    of ``dtypes()``, and still refuses the others; without it, every check asks again."""
    fixed, calls = _counting_backend(True)
    assert fixed.fixed_dtypes() == {oplib.float32, oplib.float64}
    calls.clear()
    for _ in range(5):
        fixed.check_dtype(oplib.float32, "op()")
    assert calls == []
    with pytest.raises(BackendDtypeError, match=r"op\(\): backend 'fixedtable' has no int8"):
        fixed.check_dtype(oplib.int8, "op()")
    changing, calls = _counting_backend(False)
    assert changing.fixed_dtypes() is None
    changing.check_dtype(oplib.float32, "op()")
    calls.clear()
    for _ in range(5):
        changing.check_dtype(oplib.float32, "op()")
    assert len(calls) == 5
    assert oplib.backends.get("cpu").fixed_dtypes() is None  # holds every dtype
    assert oplib.backends.get("cuda").spec.dtypes_fixed  # cupy's dtypes never change


@pytest.mark.fastpath
def test_factories_and_dtype_arguments_look_a_fixed_table_up_without_checking(
    cupylike: oplib.backends.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cupylike.fixed_dtypes() == CUPY_DTYPES
    zeros = oplib.ops.oplib.zeros.default
    t = oplib.tensor(np.ones(3, np.float32), device=NAME)
    for _ in range(2):  # fills the caches (and the dtype guard)
        zeros([2], dtype=oplib.float16, device=NAME)
        ops.astype.default(t._data, oplib.float16)
    checked: list[object] = []
    check = oplib.backends.Backend.check_dtype

    def counted(self: oplib.backends.Backend, dtype: object, api: str, **kw: object) -> None:
        checked.append(dtype)
        check(self, dtype, api, **kw)

    monkeypatch.setattr(oplib.backends.Backend, "check_dtype", counted)
    oplib.ops.oplib.zeros.default._opcache.invalidate()  # served again: the new check bound
    ops.astype.default._opcache.invalidate()
    for _ in range(3):
        assert zeros([2], dtype=oplib.float16, device=NAME).dtype == oplib.float16
        assert ops.astype.default(t._data, oplib.float64).dtype == oplib.float64
    warm = len(checked)
    for _ in range(3):
        assert zeros([2], dtype=oplib.float16, device=NAME).dtype == oplib.float16
        assert ops.astype.default(t._data, oplib.float64).dtype == oplib.float64
    assert len(checked) == warm  # held dtypes: looked up, never checked
    for make in (
        lambda: zeros([2], dtype=oplib.bfloat16, device=NAME),
        lambda: ops.astype.default(t._data, oplib.bfloat16),
    ):
        with pytest.raises(BackendDtypeError, match="no bfloat16"):
            make()
    assert checked[warm:] == [oplib.bfloat16, oplib.bfloat16]  # the rest still are
