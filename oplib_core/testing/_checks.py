"""``opcheck``: does an operator's registration hold together, on every backend?

The checks follow torch's ``torch.library.opcheck`` (``torch/testing/_internal/optests``),
adapted to oplib's backends:

- ``test_schema``: inputs the schema does not declare mutable are unchanged bit for bit
  (a declared mutation that does not happen for a sample is a ``UserWarning``, as torch's
  opcheck accepts over-declaration), outputs do not alias inputs unless the schema says so, and
  outputs have the schema's return types and the call's device.
- ``test_autograd_registration``: when an input requires grad and an output could require
  grad (a floating tensor that is not a mutated input), the op has an autograd formula (or a
  CompositeImplicitAutograd decomposition that autograd goes through); an op that returns
  nothing needs none, as in torch.
- ``test_faketensor``: the fake kernel (under ``FakeTensorMode``) and data-less backends
  such as ``meta`` give the real kernel's output shape, dtype and device.
- ``test_backends``: every available backend gives the CPU result, within a tolerance for
  the dtype. A backend whose arrays the op's ``default`` kernel cannot take (numpy code run
  on a device's arrays) is a skip naming the kernel and the error.
- ``test_gradcheck``: the autograd formula agrees with finite differences, in float64 where
  the kernel takes float64, else in the inputs' own float32 with looser tolerances.

Each check gives one :class:`CheckResult` per backend it looked at: ``PASS``, ``FAIL`` (with
the error) or ``SKIP`` (with the reason: no kernel for that backend, backend not available,
nothing to check). :func:`opcheck` raises on the first failure; :func:`run_checks` yields
every result (``oplib check`` and the pytest plugin use it).
"""

from __future__ import annotations

import contextvars
import numbers
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._device import Device
from .._dispatch import OpOverload
from .._dtypes import EXTENSION_FLOATS
from .._grad_mode import enable_grad, no_grad
from .._higher_order._operator import HigherOrderOperator
from .._registry.lookup import lookup, lookup_for_call
from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, FAKE
from .._schema import Argument, BaseType, ListType, OptionalType
from .._tensor.tensor import Tensor
from ..autograd._gradcheck import GradcheckError, check_gradients
from ..backends import TABLE, Backend
from ..errors import (
    KernelResultError,
    NamespaceUnsupportedError,
    NoKernelError,
    OpCheckError,
    OplibError,
)
from ..fake._arrays import FakeArray
from ..fake._mode import FakeTensorMode

__all__ = [
    "CHECKS",
    "DEFAULT_TEST_UTILS",
    "FAIL",
    "PASS",
    "SKIP",
    "SKIPPED",
    "BackendOutcome",
    "CheckResult",
    "OpCheckError",
    "OpCheckResults",
    "opcheck",
    "run_checks",
]

CHECKS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_backends",
    "test_gradcheck",
)
DEFAULT_TEST_UTILS = CHECKS

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

# (rtol, atol) per dtype for test_backends, as torch.testing.assert_close
_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


@dataclass(frozen=True, eq=False)
class CheckResult:
    """The outcome of one check of one op on one backend."""

    op: str
    check: str
    backend: str
    status: str
    reason: str = ""
    error: BaseException | None = None
    #: False for a SKIP that means the backend was not checked at all (no kernel for the
    #: op, backend not available), as opposed to a check with nothing to look at there.
    covered: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "check": self.check,
            "backend": self.backend,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class BackendOutcome:
    """What ``opcheck`` found on one backend: ``status`` is ``FAIL`` when a check failed
    there, ``PASS`` when some check ran and none failed, ``SKIP`` when nothing was checked
    there (``reason`` says why: no kernel for the op, backend not available ...);
    ``results`` are its :class:`CheckResult` s."""

    backend: str
    status: str
    reason: str
    results: tuple[CheckResult, ...]


#: The entry of a check in :class:`OpCheckResults` when it checked nothing anywhere.
SKIPPED = "SKIPPED"


class OpCheckResults(dict):  # type: ignore[type-arg]
    """``opcheck``'s answer: check name → ``"SUCCESS"`` or the exception, as in torch, or
    ``"SKIPPED"`` when the check did not run on any backend (no kernel for the op, backend
    not available): an unchecked op is never reported a success.

    ``details`` holds every :class:`CheckResult`, skips included; ``backends`` maps each
    backend looked at to its :class:`BackendOutcome`; ``checked`` is False when nothing
    was checked anywhere.
    """

    details: list[CheckResult]

    @property
    def backends(self) -> dict[str, BackendOutcome]:
        by_backend: dict[str, list[CheckResult]] = {}
        for r in self.details:
            by_backend.setdefault(r.backend, []).append(r)
        return {name: _outcome(name, rs) for name, rs in by_backend.items()}

    @property
    def checked(self) -> bool:
        return any(r.status != SKIP or r.covered for r in self.details)


def _outcome(backend: str, results: list[CheckResult]) -> BackendOutcome:
    statuses = {r.status for r in results}
    covered = any(r.covered for r in results if r.status == SKIP)
    if FAIL in statuses:
        status, reason = FAIL, next(r.reason for r in results if r.status == FAIL)
    elif PASS in statuses or covered:
        status, reason = PASS, ""
    else:
        status, reason = SKIP, results[0].reason
    return BackendOutcome(backend, status, reason, tuple(results))


# -- the call being checked -----------------------------------------------------------------
def _resolve_op(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> OpOverload:
    return lookup_for_call(op, args, kwargs, "opcheck")


def _is_device_type(t: Any) -> bool:
    base = t.elem if isinstance(t, OptionalType) else t
    return isinstance(base, BaseType) and base.name == "Device"


def _as_tensor(v: Any) -> Any:
    if isinstance(v, Tensor) or v is None:
        return v
    if isinstance(v, FakeArray) or TABLE.for_type(type(v)) is not None:
        return Tensor._wrap(v)
    return v


def _leaves(value: Any) -> list[tuple[int | None, Tensor]]:
    """The tensors of one argument value, with their list index (None: not a list)."""
    if isinstance(value, Tensor):
        return [(None, value)]
    if isinstance(value, (list, tuple)):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, Tensor)]
    return []


