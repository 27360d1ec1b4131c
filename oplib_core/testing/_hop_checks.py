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
from .._registry.registry import AUTOGRAD
from .._tensor.tensor import Tensor
from ..autograd._gradcheck import GradcheckError, gradcheck
from ..backends import TABLE, Backend
from ..fake._mode import FakeTensorMode
from ._checks import (
    FAIL,
    SKIP,
    CheckResult,
    _compare_meta,
    _compare_values,
    _dataless_scope,
    _default_scope,
    _Failure,
    _run_one,
    results_for,
)

__all__ = ["run_hop_checks"]


def _arrays(values: list[Any]) -> list[int]:
    """Positions of the tensors (Tensors or native arrays) among flattened arguments."""
    return [
        i for i, v in enumerate(values) if type(v) is Tensor or TABLE.for_type(type(v)) is not None
    ]


class _HopCase:
    """One call ``hop(*args, **kwargs)``: its flattened arguments and the tensors in them."""

    def __init__(self, hop: HigherOrderOperator, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.hop = hop
        self.values, self.spec = tree_flatten((args, kwargs))
        self.slots = _arrays(self.values)
        self._ref: list[Any] | None = None

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

    def reference(self) -> list[Any]:
        """The outputs of the call on cpu (computed once)."""
        if self._ref is None:
            self._ref = self.call(self.on(Device("cpu")))
        return self._ref

    def requiring_grad(self) -> list[int]:
        return [
            i for i in self.slots if type(self.values[i]) is Tensor and self.values[i].requires_grad
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
    backend: str | None,
    backends: Sequence[str] | None,
    rtol: float | None,
    atol: float | None,
) -> Iterator[CheckResult]:
    """``run_checks`` for a higher-order operator's call. The checks run on cpu; with
    ``backend`` (``oplib check`` asks one backend at a time) another backend runs only its
    own check: ``test_backends`` against cpu, or ``test_faketensor`` for a data-less one."""
    case = _HopCase(hop, tuple(args), kwargs)
    target = TABLE.get(backend) if backend is not None else TABLE.get("cpu")
    cpu = Device("cpu")
    result = results_for(hop.qualname, target.name)

    if target.name != "cpu":
        own = "test_faketensor" if target.spec.fake_kernels else "test_backends"
        for u in utils:
            if u != own:
                yield result(u, SKIP, "checked on cpu")
            elif not _handles(hop, target):
                yield result(u, SKIP, f"no handler for backend {target.name!r}", covered=False)
            else:
                yield from _with_reference(case, u, target, [target.name], rtol, atol, result)
        return
    for u in utils:
        if u == "test_schema":
            yield result(u, SKIP, "a higher-order operator has no schema")
        elif u == "test_autograd_registration":
            yield from _run_one(lambda _: _test_autograd_registration(case), u, cpu, result)
        elif u == "test_gradcheck":
            yield from _run_one(lambda _: _test_gradcheck(case), u, cpu, result)
        elif u == "test_faketensor":
            yield from _with_reference(case, u, None, backends, rtol, atol, result)
            for dataless in _dataless_scope(backends):
                yield from _with_reference(case, u, dataless, backends, rtol, atol, result)
        else:
            scope = list(backends) if backends is not None else _default_scope()
            if all(name == "cpu" for name in scope):
                yield result(u, SKIP, "cpu is the reference: no other backend to compare")
            for name in scope:
                b = TABLE.find(name)
                if b is None or b.name == "cpu":
                    continue
                why = b.status()
                if why is not None:
                    yield result(
                        u, SKIP, f"backend not available: {why}", where=b.name, covered=False
                    )
                elif not _handles(hop, b):
                    yield result(
                        u, SKIP, f"no handler for backend {b.name!r}", where=b.name, covered=False
                    )
                else:
                    yield from _with_reference(case, u, b, scope, rtol, atol, result)


def _with_reference(
    case: _HopCase,
    check: str,
    where: Backend | None,
    backends: Sequence[str] | None,
    rtol: float | None,
    atol: float | None,
    result: Callable[..., CheckResult],
) -> Iterator[CheckResult]:
    """Run ``check`` on ``where`` (None: under FakeTensorMode) against the cpu call."""
    name = where.name if where is not None else "cpu"
    try:
        ref = case.reference()
    except Exception as e:
        yield result(check, FAIL, f"the cpu call raised {type(e).__name__}: {e}", e, "cpu")
        return

    def run(_: Device) -> None:
        if check == "test_faketensor":
            _test_faketensor(case, where, ref)
            return
        assert where is not None
        got = case.call(case.on(Device(where.name, 0 if where.multi_device else None)))
        _compare_values(got, ref, where.name, rtol, atol)

    yield from _run_one(run, check, Device("cpu"), result, name)
