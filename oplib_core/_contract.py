"""The backend contract: what a native array, a ``BackendSpec`` and a backend's kernels must
provide for the core to work on a device, in one vocabulary that the backend guide
(``docs/writing-a-backend.md``, its tables generated from here) and
``oplib check --backend NAME --contract`` both use.

The minimum op set is computed, not listed: the core ops that the autograd formulas call
(found by running every core op's cpu samples backward under the profiler) and those the
factories and ``Tensor.to`` call. So it follows the formulas as they change.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ._device import Device
from ._factories import ones_like
from ._registry.lookup import lookup
from ._tensor.tensor import Tensor
from .autograd import grad
from .backends import TABLE, Backend, BackendSpec, not_installed
from .errors import NoKernelError
from .kernels import CORE_OPS
from .profiler import profile
from .testing import sample_inputs

__all__ = [
    "ARRAY",
    "SPEC_NEEDED",
    "Gap",
    "check_backend",
    "factory_ops",
    "formula_ops",
    "markdown",
    "minimum_ops",
    "spec_fields",
]

#: What the core itself (outside your kernels) reads or calls on a native array.
#: ``tests/test_backend_contract.py`` runs the core op set, forward and backward, on arrays
#: that record every attribute used, and checks that nothing else is.
ARRAY: tuple[tuple[str, str], ...] = (
    ("shape", "a tuple of ints: Tensor.shape, broadcasting and shape checks in dispatch"),
    ("dtype", "the element type: Tensor.dtype, type promotion, opcheck's tolerances"),
    ("ndim", "the number of dimensions: Tensor.ndim, dimension checks"),
    (
        "__getitem__",
        "basic indexing (ints and slices) giving an array of the same backend: the default "
        "kernel of oplib::_narrow, which the gradients of cat/stack and the control-flow "
        "operators use",
    ),
)

#: ``BackendSpec`` fields that have defaults but without which a core feature fails.
SPEC_NEEDED: tuple[tuple[str, str], ...] = (
    (
        "from_host",
        "oplib.tensor(data, device=...), Tensor.to(device), opcheck and oplib check (samples "
        "are copied to the device)",
    ),
    (
        "to_host",
        "Tensor.to('cpu'), .numpy(), .item(), opcheck's comparisons with cpu (without it "
        "numpy.asarray(array) is used)",
    ),
)

#: Core ops that move data or make arrays: ``Tensor.to`` and the factories call them.
_FACTORY_CALLS = ("zeros", "ones", "full", "empty", "arange")


def spec_fields() -> list[tuple[str, bool, str]]:
    """``BackendSpec``'s fields: (name, required, default), from its signature. Besides
    ``name``, one of ``array_types``/``array_type_names`` is required."""
    out = []
    for p in inspect.signature(BackendSpec).parameters.values():
        required = p.default is inspect.Parameter.empty
        default = "" if required else _default_text(p.default)
        out.append((p.name, required, default))
    return out


def _default_text(value: Any) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return str(value.__name__).lstrip("_")
    return repr(value)


def _tensors(x: Any) -> Iterator[Tensor]:
    if isinstance(x, Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


@cache
def formula_ops() -> dict[str, tuple[str, ...]]:
    """The core ops the autograd formulas call: op → the core ops whose gradients need
    it. Found by running every core op's cpu samples backward under the profiler (once
    per process)."""
    if TABLE.find("cpu") is None:
        raise not_installed("cpu", "formula_ops")
    needed: dict[str, set[str]] = {}
    cpu = Device("cpu")
    for core in CORE_OPS:
        op = lookup(f"oplib::{core.name}")
        for s in sample_inputs(op, cpu):
            leaves = [t for t in _tensors([*s.args, *s.kwargs.values()]) if t.requires_grad]
            if not leaves:
                continue
            outs = [o for o in _tensors(op(*s.args, **s.kwargs)) if o.requires_grad]
            if not outs:
                continue
            seeds = [ones_like(o) for o in outs]
            with profile() as prof:
                grad(outs, leaves, seeds, allow_unused=True)
            for e in prof.events():
                if e.kind == "op":
                    q = e.name if e.overload in ("", "default") else f"{e.name}.{e.overload}"
                    needed.setdefault(q, set()).add(core.name)
    return {q: tuple(sorted(v)) for q, v in sorted(needed.items())}


def factory_ops() -> tuple[str, ...]:
    """The core ops the factories (``oplib.zeros`` ...) and ``Tensor.to`` call on a device:
    ``_to_copy``, whose default kernel copies on one device with ``clone`` (and ``astype``
    for a new dtype), as ``t.to(dtype)``, ``t.clone()`` and gradcheck's copies do."""
    return (
        *(f"oplib::{n}" for n in _FACTORY_CALLS),
        "oplib::_to_copy",
        "oplib::clone",
        "oplib::astype",
    )


