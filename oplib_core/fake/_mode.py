"""``FakeTensorMode``: run programs on fake tensors, computing shapes, dtypes and devices
without data.

Under the mode every operator call runs the op's fake kernel (or, without one, its
``Meta`` kernel, as torch does, or else its CompositeImplicitAutograd decomposition, whose
parts run fake in turn) on data-less arrays. An op that mutates an argument and returns
nothing needs none of them: it returns None and touches nothing (torch's trivial fake).
Fake tensors keep a real device type (a fake ``cpu`` tensor, a fake ``cuda`` tensor even
without a GPU); factories called under the mode make fake arrays on the requested device.
Real inputs are refused (``from_real`` converts them), so a program cannot silently mix
real and fake data.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

from .._dispatch import (
    MODES,
    BoundCall,
    DispatchKeySet,
    DispatchMode,
    OpOverload,
    has_trivial_fake,
)
from .._native._classes import CLASSES
from .._registry.entry import fallthrough_kernel
from .._registry.registry import COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, FAKE
from .._tensor.tensor import Tensor
from ..backends import TABLE
from ..errors import NoKernelError
from ._arrays import FakeArray, intern_device
from ._classes import class_slots, to_fake_obj
from ._context import RECORDING, SERVED, STATE, FakeKernelContext
from ._errors import FakeTensorError
from ._symbolic import DEFAULT_ENV, ShapeEnv

__all__ = ["FakeTensorMode"]

META = "meta"

# (the kernel's context, whether it is a core kernel that calls no ops, whether it is the
# op's Meta kernel, whose meta outputs become fake arrays on the inputs' device)
Plan = tuple[FakeKernelContext, bool, bool]


class FakeTensorMode(DispatchMode):
    """A dispatch mode under which operators run their fake kernels.

    ``with FakeTensorMode() as mode: y = op(mode.from_real(x))``. ``allow_non_fake_inputs``
    converts real inputs instead of refusing them. ``shape_env`` makes the data-dependent
    size symbols (``u0``, ``u1``...) of this mode.
    """

    def __init__(
        self, *, allow_non_fake_inputs: bool = False, shape_env: ShapeEnv | None = None
    ) -> None:
        self.allow_non_fake_inputs = allow_non_fake_inputs
        self.shape_env = shape_env if shape_env is not None else ShapeEnv()
        self._memo: dict[int, tuple[Any, Tensor]] = {}
        # fake (or Meta) kernel -> its Plan
        self._contexts: dict[Any, Plan] = {}
        # op -> the check of its tensor results (a data-less array or None)
        self._checks: dict[OpOverload, Any] = {}

    def __repr__(self) -> str:
        return f"FakeTensorMode(allow_non_fake_inputs={self.allow_non_fake_inputs})"

    # -- real → fake ----------------------------------------------------------------------
    def from_real(self, x: Any) -> Tensor:
        """A fake Tensor with the shape, dtype, device and ``requires_grad`` of ``x`` (a
        Tensor or a native array of an installed backend); the same fake for the same
        ``x``. Fake and meta inputs are returned as Tensors unchanged."""
        memo = self._memo.get(id(x))
        if memo is not None and memo[0] is x:
            return memo[1]
        data = x._data if isinstance(x, Tensor) else x
        if isinstance(data, FakeArray):
            return x if isinstance(x, Tensor) else Tensor._wrap(data)
        fake = self._fake_of(data, "from_real()")
        t = Tensor._wrap(fake)
        if isinstance(x, Tensor) and x.requires_grad:
            t.requires_grad_(True)
        self._memo[id(x)] = (x, t)
        return t

    @staticmethod
    def _fake_of(data: Any, api: str) -> FakeArray:
        backend = TABLE.for_type(type(data))
        if backend is None:
            if isinstance(data, np.generic):
                device = intern_device(TABLE.get("cpu").device_of(data))
                return FakeArray._make((), np.dtype(data.dtype), device)
            raise TypeError(
                f"FakeTensorMode.{api}: expected an oplib.Tensor or a native array of an "
                f"installed backend ({TABLE.names_text()}), got {type(data).__name__}"
            )
        shape = tuple(int(s) for s in data.shape)
        dtype = backend.dtype_of(data)
        return FakeArray._make(shape, dtype, intern_device(backend.device_of(data)))

    # -- dispatch -------------------------------------------------------------------------
    # The dispatcher does the binding, unwrapping and wrapping (its door: bind_call,
    # unwrap_call, wrap_call); the mode chooses the kernel, fakes or refuses real inputs
    # and checks the outputs. Calls of the fast path's shape on fake arrays are then served
    # from the op (serve_mode), without coming back here.
    def __oplib_dispatch__(
        self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        fn = _fake_kernel(op)
        if fn is None:
            return self._decompose(op, args, kwargs)
        plan = self._contexts.get(fn)
        if plan is None:
            plan = self._plan(op, fn)
        call = op.bind_call(args, kwargs)
        nargs, nkwargs, tensors_in = self._unwrap(op, call)
        out = self._run_kernel(fn, plan, nargs, nkwargs)
        if plan[2]:
            out = _from_meta(out, nargs, nkwargs)
        check = self._checks.get(op)
        if check is None:
            check = self._checks[op] = functools.partial(_check_one, op, "tensor")
        result = op.wrap_call(call, out, tensors_in, check)
        if call.fast and not plan[2] and type(self).__oplib_dispatch__ is _OWN_DISPATCH:
            _serve(op, fn, plan[1])
        return result

    def _decompose(self, op: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """No fake kernel: run the CompositeImplicitAutograd decomposition under the mode."""
        call = op.bind_call(args, kwargs)
        self._unwrap(op, call)  # argument errors come first
        decomp = op.kernel(COMPOSITE_IMPLICIT)
        if decomp is None or decomp.is_fallthrough:
            if has_trivial_fake(op.name(), op.schema):
                return None  # mutates, returns nothing: no metadata to compute (as torch)
            raise self._no_fake(op)
        with self:
            out = decomp.fn(*call.bargs, **call.bkwargs)
        return op.named_result(out)

    def _plan(self, op: OpOverload, fn: Any) -> Plan:
        """The fake (or Meta) kernel's context, whether it is a core kernel that calls no
        ops, and whether it is the op's Meta kernel."""
        k = op.kernel(FAKE)
        is_meta = False
        if k is None or k.fn is not fn:
            mk = op.kernel(META)
            is_meta = fn is _meta_kernel(op)
            k = mk if is_meta else None
        source = k.origin.source if k is not None else None
        ctx = FakeKernelContext(op.name(), self.shape_env, source)
        plan = self._contexts[fn] = (ctx, getattr(fn, "_oplib_leaf_fake", False), is_meta)
        return plan

    def _run_kernel(
        self,
        fn: Any,
        plan: Plan,
        nargs: list[Any],
        nkwargs: dict[str, Any],
    ) -> Any:
        if plan[1]:
            # core fake kernels call no ops and need no context: skip the bookkeeping
            return fn(*nargs, **nkwargs)
        state = STATE
        outer = state.ctx
        state.ctx = plan[0]
        self.__enter__()  # ops the fake kernel calls (empty_like...) run fake too
        try:
            return fn(*nargs, **nkwargs)
        finally:
            self.__exit__()
            state.ctx = outer

    def _unwrap(self, op: OpOverload, call: BoundCall) -> tuple[list[Any], dict[str, Any], bool]:
        """The bound call with native fake arrays in place of Tensors; refuses real arrays
        (0-d cpu arrays, Python scalars' stand-ins, are faked)."""
        real: list[str] = []
        fake_seen: list[bool] = []

        def convert(name: str, value: Any) -> Any:
            if isinstance(value, FakeArray):
                fake_seen.append(True)
                return value
            return self._fake_input(value, name, real)

        nargs, nkwargs, tensors_in = op.unwrap_call(call, convert)
        if real:
            raise self._mixed(op, real, bool(fake_seen))
        if CLASSES:  # opaque objects: their fakes
            for kw, index, cls in class_slots(op):
                holder: Any = nkwargs if kw else nargs
                if kw and index not in holder:
                    continue
                holder[index] = to_fake_obj(holder[index], cls, self._fake_leaf)
        return nargs, nkwargs, tensors_in

    def _fake_leaf(self, value: Any) -> Any:
        """An array inside an opaque object's flattened state, made fake (a native fake
        array: what fake kernels see)."""
        return self.from_real(value)._data

    def _fake_input(self, value: Any, name: str, real: list[str]) -> Any:
        backend = TABLE.for_type(type(value))
        if backend is None:  # binding let it through: a Tensor subclass's own mode's job
            raise TypeError(
                f"FakeTensorMode: argument {name!r} is a {type(value).__name__}, which "
                "the mode cannot make fake; expected an oplib.Tensor or a native array"
            )
        if (backend.name == "cpu" and not value.shape) or self.allow_non_fake_inputs:
            return self._fake_of(value, "dispatch")
        real.append(f"{name!r} (a real {backend.name} {type(value).__name__})")
        return value

    # -- errors ---------------------------------------------------------------------------
    @staticmethod
    def _mixed(op: OpOverload, real: list[str], fake_seen: bool) -> FakeTensorError:
        qualname = op.name()
        what = ", ".join(real)
        mixing = (
            "real and fake tensors cannot be mixed in one call"
            if fake_seen
            else "under the mode, operators take fake tensors"
        )
        return FakeTensorError(
            f"{qualname}: under FakeTensorMode got real input {what}; {mixing}. Convert real "
            "inputs with mode.from_real(x) first (or create them under the mode), or use "
            "FakeTensorMode(allow_non_fake_inputs=True) to convert them automatically.",
            op=qualname,
        )

    @staticmethod
    def _no_fake(op: OpOverload) -> NoKernelError:
        qualname = op.name()
        default = op.kernel(COMPOSITE_EXPLICIT)
        meta = (
            "its 'default' kernel serves the meta device, but FakeTensorMode runs only fake "
            "kernels, Meta kernels and CompositeImplicitAutograd decompositions"
            if default is not None and not default.is_fallthrough
            else "nor on the meta device"
        )
        return NoKernelError(
            f"{qualname}: has no fake kernel and no Meta kernel, so it cannot run under "
            f"FakeTensorMode ({meta}). Register a fake kernel that computes the outputs' "
            "shape, dtype and device without reading data:\n"
            f"    @oplib.register_fake({qualname!r})\n"
            "    def _(x, ...):\n        return oplib.empty_like(x)\n"
            f"or register that function as its Meta kernel (oplib.impl({qualname!r}, "
            "'meta', fn)), or give the op a CompositeImplicitAutograd decomposition into "
            "ops that have fake kernels.",
            op=qualname,
            key=FAKE,
        )


