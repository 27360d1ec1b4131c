"""``gradcheck``: compare a function's gradients with central finite differences (float64)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._grad_mode import no_grad
from .._registry import REGISTRY
from .._tensor import Tensor
from ..errors import OplibError
from ._engine import grad

__all__ = ["GradcheckError", "gradcheck"]


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
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    to_copy = REGISTRY.ops["oplib::_to_copy"].overload
    args: list[Any] = []
    wrt: list[int] = []
    for i, a in enumerate(inputs):
        if isinstance(a, Tensor) and a.dtype.kind in "fc":
            with no_grad():
                c = to_copy(a.detach(), dtype=np.dtype(np.float64))
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
            x = args[i]
            host = _host(x)
            flat = host.reshape(-1)
            numerical = np.zeros((flat.size, n_out))
            for e in range(flat.size):
                orig = flat[e]
                flat[e] = orig + eps
                plus = _eval(fn, args, i, _like(x, host), k)
                flat[e] = orig - eps
                minus = _eval(fn, args, i, _like(x, host), k)
                flat[e] = orig
                numerical[e, :] = (plus - minus).reshape(-1) / (2 * eps)
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


def _eval(fn: Callable[..., Any], args: list[Any], i: int, value: Tensor, k: int) -> np.ndarray:
    call = list(args)
    # the perturbed input requires grad like the original: fn may differentiate inside
    call[i] = value.requires_grad_(True)
    out = _outputs(fn(*call))[k]
    return _host(out.detach())