def _label(name: str, index: int | None) -> str:
    return name if index is None else f"{name}[{index}]"


def _dataless(t: Tensor) -> bool:
    return isinstance(t._data, FakeArray)


def _host(t: Tensor) -> np.ndarray:
    return np.array(t.backend.to_host(t._data), copy=True)


def _copy_op() -> OpOverload:
    return lookup("oplib::_to_copy")


class _Case:
    """One call ``op(*args, **kwargs)``, its arguments bound to the schema, Tensors only."""

    def __init__(self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.op = op
        self.qualname = op.name()
        self.schema = op.schema
        bargs, bkwargs = op.bind(tuple(args), dict(kwargs))
        self.values: dict[str, Any] = {}
        positional = [a for a in self.schema.arguments if not a.kwarg_only]
        for a, v in zip(positional, bargs, strict=True):
            self.values[a.name] = self._tensors(a, v)
        for a in self.schema.arguments:
            if a.kwarg_only:
                self.values[a.name] = self._tensors(a, bkwargs.get(a.name))
        self.has_tensors = any(_leaves(v) for a, v in self.items() if a.type.is_tensor_like())
        self.device = self._home()

    @staticmethod
    def _tensors(a: Argument, v: Any) -> Any:
        if not a.type.is_tensor_like():
            return v
        if isinstance(v, (list, tuple)):
            return [_as_tensor(x) for x in v]
        return _as_tensor(v)

    def items(self) -> Iterator[tuple[Argument, Any]]:
        for a in self.schema.arguments:
            yield a, self.values[a.name]

    def tensors(
        self, values: dict[str, Any] | None = None
    ) -> Iterator[tuple[Argument, str, Tensor]]:
        values = self.values if values is None else values
        for a in self.schema.arguments:
            if a.type.is_tensor_like():
                for i, t in _leaves(values[a.name]):
                    yield a, _label(a.name, i), t

    def _home(self) -> Device:
        for _, _, t in self.tensors():
            return t.device
        for a, v in self.items():
            if _is_device_type(a.type) and isinstance(v, Device):
                return v
        return Device("cpu")

    def copy(self, device: Device | None = None) -> dict[str, Any]:
        """Fresh copies of the tensor arguments (on ``device`` if given), ``requires_grad``
        kept; Device arguments follow to ``device``."""
        copy = _copy_op()
        out: dict[str, Any] = {}
        for a, v in self.items():
            if a.type.is_tensor_like():
                out[a.name] = self._copy_value(v, device, copy)
            elif _is_device_type(a.type) and device is not None:
                moves = (v is not None and v.type == self.device.type) or not self.has_tensors
                out[a.name] = device if moves else v
            else:
                out[a.name] = list(v) if isinstance(v, list) else v
        return out

    @staticmethod
    def _copy_value(v: Any, device: Device | None, copy: OpOverload) -> Any:
        if isinstance(v, (list, tuple)):
            return [_Case._copy_value(x, device, copy) for x in v]
        if not isinstance(v, Tensor):
            return v
        here = v.device
        if not _dataless(v) and (device is None or device.type == here.type):
            # through the host: needs no kernel on the device (not even clone)
            b = v.backend
            c = Tensor._wrap(b.from_host(_host(v), here))
        else:
            with no_grad():
                c = copy(v.detach(), device=device)
        if v.requires_grad:
            c.requires_grad_(True)
        return c

    def call(self, values: dict[str, Any]) -> Any:
        args = [values[a.name] for a in self.schema.arguments if not a.kwarg_only]
        kwargs = {a.name: values[a.name] for a in self.schema.arguments if a.kwarg_only}
        return self.op(*args, **kwargs)

    def expected_device(self, values: dict[str, Any], target: Device) -> Device:
        for a, v in ((a, values[a.name]) for a in self.schema.arguments):
            if _is_device_type(a.type) and isinstance(v, Device):
                return v
        return target if self.has_tensors else Device("cpu")

    def outputs(self, out: Any) -> list[Any]:
        n = len(self.schema.returns)
        if n == 1 and not self.schema.tuple_return:  # "-> ((Tensor))" gives a 1-tuple
            return [out]
        if n == 0:
            return [] if out is None else [out]
        return list(out) if isinstance(out, (tuple, list)) else [out]


class _Failure(Exception):
    """A check found a problem; the message says what. ``dtypes``: the two dtypes of a
    dtype mismatch (``dtype_failure`` makes it a skip when the backend declares it cannot
    hold one of them: int64 indices on JAX in its 32-bit mode)."""

    def __init__(self, message: str, dtypes: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.dtypes = dtypes


class _Skip(Exception):
    """A check has nothing to look at; the message says why."""


# -- checks ---------------------------------------------------------------------------------
def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _first_change(before: np.ndarray, after: np.ndarray) -> str:
    if before.shape != after.shape or before.dtype != after.dtype:
        return (
            f"shape/dtype changed from {before.shape}/{before.dtype} to {after.shape}/{after.dtype}"
        )
    width = before.dtype.itemsize
    was = before.reshape(-1).view(np.uint8).reshape(-1, width)
    now = after.reshape(-1).view(np.uint8).reshape(-1, width)
    bad = np.nonzero((was != now).any(axis=1))[0]
    i = int(bad[0])
    index = tuple(int(j) for j in np.unravel_index(i, before.shape)) if before.shape else ()
    return (
        f"{len(bad)} of {before.size} elements changed, first at index {index}: "
        f"{before.reshape(-1)[i].item()!r} -> {after.reshape(-1)[i].item()!r}"
    )


def _aliases(out: Tensor, inp: Tensor) -> bool:
    a, b = out._data, inp._data
    if a is b:
        return True
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.shares_memory(a, b))
    if not _dataless(out) and not _dataless(inp) and out.backend is inp.backend:
        return _writes_through(out, inp)
    return False


def _writes_through(out: Tensor, inp: Tensor) -> bool:
    """Whether writing into ``out`` changes ``inp`` (arrays whose memory oplib cannot
    inspect): fills ``out`` with 0 and then 1 through the backend's ``copy_`` kernel."""
    before = _host(inp)
    copy_ = lookup("oplib::copy_")
    full = lookup("oplib::full")
    with no_grad():
        for value in (0, 1):
            try:
                fill = full(list(out.shape), value, dtype=out.dtype, device=out.device)
                copy_(out._data, fill)
            except Exception:  # a read-only output cannot tell; assume no alias
                return False
            if not _bitwise_equal(before, _host(inp)):
                return True
    return False


_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "int": (numbers.Integral,),
    "SymInt": (numbers.Integral,),
    "float": (numbers.Real,),
    "bool": (bool, np.bool_),
    "Scalar": (numbers.Number,),
}


