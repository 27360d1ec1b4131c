"""The backend contract: the core uses no more of a native array than it documents, the
backend guide shows the contract as the code computes it, and ``oplib check --contract``
reports what a backend lacks in that vocabulary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core import _contract as contract
from oplib_core._tensor.tensor import Tensor
from oplib_core.cli import main
from oplib_core.kernels import CORE_OPS, array_kernels
from oplib_core.testing import sample_inputs

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "writing-a-backend.md"
START, END = "<!-- contract: start -->", "<!-- contract: end -->"


# -- the native array: the core uses only what the contract lists ------------------------

USED: set[str] = set()


class Recording:
    """A numpy array that records every attribute the core reads from it."""

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray) -> None:
        object.__setattr__(self, "_a", a)

    def __getattr__(self, name: str) -> Any:
        USED.add(name)
        return getattr(self._a, name)

    def __getitem__(self, key: Any) -> Any:
        USED.add("__getitem__")
        return _wrap(self._a[key])


def _recorded(name: str) -> Any:
    def method(self: Recording, *args: Any, **kwargs: Any) -> Any:
        USED.add(name)
        return getattr(self._a, name)(*args, **kwargs)

    return method


for _dunder in (
    "__setitem__",
    "__len__",
    "__iter__",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__array__",
    "__dlpack__",
    "__dlpack_device__",
    "__array_namespace__",
    "__add__",
    "__mul__",
    "__sub__",
    "__truediv__",
    "__neg__",
    "__matmul__",
):
    setattr(Recording, _dunder, _recorded(_dunder))


def _unwrap(x: Any) -> Any:
    if isinstance(x, Recording):
        return x._a
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y) for y in x)
    return x


def _wrap(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return Recording(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_wrap(y) for y in x)
    return x


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


@pytest.fixture
def recording_backend(teardown):
    spec = oplib.BackendSpec(
        name="recording",
        array_types=(Recording,),
        to_host=lambda a: np.array(a._a, copy=True),
        from_host=lambda a, d: Recording(np.array(a, copy=True)),
    )
    teardown(oplib.backends.register(spec))
    lib = oplib.Library("oplib", "IMPL")
    teardown(lib)
    kernels = array_kernels(np)
    for core in CORE_OPS:

        def kernel(*args: Any, _fn: Any = kernels[core.name], **kwargs: Any) -> Any:
            return _wrap(_fn(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

        lib.impl(core.name, kernel, "recording")


def test_the_core_uses_only_the_array_contract(recording_backend):
    """Every core op's samples, forward, backward and back to the host, on arrays that
    record what is read from them: the core (the kernels here unwrap their inputs) needs
    exactly the attributes the contract lists, and the list is not padded."""
    USED.clear()
    device = oplib.device("recording")
    ran = 0
    for core in CORE_OPS:
        op = oplib.lookup(f"oplib::{core.name}")
        for s in sample_inputs(op, device):
            out = op(*s.args, **s.kwargs)
            leaves = [t for t in _tensors([*s.args, *s.kwargs.values()]) if t.requires_grad]
            outs = [o for o in _tensors(out) if o.requires_grad]
            if leaves and outs:
                oplib.autograd.grad(outs, leaves, [oplib.ones_like(o) for o in outs])
            for o in _tensors(out):
                o.to("cpu")
            ran += 1
    assert ran > 50
    assert set(USED) == {name for name, _ in contract.ARRAY}


# -- the guide shows the contract the code computes ---------------------------------------


def test_backend_guide_shows_the_contract_as_computed():
    text = GUIDE.read_text()
    assert START in text and END in text
    shown = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert shown == contract.markdown().strip(), (
        "docs/writing-a-backend.md is stale: replace the text between the contract markers "
        "with oplib_core._contract.markdown() (scripts/backend_contract.py does it)"
    )


def test_minimum_op_set_follows_the_formulas():
    ops = contract.formula_ops()
    # gradients of sum broadcast back; of cat narrow; of matmul transpose
    assert "oplib::broadcast_to" in ops and "sum" in ops["oplib::broadcast_to"]
    assert "oplib::_narrow" in ops and "cat" in ops["oplib::_narrow"]
    assert "oplib::transpose" in ops and "matmul" in ops["oplib::transpose"]
    for q in ops:
        oplib.lookup(q)  # every name is a real op


def test_spec_fields_come_from_the_signature():
    fields = {name: (required, default) for name, required, default in contract.spec_fields()}
    assert fields["name"] == (True, "")
    assert fields["from_host"] == (False, "None")
    assert set(fields) == set(oplib.BackendSpec._fields)


# -- what a backend lacks ------------------------------------------------------------------


class Bare:
    """An array class with no shape/dtype/ndim at all."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a


