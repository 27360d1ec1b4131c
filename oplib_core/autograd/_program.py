"""A traced pointwise formula as one Python function calling a backend's kernels in a row
(``BackendSpec.direct_kernels``; issue 30 on CPU).

Each op call of a formula costs a dispatch and a Tensor: for tanh's
``mul(g, rsub(mul(out, out), 1))`` on a small array that is most of the node's backward. On
a backend whose kernels need nothing from the dispatcher between two calls (numpy's), the
formula's trace (:func:`oplib_core.autograd._fusion.trace`) becomes one function instead:

- each call is the kernel the dispatcher runs for that op on the backend (a plugin's
  override included), given its arguments as the dispatcher binds them, so the result is
  the formula's bit for bit: the same kernels on the same operands in the same order;
- where that kernel is one numpy ufunc (``kernels.UFUNC``) and an intermediate of the
  call's dtype made by an earlier ufunc dies at the call, the ufunc writes into it
  (``out=``): tanh's formula makes one array, as torch's ``tanh_backward`` does;
- an intermediate is let go after its last use;
- a kernel's result that is no array of the inputs' class (a plugin's kernel giving a
  numpy scalar) makes the program return None: the formula runs, and its dispatch raises
  the ``KernelResultError`` the op-by-op call would.

Writing in place needs every input of one shape, of at least ``IN_PLACE_MIN`` elements
(numpy's ufuncs give scalars for 0-d operands, and write into an operand slowly for one
element); other calls run the program without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels._array_kernels import UFUNC
from ._fusion import FLOATS as _FLOATS
from ._fusion import Graph, NotFusable, Ref

__all__ = ["IN_PLACE_MIN", "direct_kernel", "kernel_program"]

#: The fewest elements a program writes in place for: a numpy ufunc whose output is also
#: an operand costs more than a fresh array for one element (0.85 us against 0.29), the
#: same from 2 to 256 elements, less above (1024: 0.39 against 0.45; 65536: 5.8 against 8.0).
IN_PLACE_MIN = 16


def direct_kernel(backend: Any, op: Any) -> Callable[..., Any]:
    """The kernel ``op`` runs on ``backend`` below autograd, to call without dispatch:
    registered for the backend's own key as a plain function of arrays (a ``default`` or
    composite kernel, or one that takes the dispatch keyset, is not)."""
    fn, key = op.resolve(backend)
    record = op.kernel(key) if key == backend.name else None
    if record is None or record.fn is not fn or record.with_keyset:
        raise NotFusable(f"{op.name()} runs its {key!r} kernel on {backend.name}")
    kernel: Callable[..., Any] = fn
    return kernel


#: A call's arguments as its kernel takes them: positional and keyword, arrays as Refs.
_Bound = tuple[list[Any], dict[str, Any]]


class _Emitter:
    """The source of one program (see :func:`kernel_program`) and the values it names."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.n = len(graph.inputs)
        self.names: dict[str, Any] = {}
        self.dtypes = [*graph.inputs, *(c.dtype for c in graph.calls)]
        # the index of the last call that reads each value (the result is read by return)
        self.last: dict[int, int] = {graph.result.at: len(graph.calls)}
        for k, call in enumerate(graph.calls):
            for a in call.args:
                if type(a) is Ref:
                    self.last[a.at] = k

    def const(self, value: Any) -> str:
        name = f"c{len(self.names)}"
        self.names[name] = value
        return name

    def value(self, a: Any) -> str:
        return f"v{a.at}" if type(a) is Ref else self.const(a)

    def operands(self, bargs: list[Any], reverse: bool) -> list[str]:
        """A ufunc call's operands; a Python scalar beside arrays of one float dtype is made
        that dtype's scalar here, once (what numpy does to a weak scalar on every call)."""
        dtypes = {self.dtypes[a.at] for a in bargs if type(a) is Ref}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        out = []
        for a in bargs:
            if dtype is not None and dtype in _FLOATS and type(a) in (bool, int, float):
                with np.errstate(all="ignore"):
                    scalar = dtype.type(a)
                if np.isfinite(scalar):
                    a = scalar
            out.append(self.value(a))
        if reverse:
            out.reverse()
        return out

    def body(self, bound: list[_Bound], kernels: list[Any], mode: str) -> list[str]:
        """The program's lines: ``"kernels"`` calls every kernel as it is; ``"ufuncs"``
        calls a ufunc kernel's ufunc where the inputs are arrays of one shape with a
        dimension (so it gives an array, as the kernel does); ``"in_place"`` also writes it
        into an intermediate that dies there."""
        n = self.n
        lines: list[str] = []
        # values of the inputs' shape (the others are 0-d: zeros(), or made of it)
        full = set(range(n))
        owned: set[int] = set()  # ufunc results: fresh arrays the program may write into
        calls = zip(self.graph.calls, bound, kernels, strict=True)
        for k, (call, (bargs, bkwargs), fn) in enumerate(calls):
            at = n + k
            refs = [a.at for a in bargs if type(a) is Ref]
            if any(r in full for r in refs):
                full.add(at)
            dying = [r for r in dict.fromkeys(refs) if self.last[r] == k and r >= n]
            ufunc = getattr(fn, UFUNC, None)
            if mode != "kernels" and ufunc is not None and at in full and not bkwargs:
                u, reverse = ufunc
                operands = self.operands(bargs, reverse)
                into = None
                if mode == "in_place":
                    dtype = call.dtype
                    into = next((r for r in dying if r in owned and self.dtypes[r] == dtype), None)
                if into is not None:
                    operands.append(f"out=v{into}")
                    dying.remove(into)
                owned.add(at)
                lines.append(f"v{at} = {self.const(u)}({', '.join(operands)})")
            else:
                operands = [self.value(a) for a in bargs]
                operands += [f"{key}={self.value(v)}" for key, v in bkwargs.items()]
                lines.append(f"v{at} = {self.const(fn)}({', '.join(operands)})")
                # what the dispatcher checks of a kernel's result: an array of the backend
                # (a plugin's kernel may give a scalar); None: the formula runs, and says so
                lines.append(f"if v{at}.__class__ is not v0.__class__:")
                lines.append("    return None")
            if dying:
                lines.append(f"del {', '.join(f'v{r}' for r in dying)}")
        lines.append(f"return v{self.graph.result.at}")
        return lines