def _check_type(i: int, rtype: Any, value: Any) -> None:
    if isinstance(rtype, OptionalType):
        if value is None:
            return
        rtype = rtype.elem
    if isinstance(rtype, ListType):
        if not isinstance(value, (list, tuple)):
            raise _Failure(f"output {i} should be a {rtype} but is a {type(value).__name__}")
        for v in value:
            _check_type(i, rtype.elem, v)
        return
    name = rtype.name
    if name == "Tensor":
        data = value._data if isinstance(value, Tensor) else value
        if not isinstance(data, FakeArray) and TABLE.for_type(type(data)) is None:
            raise _Failure(
                f"output {i} should be a Tensor (schema returns {rtype}) but the kernel "
                f"returned a {type(data).__name__}"
            )
    elif name in _SCALAR_TYPES and not isinstance(value, _SCALAR_TYPES[name]):
        raise _Failure(f"output {i} should be {name} but is a {type(value).__name__} ({value!r})")


def _snapshot(case: _Case, values: dict[str, Any]) -> dict[str, np.ndarray | None]:
    """Host copies of the tensor arguments (through each backend's ``to_host``), to see
    afterwards what a kernel wrote, on any backend."""
    return {label: (None if _dataless(t) else _host(t)) for _, label, t in case.tensors(values)}


def _check_mutations(
    case: _Case, values: dict[str, Any], before: dict[str, np.ndarray | None], *, warn: bool
) -> None:
    """Fail for an argument the kernel changed that the schema does not declare mutable;
    with ``warn``, warn for a declared mutation that did not happen."""
    for a, label, t in case.tensors(values):
        snap = before[label]
        if snap is None:
            continue
        after = _host(t)
        changed = not _bitwise_equal(snap, after)
        if changed and not a.is_write:
            raise _Failure(
                f"argument {label!r} was mutated but the schema does not declare it mutable "
                f"({a}): {_first_change(snap, after)}. Write to a new array, or declare it "
                f"'Tensor(a!) {a.name}' (mutates_args=[{a.name!r}])"
            )
        if warn and a.is_write and not changed:
            # torch's opcheck accepts a declared mutation that does not happen (ops declare
            # (a!) for what they may write, flash-attention's outputs among them): a warning.
            warnings.warn(
                f"opcheck: the schema of {case.schema.name} declares argument {label!r} "
                f"mutable ({a}) but the kernel left it unchanged for this sample; drop the "
                "(a!) annotation if the op never mutates it, or pick a sample where the "
                "mutation shows",
                UserWarning,
                stacklevel=3,
            )


def _test_schema(case: _Case, target: Device) -> None:
    values = case.copy(target)
    before = _snapshot(case, values)
    with no_grad():
        try:
            out = case.call(values)
        except KernelResultError as e:  # the dispatcher held the result to the schema
            raise _Failure(str(e)) from e
    _check_mutations(case, values, before, warn=True)
    # outputs: count, types, device, aliasing
    returns = case.schema.returns
    outs = [
        [_as_tensor(x) for x in o] if isinstance(o, (list, tuple)) else _as_tensor(o)
        for o in case.outputs(out)
    ]
    if len(outs) != len(returns):
        raise _Failure(
            f"the op returned {len(outs)} value(s) but the schema declares {len(returns)} "
            f"({case.schema._returns_str()})"
        )
    expected = case.expected_device(values, target)
    inputs = list(case.tensors(values))
    for i, (r, o) in enumerate(zip(returns, outs, strict=True)):
        _check_type(i, r.type, o)
        for _, t in _leaves(o):
            if t.device.type != expected.type:
                raise _Failure(
                    f"output {i} is on {t.device} but the call ran on {expected}: kernels must "
                    "return arrays of their own device"
                )
        ann = r.annotation
        for _, t in _leaves(o):
            if ann is not None and ann.is_write:
                owners = [
                    (label, x)
                    for a, label, x in inputs
                    if a.annotation is not None and set(a.annotation.alias_set) & set(ann.alias_set)
                ]
                if owners and not any(x._data is t._data or x is t for _, x in owners):
                    raise _Failure(
                        f"output {i} is declared {r.type}({'|'.join(ann.alias_set)}!) but is not "
                        f"the mutated input {owners[0][0]!r}: an in-place op must return its "
                        "input itself"
                    )
                continue
            allowed = set(ann.alias_set) if ann is not None else set()
            for a, label, x in inputs:
                if a.annotation is not None and set(a.annotation.alias_set) & allowed:
                    continue
                if _aliases(t, x):
                    raise _Failure(
                        f"output {i} aliases input {label!r} (shares its memory) but the schema "
                        f"does not say so ({case.schema}); return a new array (a copy), or "
                        f"annotate a view: 'Tensor(a) {a.name}' -> 'Tensor(a)'"
                    )


