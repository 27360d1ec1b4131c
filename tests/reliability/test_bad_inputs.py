"""The bad-input matrix: every core op, every argument slot, a catalogue of bad values.

For each op, a valid sample call (from the plugins' sample inputs) has one argument
replaced by a bad value: wrong types, ``None``, object/str/datetime/structured arrays,
empty and mismatched shapes, non-contiguous and read-only arrays, NaN, integer overflow,
arrays of another device. Each case is called with native arrays and again with
``oplib.Tensor``s. What may come out:

- a result, which (where numpy computes the same thing) must match numpy's on the same
  values: no wrong results;
- an oplib error (``OplibError``), or an exception raised inside a kernel that carries
  oplib's note naming the op (``oplib: raised by the ... kernel of oplib::...``).

Anything else is a crash. Every case must finish quickly (a hang fails the run through
``faulthandler``). Run by hand for the counts by kind::

    python tests/reliability/test_bad_inputs.py
"""

from __future__ import annotations

import collections
import faulthandler
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import oplib_core as oplib
from oplib_core._opset import CORE_OPS
from oplib_core.testing import sample_inputs

OPS = oplib.ops.oplib
NPU = oplib.backends.get("privateuse1").name
SLOW_CASE_S = 2.0
HANG_S = 120  # faulthandler ends the process (the test fails) if the matrix stalls


