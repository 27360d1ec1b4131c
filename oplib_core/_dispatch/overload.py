"""``OpOverload``: one overload of an operator, and its slow path.

Calling an overload takes the fast path (``FastCall.__call__``) when it can; otherwise
``_call_slow`` hands the call to the innermost active mode, or plans it (``plan_call``:
bind, place, choose the key and the kernel) and runs the plan, filling the fast path's
caches for next time. ``explain()`` reports the same plan without running it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._grad_mode import STATE as GRAD
from .._registry.entry import Kernel, OpEntry, Origin
from .._registry.registry import AUTOGRAD, COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT, REGISTRY
from .._registry.startup import ensure
from .._return_types import acquire as acquire_return_type
from .._return_types import named_result, naming
from .._return_types import release as release_return_type
from .._schema import FunctionSchema
from .._tags import Tag
from .._tensor.pickling import Where, find, where_defined
from .._tensor.tensor import Tensor
from ..backends import TABLE, Backend
from ..errors import BackendError, DeviceMismatchError
from .binding import Binder, BoundCall, Signature, tensor_value
from .doc import document, overload_text
from .failure import kernel_failed
from .fastpath import (
    LOG_DISPATCH,
    SLOW,
    FactoryCall,
    FactoryFastCall,
    FastCall,
    ModeEnter,
    ModeFinish,
    ModeTable,
    OpCache,
    below_autograd,
    below_kernels,
    cache_class,
    factory_call,
    factory_plan,
    fast_route,
    listed_plan,
    mode_table,
)
from .placement import Placement, as_tensors, check_result, checking, place, wrap
from .resolution import (
    DispatchKeySet,
    Step,
    autograd_kernel,
    lookup,
    no_autograd,
    no_kernel,
    resolution_steps,
)
from .stack import ACTIVE, MODES, call_mode

if LOG_DISPATCH:  # logging costs start-up time; only when asked for
    import logging

    _log = logging.getLogger("oplib.dispatch")
    _log.setLevel(logging.DEBUG)
    if not _log.handlers and not logging.getLogger().handlers:
        _log.addHandler(logging.StreamHandler())

__all__ = ["CallRoute", "OpOverload", "Plan"]

#: ``OpOverload.route``'s answer: ``(run, bargs, kernel, key_pos)``.
CallRoute = tuple[Callable[..., Any], list[Any], Callable[..., Any], tuple[int, ...]]


class Plan:
    """How a call dispatches below the modes: ``OpOverload.plan_call``'s answer, what the
    slow path runs and what ``explain()`` reports.

    - ``bargs``/``bkwargs``: the bound arguments (as given, defaults filled in);
    - ``placement``: the native arguments, the arrays and the backend (None when placing
      failed: ``error`` says why);
    - ``backend``: the backend the call runs on;
    - ``keys``: the dispatch keys the arguments give, highest first (``"Autograd"`` when
      an input requires grad and grad mode is on, then the backend's key);
    - ``autograd``: the Autograd step — ``""`` (no input requires grad), ``"grad mode
      off"``, ``"taken"`` (the formula or an implicit composite runs), ``"fallthrough"``,
      ``"no formula"`` or ``"unsupported"`` (the backend records no gradients);
    - ``key``/``kernel``: the key whose kernel runs and that kernel (None on error);
    - ``error``: what the call raises instead (no kernel, no formula, device mismatch...);
    - ``cache_class``: the array class the fast path remembers this call under (None: it
      does not); ``cached``: whether the fast path already serves such a call.
    """

    __slots__ = (
        "_args",
        "_kwargs",
        "_op",
        "autograd",
        "backend",
        "bargs",
        "bkwargs",
        "cache_class",
        "error",
        "kernel",
        "key",
        "keys",
        "placement",
    )

    def __init__(
        self,
        op: OpOverload,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        bargs: list[Any],
        bkwargs: dict[str, Any],
    ) -> None:
        self._op = op
        self._args = args
        self._kwargs = kwargs
        self.bargs = bargs
        self.bkwargs = bkwargs
        self.placement: Placement | None = None
        self.backend: Backend | None = None
        self.keys: tuple[str, ...] = ()
        self.autograd = ""
        self.key: str | None = None
        self.kernel: Callable[..., Any] | None = None
        self.error: Exception | None = None
        self.cache_class: type | None = None

    @property
    def cached(self) -> bool:
        """Whether ``FastCall.__call__`` would serve this call now, without the slow path."""
        op, cls = self._op, self.cache_class
        if self.error is None and op._factory is not None and not ACTIVE[0]:
            return op._opcache.serves_factory(self._args, self._kwargs)
        if cls is None or ACTIVE[0] or self.error is not None:
            return False
        if op._npos < 0:  # perhaps an op with lists of tensors
            return op._opcache.serves_listed(self._args, self._kwargs, self.key == AUTOGRAD)
        cache = op._opcache
        bound = op._sig.bind_fast(self._args, self._kwargs)
        if bound is not None:
            args = bound[0]
        else:  # keyword-only arguments: the cache with their values bound, if any
            route = cache.keyed_route(self._args, self._kwargs)
            if route is None:
                return False
            cache, args = route
        first = type(args[op._key0])
        if any(type(args[i]) is not first for i in op._key_rest):
            return False
        return cache.serves(first, cls, self.key == AUTOGRAD)

    def __repr__(self) -> str:
        backend = self.backend.name if self.backend is not None else None
        return (
            f"<Plan {self._op.name()}: backend={backend} keys={list(self.keys)} "
            f"key={self.key} autograd={self.autograd!r} error={self.error!r}>"
        )


class OpOverload(FastCall):
    """One overload of an operator (``ops.mylib.add.default``, ``ops.mylib.add.out``).

    Read-only: ``schema``, ``tags``, ``origin`` (where it was defined), ``name()``,
    ``namespace``, ``defined``, ``kernel(key)``, ``has_kernel(key)``, ``py_kernel(key)``,
    ``kernels()``, ``resolution_steps(backend)``, ``resolve(backend)``,
    ``autograd_kernel(backend)``, ``bind(args, kwargs)``. ``call_below_autograd(args)``
    and ``plan_call(args, kwargs)`` serve autograd and ``explain()``.

    Calling it returns what the schema says (a Tensor, a native array, a tuple of them,
    a scalar...): ``Any`` to a type checker, as torch's ``OpOverload.__call__``.
    """

    __slots__ = (
        "__weakref__",
        "_binder",
        "_entry",
        "_factory",
        "_overloadname",
        "_schema",
        "_sig",
        "call_below_autograd",
        "overloadpacket",
        "tensor_kernels",
    )

    #: ``call_below_autograd(args)``: the op on ``args`` (positional arguments only, grad
    #: mode already off) through the backend kernel the fast path holds for these Tensors'
    #: arrays, without modes or autograd, the result wrapped in Tensors: what an Autograd
    #: kernel runs instead of calling the op again. ``MISS`` when the call needs the full
    #: path (a mode is active, an argument is not a Tensor, arrays of different classes,
    #: nothing cached yet, or ``OPLIB_DISPATCH_SLOW=1``); then call the op itself.
    call_below_autograd: Callable[[tuple[Any, ...]], Any]
    #: ``tensor_kernels[type(array)]``, for an op whose one Tensor argument comes first and
    #: that returns one plain Tensor (no alias: a view's result needs wrapping): the kernel
    #: the fast path serves its calls on Tensors of that array class that record no
    #: autograd, taking the native array and the other arguments, all positional (defaults
    #: in), its result to be wrapped. Filled as calls are met, cleared with the fast path's
    #: answers; always empty for other ops and with the fast path off. An Autograd kernel
    #: of one Tensor reads it to run the call below itself without a second dispatch (what
    #: ``call_below_autograd`` does, less its checks); no mode may be active then.
    tensor_kernels: Mapping[type, Callable[..., Any]]

    def __init__(self, entry: OpEntry) -> None:
        self._entry = entry
        self._schema = entry.schema
        self._overloadname = entry.schema.overload_name or "default"
        sig = self._sig = Signature(entry.schema, entry.qualname)
        sig.named = acquire_return_type(entry.schema)  # released when the op is destroyed
        self._binder: Binder = sig.binder
        cache = self._opcache = OpCache(entry, sig, self._call_slow)
        entry.cache = cache  # the registry invalidates it
        self.overloadpacket: Any = None
        # The fast path's plan (see FastCall); with the fast path off, no call is fast.
        self._npos = -1 if SLOW else sig.npos
        self._nmin = 0 if SLOW else sig.nmin
        self._tails = sig.tails
        self._key0 = sig.key0
        self._key_rest = sig.key_rest
        self._checks = sig.checks_at
        self._lists = sig.lists_at
        self._multi = sig.multi_at
        self._params = sig.params
        self._by_type = cache.by_type
        self._tensor = cache.tensor if sig.plain_result else None
        self._kwplan = sig.kwplan
        self._keyed = cache.keyed
        self._modes = cache.modes
        self.call_below_autograd = below_autograd(sig, cache)
        self.tensor_kernels = below_kernels(sig, cache)
        self._lplan = listed_plan(sig)
        self._fplan = plan = factory_plan(sig, cache)
        self._factory = None if plan is None else factory_call(plan)
        if plan is not None:
            _as_factory(self)

    # -- read-only accessors ----------------------------------------------------------------
    @property
    def schema(self) -> FunctionSchema:
        """The overload's parsed schema."""
        return self._schema

    @property
    def tags(self) -> tuple[Tag, ...]:
        return self._entry.tags

    @property
    def origin(self) -> Origin:
        """Where the op was defined (``source``, and ``plugin``/``distribution`` if any)."""
        return self._entry.origin

    def name(self) -> str:
        """``"ns::op"`` or ``"ns::op.overload"``."""
        return self._entry.qualname

    @property
    def __name__(self) -> str:
        """``"op.overload"`` (``"add.default"``), as torch's ``OpOverload.__name__``."""
        return f"{self._schema.qualname.partition('::')[2]}.{self._overloadname}"

    @property
    def namespace(self) -> str:
        return self._schema.namespace

    @property
    def defined(self) -> bool:
        """Whether the op is still defined: False once the Library that defined it is
        destroyed (calling it then raises)."""
        return self._entry.alive

    def kernel(self, key: str) -> Kernel | None:
        """The kernel registered for ``key`` that serves it (the last registered; it may
        be a ``fallthrough_kernel``), or None. ``key`` is a dispatch key name (``"CPU"``,
        ``"Autograd"``, ``"Fake"``...), a device type or ``"default"``, normalised as
        registration normalises it; a malformed key raises ``RegistrationError``.
        ``py_impl`` kernels are not registrations: see ``py_kernel``."""
        stack = self._entry.kernels.get(key)  # registered keys are already normalised
        if stack is None:
            stack = self._entry.kernels.get(REGISTRY.normalize_key(key, api="kernel"))
        return stack[-1] if stack else None

    def has_kernel(self, key: str) -> bool:
        """Whether a kernel (a fallthrough included) is registered for ``key``:
        ``kernel(key) is not None``."""
        return self.kernel(key) is not None

    def has_kernel_for_dispatch_key(self, key: str) -> bool:
        """torch's ``OpOverload.has_kernel_for_dispatch_key``: whether a kernel (a
        fallthrough included) or a ``py_impl`` kernel is registered at exactly ``key``.
        An alias key answers for what was registered to it, not for what it expands to
        (``"CompositeExplicitAutograd"`` is False for an op with only a ``cpu`` kernel, and
        ``"CPU"`` False for one with only a ``default`` kernel), as torch's does. torch's
        per-backend autograd keys (``"AutogradCPU"``...) are always False: oplib has one
        ``"Autograd"`` key. A name that is no key raises ``UnknownDispatchKeyError``."""
        if key.startswith(AUTOGRAD) and key != AUTOGRAD:
            return False
        return self.has_kernel(key) or self.py_kernel(key) is not None

    def has_kernel_for_any_dispatch_key(self, keyset: DispatchKeySet | Iterable[str]) -> bool:
        """torch's ``has_kernel_for_any_dispatch_key``: whether ``has_kernel_for_dispatch_key``
        holds for some key of ``keyset`` (a ``DispatchKeySet`` or key names), the composite
        alias keys left out as torch leaves alias keys out."""
        keys = keyset.keys if isinstance(keyset, DispatchKeySet) else keyset
        return any(
            k not in (COMPOSITE_EXPLICIT, COMPOSITE_IMPLICIT)
            and self.has_kernel_for_dispatch_key(k)
            for k in keys
        )

    def py_kernel(self, key: str | type) -> Callable[..., Any] | None:
        """The ``py_impl`` kernel for ``key`` (a key name or device type, normalised, or a
        ``DispatchMode`` subclass), or None."""
        py = self._entry.py_kernels
        if not py:
            return None
        fn = py.get(key)
        if fn is None and isinstance(key, str):
            fn = py.get(REGISTRY.normalize_key(key, api="py_kernel"))
        return fn

    def kernels(self) -> Iterator[tuple[str, Kernel]]:
        """``(key, kernel)`` for every key with a registered kernel."""
        for key, stack in self._entry.kernels.items():
            yield key, stack[-1]

    def resolution_steps(self, backend: Backend) -> Iterator[Step]:
        """The keys tried for ``backend`` in order, as ``(key, kernel or None, why)``; the
        first step with a kernel is the one dispatch takes (torch's ``resolve_key``)."""
        return resolution_steps(self._entry, backend)

    def resolve(self, backend: Backend) -> tuple[Callable[..., Any], str]:
        """The kernel that runs this op on ``backend`` below autograd, and its key: the
        first step of ``resolution_steps(backend)`` with a kernel. Raises
        ``NoKernelError`` when there is none (or the backend fallback's own error)."""
        return self._opcache.backend_kernel(backend)

    def autograd_kernel(self, backend: Backend) -> Callable[..., Any] | None:
        """What the ``Autograd`` key runs on ``backend`` when an input requires grad: the
        gradient formula's kernel (or an implicit composite, whose parts record the
        graph), or None when autograd falls through to the backend kernel. Raises
        ``RuntimeError`` when the op has no formula."""
        return autograd_kernel(self._entry, backend)

    def bind(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """``op(*args, **kwargs)``'s arguments bound to the schema as kernels get them:
        the positional ones as a list (defaults filled in), the keyword-only ones as a
        dict. Raises ``TypeError`` like the call when they do not fit."""
        return self._binder.bind(args, kwargs)

    def __repr__(self) -> str:
        ns, _, op = self._schema.qualname.partition("::")
        return f"<OpOverload(op='{ns}.{op}', overload='{self._overloadname}')>"

    def __str__(self) -> str:
        ns, _, op = self._schema.qualname.partition("::")
        return f"{ns}.{op}.{self._overloadname}"

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference, as numpy's ufuncs: the qualified name (and where the op was
        # defined, for the error in a process that lacks it), never the caches.
        return (_overload_named, (self._entry.qualname, where_defined(self._entry.origin)))

    # -- registration -----------------------------------------------------------------------
    def py_impl(self, key: str | type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: a Python kernel for a dispatch key (``"CPU"``, ``"Autograd"``...) or a
        ``DispatchMode`` subclass (called as ``fn(mode, *args, **kwargs)``), taking
        precedence over the kernels in the table."""
        norm: Any = key
        if not (isinstance(key, type) and hasattr(key, "__oplib_dispatch__")):  # a mode class
            norm = REGISTRY.normalize_key(norm, api="py_impl")  # (another class is refused)

        def inner(fn: Callable[..., Any]) -> Callable[..., Any]:
            REGISTRY.add_py_kernel(self._entry.qualname, norm, fn)
            return fn

        return inner

    # -- the door for modes ------------------------------------------------------------------
    # What modes that run calls themselves (FakeTensorMode, the profiler) ask the op,
    # instead of reading its fields: oplib_core._dispatch exports these names.
    def bind_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundCall:
        """``op(*args, **kwargs)`` bound to the schema (``BoundCall``); raises
        ``TypeError`` like the call when the arguments do not fit. A call of the fast
        path's shape is bound by the check the fast path shares (``Signature.bind_fast``)."""
        sig = self._sig
        if self._npos >= 0:
            bound = sig.bind_fast(args, kwargs)
            if bound is not None:
                bargs = bound[0]
                for i in sig.key_pos:  # binding converts or refuses anything but arrays
                    if tensor_value(bargs[i]) is not bargs[i]:
                        break
                else:
                    return BoundCall(bargs, bound[1], True)
        bargs, bkwargs = self._binder.bind(args, kwargs)
        return BoundCall(bargs, bkwargs, False)

    def unwrap_call(
        self, call: BoundCall, convert: Callable[[str, Any], Any]
    ) -> tuple[list[Any], dict[str, Any], bool]:
        """``(nargs, nkwargs, tensors_in)``: the bound call with every tensor argument's
        array (a Tensor's ``_data``, a native array as given) replaced by ``convert(name,
        array)`` (``name`` as ``"x"`` or ``"xs[1]"``), and whether its results are Tensors
        (a Tensor came in, or no array did and the op is a user's, as placement decides)."""
        nargs = list(call.bargs)
        nkwargs = dict(call.bkwargs) if call.bkwargs else call.bkwargs
        tensors_in = False
        arrays_in = False
        for name, value, container, index in self._sig.tensor_arguments(nargs, nkwargs):
            arrays_in = True
            if type(value) is Tensor:
                tensors_in = True
                value = value._data
            container[index] = convert(name, value)
        if not arrays_in:
            tensors_in = self._sig.wrap_bare
        return nargs, nkwargs, tensors_in

    def wrap_call(
        self,
        call: BoundCall,
        out: Any,
        tensors_in: bool,
        check: Callable[[Any], Any],
    ) -> Any:
        """A kernel's result as the caller gets it: None for ``-> ()``; each tensor result
        through ``check(value)`` (the mode's own check; it returns the array); Tensors
        (views and versions as the slow path's ``wrap``) when ``tensors_in``; the op's
        named tuple where its schema names the returns; a single return the kernel gave as
        a 1-tuple stays one."""
        sig = self._sig
        plan = sig.returns
        if not plan:
            return None
        if len(plan) == 1 and plan[0][0] != "list" and type(out) is tuple and len(out) == 1:
            return (self.wrap_call(call, out[0], tensors_in, check),)
        if len(plan) == 1:
            out = _checked(plan[0][0], out, check)
        else:
            out = tuple([_checked(p[0], o, check) for p, o in zip(plan, out, strict=True)])
        if tensors_in:
            return wrap(sig, out, call.bargs, call.bkwargs)
        return out if sig.named is None else tuple.__new__(sig.named, out)

    def named_result(self, out: Any) -> Any:
        """A decomposition's result as the op returns it: its named tuple where the schema
        names the returns."""
        named = self._sig.named
        return out if named is None else named_result(named, out)

    def mode_table(
        self,
        cls: type,
        kernel: Callable[..., Any],
        finish: ModeFinish,
        enter: ModeEnter | None = None,
        recording: Sequence[int] | None = None,
    ) -> ModeTable | None:
        """``fastpath.mode_table`` for this op: what serves its fast calls on ``cls`` arrays
        (or Tensors of them) under a mode that runs ``kernel`` itself (bare, or through
        ``enter(kernel)`` while ``recording[0]`` is nonzero; results it must look at through
        ``finish``); None when no call of this op qualifies (or the fast path is off)."""
        return mode_table(self._sig, cls, kernel, finish, self._call_slow, enter, recording)

    def serve_mode(self, mode_type: type, table: ModeTable) -> None:
        """Under a mode of exactly ``mode_type`` taking this thread's calls (``MODES.key``),
        this op's fast calls (and those of the packets and custom ops that share its fast
        path) are served from ``table`` (``mode_table``'s), the mode still active; a call
        the table has no entry for goes to the mode's ``__oplib_dispatch__``. Until a
        registration changes the op (and never with the fast path off)."""
        self._opcache.remember_mode(mode_type, table)

    def route(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallRoute | None:
        """What the fast path would do with ``op(*args, **kwargs)`` were no mode active:
        ``(run, bargs, kernel, key_pos)`` — ``run(*bargs)`` runs it as the fast path
        would, ``kernel`` is the cached kernel that serves it (a new object whenever the
        answer may have changed), ``key_pos`` where its tensor arguments sit in
        ``bargs`` — or None when the call takes the slow path (``plan_call`` and
        ``run_plan`` it)."""
        return fast_route(self._sig, self._opcache, args, kwargs)

    def tensor_kernel(self, cls: type) -> Callable[..., Any] | None:
        """The backend kernel the fast path holds for calls on Tensors of ``cls`` arrays
        that record no gradient, or None (no such call yet, or the fast path is off)."""
        return self._opcache.tensor.get(cls)

    def kernel_failed(self, exc: Exception, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """After kernel ``fn`` (``tensor_kernel``'s or ``tensor_kernels``') raised ``exc`` on
        the native ``args``, inside the ``except`` block before a bare ``raise``: what the
        fast path does then (the dtype's error, or a note naming the kernel that raised)."""
        kernel_failed(exc, self._entry, fn, args)

    # -- planning -----------------------------------------------------------------------------
    def plan_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Plan:
        """How ``op(*args, **kwargs)`` dispatches below the modes, without running a kernel.

        Raises ``TypeError`` like the call when the arguments do not fit the schema; every
        later failure (a device mismatch, no kernel, no formula) is the plan's ``error``."""
        bargs, bkwargs = self._binder.bind(args, kwargs)
        plan = Plan(self, args, kwargs, bargs, bkwargs)
        entry = self._entry
        try:
            call = place(self._sig, entry.qualname, bargs, bkwargs)
        except (TypeError, DeviceMismatchError, BackendError) as e:
            plan.error = e
            return plan
        plan.placement = call
        backend = plan.backend = call.backend
        if call.tensors_in and call.requires_grad:
            if not GRAD.enabled:
                plan.autograd = "grad mode off"
            elif not backend.spec.autograd:
                plan.autograd = "unsupported"
                plan.keys = (AUTOGRAD, backend.key)
                plan.error = no_autograd(entry, backend)
                return plan
            else:
                plan.keys = (AUTOGRAD, backend.key)
                plan.cache_class = cache_class(call)
                try:
                    fn = autograd_kernel(entry, backend)
                except RuntimeError as e:
                    plan.autograd = "no formula"
                    plan.error = e
                    return plan
                if fn is not None:
                    plan.autograd = "taken"
                    plan.key, plan.kernel = AUTOGRAD, fn
                    return plan
                plan.autograd = "fallthrough"
        if not plan.keys:
            plan.keys = (backend.key,)
        try:
            plan.kernel, plan.key = self._opcache.backend_kernel(backend)
        except RuntimeError as e:  # NoKernelError, or a backend fallback's own error
            plan.error = e
            return plan
        if plan.key != COMPOSITE_IMPLICIT:
            plan.cache_class = cache_class(call)
        return plan

    # -- the slow path ------------------------------------------------------------------------
    def _call_slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        entry = self._entry
        if not entry.alive:
            raise RuntimeError(
                f"operator {entry.qualname} no longer exists: the Library that defined it was "
                "destroyed"
            )
        if ACTIVE[0] and MODES.stack:  # (what a mode asked the op to serve: __call__)
            return call_mode(self, args, kwargs)
        return self.run_plan(self.plan_call(args, kwargs))

    def run_plan(self, plan: Plan) -> Any:
        """Run ``plan_call``'s plan as the slow path does: the kernel on the arguments it
        takes, the result wrapped (raising the plan's ``error`` instead, if any); a call of
        the fast path's shape (positional arguments only) fills the fast path's caches."""
        if plan.error is not None:
            raise plan.error
        fn, key, call = plan.kernel, plan.key, plan.placement
        assert fn is not None and key is not None and call is not None
        if LOG_DISPATCH:
            _log.debug(
                "%s: backend %s (%s), kernel for key %s",
                self._entry.qualname,
                call.backend.name,
                "Tensors" if call.tensors_in else "native arrays",
                key,
            )
        cls = plan.cache_class
        if key == AUTOGRAD:  # the formula gets the Tensors
            cache = None if cls is None else self._remembered_in(plan, call)
            if cls is not None and cache is not None:
                cache.remember_autograd(cls, call.backend)
            if call.mixed:  # native arrays beside Tensors: constants, as Tensors
                bargs, bkwargs = as_tensors(self._sig, plan.bargs, plan.bkwargs)
                return fn(*bargs, **bkwargs)
            return fn(*plan.bargs, **plan.bkwargs)
        if key == COMPOSITE_IMPLICIT:  # a decomposition into ops: it gets the Tensors
            try:
                out = fn(*plan.bargs, **plan.bkwargs)
            except Exception as e:
                kernel_failed(e, self._entry, fn, plan.bargs, plan.bkwargs, call.backend)
                raise
            return out if self._sig.named is None else named_result(self._sig.named, out)
        try:
            out = fn(*call.nargs, **call.nkwargs)
        except Exception as e:
            kernel_failed(e, self._entry, fn, call.nargs, call.nkwargs, call.backend)
            raise
        out, clean = check_result(self._sig, self._entry, key, fn, call.backend, out)
        # (asked once the kernel ran: a call that raised leaves no keyed cache behind)
        cache = None if cls is None else self._remembered_in(plan, call)
        if cls is not None and cache is not None:
            # a kernel whose result needed converting is served checked, as here
            serve = fn if clean else checking(self._sig, self._entry, key, fn, call.backend)
            if self._sig.named is not None and not call.tensors_in:
                # (Tensor calls are named by wrap())
                serve = naming(serve, self._sig.named, bool(self._sig.kwdefaults))
            cache.remember(cls, call.tensors_in, call.backend, fn, serve)
        elif (
            self._factory is not None
            and clean
            and not call.found
            and self._sig.named is None
            and (not call.tensors_in or self._sig.single_plain_return)
        ):
            # no arrays: a factory is remembered by its device argument, keywords and all
            slot = self._sig.device_arg
            assert slot is not None
            given, bound = plan._kwargs.get(slot.name), plan.bkwargs[slot.name]
            serve = _wrapping(fn) if call.tensors_in else fn  # (a user's factory: a Tensor)
            self._opcache.remember_factory(given, bound, call.backend, fn, serve)
        if call.tensors_in:
            return wrap(self._sig, out, plan.bargs, plan.bkwargs)
        return out if self._sig.named is None else tuple.__new__(self._sig.named, out)

    def _remembered_in(self, plan: Plan, call: Placement) -> OpCache | None:
        """The cache the slow path's answer to ``plan`` is remembered in, None: not
        remembered. A call of positional arguments, the op's; with keyword-only ones, the
        cache of their values (``keyed_for``); an op with lists of tensors, its own
        unless its arrays' backend has several devices (its cached call does not compare
        the devices of a list's tensors, placement does)."""
        args, kwargs, sig = plan._args, plan._kwargs, self._sig
        if sig.tensor_lists:
            if call.backend.multi_device and call.backend.device_count() > 1:
                return None
            placed = sig.positional(args, kwargs, sig.listed_nmin, sig.arity)
            return None if placed is None else self._opcache
        if kwargs:  # keyword-only arguments: remembered with their values bound
            return self._opcache.keyed_for(args, kwargs, plan.bkwargs)
        return self._opcache if self._nmin <= len(args) <= self._npos else None

    def redispatch(self, keyset: DispatchKeySet, /, *args: Any, **kwargs: Any) -> Any:
        """Call the kernel of ``keyset``'s highest-priority key directly (no modes, no
        autograd above it)."""
        entry = self._entry
        key = REGISTRY.normalize_key(keyset.highest_priority(), api="redispatch")
        bargs, bkwargs = self._binder.bind(args, kwargs)
        if key == AUTOGRAD:
            backend = TABLE.get(keyset.remove(AUTOGRAD).highest_priority())
            fn = autograd_kernel(entry, backend)
            if fn is not None:
                return fn(*bargs, **bkwargs)
            key = backend.name
        fn = lookup(entry, key, keyset.remove(key).keys)
        if fn is None:
            raise no_kernel(entry, TABLE.get(key))
        if key == COMPOSITE_IMPLICIT:
            out = fn(*bargs, **bkwargs)
            return out if self._sig.named is None else named_result(self._sig.named, out)
        call = place(self._sig, entry.qualname, bargs, bkwargs)  # kernels see native arrays
        try:
            out = fn(*call.nargs, **call.nkwargs)
        except Exception as e:
            kernel_failed(e, entry, fn, call.nargs, call.nkwargs, call.backend)
            raise
        out = check_result(self._sig, entry, key, fn, call.backend, out)[0]
        if call.tensors_in:
            return wrap(self._sig, out, bargs, bkwargs)
        return out if self._sig.named is None else tuple.__new__(self._sig.named, out)


class _FactoryOverload(FactoryFastCall, OpOverload):
    """An overload of a factory: its calls go through ``FactoryFastCall``."""

    __slots__ = ()
    _factory: FactoryCall  # (set whenever an overload is of this class)


# help(overload): its schema, origin and docstring (a descriptor: not on the call path)
document(OpOverload, overload_text)
document(_FactoryOverload, overload_text, public=OpOverload)


def _wrapping(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` giving its one array as a Tensor: a user's factory served from the cache
    returns what its slow path returns (``Signature.wrap_bare``)."""

    def serve(*args: Any, **kwargs: Any) -> Any:
        return Tensor._wrap(fn(*args, **kwargs))

    serve.__wrapped__ = fn  # type: ignore[attr-defined]  # failures name fn, not this
    entry: Callable[..., Any] | None = getattr(fn, "factory_entry", None)
    if entry is not None:  # (see fastpath.factory_call)

        def serve_entry(size: tuple[int, ...], dtype: Any) -> Any:
            return Tensor._wrap(entry(size, dtype))

        serve.factory_entry = serve_entry  # type: ignore[attr-defined]
    return serve


def _checked(kind: str, value: Any, check: Callable[[Any], Any]) -> Any:
    if kind == "tensor":
        return check(value)
    if kind == "list":
        return [check(v) for v in value]
    return value


def _as_factory(op: OpOverload) -> None:
    op.__class__ = _FactoryOverload


def _overload_named(qualname: str, where: Where) -> OpOverload:
    """Unpickling an ``OpOverload``: this process's overload ``qualname``."""

    def get() -> OpOverload | None:
        ensure()
        entry = REGISTRY.ops.get(qualname)
        return None if entry is None else entry.overload

    return find("operator", qualname, where, get)


def _install(event: str, entry: OpEntry) -> None:
    if event == "defined" and entry.overload is None:
        entry.overload = OpOverload(entry)
    elif event == "undefined" and entry.overload is not None:
        named = entry.overload._sig.named
        if named is not None:
            release_return_type(named)


REGISTRY.add_listener(_install)