def _check_one(op: OpOverload, kind: str, value: Any) -> Any:
    if kind == "tensor":
        if type(value) is Tensor:
            value = value._data
        if value is None or isinstance(value, FakeArray):
            return value
        return _bad_output(op, value)
    if kind == "list":
        return [_check_one(op, "tensor", v) for v in value]
    return value


def _bad_output(op: OpOverload, value: Any) -> Any:
    qualname = op.name()
    raise FakeTensorError(
        f"{qualname}: its fake kernel returned a {type(value).__name__} under "
        "FakeTensorMode, expected a data-less array. Create outputs with "
        "oplib.empty_like(x), x.new_empty(shape) or oplib.empty(shape, dtype=..., "
        "device=x.device) so they have no data.",
        op=qualname,
    )


def _meta_kernel(op: OpOverload) -> Any:
    """The op's own ``Meta`` kernel (``impl(op, "meta", fn)``, ``Library(ns, "IMPL",
    "Meta")``), which serves FakeTensorMode when the op has no fake kernel, as in torch."""
    py = op.py_kernel(META)
    if py is not None:
        return py
    k = op.kernel(META)
    if k is None or k.is_fallthrough:
        return None
    if k.with_keyset:  # one wrapper per kernel, so the mode's per-kernel plan is reused
        fn = k.fn
        wrapped = _keyset_wrappers.get(fn)
        if wrapped is None:
            keyset = DispatchKeySet((META,))

            def call(*a: Any, **kw: Any) -> Any:
                return fn(keyset, *a, **kw)

            wrapped = _keyset_wrappers[fn] = call
        return wrapped
    return k.fn