def minimum_ops(*, autograd: bool = True, quote: Callable[[str], str] = str) -> dict[str, str]:
    """The minimum op set a backend needs, each op with what needs it (``quote`` marks up
    the names: the guide shows them as code)."""
    why: dict[str, list[str]] = {
        q: [f"the factories and {quote('Tensor.to')}"] for q in factory_ops()
    }
    if autograd:
        for q, users in formula_ops().items():
            why.setdefault(q, []).append("the gradients of " + ", ".join(map(quote, users)))
    return {q: "; ".join(reasons) for q, reasons in why.items()}


@dataclass(frozen=True)
class Gap:
    """One thing a backend lacks: ``kind`` is ``"spec"``, ``"array"`` or ``"op"``;
    ``required`` says whether a core feature fails without it; ``why`` what needs it."""

    kind: str
    item: str
    required: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "item": self.item, "required": self.required, "why": self.why}


def check_backend(backend: Backend) -> list[Gap]:
    """What ``backend`` lacks of the contract, before any op runs on it: spec fields,
    native array attributes (on a small array made with ``from_host``), kernels of the
    minimum op set (required) and of the other core ops (optional)."""
    gaps = [Gap("spec", f, True, why) for f, why in SPEC_NEEDED if getattr(backend.spec, f) is None]
    gaps += _array_gaps(backend)
    gaps += _op_gaps(backend)
    return gaps


def _array_gaps(backend: Backend) -> list[Gap]:
    status = backend.status()
    if status is not None:
        return [Gap("backend", "availability", True, f"not available ({status}): arrays unchecked")]
    if backend.spec.from_host is None or backend.spec.fake_kernels:
        return []  # nothing to look at: reported as a spec gap / data-less arrays
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    device = Device(backend.name, 0 if backend.multi_device else None)
    try:
        array = backend.from_host(host, device)
    except Exception as e:
        return [Gap("spec", "from_host", True, f"from_host(ndarray, {device}) raised {e!r}")]
    gaps = [Gap("array", a, True, why) for a, why in ARRAY if not hasattr(type(array), a)]
    if not gaps:
        gaps += _array_values(backend, array)
    return gaps


def _array_values(backend: Backend, array: Any) -> list[Gap]:
    why = dict(ARRAY)
    gaps = []
    if tuple(array.shape) != (2, 3):
        gaps.append(Gap("array", "shape", True, f"gave {array.shape!r} for (2, 3): {why['shape']}"))
    if array.ndim != 2:
        gaps.append(Gap("array", "ndim", True, f"gave {array.ndim!r} for 2: {why['ndim']}"))
    try:
        part = array[0:1, 1:3]
        if TABLE.for_type(type(part)) is not backend or tuple(part.shape) != (1, 2):
            gaps.append(
                Gap(
                    "array", "__getitem__", True, f"a[0:1, 1:3] gave {part!r}: {why['__getitem__']}"
                )
            )
    except Exception as e:
        gaps.append(Gap("array", "__getitem__", True, f"a[0:1, 1:3] raised {e!r}"))
    return gaps


def _has_kernel(qualname: str, backend: Backend) -> bool:
    try:
        lookup(qualname).resolve(backend)
    except NoKernelError:
        return False
    return True


def _op_gaps(backend: Backend) -> list[Gap]:
    gaps: list[Gap] = []
    minimum = minimum_ops(autograd=backend.spec.autograd)
    for q, why in minimum.items():
        if not _has_kernel(q, backend):
            gaps.append(Gap("op", q, True, why))
    for core in CORE_OPS:
        q = f"oplib::{core.name}"
        if q not in minimum and not _has_kernel(q, backend):
            gaps.append(Gap("op", q, False, "part of the core op set"))
    return gaps


def markdown() -> str:
    """The contract's tables, as ``docs/writing-a-backend.md`` shows them (a test checks
    the page against this)."""
    lines = ["| native array | what the core uses it for |", "|---|---|"]
    lines += [f"| `{a}` | {why} |" for a, why in ARRAY]
    lines += ["", "| `BackendSpec` field | required | default |", "|---|---|---|"]
    for name, required, default in spec_fields():
        need = "yes" if required else ("one of the two" if name.startswith("array_type") else "")
        lines.append(f"| `{name}` | {need} | {f'`{default}`' if default else ''} |")
    lines += ["", "| field with a default that a core feature needs | what needs it |", "|---|---|"]
    lines += [f"| `{f}` | {why} |" for f, why in SPEC_NEEDED]
    lines += ["", "| core op (minimum set) | needed by |", "|---|---|"]
    minimum = minimum_ops(quote=lambda name: f"`{name}`")
    lines += [f"| `{q}` | {why} |" for q, why in sorted(minimum.items())]
    return "\n".join(lines) + "\n"