def _bind(call: Any, dtypes: list[np.dtype]) -> _Bound:
    """The call's arguments as its kernel gets them (defaults filled in), arrays as Refs."""
    stand_ins: dict[int, Ref] = {}
    args = []
    for a in call.args:
        if type(a) is Ref:
            s = np.empty((), dtypes[a.at])
            stand_ins[id(s)] = a
            args.append(s)
        else:
            args.append(a)
    bound = call.op.bind_call(tuple(args), dict(call.kwargs))

    def back(v: Any) -> Any:
        return stand_ins.get(id(v), v)

    return [back(v) for v in bound.bargs], {k: back(v) for k, v in bound.bkwargs.items()}


def kernel_program(
    graph: Graph, kernel_of: Callable[[Any], Callable[..., Any]], name: str
) -> Callable[..., Any]:
    """``graph`` as a function of its input arrays (``g``, then the saved tensors) returning
    the gradient array, calling ``kernel_of(op)`` for each op (see the module doc); or
    None when a kernel gave something other than an array of ``g``'s class."""
    emitter = _Emitter(graph)
    kernels = [kernel_of(call.op) for call in graph.calls]
    bound = [_bind(call, emitter.dtypes) for call in graph.calls]
    params = ", ".join(f"v{i}" for i in range(emitter.n))
    same = "".join(f" or v{i}.shape != v0.shape" for i in range(1, emitter.n))

    def define(fn: str, mode: str, head: list[str]) -> list[str]:
        body = emitter.body(bound, kernels, mode)
        return [f"def {fn}({params}):", *(f"    {line}" for line in [*head, *body])]

    source = "\n".join(
        [
            *define("kernels", "kernels", []),
            *define("in_place", "in_place", []),
            *define(
                name,
                "ufuncs",
                [
                    f"if not v0.ndim{same}:",
                    f"    return kernels({params})",
                    f"if v0.size >= {IN_PLACE_MIN}:",
                    f"    return in_place({params})",
                ],
            ),
        ]
    )
    namespace = dict(emitter.names)
    exec(compile(source, f"<oplib backward program {name}>", "exec"), namespace)
    program: Callable[..., Any] = namespace[name]
    program.__oplib_source__ = source  # type: ignore[attr-defined]
    return program