_keyset_wrappers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _from_meta(out: Any, nargs: list[Any], nkwargs: dict[str, Any]) -> Any:
    """A Meta kernel's results with meta arrays moved to the inputs' device (torch runs
    Meta kernels on meta tensors and gives back fake tensors on the inputs' device)."""
    if isinstance(out, FakeArray) and out.device.type != META:
        return out  # the common case: made from an input (x.new_empty(...))
    device = None
    for v in (*nargs, *nkwargs.values()):
        for a in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(a, FakeArray) and (a.shape or a.device.type != "cpu"):
                device = a.device
                break
        if device is not None:
            break
    if device is None or device.type == META:
        return out

    def move(o: Any) -> Any:
        if isinstance(o, FakeArray) and o.device.type == META:
            return FakeArray._make(o.shape, o.dtype, device)
        if type(o) is Tensor and isinstance(o._data, FakeArray) and o._data.device.type == META:
            return FakeArray._make(o._data.shape, o._data.dtype, device)
        if isinstance(o, (list, tuple)):
            return type(o)(move(e) for e in o)
        return o

    return move(out)


def _one_tuple(out: Any) -> bool:
    return type(out) is tuple and len(out) == 1


def _fake_kernel(op: OpOverload) -> Any:
    """What the mode runs for ``op``: its fake kernel (a ``py_impl`` one first), else its
    Meta kernel, else None (then its decomposition)."""
    fn = op.py_kernel(FAKE)
    if fn is not None:
        return fn
    k = op.kernel(FAKE)
    if k is not None and k.fn is not fallthrough_kernel:
        return k.fn
    return _meta_kernel(op)


