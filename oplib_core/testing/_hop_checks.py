"""``opcheck`` for a higher-order operator: the checks that apply to a call with functions
among its arguments (``run_checks`` hands such calls here).

- ``test_schema``: skipped (a higher-order operator has no schema);
- ``test_autograd_registration``: when an input requires grad, the operator has an
  ``Autograd`` handler;
- ``test_faketensor``: under ``FakeTensorMode``, and on data-less backends (meta), the
  outputs have the real call's shapes and dtypes;
- ``test_backends``: every other available backend with a handler gives the cpu result;
- ``test_gradcheck``: gradients through the operator agree with finite differences, for
  the floating inputs that require grad.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._device import Device
from .._higher_order._operator import HigherOrderOperator
from .._higher_order._pytree import tree_flatten, tree_unflatten
from .._registry import AUTOGRAD
from .._tensor import Tensor
from ..autograd._gradcheck import GradcheckError, gradcheck
from ..backends import TABLE, Backend
from ..fake._mode import FakeTensorMode
from ._checks import (
    FAIL,
    PASS,
    SKIP,
    CheckResult,
    _compare_meta,
    _compare_values,
    _dataless_scope,
    _default_scope,
    _Failure,
    _run_one,
)

__all__ = ["run_hop_checks"]


def _arrays(values: list[Any]) -> list[int]:
    """Positions of the tensors (Tensors or native arrays) among flattened arguments."""
    return [
        i
        for i, v in enumerate(values)
        if type(v) is Tensor or TABLE.for_type(type(v)) is not None
    ]


class _HopCase:
    """One call ``hop(*args, **kwargs)``: its flattened arguments and the tensors in them."""

    def __init__(self, hop: HigherOrderOperator, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.hop = hop
        self.values, self.spec = tree_flatten((args, kwargs))
        self.slots = _arrays(self.values)

    def call(self, values: list[Any]) -> list[Any]:
        args, kwargs = tree_unflatten(values, self.spec)
        return tree_flatten(self.hop(*args, **kwargs))[0]

    def replaced(self, fn: Callable[[Any], Any]) -> list[Any]:
        values = list(self.values)
        for i in self.slots:
            values[i] = fn(values[i])
        return values

    def on(self, device: Device) -> list[Any]:
        def move(v: Any) -> Any:
            if type(v) is Tensor:
                return v.detach().to(device)
            return Tensor._wrap(v).to(device)._data

        return self.replaced(move)

    def requiring_grad(self) -> list[int]:
        return [
            i
            for i in self.slots
            if type(self.values[i]) is Tensor and self.values[i].requires_grad
        ]


def _handles(hop: HigherOrderOperator, backend: Backend) -> bool:
    return any(fn is not None for _, fn, _ in hop.resolution_steps(backend))


def _test_autograd_registration(case: _HopCase) -> str | None:
    if not case.requiring_grad():
        return "no input requires grad"
    if case.hop.handler(AUTOGRAD) is None:
        raise _Failure(
            f"an input requires grad but {case.hop.qualname} has no Autograd handler; register "
            "one with py_impl('Autograd') (or a fallthrough for a non-differentiable operator)"
        )
    return None


def _test_faketensor(case: _HopCase, where: Backend | None, ref: list[Any]) -> None:
    if where is None:
        mode = FakeTensorMode()
        values = case.replaced(mode.from_real)
        with mode:
            got = case.call(values)
        _compare_meta("FakeTensorMode", got, ref, "the real call", None)
    else:
        got = case.call(case.on(Device(where.name)))
        _compare_meta(where.name, got, ref, "the real call", Device(where.name))


def _test_gradcheck(case: _HopCase) -> str | None:
    slots = [i for i in case.requiring_grad() if case.values[i].dtype.kind in "fc"]
    if not slots:
        return "no floating input requires grad"
    if case.hop.py_kernel(AUTOGRAD) is None:
        return "the operator has no Autograd handler"
    values = list(case.values)

    def fn(*tensors: Tensor) -> Any:
        call = list(values)
        for i, t in zip(slots, tensors, strict=True):
            call[i] = t
        out = [o for o in case.call(call) if type(o) is Tensor]
        return tuple(out) if len(out) != 1 else out[0]

    try:
        gradcheck(fn, [values[i] for i in slots])
    except GradcheckError as e:
        raise _Failure(str(e).split("\nnumerical:")[0]) from e
    return None


def run_hop_checks(
    hop: HigherOrderOperator,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    utils: tuple[str, ...],
    backends: Sequence[str] | None,
    rtol: float | None,
    atol: float | None,
) -> Iterator[CheckResult]:
    """``run_checks`` for a higher-order operator's call."""
    case = _HopCase(hop, tuple(args), kwargs)

    def result(
        check: str,
        status: str,
        reason: str = "",
        error: BaseException | None = None,
        where: str | None = None,
    ) -> CheckResult:
        return CheckResult(hop.qualname, check, where or "cpu", status, reason, error)

    cpu = Device("cpu")
    ref: list[Any] | None = None
    for u in utils:
        if u == "test_schema":
            yield result(u, SKIP, "a higher-order operator has no schema")
        elif u == "test_autograd_registration":
            yield from _run_one(lambda _: _test_autograd_registration(case), u, cpu, result)
        elif u == "test_gradcheck":
            yield from _run_one(lambda _: _test_gradcheck(case), u, cpu, result)
        else:
            if ref is None:
                try:
                    ref = case.call(case.on(cpu))
                except Exception as e:
                    yield result(u, FAIL, f"the cpu call raised {type(e).__name__}: {e}", e)
                    continue
            reference = ref
            if u == "test_faketensor":
                yield from _run_one(lambda _: _test_faketensor(case, None, reference), u, cpu, result)
                for b in _dataless_scope(backends):
                    yield from _run_one(
                        lambda _, b=b: _test_faketensor(case, b, reference), u, cpu, result, b.name
                    )
            else:
                yield from _hop_backends(case, reference, backends, rtol, atol, result)


def _hop_backends(
    case: _HopCase,
    ref: list[Any],
    backends: Sequence[str] | None,
    rtol: float | None,
    atol: float | None,
    result: Callable[..., CheckResult],
) -> Iterator[CheckResult]:
    u = "test_backends"
    for name in list(backends) if backends is not None else _default_scope():
        b = TABLE.find(name)
        if b is None or b.name == "cpu":
            continue
        why = b.status()
        if why is not None:
            yield result(u, SKIP, f"backend not available: {why}", where=b.name)
            continue
        if not _handles(case.hop, b):
            yield result(u, SKIP, f"no handler for backend {b.name!r}", where=b.name)
            continue
        try:
            got = case.call(case.on(Device(b.name, 0 if b.multi_device else None)))
            _compare_values(got, ref, b.name, rtol, atol)
        except _Failure as e:
            yield result(u, FAIL, str(e), e, b.name)
        except Exception as e:
            yield result(u, FAIL, f"raised {type(e).__name__}: {e}", e, b.name)
        else:
            yield result(u, PASS, where=b.name)
