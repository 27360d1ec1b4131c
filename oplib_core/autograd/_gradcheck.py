"""``gradcheck``: compare a function's gradients with central finite differences (float64;
``opcheck`` also checks ops whose kernels refuse float64 in their own float32)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._grad_mode import no_grad
from .._registry.registry import op_named
from .._tensor.tensor import Tensor
from ..errors import OplibError
from ._engine import grad

__all__ = ["GradcheckError", "check_gradients", "gradcheck", "gradgradcheck"]


class GradcheckError(OplibError, RuntimeError):
    """Analytical and numerical gradients differ. Carries ``output``, ``input`` (indices),
    ``numerical`` and ``analytical`` (float64 numpy Jacobians, rows = input elements,
    columns = output elements)."""

    def __init__(
        self,
        message: str,
        *,
        output: int,
        input: int,
        numerical: np.ndarray,
        analytical: np.ndarray,
    ) -> None:
        super().__init__(message)
        self.output = output
        self.input = input
        self.numerical = numerical
        self.analytical = analytical


_FLOAT64 = np.dtype(np.float64)
_WIDE = (_FLOAT64, np.dtype(np.complex128))


def _host(t: Tensor) -> np.ndarray:
    return np.asarray(t.backend.to_host(t._data), dtype=np.float64)


def _like(t: Tensor, host: np.ndarray) -> Tensor:
    b = t.backend
    return Tensor._wrap(b.from_host(np.array(host, order="C"), b.device_of(t._data)))


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def gradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any] | Tensor,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check the gradients of ``fn(*inputs)`` with respect to the inputs that require grad
    against central finite differences, all in float64 (inputs are converted).

    Returns True, or raises :class:`GradcheckError` naming the output, the input and the
    first mismatching element (returns False with ``raise_exception=False``).
    """
    return _gradcheck(fn, inputs, eps, atol, rtol, raise_exception, no_diff_outputs=False)


def check_gradients(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    dtype: np.dtype | None,
    eps: float,
    atol: float,
    rtol: float,
) -> bool:
    """``gradcheck`` in ``dtype`` (None: each input's own dtype, for ops whose kernels
    refuse float64); ``opcheck``'s ``test_gradcheck``."""
    return _gradcheck(fn, inputs, eps, atol, rtol, True, no_diff_outputs=False, dtype=dtype)