def _grad_inputs(case: _Case, values: dict[str, Any] | None = None) -> list[str]:
    return [label for _, label, t in case.tensors(values) if t.requires_grad]


def _no_differentiable_output(case: _Case, target: Device) -> str | None:
    """Why no output of ``case`` could require grad (it returns nothing, or no floating
    tensor other than a mutated input it returns), or None when one could. Runs the op
    under ``no_grad``, as torch's check runs it with the autograd fallback doing nothing."""
    values = case.copy(target)
    with no_grad():
        outs = case.outputs(case.call(values))
    returns = case.schema.returns
    for i, o in enumerate(outs):
        ann = returns[i].annotation if i < len(returns) else None
        if ann is not None and ann.is_write:
            continue  # the mutated input itself: torch leaves inputs out
        leaves = _leaves(_as_tensor(o) if not isinstance(o, (list, tuple)) else o)
        if any(t.dtype.kind in "fc" for _, t in leaves):
            return None
    what = "returns nothing" if not returns else "returns no floating tensor of its own"
    return (
        f"{case.qualname} {what}: no output could require grad, so it needs no autograd "
        "formula (torch's rule)"
    )


def _test_autograd_registration(case: _Case, target: Device) -> str | None:
    needs = _grad_inputs(case)
    if not needs:
        return "no input requires grad (give inputs requires_grad=True to check autograd)"
    backend = TABLE.get(target.type)
    if not backend.spec.autograd:
        return f"{backend.name} arrays do not record gradients (BackendSpec.autograd=False)"
    try:
        fn = case.op.autograd_kernel(backend)
    except RuntimeError:
        nothing = _no_differentiable_output(case, target)
        if nothing is not None:
            # torch's rule: a missing formula is a bug only where an output would require grad
            return nothing
        keys = sorted(k for k, _ in case.op.kernels() if k not in (AUTOGRAD, FAKE)) or ["(none)"]
        raise _Failure(
            f"at least one output of {case.qualname} would require grad (inputs "
            f"{', '.join(repr(n) for n in needs)} require grad) but the operator has no "
            f"autograd formula for backend {backend.name!r} (kernels: {', '.join(keys)}): "
            "oplib refuses to call it with such inputs. "
            f"Register one with oplib.register_autograd({case.qualname!r}, backward, "
            "setup_context=...), or give the op a CompositeImplicitAutograd decomposition "
            "(and no backend kernels) so autograd goes through its parts"
        ) from None
    if fn is None:
        return None  # declared non-differentiable (fallthrough)
    values = case.copy(target)
    with enable_grad():
        out = case.call(values)
    floats = [
        t
        for o in case.outputs(out)
        for _, t in _leaves(_as_tensor(o) if not isinstance(o, (list, tuple)) else o)
        if t.dtype.kind in "fc"
    ]
    if floats and not any(t.requires_grad for t in floats):
        raise _Failure(
            f"inputs {', '.join(repr(n) for n in needs)} require grad and {case.qualname} has an "
            "autograd kernel, but none of its floating outputs requires grad: the formula "
            "does not connect outputs to the graph"
        )
    return None


def _describe_meta(t: Any) -> tuple[tuple[Any, ...], str, str]:
    dev = t.device
    index = dev.index or 0
    return tuple(t.shape), str(t.dtype), f"{dev.type}:{index}"


def _compare_meta(
    what: str, got: list[Any], ref: list[Any], ref_what: str, expect_device: Device | None
) -> None:
    if len(got) != len(ref):
        raise _Failure(f"{what} gives {len(got)} outputs, {ref_what} gives {len(ref)}")
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        g_leaves, r_leaves = (
            _leaves(_as_tensor(g) if not isinstance(g, list) else g),
            _leaves(_as_tensor(r) if not isinstance(r, list) else r),
        )
        if len(g_leaves) != len(r_leaves):
            raise _Failure(
                f"output {i}: {what} gives {len(g_leaves)} tensors, {ref_what} {len(r_leaves)}"
            )
        for (j, gt), (_, rt) in zip(g_leaves, r_leaves, strict=True):
            where = f"output {i}" + ("" if j is None else f"[{j}]")
            g_shape, g_dtype, g_dev = _describe_meta(gt)
            r_shape, r_dtype, r_dev = _describe_meta(rt)
            concrete = tuple(s if isinstance(s, int) else None for s in g_shape)
            if len(g_shape) != len(r_shape) or any(
                c is not None and c != int(s) for c, s in zip(concrete, r_shape, strict=False)
            ):
                raise _Failure(f"{where}: {what} gives shape {g_shape}, {ref_what} {r_shape}")
            if g_dtype != r_dtype:
                raise _Failure(
                    f"{where}: {what} gives dtype {g_dtype}, {ref_what} {r_dtype}",
                    (g_dtype, r_dtype),
                )
            want = (
                r_dev
                if expect_device is None
                else f"{expect_device.type}:{expect_device.index or 0}"
            )
            if g_dev != want:
                raise _Failure(f"{where}: {what} gives device {g_dev}, expected {want}")


def _fake_source(op: OpOverload) -> str:
    k = op.kernel(FAKE)
    return f"the fake kernel ({k.origin.source})" if k is not None else "the fake kernel"