# op -> (the fake kernel, the table that serves the op's calls under the mode; None: no
# call can be served): built once per kernel, handed to the op again whenever a
# registration made it forget
_served: weakref.WeakKeyDictionary[OpOverload, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _serve(op: OpOverload, fn: Any, leaf: bool) -> None:
    """After a call of the fast path's shape ran ``fn`` under the mode: let the op serve
    such calls on fake arrays itself (``op.serve_mode``), unless ``py_impl(FakeTensorMode)``
    gives it a handler of its own."""
    if op.py_kernel(FakeTensorMode) is not None:
        return
    known = _served.get(op)
    if known is None or known[0] is not fn:
        known = _served[op] = (fn, _table(op, fn, leaf))
    if known[1] is not None:
        op.serve_mode(FakeTensorMode, known[1])


def _table(op: OpOverload, fn: Any, leaf: bool) -> Any:
    """What serves ``op``'s fast calls on fake arrays under the mode: the op's table
    (``op.mode_table``) running ``fn``; a core kernel that calls no ops runs bare, as on
    the meta device, any other in its context (``get_ctx()``), its result checked."""
    check = functools.partial(_check_one, op, "tensor")

    def finish(out: Any, tensors_in: bool, call: BoundCall | None) -> Any:
        if call is not None:  # returns other than one plain Tensor: as the mode's own path
            return op.wrap_call(call, out, tensors_in, check)
        if _one_tuple(out):  # "-> (Tensor)": a 1-tuple, as the kernel returned it
            return (finish(out[0], tensors_in, None),)
        out = check(out)
        return Tensor._wrap(out) if tensors_in and out is not None else out

    if leaf:
        return op.mode_table(FakeArray, fn, finish)

    def enter(kernel: Any) -> Any:
        # what runs the kernel while a context is recorded somewhere (RECORDING): this
        # kernel's, recorded too, so that the innermost is found first; else the kernel
        # runs bare and get_ctx() finds its context from the table's frame (SERVED)
        def run(*nargs: Any) -> Any:
            mode = MODES.stack[-1]  # the mode that served the call: the innermost
            assert isinstance(mode, FakeTensorMode)
            plan = mode._contexts.get(fn)
            if plan is None:
                plan = mode._plan(op, fn)
            state = STATE
            outer = state.ctx
            state.ctx = plan[0]
            try:
                return kernel(*nargs)
            finally:
                state.ctx = outer

        run._oplib_served = (op, fn)  # type: ignore[attr-defined]  # for _served_context
        return run

    table = op.mode_table(FakeArray, fn, finish, enter, RECORDING)
    if table is not None:
        for entry in table.values():
            SERVED.setdefault(entry.__code__, _served_context)
    return table


def _served_context(frame: Any) -> FakeKernelContext | None:
    """The context of the kernel a frame of an op's table runs (``_table``; None for a
    core kernel that calls no ops): its op's, with the shape environment of this thread's
    innermost FakeTensorMode (the one the table serves)."""
    served = getattr(frame.f_locals.get("run"), "_oplib_served", None)
    if served is None:
        return None
    op, fn = served
    for mode in reversed(MODES.stack):
        if isinstance(mode, FakeTensorMode):
            plan = mode._contexts.get(fn)
            return (plan if plan is not None else mode._plan(op, fn))[0]
    return FakeKernelContext(op.name(), DEFAULT_ENV)


_OWN_DISPATCH = FakeTensorMode.__oplib_dispatch__