def _gradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any] | Tensor,
    eps: float,
    atol: float,
    rtol: float,
    raise_exception: bool,
    *,
    no_diff_outputs: bool,
    dtype: np.dtype | None = _FLOAT64,
) -> bool:
    """``gradcheck``; with ``no_diff_outputs``, a function none of whose outputs requires
    grad passes when its numerical Jacobian is zero (torch's rule), instead of raising.
    The floating inputs are converted to ``dtype`` (None: kept in their own)."""
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    to_copy = op_named("oplib::_to_copy")
    args: list[Any] = []
    wrt: list[int] = []
    for i, a in enumerate(inputs):
        if isinstance(a, Tensor) and a.dtype.kind in "fc":
            with no_grad():
                c = to_copy(a.detach(), dtype=dtype if dtype is not None else a.dtype)
            if a.requires_grad:
                c.requires_grad_(True)
                wrt.append(i)
            args.append(c)
        else:
            args.append(a)
    if not wrt:
        raise ValueError(
            "gradcheck(): none of the inputs requires grad; call requires_grad_() on the "
            "tensors to check"
        )
    outs = _outputs(fn(*args))
    diff_outs = [(k, o) for k, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
    if not diff_outs:
        if no_diff_outputs:
            return _check_constant(fn, args, wrt, outs, eps, raise_exception)
        raise ValueError("gradcheck(): no output of fn requires grad")
    wrt_tensors = [args[i] for i in wrt]
    for k, out in diff_outs:
        n_out = out.numel()
        analytical = [np.zeros((args[i].numel(), n_out)) for i in wrt]
        base = np.zeros(n_out)
        for j in range(n_out):
            base[:] = 0
            base[j] = 1
            seed = _like(out, base.reshape(out.shape).astype(out.dtype))
            gs = grad([out], wrt_tensors, [seed], retain_graph=True, allow_unused=True)
            for col, g in enumerate(gs):
                if g is not None:
                    analytical[col][:, j] = _host(g).reshape(-1)
        for col, i in enumerate(wrt):
            numerical = np.zeros((int(np.prod(args[i].shape)), n_out))
            for e, plus, minus, step in _central_differences(fn, args, i, k, eps):
                numerical[e, :] = (plus - minus).reshape(-1) / step
            a = analytical[col]
            bad = ~(np.abs(a - numerical) <= atol + rtol * np.abs(numerical))
            if bad.any():
                if not raise_exception:
                    return False
                e, j = (int(v[0]) for v in np.nonzero(bad))
                raise GradcheckError(
                    f"gradcheck(): Jacobian mismatch for output {k} with respect to input {i}: "
                    f"d out[{j}] / d in[{e}] is {a[e, j]!r} by the autograd formula (analytical) "
                    f"but {numerical[e, j]!r} by finite differences (numerical, eps={eps}); "
                    f"{int(bad.sum())} of {bad.size} entries differ beyond atol={atol}, "
                    f"rtol={rtol}.\nnumerical:\n{numerical}\nanalytical:\n{a}",
                    output=k,
                    input=i,
                    numerical=numerical,
                    analytical=a,
                )
    return True


def _central_differences(
    fn: Callable[..., Any], args: list[Any], i: int, k: int, eps: float
) -> Iterator[tuple[int, np.ndarray, np.ndarray, float]]:
    """``(e, plus, minus, step)`` per element ``e`` of input ``i``: output ``k`` of ``fn``
    with that element moved by ``+eps`` and by ``-eps`` (the other elements as given), and
    the distance between the two points (``2 * eps``, or in a narrower dtype than float64
    what is left of it after rounding)."""
    x = args[i]
    kind = np.dtype(x.dtype)
    host = np.asarray(x.backend.to_host(x._data)).astype(kind, copy=True)
    flat = host.reshape(-1)
    for e in range(flat.size):
        orig = flat[e]
        flat[e] = orig + eps
        hi = flat[e]
        plus = _eval(fn, args, i, _like(x, host), k)
        flat[e] = orig - eps
        lo = flat[e]
        minus = _eval(fn, args, i, _like(x, host), k)
        flat[e] = orig
        step = 2 * eps if kind in _WIDE else complex(hi - lo).real
        yield e, plus, minus, step


def _eval(fn: Callable[..., Any], args: list[Any], i: int, value: Tensor, k: int) -> np.ndarray:
    call = list(args)
    # the perturbed input requires grad like the original: fn may differentiate inside
    call[i] = value.requires_grad_(True)
    out = _outputs(fn(*call))[k]
    return _host(out.detach())


def _check_constant(
    fn: Callable[..., Any],
    args: list[Any],
    wrt: list[int],
    outs: list[Any],
    eps: float,
    raise_exception: bool,
) -> bool:
    """No output requires grad, so the numerical Jacobian must be zero (as in torch)."""
    for k, out in enumerate(outs):
        if not isinstance(out, Tensor) or out.dtype.kind not in "fc":
            continue
        for i in wrt:
            for e, plus, minus, _ in _central_differences(fn, args, i, k, eps):
                if np.any(plus != minus):
                    if not raise_exception:
                        return False
                    numerical = (plus - minus).reshape(-1) / (2 * eps)
                    raise GradcheckError(
                        f"Numerical gradient for function expected to be zero: no output "
                        f"requires grad, but output {k} changes with input {i} (element "
                        f"{e}: {numerical}); the gradients are not differentiable (was the "
                        "backward formula written with native array code instead of oplib "
                        "ops?)",
                        output=k,
                        input=i,
                        numerical=numerical.reshape(1, -1),
                        analytical=np.zeros((1, numerical.size)),
                    )
    return True


def gradgradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any] | Tensor,
    grad_outputs: Sequence[Any] | Tensor | None = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Check second derivatives, as torch's ``gradgradcheck``: ``gradcheck`` of the function
    that maps ``(*inputs, *grad_outputs)`` to the gradients of ``fn(*inputs)`` with respect
    to the inputs that require grad, computed with ``create_graph=True``.

    ``grad_outputs`` (one per output that requires grad) default to random values in
    [-1, 1) (float64, from ``numpy.random.default_rng(seed)``) that require grad.
    Everything runs in float64. Returns True or raises :class:`GradcheckError`
    (returns False with ``raise_exception=False``).
    """
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    args = _float64(inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        outs = [o for o in _outputs(fn(*args)) if isinstance(o, Tensor) and o.requires_grad]
        if not outs:
            raise ValueError("gradgradcheck(): no output of fn requires grad")
        gouts: list[Any] = [
            _like(o, rng.uniform(-1.0, 1.0, size=tuple(o.shape))).requires_grad_(True) for o in outs
        ]
    else:
        gouts = _float64((grad_outputs,) if isinstance(grad_outputs, Tensor) else grad_outputs)
    n_out = len(gouts)
    diff_inputs = {i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad}
    if not diff_inputs:
        raise ValueError(
            "gradgradcheck(): none of the inputs requires grad; call requires_grad_() on the "
            "tensors to check"
        )

    def first_order(*call: Any) -> tuple[Any, ...]:
        ins = call[:-n_out] if n_out else call
        outs = [o for o in _outputs(fn(*ins)) if isinstance(o, Tensor) and o.requires_grad]
        wrt = [x for i, x in enumerate(ins) if i in diff_inputs]
        gs = grad(outs, wrt, list(call[len(ins) :]), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return _gradcheck(
        first_order, [*args, *gouts], eps, atol, rtol, raise_exception, no_diff_outputs=True
    )


def _float64(values: Sequence[Any]) -> list[Any]:
    """Float64 copies of the floating Tensors (keeping ``requires_grad``); the rest as is."""
    to_copy = op_named("oplib::_to_copy")
    out: list[Any] = []
    for a in values:
        if isinstance(a, Tensor) and a.dtype.kind in "fc":
            with no_grad():
                c = to_copy(a.detach(), dtype=np.dtype(np.float64))
            out.append(c.requires_grad_(True) if a.requires_grad else c)
        else:
            out.append(a)
    return out