class Naked(Bare):
    """The same, for a second backend."""


def test_check_backend_reports_spec_array_and_op_gaps(teardown):
    teardown(oplib.backends.register(oplib.BackendSpec(name="bareaccel", array_types=(Bare,))))
    gaps = contract.check_backend(oplib.backends.get("bareaccel"))
    required = {(g.kind, g.item) for g in gaps if g.required}
    assert ("spec", "from_host") in required and ("spec", "to_host") in required
    assert ("op", "oplib::zeros") in required and ("op", "oplib::mul") in required
    assert any(g.kind == "op" and not g.required for g in gaps)  # the rest of the op set
    why = {g.item: g.why for g in gaps}
    assert "the gradients of" in why["oplib::broadcast_to"]

    teardown(
        oplib.backends.register(
            oplib.BackendSpec(
                name="barearrays",
                array_types=(Naked,),
                from_host=lambda a, d: Naked(a),
                to_host=lambda a: a.a,
            )
        )
    )
    gaps = contract.check_backend(oplib.backends.get("barearrays"))
    assert {g.item for g in gaps if g.kind == "array"} == {"shape", "dtype", "ndim", "__getitem__"}


def test_the_template_meets_the_contract():
    gaps = contract.check_backend(oplib.backends.get("privateuse1"))
    assert [g for g in gaps if g.required] == []