class _Odd:
    """An object no schema type accepts."""

    def __repr__(self) -> str:
        return "<odd object>"


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous array."""
    big = np.zeros((*a.shape[:-1], a.shape[-1] * 2), dtype=a.dtype) if a.ndim else None
    if big is None:
        return a
    big[..., ::2] = a
    return big[..., ::2]


def _read_only(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


def _nan_like(a: np.ndarray) -> np.ndarray:
    return np.full(a.shape, np.nan)


def _on(device: str) -> Callable[[np.ndarray], Any]:
    def move(a: np.ndarray) -> Any:
        return oplib.tensor(a).to(device)._data

    return move


#: name -> a function of the sample's value in that slot (or None) giving the bad value.
#: ``valid`` values hold the same data in an unusual layout: results must equal the
#: sample's own.
BAD: dict[str, Callable[[Any], Any]] = {
    "None": lambda v: None,
    "str": lambda v: "bad",
    "odd-object": lambda v: _Odd(),
    "float": lambda v: 1.5,
    "huge-int": lambda v: 2**70,
    "bool": lambda v: True,
    "list": lambda v: [1, 2],
    "ragged-list": lambda v: [[1, 2], [3]],
    "object-array": lambda v: np.array([1, 2], dtype=object),
    "str-array": lambda v: np.array(["a", "b"]),
    "datetime-array": lambda v: np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"),
    "structured-array": lambda v: np.zeros(2, dtype="i4,f4"),
    "empty": lambda v: np.zeros((0,)),
    "empty-2d": lambda v: np.zeros((0, 3)),
    "mismatched": lambda v: np.ones((7, 5)),
    "0-d": lambda v: np.array(2.0),
    "nan": lambda v: np.full((2, 3), np.nan),
    "int-overflow": lambda v: np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min]),
    "meta": lambda v: oplib.empty((2, 3), device="meta")._data,
    "privateuse1": lambda v: _on(NPU)(np.ones((2, 3))),
}
#: Same data, unusual layout: applied to the sample's arrays only.
LAYOUT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "non-contiguous": _strided,
    "read-only": _read_only,
    "nan-values": _nan_like,
}

# numpy references, where numpy computes the same thing on the same values.
_N = np
REFERENCE: dict[str, Callable[..., Any]] = {
    "neg": _N.negative,
    "exp": _N.exp,
    "log": _N.log,
    "sin": _N.sin,
    "cos": _N.cos,
    "tanh": _N.tanh,
    "sigmoid": lambda x: 1 / (1 + _N.exp(-_N.asarray(x, dtype=float))),
    "relu": lambda x: _N.maximum(x, 0),
    "abs": _N.abs,
    "sqrt": _N.sqrt,
    "add": _N.add,
    "sub": _N.subtract,
    "mul": _N.multiply,
    "div": _N.true_divide,
    "maximum": _N.maximum,
    "minimum": _N.minimum,
    "eq": _N.equal,
    "ne": _N.not_equal,
    "lt": _N.less,
    "le": _N.less_equal,
    "gt": _N.greater,
    "ge": _N.greater_equal,
    "rsub": lambda x, o: o - x,
    "rdiv": lambda x, o: o / x,
    "where": _N.where,
    "matmul": _N.matmul,
    "transpose": _N.swapaxes,
    "permute": _N.transpose,
    "reshape": _N.reshape,
    "broadcast_to": _N.broadcast_to,
    "unsqueeze": _N.expand_dims,
    "clone": _N.copy,
    "cat": lambda ts, dim=0: _N.concatenate(ts, axis=dim),
    "stack": lambda ts, dim=0: _N.stack(ts, axis=dim),
}


def _documented(e: BaseException, qualname: str) -> bool:
    if isinstance(e, oplib.OplibError):
        return True
    return any(
        n.startswith("oplib: ") and "oplib::" in n for n in getattr(e, "__notes__", ())
    ) and any(qualname.split(".")[0] in n for n in e.__notes__)


def _host(value: Any) -> Any:
    if isinstance(value, oplib.Tensor):
        value = value._data
    if isinstance(value, (list, tuple)):
        return [_host(v) for v in value]
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        backend = oplib.backends.for_type(type(value))
        if backend is not None and not backend.spec.fake_kernels:
            return np.asarray(backend.to_host(value))
        raise LookupError("no data")
    return value


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, list) and isinstance(want, list):  # Tensor[] and multi-output results
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if got.size == 0:
        return True
    if got.dtype.kind in "biu" and want.dtype.kind in "biu":
        return bool(np.array_equal(got, want))
    try:
        g, w = got.astype(np.float64), want.astype(np.float64)
    except (TypeError, ValueError):
        return bool(np.array_equal(got, want))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close = np.isclose(g, w, rtol=1e-3, atol=1e-5, equal_nan=True)
        # float32 results of int64 extremes round; equal to float32 precision is equal
        close |= np.isclose(g, w, rtol=1e-6 * max(1.0, float(np.nanmax(np.abs(w)))), atol=0)
        close |= np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
    return bool(close.all())


class Case:
    """One call: op, a description, args, kwargs."""

    __slots__ = ("args", "kwargs", "name", "op", "slot")

    def __init__(self, op: Any, slot: str, name: str, args: tuple[Any, ...], kw: dict) -> None:
        self.op, self.slot, self.name, self.args, self.kwargs = op, slot, name, args, kw

    def __repr__(self) -> str:
        return f"{self.op.name()}[{self.slot}={self.name}]"


def _slots(op: Any, sample: Any) -> Iterator[tuple[str, Any, Callable[[Any], tuple]]]:
    """(argument name, the sample's value there, a function putting a value there)."""
    args, kwargs = list(sample.args), dict(sample.kwargs)
    for i, a in enumerate(op.schema.arguments):
        if i < len(args) and not a.kwarg_only:

            def put(v: Any, i: int = i) -> tuple:
                return ((*args[:i], v, *args[i + 1 :]), kwargs)

            yield a.name, args[i], put
        else:

            def put_kw(v: Any, name: str = a.name) -> tuple:
                return (tuple(args), {**kwargs, name: v})

            yield a.name, kwargs.get(a.name), put_kw


def cases() -> Iterator[Case]:
    """The matrix, in a fixed order."""
    for core in CORE_OPS:
        op = oplib.lookup(core.schema.split("(")[0])
        samples = sample_inputs(op, "cpu")
        if not samples:
            continue
        sample = samples[0]
        for slot, value, put in _slots(op, sample):
            for name, make in BAD.items():
                yield Case(op, slot, name, *put(make(value)))
            host = _host(value) if value is not None else None
            if isinstance(host, np.ndarray) and host.ndim:
                for name, make in LAYOUT.items():
                    yield Case(op, slot, name, *put(make(host)))


def _as_tensors(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_as_tensors(v) for v in value)
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        return oplib.tensor(value)
    return value


def run(case: Case, tensors: bool) -> str:
    """The outcome of one case: ``result``, ``result-unchecked``, ``error`` or a failure
    (``crash:<type>``, ``wrong-result``, ``slow``)."""
    qualname = case.op.name()
    start = time.perf_counter()
    try:
        args, kwargs = case.args, case.kwargs
        if tensors:
            try:
                args, kwargs = _as_tensors(args), {k: _as_tensors(v) for k, v in kwargs.items()}
            except oplib.OplibError:
                return "error"
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = case.op(*args, **kwargs)
    except Exception as e:
        outcome = "error" if _documented(e, qualname) else f"crash:{type(e).__name__}"
    else:
        outcome = _check_result(case, out)
    return "slow" if time.perf_counter() - start > SLOW_CASE_S else outcome


def _check_result(case: Case, out: Any) -> str:
    ref = REFERENCE.get(case.op.name().split("::")[1].split(".")[0])
    if ref is None:
        return "result-unchecked"
    try:
        got = _host(out)
        args = [_host(a) for a in case.args]
        kwargs = {k: _host(v) for k, v in case.kwargs.items()}
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = ref(*args, **kwargs)
    except Exception:
        return "result-unchecked"  # numpy does not compute it, or the result has no data
    try:
        same = _same(got, want)
    except (TypeError, ValueError):
        return "result-unchecked"
    return "result" if same else "wrong-result"


def matrix() -> tuple[collections.Counter[str], dict[str, str]]:
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    for case in cases():
        for tensors in (False, True):
            outcome = run(case, tensors)
            counts[outcome] += 1
            examples.setdefault(outcome, f"{case!r}{' (Tensors)' if tensors else ''}")
    return counts, examples


GOOD = {"result", "result-unchecked", "error"}


def test_bad_input_matrix_over_every_core_op() -> None:
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        counts, examples = matrix()
    finally:
        faulthandler.cancel_dump_traceback_later()
    total = sum(counts.values())
    assert total > 2000, counts
    failures = {k: (n, examples[k]) for k, n in counts.items() if k not in GOOD}
    assert not failures, f"{total} cases: {dict(counts)}; failures: {failures}"
    assert counts["error"] > 0 and counts["result"] > 0


def test_every_core_op_is_in_the_matrix() -> None:
    covered = {c.op.name() for c in cases()}
    missing = [c.schema.split("(")[0] for c in CORE_OPS if c.schema.split("(")[0] not in covered]
    assert not missing, f"core ops without sample inputs: {missing}"


def _unwritten(case: Case, written: set[str]) -> tuple[Any, ...]:
    """``case.args`` with copies of the arguments an in-place op writes (other than the slot
    under test): the cases of one op share the sample's arrays, which earlier cases wrote."""
    names = [a.name for a in case.op.schema.positional]
    out = []
    for name, value in zip(names, case.args, strict=False):
        if name in written and name != case.slot and isinstance(value, oplib.Tensor):
            value = oplib.tensor(_host(value).copy())
        out.append(value)
    return (*out, *case.args[len(out) :])


def test_valid_layouts_give_the_samples_results() -> None:
    """Non-contiguous and read-only arrays hold the sample's values: the result is the
    sample's (compared through numpy where there is a reference, else to the op's result
    on the sample itself)."""
    checked = 0
    for case in cases():
        if case.name not in ("non-contiguous", "read-only"):
            continue
        sample = sample_inputs(case.op, "cpu")[0]
        if not sample.compare_values:
            continue
        written = {a.name for a in case.op.schema.arguments if a.is_write}
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = _host(case.op(*sample.args, **sample.kwargs))
            if case.name == "read-only" and case.slot in written:
                with pytest.raises(ValueError, match="read-only") as info:
                    case.op(*case.args, **case.kwargs)
                assert _documented(info.value, case.op.name()), case
                continue
            got = _host(case.op(*_unwritten(case, written), **case.kwargs))
        assert _same(got, want), case
        checked += 1
    assert checked > 50


def test_a_native_array_beside_a_tensor_that_requires_grad_is_a_constant() -> None:
    """Found by the matrix: the formulas read Tensors, and a native array passed beside a
    Tensor that requires grad reached them raw (AttributeError, TypeError)."""
    a = oplib.tensor(np.ones((2, 3)), requires_grad=True)
    out = OPS.add(a, np.full((2, 3), 2.0))
    assert out.grad_fn is not None
    out.sum().backward()
    assert a.grad is not None and np.array_equal(a.grad.numpy(), np.ones((2, 3)))
    b = oplib.tensor(np.ones((3, 2)), requires_grad=True)
    OPS.matmul(np.arange(6.0).reshape(2, 3), b).sum().backward()
    assert b.grad is not None and np.array_equal(
        b.grad.numpy(), [[3.0, 3.0], [5.0, 5.0], [7.0, 7.0]]
    )
    c = oplib.tensor(np.array([1.0, -1.0]), requires_grad=True)
    OPS.where(np.array([True, False]), c, c * 0).sum().backward()
    assert c.grad is not None and c.grad.numpy().tolist() == [1.0, 0.0]


if __name__ == "__main__":
    t0 = time.perf_counter()
    counts, examples = matrix()
    print(f"{sum(counts.values())} cases in {time.perf_counter() - t0:.1f} s: {dict(counts)}")
    for kind, where in sorted(examples.items()):
        if kind not in GOOD:
            print(f"  e.g. {kind}: {where}")
    sys.exit(0)