def _ran_in(e: BaseException, kernel: Any) -> bool:
    """Whether ``kernel``'s function (a registered ``Kernel``) is on ``e``'s traceback."""
    f: Any = getattr(kernel, "fn", None)
    while getattr(f, "__wrapped__", None) is not None:
        f = f.__wrapped__
    code = getattr(f, "__code__", None)
    if code is None:
        return True  # cannot tell: blame the kernel, as before
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def _test_faketensor(case: _Case, target: Device, reference: _Case) -> None:
    backend = TABLE.get(target.type)
    if backend.spec.fake_kernels:
        # a data-less backend (meta): its outputs against the real kernel's on the inputs' data
        values = case.copy(target)
        with no_grad():
            got = case.outputs(case.call(values))
        ref_values = reference.copy()
        if any(_dataless(t) for _, _, t in reference.tensors(ref_values)):
            raise _Skip("no real inputs to compare with")
        with no_grad():
            ref = reference.outputs(reference.call(ref_values))
        _compare_meta(
            f"backend {backend.name!r}",
            got,
            ref,
            f"the real {reference.device.type} kernel",
            expect_device=target,
        )
        return
    values = case.copy(target)
    with no_grad():
        real = case.outputs(case.call(values))
    source = _fake_source(case.op)
    meta = case.op.kernel("meta")
    if not case.op.has_kernel(FAKE) and meta is not None and not meta.is_fallthrough:
        # FakeTensorMode runs the op's Meta kernel when it has no fake kernel, as in torch
        source = f"the Meta kernel ({meta.origin.source})"
    with FakeTensorMode() as mode, no_grad():
        fake_values = {
            a.name: (
                [mode.from_real(x) if isinstance(x, Tensor) else x for x in v]
                if isinstance(v, list)
                else (mode.from_real(v) if isinstance(v, Tensor) else v)
            )
            for a, v in ((a, values[a.name]) for a in case.schema.arguments)
        }
        try:
            fake = case.outputs(case.call(fake_values))
        except NoKernelError as e:
            raise _Failure(f"{case.qualname} has no fake kernel: {e}") from e
        except Exception as e:
            if not isinstance(e, OplibError) and not _ran_in(e, case.op.kernel(FAKE)):
                # oplib failed around the fake kernel, not in it: do not blame the kernel
                raise _Failure(
                    f"FakeTensorMode raised {type(e).__name__}: {e}, outside "
                    f"{_fake_source(case.op)}: an oplib fault, not the fake kernel's"
                ) from e
            raise _Failure(
                f"{source} raised {type(e).__name__}: {e} (the real {target.type} kernel did not)"
            ) from e
    _compare_meta(source, fake, real, f"the real {target.type} kernel", expect_device=None)