def test_cli_contract(capsys, monkeypatch, teardown):
    monkeypatch.setenv("COLUMNS", "250")
    teardown(oplib.backends.register(oplib.BackendSpec(name="bareaccel", array_types=(Bare,))))
    assert main(["check", "--backend", "bareaccel", "--contract"]) == 1
    text = capsys.readouterr().out
    assert "backend 'bareaccel' lacks what the core needs" in text
    assert "from_host" in text and "oplib::zeros" in text and "the gradients of" in text
    assert main(["check", "--backend", "privateuse1", "--contract"]) == 0
    assert "meets the backend contract" in capsys.readouterr().out
    assert main(["check", "-b", "bareaccel", "--contract", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert {"kind", "item", "required", "why"} == set(data["bareaccel"][0])
    assert main(["check", "--contract"]) == 2
    assert "--contract checks the backends named with --backend" in capsys.readouterr().err


# -- what each shipped backend cannot hold: declared, and refused in one vocabulary ------------

#: The backends the project ships (``oplib.backends.DISTRIBUTIONS``).
SHIPPED = sorted(oplib.backends.DISTRIBUTIONS)
#: Every dtype oplib names.
ALL_DTYPES = [
    oplib.bool_,
    *(oplib.int8, oplib.int16, oplib.int32, oplib.int64),
    *(oplib.uint8, oplib.uint16, oplib.uint32, oplib.uint64),
    *(oplib.float16, oplib.float32, oplib.float64, oplib.complex64, oplib.complex128),
    *(oplib.bfloat16, oplib.float8_e4m3fn, oplib.float8_e5m2),
    *(oplib.float8_e4m3fnuz, oplib.float8_e5m2fnuz, oplib.float8_e8m0fnu),
]


def _attempts(b: Any, dtype: np.dtype) -> list[tuple[str, Any]]:
    """The ways data or a dtype reaches backend ``b``: a copy, ``empty``, an op's dtype
    argument (the factory kernel dispatch resolves for ``b``)."""
    dev = oplib.Device(b.name, 0 if b.multi_device else None)
    attempts = [
        ("copy", lambda: b.from_host(np.zeros(2, dtype), dev)),
        ("empty", lambda: b.empty((2,), dtype, dev)),
    ]
    try:
        zeros, _ = oplib.lookup("oplib::zeros").resolve(b)
    except oplib.errors.NoKernelError:
        return attempts
    return [*attempts, ("oplib::zeros", lambda: zeros([2], dtype=dtype, device=dev))]


def dtype_contract_problems(b: Any) -> list[str]:
    """What backend ``b`` gets wrong about the dtypes it holds: ``BackendSpec.dtypes`` is None
    only for a backend that holds every oplib dtype (shown here where its library runs without
    a device), and every other dtype is refused before the library is touched, with
    ``BackendDtypeError`` naming the backend and the dtype, never a plugin's own ``TypeError``
    (which the cuda plugin's guard raised, and checkers counted as failures)."""
    problems = []
    available = b.status() is None
    if b.spec.dtypes is None and not available:
        problems.append(
            f"declares no BackendSpec.dtypes (it would hold every oplib dtype), but that "
            f"cannot be shown here ({b.status()}): declare what it holds"
        )
    held = {d for d in ALL_DTYPES if b.supports_dtype(d)}
    for dtype in ALL_DTYPES:
        for what, attempt in _attempts(b, dtype):
            try:
                out = attempt()
            except oplib.BackendDtypeError as e:
                if dtype in held or (e.backend, e.dtype) != (b.name, dtype):
                    problems.append(f"{what} of {dtype}: {type(e).__name__}: {e}")
                elif f"backend {b.name!r} has no {dtype} dtype" not in str(e):
                    problems.append(f"{what} of {dtype}: the error does not say so: {e}")
            except oplib.errors.BackendError as e:
                if available or dtype not in held:  # only the absent device may stop it
                    problems.append(f"{what} of {dtype}: {type(e).__name__}: {e}")
            except Exception as e:
                problems.append(f"{what} of {dtype}: {type(e).__name__}: {e}")
            else:
                if dtype not in held or b.dtype_of(out) != dtype:
                    problems.append(f"{what} of {dtype} made a {b.dtype_of(out)} array")
    return problems


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_backend_declares_what_it_cannot_hold(name: str) -> None:
    b = oplib.backends.TABLE.find(name)
    if b is None:
        pytest.skip(f"the {name} backend is not installed")
    assert dtype_contract_problems(b) == []


def test_a_plugin_with_its_own_dtype_guard_breaks_the_contract(teardown) -> None:
    """What the cuda plugin was before it declared its dtypes: no ``dtypes``, no device
    here, and a ``TypeError`` of its own for bfloat16."""

    def from_host(array: np.ndarray, device: oplib.Device) -> Any:
        if array.dtype == oplib.bfloat16:
            raise TypeError(f"copy to {device}: the oldgpu backend has no bfloat16 dtype")
        raise oplib.errors.BackendError("oldgpu: no device")

    spec = oplib.BackendSpec(
        name="oldgpu",
        array_type_names=("oldgpulib.ndarray",),
        status=lambda: "no device",
        from_host=from_host,
        empty=lambda shape, dtype, device: from_host(np.empty(shape, dtype), device),
    )
    teardown(oplib.backends.register(spec))
    problems = dtype_contract_problems(oplib.backends.get("oldgpu"))
    assert problems[0].startswith("declares no BackendSpec.dtypes")
    assert (
        "copy of bfloat16: TypeError: copy to oldgpu: the oldgpu backend has no bfloat16 dtype"
        in problems
    )
    # with its dtypes declared, core refuses bfloat16 before the plugin's guard is reached
    held = frozenset(d for d in ALL_DTYPES if d.kind in "biufc")
    declared = spec._replace(
        name="newgpu", array_type_names=("newgpulib.ndarray",), dtypes=lambda: held
    )
    teardown(oplib.backends.register(declared))
    assert dtype_contract_problems(oplib.backends.get("newgpu")) == []


def test_cuda_declares_exactly_what_cupy_lacks() -> None:
    cuda = oplib.backends.get("cuda")
    lacks = {d for d in ALL_DTYPES if not cuda.supports_dtype(d)}
    assert lacks == {
        oplib.bfloat16,
        oplib.float8_e4m3fn,
        oplib.float8_e5m2,
        oplib.float8_e4m3fnuz,
        oplib.float8_e5m2fnuz,
        oplib.float8_e8m0fnu,
    }