def _tolerance(dtype: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    if rtol is not None and atol is not None:
        return rtol, atol
    return _TOLERANCES.get(str(dtype), (0.0, 0.0))


def _compare_values(
    got: list[Any], ref: list[Any], backend: str, rtol: float | None, atol: float | None
) -> None:
    if len(got) != len(ref):
        raise _Failure(f"{backend} gives {len(got)} outputs, cpu gives {len(ref)}")
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        g_leaves = _leaves(_as_tensor(g) if not isinstance(g, list) else g)
        r_leaves = _leaves(_as_tensor(r) if not isinstance(r, list) else r)
        if not g_leaves and not r_leaves:
            if g != r:
                raise _Failure(f"output {i}: {backend} gives {g!r}, cpu gives {r!r}")
            continue
        if len(g_leaves) != len(r_leaves):
            raise _Failure(
                f"output {i}: {backend} gives {len(g_leaves)} tensors, cpu {len(r_leaves)}"
            )
        for (j, gt), (_, rt) in zip(g_leaves, r_leaves, strict=True):
            where = f"output {i}" + ("" if j is None else f"[{j}]")
            if gt.device.type != backend:
                raise _Failure(f"{where} is on {gt.device}, expected {backend}")
            if tuple(gt.shape) != tuple(rt.shape) or gt.dtype != rt.dtype:
                raise _Failure(
                    f"{where}: {backend} gives shape {tuple(gt.shape)} dtype {gt.dtype}, cpu "
                    f"gives shape {tuple(rt.shape)} dtype {rt.dtype}",
                    (gt.dtype, rt.dtype) if gt.dtype != rt.dtype else (),
                )
            if rt.shape == (0,) or _dataless(gt):
                continue
            gv, rv = _host(gt), _host(rt)
            rtol_, atol_ = _tolerance(rt.dtype, rtol, atol)
            if gv.dtype in EXTENSION_FLOATS:  # bfloat16/float8: compared in float32
                gv, rv = gv.astype(np.float32), rv.astype(np.float32)
            if gv.dtype.kind in "fc":
                ok = np.isclose(gv, rv, rtol=rtol_, atol=atol_, equal_nan=True)
            else:
                ok = gv == rv
            if not np.all(ok):
                bad = np.argwhere(~np.asarray(ok))
                idx = tuple(int(k) for k in bad[0]) if bad.size else ()
                diff = np.abs(gv.astype(np.float64) - rv.astype(np.float64))
                raise _Failure(
                    f"{where} differs from cpu: {len(bad)} of {rv.size} elements beyond "
                    f"rtol={rtol_}, atol={atol_}; greatest difference {float(diff.max())!r}, "
                    f"first at index {idx}: {gv[idx].item()!r} on {backend} vs "
                    f"{rv[idx].item()!r} on cpu"
                )


def _backend_results(
    case: _Case,
    scope: Sequence[str],
    rtol: float | None,
    atol: float | None,
    compare_values: bool,
) -> Iterator[tuple[str, str, str, BaseException | None, bool]]:
    """(backend, status, reason, error, covered) for each backend of ``scope``, against
    cpu; ``covered`` is False for a backend not checked at all (see ``CheckResult``)."""
    ref_values = case.copy(Device("cpu")) if case.device.type != "cpu" else case.copy()
    with no_grad():
        ref = case.outputs(case.call(ref_values))
    for name in scope:
        backend = TABLE.find(name)
        if backend is None:
            yield name, SKIP, f"backend {name!r} is not installed", None, False
            continue
        name = backend.name
        if name == "cpu":
            yield name, SKIP, "cpu is the reference backend", None, True
            continue
        status = backend.status()
        if status is not None:
            yield name, SKIP, f"backend not available: {status}", None, False
            continue
        if backend.spec.fake_kernels:
            yield name, SKIP, "data-less backend (checked by test_faketensor)", None, True
            continue
        try:
            _, key = case.op.resolve(backend)
        except NoKernelError:
            yield name, SKIP, f"no kernel for backend {name!r}", None, False
            continue
        try:
            values = case.copy(Device(name))
            before = _snapshot(case, values)
            cannot, got = None, []
            with no_grad():
                try:
                    got = case.outputs(case.call(values))
                except Exception as e:
                    cannot = _default_cannot_run(case, backend, key, e)
                    if cannot is None:
                        raise
            if cannot is not None:
                yield name, SKIP, cannot, None, False
                continue
            _check_mutations(case, values, before, warn=False)
            if compare_values:
                _compare_values(got, ref, name, rtol, atol)
            else:
                _compare_meta(
                    f"backend {name!r}",
                    got,
                    ref,
                    "cpu",
                    expect_device=Device(name, 0 if backend.multi_device else None),
                )
        except NoKernelError as e:  # a kernel that refuses these arguments (dask and masks)
            yield name, SKIP, f"no kernel for these arguments on {name!r}: {e}", None, False
        except Exception as e:
            status, reason, error = _verdict(backend, e)
            yield name, status, reason, error, status == FAIL
        else:
            yield name, PASS, "", None, True


def _default_cannot_run(case: _Case, backend: Backend, key: str, e: Exception) -> str | None:
    """Why ``backend`` is skipped when the op's ``default`` kernel, which served it
    (``key``), raised ``e`` on its arrays: a ``default`` kernel written in numpy (as torch
    ``default`` kernels are ported) runs on cpu only, and is no backend's bug. None when
    another kernel raised, or the error is a dtype the backend declares it lacks."""
    if key != COMPOSITE_EXPLICIT or dtype_failure(backend, e) is not None:
        return None
    kernel = case.op.kernel(COMPOSITE_EXPLICIT)
    where = f" ({kernel.origin.source})" if kernel is not None else ""
    return (
        f"the default kernel of {case.qualname}{where} cannot take {backend.name} arrays: "
        f"{type(e).__name__}: {e}. A default kernel written in numpy runs on cpu only: "
        "register it for 'cpu' (and a kernel per other device)"
    )


def _verdict(backend: Backend | None, e: Exception) -> tuple[str, str, Exception | None]:
    """(status, reason, error) of a check that raised ``e``: a FAIL saying what went wrong,
    or a SKIP when ``e`` comes from a dtype ``backend`` declares it cannot hold."""
    what = str(e) if isinstance(e, _Failure) else f"raised {type(e).__name__}: {e}"
    problem = None if backend is None else dtype_failure(backend, e)
    if problem is None:
        return FAIL, what, e
    return SKIP, f"{problem} ({e})" if isinstance(e, _Failure) else problem, None


def dtype_failure(backend: Backend, error: BaseException | None) -> str | None:
    """The backend's reason when ``error`` (or its cause) carries a ``dtype`` the backend
    declares it cannot hold (``BackendSpec.dtypes``: float64 data, or an int64 result, on
    JAX in its 32-bit mode), else ``None``: such a failure is a skip, not a bug."""
    while error is not None:
        if isinstance(error, _Failure):  # a dtype mismatch with the reference
            problems = (backend.dtype_problem(d) for d in error.dtypes)
            return next((p for p in problems if p is not None), None)
        dtype = getattr(error, "dtype", None)
        if isinstance(dtype, np.dtype):
            return backend.dtype_problem(dtype)
        error = error.__cause__
    return None


#: (eps, atol, rtol) of gradcheck in an op's own dtype when its kernel refuses float64:
#: torch's guidance for lower precision (a float32 step of 1e-3 keeps the rounding error of
#: the differences near 1e-4 of the result, and tolerances of 1e-2 accept it).
_LOW_PRECISION = {"float32": (1e-3, 1e-2, 1e-2), "complex64": (1e-3, 1e-2, 1e-2)}


def _gradcheck_precision(
    case: _Case, target: Device
) -> tuple[np.dtype | None, float, float, float] | str:
    """``(dtype, eps, atol, rtol)`` for gradcheck: float64 where the kernel takes float64,
    else the inputs' own dtype (``None``) with tolerances for it; or why it cannot run."""
    values = case.copy(target)
    own = {str(t.dtype) for _, _, t in case.tensors(values) if t.dtype.kind in "fc"} - {
        "float64",
        "complex128",
    }
    if not own:
        return np.dtype(np.float64), 1e-6, 1e-5, 1e-3
    with no_grad():
        wide = {
            a.name: [_wide(x) for x in v] if isinstance(v, list) else _wide(v)
            for a, v in ((a, values[a.name]) for a in case.schema.arguments)
        }
        try:
            case.call(wide)
        except Exception as e:  # the kernel refuses float64: check in the inputs' dtype
            refusal = f"{case.qualname} refuses float64 ({type(e).__name__}: {e})"
        else:
            return np.dtype(np.float64), 1e-6, 1e-5, 1e-3
    if len(own) == 1 and next(iter(own)) in _LOW_PRECISION:
        eps, atol, rtol = _LOW_PRECISION[next(iter(own))]
        return None, eps, atol, rtol
    return (
        f"{refusal}, and finite differences in {', '.join(sorted(own))} are too coarse to "
        "compare gradients"
    )


def _wide(v: Any) -> Any:
    """A floating Tensor as float64 (complex128); anything else as it is."""
    if not isinstance(v, Tensor) or v.dtype.kind not in "fc":
        return v
    return _copy_op()(v, dtype=np.dtype(np.complex128 if v.dtype.kind == "c" else np.float64))


def _test_gradcheck(case: _Case, target: Device) -> str | None:
    if TABLE.get(target.type).spec.fake_kernels:
        return f"{target.type} arrays have no data"
    if not TABLE.get(target.type).spec.autograd:
        return f"{target.type} arrays do not record gradients"
    no_float64 = TABLE.get(target.type).dtype_problem(np.float64)
    if no_float64 is not None:
        return f"gradcheck compares in float64, but {no_float64}"
    if not _grad_inputs(case):
        return "no input requires grad"
    autograd = case.op.kernel(AUTOGRAD)
    if autograd is not None and autograd.is_fallthrough:
        return "the op is declared non-differentiable"
    try:
        case.op.autograd_kernel(TABLE.get(target.type))
    except RuntimeError:
        nothing = _no_differentiable_output(case, target)
        if nothing is not None:
            return nothing
    precision = _gradcheck_precision(case, target)
    if isinstance(precision, str):
        return precision
    dtype, eps, atol, rtol = precision
    values = case.copy(target)
    slots = [
        (a.name, i)
        for a in case.schema.arguments
        if a.type.is_tensor_like()
        for i, t in _leaves(values[a.name])
        if t.dtype.kind in "fc"
    ]
    inputs = [values[name] if i is None else values[name][i] for name, i in slots]

    def fn(*tensors: Tensor) -> Any:
        call = {k: (list(v) if isinstance(v, list) else v) for k, v in values.items()}
        for (name, i), t in zip(slots, tensors, strict=True):
            if i is None:
                call[name] = t
            else:
                call[name][i] = t
        return case.call(call)

    try:
        check_gradients(fn, inputs, dtype=dtype, eps=eps, atol=atol, rtol=rtol)
    except GradcheckError as e:
        raise _Failure(str(e).split("\nnumerical:")[0]) from e
    except NoKernelError as e:
        if e.op == case.qualname:
            raise
        # the formula (or the check itself) calls an op this backend has no kernel for:
        # not the op's fault, and nothing was compared
        return (
            f"checking the gradients of {case.qualname} needs {e.op}, which has no kernel "
            f"for backend {target.type!r}"
        )
    except ValueError as e:
        if "requires grad" in str(e):
            return "no output is differentiable"
        raise
    return None


# -- driver ---------------------------------------------------------------------------------
def results_for(op: str, backend: str) -> Callable[..., CheckResult]:
    """``result(check, status, reason="", error=None, where=None)``: a :class:`CheckResult`
    of ``op`` on backend ``where`` (default ``backend``)."""

    def result(
        check: str,
        status: str,
        reason: str = "",
        error: BaseException | None = None,
        where: str | None = None,
        covered: bool = True,
    ) -> CheckResult:
        return CheckResult(op, check, where or backend, status, reason, error, covered)

    return result


def run_checks(
    op: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    test_utils: str | Sequence[str] = DEFAULT_TEST_UTILS,
    backend: str | None = None,
    backends: Sequence[str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    compare_values: bool = True,
) -> Iterator[CheckResult]:
    """Run the checks of ``op(*args, **kwargs)`` and yield a :class:`CheckResult` per check
    and backend.

    The checks run where the inputs live, or on ``backend`` (inputs are copied there;
    ``meta`` gets data-less copies, compared with the real kernel on the inputs).
    ``test_backends`` compares ``backends`` (default: every installed backend) with cpu.
    """
    kwargs = dict(kwargs or {})
    utils = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    for u in utils:
        if u not in CHECKS:
            raise ValueError(
                f"opcheck(): unknown test_util {u!r}; expected some of {', '.join(CHECKS)}"
            )
    if isinstance(op, HigherOrderOperator):  # its checks build on this module's helpers
        from ._hop_checks import run_hop_checks

        yield from run_hop_checks(op, args, kwargs, utils, backend, backends, rtol, atol)
        return
    opo = _resolve_op(op, tuple(args), kwargs)
    case = _Case(opo, tuple(args), kwargs)
    target = case.device
    if backend is not None:
        b = TABLE.get(backend)
        target = Device(b.name, 0 if b.multi_device else None)
    target_backend = TABLE.get(target.type)
    qualname = case.qualname
    result = results_for(qualname, target_backend.name)

    unavailable = target_backend.status()
    if unavailable is not None:
        for u in utils:
            yield result(u, SKIP, f"backend not available: {unavailable}", covered=False)
        return
    try:
        opo.resolve(target_backend)
    except NoKernelError as e:
        reason = f"no kernel for backend {target_backend.name!r}"
        for u in utils:
            yield result(u, SKIP, reason, e, covered=False)
        return
    if target.type != case.device.type and _dataless_case(case):
        raise ValueError(
            f"opcheck(): the inputs of {qualname} are data-less ({case.device}); they cannot be "
            f"copied to {target}"
        )
    checks: dict[str, Callable[[Device], Any]] = {
        "test_schema": lambda where: _test_schema(case, where),
        "test_autograd_registration": lambda where: _test_autograd_registration(case, where),
        "test_faketensor": lambda where: _test_faketensor(case, where, case),
        "test_gradcheck": lambda where: _test_gradcheck(case, where),
    }
    for u in utils:
        if u == "test_faketensor" and backend is None and not _dataless_case(case):
            # also every data-less backend (meta) in scope, against this real kernel
            yield from _run_one(checks[u], u, target, result)
            for b in _dataless_scope(backends):
                try:
                    opo.resolve(b)
                except NoKernelError:
                    yield result(
                        u, SKIP, f"no kernel for backend {b.name!r}", where=b.name, covered=False
                    )
                    continue
                yield from _run_one(checks[u], u, Device(b.name), result, where=b.name)
            continue
        if u == "test_backends":
            if _dataless_case(case):
                yield result(u, SKIP, "the inputs are data-less: nothing to compare")
                continue
            cpu = TABLE.find("cpu")
            if cpu is None:
                yield result(u, SKIP, "the cpu backend (the reference) is not installed")
                continue
            try:
                opo.resolve(cpu)
            except NoKernelError:
                yield result(u, SKIP, "no cpu kernel to compare with", where="cpu")
                continue
            scope = list(backends) if backends is not None else _default_scope()
            try:
                rows = list(_backend_results(case, scope, rtol, atol, compare_values))
            except Exception as e:  # the cpu reference itself failed
                yield result(u, FAIL, f"the cpu reference raised {type(e).__name__}: {e}", e, "cpu")
                continue
            for name, status, reason, error, covered in rows:
                yield result(u, status, reason, error, name, covered=covered)
            continue
        yield from _run_one(checks[u], u, target, result)


def _run_one(
    check: Callable[[Device], Any],
    name: str,
    target: Device,
    result: Callable[..., CheckResult],
    where: str | None = None,
) -> Iterator[CheckResult]:
    try:
        skipped = check(target)
    except _Skip as e:
        yield result(name, SKIP, str(e), where=where)
    except NamespaceUnsupportedError as e:  # a shared kernel its namespace cannot run
        yield result(name, SKIP, str(e), e, where=where)
    except NoKernelError as e:  # a kernel that refuses these arguments (dask and masks)
        yield result(name, SKIP, f"no kernel for these arguments: {e}", where=where)
    except Exception as e:
        status, reason, error = _verdict(TABLE.find(where or target.type), e)
        yield result(name, status, reason, error, where=where)
    else:
        yield (
            result(name, SKIP, skipped, where=where) if skipped else result(name, PASS, where=where)
        )


def _dataless_scope(backends: Sequence[str] | None) -> list[Backend]:
    found = [TABLE.find(n) for n in backends] if backends is not None else TABLE.all()
    return [b for b in found if b is not None and b.spec.fake_kernels and b.is_available()]


def _dataless_case(case: _Case) -> bool:
    if case.has_tensors:
        return any(_dataless(t) for _, _, t in case.tensors())
    return TABLE.get(case.device.type).spec.fake_kernels


def _default_scope() -> list[str]:
    """Every available backend with data other than the reference (cpu)."""
    return [
        b.name
        for b in TABLE.all()
        if b.name != "cpu" and b.is_available() and not b.spec.fake_kernels
    ]


def opcheck(
    op: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    test_utils: str | Sequence[str] = DEFAULT_TEST_UTILS,
    raise_exception: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    backends: Sequence[str] | None = None,
) -> OpCheckResults:
    """Check that ``op``'s registrations are consistent, by calling ``op(*args, **kwargs)``.

    ``test_utils`` picks checks among ``test_schema``, ``test_autograd_registration``,
    ``test_faketensor``, ``test_backends``, ``test_gradcheck`` (all by default).
    ``test_backends`` compares every available backend (or ``backends``) with cpu, within
    ``rtol``/``atol`` (default: by dtype). A check that cannot apply is skipped with its
    reason, not failed: a backend without a kernel for the op (or whose arrays the op's
    ``default`` kernel cannot take), gradcheck of a kernel that refuses float64 in a dtype
    too coarse for finite differences (float32 is checked in float32), autograd checks of an
    op with no output that could require grad. It passes wherever torch's ``opcheck``
    passes on the same op: ``test_faketensor`` on a data-less backend (``meta``) the inputs
    do not live on, which torch's opcheck does not run, warns instead of failing.

    Raises :class:`OpCheckError` on the first failure, naming the check, the backend and
    what differed. With ``raise_exception=False`` returns a dict check → ``"SUCCESS"`` or
    the exception (its ``details`` attribute lists every result, skips included).
    """
    results = OpCheckResults()
    results.details = []
    for r in run_checks(
        op, args, kwargs, test_utils=test_utils, backends=backends, rtol=rtol, atol=atol
    ):
        results.details.append(r)
        if r.status == FAIL and _beyond_torch(r, results.details[0]):
            warnings.warn(
                f"opcheck({r.op}): {r.check} on backend {r.backend}: {r.reason} (torch's "
                f"opcheck does not run the {r.backend} device: reported, not failed)",
                UserWarning,
                stacklevel=3,  # past oplib.opcheck's lazy wrapper: the caller's line
            )
            continue
        if r.status != FAIL:
            if r.status == PASS or r.covered:
                if results.get(r.check) in (None, SKIPPED):
                    results[r.check] = "SUCCESS"
            else:
                results.setdefault(r.check, SKIPPED)
            continue
        error = OpCheckError(
            f"opcheck({r.op}): {r.check} failed on backend {r.backend}: {r.reason}",
            op=r.op,
            check=r.check,
            backend=r.backend,
        )
        if raise_exception:
            raise error from r.error
        error.__cause__ = r.error
        if not isinstance(results.get(r.check), Exception):
            results[r.check] = error
    handler = UNCHECKED.get()
    if handler is not None and results.details and not results.checked:
        first = results.details[0]  # the backend the inputs live on
        handler(first.backend, f"opcheck({first.op}): {first.reason}")
    return results


def _beyond_torch(r: CheckResult, first: CheckResult) -> bool:
    """Whether ``r`` is the fake check on a data-less backend other than the one the inputs
    live on (``first``'s): oplib's extra, which torch's opcheck (FakeTensorMode only) lacks.
    An op may mean its fake kernel's meta answer as a placeholder (FBGEMM's repeat_arange)."""
    backend = TABLE.find(r.backend)
    return (
        r.check == "test_faketensor"
        and r.backend != first.backend
        and backend is not None
        and backend.spec.fake_kernels
    )


#: ``handler(backend, reason)``, called by :func:`opcheck` when nothing was checked on the
#: backend its inputs live on (no kernel for the op there, backend not available). The
#: pytest plugin sets it while a test using ``oplib_device`` runs, to skip that test.
UNCHECKED: contextvars.ContextVar[Callable[[str, str], None] | None] = contextvars.ContextVar(
    "oplib_opcheck_unchecked", default=None
)
